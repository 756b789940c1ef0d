/* graft — public C API.
 *
 * Opaque handles, status codes, one last-error string per thread.
 * Every call returns a gr_status (GR_OK = 0, negative = error); results come
 * back through the final out-pointer. Nothing here aborts the process.
 *
 * Threads (tests/test_threads.c, run under ThreadSanitizer):
 * - One session per thread is safe: sessions on different threads share no
 *   mutable state and give the same bits as the same runs made one after the
 *   other. Several sessions may be created at once from one graph, as long as
 *   no thread modifies that graph meanwhile.
 * - One session (or graph) used from several threads is not safe unless the
 *   caller serialises every call on it (a mutex around each call).
 * - gr_last_error() is per thread: it reports the last failure of a call made
 *   on the calling thread.
 * - The allocator hook (gr_set_allocator) and the runtime's debug hooks are
 *   process-wide: set them before sessions are created, while no other thread
 *   is inside graft. The failure-injection and live-allocation counters
 *   (gr_debug_*) are process-wide and exact with any number of threads.
 * - The CUDA kernel cache directory may be shared by threads and processes:
 *   entries are written atomically and validated when read.
 */
#ifndef GRAFT_H
#define GRAFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every function declared here is exported from libgraft.so; nothing else is
 * (the library is built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define GR_API __attribute__((visibility("default")))
#else
#define GR_API
#endif

#define GR_MAX_DIMS 8

/* ---- status --------------------------------------------------------------- */
typedef enum {
    GR_OK = 0,
    GR_ERR_INVALID = -1,     /* bad argument, malformed graph or model */
    GR_ERR_NOMEM = -2,       /* host or device allocation failed */
    GR_ERR_IO = -3,          /* file missing, unreadable, truncated */
    GR_ERR_PARSE = -4,       /* syntax error in a model file */
    GR_ERR_SHAPE = -5,       /* shape or dtype mismatch */
    GR_ERR_UNSUPPORTED = -6, /* op, dtype or feature not supported here */
    GR_ERR_DEVICE = -7,      /* device / driver / compiler failure */
    GR_ERR_STALE = -8,       /* output handle from an older run */
    GR_ERR_NOT_FOUND = -9,   /* unknown name */
    GR_ERR_HAZARD = -10,     /* a CUDA-graph hazard graft refuses to ignore */
    GR_ERR_INTERNAL = -11,
} gr_status;

/* Message of the last failing call on this thread ("" if none). */
GR_API const char *gr_last_error(void);
GR_API const char *gr_status_name(gr_status s);

/* ---- dtypes ----------------------------------------------------------------- */
typedef enum {
    GR_F32 = 0, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32, GR_I8, GR_U8, GR_BOOL,
    GR_DTYPE_COUNT
} gr_dtype;

GR_API const char *gr_dtype_name(gr_dtype t);   /* "f32", "f16", ... */
GR_API size_t gr_dtype_size(gr_dtype t);
/* Parses "f32", "float32", "float", ...; returns GR_ERR_INVALID if unknown. */
GR_API gr_status gr_dtype_parse(const char *name, gr_dtype *out);

/* ---- host allocator hook (tests inject failures through it) ---------------- */
typedef void *(*gr_alloc_fn)(void *user, void *ptr, size_t old_size, size_t new_size);
/* fn(user, NULL, 0, n) allocates; fn(user, p, o, n) reallocates; fn(user, p, o, 0) frees;
 * o is always the size p was allocated (or last reallocated) with. A 0-byte request
 * reaches the hook as 1 byte, so o and an allocating n are never 0.
 * NULL restores the default (malloc/realloc/free). */
GR_API void gr_set_allocator(gr_alloc_fn fn, void *user);
/* The Nth host allocation from now (1-based) fails; 0 disables. Returns the
 * number of allocations made since the last call. For tests. */
GR_API long gr_debug_fail_alloc_after(long n);
/* Live host allocations made through graft's allocator (for leak tests). */
GR_API long gr_debug_live_allocs(void);
/* Non-zero: from now on, check that every free (and realloc) of a block passes the
 * size the block was allocated with; each mismatch is reported on stderr and
 * counted. Zero: stop checking. Either resets the count. For tests. */
GR_API void gr_debug_check_free_sizes(int on);
/* Mismatched sizes seen since gr_debug_check_free_sizes was last called. */
GR_API long gr_debug_free_size_errors(void);

/* ---- graphs: build with the API or load from a file ------------------------ */
typedef struct gr_graph *gr_graph_t;
typedef int32_t gr_value_t; /* a value of a graph; -1 = none (optional input) */

GR_API gr_status gr_graph_create(gr_graph_t *out);
GR_API void gr_graph_destroy(gr_graph_t g);

/* Loads .gir (graft text IR) or .onnx, by extension. */
GR_API gr_status gr_graph_load(const char *path, gr_graph_t *out);
/* Parses .gir text; `origin` names it in error messages, `base_dir` resolves side files. */
GR_API gr_status gr_graph_parse(const char *text, const char *origin, const char *base_dir, gr_graph_t *out);
/* Prints the graph as .gir text into a malloc'd string (free with gr_free_string). */
GR_API gr_status gr_graph_print(gr_graph_t g, char **out_text);
GR_API void gr_free_string(char *s);

/* dims[i] >= 0 is concrete; dims[i] < 0 is symbolic and named by sym_names[i]. */
GR_API gr_status gr_graph_add_input(gr_graph_t g, const char *name, gr_dtype dtype, int ndim,
                             const int64_t *dims, const char *const *sym_names, gr_value_t *out);
/* Weights / constants; data is copied. */
GR_API gr_status gr_graph_add_constant(gr_graph_t g, const char *name, gr_dtype dtype, int ndim,
                                const int64_t *dims, const void *data, gr_value_t *out);

typedef enum { GR_ATTR_INT, GR_ATTR_FLOAT, GR_ATTR_STRING, GR_ATTR_INTS, GR_ATTR_FLOATS } gr_attr_kind;
typedef struct {
    const char *name;
    gr_attr_kind kind;
    int64_t i;
    double f;
    const char *s;
    const int64_t *ints;
    const double *floats;
    int n; /* length of ints / floats */
} gr_attr;

/* Adds a node; op is an IR op name ("add", "matmul", ...). Output values are
 * created, typed by shape inference, and returned in out[0..n_out). */
GR_API gr_status gr_graph_add_node(gr_graph_t g, const char *op, const char *name, int n_in, const gr_value_t *in,
                            int n_attr, const gr_attr *attrs, int n_out, gr_value_t *out);
GR_API gr_status gr_graph_set_output(gr_graph_t g, gr_value_t v, const char *name);
/* Runs the verifier; returns GR_ERR_INVALID with a message naming the node. */
GR_API gr_status gr_graph_verify(gr_graph_t g);

/* Introspection */
GR_API int gr_graph_num_inputs(gr_graph_t g);
GR_API int gr_graph_num_outputs(gr_graph_t g);
typedef struct {
    const char *name;
    gr_dtype dtype;
    int ndim;
    int64_t dims[GR_MAX_DIMS];         /* -1 where symbolic */
    const char *sym_names[GR_MAX_DIMS]; /* NULL where concrete */
} gr_value_info;
GR_API gr_status gr_graph_input_info(gr_graph_t g, int i, gr_value_info *out);
GR_API gr_status gr_graph_output_info(gr_graph_t g, int i, gr_value_info *out);

/* ---- symbolic dims ------------------------------------------------------------
 * A dim is concrete or symbolic: a symbol ("seq") or an expression over
 * symbols ("seq + 1", "2*batch", "max(seq, past)") that the ONNX importer
 * builds from shape arithmetic. gr_value_info.sym_names holds the text.
 * Symbols take their values from the input shapes given to a session; each
 * has a range, by default [1, unbounded]: a binding outside it is an error. */
GR_API int gr_graph_num_dims(gr_graph_t g);
typedef struct {
    const char *name;
    int64_t lo, hi;   /* hi = INT64_MAX when unbounded */
    int declared;     /* the range was declared (model file or gr_graph_set_dim_range) */
} gr_dim_info;
GR_API gr_status gr_graph_dim_info(gr_graph_t g, int k, gr_dim_info *out);
/* Declares symbol `name`'s range lo..hi (0 <= lo <= hi). GR_ERR_NOT_FOUND
 * (listing the graph's symbols) for an unknown name. */
GR_API gr_status gr_graph_set_dim_range(gr_graph_t g, const char *name, int64_t lo, int64_t hi);
/* The dims of input i when symbols dim_names[k] = dim_values[k]: each
 * expression evaluated (checked arithmetic). A symbol the input needs and
 * the list lacks is GR_ERR_NOT_FOUND naming it. */
GR_API gr_status gr_graph_input_dims(gr_graph_t g, int i, int n_dims, const char *const *dim_names, const int64_t *dim_values,
                                     int64_t *dims);

/* ---- sessions: a graph compiled for a device ------------------------------- */
typedef struct gr_session *gr_session_t;

typedef enum { GR_DEVICE_AUTO = 0, GR_DEVICE_SIM, GR_DEVICE_CUDA } gr_device_kind;
typedef enum { GR_MODE_EAGER = 0, GR_MODE_GRAPH, GR_MODE_AUTO } gr_mode;

typedef struct {
    gr_device_kind device;
    gr_mode mode;
    int verbose;            /* progress and notes on stderr */
    int max_rerecords;      /* graph mode: re-captures of a segment before it stays eager (default 8) */
    const char *cache_dir;  /* kernel cache (CUDA); NULL = default */
    int no_partition;       /* debug: one segment even across host steps, to show the capture
                               failure that partitioning avoids (the segment falls back to eager) */
    /* Activation memory of a graph with symbolic dims (graft explain says which applies):
     * GR_ARENA_PER_SHAPE: each binding's plan has an arena sized for it;
     * GR_ARENA_MAX_SHAPE: one arena planned for the largest binding of the declared ranges
     * (every symbol needs a declared upper bound), allocated once; every binding's plan
     * places each value at the address the largest binding gives it, so all bindings share
     * the addresses (what graphs over many shapes need). A plan whose values do not fit
     * those slots gets its own arena, and explain says why. */
    int arena_policy;
    /* Leaves scaled dot-product attention unfused (matmul, softmax, matmul kernels, the
     * reference path) instead of one fused attention kernel (passes/attention.c). */
    int no_fuse_attention;
    /* Fuses f32 attention of every head dim too. By default f16/bf16 attention (tensor
     * cores) and f32 attention with head dims 64 or 128 (a tiled kernel on CUDA cores, exact
     * f32 FMA: 1.34x the unfused cuBLASLt path at b8 h12 s512 d64 on the H100) are fused
     * unless no_fuse_attention; f32 of other head dims runs on a generic kernel that was 8x
     * slower than unfused (bench/attention), so only when this asks. */
    int fuse_attention_f32;
    /* Runs an f32 model in half precision (gr_precision; GR_PRECISION_MODEL = as exported):
     * at creation, weights get half copies once, matmul/conv/attention run in half with f32
     * accumulation, softmax, layer norm, reductions and exp/log/pow/erf/gelu/sqrt/sin/cos stay
     * f32 (as autocast); inputs and outputs keep their declared dtypes. docs/precision.md. */
    int precision;
    /* Graph mode over many shapes (gr_shape_policy): how the bindings of a model's symbolic
     * dims share CUDA graphs. GR_SHAPES_GENERIC needs a declared upper bound for every
     * symbolic dim (docs/design.md §4 "Shape policies"). Default GR_SHAPES_DEFAULT: auto in
     * graph mode for a model with symbolic dims, exact otherwise. */
    int shape_policy;
    /* Graph mode: device memory the instantiated graphs of all bindings may hold, in MiB
     * (fractions allowed; 0 = no limit). Each capture's memory is measured on the device
     * (free memory before and after capture + instantiation: the driver's own graph memory
     * included); when a new graph would exceed the budget, the graphs of the least recently
     * used bindings are evicted and re-captured when their binding comes back. A graph larger
     * than the whole budget is not kept: its segment runs eagerly for that binding, with a
     * warning. With a budget, max_rerecords does not apply (the budget bounds the graphs), and a
     * binding whose last graph is evicted loses its whole plan too (arena, placeholders, folded
     * constants; not the largest binding's under GR_ARENA_MAX_SHAPE): it is compiled again,
     * compiling no kernel (shape-generic kernels stay loaded), when the binding comes back. */
    double graph_memory_mb;
    /* Mode auto: 1 = do not read or write the per-segment decisions file (see
     * gr_session_explain: "decision loaded from"). Decisions are kept per device (name and
     * driver), model hash and binding in cache_dir (default $XDG_CACHE_HOME/graft or
     * ~/.cache/graft; the simulator only uses a cache_dir given explicitly). */
    int no_persist_decisions;
    /* Tensor parallelism: the model split over `tp` devices (0 or 1: one device). One process
     * drives them, one host thread per rank, the collectives inside each rank's CUDA graphs
     * (NCCL, libnccl.so.2 loaded at run time; the simulator: N simulated devices with reference
     * collectives). Each rank holds its share of the split weights. Outputs, stats and explain
     * are rank 0's; device I/O, caller streams, profiling and generation are refused.
     * docs/design.md, "Tensor parallelism". */
    int tp;
    /* 1: every new binding of a symbolic model runs the whole pass pipeline; by default a
     * binding whose dims coincide as an earlier pair of bindings' did is instantiated from
     * their plan template (docs/design.md, "Plan templates"): the same plan, cheaper. */
    int no_plan_templates;
    /* Leaves the activation after a matmul unfused (a matmul and an elementwise kernel: the
     * reference path) instead of the library call's epilogue (tanh-GELU, ReLU; passes/epilogue.c). */
    int no_fuse_epilogue;
} gr_session_options;

typedef enum { GR_PRECISION_MODEL = 0, GR_PRECISION_BF16, GR_PRECISION_F16, GR_PRECISION_COUNT } gr_precision;
/* "bf16" / "f16" -> GR_PRECISION_BF16 / _F16; anything else is GR_ERR_INVALID naming it. */
GR_API gr_status gr_precision_parse(const char *name, int *out);

enum { GR_ARENA_PER_SHAPE = 0, GR_ARENA_MAX_SHAPE = 1 };

/* Shape policies of graph mode (issue 11). Append-only. */
typedef enum {
    GR_SHAPES_EXACT = 0, /* one graph per binding of the symbolic dims (LRU under graph_memory_mb) */
    GR_SHAPES_PAD,       /* bindings rounded up to capture sizes where proven row-independent (else exact) */
    GR_SHAPES_GENERIC,   /* one graph per power-of-two bucket of the symbols, slots read from a device table */
    GR_SHAPES_UPDATE,    /* one exec per segment position: a new binding's capture applied with cuGraphExecUpdate */
    GR_SHAPES_AUTO,      /* graph mode: pad where proven; per segment exact, update or generic, chosen by
                            timing them at the segment's first binding, re-chosen from those numbers as
                            the calls per binding seen grow, and kept in the decisions file with the
                            observed ratio (docs/design.md §4). Mode auto: one exec per binding while the measured graph
                            memory fits graph_memory_mb, beyond it the position's exec updated */
    GR_SHAPES_DEFAULT,   /* gr_session_options_init's: auto in graph mode for a model with symbolic dims,
                            exact otherwise (a static model, eager and auto modes); resolved when the
                            session is created (gr_session_shape_policy says to what) */
    GR_SHAPES_COUNT
} gr_shape_policy;
/* "exact", "pad", "generic", "update", "auto", "default"; "?" when out of range. */
GR_API const char *gr_shape_policy_name(int policy);
/* Parses a policy name; GR_ERR_INVALID listing the names when unknown. */
GR_API gr_status gr_shape_policy_parse(const char *name, int *out);

GR_API void gr_session_options_init(gr_session_options *o);

/* The session keeps its own copy of what it needs; the graph may be destroyed after. */
GR_API gr_status gr_session_create(gr_graph_t g, const gr_session_options *opt, gr_session_t *out);
GR_API void gr_session_destroy(gr_session_t s);
GR_API const char *gr_session_device_name(gr_session_t s);
/* The kind of device the session runs on: GR_DEVICE_SIM or GR_DEVICE_CUDA (auto is
 * resolved when the session is created). GR_DEVICE_AUTO only for a NULL session. */
GR_API gr_device_kind gr_session_device_kind(gr_session_t s);
/* The shape policy the session runs under (GR_SHAPES_DEFAULT resolved: auto or exact);
 * *by_default (may be NULL) is 1 when it came from GR_SHAPES_DEFAULT, 0 when it was asked for.
 * -1 for a NULL session. */
GR_API int gr_session_shape_policy(gr_session_t s, int *by_default);

/* Copies host data into the named input (checked against dtype and shape).
 * Symbolic dims of the graph are bound by the shapes given here. */
GR_API gr_status gr_session_set_input(gr_session_t s, const char *name, gr_dtype dtype, int ndim,
                               const int64_t *dims, const void *data, size_t nbytes);
/* Enqueues one run and returns without waiting for the device: back-to-back
 * runs pipeline like framework calls do. Reading an output, gr_session_stats
 * and gr_session_wait wait for it. Inputs not set again since the last run
 * are not copied again (their placeholders still hold them). */
GR_API gr_status gr_session_run(gr_session_t s);
/* Waits for the last run to finish; returns its device error if any. */
GR_API gr_status gr_session_wait(gr_session_t s);
/* The device's clock in µs: simulated on sim, wall clock on CUDA. */
GR_API double gr_session_clock_us(gr_session_t s);

/* Output handles carry the generation of the run that made them; using one
 * after a later run returns GR_ERR_STALE. */
typedef struct {
    uint64_t generation;
    int index;
} gr_output;
GR_API gr_status gr_session_output(gr_session_t s, int i, gr_output *out);
/* name, dtype and dims of an output: known when its run is enqueued (no wait for the device) */
GR_API gr_status gr_session_output_info(gr_session_t s, gr_output o, gr_value_info *info);
/* Copies the output to host memory (nbytes must be at least its size). */
GR_API gr_status gr_session_output_read(gr_session_t s, gr_output o, void *dst, size_t nbytes);
GR_API size_t gr_session_output_nbytes(gr_session_t s, gr_output o);

typedef struct {
    double time_us;          /* last run: simulated clock on sim, wall clock on CUDA */
    double gpu_time_us;      /* last run: device time (events / simulated) */
    long kernels;            /* kernels launched or replayed per run */
    long kernels_in_graphs;
    long graph_launches;
    long copies;             /* memcpy operations per run */
    size_t bytes_copied;     /* bytes copied per run (inputs, placeholders, outputs) */
    size_t arena_bytes;      /* activation arena */
    size_t weight_bytes;
    int segments;
    int segments_in_graphs;
    long captures;           /* total graph captures so far */
    size_t device_bytes;     /* device memory held by the session (arena, weights, placeholders, and graph_bytes) */
    double compile_us;       /* compiling the current plan (passes, kernels, uploads) */
    double capture_us;       /* capturing + instantiating graphs so far, this plan */
    long nodes_updated;      /* last run: kernel nodes of replayed graphs whose arguments were
                                rewritten (a host scalar changed, a bound device input moved) */
    long inputs_in_place;    /* last run: device-bound inputs read in place, nothing copied */
    /* graph memory (graph mode), session totals: */
    size_t graph_bytes;      /* device memory held now by instantiated graphs, as measured on the device
                                (free memory before minus after each capture + instantiation + upload) */
    size_t graph_bytes_peak; /* the most graph_bytes has been after any run */
    size_t graph_budget_bytes; /* graph_memory_mb in bytes; 0 = no limit */
    long instantiations;     /* graphs instantiated so far */
    long evictions;          /* graphs evicted to stay within graph_memory_mb */
    long graphs_live;        /* instantiated graphs held now, all bindings */
    long over_budget;        /* segments left eager because their graph alone exceeds the budget */
    long plans_evicted;      /* bindings' whole plans (arena, placeholders) dropped once their last graph was
                                evicted; re-planned when the binding comes back */
    /* mode auto, session totals: */
    long timed_runs;         /* profiling runs (a segment timed eager or as a graph) */
    long decisions_measured; /* segment decisions made by timing in this session */
    long decisions_loaded;   /* segment decisions taken from the decisions file */
    /* shape policy update, session totals: */
    long exec_updates;       /* execs refreshed from another binding's graph (no instantiation) */
    long exec_updates_refused; /* updates the device refused (a different topology): instantiated instead */
    long padded_runs;        /* shape policy pad, session total: runs of a binding rounded up to a capture size */
    /* shape policy generic, session totals: */
    long generic_runs;       /* segment runs of a binding through its bucket's plan (graph) */
    long generic_replays;    /* ... of those, replays of the bucket's captured graph */
    long table_refreshes;    /* slot-table copies (host to device) before such runs */
    size_t table_bytes;      /* their bytes */
    /* symbolic models, session totals: plans made by the pass pipeline / instantiated from a plan template */
    long plans_compiled, plans_instantiated;
    /* session total: runs that waited on the host for the previous run to finish before starting
       (the steady state of a static graph-mode model queues instead; verbose says why not) */
    long waits_on_host;
    /* shape policy auto in graph mode, session totals (per segment: exact, update or generic, measured) */
    long shape_decisions_measured; /* segments whose policy was chosen by measuring in this session */
    long shape_decisions_loaded;   /* ... taken from the decisions file (no measuring) */
    long shape_measure_runs;       /* segment runs made to measure them (warm-ups, captures, timed runs) */
} gr_run_stats;
GR_API gr_status gr_session_stats(gr_session_t s, gr_run_stats *out);

/* Warm-up ahead of time (graph and auto modes; graphs are otherwise captured lazily, on a
 * binding's first runs): compiles, warms up and captures the plan of every binding of
 * symbolic dim `dim` in lo..hi, largest first (the first capture takes the memory the
 * others reuse), running on zeroed input placeholders; the outputs of these runs are not
 * readable and the next gr_session_run copies its inputs afresh. Other symbols keep the
 * values of the last run, else their declared range's only value (GR_ERR_INVALID if neither).
 * A host-read input (@host) must have been set. progress: a progress line on stderr.
 * out (may be NULL): what it did and took. GR_ERR_NOT_FOUND (listing the symbols) for an
 * unknown dim; GR_ERR_SHAPE for a range outside the dim's declared one. */
typedef struct {
    int bindings;          /* bindings prepared */
    double total_ms;       /* wall time of the whole call */
    double compile_ms;     /* of which building the bindings' plans */
    double capture_ms;     /* of which capture + instantiation (or exec update) + upload */
    long captures, instantiations, exec_updates; /* made by this call */
    double instantiate_ms; /* of capture_ms: instantiation or exec update, and upload */
} gr_capture_report;
GR_API gr_status gr_session_capture_range(gr_session_t s, const char *dim, int64_t lo, int64_t hi, int progress,
                                          gr_capture_report *out);

/* ---- zero-copy device I/O ---------------------------------------------------------
 * Device buffers are memory of the session's device. CUDA: any device pointer of the
 * primary context of the session's GPU (PyTorch's and CuPy's tensors live there).
 * Simulator: memory from gr_session_device_alloc of the same session; the simulator
 * checks every access and reports any other pointer as GR_ERR_HAZARD, as CUDA would fault.
 *
 * Lifetimes:
 * - a bound input buffer must hold its data, unchanged, until the run reading it is over
 *   (gr_session_wait, or later work on the stream given to gr_session_run_on_stream);
 * - an output's device address (gr_session_output_device_ptr) is valid until the next
 *   run of the session (or its destruction): the next run reuses the memory. Its handle
 *   carries the run's generation, so asking again with an old handle is GR_ERR_STALE;
 *   a pointer already taken is the caller's to stop using. The memory is read-only. */
GR_API gr_status gr_session_device_alloc(gr_session_t s, size_t nbytes, void **out);
GR_API void gr_session_device_free(gr_session_t s, void *ptr);
/* Synchronous copies between host memory and the session's device memory. */
GR_API gr_status gr_session_device_upload(gr_session_t s, void *dev_dst, const void *host_src, size_t nbytes);
GR_API gr_status gr_session_device_download(gr_session_t s, void *host_dst, const void *dev_src, size_t nbytes);

/* Binds input `name` to the caller's device buffer (dtype, shape and nbytes checked as by
 * gr_session_set_input; symbolic dims bound by its shape). Nothing is copied on the host.
 * Each run then reads it as follows (gr_run_stats counts what happened):
 * - in place, the common case: kernels read the buffer itself. A replayed CUDA graph whose
 *   kernel nodes were captured with another address has those nodes repointed
 *   (cuGraphExecKernelNodeSetParams; nodes_updated); at the captured address nothing is
 *   copied and nothing updated (inputs_in_place);
 * - copied device-to-device into graft's placeholder (bytes_copied) where the plan cannot
 *   repoint: a library call (cuBLASLt matmul) reads the input inside a captured segment;
 * - copied to host memory where a step reads it on the host (a scalar read by value).
 * The binding holds until the input is bound or set again: re-bind (same or new address)
 * whenever its contents changed, as gr_session_set_input is called again for host data. */
GR_API gr_status gr_session_bind_input_device(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims,
                                              void *dev_ptr, size_t nbytes);
/* The device address of output o (see the lifetimes above). An output kept in host memory
 * is GR_ERR_UNSUPPORTED (read it with gr_session_output_read). */
GR_API gr_status gr_session_output_device_ptr(gr_session_t s, gr_output o, void **dev_ptr);
/* gr_session_run ordered on the caller's stream, without a host wait: the run starts after
 * the work already enqueued on `stream`, and work enqueued on `stream` afterwards starts
 * after the run (graft runs on its own stream, joined to the caller's by events, so its
 * CUDA-graph captures never touch the caller's stream). CUDA: a CUstream / cudaStream_t;
 * pass CU_STREAM_LEGACY ((void *)1) for the legacy default stream. NULL: gr_session_run.
 * The simulator has one stream per session and no caller streams: only NULL is accepted
 * there (another value is GR_ERR_UNSUPPORTED). */
GR_API gr_status gr_session_run_on_stream(gr_session_t s, void *stream);
/* Work enqueued on `stream` after this call waits for the session's last run (no host
 * wait); what a consumer of output device pointers on its own stream calls. NULL: no-op. */
GR_API gr_status gr_session_order_stream(gr_session_t s, void *stream);

/* One input of gr_session_run_device: a caller's device buffer, as gr_session_bind_input_device
 * takes it. */
typedef struct {
    const char *name;
    gr_dtype dtype;
    int ndim;
    const int64_t *dims;
    void *data;
    size_t nbytes;
} gr_device_input;
/* A serving loop's call in one: binds n_inputs device buffers (each as
 * gr_session_bind_input_device), runs ordered on `stream` (as gr_session_run_on_stream; NULL:
 * as gr_session_run) and gives the first n_outputs outputs' handles and device addresses
 * (outs / out_ptrs, either may be NULL; an address as gr_session_output_device_ptr gives it),
 * with no host wait for the device: nothing here waits for this run, nor, in graph mode's
 * steady state, for the previous one, which the new run follows on the device instead. The
 * steady state: the binding's plan is built (a model with symbolic dims: each binding seen
 * before, several of them alternating as they come), every segment replays a graph it has
 * (auto mode's and shape policy auto's choices made), and no exec update is due (shape policy
 * update switching bindings waits). The lifetimes above
 * are what make that safe: bound buffers stay the caller's until the run reading them is over
 * in stream order, and an output's memory is rewritten only by the next run, which starts
 * after the work the caller enqueued on `stream` before calling it. A device error of a run
 * is returned by the next call that waits (gr_session_wait, an output read, gr_session_stats).
 * Other states (a new binding shape, a capture, eager segments) wait as gr_session_run does. */
GR_API gr_status gr_session_run_device(gr_session_t s, void *stream, int n_inputs, const gr_device_input *inputs,
                                       int n_outputs, gr_output *outs, void **out_ptrs);

/* Kernel preparation counters of the session's device since the session was created.
 * A model with symbolic dims gets shape-generic kernels (sizes passed at launch): one
 * compiled module per kernel structure, whatever the binding, so a new binding of its
 * dims adds to generic_reused but not to compiled or modules_loaded. A static model
 * gets literal kernels (sizes folded into the code), one module each. */
typedef struct {
    long prepared;          /* kernels prepared, all plans */
    long compiled;          /* NVRTC compilations (CUDA; 0 on the simulator) */
    long disk_cache_hits;   /* compiled kernels read from the kernel cache (CUDA) */
    long modules_loaded;    /* kernel modules loaded (on the simulator: those CUDA would load) */
    long generic_new;       /* shape-generic kernels of a structure not loaded before */
    long generic_reused;    /* shape-generic kernels that shared a loaded module */
    long generic_fallbacks; /* too many sizes for a generic kernel: compiled literally */
} gr_kernel_stats;
GR_API gr_status gr_session_kernel_stats(gr_session_t s, gr_kernel_stats *out);

/* Runs the current plan once eagerly with device events around every step
 * and reports each kernel's time (GPU time on CUDA, simulated on sim), slowest
 * first, plus their sum. Needs one run before. */
GR_API gr_status gr_session_profile(gr_session_t s, char **out_text, double *kernel_sum_us);

/* Kernel classes of a profile: what each step is (a library call's kind; a kernel's
 * stages, IR op kind and expression), never its name. */
typedef enum {
    GR_KCLASS_MATMUL = 0,  /* cuBLASLt matmul library calls */
    GR_KCLASS_ATTENTION,   /* fused attention */
    GR_KCLASS_ELEMENTWISE, /* kernels computing on floats without a reduction */
    GR_KCLASS_REDUCTION,   /* kernels with a reduction: softmax, layer norm, reduce_* */
    GR_KCLASS_COPY,        /* data movement only: transpose, concat, slice, gather copies */
    GR_KCLASS_OTHER,       /* generators, conv and pool kernels */
    GR_KCLASS_COUNT
} gr_kernel_class;
GR_API const char *gr_kernel_class_name(int kernel_class); /* "matmul", ..., "norm/reduction", "copy/movement" */
typedef struct {
    double us[GR_KCLASS_COUNT]; /* device time per class; they sum to kernel_sum_us */
    int kernels[GR_KCLASS_COUNT];
} gr_profile_classes;
/* gr_session_profile, and the time per kernel class in *classes (may be NULL); the text
 * starts with the classes as a table, slowest first, with their share of the sum. */
GR_API gr_status gr_session_profile_classes(gr_session_t s, char **out_text, double *kernel_sum_us, gr_profile_classes *classes);

/* Human-readable description of the compiled plan (graft explain). */
GR_API gr_status gr_session_explain(gr_session_t s, char **out_text);
/* The symbolic plan of a graph, before any binding (graft explain without --dim): its
 * symbolic dims and their ranges, and the graph with every value's shape as an expression
 * (constants of more than 16 elements elided). */
GR_API gr_status gr_graph_explain(gr_graph_t g, char **out_text);
/* IR after each pass (graft dump). The graph must have no symbolic dims, or: */
GR_API gr_status gr_graph_dump_passes(gr_graph_t g, char **out_text);
/* ... with symbolic dims bound by name: dim_names[i] = dim_values[i] (graft dump --dim N=4).
 * An unknown name is GR_ERR_NOT_FOUND, listing the graph's symbolic dims. */
GR_API gr_status gr_graph_dump_passes_dims(gr_graph_t g, int n_dims, const char *const *dim_names,
                                           const int64_t *dim_values, char **out_text);
/* ... and with attention left unfused when no_fuse_attention (graft dump --no-fuse-attention),
 * f32 attention fused too when fuse_attention_f32 (--fuse-attention-f32): gr_session_options. */
/* ... with every pipeline option of a session (no_partition, no_fuse_attention,
 * fuse_attention_f32, precision; opt NULL = defaults): what that session would compile. */
GR_API gr_status gr_graph_dump_passes_with(gr_graph_t g, int n_dims, const char *const *dim_names, const int64_t *dim_values,
                                           const gr_session_options *opt, char **out_text);
GR_API gr_status gr_graph_dump_passes_opts(gr_graph_t g, int n_dims, const char *const *dim_names,
                                           const int64_t *dim_values, int no_fuse_attention, int fuse_attention_f32,
                                           char **out_text);


/* ---- generation: decode loops over a step model with state (issue 12) -------------------------
 * A decoder exported as ONE step: inputs input_ids [batch, seq] (integer), optionally
 * attention_mask [batch, past + seq] and position_ids [batch, seq], and a cache (`past_*` inputs)
 * that the step returns grown (`present_*` outputs, [batch, ..., past + seq, ...]); an output
 * [batch, seq, vocab] holds the logits. A state binding declares that an output feeds an input on
 * the next step. The state stays in device memory between steps: graft copies each present into a
 * session-owned device buffer (reordered by beam on the device for beam search) that is bound as
 * the next step's past; only the last position's logits come to the host to pick tokens
 * (docs/design.md, "Generation").
 *
 * gr_session_bind_state(s, output, input): `output` feeds `input` on the next step. Checked:
 * both names exist (the message says which side is missing), same dtype and rank, and the dims
 * agree on every axis but the growing one: the axis where the input has a plain symbol ("past")
 * and the output another symbol or an expression ("past + seq", "total"). A state may also keep
 * its shape (no growing axis). An input bound twice is an error. Every failure is GR_ERR_INVALID
 * naming the output and the input. Binding lowers the range of the input's growing symbol to
 * start at 0 (the prompt step has no past).
 *
 * gr_session_bind_state_auto(s, &n): pairs outputs and inputs by name and binds each pair (n =
 * pairs bound by this call; 0 when none matches). For every output whose name contains "present",
 * the first occurrence is replaced by "past_key_values", then by "past"; the first of those that
 * names an input not bound yet is its pair. That covers the common exports:
 *   present.N.key / .value          -> past_key_values.N.key / .value   (optimum)
 *   present_key_values.N.key/.value -> past_key_values.N.key / .value
 *   present_kN / present_vN         -> past_kN / past_vN
 *   present.N                       -> past.N                            (GPT-2 style, key and value stacked)
 *   present_key_N, present-anything -> past_key_N, past-anything
 * A pair that matches by name but not by dtype or shape is an error, as for gr_session_bind_state. */
GR_API gr_status gr_session_bind_state(gr_session_t s, const char *output, const char *input);
GR_API gr_status gr_session_bind_state_auto(gr_session_t s, int *n_bound);
/* The state bindings made so far, in order: k in 0..gr_session_num_states()-1. The names live as
 * long as the session. */
GR_API int gr_session_num_states(gr_session_t s);
GR_API gr_status gr_session_state_info(gr_session_t s, int k, const char **output, const char **input);

/* How the prompt runs (gr_generate_options.prompt_mode). */
typedef enum {
    GR_PROMPT_AUTO = 0,  /* whole prompt as one step when input_ids' seq dim is symbolic, else token by token */
    GR_PROMPT_WHOLE,     /* one step of seq = prompt_len (refused when the export fixes seq) */
    GR_PROMPT_TOKENS,    /* prompt_len steps of one token: the same ids as GR_PROMPT_WHOLE */
    GR_PROMPT_COUNT
} gr_prompt_mode;

/* Streaming: called after each generated position with its tokens, one per batch row
 * (n = batch). step counts generated positions from 0. With beams > 1 the tokens of a position
 * are known only at the end (the best hypothesis wins then): the calls come after the loop, one
 * per position. */
typedef void (*gr_token_fn)(void *user, int64_t step, const int64_t *tokens, int64_t n);

typedef struct {
    int64_t max_new_tokens;  /* positions generated after the prompt (> 0) */
    int64_t eos_id;          /* -1: none. A row that produced eos emits pad_id from then on (as Hugging Face);
                                generation stops early once every row has finished (the rest is pad_id) */
    int64_t pad_id;          /* -1 (default): eos_id */
    int beams;               /* 1: greedy or sampling; k > 1: beam search of width k (Hugging Face's
                                do_sample=False beam search, early_stopping=True) */
    double length_penalty;   /* beam search: a finished hypothesis scores sum(logprob) / len ** length_penalty (1.0) */
    int sample;              /* 0: greedy (argmax, lowest index on ties); 1: sampling */
    int top_k;               /* sampling: keep the k most likely tokens, ties with the k-th kept (0 = all) */
    double top_p;            /* sampling: keep the smallest most-likely set whose probability reaches top_p,
                                ties with its last token kept (1.0 = all); used as an f32 */
    double temperature;      /* sampling: logits divided by it first (> 0; 1.0); used as an f32 */
    uint64_t seed;           /* sampling: the RNG bits of (seed, counter = step * batch + row), graft's counter-based
                                generator (splitmix64; codegen/kir.h), pick a token in id order over integer
                                weights floor(exp(z - max) * 2^32) of the kept tokens (gr_sample_row, the same
                                on the host and in the device's decode loop: docs/design.md §3b) */
    int prompt_mode;         /* gr_prompt_mode */
    gr_token_fn on_token;    /* may be NULL */
    void *user;
    /* names; NULL = "input_ids", "attention_mask", "position_ids" (the last two are fed when the model
     * has them) and "logits" (else the only output not bound as state) */
    const char *input_ids, *attention_mask, *position_ids, *logits;
    /* gr_generate_engine: which step runs (auto: the rewritten cache where the model allows it and
     * it agrees with the per-length step on the prompt, else the reference) */
    int engine;
    /* rewritten engine: cache positions (0 = prompt_len + max_new_tokens); one plan and one graph
     * serve every generation whose prompt + new tokens fit and whose batch is the same */
    int64_t max_length;
    /* rewritten engine: positions decoded per device launch (0 = 16; beam search reads its state
     * back after each launch and stops once every row is done). The step picks its
     * token and advances its own inputs on the device; a launch replays it up to this many times
     * (a graph with a WHILE node in graph mode, stopping once every row has finished) and copies
     * the tokens to the host once. on_token is called per position after each launch. */
    int64_t steps_per_launch;
} gr_generate_options;
/* The step engines of gr_session_generate. Append-only. */
typedef enum {
    GR_ENGINE_AUTO = 0,   /* rewritten when possible (greedy, sampling, beams), checked once per session, else reference */
    GR_ENGINE_REFERENCE,  /* the unrewritten step: one binding (plan) per position, presents copied into state buffers */
    GR_ENGINE_REWRITTEN,  /* the KV-cache rewrite (docs/design.md §3b): one step shape, cache written in place,
                             token selection on the device (greedy, sampling, beam search up to 16 beams: the
                             caches reordered by beam on the device); an error where the model cannot be rewritten */
    GR_ENGINE_COUNT
} gr_generate_engine;
GR_API void gr_generate_options_init(gr_generate_options *o);

typedef struct {
    double prompt_us;        /* the prompt step(s) up to the first new token (device clock: simulated on sim) */
    double decode_us;        /* the steps after it */
    int64_t prompt_steps;    /* model steps for the prompt: 1 (whole), prompt_len (token by token), or 2 for the
                                rewritten engine given a whole prompt (the per-length step over all tokens but the
                                last, whose cache it copies on the device, then its own step) */
    int64_t decode_steps;    /* model steps after the prompt */
    int64_t new_tokens;      /* positions generated per row (max_new_tokens, fewer when every row hit eos) */
    double ms_per_token;     /* decode_us / decode_steps, in ms: one position for every row */
    double tokens_per_s;     /* batch * new_tokens / (prompt_us + decode_us) */
    long plans;              /* bindings (shape keys) the session holds a compiled plan for */
    int engine;              /* the engine that ran: GR_ENGINE_REFERENCE or GR_ENGINE_REWRITTEN */
    long captures;           /* rewritten engine: graph captures of its session so far (1 in graph mode) */
    long launches;           /* rewritten engine: launches of the decode loop on the device (0: the host drove every step) */
} gr_generate_stats;

/* Generates max_new_tokens positions after prompt [batch, prompt_len] (row-major int64) into
 * out_tokens [batch, prompt_len + max_new_tokens] (the prompt first). The session needs at least one
 * state binding (gr_session_bind_state[_auto]). st may be NULL. */
GR_API gr_status gr_session_generate(gr_session_t s, const gr_generate_options *o, const int64_t *prompt, int64_t batch,
                                     int64_t prompt_len, int64_t *out_tokens, gr_generate_stats *st);
/* Per-kernel device times of one decode step of the last generation on this session, as
 * gr_session_profile_classes gives them for a run: the rewritten engine's step (one position
 * at the generation's rows and maximum length) or the reference engine's last per-length step.
 * The session's outputs no longer describe a run afterwards. */
GR_API gr_status gr_session_generate_profile(gr_session_t s, char **out_text, double *kernel_sum_us, gr_profile_classes *classes);

#ifdef __cplusplus
}
#endif
#endif
