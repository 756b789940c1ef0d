/* passes/lower-impl.h — private helpers shared by the lowering files.
 *
 * lower.c            driver, step list, kernel builder, views, copies, temporaries
 * lower-elementwise.c unary / binary / compare / where / cast
 * lower-reduce.c     reductions, softmax, layer_norm
 * lower-movement.c   transpose, expand, slice, concat, split, gather, gather_elements, trilu
 * lower-gen.c        fill, range, random_*, matmul
 * lower-window.c     conv, conv_transpose, max_pool, avg_pool, pad, resize
 *
 * Every lowering builds kernels through a gr_lkb (kernel + the step arguments
 * binding each of its params, filled in lock step) and hands them to
 * lw_emit_kernel, which appends the step or frees the kernel on failure.
 */
#ifndef GR_LOWER_IMPL_H
#define GR_LOWER_IMPL_H

#include "passes/passes.h"

typedef struct {
    gr_graph *g;
    int node;             /* index of the node being lowered */
    gr_step_list *out;
    int n_kernels;        /* kernels made for this node so far (names) */
    bool activation_matmul_kernels; /* gr_pass_lower_opts: float matmuls of two computed operands as kernels */
    char where[320];      /* "node 'x' (op)" for messages: formatted on first use (lw_where) */
} gr_lctx;

/* "node 'x' (op) at file:line:col": lowering runs for every node of every plan, and only a
 * failure needs the text, so it is formatted then */
static inline const char *lw_where(const gr_lctx *c) {
    gr_lctx *m = (gr_lctx *)c;
    if (!m->where[0]) gr_ir_node_where(m->g, &m->g->nodes.data[m->node], m->where, sizeof m->where);
    return m->where;
}

/* A kernel under construction and the args that bind its params. */
typedef struct {
    gr_kernel *k;
    gr_step_arg args[GR_KMAX_PARAMS];
} gr_lkb;

static inline const gr_ir_node *lw_node(const gr_lctx *c) { return &c->g->nodes.data[c->node]; }
static inline gr_ir_value *lw_val(const gr_lctx *c, int v) { return &c->g->values.data[v]; }
static inline int lw_in(const gr_lctx *c, int i) { return lw_node(c)->in[i]; }
static inline int lw_out(const gr_lctx *c, int i) { return lw_node(c)->out[i]; }

/* ---- shapes --------------------------------------------------------------------- */
int lw_shape(const gr_lctx *c, int v, int64_t *dims); /* returns ndim */
int64_t lw_numel(const gr_lctx *c, int v);
void lw_rowmajor(int ndim, const int64_t *dims, int64_t *strides);
/* Strides reading value v (right-aligned) broadcast to an iteration space of out_ndim dims. */
/* Strides reading value v broadcast to out_dims (stride 0 where v broadcasts). out_var: the
 * var_dims bits of the out dims (ir.h), 0 when unknown: a dim of v that is symbolic keeps its
 * row-major stride where it is 1 at this binding, and a constant-1 dim of v broadcast to a
 * symbolic dim gets stride 0 even where that dim is 1, so every binding gets kernels of one
 * layout (kir-generic.c). */
uint32_t lw_var_space(const gr_lctx *c, int ndim, const int64_t *dims);
void lw_bcast_strides(const gr_lctx *c, int v, int out_ndim, const int64_t *out_dims, uint32_t out_var, int64_t *strides);
/* Normalizes axis (negative counts from the end) into [0, ndim); error naming the node. */
gr_status lw_axis(const gr_lctx *c, int64_t axis, int ndim, int *out);

/* ---- kernel builder ---------------------------------------------------------------- */
/* New kernel named k<node>_<op>[_<n>], outer space = dims, plus the n_points SHAPE param. */
gr_status lw_kernel_begin(gr_lctx *c, gr_lkb *b, int n_outer, const int64_t *outer);
gr_status lw_param_buffer(gr_lkb *b, int value, gr_dtype t, int64_t elem_offset, bool written, int *out);
gr_status lw_param_host_scalar(gr_lkb *b, int value, gr_dtype t, int *out);
/* Plain load of value v through a fresh buffer param. */
gr_status lw_load(gr_lctx *c, gr_lkb *b, int v, const gr_kaccess *acc, int *out);
/* Store stage into value v through a fresh buffer param. */
gr_status lw_store(gr_lctx *c, gr_lkb *b, int v, int value_node, const gr_kaccess *acc, bool over_inner);
/* Contiguous row-major store of value v over the outer space (store of an elementwise kernel). */
gr_status lw_store_contig(gr_lctx *c, gr_lkb *b, int v, int value_node);
/* Appends the kernel step (or destroys the kernel on failure; b->k is NULL after). */
gr_status lw_emit_kernel(gr_lctx *c, gr_lkb *b);
void lw_abort_kernel(gr_lkb *b);
/* A constant node of dtype t with value taken from a float (floats) or its integer part. */
gr_status lw_const(gr_kernel *k, gr_dtype t, double v, int *out);
/* f16 / bf16 compute in f32 when they need an accumulator. */
gr_dtype lw_acc_dtype(gr_dtype t);

/* ---- steps without kernels ------------------------------------------------------------ */
gr_status lw_emit_alias(gr_lctx *c, int src, int64_t elem_offset, int dst);
/* Adds a typed temporary value (producer = this node, out_slot = -1). */
gr_status lw_temp_value(gr_lctx *c, gr_dtype t, int ndim, const int64_t *dims, int *out);
/* Materializes src broadcast (numpy, right-aligned) to dims and converted to t
 * into a fresh temporary value; returns it in *out. */
gr_status lw_materialize(gr_lctx *c, int src, gr_dtype t, int ndim, const int64_t *dims, int *out);

/* ---- per-family lowerings ---------------------------------------------------------------- */
/* One lowering per op: the `lower` column of ir/ops.def (lower.c builds the table). */
gr_status lw_lower_view(gr_lctx *c);    /* identity, reshape, squeeze, unsqueeze: an ALIAS step */
gr_status lw_lower_control(gr_lctx *c); /* if, loop: unsupported until the control-flow passes remove them */
gr_status lw_lower_elementwise(gr_lctx *c);
gr_status lw_lower_reduce(gr_lctx *c);
gr_status lw_lower_softmax(gr_lctx *c);
gr_status lw_lower_layer_norm(gr_lctx *c);
gr_status lw_lower_arg_reduce(gr_lctx *c); /* arg_max, arg_min */
gr_status lw_lower_transpose(gr_lctx *c);
gr_status lw_lower_expand(gr_lctx *c);
gr_status lw_lower_slice(gr_lctx *c);
gr_status lw_lower_concat(gr_lctx *c);
gr_status lw_lower_split(gr_lctx *c);
gr_status lw_lower_gather(gr_lctx *c);
gr_status lw_lower_gather_elements(gr_lctx *c);
gr_status lw_lower_trilu(gr_lctx *c);
gr_status lw_lower_fill(gr_lctx *c);
gr_status lw_lower_range(gr_lctx *c);
gr_status lw_lower_random(gr_lctx *c);
gr_status lw_lower_matmul(gr_lctx *c);
gr_status lw_lower_attention(gr_lctx *c); /* one GR_LIB_ATTENTION library call (lower-gen.c) */
gr_status lw_lower_collective(gr_lctx *c); /* all_reduce, all_gather: one library call (lower-collective.c) */
gr_status lw_lower_sample(gr_lctx *c);     /* sample: one GR_LIB_SAMPLE library call (lower-sample.c) */
gr_status lw_lower_beam_step(gr_lctx *c);    /* beam_step: one GR_LIB_BEAM_STEP library call (lower-beam.c) */
gr_status lw_lower_beam_reorder(gr_lctx *c); /* beam_reorder: one GR_LIB_BEAM_REORDER library call (lower-beam.c) */
gr_status lw_lower_cache_write(gr_lctx *c);  /* cache_write: a scatter kernel over new's elements (lower-movement.c) */
/* lower-window.c: conv, conv_transpose, max_pool, avg_pool, pad, resize */
gr_status lw_lower_conv(gr_lctx *c);
gr_status lw_lower_pool(gr_lctx *c);
gr_status lw_lower_pad(gr_lctx *c);
gr_status lw_lower_resize(gr_lctx *c);

#endif
