/* codegen/libcall — reference implementations of library calls (the simulator's cuBLASLt).
 *
 * Matmul: C[b] = epilogue(alpha * op(A[b]) @ op(B[b]) + bias[b]), row-major, with
 * op(X) = X^T when trans. A is m×k (k×m stored when trans_a), B is k×n (n×k when trans_b).
 * Accumulation: double for f32/f64, float for f16/bf16 (as the tensor cores do).
 * bias ROW: bias[b][n] broadcast over rows; FULL: bias[b] has C's shape with leading dim ldc.
 * residual: R = args[4] in C's layout, added after the bias, before the epilogue. */
#include "codegen/kir.h"
#include <math.h>
#include <string.h>
#ifdef __clang__
/* one rounding per operation, as specified (gcc does not contract in ISO C mode) */
#pragma STDC FP_CONTRACT OFF
#endif

static double epilogue(gr_epilogue e, double v) {
    switch (e) {
    case GR_EPI_RELU: return v > 0 ? v : (v != v ? v : 0.0);
    case GR_EPI_GELU: return 0.5 * v * (1.0 + erf(v * 0.70710678118654752440));
    case GR_EPI_GELU_TANH: return 0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v)));
    default: return v;
    }
}

static const char *const epilogue_names[] = {"none", "relu", "gelu", "gelu_tanh"};
_Static_assert(sizeof epilogue_names / sizeof epilogue_names[0] == GR_EPI_COUNT, "a name per epilogue");

const char *gr_epilogue_name(gr_epilogue e) { return (unsigned)e < GR_EPI_COUNT ? epilogue_names[e] : "?"; }

bool gr_epilogue_parse(const char *name, gr_epilogue *out) {
    for (int e = 0; e < GR_EPI_COUNT && name; e++)
        if (!strcmp(name, epilogue_names[e])) return *out = (gr_epilogue)e, true;
    return false;
}

gr_status gr_libcall_reference(const gr_libcall *c, const gr_karg *args) {
    if (c->kind == GR_LIB_ATTENTION) return gr_libcall_attention_reference(c, args);
    if (c->kind == GR_LIB_SAMPLE) return gr_libcall_sample_reference(c, args);
    if (c->kind == GR_LIB_BEAM_STEP) return gr_libcall_beam_step_reference(c, args);
    if (c->kind == GR_LIB_BEAM_REORDER) return gr_libcall_beam_reorder_reference(c, args);
    if (c->kind != GR_LIB_MATMUL)
        return gr_error(GR_ERR_UNSUPPORTED, "libcall %s: unknown kind %d", c->name, (int)c->kind);
    if (c->dtype != GR_F32 && c->dtype != GR_F64 && c->dtype != GR_F16 && c->dtype != GR_BF16)
        return gr_error(GR_ERR_UNSUPPORTED, "libcall %s: matmul of %s is not supported", c->name,
                        gr_dtype_name(c->dtype));
    if (c->m < 0 || c->n < 0 || c->k < 0 || c->batch < 0)
        return gr_error(GR_ERR_INVALID, "libcall %s: negative size (m %lld n %lld k %lld batch %lld)", c->name,
                        (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->batch);
    int64_t rows_a = c->trans_a ? c->k : c->m, cols_a = c->trans_a ? c->m : c->k;
    int64_t rows_b = c->trans_b ? c->n : c->k, cols_b = c->trans_b ? c->k : c->n;
    (void)rows_a;
    (void)rows_b;
    if ((cols_a > 0 && c->lda < cols_a) || (cols_b > 0 && c->ldb < cols_b) || (c->n > 0 && c->ldc < c->n))
        return gr_error(GR_ERR_INVALID, "libcall %s: leading dimension too small (lda %lld ldb %lld ldc %lld)",
                        c->name, (long long)c->lda, (long long)c->ldb, (long long)c->ldc);
    const void *A = args[0].ptr, *B = args[1].ptr, *bias = args[3].ptr, *R = c->residual ? args[4].ptr : NULL;
    void *C = args[2].ptr;
    if (c->m == 0 || c->n == 0 || c->batch == 0) return GR_OK;
    if (!C || (c->k > 0 && (!A || !B)) || (c->bias != GR_BIAS_NONE && !bias) || (c->residual && !R))
        return gr_error(GR_ERR_INVALID, "libcall %s: NULL operand", c->name);
    if (c->residual && c->bias == GR_BIAS_FULL)
        return gr_error(GR_ERR_INVALID, "libcall %s: a residual beside a full bias", c->name);
    bool low = c->dtype == GR_F16 || c->dtype == GR_BF16;
    /* Why the buffers: op(B) of one batch is unpacked into doubles once, and each row of C
     * accumulates over p in ascending order (the same order as the naive triple loop) with
     * a contiguous, vectorizable inner loop. */
    size_t bt_bytes = (size_t)c->k * (size_t)c->n * sizeof(double) + 1;
    size_t row_bytes = (size_t)c->n * (sizeof(double) + sizeof(float));
    double *bt = gr_malloc(bt_bytes);
    double *acc = gr_malloc(row_bytes);
    if (!bt || !acc) {
        gr_free(bt, bt_bytes);
        gr_free(acc, row_bytes);
        return GR_ERR_NOMEM;
    }
    float *accf = (float *)(acc + c->n);
    int64_t prev_ob = -1;
    for (int64_t b = 0; b < c->batch; b++) {
        int64_t oa = b * c->batch_stride_a, ob = b * c->batch_stride_b, oc = b * c->batch_stride_c;
        int64_t obias = b * c->batch_stride_bias;
        if (ob != prev_ob) {
            for (int64_t p = 0; p < c->k; p++)
                for (int64_t j = 0; j < c->n; j++)
                    bt[p * c->n + j] = gr_load_f64(B, c->dtype, ob + (c->trans_b ? j * c->ldb + p : p * c->ldb + j));
            prev_ob = ob;
        }
        for (int64_t i = 0; i < c->m; i++) {
            for (int64_t j = 0; j < c->n; j++) {
                acc[j] = 0;
                accf[j] = 0;
            }
            for (int64_t p = 0; p < c->k; p++) {
                double x = gr_load_f64(A, c->dtype, oa + (c->trans_a ? p * c->lda + i : i * c->lda + p));
                const double *brow = bt + p * c->n;
                if (low) {
                    float xf = (float)x;
                    for (int64_t j = 0; j < c->n; j++) accf[j] += xf * (float)brow[j];
                } else {
                    for (int64_t j = 0; j < c->n; j++) acc[j] += x * brow[j];
                }
            }
            for (int64_t j = 0; j < c->n; j++) {
                double v = low ? (double)accf[j] : acc[j];
                v *= c->alpha;
                if (c->bias == GR_BIAS_ROW) v += gr_load_f64(bias, c->dtype, obias + j);
                else if (c->bias == GR_BIAS_FULL) v += gr_load_f64(bias, c->dtype, obias + i * c->ldc + j);
                if (R) v += gr_load_f64(R, c->dtype, oc + i * c->ldc + j);
                gr_store_f64(C, c->dtype, oc + i * c->ldc + j, epilogue(c->epilogue, v));
            }
        }
    }
    gr_free(bt, bt_bytes);
    gr_free(acc, row_bytes);
    return GR_OK;
}

/* ==== attention ============================================================================== */

static void dense3(int64_t heads, int64_t seq, int64_t dim, int64_t *stride) {
    stride[2] = dim;
    stride[1] = seq * dim;
    stride[0] = heads * seq * dim;
}

void gr_libcall_attention_dense(gr_libcall *c) {
    dense3(c->heads, c->seq_q, c->head_dim, c->q_stride);
    dense3(c->kv_heads, c->seq_k, c->head_dim, c->k_stride);
    dense3(c->kv_heads, c->seq_k, c->head_dim_v, c->v_stride);
    dense3(c->heads, c->seq_q, c->head_dim_v, c->o_stride);
}

void gr_libcall_attention_lens(const gr_libcall *c, int64_t *rec) {
    rec[GR_ATTN_LENS_SQ] = c->seq_q;
    rec[GR_ATTN_LENS_SK] = c->seq_k;
    for (int d = 0; d < 3; d++) {
        rec[GR_ATTN_LENS_Q + d] = c->q_stride[d];
        rec[GR_ATTN_LENS_K + d] = c->k_stride[d];
        rec[GR_ATTN_LENS_V + d] = c->v_stride[d];
        rec[GR_ATTN_LENS_O + d] = c->o_stride[d];
    }
    for (int d = 0; d < 4; d++) rec[GR_ATTN_LENS_MASK + d] = c->mask_stride[d];
}

void gr_libcall_attention_use_lens(gr_libcall *c, const int64_t *rec) {
    c->seq_q = rec[GR_ATTN_LENS_SQ];
    c->seq_k = rec[GR_ATTN_LENS_SK];
    for (int d = 0; d < 3; d++) {
        c->q_stride[d] = rec[GR_ATTN_LENS_Q + d];
        c->k_stride[d] = rec[GR_ATTN_LENS_K + d];
        c->v_stride[d] = rec[GR_ATTN_LENS_V + d];
        c->o_stride[d] = rec[GR_ATTN_LENS_O + d];
    }
    for (int d = 0; d < 4; d++) c->mask_stride[d] = rec[GR_ATTN_LENS_MASK + d];
    c->lens_arg = false;
}

gr_status gr_libcall_attention_reference(const gr_libcall *c, const gr_karg *args) {
    if (c->lens_arg) { /* the lengths in the record the last argument points at (host-readable here) */
        const void *rec = args[gr_libcall_attention_lens_index(c)].ptr;
        if (!rec) return gr_error(GR_ERR_INVALID, "libcall %s: NULL length record", c->name);
        gr_libcall real = *c;
        gr_libcall_attention_use_lens(&real, (const int64_t *)rec);
        return gr_libcall_attention_reference(&real, args);
    }
    if (c->dtype != GR_F32 && c->dtype != GR_F64 && c->dtype != GR_F16 && c->dtype != GR_BF16)
        return gr_error(GR_ERR_UNSUPPORTED, "libcall %s: attention of %s is not supported", c->name,
                        gr_dtype_name(c->dtype));
    if (c->batch < 0 || c->heads <= 0 || c->kv_heads <= 0 || c->seq_q < 0 || c->seq_k < 0 || c->head_dim < 0 ||
        c->head_dim_v < 0 || c->heads % c->kv_heads != 0)
        return gr_error(GR_ERR_INVALID,
                        "libcall %s: bad attention sizes (batch %lld heads %lld kv_heads %lld seq_q %lld seq_k %lld "
                        "head_dim %lld head_dim_v %lld)",
                        c->name, (long long)c->batch, (long long)c->heads, (long long)c->kv_heads, (long long)c->seq_q,
                        (long long)c->seq_k, (long long)c->head_dim, (long long)c->head_dim_v);
    for (int d = 0; d < 3; d++)
        if (c->q_stride[d] < 0 || c->k_stride[d] < 0 || c->v_stride[d] < 0 || c->o_stride[d] < 0)
            return gr_error(GR_ERR_INVALID, "libcall %s: negative attention stride", c->name);
    if (c->batch == 0 || c->seq_q == 0 || c->head_dim_v == 0) return GR_OK;
    const void *Q = args[0].ptr, *K = args[1].ptr, *V = args[3].ptr, *M = args[4].ptr;
    void *O = args[2].ptr;
    if (!O || (c->seq_k > 0 && (!K || !V)) || (c->head_dim > 0 && !Q) || (c->has_mask && !M) ||
        (c->key_len_arg && !args[GR_LIB_ATTENTION_KEY_LEN].ptr))
        return gr_error(GR_ERR_INVALID, "libcall %s: NULL operand", c->name);
    int64_t key_lim = c->seq_k; /* keys below it are visible (key_len_arg: the device's value, clamped) */
    if (c->key_len_arg) {
        int64_t L = *(const int64_t *)args[GR_LIB_ATTENTION_KEY_LEN].ptr;
        key_lim = L < 0 ? 0 : L < c->seq_k ? L : c->seq_k;
    }
    size_t row_bytes = (size_t)(c->seq_k + 1) * sizeof(double) + (size_t)(c->head_dim_v + 1) * sizeof(double);
    double *p = gr_malloc(row_bytes);
    if (!p) return GR_ERR_NOMEM;
    double *acc = p + c->seq_k + 1;
    int64_t group = c->heads / c->kv_heads, D = c->head_dim, Dv = c->head_dim_v;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++) {
            int64_t kvh = h / group;
            int64_t oq = b * c->q_stride[0] + h * c->q_stride[1], oo = b * c->o_stride[0] + h * c->o_stride[1];
            int64_t ok = b * c->k_stride[0] + kvh * c->k_stride[1], ov = b * c->v_stride[0] + kvh * c->v_stride[1];
            int64_t q_row = c->q_stride[2], k_row = c->k_stride[2], v_row = c->v_stride[2], o_row = c->o_stride[2];
            for (int64_t i = 0; i < c->seq_q; i++) {
                /* keys past `last` are hidden by the causal rule or the key length */
                int64_t last = c->causal ? i + c->seq_k - c->seq_q : c->seq_k - 1;
                if (last > key_lim - 1) last = key_lim - 1;
                double mx = -INFINITY;
                for (int64_t j = 0; j <= last; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += gr_load_f64(Q, c->dtype, oq + i * q_row + d) * gr_load_f64(K, c->dtype, ok + j * k_row + d);
                    double sv = c->alpha * dot;
                    if (c->has_mask)
                        sv += gr_load_f64(M, c->mask_dtype,
                                          b * c->mask_stride[0] + h * c->mask_stride[1] + i * c->mask_stride[2] +
                                              j * c->mask_stride[3]);
                    p[j] = sv;
                    if (sv > mx) mx = sv;
                }
                for (int64_t d = 0; d < Dv; d++) acc[d] = 0;
                double sum = 0;
                if (mx > -INFINITY) /* else no visible key: the row is 0 */
                    for (int64_t j = 0; j <= last; j++) {
                        double e = exp(p[j] - mx);
                        sum += e;
                        for (int64_t d = 0; d < Dv; d++) acc[d] += e * gr_load_f64(V, c->dtype, ov + j * v_row + d);
                    }
                for (int64_t d = 0; d < Dv; d++) gr_store_f64(O, c->dtype, oo + i * o_row + d, sum > 0 ? acc[d] / sum : 0.0);
            }
        }
    gr_free(p, row_bytes);
    return GR_OK;
}
