/* device/cuda/cuda-nccl — collectives through NCCL, loaded at run time (tensor parallelism).
 *
 * No nccl.h is needed to build: the few entry points graft calls are declared below from
 * NCCL's documented C API (nccl.h of NCCL 2.x; the ABI has been stable across 2.x), and
 * libnccl.so.2 is opened with dlopen the first time devices are joined. Without NCCL,
 * joining fails with a message saying what was looked for; nothing else changes.
 *
 * Communicator: ncclCommInitRank from one ncclUniqueId. One process joining all its GPUs
 * makes the id itself and initialises every rank in one ncclGroupStart/End; a launcher that
 * spreads ranks over processes or hosts passes the id (exchanged through a file or the
 * network) with the ranks' offset, and the same calls follow. Collectives are enqueued on
 * the rank's stream, so a capture records them into the segment's graph (NCCL >= 2.9
 * supports stream capture); each rank's host thread issues its own (runtime/tp.c). The
 * communicators of one process's ranks are finalized together, in one group, when the first
 * of their devices is destroyed. */
#include "device/cuda/cuda-impl.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- NCCL's documented API (nccl.h), the parts graft uses ---- */
typedef struct ncclComm *ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef int ncclResult_t; /* ncclSuccess = 0 */
typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

typedef struct {
    ncclResult_t (*ncclGetVersion)(int *version);
    ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
    ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
    ncclResult_t (*ncclGroupStart)(void);
    ncclResult_t (*ncclGroupEnd)(void);
    ncclResult_t (*ncclAllReduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, CUstream stream);
    ncclResult_t (*ncclAllGather)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                  CUstream stream);
    const char *(*ncclGetErrorString)(ncclResult_t r);
    ncclResult_t (*ncclCommFinalize)(ncclComm_t comm); /* NCCL >= 2.14; NULL before */
} gr_nccl_api;

/* The ranks this process joined in one gr_cuda_nccl_init: torn down together (finalizing one
 * rank's communicator may wait for its peers, so one thread finalizes all of them in a group). */
struct gr_cuda_nccl_group {
    int n;
    gr_cuda_ctx *members[GR_DEV_MAX_RANKS];
};

static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;
static gr_nccl_api nccl;
static bool nccl_loaded;
static char nccl_error[512];

static gr_status load_locked(void) {
    static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
    void *h = NULL;
    for (int i = 0; names[i] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nccl_error, sizeof nccl_error,
                 "tensor parallelism on GPUs needs NCCL: libnccl.so.2 not found (dlopen: %s); install NCCL "
                 "(libnccl2, or pip's nvidia-nccl-cu12/cu13) or add its directory to LD_LIBRARY_PATH",
                 dlerror());
        return GR_ERR_DEVICE;
    }
    gr_nccl_api api;
    memset(&api, 0, sizeof api);
#define GR_NCCL_RESOLVE(name)                                                                              \
    {                                                                                                      \
        void *fp = dlsym(h, #name);                                                                        \
        if (!fp) {                                                                                         \
            snprintf(nccl_error, sizeof nccl_error, "NCCL library lacks %s (NCCL 2.x expected)", #name);   \
            dlclose(h);                                                                                    \
            return GR_ERR_DEVICE;                                                                          \
        }                                                                                                  \
        memcpy(&api.name, &fp, sizeof fp);                                                                 \
    }
    GR_NCCL_RESOLVE(ncclGetVersion) GR_NCCL_RESOLVE(ncclGetUniqueId) GR_NCCL_RESOLVE(ncclCommInitRank)
    GR_NCCL_RESOLVE(ncclCommDestroy) GR_NCCL_RESOLVE(ncclGroupStart) GR_NCCL_RESOLVE(ncclGroupEnd)
    GR_NCCL_RESOLVE(ncclAllReduce) GR_NCCL_RESOLVE(ncclAllGather) GR_NCCL_RESOLVE(ncclGetErrorString)
#undef GR_NCCL_RESOLVE
    void *fin = dlsym(h, "ncclCommFinalize");
    memcpy(&api.ncclCommFinalize, &fin, sizeof fin);
    nccl = api;
    return GR_OK;
}

static gr_status load(void) {
    pthread_mutex_lock(&nccl_lock);
    gr_status st = GR_OK;
    if (!nccl_loaded) {
        st = load_locked();
        nccl_loaded = st == GR_OK;
    }
    pthread_mutex_unlock(&nccl_lock);
    if (st != GR_OK) return gr_error(st, "%s", nccl_error);
    return GR_OK;
}

static gr_status nccl_status(ncclResult_t r, const char *call) {
    if (r == 0) return GR_OK;
    return gr_error(GR_ERR_DEVICE, "NCCL: %s: %s (ncclResult_t %d)", call, nccl.ncclGetErrorString ? nccl.ncclGetErrorString(r) : "?",
                    (int)r);
}
#define GR_NCCL_CHECK(expr) GR_TRY(nccl_status((expr), #expr))

gr_status gr_cuda_nccl_init(gr_cuda_ctx **ranks, int n, const void *unique_id, int first_rank, int world_size) {
    GR_TRY(load());
    if (first_rank < 0 || world_size < first_rank + n)
        return gr_error(GR_ERR_INVALID, "NCCL: ranks %d..%d do not fit a world of %d", first_rank, first_rank + n - 1, world_size);
    for (int i = 0; i < n; i++)
        if (ranks[i]->nccl) return gr_error(GR_ERR_INVALID, "NCCL: device %d already belongs to a communicator", i);
    ncclUniqueId id;
    if (unique_id) memcpy(&id, unique_id, sizeof id);
    else GR_NCCL_CHECK(nccl.ncclGetUniqueId(&id));
    ncclComm_t comms[GR_DEV_MAX_RANKS] = {0};
    if (n > GR_DEV_MAX_RANKS) return gr_error(GR_ERR_INVALID, "NCCL: %d ranks in one process, at most %d", n, GR_DEV_MAX_RANKS);
    /* one thread initialising several ranks: inside a group, or the first call would wait for the others */
    gr_status st = nccl_status(nccl.ncclGroupStart(), "ncclGroupStart()");
    for (int i = 0; i < n && st == GR_OK; i++) {
        st = GR_CU_STATUS(ranks[i]->cu->cuCtxSetCurrent(ranks[i]->ctx));
        if (st == GR_OK) st = nccl_status(nccl.ncclCommInitRank(&comms[i], world_size, id, first_rank + i), "ncclCommInitRank()");
    }
    gr_status end = nccl_status(nccl.ncclGroupEnd(), "ncclGroupEnd()");
    if (st == GR_OK) st = end;
    if (st != GR_OK) {
        for (int i = 0; i < n; i++)
            if (comms[i]) nccl.ncclCommDestroy(comms[i]);
        return gr_error_prefix(st, "joining %d GPUs", n);
    }
    struct gr_cuda_nccl_group *group = gr_calloc(1, sizeof *group);
    if (!group) {
        for (int i = 0; i < n; i++) nccl.ncclCommDestroy(comms[i]);
        return gr_nomem();
    }
    group->n = n;
    for (int i = 0; i < n; i++) {
        ranks[i]->nccl = comms[i];
        ranks[i]->nccl_rank = first_rank + i;
        ranks[i]->nccl_ranks = world_size;
        ranks[i]->nccl_group = group;
        group->members[i] = ranks[i];
    }
    return GR_OK;
}

/* The first device of a group to go takes every rank's communicator with it: each GPU drained,
 * all finalized in one group, then destroyed. */
void gr_cuda_nccl_destroy(gr_cuda_ctx *d) {
    struct gr_cuda_nccl_group *group = d->nccl_group;
    if (!group) return;
    for (int i = 0; i < group->n; i++) {
        gr_cuda_ctx *m = group->members[i];
        m->cu->cuCtxSetCurrent(m->ctx);
        m->cu->cuCtxSynchronize();
    }
    if (nccl.ncclCommFinalize) {
        nccl.ncclGroupStart();
        for (int i = 0; i < group->n; i++) nccl.ncclCommFinalize((ncclComm_t)group->members[i]->nccl);
        nccl.ncclGroupEnd();
    }
    for (int i = 0; i < group->n; i++) {
        gr_cuda_ctx *m = group->members[i];
        m->cu->cuCtxSetCurrent(m->ctx);
        nccl.ncclCommDestroy((ncclComm_t)m->nccl);
        m->nccl = NULL;
        m->nccl_group = NULL;
    }
    d->cu->cuCtxSetCurrent(d->ctx);
    gr_free(group, sizeof *group);
}

static bool nccl_type(gr_dtype t, ncclDataType_t *out) {
    switch (t) {
    case GR_F32: *out = ncclFloat32; return true;
    case GR_F16: *out = ncclFloat16; return true;
    case GR_BF16: *out = ncclBfloat16; return true;
    case GR_F64: *out = ncclFloat64; return true;
    case GR_I32: *out = ncclInt32; return true;
    case GR_I64: *out = ncclInt64; return true;
    case GR_I8: *out = ncclInt8; return true;
    case GR_U8: *out = ncclUint8; return true;
    default: return false;
    }
}

gr_status gr_cuda_collective(gr_cuda_ctx *d, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args) {
    if (n_args < 3) return gr_error(GR_ERR_INVALID, "cuda: %s: %d arguments, expected %d", call->name, n_args, GR_LIB_COLLECTIVE_NARGS);
    if (!d->nccl)
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: %s: a collective over %lld ranks on a GPU that joined no communicator",
                        call->name, (long long)call->n);
    if (call->n != d->nccl_ranks)
        return gr_error(GR_ERR_INVALID, "cuda: %s: a collective over %lld ranks, the communicator has %d", call->name,
                        (long long)call->n, d->nccl_ranks);
    ncclDataType_t t;
    if (!nccl_type(call->dtype, &t))
        return gr_error(GR_ERR_UNSUPPORTED, "cuda: %s: NCCL has no %s type", call->name, gr_dtype_name(call->dtype));
    if (call->kind == GR_LIB_ALL_REDUCE)
        GR_NCCL_CHECK(nccl.ncclAllReduce(args[0].ptr, args[2].ptr, (size_t)call->m, t, ncclSum, (ncclComm_t)d->nccl, stream));
    else
        GR_NCCL_CHECK(nccl.ncclAllGather(args[0].ptr, args[2].ptr, (size_t)call->m, t, (ncclComm_t)d->nccl, stream));
    return GR_OK;
}
