/* device/cuda/cuda-load — dlopen of the driver, NVRTC and cuBLASLt; NVRTC compilation. */
#include "device/cuda/cuda-impl.h"
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GR_CUDA_TOOLKIT_LIBDIR
#define GR_CUDA_TOOLKIT_LIBDIR "/usr/local/cuda/lib64"
#endif

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* Opens the first library found: bare names first (LD_LIBRARY_PATH, ldconfig), then the
 * toolkit directories. Writes what was tried into `tried`. */
static void *open_first(const char *const *names, char *tried, size_t tried_n) {
    const char *dirs[4] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), GR_CUDA_TOOLKIT_LIBDIR, "/usr/local/cuda/lib64"};
    size_t used = 0;
    tried[0] = 0;
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        used += (size_t)snprintf(tried + used, used < tried_n ? tried_n - used : 0, "%s%s", used ? ", " : "", names[i]);
        if (used >= tried_n) used = tried_n - 1;
    }
    for (int d = 0; d < 4; d++) {
        if (!dirs[d] || !dirs[d][0]) continue;
        for (int i = 0; names[i]; i++) {
            char path[1024];
            /* CUDA_HOME / CUDA_PATH name the toolkit root, the others its lib dir */
            snprintf(path, sizeof path, d < 2 ? "%s/lib64/%s" : "%s/%s", dirs[d], names[i]);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) return h;
        }
    }
    return NULL;
}

/* ==== driver ============================================================================ */

static gr_cu_api cu_api;
static bool cu_loaded;
static gr_status cu_status = GR_OK;
static char cu_error[512];

const char *gr_cuda_err_name(CUresult r) {
    static _Thread_local char buf[256];
    const char *name = NULL, *msg = NULL;
    if (cu_loaded && cu_api.cuGetErrorName) cu_api.cuGetErrorName(r, &name);
    if (cu_loaded && cu_api.cuGetErrorString) cu_api.cuGetErrorString(r, &msg);
    if (name) snprintf(buf, sizeof buf, "%s (%s)", name, msg ? msg : "");
    else snprintf(buf, sizeof buf, "CUresult %d", (int)r);
    return buf;
}

/* ==== errors (the GR_*_CHECK / GR_*_STATUS macros of cuda-impl.h) =========================== */

/* The call as written, from the library function's name on: "CU(d)->cuMemAlloc(&p, n)"
 * reads "cuMemAlloc(&p, n)". Every driver, NVRTC and cuBLASLt function starts with
 * "cu" or "nvrtc". */
static const char *call_text(const char *call) {
    for (const char *p = call; *p; p++) {
        bool starts = p == call || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        if (!starts || (strncmp(p, "cu", 2) && strncmp(p, "nvrtc", 5))) continue;
        const char *e = p;
        while (isalnum((unsigned char)*e) || *e == '_') e++;
        if (*e == '(') return p;
    }
    return call;
}

gr_status gr_cuda_status(CUresult r, const char *call) {
    if (r == CUDA_SUCCESS) return GR_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gr_error(GR_ERR_NOMEM, "out of device memory: %s: %s", call_text(call), gr_cuda_err_name(r));
    /* an operation a stream capture cannot hold: the capture is invalidated, as on the simulator */
    if (r >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && r <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
        return gr_error(GR_ERR_HAZARD, "%s: %s", call_text(call), gr_cuda_err_name(r));
    return gr_error(GR_ERR_DEVICE, "%s: %s", call_text(call), gr_cuda_err_name(r));
}

/* The symbol cuGetProcAddress is asked for: the name the headers give the entry (its field's
 * type is that function's), less the ABI suffix (_v2, _v3, _ptsz), which cuGetProcAddress picks
 * itself from CUDA_VERSION. The unexpanded name is not enough: cuda.h 12+ maps
 * cuGraphInstantiate to cuGraphInstantiateWithFlags (three arguments), but the driver's
 * "cuGraphInstantiate" at any version is the five-argument cuGraphInstantiate_v2, whose log
 * buffer and size were then read from whatever the fourth and fifth argument registers held:
 * gpucheck segfaulted inside it on the H100 (address 0xffff). */
void gr_cuda_proc_symbol(const char *expanded, char *out, size_t n) {
    if (n == 0) return;
    size_t len = strlen(expanded);
    if (len >= 5 && !strcmp(expanded + len - 5, "_ptsz")) len -= 5;
    size_t k = len;
    while (k > 0 && isdigit((unsigned char)expanded[k - 1])) k--;
    if (k < len && k >= 2 && expanded[k - 1] == 'v' && expanded[k - 2] == '_') len = k - 2;
    if (len >= n) len = n - 1;
    memcpy(out, expanded, len);
    out[len] = 0;
}

/* Each entry's symbol (gr_cuda_proc_symbol of its expanded name), in GR_CU_FUNCS order. */
int gr_cuda_api_symbols(char (*out)[96], int cap) {
    int i = 0;
#define GR_CU_NAME(name)                                                                                      \
    if (i < cap) gr_cuda_proc_symbol(GR_CU_XSTR(name), out[i], sizeof out[i]);                               \
    i++;
    GR_CU_FUNCS(GR_CU_NAME)
#undef GR_CU_NAME
    return i;
}

static gr_status load_driver_locked(void) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    void *h = NULL;
    for (int i = 0; names[i] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cu_error, sizeof cu_error, "no CUDA driver (libcuda.so.1 not found)");
        return GR_ERR_DEVICE;
    }
    __typeof__(cuGetProcAddress) *gpa = (__typeof__(cuGetProcAddress) *)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        snprintf(cu_error, sizeof cu_error, "CUDA driver too old (no cuGetProcAddress_v2 in libcuda.so.1; need CUDA 12+)");
        dlclose(h);
        return GR_ERR_DEVICE;
    }
    gr_cu_api api;
    memset(&api, 0, sizeof api);
    char sym[96];
    /* Optional entries (newer features) may be missing; checked where used. */
#define GR_CU_OPTIONAL(n) (!strcmp(n, "cuStreamBeginCaptureToGraph") || !strcmp(n, "cuGraphConditionalHandleCreate") || \
                           !strcmp(n, "cuGraphAddNode") || !strcmp(n, "cuThreadExchangeStreamCaptureMode"))
#define GR_CU_RESOLVE(name)                                                                                    \
    {                                                                                                          \
        CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                             \
        void *fp = NULL;                                                                                       \
        gr_cuda_proc_symbol(GR_CU_XSTR(name), sym, sizeof sym);                                               \
        CUresult r = gpa(sym, &fp, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);                             \
        if (r == CUDA_SUCCESS && q == CU_GET_PROC_ADDRESS_SUCCESS && fp) {                                     \
            memcpy(&api.name, &fp, sizeof fp);                                                                 \
        } else if (!GR_CU_OPTIONAL(#name)) {                                                                   \
            snprintf(cu_error, sizeof cu_error,                                                                \
                     "CUDA driver lacks %s for CUDA %d.%d (driver too old for the headers graft was built with)", \
                     #name, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                                   \
            dlclose(h);                                                                                        \
            return GR_ERR_DEVICE;                                                                              \
        }                                                                                                      \
    }
    GR_CU_FUNCS(GR_CU_RESOLVE)
#undef GR_CU_RESOLVE
#undef GR_CU_OPTIONAL
    cu_api = api;
    return GR_OK;
}

gr_status gr_cuda_load_driver(const gr_cu_api **out) {
    *out = NULL;
    pthread_mutex_lock(&load_lock);
    if (!cu_loaded && cu_status == GR_OK) {
        cu_status = load_driver_locked();
        cu_loaded = cu_status == GR_OK;
    }
    gr_status st = cu_status;
    pthread_mutex_unlock(&load_lock);
    if (st != GR_OK) return gr_error(st, "%s", cu_error);
    *out = &cu_api;
    return GR_OK;
}

/* ==== NVRTC ============================================================================= */

static gr_nvrtc_api nvrtc_api;
static bool nvrtc_loaded;
static gr_status nvrtc_status = GR_OK;
static char nvrtc_error[1024];

static gr_status load_nvrtc_locked(void) {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    char tried[512];
    void *h = open_first(names, tried, sizeof tried);
    if (!h) {
        snprintf(nvrtc_error, sizeof nvrtc_error, "NVRTC not found (tried %s, and under $CUDA_HOME, %s)", tried,
                 GR_CUDA_TOOLKIT_LIBDIR);
        return GR_ERR_DEVICE;
    }
    gr_nvrtc_api api;
    memset(&api, 0, sizeof api);
#define GR_NVRTC_RESOLVE(name)                                                                 \
    {                                                                                          \
        void *fp = dlsym(h, #name);                                                            \
        if (!fp) {                                                                             \
            snprintf(nvrtc_error, sizeof nvrtc_error, "NVRTC library lacks %s", #name);       \
            dlclose(h);                                                                        \
            return GR_ERR_DEVICE;                                                              \
        }                                                                                      \
        memcpy(&api.name, &fp, sizeof fp);                                                     \
    }
    GR_NVRTC_FUNCS(GR_NVRTC_RESOLVE)
#undef GR_NVRTC_RESOLVE
    gr_status st = GR_NVRTC_STATUS(api.nvrtcVersion(&api.major, &api.minor));
    if (st != GR_OK) {
        snprintf(nvrtc_error, sizeof nvrtc_error, "%s", gr_last_error()); /* kept for later callers */
        dlclose(h);
        return st;
    }
    nvrtc_api = api;
    return GR_OK;
}

gr_status gr_nvrtc_status(nvrtcResult r, const char *call) {
    if (r == NVRTC_SUCCESS) return GR_OK;
    const char *name = nvrtc_loaded ? nvrtc_api.nvrtcGetErrorString(r) : NULL;
    char code[32];
    if (!name) snprintf(code, sizeof code, "nvrtcResult %d", (int)r), name = code;
    return gr_error(r == NVRTC_ERROR_OUT_OF_MEMORY ? GR_ERR_NOMEM : GR_ERR_DEVICE, "%s: %s", call_text(call), name);
}

gr_status gr_cuda_load_nvrtc(const gr_nvrtc_api **out) {
    *out = NULL;
    pthread_mutex_lock(&load_lock);
    if (!nvrtc_loaded && nvrtc_status == GR_OK) {
        nvrtc_status = load_nvrtc_locked();
        nvrtc_loaded = nvrtc_status == GR_OK;
    }
    gr_status st = nvrtc_status;
    pthread_mutex_unlock(&load_lock);
    if (st != GR_OK) return gr_error(st, "%s", nvrtc_error);
    *out = &nvrtc_api;
    return GR_OK;
}

const char *gr_cuda_nvrtc_options(void) { return "--std=c++17 --fmad=true"; }

gr_status gr_cuda_nvrtc_compile(const char *source, const char *kernel_name, int arch, bool ptx, void **out,
                                size_t *out_size) {
    *out = NULL;
    *out_size = 0;
    const gr_nvrtc_api *nv;
    GR_TRY(gr_cuda_load_nvrtc(&nv));
    char arch_opt[64];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", arch);
    const char *opts[] = {arch_opt, "--std=c++17", "--fmad=true"};
    char file_name[96];
    snprintf(file_name, sizeof file_name, "%s.cu", kernel_name);
    nvrtcProgram prog;
    gr_status st = GR_NVRTC_STATUS(nv->nvrtcCreateProgram(&prog, source, file_name, 0, NULL, NULL));
    if (st != GR_OK) return gr_error_prefix(st, "NVRTC: kernel %s", kernel_name);
    st = GR_NVRTC_STATUS(nv->nvrtcCompileProgram(prog, GR_ARRAY_LEN(opts), opts));
    if (st != GR_OK) {
        /* the compiler's log is the message that matters: after the call's */
        char why[256];
        snprintf(why, sizeof why, "%s", gr_last_error());
        size_t log_n = 0;
        char *log = NULL;
        if (GR_NVRTC_STATUS(nv->nvrtcGetProgramLogSize(prog, &log_n)) == GR_OK && log_n > 0 && (log = gr_malloc(log_n + 1))) {
            if (GR_NVRTC_STATUS(nv->nvrtcGetProgramLog(prog, log)) != GR_OK) log[0] = 0;
            log[log_n] = 0;
        }
        st = gr_error(st, "NVRTC failed to compile kernel %s (%s, %s)\n%s", kernel_name, arch_opt, why, log ? log : "(no log)");
        if (log) gr_free(log, log_n + 1);
        nv->nvrtcDestroyProgram(&prog);
        return st;
    }
    size_t n = 0;
    st = ptx ? GR_NVRTC_STATUS(nv->nvrtcGetPTXSize(prog, &n)) : GR_NVRTC_STATUS(nv->nvrtcGetCUBINSize(prog, &n));
    if (st == GR_OK && n == 0) st = gr_error(GR_ERR_DEVICE, "NVRTC produced an empty %s", ptx ? "PTX" : "cubin");
    void *buf = st == GR_OK ? gr_malloc(n) : NULL;
    if (st == GR_OK && !buf) st = GR_ERR_NOMEM;
    if (st == GR_OK) st = ptx ? GR_NVRTC_STATUS(nv->nvrtcGetPTX(prog, buf)) : GR_NVRTC_STATUS(nv->nvrtcGetCUBIN(prog, buf));
    nv->nvrtcDestroyProgram(&prog);
    if (st != GR_OK) {
        gr_free(buf, n);
        return st == GR_ERR_NOMEM ? st : gr_error_prefix(st, "NVRTC: kernel %s", kernel_name);
    }
    *out = buf;
    *out_size = n;
    return GR_OK;
}

/* ==== cuBLASLt ============================================================================ */

static gr_lt_api lt_api;
static bool lt_loaded;
static gr_status lt_status = GR_OK;
static char lt_error[1024];

static gr_status load_lt_locked(void) {
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
    char tried[512];
    void *h = open_first(names, tried, sizeof tried);
    if (!h) {
        snprintf(lt_error, sizeof lt_error, "cuBLASLt not found (tried %s, and under $CUDA_HOME, %s)", tried,
                 GR_CUDA_TOOLKIT_LIBDIR);
        return GR_ERR_DEVICE;
    }
    gr_lt_api api;
    memset(&api, 0, sizeof api);
#define GR_LT_RESOLVE(name)                                                                  \
    {                                                                                        \
        void *fp = dlsym(h, #name);                                                          \
        if (!fp) {                                                                           \
            snprintf(lt_error, sizeof lt_error, "cuBLASLt library lacks %s", #name);        \
            dlclose(h);                                                                      \
            return GR_ERR_DEVICE;                                                            \
        }                                                                                    \
        memcpy(&api.name, &fp, sizeof fp);                                                   \
    }
    GR_LT_FUNCS(GR_LT_RESOLVE)
#undef GR_LT_RESOLVE
    lt_api = api;
    return GR_OK;
}

gr_status gr_lt_status(cublasStatus_t r, const char *call) {
    if (r == CUBLAS_STATUS_SUCCESS) return GR_OK;
    const char *name = lt_loaded ? lt_api.cublasLtGetStatusName(r) : NULL;
    char code[32];
    if (!name) snprintf(code, sizeof code, "cublasStatus_t %d", (int)r), name = code;
    return gr_error(r == CUBLAS_STATUS_ALLOC_FAILED ? GR_ERR_NOMEM : GR_ERR_DEVICE, "cuBLASLt: %s: %s", call_text(call), name);
}

gr_status gr_cuda_load_cublaslt(const gr_lt_api **out) {
    *out = NULL;
    pthread_mutex_lock(&load_lock);
    if (!lt_loaded && lt_status == GR_OK) {
        lt_status = load_lt_locked();
        lt_loaded = lt_status == GR_OK;
    }
    gr_status st = lt_status;
    pthread_mutex_unlock(&load_lock);
    if (st != GR_OK) return gr_error(st, "%s", lt_error);
    *out = &lt_api;
    return GR_OK;
}
