/* codegen/interp — the reference interpreter of kernel IR (semantics in kir.h).
 *
 * Why blocks of lanes: a 1M-point kernel with a 200-node DAG must run well under a
 * second, so each node is evaluated for a block of up to GR_INTERP_LANES iteration
 * points at once (one switch per node and block, a tight loop per lane) instead of
 * recursing per element.
 *
 * Values live in one 8-byte slot per lane and node, typed by the node's domain:
 * f32/f16/bf16 nodes hold a float value (kept in a double, always exactly a float),
 * f64 nodes a double, integer and bool nodes an int64.
 *
 * Launch bound: when n_points_param >= 0 the launch covers args[n_points_param].i
 * outer points (row-major; outer dim 0 absorbs any excess), else prod(outer). */
#include "codegen/kir.h"
#include <math.h>
#ifdef __clang__
/* one rounding per operation, as specified (gcc does not contract in ISO C mode) */
#pragma STDC FP_CONTRACT OFF
#endif
#include <stddef.h>
#include <string.h>

#define GR_INTERP_LANES 256

typedef enum { DOM_F32 = 0, DOM_F64, DOM_INT } vdom;

static vdom dom_of(gr_dtype t) {
    switch (t) {
    case GR_F32:
    case GR_F16:
    case GR_BF16: return DOM_F32;
    case GR_F64: return DOM_F64;
    default: return DOM_INT;
    }
}

/* rounds a float-domain value to dtype t (f16/bf16 through f32) */
static double round_to(gr_dtype t, double v) {
    switch (t) {
    case GR_F32: return (float)v;
    case GR_F16: return gr_half_to_f32(gr_f32_to_half((float)v));
    case GR_BF16: return gr_bf16_to_f32(gr_f32_to_bf16((float)v));
    default: return v;
    }
}

static int64_t wrap_to(gr_dtype t, int64_t v) {
    switch (t) {
    case GR_I32: return (int32_t)(uint32_t)(uint64_t)v;
    case GR_I8: return (int8_t)(uint8_t)(uint64_t)v;
    case GR_U8: return (uint8_t)(uint64_t)v;
    case GR_BOOL: return v != 0;
    default: return v;
    }
}

/* float → int64: truncation toward zero, NaN → 0, saturating */
static int64_t f2i(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

typedef struct {
    const gr_kernel *k;
    const gr_karg *args;
    char *base[GR_KMAX_PARAMS]; /* resolved buffer addresses */
    vdom *dom;                  /* per node */
    void *vals;                 /* n_nodes * LANES slots */
    int nl;                     /* lanes in the current block */
    int64_t olin[GR_INTERP_LANES];
    int64_t oc[GR_MAX_DIMS][GR_INTERP_LANES];
    int64_t ic[GR_MAX_DIMS][GR_INTERP_LANES];
    int point[GR_INTERP_LANES]; /* outer point of each lane, relative to the chunk */
    /* accumulators per stage and chunk point, in the domain of the stage's value */
    union {
        double f[GR_INTERP_LANES];
        int64_t i[GR_INTERP_LANES];
    } acc[GR_KMAX_STAGES];
    double tmp[3][GR_INTERP_LANES];
    int64_t itmp[3][GR_INTERP_LANES];
    int64_t addr[GR_INTERP_LANES];
} interp_ctx;

static double *F(interp_ctx *c, int node) { return (double *)c->vals + (size_t)node * GR_INTERP_LANES; }
static int64_t *I(interp_ctx *c, int node) { return (int64_t *)c->vals + (size_t)node * GR_INTERP_LANES; }

/* operand as float values in domain `target` (F32 or F64) */
static const double *opnd_f(interp_ctx *c, int node, vdom target, double *tmp) {
    vdom d = c->dom[node];
    int nl = c->nl;
    if (d == DOM_INT) {
        const int64_t *s = I(c, node);
        if (target == DOM_F32)
            for (int l = 0; l < nl; l++) tmp[l] = (float)s[l];
        else
            for (int l = 0; l < nl; l++) tmp[l] = (double)s[l];
        return tmp;
    }
    if (d == DOM_F64 && target == DOM_F32) {
        const double *s = F(c, node);
        for (int l = 0; l < nl; l++) tmp[l] = (float)s[l];
        return tmp;
    }
    return F(c, node);
}

static const int64_t *opnd_i(interp_ctx *c, int node, int64_t *tmp) {
    if (c->dom[node] == DOM_INT) return I(c, node);
    const double *s = F(c, node);
    for (int l = 0; l < c->nl; l++) tmp[l] = f2i(s[l]);
    return tmp;
}

/* truth value of a node's lanes (non-zero) */
static const int64_t *opnd_bool(interp_ctx *c, int node, int64_t *tmp) {
    if (c->dom[node] == DOM_INT) {
        const int64_t *s = I(c, node);
        for (int l = 0; l < c->nl; l++) tmp[l] = s[l] != 0;
    } else {
        const double *s = F(c, node);
        for (int l = 0; l < c->nl; l++) tmp[l] = s[l] != 0;
    }
    return tmp;
}

/* converts lanes from (src domain values) into node dtype t, writing node `dst` */
static void convert_into(interp_ctx *c, gr_dtype t, const double *sf, const int64_t *si, void *dst) {
    int nl = c->nl;
    vdom d = dom_of(t);
    if (d == DOM_INT) {
        int64_t *r = dst;
        if (si)
            for (int l = 0; l < nl; l++) r[l] = wrap_to(t, si[l]);
        else if (t == GR_BOOL)
            for (int l = 0; l < nl; l++) r[l] = sf[l] != 0;
        else
            for (int l = 0; l < nl; l++) r[l] = wrap_to(t, f2i(sf[l]));
    } else {
        double *r = dst;
        if (si)
            for (int l = 0; l < nl; l++) r[l] = round_to(t, (double)si[l]);
        else if (t == GR_F64)
            for (int l = 0; l < nl; l++) r[l] = sf[l];
        else
            for (int l = 0; l < nl; l++) r[l] = round_to(t, sf[l]);
    }
}

/* ==== unary / binary functions ============================================================ */

#define SELU_ALPHA 1.67326319217681884765625
#define SELU_GAMMA 1.05070102214813232421875

#define FN_F(n) n##f
#define FN_D(n) n

#define LOOP1(T, expr)                        \
    for (int l = 0; l < nl; l++) {            \
        T x = (T)a[l];                        \
        r[l] = (double)(expr);                \
    }

/* T: float or double; M: FN_F or FN_D picks the math function for T */
#define UNARY_FLOAT(T, M)                                                                              \
    switch (fn) {                                                                                      \
    case GR_KU_NEG: LOOP1(T, -x); break;                                                               \
    case GR_KU_ABS: LOOP1(T, M(fabs)(x)); break;                                                       \
    case GR_KU_EXP: LOOP1(T, M(exp)(x)); break;                                                        \
    case GR_KU_LOG: LOOP1(T, M(log)(x)); break;                                                        \
    case GR_KU_SQRT: LOOP1(T, M(sqrt)(x)); break;                                                      \
    case GR_KU_RSQRT: LOOP1(T, (T)1 / M(sqrt)(x)); break;                                              \
    case GR_KU_RECIP: LOOP1(T, (T)1 / x); break;                                                       \
    case GR_KU_TANH: LOOP1(T, M(tanh)(x)); break;                                                      \
    case GR_KU_SIGMOID: LOOP1(T, (T)1 / ((T)1 + M(exp)(-x))); break;                                   \
    case GR_KU_ERF: LOOP1(T, M(erf)(x)); break;                                                        \
    case GR_KU_RELU: LOOP1(T, x > 0 ? x : (x != x ? x : (T)0)); break;                                 \
    case GR_KU_GELU: LOOP1(T, (T)0.5 * x * ((T)1 + M(erf)(x * (T)0.70710678118654752440))); break;     \
    case GR_KU_GELU_TANH:                                                                              \
        LOOP1(T, (T)0.5 * x * ((T)1 + M(tanh)((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x)))); \
        break;                                                                                         \
    case GR_KU_SELU: LOOP1(T, (T)SELU_GAMMA * (x > 0 ? x : (T)SELU_ALPHA * (M(exp)(x) - (T)1))); break; \
    case GR_KU_SILU: LOOP1(T, x / ((T)1 + M(exp)(-x))); break;                                         \
    case GR_KU_SIN: LOOP1(T, M(sin)(x)); break;                                                        \
    case GR_KU_COS: LOOP1(T, M(cos)(x)); break;                                                        \
    case GR_KU_FLOOR: LOOP1(T, M(floor)(x)); break;                                                    \
    case GR_KU_CEIL: LOOP1(T, M(ceil)(x)); break;                                                      \
    default: break;                                                                                    \
    }

/* The functions kunary.def writes as expressions. Their math helpers pick the
 * float or double function by the argument's type, as CUDA's overloads do. */
#define gr_exp(x) _Generic((x), float: expf, default: exp)(x)
#define gr_log(x) _Generic((x), float: logf, default: log)(x)
#define gr_log1p(x) _Generic((x), float: log1pf, default: log1p)(x)
#define gr_expm1(x) _Generic((x), float: expm1f, default: expm1)(x)
#define gr_sqrt(x) _Generic((x), float: sqrtf, default: sqrt)(x)
#define gr_tanh(x) _Generic((x), float: tanhf, default: tanh)(x)
#define gr_erf(x) _Generic((x), float: erff, default: erf)(x)
#define gr_sin(x) _Generic((x), float: sinf, default: sin)(x)
#define gr_cos(x) _Generic((x), float: cosf, default: cos)(x)
#define gr_tan(x) _Generic((x), float: tanf, default: tan)(x)
#define gr_atan(x) _Generic((x), float: atanf, default: atan)(x)
#define gr_floor(x) _Generic((x), float: floorf, default: floor)(x)
#define gr_ceil(x) _Generic((x), float: ceilf, default: ceil)(x)
#define gr_fabs(x) _Generic((x), float: fabsf, default: fabs)(x)

#define GR_KU_HAND(id, name)
#define GR_KU_EXPR(id, name, expr) \
    case GR_KU_##id: LOOP1(T, expr); break;
static void unary_f32(int fn, const double *a, double *r, int nl) {
    UNARY_FLOAT(float, FN_F)
    typedef float T;
    switch (fn) {
#include "codegen/kunary.def"
    default: break;
    }
}
static void unary_f64(int fn, const double *a, double *r, int nl) {
    UNARY_FLOAT(double, FN_D)
    typedef double T;
    switch (fn) {
#include "codegen/kunary.def"
    default: break;
    }
}
#undef GR_KU_HAND
#undef GR_KU_EXPR

static void eval_unary(interp_ctx *c, int j, const gr_kexpr *e) {
    int nl = c->nl, fn = e->fn;
    vdom d = c->dom[j];
    if (fn == GR_KU_ISNAN || fn == GR_KU_NOT) {
        int64_t *r = I(c, j);
        if (fn == GR_KU_NOT) {
            const int64_t *a = opnd_bool(c, e->a, c->itmp[0]);
            for (int l = 0; l < nl; l++) r[l] = !a[l];
        } else if (c->dom[e->a] == DOM_INT) {
            for (int l = 0; l < nl; l++) r[l] = 0;
        } else {
            const double *a = F(c, e->a);
            for (int l = 0; l < nl; l++) r[l] = a[l] != a[l];
        }
        if (d != DOM_INT) { /* a float-typed isnan/not: 0.0 / 1.0 */
            double *rf = F(c, j);
            for (int l = 0; l < nl; l++) rf[l] = (double)r[l];
        }
        return;
    }
    if (d == DOM_INT) {
        const int64_t *a = opnd_i(c, e->a, c->itmp[0]);
        int64_t *r = I(c, j);
        switch (fn) {
        case GR_KU_NEG:
            for (int l = 0; l < nl; l++) r[l] = (int64_t)(0 - (uint64_t)a[l]);
            return;
        case GR_KU_ABS:
            for (int l = 0; l < nl; l++) r[l] = a[l] < 0 ? (int64_t)(0 - (uint64_t)a[l]) : a[l];
            return;
        case GR_KU_RELU:
            for (int l = 0; l < nl; l++) r[l] = a[l] > 0 ? a[l] : 0;
            return;
        case GR_KU_FLOOR:
        case GR_KU_CEIL:
            for (int l = 0; l < nl; l++) r[l] = a[l];
            return;
        default: {
            /* other functions of an integer: computed in double, truncated */
            double *t = c->tmp[1], *r2 = c->tmp[2];
            for (int l = 0; l < nl; l++) t[l] = (double)a[l];
            unary_f64(fn, t, r2, nl);
            for (int l = 0; l < nl; l++) r[l] = f2i(r2[l]);
            return;
        }
        }
    }
    const double *a = opnd_f(c, e->a, d, c->tmp[0]);
    if (d == DOM_F32) unary_f32(fn, a, F(c, j), nl);
    else unary_f64(fn, a, F(c, j), nl);
}

#define LOOP2(T, expr)                        \
    for (int l = 0; l < nl; l++) {            \
        T x = (T)a[l], y = (T)b[l];           \
        r[l] = (double)(expr);                \
    }

#define BINARY_FLOAT(T, M)                                                                   \
    switch (fn) {                                                                            \
    case GR_KB_ADD: LOOP2(T, x + y); break;                                                  \
    case GR_KB_SUB: LOOP2(T, x - y); break;                                                  \
    case GR_KB_MUL: LOOP2(T, x * y); break;                                                  \
    case GR_KB_DIV: LOOP2(T, x / y); break;                                                  \
    case GR_KB_POW: LOOP2(T, M(pow)(x, y)); break;                                           \
    case GR_KB_MIN: LOOP2(T, (x != x || y != y) ? (T)NAN : (x < y ? x : y)); break;         \
    case GR_KB_MAX: LOOP2(T, (x != x || y != y) ? (T)NAN : (x > y ? x : y)); break;         \
    case GR_KB_MOD: LOOP2(T, M(fmod)(x, y)); break;                                          \
    default: break;                                                                          \
    }

static void binary_f32(int fn, const double *a, const double *b, double *r, int nl) { BINARY_FLOAT(float, FN_F) }
static void binary_f64(int fn, const double *a, const double *b, double *r, int nl) { BINARY_FLOAT(double, FN_D) }

static int64_t ipow(int64_t x, int64_t y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    while (y) {
        if (y & 1) r *= b;
        b *= b;
        y >>= 1;
    }
    return (int64_t)r;
}

static void eval_binary(interp_ctx *c, int j, const gr_kexpr *e) {
    int nl = c->nl, fn = e->fn;
    vdom d = c->dom[j];
    if (fn == GR_KB_AND || fn == GR_KB_OR) {
        const int64_t *a = opnd_bool(c, e->a, c->itmp[0]);
        const int64_t *b = opnd_bool(c, e->b, c->itmp[1]);
        int64_t *r = d == DOM_INT ? I(c, j) : c->itmp[2];
        if (fn == GR_KB_AND)
            for (int l = 0; l < nl; l++) r[l] = a[l] & b[l];
        else
            for (int l = 0; l < nl; l++) r[l] = a[l] | b[l];
        if (d != DOM_INT)
            for (int l = 0; l < nl; l++) F(c, j)[l] = (double)r[l];
        return;
    }
    if (fn >= GR_KB_EQ && fn <= GR_KB_GE) {
        /* compare in the wider of the operands' domains */
        vdom da = c->dom[e->a], db = c->dom[e->b];
        vdom cd = (da == DOM_F64 || db == DOM_F64) ? DOM_F64 : (da == DOM_F32 || db == DOM_F32) ? DOM_F32 : DOM_INT;
        int64_t *r = d == DOM_INT ? I(c, j) : c->itmp[2];
        if (cd == DOM_INT) {
            const int64_t *a = I(c, e->a), *b = I(c, e->b);
            switch (fn) {
            case GR_KB_EQ: for (int l = 0; l < nl; l++) r[l] = a[l] == b[l]; break;
            case GR_KB_LT: for (int l = 0; l < nl; l++) r[l] = a[l] < b[l]; break;
            case GR_KB_LE: for (int l = 0; l < nl; l++) r[l] = a[l] <= b[l]; break;
            case GR_KB_GT: for (int l = 0; l < nl; l++) r[l] = a[l] > b[l]; break;
            default: for (int l = 0; l < nl; l++) r[l] = a[l] >= b[l]; break;
            }
        } else {
            const double *a = opnd_f(c, e->a, cd, c->tmp[0]), *b = opnd_f(c, e->b, cd, c->tmp[1]);
            switch (fn) {
            case GR_KB_EQ: for (int l = 0; l < nl; l++) r[l] = a[l] == b[l]; break;
            case GR_KB_LT: for (int l = 0; l < nl; l++) r[l] = a[l] < b[l]; break;
            case GR_KB_LE: for (int l = 0; l < nl; l++) r[l] = a[l] <= b[l]; break;
            case GR_KB_GT: for (int l = 0; l < nl; l++) r[l] = a[l] > b[l]; break;
            default: for (int l = 0; l < nl; l++) r[l] = a[l] >= b[l]; break;
            }
        }
        if (d != DOM_INT)
            for (int l = 0; l < nl; l++) F(c, j)[l] = (double)r[l];
        return;
    }
    if (d == DOM_INT) {
        const int64_t *a = opnd_i(c, e->a, c->itmp[0]), *b = opnd_i(c, e->b, c->itmp[1]);
        int64_t *r = I(c, j);
        switch (fn) {
        case GR_KB_ADD: for (int l = 0; l < nl; l++) r[l] = (int64_t)((uint64_t)a[l] + (uint64_t)b[l]); break;
        case GR_KB_SUB: for (int l = 0; l < nl; l++) r[l] = (int64_t)((uint64_t)a[l] - (uint64_t)b[l]); break;
        case GR_KB_MUL: for (int l = 0; l < nl; l++) r[l] = (int64_t)((uint64_t)a[l] * (uint64_t)b[l]); break;
        case GR_KB_DIV: /* x/0 = 0 (CUDA leaves it undefined; the simulator stays deterministic) */
            for (int l = 0; l < nl; l++)
                r[l] = b[l] == 0 ? 0 : (b[l] == -1 ? (int64_t)(0 - (uint64_t)a[l]) : a[l] / b[l]);
            break;
        case GR_KB_MOD:
            for (int l = 0; l < nl; l++) r[l] = (b[l] == 0 || b[l] == -1) ? 0 : a[l] % b[l];
            break;
        case GR_KB_POW: for (int l = 0; l < nl; l++) r[l] = ipow(a[l], b[l]); break;
        case GR_KB_MIN: for (int l = 0; l < nl; l++) r[l] = a[l] < b[l] ? a[l] : b[l]; break;
        case GR_KB_MAX: for (int l = 0; l < nl; l++) r[l] = a[l] > b[l] ? a[l] : b[l]; break;
        default: break;
        }
        return;
    }
    const double *a = opnd_f(c, e->a, d, c->tmp[0]), *b = opnd_f(c, e->b, d, c->tmp[1]);
    if (d == DOM_F32) binary_f32(fn, a, b, F(c, j), nl);
    else binary_f64(fn, a, b, F(c, j), nl);
}

/* ==== loads, stores, addressing ============================================================ */

/* Fills c->addr with element addresses of access `a` for the current lanes. */
static gr_status compute_addr(interp_ctx *c, const gr_kaccess *a, bool scatter) {
    const gr_kernel *k = c->k;
    int nl = c->nl;
    for (int l = 0; l < nl; l++) c->addr[l] = a->offset;
    for (int d = 0; d < k->n_outer; d++) {
        int64_t s = a->stride[d];
        if (s)
            for (int l = 0; l < nl; l++) c->addr[l] += s * c->oc[d][l];
    }
    for (int d = 0; d < k->n_inner; d++) {
        int64_t s = a->inner_stride[d];
        if (s)
            for (int l = 0; l < nl; l++) c->addr[l] += s * c->ic[d][l];
    }
    if (a->index >= 0) {
        const int64_t *ix = opnd_i(c, a->index, c->itmp[2]);
        int64_t ext = a->index_extent;
        for (int l = 0; l < nl; l++) {
            int64_t v = ix[l] < 0 ? ix[l] + ext : ix[l];
            if (v < 0 || v >= ext) {
                gr_status st = gr_error(GR_ERR_INVALID, "kernel %s: %s index %lld out of range [%lld, %lld)", k->name,
                                        scatter ? "scatter" : "gather", (long long)ix[l], (long long)-ext, (long long)ext);
                gr_error_set_node(a->origin); /* the runtime names the gather's node, not the fused kernel's */
                return st;
            }
            c->addr[l] += v * a->index_stride;
        }
    }
    return GR_OK;
}

static gr_status eval_load(interp_ctx *c, int j, const gr_kexpr *e) {
    GR_TRY(compute_addr(c, &e->access, false));
    gr_dtype bt = c->k->params[e->param].dtype;
    const char *p = c->base[e->param];
    int nl = c->nl;
    const int64_t *ad = c->addr;
    bool direct = e->dtype == bt || (dom_of(bt) == DOM_F32 && e->dtype == GR_F32);
    double *sf = direct ? F(c, j) : c->tmp[0];
    int64_t *si = direct ? I(c, j) : c->itmp[0];
    bool is_int = false;
    switch (bt) {
    case GR_F32: for (int l = 0; l < nl; l++) sf[l] = ((const float *)p)[ad[l]]; break;
    case GR_F64: for (int l = 0; l < nl; l++) sf[l] = ((const double *)p)[ad[l]]; break;
    case GR_F16: for (int l = 0; l < nl; l++) sf[l] = gr_half_to_f32(((const uint16_t *)p)[ad[l]]); break;
    case GR_BF16: for (int l = 0; l < nl; l++) sf[l] = gr_bf16_to_f32(((const uint16_t *)p)[ad[l]]); break;
    default:
        is_int = true;
        switch (bt) {
        case GR_I64: for (int l = 0; l < nl; l++) si[l] = ((const int64_t *)p)[ad[l]]; break;
        case GR_I32: for (int l = 0; l < nl; l++) si[l] = ((const int32_t *)p)[ad[l]]; break;
        case GR_I8: for (int l = 0; l < nl; l++) si[l] = ((const int8_t *)p)[ad[l]]; break;
        case GR_U8: for (int l = 0; l < nl; l++) si[l] = ((const uint8_t *)p)[ad[l]]; break;
        default: for (int l = 0; l < nl; l++) si[l] = ((const uint8_t *)p)[ad[l]] != 0; break;
        }
        break;
    }
    if (!direct) convert_into(c, e->dtype, is_int ? NULL : sf, is_int ? si : NULL, F(c, j));
    return GR_OK;
}

static gr_status run_store(interp_ctx *c, const gr_kstage *s) {
    GR_TRY(compute_addr(c, &s->access, true));
    gr_dtype bt = c->k->params[s->param].dtype;
    char *p = c->base[s->param];
    int nl = c->nl;
    const int64_t *ad = c->addr;
    if (dom_of(bt) != DOM_INT) {
        const double *v = opnd_f(c, s->value, bt == GR_F64 ? DOM_F64 : DOM_F32, c->tmp[0]);
        switch (bt) {
        case GR_F32: for (int l = 0; l < nl; l++) ((float *)p)[ad[l]] = (float)v[l]; break;
        case GR_F64: for (int l = 0; l < nl; l++) ((double *)p)[ad[l]] = v[l]; break;
        case GR_F16: for (int l = 0; l < nl; l++) ((uint16_t *)p)[ad[l]] = gr_f32_to_half((float)v[l]); break;
        default: for (int l = 0; l < nl; l++) ((uint16_t *)p)[ad[l]] = gr_f32_to_bf16((float)v[l]); break;
        }
        return GR_OK;
    }
    const int64_t *v = bt == GR_BOOL ? opnd_bool(c, s->value, c->itmp[0]) : opnd_i(c, s->value, c->itmp[0]);
    switch (bt) {
    case GR_I64: for (int l = 0; l < nl; l++) ((int64_t *)p)[ad[l]] = v[l]; break;
    case GR_I32: for (int l = 0; l < nl; l++) ((int32_t *)p)[ad[l]] = (int32_t)(uint32_t)(uint64_t)v[l]; break;
    case GR_I8: for (int l = 0; l < nl; l++) ((int8_t *)p)[ad[l]] = (int8_t)(uint8_t)(uint64_t)v[l]; break;
    default: for (int l = 0; l < nl; l++) ((uint8_t *)p)[ad[l]] = (uint8_t)(uint64_t)v[l]; break;
    }
    return GR_OK;
}

/* ==== node evaluation ===================================================================== */

uint64_t gr_kernel_random_bits(uint64_t seed, uint64_t counter) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + counter;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

static gr_status eval_node(interp_ctx *c, int j) {
    const gr_kernel *k = c->k;
    const gr_kexpr *e = &k->nodes.data[j];
    int nl = c->nl;
    vdom d = c->dom[j];
    switch (e->op) {
    case GR_KX_CONST:
        if (d == DOM_INT) {
            int64_t v = wrap_to(e->dtype, e->i), *r = I(c, j);
            for (int l = 0; l < nl; l++) r[l] = v;
        } else {
            double v = round_to(e->dtype, e->f), *r = F(c, j);
            for (int l = 0; l < nl; l++) r[l] = v;
        }
        return GR_OK;
    case GR_KX_INDEX: {
        const int64_t *src = e->which == GR_KIDX_LINEAR ? c->olin
                             : e->which >= GR_KIDX_INNER ? c->ic[e->which - GR_KIDX_INNER]
                                                         : c->oc[e->which];
        if (d == DOM_INT) memcpy(I(c, j), src, (size_t)nl * sizeof(int64_t));
        else convert_into(c, e->dtype, NULL, src, F(c, j));
        return GR_OK;
    }
    case GR_KX_PARAM: {
        const gr_kparam *p = &k->params[e->param];
        gr_karg a = c->args[e->param];
        if (p->kind == GR_KP_SCALAR_F) {
            double v = a.f;
            if (d == DOM_INT) {
                int64_t iv = e->dtype == GR_BOOL ? v != 0 : wrap_to(e->dtype, f2i(v)), *r = I(c, j);
                for (int l = 0; l < nl; l++) r[l] = iv;
            } else {
                double fv = round_to(e->dtype, v), *r = F(c, j);
                for (int l = 0; l < nl; l++) r[l] = fv;
            }
        } else {
            if (d == DOM_INT) {
                int64_t iv = wrap_to(e->dtype, a.i), *r = I(c, j);
                for (int l = 0; l < nl; l++) r[l] = iv;
            } else {
                double fv = round_to(e->dtype, (double)a.i), *r = F(c, j);
                for (int l = 0; l < nl; l++) r[l] = fv;
            }
        }
        return GR_OK;
    }
    case GR_KX_LOAD: return eval_load(c, j, e);
    case GR_KX_ACC: {
        int s = e->which;
        const gr_kexpr *v = &k->nodes.data[k->stages[s].value];
        vdom ad = dom_of(v->dtype);
        if (ad == DOM_INT) {
            int64_t *t = c->itmp[0];
            for (int l = 0; l < nl; l++) t[l] = c->acc[s].i[c->point[l]];
            convert_into(c, e->dtype, NULL, t, F(c, j));
        } else {
            double *t = c->tmp[0];
            for (int l = 0; l < nl; l++) t[l] = c->acc[s].f[c->point[l]];
            convert_into(c, e->dtype, t, NULL, F(c, j));
        }
        return GR_OK;
    }
    case GR_KX_UNARY: eval_unary(c, j, e); return GR_OK;
    case GR_KX_BINARY: eval_binary(c, j, e); return GR_OK;
    case GR_KX_SELECT: {
        const int64_t *cond = opnd_bool(c, e->a, c->itmp[2]);
        if (d == DOM_INT) {
            const int64_t *x = opnd_i(c, e->b, c->itmp[0]), *y = opnd_i(c, e->c, c->itmp[1]);
            int64_t *r = I(c, j);
            for (int l = 0; l < nl; l++) r[l] = cond[l] ? x[l] : y[l];
        } else {
            const double *x = opnd_f(c, e->b, d, c->tmp[0]), *y = opnd_f(c, e->c, d, c->tmp[1]);
            double *r = F(c, j);
            for (int l = 0; l < nl; l++) r[l] = cond[l] ? x[l] : y[l];
        }
        return GR_OK;
    }
    case GR_KX_CAST:
        if (c->dom[e->a] == DOM_INT) convert_into(c, e->dtype, NULL, I(c, e->a), F(c, j));
        else convert_into(c, e->dtype, F(c, e->a), NULL, F(c, j));
        return GR_OK;
    case GR_KX_RANDOM: {
        const int64_t *ctr = opnd_i(c, e->a, c->itmp[0]);
        double *r = F(c, j);
        uint64_t seed = (uint64_t)e->i;
        if (e->dtype == GR_F64)
            for (int l = 0; l < nl; l++) r[l] = (double)(gr_kernel_random_bits(seed, (uint64_t)ctr[l]) >> 11) * 0x1p-53;
        else
            for (int l = 0; l < nl; l++) r[l] = (double)((float)(gr_kernel_random_bits(seed, (uint64_t)ctr[l]) >> 40) * 0x1p-24f);
        return GR_OK;
    }
    }
    return gr_error(GR_ERR_INTERNAL, "kernel %s: node %d: bad op", k->name, j);
}

/* ==== reductions ============================================================================ */

static void reduce_init(interp_ctx *c, int s, vdom d, gr_kreduce fn, int np) {
    for (int p = 0; p < np; p++) {
        if (d == DOM_INT) {
            c->acc[s].i[p] = fn == GR_KR_SUM ? 0 : fn == GR_KR_PROD ? 1 : fn == GR_KR_MAX ? INT64_MIN : INT64_MAX;
        } else {
            c->acc[s].f[p] = fn == GR_KR_SUM ? 0.0 : fn == GR_KR_PROD ? 1.0 : fn == GR_KR_MAX ? -INFINITY : INFINITY;
        }
    }
}

/* folds the lanes in order (lanes are sorted by point, then inner index) */
static void reduce_fold(interp_ctx *c, int s, int value, gr_kreduce fn) {
    int nl = c->nl;
    vdom d = c->dom[value];
    if (d == DOM_INT) {
        const int64_t *v = I(c, value);
        int64_t *acc = c->acc[s].i;
        for (int l = 0; l < nl; l++) {
            int64_t *a = &acc[c->point[l]], x = v[l];
            switch (fn) {
            case GR_KR_SUM: *a = (int64_t)((uint64_t)*a + (uint64_t)x); break;
            case GR_KR_PROD: *a = (int64_t)((uint64_t)*a * (uint64_t)x); break;
            case GR_KR_MAX: *a = x > *a ? x : *a; break;
            default: *a = x < *a ? x : *a; break;
            }
        }
        return;
    }
    const double *v = F(c, value);
    double *acc = c->acc[s].f;
    bool f32 = d == DOM_F32;
    for (int l = 0; l < nl; l++) {
        double *a = &acc[c->point[l]], x = v[l];
        switch (fn) {
        case GR_KR_SUM: *a = f32 ? (double)((float)*a + (float)x) : *a + x; break;
        case GR_KR_PROD: *a = f32 ? (double)((float)*a * (float)x) : *a * x; break;
        case GR_KR_MAX: *a = (x != x || *a != *a) ? NAN : (x > *a ? x : *a); break;
        default: *a = (x != x || *a != *a) ? NAN : (x < *a ? x : *a); break;
        }
    }
}

/* ==== ranges and checks ===================================================================== */

static void access_range(const gr_kernel *k, const gr_kaccess *a, int64_t dim0, bool *any, int64_t *lo, int64_t *hi) {
    int64_t l = a->offset, h = a->offset;
    for (int d = 0; d < k->n_outer; d++) {
        int64_t ext = d == 0 ? dim0 : k->outer[d];
        if (ext <= 0) return;
        int64_t span = a->stride[d] * (ext - 1);
        if (span < 0) l += span;
        else h += span;
    }
    for (int d = 0; d < k->n_inner; d++) {
        if (k->inner[d] <= 0) {
            if (a->inner_stride[d] != 0) return;
            continue;
        }
        int64_t span = a->inner_stride[d] * (k->inner[d] - 1);
        if (span < 0) l += span;
        else h += span;
    }
    if (a->index >= 0 && a->index_extent > 0) {
        int64_t span = a->index_stride * (a->index_extent - 1);
        if (span < 0) l += span;
        else h += span;
    }
    if (!*any || l < *lo) *lo = l;
    if (!*any || h > *hi) *hi = h;
    *any = true;
}

static void param_range(const gr_kernel *k, int p, int64_t dim0, int64_t *lo, int64_t *hi) {
    bool any = false;
    int64_t l = 0, h = 0;
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        if (e->op == GR_KX_LOAD && e->param == p) access_range(k, &e->access, dim0, &any, &l, &h);
    }
    for (int s = 0; s < k->n_stages; s++) {
        const gr_kstage *sg = &k->stages[s];
        if (sg->kind == GR_KS_STORE && sg->param == p) access_range(k, &sg->access, dim0, &any, &l, &h);
    }
    if (!any || p < 0 || p >= k->n_params) {
        *lo = *hi = 0;
        return;
    }
    int64_t es = (int64_t)gr_dtype_size(k->params[p].dtype);
    *lo = l * es;
    *hi = (h + 1) * es;
}

void gr_kernel_param_range(const gr_kernel *k, int p, int64_t *lo, int64_t *hi) {
    param_range(k, p, k->n_outer > 0 ? k->outer[0] : 1, lo, hi);
}

static bool param_written(const gr_kernel *k, int p) {
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].param == p) return true;
    return k->params[p].written;
}

/* ==== driver ================================================================================= */

/* sets lane coordinates for the block of outer points [first, first+np) and, when inner,
 * flat (point, inner) pairs [flat0, flat0+nl) of the chunk starting at outer point `first` */
static void set_lanes(interp_ctx *c, int64_t first, int64_t flat0, int nl, int64_t inner_pts, bool inner) {
    const gr_kernel *k = c->k;
    c->nl = nl;
    for (int l = 0; l < nl; l++) {
        int64_t f = flat0 + l;
        int64_t pt = inner ? f / inner_pts : f;
        int64_t r = inner ? f % inner_pts : 0;
        c->point[l] = (int)pt;
        int64_t o = first + pt;
        c->olin[l] = o;
        for (int d = k->n_outer - 1; d >= 1; d--) {
            int64_t ext = k->outer[d];
            c->oc[d][l] = ext > 0 ? o % ext : 0;
            o = ext > 0 ? o / ext : 0;
        }
        if (k->n_outer > 0) c->oc[0][l] = o;
        for (int d = k->n_inner - 1; d >= 0; d--) {
            int64_t ext = k->inner[d];
            c->ic[d][l] = ext > 0 ? r % ext : 0;
            r = ext > 0 ? r / ext : 0;
        }
    }
}

static gr_status run_cone(interp_ctx *c, const int *cone, int n_cone) {
    for (int i = 0; i < n_cone; i++) GR_TRY(eval_node(c, cone[i]));
    return GR_OK;
}

gr_status gr_kernel_interpret(const gr_kernel *k, const gr_karg *args, int n_args, gr_kcheck_fn check, void *user) {
    GR_TRY(gr_kernel_verify(k));
    if (n_args < k->n_params)
        return gr_error(GR_ERR_INVALID, "kernel %s: %d launch arguments for %d parameters", k->name, n_args,
                        k->n_params);
    int64_t n_points = gr_kernel_points(k);
    if (k->n_points_param >= 0) {
        n_points = args[k->n_points_param].i;
        if (n_points < 0)
            return gr_error(GR_ERR_INVALID, "kernel %s: negative launch bound %lld", k->name, (long long)n_points);
    }
    int64_t rest = 1; /* points per step of outer dim 0 */
    for (int d = 1; d < k->n_outer; d++) rest *= k->outer[d];
    int64_t dim0 = k->n_outer == 0 ? 1 : rest > 0 ? (n_points + rest - 1) / rest : 0;
    if (k->n_outer > 0 && rest == 0) n_points = 0;

    /* the lane arrays (~70 KB) are written before they are read: zero only the header
     * (a calloc of the whole was a tenth of a symbolic model's plan time, through folding) */
    interp_ctx *c = gr_malloc(sizeof(*c));
    if (!c) return GR_ERR_NOMEM;
    memset(c, 0, offsetof(interp_ctx, olin));
    c->k = k;
    c->args = args;
    gr_status st = GR_OK;
    /* resolve and check buffers */
    for (int p = 0; p < k->n_params; p++) {
        gr_kparam_kind kind = k->params[p].kind;
        if (kind != GR_KP_BUFFER && kind != GR_KP_BUFFER_INDIRECT) continue;
        int64_t lo, hi;
        param_range(k, p, dim0, &lo, &hi);
        if (n_points == 0) lo = hi = 0;
        bool wr = param_written(k, p);
        char *ptr = args[p].ptr;
        if (kind == GR_KP_BUFFER_INDIRECT) {
            /* the slot is read first: check it, then follow it */
            if (!ptr) {
                st = gr_error(GR_ERR_INVALID, "kernel %s: indirect parameter %s is NULL", k->name, k->params[p].name);
                goto out;
            }
            if (check && (st = check(user, p, ptr, 0, (int64_t)sizeof(void *), false)) != GR_OK) goto out;
            memcpy(&ptr, args[p].ptr, sizeof(ptr));
        }
        if (hi > lo) {
            if (!ptr) {
                st = gr_error(GR_ERR_INVALID, "kernel %s: buffer parameter %s is NULL", k->name, k->params[p].name);
                goto out;
            }
            if (check && (st = check(user, p, ptr, lo, hi, wr)) != GR_OK) goto out;
        }
        c->base[p] = ptr;
    }
    if (n_points == 0 || k->nodes.len == 0) goto out;

    int n = k->nodes.len;
    size_t vals_bytes = (size_t)n * GR_INTERP_LANES * 8;
    size_t cone_bytes = (size_t)(k->n_stages > 0 ? k->n_stages : 1) * (size_t)n * sizeof(int);
    c->vals = gr_malloc(vals_bytes);
    c->dom = gr_malloc((size_t)n * sizeof(vdom));
    int *cones = gr_malloc(cone_bytes);
    int n_cone[GR_KMAX_STAGES] = {0};
    bool *mark = gr_malloc((size_t)n);
    if (!c->vals || !c->dom || !cones || !mark) {
        st = GR_ERR_NOMEM;
        goto free_work;
    }
    for (int i = 0; i < n; i++) c->dom[i] = dom_of(k->nodes.data[i].dtype);
    for (int s = 0; s < k->n_stages; s++) {
        memset(mark, 0, (size_t)n);
        mark[k->stages[s].value] = true;
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].access.index >= 0) mark[k->stages[s].access.index] = true; /* a scatter */
        for (int j = n - 1; j >= 0; j--) {
            if (!mark[j]) continue;
            const gr_kexpr *x = &k->nodes.data[j];
            int nops = x->op == GR_KX_UNARY || x->op == GR_KX_CAST || x->op == GR_KX_RANDOM ? 1
                       : x->op == GR_KX_BINARY                                            ? 2
                       : x->op == GR_KX_SELECT                                            ? 3
                                                                                          : 0;
            const int32_t ops[3] = {x->a, x->b, x->c};
            for (int q = 0; q < nops; q++) mark[ops[q]] = true;
            if (x->op == GR_KX_LOAD && x->access.index >= 0) mark[x->access.index] = true;
        }
        for (int j = 0; j < n; j++)
            if (mark[j]) cones[(size_t)s * n + n_cone[s]++] = j;
    }
    {
        int64_t inner_pts = gr_kernel_inner_points(k);
        int64_t chunk = inner_pts >= GR_INTERP_LANES ? 1 : GR_INTERP_LANES / (inner_pts > 0 ? inner_pts : 1);
        for (int64_t o0 = 0; o0 < n_points && st == GR_OK; o0 += chunk) {
            int np = (int)GR_MIN(chunk, n_points - o0);
            for (int s = 0; s < k->n_stages && st == GR_OK; s++) {
                const gr_kstage *sg = &k->stages[s];
                const int *cone = cones + (size_t)s * n;
                if (sg->kind == GR_KS_STORE && !sg->over_inner) {
                    set_lanes(c, o0, 0, np, inner_pts, false);
                    st = run_cone(c, cone, n_cone[s]);
                    if (st == GR_OK) st = run_store(c, sg);
                    continue;
                }
                if (sg->kind == GR_KS_REDUCE) reduce_init(c, s, c->dom[sg->value], sg->reduce, np);
                int64_t total = (int64_t)np * inner_pts;
                for (int64_t b = 0; b < total && st == GR_OK; b += GR_INTERP_LANES) {
                    set_lanes(c, o0, b, (int)GR_MIN((int64_t)GR_INTERP_LANES, total - b), inner_pts, true);
                    st = run_cone(c, cone, n_cone[s]);
                    if (st != GR_OK) break;
                    if (sg->kind == GR_KS_REDUCE) reduce_fold(c, s, sg->value, sg->reduce);
                    else st = run_store(c, sg);
                }
            }
        }
    }
free_work:
    gr_free(mark, (size_t)n);
    gr_free(cones, cone_bytes);
    gr_free(c->dom, (size_t)n * sizeof(vdom));
    gr_free(c->vals, vals_bytes);
out:
    gr_free(c, sizeof(*c));
    return st;
}
