/* device/cuda — private declarations of the CUDA backend.
 *
 * Nothing from CUDA is linked: libcuda.so.1, libnvrtc and libcublasLt are
 * opened with dlopen at run time, so one binary runs on machines without a
 * GPU. Function pointer types come from the toolkit headers through
 * __typeof__, so a prototype can never drift from the header it was built with.
 */
#ifndef GR_CUDA_IMPL_H
#define GR_CUDA_IMPL_H

#include "device/device.h"
#include <cublasLt.h>
#include <cuda.h>
#include <nvrtc.h>

/* ---- driver API (resolved with cuGetProcAddress at the headers' CUDA_VERSION) ---- */
#define GR_CU_FUNCS(X)                                                                                   \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)          \
    X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)              \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree)     \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemGetInfo) X(cuStreamCreate) X(cuStreamDestroy)            \
    X(cuStreamSynchronize) X(cuMemcpyAsync) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                 \
    X(cuMemcpyDtoDAsync) X(cuMemcpy2DAsync) X(cuMemsetD8Async) X(cuModuleLoadData) X(cuModuleUnload)                     \
    X(cuModuleGetFunction) X(cuLaunchKernel) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuStreamWaitEvent) \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuStreamBeginCapture) X(cuStreamEndCapture)          \
    X(cuStreamIsCapturing) X(cuStreamGetCaptureInfo) X(cuStreamUpdateCaptureDependencies)            \
    X(cuStreamBeginCaptureToGraph) X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphInstantiateWithFlags)          \
    X(cuGraphExecDestroy) X(cuGraphUpload) X(cuGraphLaunch) X(cuGraphGetNodes) X(cuGraphNodeGetType)   \
    X(cuGraphKernelNodeGetParams) X(cuGraphExecKernelNodeSetParams) X(cuGraphExecUpdate)              \
    X(cuGraphKernelNodeSetAttribute) X(cuGraphKernelNodeGetAttribute)                                  \
    X(cuGraphConditionalHandleCreate) X(cuGraphAddNode) X(cuFuncSetAttribute) X(cuThreadExchangeStreamCaptureMode) X(cuMemcpyHtoD)                \
    X(cuGraphAddDependencies) X(cuGraphRemoveDependencies) X(cuGraphNodeGetDependencies) X(cuLaunchKernelEx)

typedef struct {
#define GR_CU_FIELD(name) __typeof__(name) *name;
    GR_CU_FUNCS(GR_CU_FIELD)
#undef GR_CU_FIELD
} gr_cu_api;

/* ---- NVRTC ---- */
#define GR_NVRTC_FUNCS(X)                                                                               \
    X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)               \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize)       \
    X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

typedef struct {
#define GR_NVRTC_FIELD(name) __typeof__(name) *name;
    GR_NVRTC_FUNCS(GR_NVRTC_FIELD)
#undef GR_NVRTC_FIELD
    int major, minor;
} gr_nvrtc_api;

/* ---- cuBLASLt ---- */
#define GR_LT_FUNCS(X)                                                                                  \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtGetVersion)               \
    X(cublasLtMatmul) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                     \
    X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)       \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate)                                \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                         \
    X(cublasLtMatmulAlgoGetHeuristic)

typedef struct {
#define GR_LT_FIELD(name) __typeof__(name) *name;
    GR_LT_FUNCS(GR_LT_FIELD)
#undef GR_LT_FIELD
} gr_lt_api;

/* ---- errors: one style for every driver, NVRTC and cuBLASLt call ----
 * gr_cuda_status / gr_nvrtc_status / gr_lt_status turn a library result into a
 * gr_status and, on failure, set the message "<call>: <error name> (<library's
 * message>)", the call as written at the call site, from its function name on. Out of
 * memory becomes GR_ERR_NOMEM; a driver error that a stream capture cannot hold
 * becomes GR_ERR_HAZARD (the capture is invalidated, as on the simulator); anything
 * else GR_ERR_DEVICE. Use:
 *   GR_CU_CHECK(expr)            return the status from the enclosing function on failure
 *   st = GR_CU_STATUS(expr)      where cleanup or a prefix (gr_error_prefix) comes first
 * and GR_NVRTC_CHECK/STATUS, GR_LT_CHECK/STATUS for NVRTC and cuBLASLt. Release paths
 * (destroy, free, unload) ignore results: there is nobody to report them to. */
gr_status gr_cuda_status(CUresult r, const char *call);
gr_status gr_nvrtc_status(nvrtcResult r, const char *call);
gr_status gr_lt_status(cublasStatus_t r, const char *call);
#define GR_CU_STATUS(expr) gr_cuda_status((expr), #expr)
#define GR_CU_CHECK(expr) GR_TRY(GR_CU_STATUS(expr))
#define GR_NVRTC_STATUS(expr) gr_nvrtc_status((expr), #expr)
#define GR_NVRTC_CHECK(expr) GR_TRY(GR_NVRTC_STATUS(expr))
#define GR_LT_STATUS(expr) gr_lt_status((expr), #expr)
#define GR_LT_CHECK(expr) GR_TRY(GR_LT_STATUS(expr))

/* ---- loading (cuda-load.c) ---- */
/* Process-wide, loaded once (thread-safe); the libraries stay open until exit. */
gr_status gr_cuda_load_driver(const gr_cu_api **out);
/* The driver symbol an entry is resolved by (cuda-load.c): its name as the headers expand it,
 * less the ABI suffix. gr_cuda_api_symbols lists every entry's (returns the count). */
#define GR_CU_STR(x) #x
#define GR_CU_XSTR(x) GR_CU_STR(x)
void gr_cuda_proc_symbol(const char *expanded, char *out, size_t n);
int gr_cuda_api_symbols(char (*out)[96], int cap);
gr_status gr_cuda_load_nvrtc(const gr_nvrtc_api **out);
gr_status gr_cuda_load_cublaslt(const gr_lt_api **out);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
const char *gr_cuda_err_name(CUresult r);

/* Compiles CUDA C with NVRTC to a cubin for sm_<arch> (e.g. 90). The cubin is
 * gr_malloc'ed (free with gr_free(cubin, size)). Errors carry the NVRTC log and
 * the kernel name. `ptx` selects PTX output (compute_<arch>) instead. */
gr_status gr_cuda_nvrtc_compile(const char *source, const char *kernel_name, int arch, bool ptx, void **out,
                                size_t *out_size);
/* Options passed to NVRTC (for the cache key). */
const char *gr_cuda_nvrtc_options(void);

/* ---- the device context (cuda-device.c) ---- */
typedef struct gr_cuda_lt gr_cuda_lt; /* cuBLASLt state (cuda-blas.c) */
typedef struct gr_cuda_module gr_cuda_module; /* a generic kernel's module, shared (cuda-kernel.c) */

typedef struct gr_cuda_ctx {
    const gr_cu_api *cu;
    CUdevice dev;
    CUcontext ctx;
    int arch;           /* 90 on H100 */
    int sm_count;
    /* a test hook (tools/gpucheck): GRAFT_CUDA_WARP_ROW_LAUNCH=BLOCKxGRID at creation launches the
     * warp-row form's kernels with these dims (the form takes any grid and any block of whole
     * warps up to 256 threads, with the same bits); 0: the launch dims' own choice */
    unsigned warp_row_block, warp_row_grid;
    int driver_version; /* 13000 */
    char name[256];
    char *cache_dir;    /* gr_strdup'ed; NULL: no disk cache */
    size_t mem_in_use;
    GR_VEC(struct gr_cuda_alloc) allocs; /* live device allocations, for mem_in_use */
    gr_cuda_lt *lt;     /* NULL until the first libcall */
    CUdeviceptr lt_workspace;
    size_t lt_workspace_bytes;
    GR_VEC(gr_cuda_module *) modules; /* live generic modules, one per generic source */
    struct gr_cuda_attn *attn;  /* attention kernels (cuda-attn.c), NULL until the first attention */
    struct gr_cuda_sample *sample; /* the sample kernel (cuda-sample.c), NULL until the first sample */
    struct gr_cuda_beam *beam;     /* the beam kernels (cuda-beam.c), NULL until the first beam call */
    gr_dev_kstats kstats;       /* live_modules is modules.len */
    void *nccl;                 /* ncclComm_t of tensor parallelism (cuda-nccl.c), NULL: none */
    int nccl_rank, nccl_ranks;
    struct gr_cuda_nccl_group *nccl_group; /* the ranks joined with it in this process */
} gr_cuda_ctx;

/* ---- collectives (cuda-nccl.c): NCCL loaded at run time ---- */
gr_status gr_cuda_nccl_init(gr_cuda_ctx **ranks, int n, const void *unique_id, int first_rank, int world_size);
void gr_cuda_nccl_destroy(gr_cuda_ctx *d);
gr_status gr_cuda_collective(gr_cuda_ctx *d, CUstream stream, const gr_libcall *call, const gr_karg *args, int n_args);

struct gr_cuda_alloc {
    void *ptr;
    size_t bytes;
    gr_mem_kind kind;
};


/* ---- kernels (cuda-kernel.c) ---- */
struct gr_kfunc {
    gr_kernel *kernel; /* clone, for launch dims (GR_KPREP_BORROW: the caller's kernel) */
    bool kernel_borrowed;
    CUmodule module;   /* literal: its own module; generic: NULL (the shared module's) */
    CUfunction fn;     /* generic: shared by every gr_kfunc of the module */
    bool from_cache;
    gr_cuda_module *shared; /* generic: the module, refcounted; NULL: literal */
    int n_slots;            /* generic: slot values, passed by value after the kir arguments */
    int64_t *slots;
    bool table;             /* GR_KPREP_SLOT_TABLE: the slots' device address is the last argument
                               (GR_RENDER_GENERIC_TABLE code; slots NULL) */
};
/* Arguments a launch of f takes: its kir parameters, plus the slot table's address (table). */
static inline int gr_cuda_kernel_nargs(const gr_kfunc *f) { return f->kernel->n_params + (f->table ? 1 : 0); }
/* flags: GR_KPREP_* (device.h) */
gr_status gr_cuda_kernel_prepare(gr_cuda_ctx *c, const gr_kernel *k, unsigned flags, gr_kfunc **out);
/* kernels_warm (device.h): the missing cubins compiled on several threads into the disk cache */
gr_status gr_cuda_kernels_warm(gr_cuda_ctx *c, const gr_kernel *const *ks, const unsigned *flags, int n);
void gr_cuda_kernel_release(gr_cuda_ctx *c, gr_kfunc *f);
/* Unloads what is left of the shared modules (device destruction). */
void gr_cuda_modules_destroy(gr_cuda_ctx *c);
/* The kernelParams array of a launch of f: one pointer per kir argument, then the slot
 * struct for a generic kernel (a table kernel's table address is its last argument).
 * params holds GR_KMAX_PARAMS + 1 entries. */
void gr_cuda_kernel_params(const gr_kfunc *f, const gr_karg *args, int n_args, void **params);
/* Grid and block for a launch with these args. */
void gr_cuda_kernel_dims(const gr_cuda_ctx *c, const gr_kfunc *f, const gr_karg *args, unsigned *grid,
                         unsigned *block);

/* ---- cuBLASLt (cuda-blas.c) ---- */
gr_status gr_cuda_blas_init(gr_cuda_ctx *c);
void gr_cuda_blas_destroy(gr_cuda_ctx *c);
gr_status gr_cuda_matmul(gr_cuda_ctx *c, CUstream s, const gr_libcall *call, const gr_karg *args, int n_args);

/* ---- fused attention (cuda-attn.c) ---- */
gr_status gr_cuda_attention(gr_cuda_ctx *c, CUstream s, const gr_libcall *call, const gr_karg *args, int n_args);
void gr_cuda_attention_destroy(gr_cuda_ctx *c);
/* The CUDA C of the attention kernels (NVRTC; test_render compiles it without a GPU). */
const char *gr_cuda_attention_source(void);

/* ---- decode sampling (cuda-sample.c) ---- */
gr_status gr_cuda_sample(gr_cuda_ctx *c, CUstream s, const gr_libcall *call, const gr_karg *args, int n_args);
/* A module of graft's own fixed CUDA source (attention, sampling, beam search): compiled by
 * NVRTC for the context's arch and loaded, in relaxed capture mode (a first use may come while
 * a stream is being captured), and its n functions looked up by name. On error nothing is left
 * loaded and the message is prefixed "cuda: <what>". Counts one compile and one module load. */
gr_status gr_cuda_fixed_module(gr_cuda_ctx *c, const char *source, const char *nvrtc_name, const char *what, int n,
                               const char *const *names, CUmodule *module, CUfunction *fns);
void gr_cuda_sample_destroy(gr_cuda_ctx *c);
/* The CUDA C of the sample kernel (NVRTC; test_render compiles it without a GPU). */
const char *gr_cuda_sample_source(void);

/* ---- beam search (cuda-beam.c): GR_LIB_BEAM_STEP and GR_LIB_BEAM_REORDER ---- */
gr_status gr_cuda_beam(gr_cuda_ctx *c, CUstream s, const gr_libcall *call, const gr_karg *args, int n_args);
void gr_cuda_beam_destroy(gr_cuda_ctx *c);
/* The CUDA C of the beam kernels (NVRTC; test_render compiles it without a GPU). */
const char *gr_cuda_beam_source(void);

#endif
