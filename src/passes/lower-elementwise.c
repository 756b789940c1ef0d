/* passes/lower-elementwise — unary, binary, comparison, logic, where and cast
 * nodes become one kernel over the output's shape: each input is a broadcast
 * load (stride 0 along broadcast dims), a 1-element @host input is a scalar
 * param read at launch (GR_ARG_HOST_SCALAR), and a 1-element constant is
 * folded into the expression as a CONST node (so long elementwise chains with
 * literal coefficients do not run out of kernel params once fused). */
#include "passes/lower-impl.h"
#include <string.h>

/* Expression node reading input value v, broadcast to the kernel's outer space. */
static gr_status elementwise_input(gr_lctx *c, gr_lkb *b, int v, int *out) {
    const gr_ir_value *x = lw_val(c, v);
    /* constants first: a 1-element `const ... @host` is known now, and the
     * runtime only reads host scalars from bound inputs (found by diff_fuzz) */
    if (gr_ir_value_numel(x) == 1 && x->kind == GR_VAL_CONST && x->data) {
        if (gr_dtype_is_float(x->dtype)) return gr_kx_const_f(b->k, x->dtype, gr_load_f64(x->data, x->dtype, 0), out);
        return gr_kx_const_i(b->k, x->dtype, gr_load_i64(x->data, x->dtype, 0), out);
    }
    if (gr_ir_value_numel(x) == 1 && x->placement == GR_PLACE_HOST) {
        int p;
        GR_TRY(lw_param_host_scalar(b, v, x->dtype, &p));
        return gr_kx_param(b->k, p, out);
    }
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    lw_bcast_strides(c, v, b->k->n_outer, b->k->outer, acc.stride);
    return lw_load(c, b, v, &acc, out);
}

static bool unary_fn(gr_op op, gr_kunary *fn) {
    switch (op) {
    case GR_OP_NEG: *fn = GR_KU_NEG; return true;
    case GR_OP_ABS: *fn = GR_KU_ABS; return true;
    case GR_OP_EXP: *fn = GR_KU_EXP; return true;
    case GR_OP_LOG: *fn = GR_KU_LOG; return true;
    case GR_OP_SQRT: *fn = GR_KU_SQRT; return true;
    case GR_OP_RSQRT: *fn = GR_KU_RSQRT; return true;
    case GR_OP_RECIPROCAL: *fn = GR_KU_RECIP; return true;
    case GR_OP_TANH: *fn = GR_KU_TANH; return true;
    case GR_OP_SIGMOID: *fn = GR_KU_SIGMOID; return true;
    case GR_OP_ERF: *fn = GR_KU_ERF; return true;
    case GR_OP_RELU: *fn = GR_KU_RELU; return true;
    case GR_OP_GELU: *fn = GR_KU_GELU; return true;
    case GR_OP_SELU: *fn = GR_KU_SELU; return true;
    case GR_OP_SILU: *fn = GR_KU_SILU; return true;
    case GR_OP_SIN: *fn = GR_KU_SIN; return true;
    case GR_OP_COS: *fn = GR_KU_COS; return true;
    case GR_OP_ISNAN: *fn = GR_KU_ISNAN; return true;
    case GR_OP_NOT: *fn = GR_KU_NOT; return true;
    default: return false;
    }
}

static bool binary_fn(gr_op op, gr_kbinary *fn) {
    switch (op) {
    case GR_OP_ADD: *fn = GR_KB_ADD; return true;
    case GR_OP_SUB: *fn = GR_KB_SUB; return true;
    case GR_OP_MUL: *fn = GR_KB_MUL; return true;
    case GR_OP_DIV: *fn = GR_KB_DIV; return true;
    case GR_OP_POW: *fn = GR_KB_POW; return true;
    case GR_OP_MIN: *fn = GR_KB_MIN; return true;
    case GR_OP_MAX: *fn = GR_KB_MAX; return true;
    case GR_OP_EQUAL: *fn = GR_KB_EQ; return true;
    case GR_OP_LESS: *fn = GR_KB_LT; return true;
    case GR_OP_LESS_EQUAL: *fn = GR_KB_LE; return true;
    case GR_OP_GREATER: *fn = GR_KB_GT; return true;
    case GR_OP_GREATER_EQUAL: *fn = GR_KB_GE; return true;
    case GR_OP_AND: *fn = GR_KB_AND; return true;
    case GR_OP_OR: *fn = GR_KB_OR; return true;
    default: return false;
    }
}

/* selu with non-default alpha/gamma: gamma * (x > 0 ? x : alpha * (exp(x) - 1)) */
static gr_status selu_general(gr_kernel *k, gr_dtype t, int x, double alpha, double gamma, int *out) {
    int zero, one, ca, cg, pos, ex, em1, neg, sel;
    GR_TRY(gr_kx_const_f(k, t, 0.0, &zero));
    GR_TRY(gr_kx_const_f(k, t, 1.0, &one));
    GR_TRY(gr_kx_const_f(k, t, alpha, &ca));
    GR_TRY(gr_kx_const_f(k, t, gamma, &cg));
    GR_TRY(gr_kx_binary(k, GR_KB_GT, GR_BOOL, x, zero, &pos));
    GR_TRY(gr_kx_unary(k, GR_KU_EXP, t, x, &ex));
    GR_TRY(gr_kx_binary(k, GR_KB_SUB, t, ex, one, &em1));
    GR_TRY(gr_kx_binary(k, GR_KB_MUL, t, ca, em1, &neg));
    GR_TRY(gr_kx_select(k, t, pos, x, neg, &sel));
    return gr_kx_binary(k, GR_KB_MUL, t, cg, sel, out);
}

static gr_status elementwise_expr(gr_lctx *c, gr_lkb *b, int *out) {
    const gr_ir_node *n = lw_node(c);
    gr_dtype t = lw_val(c, lw_out(c, 0))->dtype;
    int a[3];
    for (int i = 0; i < n->n_in && i < 3; i++) GR_TRY(elementwise_input(c, b, n->in[i], &a[i]));
    gr_kunary ufn;
    gr_kbinary bfn;
    if (n->op == GR_OP_CAST) return gr_kx_cast(b->k, t, a[0], out);
    if (n->op == GR_OP_WHERE) return gr_kx_select(b->k, t, a[0], a[1], a[2], out);
    if (n->op == GR_OP_GELU) {
        const char *approx;
        GR_TRY(gr_ir_attr_string(c->g, n, "approximate", "none", &approx));
        if (strcmp(approx, "none") && strcmp(approx, "tanh"))
            return gr_error(GR_ERR_INVALID, "%s: approximate must be \"none\" or \"tanh\", got \"%s\"", c->where, approx);
        return gr_kx_unary(b->k, strcmp(approx, "tanh") ? GR_KU_GELU : GR_KU_GELU_TANH, t, a[0], out);
    }
    if (n->op == GR_OP_SELU) {
        const double def_alpha = 1.67326319217681884765625, def_gamma = 1.05070102214813232421875;
        double alpha, gamma;
        GR_TRY(gr_ir_attr_float(c->g, n, "alpha", def_alpha, &alpha));
        GR_TRY(gr_ir_attr_float(c->g, n, "gamma", def_gamma, &gamma));
        if (alpha != def_alpha || gamma != def_gamma) return selu_general(b->k, t, a[0], alpha, gamma, out);
        return gr_kx_unary(b->k, GR_KU_SELU, t, a[0], out);
    }
    if (unary_fn(n->op, &ufn)) return gr_kx_unary(b->k, ufn, t, a[0], out);
    if (binary_fn(n->op, &bfn)) return gr_kx_binary(b->k, bfn, t, a[0], a[1], out);
    return gr_error(GR_ERR_UNSUPPORTED, "%s: not an elementwise op", c->where);
}

gr_status lw_lower_elementwise(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int want = n->op == GR_OP_WHERE ? 3 : gr_op_get(n->op)->kind == GR_OPK_UNARY ? 1 : 2;
    if (n->n_in != want || n->n_out != 1) return gr_error(GR_ERR_INVALID, "%s: expects %d inputs and 1 output", c->where, want);
    for (int i = 0; i < want; i++)
        if (n->in[i] < 0) return gr_error(GR_ERR_INVALID, "%s: input %d is missing", c->where, i);
    int y = lw_out(c, 0);
    if (lw_numel(c, y) == 0) return GR_OK;
    int64_t dims[GR_MAX_DIMS];
    int nd = lw_shape(c, y, dims);
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, nd, dims));
    int e;
    gr_status st = elementwise_expr(c, &b, &e);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, e);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}
