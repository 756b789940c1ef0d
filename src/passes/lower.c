/* passes/lower — lowering IR nodes to steps: kernels (kernel IR), library
 * calls and views. This file holds the driver and the helpers every op
 * family uses; the families live in lower-*.c (see lower-impl.h).
 *
 * Conventions:
 *   - Every value is contiguous row-major; a view (ALIAS) is an element offset
 *     into another value. Strides are in elements; broadcasting is stride 0.
 *   - Every kernel has a SHAPE param "n" = prod(outer) (n_points_param), bound
 *     to a literal.
 *   - Kernels are named k<node>_<op>[_<i>] (unique per plan: node indices are).
 *   - A node whose output has zero elements gets no kernel step (views still
 *     get their ALIAS step so the memory planner sees them).
 */
#include "passes/lower-impl.h"
#include <stdio.h>
#include <string.h>

/* ==== shapes ========================================================================= */

int lw_shape(const gr_lctx *c, int v, int64_t *dims) {
    const gr_ir_value *x = &c->g->values.data[v];
    for (int i = 0; i < x->ndim; i++) dims[i] = x->dims[i].size;
    return x->ndim;
}

int64_t lw_numel(const gr_lctx *c, int v) { return gr_ir_value_numel(&c->g->values.data[v]); }

void lw_rowmajor(int ndim, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

void lw_bcast_strides(const gr_lctx *c, int v, int out_ndim, const int64_t *out_dims, uint32_t out_var, int64_t *strides) {
    int64_t dims[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int nd = lw_shape(c, v, dims);
    uint32_t in_var = c->g->values.data[v].var_dims;
    lw_rowmajor(nd, dims, rs);
    for (int d = 0; d < out_ndim; d++) {
        int src = d - (out_ndim - nd);
        bool bcast;
        if (src < 0) bcast = true;
        else if (dims[src] != 1) bcast = false;
        else if (out_dims[d] != 1) bcast = true;
        else if (in_var >> src & 1) bcast = false;   /* the same dim at every binding */
        else bcast = (out_var >> d & 1) != 0;        /* constant 1 against a dim that is 1 only now */
        strides[d] = bcast ? 0 : rs[src];
    }
}

gr_status lw_axis(const gr_lctx *c, int64_t axis, int ndim, int *out) {
    int64_t a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim)
        return gr_error(GR_ERR_SHAPE, "%s: axis %lld out of range for rank %d", lw_where(c), (long long)axis, ndim);
    *out = (int)a;
    return GR_OK;
}

gr_dtype lw_acc_dtype(gr_dtype t) { return (t == GR_F16 || t == GR_BF16) ? GR_F32 : t; }

/* ==== kernel builder ====================================================================== */

/* Symbolic dims of a loop nest over `dims`: those of the node's output, or else of an input,
 * of that very shape (the usual case: elementwise ops, copies, gathers); 0 (all fixed) when
 * no value has it. */
uint32_t lw_var_space(const gr_lctx *c, int ndim, const int64_t *dims) {
    const gr_ir_node *n = lw_node(c);
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass == 0 ? n->n_out : n->n_in;
        for (int i = 0; i < cnt; i++) {
            int v = pass == 0 ? n->out[i] : n->in[i];
            if (v < 0) continue;
            const gr_ir_value *x = &c->g->values.data[v];
            if (x->ndim != ndim || !x->var_dims) continue;
            bool same = true;
            for (int d = 0; d < ndim && same; d++) same = x->dims[d].size == dims[d];
            if (same) return x->var_dims;
        }
    }
    return 0;
}

gr_status lw_kernel_begin(gr_lctx *c, gr_lkb *b, int n_outer, const int64_t *outer) {
    memset(b, 0, sizeof *b);
    const gr_ir_node *n = lw_node(c);
    /* k<node>_<op>[_<i>] (without snprintf: every plan of a symbolic model names its kernels) */
    char name[64], part[40];
    gr_name_copy(name, sizeof name, "k", c->node);
    size_t at = strlen(name);
    gr_name_copy(part, sizeof part, "_", -1);
    gr_name_copy(part + 1, sizeof part - 1, gr_op_get(n->op)->name, -1);
    gr_name_copy(name + at, sizeof name - at, part, -1);
    if (c->n_kernels > 0) {
        at = strlen(name);
        gr_name_copy(name + at, sizeof name - at, "_", c->n_kernels);
    }
    c->n_kernels++;
    GR_TRY(gr_kernel_create(name, &b->k));
    gr_kernel *k = b->k;
    k->source_node = c->node;
    k->n_outer = n_outer;
    for (int d = 0; d < n_outer; d++) k->outer[d] = outer[d];
    k->var_outer = lw_var_space(c, n_outer, outer);
    int p;
    gr_status st = gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &p);
    if (st != GR_OK) {
        lw_abort_kernel(b);
        return st;
    }
    k->n_points_param = p;
    b->args[p].kind = GR_ARG_LITERAL;
    b->args[p].value = -1;
    b->args[p].literal.i = gr_kernel_points(k);
    return GR_OK;
}

void lw_abort_kernel(gr_lkb *b) {
    gr_kernel_destroy(b->k);
    b->k = NULL;
}

gr_status lw_param_buffer(gr_lkb *b, int value, gr_dtype t, int64_t elem_offset, bool written, int *out) {
    char name[24];
    gr_name_copy(name, sizeof name, written ? "y" : "x", b->k->n_params);
    int p;
    GR_TRY(gr_kernel_add_param(b->k, GR_KP_BUFFER, t, name, &p));
    b->k->params[p].written = written;
    b->args[p].kind = GR_ARG_VALUE;
    b->args[p].value = value;
    b->args[p].elem_offset = elem_offset;
    *out = p;
    return GR_OK;
}

gr_status lw_param_host_scalar(gr_lkb *b, int value, gr_dtype t, int *out) {
    char name[24];
    gr_name_copy(name, sizeof name, "s", b->k->n_params);
    int p;
    GR_TRY(gr_kernel_add_param(b->k, gr_dtype_is_float(t) ? GR_KP_SCALAR_F : GR_KP_SCALAR_I, t, name, &p));
    b->args[p].kind = GR_ARG_HOST_SCALAR;
    b->args[p].value = value;
    *out = p;
    return GR_OK;
}

gr_status lw_load(gr_lctx *c, gr_lkb *b, int v, const gr_kaccess *acc, int *out) {
    int p;
    GR_TRY(lw_param_buffer(b, v, lw_val(c, v)->dtype, 0, false, &p));
    return gr_kx_load(b->k, p, acc, out);
}

gr_status lw_store(gr_lctx *c, gr_lkb *b, int v, int value_node, const gr_kaccess *acc, bool over_inner) {
    int p;
    GR_TRY(lw_param_buffer(b, v, lw_val(c, v)->dtype, 0, true, &p));
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_STORE;
    s.value = value_node;
    s.over_inner = over_inner;
    s.param = p;
    s.access = *acc;
    s.access.index = -1;
    return gr_kernel_add_stage(b->k, &s);
}

gr_status lw_store_contig(gr_lctx *c, gr_lkb *b, int v, int value_node) {
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    lw_rowmajor(b->k->n_outer, b->k->outer, acc.stride);
    return lw_store(c, b, v, value_node, &acc, false);
}

/* A zeroed step at the end of c->out, not counted yet (the caller fills it, then len++): built
 * in place, since a step is ~1.1 KB and every plan of a symbolic model lowers ~100 of them. */
static gr_step *new_step(gr_lctx *c) {
    if (gr_vec_reserve(c->out, c->out->len + 1) != GR_OK) return NULL;
    gr_step *s = &c->out->data[c->out->len];
    memset(s, 0, sizeof *s);
    return s;
}

gr_status lw_emit_kernel(gr_lctx *c, gr_lkb *b) {
    gr_status st = GR_VERIFY_EVERY_KERNEL ? gr_kernel_verify(b->k) : GR_OK;
    if (st != GR_OK) {
        if (st != GR_ERR_NOMEM) st = gr_error_prefix(GR_ERR_INTERNAL, "%s: lowering made a bad kernel: ", lw_where(c));
        lw_abort_kernel(b);
        return st;
    }
    gr_step *s = new_step(c);
    if (!s) {
        lw_abort_kernel(b);
        return gr_nomem();
    }
    s->kind = GR_STEP_KERNEL;
    s->kernel = b->k;
    s->n_args = b->k->n_params;
    memcpy(s->args, b->args, sizeof s->args);
    s->out_value = -1;
    s->node = c->node;
    c->out->len++;
    b->k = NULL;
    return GR_OK;
}

gr_status lw_const(gr_kernel *k, gr_dtype t, double v, int *out) {
    if (gr_dtype_is_float(t)) return gr_kx_const_f(k, t, v, out);
    return gr_kx_const_i(k, t, (int64_t)v, out);
}

/* ==== steps without kernels ================================================================ */

gr_status lw_emit_alias(gr_lctx *c, int src, int64_t elem_offset, int dst) {
    gr_step *s = new_step(c);
    if (!s) return gr_nomem();
    s->kind = GR_STEP_ALIAS;
    s->n_args = 1;
    s->args[0].kind = GR_ARG_VALUE;
    s->args[0].value = src;
    s->args[0].elem_offset = elem_offset;
    s->out_value = dst;
    s->node = c->node;
    c->out->len++;
    return GR_OK;
}

gr_status lw_temp_value(gr_lctx *c, gr_dtype t, int ndim, const int64_t *dims, int *out) {
    int64_t numel;
    /* a temporary (a matmul operand broadcast to the output's batch) can be
     * larger than every value of the graph: the size limit holds here too */
    if (ndim < 0 || ndim > GR_MAX_DIMS || !gr_shape_numel_checked(ndim, dims, &numel))
        return gr_error(GR_ERR_SHAPE, "%s: an intermediate of more than %lld elements would be needed", lw_where(c),
                        (long long)GR_MAX_NUMEL);
    int v;
    GR_TRY(gr_ir_add_value(c->g, NULL, GR_VAL_NODE, &v));
    gr_ir_value *x = lw_val(c, v); /* values may have moved */
    x->dtype = t;
    x->ndim = ndim;
    for (int d = 0; d < ndim; d++) x->dims[d] = (gr_dim){dims[d], GR_SYM_NONE};
    x->typed = true;
    x->placement = GR_PLACE_DEVICE;
    x->producer = c->node;
    x->out_slot = -1;
    *out = v;
    return GR_OK;
}

gr_status lw_materialize(gr_lctx *c, int src, gr_dtype t, int ndim, const int64_t *dims, int *out) {
    int v = -1; /* set by lw_temp_value (initialised: -O3 cannot see through its failure paths) */
    GR_TRY(lw_temp_value(c, t, ndim, dims, &v));
    *out = v;
    if (gr_shape_numel(ndim, dims) == 0) return GR_OK;
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, ndim, dims));
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    lw_bcast_strides(c, src, ndim, dims, 0, acc.stride);
    int x;
    gr_status st = lw_load(c, &b, src, &acc, &x);
    if (st == GR_OK && lw_val(c, src)->dtype != t) st = gr_kx_cast(b.k, t, x, &x);
    if (st == GR_OK) st = lw_store_contig(c, &b, v, x);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

/* ==== driver ================================================================================ */

static void step_free(gr_step *s) {
    gr_kernel_destroy(s->kernel);
    s->kernel = NULL;
    gr_strfree(s->reason);
    s->reason = NULL;
}

void gr_step_list_free(gr_step_list *l) {
    if (!l) return;
    for (int i = 0; i < l->len; i++) step_free(&l->data[i]);
    gr_vec_free(l);
}

static gr_status check_typed(const gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    for (int s = 0; s < n->n_in + n->n_out; s++) {
        int v = s < n->n_in ? n->in[s] : n->out[s - n->n_in];
        if (v < 0) continue;
        if (v >= c->g->values.len) return gr_error(GR_ERR_INVALID, "%s: refers to no value (%d)", lw_where(c), v);
        if (!gr_ir_value_concrete(&c->g->values.data[v]))
            return gr_error(GR_ERR_SHAPE, "%s: value '%s' has no concrete type; run shape inference first", lw_where(c),
                            c->g->values.data[v].name);
    }
    return GR_OK;
}

gr_status lw_lower_view(gr_lctx *c) {
    if (lw_numel(c, lw_in(c, 0)) != lw_numel(c, lw_out(c, 0)))
        return gr_error(GR_ERR_SHAPE, "%s: output has %lld elements, input %lld", lw_where(c),
                        (long long)lw_numel(c, lw_out(c, 0)), (long long)lw_numel(c, lw_in(c, 0)));
    return lw_emit_alias(c, lw_in(c, 0), 0, lw_out(c, 0));
}

gr_status lw_lower_control(gr_lctx *c) {
    gr_step *s = new_step(c);
    if (!s) return gr_nomem();
    GR_TRY(gr_pass_control_step(c->g, c->node, s));
    c->out->len++;
    return GR_OK;
}

/* The `lower` column of ir/ops.def. */
typedef gr_status (*lowering)(gr_lctx *c);
static const lowering lowerings[] = {
#define GR_OP_DEF(id, name, kind, min_in, max_in, min_out, max_out, shape, lower, kfn, attrs) [GR_OP_##id] = lw_lower_##lower,
#include "ir/ops.def"
#undef GR_OP_DEF
};
_Static_assert(sizeof lowerings / sizeof lowerings[0] == GR_OP_COUNT, "ir/ops.def: a lowering per op");

static gr_status lower_dispatch(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    if ((unsigned)n->op >= GR_OP_COUNT) return gr_error(GR_ERR_UNSUPPORTED, "%s: no lowering for this op", lw_where(c));
    return lowerings[n->op](c);
}

static gr_status lower_node(gr_graph *g, int node, gr_step_list *out, bool activation_matmul_kernels) {
    if (!g || !out || node < 0 || node >= g->nodes.len)
        return gr_error(GR_ERR_INVALID, "gr_pass_lower_node: bad graph or node %d", node);
    gr_lctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.node = node;
    c.out = out;
    c.activation_matmul_kernels = activation_matmul_kernels;
    int first = out->len;
    gr_status st = check_typed(&c);
    if (st == GR_OK) st = lower_dispatch(&c);
    if (st != GR_OK) { /* drop this node's partial steps */
        for (int i = first; i < out->len; i++) step_free(&out->data[i]);
        out->len = first;
    }
    return st;
}

gr_status gr_pass_lower_node(gr_graph *g, int node, gr_step_list *out) { return lower_node(g, node, out, false); }

gr_status gr_pass_lower(gr_graph *g, gr_step_list *out) {
    if (!g || !out) return gr_error(GR_ERR_INVALID, "gr_pass_lower: NULL argument");
    memset(out, 0, sizeof *out);
    return gr_pass_lower_reuse(g, out);
}

gr_status gr_pass_lower_reuse(gr_graph *g, gr_step_list *out) { return gr_pass_lower_opts(g, out, false); }

gr_status gr_pass_lower_opts(gr_graph *g, gr_step_list *out, bool activation_matmul_kernels) {
    if (!g || !out) return gr_error(GR_ERR_INVALID, "gr_pass_lower: NULL argument");
    out->len = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        gr_status st = lower_node(g, i, out, activation_matmul_kernels);
        if (st != GR_OK) {
            gr_step_list_free(out);
            return st;
        }
    }
    return GR_OK;
}
