/* device/cuda/cuda-blas — GR_LIB_MATMUL through cuBLASLt.
 *
 * Row-major C = op(A) @ op(B) is computed as the column-major C^T = op(B)^T @ op(A)^T:
 * a row-major matrix read column-major is its transpose, so no data moves. f32 uses
 * CUBLAS_COMPUTE_32F (no TF32). A ROW bias is cuBLASLt's bias epilogue (a vector along
 * the rows of the column-major result); a FULL bias, or else a residual, is cuBLASLt's C
 * operand with beta = 1 (C in D's layout). Epilogues (applied to alpha*AB + beta*C + bias in f32, before the rounding to
 * D's dtype, as libcall.c's reference): RELU and GELU_TANH are cuBLASLt's RELU(_BIAS) and
 * GELU(_BIAS) (its GELU is the tanh approximation); the exact erf GELU is a rendered
 * kernel afterwards, and so is GELU_TANH where cuBLASLt offers no algorithm with its GELU
 * epilogue (f64, or a heuristic that finds none).
 * Descriptors and the heuristic's algorithm are made once per call shape and cached.
 */
#include "device/cuda/cuda-impl.h"
#include <string.h>

#define GR_LT_WORKSPACE (32u << 20)

typedef struct {
    gr_libcall call; /* name zeroed: the key */
    int align16;     /* all pointers 16-byte aligned */
} lt_key;

typedef struct {
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algo;
    gr_kfunc *act; /* a rendered activation over C afterwards (see the top), or NULL */
} lt_entry;

struct gr_cuda_lt {
    const gr_lt_api *lt;
    cublasLtHandle_t handle;
    GR_VEC(lt_entry) cache;
};

gr_status gr_cuda_blas_init(gr_cuda_ctx *c) {
    /* cuBLASLt is loaded on first use; the workspace now, so capture never allocates */
    gr_status st = GR_CU_STATUS(c->cu->cuMemAlloc(&c->lt_workspace, GR_LT_WORKSPACE));
    if (st != GR_OK) return gr_error_prefix(st, "cuBLASLt workspace");
    c->lt_workspace_bytes = GR_LT_WORKSPACE;
    return GR_OK;
}

static void entry_free(gr_cuda_ctx *c, const gr_lt_api *lt, lt_entry *e) {
    if (e->desc) lt->cublasLtMatmulDescDestroy(e->desc);
    if (e->la) lt->cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) lt->cublasLtMatrixLayoutDestroy(e->lb);
    if (e->lc) lt->cublasLtMatrixLayoutDestroy(e->lc);
    if (e->ld) lt->cublasLtMatrixLayoutDestroy(e->ld);
    if (e->act) gr_cuda_kernel_release(c, e->act);
    memset(e, 0, sizeof(*e));
}

void gr_cuda_blas_destroy(gr_cuda_ctx *c) {
    if (c->lt) {
        for (int i = 0; i < c->lt->cache.len; i++) entry_free(c, c->lt->lt, &c->lt->cache.data[i]);
        gr_vec_free(&c->lt->cache);
        if (c->lt->handle) c->lt->lt->cublasLtDestroy(c->lt->handle);
        gr_free(c->lt, sizeof(*c->lt));
        c->lt = NULL;
    }
    if (c->lt_workspace) c->cu->cuMemFree(c->lt_workspace);
    c->lt_workspace = 0;
}

static gr_status lt_state(gr_cuda_ctx *c, gr_cuda_lt **out) {
    if (c->lt) return *out = c->lt, GR_OK;
    const gr_lt_api *lt;
    GR_TRY(gr_cuda_load_cublaslt(&lt));
    gr_cuda_lt *s = gr_calloc(1, sizeof(*s));
    if (!s) return GR_ERR_NOMEM;
    s->lt = lt;
    gr_status st = GR_LT_STATUS(lt->cublasLtCreate(&s->handle));
    if (st != GR_OK) {
        gr_free(s, sizeof(*s));
        return st;
    }
    c->lt = s;
    *out = s;
    return GR_OK;
}

/* In-place activation fn (GELU or GELU_TANH) over C: outer [batch, m, n] with C's strides. */
static gr_status make_act(gr_cuda_ctx *c, const gr_libcall *call, gr_kunary fn, gr_kfunc **out) {
    gr_kernel *k;
    GR_TRY(gr_kernel_create("graft_matmul_gelu", &k));
    k->n_outer = 3;
    k->outer[0] = call->batch;
    k->outer[1] = call->m;
    k->outer[2] = call->n;
    int p, v, g;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = call->batch_stride_c;
    a.stride[1] = call->ldc;
    a.stride[2] = 1;
    gr_dtype ct = call->dtype == GR_F64 ? GR_F64 : GR_F32;
    gr_kstage s;
    memset(&s, 0, sizeof s);
    gr_status st = gr_kernel_add_param(k, GR_KP_BUFFER, call->dtype, "c", &p);
    if (st == GR_OK) st = gr_kx_load(k, p, &a, &v);
    if (st == GR_OK) st = gr_kx_unary(k, fn, ct, v, &g);
    if (st == GR_OK) {
        k->params[p].written = true;
        s.kind = GR_KS_STORE;
        s.value = g;
        s.param = p;
        s.access = a;
        st = gr_kernel_add_stage(k, &s);
    }
    /* generic: one module serves the epilogue of every matmul shape, so a new sequence
     * length compiles nothing here either; C is dense in practice, so the code is the
     * literal kernel's (contiguous walk, vectorized) with its offset and count read from
     * parameters */
    if (st == GR_OK) st = gr_cuda_kernel_prepare(c, k, GR_KPREP_GENERIC, out);
    gr_kernel_destroy(k);
    return st;
}

/* Fills e (descriptors, layouts, algorithm); on failure e holds what was made so far.
 * lt_gelu: a GELU_TANH epilogue is cuBLASLt's (else a rendered kernel). */
static gr_status entry_build(gr_cuda_ctx *c, gr_cuda_lt *s, const lt_key *key, lt_entry *e, bool lt_gelu) {
    const gr_lt_api *lt = s->lt;
    const gr_libcall *call = &key->call;
    cudaDataType_t dt;
    cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
    cudaDataType_t scale = CUDA_R_32F;
    switch (call->dtype) {
    case GR_F32: dt = CUDA_R_32F; break;
    case GR_F16: dt = CUDA_R_16F; break;
    case GR_BF16: dt = CUDA_R_16BF; break;
    case GR_F64:
        dt = CUDA_R_64F;
        comp = CUBLAS_COMPUTE_64F;
        scale = CUDA_R_64F;
        break;
    default: return gr_error(GR_ERR_UNSUPPORTED, "cuBLASLt: dtype %s is not supported", gr_dtype_name(call->dtype));
    }
    /* column-major view: D^T [n, m] = op(B)^T [n, k] @ op(A)^T [k, m] */
    cublasOperation_t ta = call->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* first operand: B */
    cublasOperation_t tb = call->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* second operand: A */
    uint64_t m = (uint64_t)call->n, n = (uint64_t)call->m, kk = (uint64_t)call->k;
    GR_LT_CHECK(lt->cublasLtMatmulDescCreate(&e->desc, comp, scale));
    GR_LT_CHECK(lt->cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    GR_LT_CHECK(lt->cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    bool relu = call->epilogue == GR_EPI_RELU;
    bool gelu = call->epilogue == GR_EPI_GELU_TANH && lt_gelu && call->dtype != GR_F64;
    if (call->bias == GR_BIAS_ROW)
        epi = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (relu) epi = CUBLASLT_EPILOGUE_RELU;
    else if (gelu) epi = CUBLASLT_EPILOGUE_GELU;
    GR_LT_CHECK(lt->cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (call->bias == GR_BIAS_ROW && call->batch > 1) {
        int64_t bs = call->batch_stride_bias;
        GR_LT_CHECK(lt->cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs, sizeof bs));
    }
    /* stored shapes in the column-major view (rows, cols) before op */
    uint64_t a_rows = ta == CUBLAS_OP_N ? m : kk, a_cols = ta == CUBLAS_OP_N ? kk : m;
    uint64_t b_rows = tb == CUBLAS_OP_N ? kk : n, b_cols = tb == CUBLAS_OP_N ? n : kk;
    GR_LT_CHECK(lt->cublasLtMatrixLayoutCreate(&e->la, dt, a_rows, a_cols, call->ldb));
    GR_LT_CHECK(lt->cublasLtMatrixLayoutCreate(&e->lb, dt, b_rows, b_cols, call->lda));
    GR_LT_CHECK(lt->cublasLtMatrixLayoutCreate(&e->lc, dt, m, n, call->ldc));
    GR_LT_CHECK(lt->cublasLtMatrixLayoutCreate(&e->ld, dt, m, n, call->ldc));
    if (call->batch > 1) {
        int32_t bc = (int32_t)call->batch;
        /* C: a FULL bias, else the residual or unused (both in D's layout) */
        int64_t sa = call->batch_stride_b, sb = call->batch_stride_a, sd = call->batch_stride_c,
                sc = call->bias == GR_BIAS_FULL ? call->batch_stride_bias : call->batch_stride_c;
        const struct { cublasLtMatrixLayout_t l; int64_t stride; } ls[4] = {{e->la, sa}, {e->lb, sb}, {e->lc, sc}, {e->ld, sd}};
        for (int i = 0; i < 4; i++) {
            GR_LT_CHECK(lt->cublasLtMatrixLayoutSetAttribute(ls[i].l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
            GR_LT_CHECK(lt->cublasLtMatrixLayoutSetAttribute(ls[i].l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &ls[i].stride, sizeof ls[i].stride));
        }
    }
    cublasLtMatmulPreference_t pref = NULL;
    GR_LT_CHECK(lt->cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c->lt_workspace_bytes;
    gr_status st = GR_LT_STATUS(lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    if (st == GR_OK && !key->align16) {
        uint32_t al = (uint32_t)gr_dtype_size(call->dtype);
        const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4 && st == GR_OK; i++)
            st = GR_LT_STATUS(lt->cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &al, sizeof al));
    }
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    if (st == GR_OK)
        st = GR_LT_STATUS(lt->cublasLtMatmulAlgoGetHeuristic(s->handle, e->desc, e->la, e->lb, e->lc, e->ld, pref, 1, &res, &found));
    lt->cublasLtMatmulPreferenceDestroy(pref);
    GR_TRY(st);
    if (found < 1)
        return gr_error(GR_ERR_UNSUPPORTED, "cuBLASLt: no algorithm (%s, m=%lld n=%lld k=%lld, batch %lld)",
                        gr_dtype_name(call->dtype), (long long)call->m, (long long)call->n, (long long)call->k,
                        (long long)call->batch);
    e->algo = res.algo;
    if (call->epilogue == GR_EPI_GELU) GR_TRY(make_act(c, call, GR_KU_GELU, &e->act));
    if (call->epilogue == GR_EPI_GELU_TANH && !gelu) GR_TRY(make_act(c, call, GR_KU_GELU_TANH, &e->act));
    return GR_OK;
}

/* The cached descriptors for one call shape; errors name the matmul. */
static gr_status entry_make(gr_cuda_ctx *c, gr_cuda_lt *s, const lt_key *key, lt_entry *e) {
    memset(e, 0, sizeof(*e));
    e->key = *key;
    gr_status st = entry_build(c, s, key, e, true);
    if (st != GR_OK && st != GR_ERR_NOMEM && key->call.epilogue == GR_EPI_GELU_TANH && key->call.dtype != GR_F64) {
        /* no algorithm with cuBLASLt's GELU epilogue for this shape: its bias epilogue and a
         * rendered tanh-GELU kernel, the same function */
        entry_free(c, s->lt, e);
        gr_error_clear();
        e->key = *key;
        st = entry_build(c, s, key, e, false);
    }
    if (st == GR_OK) return GR_OK;
    entry_free(c, s->lt, e);
    return gr_error_prefix(st, "matmul %s", key->call.name);
}

/* One matmul with the cached entry e: cuBLASLt, then the activation kernel if any. */
static gr_status matmul_launch(gr_cuda_ctx *c, CUstream stream, gr_cuda_lt *s, lt_entry *e, const gr_libcall *call,
                               const gr_karg *args, const void *bias) {
    const gr_lt_api *lt = s->lt;
    if (call->bias == GR_BIAS_ROW) {
        const void *bp = bias;
        GR_LT_CHECK(lt->cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
    }
    const void *cptr = call->bias == GR_BIAS_FULL ? bias : call->residual ? args[4].ptr : args[2].ptr;
    float alpha32 = (float)call->alpha, beta32 = call->bias == GR_BIAS_FULL || call->residual ? 1.0f : 0.0f;
    double alpha64 = call->alpha, beta64 = beta32;
    const void *alpha = call->dtype == GR_F64 ? (const void *)&alpha64 : (const void *)&alpha32;
    const void *beta = call->dtype == GR_F64 ? (const void *)&beta64 : (const void *)&beta32;
    GR_LT_CHECK(lt->cublasLtMatmul(s->handle, e->desc, alpha, args[1].ptr, e->la, args[0].ptr, e->lb, beta, cptr, e->lc,
                                   args[2].ptr, e->ld, &e->algo, (void *)(uintptr_t)c->lt_workspace, c->lt_workspace_bytes,
                                   (cudaStream_t)stream));
    if (e->act) {
        gr_karg ga = {.ptr = args[2].ptr};
        void *params[2];
        gr_cuda_kernel_params(e->act, &ga, 1, params);
        unsigned grid, block;
        gr_cuda_kernel_dims(c, e->act, &ga, &grid, &block);
        gr_status st = GR_CU_STATUS(c->cu->cuLaunchKernel(e->act->fn, grid, 1, 1, block, 1, 1, 0, stream, params, NULL));
        if (st != GR_OK) return gr_error_prefix(st, "%s epilogue", gr_epilogue_name(call->epilogue));
    }
    return GR_OK;
}

gr_status gr_cuda_matmul(gr_cuda_ctx *c, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    if (n_args < 3) return gr_error(GR_ERR_INVALID, "cuda: matmul %s: %d arguments, expected %d", call->name, n_args, GR_LIB_MATMUL_NARGS);
    const void *bias = n_args > 3 ? args[3].ptr : NULL, *res = n_args > 4 ? args[4].ptr : NULL;
    if (call->bias != GR_BIAS_NONE && !bias) return gr_error(GR_ERR_INVALID, "cuda: matmul %s: bias argument missing", call->name);
    if (call->residual && (!res || call->bias == GR_BIAS_FULL))
        return gr_error(GR_ERR_INVALID, "cuda: matmul %s: %s", call->name,
                        res ? "a residual beside a full bias" : "residual argument missing");
    if (call->m <= 0 || call->n <= 0) return GR_OK;
    if (call->k <= 0 || call->batch <= 0)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: matmul %s: k = %lld, batch = %lld", call->name, (long long)call->k,
                        (long long)call->batch);
    gr_cuda_lt *s = NULL;
    GR_TRY(lt_state(c, &s));
    lt_key key;
    memset(&key, 0, sizeof key);
    key.call = *call;
    memset(key.call.name, 0, sizeof key.call.name);
    key.call.alpha = 0;
    if (call->bias != GR_BIAS_FULL && call->bias != GR_BIAS_ROW) key.call.batch_stride_bias = 0;
    uintptr_t any = (uintptr_t)args[0].ptr | (uintptr_t)args[1].ptr | (uintptr_t)args[2].ptr | (uintptr_t)bias |
                    (uintptr_t)(call->residual ? res : NULL);
    key.align16 = (any & 15u) == 0;
    lt_entry *e = NULL;
    for (int i = 0; i < s->cache.len && !e; i++)
        if (!memcmp(&s->cache.data[i].key, &key, sizeof key)) e = &s->cache.data[i];
    if (!e) {
        GR_TRY(gr_vec_reserve(&s->cache, s->cache.len + 1));
        GR_TRY(entry_make(c, s, &key, &s->cache.data[s->cache.len]));
        e = &s->cache.data[s->cache.len++];
    }
    gr_status st = matmul_launch(c, stream, s, e, call, args, bias);
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "matmul %s", call->name);
}
