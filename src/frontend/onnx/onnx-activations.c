/* frontend/onnx/onnx-activations — element-wise ONNX ops that exporters emit for
 * activations and rounding (Clip for ReLU6, HardSwish/HardSigmoid for MobileNetV3,
 * LeakyRelu, PRelu, Elu, Celu, Softsign, Mish, ThresholdedRelu, Sign, Round, Sum,
 * Mean) and LogSoftmax, decomposed into IR ops at import so the simulator and the
 * CUDA backend run the same fused element-wise kernels (fusion merges the chains).
 * Formulas are the ONNX operator definitions; NaN propagates as numpy's does. */
#include "frontend/onnx/onnx-impl.h"
#include <string.h>

static const gr_ir_value *irv(const ox_ctx *c, int ir) { return &c->g->values.data[ir]; }

/* x's dtype, which must be a float type (most of these ops are float-only). */
static gr_status float_input(ox_ctx *c, int i, int *x, gr_dtype *dt) {
    GR_TRY(ox_in_ir(c, i, x));
    const gr_ir_value *v = irv(c, *x);
    *dt = v->typed ? v->dtype : GR_F32;
    if (v->typed && !gr_dtype_is_float(v->dtype))
        return ox_node_error(c, GR_ERR_SHAPE, "input %d must be a float tensor, got %s", i, gr_dtype_name(v->dtype));
    return GR_OK;
}

static gr_status unary(ox_ctx *c, gr_op op, int x, int *out) {
    return ox_emit(c, op, 1, &x, 0, NULL, 1, NULL, false, out);
}

static gr_status scalar(ox_ctx *c, gr_dtype dt, double v, int *out) { return ox_scalar_const_ir(c, dt, v, out); }

/* a*x + b with scalar a, b (skips the identities) */
static gr_status affine(ox_ctx *c, gr_dtype dt, int x, double a, double b, int *out) {
    int k, y = x;
    if (a != 1.0) {
        GR_TRY(scalar(c, dt, a, &k));
        GR_TRY(ox_emit2(c, GR_OP_MUL, y, k, &y));
    }
    if (b != 0.0) {
        GR_TRY(scalar(c, dt, b, &k));
        GR_TRY(ox_emit2(c, GR_OP_ADD, y, k, &y));
    }
    *out = y;
    return GR_OK;
}

/* max(lo, min(hi, x)) as ONNX Clip defines it: min(max(x, lo), hi); a NaN x stays NaN */
static gr_status clamp(ox_ctx *c, int x, int lo, int hi, int *out) {
    int y = x;
    if (lo >= 0) GR_TRY(ox_emit2(c, GR_OP_MAX, y, lo, &y));
    if (hi >= 0) GR_TRY(ox_emit2(c, GR_OP_MIN, y, hi, &y));
    *out = y;
    return GR_OK;
}

/* the node's output, named as in the file (identity lowers to a view: no kernel) */
static gr_status finish(ox_ctx *c, int y) { return ox_emit1(c, GR_OP_IDENTITY, 1, &y, 0, NULL); }

/* Clip(x, min?, max?) (opset >= 11; graft imports opsets 13..21, so never the attribute form). */
gr_status ox_cv_clip(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 3, 1));
    int x, lo = -1, hi = -1;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    gr_dtype dt = xv->typed ? xv->dtype : GR_F32;
    if (xv->typed && dt == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "Clip of bool");
    for (int i = 1; i < 3 && i < ox_n_in(c); i++) {
        if (ox_in(c, i) < 0) continue;
        int b;
        GR_TRY(ox_in_ir(c, i, &b));
        const gr_ir_value *bv = irv(c, b);
        if (bv->typed && gr_ir_value_numel(bv) != 1)
            return ox_node_error(c, GR_ERR_SHAPE, "input %d (%s) must be a scalar", i, i == 1 ? "min" : "max");
        if (bv->typed && xv->typed && bv->dtype != dt)
            return ox_node_error(c, GR_ERR_SHAPE, "input %d has dtype %s, input has %s", i, gr_dtype_name(bv->dtype),
                                 gr_dtype_name(dt));
        if (i == 1) lo = b;
        else hi = b;
    }
    int y;
    if (lo < 0 && hi < 0) GR_TRY(unary(c, GR_OP_IDENTITY, x, &y));
    else GR_TRY(clamp(c, x, lo, hi, &y));
    return finish(c, y);
}

/* HardSigmoid(x; alpha=0.2, beta=0.5) = max(0, min(1, alpha*x + beta));
 * HardSwish(x) = x * HardSigmoid(x; 1/6, 0.5). */
static gr_status hard_sigmoid(ox_ctx *c, gr_dtype dt, int x, double alpha, double beta, int *out) {
    int t, zero, one;
    GR_TRY(affine(c, dt, x, alpha, beta, &t));
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(scalar(c, dt, 1.0, &one));
    return clamp(c, t, zero, one, out);
}

gr_status ox_cv_hard_sigmoid(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, y;
    gr_dtype dt;
    double alpha, beta;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(ox_attr_float(c, "alpha", 0.2, &alpha));
    GR_TRY(ox_attr_float(c, "beta", 0.5, &beta));
    GR_TRY(hard_sigmoid(c, dt, x, alpha, beta, &y));
    return finish(c, y);
}

gr_status ox_cv_hard_swish(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, s, y;
    gr_dtype dt;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(hard_sigmoid(c, dt, x, 1.0 / 6.0, 0.5, &s));
    GR_TRY(ox_emit2(c, GR_OP_MUL, x, s, &y));
    return finish(c, y);
}

/* where(x < 0, slope * x, x): LeakyRelu (slope = alpha attribute) and PRelu (slope tensor,
 * broadcast to x). */
static gr_status leaky(ox_ctx *c, int x, int slope, gr_dtype dt, int *out) {
    int zero, neg, sx;
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(ox_emit2(c, GR_OP_LESS, x, zero, &neg));
    GR_TRY(ox_emit2(c, GR_OP_MUL, x, slope, &sx));
    return ox_where_ir(c, neg, sx, x, out);
}

gr_status ox_cv_leaky_relu(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, a, y;
    gr_dtype dt;
    double alpha;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(ox_attr_float(c, "alpha", 0.01, &alpha));
    GR_TRY(scalar(c, dt, alpha, &a));
    GR_TRY(leaky(c, x, a, dt, &y));
    return finish(c, y);
}

gr_status ox_cv_prelu(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 2, 2, 1));
    int x, slope, y;
    gr_dtype dt;
    GR_TRY(ox_in_ir(c, 0, &x));
    GR_TRY(ox_in_ir(c, 1, &slope));
    const gr_ir_value *xv = irv(c, x), *sv = irv(c, slope);
    dt = xv->typed ? xv->dtype : GR_F32;
    if (xv->typed && (dt == GR_BOOL)) return ox_node_error(c, GR_ERR_SHAPE, "PRelu of bool");
    if (xv->typed && sv->typed && sv->dtype != dt)
        return ox_node_error(c, GR_ERR_SHAPE, "slope has dtype %s, X has %s", gr_dtype_name(sv->dtype), gr_dtype_name(dt));
    GR_TRY(leaky(c, x, slope, dt, &y));
    return finish(c, y);
}

/* Elu(x; alpha=1) = x if x >= 0 else alpha*(exp(x) - 1) (x < 0 selects: NaN stays NaN) */
gr_status ox_cv_elu(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, e, em1, zero, neg, y;
    gr_dtype dt;
    double alpha;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(ox_attr_float(c, "alpha", 1.0, &alpha));
    GR_TRY(unary(c, GR_OP_EXP, x, &e));
    GR_TRY(affine(c, dt, e, alpha, -alpha, &em1));
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(ox_emit2(c, GR_OP_LESS, x, zero, &neg));
    GR_TRY(ox_where_ir(c, neg, em1, x, &y));
    return finish(c, y);
}

/* Celu(x; alpha=1) = max(0, x) + min(0, alpha*(exp(x/alpha) - 1)) */
gr_status ox_cv_celu(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, xs, e, t, zero, pos, negp, y;
    gr_dtype dt;
    double alpha;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(ox_attr_float(c, "alpha", 1.0, &alpha));
    if (alpha == 0) return ox_node_error(c, GR_ERR_INVALID, "attribute 'alpha' must not be 0");
    GR_TRY(affine(c, dt, x, 1.0 / alpha, 0.0, &xs));
    GR_TRY(unary(c, GR_OP_EXP, xs, &e));
    GR_TRY(affine(c, dt, e, alpha, -alpha, &t));
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(ox_emit2(c, GR_OP_MAX, x, zero, &pos));
    GR_TRY(ox_emit2(c, GR_OP_MIN, t, zero, &negp));
    GR_TRY(ox_emit2(c, GR_OP_ADD, pos, negp, &y));
    return finish(c, y);
}

/* Softsign(x) = x / (1 + |x|) */
gr_status ox_cv_softsign(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, a, d, y;
    gr_dtype dt;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(unary(c, GR_OP_ABS, x, &a));
    GR_TRY(affine(c, dt, a, 1.0, 1.0, &d));
    GR_TRY(ox_emit2(c, GR_OP_DIV, x, d, &y));
    return finish(c, y);
}

/* Mish(x) = x * tanh(softplus(x)) */
gr_status ox_cv_mish(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, sp, t, y;
    gr_dtype dt;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(unary(c, GR_OP_SOFTPLUS, x, &sp));
    GR_TRY(unary(c, GR_OP_TANH, sp, &t));
    GR_TRY(ox_emit2(c, GR_OP_MUL, x, t, &y));
    return finish(c, y);
}

/* ThresholdedRelu(x; alpha=1) = x if x > alpha else 0 */
gr_status ox_cv_thresholded_relu(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, a, gt, zero, y;
    gr_dtype dt;
    double alpha;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(ox_attr_float(c, "alpha", 1.0, &alpha));
    GR_TRY(scalar(c, dt, alpha, &a));
    GR_TRY(ox_emit2(c, GR_OP_GREATER, x, a, &gt));
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(ox_where_ir(c, gt, x, zero, &y));
    return finish(c, y);
}

/* Sign(x) = 1, 0, -1 (NaN for NaN, as np.sign); integers too. */
gr_status ox_cv_sign(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, zero, one, mone, gt, lt, y;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    gr_dtype dt = xv->typed ? xv->dtype : GR_F32;
    if (xv->typed && dt == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "Sign of bool");
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(scalar(c, dt, 1.0, &one));
    GR_TRY(ox_emit2(c, GR_OP_GREATER, x, zero, &gt));
    GR_TRY(ox_emit2(c, GR_OP_LESS, x, zero, &lt));
    GR_TRY(ox_where_ir(c, gt, one, zero, &y));
    if (gr_dtype_is_float(dt) || (gr_dtype_is_int(dt) && dt != GR_U8)) { /* signed: -1 below zero */
        GR_TRY(scalar(c, dt, -1.0, &mone));
        GR_TRY(ox_where_ir(c, lt, mone, y, &y));
    }
    if (gr_dtype_is_float(dt)) {
        int nan;
        GR_TRY(unary(c, GR_OP_ISNAN, x, &nan));
        GR_TRY(ox_where_ir(c, nan, x, y, &y));
    }
    return finish(c, y);
}

/* Round(x): to the nearest integer, halves to even (np.round). r = floor(x); up when
 * x - r > 0.5, or == 0.5 and r is odd. */
gr_status ox_cv_round(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, r, d, half, two, zero, one, m, odd, gt, eq, tie, up, r1, y;
    gr_dtype dt;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(unary(c, GR_OP_FLOOR, x, &r));
    GR_TRY(ox_emit2(c, GR_OP_SUB, x, r, &d));
    GR_TRY(scalar(c, dt, 0.5, &half));
    GR_TRY(scalar(c, dt, 2.0, &two));
    GR_TRY(scalar(c, dt, 0.0, &zero));
    GR_TRY(scalar(c, dt, 1.0, &one));
    GR_TRY(ox_emit2(c, GR_OP_MOD, r, two, &m)); /* C fmod: -1, 0 or 1 */
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, m, zero, &odd));
    GR_TRY(unary(c, GR_OP_NOT, odd, &odd));
    GR_TRY(ox_emit2(c, GR_OP_GREATER, d, half, &gt));
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, d, half, &eq));
    GR_TRY(ox_emit2(c, GR_OP_AND, eq, odd, &tie));
    GR_TRY(ox_emit2(c, GR_OP_OR, gt, tie, &up));
    GR_TRY(ox_emit2(c, GR_OP_ADD, r, one, &r1));
    GR_TRY(ox_where_ir(c, up, r1, r, &y));
    return finish(c, y);
}

/* Sum(x1, ..., xn) and Mean(x1, ..., xn), broadcasting. */
static gr_status variadic_sum(ox_ctx *c, bool mean) {
    GR_TRY(ox_check_arity(c, 1, 64, 1));
    int n = ox_n_in(c), acc = -1;
    gr_dtype dt = GR_F32;
    for (int i = 0; i < n; i++) {
        if (ox_in(c, i) < 0) return ox_node_error(c, GR_ERR_INVALID, "input %d is empty", i);
        int x;
        GR_TRY(ox_in_ir(c, i, &x));
        if (irv(c, x)->typed) dt = irv(c, x)->dtype;
        if (acc < 0) acc = x;
        else GR_TRY(ox_emit2(c, GR_OP_ADD, acc, x, &acc));
    }
    if (mean && !gr_dtype_is_float(dt)) return ox_node_error(c, GR_ERR_SHAPE, "Mean of %s", gr_dtype_name(dt));
    if (mean && n > 1) {
        int k;
        GR_TRY(scalar(c, dt, (double)n, &k));
        GR_TRY(ox_emit2(c, GR_OP_DIV, acc, k, &acc));
    }
    if (n == 1) GR_TRY(unary(c, GR_OP_IDENTITY, acc, &acc));
    return finish(c, acc);
}

gr_status ox_cv_sum(ox_ctx *c, gr_op op) {
    (void)op;
    return variadic_sum(c, false);
}

gr_status ox_cv_mean(ox_ctx *c, gr_op op) {
    (void)op;
    return variadic_sum(c, true);
}

/* LogSoftmax(x; axis=-1) = d - log(sum(exp(d))) with d = x - max(x) along axis (stable). */
gr_status ox_cv_log_softmax(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x, mx, d, e, s, l, y;
    gr_dtype dt;
    int64_t axis;
    GR_TRY(float_input(c, 0, &x, &dt));
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    const gr_ir_value *xv = irv(c, x);
    if (xv->typed) {
        int64_t a = axis < 0 ? axis + xv->ndim : axis;
        if (a < 0 || a >= xv->ndim)
            return ox_node_error(c, GR_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, xv->ndim);
        axis = a;
    }
    gr_ir_attr attrs[2] = {{.name = (char *)"axes", .kind = GR_IR_ATTR_INTS, .ints = &axis, .n = 1},
                           {.name = (char *)"keepdims", .kind = GR_IR_ATTR_INT, .i = 1}};
    GR_TRY(ox_emit(c, GR_OP_REDUCE_MAX, 1, &x, 2, attrs, 1, NULL, false, &mx));
    GR_TRY(ox_emit2(c, GR_OP_SUB, x, mx, &d));
    GR_TRY(unary(c, GR_OP_EXP, d, &e));
    GR_TRY(ox_emit(c, GR_OP_REDUCE_SUM, 1, &e, 2, attrs, 1, NULL, false, &s));
    GR_TRY(unary(c, GR_OP_LOG, s, &l));
    GR_TRY(ox_emit2(c, GR_OP_SUB, d, l, &y));
    return finish(c, y);
}
