/* passes/epilogue — fuses the activation applied to a matmul's output (after its row bias)
 * into the matmul: the node gets `epilogue` = "gelu_tanh" or "relu" (ir/ops.c), which
 * lowers to the library call's epilogue (cuBLASLt's GELU_BIAS / RELU_BIAS: one kernel
 * instead of the matmul and an elementwise kernel that reads and writes the whole output).
 * gr_pass_fuse_residual (run after it) makes a residual add after a matmul the matmul's
 * residual input (see "residual adds" below): the add's kernel goes, and a norm after it
 * reads one tensor instead of two.
 *
 * The pattern, matched backwards from the activation's result r:
 *
 *   y  = matmul(a, b [, bias])            f32, f16 or bf16, a and b of rank >= 2
 *   ...  views of y (reshape, squeeze, unsqueeze, identity) keeping the last dim
 *   [ u = add(v, c) | add(c, v) ]         c a row bias: [..1.., N], y's dtype (only when the
 *   ...  views                             matmul has no bias of its own)
 *   x  = the activation's input
 *   r  = gelu(x, approximate="tanh") | relu(x) | the explicit tanh-GELU chain below,
 *        with float casts anywhere in it (a half model computing GELU in f32)
 *
 * The explicit chain is what Hugging Face's NewGELUActivation (GPT-2) exports,
 * 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*pow(x, 3)))), in any of its algebraic
 * spellings: it is read as r = k * X * (k0 + k1*tanh(P(X))), multiplications flattened
 * (operands in any order, the constants multiplied out, division by a constant), P a
 * polynomial of degree <= 3 in X built from add, sub, mul, neg, division by a constant
 * and pow by 1, 2 or 3 (so x*x*x, x*(1 + 0.044715*x*x) and folded coefficients all
 * read the same); it is the tanh-GELU when k*k0 = k*k1 = 0.5, P's coefficients are
 * (0, sqrt(2/pi), 0, 0.044715*sqrt(2/pi)), each within EP_TOL of the constants' dtype
 * (relative: f32/f64 1e-5, f16 2^-10, bf16 2^-7, about two roundings of a constant).
 *
 * Every value between the matmul and r is read only inside the pattern (x may be read
 * several times, all of them by the chain) and is not a graph output, so nothing else
 * sees the pre-activation: the epilogue overwrites it (cuBLASLt's GELU_AUX could keep
 * it, at the cost of writing a second M x N tensor, which is what fusing saves; an
 * inference graph that reads the pre-activation elsewhere is left unfused instead).
 *
 * Rewrite: the matmul is replaced by one with the epilogue (and the add's bias as its
 * bias), producing the same value; the add becomes identity(v), and r's node becomes
 * identity(x) (cast(x) when r has another dtype, unless r only goes, through views, into
 * a cast back to x's dtype: that cast becomes an identity too), which lower to views. The chain's other
 * nodes stay in the graph, unread; dead-step elimination removes their steps (passes/dce.c).
 * Runs on symbolic shapes (dims compared with gr_dx_equal), so every binding gets the same
 * plan. Results: the epilogue is applied to the f32 accumulator (libcall.c), before the
 * one rounding to the output dtype, so a half model's fused result is within rounding of
 * the unfused one (tests/test_epilogue.c measures it).
 */
#include "passes/passes.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define EP_MAX_LEAVES 16 /* distinct values a chain reads x through */
#define EP_MAX_NODES 64  /* nodes one match may visit */
#define EP_MAX_VIEWS 16  /* views and adds between the matmul and x */

static const double EP_SQRT_2_OVER_PI = 0.79788456080286535588;
static const double EP_CUBIC = 0.044715;

typedef struct {
    gr_graph *g;
    int *readers; /* readers[v]: node inputs reading v (+1 per graph output naming v) */
    int *reader;  /* reader[v]: one node reading v (the last), -1 if none */
    size_t readers_bytes;
    /* one match */
    int x0;
    int leaf[EP_MAX_LEAVES], leaf_reads[EP_MAX_LEAVES], n_leaves;
    int budget;
    double tol;
    /* one sweep's rewrites: node p_at[k] becomes the appended nodes [p_first[k], + p_count[k]),
     * spliced in by apply_pending (one pass); replaced[i] for the nodes before the sweep */
    GR_VEC(int) p_at, p_first, p_count;
    bool *replaced;
    int n0;
} ep_ctx;

/* ==== graph queries ======================================================================== */

static const gr_ir_value *val(const ep_ctx *c, int v) { return &c->g->values.data[v]; }

static const gr_ir_node *producer(const ep_ctx *c, int v) {
    if (v < 0) return NULL;
    const gr_ir_value *x = val(c, v);
    if (x->kind != GR_VAL_NODE || x->producer < 0 || x->producer >= c->g->nodes.len) return NULL;
    const gr_ir_node *n = &c->g->nodes.data[x->producer];
    return n->n_out == 1 && n->out[0] == v ? n : NULL;
}

static bool is_float(const ep_ctx *c, int v) {
    const gr_ir_value *x = val(c, v);
    return x->typed && gr_dtype_is_float(x->dtype);
}

static bool same_dims(const gr_ir_value *a, const gr_ir_value *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (!gr_dx_equal(a->dims[i], b->dims[i])) return false;
    return true;
}

/* v = cast(src) between float dtypes */
static bool float_cast(const ep_ctx *c, int v, int *src) {
    const gr_ir_node *n = producer(c, v);
    if (!n || n->op != GR_OP_CAST || n->n_in < 1 || n->in[0] < 0) return false;
    if (!is_float(c, v) || !is_float(c, n->in[0])) return false;
    *src = n->in[0];
    return true;
}

static int cast_root(const ep_ctx *c, int v) {
    int src;
    for (int i = 0; i < EP_MAX_NODES && float_cast(c, v, &src); i++) v = src;
    return v;
}

/* Relative tolerance for a constant of dtype t (about two roundings of it). */
static double dtype_tol(gr_dtype t) {
    switch (t) {
    case GR_F16: return 0x1p-10;
    case GR_BF16: return 0x1p-7;
    default: return 1e-5;
    }
}

/* A one-element numeric constant: its value (the tolerance grows to its dtype's). */
static bool scalar(ep_ctx *c, int v, double *out) {
    const gr_ir_value *x = val(c, v);
    if (x->kind != GR_VAL_CONST || !x->typed || !x->data || x->var_dims || gr_ir_value_numel(x) != 1) return false;
    if (gr_dtype_is_float(x->dtype)) {
        *out = gr_load_f64(x->data, x->dtype, 0);
        if (dtype_tol(x->dtype) > c->tol) c->tol = dtype_tol(x->dtype);
    } else if (gr_dtype_is_int(x->dtype)) {
        *out = (double)gr_load_i64(x->data, x->dtype, 0);
    } else {
        return false;
    }
    return isfinite(*out);
}

static bool near(double got, double want, double tol) { return fabs(got - want) <= tol * fabs(want); }

/* ==== the chain ================================================================================ */

/* One read of v, a value x is read through (x0 or a cast of it). A cast read for the first
 * time reads its own input once. */
static bool read_leaf(ep_ctx *c, int v) {
    for (int i = 0; i < c->n_leaves; i++)
        if (c->leaf[i] == v) return c->leaf_reads[i]++, true;
    if (c->n_leaves == EP_MAX_LEAVES) return false;
    c->leaf[c->n_leaves] = v;
    c->leaf_reads[c->n_leaves++] = 1;
    int src;
    return v == c->x0 || !float_cast(c, v, &src) || read_leaf(c, src);
}

/* Every value x is read through is read only by the chain. */
static bool leaves_closed(const ep_ctx *c) {
    for (int i = 0; i < c->n_leaves; i++)
        if (c->leaf_reads[i] != c->readers[c->leaf[i]]) return false;
    return c->n_leaves > 0;
}

/* An inner node of the chain: v read once (by the chain), float, produced by one node. */
static const gr_ir_node *inner(ep_ctx *c, int v, bool top) {
    if (--c->budget < 0 || (!top && c->readers[v] != 1) || !is_float(c, v)) return NULL;
    return producer(c, v);
}

/* v as a polynomial p[0] + p[1] x + p[2] x^2 + p[3] x^3 of x0 */
static bool poly(ep_ctx *c, int v, double p[4]) {
    memset(p, 0, sizeof(double) * 4);
    double k;
    if (cast_root(c, v) == c->x0) return p[1] = 1, read_leaf(c, v);
    if (scalar(c, v, &k)) return p[0] = k, true;
    const gr_ir_node *n = inner(c, v, false);
    if (!n) return false;
    double a[4], b[4];
    int src;
    switch (n->op) {
    case GR_OP_CAST: return float_cast(c, v, &src) && poly(c, src, p);
    case GR_OP_NEG:
        if (!poly(c, n->in[0], a)) return false;
        for (int i = 0; i < 4; i++) p[i] = -a[i];
        return true;
    case GR_OP_ADD:
    case GR_OP_SUB:
        if (!poly(c, n->in[0], a) || !poly(c, n->in[1], b)) return false;
        for (int i = 0; i < 4; i++) p[i] = n->op == GR_OP_ADD ? a[i] + b[i] : a[i] - b[i];
        return true;
    case GR_OP_MUL:
        if (!poly(c, n->in[0], a) || !poly(c, n->in[1], b)) return false;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                if (a[i] == 0 || b[j] == 0) continue;
                if (i + j > 3) return false;
                p[i + j] += a[i] * b[j];
            }
        return true;
    case GR_OP_DIV:
        if (!scalar(c, n->in[1], &k) || k == 0 || !poly(c, n->in[0], a)) return false;
        for (int i = 0; i < 4; i++) p[i] = a[i] / k;
        return true;
    case GR_OP_POW: {
        if (!scalar(c, n->in[1], &k) || (k != 1 && k != 2 && k != 3) || !poly(c, n->in[0], a)) return false;
        memcpy(p, a, sizeof a);
        for (int e = 1; e < (int)k; e++) {
            double q[4] = {0, 0, 0, 0};
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    if (p[i] == 0 || a[j] == 0) continue;
                    if (i + j > 3) return false;
                    q[i + j] += p[i] * a[j];
                }
            memcpy(p, q, sizeof q);
        }
        return true;
    }
    default: return false;
    }
}

/* v = coef * product(factors): multiplications (and divisions by constants, float casts)
 * flattened, constants multiplied into *coef. */
static bool product(ep_ctx *c, int v, bool top, double *coef, int *factors, int *n_factors) {
    double k;
    if (scalar(c, v, &k)) return *coef *= k, true;
    const gr_ir_node *n = inner(c, v, top);
    int src;
    if (n && n->op == GR_OP_MUL)
        return product(c, n->in[0], false, coef, factors, n_factors) && product(c, n->in[1], false, coef, factors, n_factors);
    if (n && n->op == GR_OP_DIV && scalar(c, n->in[1], &k) && k != 0) {
        *coef /= k;
        return product(c, n->in[0], false, coef, factors, n_factors);
    }
    if (n && float_cast(c, v, &src) && cast_root(c, v) != c->x0) return product(c, src, false, coef, factors, n_factors);
    if (*n_factors == 4) return false;
    factors[(*n_factors)++] = v;
    return true;
}

/* v = *k0 + sum(terms): additions (and float casts) flattened, constants summed into *k0. */
static bool sum(ep_ctx *c, int v, double *k0, int *terms, int *n_terms) {
    double k;
    if (scalar(c, v, &k)) return *k0 += k, true;
    const gr_ir_node *n = inner(c, v, false);
    int src;
    if (n && n->op == GR_OP_ADD) return sum(c, n->in[0], k0, terms, n_terms) && sum(c, n->in[1], k0, terms, n_terms);
    if (n && float_cast(c, v, &src)) return sum(c, src, k0, terms, n_terms);
    if (*n_terms == 2) return false;
    terms[(*n_terms)++] = v;
    return true;
}

static void match_reset(ep_ctx *c, int x0) {
    c->x0 = x0;
    c->n_leaves = 0;
    c->budget = EP_MAX_NODES;
    c->tol = 1e-5;
}

/* r = k * X * (k0 + k1 * tanh(P(X))) with X read through x0 (see the top). */
static bool gelu_chain(ep_ctx *c, int r, int x0) {
    match_reset(c, x0);
    double coef = 1, k0 = 0, k1 = 1, p[4];
    int factors[4], n_factors = 0, terms[2], n_terms = 0, tf[4], n_tf = 0;
    if (!is_float(c, x0) || !product(c, r, true, &coef, factors, &n_factors) || n_factors != 2) return false;
    int xs = cast_root(c, factors[0]) == x0 ? 0 : 1, x_factor = factors[xs], t_factor = factors[1 - xs];
    if (cast_root(c, x_factor) != x0 || cast_root(c, t_factor) == x0 || !read_leaf(c, x_factor)) return false;
    if (!sum(c, t_factor, &k0, terms, &n_terms) || n_terms != 1) return false;
    if (!product(c, terms[0], false, &k1, tf, &n_tf) || n_tf != 1) return false;
    const gr_ir_node *th = inner(c, tf[0], false);
    if (!th || th->op != GR_OP_TANH || th->n_in != 1 || !poly(c, th->in[0], p)) return false;
    double c1 = EP_SQRT_2_OVER_PI, tol = c->tol;
    return near(coef * k0, 0.5, tol) && near(coef * k1, 0.5, tol) && fabs(p[0]) <= tol * c1 && near(p[1], c1, tol) &&
           fabs(p[2]) <= tol * c1 && near(p[3], c1 * EP_CUBIC, 2 * tol) && leaves_closed(c);
}

/* The activation r computes from its input: GR_EPI_NONE when r is none; c->x0 = its input. */
static gr_epilogue activation(ep_ctx *c, int r) {
    const gr_ir_node *n = producer(c, r);
    if (!n || !is_float(c, r)) return GR_EPI_NONE;
    if ((n->op == GR_OP_RELU || n->op == GR_OP_GELU) && n->n_in == 1 && n->in[0] >= 0) {
        const char *approx = "none";
        if (n->op == GR_OP_GELU && gr_ir_attr_string(c->g, n, "approximate", "none", &approx) != GR_OK)
            return gr_error_clear(), GR_EPI_NONE;
        if (n->op == GR_OP_GELU && strcmp(approx, "tanh")) return GR_EPI_NONE; /* erf: cuBLASLt has only tanh */
        match_reset(c, cast_root(c, n->in[0]));
        if (!is_float(c, c->x0) || !read_leaf(c, n->in[0]) || !leaves_closed(c)) return GR_EPI_NONE;
        return n->op == GR_OP_RELU ? GR_EPI_RELU : GR_EPI_GELU_TANH;
    }
    if (n->op != GR_OP_MUL) return GR_EPI_NONE;
    /* x0 is what one of the product's two non-constant factors reads (either may be it) */
    match_reset(c, -1);
    double coef = 1;
    int factors[4], n_factors = 0;
    if (!product(c, r, true, &coef, factors, &n_factors) || n_factors != 2) return GR_EPI_NONE;
    int x0[2] = {cast_root(c, factors[0]), cast_root(c, factors[1])};
    for (int s = 0; s < 2; s++)
        if (gelu_chain(c, r, x0[s])) return GR_EPI_GELU_TANH;
    return GR_EPI_NONE;
}

/* ==== from the activation's input up to the matmul ============================================ */

typedef struct {
    int matmul;      /* node */
    int add;         /* node of the bias add, or -1 */
    int add_main;    /* the add's operand coming from the matmul */
    int bias;        /* the bias the fused matmul reads, or -1 */
} ep_source;

/* b is a row bias for the [.., N] output y: [..1.., N] in y's dtype */
static bool row_bias(const ep_ctx *c, int b, int y) {
    const gr_ir_value *bv = val(c, b), *yv = val(c, y);
    if (!bv->typed || bv->dtype != yv->dtype || bv->ndim < 1 || bv->ndim > yv->ndim) return false;
    if (!gr_dx_equal(bv->dims[bv->ndim - 1], yv->dims[yv->ndim - 1])) return false;
    for (int d = 0; d < bv->ndim - 1; d++)
        if (gr_dx_is_sym(bv->dims[d]) || bv->dims[d].size != 1) return false;
    return true;
}

static bool is_view(gr_op op) {
    return op == GR_OP_RESHAPE || op == GR_OP_SQUEEZE || op == GR_OP_UNSQUEEZE || op == GR_OP_IDENTITY;
}

static bool last_dim_equal(const gr_ir_value *a, const gr_ir_value *b) {
    return a->ndim >= 1 && b->ndim >= 1 && gr_dx_equal(a->dims[a->ndim - 1], b->dims[b->ndim - 1]);
}

static bool find_source(const ep_ctx *c, int x, ep_source *s) {
    s->matmul = s->add = s->add_main = s->bias = -1;
    int v = x;
    for (int step = 0; step < EP_MAX_VIEWS; step++) {
        const gr_ir_node *n = producer(c, v);
        if (!n) return false;
        const gr_ir_value *vv = val(c, v);
        if (n->op == GR_OP_MATMUL) {
            s->matmul = val(c, v)->producer;
            break;
        }
        if (is_view(n->op) && n->n_in >= 1 && n->in[0] >= 0) {
            int u = n->in[0];
            const gr_ir_value *uv = val(c, u);
            /* a row bias added after the view must still see the matmul's columns */
            if (c->readers[u] != 1 || !uv->typed || uv->dtype != vv->dtype || !last_dim_equal(uv, vv)) return false;
            v = u;
            continue;
        }
        if (n->op == GR_OP_ADD && s->add < 0 && n->n_in == 2 && n->in[0] >= 0 && n->in[1] >= 0) {
            int side = -1;
            for (int i = 0; i < 2 && side < 0; i++) {
                int u = n->in[i], b = n->in[1 - i];
                const gr_ir_value *uv = val(c, u);
                if (c->readers[u] == 1 && uv->typed && uv->dtype == vv->dtype && same_dims(uv, vv) && row_bias(c, b, u))
                    side = i;
            }
            if (side < 0) return false;
            s->add = val(c, v)->producer;
            s->add_main = n->in[side];
            s->bias = n->in[1 - side];
            v = s->add_main;
            continue;
        }
        return false;
    }
    if (s->matmul < 0) return false;
    const gr_ir_node *m = &c->g->nodes.data[s->matmul];
    int y = m->out[0];
    const gr_ir_value *yv = val(c, y);
    if (m->n_in < 2 || m->in[0] < 0 || m->in[1] < 0 || !yv->typed || yv->ndim < 2) return false;
    if (yv->dtype != GR_F32 && yv->dtype != GR_F16 && yv->dtype != GR_BF16) return false;
    if (val(c, m->in[0])->ndim < 2 || val(c, m->in[1])->ndim < 2) return false;
    const char *epi;
    if (gr_ir_attr_string(c->g, m, "epilogue", "none", &epi) != GR_OK) return gr_error_clear(), false;
    if (strcmp(epi, "none")) return false;
    bool own_bias = m->n_in > 2 && m->in[2] >= 0;
    if (own_bias) {
        /* a full bias, or a second one from the add, is not the library call's row bias */
        if (s->add >= 0 || !row_bias(c, m->in[2], y)) return false;
        s->bias = m->in[2];
    }
    /* the fused matmul takes the add's place among the nodes no earlier than the matmul's */
    if (s->bias >= 0 && !own_bias) {
        const gr_ir_value *bv = val(c, s->bias);
        if (bv->kind == GR_VAL_NODE && bv->producer >= s->matmul) return false;
    }
    return true;
}

/* ==== rewriting =============================================================================== */

/* The sweep's bookkeeping: begin (reader counts, the node count), record, apply, end. */
static gr_status count_readers(ep_ctx *c);

static gr_status sweep_begin(ep_ctx *c) {
    GR_TRY(count_readers(c));
    c->n0 = c->g->nodes.len;
    c->replaced = gr_calloc((size_t)(c->n0 ? c->n0 : 1), sizeof(bool));
    return c->replaced ? GR_OK : gr_nomem();
}

static gr_status pending(ep_ctx *c, int at, int first, int count) {
    if (gr_vec_push(&c->p_at, at) != GR_OK || gr_vec_push(&c->p_first, first) != GR_OK || gr_vec_push(&c->p_count, count) != GR_OK)
        return gr_nomem();
    if (at >= 0 && at < c->n0) c->replaced[at] = true;
    return GR_OK;
}

static void sweep_end(ep_ctx *c) {
    gr_vec_free(&c->p_at);
    gr_vec_free(&c->p_first);
    gr_vec_free(&c->p_count);
    gr_free(c->replaced, (size_t)(c->n0 ? c->n0 : 1) * sizeof(bool));
    c->replaced = NULL;
}

/* Splices every recorded rewrite in, one pass over the nodes, and ends the sweep. */
static gr_status sweep_apply(ep_ctx *c) {
    gr_status st = gr_ir_splice_many(c->g, c->p_at.data, c->p_first.data, c->p_count.data, c->p_at.len);
    sweep_end(c);
    return st;
}

/* Replaces node `at` by a new node of op over in[], producing at's (single) output value: the
 * node is appended now and spliced in at the sweep's end. */
static gr_status replace_node(ep_ctx *c, int at, gr_op op, const char *suffix, int n_in, const int *in, int n_attr,
                              const gr_ir_attr *attrs) {
    gr_graph *g = c->g;
    char name[300];
    snprintf(name, sizeof name, "%s.%s", g->nodes.data[at].name ? g->nodes.data[at].name : "node", suffix);
    int node;
    GR_TRY(gr_ir_add_node(g, op, gr_ir_find_node(g, name) < 0 ? name : NULL, n_in, in, 1, NULL, n_attr, attrs, &node));
    int old_out = g->nodes.data[at].out[0];
    int fresh = g->nodes.data[node].out[0];
    g->nodes.data[node].out[0] = old_out;
    if (fresh == g->values.len - 1) {
        gr_strfree(g->values.data[fresh].name);
        g->values.len--;
    }
    return pending(c, at, node, 1);
}

/* The node casting r back to dtype t through views read only by the next (a half model's
 * f32 GELU result going into the next half matmul), or -1. */
static int cast_back(const ep_ctx *c, int r, gr_dtype t) {
    int w = r;
    for (int step = 0; step < EP_MAX_VIEWS; step++) {
        if (c->readers[w] != 1 || c->reader[w] < 0) return -1;
        int at = c->reader[w];
        const gr_ir_node *n = &c->g->nodes.data[at];
        if (n->n_out != 1 || n->n_in < 1 || n->in[0] != w || n->out[0] < 0) return -1;
        int src;
        if (float_cast(c, n->out[0], &src)) return val(c, n->out[0])->dtype == t ? at : -1;
        if (!is_view(n->op)) return -1;
        w = n->out[0];
    }
    return -1;
}

/* A fused matmul's attributes: m's trans_a, trans_b and alpha, and `epilogue` = epi. */
static gr_status matmul_attrs(const gr_graph *g, const gr_ir_node *m, gr_epilogue epi, gr_ir_attr attrs[4]) {
    int64_t ta, tb;
    double alpha;
    GR_TRY(gr_ir_attr_int(g, m, "trans_a", 0, &ta));
    GR_TRY(gr_ir_attr_int(g, m, "trans_b", 0, &tb));
    GR_TRY(gr_ir_attr_float(g, m, "alpha", 1.0, &alpha));
    memset(attrs, 0, 4 * sizeof *attrs);
    attrs[0].name = (char *)"trans_a", attrs[0].kind = GR_IR_ATTR_INT, attrs[0].i = ta;
    attrs[1].name = (char *)"trans_b", attrs[1].kind = GR_IR_ATTR_INT, attrs[1].i = tb;
    attrs[2].name = (char *)"alpha", attrs[2].kind = GR_IR_ATTR_FLOAT, attrs[2].f = alpha;
    attrs[3].name = (char *)"epilogue", attrs[3].kind = GR_IR_ATTR_STRING, attrs[3].s = (char *)gr_epilogue_name(epi);
    return GR_OK;
}

static gr_status rewrite(ep_ctx *c, int root_node, gr_epilogue epi, const ep_source *s) {
    gr_graph *g = c->g;
    int r = g->nodes.data[root_node].out[0];
    gr_dtype xt = val(c, c->x0)->dtype;
    int back = val(c, r)->dtype == xt ? -1 : cast_back(c, r, xt);
    const gr_ir_node *m = &g->nodes.data[s->matmul];
    gr_ir_attr attrs[4];
    GR_TRY(matmul_attrs(g, m, epi, attrs));
    int in[3] = {m->in[0], m->in[1], s->bias};
    GR_TRY(replace_node(c, s->matmul, GR_OP_MATMUL, gr_epilogue_name(epi), s->bias >= 0 ? 3 : 2, in, 4, attrs));
    if (s->add >= 0) GR_TRY(replace_node(c, s->add, GR_OP_IDENTITY, "bias_fused", 1, &s->add_main, 0, NULL));
    /* r in x0's dtype: a view of x0. A cast back to x0's dtype after r (and views): that cast
     * becomes a view too, and r (with the views) takes x0's dtype when shapes are inferred
     * again, so no round trip through f32 is left behind. */
    if (back >= 0) {
        int w = g->nodes.data[back].in[0];
        GR_TRY(replace_node(c, back, GR_OP_IDENTITY, "fused", 1, &w, 0, NULL));
    }
    if (back >= 0 || val(c, r)->dtype == xt) return replace_node(c, root_node, GR_OP_IDENTITY, "fused", 1, &c->x0, 0, NULL);
    gr_ir_attr to;
    memset(&to, 0, sizeof to);
    to.name = (char *)"to", to.kind = GR_IR_ATTR_STRING, to.s = (char *)gr_dtype_name(val(c, r)->dtype);
    return replace_node(c, root_node, GR_OP_CAST, "fused", 1, &c->x0, 1, &to);
}

/* ==== residual adds =========================================================================
 *
 *   y = matmul(a, b [, row bias])       no residual or activation yet, read only by the chain
 *   ...  views of y (reshape, squeeze, unsqueeze, identity), each read only by the next
 *   r = add(u, w) | add(w, u)            u the chain's end; w of u's dims and dtype (no broadcast)
 *
 * becomes, at the add's place, r = reshape(matmul(a, b, bias, reshape(w))) (the reshapes only
 * where y's dims differ from r's): cuBLASLt adds w as its C with beta = 1, in the f32
 * accumulator before the one rounding, so a half model's result is within a rounding of the
 * unfused one (which rounds y first). The old matmul and views are left unread; dead-step
 * elimination drops them. Views keep the row-major order of the elements, so w read in y's
 * dims pairs every element with the one the add paired it with. */


/* The matmul node whose output reaches u through views read once each (u included), or -1. */
static int residual_source(const ep_ctx *c, int u) {
    int v = u;
    for (int step = 0; step < EP_MAX_VIEWS; step++) {
        if (c->readers[v] != 1) return -1;
        const gr_ir_node *n = producer(c, v);
        if (!n) return -1;
        if (n->op == GR_OP_MATMUL) return val(c, v)->producer;
        if (!is_view(n->op) || n->n_in < 1 || n->in[0] < 0) return -1;
        const gr_ir_value *uv = val(c, n->in[0]);
        if (!uv->typed || uv->dtype != val(c, v)->dtype) return -1;
        v = n->in[0];
    }
    return -1;
}

static bool residual_matmul_ok(const ep_ctx *c, int mm) {
    const gr_ir_node *m = &c->g->nodes.data[mm];
    int y = m->out[0];
    const gr_ir_value *yv = val(c, y);
    if (m->n_in < 2 || m->in[0] < 0 || m->in[1] < 0 || (m->n_in > 3 && m->in[3] >= 0) || !yv->typed || yv->ndim < 2)
        return false;
    if (!gr_dtype_is_float(yv->dtype) || val(c, m->in[0])->ndim < 2 || val(c, m->in[1])->ndim < 2) return false;
    const char *epi;
    if (gr_ir_attr_string(c->g, m, "epilogue", "none", &epi) != GR_OK) return gr_error_clear(), false;
    if (strcmp(epi, "none")) return false; /* the residual would go in before the activation */
    return !(m->n_in > 2 && m->in[2] >= 0) || row_bias(c, m->in[2], y);
}

/* The value v copies unchanged: through identities and casts to v's own dtype (Hugging Face's
 * `hidden_states.to(torch.float32)` of an f32 model), so that the call reads what is stored
 * already rather than a copy that must now be stored for it. */
static int same_value(const ep_ctx *c, int v) {
    for (int step = 0; step < EP_MAX_VIEWS; step++) {
        const gr_ir_node *n = producer(c, v);
        if (!n || n->n_in < 1 || n->in[0] < 0 || (n->op != GR_OP_IDENTITY && n->op != GR_OP_CAST)) break;
        const gr_ir_value *in = val(c, n->in[0]), *out = val(c, v);
        if (!in->typed || !out->typed || in->dtype != out->dtype || !same_dims(in, out)) break;
        v = n->in[0];
    }
    return v;
}

/* Appends reshape(x) to dims[0..nd) named `name`; *out its value. */
static gr_status add_reshape(gr_graph *g, const char *name, int x, const gr_dim *dims, int nd, int *out) {
    gr_ir_attr a;
    memset(&a, 0, sizeof a);
    GR_TRY(gr_ir_attr_make_sints(&a, "shape", dims, nd));
    int node;
    gr_status st = gr_ir_add_node(g, GR_OP_RESHAPE, gr_ir_find_node(g, name) < 0 ? name : NULL, 1, &x, 1, NULL, 1, &a, &node);
    gr_ir_attr_free(&a);
    GR_TRY(st);
    *out = g->nodes.data[node].out[0];
    return GR_OK;
}

/* Appends the nodes that replace the add node: matmul(a, b, bias, res) of mm's operands, with
 * reshapes around it where y's dims differ from the add's result r or where a bias has more dims
 * than y; the last produces r. They are spliced in at the sweep's end. */
static gr_status rewrite_into(ep_ctx *c, int add, int mm, int bias, int res, const char *suffix) {
    gr_graph *g = c->g;
    const gr_ir_node *m = &g->nodes.data[mm];
    gr_ir_attr attrs[4];
    GR_TRY(matmul_attrs(g, m, GR_EPI_NONE, attrs));
    int y = m->out[0], r = g->nodes.data[add].out[0];
    gr_dim yd[GR_MAX_DIMS], rd[GR_MAX_DIMS];
    int ny = val(c, y)->ndim, nr = val(c, r)->ndim;
    memcpy(yd, val(c, y)->dims, sizeof(gr_dim) * (size_t)ny);
    memcpy(rd, val(c, r)->dims, sizeof(gr_dim) * (size_t)nr);
    bool reshaped = !same_dims(val(c, y), val(c, r));
    const char *mname = m->name ? m->name : "matmul", *aname = g->nodes.data[add].name ? g->nodes.data[add].name : "add";
    char name[300];
    int first_new = g->nodes.len;
    if (res >= 0 && reshaped) {
        snprintf(name, sizeof name, "%s.%s_in", aname, suffix);
        GR_TRY(add_reshape(g, name, res, yd, ny, &res));
    }
    if (bias >= 0 && val(c, bias)->ndim > ny) { /* a row bias [..1.., N] as [N] */
        snprintf(name, sizeof name, "%s.%s_row", aname, suffix);
        GR_TRY(add_reshape(g, name, bias, &yd[ny - 1], 1, &bias));
    }
    m = &g->nodes.data[mm];
    int in[4] = {m->in[0], m->in[1], bias, res};
    snprintf(name, sizeof name, "%s.%s", mname, suffix);
    int node;
    GR_TRY(gr_ir_add_node(g, GR_OP_MATMUL, gr_ir_find_node(g, name) < 0 ? name : NULL, res >= 0 ? 4 : 3, in, 1, NULL, 3,
                          attrs, &node)); /* no epilogue attribute: none */
    int last = node, fresh = g->nodes.data[node].out[0];
    if (reshaped) {
        snprintf(name, sizeof name, "%s.%s_out", aname, suffix);
        int out;
        GR_TRY(add_reshape(g, name, fresh, rd, nr, &out));
        last = g->nodes.len - 1;
        fresh = out;
    }
    /* the last new node produces r itself */
    g->nodes.data[last].out[0] = r;
    if (fresh == g->values.len - 1) {
        gr_strfree(g->values.data[fresh].name);
        g->values.len--;
    }
    return pending(c, add, first_new, g->nodes.len - first_new);
}

/* A row bias add after a matmul with none: the views between keep the last dim (the bias's
 * columns are the matmul's), u is the chain's end. The matmul node, or -1. */
static int bias_source(const ep_ctx *c, int u) {
    int mm = residual_source(c, u);
    if (mm < 0) return -1;
    for (int v = u; v != c->g->nodes.data[mm].out[0];) {
        const gr_ir_node *n = producer(c, v);
        if (!last_dim_equal(val(c, n->in[0]), val(c, v))) return -1;
        v = n->in[0];
    }
    const gr_ir_node *m = &c->g->nodes.data[mm];
    return m->n_in > 2 && m->in[2] >= 0 ? -1 : mm;
}

/* One sweep: fuses row-bias adds and residual adds into the matmuls before them, as the graph
 * stood when the sweep began (reader counts, producers, types); *n_fused counts them. New nodes
 * are appended and spliced in at the end, all at once, so a sweep is O(nodes + values). An add
 * whose operand a rewrite of this sweep produces (the residual after a fused bias) waits for the
 * next sweep (the caller's loop). */
static gr_status fuse_residuals(ep_ctx *c, int *n_fused) {
    gr_graph *g = c->g;
    GR_TRY(sweep_begin(c));
    int n0 = c->n0;
    gr_status st = GR_OK;
    for (int i = 0; i < n0 && st == GR_OK; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        if (n->op != GR_OP_ADD || n->n_in != 2 || n->n_out != 1 || n->out[0] < 0 || n->in[0] < 0 || n->in[1] < 0) continue;
        const gr_ir_value *rv = val(c, n->out[0]);
        if (!rv->typed || !gr_dtype_is_float(rv->dtype)) continue;
        for (int k = 0; k < 2; k++) {
            int u = n->in[k], w = n->in[1 - k];
            const gr_ir_value *uv = val(c, u), *wv = val(c, w);
            if (u == w || !uv->typed || !wv->typed || uv->dtype != rv->dtype || wv->dtype != rv->dtype || !same_dims(uv, rv))
                continue;
            int mm = residual_source(c, u);
            /* a matmul once a sweep (its replacement node is new: a residual after a bias waits) */
            if (mm < 0 || mm >= n0 || c->replaced[mm] || !residual_matmul_ok(c, mm)) continue;
            if (same_dims(wv, rv)) {
                const gr_ir_node *m = &g->nodes.data[mm];
                st = rewrite_into(c, i, mm, m->n_in > 2 ? m->in[2] : -1, same_value(c, w), "residual");
            } else if (bias_source(c, u) == mm && row_bias(c, w, u)) {
                st = rewrite_into(c, i, mm, w, -1, "bias");
            } else {
                continue;
            }
            if (st == GR_OK) c->replaced[mm] = true, (*n_fused)++;
            break;
        }
    }
    if (st != GR_OK) {
        sweep_end(c);
        return st;
    }
    return sweep_apply(c);
}

static gr_status count_readers(ep_ctx *c) {
    gr_graph *g = c->g;
    if (c->readers) gr_free(c->readers, c->readers_bytes);
    size_t n = (size_t)g->values.len + 1;
    c->readers_bytes = 2 * sizeof(int) * n;
    c->readers = gr_malloc(c->readers_bytes);
    if (!c->readers) return c->readers_bytes = 0, GR_ERR_NOMEM;
    c->reader = c->readers + n;
    for (size_t v = 0; v < n; v++) c->readers[v] = 0, c->reader[v] = -1;
    for (int i = 0; i < g->nodes.len; i++)
        for (int j = 0; j < g->nodes.data[i].n_in; j++) {
            int v = g->nodes.data[i].in[j];
            if (v >= 0) c->readers[v]++, c->reader[v] = i;
        }
    for (int i = 0; i < g->outputs.len; i++) c->readers[g->outputs.data[i]]++;
    return GR_OK;
}

gr_status gr_pass_fuse_epilogue(gr_graph *g, int *n_fused) {
    if (n_fused) *n_fused = 0;
    ep_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    /* one sweep over the graph as it stands (matches share no node: each is a matmul and its
     * single-reader chain), the rewrites spliced in together at the end: O(nodes + values) */
    gr_status st = sweep_begin(&c);
    int fused = 0;
    for (int i = 0; i < c.n0 && st == GR_OK; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        int src;
        if (c.replaced[i] || n->n_out != 1 || n->out[0] < 0 || float_cast(&c, n->out[0], &src)) continue;
        /* roots tried: a float cast reading only the activation's result (the cast folds in
         * too: a half model's f32 GELU), then the result itself */
        int r = n->out[0], roots[2] = {-1, i}, results[2] = {-1, r};
        if (c.readers[r] == 1 && c.reader[r] >= 0 && float_cast(&c, g->nodes.data[c.reader[r]].out[0], &src) && src == r)
            roots[0] = c.reader[r], results[0] = g->nodes.data[c.reader[r]].out[0];
        gr_epilogue epi = activation(&c, r);
        ep_source s;
        if (epi == GR_EPI_NONE || !find_source(&c, c.x0, &s)) continue;
        if (c.replaced[s.matmul] || (s.add >= 0 && c.replaced[s.add])) continue;
        for (int k = 0; k < 2; k++) {
            if (roots[k] < 0 || c.replaced[roots[k]] || !same_dims(val(&c, results[k]), val(&c, c.x0))) continue;
            st = rewrite(&c, roots[k], epi, &s);
            if (st == GR_OK) fused++;
            break;
        }
    }
    if (st == GR_OK) st = sweep_apply(&c);
    else sweep_end(&c);
    if (c.readers) gr_free(c.readers, c.readers_bytes);
    if (st == GR_OK && fused) st = gr_ir_infer_shapes(g);
    if (n_fused) *n_fused = fused;
    return st;
}

gr_status gr_pass_fuse_residual(gr_graph *g, int *n_fused) {
    if (n_fused) *n_fused = 0;
    ep_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    int fused = 0, sweep = 0;
    gr_status st = GR_OK;
    /* a sweep fuses every add whose operands the graph had when it began; the next finds the
     * residual adds after the biases it fused (three sweeps for a transformer) */
    do {
        sweep = 0;
        st = fuse_residuals(&c, &sweep);
        if (st == GR_OK && sweep) st = gr_ir_infer_shapes(g);
        fused += sweep;
    } while (st == GR_OK && sweep);
    if (c.readers) gr_free(c.readers, c.readers_bytes);
    if (n_fused) *n_fused = fused;
    return st;
}
