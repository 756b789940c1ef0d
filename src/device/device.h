/* device — one vtable, two backends (sim, cuda), and the façade over it.
 *
 * A backend is `struct gr_device { const struct gr_device_i *iface; void *ctx;
 * gr_device_kind kind; }`. Entries return gr_status; optional entries may be NULL.
 * Only src/device touches the vtable: everyone else calls the gr_dev_* wrappers
 * (end of this file), which report a missing entry as GR_ERR_UNSUPPORTED naming
 * the backend, and asks gr_dev_caps_get what a device can do (a ctest greps
 * for `iface->` outside src/device).
 *
 * Semantics follow CUDA: streams are in-order queues; work is asynchronous
 * until a synchronize; while a stream is capturing, kernel launches, library
 * calls, async copies and memsets on it are recorded into a graph instead of
 * running, and each recorded kernel node keeps a by-value copy of its argument array.
 */
#ifndef GR_DEVICE_H
#define GR_DEVICE_H

#include "codegen/kir.h"

typedef struct gr_stream gr_stream;       /* backend-defined */
typedef struct gr_event gr_event;
typedef struct gr_kfunc gr_kfunc;         /* a prepared (compiled) kernel */
typedef struct gr_dgraph gr_dgraph;       /* captured graph (cudaGraph_t) */
typedef struct gr_dexec gr_dexec;         /* instantiated graph (cudaGraphExec_t) */

typedef enum {
    GR_MEM_DEVICE = 0,   /* device memory */
    GR_MEM_HOST_PINNED,  /* page-locked host memory (legal to copy from during capture) */
    GR_MEM_HOST,         /* pageable host memory (a copy from it breaks capture) */
} gr_mem_kind;

typedef enum { GR_COPY_H2D = 0, GR_COPY_D2H, GR_COPY_D2D, GR_COPY_H2H } gr_copy_kind;

/* One node of a captured graph, as seen by the graph manager. */
typedef enum { GR_GNODE_KERNEL = 0, GR_GNODE_LIBCALL, GR_GNODE_COPY, GR_GNODE_MEMSET, GR_GNODE_CONDITIONAL } gr_gnode_kind;
typedef struct {
    gr_gnode_kind kind;
    const gr_kfunc *func;   /* KERNEL */
    int n_args;
} gr_gnode_info;

/* most ranks one process joins into a communicator (gr_dev_comm_init) */
#define GR_DEV_MAX_RANKS 64

typedef enum { GR_COND_IF = 0, GR_COND_IF_ELSE, GR_COND_WHILE } gr_cond_kind;

/* kernel_prepare flags.
 * GR_KPREP_GENERIC: shape-generic code (kir.h "shape-generic form"). The kernel's slots
 *   are read at launch from values the gr_kfunc keeps, and kernels of one structure share
 *   one compiled module (CUDA: an in-memory cache per device keyed by the generic source,
 *   refcounted by the gr_kfuncs using it; sim: one template kernel per structure), so a
 *   new binding of a symbolic model compiles and loads nothing. Launches, captures and
 *   exec_kernel_node_set_args take the same kir arguments as in literal mode: the device
 *   appends the slots itself. Literal code (no flag) folds sizes into constants and is
 *   the faster choice for static models. A kernel with more than GR_KMAX_SLOTS slots is
 *   prepared literally (counted in gr_dev_kstats.generic_fallbacks). */
#define GR_KPREP_GENERIC 1u
/* GR_KPREP_BORROW: k outlives the gr_kfunc and does not change while it lives (a plan's step
 *   kernels, released after their gr_kfuncs), so the device may keep a pointer to k instead
 *   of a copy: a new binding's plan then copies none of its kernels again (CUDA). */
#define GR_KPREP_BORROW 2u
/* GR_KPREP_SLOT_TABLE (with GR_KPREP_GENERIC; shape policy generic): the kernel reads its slots
 *   at run time from device memory: every launch, capture and exec_kernel_node_set_args passes
 *   one argument more than the kernel has parameters, args[n_params].ptr = the device address
 *   of n + 1 int64 values: its n = gr_kernel_slot_count(k) slots (gr_kernel_slot_values'
 *   order), then its point count (what bounds the launch; where k->n_points_param >= 0 it
 *   replaces that argument's value in the code, the argument still sizes the grid). A graph node then computes whatever binding's slots the table holds when
 *   it runs (CUDA: GR_RENDER_GENERIC_TABLE code; sim: the slots are read at execution). Grids
 *   stay those of the kernel prepared: code is grid-stride, so a grid sized for a larger
 *   binding is correct for a smaller one. No GR_KMAX_SLOTS limit applies. */
#define GR_KPREP_SLOT_TABLE 8u
/* GR_KPREP_VERIFIED: the caller has checked k with gr_kernel_verify (a plan's kernels are checked
 *   once when the plan is built): the simulator does not check it again. */
#define GR_KPREP_VERIFIED 4u

/* Kernel preparation counters of one device, since it was created. */
typedef struct {
    long prepared;          /* successful kernel_prepare calls */
    long generic_new;       /* GR_KPREP_GENERIC kernels whose structure had no live module: loaded one */
    long generic_reused;    /* GR_KPREP_GENERIC kernels that shared a live module (sim: template) */
    long generic_fallbacks; /* GR_KPREP_GENERIC asked, kernel too large for it: prepared literally */
    long compiles;          /* NVRTC compilations (cuda, built-in kernels included; sim: 0) */
    long disk_cache_hits;   /* cubins read from the disk cache instead of compiled (cuda; sim: 0) */
    long module_loads;      /* kernel modules loaded (cuda; sim: those the CUDA backend would load,
                               one per literal kernel and per new generic structure) */
    long live_modules;      /* generic modules (sim: templates) loaded now */
    long mask_tables_reused; /* attention calls that read their mask group's tile table instead of
                                classifying the mask again (cuda; sim: 0) */
} gr_dev_kstats;

struct gr_device_i {
    const char *(*name)(void *ctx);             /* "sim" or "NVIDIA H100 80GB HBM3 (sm_90, driver 580.x)" */
    void (*destroy)(void *ctx);

    /* memory */
    gr_status (*alloc)(void *ctx, gr_mem_kind kind, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
    /* Optional: whether alloc serves memory of this kind (absent: device memory only,
     * which is what a backend without host-visible memory offers). */
    bool (*has_mem_kind)(void *ctx, gr_mem_kind kind);
    size_t (*mem_in_use)(void *ctx);            /* device bytes currently allocated */

    /* streams and events */
    gr_status (*stream_create)(void *ctx, gr_stream **out);
    void (*stream_destroy)(void *ctx, gr_stream *s);
    gr_status (*stream_sync)(void *ctx, gr_stream *s);
    gr_status (*event_create)(void *ctx, gr_event **out);
    void (*event_destroy)(void *ctx, gr_event *e);
    gr_status (*event_record)(void *ctx, gr_event *e, gr_stream *s);
    gr_status (*event_elapsed_us)(void *ctx, gr_event *start, gr_event *end, double *out);
    /* Optional: a gr_stream over a stream the caller owns (CUDA: a CUstream, including
     * CU_STREAM_LEGACY / CU_STREAM_PER_THREAD); stream_destroy frees the wrapper only. */
    gr_status (*stream_wrap)(void *ctx, void *handle, gr_stream **out);
    /* Optional: work enqueued on s after this call waits for event e (cuStreamWaitEvent). */
    gr_status (*stream_wait_event)(void *ctx, gr_stream *s, gr_event *e);

    /* work */
    gr_status (*memcpy_async)(void *ctx, gr_stream *s, void *dst, const void *src, size_t bytes, gr_copy_kind kind);
    gr_status (*memset_async)(void *ctx, gr_stream *s, void *dst, int value, size_t bytes);
    /* Optional: `height` rows of `width` bytes, row r from src + r * spitch to dst + r * dpitch
     * (cuMemcpy2DAsync); absent, gr_dev_memcpy2d copies row by row. */
    gr_status (*memcpy2d_async)(void *ctx, gr_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                size_t height, gr_copy_kind kind);
    gr_status (*kernel_prepare)(void *ctx, const gr_kernel *k, unsigned flags, gr_kfunc **out); /* compile / load; GR_KPREP_* */
    void (*kernel_release)(void *ctx, gr_kfunc *f);
    /* Optional: compile ahead, in parallel, what kernel_prepare of each ks[i] with flags[i] would
     * compile (into the disk cache), so the prepares that follow load instead of compiling one by
     * one. Errors are not reported here: the prepare that needs the kernel reports them. */
    gr_status (*kernels_warm)(void *ctx, const gr_kernel *const *ks, const unsigned *flags, int n);
    gr_status (*kernel_launch)(void *ctx, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args);
    gr_status (*libcall)(void *ctx, gr_stream *s, const gr_libcall *call, const gr_karg *args, int n_args);

    /* CUDA graphs */
    gr_status (*capture_begin)(void *ctx, gr_stream *s);
    gr_status (*capture_end)(void *ctx, gr_stream *s, gr_dgraph **out); /* fails if capture was invalidated */
    void (*graph_destroy)(void *ctx, gr_dgraph *g);
    gr_status (*graph_instantiate)(void *ctx, gr_dgraph *g, gr_dexec **out);
    void (*exec_destroy)(void *ctx, gr_dexec *e);
    gr_status (*graph_upload)(void *ctx, gr_dexec *e, gr_stream *s);
    gr_status (*graph_launch)(void *ctx, gr_dexec *e, gr_stream *s);
    int (*graph_num_nodes)(void *ctx, gr_dgraph *g);
    gr_status (*graph_node_info)(void *ctx, gr_dgraph *g, int node, gr_gnode_info *out);
    /* cudaGraphExecKernelNodeSetParams: replace node's by-value args in the exec graph */
    gr_status (*exec_kernel_node_set_args)(void *ctx, gr_dexec *e, int node, const gr_karg *args, int n_args);
    /* cudaGraphExecUpdate: update exec e from graph g of the same topology.
     * No production caller yet: it is for the "update" many-shapes policy (one exec
     * per segment, refreshed from a new shape's capture instead of re-instantiated).
     * Exercised by tests/test_devgraph.c. */
    gr_status (*exec_update)(void *ctx, gr_dexec *e, gr_dgraph *g);
    /* Device-updatable kernel nodes: during capture, mark the last captured
     * kernel node updatable and get a device handle a prelude kernel can patch.
     * sim: the handle is the device address of the node's argument block, n_args
     * 8-byte gr_karg slots initialised with the captured args; every execution of the
     * node (in any exec instantiated from the graph) reads its args from there, so a
     * kernel storing slot i (or a device copy into it) changes arg i for later
     * executions. exec_kernel_node_set_args and exec_update rewrite the block too.
     * No production caller yet: with BUFFER_INDIRECT params it is the parameter
     * indirection of the "generic" many-shapes policy (one graph for many shapes) and
     * of zero-copy inputs (a prelude kernel points nodes at the caller's buffers).
     * Exercised by tests/test_devgraph.c. */
    gr_status (*capture_mark_updatable)(void *ctx, gr_stream *s, uint64_t *out_handle);
    /* Conditional nodes: create a condition handle (device-resident flag set by a
     * kernel), then capture a body into the conditional node (IF / IF+ELSE / WHILE).
     * body_begin/body_end bracket the work captured into branch `branch` (0 = then/body, 1 = else).
     * The handle is the device address of the condition, an unsigned int that a
     * captured kernel writes (e.g. a 4-byte i32 store). cond_create only creates the
     * handle (during capture); the conditional node is placed where body_begin(h, 0) is
     * called, branch 1 must follow branch 0 directly. At each graph launch the value is
     * reset to default_value; IF runs body 0 when it is non-zero, IF_ELSE body 0 or 1,
     * WHILE tests it before each iteration of body 0.
     * No production caller yet: they are for ONNX If/Loop control flow kept on the
     * device and for the decode loop as one graph with a device-side WHILE.
     * Exercised by tests/test_devgraph.c. */
    gr_status (*cond_create)(void *ctx, gr_stream *s, gr_cond_kind kind, unsigned default_value, uint64_t *out_handle);
    gr_status (*cond_body_begin)(void *ctx, gr_stream *s, uint64_t handle, int branch);
    gr_status (*cond_body_end)(void *ctx, gr_stream *s, uint64_t handle, int branch);

    /* time */
    double (*clock_us)(void *ctx); /* simulated clock (sim) or wall clock (cuda) */

    /* Optional: kernel preparation counters (absent: all zero). */
    void (*kernel_stats)(void *ctx, gr_dev_kstats *out);

    /* Optional: free and total device memory as the device sees it (CUDA: cuMemGetInfo, so
     * memory the driver takes for itself, instantiated graphs included, shows; sim: a device
     * of GR_SIM_TOTAL_BYTES less its allocations and the bytes of its exec graphs). */
    gr_status (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);

    /* Optional: collectives (tensor parallelism). comm_init joins the contexts ctxs[0..n) of
     * devices of this backend into one communicator, ctxs[i] being rank i (CUDA: `unique_id`,
     * ncclUniqueId's bytes, names the communicator and first_rank/world_size place these
     * ranks in it, so ranks of other processes or hosts can join with the same id; NULL: one
     * process holds every rank, the id is made here). Each device keeps its rank until it is
     * destroyed. Library calls GR_LIB_ALL_REDUCE / GR_LIB_ALL_GATHER then run through it.
     * comm_enter / comm_leave bracket the work one host thread submits for a device (one
     * thread per rank): CUDA makes the device's context current; the simulator takes turns. */
    gr_status (*comm_init)(void **ctxs, int n, const void *unique_id, int first_rank, int world_size);
    gr_status (*comm_enter)(void *ctx);
    void (*comm_leave)(void *ctx);
    /* Optional: the calling thread works on this device from now on, outside a round of the
     * ranks (CUDA: the device's context current; absent: nothing to do). */
    gr_status (*thread_bind)(void *ctx);
};

typedef struct gr_device {
    const struct gr_device_i *iface;
    void *ctx;
    gr_device_kind kind; /* GR_DEVICE_SIM or GR_DEVICE_CUDA, set by the backend's create */
} gr_device;

/* Ownership: a backend's create gr_mallocs the gr_device struct on its own (not inside
 * its context); gr_device_destroy calls iface->destroy(ctx), then gr_frees the struct. */
gr_status gr_device_sim_create(gr_device **out);
/* Fails with a clear message where no driver or GPU is present. */
gr_status gr_device_cuda_create(const char *cache_dir, gr_device **out);
/* auto: CUDA when usable, else the simulator (always with a note on stderr). */
gr_status gr_device_open(gr_device_kind kind, const char *cache_dir, int verbose, gr_device **out);
void gr_device_destroy(gr_device *d); /* the `destroy` entry */

/* ==== the façade ===========================================================================
 * Code above the device layer (runtime, tools, tests) reaches a backend only through
 * these: one wrapper per vtable entry, named after it (memcpy_async and memset_async
 * lose the suffix). An entry the backend leaves NULL gives GR_ERR_UNSUPPORTED with
 * "device <name> does not support <entry>", except where a default is documented
 * below. Destroy/release/free wrappers ignore a NULL object and a missing entry.
 * Whether an optional feature is there is asked through gr_dev_caps, never by
 * testing entries. */

/* What a device can do, derived from its vtable in one place (gr_dev_caps_get). */
typedef struct {
    bool events;            /* event_create/destroy/record/elapsed_us: device-side timing */
    bool graphs;            /* capture_begin/end, graph_instantiate/launch/destroy, exec_destroy */
    bool graph_nodes;       /* graph_num_nodes + graph_node_info: a captured graph's nodes can be listed */
    bool node_set_args;     /* exec_kernel_node_set_args: patch a kernel node's arguments in an exec */
    bool exec_update;       /* exec_update: refresh an exec from a graph of the same topology */
    bool updatable_nodes;   /* capture_mark_updatable: device-updatable kernel nodes */
    bool conditional_nodes; /* cond_create/body_begin/body_end: IF / IF_ELSE / WHILE nodes */
    bool external_streams;  /* stream_wrap + stream_wait_event + events: work ordered against a caller's
                               stream without a host wait (gr_session_run_on_stream) */
    bool pinned_memory;     /* alloc(GR_MEM_HOST_PINNED): page-locked host buffers, so input copies are
                               true asynchronous DMA (sessions fall back to pageable host memory) */
    bool mem_info;          /* mem_info: free/total device memory can be measured (graph memory accounting) */
    bool collectives;       /* comm_init/enter/leave: devices joined into a communicator (tensor parallelism) */
    bool kernels_warm;      /* kernels_warm: a plan's missing kernels compiled ahead in parallel (CUDA) */
} gr_dev_caps;
gr_dev_caps gr_dev_caps_get(const gr_device *d); /* all false for NULL */

const char *gr_dev_name(const gr_device *d); /* default "device"; "?" for NULL */

/* memory */
gr_status gr_dev_alloc(gr_device *d, gr_mem_kind kind, size_t bytes, void **out);
void gr_dev_free(gr_device *d, void *p);
bool gr_dev_has_mem_kind(const gr_device *d, gr_mem_kind kind); /* default: GR_MEM_DEVICE only */
size_t gr_dev_mem_in_use(const gr_device *d); /* default 0: the backend does not count */
/* Free and total device memory now (both 0 on failure). */
gr_status gr_dev_mem_info(gr_device *d, size_t *free_bytes, size_t *total_bytes);

/* streams and events */
gr_status gr_dev_stream_create(gr_device *d, gr_stream **out);
void gr_dev_stream_destroy(gr_device *d, gr_stream *s);
gr_status gr_dev_stream_sync(gr_device *d, gr_stream *s);
gr_status gr_dev_event_create(gr_device *d, gr_event **out);
void gr_dev_event_destroy(gr_device *d, gr_event *e);
gr_status gr_dev_event_record(gr_device *d, gr_event *e, gr_stream *s);
gr_status gr_dev_event_elapsed_us(gr_device *d, gr_event *start, gr_event *end, double *out);
gr_status gr_dev_stream_wrap(gr_device *d, void *handle, gr_stream **out);
gr_status gr_dev_stream_wait_event(gr_device *d, gr_stream *s, gr_event *e);

/* work */
gr_status gr_dev_memcpy(gr_device *d, gr_stream *s, void *dst, const void *src, size_t bytes, gr_copy_kind kind);
gr_status gr_dev_memset(gr_device *d, gr_stream *s, void *dst, int value, size_t bytes);
/* height rows of width bytes: dst + r * dpitch <- src + r * spitch (one 2-D copy where the device has it) */
gr_status gr_dev_memcpy2d(gr_device *d, gr_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t height, gr_copy_kind kind);
gr_status gr_dev_kernel_prepare_flags(gr_device *d, const gr_kernel *k, unsigned flags, gr_kfunc **out);
/* The device's kernels_warm where it has one (CUDA), else nothing: GR_OK but for GR_ERR_NOMEM. */
gr_status gr_dev_kernels_warm(gr_device *d, const gr_kernel *const *ks, const unsigned *flags, int n);
/* gr_dev_kernel_prepare_flags with no flags: literal code */
gr_status gr_dev_kernel_prepare(gr_device *d, const gr_kernel *k, gr_kfunc **out);
void gr_dev_kernel_release(gr_device *d, gr_kfunc *f);
gr_status gr_dev_kernel_launch(gr_device *d, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args);
gr_status gr_dev_libcall(gr_device *d, gr_stream *s, const gr_libcall *c, const gr_karg *args, int n_args);

/* CUDA graphs */
gr_status gr_dev_capture_begin(gr_device *d, gr_stream *s);
gr_status gr_dev_capture_end(gr_device *d, gr_stream *s, gr_dgraph **out);
void gr_dev_graph_destroy(gr_device *d, gr_dgraph *g);
gr_status gr_dev_graph_instantiate(gr_device *d, gr_dgraph *g, gr_dexec **out);
void gr_dev_exec_destroy(gr_device *d, gr_dexec *e);
/* default: nothing to do (the graph is uploaded by its first launch) */
gr_status gr_dev_graph_upload(gr_device *d, gr_dexec *e, gr_stream *s);
gr_status gr_dev_graph_launch(gr_device *d, gr_dexec *e, gr_stream *s);
int gr_dev_graph_num_nodes(gr_device *d, gr_dgraph *g); /* default 0: nodes cannot be listed */
gr_status gr_dev_graph_node_info(gr_device *d, gr_dgraph *g, int node, gr_gnode_info *out);
gr_status gr_dev_exec_kernel_node_set_args(gr_device *d, gr_dexec *e, int node, const gr_karg *args, int n_args);
gr_status gr_dev_exec_update(gr_device *d, gr_dexec *e, gr_dgraph *g);
gr_status gr_dev_capture_mark_updatable(gr_device *d, gr_stream *s, uint64_t *out_handle);
gr_status gr_dev_cond_create(gr_device *d, gr_stream *s, gr_cond_kind kind, unsigned default_value, uint64_t *out_handle);
gr_status gr_dev_cond_body_begin(gr_device *d, gr_stream *s, uint64_t handle, int branch);
gr_status gr_dev_cond_body_end(gr_device *d, gr_stream *s, uint64_t handle, int branch);

/* time */
double gr_dev_clock_us(const gr_device *d); /* default: the host's wall clock */

/* kernel preparation counters; default: all zero */
void gr_dev_kernel_stats(const gr_device *d, gr_dev_kstats *out);

/* collectives (tensor parallelism): devs[0..n) of one backend joined as ranks 0..n-1 of one
 * communicator (gr_device_i.comm_init; unique_id NULL: single process). enter/leave bracket
 * the work the calling thread submits for d in a round where every rank's thread enters
 * (the simulator waits for all of them); default: nothing to do. thread_bind: the calling
 * thread works on d alone (one thread driving the ranks in turn: creation, inputs). */
gr_status gr_dev_comm_init(gr_device *const *devs, int n);
gr_status gr_dev_comm_enter(gr_device *d);
void gr_dev_comm_leave(gr_device *d);
gr_status gr_dev_thread_bind(gr_device *d);
/* CUDA device of a given ordinal (tensor parallelism: rank r on GPU r); fails naming the
 * count when the host has fewer GPUs. gr_device_cuda_create is ordinal 0. */
gr_status gr_device_cuda_create_ordinal(const char *cache_dir, int ordinal, gr_device **out);

#endif
