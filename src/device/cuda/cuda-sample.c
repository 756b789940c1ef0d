/* device/cuda/cuda-sample — the sample library call (GR_LIB_SAMPLE, kir.h): one token per row.
 *
 * One block of 1024 threads per row runs gr_sample_row's definition (codegen/sample.c) pass by
 * pass, with no sort:
 *   1. z = logit / temperature (f32, IEEE division, -0 -> +0, NaN -> -inf) and its max m; the
 *      z row is kept in shared memory when it fits (vocab <= ~52k floats beside the
 *      histograms: GPT-2's 50257 does), else every pass recomputes it from global memory;
 *   2. top-k: the k-th largest key by radix selection, 8 bits a pass (4 passes), from
 *      histograms of counts; top-p: the kept weight total, then 4 passes of histograms of
 *      integer weights q = floor(expf(z - m) * 2^32);
 *   3. the draw: each thread sums the kept weights of a contiguous chunk of ids, a block scan
 *      of the chunk sums (integers: exact, any order) finds the chunk holding
 *      x = floor(bits * T / 2^64), and its thread walks the chunk in id order.
 * Histograms are privatized over 8 groups of warps (shared-memory atomics on few bins would
 * serialize: the top byte of a float key takes only a handful of values), then summed; the
 * digit is picked by warp 0 with a shuffle scan over 8 bins a lane. Integer weights make every
 * sum exact, so the result is gr_sample_row's bit for bit except where the device's expf and
 * the host's differ by an ulp at a boundary. Parameters the host refuses (temperature or
 * top_p <= 0, top_k < 0) cannot be reported from a kernel: the token is then 0.
 * Compiled once per context with NVRTC (gr_cuda_sample_source; test_render compiles it). */
#include "device/cuda/cuda-impl.h"
#include <stdio.h>
#include <string.h>

static const char sample_src[] =
    "typedef unsigned int u32;\n"
    "typedef unsigned long long u64;\n"
    "struct SampleArgs {\n"
    "  const void *x; const long long *step; long long *out; const long long *ints; const float *floats;\n"
    "  long long rows, V; int dtype; /* 0 f32, 1 f16, 2 bf16 */ int cached;\n"
    "};\n"
    "#define NT 1024\n"
    "#define NSUB 8\n"
    "#define FULL 0xffffffffu\n"
    "#define NEG_INF (-__int_as_float(0x7f800000))\n"
    "__device__ __forceinline__ float zval(const SampleArgs &a, long long row, long long i, float temp) {\n"
    "  long long at = row * a.V + i;\n"
    "  float x;\n"
    "  if (a.dtype == 0) x = ((const float *)a.x)[at];\n"
    "  else {\n"
    "    unsigned short h = ((const unsigned short *)a.x)[at];\n"
    "    if (a.dtype == 1) asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(x) : \"h\"(h));\n"
    "    else x = __uint_as_float(((u32)h) << 16);\n"
    "  }\n"
    "  float z = __fadd_rn(__fdiv_rn(x, temp), 0.0f);\n"
    "  return z != z ? NEG_INF : z;\n"
    "}\n"
    "__device__ __forceinline__ float zat(const SampleArgs &a, const float *zs, long long row, long long i, float temp) {\n"
    "  return a.cached ? zs[i] : zval(a, row, i, temp);\n"
    "}\n"
    "__device__ __forceinline__ u32 key_of(float z) {\n"
    "  u32 u = __float_as_uint(z);\n"
    "  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);\n"
    "}\n"
    "__device__ __forceinline__ u64 weight_of(float z, float m) {\n"
    "  if (z == m) return 1ull << 32;\n"
    "  float w = expf(__fsub_rn(z, m));\n"
    "  return (u64)__fmul_rn(w, 4294967296.0f);\n"
    "}\n"
    "__device__ __forceinline__ u64 rbits(u64 seed, u64 c) {\n"
    "  u64 x = seed * 0x9E3779B97F4A7C15ull + c;\n"
    "  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 27; x *= 0x94D049BB133111EBull; x ^= x >> 31;\n"
    "  return x;\n"
    "}\n"
    "__device__ float block_max(float v, float *sh) {\n"
    "  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));\n"
    "  int w = threadIdx.x >> 5, l = threadIdx.x & 31;\n"
    "  __syncthreads();\n"
    "  if (l == 0) sh[w] = v;\n"
    "  __syncthreads();\n"
    "  v = sh[l];\n"
    "  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));\n"
    "  return v;\n"
    "}\n"
    "/* exclusive scan of v over the block in thread order; *total: the sum of all */\n"
    "__device__ u64 block_scan(u64 v, u64 *sh, u64 *total) {\n"
    "  int w = threadIdx.x >> 5, l = threadIdx.x & 31;\n"
    "  u64 inc = v;\n"
    "  for (int o = 1; o < 32; o <<= 1) { u64 t = __shfl_up_sync(FULL, inc, o); if (l >= o) inc += t; }\n"
    "  __syncthreads();\n"
    "  if (l == 31) sh[w] = inc;\n"
    "  __syncthreads();\n"
    "  u64 ws = sh[l], wi = ws;\n"
    "  for (int o = 1; o < 32; o <<= 1) { u64 t = __shfl_up_sync(FULL, wi, o); if (l >= o) wi += t; }\n"
    "  u64 before = __shfl_sync(FULL, wi - ws, w);\n"
    "  *total = __shfl_sync(FULL, wi, 31);\n"
    "  return before + inc - v;\n"
    "}\n"
    "/* histogram of the keys >= lo whose bits above shift + 8 equal prefix, by the byte at shift:\n"
    " * counts, or weights */\n"
    "__device__ void hist_pass(const SampleArgs &a, const float *zs, long long row, float temp, float m, bool weighted, u32 lo,\n"
    "                          u32 prefix, u32 high, int shift, u64 *sub, u64 *h) {\n"
    "  for (int i = threadIdx.x; i < NSUB * 256; i += NT) sub[i] = 0;\n"
    "  __syncthreads();\n"
    "  u64 *mine = sub + ((threadIdx.x >> 5) % NSUB) * 256;\n"
    "  for (long long i = threadIdx.x; i < a.V; i += NT) {\n"
    "    float z = zat(a, zs, row, i, temp);\n"
    "    u32 k = key_of(z);\n"
    "    if (k >= lo && (k & high) == prefix) atomicAdd(&mine[(k >> shift) & 255u], weighted ? weight_of(z, m) : 1ull);\n"
    "  }\n"
    "  __syncthreads();\n"
    "  for (int b = threadIdx.x; b < 256; b += NT) {\n"
    "    u64 s = 0;\n"
    "    for (int j = 0; j < NSUB; j++) s += sub[j * 256 + b];\n"
    "    h[b] = s;\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
    "/* warp 0: the highest byte d with above + sum(h[d..255]) >= target (0 if none), into the prefix */\n"
    "__device__ void pick_digit(const u64 *h, double target, int shift, u32 *prefix, u64 *above) {\n"
    "  int l = threadIdx.x;\n"
    "  u64 chunk = 0;\n"
    "  for (int i = 0; i < 8; i++) chunk += h[255 - l * 8 - i];\n"
    "  u64 inc = chunk;\n"
    "  for (int o = 1; o < 32; o <<= 1) { u64 t = __shfl_up_sync(FULL, inc, o); if (l >= o) inc += t; }\n"
    "  u64 ab = *above;\n"
    "  unsigned hit = __ballot_sync(FULL, (double)(ab + inc) >= target);\n"
    "  int first = hit ? __ffs(hit) - 1 : 31;\n"
    "  if (l == first) {\n"
    "    u64 acc = ab + inc - chunk;\n"
    "    int d = 255 - l * 8;\n"
    "    for (int i = 0; i < 8; i++, d--) {\n"
    "      if ((double)(acc + h[d]) >= target || d == 0) break;\n"
    "      acc += h[d];\n"
    "    }\n"
    "    *prefix |= (u32)d << shift;\n"
    "    *above = acc;\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(NT) graft_sample(const SampleArgs a) {\n"
    "  extern __shared__ float zs[];\n"
    "  __shared__ u64 sub[NSUB * 256];\n"
    "  __shared__ u64 h[256];\n"
    "  __shared__ u64 red[32];\n"
    "  __shared__ float redf[32];\n"
    "  __shared__ u32 s_prefix;\n"
    "  __shared__ u64 s_above;\n"
    "  long long row = blockIdx.x;\n"
    "  if (row >= a.rows) return;\n"
    "  const float temp = a.floats[0], top_p = a.floats[1];\n"
    "  const long long top_k = a.ints[2], V = a.V;\n"
    "  if (!(temp > 0.f) || !(top_p > 0.f) || top_k < 0) {\n"
    "    if (threadIdx.x == 0) a.out[row] = 0;\n"
    "    return;\n"
    "  }\n"
    "  float m = NEG_INF;\n"
    "  for (long long i = threadIdx.x; i < V; i += NT) {\n"
    "    float z = zval(a, row, i, temp);\n"
    "    if (a.cached) zs[i] = z;\n"
    "    m = fmaxf(m, z);\n"
    "  }\n"
    "  m = block_max(m, redf);\n"
    "  u32 lo = 0;\n"
    "  for (int sel = 0; sel < 2; sel++) {\n"
    "    double target;\n"
    "    if (sel == 0) {\n"
    "      if (!(top_k > 0 && top_k < V)) continue;\n"
    "      target = (double)top_k;\n"
    "    } else {\n"
    "      if (!(top_p < 1.f)) continue;\n"
    "      u64 part = 0, tot;\n"
    "      for (long long i = threadIdx.x; i < V; i += NT) {\n"
    "        float z = zat(a, zs, row, i, temp);\n"
    "        if (key_of(z) >= lo) part += weight_of(z, m);\n"
    "      }\n"
    "      block_scan(part, red, &tot);\n"
    "      target = (double)top_p * (double)tot;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) s_prefix = 0, s_above = 0;\n"
    "    for (int shift = 24; shift >= 0; shift -= 8) {\n"
    "      __syncthreads();\n"
    "      u32 high = shift == 24 ? 0u : ~0u << (shift + 8);\n"
    "      hist_pass(a, zs, row, temp, m, sel == 1, sel == 1 ? lo : 0u, s_prefix, high, shift, sub, h);\n"
    "      if (threadIdx.x < 32) pick_digit(h, target, shift, &s_prefix, &s_above);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (s_prefix > lo) lo = s_prefix;\n"
    "  }\n"
    "  /* the draw, in id order: a contiguous chunk of ids per thread */\n"
    "  long long chunk = (V + NT - 1) / NT, b0 = threadIdx.x * chunk, b1 = b0 + chunk < V ? b0 + chunk : V;\n"
    "  u64 part = 0, kept;\n"
    "  for (long long i = b0; i < b1; i++) {\n"
    "    float z = zat(a, zs, row, i, temp);\n"
    "    if (key_of(z) >= lo) part += weight_of(z, m);\n"
    "  }\n"
    "  u64 before = block_scan(part, red, &kept);\n"
    "  u64 counter = ((u64)a.step[0] - (u64)a.ints[1]) * (u64)a.rows + (u64)row;\n"
    "  u64 x = __umul64hi(rbits((u64)a.ints[0], counter), kept);\n"
    "  if (part && before <= x && x < before + part) {\n"
    "    u64 run = before;\n"
    "    for (long long i = b0; i < b1; i++) {\n"
    "      float z = zat(a, zs, row, i, temp);\n"
    "      if (key_of(z) < lo) continue;\n"
    "      u64 w = weight_of(z, m);\n"
    "      if (!w) continue;\n"
    "      run += w;\n"
    "      if (x < run) { a.out[row] = i; break; }\n"
    "    }\n"
    "  }\n"
    "}\n";

const char *gr_cuda_sample_source(void) { return sample_src; }

/* The kernel arguments, laid out as the source's SampleArgs. */
typedef struct {
    const void *x;
    const long long *step;
    long long *out;
    const long long *ints;
    const float *floats;
    long long rows, V;
    int dtype, cached;
} sample_args;

struct gr_cuda_sample {
    CUmodule module;
    CUfunction fn;
    size_t smem_set; /* dynamic shared memory the function was allowed so far */
    bool smem_refused; /* the driver refused the z cache: every launch reads global memory */
};

/* Threads of a block and the bytes the kernel's static shared memory takes (sub, h, red, redf,
 * the prefix and above): what the z cache leaves of the opt-in limit. */
enum { SAMPLE_NT = 1024, SAMPLE_STATIC_SMEM = 8 * 256 * 8 + 256 * 8 + 32 * 8 + 32 * 4 + 16, SAMPLE_SMEM_OPTIN = 227 * 1024 };

void gr_cuda_sample_destroy(gr_cuda_ctx *c) {
    if (!c->sample) return;
    if (c->sample->module) c->cu->cuModuleUnload(c->sample->module);
    gr_free(c->sample, sizeof *c->sample);
    c->sample = NULL;
}

static gr_status sample_state(gr_cuda_ctx *c, struct gr_cuda_sample **out) {
    if (c->sample) return *out = c->sample, GR_OK;
    struct gr_cuda_sample *s = gr_calloc(1, sizeof *s);
    if (!s) return GR_ERR_NOMEM;
    static const char *const names[] = {"graft_sample"};
    gr_status st = gr_cuda_fixed_module(c, sample_src, "graft_sample", "sample kernel", 1, names, &s->module, &s->fn);
    if (st != GR_OK) {
        gr_free(s, sizeof *s);
        return st;
    }
    c->sample = s;
    *out = s;
    return GR_OK;
}

gr_status gr_cuda_sample(gr_cuda_ctx *c, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    if (n_args < GR_LIB_SAMPLE_NARGS)
        return gr_error(GR_ERR_INVALID, "cuda: sample %s: %d arguments, expected %d", call->name, n_args, GR_LIB_SAMPLE_NARGS);
    if (call->m <= 0) return GR_OK;
    if (call->n <= 0) return gr_error(GR_ERR_INVALID, "cuda: sample %s: a vocabulary of %lld", call->name, (long long)call->n);
    if (call->m > 0x7fffffff) return gr_error(GR_ERR_UNSUPPORTED, "cuda: sample %s: %lld rows (at most 2^31 - 1)", call->name, (long long)call->m);
    int dtype;
    switch (call->dtype) {
    case GR_F32: dtype = 0; break;
    case GR_F16: dtype = 1; break;
    case GR_BF16: dtype = 2; break;
    default:
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: sample %s: %s logits (f32, f16, bf16 only)", call->name, gr_dtype_name(call->dtype));
    }
    if (!args[0].ptr || !args[1].ptr || !args[2].ptr || !args[3].ptr || !args[4].ptr)
        return gr_error(GR_ERR_INVALID, "cuda: sample %s: NULL operand", call->name);
    struct gr_cuda_sample *s = NULL;
    GR_TRY(sample_state(c, &s));
    /* the z row in shared memory when it fits beside the static arrays */
    size_t smem = sizeof(float) * (size_t)call->n;
    bool cached = !s->smem_refused && smem + SAMPLE_STATIC_SMEM <= SAMPLE_SMEM_OPTIN;
    if (cached && smem > 48 * 1024 - SAMPLE_STATIC_SMEM && s->smem_set < smem) {
        CUresult r = c->cu->cuFuncSetAttribute(s->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
        if (r == CUDA_SUCCESS) s->smem_set = smem;
        else s->smem_refused = true, cached = false; /* a device with less shared memory per block */
    }
    if (!cached) smem = 0;
    sample_args a = {.x = args[0].ptr, .step = args[1].ptr, .out = args[2].ptr, .ints = args[3].ptr, .floats = args[4].ptr,
                     .rows = call->m, .V = call->n, .dtype = dtype, .cached = cached};
    void *params[1] = {&a};
    gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(s->fn, (unsigned)call->m, 1, 1, SAMPLE_NT, 1, 1, (unsigned)smem, stream, params, NULL));
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "sample %s (graft_sample)", call->name);
}
