/* device/sim — private structures shared by the simulator's files.
 * sim.c: memory table, streams, events, eager work, cost model.
 * sim_graph.c: stream capture, graphs, exec graphs, updatable and conditional nodes. */
#ifndef GR_SIM_IMPL_H
#define GR_SIM_IMPL_H

#include "device/device.h"

/* ---- cost model (µs, bytes); every constant cites the anchor it comes from ---------- */
typedef struct {
    double launch_host_us;      /* eager kernel launch, host side: eager_empty_submit 4.159 / DESIGN 4.1 */
    double libcall_host_us;     /* eager cuBLASLt matmul call, host side: 13 us, from graft's H100 runs
                                   (eager mlp 138.7 us = 8 x 4.1 + 8 x 13.2; transformer 115.6 us = 6 x 4.1
                                   + 6 x 15.2; bench/gpu-check/2026-11-22-h100/auto-mode.log) */
    double kernel_min_us;       /* eager kernel minimum device time (brief: ~2 µs) */
    double mem_bytes_per_us;    /* HBM3 3.0 TB/s (H100 SXM spec) */
    double flops_per_us;        /* fp32 non-tensor ~50 TFLOP/s (H100 spec) */
    double mm_flops_per_us;     /* f16/bf16 matmul ~400 TFLOP/s (tensor cores, H100 spec) */
    double mm_f32_flops_per_us; /* f32/f64 matmul, TF32 off: 12.3 TFLOP/s measured by graft on the H100
                                   (256x512x512 f32 cuBLASLt matmul 10.9 us, bench/gpu-check/2026-11-22-h100) */
    double copy_host_us;        /* host side of an async copy / memset submit (part of d2d_copy_4096B 5.602) */
    double d2d_base_us;         /* d2d_copy_4096B 5.602, d2d_copy_16777216B 8.635: 5.58 + 1.81e-7 µs/B */
    double d2d_us_per_byte;
    double d2d_big_bytes_per_us;/* d2d_copy_268435456B 179.83 µs → 1.49e6 B/µs */
    double h2d_base_us;         /* h2d_8B_roundtrip 6.857 */
    double h2d_bytes_per_us;    /* PCIe gen5 ~25 GB/s (no anchor; spec) */
    double capture_per_node_us; /* graph1000_capture 1750 µs / 1000 */
    double instantiate_per_node_us; /* graph1000_instantiate 5833 / 1000, DESIGN ~6 */
    double upload_base_us;      /* graph1_upload 24.9 */
    double upload_per_node_us;  /* graph1000_upload 1199.8 / 1000 */
    double graph_submit_us;     /* graph1_launch_submit 2.192 */
    double graph_latency_us;    /* graph1_launch_sync_min 7.203 = latency + 1 node (1.0) */
    double graph_node_us;       /* graph1000_replay_per_node 1.004 */
    double cond_node_us;        /* cond_if_flag0_replay 6.748 - graph1 launch of nothing ≈ 0.5 */
    double set_args_us;         /* exec_kernel_node_set_params 1.150 */
    double exec_update_per_node_us; /* graph1000_exec_update 452 / 1000 */
} gr_sim_costs;
extern const gr_sim_costs gr_sim_cost;

/* The simulated device's memory: 80 GiB, an H100 80GB's nominal size (only free = total -
 * used matters to callers: graph memory is measured as a change of free memory); mem_info
 * reports free = this less live device allocations and exec-graph bytes. */
#define GR_SIM_TOTAL_BYTES ((size_t)80 << 30)

typedef struct {
    char *base;
    size_t size;
    gr_mem_kind kind;
    bool alive;
    bool internal; /* the simulator's own (condition flags, updatable-node arg blocks) */
    bool held;     /* freed but still owned (quarantine): its address cannot be reused yet */
} gr_sim_alloc;

typedef struct gr_sim_node gr_sim_node;
typedef struct {
    GR_VEC(gr_sim_node) nodes;
} gr_sim_body;

typedef struct {
    unsigned *flag;       /* device-resident condition value */
    unsigned default_value;
    gr_cond_kind kind;
} gr_sim_cond;

struct gr_sim_node {
    gr_gnode_kind kind;
    /* KERNEL */
    gr_kfunc *func;
    gr_karg *args;
    int n_args;
    gr_karg *dev_args; /* updatable node: device-resident args (the handle), else NULL */
    /* LIBCALL */
    gr_libcall call;
    gr_karg largs[GR_LIB_MAX_NARGS];
    /* COPY / MEMSET */
    void *dst;
    const void *src;
    size_t bytes;
    gr_copy_kind copy_kind;
    int value;
    /* CONDITIONAL */
    int cond; /* index into the context's conditions */
    gr_sim_body body[2];
};

struct gr_dgraph {
    gr_sim_body root;
};

struct gr_dexec {
    gr_sim_body root;
    bool uploaded;
    size_t bytes; /* what it holds as device memory (gr_sim_ctx.graph_bytes) */
};

/* GR_KPREP_GENERIC: the first kernel prepared with a structure is its template; later
 * kernels of that structure run the template's code with their own slot values
 * (gr_kernel_instantiate), as CUDA runs one shared module with per-kernel slots, so a
 * slot the generic form missed shows up here as a wrong result. */
typedef struct gr_sim_template {
    gr_kstructure structure; /* of k: what a kernel's structure is compared with */
    gr_kernel *k;
    int refs;      /* gr_kfuncs made from it */
} gr_sim_template;

struct gr_kfunc {
    gr_kernel *k;  /* what runs: a clone of the kernel, or its template instantiated */
    gr_sim_template *tmpl; /* generic: the shared template; NULL: literal */
    gr_kslot_map *table_map; /* GR_KPREP_SLOT_TABLE: where each slot read from the table goes, else NULL */
    double bytes; /* bytes moved per launch (cost model) */
    double flops;
};

#define GR_SIM_MAX_NEST 8
struct gr_stream {
    double free_us; /* simulated time at which the stream's queued work ends */
    bool capturing;
    bool invalid;
    char invalid_msg[256];
    gr_dgraph *graph;
    int depth;                            /* capture target stack */
    gr_sim_body *target[GR_SIM_MAX_NEST]; /* target[depth-1] receives nodes */
};

struct gr_event {
    double t;
    bool recorded;
};

typedef struct {
    GR_VEC(gr_sim_alloc) allocs;
    GR_VEC(gr_stream *) streams;
    GR_VEC(gr_sim_cond) conds;
    size_t device_bytes;
    /* Device memory of instantiated graphs: the bytes of each exec's node records and argument
     * blocks, the simulator's stand-in for what the driver allocates for an exec graph (its
     * kernel nodes' parameters live in device memory). mem_info counts them as used. */
    size_t graph_bytes;
    size_t quarantine_bytes; /* freed memory still held, so use-after-free stays detectable */
    double host_us;
    GR_VEC(gr_sim_template *) templates; /* live generic structures */
    gr_dev_kstats kstats;
    struct gr_sim_world *world; /* sim-comm.c: the communicator joining this device to its peers, or NULL */
    int rank;                   /* this device's rank in world */
    /* a collective's simulated time on this device: when its stream reaches it (set before
     * gr_sim_run_libcall) and when it ends, the same on every rank: the last arrival plus its
     * transfer (set by it) */
    double coll_arrive_us, coll_done_us;
} gr_sim_ctx;
typedef struct gr_sim_world gr_sim_world;

/* sim-comm.c: reference collectives across sim devices (one host thread per rank) */
gr_status gr_sim_comm_init(void **ctxs, int n, const void *unique_id, int first_rank, int world_size);
void gr_sim_comm_release(gr_sim_ctx *c);
gr_status gr_sim_comm_enter(void *ctx);
void gr_sim_comm_leave(void *ctx);
gr_status gr_sim_comm_run(gr_sim_ctx *c, const gr_libcall *call, const gr_karg *args);
double gr_sim_collective_time(const gr_libcall *call);

/* sim.c */
gr_status gr_sim_check_kernel(gr_sim_ctx *c, const gr_kfunc *f, const gr_karg *args, int n_args, const char *what);
gr_status gr_sim_run_kernel(gr_sim_ctx *c, const gr_kfunc *f, const gr_karg *args, int n_args, const char *what);
gr_status gr_sim_run_libcall(gr_sim_ctx *c, const gr_libcall *call, const gr_karg *args, const char *what);
gr_status gr_sim_run_copy(gr_sim_ctx *c, void *dst, const void *src, size_t bytes, gr_copy_kind kind, bool capturing,
                          const char *what);
gr_status gr_sim_run_memset(gr_sim_ctx *c, void *dst, int value, size_t bytes, const char *what);
double gr_sim_kernel_time(const gr_kfunc *f);
double gr_sim_libcall_time(const gr_libcall *call);
double gr_sim_copy_time(size_t bytes, gr_copy_kind kind);
gr_status gr_sim_alloc_internal(gr_sim_ctx *c, size_t bytes, void **out);
void gr_sim_invalidate(gr_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* sim_graph.c */
gr_status gr_sim_capture_kernel(gr_sim_ctx *c, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args);
gr_status gr_sim_capture_libcall(gr_sim_ctx *c, gr_stream *s, const gr_libcall *call, const gr_karg *args);
gr_status gr_sim_capture_copy(gr_sim_ctx *c, gr_stream *s, void *dst, const void *src, size_t bytes,
                              gr_copy_kind kind, int memset_value, bool is_memset);
void gr_sim_body_free(gr_sim_body *b);
gr_status gr_sim_capture_begin(void *ctx, gr_stream *s);
gr_status gr_sim_capture_end(void *ctx, gr_stream *s, gr_dgraph **out);
void gr_sim_graph_destroy(void *ctx, gr_dgraph *g);
gr_status gr_sim_graph_instantiate(void *ctx, gr_dgraph *g, gr_dexec **out);
void gr_sim_exec_destroy(void *ctx, gr_dexec *e);
gr_status gr_sim_graph_upload(void *ctx, gr_dexec *e, gr_stream *s);
gr_status gr_sim_graph_launch(void *ctx, gr_dexec *e, gr_stream *s);
int gr_sim_graph_num_nodes(void *ctx, gr_dgraph *g);
gr_status gr_sim_graph_node_info(void *ctx, gr_dgraph *g, int node, gr_gnode_info *out);
gr_status gr_sim_exec_set_args(void *ctx, gr_dexec *e, int node, const gr_karg *args, int n_args);
gr_status gr_sim_exec_update(void *ctx, gr_dexec *e, gr_dgraph *g);
gr_status gr_sim_mark_updatable(void *ctx, gr_stream *s, uint64_t *out_handle);
gr_status gr_sim_cond_create(void *ctx, gr_stream *s, gr_cond_kind kind, unsigned default_value, uint64_t *out);
gr_status gr_sim_cond_body_begin(void *ctx, gr_stream *s, uint64_t handle, int branch);
gr_status gr_sim_cond_body_end(void *ctx, gr_stream *s, uint64_t handle, int branch);

#endif
