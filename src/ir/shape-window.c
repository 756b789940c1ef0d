/* ir/shape-window — shape rules of the sliding-window ops (conv,
 * conv_transpose, max_pool, avg_pool) and of pad and resize, and the
 * concrete window geometry the lowering uses (gr_ir_window_geometry).
 *
 * Window ops read x as [N, C, S_1..S_s] (s spatial dims, 1 <= s <= 5). One
 * spatial dim of a window op (ONNX Conv / MaxPool semantics):
 *   eff  = dil*(k - 1) + 1                      (the dilated kernel's extent)
 *   out  = (in + pb + pe - eff) // stride + 1   (auto_pad NOTSET, floor)
 *        = ceil((in + pb + pe - eff) / stride) + 1, minus one when that last
 *          window would start at or past in + pb (ceil_mode, pools only)
 *        = ceil(in / stride)                    (SAME_UPPER / SAME_LOWER)
 *        = (in - eff) // stride + 1             (VALID)
 * SAME pads total max(0, (out - 1)*stride + eff - in): SAME_UPPER puts the
 * odd one at the end, SAME_LOWER at the beginning. Each formula is built with
 * dim expressions, so symbolic spatial dims give expression dims; the pads
 * of SAME only matter once dims are concrete (the lowering). conv_transpose:
 *   out  = stride*(in - 1) + output_padding + eff - pb - pe
 * (its pads are always explicit: the ONNX importer resolves auto_pad and
 * output_shape, which do not depend on the input size except through
 * output_shape, itself concrete). */
#include "ir/ir.h"
#include <stdio.h>
#include <string.h>

#define WIN_MAX_SPATIAL 5 /* N, group, C/group + 5 outer dims of the kernel: GR_MAX_DIMS */

typedef struct {
    gr_graph *g;
    const gr_ir_node *n;
    char where[512];
} wctx;

static const char *wwhere(wctx *c) {
    if (!c->where[0]) gr_ir_node_where(c->g, c->n, c->where, sizeof c->where);
    return c->where;
}

static gr_status wfail(wctx *c, gr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static gr_status wfail(wctx *c, gr_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gr_error(st, "%s: %s", wwhere(c), msg);
}

static const gr_ir_value *win(const wctx *c, int slot) {
    if (slot >= c->n->n_in || c->n->in[slot] < 0) return NULL;
    return &c->g->values.data[c->n->in[slot]];
}

static void wuntyped(wctx *c) {
    gr_ir_value *v = &c->g->values.data[c->n->out[0]];
    v->typed = false;
    v->ndim = 0;
    v->placement = GR_PLACE_DEVICE;
}

static gr_status wset_out(wctx *c, gr_dtype t, int ndim, const gr_dim *d) {
    if (!gr_ir_dims_fit(ndim, d)) {
        wuntyped(c);
        return wfail(c, GR_ERR_SHAPE, "the output would hold more than %lld elements", (long long)GR_MAX_NUMEL);
    }
    gr_ir_value *v = &c->g->values.data[c->n->out[0]];
    v->typed = true;
    v->dtype = t;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->dims[i] = d[i];
    v->placement = GR_PLACE_DEVICE;
    return GR_OK;
}

/* a op b; *ok = false when past the simplifier's limits */
static gr_status wdx(wctx *c, gr_dx_op op, gr_dim a, gr_dim b, gr_dim *out, bool *ok) {
    if (!*ok) return GR_OK;
    gr_status st = gr_dx_binary(c->g, op, a, b, out);
    if (st == GR_ERR_UNSUPPORTED) {
        gr_error_clear();
        *ok = false;
        *out = gr_dx_const(0);
        return GR_OK;
    }
    if (st == GR_ERR_SHAPE) return gr_error_prefix(st, "%s: ", wwhere(c));
    return st;
}

/* ==== attributes ============================================================================== */

typedef enum { AP_NOTSET = 0, AP_SAME_UPPER, AP_SAME_LOWER, AP_VALID } auto_pad_t;

typedef struct {
    int s; /* spatial dims */
    int64_t kernel[WIN_MAX_SPATIAL], stride[WIN_MAX_SPATIAL], dil[WIN_MAX_SPATIAL];
    int64_t pads[2 * WIN_MAX_SPATIAL], out_pad[WIN_MAX_SPATIAL];
    int64_t group;
    auto_pad_t auto_pad;
    bool ceil_mode, conv, transpose;
} wattrs;

/* An ints attribute of exactly n entries, each >= lo (default def when absent). */
static gr_status ints_n(wctx *c, const char *name, int n, int64_t def, int64_t lo, int64_t *out) {
    const int64_t *v;
    int nv;
    GR_TRY(gr_ir_attr_ints(c->g, c->n, name, &v, &nv));
    if (nv < 0) {
        for (int i = 0; i < n; i++) out[i] = def;
        return GR_OK;
    }
    if (nv != n) return wfail(c, GR_ERR_INVALID, "attribute '%s' has %d values, expected %d (one per spatial dim%s)", name, nv, n,
                              n > 0 && name[0] == 'p' ? ", begins then ends" : "");
    for (int i = 0; i < n; i++) {
        if (v[i] < lo || v[i] > ((int64_t)1 << 32))
            return wfail(c, GR_ERR_INVALID, "attribute '%s'[%d] = %lld is out of range (at least %lld)", name, i, (long long)v[i],
                         (long long)lo);
        out[i] = v[i];
    }
    return GR_OK;
}

static gr_status read_attrs(wctx *c, int s, wattrs *a) {
    memset(a, 0, sizeof *a);
    a->s = s;
    gr_op op = c->n->op;
    a->conv = op == GR_OP_CONV || op == GR_OP_CONV_TRANSPOSE;
    a->transpose = op == GR_OP_CONV_TRANSPOSE;
    GR_TRY(ints_n(c, "strides", s, 1, 1, a->stride));
    GR_TRY(ints_n(c, "dilations", s, 1, 1, a->dil));
    /* conv_transpose's pads may be negative: the importer turns an output_shape larger than the
     * formula's into a negative end pad */
    GR_TRY(ints_n(c, "pads", 2 * s, 0, a->transpose ? -((int64_t)1 << 32) : 0, a->pads));
    if (a->transpose) GR_TRY(ints_n(c, "output_padding", s, 0, 0, a->out_pad));
    if (a->conv) {
        GR_TRY(gr_ir_attr_int(c->g, c->n, "group", 1, &a->group));
        if (a->group < 1) return wfail(c, GR_ERR_INVALID, "group = %lld must be at least 1", (long long)a->group);
    } else {
        GR_TRY(ints_n(c, "kernel_shape", s, 0, 1, a->kernel));
        if (!gr_ir_attr_find(c->n, "kernel_shape")) return wfail(c, GR_ERR_INVALID, "attribute 'kernel_shape' is required");
        int64_t cm;
        GR_TRY(gr_ir_attr_int(c->g, c->n, "ceil_mode", 0, &cm));
        a->ceil_mode = cm != 0;
    }
    if (!a->transpose) {
        const char *ap;
        GR_TRY(gr_ir_attr_string(c->g, c->n, "auto_pad", "NOTSET", &ap));
        if (!strcmp(ap, "NOTSET") || !*ap) a->auto_pad = AP_NOTSET;
        else if (!strcmp(ap, "SAME_UPPER")) a->auto_pad = AP_SAME_UPPER;
        else if (!strcmp(ap, "SAME_LOWER")) a->auto_pad = AP_SAME_LOWER;
        else if (!strcmp(ap, "VALID")) a->auto_pad = AP_VALID;
        else return wfail(c, GR_ERR_INVALID, "auto_pad '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
    }
    return GR_OK;
}

/* Output extent of one spatial dim (see the top of the file). */
static gr_status out_dim(wctx *c, const wattrs *a, int d, gr_dim in, gr_dim *out, bool *ok) {
    int64_t eff = a->dil[d] * (a->kernel[d] - 1) + 1, st = a->stride[d];
    gr_dim t;
    if (a->transpose) { /* stride*(in - 1) + output_padding + eff - pb - pe */
        GR_TRY(wdx(c, GR_DX_MUL, in, gr_dx_const(st), &t, ok));
        GR_TRY(wdx(c, GR_DX_ADD, t, gr_dx_const(-st + a->out_pad[d] + eff - a->pads[d] - a->pads[a->s + d]), out, ok));
        return GR_OK;
    }
    switch (a->auto_pad) {
    case AP_SAME_UPPER:
    case AP_SAME_LOWER: /* ceil(in / stride) */
        GR_TRY(wdx(c, GR_DX_ADD, in, gr_dx_const(st - 1), &t, ok));
        return wdx(c, GR_DX_DIV, t, gr_dx_const(st), out, ok);
    case AP_VALID:
        GR_TRY(wdx(c, GR_DX_ADD, in, gr_dx_const(-eff), &t, ok));
        GR_TRY(wdx(c, GR_DX_DIV, t, gr_dx_const(st), &t, ok));
        return wdx(c, GR_DX_ADD, t, gr_dx_const(1), out, ok);
    case AP_NOTSET: break;
    }
    gr_dim span; /* in + pb + pe - eff */
    GR_TRY(wdx(c, GR_DX_ADD, in, gr_dx_const(a->pads[d] + a->pads[a->s + d] - eff), &span, ok));
    if (!a->ceil_mode) {
        GR_TRY(wdx(c, GR_DX_DIV, span, gr_dx_const(st), &t, ok));
        return wdx(c, GR_DX_ADD, t, gr_dx_const(1), out, ok);
    }
    /* q = ceil(span / stride); out = q + 1, or q when q*stride >= in + pb:
     * out = q + lt(q*stride, in + pb) */
    gr_dim q, qs, lim, lt;
    GR_TRY(wdx(c, GR_DX_ADD, span, gr_dx_const(st - 1), &t, ok));
    GR_TRY(wdx(c, GR_DX_DIV, t, gr_dx_const(st), &q, ok));
    GR_TRY(wdx(c, GR_DX_MUL, q, gr_dx_const(st), &qs, ok));
    GR_TRY(wdx(c, GR_DX_ADD, in, gr_dx_const(a->pads[d]), &lim, ok));
    GR_TRY(wdx(c, GR_DX_LT, qs, lim, &lt, ok));
    return wdx(c, GR_DX_ADD, q, lt, out, ok);
}

/* Reads the node's attributes and (for conv) the kernel from w's shape, and checks x and w. */
static gr_status window_setup(wctx *c, wattrs *a) {
    const gr_ir_value *x = win(c, 0);
    bool int_ok = c->n->op == GR_OP_MAX_POOL && gr_dtype_is_int(x->dtype) && x->dtype != GR_BOOL; /* ONNX MaxPool takes int8/uint8 */
    if (!gr_dtype_is_float(x->dtype) && !int_ok)
        return wfail(c, GR_ERR_UNSUPPORTED, "input x must be a float tensor, got %s", gr_dtype_name(x->dtype));
    if (x->ndim < 3 || x->ndim > 2 + WIN_MAX_SPATIAL)
        return wfail(c, GR_ERR_SHAPE, "input x has rank %d; expected [N, C, spatial...] with 1 to %d spatial dims", x->ndim,
                     WIN_MAX_SPATIAL);
    int s = x->ndim - 2;
    GR_TRY(read_attrs(c, s, a));
    if (!a->conv) return GR_OK;
    const gr_ir_value *w = win(c, 1), *b = win(c, 2);
    if (w->dtype != x->dtype) return wfail(c, GR_ERR_INVALID, "weight is %s but x is %s", gr_dtype_name(w->dtype), gr_dtype_name(x->dtype));
    if (w->ndim != x->ndim)
        return wfail(c, GR_ERR_SHAPE, "weight has rank %d; expected %d ([%s, %s, kernel...])", w->ndim, x->ndim,
                     a->transpose ? "C_in" : "C_out", a->transpose ? "C_out/group" : "C_in/group");
    for (int d = 0; d < w->ndim; d++)
        if (gr_dx_is_sym(w->dims[d])) return wfail(c, GR_ERR_UNSUPPORTED, "the weight's dims must be concrete");
    if (gr_dx_is_sym(x->dims[1])) return wfail(c, GR_ERR_UNSUPPORTED, "the channel dim of x must be concrete");
    for (int d = 0; d < s; d++) {
        a->kernel[d] = w->dims[2 + d].size;
        if (a->kernel[d] < 1) return wfail(c, GR_ERR_SHAPE, "weight has an empty kernel dim %d", 2 + d);
    }
    int64_t cin = x->dims[1].size, g = a->group;
    int64_t w0 = w->dims[0].size, w1 = w->dims[1].size;
    if (!a->transpose) {
        if (cin % g || w1 * g != cin)
            return wfail(c, GR_ERR_SHAPE, "x has %lld channels but the weight expects %lld x group %lld = %lld", (long long)cin,
                         (long long)w1, (long long)g, (long long)(w1 * g));
        if (w0 % g) return wfail(c, GR_ERR_SHAPE, "%lld output channels are not divisible by group %lld", (long long)w0, (long long)g);
    } else {
        if (w0 != cin || cin % g)
            return wfail(c, GR_ERR_SHAPE, "x has %lld channels but the weight has %lld (it must equal C_in, divisible by group %lld)",
                         (long long)cin, (long long)w0, (long long)g);
    }
    int64_t cout = a->transpose ? w1 * g : w0;
    if (b) {
        if (b->dtype != x->dtype) return wfail(c, GR_ERR_INVALID, "bias is %s but x is %s", gr_dtype_name(b->dtype), gr_dtype_name(x->dtype));
        if (b->ndim != 1 || gr_dx_is_sym(b->dims[0]) || b->dims[0].size != cout)
            return wfail(c, GR_ERR_SHAPE, "bias must be [%lld] (one per output channel)", (long long)cout);
    }
    return GR_OK;
}

static gr_status infer_window_impl(wctx *c) {
    wattrs a;
    GR_TRY(window_setup(c, &a));
    const gr_ir_value *x = win(c, 0);
    gr_dim out[GR_MAX_DIMS];
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    if (a.conv) {
        const gr_ir_value *w = win(c, 1);
        out[1] = gr_dx_const(a.transpose ? w->dims[1].size * a.group : w->dims[0].size);
    }
    gr_dtype t = x->dtype;
    int nd = x->ndim;
    bool ok = true;
    for (int d = 0; d < a.s; d++) {
        gr_dim in = c->g->values.data[c->n->in[0]].dims[2 + d]; /* re-read: expressions may grow the table, not values */
        GR_TRY(out_dim(c, &a, d, in, &out[2 + d], &ok));
        if (ok && !gr_dx_is_sym(out[2 + d]) && out[2 + d].size < 1) {
            char ins[64];
            gr_dx_str(c->g, in, ins, sizeof ins);
            return wfail(c, GR_ERR_SHAPE, "spatial dim %d: input size %s gives an output size of %lld (kernel %lld, dilation %lld, stride %lld, pads %lld+%lld)",
                         d, ins, (long long)out[2 + d].size, (long long)a.kernel[d], (long long)a.dil[d], (long long)a.stride[d],
                         (long long)a.pads[d], (long long)a.pads[a.s + d]);
        }
    }
    if (!ok) {
        wuntyped(c);
        return GR_OK;
    }
    return wset_out(c, t, nd, out);
}

gr_status gr_ir_infer_window(gr_graph *g, int node) {
    wctx c = {.g = g, .n = &g->nodes.data[node]};
    c.where[0] = 0;
    return infer_window_impl(&c);
}

gr_status gr_ir_window_geometry(const gr_graph *g, int node, gr_ir_window *out) {
    wctx c = {.g = (gr_graph *)g, .n = &g->nodes.data[node]};
    c.where[0] = 0;
    memset(out, 0, sizeof *out);
    wattrs a;
    GR_TRY(window_setup(&c, &a));
    const gr_ir_value *x = win(&c, 0), *y = &g->values.data[c.n->out[0]];
    if (!gr_ir_value_concrete(x) || !gr_ir_value_concrete(y)) return wfail(&c, GR_ERR_SHAPE, "window geometry needs concrete dims");
    out->n_spatial = a.s;
    out->group = a.group;
    for (int d = 0; d < a.s; d++) {
        out->kernel[d] = a.kernel[d];
        out->stride[d] = a.stride[d];
        out->dil[d] = a.dil[d];
        out->in[d] = x->dims[2 + d].size;
        out->out[d] = y->dims[2 + d].size;
        int64_t pb = a.pads[d], pe = a.pads[a.s + d];
        if (a.auto_pad == AP_SAME_UPPER || a.auto_pad == AP_SAME_LOWER) {
            int64_t eff = a.dil[d] * (a.kernel[d] - 1) + 1;
            int64_t total = (out->out[d] - 1) * a.stride[d] + eff - out->in[d];
            if (total < 0) total = 0;
            pb = a.auto_pad == AP_SAME_UPPER ? total / 2 : total - total / 2;
            pe = total - pb;
        } else if (a.auto_pad == AP_VALID) {
            pb = pe = 0;
        }
        out->pad_begin[d] = pb;
        out->pad_end[d] = pe;
    }
    return GR_OK;
}

/* ==== pad ======================================================================================
 * pad(x; pads=[b_0..b_{r-1}, e_0..e_{r-1}], mode="constant"|"reflect"|"edge", value=0):
 * out_d = in_d + b_d + e_d (pads may be negative: a crop). reflect needs in_d >= 2 where it pads,
 * edge in_d >= 1. */

static const char *const pad_modes[] = {"constant", "reflect", "edge", "wrap"};

gr_status gr_ir_pad_mode(const char *s, int *out) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, pad_modes[i])) return *out = i, GR_OK;
    return GR_ERR_INVALID;
}

gr_status gr_ir_infer_pad(gr_graph *g, int node) {
    wctx c = {.g = g, .n = &g->nodes.data[node]};
    c.where[0] = 0;
    const gr_ir_value *x = win(&c, 0);
    int r = x->ndim;
    const int64_t *p;
    int np;
    GR_TRY(gr_ir_attr_ints(g, c.n, "pads", &p, &np));
    if (np != 2 * r) return wfail(&c, GR_ERR_INVALID, "attribute 'pads' has %d values, expected %d (2 x rank %d)", np < 0 ? 0 : np, 2 * r, r);
    const char *mode;
    GR_TRY(gr_ir_attr_string(g, c.n, "mode", "constant", &mode));
    int m;
    if (gr_ir_pad_mode(mode, &m) != GR_OK) return wfail(&c, GR_ERR_INVALID, "mode '%s' is not one of constant, reflect, edge, wrap", mode);
    gr_dim out[GR_MAX_DIMS];
    bool ok = true;
    for (int d = 0; d < r; d++) {
        if (p[d] > GR_MAX_NUMEL || p[d] < -GR_MAX_NUMEL || p[r + d] > GR_MAX_NUMEL || p[r + d] < -GR_MAX_NUMEL)
            return wfail(&c, GR_ERR_INVALID, "pads for dim %d are out of range", d);
        gr_dim in = g->values.data[c.n->in[0]].dims[d];
        GR_TRY(wdx(&c, GR_DX_ADD, in, gr_dx_const(p[d] + p[r + d]), &out[d], &ok));
        if (!ok) break;
        if (!gr_dx_is_sym(out[d]) && out[d].size < 0)
            return wfail(&c, GR_ERR_SHAPE, "dim %d: pads %lld + %lld make a negative size", d, (long long)p[d], (long long)p[r + d]);
        bool pads_here = p[d] > 0 || p[r + d] > 0;
        if (pads_here && m != 0 && !gr_dx_is_sym(in)) {
            if (in.size < 1) return wfail(&c, GR_ERR_SHAPE, "dim %d is empty: mode '%s' has nothing to repeat", d, mode);
        }
    }
    if (!ok) {
        wuntyped(&c);
        return GR_OK;
    }
    return wset_out(&c, x->dtype, r, out);
}

/* ==== resize =====================================================================================
 * resize(x; sizes=[...], scales=[...], mode="nearest"|"linear", coord=..., nearest_mode=...):
 * output dims are `sizes` (symbolic allowed: the importer computes them from scales); scales are
 * the factors the coordinate transform divides by (out/in when absent). */

gr_status gr_ir_infer_resize(gr_graph *g, int node) {
    wctx c = {.g = g, .n = &g->nodes.data[node]};
    c.where[0] = 0;
    const gr_ir_value *x = win(&c, 0);
    int r = x->ndim;
    gr_dim sz[GR_MAX_DIMS];
    int n;
    GR_TRY(gr_ir_attr_sints(g, c.n, "sizes", sz, GR_MAX_DIMS, &n));
    if (n != r) return wfail(&c, GR_ERR_INVALID, "attribute 'sizes' has %d values, expected %d", n < 0 ? 0 : n, r);
    const double *sc;
    int ns;
    GR_TRY(gr_ir_attr_floats(g, c.n, "scales", &sc, &ns));
    if (ns >= 0 && ns != r) return wfail(&c, GR_ERR_INVALID, "attribute 'scales' has %d values, expected %d", ns, r);
    for (int d = 0; d < r; d++) {
        if (!gr_dx_is_sym(sz[d]) && sz[d].size < 0) return wfail(&c, GR_ERR_SHAPE, "size %d is negative", d);
        if (ns >= 0 && !(sc[d] > 0)) return wfail(&c, GR_ERR_INVALID, "scale %d must be positive", d);
    }
    if (!gr_dtype_is_float(x->dtype)) return wfail(&c, GR_ERR_UNSUPPORTED, "input must be a float tensor, got %s", gr_dtype_name(x->dtype));
    return wset_out(&c, x->dtype, r, sz);
}
