/* device/cuda/cuda-attn — the fused attention library call (GR_LIB_ATTENTION, kir.h).
 *
 * FlashAttention-2 style: a block owns 64 query rows of one (batch, head), streams K and
 * V through shared memory in tiles of 64 keys and keeps a running max and sum per row
 * (online softmax), so the [seq_q, seq_k] scores never reach device memory. Two kernels,
 * compiled once per device with NVRTC from the source below (gr_cuda_attention_source):
 *
 *  - attn_mma_<t>_d<D> (t = bf16, f16; D = 64, 128, head_dim == head_dim_v): tensor cores
 *    through inline PTX mma.sync.m16n8k16 with f32 accumulation. 4 warps, 16 query rows
 *    each. Q, K and V reach shared memory with cp.async (K and V double buffered: the next
 *    tile loads while this one computes); the operands come out with ldmatrix (.trans for
 *    V); S = Q K^T stays in registers and its accumulator fragment is repacked in place as
 *    the A operand of P V, so P never touches shared memory. P is rounded to t before P V,
 *    as FlashAttention does. A mask is classified once per call, before the kernel, by
 *    attn_mask_cls_<m> (one pass over the mask into a table of 64 x 64 tiles in the
 *    context's device memory, mask_table): tiles with no live key (every value -inf or
 *    <= -1e30, like the exporters' finfo.min) are skipped, tiles of zeros read no mask;
 *    exact, see the kernel source. H100, bf16 b8 h12 s512 d64: 38 us unmasked, 32 us
 *    causal, 66 us with a GPT-2 export's f32 causal mask when every block scanned its own
 *    rows of the mask (gpucheck, before the table).
 *  - attn_simt_f32_d<D> (D = 64, 128, head_dim == head_dim_v): the same tiling, table and
 *    online softmax for f32 on CUDA cores with exact f32 FMA (f32 inputs are not rounded to
 *    tf32, as PyTorch's f32 attention does not): 256 threads, each 4 query rows x 4 keys of
 *    S and 4 rows x 4 (8) head dims of O, operands as float4 from shared memory.
 *  - attn_gen_<t> (t = f32, bf16, f16; any head_dim, head_dim_v <= 256): one warp per query
 *    row, 32 keys per tile, exact f32 FMA and expf. The other head sizes, and operands
 *    the tiled kernels cannot take (misaligned).
 *
 * Q, K, V and O are addressed through the call's strides (kir.h: batch, head and sequence
 * strides in elements, head_dim contiguous; the pointers arrive already offset), so the
 * attention reads a fused projection's output and writes [B,S,H,D] in place. The
 * tensor-core kernels are taken only when every pointer is 16-byte aligned and every stride
 * a multiple of 8 elements; anything else runs on attn_gen.
 *
 * Both apply scale, the mask (f32 or the inputs' type, broadcast strides) and the causal
 * rule of kir.h, and give 0 for a row that sees no key.
 *
 *  - attn_dec_<t> (t = f32, bf16, f16; any head dim up to 256): seq_q <= 8, a decode step
 *    against a KV cache. The keys of each (batch, head) are split over blocks (enough to fill
 *    the device twice, at least 16 keys each), every block folds its keys with an online
 *    softmax (4 keys per warp at a time) and the last block of a row merges the splits'
 *    partials. With a key length in device memory (kir.h key_len_arg) the splits cover only
 *    the valid keys, so a step reads the filled part of the cache, not its maximum length.
 *
 * Every kernel applies the key length where the call has one (key_end).
 */
#include "device/cuda/cuda-impl.h"
#include <stdio.h>
#include <string.h>

/* ==== kernel source ============================================================================ */

static const char attn_src[] =
    "typedef unsigned short u16;\n"
    "typedef unsigned int u32;\n"
    "struct AttnArgs {\n"
    "  const void *q, *k, *v, *mask; void *o;\n"
    "  long long B, H, Hkv, Sq, Sk, D, Dv;\n"
    "  long long ms0, ms1, ms2, ms3;\n"
    "  float scale; int causal; int mask_kind; /* 0 none, 1 f32, 2 the inputs' type */\n"
    "  long long qb, qh, qs, kb, kh, ks, vb, vh, vs, ob, oh, os; /* strides (elements): batch, head, seq */\n"
    "  /* the mask's tile table (mask_cls), NULL: none. trows[t]: bit r set when row r of the\n"
    "   * tile has a live key in it; tcls[t]: 1 a live key, 2 a nonzero value. Tile t of mask\n"
    "   * plane p, query tile qt, key tile kt: (p * tnq + qt) * tnk + kt, p = b * tbs + h * ths */\n"
    "  unsigned long long *trows; unsigned char *tcls;\n"
    "  long long tnq, tnk, tbs, ths;\n"
    "  /* shape policy generic: the call's lengths and strides (kir.h GR_ATTN_LENS order), read at\n"
    "   * run time from the plan's device table; NULL: the fields above are the call's */\n"
    "  const long long *lens;\n"
    "  /* the key length in device memory (kir.h key_len_arg), NULL: none; Lk: the keys below it\n"
    "   * (clamped to Sk), set by use_lens at the start of every kernel */\n"
    "  const long long *klen; long long Lk;\n"
    "  /* the decode kernel's split partials (attn_dec), nsplit of them per query row */\n"
    "  float *part; int nsplit;\n"
    "  unsigned *count; /* per query row: the splits done (attn_dec; zero between calls) */\n"
    "};\n"
    "#define NEG_INF (-__int_as_float(0x7f800000))\n"
    "struct TF32 { typedef float T; static __device__ float ld(const float *p, long long i) { return p[i]; }\n"
    "  static __device__ void st(float *p, long long i, float x) { p[i] = x; } };\n"
    "struct TBF16 { typedef u16 T;\n"
    "  static __device__ float ld(const u16 *p, long long i) { return __uint_as_float(((u32)p[i]) << 16); }\n"
    "  static __device__ float cvt(u16 h) { return __uint_as_float(((u32)h) << 16); }\n"
    "  static __device__ void st(u16 *p, long long i, float x) { u16 h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x)); p[i] = h; }\n"
    "  static __device__ u32 pack(float lo, float hi) { u32 r; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo)); return r; }\n"
    "  static __device__ void mma(float *c, const u32 *a, u32 b0, u32 b1) {\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "      : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1)); } };\n"
    "struct TF16 { typedef u16 T;\n"
    "  static __device__ float cvt(u16 h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
    "  static __device__ float ld(const u16 *p, long long i) { return cvt(p[i]); }\n"
    "  static __device__ void st(u16 *p, long long i, float x) { u16 h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x)); p[i] = h; }\n"
    "  static __device__ u32 pack(float lo, float hi) { u32 r; asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo)); return r; }\n"
    "  static __device__ void mma(float *c, const u32 *a, u32 b0, u32 b1) {\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "      : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1)); } };\n"
    "template <class X> __device__ float mask_at(const AttnArgs &a, long long b, long long h, long long i, long long j) {\n"
    "  long long off = b * a.ms0 + h * a.ms1 + i * a.ms2 + j * a.ms3;\n"
    "  return a.mask_kind == 1 ? ((const float *)a.mask)[off] : X::ld((const typename X::T *)a.mask, off);\n"
    "}\n"
    "/* The lengths of the record (generic), if any; false: the block of `rows` query rows\n"
    " * (0: a mask_cls block) lies past them, and exits before any barrier. The grid and the\n"
    " * mask table are sized for the call's fields, which bound the record's. */\n"
    "__device__ __forceinline__ bool use_lens(AttnArgs &a, long long rows) {\n"
    "  const long long *r = a.lens;\n"
    "  if (r) {\n"
    "    a.Sq = r[0], a.Sk = r[1];\n"
    "    a.qb = r[2], a.qh = r[3], a.qs = r[4], a.kb = r[5], a.kh = r[6], a.ks = r[7];\n"
    "    a.vb = r[8], a.vh = r[9], a.vs = r[10], a.ob = r[11], a.oh = r[12], a.os = r[13];\n"
    "    a.ms0 = r[14], a.ms1 = r[15], a.ms2 = r[16], a.ms3 = r[17];\n"
    "  }\n"
    "  a.Lk = a.Sk;\n"
    "  if (a.klen) { long long L = *a.klen; a.Lk = L < 0 ? 0 : (L < a.Sk ? L : a.Sk); }\n"
    "  return !r || !rows || (long long)blockIdx.x * rows < a.Sq;\n"
    "}\n"
    "/* last key query i may see, plus one: the causal rule (aligned to Sk), then the key length */\n"
    "__device__ long long key_end(const AttnArgs &a, long long i) {\n"
    "  long long e = a.Sk;\n"
    "  if (a.causal) { e = i + a.Sk - a.Sq + 1; e = e < 0 ? 0 : e; }\n"
    "  return e < a.Lk ? e : a.Lk;\n"
    "}\n"
    "\n"
    "/* ---- tensor-core kernel: 64 query rows per block (4 warps x 16 rows), 64 keys per tile ----\n"
    " * Q, K and V tiles reach shared memory with cp.async (16 bytes a copy; K and V double\n"
    " * buffered so the next tile loads while this one computes) and the mma operands come out\n"
    " * of it with ldmatrix (.trans for V). A mask is classified once per call by mask_cls (one\n"
    " * pass over the mask, 64 x 64 tiles, the kernel's BM x BN) into a table the blocks read:\n"
    " * tiles whose every value is -inf or <= -1e30 (the exporters' finfo.min) are skipped,\n"
    " * tiles of zeros need no mask reads. Skipping is exact: such a key's weight is\n"
    " * exp(<= -1e30 - max), 0 in f32, unless its row sees no other key; a block holding such\n"
    " * a row (an orphan: a row with visible keys and no live one) runs every tile. */\n"
    "#define ATT_DEAD (-1e30f)\n"
    "#define MAXT 1024 /* key tiles a block can hold classes for (seq_k <= 65536); beyond: no skipping */\n"
    "__device__ __forceinline__ u32 smem_u32(const void *p) { return (u32)__cvta_generic_to_shared(p); }\n"
    "__device__ __forceinline__ void cp16(void *dst, const void *src, bool ok) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" :: \"r\"(smem_u32(dst)), \"l\"(src), \"r\"(ok ? 16 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void cp_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::); }\n"
    "template <int N> __device__ __forceinline__ void cp_wait() { asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N)); }\n"
    "__device__ __forceinline__ void ldsm4(u32 *r, const void *p) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(smem_u32(p)));\n"
    "}\n"
    "__device__ __forceinline__ void ldsm4t(u32 *r, const void *p) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(smem_u32(p)));\n"
    "}\n"
    "/* The tiled kernels' pipeline step: the next tile to compute after t (next_tile: past the\n"
    " * skipped ones) starts loading into the other stage, and tile t's stage is waited for; every\n"
    " * thread then sees it. Returns that next tile (nt: none). */\n"
    "template <class Next, class Load>\n"
    "__device__ __forceinline__ int kv_advance(int t, int nt, int stage, Next next_tile, Load load_kv) {\n"
    "  const int tn = next_tile(t + 1);\n"
    "  if (tn < nt) load_kv(tn, stage ^ 1);\n"
    "  cp_commit();\n"
    "  cp_wait<1>();\n"
    "  __syncthreads();\n"
    "  return tn;\n"
    "}\n"
    "/* With every row's live bit in rowseen and the tile bits in cls (1 live, 2 nonzero): the\n"
    " * class of each tile, 0 skip (no live key), 1 live keys and every value 0 (no mask reads),\n"
    " * 2 read the mask; a row that sees keys but none live (an orphan) runs its softmax over\n"
    " * dead values, so then nothing is skipped. */\n"
    "template <int BM>\n"
    "__device__ void cls_end(const AttnArgs &a, long long q0, int nt, unsigned char *cls, const unsigned *rowseen) {\n"
    "  __syncthreads();\n"
    "  bool orphan = false;\n"
    "  for (int r = threadIdx.x; r < BM; r += blockDim.x)\n"
    "    if (q0 + r < a.Sq && key_end(a, q0 + r) > 0 && !(rowseen[r >> 5] & (1u << (r & 31)))) orphan = true;\n"
    "  orphan = __syncthreads_or(orphan);\n"
    "  for (int t = threadIdx.x; t < nt; t += blockDim.x) {\n"
    "    unsigned char c = cls[t];\n"
    "    cls[t] = orphan ? 2 : !(c & 1) ? 0 : c == 1 ? 1 : 2;\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
    "/* The classes of key tiles [0, nt) for rows [q0, q0 + 64) from the table (mask_cls): the\n"
    " * tile bits into cls, the rows' live bits OR-ed over the tiles into rowseen. nt covers every\n"
    " * key a row of the block may see, so a row's bit is whether it has any live key. */\n"
    "template <int BM>\n"
    "__device__ void cls_load(const AttnArgs &a, long long b, long long h, long long q0, int nt, unsigned char *cls,\n"
    "                         unsigned *rowseen) {\n"
    "  static_assert(BM == 64, \"a table tile's rows are the bits of one 64-bit word\");\n"
    "  if (threadIdx.x < BM / 32) rowseen[threadIdx.x] = 0;\n"
    "  __syncthreads();\n"
    "  const long long at = ((b * a.tbs + h * a.ths) * a.tnq + q0 / BM) * a.tnk;\n"
    "  unsigned long long live = 0;\n"
    "  for (int t = threadIdx.x; t < nt; t += blockDim.x) {\n"
    "    cls[t] = a.tcls[at + t];\n"
    "    live |= a.trows[at + t];\n"
    "  }\n"
    "  for (int off = 16; off; off >>= 1) live |= __shfl_xor_sync(0xffffffffu, live, off);\n"
    "  if ((threadIdx.x & 31) == 0) {\n"
    "    if ((unsigned)live) atomicOr(&rowseen[0], (unsigned)live);\n"
    "    if ((unsigned)(live >> 32)) atomicOr(&rowseen[1], (unsigned)(live >> 32));\n"
    "  }\n"
    "  cls_end<BM>(a, q0, nt, cls, rowseen);\n"
    "}\n"
    "/* ---- the mask's tile table: one pass over the mask before the attention kernel ----\n"
    " * Block (x, y, z), 256 threads: key tile x, query tile y of mask plane z (b' * mh + h',\n"
    " * mh = H for a per-head mask, else 1). Thread: column tid % 64, rows tid / 64 + 4 i. A key\n"
    " * is live for a row when its value is above ATT_DEAD and the causal rule lets the row see\n"
    " * it. Writes the tile's live rows and class bits (1 live, 2 a nonzero value in the matrix). */\n"
    "template <class M>\n"
    "__device__ void mask_cls(const AttnArgs &a) {\n"
    "  __shared__ unsigned long long srows;\n"
    "  __shared__ int snz;\n"
    "  const int tid = threadIdx.x, col = tid & 63, r0 = tid >> 6;\n"
    "  const long long z = blockIdx.z, mh = a.ths ? a.H : 1;\n"
    "  const long long q0 = (long long)blockIdx.y * 64, j = (long long)blockIdx.x * 64 + col;\n"
    "  const typename M::T *mp = (const typename M::T *)a.mask + (z / mh) * a.ms0 + (z % mh) * a.ms1;\n"
    "  if (tid == 0) srows = 0, snz = 0;\n"
    "  /* the 16 loads first, then their tests, so the loads are in flight together */\n"
    "  float v[16];\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 16; i++) {\n"
    "    const long long r = q0 + r0 + 4 * i;\n"
    "    v[i] = r < a.Sq && j < a.Sk ? M::ld(mp, r * a.ms2 + j * a.ms3) : 0.f;\n"
    "  }\n"
    "  unsigned long long live = 0;\n"
    "  bool nz = false;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 16; i++) {\n"
    "    const long long r = q0 + r0 + 4 * i;\n"
    "    if (r >= a.Sq || j >= a.Sk) continue;\n"
    "    if (v[i] > ATT_DEAD && j < key_end(a, r)) live |= 1ull << (r0 + 4 * i);\n"
    "    nz |= v[i] != 0.f;\n"
    "  }\n"
    "  for (int off = 16; off; off >>= 1) live |= __shfl_xor_sync(0xffffffffu, live, off);\n"
    "  nz = __any_sync(0xffffffffu, nz);\n"
    "  __syncthreads(); /* srows and snz cleared */\n"
    "  if ((tid & 31) == 0) {\n"
    "    if (live) atomicOr(&srows, live);\n"
    "    if (nz) snz = 1;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  if (tid == 0) {\n"
    "    const long long at = (z * a.tnq + blockIdx.y) * a.tnk + blockIdx.x;\n"
    "    a.trows[at] = srows;\n"
    "    a.tcls[at] = (unsigned char)((srows ? 1 : 0) | (snz ? 2 : 0));\n"
    "  }\n"
    "}\n"
    "/* s += mask * log2 e over one tile's fragment: every load first (row and column clamped\n"
    " * into the matrix; what lies outside is cut by the causal/edge rule after), so they are\n"
    " * in flight together. finfo.min * log2 e would overflow to -inf: clamped to -1e38 first;\n"
    " * -inf itself stays (a row of only -inf is 0). */\n"
    "template <class M, int BN>\n"
    "__device__ __forceinline__ void add_mask(const AttnArgs &a, long long b, long long h, const long long *row,\n"
    "                                         long long kb, int t4, float (*s)[4]) {\n"
    "  const typename M::T *mp = (const typename M::T *)a.mask + b * a.ms0 + h * a.ms1;\n"
    "  const long long r0 = (row[0] < a.Sq ? row[0] : 0) * a.ms2, r1 = (row[1] < a.Sq ? row[1] : 0) * a.ms2;\n"
    "  float mv[BN / 8][4];\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 4; e++) {\n"
    "      long long col = kb + n * 8 + t4 * 2 + (e & 1);\n"
    "      mv[n][e] = M::ld(mp, (e >> 1 ? r1 : r0) + (col < a.Sk ? col : 0) * a.ms3);\n"
    "    }\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 4; e++) {\n"
    "      float m = mv[n][e];\n"
    "      s[n][e] += m == NEG_INF ? NEG_INF : fmaxf(m, -1e38f) * 1.4426950408889634f;\n"
    "    }\n"
    "}\n"
    "template <class X, int D>\n"
    "__device__ void attn_mma(const AttnArgs a) {\n"
    "  enum { BM = 64, BN = 64, LD = D + 8, CH = D / 8 /* 16-byte chunks per row */ };\n"
    "  extern __shared__ __align__(16) u16 smem[];\n"
    "  u16 *Qs = smem, *Ks = Qs + BM * LD, *Vs = Ks + 2 * BN * LD;\n"
    "  unsigned char *cls = (unsigned char *)(Vs + 2 * BN * LD);\n"
    "  unsigned *rowseen = (unsigned *)(cls + MAXT);\n"
    "  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;\n"
    "  const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)blockIdx.x * BM;\n"
    "  const long long kvh = h / (a.H / a.Hkv);\n"
    "  const u16 *Q = (const u16 *)a.q + b * a.qb + h * a.qh;\n"
    "  const u16 *K = (const u16 *)a.k + b * a.kb + kvh * a.kh;\n"
    "  const u16 *V = (const u16 *)a.v + b * a.vb + kvh * a.vh;\n"
    "  u16 *O = (u16 *)a.o + b * a.ob + h * a.oh;\n"
    "  const long long last = q0 + BM - 1 < a.Sq - 1 ? q0 + BM - 1 : a.Sq - 1;\n"
    "  const long long kv_end = key_end(a, last);\n"
    "  const int nt = (int)((kv_end + BN - 1) / BN);\n"
    "  const bool use_cls = a.mask_kind && a.tcls && nt <= MAXT; /* else: every tile reads the mask */\n"
    "  /* Q tile (rows past Sq are zeros) */\n"
    "  for (int e = tid; e < BM * CH; e += blockDim.x) {\n"
    "    int r = e / CH, c = (e % CH) * 8;\n"
    "    bool ok = q0 + r < a.Sq;\n"
    "    cp16(Qs + r * LD + c, Q + (ok ? (q0 + r) * a.qs + c : 0), ok);\n"
    "  }\n"
    "  cp_commit();\n"
    "  if (use_cls) cls_load<BM>(a, b, h, q0, nt, cls, rowseen);\n"
    "  /* the next tile to compute at or after t (nt when none) */\n"
    "  auto next_tile = [&](int t) {\n"
    "    if (use_cls) while (t < nt && cls[t] == 0) t++;\n"
    "    return t;\n"
    "  };\n"
    "  auto load_kv = [&](int t, int stage) {\n"
    "    long long kb = (long long)t * BN;\n"
    "    u16 *ks = Ks + stage * BN * LD, *vs = Vs + stage * BN * LD;\n"
    "    for (int e = tid; e < BN * CH; e += blockDim.x) {\n"
    "      int r = e / CH, c = (e % CH) * 8;\n"
    "      bool ok = kb + r < a.Sk;\n"
    "      cp16(ks + r * LD + c, K + (ok ? (kb + r) * a.ks + c : 0), ok);\n"
    "      cp16(vs + r * LD + c, V + (ok ? (kb + r) * a.vs + c : 0), ok);\n"
    "    }\n"
    "  };\n"
    "  int t = next_tile(0);\n"
    "  if (t < nt) load_kv(t, 0);\n"
    "  cp_commit();\n"
    "  cp_wait<1>(); /* Q */\n"
    "  __syncthreads();\n"
    "  u32 qa[D / 16][4];\n"
    "  {\n"
    "    const int r = warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), c = 8 * (lane >> 4);\n"
    "    for (int kk = 0; kk < D / 16; kk++) ldsm4(qa[kk], Qs + r * LD + kk * 16 + c);\n"
    "  }\n"
    "  float o[D / 8][4];\n"
    "  for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;\n"
    "  float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};\n"
    "  const long long row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};\n"
    "  const long long rend[2] = {row[0] < a.Sq ? key_end(a, row[0]) : 0, row[1] < a.Sq ? key_end(a, row[1]) : 0};\n"
    "  const float sl2 = a.scale * 1.4426950408889634f; /* exp(x) = exp2(x log2 e) */\n"
    "  int stage = 0;\n"
    "  while (t < nt) {\n"
    "    const int tn = kv_advance(t, nt, stage, next_tile, load_kv);\n"
    "    const u16 *ks = Ks + stage * BN * LD, *vs = Vs + stage * BN * LD;\n"
    "    const long long kb = (long long)t * BN;\n"
    "    float s[BN / 8][4];\n"
    "    for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;\n"
    "    for (int kk = 0; kk < D / 16; kk++)\n"
    "      for (int n = 0; n < BN / 8; n += 2) {\n"
    "        u32 kf[4];\n"
    "        ldsm4(kf, ks + (n * 8 + (lane & 7) + 8 * (lane >> 4)) * LD + kk * 16 + 8 * ((lane >> 3) & 1));\n"
    "        X::mma(s[n], qa[kk], kf[0], kf[1]);\n"
    "        X::mma(s[n + 1], qa[kk], kf[2], kf[3]);\n"
    "      }\n"
    "    /* scores in log2 units; the mask and the causal edge only where the tile needs them */\n"
    "    const bool rd = a.mask_kind && (!use_cls || cls[t] == 2);\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "      for (int e = 0; e < 4; e++) s[n][e] *= sl2;\n"
    "    if (rd) {\n"
    "      if (a.mask_kind == 1) add_mask<TF32, BN>(a, b, h, row, kb, t4, s);\n"
    "      else add_mask<X, BN>(a, b, h, row, kb, t4, s);\n"
    "    }\n"
    "    if (kb + BN > rend[0] || kb + BN > rend[1])\n"
    "      for (int n = 0; n < BN / 8; n++)\n"
    "        for (int e = 0; e < 4; e++)\n"
    "          if (kb + n * 8 + t4 * 2 + (e & 1) >= rend[e >> 1]) s[n][e] = NEG_INF;\n"
    "    float mx[2] = {NEG_INF, NEG_INF};\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "      for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);\n"
    "    float use[2];\n"
    "    for (int ri = 0; ri < 2; ri++) {\n"
    "      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 1));\n"
    "      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 2));\n"
    "      float mn = fmaxf(m[ri], mx[ri]);\n"
    "      use[ri] = mn == NEG_INF ? 0.f : mn; /* a row with nothing visible yet stays at 0 */\n"
    "      float alpha = exp2f(m[ri] - use[ri]);\n"
    "      m[ri] = mn;\n"
    "      l[ri] *= alpha;\n"
    "      for (int n = 0; n < D / 8; n++) o[n][2 * ri] *= alpha, o[n][2 * ri + 1] *= alpha;\n"
    "    }\n"
    "    u32 pa[BN / 16][4];\n"
    "    for (int n = 0; n < BN / 8; n++) {\n"
    "      float p0 = exp2f(s[n][0] - use[0]), p1 = exp2f(s[n][1] - use[0]);\n"
    "      float p2 = exp2f(s[n][2] - use[1]), p3 = exp2f(s[n][3] - use[1]);\n"
    "      l[0] += p0 + p1;\n"
    "      l[1] += p2 + p3;\n"
    "      pa[n >> 1][(n & 1) * 2] = X::pack(p0, p1);\n"
    "      pa[n >> 1][(n & 1) * 2 + 1] = X::pack(p2, p3);\n"
    "    }\n"
    "    for (int j = 0; j < BN / 16; j++)\n"
    "      for (int n = 0; n < D / 8; n += 2) {\n"
    "        u32 vf[4];\n"
    "        ldsm4t(vf, vs + (j * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + n * 8 + 8 * (lane >> 4));\n"
    "        X::mma(o[n], pa[j], vf[0], vf[1]);\n"
    "        X::mma(o[n + 1], pa[j], vf[2], vf[3]);\n"
    "      }\n"
    "    __syncthreads(); /* every warp is done with this stage before it is loaded again */\n"
    "    t = tn;\n"
    "    stage ^= 1;\n"
    "  }\n"
    "  cp_wait<0>();\n"
    "  for (int ri = 0; ri < 2; ri++) {\n"
    "    l[ri] += __shfl_xor_sync(0xffffffffu, l[ri], 1);\n"
    "    l[ri] += __shfl_xor_sync(0xffffffffu, l[ri], 2);\n"
    "  }\n"
    "  for (int ri = 0; ri < 2; ri++) {\n"
    "    if (row[ri] >= a.Sq) continue;\n"
    "    float inv = l[ri] > 0.f ? 1.f / l[ri] : 0.f;\n"
    "    for (int n = 0; n < D / 8; n++)\n"
    "      *(u32 *)(O + row[ri] * a.os + n * 8 + t4 * 2) = X::pack(o[n][ri * 2] * inv, o[n][ri * 2 + 1] * inv);\n"
    "  }\n"
    "}\n"
    "\n"
    "/* ---- f32 kernel: 64 query rows per block, 256 threads, 64 keys per tile, exact f32 FMA ----\n"
    " * The tensor-core kernel's tiling and mask table on CUDA cores (f32 inputs are not rounded to\n"
    " * tf32). Thread t owns rows rg + 16 rr (rg = t / 16, rr < 4) and, of S, keys cg + 16 cc (cg =\n"
    " * t % 16, cc < 4); of O, head dims 64 dc + 4 cg .. + 3. Q, K and V stay as stored ([row][d]),\n"
    " * copied by cp.async (K and V double buffered); S = Q K^T takes four rows of Q and four keys\n"
    " * as float4 along d per step (8 shared loads for 64 FMAs); P goes through shared memory, read\n"
    " * back as float4 along the keys against V's float4 along d (again 8 loads for 64 FMAs). Row\n"
    " * strides of 68 / 132 floats (Q, K) and 80 (P) keep a warp's shared loads at the fewest\n"
    " * wavefronts. Scores in log2 units with exp2f, as the tensor-core kernel; the per-thread row\n"
    " * sums are reduced over the row's 16 threads at the end. Blocks run the last query tiles\n"
    " * first (the longest rows under a causal rule). */\n"
    "template <class M, int RR>\n"
    "__device__ __forceinline__ void add_mask_simt(const AttnArgs &a, long long b, long long h, const long long *row,\n"
    "                                              long long kb, int cg, float (*s)[4]) {\n"
    "  const typename M::T *mp = (const typename M::T *)a.mask + b * a.ms0 + h * a.ms1;\n"
    "  float mv[RR][4];\n"
    "#pragma unroll\n"
    "  for (int rr = 0; rr < RR; rr++) {\n"
    "    const long long ro = (row[rr] < a.Sq ? row[rr] : 0) * a.ms2;\n"
    "#pragma unroll\n"
    "    for (int cc = 0; cc < 4; cc++) {\n"
    "      const long long col = kb + cg + 16 * cc;\n"
    "      mv[rr][cc] = M::ld(mp, ro + (col < a.Sk ? col : 0) * a.ms3);\n"
    "    }\n"
    "  }\n"
    "#pragma unroll\n"
    "  for (int rr = 0; rr < RR; rr++)\n"
    "#pragma unroll\n"
    "    for (int cc = 0; cc < 4; cc++) {\n"
    "      const float m = mv[rr][cc];\n"
    "      s[rr][cc] += m == NEG_INF ? NEG_INF : fmaxf(m, -1e38f) * 1.4426950408889634f;\n"
    "    }\n"
    "}\n"
    "template <int D, int RR>\n"
    "__device__ void attn_simt(const AttnArgs a) {\n"
    "  enum { BM = 16 * RR, BN = 64, LQ = D + 4, LV = D, LP = BN + 16, CH = D / 4 /* 16-byte chunks per row */, DC = D / 64 };\n"
    "  extern __shared__ __align__(16) float fsm[];\n"
    "  float *Qs = fsm, *Ks = Qs + BM * LQ, *Vs = Ks + 2 * BN * LQ, *Ps = Vs + 2 * BN * LV;\n"
    "  unsigned char *cls = (unsigned char *)(Ps + BM * LP);\n"
    "  unsigned *rowseen = (unsigned *)(cls + MAXT);\n"
    "  const int tid = threadIdx.x, rg = tid >> 4, cg = tid & 15;\n"
    "  const long long b = blockIdx.z, h = blockIdx.y, q0 = (long long)(gridDim.x - 1 - blockIdx.x) * BM;\n"
    "  if (q0 >= a.Sq) return; /* past a generic record's rows: before any barrier */\n"
    "  const long long kvh = h / (a.H / a.Hkv);\n"
    "  const float *Q = (const float *)a.q + b * a.qb + h * a.qh;\n"
    "  const float *K = (const float *)a.k + b * a.kb + kvh * a.kh;\n"
    "  const float *V = (const float *)a.v + b * a.vb + kvh * a.vh;\n"
    "  float *O = (float *)a.o + b * a.ob + h * a.oh;\n"
    "  const long long last = q0 + BM - 1 < a.Sq - 1 ? q0 + BM - 1 : a.Sq - 1;\n"
    "  const int nt = (int)((key_end(a, last) + BN - 1) / BN);\n"
    "  const bool use_cls = a.mask_kind && a.tcls && nt <= MAXT;\n"
    "  for (int e = tid; e < BM * CH; e += blockDim.x) {\n"
    "    const int r = e / CH, c = (e % CH) * 4;\n"
    "    const bool ok = q0 + r < a.Sq;\n"
    "    cp16(Qs + r * LQ + c, Q + (ok ? (q0 + r) * a.qs + c : 0), ok);\n"
    "  }\n"
    "  cp_commit();\n"
    "  if (use_cls) cls_load<64>(a, b, h, q0 & ~63LL, nt, cls, rowseen); /* the table's 64-row tile holding the block */\n"
    "  auto next_tile = [&](int t) {\n"
    "    if (use_cls) while (t < nt && cls[t] == 0) t++;\n"
    "    return t;\n"
    "  };\n"
    "  auto load_kv = [&](int t, int stage) {\n"
    "    const long long kb = (long long)t * BN;\n"
    "    float *ks = Ks + stage * BN * LQ, *vs = Vs + stage * BN * LV;\n"
    "    for (int e = tid; e < BN * CH; e += blockDim.x) {\n"
    "      const int r = e / CH, c = (e % CH) * 4;\n"
    "      const bool ok = kb + r < a.Sk;\n"
    "      cp16(ks + r * LQ + c, K + (ok ? (kb + r) * a.ks + c : 0), ok);\n"
    "      cp16(vs + r * LV + c, V + (ok ? (kb + r) * a.vs + c : 0), ok);\n"
    "    }\n"
    "  };\n"
    "  int t = next_tile(0);\n"
    "  if (t < nt) load_kv(t, 0);\n"
    "  cp_commit();\n"
    "  long long row[RR], rend[RR];\n"
    "  long long rmin = a.Sk;\n"
    "#pragma unroll\n"
    "  for (int rr = 0; rr < RR; rr++) {\n"
    "    row[rr] = q0 + rg + 16 * rr;\n"
    "    rend[rr] = row[rr] < a.Sq ? key_end(a, row[rr]) : 0;\n"
    "    rmin = rend[rr] < rmin ? rend[rr] : rmin;\n"
    "  }\n"
    "  /* rmin, the least visible end of this thread's rows: a tile below it needs no edge test */\n"
    "  float o[RR][4 * DC], m[RR], l[RR];\n"
    "#pragma unroll\n"
    "  for (int rr = 0; rr < RR; rr++) {\n"
    "    m[rr] = NEG_INF, l[rr] = 0.f;\n"
    "#pragma unroll\n"
    "    for (int x = 0; x < 4 * DC; x++) o[rr][x] = 0.f;\n"
    "  }\n"
    "  const float sl2 = a.scale * 1.4426950408889634f;\n"
    "  int stage = 0;\n"
    "  while (t < nt) {\n"
    "    const int tn = kv_advance(t, nt, stage, next_tile, load_kv);\n"
    "    const float *ks = Ks + stage * BN * LQ, *vs = Vs + stage * BN * LV;\n"
    "    const long long kb = (long long)t * BN;\n"
    "    float s[RR][4];\n"
    "#pragma unroll\n"
    "    for (int rr = 0; rr < RR; rr++)\n"
    "#pragma unroll\n"
    "      for (int cc = 0; cc < 4; cc++) s[rr][cc] = 0.f;\n"
    "#pragma unroll\n"
    "    for (int d = 0; d < D; d += 4) {\n"
    "      float4 qf[RR], kf[4];\n"
    "#pragma unroll\n"
    "      for (int rr = 0; rr < RR; rr++) qf[rr] = *(const float4 *)(Qs + (rg + 16 * rr) * LQ + d);\n"
    "#pragma unroll\n"
    "      for (int cc = 0; cc < 4; cc++) kf[cc] = *(const float4 *)(ks + (cg + 16 * cc) * LQ + d);\n"
    "#pragma unroll\n"
    "      for (int rr = 0; rr < RR; rr++)\n"
    "#pragma unroll\n"
    "        for (int cc = 0; cc < 4; cc++) {\n"
    "          float x = s[rr][cc];\n"
    "          x = fmaf(qf[rr].x, kf[cc].x, x);\n"
    "          x = fmaf(qf[rr].y, kf[cc].y, x);\n"
    "          x = fmaf(qf[rr].z, kf[cc].z, x);\n"
    "          s[rr][cc] = fmaf(qf[rr].w, kf[cc].w, x);\n"
    "        }\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int rr = 0; rr < RR; rr++)\n"
    "#pragma unroll\n"
    "      for (int cc = 0; cc < 4; cc++) s[rr][cc] *= sl2;\n"
    "    /* f32 inputs: the mask is f32 (the inputs' type) */\n"
    "    if (a.mask_kind && (!use_cls || cls[t] == 2)) add_mask_simt<TF32, RR>(a, b, h, row, kb, cg, s);\n"
    "    if (kb + BN > rmin)\n"
    "#pragma unroll\n"
    "      for (int rr = 0; rr < RR; rr++)\n"
    "#pragma unroll\n"
    "        for (int cc = 0; cc < 4; cc++)\n"
    "          if (kb + cg + 16 * cc >= rend[rr]) s[rr][cc] = NEG_INF;\n"
    "#pragma unroll\n"
    "    for (int rr = 0; rr < RR; rr++) {\n"
    "      float mx = fmaxf(fmaxf(s[rr][0], s[rr][1]), fmaxf(s[rr][2], s[rr][3]));\n"
    "      for (int off = 8; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));\n"
    "      const float mn = fmaxf(m[rr], mx), use = mn == NEG_INF ? 0.f : mn;\n"
    "      const float alpha = exp2f(m[rr] - use);\n"
    "      m[rr] = mn;\n"
    "      float ps = 0.f;\n"
    "#pragma unroll\n"
    "      for (int cc = 0; cc < 4; cc++) {\n"
    "        const float p = exp2f(s[rr][cc] - use);\n"
    "        ps += p;\n"
    "        Ps[(rg + 16 * rr) * LP + cg + 16 * cc] = p;\n"
    "      }\n"
    "      l[rr] = l[rr] * alpha + ps;\n"
    "#pragma unroll\n"
    "      for (int x = 0; x < 4 * DC; x++) o[rr][x] *= alpha;\n"
    "    }\n"
    "    __syncthreads(); /* P complete */\n"
    "#pragma unroll 4\n"
    "    for (int j = 0; j < BN; j += 4) {\n"
    "      float4 pf[RR];\n"
    "#pragma unroll\n"
    "      for (int rr = 0; rr < RR; rr++) pf[rr] = *(const float4 *)(Ps + (rg + 16 * rr) * LP + j);\n"
    "#pragma unroll\n"
    "      for (int jj = 0; jj < 4; jj++) {\n"
    "        float4 vf[DC];\n"
    "#pragma unroll\n"
    "        for (int dc = 0; dc < DC; dc++) vf[dc] = *(const float4 *)(vs + (j + jj) * LV + 64 * dc + 4 * cg);\n"
    "#pragma unroll\n"
    "        for (int rr = 0; rr < RR; rr++) {\n"
    "          const float p = jj == 0 ? pf[rr].x : jj == 1 ? pf[rr].y : jj == 2 ? pf[rr].z : pf[rr].w;\n"
    "#pragma unroll\n"
    "          for (int dc = 0; dc < DC; dc++) {\n"
    "            o[rr][4 * dc] = fmaf(p, vf[dc].x, o[rr][4 * dc]);\n"
    "            o[rr][4 * dc + 1] = fmaf(p, vf[dc].y, o[rr][4 * dc + 1]);\n"
    "            o[rr][4 * dc + 2] = fmaf(p, vf[dc].z, o[rr][4 * dc + 2]);\n"
    "            o[rr][4 * dc + 3] = fmaf(p, vf[dc].w, o[rr][4 * dc + 3]);\n"
    "          }\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "    __syncthreads(); /* P and this stage read by every thread before they are written again */\n"
    "    t = tn;\n"
    "    stage ^= 1;\n"
    "  }\n"
    "  cp_wait<0>();\n"
    "#pragma unroll\n"
    "  for (int rr = 0; rr < RR; rr++) {\n"
    "    float ls = l[rr];\n"
    "    for (int off = 8; off; off >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, off);\n"
    "    if (row[rr] >= a.Sq) continue;\n"
    "    const float inv = ls > 0.f ? 1.f / ls : 0.f;\n"
    "#pragma unroll\n"
    "    for (int dc = 0; dc < DC; dc++)\n"
    "      *(float4 *)(O + row[rr] * a.os + 64 * dc + 4 * cg) =\n"
    "          make_float4(o[rr][4 * dc] * inv, o[rr][4 * dc + 1] * inv, o[rr][4 * dc + 2] * inv, o[rr][4 * dc + 3] * inv);\n"
    "  }\n"
    "}\n"
    "\n"
    "/* ---- generic kernel: one warp per query row, 32 keys per tile, f32 math ---- */\n"
    "template <class X>\n"
    "__device__ void attn_gen(const AttnArgs a) {\n"
    "  enum { W = 4, BN = 32, MAXD = 256 };\n"
    "  extern __shared__ __align__(16) float fsm[];\n"
    "  const int D = (int)a.D, Dv = (int)a.Dv;\n"
    "  float *Ks = fsm, *Vs = Ks + BN * (D + 1), *Qs = Vs + BN * Dv;\n"
    "  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
    "  const long long b = blockIdx.z, h = blockIdx.y, i = (long long)blockIdx.x * W + warp;\n"
    "  const long long kvh = h / (a.H / a.Hkv);\n"
    "  typedef typename X::T T;\n"
    "  const T *Q = (const T *)a.q + b * a.qb + h * a.qh;\n"
    "  const T *K = (const T *)a.k + b * a.kb + kvh * a.kh;\n"
    "  const T *V = (const T *)a.v + b * a.vb + kvh * a.vh;\n"
    "  T *O = (T *)a.o + b * a.ob + h * a.oh;\n"
    "  for (int d = lane; d < D; d += 32) Qs[warp * D + d] = i < a.Sq ? X::ld(Q, i * a.qs + d) : 0.f;\n"
    "  float acc[MAXD / 32];\n"
    "  for (int c = 0; c < MAXD / 32; c++) acc[c] = 0.f;\n"
    "  float m = NEG_INF, l = 0.f;\n"
    "  long long last_row = (long long)blockIdx.x * W + W - 1;\n"
    "  if (last_row > a.Sq - 1) last_row = a.Sq - 1;\n"
    "  long long kv_end = key_end(a, last_row), my_end = i < a.Sq ? key_end(a, i) : 0;\n"
    "  for (long long kb = 0; kb < kv_end; kb += BN) {\n"
    "    __syncthreads();\n"
    "    for (int e = threadIdx.x; e < BN * D; e += blockDim.x) {\n"
    "      int r = e / D, c = e % D;\n"
    "      Ks[r * (D + 1) + c] = kb + r < a.Sk ? X::ld(K, (kb + r) * a.ks + c) : 0.f;\n"
    "    }\n"
    "    for (int e = threadIdx.x; e < BN * Dv; e += blockDim.x) {\n"
    "      int r = e / Dv, c = e % Dv;\n"
    "      Vs[r * Dv + c] = kb + r < a.Sk ? X::ld(V, (kb + r) * a.vs + c) : 0.f;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    long long j = kb + lane;\n"
    "    float s = NEG_INF;\n"
    "    if (j < my_end) {\n"
    "      float dot = 0.f;\n"
    "      for (int d = 0; d < D; d++) dot = fmaf(Qs[warp * D + d], Ks[lane * (D + 1) + d], dot);\n"
    "      s = dot * a.scale;\n"
    "      if (a.mask_kind) s += mask_at<X>(a, b, h, i, j);\n"
    "    }\n"
    "    float mx = s;\n"
    "    for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));\n"
    "    float mn = fmaxf(m, mx), use = mn == NEG_INF ? 0.f : mn;\n"
    "    float alpha = expf(m - use), p = expf(s - use);\n"
    "    m = mn;\n"
    "    float ps = p;\n"
    "    for (int off = 16; off; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);\n"
    "    l = l * alpha + ps;\n"
    "    for (int c = 0; c < MAXD / 32; c++) acc[c] *= alpha;\n"
    "    for (int jj = 0; jj < BN; jj++) {\n"
    "      float pj = __shfl_sync(0xffffffffu, p, jj);\n"
    "      if (pj == 0.f) continue;\n"
    "      for (int c = 0; c < MAXD / 32; c++) {\n"
    "        int d = lane + 32 * c;\n"
    "        if (d < Dv) acc[c] = fmaf(pj, Vs[jj * Dv + d], acc[c]);\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  if (i >= a.Sq) return;\n"
    "  float inv = l > 0.f ? 1.f / l : 0.f;\n"
    "  for (int c = 0; c < MAXD / 32; c++) {\n"
    "    int d = lane + 32 * c;\n"
    "    if (d < Dv) X::st(O, i * a.os + d, acc[c] * inv);\n"
    "  }\n"
    "}\n"
    "\n"
    "/* ---- decode kernel: a few query rows against a long cache, split over the keys ----\n"
    " * grid (splits, heads, batch), 128 threads. Block x takes keys [x * chunk, (x + 1) * chunk)\n"
    " * of each query row, chunk from the row's visible length (a key length read at run time\n"
    " * spreads over every split). Each warp takes 4 keys at a time, 8 lanes a key for the score\n"
    " * (a shuffle sum in the group), then every lane folds the 4 keys' V into its own output dims\n"
    " * (d = lane + 32 c), so 4 keys' loads are in flight at once; each warp keeps a running max,\n"
    " * sum and weighted V (online softmax). The warps merge in shared memory. With one split the\n"
    " * block writes O; otherwise it writes its (acc[Dv], max, sum) to the call's partials and\n"
    " * the last block of the row to finish (a counter per row, reset by that block) merges them.\n"
    " * f32 math and expf, as attn_gen. */\n"
    "#define DEC_W 4\n"
    "#define DEC_KW 4\n"
    "#define DEC_GL 8\n"
    "template <class X, int MD>\n"
    "__device__ void attn_dec(const AttnArgs a) {\n"
    "  enum { MAXD = MD };\n"
    "  extern __shared__ __align__(16) float fsm[];\n"
    "  __shared__ int last_block;\n"
    "  __shared__ float dec_m[64], dec_l[64]; /* the merge: each split's max (then weight) and sum */\n"
    "  const int D = (int)a.D, Dv = (int)a.Dv, ns = (int)gridDim.x, sp = (int)blockIdx.x;\n"
    "  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = lane / DEC_GL, sub = lane % DEC_GL;\n"
    "  const long long b = blockIdx.z, h = blockIdx.y, kvh = h / (a.H / a.Hkv);\n"
    "  typedef typename X::T T;\n"
    "  const T *Q = (const T *)a.q + b * a.qb + h * a.qh;\n"
    "  const T *K = (const T *)a.k + b * a.kb + kvh * a.kh;\n"
    "  const T *V = (const T *)a.v + b * a.vb + kvh * a.vh;\n"
    "  T *O = (T *)a.o + b * a.ob + h * a.oh;\n"
    "  float *Ws = fsm; /* per warp: acc[Dv], max, sum */\n"
    "  const int WS = Dv + 2;\n"
    "  for (long long i = 0; i < a.Sq; i++) {\n"
    "    __syncthreads(); /* the previous row is done with Ws */\n"
    "    /* every load of an iteration is issued before the first use: q, the 4 keys, their\n"
    "     * values and mask entries arrive in one round trip */\n"
    "    float qr[MAXD / DEC_GL];\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < MAXD / DEC_GL; c++) { int d = sub + DEC_GL * c; qr[c] = d < D ? X::ld(Q, i * a.qs + d) : 0.f; }\n"
    "    const long long end = key_end(a, i), chunk = (end + ns - 1) / ns;\n"
    "    const long long j0 = sp * chunk, j1 = j0 + chunk < end ? j0 + chunk : end;\n"
    "    float acc[MAXD / 32];\n"
    "    for (int c = 0; c < MAXD / 32; c++) acc[c] = 0.f;\n"
    "    float m = NEG_INF, l = 0.f;\n"
    "    for (long long jb = j0 + warp * DEC_KW; jb < j1; jb += DEC_W * DEC_KW) {\n"
    "      const long long j = jb + grp;\n"
    "      const bool ok = j < j1;\n"
    "      float kr[MAXD / DEC_GL], vr[DEC_KW][MAXD / 32];\n"
    "      const T *krow = K + (ok ? j : j0) * a.ks;\n"
    "#pragma unroll\n"
    "      for (int c = 0; c < MAXD / DEC_GL; c++) { int d = sub + DEC_GL * c; kr[c] = ok && d < D ? X::ld(krow, d) : 0.f; }\n"
    "#pragma unroll\n"
    "      for (int q = 0; q < DEC_KW; q++) {\n"
    "        const bool vq = jb + q < j1;\n"
    "        const T *vrow = V + (vq ? jb + q : j0) * a.vs;\n"
    "#pragma unroll\n"
    "        for (int c = 0; c < MAXD / 32; c++) { int d = lane + 32 * c; vr[q][c] = vq && d < Dv ? X::ld(vrow, d) : 0.f; }\n"
    "      }\n"
    "      const float mk = ok && a.mask_kind ? mask_at<X>(a, b, h, i, j) : 0.f;\n"
    "      float dot = 0.f;\n"
    "#pragma unroll\n"
    "      for (int c = 0; c < MAXD / DEC_GL; c++) dot = fmaf(qr[c], kr[c], dot);\n"
    "      for (int off = DEC_GL / 2; off; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);\n"
    "      const float s = ok ? dot * a.scale + mk : NEG_INF;\n"
    "      float sk[DEC_KW], mx = NEG_INF;\n"
    "      for (int q = 0; q < DEC_KW; q++) sk[q] = __shfl_sync(0xffffffffu, s, q * DEC_GL), mx = fmaxf(mx, sk[q]);\n"
    "      const float mn = fmaxf(m, mx), use = mn == NEG_INF ? 0.f : mn;\n"
    "      const float alpha = expf(m - use);\n"
    "      m = mn;\n"
    "      float p[DEC_KW], ps = 0.f;\n"
    "      for (int q = 0; q < DEC_KW; q++) p[q] = expf(sk[q] - use), ps += p[q];\n"
    "      l = l * alpha + ps;\n"
    "#pragma unroll\n"
    "      for (int c = 0; c < MAXD / 32; c++) {\n"
    "        float v = acc[c] * alpha;\n"
    "        for (int q = 0; q < DEC_KW; q++) v = fmaf(p[q], vr[q][c], v);\n"
    "        acc[c] = v;\n"
    "      }\n"
    "    }\n"
    "    for (int c = 0; c < MAXD / 32; c++) { int d = lane + 32 * c; if (d < Dv) Ws[warp * WS + d] = acc[c]; }\n"
    "    if (lane == 0) Ws[warp * WS + Dv] = m, Ws[warp * WS + Dv + 1] = l;\n"
    "    __syncthreads();\n"
    "    float M = NEG_INF, L = 0.f, sc[DEC_W];\n"
    "    for (int w = 0; w < DEC_W; w++) M = fmaxf(M, Ws[w * WS + Dv]);\n"
    "    const float use = M == NEG_INF ? 0.f : M;\n"
    "    for (int w = 0; w < DEC_W; w++) sc[w] = expf(Ws[w * WS + Dv] - use), L += Ws[w * WS + Dv + 1] * sc[w];\n"
    "    if (ns == 1) {\n"
    "      for (int d = threadIdx.x; d < Dv; d += blockDim.x) {\n"
    "        float A = 0.f;\n"
    "        for (int w = 0; w < DEC_W; w++) A = fmaf(Ws[w * WS + d], sc[w], A);\n"
    "        X::st(O, i * a.os + d, L > 0.f ? A / L : 0.f);\n"
    "      }\n"
    "      continue;\n"
    "    }\n"
    "    const long long row = (b * a.H + h) * a.Sq + i;\n"
    "    float *part = a.part + (row * ns + sp) * WS;\n"
    "    for (int d = threadIdx.x; d < Dv; d += blockDim.x) {\n"
    "      float A = 0.f;\n"
    "      for (int w = 0; w < DEC_W; w++) A = fmaf(Ws[w * WS + d], sc[w], A);\n"
    "      part[d] = A;\n"
    "    }\n"
    "    if (threadIdx.x == 0) part[Dv] = M, part[Dv + 1] = L;\n"
    "    __threadfence(); /* the partial is visible before the counter says so */\n"
    "    __syncthreads();\n"
    "    unsigned *count = a.count;\n"
    "    if (threadIdx.x == 0) last_block = atomicAdd(count + row, 1u) == (unsigned)ns - 1u;\n"
    "    __syncthreads();\n"
    "    if (!last_block) continue;\n"
    "    /* the row's last block: every split's partial is in memory (read past L1); the splits'\n"
    "     * maxes and sums are loaded by one thread each, then every weight is computed once */\n"
    "    const float *P = a.part + row * ns * WS;\n"
    "    for (int t = threadIdx.x; t < ns; t += blockDim.x) dec_m[t] = __ldcg(P + t * WS + Dv), dec_l[t] = __ldcg(P + t * WS + Dv + 1);\n"
    "    __syncthreads();\n"
    "    float GM = NEG_INF;\n"
    "    for (int t = 0; t < ns; t++) GM = fmaxf(GM, dec_m[t]);\n"
    "    const float guse = GM == NEG_INF ? 0.f : GM;\n"
    "    __syncthreads(); /* every max is read before the weights replace them */\n"
    "    for (int t = threadIdx.x; t < ns; t += blockDim.x) dec_m[t] = expf(dec_m[t] - guse);\n"
    "    __syncthreads();\n"
    "    float GL = 0.f;\n"
    "    for (int t = 0; t < ns; t++) GL += dec_l[t] * dec_m[t];\n"
    "    for (int d = threadIdx.x; d < Dv; d += blockDim.x) {\n"
    "      float A = 0.f;\n"
    "#pragma unroll 8\n"
    "      for (int t = 0; t < ns; t++) A = fmaf(__ldcg(P + t * WS + d), dec_m[t], A);\n"
    "      X::st(O, i * a.os + d, GL > 0.f ? A / GL : 0.f);\n"
    "    }\n"
    "    if (threadIdx.x == 0) count[row] = 0u; /* ready for the next call */\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_f32_64(AttnArgs a) { use_lens(a, 0); attn_dec<TF32, 64>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_f32_128(AttnArgs a) { use_lens(a, 0); attn_dec<TF32, 128>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_f32_256(AttnArgs a) { use_lens(a, 0); attn_dec<TF32, 256>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_bf16_64(AttnArgs a) { use_lens(a, 0); attn_dec<TBF16, 64>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_bf16_128(AttnArgs a) { use_lens(a, 0); attn_dec<TBF16, 128>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_bf16_256(AttnArgs a) { use_lens(a, 0); attn_dec<TBF16, 256>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_f16_64(AttnArgs a) { use_lens(a, 0); attn_dec<TF16, 64>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_f16_128(AttnArgs a) { use_lens(a, 0); attn_dec<TF16, 128>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_dec_f16_256(AttnArgs a) { use_lens(a, 0); attn_dec<TF16, 256>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_mma_bf16_d64(AttnArgs a) { if (use_lens(a, 64)) attn_mma<TBF16, 64>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_mma_bf16_d128(AttnArgs a) { if (use_lens(a, 64)) attn_mma<TBF16, 128>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_mma_f16_d64(AttnArgs a) { if (use_lens(a, 64)) attn_mma<TF16, 64>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_mma_f16_d128(AttnArgs a) { if (use_lens(a, 64)) attn_mma<TF16, 128>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256, 2) attn_simt_f32_d64(AttnArgs a) { use_lens(a, 0); attn_simt<64, 4>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256, 1) attn_simt_f32_d128(AttnArgs a) { use_lens(a, 0); attn_simt<128, 4>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) attn_simt_f32_d64_r16(AttnArgs a) { use_lens(a, 0); attn_simt<64, 1>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_gen_f32(AttnArgs a) { if (use_lens(a, 4)) attn_gen<TF32>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_gen_bf16(AttnArgs a) { if (use_lens(a, 4)) attn_gen<TBF16>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(128) attn_gen_f16(AttnArgs a) { if (use_lens(a, 4)) attn_gen<TF16>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) attn_mask_cls_f32(AttnArgs a) { if (use_lens(a, 0)) mask_cls<TF32>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) attn_mask_cls_bf16(AttnArgs a) { if (use_lens(a, 0)) mask_cls<TBF16>(a); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) attn_mask_cls_f16(AttnArgs a) { if (use_lens(a, 0)) mask_cls<TF16>(a); }\n";

const char *gr_cuda_attention_source(void) { return attn_src; }

/* The kernel arguments, laid out as the source's AttnArgs. */
typedef struct {
    const void *q, *k, *v, *mask;
    void *o;
    long long B, H, Hkv, Sq, Sk, D, Dv;
    long long ms0, ms1, ms2, ms3;
    float scale;
    int causal;
    int mask_kind;
    long long qb, qh, qs, kb, kh, ks, vb, vh, vs, ob, oh, os; /* strides (elements): batch, head, seq */
    void *trows, *tcls; /* the mask's tile table, NULL: none */
    long long tnq, tnk, tbs, ths;
    const void *lens; /* generic: the length record (kir.h lens_arg), NULL: none */
    const void *klen; /* the key length in device memory (kir.h key_len_arg), NULL: none */
    long long Lk;     /* set on the device */
    void *part;       /* attn_dec's split partials, NULL: one split */
    int nsplit;
    void *count;      /* attn_dec's per-row counters of splits done */
} attn_args;

enum {
    K_MMA_BF16_64, K_MMA_BF16_128, K_MMA_F16_64, K_MMA_F16_128, K_GEN_F32, K_GEN_BF16, K_GEN_F16,
    K_CLS_F32, K_CLS_BF16, K_CLS_F16, /* the mask's tile table (mask_cls) */
    /* decode: keys split over blocks, merged by the last; head dims up to 64, 128, 256 */
    K_DEC_F32_64, K_DEC_F32_128, K_DEC_F32_256, K_DEC_BF16_64, K_DEC_BF16_128, K_DEC_BF16_256,
    K_DEC_F16_64, K_DEC_F16_128, K_DEC_F16_256,
    K_SIMT_F32_64, K_SIMT_F32_128, /* f32 prefill, head dims 64 and 128 */
    K_SIMT_F32_64_R16,             /* the same with 16 query rows a block: small grids */
    K_COUNT
};
static const char *const kernel_names[K_COUNT] = {"attn_mma_bf16_d64", "attn_mma_bf16_d128", "attn_mma_f16_d64",
                                                  "attn_mma_f16_d128", "attn_gen_f32",      "attn_gen_bf16",
                                                  "attn_gen_f16",      "attn_mask_cls_f32", "attn_mask_cls_bf16",
                                                  "attn_mask_cls_f16", "attn_dec_f32_64",   "attn_dec_f32_128",
                                                  "attn_dec_f32_256",  "attn_dec_bf16_64",  "attn_dec_bf16_128",
                                                  "attn_dec_bf16_256", "attn_dec_f16_64",   "attn_dec_f16_128",
                                                  "attn_dec_f16_256", "attn_simt_f32_d64", "attn_simt_f32_d128",
                                                  "attn_simt_f32_d64_r16"};
_Static_assert(sizeof kernel_names / sizeof kernel_names[0] == K_COUNT, "one name per attention kernel");

struct gr_cuda_attn {
    CUmodule module;
    CUfunction fn[K_COUNT];
    size_t smem_set[K_COUNT]; /* dynamic shared memory the function was allowed so far */
    /* The mask tile tables' device memory, one per context like the cuBLASLt workspace (the
     * calls of a context run one after another on its stream). It grows outside capture only,
     * and a grown-out buffer stays allocated until the context goes: a graph captured
     * earlier still writes and reads it. */
    CUdeviceptr table;
    size_t table_bytes;
    GR_VEC(CUdeviceptr) retired;
    /* The tables of mask groups (gr_libcall.mask_group 1..): a group's first call grows and
     * fills group[g - 1] and records what it classified (valid, key); the group's later calls
     * read it when that key is theirs. Both happen when the calls are issued, in stream order,
     * so a captured graph holds the same pairing as an eager run. */
    struct {
        CUdeviceptr table;
        size_t bytes;
        bool valid;
        long long key[11]; /* mask address and strides, tile geometry, mask kind, dtype */
    } group[GR_ATTN_MASK_GROUPS];
    /* attn_dec's split partials, like the mask table: one per context, grown outside capture
     * only (retired buffers stay until the context goes: a captured graph still uses them) */
    CUdeviceptr part;
    size_t part_bytes;
    /* its per-row counters, apart from the partials so that they stay zero between calls (each
     * row's last block resets its own; memory grown later is cleared when allocated) */
    CUdeviceptr count;
    size_t count_bytes;
};

void gr_cuda_attention_destroy(gr_cuda_ctx *c) {
    if (!c->attn) return;
    if (c->attn->module) c->cu->cuModuleUnload(c->attn->module);
    if (c->attn->table) c->cu->cuMemFree(c->attn->table);
    if (c->attn->part) c->cu->cuMemFree(c->attn->part);
    if (c->attn->count) c->cu->cuMemFree(c->attn->count);
    for (int g = 0; g < GR_ATTN_MASK_GROUPS; g++)
        if (c->attn->group[g].table) c->cu->cuMemFree(c->attn->group[g].table);
    for (int i = 0; i < c->attn->retired.len; i++) c->cu->cuMemFree(c->attn->retired.data[i]);
    gr_vec_free(&c->attn->retired);
    gr_free(c->attn, sizeof *c->attn);
    c->attn = NULL;
}

/* Compiles and loads the module on first use (outside any capture's rules: relaxed mode). */
static gr_status attn_state(gr_cuda_ctx *c, struct gr_cuda_attn **out) {
    if (c->attn) return *out = c->attn, GR_OK;
    struct gr_cuda_attn *s = gr_calloc(1, sizeof *s);
    if (!s) return GR_ERR_NOMEM;
    gr_status st = gr_cuda_fixed_module(c, attn_src, "graft_attention", "attention kernels", K_COUNT, kernel_names, &s->module, s->fn);
    if (st != GR_OK) {
        gr_free(s, sizeof *s);
        return st;
    }
    c->attn = s;
    *out = s;
    return GR_OK;
}

/* The tensor-core kernel's tiles (BM = BN), its MAXT, and the least table memory taken. */
enum { ATT_TILE = 64, ATT_MAXT = 1024, ATT_TABLE_MIN = 1 << 20 };

/* Grows a context buffer of the attention kernels (a mask tile table, the decode kernel's
 * partials or counters) to `bytes` (cleared when `clear`), outside capture only: false in *ok
 * where it would have to grow during capture (a capture never allocates). A grown-out buffer
 * is retired, not freed: a graph captured earlier still uses it. */
static gr_status grow_buffer(gr_cuda_ctx *c, struct gr_cuda_attn *s, CUstream stream, const gr_libcall *call, CUdeviceptr *buf,
                             size_t *have, size_t bytes, bool clear, const char *what, bool *ok) {
    *ok = true;
    if (bytes <= *have) return GR_OK;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    GR_CU_CHECK(c->cu->cuStreamIsCapturing(stream, &cap));
    if (cap != CU_STREAM_CAPTURE_STATUS_NONE) return *ok = false, GR_OK;
    GR_TRY(gr_vec_reserve(&s->retired, s->retired.len + 1)); /* so keeping the old one cannot fail */
    size_t want = bytes < ATT_TABLE_MIN ? ATT_TABLE_MIN : bytes;
    CUdeviceptr p;
    gr_status st = GR_CU_STATUS(c->cu->cuMemAlloc(&p, want));
    if (st != GR_OK) return gr_error_prefix(st, "attention %s: %zu bytes of %s", call->name, want, what);
    if (clear && (st = GR_CU_STATUS(c->cu->cuMemsetD8Async(p, 0, want, stream))) != GR_OK) {
        c->cu->cuMemFree(p);
        return gr_error_prefix(st, "attention %s: clearing the %s", call->name, what);
    }
    if (*buf) s->retired.data[s->retired.len++] = *buf;
    *buf = p;
    *have = want;
    return GR_OK;
}

/* The mask's tile table for the tensor-core kernel: mask_cls launched on `stream` ahead of
 * the attention, writing one 64 x 64 tile's live rows (8 bytes) and class (1 byte) per
 * (mask plane, query tile, key tile) into table memory: the context's own table, or a mask
 * group's (gr_libcall.mask_group). Leaves a->tcls NULL (every tile then reads the mask:
 * slower, the same result) where no table can be had: more key tiles than a block holds
 * classes for, a grid past the launch limits, or a table larger than the memory held while
 * the stream captures (a capture never allocates). A group's later call launches nothing
 * when the group's first call classified this very mask (address and geometry) into the
 * group's table; otherwise it classifies into the context's own table like a lone call. */
static gr_status mask_table(gr_cuda_ctx *c, struct gr_cuda_attn *s, CUstream stream, const gr_libcall *call,
                            attn_args *a) {
    const int64_t nq = (call->seq_q + ATT_TILE - 1) / ATT_TILE, nk = (call->seq_k + ATT_TILE - 1) / ATT_TILE;
    const int64_t mb = a->ms0 ? call->batch : 1, mh = a->ms1 ? call->heads : 1; /* each <= 65535 (checked) */
    int64_t tiles, bytes;
    const int g = call->mask_group >= 1 && call->mask_group <= GR_ATTN_MASK_GROUPS ? call->mask_group : 0;
    if (g && call->mask_group_first) s->group[g - 1].valid = false;
    if (nk > ATT_MAXT || nq > 65535 || mb * mh > 65535) return GR_OK;
    if (gr_mul_overflow(mb * mh, nq, &tiles) || gr_mul_overflow(tiles, nk, &tiles) || gr_mul_overflow(tiles, 9, &bytes))
        return GR_OK;
    const long long key[11] = {(long long)(uintptr_t)a->mask, a->ms0, a->ms1, a->ms2, a->ms3, nq, nk, mb, mh,
                               a->mask_kind, (long long)call->dtype};
    const bool reuse =
        g && !call->mask_group_first && s->group[g - 1].valid && !memcmp(s->group[g - 1].key, key, sizeof key);
    if (reuse) {
        a->trows = (void *)(uintptr_t)s->group[g - 1].table; /* filled by the group's first call */
    } else {
        const bool own = !g || !call->mask_group_first;
        CUdeviceptr *table = own ? &s->table : &s->group[g - 1].table;
        size_t *have = own ? &s->table_bytes : &s->group[g - 1].bytes;
        bool ok;
        GR_TRY(grow_buffer(c, s, stream, call, table, have, (size_t)bytes, false, "mask tile table", &ok));
        if (!ok) return GR_OK;
        a->trows = (void *)(uintptr_t)*table;
    }
    a->tcls = (char *)a->trows + tiles * 8;
    a->tnq = nq, a->tnk = nk;
    a->tbs = a->ms0 ? mh : 0, a->ths = a->ms1 ? 1 : 0;
    if (reuse) {
        c->kstats.mask_tables_reused++;
        return GR_OK;
    }
    const int kind = a->mask_kind == 1 ? K_CLS_F32 : call->dtype == GR_BF16 ? K_CLS_BF16 : K_CLS_F16;
    void *params[1] = {a};
    gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(s->fn[kind], (unsigned)nk, (unsigned)nq, (unsigned)(mb * mh), 256, 1,
                                                      1, 0, stream, params, NULL));
    if (st != GR_OK) return gr_error_prefix(st, "attention %s (%s)", call->name, kernel_names[kind]);
    if (g && call->mask_group_first) {
        s->group[g - 1].valid = true;
        memcpy(s->group[g - 1].key, key, sizeof key);
    }
    return GR_OK;
}

/* Query rows up to which the decode kernel runs (a step of one token, or a few speculative ones). */
enum { ATT_DEC_MAX_SQ = 8, ATT_DEC_MIN_KEYS = 16, ATT_DEC_MAX_SPLITS = 64 };

/* The decode kernel (attn_dec): the keys of each (batch, head) split over enough blocks to
 * fill the device twice (at least ATT_DEC_MIN_KEYS keys a split, at most ATT_DEC_MAX_SPLITS);
 * the last block of a row (a counter per row) merges the splits' partials. Both buffers are
 * the context's and grow outside capture only: one split (no partials) where they cannot. */
static gr_status attn_decode(gr_cuda_ctx *c, struct gr_cuda_attn *s, CUstream stream, const gr_libcall *call, attn_args *a) {
    const int64_t dmax = call->head_dim > call->head_dim_v ? call->head_dim : call->head_dim_v;
    const int kind = (call->dtype == GR_F32 ? K_DEC_F32_64 : call->dtype == GR_BF16 ? K_DEC_BF16_64 : K_DEC_F16_64) +
                     (dmax <= 64 ? 0 : dmax <= 128 ? 1 : 2);
    int64_t base = call->batch * call->heads, sm = c->sm_count > 0 ? c->sm_count : 1;
    int64_t ns = (2 * sm + base - 1) / base, by_keys = (call->seq_k + ATT_DEC_MIN_KEYS - 1) / ATT_DEC_MIN_KEYS;
    if (ns > by_keys) ns = by_keys;
    if (ns > ATT_DEC_MAX_SPLITS) ns = ATT_DEC_MAX_SPLITS;
    if (ns < 1) ns = 1;
    int64_t rows = 0, count_bytes = 0, bytes = 0;
    if (ns > 1 && (gr_mul_overflow(base, call->seq_q, &rows) || gr_mul_overflow(rows, 4, &count_bytes) ||
                   gr_mul_overflow(rows, ns, &bytes) || gr_mul_overflow(bytes, (call->head_dim_v + 2) * 4, &bytes)))
        ns = 1;
    bool ok = true;
    if (ns > 1) GR_TRY(grow_buffer(c, s, stream, call, &s->count, &s->count_bytes, (size_t)count_bytes, true, "decode counters", &ok));
    if (ns > 1 && ok) GR_TRY(grow_buffer(c, s, stream, call, &s->part, &s->part_bytes, (size_t)bytes, false, "decode partials", &ok));
    if (!ok) ns = 1;
    a->nsplit = (int)ns;
    a->count = ns > 1 ? (void *)(uintptr_t)s->count : NULL;
    a->part = ns > 1 ? (void *)(uintptr_t)s->part : NULL;
    size_t smem = sizeof(float) * (size_t)(4 * (call->head_dim_v + 2));
    void *params[1] = {a};
    gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(s->fn[kind], (unsigned)ns, (unsigned)call->heads, (unsigned)call->batch,
                                                      128, 1, 1, (unsigned)smem, stream, params, NULL));
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "attention %s (%s)", call->name, kernel_names[kind]);
}

gr_status gr_cuda_attention(gr_cuda_ctx *c, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    if (n_args < GR_LIB_ATTENTION_NARGS)
        return gr_error(GR_ERR_INVALID, "cuda: attention %s: %d arguments, expected %d", call->name, n_args,
                        GR_LIB_ATTENTION_NARGS);
    const int lens_at = gr_libcall_attention_lens_index(call);
    if (call->lens_arg && (n_args <= lens_at || !args[lens_at].ptr))
        return gr_error(GR_ERR_INVALID, "cuda: attention %s: its length record is missing", call->name);
    if (call->key_len_arg && (n_args <= GR_LIB_ATTENTION_KEY_LEN || !args[GR_LIB_ATTENTION_KEY_LEN].ptr))
        return gr_error(GR_ERR_INVALID, "cuda: attention %s: its key length is missing", call->name);
    if (call->batch <= 0 || call->heads <= 0 || call->seq_q <= 0 || call->head_dim_v <= 0) return GR_OK;
    if (call->kv_heads <= 0 || call->heads % call->kv_heads)
        return gr_error(GR_ERR_INVALID, "cuda: attention %s: %lld heads over %lld kv heads", call->name,
                        (long long)call->heads, (long long)call->kv_heads);
    if (call->head_dim > 256 || call->head_dim_v > 256 || call->head_dim <= 0)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: attention %s: head_dim %lld / %lld (the kernels take 1..256)",
                        call->name, (long long)call->head_dim, (long long)call->head_dim_v);
    if (call->heads > 65535 || call->batch > 65535)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: attention %s: more than 65535 heads or batches", call->name);
    int kind;
    bool mma = call->head_dim == call->head_dim_v && (call->head_dim == 64 || call->head_dim == 128);
    switch (call->dtype) {
    case GR_BF16: kind = mma ? (call->head_dim == 64 ? K_MMA_BF16_64 : K_MMA_BF16_128) : K_GEN_BF16; break;
    case GR_F16: kind = mma ? (call->head_dim == 64 ? K_MMA_F16_64 : K_MMA_F16_128) : K_GEN_F16; break;
    case GR_F32: kind = mma ? (call->head_dim == 64 ? K_SIMT_F32_64 : K_SIMT_F32_128) : K_GEN_F32; break;
    default:
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: attention %s: %s inputs (f32, f16, bf16 only)", call->name,
                        gr_dtype_name(call->dtype));
    }
    if (call->has_mask && call->mask_dtype != GR_F32 && call->mask_dtype != call->dtype)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: attention %s: a %s mask for %s inputs", call->name,
                        gr_dtype_name(call->mask_dtype), gr_dtype_name(call->dtype));
    struct gr_cuda_attn *s = NULL;
    GR_TRY(attn_state(c, &s));
    attn_args a = {
        .q = args[0].ptr, .k = args[1].ptr, .o = args[2].ptr, .v = args[3].ptr, .mask = call->has_mask ? args[4].ptr : NULL,
        .B = call->batch, .H = call->heads, .Hkv = call->kv_heads, .Sq = call->seq_q, .Sk = call->seq_k,
        .D = call->head_dim, .Dv = call->head_dim_v,
        .ms0 = call->mask_stride[0], .ms1 = call->mask_stride[1], .ms2 = call->mask_stride[2], .ms3 = call->mask_stride[3],
        .scale = (float)call->alpha, .causal = call->causal,
        .mask_kind = !call->has_mask ? 0 : call->mask_dtype == GR_F32 ? 1 : 2,
        .qb = call->q_stride[0], .qh = call->q_stride[1], .qs = call->q_stride[2],
        .kb = call->k_stride[0], .kh = call->k_stride[1], .ks = call->k_stride[2],
        .vb = call->v_stride[0], .vh = call->v_stride[1], .vs = call->v_stride[2],
        .ob = call->o_stride[0], .oh = call->o_stride[1], .os = call->o_stride[2],
        .lens = call->lens_arg ? args[lens_at].ptr : NULL,
        .klen = call->key_len_arg ? args[GR_LIB_ATTENTION_KEY_LEN].ptr : NULL,
    };
    for (int d = 0; d < 3; d++)
        if (call->q_stride[d] < 0 || call->k_stride[d] < 0 || call->v_stride[d] < 0 || call->o_stride[d] < 0)
            return gr_error(GR_ERR_INVALID, "cuda: attention %s: negative stride", call->name);
    if (a.mask_kind && !a.mask) return gr_error(GR_ERR_INVALID, "cuda: attention %s: mask argument missing", call->name);
    if (call->seq_q <= ATT_DEC_MAX_SQ) return attn_decode(c, s, stream, call, &a);
    size_t smem;
    unsigned rows_per_block;
    /* the tiled kernels move 16 bytes (8 half or 4 f32 elements) at a time: every pointer
     * 16-byte aligned and every stride a multiple of that keeps each row's start aligned */
    uintptr_t any = (uintptr_t)args[0].ptr | (uintptr_t)args[1].ptr | (uintptr_t)args[2].ptr | (uintptr_t)args[3].ptr;
    long long strides = a.qb | a.qh | a.qs | a.kb | a.kh | a.ks | a.vb | a.vh | a.vs | a.ob | a.oh | a.os;
    if (mma && ((any & 15u) || (strides & (call->dtype == GR_F32 ? 3 : 7)))) {
        mma = false;
        kind = call->dtype == GR_BF16 ? K_GEN_BF16 : call->dtype == GR_F16 ? K_GEN_F16 : K_GEN_F32;
    }
    if (mma && a.mask_kind) GR_TRY(mask_table(c, s, stream, call, &a));
    unsigned threads = 128;
    if (mma && call->dtype == GR_F32) {
        /* f32 (attn_simt): 64 query rows a block, or 16 where 64-row blocks would leave SMs idle
         * (head dim 64: b1 h12 s128 is 24 blocks of 64 rows on the H100's 132 SMs); Q in rows of
         * head_dim + 4 floats, K the same twice (double buffered), V twice in rows of head_dim, P
         * in rows of 80; then the tile classes and rows-seen bits */
        const int64_t blocks64 = (call->seq_q + 63) / 64 * call->heads * call->batch;
        rows_per_block = kind == K_SIMT_F32_64 && blocks64 < (int64_t)(c->sm_count > 0 ? c->sm_count : 132) ? 16 : 64;
        if (rows_per_block == 16) kind = K_SIMT_F32_64_R16;
        smem = sizeof(float) * ((size_t)(rows_per_block + 2 * 64) * (size_t)(call->head_dim + 4) +
                                (size_t)(2 * 64) * (size_t)call->head_dim + rows_per_block * 80) + 1024 + 8;
        threads = 256;
    } else if (mma) {
        /* Q, K and V twice (double buffered), each 64 rows of head_dim + 8; the tile classes
         * (1024 bytes) and the rows-seen bits after them (kernel source) */
        smem = (size_t)(64 + 2 * 64 + 2 * 64) * (size_t)(call->head_dim + 8) * 2 + 1024 + 8;
        rows_per_block = 64;
    } else {
        smem = sizeof(float) * (size_t)(32 * (call->head_dim + 1) + 32 * call->head_dim_v + 4 * call->head_dim);
        rows_per_block = 4;
    }
    if (smem > 48 * 1024 && s->smem_set[kind] < smem) {
        GR_CU_CHECK(c->cu->cuFuncSetAttribute(s->fn[kind], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
        s->smem_set[kind] = smem;
    }
    unsigned gx = (unsigned)((call->seq_q + rows_per_block - 1) / rows_per_block);
    void *params[1] = {&a};
    gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(s->fn[kind], gx, (unsigned)call->heads, (unsigned)call->batch, threads, 1,
                                                      1, (unsigned)smem, stream, params, NULL));
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "attention %s (%s)", call->name, kernel_names[kind]);
}
