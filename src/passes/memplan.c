/* passes/memplan — static memory plan: every activation gets a fixed offset
 * in one arena, computed from liveness over the step list, so addresses are
 * identical from one run to the next (what makes captured graphs reusable). */
#include "passes/passes.h"
#include <stdlib.h>
#include <string.h>

#define GR_ARENA_ALIGN 256

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static size_t value_bytes(const gr_ir_value *v) {
    int64_t n = gr_ir_value_numel(v);
    return n < 0 ? 0 : (size_t)n * gr_dtype_size(v->dtype);
}

/* The value whose storage v uses (follows alias chains). */
static int root_of(const gr_mem_plan *p, int v) {
    for (int guard = 0; guard < p->n_values && p->values[v].kind == GR_STORE_ALIAS; guard++) v = p->values[v].alias_of;
    return v;
}

static bool param_written(const gr_graph *g, const gr_step *s, int i) {
    if (s->kind == GR_STEP_KERNEL) return s->kernel->params[i].written;
    if (s->kind == GR_STEP_LIBCALL) return i == 2;
    if (s->kind == GR_STEP_HOST) {
        if (s->args[i].kind != GR_ARG_VALUE) return false;
        if (s->args[i].value == s->out_value) return true;
        /* a control step (passes/cond.c) writes its node's outputs */
        if (s->out_value < 0 && s->node >= 0 && s->node < g->nodes.len) {
            const gr_ir_node *n = &g->nodes.data[s->node];
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] == s->args[i].value) return true;
        }
    }
    return false;
}

static void touch(gr_value_store *st, int step) {
    if (st->first_step < 0 || step < st->first_step) st->first_step = step;
    if (step > st->last_step) st->last_step = step;
}

/* The value a view chain starting at v ends in (views known from ALIAS
 * steps: view_src[v], -1 for none). Each chain is walked once: src_root
 * memoizes every value on it. A cycle (a malformed list, reported later)
 * ends the walk where it closes. */
static int view_source_root(const int *view_src, int *src_root, int nv, int v) {
    int r = v, guard = 0;
    while (src_root[r] < 0 && view_src[r] >= 0 && view_src[r] < nv && guard++ <= nv) r = view_src[r];
    int root = src_root[r] >= 0 ? src_root[r] : r;
    for (int w = v, g = 0; src_root[w] < 0 && g <= nv; g++) {
        src_root[w] = root;
        if (w == r || view_src[w] < 0 || view_src[w] >= nv) break;
        w = view_src[w];
    }
    return root;
}

typedef struct {
    int value;
    size_t bytes;
} sized_value;

static int by_size_desc(const void *a, const void *b) {
    const sized_value *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->value - y->value; /* stable: deterministic plans */
}

/* ==== occupied space over time ==================================================================
 *
 * Placement asks, for a value live over steps [f, l] and needing `need`
 * bytes: the lowest offset whose [offset, offset + need) meets no placed
 * value live at some step of [f, l]. Scanning every placed value for every
 * candidate offset made that cubic in the number of values live together (4k
 * graph outputs took 14 s). Here a segment tree over steps holds, per node,
 * two sets of byte ranges (each a treap of disjoint, non-touching intervals,
 * merged on insert):
 *   own: the values whose live range covers the node's whole step range (a
 *        range is stored at the O(log T) nodes that tile it), and
 *   sub: the union of `own` over the node's subtree.
 * The values live somewhere in [f, l] are then exactly those in `sub` of the
 * nodes tiling [f, l] and in `own` of their ancestors (a few dozen sets),
 * and the lowest free offset is found by jumping past the first interval of
 * any set that meets [y, y + need) until none does. Every jump lands on 0 or
 * the end of a placed value, and no offset skipped could fit, so the result
 * is exactly the old candidate search's (lowest fitting candidate among 0
 * and the ends of time-overlapping values). */
typedef struct {
    size_t start, end; /* [start, end) */
    uint32_t prio;
    int left, right;
} span_node;

typedef struct {
    GR_VEC(span_node) pool;
    int free_list; /* recycled nodes, chained through .left */
    uint32_t seed;
    int size;      /* leaves of the segment tree (a power of two >= n_steps) */
    int *own, *sub; /* per segment-tree node: treap roots (-1 = empty) */
} space;

static gr_status space_init(space *sp, int n_steps) {
    memset(sp, 0, sizeof *sp);
    sp->free_list = -1;
    sp->seed = 0x9E3779B9u;
    sp->size = 1;
    while (sp->size < n_steps) sp->size *= 2;
    sp->own = gr_malloc(sizeof(int) * 2 * (size_t)sp->size);
    sp->sub = gr_malloc(sizeof(int) * 2 * (size_t)sp->size);
    if (!sp->own || !sp->sub) return GR_ERR_NOMEM;
    for (int i = 0; i < 2 * sp->size; i++) sp->own[i] = sp->sub[i] = -1;
    return GR_OK;
}

static void space_free(space *sp) {
    gr_vec_free(&sp->pool);
    gr_free(sp->own, sizeof(int) * 2 * (size_t)sp->size);
    gr_free(sp->sub, sizeof(int) * 2 * (size_t)sp->size);
}

/* A node from the free list or the pool, whose room space_reserve made. */
static int span_new(space *sp, size_t start, size_t end) {
    int n;
    if (sp->free_list >= 0) {
        n = sp->free_list;
        sp->free_list = sp->pool.data[n].left;
    } else {
        n = sp->pool.len++;
    }
    sp->seed ^= sp->seed << 13, sp->seed ^= sp->seed >> 17, sp->seed ^= sp->seed << 5; /* xorshift32 */
    sp->pool.data[n] = (span_node){start, end, sp->seed, -1, -1};
    return n;
}

static void span_release(space *sp, int t) {
    if (t < 0) return;
    span_release(sp, sp->pool.data[t].left);
    span_release(sp, sp->pool.data[t].right);
    sp->pool.data[t].left = sp->free_list;
    sp->free_list = t;
}

/* Splits treap t into starts < key (*l) and starts >= key (*r). */
static void span_split(space *sp, int t, size_t key, int *l, int *r) {
    if (t < 0) {
        *l = *r = -1;
        return;
    }
    span_node *n = &sp->pool.data[t];
    if (n->start < key) {
        int a, b;
        span_split(sp, n->right, key, &a, &b);
        sp->pool.data[t].right = a;
        *l = t;
        *r = b;
    } else {
        int a, b;
        span_split(sp, n->left, key, &a, &b);
        sp->pool.data[t].left = b;
        *l = a;
        *r = t;
    }
}

/* Joins treaps a and b, every start of a below every start of b. */
static int span_merge(space *sp, int a, int b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (sp->pool.data[a].prio > sp->pool.data[b].prio) {
        sp->pool.data[a].right = span_merge(sp, sp->pool.data[a].right, b);
        return a;
    }
    sp->pool.data[b].left = span_merge(sp, a, sp->pool.data[b].left);
    return b;
}

static int span_last(const space *sp, int t) {
    while (t >= 0 && sp->pool.data[t].right >= 0) t = sp->pool.data[t].right;
    return t;
}

/* Adds [start, end) to set *root, merging the intervals it meets or touches. */
static void span_add(space *sp, int *root, size_t start, size_t end) {
    int l, r, m, r2;
    span_split(sp, *root, start, &l, &r);
    int last = span_last(sp, l);
    if (last >= 0 && sp->pool.data[last].end >= start) { /* the one interval before start that can reach it */
        if (sp->pool.data[last].start < start) start = sp->pool.data[last].start;
        if (sp->pool.data[last].end > end) end = sp->pool.data[last].end;
        int l1, l2;
        span_split(sp, l, sp->pool.data[last].start, &l1, &l2);
        span_release(sp, l2);
        l = l1;
    }
    span_split(sp, r, end == SIZE_MAX ? end : end + 1, &m, &r2); /* starts in [start, end]: met or touched */
    int mlast = span_last(sp, m);
    if (mlast >= 0 && sp->pool.data[mlast].end > end) end = sp->pool.data[mlast].end;
    span_release(sp, m);
    *root = span_merge(sp, span_merge(sp, l, span_new(sp, start, end)), r2);
}

/* The first interval of set t ending after y (intervals are disjoint, so ends
 * ascend with starts); -1 if none. */
static int span_first_after(const space *sp, int t, size_t y) {
    int found = -1;
    while (t >= 0) {
        if (sp->pool.data[t].end > y) {
            found = t;
            t = sp->pool.data[t].left;
        } else {
            t = sp->pool.data[t].right;
        }
    }
    return found;
}

/* Room for one more value: at most two nodes per segment-tree level it touches. */
static gr_status space_reserve(space *sp) {
    int levels = 1;
    for (int s = sp->size; s > 1; s /= 2) levels++;
    return gr_vec_reserve(&sp->pool, sp->pool.len + 4 * levels + 4);
}

static void space_insert(space *sp, int node, int lo, int hi, int f, int l, size_t start, size_t end) {
    span_add(sp, &sp->sub[node], start, end);
    if (f <= lo && hi - 1 <= l) {
        span_add(sp, &sp->own[node], start, end);
        return;
    }
    int mid = lo + (hi - lo) / 2;
    if (f < mid) space_insert(sp, 2 * node, lo, mid, f, l, start, end);
    if (l >= mid) space_insert(sp, 2 * node + 1, mid, hi, f, l, start, end);
}

/* The sets whose union is the space used at some step of [f, l]. */
static void space_sets(const space *sp, int node, int lo, int hi, int f, int l, int *sets, int *n) {
    if (f <= lo && hi - 1 <= l) {
        if (sp->sub[node] >= 0) sets[(*n)++] = sp->sub[node];
        return;
    }
    if (sp->own[node] >= 0) sets[(*n)++] = sp->own[node];
    int mid = lo + (hi - lo) / 2;
    if (f < mid) space_sets(sp, 2 * node, lo, mid, f, l, sets, n);
    if (l >= mid) space_sets(sp, 2 * node + 1, mid, hi, f, l, sets, n);
}

/* Lowest offset where `need` bytes are free at every step of [f, l]. */
static size_t space_lowest_fit(const space *sp, int f, int l, size_t need) {
    int sets[4 * 64], n = 0;
    space_sets(sp, 1, 0, sp->size, f, l, sets, &n);
    size_t y = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < n; i++) {
            int t = span_first_after(sp, sets[i], y);
            if (t >= 0 && sp->pool.data[t].start < y + need) {
                y = sp->pool.data[t].end;
                moved = true;
            }
        }
    }
    return y;
}

/* ---- few values: a list ---------------------------------------------------------------------- */
/* The same lowest fit as space_lowest_fit, over the placed values in a list sorted by offset:
 * O(n) a value, so O(n^2) a plan, against the tree's O(n log^2 n) with a larger constant. A new
 * binding's plan of a transformer export has ~50 arena values, where the list takes a third of
 * the tree's instructions; past GR_MEMPLAN_SMALL values the tree keeps large graphs fast. Both
 * give the lowest offset whose [offset, offset + need) meets no placed value live at a step of
 * [f, l], so plans are the same either way (test_plan_reuse builds with both and compares). */
#define GR_MEMPLAN_SMALL 256
static int small_limit = GR_MEMPLAN_SMALL;

void gr_pass_plan_memory_debug_tree_only(bool on) { small_limit = on ? -1 : GR_MEMPLAN_SMALL; }

typedef struct {
    size_t start, end; /* arena bytes [start, end) */
    int first, last;   /* live steps [first, last] */
} placed;

static size_t placed_lowest_fit(const placed *p, int n, int f, int l, size_t need) {
    size_t y = 0;
    for (int i = 0; i < n; i++) { /* by start: once one starts past y + need, none later meets it */
        if (p[i].last < f || l < p[i].first) continue;
        if (p[i].start >= y + need) break;
        if (p[i].end > y) y = p[i].end;
    }
    return y;
}

static void placed_insert(placed *p, int *n, placed x) {
    int at = *n;
    while (at > 0 && p[at - 1].start > x.start) at--;
    memmove(p + at + 1, p + at, sizeof(placed) * (size_t)(*n - at));
    p[at] = x;
    (*n)++;
}

gr_status gr_pass_plan_memory(const gr_graph *g, const gr_step_list *steps, gr_mem_plan *out) {
    memset(out, 0, sizeof *out);
    int nv = g->values.len;
    out->values = gr_calloc((size_t)(nv ? nv : 1), sizeof(gr_value_store));
    if (!out->values) return GR_ERR_NOMEM;
    out->n_values = nv;
    for (int v = 0; v < nv; v++) {
        out->values[v].first_step = out->values[v].last_step = -1;
        out->values[v].alias_of = -1;
        out->values[v].bytes = value_bytes(&g->values.data[v]);
    }
    /* storage classes */
    for (int i = 0; i < g->inputs.len; i++) {
        int v = g->inputs.data[i];
        gr_value_store *st = &out->values[v];
        st->kind = g->values.data[v].placement == GR_PLACE_HOST ? GR_STORE_HOST : GR_STORE_INPUT;
        st->offset = (size_t)i;
    }
    /* A host input read as a buffer by some kernel gets a device placeholder
     * too, filled before the run like every other input: the copy never sits
     * inside a segment, so it never breaks a graph. Host scalars keep being
     * read from the host copy (by value, at launch). */
    {
        /* view -> its source, from the last ALIAS step defining it; then each
         * value's source root, resolved once (memoized) */
        int *view_src = gr_malloc(sizeof(int) * (size_t)(nv ? nv : 1));
        int *src_root = gr_malloc(sizeof(int) * (size_t)(nv ? nv : 1));
        if (!view_src || !src_root) {
            gr_free(view_src, sizeof(int) * (size_t)(nv ? nv : 1));
            gr_free(src_root, sizeof(int) * (size_t)(nv ? nv : 1));
            gr_mem_plan_free(out);
            return GR_ERR_NOMEM;
        }
        for (int v = 0; v < nv; v++) view_src[v] = -1, src_root[v] = -1;
        for (int sj = 0; sj < steps->len; sj++) {
            const gr_step *s = &steps->data[sj];
            if (s->kind == GR_STEP_ALIAS && s->out_value >= 0 && s->out_value < nv) view_src[s->out_value] = s->args[0].value;
        }
        for (int si = 0; si < steps->len; si++) {
            const gr_step *s = &steps->data[si];
            if (s->kind == GR_STEP_ALIAS) continue;
            for (int a = 0; a < s->n_args; a++) {
                const gr_step_arg *arg = &s->args[a];
                if (arg->kind != GR_ARG_VALUE || arg->value < 0 || arg->value >= nv) continue;
                int r = view_source_root(view_src, src_root, nv, arg->value);
                if (r >= 0 && r < nv && out->values[r].kind == GR_STORE_HOST) out->values[r].kind = GR_STORE_INPUT;
            }
        }
        gr_free(view_src, sizeof(int) * (size_t)(nv ? nv : 1));
        gr_free(src_root, sizeof(int) * (size_t)(nv ? nv : 1));
    }
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        if (s->kind == GR_STEP_ALIAS) {
            int src = s->args[0].value, dst = s->out_value;
            if (src < 0 || src >= nv || dst < 0 || dst >= nv) goto bad_step;
            out->values[dst].kind = GR_STORE_ALIAS;
            out->values[dst].alias_of = src;
            out->values[dst].alias_elem_offset = s->args[0].elem_offset;
            continue;
        }
        for (int a = 0; a < s->n_args; a++) {
            const gr_step_arg *arg = &s->args[a];
            if (arg->kind != GR_ARG_VALUE && arg->kind != GR_ARG_HOST_SCALAR) continue;
            if (arg->value < 0 || arg->value >= nv) goto bad_step;
            const gr_ir_value *val = &g->values.data[arg->value];
            gr_value_store *st = &out->values[arg->value];
            if (st->kind != GR_STORE_NONE) continue;
            if (val->kind == GR_VAL_CONST) st->kind = GR_STORE_CONST;
            else if (val->kind == GR_VAL_NODE && val->inplace_of > 0 && val->inplace_of <= nv &&
                     g->values.data[val->inplace_of - 1].kind == GR_VAL_INPUT) {
                /* decode state: written into its input's placeholder (the next step reads it there) */
                st->kind = GR_STORE_ALIAS;
                st->alias_of = val->inplace_of - 1;
                st->alias_elem_offset = 0;
            }
            /* A zero-size value gets no kernel (lowering skips it) but can still
             * be read, e.g. by a reduction over the empty axis: it gets an
             * (empty) arena slot so its address exists. */
            else if (val->kind == GR_VAL_NODE && (param_written(g, s, a) || st->bytes == 0)) st->kind = GR_STORE_ARENA;
        }
    }
    /* graph outputs that are constants (fully folded) must be materialized;
     * zero-size ones nothing wrote still need an address */
    for (int i = 0; i < g->outputs.len; i++) {
        int v = g->outputs.data[i];
        if (out->values[v].kind == GR_STORE_NONE && g->values.data[v].kind == GR_VAL_CONST) out->values[v].kind = GR_STORE_CONST;
        if (out->values[v].kind == GR_STORE_NONE && g->values.data[v].kind == GR_VAL_NODE && out->values[v].bytes == 0)
            out->values[v].kind = GR_STORE_ARENA;
    }
    /* flatten alias chains to their roots; offsets add up */
    for (int v = 0; v < nv; v++) {
        if (out->values[v].kind != GR_STORE_ALIAS) continue;
        int64_t off = 0;
        int r = v, guard = 0;
        while (out->values[r].kind == GR_STORE_ALIAS && guard++ <= nv) {
            off += out->values[r].alias_elem_offset;
            r = out->values[r].alias_of;
        }
        if (out->values[r].kind == GR_STORE_ALIAS) {
            gr_mem_plan_free(out);
            return gr_error(GR_ERR_INTERNAL, "memory plan: alias cycle at value '%s'", g->values.data[v].name);
        }
        if (out->values[r].kind == GR_STORE_NONE && g->values.data[r].kind == GR_VAL_CONST) out->values[r].kind = GR_STORE_CONST;
        if (out->values[r].kind == GR_STORE_NONE && g->values.data[r].kind == GR_VAL_NODE && out->values[r].bytes == 0)
            out->values[r].kind = GR_STORE_ARENA;
        out->values[v].alias_of = r;
        out->values[v].alias_elem_offset = off;
    }
    /* Nothing may write into a graph input or a weight: an input placeholder
     * changed in place would feed the next replay a different value than the
     * caller set (and inputs are not re-copied when unchanged). */
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        if (s->kind == GR_STEP_ALIAS) continue;
        for (int a = 0; a < s->n_args; a++) {
            if (s->args[a].kind != GR_ARG_VALUE || !param_written(g, s, a)) continue;
            int r = root_of(out, s->args[a].value);
            gr_storage_kind k = out->values[r].kind;
            if (k != GR_STORE_INPUT && k != GR_STORE_CONST && k != GR_STORE_HOST) continue;
            if (k == GR_STORE_INPUT && g->values.data[s->args[a].value].inplace_of == r + 1) continue; /* decode state */
            char where[512] = "plan";
            if (s->node >= 0 && s->node < g->nodes.len) gr_ir_node_where(g, &g->nodes.data[s->node], where, sizeof where);
            const char *what = k == GR_STORE_CONST ? "weight" : "graph input";
            gr_status st = gr_error(GR_ERR_HAZARD,
                                    "%s: writes into %s '%s' in place; graft refuses (the placeholder would hold a different "
                                    "value at the next replay than the one the caller set)",
                                    where, what, g->values.data[r].name);
            gr_mem_plan_free(out);
            return st;
        }
    }
    /* liveness of roots */
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        if (s->kind == GR_STEP_ALIAS) {
            touch(&out->values[root_of(out, s->args[0].value)], si);
            continue;
        }
        for (int a = 0; a < s->n_args; a++) {
            const gr_step_arg *arg = &s->args[a];
            if (arg->kind != GR_ARG_VALUE && arg->kind != GR_ARG_HOST_SCALAR) continue;
            touch(&out->values[root_of(out, arg->value)], si);
        }
    }
    for (int i = 0; i < g->outputs.len; i++) {
        gr_value_store *st = &out->values[root_of(out, g->outputs.data[i])];
        if (st->first_step < 0) st->first_step = 0;
        st->last_step = steps->len; /* outputs outlive the plan: read after the run */
    }
    /* constants: the source graph's (borrowed) are shared weights; the plan's own are packed in first-use order */
    size_t const_off = 0;
    for (int v = 0; v < nv; v++) {
        if (out->values[v].kind != GR_STORE_CONST) continue;
        if (g->values.data[v].borrowed) {
            out->values[v].kind = GR_STORE_WEIGHT;
            continue;
        }
        out->values[v].offset = const_off;
        const_off = align_up(const_off + out->values[v].bytes, GR_ARENA_ALIGN);
    }
    out->const_bytes = const_off;

    /* arena: largest first, each at the lowest offset free over its live range */
    int n_arena = 0;
    for (int v = 0; v < nv; v++)
        if (out->values[v].kind == GR_STORE_ARENA) n_arena++;
    sized_value *order = gr_malloc(sizeof(sized_value) * (size_t)(n_arena ? n_arena : 1));
    bool small = n_arena <= small_limit;
    space sp;
    memset(&sp, 0, sizeof sp); /* what space_free frees when unused */
    gr_status st = small ? GR_OK : space_init(&sp, steps->len + 1);
    if (!order || st != GR_OK) {
        gr_free(order, sizeof(sized_value) * (size_t)(n_arena ? n_arena : 1));
        space_free(&sp);
        gr_mem_plan_free(out);
        return GR_ERR_NOMEM;
    }
    int k = 0;
    for (int v = 0; v < nv; v++)
        if (out->values[v].kind == GR_STORE_ARENA) order[k++] = (sized_value){v, out->values[v].bytes};
    qsort(order, (size_t)n_arena, sizeof *order, by_size_desc);
    placed *by_start = small ? gr_malloc(sizeof(placed) * (size_t)(n_arena ? n_arena : 1)) : NULL;
    if (small && !by_start) st = GR_ERR_NOMEM;
    int n_placed = 0;
    size_t arena = 0;
    for (int i = 0; i < n_arena && st == GR_OK; i++) {
        gr_value_store *vs = &out->values[order[i].value];
        if (vs->first_step < 0) vs->first_step = vs->last_step = 0; /* written but never read */
        size_t need = align_up(vs->bytes ? vs->bytes : 1, GR_ARENA_ALIGN);
        if (small) {
            vs->offset = placed_lowest_fit(by_start, n_placed, vs->first_step, vs->last_step, need);
            placed_insert(by_start, &n_placed, (placed){vs->offset, vs->offset + need, vs->first_step, vs->last_step});
        } else {
            vs->offset = space_lowest_fit(&sp, vs->first_step, vs->last_step, need);
            st = space_reserve(&sp);
            if (st == GR_OK) space_insert(&sp, 1, 0, sp.size, vs->first_step, vs->last_step, vs->offset, vs->offset + need);
        }
        if (vs->offset + need > arena) arena = vs->offset + need;
    }
    out->arena_bytes = arena;
    gr_free(by_start, sizeof(placed) * (size_t)(n_arena ? n_arena : 1));
    gr_free(order, sizeof(sized_value) * (size_t)(n_arena ? n_arena : 1));
    space_free(&sp);
    if (st != GR_OK) {
        gr_mem_plan_free(out);
        return st;
    }
    return GR_OK;
bad_step:
    gr_mem_plan_free(out);
    return gr_error(GR_ERR_INTERNAL, "memory plan: a step refers to no value");
}

void gr_mem_plan_free(gr_mem_plan *p) {
    if (!p) return;
    gr_free(p->values, sizeof(gr_value_store) * (size_t)p->n_values);
    memset(p, 0, sizeof *p);
}
