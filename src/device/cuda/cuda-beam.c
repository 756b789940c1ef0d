/* device/cuda/cuda-beam — the beam-search library calls (GR_LIB_BEAM_STEP, GR_LIB_BEAM_REORDER, kir.h).
 *
 * graft_beam_step: one block of 512 threads per batch row runs gr_beam_step_row's definition
 * (codegen/beam.c) on the state layout of gr_beam_state_layout (the host passes the offsets):
 *   1. per beam, the max of its logits and sum of exp(x - max) (block reductions, the sum in
 *      double over expf terms: the host's sum is in double over exp, so lse may differ in its
 *      last bits; the candidate scores are then f32 sums as on the host);
 *   2. every thread keeps its own best 2k candidates (insertion into a sorted list of at most
 *      32: most candidates are rejected by one comparison with the list's worst), then 2k
 *      rounds of a block-wide argmax over the threads' list heads (warp shuffles, then warp 0)
 *      merge them in the order torch.topk gives: score descending, lowest flat index on ties;
 *   3. thread 0 does the bookkeeping of at most k hypotheses and k new beams (the host's loop,
 *      statement for statement), and the block copies the sequences (the new beams' through
 *      the state's scratch, the new hypotheses' from the old sequences) in parallel.
 * The step is a no-op outside 0 <= j < max_new (the prompt's steps). Work per row: k x vocab
 * logits read three times (max, sum, candidates) by one SM; k <= 16 (GR_BEAM_DEVICE_MAX_BEAMS).
 * graft_beam_reorder: y[r, a, p, :] = x[rows[r], a, p, :] over the valid prefix p < kv + delta,
 * zeros past it (not read), a grid-stride copy in 4-byte words (bytes when a row of the inner
 * axes is not a multiple of 4).
 * Compiled once per context with NVRTC (gr_cuda_beam_source; test_render compiles it). */
#include "device/cuda/cuda-impl.h"
#include <stdio.h>
#include <string.h>

static const char beam_src[] =
    "typedef unsigned int u32;\n"
    "typedef long long i64;\n"
    "struct BeamArgs {\n"
    "  const void *x; const i64 *step; i64 *out; const i64 *in; const i64 *params;\n"
    "  i64 rows, V, K, room, slots;\n"
    "  i64 o_tok, o_src, o_done, o_done_step, o_score, o_hyp_score, o_hyp_len, o_seqs, o_hyp_tok, o_scratch;\n"
    "  int dtype; /* 0 f32, 1 f16, 2 bf16 */\n"
    "};\n"
    "#define NT 512\n"
    "#define NW (NT / 32)\n"
    "#define KMAX 16\n"
    "#define K2MAX (2 * KMAX)\n"
    "#define FULL 0xffffffffu\n"
    "#define NEG_INF (-__int_as_float(0x7f800000))\n"
    "#define EMPTY (-1.0e9f)\n"
    "__device__ __forceinline__ float logit(const BeamArgs &a, i64 at) {\n"
    "  if (a.dtype == 0) return ((const float *)a.x)[at];\n"
    "  unsigned short h = ((const unsigned short *)a.x)[at];\n"
    "  float x;\n"
    "  if (a.dtype == 1) asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(x) : \"h\"(h));\n"
    "  else x = __uint_as_float(((u32)h) << 16);\n"
    "  return x;\n"
    "}\n"
    "/* (p, id) ranks above (q, jd): a higher score, or the same and a lower flat index */\n"
    "__device__ __forceinline__ bool better(float p, i64 id, float q, i64 jd) { return p > q || (p == q && id < jd); }\n"
    "/* every thread gets the same value: the warps' partials are added in one order */\n"
    "__device__ double block_sum(double v, double *red) {\n"
    "  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);\n"
    "  __syncthreads();\n"
    "  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  double t = 0;\n"
    "  for (int w = 0; w < NW; w++) t += red[w];\n"
    "  return t;\n"
    "}\n"
    "__device__ float block_max(float v, float *red) {\n"
    "  for (int o = 16; o; o >>= 1) { float q = __shfl_xor_sync(FULL, v, o); v = q > v ? q : v; }\n"
    "  __syncthreads();\n"
    "  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  float t = red[0];\n"
    "  for (int w = 1; w < NW; w++) t = red[w] > t ? red[w] : t;\n"
    "  return t;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(NT) graft_beam_step(const BeamArgs a) {\n"
    "  __shared__ double red_d[NW];\n"
    "  __shared__ float red_f[NW];\n"
    "  __shared__ double lse[KMAX];\n"
    "  __shared__ float cp[K2MAX];\n"
    "  __shared__ i64 ci[K2MAX];\n"
    "  __shared__ float wp[NW];\n"
    "  __shared__ i64 wi[NW];\n"
    "  __shared__ int wt[NW];\n"
    "  __shared__ int win;\n"
    "  __shared__ int hyp_from[KMAX];\n"
    "  __shared__ i64 hyp_t[KMAX], nsrc[KMAX], ntok[KMAX];\n"
    "  __shared__ float nscore[KMAX];\n"
    "  const i64 b = blockIdx.x, K = a.K, V = a.V, R = a.room;\n"
    "  const int tid = threadIdx.x;\n"
    "  i64 *s = a.out + b * a.slots;\n"
    "  if (a.out != a.in)\n"
    "    for (i64 i = tid; i < a.slots; i += NT) s[i] = a.in[b * a.slots + i];\n"
    "  const i64 N = a.params[4], eos = a.params[1], pad = a.params[2];\n"
    "  const double lpen = __longlong_as_double(a.params[3]);\n"
    "  const i64 j = a.step[0] - a.params[0];\n"
    "  if (j < 0 || j >= N || N > R || K > KMAX) return;\n"
    "  __syncthreads();\n"
    "  const float *score = (const float *)(s + a.o_score);\n"
    "  const i64 base = b * K * V;\n"
    "  /* 1. log-sum-exp of each beam's logits */\n"
    "  for (i64 i = 0; i < K; i++) {\n"
    "    float m = NEG_INF;\n"
    "    for (i64 v = tid; v < V; v += NT) { float x = logit(a, base + i * V + v); m = x > m ? x : m; }\n"
    "    m = block_max(m, red_f);\n"
    "    double sum = 0;\n"
    "    for (i64 v = tid; v < V; v += NT) sum += (double)expf(logit(a, base + i * V + v) - m);\n"
    "    sum = block_sum(sum, red_d);\n"
    "    if (tid == 0) lse[i] = (double)m + log(sum);\n"
    "  }\n"
    "  __syncthreads();\n"
    "  /* 2. each thread's best 2k, then the block's by 2k rounds of an argmax over the heads */\n"
    "  const int K2 = (int)(2 * K);\n"
    "  float lp_[K2MAX];\n"
    "  i64 li[K2MAX];\n"
    "  int n = 0;\n"
    "  for (i64 i = 0; i < K; i++) {\n"
    "    const double l = lse[i];\n"
    "    const float si = score[i];\n"
    "    for (i64 v = tid; v < V; v += NT) {\n"
    "      i64 f = i * V + v;\n"
    "      float c = __fadd_rn(si, (float)((double)logit(a, base + f) - l));\n"
    "      if (c != c) c = NEG_INF;\n"
    "      if (n < K2 || better(c, f, lp_[n - 1], li[n - 1])) {\n"
    "        int at = n < K2 ? n++ : K2 - 1;\n"
    "        while (at > 0 && better(c, f, lp_[at - 1], li[at - 1])) { lp_[at] = lp_[at - 1]; li[at] = li[at - 1]; at--; }\n"
    "        lp_[at] = c; li[at] = f;\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  const i64 total = K * V;\n"
    "  const int ncand = (i64)K2 < total ? K2 : (int)total;\n"
    "  int ptr = 0;\n"
    "  for (int r = 0; r < ncand; r++) {\n"
    "    float p = ptr < n ? lp_[ptr] : NEG_INF;\n"
    "    i64 id = ptr < n ? li[ptr] : 0x7fffffffffffffffLL;\n"
    "    int t = tid;\n"
    "    for (int o = 16; o; o >>= 1) {\n"
    "      float q = __shfl_xor_sync(FULL, p, o);\n"
    "      i64 jd = __shfl_xor_sync(FULL, id, o);\n"
    "      int u = __shfl_xor_sync(FULL, t, o);\n"
    "      if (better(q, jd, p, id)) { p = q; id = jd; t = u; }\n"
    "    }\n"
    "    if ((tid & 31) == 0) { wp[tid >> 5] = p; wi[tid >> 5] = id; wt[tid >> 5] = t; }\n"
    "    __syncthreads();\n"
    "    if (tid == 0) {\n"
    "      int w = 0;\n"
    "      for (int k = 1; k < NW; k++) if (better(wp[k], wi[k], wp[w], wi[w])) w = k;\n"
    "      cp[r] = wp[w]; ci[r] = wi[w]; win = wt[w];\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (tid == win) ptr++;\n"
    "  }\n"
    "  /* 3. hypotheses, done, the new beams: gr_beam_step_row's loops */\n"
    "  if (tid == 0) {\n"
    "    unsigned char *done = (unsigned char *)(s + a.o_done);\n"
    "    float *hs = (float *)(s + a.o_hyp_score);\n"
    "    i64 *hl = s + a.o_hyp_len;\n"
    "    const bool last = j + 1 == N, was_done = *done != 0;\n"
    "    for (int h = 0; h < K; h++) hyp_from[h] = -1;\n"
    "    for (int c = 0; c < K && c < ncand && !was_done; c++) {\n"
    "      i64 beam = ci[c] / V, t = ci[c] % V;\n"
    "      bool is_eos = eos >= 0 && t == eos;\n"
    "      if (!is_eos && !last) continue;\n"
    "      float fs = (float)((double)cp[c] / pow((double)(j + 1), lpen));\n"
    "      int worst = 0;\n"
    "      for (int h = 1; h < K; h++) if (hs[h] < hs[worst]) worst = h;\n"
    "      if (!(fs > hs[worst])) continue;\n"
    "      hyp_from[worst] = (int)beam; hyp_t[worst] = t; hl[worst] = j + 1; hs[worst] = fs;\n"
    "    }\n"
    "    if (!was_done) {\n"
    "      bool full = true;\n"
    "      for (int h = 0; h < K; h++) full &= hs[h] > EMPTY;\n"
    "      if (full) { *done = 1; s[a.o_done_step] = j + 1; }\n"
    "    }\n"
    "    int m = 0;\n"
    "    for (int c = 0; c < ncand && m < K; c++) {\n"
    "      i64 beam = ci[c] / V, t = ci[c] % V;\n"
    "      if (eos >= 0 && t == eos) continue;\n"
    "      nsrc[m] = beam; ntok[m] = t; nscore[m] = cp[c]; m++;\n"
    "    }\n"
    "    for (; m < K; m++) { nsrc[m] = 0; ntok[m] = pad >= 0 ? pad : 0; nscore[m] = EMPTY; }\n"
    "  }\n"
    "  __syncthreads();\n"
    "  i64 *seqs = s + a.o_seqs, *ht = s + a.o_hyp_tok, *tmp = s + a.o_scratch;\n"
    "  for (int h = 0; h < K; h++)\n"
    "    if (hyp_from[h] >= 0)\n"
    "      for (i64 t = tid; t <= j; t += NT) ht[h * R + t] = t < j ? seqs[hyp_from[h] * R + t] : hyp_t[h];\n"
    "  const i64 w = j + 1;\n"
    "  for (i64 e = tid; e < K * w; e += NT) { i64 q = e / w, t = e % w; tmp[q * R + t] = t < j ? seqs[nsrc[q] * R + t] : ntok[q]; }\n"
    "  __syncthreads();\n"
    "  for (i64 e = tid; e < K * w; e += NT) { i64 q = e / w, t = e % w; seqs[q * R + t] = tmp[q * R + t]; }\n"
    "  if (tid < K) {\n"
    "    ((float *)(s + a.o_score))[tid] = nscore[tid];\n"
    "    s[a.o_tok + tid] = ntok[tid];\n"
    "    s[a.o_src + tid] = b * K + nsrc[tid];\n"
    "  }\n"
    "}\n"
    "template <typename T>\n"
    "__device__ void reorder(const T *x, const i64 *rows, T *y, i64 valid, i64 m, i64 n, i64 k, i64 words) {\n"
    "  const i64 total = m * n * k * words;\n"
    "  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {\n"
    "    i64 q = e / words, wd = e - q * words, p = q % k, ra = q / k, r = ra / n, at = ra - r * n;\n"
    "    y[e] = p < valid ? x[((rows[r] * n + at) * k + p) * words + wd] : (T)0;\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void graft_beam_reorder(const void *x, const i64 *rows, void *y, const i64 *kv, i64 m, i64 n, i64 k,\n"
    "                                               i64 inner_bytes, i64 delta) {\n"
    "  i64 valid = kv[0] + delta;\n"
    "  valid = valid < 0 ? 0 : valid > k ? k : valid;\n"
    "  if (inner_bytes % 4 == 0) reorder((const u32 *)x, rows, (u32 *)y, valid, m, n, k, inner_bytes / 4);\n"
    "  else reorder((const unsigned char *)x, rows, (unsigned char *)y, valid, m, n, k, inner_bytes);\n"
    "}\n";

const char *gr_cuda_beam_source(void) { return beam_src; }

/* The kernel arguments, laid out as the source's BeamArgs. */
typedef struct {
    const void *x;
    const long long *step;
    long long *out;
    const long long *in;
    const long long *params;
    long long rows, V, K, room, slots;
    long long o_tok, o_src, o_done, o_done_step, o_score, o_hyp_score, o_hyp_len, o_seqs, o_hyp_tok, o_scratch;
    int dtype;
} beam_args;

struct gr_cuda_beam {
    CUmodule module;
    CUfunction step, reorder;
};

enum { BEAM_NT = 512, REORDER_NT = 256 };

void gr_cuda_beam_destroy(gr_cuda_ctx *c) {
    if (!c->beam) return;
    if (c->beam->module) c->cu->cuModuleUnload(c->beam->module);
    gr_free(c->beam, sizeof *c->beam);
    c->beam = NULL;
}

static gr_status beam_state(gr_cuda_ctx *c, struct gr_cuda_beam **out) {
    if (c->beam) return *out = c->beam, GR_OK;
    struct gr_cuda_beam *s = gr_calloc(1, sizeof *s);
    if (!s) return GR_ERR_NOMEM;
    static const char *const names[] = {"graft_beam_step", "graft_beam_reorder"};
    CUfunction fns[2];
    gr_status st = gr_cuda_fixed_module(c, beam_src, "graft_beam", "beam kernels", 2, names, &s->module, fns);
    if (st != GR_OK) {
        gr_free(s, sizeof *s);
        return st;
    }
    s->step = fns[0];
    s->reorder = fns[1];
    c->beam = s;
    *out = s;
    return GR_OK;
}

static gr_status beam_step(gr_cuda_ctx *c, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    if (n_args < GR_LIB_BEAM_STEP_NARGS)
        return gr_error(GR_ERR_INVALID, "cuda: beam_step %s: %d arguments, expected %d", call->name, n_args, GR_LIB_BEAM_STEP_NARGS);
    if (call->m <= 0) return GR_OK;
    if (call->m > 0x7fffffff) return gr_error(GR_ERR_UNSUPPORTED, "cuda: beam_step %s: %lld rows (at most 2^31 - 1)", call->name, (long long)call->m);
    if (call->k > GR_BEAM_DEVICE_MAX_BEAMS)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: beam_step %s: %lld beams (at most %d)", call->name, (long long)call->k, GR_BEAM_DEVICE_MAX_BEAMS);
    int dtype;
    switch (call->dtype) {
    case GR_F32: dtype = 0; break;
    case GR_F16: dtype = 1; break;
    case GR_BF16: dtype = 2; break;
    default:
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: beam_step %s: %s logits (f32, f16, bf16 only)", call->name, gr_dtype_name(call->dtype));
    }
    for (int i = 0; i < GR_LIB_BEAM_STEP_NARGS; i++)
        if (!args[i].ptr) return gr_error(GR_ERR_INVALID, "cuda: beam_step %s: NULL operand", call->name);
    gr_beam_params p = {.beams = call->k, .vocab = call->n, .max_new = call->lda, .stride = call->lda};
    gr_beam_layout l;
    GR_TRY(gr_beam_state_layout(&p, &l));
    struct gr_cuda_beam *s = NULL;
    GR_TRY(beam_state(c, &s));
    beam_args a = {.x = args[0].ptr, .step = args[1].ptr, .out = args[2].ptr, .in = args[3].ptr, .params = args[4].ptr,
                   .rows = call->m, .V = call->n, .K = call->k, .room = call->lda, .slots = l.slots,
                   .o_tok = l.tok, .o_src = l.src, .o_done = l.done, .o_done_step = l.done_step, .o_score = l.score,
                   .o_hyp_score = l.hyp_score, .o_hyp_len = l.hyp_len, .o_seqs = l.seqs, .o_hyp_tok = l.hyp_tok,
                   .o_scratch = l.scratch, .dtype = dtype};
    void *params[1] = {&a};
    gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(s->step, (unsigned)call->m, 1, 1, BEAM_NT, 1, 1, 0, stream, params, NULL));
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "beam_step %s (graft_beam_step)", call->name);
}

static gr_status beam_reorder(gr_cuda_ctx *c, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    if (n_args < GR_LIB_BEAM_REORDER_NARGS)
        return gr_error(GR_ERR_INVALID, "cuda: beam_reorder %s: %d arguments, expected %d", call->name, n_args, GR_LIB_BEAM_REORDER_NARGS);
    if (call->m <= 0 || call->n <= 0 || call->k <= 0 || call->lda <= 0) return GR_OK;
    for (int i = 0; i < GR_LIB_BEAM_REORDER_NARGS; i++)
        if (!args[i].ptr) return gr_error(GR_ERR_INVALID, "cuda: beam_reorder %s: NULL operand", call->name);
    struct gr_cuda_beam *s = NULL;
    GR_TRY(beam_state(c, &s));
    long long m = call->m, n = call->n, k = call->k, inner = call->lda * (long long)gr_dtype_size(call->dtype), delta = call->ldb;
    long long words = inner % 4 == 0 ? inner / 4 : inner, total = m * n * k * words;
    long long blocks = (total + REORDER_NT - 1) / REORDER_NT;
    if (blocks > 4096) blocks = 4096; /* grid-stride beyond */
    const void *x = args[0].ptr, *rows = args[1].ptr, *kv = args[3].ptr;
    void *y = args[2].ptr;
    void *params[9] = {&x, &rows, &y, &kv, &m, &n, &k, &inner, &delta};
    gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(s->reorder, (unsigned)blocks, 1, 1, REORDER_NT, 1, 1, 0, stream, params, NULL));
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "beam_reorder %s (graft_beam_reorder)", call->name);
}

gr_status gr_cuda_beam(gr_cuda_ctx *c, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    return call->kind == GR_LIB_BEAM_STEP ? beam_step(c, stream, call, args, n_args) : beam_reorder(c, stream, call, args, n_args);
}
