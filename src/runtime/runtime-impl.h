/* runtime — sessions: plans per concrete shape key, the eager executor and
 * the graph manager. Private to src/runtime. */
#ifndef GR_RUNTIME_IMPL_H
#define GR_RUNTIME_IMPL_H

#include "device/device.h"
#include "frontend/frontend.h"
#include "passes/passes.h"

/* one graph input as bound by the caller */
typedef struct {
    bool set;
    gr_dtype dtype;
    int ndim;
    int64_t dims[GR_MAX_DIMS];
    void *data;       /* the caller's data, copied into page-locked host memory
                         (gr_dev_alloc GR_MEM_HOST_PINNED, freed with gr_dev_free), so the
                         copy into the placeholder is a true asynchronous DMA */
    size_t nbytes, cap; /* bytes bound now; bytes allocated */
    uint64_t version; /* bumped by every set_input and bind_input_device */
    void *dev_ptr;    /* gr_session_bind_input_device: the caller's device buffer (NULL: bound from
                         host memory, `data`); `data` then mirrors it only for host-read inputs */
    bool dev_bound;   /* bound by gr_session_bind_input_device (dev_ptr may be NULL for 0 bytes) */
    uint64_t host_version; /* version last copied from dev_ptr into `data` (host-read inputs) */
} gr_rt_input;

/* graph mode: eager runs of a segment before its capture (first-run effects: lazy loading,
 * library heuristics) */
#define GR_WARMUP_RUNS 1

/* mode auto: timed runs per candidate (eager, graph) before a segment's mode is chosen */
#define GR_SCG_SAMPLES 3

typedef enum { GR_SEG_EAGER = 0, GR_SEG_WARMUP, GR_SEG_CAPTURED, GR_SEG_FALLBACK, GR_SEG_CHOSE_EAGER } gr_seg_state;

/* Graph-manager state of one segment (graph mode). */
typedef struct {
    gr_seg_state state;
    int warmups;            /* eager runs before capture */
    int records;            /* captures made */
    gr_dgraph *graph;
    gr_dexec *exec;
    int n_nodes;
    /* host scalars baked into kernel nodes: (node, step, value seen at capture) */
    int n_scalar_nodes;
    int scalar_cap;         /* entries allocated in the three arrays below */
    int *scalar_node;       /* graph node index */
    int *scalar_step;       /* step index */
    gr_karg *scalar_args;   /* captured argument arrays, GR_KMAX_PARAMS per node */
    /* invariants checked before each replay */
    uint64_t input_key;     /* hash of the shapes/dtypes of inputs */
    char *fallback_reason;
    /* mode auto (selective graphs): timed runs of each candidate, then the choice */
    double eager_us[GR_SCG_SAMPLES], graph_us[GR_SCG_SAMPLES];
    int n_eager_samples, n_graph_samples;
    bool decided;
    bool decision_loaded;   /* the decision came from the decisions file (decisions.c), not timing */
    bool decision_kept;     /* ... from this session's earlier plan of the binding (dropped under graph_memory_mb) */
    /* graph memory: what capturing + instantiating this segment's exec took on the device
     * (free memory before minus after), counted in gr_session.graph_bytes while exec lives */
    size_t graph_bytes;
    long evictions;         /* times this segment's graph was evicted (graph_memory_mb) */
    /* shape policy update (shapes.c): exec is the session's one exec of this segment position,
     * refreshed from this plan's graph (exec update) before a replay when another binding's
     * graph was applied last; not this segment's to destroy or count */
    bool exec_shared;
    /* the last capture's costs on the device clock (simulated on the simulator, wall on CUDA):
     * recording the stream, then instantiation (or exec update) + upload; shape policy auto
     * measures with them (autopol.c) */
    double record_clock_us, instantiate_clock_us;
    uint64_t hash;          /* gr_rt_segment_hash, once computed (hash_known) */
    bool hash_known;
} gr_rt_segment;

typedef struct gr_rt_plan {
    int64_t *sym_values; /* shape key */
    int n_syms;
    gr_graph *g;         /* specialized, folded, lowered (owns temporaries) */
    gr_step_list steps;
    gr_mem_plan mem;
    gr_segment_list segs;
    gr_rt_segment *seg_state;
    gr_kfunc **funcs;    /* per step (KERNEL), else NULL */
    void *arena;         /* own, or the session's shared one (arena_shared) */
    bool arena_shared;   /* GR_ARENA_MAX_SHAPE: in the session's shared arena */
    bool arena_own_layout; /* ... with this plan's own offsets (its structure differs from the largest
                              binding's: arena_note says how), else at the largest binding's addresses */
    char arena_note[192]; /* why this plan has its own arena under GR_ARENA_MAX_SHAPE ("" if not) */
    void *consts;        /* the plan's own constants (folded for this binding) */
    void **weight_addr;  /* per value of g: device address of a shared weight (GR_STORE_WEIGHT), else NULL */
    void **input_dev;    /* per graph input: device placeholder (NULL for @host inputs read
                            only by value: those are read from gr_rt_input.data at launch) */
    size_t *input_bytes; /* per graph input: its bytes for this shape key */
    uint64_t *input_version; /* version of each input last copied into its placeholder (0 = never) */
    /* per graph input, for a caller's device buffer (gr_session_bind_input_device):
     * in place: kernels read the buffer itself (graph nodes repointed when its address
     * changes); else it is copied into the placeholder (a library call reads it inside a
     * graph, or the device cannot repoint nodes). host_read: a step reads it on the host. */
    bool *input_in_place;
    bool *input_host_read;
    /* per graph input read by a library call inside a graph (graph and auto modes): a captured
     * library call cannot be repointed, so such an input is read in place only at the address
     * its first run had (input_pinned): model weights bound once (torch.compile's parameters)
     * then cost no placeholder and no copy. Bound elsewhere later, it moves to its placeholder
     * for good and the graphs reading it are captured again (session.c pin_libcall_inputs). */
    bool *input_libcall;
    void **input_pinned;
    /* shape policy generic (generic.c): every kernel step reads its slots from this plan's
     * device table (GR_KPREP_SLOT_TABLE; its address is the step's last, literal argument) */
    int *slot_off;       /* per step: first slot in the table, or -1 (not a table kernel) */
    int64_t *slot_host;  /* the plan's own slot values, slot_count of them (what the table is filled from) */
    size_t slot_count;
    void *slot_table;    /* device: slot_count int64 */
    bool *input_borrowed; /* per graph input: the placeholder is the largest binding's (not freed here) */
    long serial;         /* unique per plan in the session (tables record whose values they hold) */
    struct gr_rt_gplan *gp; /* generic.c: per-segment verdicts against the bucket's plan; NULL until used */
    long n_kernels;      /* kernel + libcall steps */
    bool instantiated;   /* made from a plan template (template.c), not by the pass pipeline */
    double compile_us;
    double capture_us;
    struct gr_rt_plan *next;
} gr_rt_plan;

struct gr_session {
    gr_device *dev;
    bool ctrl_graphs;       /* a control runner's session (control.c) whose steps the runner captures (graph mode): nested runners capture too */
    gr_stream *stream;      /* the session's own stream: every run's work is enqueued here */
    /* gr_session_run_on_stream: a wrapper of the caller's stream (re-made when the handle
     * changes), ordered against `stream` with ev_order (caller -> graft) and ev_done */
    gr_stream *ext_stream;
    void *ext_handle;
    gr_event *ev_order, *ev_done;
    gr_event *ev_start, *ev_end;
    gr_event *ev_seg_a, *ev_seg_b; /* mode auto: around one segment */
    gr_session_options opt;
    gr_graph *graph;        /* the session's own copy, symbolic dims intact */
    gr_precision_stats precision; /* what opt.precision converted at creation (explain) */
    gr_rt_input *inputs;    /* per graph input */
    gr_rt_plan *plans;      /* one per shape key, most recent first */
    gr_rt_plan *current;    /* plan of the last run */
    uint64_t generation;    /* incremented by every run */
    bool has_run;
    bool pending;           /* a run was enqueued and not waited for */
    const char *wait_why;   /* why the last run that could queue did not (verbose; NULL: it queued) */
    int wait_seg;           /* the segment of wait_why, or -1 */
    int64_t waits_on_host;  /* runs that waited for the previous one before starting */
    double run_t0;          /* device clock at the start of the pending run */
    uint64_t input_versions; /* source of gr_rt_input.version */
    /* weights (constants of s->graph), uploaded on first use and shared by every plan:
     * a plan compiles a borrowing clone, so its weights point at s->graph's data */
    void **weight_dev;       /* per value of s->graph: device copy, or NULL */
    int32_t *weight_slots;   /* hash: host data pointer -> value index + 1 */
    size_t weight_cap;
    size_t weight_bytes;     /* uploaded so far */
    /* GR_ARENA_MAX_SHAPE: the plan of the largest binding and its arena, shared by every plan */
    gr_rt_plan *max_plan;
    int64_t *max_syms;
    void *shared_arena;
    size_t shared_arena_bytes;
    gr_run_stats stats;
    long total_captures;
    /* graph memory (graphs.c): the budget and what the live execs hold, as measured */
    size_t graph_budget;     /* bytes; 0 = no limit */
    size_t graph_bytes, graph_bytes_peak;
    long instantiations, evictions, graphs_live, over_budget, plans_evicted;
    /* mode auto */
    long timed_runs, decisions_measured, decisions_loaded;
    struct gr_rt_decisions *decisions; /* decisions.c (mode auto); NULL in other modes */
    /* bindings whose plan was dropped under graph_memory_mb (gr_rt_binding_hash): they were run
     * before, so their next plan captures without a warm-up run */
    GR_VEC(uint64_t) warmed_bindings;
    gr_pipeline_scratch plan_scratch; /* build-time buffers every plan build reuses (plan.c) */
    struct gr_rt_shapes *shapes; /* shapes.c: shape policies' state (update's shared execs); NULL until needed */
    long exec_updates, exec_updates_refused; /* shape policy update: execs refreshed / refused (instantiated) */
    /* shape policy generic (generic.c): segment runs of a binding through its bucket's plan (replays:
     * those that replayed the bucket's graph), slot-table copies and their bytes, plan serials, and per
     * shared input placeholder the serial of the plan whose input it holds (0: nobody's) */
    long generic_runs, generic_replays, table_refreshes, plan_serials;
    size_t table_bytes;
    /* generic's machinery is on: policy generic, or policy auto where it is a candidate (autopol.c) */
    bool generic_infra;
    /* shape policy auto measured per segment (autopol.c): on in graph mode for symbolic models;
     * segments measured / decisions read from the decisions file / measuring runs */
    bool autopol;
    bool shape_policy_default; /* opt.shape_policy came from GR_SHAPES_DEFAULT (resolved at creation) */
    long autopol_measured, autopol_loaded, autopol_runs;
    struct gr_rt_autopol *ap; /* autopol.c: per-segment decisions; NULL unless autopol */
    long *generic_input_owner;
    const struct gr_rt_plan *layout_plan; /* generic: while a binding's plan is built, its bucket's (offsets adopted) */
    double instantiate_us;  /* host time of instantiations / exec updates + uploads at capture, all plans */
    long plans_compiled;    /* plans made by the pass pipeline (template.c counts the instantiated ones) */
    struct gr_rt_tmpl *tmpl; /* template.c: plan templates per class of bindings; NULL until a symbolic plan is built */
    struct gr_rt_probe *probe; /* probe.c: data-dependent counts; NULL until the first run needs one */
    /* generate.c: state bindings (present -> past) and their device buffers; NULL until bound */
    struct gr_rt_gen *gen;
    /* tp.c: tensor parallelism: this session is rank 0 and drives the other ranks; NULL otherwise */
    struct gr_rt_tp *tp;
    /* gr_rt_session_create_child: the parent's device (not owned) and weights (a constant equal in
     * name, type and bytes to one of the parent's graph is read from the parent's upload) */
    struct gr_session *weights_from;
    bool dev_borrowed;
};

/* A session on `parent`'s device that reads the parent's uploaded weights instead of uploading its
 * own copy wherever its graph holds the same constant (the decode engine: the rewritten step of the
 * parent's model). The parent must outlive it. */
gr_status gr_rt_session_create_child(gr_graph_t graph, const gr_session_options *opt, gr_session_t parent, gr_session_t *out);

/* ---- tp.c: tensor parallelism (gr_session_options.tp > 1) -------------------------------------
 * The session the caller holds is rank 0's; tp holds the other ranks' sessions. set_input goes to
 * every rank; run and wait run every rank on its own host thread (collectives block a rank until
 * its peers arrive); outputs, stats and explain are rank 0's (outputs are whole on every rank). */
gr_status gr_rt_tp_create(gr_graph *graph, const gr_session_options *opt, gr_session_t *out);
void gr_rt_tp_destroy(gr_session_t s);
gr_status gr_rt_tp_set_input(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                             size_t nbytes);
gr_status gr_rt_tp_run(gr_session_t s);
gr_status gr_rt_tp_wait(gr_session_t s);
void gr_rt_tp_explain(gr_session_t s, gr_strbuf *sb);
/* ranks of a session (1 without tensor parallelism) and rank r's session (0: s itself) */
int gr_rt_tp_ranks(gr_session_t s);
gr_session_t gr_rt_tp_rank(gr_session_t s, int r);
/* session.c: the one-device forms the tp hooks call per rank, and a session on a given device
 * (taken: destroyed with the session, or on failure) */
gr_status gr_rt_run_one(gr_session_t s);
/* gr_rt_run_one that may queue behind a pending run in the steady state (gr_session_run_device) */
gr_status gr_rt_run_queued(gr_session_t s, bool may_queue);
/* gr_session_bind_input_device; wait_pending false: no host wait for a pending run */
gr_status gr_rt_bind_device(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, void *dev_ptr,
                            size_t nbytes, bool wait_pending);
/* gr_session_output_device_ptr without waiting for a pending run */
gr_status gr_rt_output_device_ptr(gr_session_t s, gr_output o, void **dev_ptr);
gr_status gr_rt_wait_one(gr_session_t s);
/* Writes device memory into input `i`'s placeholder for the current binding, on the device:
 * `rows` rows of `row_bytes` from src (pitch src_pitch) to placeholder offset r * dst_pitch.
 * The input's pending host value is copied in first, so the next run keeps what was written
 * (the decode engine loads a prompt's cache this way). Refused for an input read in place
 * from a caller's buffer or kept on the host. */
/* Zeroes input `i`'s placeholder for the current binding on the device, where its bound host value
 * is all zeros already (the caller knows): the next run does not copy it again. */
gr_status gr_rt_input_zero(gr_session_t s, int i);
gr_status gr_rt_input_write_rows(gr_session_t s, int i, const void *src, size_t src_pitch, size_t dst_pitch, size_t row_bytes,
                                 size_t rows);
gr_status gr_rt_set_input_one(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                              size_t nbytes);
gr_status gr_rt_session_create_on(gr_graph *graph, const gr_session_options *opt, gr_device *dev, gr_session_t *out);
/* what a tensor-parallel session refuses (the API drives one device) */
#define GR_RT_NO_TP(s, what)                                                                                       \
    do {                                                                                                           \
        if ((s)->tp) return gr_error(GR_ERR_UNSUPPORTED, "%s: not supported with tensor parallelism (tp %d)", what, \
                                     gr_rt_tp_ranks(s));                                                           \
    } while (0)

/* generate.c: frees the state bindings and their device buffers (session destruction) */
void gr_rt_gen_free(gr_session_t s);

/* session.c: the session totals of stats (graph memory, decisions) copied into *out */
void gr_rt_stats_totals(gr_session_t s, gr_run_stats *out);

/* session.c: device address of the weight whose host data (a constant of s->graph) is `host`,
 * uploaded on first use */
gr_status gr_rt_weight(gr_session_t s, const void *host, void **dev);

/* plan.c */
/* gr_session_options.precision as the dtype the conversion targets (GR_F32 for MODEL). */
static inline gr_dtype gr_rt_precision_dtype(int precision) {
    return precision == GR_PRECISION_BF16 ? GR_BF16 : precision == GR_PRECISION_F16 ? GR_F16 : GR_F32;
}
/* The gr_kernel_class of step st of plan p (runtime/profile.c). */
int gr_rt_step_class(const gr_rt_plan *p, const gr_step *st);
gr_status gr_rt_plan_build(gr_session_t s, const int64_t *sym_values, gr_rt_plan **out);
/* The pipeline options of s's plans, without observer or scratch (tests build a plan's
 * binding afresh with them and compare). */
void gr_rt_plan_pipeline_opts(gr_session_t s, gr_pipeline_opts *po);
/* ---- template.c: a new binding's plan from a template (classes of bindings by coincidences of
 * dims; numbers as polynomials fitted exactly on a grid of bindings). The pipeline's result for
 * binding syms into *out: instantiated (*instantiated true) when the binding's class has a
 * template and its guards hold, else gr_pass_pipeline (and the class's template is built at its
 * second binding). allowed false (a test step hook is set): always the pipeline. */
typedef struct gr_rt_tmpl gr_rt_tmpl;
gr_status gr_rt_tmpl_pipeline(gr_session_t s, const int64_t *syms, const gr_pipeline_opts *po, bool allowed, gr_compiled *out,
                              bool *instantiated);
/* bindings compiled by the pipeline / instantiated, session totals */
void gr_rt_tmpl_stats(gr_session_t s, long *compiled, long *instantiated);
void gr_rt_tmpl_explain(gr_session_t s, gr_strbuf *sb);
void gr_rt_tmpl_free(gr_session_t s);
/* ---- probe.c: data-dependent symbols (NonZero's count, ...) ---- */
typedef struct gr_rt_probe gr_rt_probe;
bool gr_rt_probe_needed(const gr_graph *g);
/* Session options a graph with data-dependent dims cannot honour (at creation). */
gr_status gr_rt_probe_check_options(gr_session_t s);
/* Binds the data-dependent symbols in syms (the others bound from the inputs): runs the
 * probe and reads the counts on the host. */
gr_status gr_rt_probe_bind(gr_session_t s, int64_t *syms);
void gr_rt_probe_explain(gr_session_t s, gr_strbuf *sb);
void gr_rt_probe_destroy(gr_session_t s);
/* ---- control.c: if / loop steps (passes/cond.c) run by sessions over their subgraphs ---- */
/* Gives each control step of p its runner (host_fn / host_user). */
gr_status gr_rt_ctrl_bind(gr_session_t s, gr_rt_plan *p);
/* Frees the runners of p's control steps (plan destruction). */
void gr_rt_ctrl_free(gr_rt_plan *p);
/* Test hook: the while-loop iteration cap (n <= 0: GR_LOOP_MAX_ITERS again). Set before runs. */
void gr_rt_debug_set_loop_cap(int64_t n);
/* "control flow: ..." lines: every if / loop of the model and its strategy in the current plan. */
void gr_rt_ctrl_explain(gr_session_t s, gr_strbuf *sb);
/* GR_ARENA_MAX_SHAPE: builds the largest binding's plan and the shared arena (session creation). */
gr_status gr_rt_max_plan_init(gr_session_t s);
void gr_rt_plan_destroy(gr_session_t s, gr_rt_plan *p);
/* Device (or host) address of value v in plan p for the current inputs. */
void *gr_rt_value_addr(gr_session_t s, gr_rt_plan *p, int v);
/* Fills the launch arguments of step i. */
gr_status gr_rt_step_args(gr_session_t s, gr_rt_plan *p, int i, gr_karg *args);
/* Enqueues step i on the session stream. */
gr_status gr_rt_step_launch(gr_session_t s, gr_rt_plan *p, int i);

/* Test hook: called on every new plan's steps after fusion, before memory
 * planning (tests insert host steps with it). NULL disables. */
typedef gr_status (*gr_rt_step_hook)(void *user, gr_graph *g, gr_step_list *steps);
void gr_rt_debug_set_step_hook(gr_rt_step_hook fn, void *user);

/* Device (or host) address of graph input i's storage in plan p: the caller's device buffer
 * when it is read in place, else the plan's placeholder. */
void *gr_rt_input_addr(gr_session_t s, gr_rt_plan *p, int i);
/* Input i's device placeholder in plan p, allocated on first use: an input read in place
 * from a caller's buffer (a bound weight) never gets one. */
gr_status gr_rt_input_placeholder(gr_session_t s, gr_rt_plan *p, int i);

/* session.c: the plan of binding syms (most recent first), built if there is none */
gr_status gr_rt_plan_for(gr_session_t s, const int64_t *syms, gr_rt_plan **out);
/* The plan of binding syms if it is built (NULL if not): nothing built, evicted or reordered. */
gr_rt_plan *gr_rt_plan_find(gr_session_t s, const int64_t *syms);
/* session.c: runs segment seg eagerly (errors name the node) */
gr_status gr_rt_segment_run_eager(gr_session_t s, gr_rt_plan *p, int seg);

/* graphs.c — graph mode for one segment */
gr_status gr_rt_segment_run_graph(gr_session_t s, gr_rt_plan *p, int seg);
/* Frees the segment's graph, exec and tracking arrays (its graph memory leaves the
 * session's count) and zeroes the state. */
void gr_rt_segment_release(gr_session_t s, gr_rt_segment *st);
/* Drops segment seg's graph, keeping its warm-up and mode-auto decision: the next run
 * captures it again (an address a captured library call reads has changed). */
void gr_rt_segment_recapture(gr_session_t s, gr_rt_plan *p, int seg);

/* shapes.c — shape policies (gr_shape_policy) beyond one graph per binding.
 * update: instantiate gives segment seg of plan p (its graph just captured) the session's exec
 *   of that position, updated from the graph (no instantiation), or instantiates it when there
 *   is none yet or the update is refused (then the plan's own exec; reason for explain);
 *   under auto, the plan's own exec while the graphs (expect_bytes more) fit graph_memory_mb;
 *   apply refreshes a shared exec from p's graph when another binding's was applied last;
 *   forget: st's graph is going away (release). */
gr_status gr_rt_update_instantiate(gr_session_t s, gr_rt_plan *p, int seg, size_t expect_bytes);
gr_status gr_rt_update_apply(gr_session_t s, gr_rt_plan *p, int seg);
void gr_rt_update_add_bytes(gr_session_t s, int seg, size_t bytes);
/* auto chose update for segment seg: p's own exec becomes the position's shared one (or, when
 * the position has one, p's graph is dropped and captured again into it on p's next run) */
gr_status gr_rt_update_adopt(gr_session_t s, gr_rt_plan *p, int seg);
/* segment seg of p replays without an exec update: its own exec, or the shared one holding its graph
 * with no tracked argument that could change */
bool gr_rt_update_holds(gr_session_t s, const gr_rt_plan *p, int seg);
void gr_rt_update_forget(gr_session_t s, const gr_rt_segment *st);
/* the position's shared exec destroyed (its memory given back) when no plan's segment uses it */
void gr_rt_update_release(gr_session_t s, int seg);
void gr_rt_update_explain(gr_session_t s, const gr_rt_segment *st, int seg, gr_strbuf *sb);
void gr_rt_shapes_free(gr_session_t s);
/* pad: init (session creation) proves per symbol that padding keeps the real rows
 *   (gr_pass_pad_proof); round replaces syms by capture sizes, remembering the real values;
 *   plan_built makes a plan copy padded inputs (never read in place); input copies input i from
 *   src zero-padded (*done false: not padded now, the caller copies); output gives output o's
 *   real dims and how to cut it (false: not padded now); explain and runs report. */
gr_status gr_rt_pad_init(gr_session_t s);
gr_status gr_rt_pad_prepare(gr_session_t s);
void gr_rt_pad_round(gr_session_t s, int64_t *syms, bool count);
bool gr_rt_pad_peek(gr_session_t s, int64_t *syms);
void gr_rt_pad_plan_built(gr_session_t s, gr_rt_plan *p);
gr_status gr_rt_pad_input(gr_session_t s, gr_rt_plan *p, int i, const void *src, gr_copy_kind kind, bool *done);
bool gr_rt_pad_output(gr_session_t s, gr_rt_plan *p, int o, int64_t *dims, int *axis, int64_t *outer, size_t *inner_bytes,
                      int64_t *padded);
long gr_rt_pad_runs(gr_session_t s);
bool gr_rt_pad_any(gr_session_t s); /* some symbol is padded (proven) */
void gr_rt_pad_explain(gr_session_t s, gr_strbuf *sb);

/* generic.c — shape policy generic: one graph per bucket of bindings (powers of two up to each
 * symbol's declared maximum), kernels reading their slots from a device table.
 * plan_tables (plan build): gives every kernel step with a free argument a slot-table
 *   argument and fills the plan's table; returns the kernel_prepare flags per step in *table.
 * select: the plan of binding syms (gr_rt_plan_for) and its bucket's (*rep, built first, so the
 *   binding's plan adopts the bucket's arena offsets); *rep NULL when the run does not use it
 *   (another policy, eager mode, p is a bucket). Device-bound inputs are copied into the
 *   shared placeholders under generic (never read in place).
 * inputs: before the run's input copies: a shared placeholder another plan filled is refilled.
 * run_segment: segment seg of p, through rep's plan and graph where proven equal (its table
 *   refreshed with p's slots first), else p's own (exact for that segment).
 * is_bucket: p is its own bucket's plan (its captures are bounded: max_rerecords does not apply).
 * peek: select's plans if both are built, with no effect (session.c's wait decision); runner: the
 *   plan whose graph runs segment seg of p (rep or p), NULL while the proof is not made yet.
 * explain / plan_free / placeholder (input i of p borrows the largest binding's). */
gr_status gr_rt_generic_plan_tables(gr_session_t s, gr_rt_plan *p, bool *table);
gr_status gr_rt_generic_select(gr_session_t s, const int64_t *syms, gr_rt_plan **p, gr_rt_plan **rep);
bool gr_rt_generic_peek(gr_session_t s, const int64_t *syms, gr_rt_plan **p, gr_rt_plan **rep);
gr_rt_plan *gr_rt_generic_runner(const gr_rt_plan *p, gr_rt_plan *rep, int seg);
void gr_rt_generic_inputs(gr_session_t s, gr_rt_plan *p);
gr_status gr_rt_generic_run_segment(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg);
bool gr_rt_generic_is_bucket(gr_session_t s, const gr_rt_plan *p);
/* verdict: whether segment seg of p can run through rep's plan and graph (*why: the refusal, owned
 *   by p; NULL when proven); dirty: rep's table at seg holds nobody's slots (the next run through it
 *   copies them, as a new binding's would: auto times that copy). */
gr_status gr_rt_generic_verdict(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg, bool *ok, const char **why);
gr_status gr_rt_generic_dirty(gr_rt_plan *rep, int seg);

/* autopol.c — shape policy auto, measured per segment (issue 11 item 1): each segment position
 * (and segment structure) gets exact, update or generic by timing them at the first binding that
 * runs it; the decisions persist with mode auto's (decisions.c).
 * init (session creation, after pad's proof): whether auto measures here and generic's machinery
 *   is on; run_segment: segment seg of p (rep: its bucket's plan, or NULL), measuring it first when
 *   undecided; decide (after a run): the measured segments get their policy; policy: the decided
 *   policy of p's segment seg (-1: undecided); explain: per segment. */
#define GR_AP_N 3 /* candidates: exact, update, generic */
typedef struct {
    uint64_t seg_hash;
    int seg;
    int policy;                /* gr_shape_policy (EXACT, UPDATE or GENERIC); -1: measured, not decided yet */
    uint64_t bytes;            /* graph memory of the segment's own graph at the measured binding */
    float replay_us[GR_AP_N];  /* per call replay at the measured binding (<0: not a candidate) */
    float setup_us[GR_AP_N];   /* making the graph for a new binding (capture + instantiate or exec update) */
    float per_call_us[GR_AP_N]; /* the score: replay + switch + setup amortised (docs/design.md) */
    float ratio;               /* the calls per binding the policy was last chosen for (>= 1) */
    uint32_t changes;          /* times the choice changed after its first decision, in every process that saved it */
    uint32_t changed_at_call;  /* the call (of the process that last changed it) when it did; 0: never changed */
    bool from_file;            /* read from the decisions file (else measured here); not stored */
} gr_rt_ap_decision;
gr_status gr_rt_autopol_init(gr_session_t s);
gr_status gr_rt_autopol_run_segment(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg);
gr_status gr_rt_autopol_decide(gr_session_t s, gr_rt_plan *p);
/* the adaptive rule: revise (a run's start, p its plan) re-chooses the decided segments from their
 * measured numbers when the calls per binding seen moved enough; count (a run's end) counts the
 * call and its binding */
gr_status gr_rt_autopol_revise(gr_session_t s);
void gr_rt_autopol_count(gr_session_t s, const gr_rt_plan *p);
void gr_rt_autopol_explain_session(gr_session_t s, gr_strbuf *sb);
int gr_rt_autopol_policy(gr_session_t s, const gr_rt_plan *p, int seg);
void gr_rt_autopol_explain(gr_session_t s, const gr_rt_plan *p, int seg, gr_strbuf *sb);
void gr_rt_autopol_free(gr_session_t s);
/* why generic is not a candidate of shape policy auto in this session (NULL: it is) */
const char *gr_rt_autopol_generic_why(gr_session_t s);
/* the per-segment runner of a run (session.c) and of capture ahead (shapes.c): auto, generic,
 * graph or eager as the session's mode and policy say */
gr_status gr_rt_run_segment(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg);
/* p's own slots and folded constants back in its table and constant memory (before its steps run
 * outside a session run: capture_range) */
gr_status gr_rt_generic_own(gr_session_t s, gr_rt_plan *p);
void gr_rt_generic_explain(gr_session_t s, const gr_rt_plan *p, int seg, gr_strbuf *sb);
void gr_rt_generic_plan_free(gr_session_t s, gr_rt_plan *p);
bool gr_rt_generic_placeholder(gr_session_t s, gr_rt_plan *p, int i, gr_status *st);

/* decisions.c — mode auto's per-segment decisions, persisted per device (name and driver),
 * model hash and binding in <cache_dir>/decisions/ (util/cache-file.h framing).
 * open: at session creation (mode auto): computes the model hash and reads the file; a
 *   missing file is no decision yet, a corrupt or stale one is ignored with a warning
 *   (stderr when verbose; gr_rt_decisions_note for explain). Not persisted (no_persist_decisions,
 *   the simulator without cache_dir): the table lives in memory only. Only GR_ERR_NOMEM fails.
 * apply: a new plan's segments take the decisions recorded for its binding (no timing): read
 *   from the file, or made by this session for a plan of the binding dropped since.
 * record: a decision made by timing is added and the file rewritten (atomically); a write
 *   failure is a warning, never an error of the run. */
gr_status gr_rt_decisions_open(gr_session_t s);
/* hash of a plan's binding (its symbols' values) */
uint64_t gr_rt_binding_hash(const gr_rt_plan *p);
void gr_rt_decisions_close(gr_session_t s);
gr_status gr_rt_decisions_apply(gr_session_t s, gr_rt_plan *p);
gr_status gr_rt_decisions_record(gr_session_t s, gr_rt_plan *p, int seg, bool graph, double eager_us, double graph_us);
/* the decisions file's path ("" when not persisted) and what happened to it (warnings) */
const char *gr_rt_decisions_path(gr_session_t s);
const char *gr_rt_decisions_note(gr_session_t s);
/* shape policy auto's per-segment decisions (autopol.c), in the same file: find one for segment
 * index seg of that structure (seg_hash), NULL if none; record adds or replaces one (and rewrites
 * the file when save); segment_hash: a segment's steps (kinds, kernel names and structures). */
const gr_rt_ap_decision *gr_rt_decisions_find_policy(gr_session_t s, int seg, uint64_t seg_hash);
gr_status gr_rt_decisions_record_policy(gr_session_t s, const gr_rt_ap_decision *x, bool save);
gr_status gr_rt_decisions_save(gr_session_t s); /* writes the table (when persisted) */
uint64_t gr_rt_segment_hash(const gr_rt_plan *p, int seg);

/* ---- the rewritten decode engine (decode.c) ---------------------------------------------------
 * One session over gr_pass_decode_rewrite's single-token step of `src`'s model at `batch` rows
 * and `max_len` cache positions: one plan and (in graph mode) one captured graph for every
 * position. io_names: NULL, or the token-ids, position-ids and attention-mask inputs' names
 * (NULL entries: found by name and role). reset(eos, pad): a new sequence (state buffers and
 * finished flags zero; eos -1: none). step(ids[batch], kv_len): the token at position
 * kv_len - 1 of every row; logits [batch, vocab] are read back when `logits` is not NULL.
 * GR_ERR_UNSUPPORTED (naming the input or node) when the model cannot be rewritten; the
 * caller then keeps the per-length steps.
 * Unless loop_refused() says why not, the step also selects the next token on the device
 * (greedy) and advances its own inputs (gr_pass_decode_device_loop); loop(kv_first, kv_stop,
 * first_row, tokens) then runs the steps kv_first..kv_stop with no host copy between them and
 * writes the tokens of positions first_row..kv_stop ([rows][batch]) to `tokens` (one copy). */
typedef struct gr_decode_engine gr_decode_engine;
gr_status gr_decode_engine_create(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                  const char *const *io_names, int64_t batch, int64_t max_len, gr_decode_engine **out);
/* sample: the decode loop draws its tokens with the sample op (passes/decode.c) instead of the
 * argmax; its parameters come from gr_decode_engine_set_sampling (kept across resets). */
gr_status gr_decode_engine_create_ex(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                     const char *const *io_names, int64_t batch, int64_t max_len, bool sample,
                                     gr_decode_engine **out);
gr_status gr_decode_engine_set_sampling(gr_decode_engine *e, uint64_t seed, int64_t first, int64_t top_k, float temperature,
                                        float top_p);
gr_status gr_decode_engine_reset(gr_decode_engine *e, int64_t eos, int64_t pad);
gr_status gr_decode_engine_step(gr_decode_engine *e, const int64_t *ids, int64_t kv_len, float *logits);
/* The same, reading back the step's argmax ids (greedy on the device: ties pick the lowest id). */
gr_status gr_decode_engine_step_greedy(gr_decode_engine *e, const int64_t *ids, int64_t kv_len, int64_t *next);
gr_status gr_decode_engine_loop(gr_decode_engine *e, int64_t kv_first, int64_t kv_stop, int64_t first_row, int64_t *tokens);
/* A prompt's cache computed elsewhere (the per-length step over its first `len` tokens): state k's
 * positions 0..len-1 are copied on the device from `src` (the present of that step: the state's
 * shape with `len` on the cache axis, same dtype) into the engine's buffer; then a step at kv_len
 * len + 1 continues from there. After gr_decode_engine_reset. GR_ERR_UNSUPPORTED (with a message)
 * when the shapes do not line up. */
gr_status gr_decode_engine_load_prefix(gr_decode_engine *e, int k, const void *src, gr_dtype dtype, int ndim, const int64_t *dims,
                                       int64_t len);
/* Beam search on the device (passes/decode.c's beam loop): batch_rows = batch x beams token rows,
 * every step reorders the caches after the last step's beams and runs beam_step in place on the
 * engine's beam state; room = max_len (a sequence's room for new tokens). GR_ERR_UNSUPPORTED when
 * the decode loop cannot be built for the model (beam search needs it). */
gr_status gr_decode_engine_create_beam(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                       const char *const *io_names, int64_t batch_rows, int64_t max_len, int64_t beams,
                                       gr_decode_engine **out);
/* A fresh beam state (gr_beam_state_init) and the step's params (codegen/kir.h's layout, room =
 * the engine's max_len): first = the prompt length, so the step at kv_len P + j is new token j;
 * kept across resets. */
gr_status gr_decode_engine_set_beam(gr_decode_engine *e, int64_t first, int64_t eos, int64_t pad, double length_penalty,
                                    int64_t max_new);
/* The beam state now on the device ([batch][slots] of gr_beam_state_layout for the engine's
 * beams, room and vocabulary), after the last run; *slots its row length. */
gr_status gr_decode_engine_read_beam(gr_decode_engine *e, int64_t *state, size_t bytes);
int64_t gr_decode_engine_beam_room(const gr_decode_engine *e);
const char *gr_decode_engine_loop_refused(const gr_decode_engine *e); /* NULL: the device loop is available */
long gr_decode_engine_loop_captures(const gr_decode_engine *e);
int64_t gr_decode_engine_vocab(const gr_decode_engine *e);
struct gr_session *gr_decode_engine_session(gr_decode_engine *e);
void gr_decode_engine_destroy(gr_decode_engine *e);

#endif
