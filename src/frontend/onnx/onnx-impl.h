/* frontend/onnx — private interface of the ONNX importer.
 *
 * onnx.c        file/buffer loading, protobuf-c allocator, model checks,
 *               tensors (inline and external data), graph inputs/outputs,
 *               the value table and the node loop
 * onnx-fold.c   the import-time constant folder for shape arithmetic
 *               (Shape → Gather → Concat → Reshape chains and the like)
 * onnx-ops.c    the op table: one converter per ONNX op onto graft IR
 *
 * Every ONNX value name maps to an ox_value. A value is either an IR value
 * (ir >= 0), a constant known at import time (konst, materialized as an IR
 * constant only when an IR node reads it), or unavailable (a reason string,
 * reported when something uses it).
 */
#ifndef GR_ONNX_IMPL_H
#define GR_ONNX_IMPL_H

#include "frontend/frontend.h"
#include "onnx_subset.pb-c.h"

/* Graft imports opsets 13..21 of the default domain. */
#define OX_OPSET_MIN 13
#define OX_OPSET_MAX 21
/* Subgraphs (If / Loop / Scan bodies) nest at most this deep below the main graph;
 * a deeper file is refused before it is parsed (onnx.c). */
#define OX_MAX_GRAPH_DEPTH 16
/* Body nodes inlined (unrolled loops, constant-condition Ifs) in one import, nested
 * loops multiplied out: a file whose unrolling would be larger is refused. */
#define OX_MAX_INLINED_NODES ((int64_t)1 << 17)
/* Constants up to this many elements are folded at import time. */
#define OX_FOLD_MAX_ELEMS 65536
/* Largest tensor the importer will hold (elements); larger is a malformed model. */
#define OX_MAX_ELEMS GR_MAX_NUMEL /* graft's one size limit (util.h) */

/* A host tensor known at import time. `sym` (optional, one entry per element)
 * marks elements that depend on a symbolic dim: GR_SYM_NONE for a known
 * element, an expression id of the importing graph (ir/dimexpr.c) for one
 * computed from symbolic dims (Shape → Gather → Add → ... folds into
 * expressions), OX_UNKNOWN for one graft cannot express. The data of a
 * symbolic element is -1. A consumer that takes the tensor as attributes
 * (Reshape's shape, Slice's ends, Range's limit, ...) takes the expressions;
 * one that needs plain numbers fails naming the node and the symbol. */
#define OX_UNKNOWN (-2)
typedef struct {
    gr_dtype dtype;
    int ndim;
    int64_t dims[GR_MAX_DIMS];
    void *data;
    size_t nbytes;
    bool owned;   /* data is ours (else it belongs to the IR value it became) */
    int32_t *sym; /* NULL when fully known; owned */
} ox_tensor;

typedef struct {
    const char *name;   /* points into the protobuf message */
    int ir;             /* IR value index, -1 until materialized */
    ox_tensor *konst;   /* known at import time, or NULL */
    const char *unavailable; /* static reason why it cannot be used, or NULL */
    int *seq;           /* a tensor sequence (SplitToSequence): IR values of its elements, owned */
    int n_seq;
} ox_value;

typedef struct ox_ctx ox_ctx;
struct ox_ctx {
    gr_graph *g;
    const char *origin;
    const char *base_dir;
    int64_t opset;
    GR_VEC(ox_value) vals;
    int *slots;         /* open-addressing hash: name → index into vals (+1; 0 = empty) */
    int n_slots;
    /* the node being converted */
    const Onnx__NodeProto *node;
    const char *node_name; /* ONNX name or "<OpType>_<i>" */
    char *node_name_owned;
    int node_index;
    int sub_count;      /* helper nodes emitted for this ONNX node */
    /* subgraphs (If / Loop / Scan bodies): names a body reads from an enclosing
     * graph resolve through `outer` (ox_resolve). An inlined body (same_graph:
     * a constant-condition If, an unrolled Loop / Scan iteration) emits into the
     * outer IR graph; an If branch kept as a subgraph has a graph of its own and
     * reads outer values as captures (unlisted inputs named like the outer value). */
    ox_ctx *outer;
    bool same_graph;
    char *scope_prefix; /* an inlined body's node names: "<prefix>/<name>" (owned) */
    int depth;          /* subgraph nesting below the main graph */
    int64_t inlined_nodes; /* main graph's scope only: body nodes inlined in all (OX_MAX_INLINED_NODES) */
};

/* ---- onnx.c: values ------------------------------------------------------------- */
int ox_find(const ox_ctx *c, const char *name);
/* Like ox_find, but a name defined in an enclosing graph is brought into this
 * scope (as the same IR value, a copy of the constant, or a capture). */
gr_status ox_resolve(ox_ctx *c, const char *name, int *out);
/* Registers an ONNX name (must be new); *out = index into c->vals. */
gr_status ox_define(ox_ctx *c, const char *name, int *out);
/* IR value for ox value vi (materializes a constant). */
gr_status ox_ir(ox_ctx *c, int vi, int *out_ir);
/* Binds an ONNX output name to a known tensor (takes ownership of t). */
gr_status ox_define_const(ox_ctx *c, const char *name, ox_tensor *t);
/* Binds an ONNX output name to an existing IR value (no copy). */
gr_status ox_define_ir(ox_ctx *c, const char *name, int ir);
/* Binds an ONNX output name to a sequence of IR values (copies irs). */
gr_status ox_define_seq(ox_ctx *c, const char *name, const int *irs, int n);

/* ---- onnx.c: tensors ---------------------------------------------------------------- */
void ox_tensor_free(ox_tensor *t);
/* New owned tensor with zeroed data. */
gr_status ox_tensor_new(gr_dtype dt, int ndim, const int64_t *dims, ox_tensor **out);
int64_t ox_tensor_numel(const ox_tensor *t);
gr_status ox_dtype_from_onnx(ox_ctx *c, int32_t onnx_type, const char *what, gr_dtype *out);
int32_t ox_dtype_to_onnx(gr_dtype t);
/* Decodes a TensorProto (inline or external data). */
gr_status ox_tensor_from_proto(ox_ctx *c, const Onnx__TensorProto *tp, const char *what, ox_tensor **out);

/* ---- onnx.c: messages ------------------------------------------------------------------ */
/* GR_ERR_* with "node '<name>' (<OpType>): " in front. */
gr_status ox_node_error(ox_ctx *c, gr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- onnx-ops.c: attributes and inputs ------------------------------------------------------ */
const Onnx__AttributeProto *ox_attr(const ox_ctx *c, const char *name);
gr_status ox_attr_int(ox_ctx *c, const char *name, int64_t def, int64_t *out);
gr_status ox_attr_float(ox_ctx *c, const char *name, double def, double *out);
/* *out points into the message (NUL-terminated copy not needed: ONNX strings here are short) */
gr_status ox_attr_string(ox_ctx *c, const char *name, const char *def, char *buf, size_t bufsize);
/* ints: *out points into the message, *n = -1 when absent */
gr_status ox_attr_ints(ox_ctx *c, const char *name, const int64_t **out, int *n);
/* Number of node inputs, and the ox value of input i (-1 when absent or empty). */
int ox_n_in(const ox_ctx *c);
int ox_in(const ox_ctx *c, int i);
/* The known tensor behind input i; fails (naming the node and input) when the
 * input is absent, computed at run time, or depends on a symbolic dim. */
gr_status ox_need_const(ox_ctx *c, int i, const char *what, const ox_tensor **out);
/* Reads a known integer tensor as int64s (at most max). */
gr_status ox_need_ints(ox_ctx *c, int i, const char *what, int64_t *vals, int max, int *n);
/* Reads an integer tensor known at import time whose elements may be
 * symbolic (expressions over symbolic dims) as dims (at most max). */
gr_status ox_need_sints(ox_ctx *c, int i, const char *what, gr_dim *vals, int max, int *n);
/* Is element i of t symbolic (an expression or unknown)? */
static inline bool ox_elem_sym(const ox_tensor *t, int64_t i) { return t->sym && t->sym[i] != GR_SYM_NONE; }
/* Does t hold any symbolic element? */
bool ox_tensor_has_sym(const ox_tensor *t);
/* Element i as a dim (concrete or an expression); false when it is OX_UNKNOWN. */
bool ox_elem_dim(const ox_tensor *t, int64_t i, gr_dim *out);
/* Sets element j (an integer or float tensor) to d. */
gr_status ox_set_elem(ox_tensor *t, int64_t j, gr_dim d);
/* The first symbolic element's text ("seq + 1", or "unknown"), for messages. */
void ox_sym_desc(ox_ctx *c, const ox_tensor *t, char *buf, size_t n);

/* The tensor of the current Constant node (value, value_float(s), value_int(s)). */
gr_status ox_constant_tensor(ox_ctx *c, ox_tensor **out);
/* Converts the current node (c->node). */
gr_status ox_convert_node(ox_ctx *c);
/* Helpers of onnx-ops.c that the converters of onnx-conv.c use. */
gr_status ox_in_ir(ox_ctx *c, int i, int *ir);
gr_status ox_emit(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, int n_out,
                  const char *const *out_names, bool last, int *outs);
gr_status ox_emit1(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs);
gr_status ox_bind_outputs(ox_ctx *c, int n, const int *irs, const char *why);
void ox_out_names(const ox_ctx *c, const char **names, int n);
gr_status ox_check_arity(ox_ctx *c, int min_in, int max_in, int min_out);
gr_status ox_scalar_const_ir(ox_ctx *c, gr_dtype dt, double v, int *ir);
gr_status ox_const_ir(ox_ctx *c, ox_tensor *t, int *ir); /* consumes t */
gr_status ox_emit2(ox_ctx *c, gr_op op, int a, int b, int *out);
gr_status ox_iota_ir(ox_ctx *c, gr_dim n, int *ir); /* range(0, n) as i64 */
gr_status ox_reshape_ir(ox_ctx *c, int x, const gr_dim *dims, int n, int *out);
gr_status ox_unsqueeze_ir(ox_ctx *c, int x, int64_t axis, int *out);
gr_status ox_where_ir(ox_ctx *c, int cond, int a, int b, int *out);
gr_status ox_dims_product(ox_ctx *c, const gr_dim *dims, int lo, int hi, gr_dim *out);
gr_status ox_dim_scalar_ir(ox_ctx *c, gr_dim d, gr_dtype dt, int *ir);
/* linear indices [..] of index tuples idx [.., k] over dims[0..k) (negatives wrapped) */
gr_status ox_nd_linear_index(ox_ctx *c, int idx, const gr_dim *dims, int k, int *lin);
gr_status ox_check_target_sshape(ox_ctx *c, const char *what, const gr_dim *dims, int n);
/* an ints attribute from possibly symbolic dims (values into v, expressions into e) */
gr_ir_attr ox_attr_sints(const char *name, const gr_dim *d, int n, int64_t *v, int32_t *e);
/* ---- onnx-einsum.c, onnx-breadth.c, onnx-control.c ---- */
gr_status ox_cv_einsum(ox_ctx *c, gr_op op);
gr_status ox_cv_arg(ox_ctx *c, gr_op op);
gr_status ox_cv_mod(ox_ctx *c, gr_op op);
/* onnx-activations.c */
gr_status ox_cv_clip(ox_ctx *c, gr_op op);
gr_status ox_cv_hard_sigmoid(ox_ctx *c, gr_op op);
gr_status ox_cv_hard_swish(ox_ctx *c, gr_op op);
gr_status ox_cv_leaky_relu(ox_ctx *c, gr_op op);
gr_status ox_cv_prelu(ox_ctx *c, gr_op op);
gr_status ox_cv_elu(ox_ctx *c, gr_op op);
gr_status ox_cv_celu(ox_ctx *c, gr_op op);
gr_status ox_cv_softsign(ox_ctx *c, gr_op op);
gr_status ox_cv_mish(ox_ctx *c, gr_op op);
gr_status ox_cv_thresholded_relu(ox_ctx *c, gr_op op);
gr_status ox_cv_sign(ox_ctx *c, gr_op op);
gr_status ox_cv_round(ox_ctx *c, gr_op op);
gr_status ox_cv_sum(ox_ctx *c, gr_op op);
gr_status ox_cv_mean(ox_ctx *c, gr_op op);
gr_status ox_cv_log_softmax(ox_ctx *c, gr_op op);

gr_status ox_cv_tile(ox_ctx *c, gr_op op);
gr_status ox_cv_one_hot(ox_ctx *c, gr_op op);
gr_status ox_cv_top_k(ox_ctx *c, gr_op op);
gr_status ox_cv_scatter_elements(ox_ctx *c, gr_op op);
gr_status ox_cv_scatter_nd(ox_ctx *c, gr_op op);
gr_status ox_cv_nonzero(ox_ctx *c, gr_op op);
/* Range whose start/limit/delta are computed at run time (a data-dependent length). */
gr_status ox_range_runtime(ox_ctx *c);
/* A data-dependent symbol named base_<node>, computed at run time by count_ir (range [0, hi]). */
gr_status ox_data_symbol(ox_ctx *c, const char *base, int count_ir, int64_t hi, gr_dim *out);
gr_status ox_cv_if(ox_ctx *c, gr_op op);
gr_status ox_cv_loop(ox_ctx *c, gr_op op);
gr_status ox_cv_scan(ox_ctx *c, gr_op op);
/* ---- onnx-conv.c: convolutions, pools, normalizations, Pad, Resize ---- */
gr_status ox_cv_conv(ox_ctx *c, gr_op op);
gr_status ox_cv_conv_transpose(ox_ctx *c, gr_op op);
gr_status ox_cv_pool(ox_ctx *c, gr_op op);
gr_status ox_cv_global_pool(ox_ctx *c, gr_op op);
gr_status ox_cv_batch_norm(ox_ctx *c, gr_op op);
gr_status ox_cv_instance_norm(ox_ctx *c, gr_op op);
gr_status ox_cv_group_norm(ox_ctx *c, gr_op op);
gr_status ox_cv_pad(ox_ctx *c, gr_op op);
gr_status ox_cv_resize(ox_ctx *c, gr_op op);

/* ---- onnx.c: subgraphs ------------------------------------------------------------ */
/* Imports body gp as an IR subgraph of c->g (an If branch): its own graph, outer
 * values read as captures. `what` names it in messages. */
gr_status ox_import_subgraph(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, gr_graph **out);
/* Inlines body gp into c's graph in a scope of its own: its inputs bound to
 * copies of in[0..gp->n_input), its outputs copied to out[0..gp->n_output)
 * (names left NULL; release them with ox_value_clear). */
gr_status ox_import_loop_body(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, int n_state, const int *state_ir,
                              gr_graph **out, bool *cond_true);
gr_status ox_import_scan_body(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, int n_state, const int *state_ir, int n_scan_in,
                              const int *xs_ir, const int *axes, gr_graph **out);
gr_status ox_inline_graph(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, const ox_value *in, ox_value *out);
/* Copies a value's meaning (IR value, constant data, reason, sequence) into dst. */
gr_status ox_value_copy(ox_value *dst, const ox_value *src);
void ox_value_clear(ox_value *v);

/* ---- onnx-fold.c ----------------------------------------------------------------------------------- */
/* Tries to evaluate the current node at import time. *folded = true when it
 * did (outputs are bound to known tensors); false leaves the node to the op
 * converters. */
gr_status ox_try_fold(ox_ctx *c, bool *folded);
/* Shape of ox value vi as an i64 tensor (elements of symbolic dims unknown);
 * NULL *out when the value has no type yet. */
gr_status ox_shape_of(ox_ctx *c, int vi, ox_tensor **out);
/* Casts a known tensor (numeric conversion; unknown marks kept). */
gr_status ox_tensor_cast(const ox_tensor *t, gr_dtype to, ox_tensor **out);

#endif
