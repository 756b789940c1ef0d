/* passes — shape inference, specialization, constant folding, lowering to
 * kernels, fusion, memory planning, partitioning.
 *
 * Pipeline for one concrete shape key (gr_pass_pipeline below; the session
 * and `graft dump` both run it):
 *   clone graph → fuse attention, epilogues → common subexpressions (cse.c)
 *   → specialize symbolic dims (ir) → predicate ifs → fold
 *   constants → lower (one or more steps per node) → fuse → memory plan
 *   (arena offsets from liveness) → partition into segments
 *
 * Shape inference is a service of the IR (ir/ir.h: gr_ir_infer_*), used by
 * the frontends as well as by these passes.
 */
#ifndef GR_PASSES_H
#define GR_PASSES_H

#include "ir/ir.h"
#include "codegen/kir.h"

/* Replaces every `if` by both branches inlined and where(cond, then, else)
 * per output (GraphMend's predication: no host read of the condition, no
 * graph break). Branch outputs must have equal shapes; `loop` inside a branch
 * is unsupported. Re-infers shapes when it changed anything. */
gr_status gr_pass_predicate_if(gr_graph *g);
/* Unrolls each `loop` whose `trip` attribute specialization bound (passes/unroll.c); a loop
 * without `trip` (a while-loop: the body computes the condition) is left to lowering. */
gr_status gr_pass_unroll_loops(gr_graph *g);

/* ---- control flow kept as control flow (passes/cond.c, runtime/control.c) ---------------- */
/* An `if` is predicated when both branches together write at most this many elements (the
 * untaken branch's work is what predication pays for no host read); a larger one, or one
 * with a loop in a branch, is conditional execution (one branch runs). 1 Mi elements: about
 * 4 MB written at f32, a few microseconds of an H100's bandwidth, less than one host
 * synchronization (~10-20 us). */
#define GR_PREDICATE_MAX_ELEMS ((int64_t)1 << 20)
/* A while-loop stops with an error after this many iterations (ONNX Loop without M whose
 * condition never turns false: a clear run-time error, never a hang). */
#define GR_LOOP_MAX_ITERS ((int64_t)1 << 20)
/* Elements g's nodes write, recursively; INT64_MAX for a loop or an unknown shape. */
int64_t gr_pass_graph_work(const gr_graph *g);
/* Values of g that n's subgraphs read (captures at any depth), at most max, into out. */
gr_status gr_pass_control_captures(const gr_graph *g, const gr_ir_node *n, int *out, int max, int *n_out);

/* Replaces each scaled dot-product attention pattern (matmul, scale, mask add,
 * softmax over the last axis, matmul; grouped-query repeats of K and V) by one
 * `attention` node; passes/attention.c has the rules. Works on symbolic dims.
 * f16/bf16 inputs are fused, f32 ones of head dims 64 or 128 (Q's and V's) too; other
 * f32 and f64 ones only when include_f32 (or in the key-length form). *n_fused (may be NULL) =
 * number of attentions made. */
gr_status gr_pass_fuse_attention(gr_graph *g, bool include_f32, int *n_fused);

/* Fuses the activation after a matmul (and its row bias) into the matmul: tanh-GELU (the
 * gelu op with approximate="tanh", or the explicit chain GPT-2 exports) and relu become the
 * node's `epilogue` attribute, lowered to the library call's epilogue (cuBLASLt
 * GELU_BIAS / RELU_BIAS). passes/epilogue.c has the rules. Works on symbolic dims.
 * *n_fused (may be NULL) = number of matmuls given an epilogue. */
gr_status gr_pass_fuse_epilogue(gr_graph *g, int *n_fused);
/* Fuses a residual add after a matmul (no activation; no bias or a row bias) into it: r =
 * add(views of matmul(a, b[, bias]), w), w of r's shape and dtype, becomes the matmul's
 * residual input (ir/ops.c; cuBLASLt's C with beta = 1). Run after gr_pass_fuse_epilogue
 * (an activated matmul takes none). Works on symbolic dims. *n_fused (may be NULL) = adds fused. */
gr_status gr_pass_fuse_residual(gr_graph *g, int *n_fused);

/* Common subexpressions (passes/cse.c): a node equal to an earlier one (same op, attributes,
 * inputs; small constants compared by content) has its readers read the earlier one's outputs
 * and is left unread. Ops with effects or state (random, collectives, sample, beam_step,
 * beam_reorder, cache_write), in-place outputs and graph outputs are never merged away; a
 * graph with if/loop is left alone. *n_merged (may be NULL) = merged nodes that something read. */
gr_status gr_pass_cse(gr_graph *g, int *n_merged);

/* What a precision conversion did (gr_pass_convert_precision). */
typedef struct {
    int weights_converted;     /* f32 constants given a half copy */
    size_t weight_bytes_saved; /* bytes of those copies (half the f32 bytes) */
    int casts;                 /* cast nodes inserted */
    int nodes_half, nodes_f32; /* nodes with converted inputs that run in half / f32 */
    int attention_fused;       /* attentions fused first (gr_pass_precision) */
} gr_precision_stats;

/* Converts an f32 graph to run in `half` (GR_BF16 or GR_F16) as autocast would: matmul,
 * conv and attention in half, softmax, layer_norm, reduce_sum/mean, exp, log, pow, erf,
 * gelu, sqrt, rsqrt, reciprocal, softplus, sin, cos in f32, the rest in the precision its
 * inputs have; f32 weights get half copies once; graph inputs and outputs keep their
 * dtypes (casts in and out). Symbolic dims stay symbolic. Graphs with if/loop are
 * GR_ERR_UNSUPPORTED. passes/precision.c has the rules; stats may be NULL. */
gr_status gr_pass_convert_precision(gr_graph *g, gr_dtype half, gr_precision_stats *stats);
/* The conversion as sessions and the pipeline run it: attention fused first on the f32
 * graph (f32 included, when fuse_attention), then gr_pass_convert_precision. */
gr_status gr_pass_precision(gr_graph *g, gr_dtype half, bool fuse_attention, gr_precision_stats *stats);

/* Evaluates nodes whose inputs are all constants (including generators such as
 * random_normal) at compile time, turning their outputs into constants.
 * Nodes producing graph outputs are folded too (the output becomes a constant). */
gr_status gr_pass_fold_constants(gr_graph *g);

/* ---- lowered program ----------------------------------------------------------------- */
typedef enum {
    GR_STEP_KERNEL = 0, /* launch `kernel` */
    GR_STEP_LIBCALL,    /* vendor library call (matmul) */
    GR_STEP_ALIAS,      /* no work: output value `out_value` is a view of args[0].value at args[0].elem_offset */
    GR_STEP_HOST,       /* work the device cannot do; reads device values on the host (breaks a graph) */
} gr_step_kind;

typedef enum {
    GR_ARG_VALUE = 0,   /* address of IR value `value` + elem_offset elements (BUFFER params) */
    GR_ARG_LITERAL,     /* fixed `literal` (SHAPE, scalar constants) */
    GR_ARG_HOST_SCALAR, /* SCALAR_F/SCALAR_I param read at launch time from host value `value`
                           (a 0-d / 1-element host tensor): baked into a captured graph */
} gr_arg_kind;

typedef struct {
    gr_arg_kind kind;
    int value;
    int64_t elem_offset;
    gr_karg literal;
} gr_step_arg;

/* What a HOST step's function gets: the device, the session stream and the
 * resolved address of each of its args (device addresses). */
struct gr_device;
struct gr_stream;
struct gr_step_host_ctx {
    struct gr_device *dev;
    struct gr_stream *stream;
    int n_args;
    void *addr[GR_KMAX_PARAMS];
};

typedef struct {
    gr_step_kind kind;
    gr_kernel *kernel;       /* KERNEL: owned */
    gr_libcall call;         /* LIBCALL */
    int n_args;
    gr_step_arg args[GR_KMAX_PARAMS];
    int out_value;           /* ALIAS: the view */
    int node;                /* IR node it came from (-1 if synthesized) */
    char *reason;            /* HOST: why it could not be a device step (owned) */
    /* HOST: the work, run on the host after the stream is drained (it may read
     * device values, which is why it cannot sit inside a graph). args bind the
     * values it reads and writes as for a kernel; addrs are resolved for it. */
    gr_status (*host_fn)(void *user, const struct gr_step_host_ctx *ctx);
    void *host_user;
    int segment;             /* set by partitioning */
} gr_step;

typedef GR_VEC(gr_step) gr_step_list;

/* Two step arguments bind the same thing (same value and offset, or same literal bits). */
bool gr_step_arg_equal(const gr_step_arg *a, const gr_step_arg *b);

/* Lowers every node of a fully typed, concrete graph to steps. An op the
 * lowering cannot handle is GR_ERR_UNSUPPORTED naming the node.
 * Lowering may add typed temporary values to g (kind GR_VAL_NODE, producer =
 * the node, out_slot = -1) for intermediates such as a materialized operand of
 * a matmul; the memory planner treats them like any other value.
 * Binding: step.args[i] binds kernel param i (KERNEL), or A, B, C, bias
 * (LIBCALL, bias = GR_ARG_LITERAL with ptr NULL when absent). Values are
 * contiguous row-major in memory; views are ALIAS steps (reshape, squeeze,
 * unsqueeze, identity). A 1-element @host input read by an elementwise op is
 * a SCALAR_F/SCALAR_I param bound with GR_ARG_HOST_SCALAR. */
gr_status gr_pass_lower(gr_graph *g, gr_step_list *out);
/* The same into out's own buffer (out->len set to 0 first, its capacity kept): a caller
 * that lowers many plans reuses one buffer (gr_pipeline_scratch). On failure out is freed. */
gr_status gr_pass_lower_reuse(gr_graph *g, gr_step_list *out);
/* gr_pass_lower_reuse; activation_matmul_kernels: a float matmul whose operands are both computed
 * (not constants: attention's scores and values) becomes a generated reduction kernel instead of a
 * library call (shape policy generic: a kernel reads its sizes from the slot table). */
gr_status gr_pass_lower_opts(gr_graph *g, gr_step_list *out, bool activation_matmul_kernels);
gr_status gr_pass_lower_node(gr_graph *g, int node, gr_step_list *out);
void gr_step_list_free(gr_step_list *l);
/* The step of an `if` or `loop` node run by the runtime's control runner (GR_STEP_HOST without
 * host_fn; runtime/control.c binds it): args = the node's inputs, its captures, its outputs. */
gr_status gr_pass_control_step(gr_graph *g, int node, gr_step *s);

/* Fuses producer→consumer elementwise kernels (and elementwise producers into
 * reductions) when the intermediate has no other reader and is not a graph
 * output. Keeps the list valid; freed steps are removed. */
gr_status gr_pass_fuse(const gr_graph *g, gr_step_list *steps);
/* (gr_pass_fuse also recomputes a cheap elementwise producer in each of up to
 * 8 readers, runs gr_pass_cse_kernel on every kernel it builds, and
 * gr_pass_dce before and after; fuse.c has the rules. Its cost is near-linear
 * in the number of steps: kernels grow in place, fuse-impl.h.) */

/* Test hook: fusion copies the consumer at every step instead of growing it
 * in place (fuse-impl.h); results must be identical either way. */
void gr_pass_fuse_debug_copy_always(bool on);

/* Lets matmul library calls read their A / B operands and write their C
 * through the descriptor (leading dims, trans flags, batch strides, element
 * offsets) instead of through pure copy kernels (transposes, permutes, the
 * strided split of a fused projection) that only feed or drain them; the
 * bypassed copies are removed. Results are bit-identical. gr_pass_fuse runs
 * it before its final gr_pass_dce; fuse-matmul.c has the rules. */
gr_status gr_pass_fuse_matmul_layouts(const gr_graph *g, gr_step_list *steps);

/* Removes dead steps: kernel and library-call steps none of whose written
 * values is a graph output or read by a later live step, and ALIAS steps
 * whose view is unused (to a fixed point). HOST steps stay. gr_pass_fuse
 * runs it; exposed for tests. */
gr_status gr_pass_dce(const gr_graph *g, gr_step_list *steps);

/* Common-subexpression elimination inside kernel k (fusion runs it on every
 * kernel it builds): merges params bound identically, drops nodes no stage
 * reaches, hash-conses identical nodes (same op, fn, dtype, operands, param,
 * access, constant) keeping the order topological, and drops unused params.
 * args[0..k->n_params) are the step's bindings of k's params and are
 * renumbered along with them. Results are bit-identical. */
gr_status gr_pass_cse_kernel(gr_kernel *k, gr_step_arg *args);

/* ---- memory plan ------------------------------------------------------------------------ */
typedef enum {
    GR_STORE_NONE = 0, /* never materialized (fused away) */
    GR_STORE_INPUT,    /* graph input: its own device buffer (placeholder) */
    GR_STORE_CONST,    /* constant made for this plan (folded): the plan's constants region */
    GR_STORE_ARENA,    /* activation: arena + offset */
    GR_STORE_ALIAS,    /* view of another value */
    GR_STORE_HOST,     /* lives in host memory (host placement) */
    GR_STORE_WEIGHT,   /* constant of the source graph (borrowed data): uploaded once per
                          session and shared by every plan (offset unused) */
    GR_STORE_COUNT
} gr_storage_kind;

typedef struct {
    gr_storage_kind kind;
    size_t offset;       /* ARENA / CONST: byte offset; INPUT: input index */
    size_t bytes;
    int alias_of;        /* ALIAS: root value */
    int64_t alias_elem_offset;
    int first_step, last_step; /* live range in the step list (root values) */
} gr_value_store;

typedef struct {
    gr_value_store *values;  /* one per graph value */
    int n_values;
    size_t arena_bytes;
    size_t const_bytes;
} gr_mem_plan;

/* Offsets in one arena from liveness (greedy best fit over sorted sizes,
 * 256-byte alignment). Graph outputs live to the end of the plan. */
gr_status gr_pass_plan_memory(const gr_graph *g, const gr_step_list *steps, gr_mem_plan *out);
/* Tests: place every plan's arena values with the interval tree that large plans use (plans
 * with few values use a list; both give the same offsets). Process-wide; set before use. */
void gr_pass_plan_memory_debug_tree_only(bool on);
void gr_mem_plan_free(gr_mem_plan *p);

/* ---- partitioning --------------------------------------------------------------------------- */
typedef struct {
    int first_step, n_steps;
    bool graphable;      /* can live in a CUDA graph */
    char *break_reason;  /* why the segment before this one ended (owned), or NULL */
    int break_node;      /* IR node that caused the break, or -1 */
} gr_segment;
typedef GR_VEC(gr_segment) gr_segment_list;

gr_status gr_pass_partition(const gr_graph *g, gr_step_list *steps, gr_segment_list *out);
/* One segment holding every step, host steps included: what a runtime without
 * partitioning would try to capture (debug option no_partition). */
gr_status gr_pass_partition_none(gr_step_list *steps, gr_segment_list *out);
void gr_segment_list_free(gr_segment_list *l);
/* After partitioning: masked attention calls of one segment that read the same mask value
 * form a group (gr_libcall.mask_group, share.c); *n_reusing counts the calls after each
 * group's first. */
gr_status gr_pass_share_attention_masks(gr_step_list *steps, int *n_reusing);

/* ---- the KV-cache rewrite (decode.c) ----------------------------------------------------------
 * A single-token decode step of ONE concrete shape for every position: the state inputs are
 * max_len long, each present = concat(past, new) becomes an in-place write at position
 * graft.kv_len - 1 (a new i64[1] input: valid positions after the step), softmaxes over cache
 * axes are masked past the valid length, contractions over them read zeros there. Cache axes
 * are the ones whose extent differs between the two bindings (past = max_len - 1 and
 * max_len - 2, seq = 1; the caller resolves every symbol for both). GR_ERR_UNSUPPORTED naming
 * the node where the model does something on a cache axis graft cannot keep exact. */
typedef struct {
    int64_t max_len;
    const int64_t *sym_at_max;        /* symbol values of src at past = max_len - 1 */
    const int64_t *sym_at_max_minus1; /* ... at past = max_len - 2 */
    int n_state;
    const char *const *past;          /* state input names */
    const char *const *present;       /* the outputs that feed them, same order */
} gr_decode_spec;
/* *out: a new concrete graph borrowing src's constants (src must outlive it). */
gr_status gr_pass_decode_rewrite(const gr_graph *src, const gr_decode_spec *spec, gr_graph **out);

/* The decode loop on the device (decode.c), applied to gr_pass_decode_rewrite's graph: the step
 * picks its next token (argmax, lowest id on ties) and writes the next step's inputs itself, so
 * that steps replay back to back with no host copy:
 *   graft.next_ids  = where(graft.finished, graft.pad, argmax(logits))   in place into input_ids
 *   graft.finished' = finished | next_ids == graft.eos                   in place (bool [b, 1])
 *   graft.tokens'   = tokens with row kv_len = next_ids                  in place (i64 [max_len, b])
 *   graft.cont      = kv_len < graft.stop && some row unfinished         (i32 [1]: a WHILE's flag)
 *   graft.kv_next   = kv_len + 1                                         in place into graft.kv_len
 * position_ids' readers read kv_len - 1 and attention_mask's read (position < kv_len): the
 * inputs stay, unread. An in-place write is safe when every other reader of its input runs
 * before it; graft orders them by data (each write depends on the token, kv_next also on
 * tokens' and cont) and refuses, naming the node, a model in which a reader of input_ids,
 * position_ids, attention_mask or kv_len does not lead to the logits. NULL names: absent.
 * With sample set, the token is sample(logits, kv_len, graft.sample_ints, graft.sample_floats)
 * (ir/ops.c) instead of the argmax: ints i64 [3] = seed, first kv_len (the prompt length: the
 * counter is then new-token index * batch + row, as the reference engine's), top_k; floats
 * f32 [2] = temperature, top_p. */
typedef struct {
    const char *input_ids, *position_ids, *attention_mask, *logits;
    int64_t max_len;
    bool sample;
    /* beam search (beams > 1): the token ids' rows are batch x beams; the loop's token is beam_step's
     * (ir/ops.c) over its state input graft.beam (i64 [batch, slots]; codegen/kir.h's layout for
     * beams, room and the vocabulary) with graft.beam_params (i64 [5]), written back in place; each
     * state input past[k] (cache axis axis[k]) is read through beam_reorder(past, the state's src,
     * kv_len; delta -1) by its in-place update, so the cache follows the beams before the step
     * appends to it. The loop goes on while kv_len < stop and some batch row is not done. */
    int64_t beams, room;
    int n_state;
    const char *const *past;
    const int *axis;
} gr_decode_loop_spec;
gr_status gr_pass_decode_device_loop(gr_graph *g, const gr_decode_loop_spec *spec);

/* ---- the pipeline ----------------------------------------------------------------------------- */
/* What one run of the pipeline produces for one concrete shape key. */
typedef struct {
    gr_graph *g;          /* specialized, folded, lowered (owns the temporaries lowering added) */
    gr_step_list steps;
    gr_mem_plan mem;
    gr_segment_list segs;
} gr_compiled;

/* Kernel verification inside lowering and fusion (gr_kernel_verify after every kernel lowered
 * and every fusion step, ~500 calls for a 40-kernel plan): in debug builds (the sanitizer and
 * fuzz builds of CI), where a bad kernel is caught where it is made. Release builds verify each
 * plan's final kernels once instead (runtime/plan.c, before they are prepared): the same check
 * of what runs, 5% of a new binding's host instructions less. */
#ifdef NDEBUG
#define GR_VERIFY_EVERY_KERNEL 0
#else
#define GR_VERIFY_EVERY_KERNEL 1
#endif

typedef struct {
    bool no_partition;    /* one segment holding every step (gr_pass_partition_none) */
    /* A graph with symbolic dims compiled per binding: before specialization, nodes whose output
     * grows faster than linearly with the symbols (element count of degree >= 2: a [seq, seq]
     * mask, a [batch, seq] table) are marked not to fold. Folding them would cost host time for
     * every new binding growing with seq^2, and folding by concrete size would make the plan's
     * structure depend on the length; decided on the symbolic shape, every binding gets the same
     * kernels. Vectors over one symbol (positions) still fold. */
    bool fold_linear_only;
    /* src's nodes are marked already (gr_pass_mark_superlinear ran on it once: a session
     * does at creation, so no binding's plan pays for the symbolic products again) */
    bool src_marked;
    /* Leaves attention unfused (no gr_pass_fuse_attention): the reference path. */
    bool no_fuse_attention;
    /* Fuses f32 attention of every head dim (gr_session_options.fuse_attention_f32 says why
     * not by default). */
    bool fuse_attention_f32;
    /* Leaves common subexpressions of the graph (no gr_pass_cse): the reference path. */
    bool no_cse;
    /* Leaves activations and residual adds after matmuls unfused (no gr_pass_fuse_epilogue,
     * gr_pass_fuse_residual): the reference path. */
    bool no_fuse_epilogue;
    /* Lowering: products of two activations as generated kernels (gr_pass_lower_opts; shape policy generic). */
    bool activation_matmul_kernels;
    /* Runs gr_pass_precision(precision) first ("precision" after_pass), unless src_converted:
     * a session converts its graph once at creation, so weights are converted once and
     * shared by every binding's plan. */
    bool convert_precision;
    gr_dtype precision;
    bool src_converted;
    /* Called after each pass with the pass's name ("input", "specialize",
     * "fuse_attention" (when it runs), "fuse_epilogue" (when it fused one), "cse" (when it merged one), "predicate_if", "fold_constants", "lower", "fuse", "plan_memory",
     * "partition") and the state so far (steps, mem and segs are empty until
     * their pass ran). An observer (graft dump) prints; a test hook may
     * rewrite the steps after "fuse". A non-OK status stops the pipeline. */
    gr_status (*after_pass)(void *user, const char *pass, gr_compiled *state);
    void *user;
    /* Optional: buffers reused by every run given the same scratch (a session's plans), so a
     * new plan does not touch fresh memory for what it throws away (NULL: none). One run at
     * a time per scratch. The result is the same with or without. */
    struct gr_pipeline_scratch *scratch;
} gr_pipeline_opts;

/* Build-time buffers of the pipeline kept between runs: the step list that lowering and
 * fusion work in (a step is ~1.1 KB and lowering makes about one per node, so this list is
 * the largest block of a plan's build; a plan keeps an exact copy of its final steps). */
typedef struct gr_pipeline_scratch {
    gr_step_list steps; /* len 0 between runs; kernels are never left in it */
} gr_pipeline_scratch;
void gr_pipeline_scratch_free(gr_pipeline_scratch *s);

/* THE pass pipeline, the only place its order is written: clone src, bind
 * the symbolic dims (sym_values[sym] for sym in 0..src->syms.len; NULL when
 * src has none) and re-infer shapes, predicate data-dependent ifs, fold
 * constants, lower, fuse, plan memory, partition. The session
 * (runtime/plan.c) and `graft dump` both run it. On failure *out is empty. */
gr_status gr_pass_pipeline(const gr_graph *src, const int64_t *sym_values, const gr_pipeline_opts *opts,
                           gr_compiled *out);
/* The pipeline's parts (gr_pass_pipeline = front, lower + fuse, finish). front: clone src and run
 * the graph passes up to fold_constants into *c (steps empty; on failure *c is empty). finish:
 * plan_memory, partition and the attention mask groups of c's steps (the caller frees c on failure). A session's template
 * (runtime/template.c) makes the steps between them without lowering and fusion. */
gr_status gr_pass_pipeline_front(const gr_graph *src, const int64_t *sym_values, const gr_pipeline_opts *opts,
                                 gr_compiled *c);
/* lower and fuse c's graph into c->steps (opts->scratch: in the scratch's buffer, which the caller
 * then owns in c->steps; the caller frees c on failure) */
gr_status gr_pass_pipeline_steps(const gr_pipeline_opts *opts, gr_compiled *c);
gr_status gr_pass_pipeline_finish(const gr_pipeline_opts *opts, gr_compiled *c);
/* Sets no_fold on nodes whose first output's element count has degree >= 2 in the symbols
 * (what fold_linear_only does to the pipeline's clone). */
gr_status gr_pass_mark_superlinear(gr_graph *g);
/* passes/pad.c: whether running g at a larger value of symbol k, inputs zero-filled past their
 * real extent, leaves the real part of every output unchanged (shape policy pad): *ok, else
 * the reason, naming the node, in why. Every dim depending on k must be k itself. Fails only
 * with GR_ERR_NOMEM.
 * known (per value, may be NULL): what the padded positions of a value hold because the caller
 * masked them (GR_PAD_ZERO, GR_PAD_NEG_INF). sites (may be NULL): a softmax, max or sum over the
 * padded axis, or a contraction over it with a computed operand, is recorded there (up to
 * max_sites) as an operand to mask with the reduction's identity instead of a refusal. */
enum { GR_PAD_NONE = 0, GR_PAD_ZERO = 1, GR_PAD_NEG_INF = 2 };
typedef struct {
    int node, slot, axis; /* input `slot` of node `node`, padded along `axis` */
    int fill;             /* GR_PAD_ZERO or GR_PAD_NEG_INF past the real extent */
} gr_pad_site;
gr_status gr_pass_pad_proof(const gr_graph *g, int k, const uint8_t *known, gr_pad_site *sites, int max_sites, int *n_sites,
                            bool *ok, char *why, size_t why_size);
void gr_compiled_free(gr_compiled *c);

/* ---- `graft dump` ---------------------------------------------------------------------------------- */
/* Runs gr_pass_pipeline on g (symbolic dims must be bound by sym_values or
 * are reported) and appends to sb the IR after each graph pass, the steps
 * after lowering and fusion, the memory plan and the segments: what a
 * session compiles for that shape. */
gr_status gr_pass_dump(const gr_graph *g, const int64_t *sym_values, bool no_partition, gr_strbuf *sb);
/* The same with the pipeline options of opts (no_partition, attention fusion, precision);
 * its observer and folding fields are the dump's own. */
gr_status gr_pass_dump_opts(const gr_graph *g, const int64_t *sym_values, const gr_pipeline_opts *opts, gr_strbuf *sb);

/* Appends what `graft dump` prints after the last passes for c: the final IR, the steps, the
 * memory plan and the segments (tests compare plans made two ways with it). */
gr_status gr_compiled_dump(const gr_compiled *c, gr_strbuf *sb);

/* ---- tensor parallelism (shard.c) -------------------------------------------------------------
 * Rank `rank`'s graph of src (shapes inferred) split over n_ranks: column-parallel matmuls,
 * heads, row-parallel matmuls followed by all_reduce, vocabulary-split embedding tables, and an
 * all_gather wherever a split value meets an op no rule covers or a graph output. The rank's
 * graph holds only its slices of the split weights; its inputs and outputs are src's (outputs
 * whole on every rank). A split that cannot be made (columns, heads or rows not divisible by
 * n_ranks) is GR_ERR_UNSUPPORTED naming the node. report (may be NULL): for rank 0, one line per
 * split and per gather (graft explain --tp N). stats may be NULL. */
typedef struct {
    int splits;                 /* column, row and vocabulary splits */
    int all_reduces, all_gathers; /* collectives per run */
    size_t split_weight_bytes;  /* unsplit bytes of the weights that were split */
    size_t rank_weight_bytes;   /* constants of this rank's graph */
} gr_shard_stats;
gr_status gr_pass_shard(const gr_graph *src, int n_ranks, int rank, gr_graph **out, gr_strbuf *report, gr_shard_stats *stats);

#endif
