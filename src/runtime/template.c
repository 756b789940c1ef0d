/* runtime/template — a new binding's plan instantiated from a template instead of lowered and
 * fused again (issue 10: preparing a new binding must be cheap).
 *
 * A symbolic model's plans at two bindings differ, in everything lowering and fusion make (the
 * steps, their kernels, library calls and arguments, the temporaries lowering adds), only in
 * numbers: extents, strides, offsets, element offsets, points, library-call sizes — as long as
 * every decision the passes took on concrete sizes came out the same. Kernels are built so that
 * no decision depends on a symbolic dim being 1 (var_dims, kir.h), and what is left to compare
 * sizes with is equality: a dim or a product of dims equal to another one or to a constant
 * (fuse-store.c and fuse-matmul.c compare element counts; a layout class sees a stride equal to
 * a row-major one). So bindings fall into *classes* by their coincidences: every dim, every
 * suffix product of a value's dims (its strides and its element count) and every symbolic
 * attribute of the model is evaluated, and the class is which of them are equal to each other or
 * to a constant (0, 1 and the model's concrete dims and products). Two bindings of one class
 * take the same decisions; then each number of their plans is a polynomial in the symbols of
 * degree at most the symbol's degree in the model's element counts (GPT-2: 2 in seq, 1 in batch).
 *
 * The first binding of a class is compiled by the pipeline. The second builds the class's
 * template: the pipeline runs at a grid of bindings of the class (degree + 1 consecutive values
 * of each symbol not pinned to a constant), each number's Newton differences over the grid are
 * kept (exact integers), and the template is checked by instantiating the first binding and
 * comparing with its pipeline plan (structure, every number, memory plan, segments); any
 * difference and the class is
 * compiled as before. Later bindings of the class run only the pipeline's front (clone,
 * specialize, fold: the graph of the binding, exactly) and finish (memory plan, partition),
 * with the steps copied from the template and every number evaluated at the binding. Guards:
 * the class (coincidences), the symbol range, the front's graph having the template's values,
 * and checked arithmetic; a failed guard compiles the binding with the pipeline. Float
 * constants and scalars must be the same at every grid point (else no template): a mean's
 * 1/count over a symbolic dim is not a polynomial.
 *
 * A min / max / eq / lt atom over a symbol (BERT's min(seq, 64)) is decided per class: which way
 * it goes is part of the class, and within it the atom is one of its operands.
 *
 * Not covered (the pipeline always): graphs with if / loop nodes or data-dependent dims, a
 * symbol under a division or modulo (seq//2: not one polynomial over consecutive values), host
 * steps, the test step hook, more than TM_MAX_FREE free symbols or TM_MAX_GRID grid points. */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TM_MAX_FREE 4
#define TM_MAX_GRID 64
#define TM_MAX_CLASSES 16
#define TM_SEARCH 24  /* grid windows tried per template build */
#define TM_ATTEMPTS 3 /* template builds tried per class before it is compiled for good */

typedef struct {
    int32_t grid; /* grid point (mixed radix over the free symbols, the first fastest) */
    int64_t coef; /* the number's Newton difference there */
} tm_term;

typedef struct {
    int32_t *sig;        /* per quantity: the class (see signature) */
    int64_t *first_syms; /* the class's first binding (compiled by the pipeline) */
    bool refused;        /* no template for this class: every binding is compiled */
    int attempts;        /* template builds that failed */
    char why[200];       /* ... because */
    bool ready;
    /* the template: the pipeline's graph and steps at the grid's first point */
    gr_compiled base;
    int n_front;         /* values of base.g before lowering added its temporaries */
    int n_free;
    int free_sym[TM_MAX_FREE];
    int64_t origin[TM_MAX_FREE]; /* the grid's first point, per free symbol */
    int deg[TM_MAX_FREE];
    int n_grid;
    int n_nums;
    int *term_first;     /* n_nums + 1 */
    tm_term *terms;
    int n_terms;
    int64_t *nums;       /* n_nums: scratch of an instantiation */
    long instantiated;
} tm_class;

struct gr_rt_tmpl {
    bool eligible;
    char why[200];       /* not eligible because */
    gr_graph *q_graph;   /* a clone of the session's graph holding the quantities' expressions */
    int n_q;
    gr_dim *q;           /* symbolic quantities (distinct expressions) */
    int n_pw;
    int32_t *pw;         /* the min / max / eq / lt atoms of the quantities (expression ids) */
    int n_sig;           /* n_q + n_pw: a signature's length */
    int n_c;
    int64_t *consts;     /* concrete quantities, sorted, distinct (0 and 1 included) */
    int *sym_q;          /* per symbol: its quantity index */
    int *deg;            /* per symbol: degree bound of the numbers */
    int64_t *qval;       /* scratch: the quantities' values */
    int32_t *order;      /* scratch: sort order */
    int32_t *sig;        /* scratch: a binding's signature */
    tm_class cls[TM_MAX_CLASSES];
    int n_cls;
    long instantiated, fallbacks;
};

/* ==== quantities and classes ======================================================================= */

typedef GR_VEC(int64_t) i64_vec;
typedef GR_VEC(gr_dim) dim_vec;
typedef GR_VEC(int32_t) i32_vec;

static gr_status add_quantity(gr_graph *g, gr_dim d, bool *seen, dim_vec *q, i64_vec *c) {
    if (!gr_dx_is_sym(d)) return gr_vec_push(c, d.size);
    if (d.expr < 0 || d.expr >= g->dx.len) return GR_ERR_INTERNAL;
    if (seen[d.expr]) return GR_OK;
    seen[d.expr] = true;
    return gr_vec_push(q, d);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static bool has_control(const gr_graph *g) {
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.data[i].op == GR_OP_IF || g->nodes.data[i].op == GR_OP_LOOP) return true;
    return false;
}

/* Degree bound of expression id in symbol sym, as a polynomial once every min / max / eq / lt
 * atom is decided (the atoms' outcomes are part of a binding's class); -1: sym under a division
 * or modulo (the quotient of consecutive values is not one polynomial). memo: per expression,
 * degree + 2, 0 = not yet known. */
static int degree_in(const gr_graph *g, int32_t id, int sym, int8_t *memo, int depth) {
    if (id < 0 || id >= g->dx.len || depth > 256) return -1;
    if (memo[id]) return memo[id] - 2;
    const gr_dexpr *e = &g->dx.data[id];
    int d;
    switch (e->op) {
    case GR_DX_SYM: d = e->k == sym; break;
    case GR_DX_CONST: d = 0; break;
    default: {
        int a = degree_in(g, e->a, sym, memo, depth + 1), b = degree_in(g, e->b, sym, memo, depth + 1);
        if (a < 0 || b < 0) d = -1;
        else if (e->op == GR_DX_ADD || e->op == GR_DX_MIN || e->op == GR_DX_MAX) d = GR_MAX(a, b);
        else if (e->op == GR_DX_MUL) d = a + b;
        else if (e->op == GR_DX_EQ || e->op == GR_DX_LT) d = 0;
        else d = a > 0 || b > 0 ? -1 : 0; /* DIV, MOD */
        break;
    }
    }
    if (d > 60) d = -1;
    memo[id] = (int8_t)(d + 2);
    return d;
}

/* Adds the min / max / eq / lt atoms under expression id to pw (seen: per expression). */
static gr_status collect_atoms(const gr_graph *g, int32_t id, bool *seen, i32_vec *pw, int depth) {
    if (id < 0 || id >= g->dx.len || depth > 256 || seen[id]) return GR_OK;
    seen[id] = true;
    const gr_dexpr *e = &g->dx.data[id];
    if (e->op == GR_DX_SYM || e->op == GR_DX_CONST) return GR_OK;
    if (e->op == GR_DX_MIN || e->op == GR_DX_MAX || e->op == GR_DX_EQ || e->op == GR_DX_LT) GR_TRY(gr_vec_push(pw, id));
    GR_TRY(collect_atoms(g, e->a, seen, pw, depth + 1));
    return collect_atoms(g, e->b, seen, pw, depth + 1);
}

/* The quantities of s's graph: every dim, suffix product and symbolic attribute. */
static gr_status tmpl_init(gr_session_t s, gr_rt_tmpl *t) {
    const gr_graph *src = s->graph;
    int n_syms = src->syms.len;
    if (n_syms == 0) return snprintf(t->why, sizeof t->why, "no symbolic dims"), GR_OK;
    for (int k = 0; k < n_syms; k++)
        if (src->syms.data[k].data_value >= 0)
            return snprintf(t->why, sizeof t->why, "data-dependent dim '%s'", src->syms.data[k].name), GR_OK;
    if (has_control(src)) return snprintf(t->why, sizeof t->why, "if / loop nodes"), GR_OK;
    GR_TRY(gr_ir_graph_clone_borrow(src, &t->q_graph));
    gr_graph *g = t->q_graph;
    dim_vec q = {0};
    i64_vec c = {0};
    gr_status st = GR_OK;
    size_t seen_cap = (size_t)g->dx.len * 4 + 64; /* products add expressions */
    bool *seen = gr_calloc(seen_cap, sizeof(bool));
    if (!seen) return GR_ERR_NOMEM;
    st = gr_vec_push(&c, 0);
    if (st == GR_OK) st = gr_vec_push(&c, 1);
    for (int k = 0; k < n_syms && st == GR_OK; k++) /* the symbols themselves come first */
        for (int id = 0; id < g->dx.len; id++)
            if (g->dx.data[id].op == GR_DX_SYM && g->dx.data[id].k == k) {
                st = add_quantity(g, (gr_dim){-1, id}, seen, &q, &c);
                break;
            }
    for (int v = 0; v < g->values.len && st == GR_OK; v++) {
        const gr_ir_value *x = &g->values.data[v];
        if (!x->typed) continue;
        gr_dim prod = gr_dx_const(1);
        for (int d = x->ndim - 1; d >= 0 && st == GR_OK; d--) {
            gr_dim dim = x->dims[d];
            st = add_quantity(g, dim, seen, &q, &c);
            if (st == GR_OK) st = gr_dx_binary(g, GR_DX_MUL, prod, dim, &prod);
            if (st == GR_OK && g->dx.len > (int)seen_cap) st = gr_error(GR_ERR_UNSUPPORTED, "too many dim products");
            if (st == GR_OK) st = add_quantity(g, prod, seen, &q, &c);
        }
    }
    for (int n = 0; n < g->nodes.len && st == GR_OK; n++) {
        const gr_ir_node *nd = &g->nodes.data[n];
        for (int a = 0; a < nd->n_attr && st == GR_OK; a++) {
            const gr_ir_attr *at = &nd->attrs[a];
            if (at->sym) st = add_quantity(g, (gr_dim){-1, at->expr}, seen, &q, &c);
            if (at->exprs)
                for (int i = 0; i < at->n && st == GR_OK; i++)
                    if (at->exprs[i] != GR_SYM_NONE) st = add_quantity(g, (gr_dim){-1, at->exprs[i]}, seen, &q, &c);
        }
    }
    gr_free(seen, seen_cap * sizeof(bool));
    if (st == GR_ERR_UNSUPPORTED || st == GR_ERR_SHAPE) { /* products past the simplifier: no templates */
        snprintf(t->why, sizeof t->why, "dim products past the simplifier's limits");
        gr_error_clear();
        st = GR_OK;
        goto done;
    }
    if (st != GR_OK) goto done;
    qsort(c.data, (size_t)c.len, sizeof(int64_t), cmp_i64);
    int nc = 0;
    for (int i = 0; i < c.len; i++)
        if (!nc || c.data[nc - 1] != c.data[i]) c.data[nc++] = c.data[i];
    c.len = nc;
    gr_vec_shrink(&c);
    gr_vec_shrink(&q);
    if (c.cap != c.len || q.cap != q.len) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    /* t owns them from here (freed by gr_rt_tmpl_free with these sizes) */
    t->n_q = q.len;
    t->q = q.data;
    t->n_c = c.len;
    t->consts = c.data;
    memset(&q, 0, sizeof q);
    memset(&c, 0, sizeof c);
    t->qval = gr_malloc(sizeof(int64_t) * (size_t)(t->n_q + 1));
    t->order = gr_malloc(sizeof(int32_t) * (size_t)(t->n_q + 1));
    t->sym_q = gr_malloc(sizeof(int) * (size_t)n_syms);
    t->deg = gr_calloc((size_t)n_syms, sizeof(int));
    if (!t->qval || !t->order || !t->sym_q || !t->deg) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    for (int k = 0; k < n_syms; k++) {
        t->sym_q[k] = -1;
        for (int i = 0; i < t->n_q; i++)
            if (g->dx.data[t->q[i].expr].op == GR_DX_SYM && g->dx.data[t->q[i].expr].k == k) t->sym_q[k] = i;
    }
    {
        size_t cap = (size_t)g->dx.len;
        int8_t *memo = gr_calloc(cap + 1, 1);
        bool *seen2 = gr_calloc(cap + 1, sizeof(bool));
        i32_vec pw = {0};
        if (!memo || !seen2) st = GR_ERR_NOMEM;
        for (int k = 0; k < n_syms && st == GR_OK; k++) {
            memset(memo, 0, cap + 1);
            for (int i = 0; i < t->n_q && st == GR_OK; i++) {
                int d = degree_in(g, t->q[i].expr, k, memo, 0);
                if (d < 0) {
                    char buf[96];
                    gr_dx_str(g, t->q[i], buf, sizeof buf);
                    snprintf(t->why, sizeof t->why, "dim '%s' divides '%s'", buf, g->syms.data[k].name);
                    st = GR_ERR_UNSUPPORTED;
                    break;
                }
                t->deg[k] = GR_MAX(t->deg[k], d);
            }
        }
        for (int i = 0; i < t->n_q && st == GR_OK; i++) st = collect_atoms(g, t->q[i].expr, seen2, &pw, 0);
        if (st == GR_OK) gr_vec_shrink(&pw);
        if (st == GR_OK && pw.len != pw.cap) st = GR_ERR_NOMEM;
        if (st == GR_OK) {
            t->pw = pw.data;
            t->n_pw = pw.len;
        } else gr_vec_free(&pw);
        if (memo) gr_free(memo, cap + 1);
        if (seen2) gr_free(seen2, (cap + 1) * sizeof(bool));
        if (st == GR_ERR_UNSUPPORTED) { /* t->why says why: no templates */
            st = GR_OK;
            goto done;
        }
        if (st != GR_OK) goto done;
    }
    t->n_sig = t->n_q + t->n_pw;
    t->sig = gr_malloc(sizeof(int32_t) * (size_t)(t->n_sig + 1));
    if (!t->sig) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    t->eligible = true;
done:
    gr_vec_free(&q);
    gr_vec_free(&c);
    return st;
}

/* sort by value, then index */
static _Thread_local const int64_t *sort_vals;
static int cmp_order(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_vals[x] != sort_vals[y]) return sort_vals[x] < sort_vals[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* t->sig for binding syms: per quantity, -(i + 1) when it equals constant i, else the first
 * quantity of equal value. false: a quantity does not evaluate (overflow). */
static bool signature(gr_rt_tmpl *t, const int64_t *syms) {
    for (int i = 0; i < t->n_q; i++) {
        if (gr_dx_eval(t->q_graph, t->q[i], syms, &t->qval[i]) != GR_OK) return gr_error_clear(), false;
        t->order[i] = i;
    }
    sort_vals = t->qval;
    qsort(t->order, (size_t)t->n_q, sizeof(int32_t), cmp_order);
    for (int r = 0; r < t->n_q;) {
        int e = r;
        while (e < t->n_q && t->qval[t->order[e]] == t->qval[t->order[r]]) e++;
        int64_t v = t->qval[t->order[r]];
        int32_t cls = t->order[r]; /* the smallest index of the run */
        int lo = 0, hi = t->n_c - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (t->consts[mid] == v) {
                cls = -(mid + 1);
                break;
            }
            if (t->consts[mid] < v) lo = mid + 1;
            else hi = mid - 1;
        }
        for (int j = r; j < e; j++) t->sig[t->order[j]] = cls;
        r = e;
    }
    /* which way every min / max / eq / lt goes */
    for (int j = 0; j < t->n_pw; j++) {
        const gr_dexpr *e = &t->q_graph->dx.data[t->pw[j]];
        int64_t a, b;
        if (gr_dx_eval(t->q_graph, (gr_dim){-1, e->a}, syms, &a) != GR_OK ||
            gr_dx_eval(t->q_graph, (gr_dim){-1, e->b}, syms, &b) != GR_OK)
            return gr_error_clear(), false;
        t->sig[t->n_q + j] = (a > b) - (a < b);
    }
    return true;
}

static tm_class *find_class(gr_rt_tmpl *t) {
    for (int i = 0; i < t->n_cls; i++)
        if (!memcmp(t->cls[i].sig, t->sig, sizeof(int32_t) * (size_t)t->n_sig)) return &t->cls[i];
    return NULL;
}

/* ==== the numbers of a plan ========================================================================= */
/* One walk over what lowering and fusion made, reading its numbers into a vector or writing them
 * from one. exact: a number that must be the same at every binding of the class (float bits). */
typedef struct {
    bool write;
    GR_VEC(int64_t) v;
    GR_VEC(uint8_t) exact;
    const int64_t *src;
    int pos, n_src;
    gr_status st;
} tm_walk;

static void num(tm_walk *w, int64_t *f, bool exact) {
    if (w->st != GR_OK) return;
    if (w->write) {
        if (w->pos >= w->n_src) w->st = gr_error(GR_ERR_INTERNAL, "plan template: fewer numbers than the plan holds");
        else *f = w->src[w->pos++];
        return;
    }
    if (gr_vec_push(&w->v, *f) != GR_OK || gr_vec_push(&w->exact, (uint8_t)exact) != GR_OK) w->st = GR_ERR_NOMEM;
}

static void num_f(tm_walk *w, double *f) {
    int64_t bits;
    memcpy(&bits, f, sizeof bits);
    num(w, &bits, true);
    if (w->write) memcpy(f, &bits, sizeof bits);
}

static void walk_access(tm_walk *w, const gr_kernel *k, gr_kaccess *a) {
    num(w, &a->offset, false);
    for (int d = 0; d < k->n_outer; d++) num(w, &a->stride[d], false);
    for (int d = 0; d < k->n_inner; d++) num(w, &a->inner_stride[d], false);
    num(w, &a->index_stride, false);
    num(w, &a->index_extent, false);
}

static void walk_kernel(tm_walk *w, gr_kernel *k) {
    for (int d = 0; d < k->n_outer; d++) num(w, &k->outer[d], false);
    for (int d = 0; d < k->n_inner; d++) num(w, &k->inner[d], false);
    for (int i = 0; i < k->nodes.len; i++) {
        gr_kexpr *e = &k->nodes.data[i];
        if (e->op == GR_KX_CONST) {
            if (gr_dtype_is_float(e->dtype)) num_f(w, &e->f);
            else num(w, &e->i, false);
        } else if (e->op == GR_KX_LOAD) walk_access(w, k, &e->access);
    }
    for (int j = 0; j < k->n_stages; j++)
        if (k->stages[j].kind == GR_KS_STORE) walk_access(w, k, &k->stages[j].access);
}

static void walk_libcall(tm_walk *w, gr_libcall *c) {
    int64_t *ints[] = {&c->m, &c->n, &c->k, &c->batch, &c->lda, &c->ldb, &c->ldc, &c->batch_stride_a, &c->batch_stride_b,
                       &c->batch_stride_c, &c->batch_stride_bias, &c->heads, &c->kv_heads, &c->seq_q, &c->seq_k,
                       &c->head_dim, &c->head_dim_v};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) num(w, ints[i], false);
    for (int i = 0; i < 4; i++) num(w, &c->mask_stride[i], false);
    for (int i = 0; i < 3; i++) {
        num(w, &c->q_stride[i], false);
        num(w, &c->k_stride[i], false);
        num(w, &c->v_stride[i], false);
        num(w, &c->o_stride[i], false);
    }
    num_f(w, &c->alpha);
}

static void walk(tm_walk *w, gr_compiled *c, int n_front) {
    for (int v = n_front; v < c->g->values.len; v++) {
        gr_ir_value *x = &c->g->values.data[v];
        for (int d = 0; d < x->ndim; d++) num(w, &x->dims[d].size, false);
    }
    for (int i = 0; i < c->steps.len; i++) {
        gr_step *st = &c->steps.data[i];
        for (int a = 0; a < st->n_args; a++) {
            gr_step_arg *arg = &st->args[a];
            if (arg->kind == GR_ARG_VALUE) num(w, &arg->elem_offset, false);
            else if (arg->kind == GR_ARG_LITERAL) {
                gr_kparam_kind pk = st->kind == GR_STEP_KERNEL && a < st->kernel->n_params ? st->kernel->params[a].kind : GR_KP_BUFFER;
                num(w, &arg->literal.i, !(pk == GR_KP_SHAPE || pk == GR_KP_SCALAR_I));
            }
        }
        if (st->kind == GR_STEP_KERNEL) walk_kernel(w, st->kernel);
        else if (st->kind == GR_STEP_LIBCALL) walk_libcall(w, &st->call);
    }
}

static void walk_free(tm_walk *w) {
    gr_vec_free(&w->v);
    gr_vec_free(&w->exact);
}

/* ==== structure ================================================================================== */
/* Whether o has b's structure: everything but the numbers walk() visits. why: the first difference. */
static bool same_kernel(const gr_kernel *a, const gr_kernel *b) {
    if (strcmp(a->name, b->name) || a->n_params != b->n_params || a->n_outer != b->n_outer || a->n_inner != b->n_inner ||
        a->n_points_param != b->n_points_param || a->n_stages != b->n_stages || a->nodes.len != b->nodes.len ||
        a->source_node != b->source_node || a->var_outer != b->var_outer || a->var_inner != b->var_inner)
        return false;
    for (int p = 0; p < a->n_params; p++)
        if (a->params[p].kind != b->params[p].kind || a->params[p].dtype != b->params[p].dtype ||
            a->params[p].written != b->params[p].written || strcmp(a->params[p].name, b->params[p].name))
            return false;
    for (int i = 0; i < a->nodes.len; i++) {
        const gr_kexpr *x = &a->nodes.data[i], *y = &b->nodes.data[i];
        if (x->op != y->op || x->dtype != y->dtype || x->fn != y->fn || x->a != y->a || x->b != y->b || x->c != y->c ||
            x->which != y->which || x->param != y->param)
            return false;
        if (x->op != GR_KX_CONST && (x->i != y->i || memcmp(&x->f, &y->f, sizeof x->f))) return false;
        if (x->op == GR_KX_LOAD && (x->access.index != y->access.index || x->access.origin != y->access.origin)) return false;
    }
    for (int j = 0; j < a->n_stages; j++) {
        const gr_kstage *x = &a->stages[j], *y = &b->stages[j];
        if (x->kind != y->kind || x->value != y->value || x->reduce != y->reduce || x->over_inner != y->over_inner ||
            x->param != y->param || x->access.index != y->access.index)
            return false;
    }
    bool same = false;
    if (gr_kernel_structure_equal(a, b, &same) != GR_OK) return gr_error_clear(), false;
    return same;
}

static bool same_structure(const gr_compiled *b, int b_front, const gr_compiled *o, int o_front, char *why, size_t n) {
    if (b_front != o_front || b->g->values.len != o->g->values.len || b->g->nodes.len != o->g->nodes.len)
        return snprintf(why, n, "the graphs differ (%d / %d values)", b->g->values.len, o->g->values.len), false;
    for (int v = 0; v < b->g->values.len; v++) {
        const gr_ir_value *x = &b->g->values.data[v], *y = &o->g->values.data[v];
        if (x->kind != y->kind || x->dtype != y->dtype || x->ndim != y->ndim || x->var_dims != y->var_dims ||
            x->placement != y->placement || x->producer != y->producer || x->out_slot != y->out_slot ||
            x->typed != y->typed || x->inplace_of != y->inplace_of || strcmp(x->name, y->name))
            return snprintf(why, n, "value '%s' differs", x->name), false;
    }
    if (b->steps.len != o->steps.len) return snprintf(why, n, "%d / %d steps", b->steps.len, o->steps.len), false;
    for (int i = 0; i < b->steps.len; i++) {
        const gr_step *x = &b->steps.data[i], *y = &o->steps.data[i];
        bool same = x->kind == y->kind && x->kind != GR_STEP_HOST && x->node == y->node && x->n_args == y->n_args &&
                    x->out_value == y->out_value;
        for (int a = 0; same && a < x->n_args; a++)
            same = x->args[a].kind == y->args[a].kind && x->args[a].value == y->args[a].value;
        if (same && x->kind == GR_STEP_KERNEL) same = same_kernel(x->kernel, y->kernel);
        if (same && x->kind == GR_STEP_LIBCALL) {
            const gr_libcall *p = &x->call, *q = &y->call;
            same = p->kind == q->kind && p->dtype == q->dtype && p->trans_a == q->trans_a && p->trans_b == q->trans_b &&
                   p->bias == q->bias && p->epilogue == q->epilogue && p->residual == q->residual && p->causal == q->causal && p->has_mask == q->has_mask &&
                   p->mask_dtype == q->mask_dtype && p->mask_group == q->mask_group &&
                   p->mask_group_first == q->mask_group_first && !strcmp(p->name, q->name);
        }
        if (!same) return snprintf(why, n, "step %d differs%s", i, x->kind == GR_STEP_HOST ? " (a host step)" : ""), false;
    }
    return true;
}

/* Whether a and b are the same plan: structure, every number, the memory plan and the segments
 * (GR_ERR_UNSUPPORTED with the first difference in why). */
static gr_status same_plans(gr_compiled *a, int a_front, gr_compiled *b, int b_front, char *why, size_t n) {
    if (!same_structure(a, a_front, b, b_front, why, n)) return GR_ERR_UNSUPPORTED;
    tm_walk x = {0}, y = {0};
    walk(&x, a, a_front);
    walk(&y, b, b_front);
    gr_status st = x.st != GR_OK ? x.st : y.st;
    if (st == GR_OK && (x.v.len != y.v.len || (x.v.len && memcmp(x.v.data, y.v.data, sizeof(int64_t) * (size_t)x.v.len)))) {
        int j = 0;
        while (j < x.v.len && j < y.v.len && x.v.data[j] == y.v.data[j]) j++;
        snprintf(why, n, "number %d of %d", j, x.v.len);
        st = GR_ERR_UNSUPPORTED;
    }
    walk_free(&x);
    walk_free(&y);
    if (st != GR_OK) return st;
    const gr_mem_plan *p = &a->mem, *q = &b->mem;
    if (p->n_values != q->n_values || p->arena_bytes != q->arena_bytes || p->const_bytes != q->const_bytes)
        return snprintf(why, n, "memory plans of %zu / %zu bytes", p->arena_bytes, q->arena_bytes), GR_ERR_UNSUPPORTED;
    for (int v = 0; v < p->n_values; v++) {
        const gr_value_store *u = &p->values[v], *w = &q->values[v];
        if (u->kind != w->kind || u->offset != w->offset || u->bytes != w->bytes || u->alias_of != w->alias_of ||
            u->alias_elem_offset != w->alias_elem_offset || u->first_step != w->first_step || u->last_step != w->last_step)
            return snprintf(why, n, "storage of value %d", v), GR_ERR_UNSUPPORTED;
    }
    if (a->segs.len != b->segs.len) return snprintf(why, n, "segments"), GR_ERR_UNSUPPORTED;
    for (int i = 0; i < a->segs.len; i++)
        if (a->segs.data[i].first_step != b->segs.data[i].first_step || a->segs.data[i].n_steps != b->segs.data[i].n_steps ||
            a->segs.data[i].graphable != b->segs.data[i].graphable)
            return snprintf(why, n, "segment %d", i), GR_ERR_UNSUPPORTED;
    for (int i = 0; i < a->steps.len; i++)
        if (a->steps.data[i].segment != b->steps.data[i].segment) return snprintf(why, n, "step %d's segment", i), GR_ERR_UNSUPPORTED;
    return GR_OK;
}

/* ==== instantiation ================================================================================= */
/* C(t, k) for k = 0..deg, t any integer (exact: C(t, i) * (t - i) is divisible by i + 1). */
static bool binomials(int64_t t, int deg, int64_t *out) {
    __int128 c = 1;
    out[0] = 1;
    for (int i = 0; i < deg; i++) {
        c = c * (t - i) / (i + 1);
        if (c > INT64_MAX || c < INT64_MIN) return false;
        out[i + 1] = (int64_t)c;
    }
    return true;
}

/* cls->nums at binding syms. false: an overflow (the guard fails). */
static bool eval_numbers(const tm_class *cls, const int64_t *syms, int64_t *nums) {
    int64_t b[TM_MAX_FREE][8];
    for (int i = 0; i < cls->n_free; i++)
        if (!binomials(syms[cls->free_sym[i]] - cls->origin[i], cls->deg[i], b[i])) return false;
    int64_t wgt[TM_MAX_GRID];
    for (int gp = 0; gp < cls->n_grid; gp++) {
        int64_t w = 1;
        int rest = gp;
        for (int i = 0; i < cls->n_free; i++) {
            int digit = rest % (cls->deg[i] + 1);
            rest /= cls->deg[i] + 1;
            if (gr_mul_overflow(w, b[i][digit], &w)) return false;
        }
        wgt[gp] = w;
    }
    for (int j = 0; j < cls->n_nums; j++) {
        int64_t v = 0;
        for (int e = cls->term_first[j]; e < cls->term_first[j + 1]; e++) {
            int64_t p;
            if (gr_mul_overflow(cls->terms[e].coef, wgt[cls->terms[e].grid], &p) || gr_add_overflow(v, p, &v)) return false;
        }
        nums[j] = v;
    }
    return true;
}

/* The plan of binding syms from cls's template into *out. GR_ERR_UNSUPPORTED (no message kept
 * needed): a guard failed, compile instead. */
static gr_status instantiate(tm_class *cls, const gr_graph *src, const int64_t *syms, const gr_pipeline_opts *po,
                             gr_compiled *out) {
    memset(out, 0, sizeof *out);
    if (!eval_numbers(cls, syms, cls->nums)) return gr_error(GR_ERR_UNSUPPORTED, "plan template: a number overflows");
    gr_compiled c;
    GR_TRY(gr_pass_pipeline_front(src, syms, po, &c));
    const gr_graph *bg = cls->base.g;
    gr_status st = GR_OK;
    if (c.g->values.len != cls->n_front || c.g->nodes.len != bg->nodes.len)
        st = gr_error(GR_ERR_UNSUPPORTED, "plan template: the graph of the binding differs");
    for (int v = 0; v < cls->n_front && st == GR_OK; v++)
        if (c.g->values.data[v].kind != bg->values.data[v].kind || c.g->values.data[v].ndim != bg->values.data[v].ndim)
            st = gr_error(GR_ERR_UNSUPPORTED, "plan template: value '%s' differs", bg->values.data[v].name);
    /* lowering's temporaries */
    for (int v = cls->n_front; v < bg->values.len && st == GR_OK; v++) {
        int nv = -1;
        st = gr_ir_add_value(c.g, NULL, GR_VAL_NODE, &nv);
        if (st != GR_OK) break;
        const gr_ir_value *bx = &bg->values.data[v];
        gr_ir_value *x = &c.g->values.data[nv];
        if (nv != v || strcmp(x->name, bx->name)) {
            st = gr_error(GR_ERR_UNSUPPORTED, "plan template: temporary '%s' is named '%s'", bx->name, x->name);
            break;
        }
        x->dtype = bx->dtype;
        x->ndim = bx->ndim;
        for (int d = 0; d < bx->ndim; d++) x->dims[d] = (gr_dim){bx->dims[d].size, GR_SYM_NONE};
        x->typed = bx->typed;
        x->placement = bx->placement;
        x->var_dims = bx->var_dims;
        x->inplace_of = bx->inplace_of;
        x->producer = bx->producer;
        x->out_slot = bx->out_slot;
    }
    /* the steps, each kernel a copy of the template's */
    int n = cls->base.steps.len;
    if (st == GR_OK && n > 0) {
        c.steps.data = gr_malloc(sizeof(gr_step) * (size_t)n);
        if (!c.steps.data) st = GR_ERR_NOMEM;
        else {
            memcpy(c.steps.data, cls->base.steps.data, sizeof(gr_step) * (size_t)n);
            for (int i = 0; i < n; i++) c.steps.data[i].kernel = NULL, c.steps.data[i].reason = NULL;
            c.steps.len = c.steps.cap = n;
            for (int i = 0; i < n && st == GR_OK; i++)
                if (cls->base.steps.data[i].kind == GR_STEP_KERNEL)
                    st = gr_kernel_clone(cls->base.steps.data[i].kernel, &c.steps.data[i].kernel);
        }
    }
    if (st == GR_OK) {
        tm_walk w = {.write = true, .src = cls->nums, .n_src = cls->n_nums};
        walk(&w, &c, cls->n_front);
        st = w.st;
        if (st == GR_OK && w.pos != w.n_src) st = gr_error(GR_ERR_INTERNAL, "plan template: more numbers than the plan holds");
    }
    if (st == GR_OK) st = gr_pass_pipeline_finish(po, &c);
    if (st != GR_OK) {
        gr_compiled_free(&c);
        return st;
    }
    *out = c;
    return GR_OK;
}

/* ==== building a class's template ====================================================================== */
static gr_status compile_parts(const gr_graph *src, const int64_t *syms, const gr_pipeline_opts *po, gr_compiled *c, int *n_front) {
    GR_TRY(gr_pass_pipeline_front(src, syms, po, c));
    *n_front = c->g->values.len;
    gr_status st = gr_pass_pipeline_steps(po, c);
    if (st == GR_OK) st = gr_pass_pipeline_finish(po, c);
    if (st != GR_OK) gr_compiled_free(c);
    return st;
}

/* Newton differences along each free symbol of the grid's numbers f[gp * n + j], in place. */
static bool differences(tm_class *cls, int64_t *f, int n) {
    int stride = 1;
    for (int i = 0; i < cls->n_free; i++) {
        int r = cls->deg[i] + 1;
        for (int gp = 0; gp < cls->n_grid; gp++) {
            if ((gp / stride) % r != 0) continue; /* gp starts a line along symbol i */
            for (int k = 1; k < r; k++)
                for (int m = r - 1; m >= k; m--)
                    for (int j = 0; j < n; j++) {
                        int64_t *hi = &f[(size_t)(gp + m * stride) * (size_t)n + (size_t)j];
                        int64_t lo = f[(size_t)(gp + (m - 1) * stride) * (size_t)n + (size_t)j];
                        if (__builtin_sub_overflow(*hi, lo, hi)) return false;
                    }
        }
        stride *= r;
    }
    return true;
}

static void class_drop_template(tm_class *cls) {
    gr_compiled_free(&cls->base);
    if (cls->term_first) gr_free(cls->term_first, sizeof(int) * (size_t)(cls->n_nums + 1));
    if (cls->terms) gr_free(cls->terms, sizeof(tm_term) * (size_t)cls->n_terms);
    if (cls->nums) gr_free(cls->nums, sizeof(int64_t) * (size_t)(cls->n_nums + 1));
    cls->term_first = NULL;
    cls->terms = NULL;
    cls->nums = NULL;
    cls->n_terms = cls->n_nums = 0;
    cls->ready = false;
}

#define REFUSE(...) (snprintf(cls->why, sizeof cls->why, __VA_ARGS__), GR_ERR_UNSUPPORTED)

/* Builds cls's template at the second binding of the class, syms (GR_ERR_UNSUPPORTED with
 * cls->why: no template for this class). */
static gr_status build_template(gr_session_t s, gr_rt_tmpl *t, tm_class *cls, const int64_t *syms, const gr_pipeline_opts *po) {
    const gr_graph *src = s->graph;
    int n_syms = src->syms.len;
    cls->n_free = 0;
    cls->n_grid = 1;
    for (int k = 0; k < n_syms; k++) {
        if (t->deg[k] == 0 || t->sym_q[k] < 0 || cls->sig[t->sym_q[k]] < 0) continue; /* no number depends on it, or pinned */
        if (cls->n_free == TM_MAX_FREE) return REFUSE("more than %d free symbols", TM_MAX_FREE);
        int d = t->deg[k];
        if (d > 7 || cls->n_grid * (d + 1) > TM_MAX_GRID) return REFUSE("a grid of more than %d bindings", TM_MAX_GRID);
        cls->free_sym[cls->n_free] = k;
        cls->deg[cls->n_free] = d;
        cls->n_free++;
        cls->n_grid *= d + 1;
    }
    int64_t *pt = gr_malloc(sizeof(int64_t) * (size_t)(n_syms + 1));
    if (!pt) return GR_ERR_NOMEM;
    memcpy(pt, syms, sizeof(int64_t) * (size_t)n_syms);
    /* the grid: d + 1 consecutive values of each free symbol near this binding, every point of the
     * class (a window whose values coincide with something is passed over), the first binding off
     * it (it checks the fit) */
    bool found = false;
    for (int j = 0; j < TM_SEARCH && !found; j++) {
        bool ok = true, x1_on = true;
        for (int i = 0; i < cls->n_free && ok; i++) {
            int k = cls->free_sym[i], d = cls->deg[i];
            int64_t a = j % 2 == 0 ? syms[k] - d - j / 2 : syms[k] + (j + 1) / 2 - 1; /* x-d, x, x-d-1, x+1, ... */
            const gr_ir_symbol *sym = &src->syms.data[k];
            ok = a >= sym->lo && a <= sym->hi - d;
            cls->origin[i] = a;
            if (cls->first_syms[k] < a || cls->first_syms[k] > a + d) x1_on = false;
        }
        for (int k = 0; ok && k < n_syms; k++) /* the pinned symbols are the same in both */
            if (cls->first_syms[k] != syms[k]) {
                bool is_free = false;
                for (int i = 0; i < cls->n_free; i++) is_free |= cls->free_sym[i] == k;
                if (!is_free) x1_on = false;
            }
        if (!ok || x1_on) continue;
        for (int gp = 0; gp < cls->n_grid && ok; gp++) {
            int rest = gp;
            for (int i = 0; i < cls->n_free; i++) {
                pt[cls->free_sym[i]] = cls->origin[i] + rest % (cls->deg[i] + 1);
                rest /= cls->deg[i] + 1;
            }
            ok = signature(t, pt) && !memcmp(t->sig, cls->sig, sizeof(int32_t) * (size_t)t->n_sig);
        }
        found = ok;
    }
    if (!found) {
        gr_free(pt, sizeof(int64_t) * (size_t)(n_syms + 1));
        return REFUSE("no grid of bindings of this class near binding %d", (int)syms[cls->n_free ? cls->free_sym[0] : 0]);
    }
    gr_pipeline_opts plain = *po;
    plain.after_pass = NULL;
    plain.user = NULL;
    plain.scratch = NULL;
    int64_t *f = NULL;
    size_t f_len = 0;
    gr_status st = GR_OK;
    char why[160] = "";
    for (int gp = 0; gp < cls->n_grid && st == GR_OK; gp++) {
        int rest = gp;
        for (int i = 0; i < cls->n_free; i++) {
            pt[cls->free_sym[i]] = cls->origin[i] + rest % (cls->deg[i] + 1);
            rest /= cls->deg[i] + 1;
        }
        if (!signature(t, pt) || memcmp(t->sig, cls->sig, sizeof(int32_t) * (size_t)t->n_sig)) {
            st = REFUSE("grid binding %d has other coincidences of dims", gp);
            break;
        }
        gr_compiled c;
        int n_front = 0;
        st = compile_parts(src, pt, &plain, &c, &n_front);
        if (st != GR_OK) {
            if (st != GR_ERR_NOMEM) st = REFUSE("grid binding %d does not compile: %.120s", gp, gr_last_error());
            break;
        }
        gr_compiled *cp = &c;
        if (gp == 0) { /* the template: its graph and steps (memory plan and segments are made per binding) */
            cls->base = c;
            cls->n_front = n_front;
            gr_mem_plan_free(&cls->base.mem);
            gr_segment_list_free(&cls->base.segs);
            memset(&cls->base.mem, 0, sizeof cls->base.mem);
            memset(&cls->base.segs, 0, sizeof cls->base.segs);
            cp = &cls->base;
            for (int i = 0; i < c.steps.len && st == GR_OK; i++)
                if (c.steps.data[i].kind == GR_STEP_HOST) st = REFUSE("a host step (node %d)", c.steps.data[i].node);
            if (st != GR_OK) break;
        } else if (!same_structure(&cls->base, cls->n_front, &c, n_front, why, sizeof why)) {
            gr_compiled_free(&c);
            st = REFUSE("grid binding %d: %.150s", gp, why);
            break;
        }
        tm_walk w = {0};
        walk(&w, cp, n_front);
        if (w.st == GR_OK && gp == 0) {
            cls->n_nums = w.v.len;
            f_len = (size_t)cls->n_grid * (size_t)w.v.len + 1;
            f = gr_malloc(sizeof(int64_t) * f_len);
            if (!f) w.st = GR_ERR_NOMEM;
        }
        if (w.st == GR_OK && w.v.len != cls->n_nums) w.st = REFUSE("grid binding %d: %d numbers, not %d", gp, w.v.len, cls->n_nums);
        if (w.st == GR_OK && w.v.len)
            memcpy(&f[(size_t)gp * (size_t)cls->n_nums], w.v.data, sizeof(int64_t) * (size_t)w.v.len);
        /* exact numbers (float bits) must not change across the grid */
        for (int j = 0; gp > 0 && j < cls->n_nums && w.st == GR_OK; j++)
            if (w.exact.data[j] && f[(size_t)gp * (size_t)cls->n_nums + (size_t)j] != f[j])
                w.st = REFUSE("a float constant or scalar changes with the binding (number %d)", j);
        st = w.st;
        walk_free(&w);
        if (gp > 0) gr_compiled_free(&c);
    }
    if (st == GR_OK && !differences(cls, f, cls->n_nums)) st = REFUSE("a difference overflows");
    if (st == GR_OK) {
        int n_terms = 0;
        for (size_t i = 0; i < (size_t)cls->n_grid * (size_t)cls->n_nums; i++) n_terms += f[i] != 0;
        cls->term_first = gr_malloc(sizeof(int) * (size_t)(cls->n_nums + 1));
        cls->terms = gr_malloc(sizeof(tm_term) * (size_t)(n_terms + 1));
        cls->nums = gr_malloc(sizeof(int64_t) * (size_t)(cls->n_nums + 1));
        cls->n_terms = n_terms + 1;
        if (!cls->term_first || !cls->terms || !cls->nums) st = GR_ERR_NOMEM;
        int e = 0;
        for (int j = 0; st == GR_OK && j < cls->n_nums; j++) {
            cls->term_first[j] = e;
            for (int gp = 0; gp < cls->n_grid; gp++) {
                int64_t coef = f[(size_t)gp * (size_t)cls->n_nums + (size_t)j];
                if (coef) cls->terms[e++] = (tm_term){gp, coef};
            }
        }
        if (st == GR_OK) cls->term_first[cls->n_nums] = e;
    }
    if (f) gr_free(f, sizeof(int64_t) * f_len);
    gr_free(pt, sizeof(int64_t) * (size_t)(n_syms + 1));
    /* the check: the first binding instantiated equals its pipeline plan */
    if (st == GR_OK) {
        gr_compiled inst, full;
        int n_front = 0;
        st = instantiate(cls, src, cls->first_syms, &plain, &inst);
        if (st == GR_ERR_UNSUPPORTED) st = REFUSE("the first binding does not instantiate: %.120s", gr_last_error());
        if (st == GR_OK) {
            st = compile_parts(src, cls->first_syms, &plain, &full, &n_front);
            if (st == GR_OK) {
                st = same_plans(&inst, cls->n_front, &full, n_front, why, sizeof why);
                if (st == GR_ERR_UNSUPPORTED) st = REFUSE("the first binding's plan from the template differs from the pipeline's: %.100s", why);
                gr_compiled_free(&full);
            } else if (st != GR_ERR_NOMEM) st = REFUSE("the first binding does not compile again");
            gr_compiled_free(&inst);
        }
    }
    if (st != GR_OK) class_drop_template(cls);
    else cls->ready = true;
    return st;
}

/* ==== the session's entry ============================================================================ */
gr_status gr_rt_tmpl_pipeline(gr_session_t s, const int64_t *syms, const gr_pipeline_opts *po, bool allowed, gr_compiled *out,
                              bool *instantiated) {
    *instantiated = false;
    gr_rt_tmpl *t = s->tmpl;
    if (!t && allowed && !s->opt.no_plan_templates && syms) {
        t = gr_calloc(1, sizeof *t);
        if (!t) return GR_ERR_NOMEM;
        gr_status st = tmpl_init(s, t);
        if (st != GR_OK) {
            s->tmpl = t;
            gr_rt_tmpl_free(s);
            return st;
        }
        s->tmpl = t;
        if (!t->eligible && s->opt.verbose) fprintf(stderr, "graft: plan templates: none (%s)\n", t->why);
    }
    tm_class *cls = NULL;
    bool have_sig = t && t->eligible && allowed && syms && signature(t, syms);
    if (have_sig) {
        cls = find_class(t);
        if (cls && cls->ready) {
            gr_status st = instantiate(cls, s->graph, syms, po, out);
            if (st == GR_OK) {
                cls->instantiated++;
                t->instantiated++;
                *instantiated = true;
                return GR_OK;
            }
            if (st != GR_ERR_UNSUPPORTED) return st;
            gr_error_clear();
            t->fallbacks++;
        }
    }
    GR_TRY(gr_pass_pipeline(s->graph, syms, po, out));
    s->plans_compiled++;
    if (!have_sig) return GR_OK;
    if (!cls && t->n_cls < TM_MAX_CLASSES) {
        /* t->sig still holds this binding's signature (signature() ran above) */
        tm_class *c = &t->cls[t->n_cls];
        memset(c, 0, sizeof *c);
        c->sig = gr_malloc(sizeof(int32_t) * (size_t)(t->n_sig + 1));
        c->first_syms = gr_malloc(sizeof(int64_t) * (size_t)(s->graph->syms.len + 1));
        if (!c->sig || !c->first_syms) { /* no class: this binding is compiled, nothing else changes */
            if (c->sig) gr_free(c->sig, sizeof(int32_t) * (size_t)(t->n_sig + 1));
            if (c->first_syms) gr_free(c->first_syms, sizeof(int64_t) * (size_t)(s->graph->syms.len + 1));
            gr_error_clear();
            return GR_OK;
        }
        memcpy(c->sig, t->sig, sizeof(int32_t) * (size_t)t->n_sig);
        memcpy(c->first_syms, syms, sizeof(int64_t) * (size_t)s->graph->syms.len);
        t->n_cls++;
    } else if (cls && !cls->ready && !cls->refused &&
               memcmp(cls->first_syms, syms, sizeof(int64_t) * (size_t)s->graph->syms.len)) {
        gr_status st = build_template(s, t, cls, syms, po);
        /* refused (cls->why) TM_ATTEMPTS times: the class is compiled for good; out of memory: the
         * next binding of the class tries again */
        if (st == GR_ERR_UNSUPPORTED && ++cls->attempts >= TM_ATTEMPTS) cls->refused = true;
        if (st != GR_OK) gr_error_clear();
        if (st == GR_OK || st == GR_ERR_UNSUPPORTED)
            if (s->opt.verbose)
                fprintf(stderr, "graft: plan template for a class of bindings: %s\n", st == GR_OK ? "built" : cls->why);
    }
    return GR_OK;
}

void gr_rt_tmpl_stats(gr_session_t s, long *compiled, long *instantiated) {
    *compiled = s->plans_compiled;
    *instantiated = s->tmpl ? s->tmpl->instantiated : 0;
}

void gr_rt_tmpl_explain(gr_session_t s, gr_strbuf *sb) {
    gr_rt_tmpl *t = s->tmpl;
    if (!s->graph->syms.len) return;
    if (s->opt.no_plan_templates) {
        gr_sb_puts(sb, "plan templates: off (no_plan_templates)\n");
        return;
    }
    if (!t) return;
    if (!t->eligible) {
        gr_sb_printf(sb, "plan templates: none (%s); every new binding runs the pass pipeline\n", t->why);
        return;
    }
    int ready = 0;
    for (int i = 0; i < t->n_cls; i++) ready += t->cls[i].ready;
    gr_sb_printf(sb,
                 "plan templates: %ld bindings compiled by the pipeline, %ld instantiated from a template (%d of %d "
                 "classes of bindings have one; %ld guard fallbacks)\n",
                 s->plans_compiled, t->instantiated, ready, t->n_cls, t->fallbacks);
    for (int i = 0; i < t->n_cls; i++)
        if (t->cls[i].refused) gr_sb_printf(sb, "  class %d: no template: %s\n", i, t->cls[i].why);
}

void gr_rt_tmpl_free(gr_session_t s) {
    gr_rt_tmpl *t = s->tmpl;
    if (!t) return;
    for (int i = 0; i < t->n_cls; i++) {
        tm_class *c = &t->cls[i];
        class_drop_template(c);
        gr_free(c->sig, sizeof(int32_t) * (size_t)(t->n_sig + 1));
        gr_free(c->first_syms, sizeof(int64_t) * (size_t)(s->graph->syms.len + 1));
    }
    if (t->q) gr_free(t->q, sizeof(gr_dim) * (size_t)t->n_q);
    if (t->consts) gr_free(t->consts, sizeof(int64_t) * (size_t)t->n_c);
    int n_syms = s->graph->syms.len;
    if (t->sym_q) gr_free(t->sym_q, sizeof(int) * (size_t)n_syms);
    if (t->deg) gr_free(t->deg, sizeof(int) * (size_t)n_syms);
    if (t->qval) gr_free(t->qval, sizeof(int64_t) * (size_t)(t->n_q + 1));
    if (t->order) gr_free(t->order, sizeof(int32_t) * (size_t)(t->n_q + 1));
    if (t->sig) gr_free(t->sig, sizeof(int32_t) * (size_t)(t->n_sig + 1));
    if (t->pw) gr_free(t->pw, sizeof(int32_t) * (size_t)t->n_pw);
    gr_ir_graph_destroy(t->q_graph);
    gr_free(t, sizeof *t);
    s->tmpl = NULL;
}
