/* ir/shape — shape and dtype inference, specialization of symbolic dims: a
 * service of the IR that the frontends (typing as they import) and the passes
 * (after every rewrite) both use.
 *
 * Every rule follows the op semantics in ir/ops.c. A shape is a list of
 * gr_dim: concrete (size >= 0) or symbolic (an expression over the graph's
 * symbols, ir/dimexpr.c). Symbolic results are expressions: a concat adds its
 * inputs' dims, a reshape's -1 divides the element counts, a slice bound may
 * itself be symbolic (ends = seq), a range's length is ceil((limit - start) /
 * delta). Where two symbolic dims must agree but are different expressions
 * (a broadcast of seq against kv_len, a matmul's inner dims), the rule takes
 * the value valid for every correct binding (max(a, b) for a broadcast) and
 * the check happens once the symbols have values: the runtime specializes
 * the graph per binding and infers it again with concrete sizes, where a
 * mismatch is an error naming the node. Only an expression past the
 * simplifier's limits leaves an output untyped. A real mismatch is
 * GR_ERR_SHAPE, a bad attribute GR_ERR_INVALID, both naming the node and the
 * shapes involved.
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
static bool dim_is_sym(gr_dim d) { return gr_dx_is_sym(d); }
static gr_dim dim_c(int64_t size) { return gr_dx_const(size); }
static bool dim_eq(gr_dim a, gr_dim b) { return gr_dx_equal(a, b); }

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

static const char *type_str(const ctx_t *c, const gr_ir_value *v, char *buf) {
    gr_ir_type_str(c->g, v, buf, TYPE_STR_LEN);
    return buf;
}
/* A value's type as text for a message, formatted only where the message is made (the
 * inference of every binding of a symbolic model runs this code, and formatting every
 * type eagerly was a tenth of a new binding's host time). */
#define TYPE_STR(buf, v) type_str(c, (v), (buf))
static void dims_str(const gr_graph *g, const gr_dim *d, int ndim, char *buf, size_t n);
static const char *dims_text(const gr_graph *g, const gr_dim *d, int n, char *buf, size_t cap) {
    dims_str(g, d, n, buf, cap);
    return buf;
}
#define DIMS_STR(buf, d, n) dims_text(c->g, (d), (n), (buf), sizeof(buf))

static void dims_str(const gr_graph *g, const gr_dim *d, int ndim, char *buf, size_t n) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "[");
    for (int i = 0; i < ndim; i++) {
        char e[160];
        gr_dx_str(g, d[i], e, sizeof e);
        pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%s", i ? "," : "", e);
    }
    snprintf(buf + pos, pos < n ? n - pos : 0, "]");
}

static void shape_str(const ctx_t *c, const shape_t *s, char *buf, size_t n) { dims_str(c->g, s->d, s->ndim, buf, n); }

static void ints_str(const int64_t *v, int n, char *buf, size_t size) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "[");
    for (int i = 0; i < n; i++)
        pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "%s%lld", i ? "," : "", (long long)v[i]);
    snprintf(buf + pos, pos < size ? size - pos : 0, "]");
}
/* An int list as text for a message, formatted only where the message is made (as TYPE_STR). */
static const char *ints_text(const int64_t *v, int n, char *buf, size_t size) {
    ints_str(v, n, buf, size);
    return buf;
}
#define INTS_STR(buf, v, n) ints_text((v), (n), (buf), sizeof(buf))

/* "node 'x' (op) at file:line:col", formatted on first use */
static const char *where_of(const ctx_t *c) {
    ctx_t *m = (ctx_t *)c;
    if (!m->where[0]) gr_ir_node_where(m->g, m->n, m->where, sizeof m->where);
    return m->where;
}

static gr_status fail(const ctx_t *c, gr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static gr_status fail(const ctx_t *c, gr_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gr_error(st, "%s: %s", where_of(c), msg);
}

/* a op b on dims; *ok = false when the result is past the simplifier's limits
 * (the caller leaves its output untyped); an overflow is an error naming the node. */
static gr_status dx(const ctx_t *c, gr_dx_op op, gr_dim a, gr_dim b, gr_dim *out, bool *ok) {
    gr_status st = gr_dx_binary(c->g, op, a, b, out);
    if (st == GR_ERR_UNSUPPORTED) {
        gr_error_clear();
        *ok = false;
        *out = dim_c(0);
        return GR_OK;
    }
    if (st == GR_ERR_SHAPE) return gr_error_prefix(st, "%s", where_of(c));
    return st;
}

/* Product of dims [0, n) as a dim (checked). */
static gr_status dims_prod(const ctx_t *c, const gr_dim *d, int n, gr_dim *out, bool *ok) {
    *out = dim_c(1);
    for (int i = 0; i < n && *ok; i++) GR_TRY(dx(c, GR_DX_MUL, *out, d[i], out, ok));
    return GR_OK;
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
/* numpy broadcasting of two shapes. A symbolic dim against a concrete k > 1
 * gives k; two different symbolic dims give max(a, b) — the right size for
 * every binding where they broadcast (equal, or one of them 1), which the
 * concrete inference after specialization checks. SH_UNKNOWN only when max
 * is past the simplifier's limits; -1 on a certain mismatch (*bad_dim). */
static int broadcast2(const ctx_t *c, const shape_t *a, const shape_t *b, shape_t *out, int *bad_dim) {
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
            bool ok = true;
            if (dim_eq(da, db)) out->d[i] = da;
            else if (dx(c, GR_DX_MAX, da, db, &out->d[i], &ok) != GR_OK || !ok) unknown = SH_UNKNOWN, out->d[i] = dim_c(-1);
        } else {
            gr_dim s = dim_is_sym(da) ? da : db, k = dim_is_sym(da) ? db : da;
            out->d[i] = k.size == 1 ? s : k;
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
        int res = broadcast2(c, &acc, &b, &r, &bad);
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
        return fail(c, GR_ERR_SHAPE, "dtypes differ: %s and %s", TYPE_STR(ta, a), TYPE_STR(tb, b));
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
/* all_gather: every rank's tensor stacked along a new leading axis of `ranks` */
static gr_status infer_all_gather(ctx_t *c) {
    int64_t ranks;
    GR_TRY(attr_int(c, "ranks", 0, &ranks));
    shape_t s = shape_of(in_val(c, 0));
    if (ranks < 1) return fail(c, GR_ERR_INVALID, "attribute 'ranks' must be at least 1");
    if (s.ndim >= GR_MAX_DIMS) return fail(c, GR_ERR_SHAPE, "all_gather of a rank-%d tensor exceeds %d dims", s.ndim, GR_MAX_DIMS);
    memmove(&s.d[1], &s.d[0], sizeof(gr_dim) * (size_t)s.ndim);
    s.d[0] = gr_dx_const(ranks);
    s.ndim++;
    return set_out(c, 0, in_val(c, 0)->dtype, &s);
}
/* sample(logits, step, ints, floats): ops.c */
static gr_status infer_sample(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0), *step = in_val(c, 1), *ints = in_val(c, 2), *fl = in_val(c, 3);
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(x->dtype), "a float dtype"));
    if (x->ndim < 1) return fail(c, GR_ERR_SHAPE, "sample of a 0-d tensor (logits [..., vocab] expected)");
    if (!dim_is_sym(x->dims[x->ndim - 1]) && x->dims[x->ndim - 1].size == 0)
        return fail(c, GR_ERR_SHAPE, "sample over an empty vocabulary: there is no token to return");
    const struct {
        const gr_ir_value *v;
        gr_dtype t;
        int64_t n;
        const char *what;
    } want[3] = {{step, GR_I64, 1, "step (i64 [1])"}, {ints, GR_I64, 3, "ints (i64 [3]: seed, first step, top_k)"},
                 {fl, GR_F32, 2, "floats (f32 [2]: temperature, top_p)"}};
    for (int i = 0; i < 3; i++) {
        const gr_ir_value *v = want[i].v;
        if (v->dtype != want[i].t || v->ndim != 1 || dim_is_sym(v->dims[0]) || v->dims[0].size != want[i].n) {
            char tv[TYPE_STR_LEN];
            return fail(c, GR_ERR_SHAPE, "input %d is %s, not the %s", i + 1, TYPE_STR(tv, v), want[i].what);
        }
    }
    shape_t s = shape_of(x);
    s.ndim--;
    return set_out(c, 0, GR_I64, &s);
}

/* beam_step(logits, step, state, params; beams, room): ops.c (the state's slot count is the
 * lowering's check: it needs codegen's layout) */
static gr_status infer_beam_step(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0), *step = in_val(c, 1), *state = in_val(c, 2), *params = in_val(c, 3);
    int64_t beams, room;
    GR_TRY(attr_int(c, "beams", 0, &beams));
    GR_TRY(attr_int(c, "room", 0, &room));
    if (beams < 1 || room < 1) return fail(c, GR_ERR_INVALID, "beams %lld and room %lld must be at least 1", (long long)beams, (long long)room);
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(x->dtype), "a float dtype"));
    char tv[TYPE_STR_LEN];
    if (x->ndim < 2 || x->ndim > 3 || (x->ndim == 3 && (dim_is_sym(x->dims[1]) || x->dims[1].size != 1)))
        return fail(c, GR_ERR_SHAPE, "logits are %s, not [rows, vocab] or [rows, 1, vocab]", TYPE_STR(tv, x));
    if (!dim_is_sym(x->dims[x->ndim - 1]) && x->dims[x->ndim - 1].size == 0)
        return fail(c, GR_ERR_SHAPE, "beam search over an empty vocabulary");
    if (state->dtype != GR_I64 || state->ndim != 2) return fail(c, GR_ERR_SHAPE, "state is %s, not i64 [batch, slots]", TYPE_STR(tv, state));
    if (!dim_is_sym(x->dims[0]) && !dim_is_sym(state->dims[0]) &&
        (state->dims[0].size > INT64_MAX / beams || state->dims[0].size * beams != x->dims[0].size))
        return fail(c, GR_ERR_SHAPE, "logits have %lld rows, the state %lld batch rows of %lld beams", (long long)x->dims[0].size,
                    (long long)state->dims[0].size, (long long)beams);
    if (step->dtype != GR_I64 || step->ndim != 1 || dim_is_sym(step->dims[0]) || step->dims[0].size != 1)
        return fail(c, GR_ERR_SHAPE, "step is %s, not i64 [1]", TYPE_STR(tv, step));
    if (params->dtype != GR_I64 || params->ndim != 1 || dim_is_sym(params->dims[0]) || params->dims[0].size != 5)
        return fail(c, GR_ERR_SHAPE, "params are %s, not i64 [5] (first, eos, pad, length_penalty bits, max_new)", TYPE_STR(tv, params));
    shape_t s = shape_of(state);
    return set_out(c, 0, GR_I64, &s);
}
/* cache_write(cache, new, kv_len; axis, delta): ops.c */
static gr_status infer_cache_write(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0), *nv = in_val(c, 1), *kv = in_val(c, 2);
    int64_t axis, delta;
    GR_TRY(attr_int(c, "axis", 0, &axis));
    GR_TRY(attr_int(c, "delta", 0, &delta));
    (void)delta;
    char tx[TYPE_STR_LEN], tn[TYPE_STR_LEN];
    if (x->ndim < 1) return fail(c, GR_ERR_SHAPE, "writes into a scalar cache %s", TYPE_STR(tx, x));
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return fail(c, GR_ERR_INVALID, "axis %lld is not an axis of a rank-%d cache", (long long)axis, x->ndim);
    if (nv->dtype != x->dtype || nv->ndim != x->ndim)
        return fail(c, GR_ERR_SHAPE, "new entries %s do not match the cache %s (dtype and rank)", TYPE_STR(tn, nv), TYPE_STR(tx, x));
    for (int d = 0; d < x->ndim; d++) {
        bool ok = d == axis ? dim_is_sym(nv->dims[d]) || dim_is_sym(x->dims[d]) || nv->dims[d].size <= x->dims[d].size
                            : gr_dx_equal(nv->dims[d], x->dims[d]);
        if (!ok)
            return fail(c, GR_ERR_SHAPE, "new entries %s do not fit the cache %s along dim %d", TYPE_STR(tn, nv), TYPE_STR(tx, x), d);
    }
    if (kv->dtype != GR_I64 || kv->ndim != 1 || dim_is_sym(kv->dims[0]) || kv->dims[0].size != 1)
        return fail(c, GR_ERR_SHAPE, "kv_len is %s, not i64 [1]", TYPE_STR(tx, kv));
    return unary_out(c, x->dtype);
}

/* beam_reorder(x, rows, kv_len; axis, delta): ops.c */
static gr_status infer_beam_reorder(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0), *rows = in_val(c, 1), *kv = in_val(c, 2);
    int64_t axis, delta;
    GR_TRY(attr_int(c, "axis", 1, &axis));
    GR_TRY(attr_int(c, "delta", 0, &delta));
    char tv[TYPE_STR_LEN];
    if (x->ndim < 2) return fail(c, GR_ERR_SHAPE, "reorders a %s: rank >= 2 expected (rows, ..., the cache axis, ...)", TYPE_STR(tv, x));
    if (axis < 0) axis += x->ndim;
    if (axis < 1 || axis >= x->ndim) return fail(c, GR_ERR_INVALID, "axis %lld is not an axis after the rows of a rank-%d tensor", (long long)axis, x->ndim);
    if (rows->dtype != GR_I64 || rows->ndim != 1 || !gr_dx_equal(rows->dims[0], x->dims[0]))
        return fail(c, GR_ERR_SHAPE, "rows are %s, not i64 [x.dims[0]]", TYPE_STR(tv, rows));
    if (kv->dtype != GR_I64 || kv->ndim != 1 || dim_is_sym(kv->dims[0]) || kv->dims[0].size != 1)
        return fail(c, GR_ERR_SHAPE, "kv_len is %s, not i64 [1]", TYPE_STR(tv, kv));
    return unary_out(c, x->dtype);
}

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

/* arg_max / arg_min: the reduced axis goes (or stays as 1 with keepdims); i64 indices */
static gr_status infer_arg_reduce(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    int64_t axis, keepdims, last;
    int a = 0;
    GR_TRY(attr_int(c, "axis", 0, &axis));
    GR_TRY(attr_int(c, "keepdims", 1, &keepdims));
    GR_TRY(attr_int(c, "select_last_index", 0, &last));
    GR_TRY(need_dtype(c, 0, x->dtype != GR_BOOL, "a numeric dtype"));
    if (x->ndim == 0) return fail(c, GR_ERR_SHAPE, "%s of a 0-d tensor", c->n->op == GR_OP_ARG_MAX ? "arg_max" : "arg_min");
    GR_TRY(norm_axis(c, axis, x->ndim, "axis", &a));
    if (!dim_is_sym(x->dims[a]) && x->dims[a].size == 0)
        return fail(c, GR_ERR_SHAPE, "%s over axis %d, which is empty: there is no index to return",
                    c->n->op == GR_OP_ARG_MAX ? "arg_max" : "arg_min", a);
    shape_t s = {0};
    for (int i = 0; i < x->ndim; i++) {
        if (i != a) s.d[s.ndim++] = x->dims[i];
        else if (keepdims) s.d[s.ndim++] = dim_c(1);
    }
    GR_TRY(set_out(c, 0, GR_I64, &s));
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

/* attention(q, k, v, mask?, key_len?): ops.c. Dims that must agree and are symbolic
 * expressions that differ are checked once they have values. */
static gr_status infer_attention(ctx_t *c) {
    const gr_ir_value *q = in_val(c, 0), *k = in_val(c, 1), *v = in_val(c, 2), *m = in_val(c, 3);
    int layout[4];
    GR_TRY(gr_ir_attention_layout(c->g, c->n, layout));
    char tq[TYPE_STR_LEN], tk[TYPE_STR_LEN], tv[TYPE_STR_LEN];
    int64_t causal;
    double scale;
    GR_TRY(attr_int(c, "causal", 0, &causal));
    GR_TRY(gr_ir_attr_float(c->g, c->n, "scale", 1.0, &scale));
    if (causal != 0 && causal != 1) return fail(c, GR_ERR_INVALID, "causal must be 0 or 1, not %lld", (long long)causal);
    GR_TRY(need_dtype(c, 0, gr_dtype_is_float(q->dtype), "a float dtype"));
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return fail(c, GR_ERR_SHAPE, "dtypes differ: q %s, k %s, v %s", TYPE_STR(tq, q), TYPE_STR(tk, k), TYPE_STR(tv, v));
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return fail(c, GR_ERR_SHAPE, "q, k and v must be 4-d [batch, heads, seq, head_dim]: q %s, k %s, v %s", TYPE_STR(tq, q), TYPE_STR(tk, k), TYPE_STR(tv, v));
    /* the checks below read [B, heads, S, D]: operands laid out [B, S, heads, D] are swapped */
    gr_ir_value ql = *q, kl = *k, vl = *v;
    gr_ir_value *logical[3] = {&ql, &kl, &vl};
    for (int i = 0; i < 3; i++)
        if (layout[i]) {
            gr_dim t = logical[i]->dims[1];
            logical[i]->dims[1] = logical[i]->dims[2];
            logical[i]->dims[2] = t;
        }
    q = &ql, k = &kl, v = &vl;
    /* concrete dims that differ are an error; symbolic ones are checked per binding */
#define GR_SAME(a, b) (dim_eq(a, b) || dim_is_sym(a) || dim_is_sym(b))
    if (!GR_SAME(q->dims[0], k->dims[0]) || !GR_SAME(q->dims[0], v->dims[0]) || !GR_SAME(k->dims[1], v->dims[1]) ||
        !GR_SAME(k->dims[2], v->dims[2]) || !GR_SAME(q->dims[3], k->dims[3]))
        return fail(c, GR_ERR_SHAPE, "q %s, k %s and v %s do not agree (batch, kv heads, key length, head_dim)", TYPE_STR(tq, q), TYPE_STR(tk, k), TYPE_STR(tv, v));
#undef GR_SAME
    gr_dim h = q->dims[1], hkv = k->dims[1];
    if (!dim_is_sym(h) && !dim_is_sym(hkv) && (hkv.size == 0 || h.size % hkv.size != 0))
        return fail(c, GR_ERR_SHAPE, "q has %lld heads, not a multiple of k's %lld", (long long)h.size, (long long)hkv.size);
    if (m) {
        char tm[TYPE_STR_LEN];
        if (!gr_dtype_is_float(m->dtype)) return fail(c, GR_ERR_SHAPE, "mask %s must be a float tensor", TYPE_STR(tm, m));
        if (m->ndim > 4) return fail(c, GR_ERR_SHAPE, "mask %s has more than 4 dims", TYPE_STR(tm, m));
        gr_dim full[4] = {q->dims[0], q->dims[1], q->dims[2], k->dims[2]};
        for (int i = 0; i < m->ndim; i++) {
            gr_dim md = m->dims[i], fd = full[4 - m->ndim + i];
            if (!dim_is_sym(md) && md.size == 1) continue;
            if (!dim_eq(md, fd) && !dim_is_sym(md) && !dim_is_sym(fd))
                return fail(c, GR_ERR_SHAPE, "mask %s does not broadcast to the scores [batch, heads, seq_q, seq_k] of q %s, k %s",
                            TYPE_STR(tm, m), TYPE_STR(tq, q), TYPE_STR(tk, k));
        }
    }
    const gr_ir_value *klen = in_val(c, 4);
    if (klen) {
        char tl[TYPE_STR_LEN];
        bool one = true;
        for (int i = 0; i < klen->ndim; i++) one &= !dim_is_sym(klen->dims[i]) && klen->dims[i].size == 1;
        if (klen->dtype != GR_I64 || !one)
            return fail(c, GR_ERR_SHAPE, "key_len %s must be one i64 value (the number of visible keys)", TYPE_STR(tl, klen));
    }
    shape_t out = shape_of(q);
    out.d[3] = v->dims[3];
    if (layout[3]) {
        gr_dim t = out.d[1];
        out.d[1] = out.d[2];
        out.d[2] = t;
    }
    return set_out(c, 0, q->dtype, &out);
}

/* p (scale or bias) must broadcast onto the trailing dims [axis, ndim) of x. */
static gr_status check_norm_param(const ctx_t *c, int slot, int axis, const char *what) {
    const gr_ir_value *x = in_val(c, 0), *p = in_val(c, slot);
    char tx[TYPE_STR_LEN], tp[TYPE_STR_LEN];
    if (p->dtype != x->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s and %s %s", TYPE_STR(tx, x), what, TYPE_STR(tp, p));
    int tail = x->ndim - axis;
    if (p->ndim > tail)
        return fail(c, GR_ERR_SHAPE, "%s %s has more dims than the normalized dims of %s (axis %d)", what, TYPE_STR(tp, p), TYPE_STR(tx, x), axis);
    for (int i = 0; i < p->ndim; i++) {
        gr_dim pd = p->dims[i], xd = x->dims[x->ndim - p->ndim + i];
        if (!dim_is_sym(pd) && pd.size == 1) continue;
        if (dim_eq(pd, xd)) continue;
        if (dim_is_sym(pd) || dim_is_sym(xd)) continue; /* decided once the symbols have values */
        return fail(c, GR_ERR_SHAPE, "%s %s does not broadcast to the normalized dims of %s (axis %d)", what, TYPE_STR(tp, p), TYPE_STR(tx, x), axis);
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
    int64_t trans_a, trans_b;
    double alpha;
    GR_TRY(attr_int(c, "trans_a", 0, &trans_a));
    GR_TRY(attr_int(c, "trans_b", 0, &trans_b));
    GR_TRY(gr_ir_attr_float(c->g, c->n, "alpha", 1.0, &alpha));
    if (a->dtype != b->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s @ %s", TYPE_STR(ta, a), TYPE_STR(tb, b));
    if (a->ndim < 1 || b->ndim < 1) return fail(c, GR_ERR_SHAPE, "matmul needs operands of rank >= 1: %s @ %s", TYPE_STR(ta, a), TYPE_STR(tb, b));
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
        /* symbolic inner dims that differ as expressions are checked once they have values */
        if (!dim_is_sym(ka) && !dim_is_sym(kb)) {
            if (trans_a || trans_b)
                return fail(c, GR_ERR_SHAPE, "inner dims differ: %s @ %s (trans_a=%lld, trans_b=%lld)", TYPE_STR(ta, a), TYPE_STR(tb, b),
                            (long long)trans_a, (long long)trans_b);
            return fail(c, GR_ERR_SHAPE, "inner dims differ: %s @ %s", TYPE_STR(ta, a), TYPE_STR(tb, b));
        }
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
    int res = broadcast2(c, &ba, &bb, &batch, &bad);
    if (res < 0) return fail(c, GR_ERR_SHAPE, "batch dims do not broadcast: %s @ %s", TYPE_STR(ta, a), TYPE_STR(tb, b));
    if (res == SH_UNKNOWN) known = false;
    shape_t out = batch;
    if (a->ndim > 1) out.d[out.ndim++] = m;
    if (b->ndim > 1) out.d[out.ndim++] = n;
    if (bias) {
        char tbias[TYPE_STR_LEN], tout[TYPE_STR_LEN];
        if (bias->dtype != a->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s @ %s + bias %s", TYPE_STR(ta, a), TYPE_STR(tb, b), TYPE_STR(tbias, bias));
        if (known) {
            shape_t sb = shape_of(bias), r = {0};
            res = broadcast2(c, &out, &sb, &r, &bad);
            bool same = res >= 0 && r.ndim == out.ndim;
            for (int i = 0; same && i < r.ndim; i++)
                same = dim_eq(r.d[i], out.d[i]) || res == SH_UNKNOWN || dim_is_sym(r.d[i]) || dim_is_sym(out.d[i]);
            if (!same) {
                shape_str(c, &out, tout, sizeof tout);
                return fail(c, GR_ERR_SHAPE, "bias %s does not broadcast to the result %s of %s @ %s", TYPE_STR(tbias, bias), tout, TYPE_STR(ta, a), TYPE_STR(tb, b));
            }
        }
    }
    const gr_ir_value *rv = in_val(c, 3);
    if (rv) {
        /* the residual: exactly the result's shape and dtype; a bias beside it is a row bias */
        char tres[TYPE_STR_LEN], tout[TYPE_STR_LEN], tbias[TYPE_STR_LEN];
        if (rv->dtype != a->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s @ %s + residual %s", TYPE_STR(ta, a), TYPE_STR(tb, b), TYPE_STR(tres, rv));
        if (known) {
            bool same = rv->ndim == out.ndim;
            for (int i = 0; same && i < out.ndim; i++)
                same = dim_eq(rv->dims[i], out.d[i]) || dim_is_sym(rv->dims[i]) || dim_is_sym(out.d[i]);
            if (!same) {
                shape_str(c, &out, tout, sizeof tout);
                return fail(c, GR_ERR_SHAPE, "residual %s is not of the result's shape %s (%s @ %s)", TYPE_STR(tres, rv), tout, TYPE_STR(ta, a), TYPE_STR(tb, b));
            }
        }
        if (bias) {
            bool row = bias->ndim >= 1 && out.ndim >= 1 && bias->ndim <= out.ndim;
            for (int i = 0; row && i < bias->ndim - 1; i++) row = !dim_is_sym(bias->dims[i]) && bias->dims[i].size == 1;
            if (row && known) row = dim_eq(bias->dims[bias->ndim - 1], out.d[out.ndim - 1]) || dim_is_sym(out.d[out.ndim - 1]);
            if (!row) return fail(c, GR_ERR_SHAPE, "bias %s beside a residual must be a row bias [..1.., N] (%s @ %s)", TYPE_STR(tbias, bias), TYPE_STR(ta, a), TYPE_STR(tb, b));
        }
    }
    if (!known) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, a->dtype, &out));
    return GR_OK;
}

/* ==== data movement ===================================================================== */
static gr_status infer_reshape(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    gr_dim spec[GR_MAX_DIMS];
    int n;
    GR_TRY(gr_ir_attr_sints(c->g, c->n, "shape", spec, GR_MAX_DIMS, &n));
    if (n < 0) return fail(c, GR_ERR_INVALID, "attribute 'shape' is required");
    char sspec[512], tx[TYPE_STR_LEN];
    int infer_at = -1;
    gr_dim known[GR_MAX_DIMS];
    int n_known = 0;
    for (int i = 0; i < n; i++) {
        if (!dim_is_sym(spec[i]) && spec[i].size == -1) {
            if (infer_at >= 0) return fail(c, GR_ERR_INVALID, "shape %s has more than one -1", DIMS_STR(sspec, spec, n));
            infer_at = i;
        } else if (!dim_is_sym(spec[i]) && spec[i].size < 0) {
            return fail(c, GR_ERR_INVALID, "shape %s has a negative dim", DIMS_STR(sspec, spec, n));
        } else {
            known[n_known++] = spec[i];
        }
    }
    if (!gr_ir_dims_fit(n_known, known))
        return fail(c, GR_ERR_SHAPE, "shape %s holds more than %lld elements", DIMS_STR(sspec, spec, n), (long long)GR_MAX_NUMEL);
    /* element counts as dims: concrete, or expressions compared structurally */
    bool ok = true;
    gr_dim in_count, known_count;
    GR_TRY(dims_prod(c, x->dims, x->ndim, &in_count, &ok));
    GR_TRY(dims_prod(c, known, n_known, &known_count, &ok));
    shape_t s = {0};
    s.ndim = n;
    for (int i = 0; i < n; i++) s.d[i] = spec[i];
    if (ok && infer_at >= 0) {
        if (!dim_is_sym(known_count) && known_count.size == 0)
            return fail(c, GR_ERR_SHAPE, "cannot infer the -1 of shape %s for %s: the other dims hold no elements", DIMS_STR(sspec, spec, n), TYPE_STR(tx, x));
        if (!dim_is_sym(in_count) && !dim_is_sym(known_count) && in_count.size % known_count.size != 0)
            return fail(c, GR_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s", TYPE_STR(tx, x), (long long)in_count.size, DIMS_STR(sspec, spec, n));
        GR_TRY(dx(c, GR_DX_DIV, in_count, known_count, &s.d[infer_at], &ok));
    } else if (ok && !dim_is_sym(in_count) && !dim_is_sym(known_count) && in_count.size != known_count.size) {
        return fail(c, GR_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s (%lld elements)", TYPE_STR(tx, x), (long long)in_count.size,
                    DIMS_STR(sspec, spec, n), (long long)known_count.size);
    }
    /* symbolic counts that differ as expressions are checked once the symbols have values */
    if (!ok) {
        set_untyped(c, 0);
        return GR_OK;
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
        if (n != x->ndim)
            return fail(c, GR_ERR_SHAPE, "perm %s has %d entries for %s of rank %d", INTS_STR(sp, perm, n), n, TYPE_STR(tx, x), x->ndim);
        bool seen[GR_MAX_DIMS] = {false};
        for (int i = 0; i < n; i++) {
            if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
                return fail(c, GR_ERR_INVALID, "perm %s is not a permutation of 0..%d", INTS_STR(sp, perm, n), n - 1);
            seen[perm[i]] = true;
            s.d[i] = x->dims[perm[i]];
        }
    }
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_expand(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    gr_dim spec[GR_MAX_DIMS];
    int n;
    GR_TRY(gr_ir_attr_sints(c->g, c->n, "shape", spec, GR_MAX_DIMS, &n));
    if (n < 0) return fail(c, GR_ERR_INVALID, "attribute 'shape' is required");
    char sspec[512], tx[TYPE_STR_LEN];
    shape_t target = {0}, xs = shape_of(x), out;
    target.ndim = n;
    for (int i = 0; i < n; i++) {
        if (!dim_is_sym(spec[i]) && spec[i].size < 0) return fail(c, GR_ERR_INVALID, "shape %s has a negative dim", DIMS_STR(sspec, spec, n));
        target.d[i] = spec[i];
    }
    int bad = 0;
    int res = broadcast2(c, &xs, &target, &out, &bad);
    if (res < 0) return fail(c, GR_ERR_SHAPE, "cannot expand %s to %s", TYPE_STR(tx, x), DIMS_STR(sspec, spec, n));
    if (res == SH_UNKNOWN) set_untyped(c, 0);
    else GR_TRY(set_out(c, 0, x->dtype, &out));
    return GR_OK;
}

static gr_status infer_squeeze(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    const int64_t *axes;
    int n;
    char tx[TYPE_STR_LEN];
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
                            TYPE_STR(tx, x), (long long)x->dims[a].size);
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
        return fail(c, GR_ERR_SHAPE, "unsqueezing %d axes of %s exceeds %d dims", n, TYPE_STR(tx, x), GR_MAX_DIMS);
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

#define SLICE_HUGE ((int64_t)1 << 31) /* bounds at or beyond this mean "to the end" for symbolic dims */

/* Elements an ONNX slice takes from a dim, as a dim, when the dim or a bound is
 * symbolic. Handled exactly: step 1 with bounds whose sign is known from the
 * symbols' ranges (a non-negative bound clamps to min(bound, dim), a negative
 * one counts from the end: max(dim + bound, 0)), and step -1 over the whole
 * dim; anything else is *ok = false. */
static gr_status slice_count_sym(const ctx_t *c, gr_dim d, gr_dim start, gr_dim end, int64_t step, gr_dim *count, bool *ok) {
    if (step != 1 && step != -1) return *ok = false, GR_OK;
    gr_dim b[2] = {start, end}, clamped[2] = {dim_c(0), dim_c(0)};
    for (int k = 0; k < 2 && *ok; k++) {
        int64_t lo, hi;
        gr_dx_bounds(c->g, b[k], &lo, &hi);
        if (step == 1) {
            if (lo >= 0) { /* min(b, d) */
                if (!dim_is_sym(b[k]) && b[k].size >= SLICE_HUGE) clamped[k] = d; /* "to the end" */
                else GR_TRY(dx(c, GR_DX_MIN, b[k], d, &clamped[k], ok));
            } else if (hi < 0) { /* max(d + b, 0) */
                gr_dim t;
                if (!dim_is_sym(b[k]) && b[k].size <= -SLICE_HUGE) t = dim_c(0);
                else GR_TRY(dx(c, GR_DX_ADD, d, b[k], &t, ok));
                if (*ok) GR_TRY(dx(c, GR_DX_MAX, t, dim_c(0), &clamped[k], ok));
            } else {
                *ok = false;
            }
        } else {
            /* backwards over the whole dim: start -1 (or past the end), end before the start */
            bool whole = k == 0 ? (!dim_is_sym(b[0]) && (b[0].size == -1 || b[0].size >= SLICE_HUGE))
                                : (!dim_is_sym(b[1]) && b[1].size <= -SLICE_HUGE);
            if (!whole) *ok = false;
        }
    }
    if (!*ok) return GR_OK;
    if (step == -1) return *count = d, GR_OK;
    gr_dim diff;
    GR_TRY(dx(c, GR_DX_SUB, clamped[1], clamped[0], &diff, ok));
    if (*ok) GR_TRY(dx(c, GR_DX_MAX, diff, dim_c(0), count, ok));
    return GR_OK;
}

static gr_status infer_slice(ctx_t *c) {
    const gr_ir_value *x = in_val(c, 0);
    gr_dim starts[GR_MAX_DIMS], ends[GR_MAX_DIMS];
    const int64_t *axes, *steps;
    int ns, ne, na, nst;
    GR_TRY(gr_ir_attr_sints(c->g, c->n, "starts", starts, GR_MAX_DIMS, &ns));
    GR_TRY(gr_ir_attr_sints(c->g, c->n, "ends", ends, GR_MAX_DIMS, &ne));
    if (ns < 0) return fail(c, GR_ERR_INVALID, "attribute 'starts' is required");
    if (ne < 0) return fail(c, GR_ERR_INVALID, "attribute 'ends' is required");
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
        if (!dim_is_sym(d) && !dim_is_sym(starts[i]) && !dim_is_sym(ends[i])) {
            int64_t first, count;
            gr_ir_slice_axis(d.size, starts[i].size, ends[i].size, step, &first, &count);
            s.d[a] = dim_c(count);
        } else if (known) {
            GR_TRY(slice_count_sym(c, d, starts[i], ends[i], step, &s.d[a], &known));
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
    gr_dim total = dim_c(0);
    for (int i = 0; i < c->n->n_in; i++) {
        const gr_ir_value *x = in_val(c, i);
        char t0[TYPE_STR_LEN], ti[TYPE_STR_LEN];
        if (x->dtype != x0->dtype) return fail(c, GR_ERR_SHAPE, "dtypes differ: %s and %s (input %d)", TYPE_STR(t0, x0), TYPE_STR(ti, x), i);
        if (x->ndim != x0->ndim) return fail(c, GR_ERR_SHAPE, "ranks differ: %s and %s (input %d)", TYPE_STR(t0, x0), TYPE_STR(ti, x), i);
        for (int d = 0; d < x->ndim; d++) {
            if (d == a) continue;
            if (dim_eq(x->dims[d], s.d[d])) continue;
            if (dim_is_sym(x->dims[d]) || dim_is_sym(s.d[d])) {
                /* checked once the symbols have values; a concrete size is the better type */
                if (dim_is_sym(s.d[d])) s.d[d] = x->dims[d];
                continue;
            }
            return fail(c, GR_ERR_SHAPE, "dim %d differs: %s and %s (input %d), concatenating on axis %d", d, TYPE_STR(t0, x0), TYPE_STR(ti, x), i, a);
        }
        if (known) GR_TRY(dx(c, GR_DX_ADD, total, x->dims[a], &total, &known));
        if (!dim_is_sym(total) && total.size > GR_MAX_NUMEL)
            return fail(c, GR_ERR_SHAPE, "the inputs' sizes along axis %d add up to more than %lld", a, (long long)GR_MAX_NUMEL);
    }
    s.d[a] = total;
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
    GR_TRY(attr_int(c, "axis", 0, &axis));
    GR_TRY(gr_ir_attr_ints(c->g, c->n, "split", &sizes, &n_sizes));
    if (x->ndim == 0) return fail(c, GR_ERR_SHAPE, "cannot split a 0-d tensor");
    GR_TRY(norm_axis(c, axis, x->ndim, "axis", &a));
    gr_dim d = x->dims[a];
    shape_t s = shape_of(x);
    if (n_sizes >= 0) {
        char ss[512];
        if (n_sizes != n_out)
            return fail(c, GR_ERR_INVALID, "split %s has %d sizes for %d outputs", INTS_STR(ss, sizes, n_sizes), n_sizes, n_out);
        int64_t sum = 0;
        for (int i = 0; i < n_sizes; i++) {
            if (sizes[i] < 0) return fail(c, GR_ERR_INVALID, "split %s has a negative size", INTS_STR(ss, sizes, n_sizes));
            if (gr_add_overflow(sum, sizes[i], &sum))
                return fail(c, GR_ERR_SHAPE, "split sizes %s add up to more than %lld", INTS_STR(ss, sizes, n_sizes),
                            (long long)INT64_MAX);
        }
        if (!dim_is_sym(d) && sum != d.size)
            return fail(c, GR_ERR_SHAPE, "split sizes %s sum to %lld, but axis %d of %s has %lld", INTS_STR(ss, sizes, n_sizes),
                        (long long)sum, a, TYPE_STR(tx, x),
                        (long long)d.size);
        for (int i = 0; i < n_out; i++) {
            s.d[a] = dim_c(sizes[i]);
            GR_TRY(set_out(c, i, x->dtype, &s));
        }
        return GR_OK;
    }
    if (dim_is_sym(d)) { /* equal parts of a symbolic dim (divisibility checked once it has a value) */
        bool ok = true;
        GR_TRY(dx(c, GR_DX_DIV, d, dim_c(n_out), &s.d[a], &ok));
        if (!ok) all_untyped(c);
        else
            for (int i = 0; i < n_out; i++) GR_TRY(set_out(c, i, x->dtype, &s));
        return GR_OK;
    }
    if (d.size % n_out != 0)
        return fail(c, GR_ERR_SHAPE, "axis %d of %s (%lld) does not split into %d equal parts", a, TYPE_STR(tx, x), (long long)d.size, n_out);
    s.d[a] = dim_c(d.size / n_out);
    for (int i = 0; i < n_out; i++) GR_TRY(set_out(c, i, x->dtype, &s));
    return GR_OK;
}

static gr_status infer_gather(ctx_t *c) {
    const gr_ir_value *data = in_val(c, 0), *idx = in_val(c, 1);
    int64_t axis;
    int a = 0;
    char td[TYPE_STR_LEN], ti[TYPE_STR_LEN];
    GR_TRY(attr_int(c, "axis", 0, &axis));
    if (idx->dtype != GR_I32 && idx->dtype != GR_I64) return fail(c, GR_ERR_SHAPE, "indices must be i32 or i64, got %s", TYPE_STR(ti, idx));
    if (data->ndim == 0) return fail(c, GR_ERR_SHAPE, "cannot gather from 0-d %s", TYPE_STR(td, data));
    GR_TRY(norm_axis(c, axis, data->ndim, "axis", &a));
    /* no index is valid on an empty axis: a non-empty gather from one fails
     * whatever the indices hold, so it is refused here, at compile time */
    if (!dim_is_sym(data->dims[a]) && data->dims[a].size == 0 && gr_ir_value_numel(idx) > 0)
        return fail(c, GR_ERR_SHAPE, "cannot gather %s from axis %d of %s: the axis is empty, so every index is out of range",
                    TYPE_STR(ti, idx), a, TYPE_STR(td, data));
    shape_t s = {0};
    if (c->n->op == GR_OP_GATHER) {
        int r = data->ndim - 1 + idx->ndim;
        if (r > GR_MAX_DIMS) return fail(c, GR_ERR_SHAPE, "result of gathering %s from %s exceeds %d dims", TYPE_STR(ti, idx), TYPE_STR(td, data), GR_MAX_DIMS);
        for (int i = 0; i < a; i++) s.d[s.ndim++] = data->dims[i];
        for (int i = 0; i < idx->ndim; i++) s.d[s.ndim++] = idx->dims[i];
        for (int i = a + 1; i < data->ndim; i++) s.d[s.ndim++] = data->dims[i];
    } else {
        if (idx->ndim != data->ndim) return fail(c, GR_ERR_SHAPE, "indices %s and data %s differ in rank", TYPE_STR(ti, idx), TYPE_STR(td, data));
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
        return fail(c, GR_ERR_SHAPE, "trilu needs rank >= 2, got %s", TYPE_STR(tx, x));
    }
    shape_t s = shape_of(x);
    GR_TRY(set_out(c, 0, x->dtype, &s));
    return GR_OK;
}

/* ==== generators ========================================================================== */
static gr_status gen_shape(const ctx_t *c, shape_t *s) {
    gr_dim spec[GR_MAX_DIMS];
    int n;
    GR_TRY(gr_ir_attr_sints(c->g, c->n, "shape", spec, GR_MAX_DIMS, &n));
    if (n < 0) return fail(c, GR_ERR_INVALID, "attribute 'shape' is required");
    char ss[512];
    s->ndim = n;
    for (int i = 0; i < n; i++) {
        if (!dim_is_sym(spec[i]) && spec[i].size < 0) return fail(c, GR_ERR_INVALID, "shape %s has a negative dim", DIMS_STR(ss, spec, n));
        s->d[i] = spec[i];
    }
    return GR_OK;
}

/* Length of range(start, limit, delta) with a symbolic bound: delta must be a
 * concrete non-zero integer, start and limit integers; the length is
 * max(ceil((limit - start) / delta), 0) = max((limit - start + delta - 1) // delta, 0)
 * for delta > 0, and the mirror for delta < 0. */
static gr_status range_len_sym(const ctx_t *c, gr_dim *len, bool *ok) {
    gr_dim start, limit, delta;
    GR_TRY(gr_ir_attr_sint(c->g, c->n, "start", dim_c(0), &start, NULL));
    GR_TRY(gr_ir_attr_sint(c->g, c->n, "limit", dim_c(0), &limit, NULL));
    GR_TRY(gr_ir_attr_sint(c->g, c->n, "delta", dim_c(1), &delta, NULL));
    if (dim_is_sym(delta) || delta.size == 0)
        return fail(c, GR_ERR_INVALID, "range with a symbolic bound needs a constant non-zero integer delta");
    gr_dim span, num, q;
    int64_t d = delta.size, ad = d > 0 ? d : -d;
    GR_TRY(dx(c, GR_DX_SUB, d > 0 ? limit : start, d > 0 ? start : limit, &span, ok));
    if (*ok) GR_TRY(dx(c, GR_DX_ADD, span, dim_c(ad - 1), &num, ok));
    if (*ok) GR_TRY(dx(c, GR_DX_DIV, num, dim_c(ad), &q, ok));
    if (*ok) GR_TRY(dx(c, GR_DX_MAX, q, dim_c(0), len, ok));
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
        if (gr_ir_node_has_sym_attr(c->n)) {
            bool ok = true;
            if (t == GR_BOOL) return fail(c, GR_ERR_INVALID, "range cannot produce bool");
            s.ndim = 1;
            GR_TRY(range_len_sym(c, &s.d[0], &ok));
            if (!ok) {
                set_untyped(c, 0);
                return GR_OK;
            }
            break;
        }
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
            /* expressions are per graph: rebuilt in the subgraph, symbols matched by name */
            GR_TRY(gr_dx_import(sub, owner, o->dims[d], &v->dims[d]));
        }
    }
    return gr_ir_infer_shapes(sub);
}

/* Do two values (of possibly different graphs) have the same type? b's
 * symbolic dims are rebuilt in ga (symbols matched by name) and compared there. */
static gr_status same_type(gr_graph *ga, const gr_ir_value *a, const gr_graph *gb, const gr_ir_value *b, bool *same) {
    *same = false;
    if (!a->typed || !b->typed || a->dtype != b->dtype || a->ndim != b->ndim) return GR_OK;
    for (int i = 0; i < a->ndim; i++) {
        gr_dim y;
        gr_status st = gr_dx_import(ga, gb, b->dims[i], &y);
        if (st == GR_ERR_UNSUPPORTED) return gr_error_clear(), GR_OK;
        GR_TRY(st);
        if (!dim_eq(a->dims[i], y)) return GR_OK;
    }
    *same = true;
    return GR_OK;
}

/* Copies the type of value v of graph src onto output `slot`, mapping symbols by name. */
static gr_status adopt_type(ctx_t *c, int slot, const gr_graph *src, const gr_ir_value *v) {
    shape_t s = shape_of(v);
    for (int d = 0; d < s.ndim; d++) GR_TRY(gr_dx_import(c->g, src, v->dims[d], &s.d[d]));
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
            return fail(c, GR_ERR_SHAPE, "the condition must hold exactly one element, got %s", TYPE_STR(t, cond));
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
        bool same;
        GR_TRY(same_type(then_g, tv, else_g, ev, &same));
        if (same) GR_TRY(adopt_type(c, i, then_g, tv));
        else set_untyped(c, i);
    }
    return GR_OK;
}

/* loop(max_trip, cond, carried...; body, trip): body inputs (iter, cond, carried...),
 * body outputs (cond, carried..., scan...). A carried output is typed when the
 * body keeps its type; a scan output is [trip, body output's shape] when the node
 * has a `trip` attribute (a data-dependent symbol: passes/unroll.c unrolls it per
 * binding), else untyped (the trip count is not known). */
static gr_status infer_loop(ctx_t *c) {
    gr_graph *body = graph_attr(c, "body");
    if (!body) return fail(c, GR_ERR_INVALID, "needs graph attribute 'body'");
    GR_TRY(infer_subgraph(c->g, body));
    int n_carried = c->n->n_in - 2;
    if (body->outputs.len < 1 + n_carried)
        return fail(c, GR_ERR_SHAPE, "body has %d outputs for %d carried values", body->outputs.len, n_carried);
    for (int i = 0; i < c->n->n_out; i++) {
        if (i >= n_carried) {
            const gr_ir_attr *trip = gr_ir_attr_find(c->n, "trip");
            int bo = 1 + i < body->outputs.len ? body->outputs.data[1 + i] : -1;
            const gr_ir_value *sv = bo >= 0 ? &body->values.data[bo] : NULL;
            if (!trip || trip->kind != GR_IR_ATTR_INT || !sv || !sv->typed || sv->ndim + 1 > GR_MAX_DIMS) {
                set_untyped(c, i);
                continue;
            }
            shape_t s;
            s.ndim = sv->ndim + 1;
            s.d[0] = trip->sym ? (gr_dim){-1, trip->expr} : dim_c(trip->i);
            for (int d = 0; d < sv->ndim; d++) GR_TRY(gr_dx_import(c->g, body, sv->dims[d], &s.d[d + 1]));
            GR_TRY(set_out(c, i, sv->dtype, &s));
            continue;
        }
        const gr_ir_value *init = in_val(c, 2 + i);
        const gr_ir_value *bout = &body->values.data[body->outputs.data[1 + i]];
        bool same = false;
        if (init && init->typed) GR_TRY(same_type(c->g, init, body, bout, &same));
        if (same) {
            shape_t s = shape_of(init);
            GR_TRY(set_out(c, i, init->dtype, &s));
        } else {
            set_untyped(c, i);
        }
    }
    return GR_OK;
}

/* ==== windows, pad, resize: ir/shape-window.c =============================================== */
static gr_status infer_window(ctx_t *c) { return gr_ir_infer_window(c->g, c->node_index); }
static gr_status infer_pad(ctx_t *c) { return gr_ir_infer_pad(c->g, c->node_index); }
static gr_status infer_resize(ctx_t *c) { return gr_ir_infer_resize(c->g, c->node_index); }

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
    c.where[0] = 0; /* formatted when a message needs it: inference runs for every node, often */
    const gr_op_info *info = gr_op_get(c.n->op);
    if (!info) return fail(&c, GR_ERR_INVALID, "unknown op");
    if (!c.n->attrs_checked) { /* an unknown attribute would be ignored below: a silently wrong result */
        GR_TRY(gr_ir_check_attrs(g, c.n));
        bool sym = false;
        for (int a = 0; a < c.n->n_attr; a++) sym |= c.n->attrs[a].sym || c.n->attrs[a].exprs;
        g->nodes.data[node].attrs_checked = !sym; /* c.n is const */
    }
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

/* ==== specialization ==========================================================================
 * Every symbolic dim of the graph's inputs and constants and every symbolic
 * attribute (a reshape target, slice bounds, a range limit, a fill shape) is
 * evaluated for the binding; then inference runs again with concrete sizes,
 * which is where symbolic dims that had to agree are checked. A subgraph has
 * its own expression table: its symbols take the root's values by name; a
 * symbol only the subgraph has (none today) keeps its dims symbolic. */
typedef struct {
    const int64_t *values; /* per symbol of this graph, -1 = no value */
    bool is_root;
} spec_env;

/* what: the value or attribute, for the message when a symbol has no value */
/* value_name: the value whose dim d is, or NULL for an attribute (named in the message only) */
static gr_status spec_eval(const gr_graph *g, const spec_env *env, gr_dim d, const char *value_name, bool *skip,
                           int64_t *out) {
    *skip = false;
    /* on the stack for the usual symbol count: every symbolic dim of every binding comes here */
    bool local[64];
    size_t n_used = (size_t)g->syms.len + 1;
    bool *used = n_used <= 64 ? memset(local, 0, n_used) : gr_calloc(n_used, sizeof(bool));
    if (!used) return GR_ERR_NOMEM;
    gr_dx_symbols_of(g, d, used);
    int unbound = -1;
    for (int k = 0; k < g->syms.len && unbound < 0; k++)
        if (used[k] && (!env->values || env->values[k] < 0)) unbound = k;
    if (used != local) gr_free(used, n_used * sizeof(bool));
    if (unbound >= 0) {
        if (!env->is_root) return *skip = true, GR_OK;
        if (!value_name)
            return gr_error(GR_ERR_INVALID, "specialize: no value for symbolic dim '%s' (of an attribute)",
                            g->syms.data[unbound].name);
        return gr_error(GR_ERR_INVALID, "specialize: no value for symbolic dim '%s' (of value '%s')", g->syms.data[unbound].name,
                        value_name);
    }
    return gr_dx_eval(g, d, env->values, out);
}

static gr_status specialize_graph(gr_graph *g, const spec_env *env) {
    for (int i = 0; i < g->values.len; i++) {
        gr_ir_value *v = &g->values.data[i];
        if (!v->typed) continue;
        for (int d = 0; d < v->ndim; d++)
            if (dim_is_sym(v->dims[d])) v->var_dims |= 1u << d;
        if (v->kind == GR_VAL_NODE) continue;
        for (int d = 0; d < v->ndim; d++) {
            if (!dim_is_sym(v->dims[d])) continue;
            int64_t val;
            bool skip;
            gr_status st = spec_eval(g, env, v->dims[d], v->name, &skip, &val);
            if (st == GR_ERR_INVALID) return st;
            if (st != GR_OK) return gr_error_prefix(st, "value '%s' dim %d", v->name, d);
            if (skip) continue;
            if (val < 0) {
                char e[160];
                gr_dx_str(g, v->dims[d], e, sizeof e);
                return gr_error(GR_ERR_SHAPE, "value '%s' dim %d ('%s') is %lld for this binding: a dim cannot be negative",
                                v->name, d, e, (long long)val);
            }
            v->dims[d] = dim_c(val);
        }
        if (!gr_ir_dims_fit(v->ndim, v->dims)) {
            char t[TYPE_STR_LEN];
            gr_ir_type_str(g, v, t, sizeof t);
            return gr_error(GR_ERR_SHAPE, "value '%s' would be %s, more than %lld elements", v->name, t, (long long)GR_MAX_NUMEL);
        }
    }
    for (int i = 0; i < g->nodes.len; i++) {
        gr_ir_node *n = &g->nodes.data[i];
        for (int a = 0; a < n->n_attr; a++) {
            gr_ir_attr *at = &n->attrs[a];
            gr_status st = GR_OK;
            bool skip = false;
            if (at->sym && (at->kind == GR_IR_ATTR_INT || at->kind == GR_IR_ATTR_FLOAT)) {
                int64_t val;
                st = spec_eval(g, env, (gr_dim){-1, at->expr}, NULL, &skip, &val);
                if (st == GR_OK && !skip) {
                    at->i = val;
                    at->f = (double)val;
                    at->sym = false;
                }
            } else if (at->kind == GR_IR_ATTR_INTS && at->exprs) {
                bool all = true;
                for (int k = 0; k < at->n && st == GR_OK; k++) {
                    if (at->exprs[k] == GR_SYM_NONE) continue;
                    int64_t val;
                    st = spec_eval(g, env, (gr_dim){-1, at->exprs[k]}, NULL, &skip, &val);
                    if (st == GR_OK && !skip) at->ints[k] = val, at->exprs[k] = GR_SYM_NONE;
                    else all = false;
                }
                if (st == GR_OK && all) gr_ir_attr_drop_exprs(at);
            } else if (at->kind == GR_IR_ATTR_GRAPH && at->graph) {
                gr_graph *sub = at->graph;
                int64_t *sv = gr_malloc(sizeof(int64_t) * ((size_t)sub->syms.len + 1));
                if (!sv) return GR_ERR_NOMEM;
                for (int k = 0; k < sub->syms.len; k++) {
                    int32_t r = gr_ir_find_sym(g, sub->syms.data[k].name);
                    sv[k] = r >= 0 ? env->values[r] : -1;
                }
                spec_env sub_env = {sv, false};
                st = specialize_graph(sub, &sub_env);
                gr_free(sv, sizeof(int64_t) * ((size_t)sub->syms.len + 1));
            }
            if (st != GR_OK) {
                char where[512];
                gr_ir_node_where(g, n, where, sizeof where);
                return gr_error_prefix(st, "%s: attribute '%s'", where, at->name);
            }
        }
    }
    return GR_OK;
}

gr_status gr_ir_specialize(gr_graph *g, const int64_t *sym_values) {
    if (g->syms.len && !sym_values) return gr_error(GR_ERR_INVALID, "specialize: no values for the graph's symbolic dims");
    spec_env env = {sym_values, true};
    GR_TRY(specialize_graph(g, &env));
    return gr_ir_infer_shapes(g);
}
