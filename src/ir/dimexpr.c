/* ir/dimexpr — symbolic dims as expressions: the hash-consed table, the
 * simplifier, evaluation, interval bounds, printing and parsing (ir.h).
 *
 * Canonical form. Every expression the table holds is the image of a
 * polynomial with int64 coefficients over "atoms" (symbols, and DIV / MOD /
 * MIN / MAX nodes whose operands are themselves canonical):
 *   term     = atom*atom*...        (atoms in ascending id order, MUL chain)
 *            | CONST(c) * monomial  (c != 1)
 *   sum      = ((term0 + term1) + ...) + CONST(c)   (terms sorted, constant last, omitted when 0)
 * The construction is deterministic, and equal polynomials give the same
 * tree, so hash-consing makes structural equality an id comparison. Because
 * a product of sums is expanded, 2*(s+1) and 2*s+2 are the same expression.
 * Expressions larger than DX_MAX_TERMS terms or of degree above DX_MAX_DEG
 * are refused (GR_ERR_UNSUPPORTED): no shape a model computes comes near.
 *
 * Atoms are simplified as they are made: floor division and modulo by a
 * constant that divides the non-constant part ((2*s + 3)//2 = s + 1), exact
 * division by a monomial ((b*s*64)//(b*s*4) = 16), min/max decided by the
 * interval of the difference over the declared symbol ranges (min(s, s + 1) = s,
 * min(seq, 1024) = seq when seq <= 1024 is declared), absorption
 * (max(x, min(x, y)) = x).
 */
#include "ir/ir.h"
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define DX_MAX_TERMS 16
#define DX_MAX_DEG 6
#define DX_MAX_DEPTH 256 /* recursion bound of evaluation and printing */

typedef struct {
    int64_t coef;
    int n;
    int32_t atom[DX_MAX_DEG];
} term;

typedef struct {
    int n;
    term t[DX_MAX_TERMS];
    int64_t c;
} poly;

/* ==== the table =========================================================================== */
static uint32_t dx_hash(gr_dx_op op, int32_t a, int32_t b, int64_t k) {
    uint64_t h = (uint64_t)op * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)a + 0x7F4A7C15ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)(uint32_t)b + 0x94D049BBull + (h << 6) + (h >> 2);
    h ^= (uint64_t)k + 0xBF58476Dull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    return (uint32_t)(h ^ (h >> 32));
}

static void slots_insert(int32_t *slots, size_t cap, const gr_dexpr *e, int32_t id) {
    size_t i = dx_hash(e->op, e->a, e->b, e->k) & (cap - 1);
    while (slots[i]) i = (i + 1) & (cap - 1);
    slots[i] = id + 1;
}

/* The index is rebuilt when missing (a cloned graph) or stale. */
static gr_status index_ensure(gr_graph *g, int need) {
    if (g->dx_slots && (size_t)need * 2 <= g->dx_cap) return GR_OK;
    size_t cap = 64;
    while (cap < (size_t)need * 2 + 2) cap *= 2;
    int32_t *slots = gr_calloc(cap, sizeof(int32_t));
    if (!slots) return GR_ERR_NOMEM;
    for (int i = 0; i < g->dx.len; i++) slots_insert(slots, cap, &g->dx.data[i], i);
    gr_free(g->dx_slots, g->dx_cap * sizeof(int32_t));
    g->dx_slots = slots;
    g->dx_cap = cap;
    return GR_OK;
}

static gr_status intern(gr_graph *g, gr_dx_op op, int32_t a, int32_t b, int64_t k, int32_t *out) {
    GR_TRY(index_ensure(g, g->dx.len + 1));
    size_t i = dx_hash(op, a, b, k) & (g->dx_cap - 1);
    for (; g->dx_slots[i]; i = (i + 1) & (g->dx_cap - 1)) {
        const gr_dexpr *e = &g->dx.data[g->dx_slots[i] - 1];
        if (e->op == op && e->a == a && e->b == b && e->k == k) return *out = g->dx_slots[i] - 1, GR_OK;
    }
    gr_dexpr e = {op, a, b, k};
    GR_TRY(gr_vec_push(&g->dx, e));
    g->dx_slots[i] = g->dx.len;
    *out = g->dx.len - 1;
    return GR_OK;
}

int32_t gr_ir_find_sym(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->syms.len; i++)
        if (!strcmp(g->syms.data[i].name, name)) return i;
    return -1;
}

gr_status gr_ir_sym(gr_graph *g, const char *name, int32_t *out) {
    int32_t i = gr_ir_find_sym(g, name);
    if (i >= 0) return *out = i, GR_OK;
    gr_ir_symbol s = {gr_strdup(name), 1, GR_DX_INF, false, -1, NULL}; /* default range: >= 1 (see ir.h) */
    if (!s.name) return GR_ERR_NOMEM;
    if (gr_vec_push(&g->syms, s) != GR_OK) {
        gr_strfree(s.name);
        return GR_ERR_NOMEM;
    }
    *out = g->syms.len - 1;
    return GR_OK;
}

gr_status gr_dx_symbol(gr_graph *g, const char *name, gr_dim *out) {
    int32_t s, e;
    GR_TRY(gr_ir_sym(g, name, &s));
    GR_TRY(intern(g, GR_DX_SYM, -1, -1, s, &e));
    *out = (gr_dim){-1, e};
    return GR_OK;
}

gr_status gr_dx_set_range(gr_graph *g, int32_t sym, int64_t lo, int64_t hi) {
    if (sym < 0 || sym >= g->syms.len) return gr_error(GR_ERR_INVALID, "symbol %d does not exist", (int)sym);
    if (lo < 0 || hi < lo || hi > GR_DX_INF)
        return gr_error(GR_ERR_INVALID, "range %lld:%lld of symbolic dim '%s' is empty or negative", (long long)lo, (long long)hi,
                        g->syms.data[sym].name);
    g->syms.data[sym].lo = lo;
    g->syms.data[sym].hi = hi;
    g->syms.data[sym].declared = true;
    return GR_OK;
}

int32_t gr_dx_as_symbol(const gr_graph *g, gr_dim d) {
    if (!gr_dx_is_sym(d) || d.expr >= g->dx.len) return -1;
    const gr_dexpr *e = &g->dx.data[d.expr];
    return e->op == GR_DX_SYM ? (int32_t)e->k : -1;
}

/* ==== interval bounds ==================================================================== */
static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    if (gr_add_overflow(a, b, &r) || r > GR_DX_INF) return a < 0 && b < 0 ? -GR_DX_INF : GR_DX_INF;
    return r < -GR_DX_INF ? -GR_DX_INF : r;
}
static int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    if (gr_mul_overflow(a, b, &r) || r > GR_DX_INF || r < -GR_DX_INF) return (a < 0) != (b < 0) ? -GR_DX_INF : GR_DX_INF;
    return r;
}
static int64_t floordiv64(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}
static int64_t floormod64(int64_t a, int64_t b) {
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

static void bounds_rec(const gr_graph *g, int32_t id, int depth, int64_t *lo, int64_t *hi) {
    *lo = -GR_DX_INF, *hi = GR_DX_INF;
    if (id < 0 || id >= g->dx.len || depth > DX_MAX_DEPTH) return;
    const gr_dexpr *e = &g->dx.data[id];
    int64_t al, ah, bl, bh;
    switch (e->op) {
    case GR_DX_CONST: *lo = *hi = e->k; return;
    case GR_DX_SYM:
        if (e->k >= 0 && e->k < g->syms.len) *lo = g->syms.data[e->k].lo, *hi = g->syms.data[e->k].hi;
        return;
    default: break;
    }
    bounds_rec(g, e->a, depth + 1, &al, &ah);
    bounds_rec(g, e->b, depth + 1, &bl, &bh);
    switch (e->op) {
    case GR_DX_ADD: *lo = sat_add(al, bl), *hi = sat_add(ah, bh); return;
    case GR_DX_MUL: {
        int64_t c[4] = {sat_mul(al, bl), sat_mul(al, bh), sat_mul(ah, bl), sat_mul(ah, bh)};
        *lo = *hi = c[0];
        for (int i = 1; i < 4; i++) *lo = GR_MIN(*lo, c[i]), *hi = GR_MAX(*hi, c[i]);
        return;
    }
    case GR_DX_DIV:
        if (bl > 0 && al >= 0) { /* the common case: a non-negative size over a positive divisor */
            *lo = floordiv64(al, bh >= GR_DX_INF ? GR_DX_INF : bh);
            *hi = ah >= GR_DX_INF ? GR_DX_INF : floordiv64(ah, bl);
        }
        return;
    case GR_DX_MOD:
        if (bl > 0) *lo = 0, *hi = bh >= GR_DX_INF ? GR_DX_INF : bh - 1;
        if (al >= 0 && ah < *hi) *hi = ah, *lo = 0;
        return;
    case GR_DX_MIN: *lo = GR_MIN(al, bl), *hi = GR_MIN(ah, bh); return;
    case GR_DX_MAX: *lo = GR_MAX(al, bl), *hi = GR_MAX(ah, bh); return;
    case GR_DX_EQ:
    case GR_DX_LT: *lo = 0, *hi = 1; return;
    default: return;
    }
}

void gr_dx_bounds(const gr_graph *g, gr_dim d, int64_t *lo, int64_t *hi) {
    if (!gr_dx_is_sym(d)) {
        *lo = *hi = d.size;
        return;
    }
    bounds_rec(g, d.expr, 0, lo, hi);
}

/* ==== polynomials ============================================================================
 * Atoms and terms are ordered structurally (operator, then symbol names,
 * constants and operands), never by id: ids depend on the order expressions
 * were made in, and a printed graph parsed back makes them in another order;
 * the canonical form must not change with it (gir_fuzz checks print(parse(
 * print(g))) == print(g)). */
/* the graph whose atoms are compared: set on entry by gr_dx_binary (and atom), per thread */
static _Thread_local const gr_graph *cmp_graph;

static int dx_cmp_rec(const gr_graph *g, int32_t a, int32_t b, int depth) {
    if (a == b) return 0;
    if (depth > DX_MAX_DEPTH) return a < b ? -1 : 1;
    const gr_dexpr *x = &g->dx.data[a], *y = &g->dx.data[b];
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    if (x->op == GR_DX_CONST) return x->k < y->k ? -1 : x->k > y->k ? 1 : 0;
    if (x->op == GR_DX_SYM) {
        const char *nx = x->k >= 0 && x->k < g->syms.len ? g->syms.data[x->k].name : "";
        const char *ny = y->k >= 0 && y->k < g->syms.len ? g->syms.data[y->k].name : "";
        int c = strcmp(nx, ny);
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    int c = dx_cmp_rec(g, x->a, y->a, depth + 1);
    return c ? c : dx_cmp_rec(g, x->b, y->b, depth + 1);
}
static int atom_cmp(int32_t a, int32_t b) { return dx_cmp_rec(cmp_graph, a, b, 0); }

static int term_cmp(const term *x, const term *y) {
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (int i = 0; i < x->n; i++) {
        int c = atom_cmp(x->atom[i], y->atom[i]);
        if (c) return c;
    }
    return 0;
}

static gr_status too_complex(void) { return GR_ERR_UNSUPPORTED; }

static gr_status overflow_err(const char *what) {
    return gr_error(GR_ERR_SHAPE, "symbolic dim arithmetic overflows int64 (%s)", what);
}

/* Adds coef * monomial into p (merging, keeping terms sorted, dropping zeros). */
static gr_status poly_add_term(poly *p, const term *t) {
    if (t->coef == 0) return GR_OK;
    int i = 0;
    while (i < p->n && term_cmp(&p->t[i], t) < 0) i++;
    if (i < p->n && term_cmp(&p->t[i], t) == 0) {
        int64_t c;
        if (gr_add_overflow(p->t[i].coef, t->coef, &c)) return overflow_err("a coefficient");
        p->t[i].coef = c;
        if (c == 0) {
            memmove(&p->t[i], &p->t[i + 1], sizeof(term) * (size_t)(p->n - i - 1));
            p->n--;
        }
        return GR_OK;
    }
    if (p->n == DX_MAX_TERMS) return too_complex();
    memmove(&p->t[i + 1], &p->t[i], sizeof(term) * (size_t)(p->n - i));
    p->t[i] = *t;
    p->n++;
    return GR_OK;
}

static gr_status poly_add(poly *p, const poly *q, int64_t scale) {
    for (int i = 0; i < q->n; i++) {
        term t = q->t[i];
        if (gr_mul_overflow(t.coef, scale, &t.coef)) return overflow_err("a coefficient");
        GR_TRY(poly_add_term(p, &t));
    }
    int64_t c;
    if (gr_mul_overflow(q->c, scale, &c) || gr_add_overflow(p->c, c, &p->c)) return overflow_err("a constant");
    return GR_OK;
}

/* x * y for two monomials (atoms merged in order). */
static gr_status term_mul(const term *x, const term *y, term *out) {
    if (x->n + y->n > DX_MAX_DEG) return too_complex();
    if (gr_mul_overflow(x->coef, y->coef, &out->coef)) return overflow_err("a coefficient");
    int i = 0, j = 0;
    out->n = 0;
    while (i < x->n || j < y->n) {
        if (j >= y->n || (i < x->n && atom_cmp(x->atom[i], y->atom[j]) <= 0)) out->atom[out->n++] = x->atom[i++];
        else out->atom[out->n++] = y->atom[j++];
    }
    return GR_OK;
}

static gr_status poly_mul(const poly *x, const poly *y, poly *out) {
    poly r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < x->n; i++) {
        for (int j = 0; j < y->n; j++) {
            term t;
            GR_TRY(term_mul(&x->t[i], &y->t[j], &t));
            GR_TRY(poly_add_term(&r, &t));
        }
        term t = x->t[i];
        if (gr_mul_overflow(t.coef, y->c, &t.coef)) return overflow_err("a coefficient");
        GR_TRY(poly_add_term(&r, &t));
    }
    for (int j = 0; j < y->n; j++) {
        term t = y->t[j];
        if (gr_mul_overflow(t.coef, x->c, &t.coef)) return overflow_err("a coefficient");
        GR_TRY(poly_add_term(&r, &t));
    }
    if (gr_mul_overflow(x->c, y->c, &r.c)) return overflow_err("a constant");
    *out = r;
    return GR_OK;
}

static gr_status to_poly(const gr_graph *g, int32_t id, int depth, poly *p) {
    memset(p, 0, sizeof *p);
    if (depth > DX_MAX_DEPTH) return too_complex();
    const gr_dexpr *e = &g->dx.data[id];
    switch (e->op) {
    case GR_DX_CONST: p->c = e->k; return GR_OK;
    case GR_DX_ADD: {
        poly q;
        GR_TRY(to_poly(g, e->a, depth + 1, p));
        GR_TRY(to_poly(g, e->b, depth + 1, &q));
        return poly_add(p, &q, 1);
    }
    case GR_DX_MUL: {
        poly x, y;
        GR_TRY(to_poly(g, e->a, depth + 1, &x));
        GR_TRY(to_poly(g, e->b, depth + 1, &y));
        return poly_mul(&x, &y, p);
    }
    default: /* an atom */
        p->n = 1;
        p->t[0].coef = 1;
        p->t[0].n = 1;
        p->t[0].atom[0] = id;
        return GR_OK;
    }
}

static gr_status dim_poly(const gr_graph *g, gr_dim d, poly *p) {
    if (!gr_dx_is_sym(d)) {
        memset(p, 0, sizeof *p);
        p->c = d.size;
        return GR_OK;
    }
    return to_poly(g, d.expr, 0, p);
}

/* The canonical expression of p (a concrete dim when p is a constant). */
static gr_status from_poly(gr_graph *g, const poly *p, gr_dim *out) {
    if (p->n == 0) {
        *out = gr_dx_const(p->c);
        return GR_OK;
    }
    int32_t sum = -1;
    for (int i = 0; i < p->n; i++) {
        const term *t = &p->t[i];
        int32_t m = t->atom[0];
        for (int j = 1; j < t->n; j++) GR_TRY(intern(g, GR_DX_MUL, m, t->atom[j], 0, &m));
        if (t->coef != 1) {
            int32_t c;
            GR_TRY(intern(g, GR_DX_CONST, -1, -1, t->coef, &c));
            GR_TRY(intern(g, GR_DX_MUL, c, m, 0, &m));
        }
        if (sum < 0) sum = m;
        else GR_TRY(intern(g, GR_DX_ADD, sum, m, 0, &sum));
    }
    if (p->c != 0) {
        int32_t c;
        GR_TRY(intern(g, GR_DX_CONST, -1, -1, p->c, &c));
        GR_TRY(intern(g, GR_DX_ADD, sum, c, 0, &sum));
    }
    *out = (gr_dim){-1, sum};
    return GR_OK;
}

/* ==== atoms ================================================================================= */
static gr_status atom(gr_graph *g, gr_dx_op op, gr_dim a, gr_dim b, gr_dim *out) {
    int32_t ia, ib, id;
    if (gr_dx_is_sym(a)) ia = a.expr;
    else GR_TRY(intern(g, GR_DX_CONST, -1, -1, a.size, &ia));
    if (gr_dx_is_sym(b)) ib = b.expr;
    else GR_TRY(intern(g, GR_DX_CONST, -1, -1, b.size, &ib));
    cmp_graph = g;
    if ((op == GR_DX_MIN || op == GR_DX_MAX || op == GR_DX_EQ) && atom_cmp(ib, ia) < 0) { /* commutative: one order */
        int32_t t = ia;
        ia = ib, ib = t;
    }
    GR_TRY(intern(g, op, ia, ib, 0, &id));
    *out = (gr_dim){-1, id};
    return GR_OK;
}

/* p // k for a constant k > 0 when k divides every coefficient (the
 * constant may be anything: (k*q + c)//k = q + c//k for integer q). */
static bool poly_div_const(const poly *p, int64_t k, poly *q) {
    memset(q, 0, sizeof *q);
    for (int i = 0; i < p->n; i++) {
        if (p->t[i].coef % k) return false;
        q->t[q->n] = p->t[i];
        q->t[q->n++].coef /= k;
    }
    q->c = floordiv64(p->c, k);
    return true;
}

/* p / m exactly, for a monomial m (one term, no constant) dividing every term of p (and p has no constant). */
static bool poly_div_monomial(const poly *p, const term *m, poly *q) {
    if (p->c != 0 || m->coef == 0) return false;
    memset(q, 0, sizeof *q);
    for (int i = 0; i < p->n; i++) {
        const term *t = &p->t[i];
        if (t->coef % m->coef) return false;
        term r = {t->coef / m->coef, 0, {0}};
        int j = 0;
        for (int a = 0; a < t->n; a++) {
            if (j < m->n && t->atom[a] == m->atom[j]) j++; /* both in structural order: a merge */
            else r.atom[r.n++] = t->atom[a];
        }
        if (j != m->n) return false;
        if (r.n == 0) q->c += r.coef;
        else if (poly_add_term(q, &r) != GR_OK) return false;
    }
    return true;
}

static bool operand_of(const gr_graph *g, gr_dim x, gr_dx_op op, gr_dim y) {
    /* is y = op(x, z) or op(z, x)? */
    if (!gr_dx_is_sym(y)) return false;
    const gr_dexpr *e = &g->dx.data[y.expr];
    if (e->op != op) return false;
    int32_t ix = gr_dx_is_sym(x) ? x.expr : -2;
    if (!gr_dx_is_sym(x)) {
        /* x concrete: compare with CONST operands */
        for (int k = 0; k < 2; k++) {
            int32_t o = k ? e->b : e->a;
            if (g->dx.data[o].op == GR_DX_CONST && g->dx.data[o].k == x.size) return true;
        }
        return false;
    }
    return e->a == ix || e->b == ix;
}

static gr_status minmax(gr_graph *g, gr_dx_op op, gr_dim a, gr_dim b, const poly *pa, const poly *pb, gr_dim *out) {
    bool is_min = op == GR_DX_MIN;
    if (gr_dx_equal(a, b)) return *out = a, GR_OK;
    /* the sign of a - b over the declared ranges decides it */
    poly d = *pa;
    gr_dim dd;
    if (poly_add(&d, pb, -1) == GR_OK && from_poly(g, &d, &dd) == GR_OK) {
        int64_t lo, hi;
        gr_dx_bounds(g, dd, &lo, &hi);
        if (lo >= 0) return *out = is_min ? b : a, GR_OK; /* a >= b */
        if (hi <= 0) return *out = is_min ? a : b, GR_OK; /* a <= b */
    }
    gr_error_clear();
    /* absorption: max(x, min(x, y)) = x, min(x, max(x, y)) = x */
    gr_dx_op other = is_min ? GR_DX_MAX : GR_DX_MIN;
    if (operand_of(g, a, other, b)) return *out = a, GR_OK;
    if (operand_of(g, b, other, a)) return *out = b, GR_OK;
    /* idempotence one level down: min(x, min(x, y)) = min(x, y) */
    if (operand_of(g, a, op, b)) return *out = b, GR_OK;
    if (operand_of(g, b, op, a)) return *out = a, GR_OK;
    return atom(g, op, a, b, out);
}

/* ==== arithmetic ================================================================================ */
static gr_status concrete_binary(gr_dx_op op, int64_t a, int64_t b, int64_t *out) {
    switch (op) {
    case GR_DX_ADD:
        if (gr_add_overflow(a, b, out)) return overflow_err("an addition");
        return GR_OK;
    case GR_DX_SUB:
        if (__builtin_sub_overflow(a, b, out)) return overflow_err("a subtraction");
        return GR_OK;
    case GR_DX_MUL:
        if (gr_mul_overflow(a, b, out)) return overflow_err("a product");
        return GR_OK;
    case GR_DX_DIV:
    case GR_DX_MOD:
        if (b == 0) return gr_error(GR_ERR_SHAPE, "symbolic dim arithmetic divides by zero");
        if (a == INT64_MIN && b == -1) return overflow_err("a division");
        *out = op == GR_DX_DIV ? floordiv64(a, b) : floormod64(a, b);
        return GR_OK;
    case GR_DX_MIN: *out = GR_MIN(a, b); return GR_OK;
    case GR_DX_MAX: *out = GR_MAX(a, b); return GR_OK;
    case GR_DX_EQ: *out = a == b; return GR_OK;
    case GR_DX_LT: *out = a < b; return GR_OK;
    default: return gr_error(GR_ERR_INTERNAL, "symbolic dim arithmetic: bad operator %d", (int)op);
    }
}

/* a == b / a < b decided by the sign of a - b over the ranges, else an atom */
static gr_status compare(gr_graph *g, gr_dx_op op, gr_dim a, gr_dim b, const poly *pa, const poly *pb, gr_dim *out) {
    poly d = *pa;
    gr_dim dd;
    if (poly_add(&d, pb, -1) == GR_OK && from_poly(g, &d, &dd) == GR_OK) {
        int64_t lo, hi;
        gr_dx_bounds(g, dd, &lo, &hi);
        if (op == GR_DX_EQ && lo == 0 && hi == 0) return *out = gr_dx_const(1), GR_OK;
        if (op == GR_DX_EQ && (lo > 0 || hi < 0)) return *out = gr_dx_const(0), GR_OK;
        if (op == GR_DX_LT && hi < 0) return *out = gr_dx_const(1), GR_OK;
        if (op == GR_DX_LT && lo >= 0) return *out = gr_dx_const(0), GR_OK;
    }
    gr_error_clear();
    return atom(g, op, a, b, out);
}

gr_status gr_dx_binary(gr_graph *g, gr_dx_op op, gr_dim a, gr_dim b, gr_dim *out) {
    cmp_graph = g;
    if (!gr_dx_is_sym(a) && !gr_dx_is_sym(b)) {
        int64_t r;
        GR_TRY(concrete_binary(op, a.size, b.size, &r));
        *out = gr_dx_const(r);
        return GR_OK;
    }
    poly pa, pb, r;
    GR_TRY(dim_poly(g, a, &pa));
    GR_TRY(dim_poly(g, b, &pb));
    switch (op) {
    case GR_DX_ADD:
    case GR_DX_SUB:
        GR_TRY(poly_add(&pa, &pb, op == GR_DX_ADD ? 1 : -1));
        return from_poly(g, &pa, out);
    case GR_DX_MUL:
        GR_TRY(poly_mul(&pa, &pb, &r));
        return from_poly(g, &r, out);
    case GR_DX_DIV:
    case GR_DX_MOD: {
        if (!gr_dx_is_sym(b)) {
            int64_t k = b.size;
            if (k == 0) return gr_error(GR_ERR_SHAPE, "symbolic dim arithmetic divides by zero");
            if (k == 1) return *out = op == GR_DX_DIV ? a : gr_dx_const(0), GR_OK;
            if (k > 0) {
                poly q;
                if (poly_div_const(&pa, k, &q)) {
                    if (op == GR_DX_DIV) return from_poly(g, &q, out);
                    *out = gr_dx_const(floormod64(pa.c, k));
                    return GR_OK;
                }
                int64_t lo, hi;
                gr_dx_bounds(g, a, &lo, &hi);
                if (lo >= 0 && hi < k) return *out = op == GR_DX_DIV ? gr_dx_const(0) : a, GR_OK;
            }
            return atom(g, op, a, b, out);
        }
        int64_t blo, bhi;
        gr_dx_bounds(g, b, &blo, &bhi);
        if (gr_dx_equal(a, b) && blo > 0) return *out = gr_dx_const(op == GR_DX_DIV ? 1 : 0), GR_OK;
        if (op == GR_DX_DIV && pb.n == 1 && pb.c == 0) {
            poly q;
            if (poly_div_monomial(&pa, &pb.t[0], &q)) return from_poly(g, &q, out);
        }
        if (op == GR_DX_MOD && pb.n == 1 && pb.c == 0) {
            poly q;
            if (poly_div_monomial(&pa, &pb.t[0], &q)) return *out = gr_dx_const(0), GR_OK;
        }
        return atom(g, op, a, b, out);
    }
    case GR_DX_MIN:
    case GR_DX_MAX: return minmax(g, op, a, b, &pa, &pb, out);
    case GR_DX_EQ:
    case GR_DX_LT: return compare(g, op, a, b, &pa, &pb, out);
    default: return gr_error(GR_ERR_INTERNAL, "symbolic dim arithmetic: bad operator %d", (int)op);
    }
}

/* ==== evaluation ============================================================================== */
static gr_status eval_rec(const gr_graph *g, int32_t id, const int64_t *sv, int depth, int64_t *out) {
    if (id < 0 || id >= g->dx.len) return gr_error(GR_ERR_INVALID, "symbolic dim refers to expression %d of %d", (int)id, g->dx.len);
    if (depth > DX_MAX_DEPTH) return gr_error(GR_ERR_SHAPE, "symbolic dim expression nested more than %d deep", DX_MAX_DEPTH);
    const gr_dexpr *e = &g->dx.data[id];
    switch (e->op) {
    case GR_DX_CONST: *out = e->k; return GR_OK;
    case GR_DX_SYM:
        if (e->k < 0 || e->k >= g->syms.len) return gr_error(GR_ERR_INVALID, "symbolic dim refers to symbol %lld", (long long)e->k);
        if (!sv || sv[e->k] < 0)
            return gr_error(GR_ERR_SHAPE, "symbolic dim '%s' has no value", g->syms.data[e->k].name);
        *out = sv[e->k];
        return GR_OK;
    default: {
        int64_t a, b;
        GR_TRY(eval_rec(g, e->a, sv, depth + 1, &a));
        GR_TRY(eval_rec(g, e->b, sv, depth + 1, &b));
        return concrete_binary(e->op, a, b, out);
    }
    }
}

gr_status gr_dx_eval(const gr_graph *g, gr_dim d, const int64_t *sym_values, int64_t *out) {
    if (!gr_dx_is_sym(d)) return *out = d.size, GR_OK;
    gr_status st = eval_rec(g, d.expr, sym_values, 0, out);
    if (st != GR_OK && st != GR_ERR_NOMEM) {
        char buf[256];
        gr_dx_str(g, d, buf, sizeof buf);
        return gr_error_prefix(st, "evaluating '%s'", buf);
    }
    return st;
}

int gr_dx_degree(const gr_graph *g, gr_dim d) {
    if (!gr_dx_is_sym(d)) return 0;
    poly p;
    cmp_graph = g;
    if (to_poly(g, d.expr, 0, &p) != GR_OK) return gr_error_clear(), -1;
    int deg = 0;
    for (int i = 0; i < p.n; i++) deg = GR_MAX(deg, p.t[i].n);
    return deg;
}

void gr_dx_symbols_of(const gr_graph *g, gr_dim d, bool *used) {
    if (!gr_dx_is_sym(d)) return;
    /* iterative walk (expressions are DAGs of bounded depth) */
    int32_t stack[DX_MAX_DEPTH * 2];
    int sp = 0;
    stack[sp++] = d.expr;
    while (sp) {
        int32_t id = stack[--sp];
        if (id < 0 || id >= g->dx.len) continue;
        const gr_dexpr *e = &g->dx.data[id];
        if (e->op == GR_DX_SYM) {
            if (e->k >= 0 && e->k < g->syms.len) used[e->k] = true;
        } else if (e->op != GR_DX_CONST && sp + 2 <= (int)(sizeof stack / sizeof stack[0])) {
            stack[sp++] = e->a;
            stack[sp++] = e->b;
        }
    }
}

/* ==== printing ===================================================================================== */
/* precedence: 1 sum, 2 product, 3 atom */
static void print_rec(const gr_graph *g, int32_t id, int prec, int depth, gr_strbuf *sb) {
    if (id < 0 || id >= g->dx.len || depth > DX_MAX_DEPTH) {
        gr_sb_puts(sb, "?");
        return;
    }
    const gr_dexpr *e = &g->dx.data[id];
    switch (e->op) {
    case GR_DX_CONST:
        if (e->k < 0 && prec > 1) gr_sb_printf(sb, "(%lld)", (long long)e->k);
        else gr_sb_printf(sb, "%lld", (long long)e->k);
        return;
    case GR_DX_SYM:
        gr_sb_puts(sb, e->k >= 0 && e->k < g->syms.len ? g->syms.data[e->k].name : "?");
        return;
    case GR_DX_ADD: {
        if (prec > 1) gr_sb_puts(sb, "(");
        print_rec(g, e->a, 1, depth + 1, sb);
        const gr_dexpr *b = &g->dx.data[e->b];
        if (b->op == GR_DX_CONST && b->k < 0) {
            gr_sb_printf(sb, " - %llu", (unsigned long long)(-(uint64_t)b->k));
        } else if (b->op == GR_DX_MUL && g->dx.data[b->a].op == GR_DX_CONST && g->dx.data[b->a].k < 0) {
            int64_t k = g->dx.data[b->a].k;
            gr_sb_puts(sb, " - ");
            /* after "k*" an operand of the same precedence (s//2, s % 3) needs parentheses:
             * 2*s % 3 would read back as (2*s) % 3 */
            if (k != -1) gr_sb_printf(sb, "%llu*", (unsigned long long)(-(uint64_t)k));
            print_rec(g, b->b, k != -1 ? 3 : 2, depth + 1, sb);
        } else {
            gr_sb_puts(sb, " + ");
            print_rec(g, e->b, 1, depth + 1, sb);
        }
        if (prec > 1) gr_sb_puts(sb, ")");
        return;
    }
    case GR_DX_MUL:
        if (prec > 2) gr_sb_puts(sb, "(");
        print_rec(g, e->a, 2, depth + 1, sb);
        gr_sb_puts(sb, "*");
        print_rec(g, e->b, 3, depth + 1, sb);
        if (prec > 2) gr_sb_puts(sb, ")");
        return;
    case GR_DX_DIV:
    case GR_DX_MOD:
        if (prec > 2) gr_sb_puts(sb, "(");
        print_rec(g, e->a, 2, depth + 1, sb);
        gr_sb_puts(sb, e->op == GR_DX_DIV ? "//" : " % ");
        print_rec(g, e->b, 3, depth + 1, sb);
        if (prec > 2) gr_sb_puts(sb, ")");
        return;
    case GR_DX_MIN:
    case GR_DX_MAX:
    case GR_DX_EQ:
    case GR_DX_LT:
        gr_sb_puts(sb, e->op == GR_DX_MIN ? "min(" : e->op == GR_DX_MAX ? "max(" : e->op == GR_DX_EQ ? "eq(" : "lt(");
        print_rec(g, e->a, 1, depth + 1, sb);
        gr_sb_puts(sb, ", ");
        print_rec(g, e->b, 1, depth + 1, sb);
        gr_sb_puts(sb, ")");
        return;
    default: gr_sb_puts(sb, "?"); return;
    }
}

void gr_dx_print(const gr_graph *g, gr_dim d, gr_strbuf *sb) {
    if (!gr_dx_is_sym(d)) gr_sb_printf(sb, "%lld", (long long)d.size);
    else print_rec(g, d.expr, 1, 0, sb);
}

void gr_dx_str(const gr_graph *g, gr_dim d, char *buf, size_t n) {
    if (!n) return;
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_dx_print(g, d, &sb);
    snprintf(buf, n, "%s", sb.data ? sb.data : "?");
    gr_sb_free(&sb);
}

/* ==== parsing ========================================================================================
 * expr := sum ; sum := prod (('+'|'-') prod)* ; prod := unary (('*'|'/'|'//'|'%') unary)* ;
 * unary := '-' unary | primary ; primary := INT | NAME | NAME '(' args ')' | '(' expr ')' */
typedef struct {
    gr_graph *g;
    const char *s;
    size_t pos;
    int depth;
} dxp;

static void skip_ws(dxp *p) {
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t') p->pos++;
}
static bool accept(dxp *p, const char *tok) {
    skip_ws(p);
    size_t n = strlen(tok);
    if (strncmp(p->s + p->pos, tok, n)) return false;
    p->pos += n;
    return true;
}
static bool name_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }

static gr_status parse_sum(dxp *p, gr_dim *out);

static gr_status parse_args(dxp *p, gr_dim *args, int max, int *n) {
    *n = 0;
    if (!accept(p, "(")) return GR_ERR_PARSE;
    for (;;) {
        if (*n == max) return GR_ERR_PARSE;
        GR_TRY(parse_sum(p, &args[(*n)++]));
        if (accept(p, ")")) return GR_OK;
        if (!accept(p, ",")) return GR_ERR_PARSE;
    }
}

static gr_status parse_primary(dxp *p, gr_dim *out) {
    skip_ws(p);
    char c = p->s[p->pos];
    if (isdigit((unsigned char)c)) {
        int64_t v = 0;
        while (isdigit((unsigned char)p->s[p->pos])) {
            if (gr_mul_overflow(v, 10, &v) || gr_add_overflow(v, p->s[p->pos] - '0', &v)) return GR_ERR_PARSE;
            p->pos++;
        }
        *out = gr_dx_const(v);
        return GR_OK;
    }
    if (c == '(') {
        p->pos++;
        GR_TRY(parse_sum(p, out));
        return accept(p, ")") ? GR_OK : GR_ERR_PARSE;
    }
    if (!name_start(c)) return GR_ERR_PARSE;
    size_t start = p->pos;
    while (name_char(p->s[p->pos])) p->pos++;
    char name[128];
    size_t len = p->pos - start;
    if (len >= sizeof name) return GR_ERR_PARSE;
    memcpy(name, p->s + start, len);
    name[len] = 0;
    skip_ws(p);
    if (p->s[p->pos] != '(') return gr_dx_symbol(p->g, name, out);
    gr_dim args[8];
    int n = 0;
    GR_TRY(parse_args(p, args, 8, &n));
    gr_dx_op op;
    if ((!strcmp(name, "eq") || !strcmp(name, "Eq")) && n == 2) return gr_dx_binary(p->g, GR_DX_EQ, args[0], args[1], out);
    if ((!strcmp(name, "lt") || !strcmp(name, "Lt")) && n == 2) return gr_dx_binary(p->g, GR_DX_LT, args[0], args[1], out);
    if (!strcmp(name, "min") || !strcmp(name, "Min")) op = GR_DX_MIN;
    else if (!strcmp(name, "max") || !strcmp(name, "Max")) op = GR_DX_MAX;
    else if (!strcmp(name, "FloorDiv") && n == 2) return gr_dx_binary(p->g, GR_DX_DIV, args[0], args[1], out);
    else if (!strcmp(name, "Mod") && n == 2) return gr_dx_binary(p->g, GR_DX_MOD, args[0], args[1], out);
    else if (!strcmp(name, "CeilDiv") && n == 2) { /* ceil(a/b) = -((-a)//b) */
        gr_dim na, q;
        GR_TRY(gr_dx_binary(p->g, GR_DX_MUL, args[0], gr_dx_const(-1), &na));
        GR_TRY(gr_dx_binary(p->g, GR_DX_DIV, na, args[1], &q));
        return gr_dx_binary(p->g, GR_DX_MUL, q, gr_dx_const(-1), out);
    } else if ((!strcmp(name, "floor") || !strcmp(name, "int")) && n == 1) return *out = args[0], GR_OK; /* '/' is floor division already */
    else return GR_ERR_PARSE;
    if (n < 2) return GR_ERR_PARSE;
    *out = args[0];
    for (int i = 1; i < n; i++) GR_TRY(gr_dx_binary(p->g, op, *out, args[i], out));
    return GR_OK;
}

static gr_status parse_unary(dxp *p, gr_dim *out) {
    if (++p->depth > 64) return GR_ERR_PARSE;
    gr_status st;
    if (accept(p, "-")) {
        gr_dim x;
        st = parse_unary(p, &x);
        if (st == GR_OK) st = gr_dx_binary(p->g, GR_DX_MUL, x, gr_dx_const(-1), out);
    } else {
        st = parse_primary(p, out);
    }
    p->depth--;
    return st;
}

static gr_status parse_prod(dxp *p, gr_dim *out) {
    GR_TRY(parse_unary(p, out));
    for (;;) {
        gr_dx_op op;
        if (accept(p, "*")) op = GR_DX_MUL;
        else if (accept(p, "//") || accept(p, "/")) op = GR_DX_DIV;
        else if (accept(p, "%")) op = GR_DX_MOD;
        else return GR_OK;
        gr_dim r;
        GR_TRY(parse_unary(p, &r));
        GR_TRY(gr_dx_binary(p->g, op, *out, r, out));
    }
}

static gr_status parse_sum(dxp *p, gr_dim *out) {
    if (++p->depth > 64) return GR_ERR_PARSE;
    gr_status st = parse_prod(p, out);
    while (st == GR_OK) {
        gr_dx_op op;
        if (accept(p, "+")) op = GR_DX_ADD;
        else if (accept(p, "-")) op = GR_DX_SUB;
        else break;
        gr_dim r;
        st = parse_prod(p, &r);
        if (st == GR_OK) st = gr_dx_binary(p->g, op, *out, r, out);
    }
    p->depth--;
    return st;
}

gr_status gr_dx_parse(gr_graph *g, const char *text, gr_dim *out) {
    if (!text || strlen(text) > 4096) return GR_ERR_PARSE;
    /* parse into a scratch copy of the symbol list: a failed parse must not leave symbols behind */
    int n_syms = g->syms.len;
    dxp p = {g, text, 0, 0};
    gr_status st = parse_sum(&p, out);
    skip_ws(&p);
    if (st == GR_OK && text[p.pos] != 0) st = GR_ERR_PARSE;
    if (st != GR_OK) {
        while (g->syms.len > n_syms) gr_strfree(g->syms.data[--g->syms.len].name);
        /* expression nodes made meanwhile stay in the table: harmless, unreferenced */
        if (st == GR_ERR_PARSE || st == GR_ERR_UNSUPPORTED) gr_error_clear();
        return st == GR_ERR_NOMEM ? st : GR_ERR_PARSE;
    }
    return GR_OK;
}

gr_status gr_dx_from_name(gr_graph *g, const char *text, gr_dim *out) {
    gr_status st = gr_dx_parse(g, text, out);
    if (st != GR_ERR_PARSE) return st;
    return gr_dx_symbol(g, text, out);
}

/* ==== across graphs ================================================================================ */
static gr_status import_rec(gr_graph *dst, const gr_graph *src, int32_t id, int depth, gr_dim *out) {
    if (id < 0 || id >= src->dx.len || depth > DX_MAX_DEPTH)
        return gr_error(GR_ERR_INVALID, "symbolic dim refers to expression %d of %d", (int)id, src->dx.len);
    const gr_dexpr *e = &src->dx.data[id];
    switch (e->op) {
    case GR_DX_CONST: *out = gr_dx_const(e->k); return GR_OK;
    case GR_DX_SYM: {
        if (e->k < 0 || e->k >= src->syms.len) return gr_error(GR_ERR_INVALID, "symbolic dim refers to symbol %lld", (long long)e->k);
        const gr_ir_symbol *s = &src->syms.data[e->k];
        bool is_new = gr_ir_find_sym(dst, s->name) < 0;
        GR_TRY(gr_dx_symbol(dst, s->name, out));
        if (is_new && s->declared) GR_TRY(gr_dx_set_range(dst, gr_dx_as_symbol(dst, *out), s->lo, s->hi));
        return GR_OK;
    }
    default: {
        gr_dim a, b;
        GR_TRY(import_rec(dst, src, e->a, depth + 1, &a));
        GR_TRY(import_rec(dst, src, e->b, depth + 1, &b));
        gr_status st = gr_dx_binary(dst, e->op, a, b, out);
        if (st == GR_ERR_UNSUPPORTED) return gr_error(st, "symbolic dim too complex to copy into a subgraph");
        return st;
    }
    }
}

gr_status gr_dx_import(gr_graph *dst, const gr_graph *src, gr_dim d, gr_dim *out) {
    if (!gr_dx_is_sym(d) || dst == src) return *out = d, GR_OK;
    return import_rec(dst, src, d.expr, 0, out);
}

gr_status gr_ir_attr_import_exprs(gr_graph *dst, const gr_graph *src, gr_ir_attr *a) {
    if (dst == src) return GR_OK;
    gr_dim d;
    if (a->sym && (a->kind == GR_IR_ATTR_INT || a->kind == GR_IR_ATTR_FLOAT)) {
        GR_TRY(gr_dx_import(dst, src, (gr_dim){-1, a->expr}, &d));
        if (gr_dx_is_sym(d)) a->expr = d.expr;
        else a->sym = false, a->i = d.size, a->f = (double)d.size;
    }
    for (int k = 0; a->kind == GR_IR_ATTR_INTS && a->exprs && k < a->n; k++) {
        if (a->exprs[k] == GR_SYM_NONE) continue;
        GR_TRY(gr_dx_import(dst, src, (gr_dim){-1, a->exprs[k]}, &d));
        a->exprs[k] = d.expr;
        if (!gr_dx_is_sym(d)) a->ints[k] = d.size;
    }
    return GR_OK;
}

const char *gr_dx_text(gr_graph *g, gr_dim d) {
    if (!gr_dx_is_sym(d) || d.expr >= g->dx.len) return "?";
    int32_t sym = gr_dx_as_symbol(g, d);
    if (sym >= 0) return g->syms.data[sym].name;
    if (d.expr >= g->dx_text_cap) {
        int cap = g->dx.len + 16;
        char **t = gr_calloc((size_t)cap, sizeof(char *));
        if (!t) return "?";
        for (int i = 0; i < g->dx_text_cap; i++) t[i] = g->dx_text[i];
        gr_free(g->dx_text, sizeof(char *) * (size_t)g->dx_text_cap);
        g->dx_text = t;
        g->dx_text_cap = cap;
    }
    if (!g->dx_text[d.expr]) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        gr_dx_print(g, d, &sb);
        g->dx_text[d.expr] = gr_sb_take(&sb);
        if (!g->dx_text[d.expr]) return "?";
    }
    return g->dx_text[d.expr];
}
