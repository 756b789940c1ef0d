/* frontend/onnx/onnx-conv — the convolution family onto graft IR: Conv,
 * ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
 * BatchNormalization, InstanceNormalization, GroupNormalization, Pad, Resize.
 *
 * Window attributes go to the IR as they are (the IR's shape rule checks
 * them, ir/shape-window.c); what the IR does not take is resolved here:
 * ConvTranspose's auto_pad and output_shape become pads, BatchNormalization
 * becomes a multiply-add with precomputed scale and shift (folded into the
 * weights and bias of a Conv it follows), the normalizations become
 * layer_norm over reshaped views, global pools become reductions. */
#include "frontend/onnx/onnx-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static gr_ir_attr A_int(const char *name, int64_t v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INT, .i = v}; }
static gr_ir_attr A_float(const char *name, double v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_FLOAT, .f = v}; }
static gr_ir_attr A_str(const char *name, const char *s) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_STRING, .s = (char *)s};
}
static gr_ir_attr A_ints(const char *name, const int64_t *v, int n) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)v, .n = n};
}
static gr_ir_attr A_floats(const char *name, const double *v, int n) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_FLOATS, .floats = (double *)v, .n = n};
}

static const gr_ir_value *irv(const ox_ctx *c, int ir) { return &c->g->values.data[ir]; }

/* An ints attribute copied into out (at most max); *n = -1 when absent. */
static gr_status ints_attr(ox_ctx *c, const char *name, int64_t *out, int max, int *n) {
    const int64_t *v;
    GR_TRY(ox_attr_ints(c, name, &v, n));
    if (*n > max) return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' has %d values, more than %d", name, *n, max);
    for (int i = 0; i < *n; i++) out[i] = v[i];
    return GR_OK;
}

static gr_status auto_pad_attr(ox_ctx *c, char *buf, size_t n) {
    GR_TRY(ox_attr_string(c, "auto_pad", "NOTSET", buf, n));
    if (strcmp(buf, "NOTSET") && strcmp(buf, "SAME_UPPER") && strcmp(buf, "SAME_LOWER") && strcmp(buf, "VALID"))
        return ox_node_error(c, GR_ERR_INVALID, "auto_pad '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", buf);
    return GR_OK;
}

/* kernel_shape, when given, must match the weight's kernel dims */
static gr_status check_kernel_shape(ox_ctx *c, int w) {
    int64_t ks[GR_MAX_DIMS * 2];
    int nk;
    GR_TRY(ints_attr(c, "kernel_shape", ks, GR_MAX_DIMS * 2, &nk));
    if (nk < 0) return GR_OK;
    const gr_ir_value *wv = irv(c, w);
    if (!wv->typed) return GR_OK;
    bool ok = nk == wv->ndim - 2;
    for (int d = 0; ok && d < nk; d++) ok = !gr_dx_is_sym(wv->dims[2 + d]) && wv->dims[2 + d].size == ks[d];
    if (!ok) {
        char a[256] = "", b[256] = "";
        size_t pa = 0, pb = 0;
        for (int d = 0; d < nk && pa < sizeof a; d++) pa += (size_t)snprintf(a + pa, sizeof a - pa, "%s%lld", d ? "," : "", (long long)ks[d]);
        for (int d = 2; d < wv->ndim && pb < sizeof b; d++)
            pb += (size_t)snprintf(b + pb, sizeof b - pb, "%s%lld", d > 2 ? "," : "", (long long)wv->dims[d].size);
        return ox_node_error(c, GR_ERR_SHAPE, "kernel_shape [%s] does not match the weight's kernel dims [%s]", a, b);
    }
    return GR_OK;
}

/* ==== Conv ===================================================================================== */

gr_status ox_cv_conv(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 2, 3, 1));
    int in[3], n_in = 2;
    GR_TRY(ox_in_ir(c, 0, &in[0]));
    GR_TRY(ox_in_ir(c, 1, &in[1]));
    if (ox_in(c, 2) >= 0) {
        GR_TRY(ox_in_ir(c, 2, &in[2]));
        n_in = 3;
    }
    GR_TRY(check_kernel_shape(c, in[1]));
    char ap[32];
    GR_TRY(auto_pad_attr(c, ap, sizeof ap));
    int64_t strides[GR_MAX_DIMS], dil[GR_MAX_DIMS], pads[2 * GR_MAX_DIMS], group;
    int ns, nd, np;
    GR_TRY(ints_attr(c, "strides", strides, GR_MAX_DIMS, &ns));
    GR_TRY(ints_attr(c, "dilations", dil, GR_MAX_DIMS, &nd));
    GR_TRY(ints_attr(c, "pads", pads, 2 * GR_MAX_DIMS, &np));
    GR_TRY(ox_attr_int(c, "group", 1, &group));
    gr_ir_attr attrs[5];
    int na = 0;
    attrs[na++] = A_int("group", group);
    attrs[na++] = A_str("auto_pad", ap);
    if (ns >= 0) attrs[na++] = A_ints("strides", strides, ns);
    if (nd >= 0) attrs[na++] = A_ints("dilations", dil, nd);
    if (np >= 0 && !strcmp(ap, "NOTSET")) attrs[na++] = A_ints("pads", pads, np);
    return ox_emit1(c, op, n_in, in, na, attrs);
}

/* ConvTranspose: auto_pad and output_shape resolved into explicit pads (ONNX's rules, as
 * onnx.reference computes them: total = stride*(in - 1) + output_padding + eff - out; SAME_UPPER
 * puts total//2 first, SAME_LOWER last; an output_shape without auto_pad keeps the begin pads
 * and moves the end). */
gr_status ox_cv_conv_transpose(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 2, 3, 1));
    int in[3], n_in = 2;
    GR_TRY(ox_in_ir(c, 0, &in[0]));
    GR_TRY(ox_in_ir(c, 1, &in[1]));
    if (ox_in(c, 2) >= 0) {
        GR_TRY(ox_in_ir(c, 2, &in[2]));
        n_in = 3;
    }
    GR_TRY(check_kernel_shape(c, in[1]));
    const gr_ir_value *x = irv(c, in[0]), *w = irv(c, in[1]);
    if (!x->typed || !w->typed || x->ndim < 3 || w->ndim != x->ndim)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "the ranks of x and the weight must be known and equal (at least 3)");
    int s = x->ndim - 2;
    char ap[32];
    GR_TRY(auto_pad_attr(c, ap, sizeof ap));
    int64_t strides[GR_MAX_DIMS], dil[GR_MAX_DIMS], pads[2 * GR_MAX_DIMS], opad[GR_MAX_DIMS], oshape[GR_MAX_DIMS + 2], group;
    int ns, nd, np, nop, nos;
    GR_TRY(ints_attr(c, "strides", strides, GR_MAX_DIMS, &ns));
    GR_TRY(ints_attr(c, "dilations", dil, GR_MAX_DIMS, &nd));
    GR_TRY(ints_attr(c, "pads", pads, 2 * GR_MAX_DIMS, &np));
    GR_TRY(ints_attr(c, "output_padding", opad, GR_MAX_DIMS, &nop));
    GR_TRY(ints_attr(c, "output_shape", oshape, GR_MAX_DIMS + 2, &nos));
    GR_TRY(ox_attr_int(c, "group", 1, &group));
    if ((ns >= 0 && ns != s) || (nd >= 0 && nd != s) || (np >= 0 && np != 2 * s) || (nop >= 0 && nop != s))
        return ox_node_error(c, GR_ERR_INVALID, "strides, dilations, output_padding need %d values and pads %d", s, 2 * s);
    if (nos >= 0 && nos != s && nos != s + 2)
        return ox_node_error(c, GR_ERR_INVALID, "output_shape has %d values, expected %d", nos, s);
    for (int d = 0; d < s; d++) {
        if (ns < 0) strides[d] = 1;
        if (nd < 0) dil[d] = 1;
        if (nop < 0) opad[d] = 0;
        if (np < 0) pads[d] = pads[s + d] = 0;
        if (strides[d] < 1 || dil[d] < 1) return ox_node_error(c, GR_ERR_INVALID, "strides and dilations must be at least 1");
        if (gr_dx_is_sym(w->dims[2 + d])) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the weight's dims must be concrete");
    }
    bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"), upper = !strcmp(ap, "SAME_UPPER");
    if (!strcmp(ap, "VALID"))
        for (int d = 0; d < 2 * s; d++) pads[d] = 0;
    for (int d = 0; d < s && (same || nos >= 0); d++) {
        int64_t eff = dil[d] * (w->dims[2 + d].size - 1) + 1, total;
        if (nos >= 0) {
            gr_dim ind = x->dims[2 + d];
            if (gr_dx_is_sym(ind))
                return ox_node_error(c, GR_ERR_UNSUPPORTED, "output_shape with a symbolic spatial dim %d of x is not supported", d);
            int64_t out = oshape[nos - s + d];
            total = strides[d] * (ind.size - 1) + opad[d] + eff - out;
        } else { /* output = in * stride: the total does not depend on in */
            total = opad[d] + eff - strides[d];
        }
        if (same) { /* floor division, as onnx.reference: a negative total (stride > kernel) splits -1 as 0 / -1 */
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            pads[d] = upper ? half : total - half;
            pads[s + d] = total - pads[d];
        } else {
            pads[s + d] = total - pads[d];
        }
    }
    gr_ir_attr attrs[5] = {A_int("group", group), A_ints("strides", strides, s), A_ints("dilations", dil, s), A_ints("pads", pads, 2 * s),
                           A_ints("output_padding", opad, s)};
    return ox_emit1(c, op, n_in, in, 5, attrs);
}

/* ==== pools ======================================================================================= */

gr_status ox_cv_pool(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    if (c->node->n_output > 1 && c->node->output[1] && *c->node->output[1])
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "MaxPool's Indices output is not supported");
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    char ap[32];
    GR_TRY(auto_pad_attr(c, ap, sizeof ap));
    int64_t ks[GR_MAX_DIMS], strides[GR_MAX_DIMS], dil[GR_MAX_DIMS], pads[2 * GR_MAX_DIMS], ceil_mode, cip;
    int nk, ns, nd, np;
    GR_TRY(ints_attr(c, "kernel_shape", ks, GR_MAX_DIMS, &nk));
    if (nk < 0) return ox_node_error(c, GR_ERR_INVALID, "attribute 'kernel_shape' is required");
    GR_TRY(ints_attr(c, "strides", strides, GR_MAX_DIMS, &ns));
    GR_TRY(ints_attr(c, "dilations", dil, GR_MAX_DIMS, &nd));
    GR_TRY(ints_attr(c, "pads", pads, 2 * GR_MAX_DIMS, &np));
    GR_TRY(ox_attr_int(c, "ceil_mode", 0, &ceil_mode));
    GR_TRY(ox_attr_int(c, "count_include_pad", 0, &cip));
    gr_ir_attr attrs[7];
    int na = 0;
    attrs[na++] = A_ints("kernel_shape", ks, nk);
    attrs[na++] = A_str("auto_pad", ap);
    attrs[na++] = A_int("ceil_mode", ceil_mode != 0);
    if (ns >= 0) attrs[na++] = A_ints("strides", strides, ns);
    if (nd >= 0) attrs[na++] = A_ints("dilations", dil, nd);
    if (np >= 0 && !strcmp(ap, "NOTSET")) attrs[na++] = A_ints("pads", pads, np);
    if (op == GR_OP_AVG_POOL) attrs[na++] = A_int("count_include_pad", cip != 0);
    const char *names[1];
    ox_out_names(c, names, 1);
    int out;
    GR_TRY(ox_emit(c, op, 1, &x, na, attrs, 1, names, true, &out));
    return ox_bind_outputs(c, 1, &out, "is MaxPool's Indices output, which is not supported");
}

gr_status ox_cv_global_pool(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed || xv->ndim < 3) return ox_node_error(c, GR_ERR_SHAPE, "input must be [N, C, spatial...] (rank 3 or more)");
    int64_t axes[GR_MAX_DIMS];
    int na = 0;
    for (int d = 2; d < xv->ndim; d++) axes[na++] = d;
    gr_ir_attr attrs[2] = {A_ints("axes", axes, na), A_int("keepdims", 1)};
    return ox_emit1(c, op, 1, &x, 2, attrs);
}

/* ==== normalizations ================================================================================ */

/* v ([C]) unsqueezed to [C, 1, ...] (rank - 1 dims) so it broadcasts over [N, C, spatial...] */
static gr_status per_channel(ox_ctx *c, int v, int rank, int *out) {
    if (rank <= 2) return *out = v, GR_OK;
    int64_t axes[GR_MAX_DIMS];
    int na = 0;
    for (int d = 1; d < rank - 1; d++) axes[na++] = d;
    gr_ir_attr a = A_ints("axes", axes, na);
    return ox_emit(c, GR_OP_UNSQUEEZE, 1, &v, 1, &a, 1, NULL, false, out);
}

/* A [C] constant of dtype t (length n) from doubles, shaped [C, 1, ...] for rank. */
static gr_status channel_const(ox_ctx *c, gr_dtype t, const double *vals, int64_t n, int rank, int *out) {
    int64_t dims[GR_MAX_DIMS];
    int nd = rank >= 2 ? rank - 1 : 1;
    dims[0] = n;
    for (int d = 1; d < nd; d++) dims[d] = 1;
    ox_tensor *tt;
    GR_TRY(ox_tensor_new(t, nd, dims, &tt));
    for (int64_t i = 0; i < n; i++) gr_store_f64(tt->data, t, i, vals[i]);
    void *data = tt->data;
    tt->owned = false;
    gr_status st = gr_ir_add_const_owned(c->g, NULL, t, nd, dims, data, tt->nbytes, out);
    ox_tensor_free(tt);
    return st;
}

/* the doubles of constant input i, which must hold exactly n values */
static gr_status const_vals(ox_ctx *c, int i, const char *what, int64_t n, double **out) {
    const ox_tensor *t;
    GR_TRY(ox_need_const(c, i, what, &t));
    if (ox_tensor_numel(t) != n)
        return ox_node_error(c, GR_ERR_SHAPE, "input '%s' has %lld values, expected %lld (one per channel)", what, (long long)ox_tensor_numel(t),
                             (long long)n);
    double *v = gr_malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return gr_nomem();
    for (int64_t k = 0; k < n; k++) v[k] = gr_load_f64(t->data, t->dtype, k);
    *out = v;
    return GR_OK;
}

/* BatchNormalization followed-Conv folding: conv node `cn` with constant weight (and bias) gets
 * a twin whose weight is w*scale[co] and bias b*scale + shift; the original is left to dead-code
 * elimination when nothing else reads it. */
static gr_status fold_into_conv(ox_ctx *c, int cn, const double *scale, const double *shift, int64_t C, bool *done) {
    *done = false;
    const gr_ir_node *n = &c->g->nodes.data[cn];
    if (n->op != GR_OP_CONV || n->n_in < 2) return GR_OK;
    int wv = n->in[1], bv = n->n_in > 2 ? n->in[2] : -1, xin = n->in[0];
    const gr_ir_value *w = irv(c, wv);
    if (w->kind != GR_VAL_CONST || !w->data || !w->typed || !gr_dtype_is_float(w->dtype) || w->dims[0].size != C) return GR_OK;
    if (bv >= 0 && (irv(c, bv)->kind != GR_VAL_CONST || !irv(c, bv)->data)) return GR_OK;
    int64_t per = gr_ir_value_numel(w) / C, wd[GR_MAX_DIMS];
    int wnd = w->ndim;
    gr_dtype t = w->dtype;
    for (int d = 0; d < wnd; d++) wd[d] = w->dims[d].size;
    ox_tensor *nw;
    GR_TRY(ox_tensor_new(t, wnd, wd, &nw));
    for (int64_t co = 0; co < C; co++)
        for (int64_t j = 0; j < per; j++)
            gr_store_f64(nw->data, t, co * per + j, gr_load_f64(irv(c, wv)->data, t, co * per + j) * scale[co]);
    double *nb = gr_malloc((size_t)C * sizeof *nb);
    if (!nb) {
        ox_tensor_free(nw);
        return gr_nomem();
    }
    for (int64_t co = 0; co < C; co++) nb[co] = (bv >= 0 ? gr_load_f64(irv(c, bv)->data, t, co) * scale[co] : 0.0) + shift[co];
    int in[3] = {xin, -1, -1};
    void *data = nw->data;
    nw->owned = false;
    gr_status st = gr_ir_add_const_owned(c->g, NULL, t, wnd, wd, data, nw->nbytes, &in[1]);
    ox_tensor_free(nw);
    if (st == GR_OK) st = channel_const(c, t, nb, C, 2, &in[2]);
    gr_free(nb, (size_t)C * sizeof *nb);
    if (st != GR_OK) return st;
    /* the conv's attributes (the node array may move while the twin is added: copy the structs;
     * their heap data belongs to the original node, which stays) */
    n = &c->g->nodes.data[cn];
    gr_ir_attr attrs[8];
    int na = n->n_attr < 8 ? n->n_attr : 8;
    for (int i = 0; i < na; i++) attrs[i] = n->attrs[i];
    const char *names[1];
    ox_out_names(c, names, 1);
    int out;
    GR_TRY(ox_emit(c, GR_OP_CONV, 3, in, na, attrs, 1, names, true, &out));
    GR_TRY(ox_bind_outputs(c, 1, &out, "is a training-mode output of BatchNormalization, which is not supported"));
    *done = true;
    return GR_OK;
}

gr_status ox_cv_batch_norm(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 5, 5, 1));
    int64_t training;
    double eps;
    GR_TRY(ox_attr_int(c, "training_mode", 0, &training));
    GR_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    if (training) return ox_node_error(c, GR_ERR_UNSUPPORTED, "training_mode=1 is not supported (inference only)");
    for (size_t i = 1; i < c->node->n_output; i++)
        if (c->node->output[i] && *c->node->output[i])
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "the running mean/variance outputs (training) are not supported");
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed || xv->ndim < 2 || gr_dx_is_sym(xv->dims[1]))
        return ox_node_error(c, GR_ERR_SHAPE, "input must be [N, C, ...] with a known channel count");
    if (!gr_dtype_is_float(xv->dtype)) return ox_node_error(c, GR_ERR_UNSUPPORTED, "input must be a float tensor");
    int64_t C = xv->dims[1].size;
    int rank = xv->ndim;
    gr_dtype t = xv->dtype;
    bool konst = true;
    for (int i = 1; i < 5; i++) {
        int vi = ox_in(c, i);
        konst &= vi >= 0 && c->vals.data[vi].konst && !ox_tensor_has_sym(c->vals.data[vi].konst);
    }
    if (konst) { /* scale' = scale / sqrt(var + eps), shift = B - mean * scale' */
        double *sc = NULL, *b = NULL, *mean = NULL, *var = NULL;
        size_t bytes = (size_t)(C ? C : 1) * sizeof(double);
        gr_status st = const_vals(c, 1, "scale", C, &sc);
        if (st == GR_OK) st = const_vals(c, 2, "B", C, &b);
        if (st == GR_OK) st = const_vals(c, 3, "input_mean", C, &mean);
        if (st == GR_OK) st = const_vals(c, 4, "input_var", C, &var);
        if (st == GR_OK) {
            for (int64_t k = 0; k < C; k++) {
                sc[k] = sc[k] / sqrt(var[k] + eps);
                b[k] = b[k] - mean[k] * sc[k];
            }
            int prod = irv(c, x)->producer;
            bool done = false;
            if (prod >= 0) st = fold_into_conv(c, prod, sc, b, C, &done);
            if (st == GR_OK && !done) {
                int s_ir = -1, b_ir = -1, pair[2], y = -1;
                st = channel_const(c, t, sc, C, rank, &s_ir);
                if (st == GR_OK) st = channel_const(c, t, b, C, rank, &b_ir);
                pair[0] = x;
                pair[1] = s_ir;
                if (st == GR_OK) st = ox_emit(c, GR_OP_MUL, 2, pair, 0, NULL, 1, NULL, false, &y);
                pair[0] = y;
                pair[1] = b_ir;
                if (st == GR_OK) st = ox_emit1(c, GR_OP_ADD, 2, pair, 0, NULL);
            }
        }
        if (sc) gr_free(sc, bytes);
        if (b) gr_free(b, bytes);
        if (mean) gr_free(mean, bytes);
        if (var) gr_free(var, bytes);
        return st;
    }
    /* parameters computed at run time: the same arithmetic as IR nodes */
    int sc, b, mean, var, e, pair[2], den, s2, ms, shift, y;
    GR_TRY(ox_in_ir(c, 1, &sc));
    GR_TRY(ox_in_ir(c, 2, &b));
    GR_TRY(ox_in_ir(c, 3, &mean));
    GR_TRY(ox_in_ir(c, 4, &var));
    GR_TRY(ox_scalar_const_ir(c, t, eps, &e));
    pair[0] = var, pair[1] = e;
    GR_TRY(ox_emit(c, GR_OP_ADD, 2, pair, 0, NULL, 1, NULL, false, &den));
    GR_TRY(ox_emit(c, GR_OP_SQRT, 1, &den, 0, NULL, 1, NULL, false, &den));
    pair[0] = sc, pair[1] = den;
    GR_TRY(ox_emit(c, GR_OP_DIV, 2, pair, 0, NULL, 1, NULL, false, &s2));
    pair[0] = mean, pair[1] = s2;
    GR_TRY(ox_emit(c, GR_OP_MUL, 2, pair, 0, NULL, 1, NULL, false, &ms));
    pair[0] = b, pair[1] = ms;
    GR_TRY(ox_emit(c, GR_OP_SUB, 2, pair, 0, NULL, 1, NULL, false, &shift));
    GR_TRY(per_channel(c, s2, rank, &s2));
    GR_TRY(per_channel(c, shift, rank, &shift));
    pair[0] = x, pair[1] = s2;
    GR_TRY(ox_emit(c, GR_OP_MUL, 2, pair, 0, NULL, 1, NULL, false, &y));
    pair[0] = y, pair[1] = shift;
    return ox_emit1(c, GR_OP_ADD, 2, pair, 0, NULL);
}

/* layer_norm of x over dims [axis, rank) without an affine part (scale 1) */
static gr_status plain_norm(ox_ctx *c, int x, int axis, double eps, int *out) {
    int one, in[2];
    GR_TRY(ox_scalar_const_ir(c, irv(c, x)->dtype, 1.0, &one));
    in[0] = x, in[1] = one;
    gr_ir_attr attrs[2] = {A_int("axis", axis), A_float("epsilon", eps)};
    return ox_emit(c, GR_OP_LAYER_NORM, 2, in, 2, attrs, 1, NULL, false, out);
}

/* y * scale[c] + bias[c] with [C] inputs 1 and 2 */
static gr_status channel_affine(ox_ctx *c, int y, int rank) {
    int sc, b, pair[2];
    GR_TRY(ox_in_ir(c, 1, &sc));
    GR_TRY(ox_in_ir(c, 2, &b));
    GR_TRY(per_channel(c, sc, rank, &sc));
    GR_TRY(per_channel(c, b, rank, &b));
    pair[0] = y, pair[1] = sc;
    GR_TRY(ox_emit(c, GR_OP_MUL, 2, pair, 0, NULL, 1, NULL, false, &y));
    pair[0] = y, pair[1] = b;
    return ox_emit1(c, GR_OP_ADD, 2, pair, 0, NULL);
}

gr_status ox_cv_instance_norm(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 3, 3, 1));
    double eps;
    GR_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    int x, y;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed || xv->ndim < 3) return ox_node_error(c, GR_ERR_SHAPE, "input must be [N, C, spatial...] (rank 3 or more)");
    int rank = xv->ndim;
    GR_TRY(plain_norm(c, x, 2, eps, &y));
    return channel_affine(c, y, rank);
}

/* GroupNormalization: x viewed as [N, G, C/G * spatial], normalized over the last dim, viewed
 * back, then scale/bias per channel (opset 21), or per group (opset 18, expanded to channels
 * when they are constants). */
gr_status ox_cv_group_norm(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 3, 3, 1));
    double eps;
    int64_t groups, stash;
    GR_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    GR_TRY(ox_attr_int(c, "num_groups", 0, &groups));
    GR_TRY(ox_attr_int(c, "stash_type", 1, &stash));
    int x, y, v;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed || xv->ndim < 2 || gr_dx_is_sym(xv->dims[1]))
        return ox_node_error(c, GR_ERR_SHAPE, "input must be [N, C, ...] with a known channel count");
    int64_t C = xv->dims[1].size;
    int rank = xv->ndim;
    gr_dtype t = xv->dtype;
    if (groups < 1 || C % groups) return ox_node_error(c, GR_ERR_INVALID, "num_groups %lld does not divide %lld channels", (long long)groups, (long long)C);
    gr_dim xd[GR_MAX_DIMS];
    for (int d = 0; d < rank; d++) xd[d] = xv->dims[d];
    /* [N, G, -1] */
    int64_t shp[3] = {0, groups, -1};
    int32_t ex[3] = {xd[0].expr, GR_SYM_NONE, GR_SYM_NONE};
    shp[0] = gr_dx_is_sym(xd[0]) ? -1 : xd[0].size;
    gr_ir_attr ra = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = shp, .n = 3, .exprs = gr_dx_is_sym(xd[0]) ? ex : NULL};
    GR_TRY(ox_emit(c, GR_OP_RESHAPE, 1, &x, 1, &ra, 1, NULL, false, &v));
    GR_TRY(plain_norm(c, v, 2, eps, &v));
    int64_t back[GR_MAX_DIMS];
    int32_t bex[GR_MAX_DIMS];
    bool any = false;
    for (int d = 0; d < rank; d++) {
        back[d] = gr_dx_is_sym(xd[d]) ? -1 : xd[d].size;
        bex[d] = xd[d].expr;
        any |= gr_dx_is_sym(xd[d]);
    }
    gr_ir_attr rb = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = back, .n = rank, .exprs = any ? bex : NULL};
    GR_TRY(ox_emit(c, GR_OP_RESHAPE, 1, &v, 1, &rb, 1, NULL, false, &y));
    int sv = ox_in(c, 1);
    const ox_tensor *st_t = sv >= 0 ? c->vals.data[sv].konst : NULL;
    int64_t n_scale = st_t ? ox_tensor_numel(st_t) : -1;
    if (n_scale == C || (!st_t && c->opset >= 21)) return channel_affine(c, y, rank);
    if (n_scale != groups) return ox_node_error(c, GR_ERR_UNSUPPORTED, "scale and bias must be constants of %lld (per group) or %lld (per channel) values", (long long)groups, (long long)C);
    double *sc = NULL, *b = NULL, *scc = NULL, *bc = NULL;
    size_t gb = (size_t)groups * sizeof(double), cb = (size_t)C * sizeof(double);
    gr_status st = const_vals(c, 1, "scale", groups, &sc);
    if (st == GR_OK) st = const_vals(c, 2, "bias", groups, &b);
    if (st == GR_OK) {
        scc = gr_malloc(cb);
        bc = gr_malloc(cb);
        if (!scc || !bc) st = gr_nomem();
    }
    int s_ir = -1, b_ir = -1, pair[2];
    if (st == GR_OK) {
        for (int64_t ch = 0; ch < C; ch++) scc[ch] = sc[ch / (C / groups)], bc[ch] = b[ch / (C / groups)];
        st = channel_const(c, t, scc, C, rank, &s_ir);
        if (st == GR_OK) st = channel_const(c, t, bc, C, rank, &b_ir);
        pair[0] = y, pair[1] = s_ir;
        if (st == GR_OK) st = ox_emit(c, GR_OP_MUL, 2, pair, 0, NULL, 1, NULL, false, &y);
        pair[0] = y, pair[1] = b_ir;
        if (st == GR_OK) st = ox_emit1(c, GR_OP_ADD, 2, pair, 0, NULL);
    }
    if (sc) gr_free(sc, gb);
    if (b) gr_free(b, gb);
    if (scc) gr_free(scc, cb);
    if (bc) gr_free(bc, cb);
    return st;
}

/* ==== Pad ============================================================================================ */

gr_status ox_cv_pad(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 2, 4, 1));
    char mode[32];
    GR_TRY(ox_attr_string(c, "mode", "constant", mode, sizeof mode));
    int m;
    if (gr_ir_pad_mode(mode, &m) != GR_OK)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "mode '%s' is not supported (constant, reflect, edge, wrap)", mode);
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the input's rank must be known");
    int r = xv->ndim;
    int64_t p[2 * GR_MAX_DIMS], pads[2 * GR_MAX_DIMS] = {0}, axes[GR_MAX_DIMS];
    int np, na = r;
    GR_TRY(ox_need_ints(c, 1, "pads", p, 2 * GR_MAX_DIMS, &np));
    if (ox_in(c, 3) >= 0) {
        GR_TRY(ox_need_ints(c, 3, "axes", axes, GR_MAX_DIMS, &na));
        for (int i = 0; i < na; i++) {
            if (axes[i] < -r || axes[i] >= r) return ox_node_error(c, GR_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axes[i], r);
            if (axes[i] < 0) axes[i] += r;
        }
    } else {
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    if (np != 2 * na) return ox_node_error(c, GR_ERR_INVALID, "pads has %d values, expected %d (2 x %d axes)", np, 2 * na, na);
    for (int i = 0; i < na; i++) {
        pads[axes[i]] = p[i];
        pads[r + axes[i]] = p[na + i];
    }
    double value = 0.0;
    if (ox_in(c, 2) >= 0) {
        const ox_tensor *t;
        GR_TRY(ox_need_const(c, 2, "constant_value", &t));
        if (ox_tensor_numel(t) != 1) return ox_node_error(c, GR_ERR_INVALID, "constant_value must hold one value");
        value = gr_load_f64(t->data, t->dtype, 0);
    }
    gr_ir_attr attrs[3] = {A_ints("pads", pads, 2 * r), A_str("mode", mode), A_float("value", value)};
    return ox_emit1(c, op, 1, &x, 3, attrs);
}

/* ==== Resize ========================================================================================= */

gr_status ox_cv_resize(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 1, 4, 1));
    char mode[32], coord[32], nm[32], kar[32];
    int64_t antialias, exclude;
    GR_TRY(ox_attr_string(c, "mode", "nearest", mode, sizeof mode));
    GR_TRY(ox_attr_string(c, "coordinate_transformation_mode", "half_pixel", coord, sizeof coord));
    GR_TRY(ox_attr_string(c, "nearest_mode", "round_prefer_floor", nm, sizeof nm));
    GR_TRY(ox_attr_string(c, "keep_aspect_ratio_policy", "stretch", kar, sizeof kar));
    GR_TRY(ox_attr_int(c, "antialias", 0, &antialias));
    GR_TRY(ox_attr_int(c, "exclude_outside", 0, &exclude));
    if (strcmp(mode, "nearest") && strcmp(mode, "linear"))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "mode '%s' is not supported (nearest, linear)", mode);
    static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                         "half_pixel_symmetric"};
    bool coord_ok = false;
    for (int i = 0; i < 6; i++) coord_ok |= !strcmp(coord, coords[i]);
    if (!coord_ok) return ox_node_error(c, GR_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' is not supported", coord);
    if (!strcmp(coord, "tf_half_pixel_for_nn") && strcmp(mode, "nearest"))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "coordinate_transformation_mode 'tf_half_pixel_for_nn' is for nearest only");
    if (strcmp(nm, "round_prefer_floor") && strcmp(nm, "round_prefer_ceil") && strcmp(nm, "floor") && strcmp(nm, "ceil"))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", nm);
    if (antialias) return ox_node_error(c, GR_ERR_UNSUPPORTED, "antialias=1 is not supported");
    if (exclude) return ox_node_error(c, GR_ERR_UNSUPPORTED, "exclude_outside=1 is not supported");
    if (strcmp(kar, "stretch")) return ox_node_error(c, GR_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s' is not supported", kar);
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the input's shape must be known");
    int r = xv->ndim;
    gr_dim xd[GR_MAX_DIMS], sizes[GR_MAX_DIMS];
    for (int d = 0; d < r; d++) xd[d] = xv->dims[d], sizes[d] = xv->dims[d];
    int64_t axes[GR_MAX_DIMS];
    int na = r;
    const int64_t *av;
    GR_TRY(ox_attr_ints(c, "axes", &av, &na));
    if (na < 0) {
        na = r;
        for (int i = 0; i < r; i++) axes[i] = i;
    } else {
        if (na > r) return ox_node_error(c, GR_ERR_INVALID, "axes has more entries than the rank %d", r);
        for (int i = 0; i < na; i++) {
            if (av[i] < -r || av[i] >= r) return ox_node_error(c, GR_ERR_INVALID, "axis %lld is out of range", (long long)av[i]);
            axes[i] = av[i] < 0 ? av[i] + r : av[i];
        }
    }
    double scales[GR_MAX_DIMS];
    for (int d = 0; d < r; d++) scales[d] = 1.0;
    bool have_scales = false;
    int si = ox_in(c, 2), zi = ox_in(c, 3);
    const ox_tensor *st_t = NULL;
    if (si >= 0) GR_TRY(ox_need_const(c, 2, "scales", &st_t));
    if (st_t && ox_tensor_numel(st_t) > 0) {
        if (zi >= 0) return ox_node_error(c, GR_ERR_INVALID, "scales and sizes are both given");
        if (ox_tensor_numel(st_t) != na) return ox_node_error(c, GR_ERR_INVALID, "scales has %lld values, expected %d", (long long)ox_tensor_numel(st_t), na);
        have_scales = true;
        for (int i = 0; i < na; i++) {
            double s = gr_load_f64(st_t->data, st_t->dtype, i);
            if (!(s > 0) || !isfinite(s)) return ox_node_error(c, GR_ERR_INVALID, "scale %d (%g) must be positive", i, s);
            int d = (int)axes[i];
            scales[d] = s;
            if (s == 1.0) continue;
            if (gr_dx_is_sym(xd[d])) { /* floor(in * s) is an expression only for an integer s */
                if (s != floor(s) || s > 1e6)
                    return ox_node_error(c, GR_ERR_UNSUPPORTED, "a non-integer scale (%g) of the symbolic dim %d is not supported", s, d);
                gr_status e = gr_dx_binary(c->g, GR_DX_MUL, xd[d], gr_dx_const((int64_t)s), &sizes[d]);
                if (e != GR_OK) return e == GR_ERR_NOMEM ? e : ox_node_error(c, GR_ERR_UNSUPPORTED, "dim %d times %g is not expressible", d, s);
            } else {
                double o = floor((double)xd[d].size * s);
                if (o > (double)GR_MAX_NUMEL) return ox_node_error(c, GR_ERR_SHAPE, "output dim %d is too large", d);
                sizes[d] = gr_dx_const((int64_t)o);
            }
        }
    } else if (zi >= 0) {
        int64_t sz[GR_MAX_DIMS];
        int nz;
        GR_TRY(ox_need_ints(c, 3, "sizes", sz, GR_MAX_DIMS, &nz));
        if (nz != na) return ox_node_error(c, GR_ERR_INVALID, "sizes has %d values, expected %d", nz, na);
        for (int i = 0; i < na; i++) {
            if (sz[i] < 0) return ox_node_error(c, GR_ERR_INVALID, "size %d is negative", i);
            int d = (int)axes[i];
            if (gr_dx_is_sym(xd[d])) return ox_node_error(c, GR_ERR_UNSUPPORTED, "sizes for the symbolic dim %d are not supported", d);
            sizes[d] = gr_dx_const(sz[i]);
        }
    } else {
        return ox_node_error(c, GR_ERR_INVALID, "one of scales and sizes is required");
    }
    int64_t sv[GR_MAX_DIMS];
    int32_t se[GR_MAX_DIMS];
    bool any = false;
    for (int d = 0; d < r; d++) {
        sv[d] = gr_dx_is_sym(sizes[d]) ? -1 : sizes[d].size;
        se[d] = sizes[d].expr;
        any |= gr_dx_is_sym(sizes[d]);
    }
    gr_ir_attr attrs[5] = {{.name = "sizes", .kind = GR_IR_ATTR_INTS, .ints = sv, .n = r, .exprs = any ? se : NULL}, A_str("mode", mode),
                           A_str("coord", coord), A_str("nearest_mode", nm), A_floats("scales", scales, r)};
    return ox_emit1(c, op, 1, &x, have_scales ? 5 : 4, attrs);
}
