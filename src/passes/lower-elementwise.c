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
    /* a constant first, whatever its placement: its value is known now, so an
     * @host constant is a literal too (a host scalar param exists for values
     * that change between runs: host inputs) */
    if (gr_ir_value_numel(x) == 1 && x->kind == GR_VAL_CONST && x->data && !x->var_dims) {
        if (gr_dtype_is_float(x->dtype)) return gr_kx_const_f(b->k, x->dtype, gr_load_f64(x->data, x->dtype, 0), out);
        return gr_kx_const_i(b->k, x->dtype, gr_load_i64(x->data, x->dtype, 0), out);
    }
    if (gr_ir_value_numel(x) == 1 && x->placement == GR_PLACE_HOST && x->kind == GR_VAL_INPUT && !x->var_dims) {
        int p;
        GR_TRY(lw_param_host_scalar(b, v, x->dtype, &p));
        return gr_kx_param(b->k, p, out);
    }
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    const gr_ir_value *y = lw_val(c, lw_out(c, 0));
    uint32_t out_var = y->ndim == b->k->n_outer ? y->var_dims : 0;
    lw_bcast_strides(c, v, b->k->n_outer, b->k->outer, out_var, acc.stride);
    return lw_load(c, b, v, &acc, out);
}

/* The `kfn` column of ir/ops.def: the kernel function of a plain elementwise
 * op (-1 where elementwise_expr builds the expression itself). */
static const int op_kfn[] = {
#define GR_OP_DEF(id, name, kind, min_in, max_in, min_out, max_out, shape, lower, kfn, attrs) [GR_OP_##id] = kfn,
#include "ir/ops.def"
#undef GR_OP_DEF
};
_Static_assert(sizeof op_kfn / sizeof op_kfn[0] == GR_OP_COUNT, "ir/ops.def: a kfn per op");

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

/* pow(x, 2) and pow(x, 3) of a float x with a literal exponent become x*x and x*x*x, as
 * PyTorch's pow with a scalar exponent (pow_tensor_scalar) and Inductor compute them. Why:
 * a shape-generic kernel reads the exponent from a slot at launch, so CUDA's powf keeps its
 * whole general path (log2, exp2, special cases): ~70% of the instructions of GPT-2's
 * tanh-gelu kernel (x + 0.044715 x^3), which made it compute-bound at 3x its memory time
 * on the H100; likewise Llama's RMSNorm (mean of x^2). Done here, at lowering, so the
 * simulator and every later pass see the same multiplications. */
static gr_status pow_expr(gr_kernel *k, gr_dtype t, int x, int e, int *out) {
    const gr_kexpr *ex = &k->nodes.data[e];
    double ev = ex->op != GR_KX_CONST ? 0.0 : gr_dtype_is_float(ex->dtype) ? ex->f : (double)ex->i;
    if (gr_dtype_is_float(t) && k->nodes.data[x].dtype == t && ex->op == GR_KX_CONST && (ev == 2.0 || ev == 3.0)) {
        int sq;
        GR_TRY(gr_kx_binary(k, GR_KB_MUL, t, x, x, &sq));
        if (ev == 2.0) {
            *out = sq;
            return GR_OK;
        }
        return gr_kx_binary(k, GR_KB_MUL, t, sq, x, out);
    }
    return gr_kx_binary(k, GR_KB_POW, t, x, e, out);
}

static gr_status elementwise_expr(gr_lctx *c, gr_lkb *b, int *out) {
    const gr_ir_node *n = lw_node(c);
    gr_dtype t = lw_val(c, lw_out(c, 0))->dtype;
    int a[3];
    for (int i = 0; i < n->n_in && i < 3; i++) GR_TRY(elementwise_input(c, b, n->in[i], &a[i]));
    if (n->op == GR_OP_CAST) return gr_kx_cast(b->k, t, a[0], out);
    if (n->op == GR_OP_WHERE) return gr_kx_select(b->k, t, a[0], a[1], a[2], out);
    if (n->op == GR_OP_GELU) {
        const char *approx;
        GR_TRY(gr_ir_attr_string(c->g, n, "approximate", "none", &approx));
        if (strcmp(approx, "none") && strcmp(approx, "tanh"))
            return gr_error(GR_ERR_INVALID, "%s: approximate must be \"none\" or \"tanh\", got \"%s\"", lw_where(c), approx);
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
    if (n->op == GR_OP_POW) return pow_expr(b->k, t, a[0], a[1], out);
    int kind = gr_op_get(n->op)->kind;
    if (kind == GR_OPK_UNARY && op_kfn[n->op] >= 0) return gr_kx_unary(b->k, (gr_kunary)op_kfn[n->op], t, a[0], out);
    if ((kind == GR_OPK_BINARY || kind == GR_OPK_COMPARE) && op_kfn[n->op] >= 0)
        return gr_kx_binary(b->k, (gr_kbinary)op_kfn[n->op], t, a[0], a[1], out);
    return gr_error(GR_ERR_UNSUPPORTED, "%s: not an elementwise op", lw_where(c));
}

gr_status lw_lower_elementwise(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int want = n->op == GR_OP_WHERE ? 3 : gr_op_get(n->op)->kind == GR_OPK_UNARY ? 1 : 2;
    if (n->n_in != want || n->n_out != 1) return gr_error(GR_ERR_INVALID, "%s: expects %d inputs and 1 output", lw_where(c), want);
    for (int i = 0; i < want; i++)
        if (n->in[i] < 0) return gr_error(GR_ERR_INVALID, "%s: input %d is missing", lw_where(c), i);
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
