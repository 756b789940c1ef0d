/* ir — the tensor graph: values, nodes, attributes, subgraphs; verifier; printer.
 *
 * A graph owns arrays of values and nodes, addressed by int index. A value is
 * a graph input, an initializer (constant data owned by the graph) or the
 * output of exactly one node. Nodes are kept in topological order (the
 * builder and the parsers only append nodes whose inputs already exist).
 *
 * Semantics of every op (attributes, defaults, broadcasting) are documented in
 * ops.c next to the op table; the simulator's kernels are their definition.
 */
#ifndef GR_IR_H
#define GR_IR_H

#include "util/util.h"

/* ---- ops: one table, ir/ops.def (append-only) -------------------------------------- */
typedef enum {
#define GR_OP_DEF(id, ...) GR_OP_##id,
#include "ir/ops.def"
#undef GR_OP_DEF
    GR_OP_COUNT
} gr_op;

/* Op kinds: unary/binary/compare are elementwise (one kernel over the output);
 * reduce reduces or normalizes along axes; move only moves data; gen makes
 * data from attributes; control holds subgraphs. */
enum { GR_OPK_UNARY = 1, GR_OPK_BINARY, GR_OPK_COMPARE, GR_OPK_REDUCE, GR_OPK_MOVE, GR_OPK_GEN, GR_OPK_OTHER, GR_OPK_CONTROL,
       /* collective across the ranks of tensor parallelism (passes/shard.c): never folded */
       GR_OPK_COLLECTIVE };

typedef struct {
    const char *name;  /* text name in .gir: "add", "reduce_sum", ... */
    int kind;          /* GR_OPK_* */
    int min_in, max_in;   /* max_in = -1: variadic; inputs from min_in on are optional (-1) */
    int min_out, max_out; /* max_out = -1: variadic */
    /* Attribute schema: "name:kind name:kind ..." (kinds: int float string ints
     * floats graph dtype), "" for none. The verifier refuses any other name or
     * kind on every path (.gir, ONNX, C API); an absent attribute takes the
     * op's default (ops.c). float accepts an int, ints an int, floats a float,
     * dtype an int (gr_dtype) or a string ("f16"). */
    const char *attrs;
} gr_op_info;

const gr_op_info *gr_op_get(gr_op op);
/* Returns GR_OP_COUNT if unknown. */
gr_op gr_op_from_name(const char *name);

/* One axis of ONNX Slice as numpy (and onnx.reference) compute it: starts and
 * ends below zero count from the end, then clamp to [0, dim] (positive step)
 * or [-1, dim-1] (negative step); *count = elements taken, *first = the index
 * of the first (meaningful when *count > 0). No intermediate overflows for any
 * int64 start, end and step != 0. Returns false when step == 0. */
bool gr_ir_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first, int64_t *count);

/* ---- symbolic dims (ir/dimexpr.c) -------------------------------------------------
 * A dim is concrete (size >= 0, expr GR_SYM_NONE) or symbolic (size -1, expr
 * >= 0): an expression over the graph's symbols, held in the graph's
 * expression table. Expressions are kept in one canonical form (a polynomial
 * over "atoms": symbols and floor-division, modulo, min and max nodes, with
 * the terms in a fixed order, constants folded), and the table is
 * hash-consed, so two dims are equal exactly when their expr ids are
 * (gr_dx_equal): equality is structural, never a string comparison.
 *
 * The same struct carries a symbolic integer that is not a dim (a Slice bound,
 * a Range limit, an element of a shape tensor): then a concrete value may be
 * negative, and only `expr` says whether it is symbolic.
 *
 * Symbols are integers with a range [lo, hi], by default [1, unbounded]
 * (a symbolic dim of size 0 is refused at binding: the default lets shape
 * arithmetic decide Equal(seq, 0) and max(seq, 1) the way exporters assume),
 * narrowed by a declared range; the simplifier uses the ranges (min(seq, 1024)
 * is seq when seq <= 1024 is declared), and binding checks them. Division and modulo are floor division and floor modulo (Python's
 * // and %), which agree with C's for the non-negative operands dims are. */
#define GR_SYM_NONE (-1)

typedef struct {
    int64_t size; /* concrete value; -1 while symbolic */
    int32_t expr; /* index into the graph's expression table, or GR_SYM_NONE */
} gr_dim;

/* Expression nodes. SUB is an operator of gr_dx_binary only (a - b is stored as a + -1*b).
 * EQ and LT make conditions 0/1, so where(c, x, y) is the polynomial c*(x - y) + y:
 * what shape code computes with Equal/Less/Where on dims stays an expression. */
typedef enum {
    GR_DX_SYM = 0, /* symbol k */
    GR_DX_CONST,   /* the constant k */
    GR_DX_ADD, GR_DX_MUL, GR_DX_DIV, GR_DX_MOD, GR_DX_MIN, GR_DX_MAX,
    GR_DX_EQ,      /* 1 when a == b, else 0 */
    GR_DX_LT,      /* 1 when a < b, else 0 (a <= b is a < b + 1: integers) */
    GR_DX_SUB,
    GR_DX_COUNT
} gr_dx_op;

typedef struct {
    gr_dx_op op;
    int32_t a, b; /* operands (expression ids); -1 for SYM and CONST */
    int64_t k;    /* SYM: symbol index; CONST: value */
} gr_dexpr;

/* "Unbounded" in declared ranges and interval analysis. */
#define GR_DX_INF ((int64_t)1 << 62)

typedef struct {
    char *name;
    int64_t lo, hi; /* range (default [1, GR_DX_INF]) */
    bool declared;  /* lo/hi were set by the model or the user */
    /* A data-dependent symbol (NonZero's count, the length of a Range over run-time
     * scalars, a Loop's run-time trip count): no input shape binds it; before each run
     * the session computes `data_value` (a 1-element value of this graph: the count) on
     * the device and reads it on the host (runtime/probe.c). -1 for ordinary symbols.
     * `origin` names the user's node for messages ("NonZero 'nz'"); NULL otherwise. */
    int32_t data_value;
    char *origin;
} gr_ir_symbol;

struct gr_graph;
/* Dim of symbol `name` (created if new, default range). */
gr_status gr_dx_symbol(struct gr_graph *g, const char *name, gr_dim *out);
/* Concrete dim. */
static inline gr_dim gr_dx_const(int64_t v) { return (gr_dim){v, GR_SYM_NONE}; }
static inline bool gr_dx_is_sym(gr_dim d) { return d.expr != GR_SYM_NONE; }
static inline bool gr_dx_equal(gr_dim a, gr_dim b) { return a.expr == b.expr && (a.expr != GR_SYM_NONE || a.size == b.size); }
/* a op b, simplified. Concrete operands give a concrete result. Errors:
 * GR_ERR_SHAPE for an overflow or a division by zero that is certain,
 * GR_ERR_UNSUPPORTED for an expression past the simplifier's limits (more
 * than 16 terms or degree 6) — callers treat that as "not expressible". */
gr_status gr_dx_binary(struct gr_graph *g, gr_dx_op op, gr_dim a, gr_dim b, gr_dim *out);
/* Value of d for symbol values sym_values[0..syms.len) (checked arithmetic:
 * an overflow or a division by zero is GR_ERR_SHAPE naming the expression). */
gr_status gr_dx_eval(const struct gr_graph *g, gr_dim d, const int64_t *sym_values, int64_t *out);
/* Interval [lo, hi] that d takes over the symbols' declared ranges (GR_DX_INF = unbounded). */
void gr_dx_bounds(const struct gr_graph *g, gr_dim d, int64_t *lo, int64_t *hi);
/* Text form: "seq", "seq + 1", "2*seq", "seq//2", "min(seq, 1024)"; a concrete dim prints its value. */
void gr_dx_print(const struct gr_graph *g, gr_dim d, gr_strbuf *sb);
/* The same into buf (truncated to n bytes). */
void gr_dx_str(const struct gr_graph *g, gr_dim d, char *buf, size_t n);
/* Parses an expression: integers, symbol names ([A-Za-z_][A-Za-z0-9_.]*), + - * / // %,
 * parentheses, min/max/Min/Max(a, b, ...), eq(a, b), lt(a, b), floor(x), FloorDiv(a, b), Mod(a, b),
 * CeilDiv(a, b) (the forms sympy prints, which the dynamo exporter writes as
 * dim_params). GR_ERR_PARSE when text is not such an expression (callers then
 * take the whole text as one symbol's name); no message is set for that. */
gr_status gr_dx_parse(struct gr_graph *g, const char *text, gr_dim *out);
/* A dim name from a model (ONNX dim_param, .gir, the C API): an expression
 * when it parses as one, else a symbol of that name. */
gr_status gr_dx_from_name(struct gr_graph *g, const char *text, gr_dim *out);
/* The text of d, kept by the graph until it is destroyed ("?" when out of memory). */
const char *gr_dx_text(struct gr_graph *g, gr_dim d);
/* d (a dim of graph src) rebuilt in graph dst, symbols matched by name. */
gr_status gr_dx_import(struct gr_graph *dst, const struct gr_graph *src, gr_dim d, gr_dim *out);
/* Declares symbol sym's range (lo <= hi, lo >= 0). */
gr_status gr_dx_set_range(struct gr_graph *g, int32_t sym, int64_t lo, int64_t hi);
/* Symbol index of a plain-symbol dim, else -1. */
int32_t gr_dx_as_symbol(const struct gr_graph *g, gr_dim d);
/* Degree of d as a polynomial in its atoms (0 for a constant, 1 for seq or
 * seq + 1 or min(seq, 4), 2 for seq*seq or batch*seq); -1 past the simplifier's limits. */
int gr_dx_degree(const struct gr_graph *g, gr_dim d);
/* Marks in used[0..syms.len) the symbols d depends on. */
void gr_dx_symbols_of(const struct gr_graph *g, gr_dim d, bool *used);

/* ---- values -------------------------------------------------------------------- */

typedef enum { GR_PLACE_DEVICE = 0, GR_PLACE_HOST } gr_placement;
typedef enum { GR_VAL_INPUT = 0, GR_VAL_CONST, GR_VAL_NODE } gr_value_kind;

typedef struct {
    char *name;
    gr_value_kind kind;
    gr_dtype dtype;
    int ndim;
    gr_dim dims[GR_MAX_DIMS];
    gr_placement placement;
    bool typed;        /* dtype and shape known (inputs, constants, inferred outputs) */
    /* bit d: dim d was symbolic before gr_ir_specialize made it concrete. Lowering and
     * fusion never treat such a dim as structurally 1 (no view, broadcast or fold that
     * holds only because it is 1 at this binding), so every binding of a symbolic plan
     * lowers to kernels of the same structures (shape-generic kernels, kir.h). */
    uint32_t var_dims;
    /* value index + 1 of a graph input whose placeholder this value is written into in place
     * (a decode step's KV-cache state, passes/decode.c), 0 = none: memory planning stores it
     * there instead of in the arena, and allows that one write into an input */
    int inplace_of;
    int producer;      /* node index for GR_VAL_NODE, else -1 */
    int out_slot;      /* which output of the producer */
    /* GR_VAL_CONST: owned data, nbytes = numel * dtype size */
    void *data;
    size_t nbytes;
    bool borrowed;     /* data belongs to the graph this one was cloned from (gr_ir_graph_clone_borrow) */
    bool name_borrowed; /* so does name (never freed here; a rename gives the value its own) */
    /* where the text or ONNX file defined it, for messages */
    int line, col;
} gr_ir_value;

/* ---- attributes ------------------------------------------------------------------ */
typedef enum {
    GR_IR_ATTR_INT = 0, GR_IR_ATTR_FLOAT, GR_IR_ATTR_STRING, GR_IR_ATTR_INTS, GR_IR_ATTR_FLOATS, GR_IR_ATTR_GRAPH
} gr_ir_attr_kind;

struct gr_graph;

typedef struct {
    char *name;
    gr_ir_attr_kind kind;
    int64_t i;
    double f;
    char *s;
    int64_t *ints;
    double *floats;
    int n;                   /* length of ints / floats */
    struct gr_graph *graph;  /* owned subgraph (If branches, Loop body) */
    /* symbolic values (expression ids of the graph holding the node): INT and
     * FLOAT hold `expr` when `sym` is set; INTS hold exprs[i] (GR_SYM_NONE where
     * element i is concrete) when `exprs` is not NULL. Zeroed attributes are
     * concrete. Specialization replaces them by their values. */
    bool sym;
    /* name borrowed from the graph this one was cloned from, and ints / exprs / floats in the
     * clone's slab (gr_ir_graph_clone_borrow): none of them is freed on its own */
    bool in_slab;
    int32_t expr;
    int32_t *exprs;
} gr_ir_attr;

/* ---- nodes ------------------------------------------------------------------------- */
typedef struct {
    char *name;      /* unique within the graph ("n12" if the source gave none) */
    gr_op op;
    int n_in, n_out, n_attr;
    int *in;         /* value indices; -1 = optional input left out */
    int *out;
    gr_ir_attr *attrs;
    int line, col;   /* source location for messages; 0 if built by API */
    bool no_fold;    /* constant folding leaves it to run time (set by the pipeline, see passes.h) */
    bool name_borrowed; /* name belongs to the graph this one was cloned from (gr_ir_graph_clone_borrow) */
    uint8_t slab;       /* GR_NODE_SLAB_*: which of in, out, attrs lie in the graph's slab (never freed alone) */
    /* gr_ir_check_attrs passed and no attribute was symbolic: passes change attribute values
     * but never a name, a kind or the op of a node that keeps attributes, and only a symbolic
     * int can become another value a check looks at (a dtype), so inference does not check
     * again (every new binding re-infers every node; a clone keeps the flag) */
    bool attrs_checked;
} gr_ir_node;
#define GR_NODE_SLAB_IN 1u
#define GR_NODE_SLAB_OUT 2u
#define GR_NODE_SLAB_ATTRS 4u
/* Frees a node's name, inputs, outputs and attributes (what lies in a slab stays); the node
 * is left with none of them. */
void gr_ir_node_release(gr_ir_node *n);
/* Frees a node's input array only (n_in 0, in NULL), e.g. to give it another one. */
void gr_ir_node_free_inputs(gr_ir_node *n);
/* Frees what an attribute's arrays of `ints`/`exprs` hold outside a slab; exprs NULL after. */
void gr_ir_attr_drop_exprs(gr_ir_attr *a);
/* Free a value's or node's name unless it is borrowed; the name is NULL afterwards. */
void gr_ir_value_name_free(gr_ir_value *v);
void gr_ir_node_name_free(gr_ir_node *n);

/* ---- graph -------------------------------------------------------------------------- */
/* Name -> index hash table over a graph's values or nodes (ir.c), so that
 * lookups and the uniqueness checks of the builder stay O(1) in graphs of
 * 10^5 nodes. Built on the first lookup, kept up to date by the builder
 * (gr_ir_add_*, gr_ir_rename_*); any other change to the arrays (a pass
 * truncating or moving them) is noticed and the table is rebuilt. */
typedef struct {
    int *slots;       /* index + 1, 0 = empty */
    uint32_t *hashes; /* hash of the slot's name */
    size_t cap;       /* power of two, or 0 when not built */
    int count;
    int len;          /* array length the table reflects; -1 = stale */
} gr_name_index;

struct gr_graph {
    GR_VEC(gr_ir_value) values;
    GR_VEC(gr_ir_node) nodes;
    GR_VEC(int) inputs;        /* value indices */
    GR_VEC(int) outputs;       /* value indices */
    GR_VEC(gr_ir_symbol) syms; /* symbols of symbolic dims */
    GR_VEC(gr_dexpr) dx;       /* expression table (ir/dimexpr.c) */
    int32_t *dx_slots;         /* hash-consing index over dx (id + 1, 0 = empty) */
    size_t dx_cap;
    char **dx_text;            /* printed expressions (gr_dx_text), dx_text_cap entries, lazily */
    int dx_text_cap;
    struct gr_graph *parent;   /* enclosing graph of a subgraph, else NULL */
    char *origin;              /* file name or "<api>" for messages */
    int next_auto_name;
    gr_name_index value_index; /* private to ir.c */
    gr_name_index node_index;  /* private to ir.c */
    /* a borrowing clone's nodes' in / out / attrs arrays and their attributes' arrays, in one
     * block (slab_bytes), freed with the graph */
    void *slab;
    size_t slab_bytes;
};
typedef struct gr_graph gr_graph;

gr_status gr_ir_graph_create(gr_graph **out);
void gr_ir_graph_destroy(gr_graph *g);
/* Deep copy (subgraphs and constant data included). */
gr_status gr_ir_graph_clone(const gr_graph *g, gr_graph **out);
/* The same, but the constants of g's own values keep pointing at g's data,
 * and the clone's values and nodes keep g's names (borrowed, never freed by
 * the clone): g must outlive the clone and keep its constants and names. What the pass pipeline compiles per binding, so a new
 * shape copies no weights and its plan shares them (runtime: one upload). */
gr_status gr_ir_graph_clone_borrow(const gr_graph *g, gr_graph **out);

/* Symbol index for a symbol name, created if new. */
gr_status gr_ir_sym(gr_graph *g, const char *name, int32_t *out);
/* A new data-dependent symbol (see gr_ir_symbol) named `base` (made unique with a
 * ".2", ".3" suffix), range [0, hi], computed at run time by value `data_value`;
 * origin names the node for messages. *out is its dim. */
gr_status gr_ir_data_symbol(gr_graph *g, const char *base, int32_t data_value, int64_t hi, const char *origin, gr_dim *out);
/* Marks in used[0..g->syms.len) the symbols that g's value dims and symbolic
 * attributes (subgraphs included, matched by name) refer to. */
void gr_ir_syms_used(const gr_graph *g, bool *used);
/* Removes the nodes and values that g's outputs do not need (inputs stay, in their
 * order); data-dependent symbols whose value goes get data_value -1. Indices change. */
gr_status gr_ir_prune(gr_graph *g);
/* Symbol index by name, -1 if absent. */
int32_t gr_ir_find_sym(const gr_graph *g, const char *name);

/* Adds a value; name may be NULL (a unique "%N" name is made). Returns index. */
gr_status gr_ir_add_value(gr_graph *g, const char *name, gr_value_kind kind, int *out);
gr_status gr_ir_add_input(gr_graph *g, const char *name, gr_dtype t, int ndim, const gr_dim *dims, int *out);
/* Takes ownership of data (allocated with gr_malloc, nbytes long). */
gr_status gr_ir_add_const_owned(gr_graph *g, const char *name, gr_dtype t, int ndim, const int64_t *dims,
                                void *data, size_t nbytes, int *out);
gr_status gr_ir_add_const(gr_graph *g, const char *name, gr_dtype t, int ndim, const int64_t *dims,
                          const void *data, int *out);
/* Adds a node with fresh untyped output values (named out_names[i] if given).
 * Attributes are deep-copied. Returns the node index. */
gr_status gr_ir_add_node(gr_graph *g, gr_op op, const char *name, int n_in, const int *in, int n_out,
                         const char *const *out_names, int n_attr, const gr_ir_attr *attrs, int *out_node);
gr_status gr_ir_add_output(gr_graph *g, int value);
/* Removes the last node and its output values (which must be the last values). */
void gr_ir_remove_last_node(gr_graph *g);
/* Replaces node `at` by the nodes [first_new, len) (moved, in order, to where
 * `at` was) and frees node `at`; renumbers every value's producer. Used by
 * passes that expand a node into several (control-flow inlining). */
void gr_ir_splice_nodes(gr_graph *g, int at, int first_new);
/* Many splices in one pass, O(nodes + values): node at[k] is replaced by the nodes [first[k],
 * first[k] + count[k]) (count >= 1, in that order). The ranges are the nodes appended after the
 * replaced ones, each taken once, in any order; the at[k] are distinct nodes before them. Node
 * indices change (names are looked up again). GR_ERR_INTERNAL when the ranges do not fit. */
gr_status gr_ir_splice_many(gr_graph *g, const int *at, const int *first, const int *count, int n);
/* Puts the nodes in the order order[0..nodes.len) (a permutation: new position i holds old
 * node order[i]; the caller keeps it topological) and renumbers producers. O(n). */
gr_status gr_ir_reorder_nodes(gr_graph *g, const int *order);
/* Puts the nodes in a topological order (every node after its inputs' producers; otherwise
 * the current order), for passes that append nodes read by earlier ones. A cycle is
 * GR_ERR_INTERNAL naming a node, prefixed with `who` (the pass). O(nodes + inputs). */
gr_status gr_ir_topo_sort(gr_graph *g, const char *who);
/* Looks a value up by name (the last one of that name); -1 if absent. */
int gr_ir_find_value(const gr_graph *g, const char *name);
/* Looks a node up by name; -1 if absent. */
int gr_ir_find_node(const gr_graph *g, const char *name);
/* Renames value v / node n (no uniqueness check: the caller has made sure). */
gr_status gr_ir_rename_value(gr_graph *g, int v, const char *name);
gr_status gr_ir_rename_node(gr_graph *g, int n, const char *name);

/* The `layout` attribute of an attention node (ops.c): layout[i] for q, k, v and out, 0 for
 * [B, heads, S, D] and 1 for [B, S, heads, D]; all 0 when absent. Anything but 4 entries of
 * 0 or 1 is GR_ERR_INVALID naming the node. */
gr_status gr_ir_attention_layout(const gr_graph *g, const gr_ir_node *n, int layout[4]);
/* Dim index of heads (1) and of the sequence (2) in an attention operand of that layout. */
static inline int gr_ir_attention_heads_axis(int layout) { return layout ? 2 : 1; }
static inline int gr_ir_attention_seq_axis(int layout) { return layout ? 1 : 2; }

/* Attribute access on a node: defaults when absent; a present attribute of the
 * wrong kind is an error naming the node. */
const gr_ir_attr *gr_ir_attr_find(const gr_ir_node *n, const char *name);
gr_status gr_ir_attr_int(const gr_graph *g, const gr_ir_node *n, const char *name, int64_t def, int64_t *out);
gr_status gr_ir_attr_float(const gr_graph *g, const gr_ir_node *n, const char *name, double def, double *out);
/* *out points into the node (do not free); def may be NULL */
gr_status gr_ir_attr_string(const gr_graph *g, const gr_ir_node *n, const char *name, const char *def, const char **out);
/* *out points into the node; *n_out = -1 when absent */
gr_status gr_ir_attr_ints(const gr_graph *g, const gr_ir_node *n, const char *name, const int64_t **out, int *n_out);
gr_status gr_ir_attr_floats(const gr_graph *g, const gr_ir_node *n, const char *name, const double **out, int *n_out);
/* An ints attribute as symbolic integers (concrete or expressions) into out[0..max);
 * *n_out = -1 when absent. */
gr_status gr_ir_attr_sints(const gr_graph *g, const gr_ir_node *n, const char *name, gr_dim *out, int max, int *n_out);
/* An int or float attribute as a symbolic integer (a float must hold an integer
 * when symbolic); *present = false (and *out = def) when absent. */
gr_status gr_ir_attr_sint(const gr_graph *g, const gr_ir_node *n, const char *name, gr_dim def, gr_dim *out, bool *present);
/* Builds an ints attribute from symbolic integers (exprs allocated only when one is symbolic). */
gr_status gr_ir_attr_make_sints(gr_ir_attr *a, const char *name, const gr_dim *vals, int n);
/* Rebuilds the symbolic values of attribute a (copied from a node of graph src) in graph dst. */
gr_status gr_ir_attr_import_exprs(gr_graph *dst, const gr_graph *src, gr_ir_attr *a);
/* Does any attribute of the node hold a symbolic value? */
bool gr_ir_node_has_sym_attr(const gr_ir_node *n);
gr_status gr_ir_attr_copy(gr_ir_attr *dst, const gr_ir_attr *src);
void gr_ir_attr_free(gr_ir_attr *a);

/* Concrete shape of a typed value (fails with GR_ERR_SHAPE if a dim is symbolic). */
gr_status gr_ir_value_shape(const gr_graph *g, int v, int64_t *dims);
int64_t gr_ir_value_numel(const gr_ir_value *v); /* -1 if symbolic or above GR_MAX_NUMEL */
/* The concrete dims (symbolic ones are skipped) hold at most GR_MAX_NUMEL
 * elements (gr_shape_numel_checked's rule). */
bool gr_ir_dims_fit(int ndim, const gr_dim *dims);
bool gr_ir_value_concrete(const gr_ir_value *v);

/* ---- sliding windows, pad, resize (shape-window.c) ---------------------------------------
 * Shape rules of conv, conv_transpose, max_pool, avg_pool (gr_ir_infer_window), pad and
 * resize; the semantics are in ops.c. */
gr_status gr_ir_infer_window(gr_graph *g, int node);
gr_status gr_ir_infer_pad(gr_graph *g, int node);
gr_status gr_ir_infer_resize(gr_graph *g, int node);
/* Concrete geometry of a window node whose dims are concrete: auto_pad resolved into pads. */
typedef struct {
    int n_spatial;
    int64_t group;
    int64_t kernel[GR_MAX_DIMS], stride[GR_MAX_DIMS], dil[GR_MAX_DIMS];
    int64_t pad_begin[GR_MAX_DIMS], pad_end[GR_MAX_DIMS];
    int64_t in[GR_MAX_DIMS], out[GR_MAX_DIMS];
} gr_ir_window;
gr_status gr_ir_window_geometry(const gr_graph *g, int node, gr_ir_window *out);
/* pad's mode attribute: 0 constant, 1 reflect, 2 edge, 3 wrap; GR_ERR_INVALID (no message) otherwise. */
gr_status gr_ir_pad_mode(const char *s, int *out);

/* Human-readable type: "f32[256,512]", "f32[N,512]@host" into buf. */
void gr_ir_type_str(const gr_graph *g, const gr_ir_value *v, char *buf, size_t n);
/* "node 'name' (op) at origin:line:col" for messages */
void gr_ir_node_where(const gr_graph *g, const gr_ir_node *n, char *buf, size_t size);

/* Structural checks: indices in range, arity per op, each value defined once
 * before use, outputs defined, subgraphs valid. Message names the node. */
gr_status gr_ir_verify(const gr_graph *g);
/* Attribute names and kinds of node n against its op's schema (gr_op_info.attrs);
 * an unknown name or a wrong kind is GR_ERR_INVALID naming the node and the
 * attributes the op takes. Part of gr_ir_verify; shape inference runs it too. */
gr_status gr_ir_check_attrs(const gr_graph *g, const gr_ir_node *n);

/* ---- shape inference ------------------------------------------------------------ */
/* Types the outputs of node `node` from its inputs (dtype, shape, placement).
 * With symbolic input dims it types what it can; if an output shape cannot be
 * expressed it leaves the output untyped and returns GR_OK. A real mismatch
 * (broadcast failure, bad axis, wrong dtype) is GR_ERR_SHAPE naming the node. */
gr_status gr_ir_infer_node(gr_graph *g, int node);
gr_status gr_ir_infer_shapes(gr_graph *g); /* all nodes, in order */

/* Replaces every symbolic dim and symbolic attribute by its value
 * (sym_values[sym] for sym in 0..g->syms.len) and re-infers all shapes. */
gr_status gr_ir_specialize(gr_graph *g, const int64_t *sym_values);

/* ---- text form -------------------------------------------------------------------------- */
/* Prints a graph as .gir text (docs/gir.md; the parser is in frontend/).
 * Constants with at most inline_limit elements are printed inline; larger
 * ones go to side_path (appended, offset recorded) if given, else inline
 * regardless. Returns a string freed with gr_strfree. */
gr_status gr_gir_print(const gr_graph *g, size_t inline_limit, const char *side_path, char **out);
/* side_path value that prints larger constants as `...  # N elements elided`
 * (for human-readable dumps; the text does not parse back). */
#define GR_GIR_ELIDE "\x01elide"

#endif
