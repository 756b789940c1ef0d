/* frontend/onnx/onnx-fold — evaluates shape arithmetic while importing.
 *
 * Why here and not in the IR's constant folder: graft IR takes shapes, axes,
 * slice bounds and ranges as attributes, so the ONNX inputs that carry them
 * must be known when the node is converted. Exporters compute them with
 * Shape → Gather → Unsqueeze → Concat → Reshape chains; for concrete shapes
 * every link is folded here and the chain vanishes from the IR.
 *
 * Shape of a value with symbolic dims gives a partly symbolic tensor: the
 * elements of symbolic dims hold their expressions (ox_tensor.sym). They
 * travel through the movement ops, and integer arithmetic on them builds new
 * expressions (Add, Sub, Mul, Div and Mod of non-negative operands, Min, Max,
 * Neg; comparisons and Where when the symbols' ranges decide them), so
 * Gather(Shape(x), 1) + 1 of x[N, S] is the expression S + 1 and
 * Gather(Shape(x), -1) of x[N, 768] is still the constant 768. What cannot be
 * expressed (a product of a symbol and a float, a comparison the ranges do
 * not decide) is marked OX_UNKNOWN, and only a consumer that needs such an
 * element fails, naming itself and the value.
 */
#include "frontend/onnx/onnx-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ==== helpers ========================================================================= */
static void strides_of(int ndim, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

static void unravel(int64_t flat, int ndim, const int64_t *dims, int64_t *idx) {
    for (int i = ndim - 1; i >= 0; i--) {
        int64_t d = dims[i] ? dims[i] : 1;
        idx[i] = flat % d;
        flat /= d;
    }
}

static gr_status set_sym(ox_tensor *t, int64_t i, int32_t e) {
    if (!t->sym) {
        if (e == GR_SYM_NONE) return GR_OK;
        int64_t n = ox_tensor_numel(t);
        if (!(t->sym = gr_malloc(sizeof(int32_t) * (size_t)(n ? n : 1)))) return GR_ERR_NOMEM;
        for (int64_t k = 0; k < n; k++) t->sym[k] = GR_SYM_NONE;
    }
    t->sym[i] = e;
    return GR_OK;
}

static gr_status mark_unknown(ox_tensor *t, int64_t i) { return set_sym(t, i, OX_UNKNOWN); }

/* dst[j] = src[i], data and symbolic mark */
static gr_status move_elem(ox_tensor *dst, int64_t j, const ox_tensor *src, int64_t i) {
    size_t es = gr_dtype_size(dst->dtype);
    memcpy((char *)dst->data + (size_t)j * es, (const char *)src->data + (size_t)i * es, es);
    return set_sym(dst, j, src->sym ? src->sym[i] : GR_SYM_NONE);
}

bool ox_tensor_has_sym(const ox_tensor *t) {
    if (!t->sym) return false;
    int64_t n = ox_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (t->sym[i] != GR_SYM_NONE) return true;
    return false;
}

bool ox_elem_dim(const ox_tensor *t, int64_t i, gr_dim *out) {
    if (t->sym && t->sym[i] == OX_UNKNOWN) return false;
    if (t->sym && t->sym[i] != GR_SYM_NONE) *out = (gr_dim){-1, t->sym[i]};
    else if (gr_dtype_is_float(t->dtype)) *out = gr_dx_const((int64_t)gr_load_f64(t->data, t->dtype, i));
    else *out = gr_dx_const(gr_load_i64(t->data, t->dtype, i));
    return true;
}

gr_status ox_set_elem(ox_tensor *t, int64_t j, gr_dim d) {
    if (gr_dtype_is_float(t->dtype)) gr_store_f64(t->data, t->dtype, j, gr_dx_is_sym(d) ? -1.0 : (double)d.size);
    else gr_store_i64(t->data, t->dtype, j, gr_dx_is_sym(d) ? -1 : d.size);
    return set_sym(t, j, d.expr);
}

void ox_sym_desc(ox_ctx *c, const ox_tensor *t, char *buf, size_t n) {
    snprintf(buf, n, "?");
    int64_t numel = ox_tensor_numel(t);
    for (int64_t i = 0; t->sym && i < numel; i++) {
        if (t->sym[i] == GR_SYM_NONE) continue;
        if (t->sym[i] == OX_UNKNOWN) snprintf(buf, n, "an expression of symbolic dims graft cannot represent");
        else gr_dx_str(c->g, (gr_dim){-1, t->sym[i]}, buf, n);
        return;
    }
}

/* element count of dims: 0 when any dim is 0, -1 when past OX_MAX_ELEMS or negative */
static int64_t safe_numel(int n, const int64_t *dims) {
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] == 0) return 0;
    }
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] > OX_MAX_ELEMS / p) return -1;
        p *= dims[i];
    }
    return p;
}

/* too big to fold (or malformed): leave it to the converters */
static bool fold_too_big(int n, const int64_t *dims) {
    int64_t e = safe_numel(n, dims);
    return e < 0 || e > OX_FOLD_MAX_ELEMS;
}


static int64_t norm_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

gr_status ox_tensor_cast(const ox_tensor *t, gr_dtype to, ox_tensor **out) {
    GR_TRY(ox_tensor_new(to, t->ndim, t->dims, out));
    int64_t n = ox_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (gr_dtype_is_float(t->dtype) || gr_dtype_is_float(to)) gr_store_f64((*out)->data, to, i, gr_load_f64(t->data, t->dtype, i));
        else gr_store_i64((*out)->data, to, i, gr_load_i64(t->data, t->dtype, i));
        /* an integer expression stays one through casts between integer and float
         * types; to bool or a narrow type it would need a wrap: not expressed */
        int32_t e = t->sym ? t->sym[i] : GR_SYM_NONE;
        if (e >= 0 && (to == GR_BOOL || to == GR_I8 || to == GR_U8)) e = OX_UNKNOWN;
        if (set_sym(*out, i, e) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    }
    return GR_OK;
}

gr_status ox_shape_of(ox_ctx *c, int vi, ox_tensor **out) {
    *out = NULL;
    if (vi < 0) return GR_OK;
    const ox_value *v = &c->vals.data[vi];
    int ndim;
    gr_dim dims[GR_MAX_DIMS];
    if (v->konst) {
        ndim = v->konst->ndim;
        for (int i = 0; i < ndim; i++) dims[i] = gr_dx_const(v->konst->dims[i]);
    } else if (v->ir >= 0 && c->g->values.data[v->ir].typed) {
        const gr_ir_value *iv = &c->g->values.data[v->ir];
        ndim = iv->ndim;
        for (int i = 0; i < ndim; i++) dims[i] = iv->dims[i];
    } else {
        return GR_OK;
    }
    int64_t n = ndim;
    GR_TRY(ox_tensor_new(GR_I64, 1, &n, out));
    for (int i = 0; i < ndim; i++) {
        if (ox_set_elem(*out, i, dims[i]) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    }
    return GR_OK;
}

/* ==== movement ops ===================================================================== */
static gr_status fold_gather(ox_ctx *c, const ox_tensor *data, const ox_tensor *idx, ox_tensor **out) {
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    axis = norm_axis(axis, data->ndim);
    if (axis < 0 || axis >= data->ndim) return ox_node_error(c, GR_ERR_SHAPE, "axis out of range for rank %d", data->ndim);
    int ndim = data->ndim - 1 + idx->ndim;
    if (ndim > GR_MAX_DIMS) return GR_ERR_UNSUPPORTED;
    int64_t dims[GR_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < axis; i++) dims[k++] = data->dims[i];
    for (int i = 0; i < idx->ndim; i++) dims[k++] = idx->dims[i];
    for (int i = (int)axis + 1; i < data->ndim; i++) dims[k++] = data->dims[i];
    GR_TRY(ox_tensor_new(data->dtype, ndim, dims, out));
    int64_t n = ox_tensor_numel(*out), st[GR_MAX_DIMS], oi[GR_MAX_DIMS], di[GR_MAX_DIMS];
    strides_of(data->ndim, data->dims, st);
    for (int64_t j = 0; j < n; j++) {
        unravel(j, ndim, dims, oi);
        int64_t ii = 0;
        int64_t istr = 1;
        for (int i = idx->ndim - 1; i >= 0; i--) {
            ii += oi[axis + i] * istr;
            istr *= idx->dims[i];
        }
        int64_t g = gr_load_i64(idx->data, idx->dtype, ii);
        if (ox_elem_sym(idx, ii)) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_UNSUPPORTED; /* data-dependent index: leave it to the IR */
        }
        if (g < 0) g += data->dims[axis];
        if (g < 0 || g >= data->dims[axis]) {
            ox_tensor_free(*out);
            *out = NULL;
            return ox_node_error(c, GR_ERR_SHAPE, "index %lld out of range for axis of size %lld",
                                 (long long)gr_load_i64(idx->data, idx->dtype, ii), (long long)data->dims[axis]);
        }
        k = 0;
        for (int i = 0; i < axis; i++) di[i] = oi[k++];
        k += idx->ndim;
        di[axis] = g;
        for (int i = (int)axis + 1; i < data->ndim; i++) di[i] = oi[k++];
        int64_t src = 0;
        for (int i = 0; i < data->ndim; i++) src += di[i] * st[i];
        if (move_elem(*out, j, data, src) != GR_OK) goto nomem;
    }
    return GR_OK;
nomem:
    ox_tensor_free(*out);
    *out = NULL;
    return GR_ERR_NOMEM;
}

static gr_status fold_concat(ox_ctx *c, const ox_tensor *const *ins, int n_in, ox_tensor **out) {
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    int rank = ins[0]->ndim;
    axis = norm_axis(axis, rank);
    if (axis < 0 || axis >= rank) return ox_node_error(c, GR_ERR_SHAPE, "axis out of range for rank %d", rank);
    int64_t dims[GR_MAX_DIMS];
    for (int i = 0; i < rank; i++) dims[i] = ins[0]->dims[i];
    dims[axis] = 0;
    for (int k = 0; k < n_in; k++) {
        if (ins[k]->ndim != rank || ins[k]->dtype != ins[0]->dtype)
            return ox_node_error(c, GR_ERR_SHAPE, "inputs differ in rank or dtype");
        for (int i = 0; i < rank; i++)
            if (i != axis && ins[k]->dims[i] != dims[i]) return ox_node_error(c, GR_ERR_SHAPE, "input %d: dim %d mismatch", k, i);
        dims[axis] += ins[k]->dims[axis];
    }
    if (fold_too_big(rank, dims)) return GR_ERR_UNSUPPORTED;
    GR_TRY(ox_tensor_new(ins[0]->dtype, rank, dims, out));
    int64_t n = ox_tensor_numel(*out), oi[GR_MAX_DIMS], st[GR_MAX_DIMS];
    for (int64_t j = 0; j < n; j++) {
        unravel(j, rank, dims, oi);
        int k = 0;
        int64_t a = oi[axis];
        while (a >= ins[k]->dims[axis]) a -= ins[k++]->dims[axis];
        oi[axis] = a;
        strides_of(rank, ins[k]->dims, st);
        int64_t src = 0;
        for (int i = 0; i < rank; i++) src += oi[i] * st[i];
        if (move_elem(*out, j, ins[k], src) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    }
    return GR_OK;
}

/* same data, new dims (Reshape, Squeeze, Unsqueeze, Identity) */
static gr_status fold_redim(const ox_tensor *in, int ndim, const int64_t *dims, ox_tensor **out) {
    GR_TRY(ox_tensor_new(in->dtype, ndim, dims, out));
    if (in->nbytes) memcpy((*out)->data, in->data, in->nbytes);
    int64_t n = ox_tensor_numel(in);
    for (int64_t i = 0; i < n; i++)
        if (ox_elem_sym(in, i) && set_sym(*out, i, in->sym[i]) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    return GR_OK;
}

static gr_status fold_slice(ox_ctx *c, const ox_tensor *x, ox_tensor **out) {
    int64_t starts[GR_MAX_DIMS], ends[GR_MAX_DIMS], axes[GR_MAX_DIMS], steps[GR_MAX_DIMS];
    int ns, ne, na = -1, nst = -1;
    GR_TRY(ox_need_ints(c, 1, "starts", starts, GR_MAX_DIMS, &ns));
    GR_TRY(ox_need_ints(c, 2, "ends", ends, GR_MAX_DIMS, &ne));
    if (ox_in(c, 3) >= 0) GR_TRY(ox_need_ints(c, 3, "axes", axes, GR_MAX_DIMS, &na));
    if (ox_in(c, 4) >= 0) GR_TRY(ox_need_ints(c, 4, "steps", steps, GR_MAX_DIMS, &nst));
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ox_node_error(c, GR_ERR_SHAPE, "starts, ends, axes and steps differ in length");
    int64_t lo[GR_MAX_DIMS], step[GR_MAX_DIMS], dims[GR_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) lo[i] = 0, step[i] = 1, dims[i] = x->dims[i];
    for (int k = 0; k < ns; k++) {
        int64_t ax = na >= 0 ? norm_axis(axes[k], x->ndim) : k;
        if (ax < 0 || ax >= x->ndim) return ox_node_error(c, GR_ERR_SHAPE, "slice axis out of range");
        int64_t d = x->dims[ax], s = nst >= 0 ? steps[k] : 1, b = starts[k], e = ends[k];
        if (!gr_ir_slice_axis(d, b, e, s, &lo[ax], &dims[ax])) return ox_node_error(c, GR_ERR_SHAPE, "slice step is 0");
        step[ax] = s;
    }
    GR_TRY(ox_tensor_new(x->dtype, x->ndim, dims, out));
    int64_t n = ox_tensor_numel(*out), oi[GR_MAX_DIMS], st[GR_MAX_DIMS];
    strides_of(x->ndim, x->dims, st);
    for (int64_t j = 0; j < n; j++) {
        unravel(j, x->ndim, dims, oi);
        int64_t src = 0;
        for (int i = 0; i < x->ndim; i++) src += (lo[i] + oi[i] * step[i]) * st[i];
        if (move_elem(*out, j, x, src) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    }
    return GR_OK;
}

/* ==== elementwise ============================================================================ */
static bool broadcast_dims(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    int n = GR_MAX(na, nb);
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)], db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) return false;
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}

/* flat index into t of the broadcast multi-index oi (rank n) */
static int64_t bcast_index(const ox_tensor *t, int n, const int64_t *oi) {
    int64_t idx = 0, s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t o = oi[i + (n - t->ndim)];
        idx += (t->dims[i] == 1 ? 0 : o) * s;
        s *= t->dims[i];
    }
    return idx;
}

typedef enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_POW, EW_MIN, EW_MAX, EW_MOD, EW_EQ, EW_LT, EW_LE, EW_GT, EW_GE, EW_AND, EW_OR } ew_op;

static int64_t ipow(int64_t b, int64_t e) {
    if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

static int64_t ew_int(ew_op op, int64_t a, int64_t b) {
    switch (op) {
    case EW_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case EW_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case EW_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case EW_DIV: return b == 0 ? 0 : (a == INT64_MIN && b == -1) ? a : a / b;
    case EW_MOD: { /* ONNX Mod with fmod=0: sign of the divisor */
        if (b == 0 || (a == INT64_MIN && b == -1)) return 0;
        int64_t r = a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case EW_POW: return ipow(a, b);
    case EW_MIN: return a < b ? a : b;
    case EW_MAX: return a > b ? a : b;
    case EW_EQ: return a == b;
    case EW_LT: return a < b;
    case EW_LE: return a <= b;
    case EW_GT: return a > b;
    case EW_GE: return a >= b;
    case EW_AND: return a && b;
    case EW_OR: return a || b;
    }
    return 0;
}

static double ew_float(ew_op op, double a, double b) {
    switch (op) {
    case EW_ADD: return a + b;
    case EW_SUB: return a - b;
    case EW_MUL: return a * b;
    case EW_DIV: return a / b;
    case EW_MOD: return fmod(a, b);
    case EW_POW: return pow(a, b);
    case EW_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case EW_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case EW_EQ: return a == b;
    case EW_LT: return a < b;
    case EW_LE: return a <= b;
    case EW_GT: return a > b;
    case EW_GE: return a >= b;
    case EW_AND: return a != 0 && b != 0;
    case EW_OR: return a != 0 || b != 0;
    }
    return 0;
}

/* a op b where a or b is symbolic. *r receives the result (an expression, a
 * concrete value, or for a comparison 0/1); *known = false when it cannot be
 * expressed. ONNX's integer Div truncates and its Mod takes the divisor's
 * sign; expressions floor: the two agree when the operands are non-negative,
 * which the symbols' ranges must show. */
static gr_status sym_binary(ox_ctx *c, ew_op op, gr_dim a, gr_dim b, gr_dim *r, bool *known) {
    *known = true;
    int64_t alo, ahi, blo, bhi;
    gr_dx_bounds(c->g, a, &alo, &ahi);
    gr_dx_bounds(c->g, b, &blo, &bhi);
    gr_dx_op dop;
    switch (op) {
    case EW_ADD: dop = GR_DX_ADD; break;
    case EW_SUB: dop = GR_DX_SUB; break;
    case EW_MUL: dop = GR_DX_MUL; break;
    case EW_MIN: dop = GR_DX_MIN; break;
    case EW_MAX: dop = GR_DX_MAX; break;
    case EW_DIV:
        if (alo < 0 || blo <= 0) return *known = false, GR_OK;
        dop = GR_DX_DIV;
        break;
    case EW_MOD:
        if (blo <= 0) return *known = false, GR_OK;
        dop = GR_DX_MOD;
        break;
    case EW_EQ: case EW_LT: case EW_LE: case EW_GT: case EW_GE: {
        /* conditions are 0/1 expressions (decided by the ranges where they can be):
         * a <= b is a < b + 1, a > b is b < a, a >= b is b < a + 1 */
        gr_dim x = a, y = b;
        gr_status st = GR_OK;
        if (op == EW_GT || op == EW_GE) x = b, y = a;
        if (op == EW_LE || op == EW_GE) st = gr_dx_binary(c->g, GR_DX_ADD, y, gr_dx_const(1), &y);
        if (st == GR_OK) st = gr_dx_binary(c->g, op == EW_EQ ? GR_DX_EQ : GR_DX_LT, x, y, r);
        if (st == GR_ERR_UNSUPPORTED) return gr_error_clear(), *known = false, GR_OK;
        return st;
    }
    case EW_AND: dop = GR_DX_MUL; break; /* of 0/1 conditions */
    case EW_OR: { /* a + b - a*b */
        gr_dim s, p;
        gr_status st = gr_dx_binary(c->g, GR_DX_ADD, a, b, &s);
        if (st == GR_OK) st = gr_dx_binary(c->g, GR_DX_MUL, a, b, &p);
        if (st == GR_OK) st = gr_dx_binary(c->g, GR_DX_SUB, s, p, r);
        if (st == GR_ERR_UNSUPPORTED) return gr_error_clear(), *known = false, GR_OK;
        return st;
    }
    default: return *known = false, GR_OK;
    }
    gr_status st = gr_dx_binary(c->g, dop, a, b, r);
    if (st == GR_ERR_UNSUPPORTED) {
        gr_error_clear();
        *known = false;
        return GR_OK;
    }
    if (st != GR_OK && st != GR_ERR_NOMEM) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", gr_last_error());
        return ox_node_error(c, st, "%s", msg);
    }
    return st;
}

/* A float element holding an integer (a cast of a symbolic dim) as a dim; false otherwise. */
static bool integral_elem(const ox_tensor *t, int64_t i, gr_dim *out) {
    if (!ox_elem_dim(t, i, out)) return false;
    if (gr_dx_is_sym(*out) || !gr_dtype_is_float(t->dtype)) return true;
    double v = gr_load_f64(t->data, t->dtype, i);
    return v == (double)(int64_t)v && v > -9e15 && v < 9e15;
}

static gr_status fold_binary(ox_ctx *c, ew_op op, const ox_tensor *a, const ox_tensor *b, ox_tensor **out) {
    int n;
    int64_t dims[GR_MAX_DIMS];
    if (!broadcast_dims(a->ndim, a->dims, b->ndim, b->dims, &n, dims))
        return ox_node_error(c, GR_ERR_SHAPE, "inputs do not broadcast");
    if (op != EW_POW && a->dtype != b->dtype) return ox_node_error(c, GR_ERR_SHAPE, "inputs differ in dtype");
    if (fold_too_big(n, dims)) return GR_ERR_UNSUPPORTED;
    bool cmp = op >= EW_EQ;
    gr_dtype odt = cmp ? GR_BOOL : a->dtype;
    bool fl = gr_dtype_is_float(a->dtype) || gr_dtype_is_float(b->dtype);
    GR_TRY(ox_tensor_new(odt, n, dims, out));
    int64_t total = ox_tensor_numel(*out), oi[GR_MAX_DIMS];
    for (int64_t j = 0; j < total; j++) {
        unravel(j, n, dims, oi);
        int64_t ia = bcast_index(a, n, oi), ib = bcast_index(b, n, oi);
        if (ox_elem_sym(a, ia) || ox_elem_sym(b, ib)) {
            gr_dim da, db, r = gr_dx_const(0);
            bool known = integral_elem(a, ia, &da) && integral_elem(b, ib, &db);
            gr_status st = GR_OK;
            /* float division of integers is not an integer: not expressed */
            if (known && !(fl && (op == EW_DIV || op == EW_MOD || op == EW_POW))) st = sym_binary(c, op, da, db, &r, &known);
            else known = false;
            if (st == GR_OK) st = known ? ox_set_elem(*out, j, r) : mark_unknown(*out, j);
            if (st != GR_OK) {
                ox_tensor_free(*out);
                *out = NULL;
                return st;
            }
            continue;
        }
        if (fl) gr_store_f64((*out)->data, odt, j, ew_float(op, gr_load_f64(a->data, a->dtype, ia), gr_load_f64(b->data, b->dtype, ib)));
        else gr_store_i64((*out)->data, odt, j, ew_int(op, gr_load_i64(a->data, a->dtype, ia), gr_load_i64(b->data, b->dtype, ib)));
    }
    return GR_OK;
}

static gr_status fold_where(ox_ctx *c, const ox_tensor *cond, const ox_tensor *a, const ox_tensor *b, ox_tensor **out) {
    int n1, n;
    int64_t d1[GR_MAX_DIMS], dims[GR_MAX_DIMS];
    if (!broadcast_dims(a->ndim, a->dims, b->ndim, b->dims, &n1, d1) || !broadcast_dims(cond->ndim, cond->dims, n1, d1, &n, dims))
        return ox_node_error(c, GR_ERR_SHAPE, "inputs do not broadcast");
    if (a->dtype != b->dtype) return ox_node_error(c, GR_ERR_SHAPE, "inputs differ in dtype");
    if (fold_too_big(n, dims)) return GR_ERR_UNSUPPORTED;
    GR_TRY(ox_tensor_new(a->dtype, n, dims, out));
    int64_t total = ox_tensor_numel(*out), oi[GR_MAX_DIMS];
    for (int64_t j = 0; j < total; j++) {
        unravel(j, n, dims, oi);
        int64_t ic = bcast_index(cond, n, oi);
        const ox_tensor *src = gr_load_i64(cond->data, cond->dtype, ic) ? a : b;
        if (ox_elem_sym(cond, ic) || ox_elem_sym(a, bcast_index(a, n, oi)) || ox_elem_sym(b, bcast_index(b, n, oi))) {
            /* c*(x - y) + y over 0/1 condition c, for integer values */
            gr_dim dc, dx_, dy, t;
            bool known = ox_elem_dim(cond, ic, &dc) && ox_elem_dim(a, bcast_index(a, n, oi), &dx_) &&
                         ox_elem_dim(b, bcast_index(b, n, oi), &dy) && !gr_dtype_is_float(a->dtype);
            gr_status st = GR_OK;
            if (known && !gr_dx_is_sym(dc)) t = dc.size ? dx_ : dy;
            else if (known) {
                st = gr_dx_binary(c->g, GR_DX_SUB, dx_, dy, &t);
                if (st == GR_OK) st = gr_dx_binary(c->g, GR_DX_MUL, dc, t, &t);
                if (st == GR_OK) st = gr_dx_binary(c->g, GR_DX_ADD, t, dy, &t);
                if (st == GR_ERR_UNSUPPORTED) gr_error_clear(), known = false, st = GR_OK;
            }
            if (st == GR_OK) st = known ? ox_set_elem(*out, j, t) : mark_unknown(*out, j);
            if (st != GR_OK) {
                ox_tensor_free(*out);
                *out = NULL;
                return st;
            }
            continue;
        }
        if (move_elem(*out, j, src, bcast_index(src, n, oi)) != GR_OK) goto nomem;
    }
    return GR_OK;
nomem:
    ox_tensor_free(*out);
    *out = NULL;
    return GR_ERR_NOMEM;
}

typedef enum { UN_NEG, UN_ABS, UN_NOT, UN_SQRT, UN_RECIP, UN_EXP, UN_LOG, UN_FLOOR, UN_CEIL } un_op;

static gr_status fold_unary(ox_ctx *c, un_op op, const ox_tensor *x, ox_tensor **out) {
    bool fl = gr_dtype_is_float(x->dtype);
    if (!fl && op >= UN_SQRT) return GR_ERR_UNSUPPORTED;
    GR_TRY(ox_tensor_new(x->dtype, x->ndim, x->dims, out));
    int64_t n = ox_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (ox_elem_sym(x, i)) {
            /* symbolic: -e; |e| and floor/ceil of an integer when the ranges allow; else unknown */
            gr_dim d, r;
            bool known = ox_elem_dim(x, i, &d);
            int64_t lo = 0, hi = 0;
            if (known) gr_dx_bounds(c->g, d, &lo, &hi);
            gr_status st = GR_OK;
            if (known && op == UN_NEG) st = gr_dx_binary(c->g, GR_DX_MUL, d, gr_dx_const(-1), &r);
            else if (known && op == UN_NOT) st = gr_dx_binary(c->g, GR_DX_SUB, gr_dx_const(1), d, &r); /* of a 0/1 condition */
            else if (known && (op == UN_FLOOR || op == UN_CEIL || (op == UN_ABS && lo >= 0))) r = d;
            else known = false;
            if (st == GR_ERR_UNSUPPORTED) gr_error_clear(), known = false, st = GR_OK;
            if (st == GR_OK) st = known ? ox_set_elem(*out, i, r) : mark_unknown(*out, i);
            if (st != GR_OK) {
                ox_tensor_free(*out);
                *out = NULL;
                return st;
            }
            continue;
        }
        if (fl) {
            double v = gr_load_f64(x->data, x->dtype, i);
            switch (op) {
            case UN_NEG: v = -v; break;
            case UN_ABS: v = fabs(v); break;
            case UN_NOT: v = v == 0; break;
            case UN_SQRT: v = sqrt(v); break;
            case UN_RECIP: v = 1.0 / v; break;
            case UN_EXP: v = exp(v); break;
            case UN_LOG: v = log(v); break;
            case UN_FLOOR: v = floor(v); break;
            case UN_CEIL: v = ceil(v); break;
            }
            gr_store_f64((*out)->data, x->dtype, i, v);
        } else {
            int64_t v = gr_load_i64(x->data, x->dtype, i);
            v = op == UN_NEG ? (int64_t)(0 - (uint64_t)v) : op == UN_ABS ? (v < 0 ? (int64_t)(0 - (uint64_t)v) : v) : op == UN_NOT ? v == 0 : v;
            gr_store_i64((*out)->data, x->dtype, i, v);
        }
    }
    return GR_OK;
}

/* ==== generators ==================================================================================== */

static gr_status fold_constant_of_shape(ox_ctx *c, ox_tensor **out) {
    int64_t dims[GR_MAX_DIMS];
    int n;
    GR_TRY(ox_need_ints(c, 0, "shape", dims, GR_MAX_DIMS, &n));
    for (int i = 0; i < n; i++)
        if (dims[i] < 0) return ox_node_error(c, GR_ERR_SHAPE, "negative dim %lld in shape", (long long)dims[i]);
    int64_t numel = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] && numel > OX_FOLD_MAX_ELEMS / dims[i]) return GR_ERR_UNSUPPORTED;
        numel *= dims[i];
    }
    gr_dtype dt = GR_F32;
    double value = 0;
    const Onnx__AttributeProto *a = ox_attr(c, "value");
    if (a) {
        ox_tensor *v;
        if (!a->t) return ox_node_error(c, GR_ERR_INVALID, "attribute 'value' must be a tensor");
        GR_TRY(ox_tensor_from_proto(c, a->t, "attribute 'value'", &v));
        if (ox_tensor_numel(v) != 1) {
            ox_tensor_free(v);
            return ox_node_error(c, GR_ERR_INVALID, "attribute 'value' must hold one element");
        }
        dt = v->dtype;
        value = gr_load_f64(v->data, v->dtype, 0);
        int64_t iv = gr_load_i64(v->data, v->dtype, 0);
        GR_TRY(ox_tensor_new(dt, n, dims, out));
        for (int64_t i = 0; i < numel; i++) {
            if (gr_dtype_is_float(dt)) gr_store_f64((*out)->data, dt, i, value);
            else gr_store_i64((*out)->data, dt, i, iv);
        }
        ox_tensor_free(v);
        return GR_OK;
    }
    return ox_tensor_new(dt, n, dims, out);
}

static gr_status scalar_of(ox_ctx *c, int i, const char *what, const ox_tensor **t) {
    GR_TRY(ox_need_const(c, i, what, t));
    if (ox_tensor_numel(*t) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must be a scalar", what);
    return GR_OK;
}

static gr_status fold_range(ox_ctx *c, ox_tensor **out) {
    const ox_tensor *ts, *tl, *td;
    GR_TRY(scalar_of(c, 0, "start", &ts));
    GR_TRY(scalar_of(c, 1, "limit", &tl));
    GR_TRY(scalar_of(c, 2, "delta", &td));
    gr_dtype dt = ts->dtype;
    double s = gr_load_f64(ts->data, dt, 0), l = gr_load_f64(tl->data, tl->dtype, 0), d = gr_load_f64(td->data, td->dtype, 0);
    if (d == 0 || isnan(d) || isnan(s) || isnan(l)) return ox_node_error(c, GR_ERR_INVALID, "delta is 0 or an input is NaN");
    double count = ceil((l - s) / d);
    if (!(count > 0)) count = 0;
    if (count > OX_FOLD_MAX_ELEMS) return GR_ERR_UNSUPPORTED;
    int64_t n = (int64_t)count;
    GR_TRY(ox_tensor_new(dt, 1, &n, out));
    if (gr_dtype_is_float(dt)) {
        for (int64_t i = 0; i < n; i++) gr_store_f64((*out)->data, dt, i, s + (double)i * d);
    } else {
        int64_t is = gr_load_i64(ts->data, dt, 0), id = gr_load_i64(td->data, td->dtype, 0);
        for (int64_t i = 0; i < n; i++) gr_store_i64((*out)->data, dt, i, is + i * id);
    }
    return GR_OK;
}

static gr_status fold_expand(ox_ctx *c, const ox_tensor *x, ox_tensor **out) {
    int64_t shape[GR_MAX_DIMS], dims[GR_MAX_DIMS];
    int ns, n;
    GR_TRY(ox_need_ints(c, 1, "shape", shape, GR_MAX_DIMS, &ns));
    if (!broadcast_dims(x->ndim, x->dims, ns, shape, &n, dims)) return ox_node_error(c, GR_ERR_SHAPE, "shape does not broadcast");
    for (int i = 0; i < n; i++)
        if (dims[i] < 0) return ox_node_error(c, GR_ERR_SHAPE, "negative dim in shape");
    if (fold_too_big(n, dims)) return GR_ERR_UNSUPPORTED;
    GR_TRY(ox_tensor_new(x->dtype, n, dims, out));
    int64_t total = ox_tensor_numel(*out), oi[GR_MAX_DIMS];
    for (int64_t j = 0; j < total; j++) {
        unravel(j, n, dims, oi);
        if (move_elem(*out, j, x, bcast_index(x, n, oi)) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    }
    return GR_OK;
}

/* ==== scans and N-d gathers (mask arithmetic of unoptimized exports) ========================== */

/* CumSum(x, axis; exclusive, reverse) */
static gr_status fold_cumsum(ox_ctx *c, const ox_tensor *x, ox_tensor **out) {
    int64_t axis, exclusive, reverse;
    int n;
    GR_TRY(ox_need_ints(c, 1, "axis", &axis, 1, &n));
    if (n != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'axis' must be a scalar");
    GR_TRY(ox_attr_int(c, "exclusive", 0, &exclusive));
    GR_TRY(ox_attr_int(c, "reverse", 0, &reverse));
    if (x->ndim == 0) return ox_node_error(c, GR_ERR_SHAPE, "CumSum of a scalar");
    axis = norm_axis(axis, x->ndim);
    if (axis < 0 || axis >= x->ndim) return ox_node_error(c, GR_ERR_SHAPE, "axis out of range for rank %d", x->ndim);
    if (x->dtype == GR_BOOL) return GR_ERR_UNSUPPORTED;
    GR_TRY(ox_tensor_new(x->dtype, x->ndim, x->dims, out));
    int64_t st[GR_MAX_DIMS], total = ox_tensor_numel(x), len = x->dims[axis];
    strides_of(x->ndim, x->dims, st);
    bool fl = gr_dtype_is_float(x->dtype);
    /* one scan per line along the axis: start at every element whose axis index is 0 */
    for (int64_t j = 0; j < total; j++) {
        if ((j / st[axis]) % (len ? len : 1) != 0) continue;
        double accf = 0;
        int64_t acci = 0;
        bool unknown = false;
        for (int64_t k = 0; k < len; k++) {
            int64_t e = j + (reverse ? len - 1 - k : k) * st[axis];
            if (exclusive) {
                if (fl) gr_store_f64((*out)->data, x->dtype, e, accf);
                else gr_store_i64((*out)->data, x->dtype, e, acci);
            }
            if (fl) accf += gr_load_f64(x->data, x->dtype, e);
            else acci = (int64_t)((uint64_t)acci + (uint64_t)gr_load_i64(x->data, x->dtype, e));
            if (!exclusive) {
                if (fl) gr_store_f64((*out)->data, x->dtype, e, accf);
                else gr_store_i64((*out)->data, x->dtype, e, acci);
            }
            bool was_unknown = unknown;
            unknown |= ox_elem_sym(x, e);
            if ((exclusive ? was_unknown : unknown) && mark_unknown(*out, e) != GR_OK) {
                ox_tensor_free(*out);
                *out = NULL;
                return GR_ERR_NOMEM;
            }
        }
    }
    return GR_OK;
}

/* Transpose(x; perm) */
static gr_status fold_transpose(ox_ctx *c, const ox_tensor *x, ox_tensor **out) {
    const int64_t *pa;
    int np;
    GR_TRY(ox_attr_ints(c, "perm", &pa, &np));
    int64_t perm[GR_MAX_DIMS], dims[GR_MAX_DIMS], xs[GR_MAX_DIMS], oi[GR_MAX_DIMS];
    if (np >= 0 && np != x->ndim) return ox_node_error(c, GR_ERR_SHAPE, "perm has %d entries for a rank-%d input", np, x->ndim);
    bool seen[GR_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        perm[i] = np < 0 ? x->ndim - 1 - i : pa[i];
        if (perm[i] < 0 || perm[i] >= x->ndim || seen[perm[i]]) return ox_node_error(c, GR_ERR_SHAPE, "perm is not a permutation");
        seen[perm[i]] = true;
        dims[i] = x->dims[perm[i]];
    }
    strides_of(x->ndim, x->dims, xs);
    GR_TRY(ox_tensor_new(x->dtype, x->ndim, dims, out));
    int64_t n = ox_tensor_numel(x);
    for (int64_t j = 0; j < n; j++) {
        unravel(j, x->ndim, dims, oi);
        int64_t src = 0;
        for (int i = 0; i < x->ndim; i++) src += oi[i] * xs[perm[i]];
        if (move_elem(*out, j, x, src) != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
            return GR_ERR_NOMEM;
        }
    }
    return GR_OK;
}

/* GatherND(data, indices; batch_dims) */
static gr_status fold_gather_nd(ox_ctx *c, const ox_tensor *data, const ox_tensor *idx, ox_tensor **out) {
    int64_t b;
    GR_TRY(ox_attr_int(c, "batch_dims", 0, &b));
    if (idx->ndim < 1 || !gr_dtype_is_int(idx->dtype)) return ox_node_error(c, GR_ERR_SHAPE, "indices must be integers of rank >= 1");
    int64_t q = idx->ndim, r = data->ndim, last = idx->dims[q - 1];
    if (b < 0 || b >= q || b >= r || last < 1 || last > r - b) return ox_node_error(c, GR_ERR_SHAPE, "batch_dims or indices' last dim out of range");
    for (int64_t i = 0; i < b; i++)
        if (data->dims[i] != idx->dims[i]) return ox_node_error(c, GR_ERR_SHAPE, "batch dims of data and indices differ");
    int ndim = (int)(q - 1 + r - b - last);
    if (ndim > GR_MAX_DIMS) return GR_ERR_UNSUPPORTED;
    int64_t dims[GR_MAX_DIMS];
    int k = 0;
    for (int64_t i = 0; i < q - 1; i++) dims[k++] = idx->dims[i];
    for (int64_t i = b + last; i < r; i++) dims[k++] = data->dims[i];
    if (fold_too_big(ndim, dims)) return GR_ERR_UNSUPPORTED;
    int64_t dst[GR_MAX_DIMS], ist[GR_MAX_DIMS];
    strides_of(data->ndim, data->dims, dst);
    strides_of(idx->ndim, idx->dims, ist);
    int64_t slice = 1; /* elements copied per index tuple */
    for (int64_t i = b + last; i < r; i++) slice *= data->dims[i];
    GR_TRY(ox_tensor_new(data->dtype, ndim, dims, out));
    int64_t tuples = ox_tensor_numel(*out) / (slice ? slice : 1), oi[GR_MAX_DIMS];
    if (!slice) tuples = 0;
    for (int64_t t = 0; t < tuples; t++) {
        unravel(t, (int)(q - 1), idx->dims, oi);
        int64_t src = 0, ibase = 0;
        for (int64_t i = 0; i < q - 1; i++) ibase += oi[i] * ist[i];
        for (int64_t i = 0; i < b; i++) src += oi[i] * dst[i];
        for (int64_t i = 0; i < last; i++) {
            if (ox_elem_sym(idx, ibase + i)) {
                ox_tensor_free(*out);
                *out = NULL;
                return GR_ERR_UNSUPPORTED;
            }
            int64_t g = gr_load_i64(idx->data, idx->dtype, ibase + i), d = data->dims[b + i];
            if (g < 0) g += d;
            if (g < 0 || g >= d) {
                ox_tensor_free(*out);
                *out = NULL;
                return ox_node_error(c, GR_ERR_SHAPE, "index %lld out of range for a dim of size %lld",
                                     (long long)gr_load_i64(idx->data, idx->dtype, ibase + i), (long long)d);
            }
            src += g * dst[b + i];
        }
        for (int64_t e = 0; e < slice; e++)
            if (move_elem(*out, t * slice + e, data, src + e) != GR_OK) {
                ox_tensor_free(*out);
                *out = NULL;
                return GR_ERR_NOMEM;
            }
    }
    return GR_OK;
}

/* ==== driver ============================================================================================ */
static bool op_is(const ox_ctx *c, const char *name) { return !strcmp(c->node->op_type, name); }

static const struct {
    const char *name;
    ew_op op;
} binary_ops[] = {
    {"Add", EW_ADD}, {"Sub", EW_SUB}, {"Mul", EW_MUL}, {"Div", EW_DIV}, {"Pow", EW_POW}, {"Mod", EW_MOD},
    {"Equal", EW_EQ}, {"Less", EW_LT}, {"LessOrEqual", EW_LE}, {"Greater", EW_GT}, {"GreaterOrEqual", EW_GE},
    {"And", EW_AND}, {"Or", EW_OR},
};
static const struct {
    const char *name;
    un_op op;
} unary_ops[] = {
    {"Neg", UN_NEG}, {"Abs", UN_ABS}, {"Not", UN_NOT}, {"Sqrt", UN_SQRT}, {"Reciprocal", UN_RECIP},
    {"Exp", UN_EXP}, {"Log", UN_LOG}, {"Floor", UN_FLOOR}, {"Ceil", UN_CEIL},
};

/* Folds the current node into *out (one output). GR_ERR_UNSUPPORTED (without
 * a message) means "not folded here". */
static bool all_present(const ox_tensor *const *ins, int n) {
    for (int i = 0; i < n; i++)
        if (!ins[i]) return false;
    return true;
}

static gr_status fold_one(ox_ctx *c, const ox_tensor *const *ins, int n_in, ox_tensor **out) {
    *out = NULL;
    const ox_tensor *x = n_in > 0 ? ins[0] : NULL;
    if (op_is(c, "Constant")) return ox_constant_tensor(c, out);
    if (op_is(c, "ConstantOfShape")) return fold_constant_of_shape(c, out);
    if (op_is(c, "Range")) return fold_range(c, out);
    if (op_is(c, "Shape") || op_is(c, "Size")) {
        ox_tensor *shape;
        GR_TRY(ox_shape_of(c, ox_in(c, 0), &shape));
        if (!shape) return GR_ERR_UNSUPPORTED;
        if (op_is(c, "Size")) {
            gr_status st = ox_tensor_new(GR_I64, 0, NULL, out);
            if (st == GR_OK) {
                gr_dim p = gr_dx_const(1), d;
                for (int64_t i = 0; i < shape->dims[0] && st == GR_OK; i++) {
                    ox_elem_dim(shape, i, &d); /* shape elements are dims: never unknown */
                    st = gr_dx_binary(c->g, GR_DX_MUL, p, d, &p);
                }
                if (st == GR_OK) st = ox_set_elem(*out, 0, p);
                else if (st == GR_ERR_UNSUPPORTED) gr_error_clear(), st = mark_unknown(*out, 0);
            }
            ox_tensor_free(shape);
            return st;
        }
        int64_t start, end, r = shape->dims[0];
        GR_TRY(ox_attr_int(c, "start", 0, &start));
        GR_TRY(ox_attr_int(c, "end", r, &end));
        if (start < 0) start += r;
        if (end < 0) end += r;
        start = start < 0 ? 0 : start > r ? r : start;
        end = end < 0 ? 0 : end > r ? r : end;
        if (start == 0 && end == r) return *out = shape, GR_OK;
        int64_t len = end > start ? end - start : 0;
        gr_status st = ox_tensor_new(GR_I64, 1, &len, out);
        for (int64_t i = 0; st == GR_OK && i < len; i++) st = move_elem(*out, i, shape, start + i);
        ox_tensor_free(shape);
        if (st != GR_OK) {
            ox_tensor_free(*out);
            *out = NULL;
        }
        return st;
    }
    if (!x) return GR_ERR_UNSUPPORTED;
    if (ox_tensor_numel(x) > OX_FOLD_MAX_ELEMS) return GR_ERR_UNSUPPORTED;
    if (op_is(c, "Identity")) return fold_redim(x, x->ndim, x->dims, out);
    if (op_is(c, "Cast")) {
        int64_t to;
        gr_dtype dt;
        GR_TRY(ox_attr_int(c, "to", 0, &to));
        if (ox_dtype_from_onnx(c, (int32_t)to, "attribute 'to'", &dt) != GR_OK) return GR_ERR_UNSUPPORTED;
        return ox_tensor_cast(x, dt, out);
    }
    if (op_is(c, "CastLike") && n_in == 2 && ins[1]) return ox_tensor_cast(x, ins[1]->dtype, out);
    bool data_ins = all_present(ins, n_in); /* ops whose inputs are all data */
    if (op_is(c, "CumSum") && n_in == 2 && data_ins) return fold_cumsum(c, x, out);
    if (op_is(c, "Transpose") && n_in == 1) return fold_transpose(c, x, out);
    if (op_is(c, "GatherND") && n_in == 2 && data_ins) return fold_gather_nd(c, x, ins[1], out);
    if (op_is(c, "Gather") && n_in == 2 && data_ins) return fold_gather(c, x, ins[1], out);
    if (op_is(c, "Concat") && data_ins) return fold_concat(c, ins, n_in, out);
    if (op_is(c, "Slice")) return fold_slice(c, x, out);
    if (op_is(c, "Expand") && n_in == 2 && data_ins) return fold_expand(c, x, out);
    if (op_is(c, "Where") && n_in == 3 && data_ins) return fold_where(c, x, ins[1], ins[2], out);
    if (op_is(c, "Unsqueeze") || op_is(c, "Squeeze") || op_is(c, "Reshape")) {
        int64_t dims[GR_MAX_DIMS], axes[GR_MAX_DIMS];
        int nd = 0, na = -1;
        if (op_is(c, "Reshape")) {
            int64_t allowzero, known = 1, infer = -1, xn = ox_tensor_numel(x);
            bool zero = false;
            GR_TRY(ox_attr_int(c, "allowzero", 0, &allowzero));
            GR_TRY(ox_need_ints(c, 1, "shape", dims, GR_MAX_DIMS, &nd));
            for (int i = 0; i < nd; i++) {
                if (dims[i] == 0 && !allowzero) {
                    if (i >= x->ndim) return ox_node_error(c, GR_ERR_SHAPE, "shape copies dim %d of a rank-%d input", i, x->ndim);
                    dims[i] = x->dims[i];
                }
                if (dims[i] == -1 && infer < 0) infer = i;
                else if (dims[i] < 0) return ox_node_error(c, GR_ERR_SHAPE, "bad target shape");
                else if (dims[i] == 0) zero = true;
                else if (dims[i] > OX_MAX_ELEMS / known) return ox_node_error(c, GR_ERR_SHAPE, "target shape is too large");
                else known *= dims[i];
            }
            if (infer >= 0) dims[infer] = zero ? 0 : xn / known;
            int64_t total = zero ? 0 : known * (infer >= 0 ? dims[infer] : 1);
            if (total != xn) return ox_node_error(c, GR_ERR_SHAPE, "element count changes");
            return fold_redim(x, nd, dims, out);
        }
        if (n_in > 1 && ox_in(c, 1) >= 0) GR_TRY(ox_need_ints(c, 1, "axes", axes, GR_MAX_DIMS, &na));
        else {
            const int64_t *aa;
            GR_TRY(ox_attr_ints(c, "axes", &aa, &na));
            for (int i = 0; i < na && i < GR_MAX_DIMS; i++) axes[i] = aa[i];
            if (na > GR_MAX_DIMS) return GR_ERR_UNSUPPORTED;
        }
        if (op_is(c, "Unsqueeze")) {
            if (na < 0) return ox_node_error(c, GR_ERR_INVALID, "axes missing");
            int r = x->ndim + na;
            if (r > GR_MAX_DIMS) return GR_ERR_UNSUPPORTED;
            bool ins_ax[GR_MAX_DIMS] = {false};
            for (int i = 0; i < na; i++) {
                int64_t a = norm_axis(axes[i], r);
                if (a < 0 || a >= r || ins_ax[a]) return ox_node_error(c, GR_ERR_SHAPE, "bad axes");
                ins_ax[a] = true;
            }
            for (int i = 0, k = 0; i < r; i++) dims[nd++] = ins_ax[i] ? 1 : x->dims[k++];
        } else {
            bool drop[GR_MAX_DIMS] = {false};
            for (int i = 0; i < na; i++) {
                int64_t a = norm_axis(axes[i], x->ndim);
                if (a < 0 || a >= x->ndim || x->dims[a] != 1) return ox_node_error(c, GR_ERR_SHAPE, "bad axes");
                drop[a] = true;
            }
            for (int i = 0; i < x->ndim; i++)
                if (!(na < 0 ? x->dims[i] == 1 : drop[i])) dims[nd++] = x->dims[i];
        }
        return fold_redim(x, nd, dims, out);
    }
    for (int i = 0; i < GR_ARRAY_LEN(binary_ops); i++)
        if (op_is(c, binary_ops[i].name) && n_in == 2 && data_ins) return fold_binary(c, binary_ops[i].op, x, ins[1], out);
    if ((op_is(c, "Min") || op_is(c, "Max")) && n_in >= 1 && data_ins) {
        ox_tensor *acc = NULL;
        GR_TRY(fold_redim(x, x->ndim, x->dims, &acc));
        for (int k = 1; k < n_in; k++) {
            ox_tensor *next;
            gr_status st = fold_binary(c, op_is(c, "Min") ? EW_MIN : EW_MAX, acc, ins[k], &next);
            ox_tensor_free(acc);
            if (st != GR_OK) return st;
            acc = next;
        }
        return *out = acc, GR_OK;
    }
    for (int i = 0; i < GR_ARRAY_LEN(unary_ops); i++)
        if (op_is(c, unary_ops[i].name) && n_in == 1 && data_ins) return fold_unary(c, unary_ops[i].op, x, out);
    return GR_ERR_UNSUPPORTED;
}

gr_status ox_try_fold(ox_ctx *c, bool *folded) {
    *folded = false;
    const Onnx__NodeProto *np = c->node;
    bool shape_op = op_is(c, "Shape") || op_is(c, "Size");
    if (np->n_output < 1 || np->n_input > 16) return GR_OK;
    if (!op_is(c, "Constant") && (np->n_output != 1)) return GR_OK;
    const ox_tensor *ins[16];
    int n_in = (int)np->n_input;
    for (int i = 0; i < n_in; i++) {
        int vi = ox_in(c, i);
        ins[i] = vi >= 0 ? c->vals.data[vi].konst : NULL;
        if (vi >= 0 && c->vals.data[vi].unavailable) return GR_OK;
        if (shape_op) continue;
        if (vi >= 0 && !ins[i]) return GR_OK; /* a run-time input */
        if (vi < 0 && i == 0) return GR_OK;
    }
    ox_tensor *out = NULL;
    const char *err_before = NULL;
    (void)err_before;
    gr_status st = fold_one(c, ins, n_in, &out);
    if (st == GR_ERR_UNSUPPORTED && !out) {
        /* not foldable here: the converters handle it (and report real errors) */
        gr_error_clear();
        return GR_OK;
    }
    if (st != GR_OK) return st;
    const char *name = np->output[0];
    if (!name || !*name) {
        ox_tensor_free(out);
        *folded = true;
        return GR_OK;
    }
    GR_TRY(ox_define_const(c, name, out));
    *folded = true;
    return GR_OK;
}
