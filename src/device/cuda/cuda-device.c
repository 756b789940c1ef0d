/* device/cuda/cuda-device — the device.h vtable over the CUDA driver API.
 *
 * Handles shared with the simulator's conventions:
 *  - a condition handle is the device address of an `unsigned` flag; a kernel stores
 *    the condition there. A built-in kernel captured before the conditional node (and
 *    at the end of a WHILE body) copies it into the CUgraphConditionalHandle.
 *  - an updatable-node handle is the device address of the node's argument block
 *    (one 8-byte slot per argument); a built-in patch kernel inserted before the node
 *    copies the block into the node with cudaGraphKernelNodeSetParam on every replay.
 * Graph nodes are numbered in pre-order (a conditional node, then its bodies), like sim.
 */
#include "device/cuda/cuda-impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gr_stream {
    CUstream s;
    bool capturing; /* between capture_begin and capture_end */
    bool external;  /* the caller's stream (stream_wrap): destroy frees the wrapper only */
};
struct gr_event {
    CUevent e;
};
struct gr_dgraph {
    CUgraph g;
    GR_VEC(CUgraphNode) nodes; /* pre-order, bodies of conditionals included */
    int refs;                  /* the graph itself + exec graphs made from it */
};
struct gr_dexec {
    CUgraphExec e;
    gr_dgraph *g;
};

typedef struct {
    uint64_t handle;               /* flag address */
    CUgraphConditionalHandle cond;
    CUgraphNode node;
    CUgraph parent;
    CUgraph bodies[2];
    gr_cond_kind kind;
    bool placed;                   /* setter kernel + node added (at the first cond_body_begin) */
    gr_dgraph *owner;              /* the captured graph holding it; NULL until capture_end */
} cuda_cond;

/* A captured kernel node of a generic gr_kfunc. Generic kfuncs of one structure share
 * their CUfunction, so a node's function does not say which kfunc it is (graphs.c
 * matches nodes to steps by kfunc): the launch that captured it does, recorded here. */
typedef struct {
    CUgraphNode node;
    gr_kfunc *f;
    const gr_dgraph *owner; /* the captured graph holding it; NULL until capture_end */
} node_kfunc;

typedef struct {
    gr_cuda_ctx base;
    GR_VEC(gr_kfunc *) kfuncs;  /* live prepared kernels (graph node → kernel) */
    GR_VEC(node_kfunc) node_funcs; /* captured nodes of generic kernels */
    GR_VEC(cuda_cond) conds;
    GR_VEC(CUdeviceptr) internal; /* flags and argument blocks */
    CUmodule builtin;
    CUfunction fn_cond_set, fn_patch_args;
} cuda_dev;

static void conds_forget(cuda_dev *d, const gr_dgraph *owner);
static void node_funcs_forget(cuda_dev *d, const gr_dgraph *owner, const gr_kfunc *f);

#define CU(c) ((c)->base.cu)

/* ==== built-in kernels =========================================================================== */

static const char builtin_src[] =
    "typedef unsigned long long cudaGraphConditionalHandle;\n"
    "typedef struct CUgraphDeviceUpdatableNode_st *cudaGraphDeviceNode_t;\n"
    "extern \"C\" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle h, unsigned int v);\n"
    "extern \"C\" __device__ __cudart_builtin__ int cudaGraphKernelNodeSetParam(cudaGraphDeviceNode_t n, size_t off,\n"
    "                                                                          const void *value, size_t size);\n"
    "extern \"C\" __global__ void gr_cond_set(unsigned long long h, const unsigned int *flag) {\n"
    "  cudaGraphSetConditional(h, *flag ? 1u : 0u);\n"
    "}\n"
    "extern \"C\" __global__ void gr_patch_args(cudaGraphDeviceNode_t node, const unsigned long long *block, long long n) {\n"
    "  if (threadIdx.x == 0)\n"
    "    for (long long i = 0; i < n; i++) cudaGraphKernelNodeSetParam(node, (size_t)i * 8, &block[i], 8);\n"
    "}\n";

static gr_status builtin_load(cuda_dev *d) {
    if (d->builtin) return GR_OK;
    void *img;
    size_t n;
    GR_TRY(gr_cuda_nvrtc_compile(builtin_src, "graft_builtin", d->base.arch, false, &img, &n));
    d->base.kstats.compiles++;
    gr_status st = GR_CU_STATUS(CU(d)->cuModuleLoadData(&d->builtin, img));
    gr_free(img, n);
    GR_TRY(st);
    d->base.kstats.module_loads++;
    GR_CU_CHECK(CU(d)->cuModuleGetFunction(&d->fn_cond_set, d->builtin, "gr_cond_set"));
    GR_CU_CHECK(CU(d)->cuModuleGetFunction(&d->fn_patch_args, d->builtin, "gr_patch_args"));
    return GR_OK;
}

/* Device memory the backend owns, allocated and written while a capture may be in
 * progress: relaxed capture mode makes the allocation and the synchronous copy legal. */
static gr_status internal_alloc(cuda_dev *d, const void *init, size_t bytes, CUdeviceptr *out) {
    GR_TRY(gr_vec_reserve(&d->internal, d->internal.len + 1));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (CU(d)->cuThreadExchangeStreamCaptureMode) CU(d)->cuThreadExchangeStreamCaptureMode(&mode);
    CUdeviceptr p = 0;
    gr_status st = GR_CU_STATUS(CU(d)->cuMemAlloc(&p, bytes));
    if (st == GR_OK) st = GR_CU_STATUS(CU(d)->cuMemcpyHtoD(p, init, bytes));
    if (CU(d)->cuThreadExchangeStreamCaptureMode) CU(d)->cuThreadExchangeStreamCaptureMode(&mode);
    if (st != GR_OK) {
        if (p) CU(d)->cuMemFree(p);
        return gr_error_prefix(st, "cuda: internal device allocation of %zu bytes", bytes);
    }
    d->internal.data[d->internal.len++] = p;
    *out = p;
    return GR_OK;
}

/* ==== name, destroy, memory ========================================================================= */

static const char *cuda_name(void *ctx) { return ((cuda_dev *)ctx)->base.name; }

static void cuda_destroy(void *ctx) {
    cuda_dev *d = ctx;
    if (!d) return;
    const gr_cu_api *cu = CU(d);
    /* No cuCtxSynchronize here: the context is the primary one, shared with the caller (PyTorch),
     * so it would wait for the caller's work too, and on the H100 it segfaulted inside the driver
     * once torch.profiler had run and torn CUPTI down in the process (bench/realsize). graft's own
     * work is finished already: sessions synchronize their streams before they let go, and
     * cuMemFree / cuModuleUnload below wait for the device work that uses what they free. */
    if (d->base.ctx) cu->cuCtxSetCurrent(d->base.ctx);
    gr_cuda_nccl_destroy(&d->base);
    gr_cuda_blas_destroy(&d->base);
    gr_cuda_attention_destroy(&d->base);
    gr_cuda_sample_destroy(&d->base);
    gr_cuda_beam_destroy(&d->base);
    for (int i = 0; i < d->kfuncs.len; i++) gr_cuda_kernel_release(&d->base, d->kfuncs.data[i]);
    gr_vec_free(&d->kfuncs);
    gr_vec_free(&d->node_funcs);
    gr_cuda_modules_destroy(&d->base); /* after every kernel (the GELU epilogues included) let go */
    for (int i = 0; i < d->internal.len; i++) cu->cuMemFree(d->internal.data[i]);
    gr_vec_free(&d->internal);
    gr_vec_free(&d->conds);
    for (int i = 0; i < d->base.allocs.len; i++) {
        struct gr_cuda_alloc *a = &d->base.allocs.data[i];
        if (a->kind == GR_MEM_DEVICE) cu->cuMemFree((CUdeviceptr)(uintptr_t)a->ptr);
        else if (a->kind == GR_MEM_HOST_PINNED) cu->cuMemFreeHost(a->ptr);
        else gr_free(a->ptr, a->bytes);
    }
    gr_vec_free(&d->base.allocs);
    if (d->builtin) cu->cuModuleUnload(d->builtin);
    if (d->base.ctx) cu->cuDevicePrimaryCtxRelease(d->base.dev);
    gr_strfree(d->base.cache_dir);
    gr_free(d, sizeof(*d));
}

static gr_status cuda_alloc(void *ctx, gr_mem_kind kind, size_t bytes, void **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    if (bytes == 0) bytes = 1;
    GR_TRY(gr_vec_reserve(&d->base.allocs, d->base.allocs.len + 1));
    void *p = NULL;
    if (kind == GR_MEM_DEVICE) {
        CUdeviceptr dp;
        gr_status st = GR_CU_STATUS(CU(d)->cuMemAlloc(&dp, bytes));
        if (st != GR_OK) return gr_error_prefix(st, "allocating %zu bytes of device memory", bytes);
        p = (void *)(uintptr_t)dp;
        d->base.mem_in_use += bytes;
    } else if (kind == GR_MEM_HOST_PINNED) {
        gr_status st = GR_CU_STATUS(CU(d)->cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE));
        /* the driver reports exhausted page-locked memory in several ways: all are out of memory */
        if (st != GR_OK) return gr_error_prefix(st == GR_ERR_DEVICE ? GR_ERR_NOMEM : st, "allocating %zu bytes of pinned memory", bytes);
    } else if (kind == GR_MEM_HOST) {
        p = gr_malloc(bytes);
        if (!p) return GR_ERR_NOMEM;
    } else {
        return gr_error(GR_ERR_INVALID, "cuda: alloc: bad memory kind %d", (int)kind);
    }
    struct gr_cuda_alloc a = {.ptr = p, .bytes = bytes, .kind = kind};
    d->base.allocs.data[d->base.allocs.len++] = a;
    *out = p;
    return GR_OK;
}

static void cuda_free(void *ctx, void *ptr) {
    cuda_dev *d = ctx;
    if (!ptr) return;
    for (int i = d->base.allocs.len - 1; i >= 0; i--) {
        struct gr_cuda_alloc *a = &d->base.allocs.data[i];
        if (a->ptr != ptr) continue;
        if (a->kind == GR_MEM_DEVICE) {
            CU(d)->cuMemFree((CUdeviceptr)(uintptr_t)ptr);
            d->base.mem_in_use -= a->bytes;
        } else if (a->kind == GR_MEM_HOST_PINNED) {
            CU(d)->cuMemFreeHost(ptr);
        } else {
            gr_free(ptr, a->bytes);
        }
        d->base.allocs.data[i] = d->base.allocs.data[--d->base.allocs.len];
        return;
    }
}

static size_t cuda_mem_in_use(void *ctx) { return ((cuda_dev *)ctx)->base.mem_in_use; }

/* cuMemGetInfo: what the whole device has free, so the driver's own allocations (exec
 * graphs, their kernel parameters, module memory) show, as do other processes' (a
 * before/after difference is only as exact as the device is quiet). */
static gr_status cuda_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
    cuda_dev *d = ctx;
    size_t f = 0, t = 0;
    GR_CU_CHECK(CU(d)->cuMemGetInfo(&f, &t));
    *free_bytes = f;
    *total_bytes = t;
    return GR_OK;
}

/* ==== streams and events ============================================================================ */

static CUstream cs(gr_stream *s) { return s ? s->s : NULL; }

static gr_status cuda_stream_create(void *ctx, gr_stream **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    gr_stream *s = gr_calloc(1, sizeof(*s));
    if (!s) return GR_ERR_NOMEM;
    gr_status st = GR_CU_STATUS(CU(d)->cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING));
    if (st != GR_OK) {
        gr_free(s, sizeof(*s));
        return st;
    }
    *out = s;
    return GR_OK;
}

static void cuda_stream_destroy(void *ctx, gr_stream *s) {
    cuda_dev *d = ctx;
    if (!s) return;
    if (!s->external) CU(d)->cuStreamDestroy(s->s);
    gr_free(s, sizeof(*s));
}

static gr_status cuda_stream_wrap(void *ctx, void *handle, gr_stream **out) {
    (void)ctx;
    *out = NULL;
    gr_stream *s = gr_calloc(1, sizeof(*s));
    if (!s) return GR_ERR_NOMEM;
    s->s = (CUstream)handle;
    s->external = true;
    *out = s;
    return GR_OK;
}

static gr_status cuda_stream_wait_event(void *ctx, gr_stream *s, gr_event *e) {
    cuda_dev *d = ctx;
    GR_CU_CHECK(CU(d)->cuStreamWaitEvent(cs(s), e->e, 0));
    return GR_OK;
}

static gr_status cuda_stream_sync(void *ctx, gr_stream *s) {
    cuda_dev *d = ctx;
    GR_CU_CHECK(CU(d)->cuStreamSynchronize(cs(s)));
    return GR_OK;
}

static gr_status cuda_event_create(void *ctx, gr_event **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    gr_event *e = gr_calloc(1, sizeof(*e));
    if (!e) return GR_ERR_NOMEM;
    gr_status st = GR_CU_STATUS(CU(d)->cuEventCreate(&e->e, CU_EVENT_DEFAULT));
    if (st != GR_OK) {
        gr_free(e, sizeof(*e));
        return st;
    }
    *out = e;
    return GR_OK;
}

static void cuda_event_destroy(void *ctx, gr_event *e) {
    cuda_dev *d = ctx;
    if (!e) return;
    CU(d)->cuEventDestroy(e->e);
    gr_free(e, sizeof(*e));
}

static gr_status cuda_event_record(void *ctx, gr_event *e, gr_stream *s) {
    cuda_dev *d = ctx;
    GR_CU_CHECK(CU(d)->cuEventRecord(e->e, cs(s)));
    return GR_OK;
}

static gr_status cuda_event_elapsed_us(void *ctx, gr_event *start, gr_event *end, double *out) {
    cuda_dev *d = ctx;
    *out = 0;
    GR_CU_CHECK(CU(d)->cuEventSynchronize(end->e));
    float ms = 0;
    GR_CU_CHECK(CU(d)->cuEventElapsedTime(&ms, start->e, end->e));
    *out = (double)ms * 1000.0;
    return GR_OK;
}

/* ==== work ================================================================================================ */

static gr_status cuda_memcpy_async(void *ctx, gr_stream *s, void *dst, const void *src, size_t bytes,
                                   gr_copy_kind kind) {
    cuda_dev *d = ctx;
    if (bytes == 0) return GR_OK;
    CUdeviceptr dd = (CUdeviceptr)(uintptr_t)dst, sd = (CUdeviceptr)(uintptr_t)src;
    switch (kind) {
    case GR_COPY_H2D: GR_CU_CHECK(CU(d)->cuMemcpyHtoDAsync(dd, src, bytes, cs(s))); break;
    case GR_COPY_D2H: GR_CU_CHECK(CU(d)->cuMemcpyDtoHAsync(dst, sd, bytes, cs(s))); break;
    case GR_COPY_D2D: GR_CU_CHECK(CU(d)->cuMemcpyDtoDAsync(dd, sd, bytes, cs(s))); break;
    case GR_COPY_H2H: GR_CU_CHECK(CU(d)->cuMemcpyAsync(dd, sd, bytes, cs(s))); break;
    default: return gr_error(GR_ERR_INVALID, "cuda: memcpy: bad copy kind %d", (int)kind);
    }
    return GR_OK;
}

static gr_status cuda_memcpy2d_async(void *ctx, gr_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, gr_copy_kind kind) {
    cuda_dev *d = ctx;
    CUDA_MEMCPY2D m;
    memset(&m, 0, sizeof m);
    bool dev_src = kind == GR_COPY_D2D || kind == GR_COPY_D2H, dev_dst = kind == GR_COPY_D2D || kind == GR_COPY_H2D;
    if (kind != GR_COPY_D2D && kind != GR_COPY_D2H && kind != GR_COPY_H2D && kind != GR_COPY_H2H)
        return gr_error(GR_ERR_INVALID, "cuda: memcpy2d: bad copy kind %d", (int)kind);
    m.srcMemoryType = dev_src ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (dev_src) m.srcDevice = (CUdeviceptr)(uintptr_t)src;
    else m.srcHost = src;
    m.srcPitch = spitch;
    m.dstMemoryType = dev_dst ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (dev_dst) m.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    else m.dstHost = dst;
    m.dstPitch = dpitch;
    m.WidthInBytes = width;
    m.Height = height;
    GR_CU_CHECK(CU(d)->cuMemcpy2DAsync(&m, cs(s)));
    return GR_OK;
}

static gr_status cuda_memset_async(void *ctx, gr_stream *s, void *dst, int value, size_t bytes) {
    cuda_dev *d = ctx;
    if (bytes == 0) return GR_OK;
    GR_CU_CHECK(CU(d)->cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, (unsigned char)value, bytes, cs(s)));
    return GR_OK;
}

static gr_status cuda_kernel_prepare(void *ctx, const gr_kernel *k, unsigned flags, gr_kfunc **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    GR_TRY(gr_vec_reserve(&d->kfuncs, d->kfuncs.len + 1));
    GR_TRY(gr_cuda_kernel_prepare(&d->base, k, flags, out));
    d->kfuncs.data[d->kfuncs.len++] = *out;
    return GR_OK;
}

static gr_status cuda_kernels_warm(void *ctx, const gr_kernel *const *ks, const unsigned *flags, int n) {
    cuda_dev *d = ctx;
    return gr_cuda_kernels_warm(&d->base, ks, flags, n);
}

static void cuda_kernel_release(void *ctx, gr_kfunc *f) {
    cuda_dev *d = ctx;
    if (!f) return;
    for (int i = 0; i < d->kfuncs.len; i++)
        if (d->kfuncs.data[i] == f) {
            d->kfuncs.data[i] = d->kfuncs.data[--d->kfuncs.len];
            break;
        }
    if (f->shared) node_funcs_forget(d, NULL, f);
    gr_cuda_kernel_release(&d->base, f);
}

static void cuda_kernel_stats(void *ctx, gr_dev_kstats *out) {
    cuda_dev *d = ctx;
    *out = d->base.kstats;
    out->live_modules = d->base.modules.len;
}

static gr_status capture_info(cuda_dev *d, gr_stream *s, CUgraph *g, const CUgraphNode **deps, size_t *n_deps);

static gr_status cuda_kernel_launch(void *ctx, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args) {
    cuda_dev *d = ctx;
    if (n_args != gr_cuda_kernel_nargs(f))
        return gr_error(GR_ERR_INVALID, "kernel %s: %d arguments given, %d expected", f->kernel->name, n_args,
                        gr_cuda_kernel_nargs(f));
    void *params[GR_KMAX_PARAMS + 1];
    gr_cuda_kernel_params(f, args, n_args, params);
    unsigned grid, block;
    gr_cuda_kernel_dims(&d->base, f, args, &grid, &block);
    gr_status st = GR_CU_STATUS(CU(d)->cuLaunchKernel(f->fn, grid, 1, 1, block, 1, 1, 0, cs(s), params, NULL));
    if (st != GR_OK) return gr_error_prefix(st, "kernel %s", f->kernel->name);
    if (f->shared && s && s->capturing) {
        /* the node just captured is the stream's only dependency now */
        CUgraph g;
        const CUgraphNode *deps;
        size_t n_deps = 0;
        GR_TRY(capture_info(d, s, &g, &deps, &n_deps));
        if (n_deps != 1) return gr_error(GR_ERR_INTERNAL, "cuda: kernel %s: captured node not found", f->kernel->name);
        node_kfunc nk = {.node = deps[0], .f = f, .owner = NULL};
        GR_TRY(gr_vec_push(&d->node_funcs, nk));
    }
    return GR_OK;
}

static gr_status cuda_libcall(void *ctx, gr_stream *s, const gr_libcall *call, const gr_karg *args, int n_args) {
    cuda_dev *d = ctx;
    if (call->kind == GR_LIB_ATTENTION) return gr_cuda_attention(&d->base, cs(s), call, args, n_args);
    if (call->kind == GR_LIB_SAMPLE) return gr_cuda_sample(&d->base, cs(s), call, args, n_args);
    if (call->kind == GR_LIB_BEAM_STEP || call->kind == GR_LIB_BEAM_REORDER) return gr_cuda_beam(&d->base, cs(s), call, args, n_args);
    if (gr_lib_is_collective(call->kind)) return gr_cuda_collective(&d->base, cs(s), call, args, n_args);
    if (call->kind != GR_LIB_MATMUL) return gr_error(GR_ERR_UNSUPPORTED, "cuda: library call kind %d", (int)call->kind);
    return gr_cuda_matmul(&d->base, cs(s), call, args, n_args);
}

/* ==== graphs ================================================================================================ */

static gr_status cuda_capture_begin(void *ctx, gr_stream *s) {
    cuda_dev *d = ctx;
    if (!s) return gr_error(GR_ERR_INVALID, "cuda: cannot capture the legacy default stream");
    conds_forget(d, NULL);
    node_funcs_forget(d, NULL, NULL);
    GR_CU_CHECK(CU(d)->cuStreamBeginCapture(s->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    s->capturing = true;
    return GR_OK;
}

/* Forgets the conditionals owned by `owner` (NULL: those of captures that never
 * ended). Node handles of destroyed graphs can be reused by the driver, so a
 * stale entry must never match a new graph's node. */
static void conds_forget(cuda_dev *d, const gr_dgraph *owner) {
    int w = 0;
    for (int i = 0; i < d->conds.len; i++)
        if (d->conds.data[i].owner != owner) d->conds.data[w++] = d->conds.data[i];
    d->conds.len = w;
}

/* Forgets the captured generic nodes owned by `owner` (NULL: of captures that never
 * ended) or, with f, every node of kernel f (released). */
static void node_funcs_forget(cuda_dev *d, const gr_dgraph *owner, const gr_kfunc *f) {
    int w = 0;
    for (int i = 0; i < d->node_funcs.len; i++) {
        const node_kfunc *nk = &d->node_funcs.data[i];
        if (f ? nk->f != f : nk->owner != owner) d->node_funcs.data[w++] = *nk;
    }
    d->node_funcs.len = w;
}

static cuda_cond *cond_of_node(cuda_dev *d, CUgraphNode n, const gr_dgraph *dg) {
    for (int i = 0; i < d->conds.len; i++) {
        cuda_cond *c = &d->conds.data[i];
        if (c->placed && c->node == n && (c->owner == NULL || c->owner == dg)) return c;
    }
    return NULL;
}

/* Appends the nodes of g in pre-order (conditional bodies after their node). */
static gr_status collect_nodes(cuda_dev *d, gr_dgraph *dg, CUgraph g, int depth) {
    if (depth > 16) return gr_error(GR_ERR_UNSUPPORTED, "cuda: conditionals nested too deeply");
    size_t n = 0;
    GR_CU_CHECK(CU(d)->cuGraphGetNodes(g, NULL, &n));
    if (n == 0) return GR_OK;
    CUgraphNode *tmp = gr_malloc(n * sizeof(*tmp));
    if (!tmp) return GR_ERR_NOMEM;
    gr_status st = GR_CU_STATUS(CU(d)->cuGraphGetNodes(g, tmp, &n));
    for (size_t i = 0; i < n && st == GR_OK; i++) {
        st = gr_vec_push(&dg->nodes, tmp[i]);
        for (int j = 0; j < d->node_funcs.len; j++)
            if (d->node_funcs.data[j].node == tmp[i] && !d->node_funcs.data[j].owner) d->node_funcs.data[j].owner = dg;
        cuda_cond *c = st == GR_OK ? cond_of_node(d, tmp[i], dg) : NULL;
        if (c) c->owner = dg;
        for (int b = 0; c && b < (c->kind == GR_COND_IF_ELSE ? 2 : 1) && st == GR_OK; b++)
            st = collect_nodes(d, dg, c->bodies[b], depth + 1);
    }
    gr_free(tmp, n * sizeof(*tmp));
    return st;
}

static void dgraph_unref(cuda_dev *d, gr_dgraph *g) {
    if (!g || --g->refs > 0) return;
    conds_forget(d, g);
    node_funcs_forget(d, g, NULL);
    CU(d)->cuGraphDestroy(g->g);
    gr_vec_free(&g->nodes);
    gr_free(g, sizeof(*g));
}

static gr_status cuda_capture_end(void *ctx, gr_stream *s, gr_dgraph **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    CUgraph g = NULL;
    s->capturing = false;
    gr_status st = GR_CU_STATUS(CU(d)->cuStreamEndCapture(s->s, &g));
    if (st != GR_OK) {
        if (g) CU(d)->cuGraphDestroy(g);
        if (st == GR_ERR_HAZARD) return gr_error_prefix(st, "cuda: stream capture was invalidated by an operation a graph cannot hold");
        return st;
    }
    gr_dgraph *dg = gr_calloc(1, sizeof(*dg));
    if (!dg) {
        CU(d)->cuGraphDestroy(g);
        return GR_ERR_NOMEM;
    }
    dg->g = g;
    dg->refs = 1;
    st = collect_nodes(d, dg, g, 0);
    if (st != GR_OK) {
        dgraph_unref(d, dg);
        return st;
    }
    *out = dg;
    return GR_OK;
}

static void cuda_graph_destroy(void *ctx, gr_dgraph *g) { dgraph_unref(ctx, g); }

static gr_status cuda_graph_instantiate(void *ctx, gr_dgraph *g, gr_dexec **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    gr_dexec *e = gr_calloc(1, sizeof(*e));
    if (!e) return GR_ERR_NOMEM;
    gr_status st = GR_CU_STATUS(CU(d)->cuGraphInstantiateWithFlags(&e->e, g->g, 0));
    if (st != GR_OK) {
        gr_free(e, sizeof(*e));
        return st;
    }
    e->g = g;
    g->refs++;
    *out = e;
    return GR_OK;
}

static void cuda_exec_destroy(void *ctx, gr_dexec *e) {
    cuda_dev *d = ctx;
    if (!e) return;
    CU(d)->cuGraphExecDestroy(e->e);
    dgraph_unref(d, e->g);
    gr_free(e, sizeof(*e));
}

static gr_status cuda_graph_upload(void *ctx, gr_dexec *e, gr_stream *s) {
    cuda_dev *d = ctx;
    GR_CU_CHECK(CU(d)->cuGraphUpload(e->e, cs(s)));
    return GR_OK;
}

static gr_status cuda_graph_launch(void *ctx, gr_dexec *e, gr_stream *s) {
    cuda_dev *d = ctx;
    GR_CU_CHECK(CU(d)->cuGraphLaunch(e->e, cs(s)));
    return GR_OK;
}

static int cuda_graph_num_nodes(void *ctx, gr_dgraph *g) {
    (void)ctx;
    return g ? g->nodes.len : 0;
}

/* The graft kernel of a kernel node of graph `owner` (NULL: being captured) running fn. */
static gr_kfunc *kfunc_of(cuda_dev *d, CUgraphNode node, const gr_dgraph *owner, CUfunction fn) {
    for (int i = 0; i < d->node_funcs.len; i++) {
        const node_kfunc *nk = &d->node_funcs.data[i];
        if (nk->node == node && nk->owner == owner) return nk->f;
    }
    /* a literal kernel owns its function */
    for (int i = 0; i < d->kfuncs.len; i++)
        if (d->kfuncs.data[i]->fn == fn && !d->kfuncs.data[i]->shared) return d->kfuncs.data[i];
    return NULL;
}

static gr_status cuda_graph_node_info(void *ctx, gr_dgraph *g, int node, gr_gnode_info *out) {
    cuda_dev *d = ctx;
    memset(out, 0, sizeof(*out));
    if (!g || node < 0 || node >= g->nodes.len)
        return gr_error(GR_ERR_INVALID, "cuda: graph node %d does not exist (%d nodes)", node, g ? g->nodes.len : 0);
    CUgraphNode n = g->nodes.data[node];
    CUgraphNodeType t;
    GR_CU_CHECK(CU(d)->cuGraphNodeGetType(n, &t));
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        GR_CU_CHECK(CU(d)->cuGraphKernelNodeGetParams(n, &p));
        gr_kfunc *f = kfunc_of(d, n, g, p.func);
        out->kind = f ? GR_GNODE_KERNEL : GR_GNODE_LIBCALL; /* cuBLASLt's or graft's built-in kernels */
        out->func = f;
        out->n_args = f ? gr_cuda_kernel_nargs(f) : 0;
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: out->kind = GR_GNODE_COPY; break;
    case CU_GRAPH_NODE_TYPE_MEMSET: out->kind = GR_GNODE_MEMSET; break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: out->kind = GR_GNODE_CONDITIONAL; break;
    default: out->kind = GR_GNODE_LIBCALL; break;
    }
    return GR_OK;
}

static gr_status cuda_exec_kernel_node_set_args(void *ctx, gr_dexec *e, int node, const gr_karg *args, int n_args) {
    cuda_dev *d = ctx;
    if (node < 0 || node >= e->g->nodes.len)
        return gr_error(GR_ERR_INVALID, "cuda: graph node %d does not exist (%d nodes)", node, e->g->nodes.len);
    CUgraphNode n = e->g->nodes.data[node];
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    GR_CU_CHECK(CU(d)->cuGraphKernelNodeGetParams(n, &p));
    gr_kfunc *f = kfunc_of(d, n, e->g, p.func);
    if (!f) return gr_error(GR_ERR_INVALID, "cuda: graph node %d is not a graft kernel", node);
    if (n_args != gr_cuda_kernel_nargs(f))
        return gr_error(GR_ERR_INVALID, "kernel %s: %d arguments given, %d expected", f->kernel->name, n_args,
                        gr_cuda_kernel_nargs(f));
    void *params[GR_KMAX_PARAMS + 1];
    gr_cuda_kernel_params(f, args, n_args, params); /* a generic kernel keeps its slots */
    p.kernelParams = params;
    p.extra = NULL;
    GR_CU_CHECK(CU(d)->cuGraphExecKernelNodeSetParams(e->e, n, &p));
    /* A device-updatable node is re-patched from its argument block before every
     * replay: write the new arguments into the block too, or they would be undone. */
    size_t nd = 0;
    GR_CU_CHECK(CU(d)->cuGraphNodeGetDependencies(n, NULL, NULL, &nd));
    CUgraphNode deps[64];
    if (nd > 64) nd = 0;
    if (nd) GR_CU_CHECK(CU(d)->cuGraphNodeGetDependencies(n, deps, NULL, &nd));
    for (size_t i = 0; i < nd; i++) {
        CUgraphNodeType t;
        GR_CU_CHECK(CU(d)->cuGraphNodeGetType(deps[i], &t));
        if (t != CU_GRAPH_NODE_TYPE_KERNEL) continue;
        CUDA_KERNEL_NODE_PARAMS pp;
        memset(&pp, 0, sizeof pp);
        GR_CU_CHECK(CU(d)->cuGraphKernelNodeGetParams(deps[i], &pp));
        if (pp.func != d->fn_patch_args || !pp.kernelParams) continue;
        CUdeviceptr block = *(CUdeviceptr *)pp.kernelParams[1];
        GR_CU_CHECK(CU(d)->cuMemcpyHtoD(block, args, sizeof(gr_karg) * (size_t)n_args));
    }
    return GR_OK;
}

static gr_status cuda_exec_update(void *ctx, gr_dexec *e, gr_dgraph *g) {
    cuda_dev *d = ctx;
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    gr_status st = GR_CU_STATUS(CU(d)->cuGraphExecUpdate(e->e, g->g, &info));
    if (st != GR_OK) return gr_error_prefix(st, "cuda: exec_update (update result %d: topology or node types differ)", (int)info.result);
    return GR_OK;
}

/* The graph being captured on s and its current dependencies. */
static gr_status capture_info(cuda_dev *d, gr_stream *s, CUgraph *g, const CUgraphNode **deps, size_t *n_deps) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    const CUgraphEdgeData *edges = NULL;
    GR_CU_CHECK(CU(d)->cuStreamGetCaptureInfo(cs(s), &status, &id, g, deps, &edges, n_deps));
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return gr_error(status == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? GR_ERR_HAZARD : GR_ERR_INVALID,
                        "cuda: the stream is not capturing%s",
                        status == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? " (capture invalidated)" : "");
    return GR_OK;
}

static gr_status add_kernel_node(cuda_dev *d, CUgraph g, const CUgraphNode *deps, size_t n_deps, CUfunction fn,
                                 void **params, CUgraphNode *out) {
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_KERNEL;
    np.kernel.func = fn;
    np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
    np.kernel.blockDimX = 32;
    np.kernel.blockDimY = np.kernel.blockDimZ = 1;
    np.kernel.kernelParams = params;
    if (!CU(d)->cuGraphAddNode) return gr_error(GR_ERR_UNSUPPORTED, "cuda: the driver lacks cuGraphAddNode");
    GR_CU_CHECK(CU(d)->cuGraphAddNode(out, g, deps, NULL, n_deps, &np));
    return GR_OK;
}

static gr_status cuda_capture_mark_updatable(void *ctx, gr_stream *s, uint64_t *out_handle) {
    cuda_dev *d = ctx;
    *out_handle = 0;
    GR_TRY(builtin_load(d));
    CUgraph g;
    const CUgraphNode *deps;
    size_t n_deps;
    GR_TRY(capture_info(d, s, &g, &deps, &n_deps));
    CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
    if (n_deps == 1) GR_CU_CHECK(CU(d)->cuGraphNodeGetType(deps[0], &t));
    if (n_deps != 1 || t != CU_GRAPH_NODE_TYPE_KERNEL)
        return gr_error(GR_ERR_INVALID, "cuda: capture_mark_updatable: the last captured node is not a kernel");
    CUgraphNode node = deps[0];
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    GR_CU_CHECK(CU(d)->cuGraphKernelNodeGetParams(node, &kp));
    gr_kfunc *f = kfunc_of(d, node, NULL, kp.func);
    if (!f) return gr_error(GR_ERR_INVALID, "cuda: capture_mark_updatable: the last node is not a graft kernel");
    int n_args = gr_cuda_kernel_nargs(f);
    /* argument block = the node's current arguments */
    uint64_t block_init[GR_KMAX_PARAMS + 1];
    memset(block_init, 0, sizeof block_init);
    for (int i = 0; i < n_args; i++) memcpy(&block_init[i], kp.kernelParams[i], 8);
    CUdeviceptr block;
    GR_TRY(internal_alloc(d, block_init, (size_t)(n_args > 0 ? n_args : 1) * 8, &block));
    CUlaunchAttributeValue v;
    memset(&v, 0, sizeof v);
    v.deviceUpdatableKernelNode.deviceUpdatable = 1;
    GR_CU_CHECK(CU(d)->cuGraphKernelNodeSetAttribute(node, CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v));
    GR_CU_CHECK(CU(d)->cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v));
    CUgraphDeviceNode dev_node = v.deviceUpdatableKernelNode.devNode;
    /* insert the patch kernel between the node and its dependencies */
    size_t nd = 0;
    GR_CU_CHECK(CU(d)->cuGraphNodeGetDependencies(node, NULL, NULL, &nd));
    CUgraphNode node_deps[64];
    if (nd > 64) return gr_error(GR_ERR_UNSUPPORTED, "cuda: capture_mark_updatable: node has %zu dependencies", nd);
    if (nd) GR_CU_CHECK(CU(d)->cuGraphNodeGetDependencies(node, node_deps, NULL, &nd));
    long long n_ll = n_args;
    void *pargs[3] = {&dev_node, &block, &n_ll};
    CUgraphNode patch;
    GR_TRY(add_kernel_node(d, g, node_deps, nd, d->fn_patch_args, pargs, &patch));
    if (nd) {
        CUgraphNode to[64];
        for (size_t i = 0; i < nd; i++) to[i] = node;
        GR_CU_CHECK(CU(d)->cuGraphRemoveDependencies(g, node_deps, to, NULL, nd));
    }
    GR_CU_CHECK(CU(d)->cuGraphAddDependencies(g, &patch, &node, NULL, 1));
    *out_handle = (uint64_t)block;
    return GR_OK;
}

static cuda_cond *cond_find(cuda_dev *d, uint64_t handle) {
    for (int i = 0; i < d->conds.len; i++)
        if (d->conds.data[i].handle == handle) return &d->conds.data[i];
    return NULL;
}

/* Captures gr_cond_set(cond, flag) on s: copies the flag into the conditional handle. */
static gr_status launch_cond_set(cuda_dev *d, gr_stream *s, const cuda_cond *c) {
    unsigned long long h = c->cond;
    CUdeviceptr flag = (CUdeviceptr)c->handle;
    void *params[2] = {&h, &flag};
    GR_CU_CHECK(CU(d)->cuLaunchKernel(d->fn_cond_set, 1, 1, 1, 1, 1, 1, 0, cs(s), params, NULL));
    return GR_OK;
}

static gr_status cuda_cond_create(void *ctx, gr_stream *s, gr_cond_kind kind, unsigned default_value,
                                  uint64_t *out_handle) {
    cuda_dev *d = ctx;
    *out_handle = 0;
    if ((int)kind < 0 || kind > GR_COND_WHILE) return gr_error(GR_ERR_INVALID, "cuda: cond_create: bad kind %d", (int)kind);
    if (!CU(d)->cuGraphConditionalHandleCreate || !CU(d)->cuGraphAddNode || !CU(d)->cuStreamBeginCaptureToGraph)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: the driver does not support conditional graph nodes");
    GR_TRY(builtin_load(d));
    GR_TRY(gr_vec_reserve(&d->conds, d->conds.len + 1));
    CUgraph g;
    const CUgraphNode *deps;
    size_t n_deps;
    GR_TRY(capture_info(d, s, &g, &deps, &n_deps));
    cuda_cond c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.parent = g;
    CUdeviceptr flag;
    GR_TRY(internal_alloc(d, &default_value, sizeof default_value, &flag));
    c.handle = (uint64_t)flag;
    GR_CU_CHECK(CU(d)->cuGraphConditionalHandleCreate(&c.cond, g, d->base.ctx, default_value, CU_GRAPH_COND_ASSIGN_DEFAULT));
    /* every launch starts from the default value (as the simulator does): a
     * memset node here, before any kernel that computes the flag */
    unsigned char bytes[sizeof default_value];
    memcpy(bytes, &default_value, sizeof bytes);
    bool uniform = true;
    for (unsigned b = 1; b < sizeof bytes; b++) uniform = uniform && bytes[b] == bytes[0];
    if (uniform) GR_CU_CHECK(CU(d)->cuMemsetD8Async((CUdeviceptr)flag, bytes[0], sizeof bytes, cs(s)));
    else
        for (unsigned b = 0; b < sizeof bytes; b++) GR_CU_CHECK(CU(d)->cuMemsetD8Async((CUdeviceptr)(flag + b), bytes[b], 1, cs(s)));
    /* the setter kernel and the node are placed at the first cond_body_begin, so
     * work captured between cond_create and the body (the kernel computing the
     * flag) runs before the condition is read */
    d->conds.data[d->conds.len++] = c;
    *out_handle = c.handle;
    return GR_OK;
}

/* A body is captured by ending the capture into the parent graph and capturing into the
 * body graph; cond_body_end resumes the parent after the conditional node. */
static gr_status cuda_cond_body_begin(void *ctx, gr_stream *s, uint64_t handle, int branch) {
    cuda_dev *d = ctx;
    cuda_cond *c = cond_find(d, handle);
    if (!c) return gr_error(GR_ERR_INVALID, "cuda: cond_body_begin: unknown condition handle 0x%llx", (unsigned long long)handle);
    if (branch < 0 || branch > (c->kind == GR_COND_IF_ELSE ? 1 : 0))
        return gr_error(GR_ERR_INVALID, "cuda: cond_body_begin: branch %d does not exist for this conditional", branch);
    CUgraph g;
    const CUgraphNode *deps;
    size_t n_deps;
    if (!c->placed) {
        if (branch != 0) return gr_error(GR_ERR_INVALID, "cuda: cond_body_begin: capture branch 0 first");
        GR_TRY(launch_cond_set(d, s, c));
        GR_TRY(capture_info(d, s, &g, &deps, &n_deps));
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        np.conditional.handle = c->cond;
        np.conditional.type = c->kind == GR_COND_WHILE ? CU_GRAPH_COND_TYPE_WHILE : CU_GRAPH_COND_TYPE_IF;
        np.conditional.size = c->kind == GR_COND_IF_ELSE ? 2 : 1;
        np.conditional.ctx = d->base.ctx;
        GR_CU_CHECK(CU(d)->cuGraphAddNode(&c->node, g, deps, NULL, n_deps, &np));
        for (unsigned b = 0; b < np.conditional.size; b++) c->bodies[b] = np.conditional.phGraph_out[b];
        GR_CU_CHECK(CU(d)->cuStreamUpdateCaptureDependencies(cs(s), &c->node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
        c->placed = true;
    }
    GR_TRY(capture_info(d, s, &g, &deps, &n_deps));
    CUgraph ended = NULL;
    GR_CU_CHECK(CU(d)->cuStreamEndCapture(cs(s), &ended));
    GR_CU_CHECK(CU(d)->cuStreamBeginCaptureToGraph(cs(s), c->bodies[branch], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    return GR_OK;
}

static gr_status cuda_cond_body_end(void *ctx, gr_stream *s, uint64_t handle, int branch) {
    cuda_dev *d = ctx;
    cuda_cond *c = cond_find(d, handle);
    if (!c) return gr_error(GR_ERR_INVALID, "cuda: cond_body_end: unknown condition handle 0x%llx", (unsigned long long)handle);
    if (c->kind == GR_COND_WHILE) GR_TRY(launch_cond_set(d, s, c)); /* re-evaluate after each iteration */
    CUgraph ended = NULL;
    gr_status st = GR_CU_STATUS(CU(d)->cuStreamEndCapture(cs(s), &ended));
    if (st != GR_OK) return gr_error_prefix(st, "cuda: capture of conditional body %d", branch);
    GR_CU_CHECK(CU(d)->cuStreamBeginCaptureToGraph(cs(s), c->parent, &c->node, NULL, 1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    return GR_OK;
}

static double cuda_clock_us(void *ctx) {
    (void)ctx;
    return gr_now_us();
}

/* device memory (cuMemAlloc), page-locked host memory (cuMemHostAlloc), pageable host memory */
static bool cuda_has_mem_kind(void *ctx, gr_mem_kind kind) {
    (void)ctx;
    return kind == GR_MEM_DEVICE || kind == GR_MEM_HOST_PINNED || kind == GR_MEM_HOST;
}

/* ==== collectives (tensor parallelism) ============================================================================ */
static gr_status cuda_comm_init(void **ctxs, int n, const void *unique_id, int first_rank, int world_size) {
    gr_cuda_ctx *bases[GR_DEV_MAX_RANKS];
    if (n < 1 || n > GR_DEV_MAX_RANKS) return gr_error(GR_ERR_INVALID, "cuda: %d ranks in one process", n);
    for (int i = 0; i < n; i++) bases[i] = &((cuda_dev *)ctxs[i])->base;
    return gr_cuda_nccl_init(bases, n, unique_id, first_rank, world_size);
}

/* the calling thread works on this GPU: its context current (each rank's host thread) */
static gr_status cuda_comm_enter(void *ctx) {
    cuda_dev *d = ctx;
    GR_CU_CHECK(CU(d)->cuCtxSetCurrent(d->base.ctx));
    return GR_OK;
}

static void cuda_comm_leave(void *ctx) { (void)ctx; }

static const struct gr_device_i cuda_iface = {
    .name = cuda_name,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .has_mem_kind = cuda_has_mem_kind,
    .mem_in_use = cuda_mem_in_use,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_elapsed_us = cuda_event_elapsed_us,
    .stream_wrap = cuda_stream_wrap,
    .stream_wait_event = cuda_stream_wait_event,
    .memcpy_async = cuda_memcpy_async,
    .memcpy2d_async = cuda_memcpy2d_async,
    .memset_async = cuda_memset_async,
    .kernel_prepare = cuda_kernel_prepare,
    .kernels_warm = cuda_kernels_warm,
    .kernel_release = cuda_kernel_release,
    .kernel_launch = cuda_kernel_launch,
    .libcall = cuda_libcall,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_destroy = cuda_graph_destroy,
    .graph_instantiate = cuda_graph_instantiate,
    .exec_destroy = cuda_exec_destroy,
    .graph_upload = cuda_graph_upload,
    .graph_launch = cuda_graph_launch,
    .graph_num_nodes = cuda_graph_num_nodes,
    .graph_node_info = cuda_graph_node_info,
    .exec_kernel_node_set_args = cuda_exec_kernel_node_set_args,
    .exec_update = cuda_exec_update,
    .capture_mark_updatable = cuda_capture_mark_updatable,
    .cond_create = cuda_cond_create,
    .cond_body_begin = cuda_cond_body_begin,
    .cond_body_end = cuda_cond_body_end,
    .clock_us = cuda_clock_us,
    .kernel_stats = cuda_kernel_stats,
    .mem_info = cuda_mem_info,
    .comm_init = cuda_comm_init,
    .comm_enter = cuda_comm_enter,
    .comm_leave = cuda_comm_leave,
    .thread_bind = cuda_comm_enter,
};

/* ==== creation ================================================================================================ */

static char *default_cache_dir(void) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0]) return gr_sprintf("%s/graft", xdg);
    const char *home = getenv("HOME");
    if (home && home[0]) return gr_sprintf("%s/.cache/graft", home);
    return NULL;
}

static gr_status cuda_open(cuda_dev *d, const char *cache_dir, int ordinal) {
    const gr_cu_api *cu = CU(d);
    gr_status st = GR_CU_STATUS(cu->cuInit(0));
    if (st != GR_OK) return gr_error_prefix(GR_ERR_DEVICE, "no CUDA device");
    int count = 0;
    GR_CU_CHECK(cu->cuDeviceGetCount(&count));
    if (count == 0) return gr_error(GR_ERR_DEVICE, "no CUDA device");
    if (ordinal >= count)
        return gr_error(GR_ERR_DEVICE, "GPU %d asked for (tensor parallelism: one GPU per rank), the host has %d GPU%s", ordinal,
                        count, count == 1 ? "" : "s");
    GR_CU_CHECK(cu->cuDeviceGet(&d->base.dev, ordinal));
    GR_CU_CHECK(cu->cuDevicePrimaryCtxRetain(&d->base.ctx, d->base.dev));
    GR_CU_CHECK(cu->cuCtxSetCurrent(d->base.ctx));
    int major = 0, minor = 0;
    GR_CU_CHECK(cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->base.dev));
    GR_CU_CHECK(cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->base.dev));
    GR_CU_CHECK(cu->cuDeviceGetAttribute(&d->base.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->base.dev));
    d->base.arch = major * 10 + minor;
    const char *wl = getenv("GRAFT_CUDA_WARP_ROW_LAUNCH"); /* a test hook (cuda-impl.h) */
    if (wl) {
        unsigned b = 0, g = 0;
        char tail = 0;
        if (sscanf(wl, "%ux%u%c", &b, &g, &tail) != 2 || b < 32 || b > 256 || b % 32 || g < 1)
            return gr_error(GR_ERR_INVALID, "GRAFT_CUDA_WARP_ROW_LAUNCH=%s: expected BLOCKxGRID, BLOCK a multiple of 32 up to 256", wl);
        d->base.warp_row_block = b;
        d->base.warp_row_grid = g;
    }
    GR_CU_CHECK(cu->cuDriverGetVersion(&d->base.driver_version));
    char dev_name[200] = "CUDA device";
    (void)cu->cuDeviceGetName(dev_name, sizeof dev_name, d->base.dev); /* best effort: a label */
    /* the kernel driver's version (580.xx) is in /proc; the CUDA version from the API */
    char kdrv[64] = "";
    FILE *f = fopen("/sys/module/nvidia/version", "r");
    if (f) {
        if (fgets(kdrv, sizeof kdrv, f)) kdrv[strcspn(kdrv, "\n")] = 0;
        fclose(f);
    }
    /* the name may be cut at sizeof name: that is fine for a label */
    int name_len = snprintf(d->base.name, sizeof d->base.name, "%s (sm_%d, driver %s%sCUDA %d.%d)", dev_name, d->base.arch,
                            kdrv[0] ? kdrv : "", kdrv[0] ? ", " : "", d->base.driver_version / 1000,
                            d->base.driver_version % 1000 / 10);
    if (name_len < 0) d->base.name[0] = 0;
    d->base.cache_dir = cache_dir ? gr_strdup(cache_dir) : default_cache_dir();
    /* the cuBLASLt workspace is allocated now, so that captures never allocate */
    return gr_cuda_blas_init(&d->base);
}

gr_status gr_device_cuda_create(const char *cache_dir, gr_device **out) { return gr_device_cuda_create_ordinal(cache_dir, 0, out); }

gr_status gr_device_cuda_create_ordinal(const char *cache_dir, int ordinal, gr_device **out) {
    *out = NULL;
    if (ordinal < 0) return gr_error(GR_ERR_INVALID, "cuda: GPU %d", ordinal);
    const gr_cu_api *cu;
    GR_TRY(gr_cuda_load_driver(&cu));
    cuda_dev *d = gr_calloc(1, sizeof(*d));
    if (!d) return GR_ERR_NOMEM;
    d->base.cu = cu;
    gr_status st = cuda_open(d, cache_dir, ordinal);
    if (st != GR_OK) {
        cuda_destroy(d);
        return st;
    }
    gr_device *dev = gr_calloc(1, sizeof(*dev));
    if (!dev) {
        cuda_destroy(d);
        return GR_ERR_NOMEM;
    }
    dev->iface = &cuda_iface;
    dev->ctx = d;
    dev->kind = GR_DEVICE_CUDA;
    *out = dev;
    return GR_OK;
}

/* ==== fixed modules ============================================================================ */

gr_status gr_cuda_fixed_module(gr_cuda_ctx *c, const char *source, const char *nvrtc_name, const char *what, int n,
                               const char *const *names, CUmodule *module, CUfunction *fns) {
    *module = NULL;
    void *img = NULL;
    size_t bytes = 0;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (c->cu->cuThreadExchangeStreamCaptureMode) c->cu->cuThreadExchangeStreamCaptureMode(&mode);
    gr_status st = gr_cuda_nvrtc_compile(source, nvrtc_name, c->arch, false, &img, &bytes);
    if (st == GR_OK) {
        c->kstats.compiles++;
        st = GR_CU_STATUS(c->cu->cuModuleLoadData(module, img));
        gr_free(img, bytes);
    }
    if (st == GR_OK) c->kstats.module_loads++;
    for (int i = 0; i < n && st == GR_OK; i++) st = GR_CU_STATUS(c->cu->cuModuleGetFunction(&fns[i], *module, names[i]));
    if (c->cu->cuThreadExchangeStreamCaptureMode) c->cu->cuThreadExchangeStreamCaptureMode(&mode);
    if (st != GR_OK) {
        if (*module) c->cu->cuModuleUnload(*module);
        *module = NULL;
        return gr_error_prefix(st, "cuda: %s", what);
    }
    return GR_OK;
}
