/* ir/shape — shape and dtype inference, specialization of symbolic dims: a
 * service of the IR that the frontends (typing as they import) and the passes
 * (after every rewrite) both use.
 *
 * Every rule follows the op semantics in ir/ops.c. A shape is a list of
 * gr_dim: concrete (size >= 0, sym NONE) or symbolic (size -1, sym >= 0).
 * Where a result cannot be expressed with these (a symbolic dim against a
 * different symbol or a concrete size > 1, a reshape whose -1 is a product of
 * symbols, ...) the output is left untyped and inference succeeds; a real
 * mismatch is GR_ERR_SHAPE, a bad attribute GR_ERR_INVALID, both naming the
 * node and the shapes involved.
 *
 * Nothing here allocates except the capture binding of subgraphs, so the
 * error messages are formatted into stack buffers.
 */
#include "ir/ir.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int ndim;
    gr_dim d[GR_MAX_DIMS];
} shape_t;

/* Status of a shape computation that may be inexpressible. */
enum { SH_KNOWN = 0, SH_UNKNOWN = 1 };

typedef struct {
    gr_graph *g;
    int node_index;
    const gr_ir_node *n;
    char where[512];
} ctx_t;

#define TYPE_STR_LEN 256

/* ==== small helpers ================================================================ */
static bool dim_is_sym(gr_dim d) { return d.sym != GR_SYM_NONE; }
static gr_dim dim_c(int64_t size) { return (gr_dim){size, GR_SYM_NONE}; }
static bool dim_eq(gr_dim a, gr_dim b) {
    if (dim_is_sym(a) || dim_is_sym(b)) return a.sym == b.sym;
    return a.size == b.size;
}

static const gr_ir_value *in_val(const ctx_t *c, int slot) {
    if (slot >= c->n->n_in || c->n->in[slot] < 0) return NULL;
    return &c->g->values.data[c->n->in[slot]];
}

static shape_t shape_of(const gr_ir_value *v) {
    shape_t s;
    memset(&s, 0, sizeof s);
    s.ndim = v->ndim;
    for (int i = 0; i < v->ndim; i++) s.d[i] = v->dims[i];
    return s;
}

static void type_str(const ctx_t *c, const gr_ir_value *v, char *buf) { gr_ir_type_str(c->g, v, buf, TYPE_STR_LEN); }

static void shape_str(const ctx_t *c, const shape_t *s, char *buf, size_t n) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "[");
    for (int i = 0; i < s->ndim; i++) {
        const char *sep = i ? "," : "";
        if (dim_is_sym(s->d[i]) && s->d[i].sym < c->g->syms.len)
            pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%s", sep, c->g->syms.data[s->d[i].sym]);
        else
            pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%lld", sep, (long long)s->d[i].size);
    }
    snprintf(buf + pos, pos < n ? n - pos : 0, "]");
}

static void ints_str(const int64_t *v, int n, char *buf, size_t size) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "[");
    for (int i = 0; i < n; i++)
        pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "%s%lld", i ? "," : "", (long long)v[i]);
    snprintf(buf + pos, pos < size ? size - pos : 0, "]");
}

static gr_status fail(const ctx_t *c, gr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static gr_status fail(const ctx_t *c, gr_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gr_error(st, "%s: %s", c->where, msg);
}

static void set_untyped(ctx_t *c, int slot) {
    gr_ir_value *v = &c->g->values.data[c->n->out[slot]];
    v->typed = false;
    v->ndim = 0;
    v->placement = GR_PLACE_DEVICE;
}

/* Types output `slot`. Every inferred shape passes here, so this is where the
 * size limit holds for all of them (GR_MAX_NUMEL; see util.h). */
static gr_status set_out(ctx_t *c, int slot, gr_dtype t, const shape_t *s) {
    if (!gr_ir_dims_fit(s->ndim, s->d)) {
        char ss[512];
        shape_str(c, s, ss, sizeof ss);
        set_untyped(c, slot);
        return fail(c, GR_ERR_SHAPE, "output %d would be %s%s, more than %lld elements", slot, gr_dtype_name(t), ss,
                    (long long)GR_MAX_NUMEL);
    }
    gr_ir_value *v = &c->g->values.data[c->n->out[slot]];
    v->typed = true;
    v->dtype = t;
    v->ndim = s->ndim;
    for (int i = 0; i < s->ndim; i++) v->dims[i] = s->d[i];
    v->placement = GR_PLACE_DEVICE;
    return GR_OK;
}

static void all_untyped(ctx_t *c) {
    for (int i = 0; i < c->n->n_out; i++) set_untyped(c, i);
}

/* Normalizes axis a for rank r (negative counts from the end). */
static gr_status norm_axis(const ctx_t *c, int64_t a, int r, const char *what, int *out) {
    if (a < -(int64_t)r || a >= r) return fail(c, GR_ERR_SHAPE, "%s %lld is out of range for rank %d", what, (long long)a, r);
    *out = (int)(a < 0 ? a + r : a);
    return GR_OK;
}

static gr_status attr_int(const ctx_t *c, const char *name, int64_t def, int64_t *out) {
    return gr_ir_attr_int(c->g, c->n, name, def, out);
}

static gr_status attr_ints_required(const ctx_t *c, const char *name, const int64_t **out, int *n) {
    GR_TRY(gr_ir_attr_ints(c->g, c->n, name, out, n));
    if (*n < 0) return fail(c, GR_ERR_INVALID, "attribute '%s' is required", name);
    return GR_OK;
}

/* dtype attribute: a name ("f16") or an enum value; def when absent */
static gr_status attr_dtype(const ctx_t *c, const char *name, bool required, gr_dtype def, gr_dtype *out) {
    const gr_ir_attr *a = gr_ir_attr_find(c->n, name);
    if (!a) {
        if (required) return fail(c, GR_ERR_INVALID, "attribute '%s' is required", name);
        *out = def;
        return GR_OK;
    }
    if (a->kind == GR_IR_ATTR_INT) {
        if (a->i < 0 || a->i >= GR_DTYPE_COUNT) return fail(c, GR_ERR_INVALID, "attribute '%s': bad dtype %lld", name, (long long)a->i);
        *out = (gr_dtype)a->i;
        return GR_OK;
    }
    if (a->kind != GR_IR_ATTR_STRING || !a->s) return fail(c, GR_ERR_INVALID, "attribute '%s' must be a dtype name", name);
    if (gr_dtype_parse(a->s, out) != GR_OK) return fail(c, GR_ERR_INVALID, "attribute '%s': unknown dtype '%s'", name, a->s);
    return GR_OK;
}

/* ==== broadcasting ================================================================== */
/* numpy broadcasting of two shapes; SH_UNKNOWN where a symbolic dim meets a
 * different symbol or a concrete size other than 1 (the result depends on
 * the symbol's value). */
static int broadcast2(const shape_t *a, const shape_t *b, shape_t *out, int *bad_dim) {
    int r = GR_MAX(a->ndim, b->ndim);
    int unknown = SH_KNOWN;
    out->ndim = r;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->ndim), ib = i - (r - b->ndim);
        gr_dim da = ia >= 0 ? a->d[ia] : dim_c(1);
        gr_dim db = ib >= 0 ? b->d[ib] : dim_c(1);
        if (!dim_is_sym(da) && !dim_is_sym(db)) {
            if (da.size == db.size || db.size == 1) out->d[i] = da;
            else if (da.size == 1) out->d[i] = db;
            else {
                *bad_dim = i;
                return -1;
            }
        } else if (dim_is_sym(da) && dim_is_sym(db)) {
            if (da.sym == db.sym) out->d[i] = da;
            else unknown = SH_UNKNOWN, out->d[i] = dim_c(-1);
        } else {
            gr_dim s = dim_is_sym(da) ? da : db, k = dim_is_sym(da) ? db : da;
            if (k.size == 1) out->d[i] = s;
            else unknown = SH_UNKNOWN, out->d[i] = dim_c(-1);
        }
    }
    return unknown;
}

/* Broadcasts the inputs in slots [0, n) (all typed). *known = false when inexpressible. */
static gr_status broadcast_inputs(const ctx_t *c, int n, shape_t *out, bool *known) {
    shape_t acc = shape_of(in_val(c, 0));
    *known = true;
    for (int i = 1; i < n; i++) {
        shape_t b = shape_of(in_val(c, i)), r = {0};
        int bad = 0;
        int res = broadcast2(&acc, &b, &r, &bad);
        if (res < 0) {
            char ta[TYPE_STR_LEN], tb[TYPE_STR_LEN], tacc[TYPE_STR_LEN];
            type_str(c, in_val(c, 0), ta);
            type_str(c, in_val(c, i), tb);
            if (i == 1)
                return fail(c, GR_ERR_SHAPE, "shapes do not broadcast: %s and %s", ta, tb);
            shape_str(c, &acc, tacc, sizeof tacc);
            return fail(c, GR_ERR_SHAPE, "shapes do not broadcast: %s (of the earlier inputs) and %s (input %d)", tacc, tb, i);
        }
        if (res == SH_UNKNOWN) *known = false;
        acc = r;
    }
    *out = acc;
    return GR_OK;
}

/* ==== elementwise =================================================================== */
static gr_status same_dtype(const ctx_t *c, int sa, int sb) {
    const gr_ir_value *a = in_val(c, sa), *b = in_val(c, sb);
    if (a->dtype != b->dtype) {
        char ta[TYPE_STR_LEN], tb[TYPE_STR_LEN];
        type_str(c, a, ta);
        type_str(c, b, tb);
        return fail(c, GR_ERR_SHAPE, "dtypes differ: %s and %s", ta, tb);
    }
    return GR_OK;
}

static gr_status need_dtype(const ctx_t *c, int slot, bool ok, const char *what) {
    if (ok) return GR_OK;
    char t[TYPE_STR_LEN];
    type_str(c, in_val(c, slot), t);
    return fail(c, GR_ERR_SHAPE, "input %d must be %s, got %s", slot, what, t);
}

static gr_status infer_elementwise(ctx_t *c, int n_bcast, gr_dtype out_t) {
    shape_t s = {0};
    bool known = false;
    GR_TRY(broadcast_inputs(c, n_bcast, &s, &known));
    if (!known) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, out_t, &s));
    return GR_OK;
}

static gr_status unary_out(ctx_t *c, gr_dtype out_t) {
    shape_t s = shape_of(in_val(c, 0));
    return set_out(c, 0, out_t, &s);
}
static gr_status infer_unary_any(ctx_t *c) { return unary_out(c, in_val(c, 0)->dtype); }
static gr_status infer_unary_float(ctx_t *c) {
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(in_val(c, 0)->dtype), "a float dtype"));
    return unary_out(c, in_val(c, 0)->dtype);
}
static gr_status infer_unary_numeric(ctx_t *c) {
    gr_dtype t = in_val(c, 0)->dtype;
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(t) || gr_dtype_is_int(t), "a numeric dtype"));
    return unary_out(c, t);
}
static gr_status infer_not(ctx_t *c) {
    GR_TRY(need_dtype(c, 0, in_val(c, 0)->dtype == GR_BOOL, "bool"));
    return unary_out(c, GR_BOOL);
}
static gr_status infer_isnan(ctx_t *c) {
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(in_val(c, 0)->dtype), "a float dtype"));
    return unary_out(c, GR_BOOL);
}
static gr_status infer_cast(ctx_t *c) {
    gr_dtype out_t;
    GR_TRY(attr_dtype(c, "to", true, GR_F32, &out_t));
    return unary_out(c, out_t);
}
static gr_status infer_gelu(ctx_t *c) {
    const char *approx;
    GR_TRY(gr_ir_attr_string(c->g, c->n, "approximate", "none", &approx));
    if (!approx || (strcmp(approx, "none") && strcmp(approx, "tanh")))
        return fail(c, GR_ERR_INVALID, "attribute 'approximate' must be \"none\" or \"tanh\", got \"%s\"",
                    approx ? approx : "");
    return infer_unary_float(c);
}

/* ==== elementwise binary, comparisons, logic, where ================================== */
static gr_status infer_arith(ctx_t *c) {
    GR_TRY(same_dtype(c, 0, 1));
    return infer_elementwise(c, 2, in_val(c, 0)->dtype);
}
static gr_status infer_compare(ctx_t *c) {
    GR_TRY(same_dtype(c, 0, 1));
    return infer_elementwise(c, 2, GR_BOOL);
}
static gr_status infer_logic(ctx_t *c) {
    GR_TRY(need_dtype(c, 0, in_val(c, 0)->dtype == GR_BOOL, "bool"));
    GR_TRY(need_dtype(c, 1, in_val(c, 1)->dtype == GR_BOOL, "bool"));
    return infer_elementwise(c, 2, GR_BOOL);
}
static gr_status infer_where(ctx_t *c) {
    GR_TRY(need_dtype(c, 0, in_val(c, 0)->dtype == GR_BOOL, "bool"));
    GR_TRY(same_dtype(c, 1, 2));
    return infer_elementwise(c, 3, in_val(c, 1)->dtype);
}

/* ==== reductions and normalizations =================================================== */
static gr_status infer_reduce(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    int r = x->ndim;
    const int64_t *axes;
    int n_axes;
    int64_t keepdims;
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "axes", &axes, &n_axes));
    GR_TRY(attr_int(c, "keepdims", 1, &keepdims));
    bool reduced[GR_MAX_DIMS] = {false};
    if (n_axes <= 0) {
        for (int i = 0; i < r; i++) reduced[i] = true;
    } else {
        for (int i = 0; i < n_axes; i++) {
            int a = 0;
            GR_TRY(norm_axis(c, axes[i], r, "axis", &a));
            if (reduced[a]) return fail(c, GR_ERR_INVALID, "axis %lld is listed twice", (long long)axes[i]);
            reduced[a] = true;
        }
    }
    shape_t s = {0};
    for (int i = 0; i < r; i++) {
        if (!reduced[i]) s.d[s.ndim++] = x->dims[i];
        else if (keepdims) s.d[s.ndim++] = dim_c(1);
    }
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_softmax(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    int64_t axis;
    int a = 0;
    GR_TRY(attr_int(c, "axis", -1, &axis));
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(x->dtype), "a float dtype"));
    if (x->ndim == 0) return fail(c, GR_ERR_SHAPE, "softmax of a 0-d tensor");
    GR_TRY(norm_axis(c, axis, x->ndim, "axis", &a));
    shape_t s = shape_of(x);
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

/* p (scale or bias) must broadcast onto the trailing dims [axis, ndim) of x. */
static gr_status check_norm_param(const ctx_t *c, int slot, int axis, const char *what) {
    const gr_ir_value *x = in_val(c, 0), *p = in_val(c, slot);
    char tx[TYPE_STR_LEN], tp[TYPE_STR_LEN];
    type_str(c, x, tx);
    type_str(c, p, tp);
    if (p->dtype != x->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s and %s %s", tx, what, tp);
    int tail = x->ndim - axis;
    if (p->ndim > tail)
        return fail(c, GR_ERR_SHAPE, "%s %s has more dims than the normalized dims of %s (axis %d)", what, tp, tx, axis);
    for (int i = 0; i < p->ndim; i++) {
        gr_dim pd = p->dims[i], xd = x->dims[x->ndim - p->ndim + i];
        if (!dim_is_sym(pd) && pd.size == 1) continue;
        if (dim_eq(pd, xd)) continue;
        if (dim_is_sym(pd) || dim_is_sym(xd)) continue; /* decided once the symbols have values */
        return fail(c, GR_ERR_SHAPE, "%s %s does not broadcast to the normalized dims of %s (axis %d)", what, tp, tx, axis);
    }
    return GR_OK;
}

static gr_status infer_layer_norm(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    int64_t axis;
    int a = 0;
    double eps;
    GR_TRY(attr_int(c, "axis", -1, &axis));
    GR_TRY(gr_ir_attr_float(c->g, c->n, "epsilon", 1e-5, &eps));
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(x->dtype), "a float dtype"));
    if (x->ndim == 0) return fail(c, GR_ERR_SHAPE, "layer_norm of a 0-d tensor");
    GR_TRY(norm_axis(c, axis, x->ndim, "axis", &a));
    GR_TRY(check_norm_param(c, 1, a, "scale"));
    if (in_val(c, 2)) GR_TRY(check_norm_param(c, 2, a, "bias"));
    shape_t s = shape_of(x);
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

/* ==== matmul ========================================================================== */
static gr_status infer_matmul(ctx_t *c) {
    const gr_ir_value *a = in_val(c, 0), *b = in_val(c, 1), *bias = in_val(c, 2);
    char ta[TYPE_STR_LEN], tb[TYPE_STR_LEN];
    type_str(c, a, ta);
    type_str(c, b, tb);
    int64_t trans_a, trans_b;
    double alpha;
    GR_TRY(attr_int(c, "trans_a", 0, &trans_a));
    GR_TRY(attr_int(c, "trans_b", 0, &trans_b));
    GR_TRY(gr_ir_attr_float(c->g, c->n, "alpha", 1.0, &alpha));
    if (a->dtype != b->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s @ %s", ta, tb);
    if (a->ndim < 1 || b->ndim < 1) return fail(c, GR_ERR_SHAPE, "matmul needs operands of rank >= 1: %s @ %s", ta, tb);
    gr_dim m = dim_c(1), ka, kb, n = dim_c(1);
    if (a->ndim == 1) ka = a->dims[0];
    else {
        gr_dim r0 = a->dims[a->ndim - 2], r1 = a->dims[a->ndim - 1];
        m = trans_a ? r1 : r0;
        ka = trans_a ? r0 : r1;
    }
    if (b->ndim == 1) kb = b->dims[0];
    else {
        gr_dim r0 = b->dims[b->ndim - 2], r1 = b->dims[b->ndim - 1];
        kb = trans_b ? r1 : r0;
        n = trans_b ? r0 : r1;
    }
    bool known = true;
    if (!dim_eq(ka, kb)) {
        if (!dim_is_sym(ka) && !dim_is_sym(kb)) {
            if (trans_a || trans_b)
                return fail(c, GR_ERR_SHAPE, "inner dims differ: %s @ %s (trans_a=%lld, trans_b=%lld)", ta, tb,
                            (long long)trans_a, (long long)trans_b);
            return fail(c, GR_ERR_SHAPE, "inner dims differ: %s @ %s", ta, tb);
        }
        known = false;
    }
    shape_t ba = {0}, bb = {0}, batch = {0};
    if (a->ndim > 2) {
        ba.ndim = a->ndim - 2;
        for (int i = 0; i < ba.ndim; i++) ba.d[i] = a->dims[i];
    }
    if (b->ndim > 2) {
        bb.ndim = b->ndim - 2;
        for (int i = 0; i < bb.ndim; i++) bb.d[i] = b->dims[i];
    }
    int bad = 0;
    int res = broadcast2(&ba, &bb, &batch, &bad);
    if (res < 0) return fail(c, GR_ERR_SHAPE, "batch dims do not broadcast: %s @ %s", ta, tb);
    if (res == SH_UNKNOWN) known = false;
    shape_t out = batch;
    if (a->ndim > 1) out.d[out.ndim++] = m;
    if (b->ndim > 1) out.d[out.ndim++] = n;
    if (bias) {
        char tbias[TYPE_STR_LEN], tout[TYPE_STR_LEN];
        type_str(c, bias, tbias);
        if (bias->dtype != a->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s @ %s + bias %s", ta, tb, tbias);
        if (known) {
            shape_t sb = shape_of(bias), r = {0};
            res = broadcast2(&out, &sb, &r, &bad);
            bool same = res >= 0 && r.ndim == out.ndim;
            for (int i = 0; same && i < r.ndim; i++) same = dim_eq(r.d[i], out.d[i]) || res == SH_UNKNOWN;
            if (!same) {
                shape_str(c, &out, tout, sizeof tout);
                return fail(c, GR_ERR_SHAPE, "bias %s does not broadcast to the result %s of %s @ %s", tbias, tout, ta, tb);
            }
        }
    }
    if (!known) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, a->dtype, &out));
    return GR_OK;
}

/* ==== data movement ===================================================================== */
static gr_status infer_reshape(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *spec;
    int n;
    GR_TRY(attr_ints_required(c, "shape", &spec, &n));
    char sspec[512], tx[TYPE_STR_LEN];
    ints_str(spec, n, sspec, sizeof sspec);
    type_str(c, x, tx);
    if (n > GR_MAX_DIMS) return fail(c, GR_ERR_INVALID, "shape %s has more than %d dims", sspec, GR_MAX_DIMS);
    int infer_at = -1;
    int64_t known[GR_MAX_DIMS], known_prod = 1;
    int n_known = 0;
    for (int i = 0; i < n; i++) {
        if (spec[i] == -1) {
            if (infer_at >= 0) return fail(c, GR_ERR_INVALID, "shape %s has more than one -1", sspec);
            infer_at = i;
        } else if (spec[i] < 0) {
            return fail(c, GR_ERR_INVALID, "shape %s has a negative dim", sspec);
        } else {
            known[n_known++] = spec[i];
        }
    }
    /* checked: a product that wraps could otherwise match the input's count */
    if (!gr_shape_numel_checked(n_known, known, &known_prod))
        return fail(c, GR_ERR_SHAPE, "shape %s holds more than %lld elements", sspec, (long long)GR_MAX_NUMEL);
    /* input element count: concrete part times a list of symbols */
    int64_t in_dims[GR_MAX_DIMS], in_prod = 1;
    int n_sym = 0, n_in = 0, sym = GR_SYM_NONE;
    for (int i = 0; i < x->ndim; i++) {
        if (dim_is_sym(x->dims[i])) n_sym++, sym = x->dims[i].sym;
        else in_dims[n_in++] = x->dims[i].size;
    }
    if (!gr_shape_numel_checked(n_in, in_dims, &in_prod))
        return fail(c, GR_ERR_SHAPE, "input %s holds more than %lld elements", tx, (long long)GR_MAX_NUMEL);
    shape_t s = {0};
    s.ndim = n;
    for (int i = 0; i < n; i++) s.d[i] = dim_c(spec[i]);
    if (n_sym == 0 || in_prod == 0) { /* element count known (a zero dim makes it 0) */
        if (infer_at >= 0) {
            if (known_prod == 0)
                return fail(c, GR_ERR_SHAPE, "cannot infer the -1 of shape %s for %s: the other dims hold no elements", sspec, tx);
            if (in_prod % known_prod != 0)
                return fail(c, GR_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s", tx, (long long)in_prod, sspec);
            s.d[infer_at] = dim_c(in_prod / known_prod);
        } else if (known_prod != in_prod) {
            return fail(c, GR_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s (%lld elements)", tx, (long long)in_prod,
                        sspec, (long long)known_prod);
        }
    } else if (infer_at >= 0) {
        /* -1 = N * in_prod / known_prod: expressible only as the symbol itself */
        if (n_sym == 1 && in_prod == known_prod) s.d[infer_at] = (gr_dim){-1, sym};
        else {
            set_untyped(c, 0);
            return GR_OK;
        }
    }
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_transpose(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *perm;
    int n;
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "perm", &perm, &n));
    shape_t s = {0};
    s.ndim = x->ndim;
    if (n < 0) {
        for (int i = 0; i < x->ndim; i++) s.d[i] = x->dims[x->ndim - 1 - i];
    } else {
        char sp[512], tx[TYPE_STR_LEN];
        ints_str(perm, n, sp, sizeof sp);
        type_str(c, x, tx);
        if (n != x->ndim) return fail(c, GR_ERR_SHAPE, "perm %s has %d entries for %s of rank %d", sp, n, tx, x->ndim);
        bool seen[GR_MAX_DIMS] = {false};
        for (int i = 0; i < n; i++) {
            if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
                return fail(c, GR_ERR_INVALID, "perm %s is not a permutation of 0..%d", sp, n - 1);
            seen[perm[i]] = true;
            s.d[i] = x->dims[perm[i]];
        }
    }
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_expand(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *spec;
    int n;
    GR_TRY(attr_ints_required(c, "shape", &spec, &n));
    char sspec[512], tx[TYPE_STR_LEN];
    ints_str(spec, n, sspec, sizeof sspec);
    type_str(c, x, tx);
    if (n > GR_MAX_DIMS) return fail(c, GR_ERR_INVALID, "shape %s has more than %d dims", sspec, GR_MAX_DIMS);
    shape_t target = {0}, xs = shape_of(x), out;
    target.ndim = n;
    for (int i = 0; i < n; i++) {
        if (spec[i] < 0) return fail(c, GR_ERR_INVALID, "shape %s has a negative dim", sspec);
        target.d[i] = dim_c(spec[i]);
    }
    int bad = 0;
    int res = broadcast2(&xs, &target, &out, &bad);
    if (res < 0) return fail(c, GR_ERR_SHAPE, "cannot expand %s to %s", tx, sspec);
    if (res == SH_UNKNOWN) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, x->dtype, &out));
    return GR_OK;
}

static gr_status infer_squeeze(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *axes;
    int n;
    char tx[TYPE_STR_LEN];
    type_str(c, x, tx);
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "axes", &axes, &n));
    bool drop[GR_MAX_DIMS] = {false};
    if (n < 0) {
        for (int i = 0; i < x->ndim; i++) {
            if (dim_is_sym(x->dims[i])) { /* removed only if the symbol is 1 */
                set_untyped(c, 0);
                return GR_OK;
            }
            drop[i] = x->dims[i].size == 1;
        }
    } else {
        for (int i = 0; i < n; i++) {
            int a = 0;
            GR_TRY(norm_axis(c, axes[i], x->ndim, "axis", &a));
            if (drop[a]) return fail(c, GR_ERR_INVALID, "axis %lld is listed twice", (long long)axes[i]);
            if (!dim_is_sym(x->dims[a]) && x->dims[a].size != 1)
                return fail(c, GR_ERR_SHAPE, "cannot squeeze axis %lld of %s: its size is %lld, not 1", (long long)axes[i],
                            tx, (long long)x->dims[a].size);
            drop[a] = true;
        }
    }
    shape_t s = {0};
    for (int i = 0; i < x->ndim; i++)
        if (!drop[i]) s.d[s.ndim++] = x->dims[i];
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_unsqueeze(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *axes;
    int n;
    GR_TRY(attr_ints_required(c, "axes", &axes, &n));
    int r = x->ndim + n;
    if (r > GR_MAX_DIMS) {
        char tx[TYPE_STR_LEN];
        type_str(c, x, tx);
        return fail(c, GR_ERR_SHAPE, "unsqueezing %d axes of %s exceeds %d dims", n, tx, GR_MAX_DIMS);
    }
    bool added[GR_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int a = 0;
        GR_TRY(norm_axis(c, axes[i], r, "axis", &a));
        if (added[a]) return fail(c, GR_ERR_INVALID, "axis %lld is listed twice", (long long)axes[i]);
        added[a] = true;
    }
    shape_t s = {0};
    s.ndim = r;
    for (int i = 0, j = 0; i < r; i++) s.d[i] = added[i] ? dim_c(1) : x->dims[j++];
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

#define SLICE_HUGE ((int64_t)1 << 31) /* ends at or beyond this mean "to the end" for symbolic dims */

static gr_status infer_slice(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *starts, *ends, *axes, *steps;
    int ns, ne, na, nst;
    GR_TRY(attr_ints_required(c, "starts", &starts, &ns));
    GR_TRY(attr_ints_required(c, "ends", &ends, &ne));
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "axes", &axes, &na));
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "steps", &steps, &nst));
    if (ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return fail(c, GR_ERR_INVALID, "starts, ends, axes and steps differ in length (%d, %d, %d, %d)", ns, ne, na, nst);
    if (ns > x->ndim && na < 0)
        return fail(c, GR_ERR_SHAPE, "%d starts for a tensor of rank %d", ns, x->ndim);
    shape_t s = shape_of(x);
    bool seen[GR_MAX_DIMS] = {false};
    bool known = true;
    for (int i = 0; i < ns; i++) {
        int a = 0;
        GR_TRY(norm_axis(c, na >= 0 ? axes[i] : i, x->ndim, "axis", &a));
        if (seen[a]) return fail(c, GR_ERR_INVALID, "axis %d is sliced twice", a);
        seen[a] = true;
        int64_t step = nst >= 0 ? steps[i] : 1;
        if (step == 0) return fail(c, GR_ERR_INVALID, "step of axis %d is 0", a);
        gr_dim d = x->dims[a];
        if (!dim_is_sym(d)) {
            int64_t first, count;
            gr_ir_slice_axis(d.size, starts[i], ends[i], step, &first, &count);
            s.d[a] = dim_c(count);
        } else {
            /* the whole symbolic dim, forwards or backwards, keeps the symbol */
            bool whole_fwd = step == 1 && starts[i] == 0 && ends[i] >= SLICE_HUGE;
            bool whole_bwd = step == -1 && (starts[i] == -1 || starts[i] >= SLICE_HUGE) && ends[i] <= -SLICE_HUGE;
            if (!whole_fwd && !whole_bwd) known = false;
        }
    }
    if (!known) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_concat(ctx_t *c) {
    const gr_ir_value *x0 = in_val(c, 0);
    int64_t axis;
    int a = 0;
    GR_TRY(attr_int(c, "axis", 0, &axis));
    if (x0->ndim == 0) return fail(c, GR_ERR_SHAPE, "cannot concatenate 0-d tensors");
    GR_TRY(norm_axis(c, axis, x0->ndim, "axis", &a));
    shape_t s = shape_of(x0);
    bool known = true;
    int64_t total = 0;
    int n_sym = 0;
    gr_dim sym_dim = dim_c(0);
    for (int i = 0; i < c->n->n_in; i++) {
        const gr_ir_value *x = in_val(c, i);
        char t0[TYPE_STR_LEN], ti[TYPE_STR_LEN];
        type_str(c, x0, t0);
        type_str(c, x, ti);
        if (x->dtype != x0->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s and %s (input %d)", t0, ti, i);
        if (x->ndim != x0->ndim) return fail(c, GR_ERR_SHAPE, "ranks differ: %s and %s (input %d)", t0, ti, i);
        for (int d = 0; d < x->ndim; d++) {
            if (d == a) continue;
            if (dim_eq(x->dims[d], s.d[d])) continue;
            if (dim_is_sym(x->dims[d]) || dim_is_sym(s.d[d])) {
                known = false;
                continue;
            }
            return fail(c, GR_ERR_SHAPE, "dim %d differs: %s and %s (input %d), concatenating on axis %d", d, t0, ti, i, a);
        }
        if (dim_is_sym(x->dims[a])) n_sym++, sym_dim = x->dims[a];
        else if (gr_add_overflow(total, x->dims[a].size, &total) || total > GR_MAX_NUMEL)
            return fail(c, GR_ERR_SHAPE, "the inputs' sizes along axis %d add up to more than %lld", a, (long long)GR_MAX_NUMEL);
    }
    if (n_sym == 0) s.d[a] = dim_c(total);
    else if (n_sym == 1 && total == 0) s.d[a] = sym_dim;
    else known = false;
    if (!known) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, x0->dtype, &s));
    return GR_OK;
}

static gr_status infer_split(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    int64_t axis;
    int a = 0;
    const int64_t *sizes;
    int n_sizes, n_out = c->n->n_out;
    char tx[TYPE_STR_LEN];
    type_str(c, x, tx);
    GR_TRY(attr_int(c, "axis", 0, &axis));
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "split", &sizes, &n_sizes));
    if (x->ndim == 0) return fail(c, GR_ERR_SHAPE, "cannot split a 0-d tensor");
    GR_TRY(norm_axis(c, axis, x->ndim, "axis", &a));
    gr_dim d = x->dims[a];
    shape_t s = shape_of(x);
    if (n_sizes >= 0) {
        char ss[512];
        ints_str(sizes, n_sizes, ss, sizeof ss);
        if (n_sizes != n_out) return fail(c, GR_ERR_INVALID, "split %s has %d sizes for %d outputs", ss, n_sizes, n_out);
        int64_t sum = 0;
        for (int i = 0; i < n_sizes; i++) {
            if (sizes[i] < 0) return fail(c, GR_ERR_INVALID, "split %s has a negative size", ss);
            if (gr_add_overflow(sum, sizes[i], &sum))
                return fail(c, GR_ERR_SHAPE, "split sizes %s add up to more than %lld", ss, (long long)INT64_MAX);
        }
        if (!dim_is_sym(d) && sum != d.size)
            return fail(c, GR_ERR_SHAPE, "split sizes %s sum to %lld, but axis %d of %s has %lld", ss, (long long)sum, a, tx,
                        (long long)d.size);
        for (int i = 0; i < n_out; i++) {
            s.d[a] = dim_c(sizes[i]);
            GR_TRY(set_out(c, i, x->dtype, &s));
        }
        return GR_OK;
    }
    if (dim_is_sym(d)) {
        if (n_out == 1) GR_TRY(set_out(c, 0, x->dtype, &s));
        else all_untyped(c);
        return GR_OK;
    }
    if (d.size % n_out != 0)
        return fail(c, GR_ERR_SHAPE, "axis %d of %s (%lld) does not split into %d equal parts", a, tx, (long long)d.size, n_out);
    s.d[a] = dim_c(d.size / n_out);
    for (int i = 0; i < n_out; i++) GR_TRY(set_out(c, i, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_gather(ctx_t *c) {
    const gr_ir_value *data = in_val(c, 0), *idx = in_val(c, 1);
    int64_t axis;
    int a = 0;
    char td[TYPE_STR_LEN], ti[TYPE_STR_LEN];
    type_str(c, data, td);
    type_str(c, idx, ti);
    GR_TRY(attr_int(c, "axis", 0, &axis));
    if (idx->dtype != GR_I32 && idx->dtype != GR_I64) return fail(c, GR_ERR_SHAPE, "indices must be i32 or i64, got %s", ti);
    if (data->ndim == 0) return fail(c, GR_ERR_SHAPE, "cannot gather from 0-d %s", td);
    GR_TRY(norm_axis(c, axis, data->ndim, "axis", &a));
    /* no index is valid on an empty axis: a non-empty gather from one fails
     * whatever the indices hold, so it is refused here, at compile time */
    if (!dim_is_sym(data->dims[a]) && data->dims[a].size == 0 && gr_ir_value_numel(idx) > 0)
        return fail(c, GR_ERR_SHAPE, "cannot gather %s from axis %d of %s: the axis is empty, so every index is out of range",
                    ti, a, td);
    shape_t s = {0};
    if (c->n->op == GR_OP_GATHER) {
        int r = data->ndim - 1 + idx->ndim;
        if (r > GR_MAX_DIMS) return fail(c, GR_ERR_SHAPE, "result of gathering %s from %s exceeds %d dims", ti, td, GR_MAX_DIMS);
        for (int i = 0; i < a; i++) s.d[s.ndim++] = data->dims[i];
        for (int i = 0; i < idx->ndim; i++) s.d[s.ndim++] = idx->dims[i];
        for (int i = a + 1; i < data->ndim; i++) s.d[s.ndim++] = data->dims[i];
    } else {
        if (idx->ndim != data->ndim) return fail(c, GR_ERR_SHAPE, "indices %s and data %s differ in rank", ti, td);
        s = shape_of(idx);
    }
    GR_TRY(set_out(c, 0, data->dtype, &s));
    return GR_OK;
}

static gr_status infer_trilu(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    int64_t upper, k;
    GR_TRY(attr_int(c, "upper", 1, &upper));
    GR_TRY(attr_int(c, "k", 0, &k));
    if (x->ndim < 2) {
        char tx[TYPE_STR_LEN];
        type_str(c, x, tx);
        return fail(c, GR_ERR_SHAPE, "trilu needs rank >= 2, got %s", tx);
    }
    shape_t s = shape_of(x);
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

/* ==== generators ========================================================================== */
static gr_status gen_shape(const ctx_t *c, shape_t *s) {
    const int64_t *spec;
    int n;
    GR_TRY(attr_ints_required(c, "shape", &spec, &n));
    char ss[512];
    ints_str(spec, n, ss, sizeof ss);
    if (n > GR_MAX_DIMS) return fail(c, GR_ERR_INVALID, "shape %s has more than %d dims", ss, GR_MAX_DIMS);
    s->ndim = n;
    for (int i = 0; i < n; i++) {
        if (spec[i] < 0) return fail(c, GR_ERR_INVALID, "shape %s has a negative dim", ss);
        s->d[i] = dim_c(spec[i]);
    }
    return GR_OK;
}

static gr_status infer_generator(ctx_t *c) {
    gr_dtype t;
    shape_t s = {0};
    GR_TRY(attr_dtype(c, "dtype", false, GR_F32, &t));
    switch (c->n->op) {
    case GR_OP_FILL: {
        double v;
        GR_TRY(gr_ir_attr_float(c->g, c->n, "value", 0.0, &v));
        GR_TRY(gen_shape(c, &s));
        break;
    }
    case GR_OP_RANGE: {
        double start, limit, delta;
        if (!gr_ir_attr_find(c->n, "limit")) return fail(c, GR_ERR_INVALID, "attribute 'limit' is required");
        GR_TRY(gr_ir_attr_float(c->g, c->n, "start", 0.0, &start));
        GR_TRY(gr_ir_attr_float(c->g, c->n, "limit", 0.0, &limit));
        GR_TRY(gr_ir_attr_float(c->g, c->n, "delta", 1.0, &delta));
        if (t == GR_BOOL) return fail(c, GR_ERR_INVALID, "range cannot produce bool");
        if (delta == 0 || !isfinite(delta) || !isfinite(start) || !isfinite(limit))
            return fail(c, GR_ERR_INVALID, "range(%g, %g, %g) is not a finite sequence", start, limit, delta);
        double len = ceil((limit - start) / delta);
        if (len < 0) len = 0;
        if (len > (double)GR_MAX_NUMEL)
            return fail(c, GR_ERR_SHAPE, "range(%g, %g, %g) has more than %lld elements", start, limit, delta,
                        (long long)GR_MAX_NUMEL);
        s.ndim = 1;
        s.d[0] = dim_c((int64_t)len);
        break;
    }
    default: { /* random_uniform, random_normal */
        double p0, p1;
        int64_t seed;
        bool normal = c->n->op == GR_OP_RANDOM_NORMAL;
        GR_TRY(attr_int(c, "seed", 0, &seed));
        GR_TRY(gr_ir_attr_float(c->g, c->n, normal ? "mean" : "low", 0.0, &p0));
        GR_TRY(gr_ir_attr_float(c->g, c->n, normal ? "std" : "high", 1.0, &p1));
        if (!gr_dtype_is_float(t))
            return fail(c, GR_ERR_INVALID, "attribute 'dtype' must be a float dtype, got %s", gr_dtype_name(t));
        GR_TRY(gen_shape(c, &s));
        break;
    }
    }
    GR_TRY(set_out(c, 0, t, &s));
    return GR_OK;
}

/* ==== control flow ========================================================================== */
/* Gives the captured values of a subgraph (GR_VAL_INPUT not listed in its
 * inputs) the types of the outer values of the same name, then infers it. */
static gr_status infer_subgraph(gr_graph *outer, gr_graph *sub) {
    for (int i = 0; i < sub->values.len; i++) {
        gr_ir_value *v = &sub->values.data[i];
        if (v->kind != GR_VAL_INPUT) continue;
        bool listed = false;
        for (int j = 0; j < sub->inputs.len && !listed; j++) listed = sub->inputs.data[j] == i;
        if (listed) continue;
        /* the nearest enclosing graph that has the name (captures may skip levels) */
        const gr_graph *owner = outer;
        int ov = -1;
        for (; owner && (ov = gr_ir_find_value(owner, v->name)) < 0; owner = owner->parent) {}
        if (ov < 0) continue;
        const gr_ir_value *o = &owner->values.data[ov];
        v->typed = o->typed;
        v->dtype = o->dtype;
        v->ndim = o->ndim;
        v->placement = o->placement;
        for (int d = 0; d < o->ndim; d++) {
            gr_dim od = o->dims[d];
            if (dim_is_sym(od)) { /* symbols are per graph: map by name */
                int32_t s;
                GR_TRY(gr_ir_sym(sub, owner->syms.data[od.sym], &s));
                od.sym = s;
            }
            v->dims[d] = od;
        }
    }
    return gr_ir_infer_shapes(sub);
}

/* Do two values (of possibly different graphs) have the same type? */
static bool same_type(const gr_graph *ga, const gr_ir_value *a, const gr_graph *gb, const gr_ir_value *b) {
    if (!a->typed || !b->typed || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++) {
        gr_dim x = a->dims[i], y = b->dims[i];
        if (dim_is_sym(x) != dim_is_sym(y)) return false;
        if (!dim_is_sym(x)) {
            if (x.size != y.size) return false;
        } else if (strcmp(ga->syms.data[x.sym], gb->syms.data[y.sym])) {
            return false;
        }
    }
    return true;
}

/* Copies the type of value v of graph src onto output `slot`, mapping symbols by name. */
static gr_status adopt_type(ctx_t *c, int slot, const gr_graph *src, const gr_ir_value *v) {
    shape_t s = shape_of(v);
    for (int d = 0; d < s.ndim; d++)
        if (dim_is_sym(s.d[d])) GR_TRY(gr_ir_sym(c->g, src->syms.data[s.d[d].sym], &s.d[d].sym));
    GR_TRY(set_out(c, slot, v->dtype, &s));
    return GR_OK;
}

static gr_graph *graph_attr(const ctx_t *c, const char *name) {
    const gr_ir_attr *a = gr_ir_attr_find(c->n, name);
    return a && a->kind == GR_IR_ATTR_GRAPH ? a->graph : NULL;
}

static gr_status infer_if(ctx_t *c) {
    gr_graph *then_g = graph_attr(c, "then_branch"), *else_g = graph_attr(c, "else_branch");
    if (!then_g || !else_g) return fail(c, GR_ERR_INVALID, "needs graph attributes 'then_branch' and 'else_branch'");
    const gr_ir_value *cond = in_val(c, 0);
    if (cond && cond->typed) {
        GR_TRY(need_dtype(c, 0, cond->dtype == GR_BOOL, "bool"));
        int64_t numel = gr_ir_value_numel(cond);
        if (numel >= 0 && numel != 1) {
            char t[TYPE_STR_LEN];
            type_str(c, cond, t);
            return fail(c, GR_ERR_SHAPE, "the condition must hold exactly one element, got %s", t);
        }
    }
    GR_TRY(infer_subgraph(c->g, then_g));
    GR_TRY(infer_subgraph(c->g, else_g));
    if (then_g->outputs.len != c->n->n_out || else_g->outputs.len != c->n->n_out)
        return fail(c, GR_ERR_SHAPE, "branches have %d and %d outputs, the node %d", then_g->outputs.len, else_g->outputs.len,
                    c->n->n_out);
    for (int i = 0; i < c->n->n_out; i++) {
        const gr_ir_value *tv = &then_g->values.data[then_g->outputs.data[i]];
        const gr_ir_value *ev = &else_g->values.data[else_g->outputs.data[i]];
        if (tv->typed && ev->typed && tv->dtype != ev->dtype) {
            char tt[TYPE_STR_LEN], te[TYPE_STR_LEN];
            gr_ir_type_str(then_g, tv, tt, sizeof tt);
            gr_ir_type_str(else_g, ev, te, sizeof te);
            return fail(c, GR_ERR_SHAPE, "output %d: branches differ in dtype: %s and %s", i, tt, te);
        }
        if (same_type(then_g, tv, else_g, ev)) GR_TRY(adopt_type(c, i, then_g, tv));
        else set_untyped(c, i);
    }
    return GR_OK;
}

/* loop(max_trip, cond, carried...; body): body inputs (iter, cond, carried...),
 * body outputs (cond, carried..., scan...). A carried output is typed when the
 * body keeps its type; scan outputs depend on the trip count: untyped. */
static gr_status infer_loop(ctx_t *c) {
    gr_graph *body = graph_attr(c, "body");
    if (!body) return fail(c, GR_ERR_INVALID, "needs graph attribute 'body'");
    GR_TRY(infer_subgraph(c->g, body));
    int n_carried = c->n->n_in - 2;
    if (body->outputs.len < 1 + n_carried)
        return fail(c, GR_ERR_SHAPE, "body has %d outputs for %d carried values", body->outputs.len, n_carried);
    for (int i = 0; i < c->n->n_out; i++) {
        if (i >= n_carried) {
            set_untyped(c, i);
            continue;
        }
        const gr_ir_value *init = in_val(c, 2 + i);
        const gr_ir_value *bout = &body->values.data[body->outputs.data[1 + i]];
        if (init && init->typed && same_type(c->g, init, body, bout)) {
            shape_t s = shape_of(init);
            GR_TRY(set_out(c, i, init->dtype, &s));
        } else {
            set_untyped(c, i);
        }
    }
    return GR_OK;
}

/* ==== driver ================================================================================= */
/* One shape rule per op: the `shape` column of ir/ops.def. */
typedef gr_status (*shape_rule)(ctx_t *c);
static const shape_rule shape_rules[] = {
#define GR_OP_DEF(id, name, kind, min_in, max_in, min_out, max_out, shape, lower, kfn, attrs) [GR_OP_##id] = infer_##shape,
#include "ir/ops.def"
#undef GR_OP_DEF
};
_Static_assert(sizeof shape_rules / sizeof shape_rules[0] == GR_OP_COUNT, "ir/ops.def: a shape rule per op");

gr_status gr_ir_infer_node(gr_graph *g, int node) {
    if (node < 0 || node >= g->nodes.len) return gr_error(GR_ERR_INVALID, "infer: node %d of %d", node, g->nodes.len);
    ctx_t c;
    c.g = g;
    c.node_index = node;
    c.n = &g->nodes.data[node];
    gr_ir_node_where(g, c.n, c.where, sizeof c.where);
    const gr_op_info *info = gr_op_get(c.n->op);
    if (!info) return fail(&c, GR_ERR_INVALID, "unknown op");
    GR_TRY(gr_ir_check_attrs(g, c.n)); /* an unknown attribute would be ignored below: a silently wrong result */
    if (c.n->n_in < info->min_in || (info->max_in >= 0 && c.n->n_in > info->max_in) || c.n->n_out < info->min_out ||
        (info->max_out >= 0 && c.n->n_out > info->max_out))
        return fail(&c, GR_ERR_INVALID, "wrong number of inputs (%d) or outputs (%d)", c.n->n_in, c.n->n_out);
    for (int i = 0; i < c.n->n_out; i++)
        if (c.n->out[i] < 0 || c.n->out[i] >= g->values.len) return fail(&c, GR_ERR_INVALID, "output %d refers to no value", i);
    /* required inputs present, and typed (else the outputs stay untyped) */
    bool all_typed = true;
    for (int i = 0; i < c.n->n_in; i++) {
        int v = c.n->in[i];
        /* ops.def: inputs past min_in of a fixed-arity op are optional */
        bool optional = i >= info->min_in && info->max_in >= 0;
        if (v < -1 || v >= g->values.len) return fail(&c, GR_ERR_INVALID, "input %d refers to no value", i);
        if (v == -1) {
            if (!optional) return fail(&c, GR_ERR_INVALID, "input %d is required but missing", i);
            continue;
        }
        if (!g->values.data[v].typed && info->kind != GR_OPK_CONTROL) all_typed = false;
    }
    if (!all_typed) {
        all_untyped(&c);
        return GR_OK;
    }
    return shape_rules[c.n->op](&c);
}

gr_status gr_ir_infer_shapes(gr_graph *g) {
    for (int i = 0; i < g->nodes.len; i++) GR_TRY(gr_ir_infer_node(g, i));
    return GR_OK;
}

/* ==== specialization ========================================================================== */
static gr_status specialize_value(gr_graph *g, gr_ir_value *v, const int64_t *sym_values, const gr_graph *root) {
    for (int d = 0; d < v->ndim; d++) {
        gr_dim *dim = &v->dims[d];
        if (!dim_is_sym(*dim)) continue;
        const char *name = dim->sym >= 0 && dim->sym < g->syms.len ? g->syms.data[dim->sym] : NULL;
        if (!name) return gr_error(GR_ERR_INVALID, "value '%s': dim %d refers to no symbol", v->name, d);
        /* symbols are per graph; values are given for the root graph's symbols */
        int idx = -1;
        for (int s = 0; s < root->syms.len; s++)
            if (!strcmp(root->syms.data[s], name)) idx = s;
        if (idx < 0) continue; /* a subgraph's own symbol (e.g. a loop's growing dim) */
        int64_t val = sym_values ? sym_values[idx] : -1;
        if (val < 0)
            return gr_error(GR_ERR_INVALID, "specialize: no value for symbolic dim '%s' (of value '%s')", name, v->name);
        *dim = dim_c(val);
    }
    if (!gr_ir_dims_fit(v->ndim, v->dims)) {
        char t[TYPE_STR_LEN];
        gr_ir_type_str(g, v, t, sizeof t);
        return gr_error(GR_ERR_SHAPE, "value '%s' would be %s, more than %lld elements", v->name, t, (long long)GR_MAX_NUMEL);
    }
    return GR_OK;
}

static gr_status specialize_graph(gr_graph *g, const int64_t *sym_values, const gr_graph *root) {
    for (int i = 0; i < g->values.len; i++) {
        gr_ir_value *v = &g->values.data[i];
        if (v->kind == GR_VAL_NODE || !v->typed) continue;
        GR_TRY(specialize_value(g, v, sym_values, root));
    }
    for (int i = 0; i < g->nodes.len; i++) {
        gr_ir_node *n = &g->nodes.data[i];
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].kind == GR_IR_ATTR_GRAPH && n->attrs[a].graph)
                GR_TRY(specialize_graph(n->attrs[a].graph, sym_values, root));
    }
    return GR_OK;
}

gr_status gr_ir_specialize(gr_graph *g, const int64_t *sym_values) {
    GR_TRY(specialize_graph(g, sym_values, g));
    return gr_ir_infer_shapes(g);
}
