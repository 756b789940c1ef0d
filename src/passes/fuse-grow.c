/* passes/fuse-grow — fusion into a kernel grown in place (see fuse-impl.h
 * for why and for the invariants; fuse.c decides what to fuse).
 *
 * A growing kernel k keeps its loop nest, stages and params current (params
 * by index, exactly as the copying fusion would leave them, and the step's
 * args with them), while k->nodes is a pool of nodes that only grows:
 *   - the order is a doubly linked list over pool ids; spliced-out nodes
 *     (loads replaced by a substitute) are unlinked and forward to it;
 *   - operands are pool ids; a LOAD or PARAM node names a param slot, a
 *     stable id that slot_index maps to the param's current index;
 *   - order labels (integers increasing along the list) answer "which of
 *     these loads comes first"; an insertion that finds no room between
 *     its neighbours relabels the smallest aligned label block around it
 *     that is sparse enough (list labelling, Bender et al. 2002), so a
 *     splice costs O(log n) amortized. */
#include "passes/fuse-impl.h"
#include <string.h>

#define LABEL_MAX ((uint64_t)1 << 62)

struct gr_fuse_wk {
    gr_kernel *k;
    int cap;                       /* room of the per-node arrays (and of k->nodes) */
    int *next, *prev;              /* list order; -1 ends */
    int *fwd;                      /* spliced-out node -> its substitute, else -1 */
    int *load_next;                /* loads of one slot, chained */
    int *ord, *at, *where;         /* finish: list order, and an in-place permutation */
    uint64_t *label;
    int head, tail;
    /* param slots */
    int n_slots, slot_cap;
    int *slot_index;               /* slot -> param index, -1 once dropped */
    int *slot_refs;                /* slot -> linked LOAD and PARAM nodes naming it */
    int *slot_loads;               /* slot -> linked LOAD nodes naming it */
    int *slot_first_load;          /* slot -> first of its load chain, -1 none */
    int slot_of[GR_KMAX_PARAMS];   /* param index -> slot */
};

static int n_operands(gr_kexpr_op op) {
    switch (op) {
    case GR_KX_UNARY: case GR_KX_CAST: case GR_KX_RANDOM: return 1;
    case GR_KX_BINARY: return 2;
    case GR_KX_SELECT: return 3;
    default: return 0;
    }
}

/* ==== memory ========================================================================================= */
#define WK_NODE_INTS 7 /* next, prev, fwd, load_next, ord, at, where */
#define WK_SLOT_INTS 4 /* slot_index, slot_refs, slot_loads, slot_first_load */

static int **node_ints(gr_fuse_wk *w, int i) {
    int **a[WK_NODE_INTS] = {&w->next, &w->prev, &w->fwd, &w->load_next, &w->ord, &w->at, &w->where};
    return a[i];
}

static int **slot_ints(gr_fuse_wk *w, int i) {
    int **a[WK_SLOT_INTS] = {&w->slot_index, &w->slot_refs, &w->slot_loads, &w->slot_first_load};
    return a[i];
}

/* Moves n int arrays from old_n to new_n entries, all or none. The n arrays share one block
 * (array 0 starts it), so a kernel grown in place costs one allocation per growth, not n. */
static gr_status grow_ints(int **(*get)(gr_fuse_wk *, int), gr_fuse_wk *w, int n, int old_n, int new_n) {
    int64_t count;
    if (gr_mul_overflow(n, new_n, &count) || count > (int64_t)(SIZE_MAX / sizeof(int))) return GR_ERR_NOMEM;
    int *block = gr_malloc(sizeof(int) * (size_t)count);
    if (!block) return GR_ERR_NOMEM;
    int *old = *get(w, 0);
    for (int i = 0; i < n; i++) {
        int **a = get(w, i);
        if (*a) memcpy(block + (size_t)i * (size_t)new_n, *a, sizeof(int) * (size_t)old_n);
        *a = block + (size_t)i * (size_t)new_n;
    }
    gr_free(old, sizeof(int) * (size_t)n * (size_t)old_n);
    return GR_OK;
}

/* Room for `nodes` pool nodes and `slots` slots in all. */
static gr_status wk_reserve(gr_fuse_wk *w, int nodes, int slots) {
    if (nodes > w->cap) {
        int cap = w->cap ? w->cap : 16;
        while (cap < nodes) cap *= 2;
        GR_TRY(gr_vec_reserve(&w->k->nodes, cap));
        uint64_t *label = gr_malloc(sizeof(uint64_t) * (size_t)cap);
        if (!label) return GR_ERR_NOMEM;
        gr_status st = grow_ints(node_ints, w, WK_NODE_INTS, w->cap, cap);
        if (st != GR_OK) {
            gr_free(label, sizeof(uint64_t) * (size_t)cap);
            return st;
        }
        if (w->label) memcpy(label, w->label, sizeof(uint64_t) * (size_t)w->cap);
        gr_free(w->label, sizeof(uint64_t) * (size_t)w->cap);
        w->label = label;
        w->cap = cap;
    }
    if (slots > w->slot_cap) {
        int cap = w->slot_cap ? w->slot_cap : GR_KMAX_PARAMS;
        while (cap < slots) cap *= 2;
        GR_TRY(grow_ints(slot_ints, w, WK_SLOT_INTS, w->slot_cap, cap));
        w->slot_cap = cap;
    }
    return GR_OK;
}

void gr_fuse_wk_destroy(gr_fuse_wk *w) {
    if (!w) return;
    gr_free(*node_ints(w, 0), sizeof(int) * WK_NODE_INTS * (size_t)w->cap); /* one block each (grow_ints) */
    gr_free(*slot_ints(w, 0), sizeof(int) * WK_SLOT_INTS * (size_t)w->slot_cap);
    gr_free(w->label, sizeof(uint64_t) * (size_t)w->cap);
    gr_free(w, sizeof *w);
}

void gr_fuse_ctx_release(fuse_ctx *f) {
    size_t np = (size_t)(f->p && f->p->nodes.len ? f->p->nodes.len : 1);
    gr_free(f->cone, np * sizeof(bool));
    gr_free(f->pm, np * sizeof(int));
    f->cone = NULL;
    f->pm = NULL;
}

/* ==== order ============================================================================================ */
static void relabel_all(gr_fuse_wk *w) {
    int n = 0;
    for (int x = w->head; x >= 0; x = w->next[x]) n++;
    uint64_t step = LABEL_MAX / (uint64_t)(n + 1), l = 0;
    for (int x = w->head; x >= 0; x = w->next[x]) w->label[x] = l += step;
}

/* x was just linked between neighbours whose labels leave no room: relabel
 * the smallest aligned block of labels around it holding few enough nodes
 * (fewer than 2^i / 1.4^i in a block of 2^i), evenly. */
static void relabel_around(gr_fuse_wk *w, int x, uint64_t key) {
    int l = x, r = x;
    double count = 1, limit = 1;
    for (int i = 1; i <= 62; i++) {
        uint64_t size = (uint64_t)1 << i, base = key & ~(size - 1), top = base + size;
        while (w->prev[l] >= 0 && w->label[w->prev[l]] >= base) l = w->prev[l], count++;
        while (w->next[r] >= 0 && w->label[w->next[r]] < top) r = w->next[r], count++;
        limit = limit * 2 / 1.4;
        if (count + 1 < limit && count + 1 < (double)size) {
            uint64_t step = size / (uint64_t)(count + 1), lab = base;
            for (int y = l;; y = w->next[y]) {
                w->label[y] = lab += step;
                if (y == r) break;
            }
            return;
        }
    }
    relabel_all(w);
}

/* Links pool node x after node a (-1: at the head) and labels it. */
static void insert_after(gr_fuse_wk *w, int a, int x) {
    int b = a >= 0 ? w->next[a] : w->head;
    w->prev[x] = a;
    w->next[x] = b;
    if (a >= 0) w->next[a] = x;
    else w->head = x;
    if (b >= 0) w->prev[b] = x;
    else w->tail = x;
    uint64_t lo = a >= 0 ? w->label[a] : 0, hi = b >= 0 ? w->label[b] : LABEL_MAX;
    if (hi - lo >= 2) w->label[x] = lo + (hi - lo) / 2;
    else relabel_around(w, x, lo);
}

static void unlink_node(gr_fuse_wk *w, int x) {
    int a = w->prev[x], b = w->next[x];
    if (a >= 0) w->next[a] = b;
    else w->head = b;
    if (b >= 0) w->prev[b] = a;
    else w->tail = a;
    w->prev[x] = w->next[x] = -1;
}

/* ==== bookkeeping per node ============================================================================ */
static void count_node(gr_fuse_wk *w, int id) {
    const gr_kexpr *e = &w->k->nodes.data[id];
    if (e->op != GR_KX_LOAD && e->op != GR_KX_PARAM) return;
    w->slot_refs[e->param]++;
    if (e->op != GR_KX_LOAD) return;
    w->slot_loads[e->param]++;
    w->load_next[id] = w->slot_first_load[e->param];
    w->slot_first_load[e->param] = id;
}

static int new_slot(gr_fuse_wk *w, int index) {
    int s = w->n_slots++;
    w->slot_index[s] = index;
    w->slot_refs[s] = w->slot_loads[s] = 0;
    w->slot_first_load[s] = -1;
    w->slot_of[index] = s;
    return s;
}

gr_status gr_fuse_wk_create(gr_kernel *k, gr_fuse_wk **out) {
    *out = NULL;
    gr_fuse_wk *w = gr_calloc(1, sizeof *w);
    if (!w) return GR_ERR_NOMEM;
    w->k = k;
    int n = k->nodes.len;
    gr_status st = wk_reserve(w, 2 * n + 16, 2 * GR_KMAX_PARAMS);
    if (st != GR_OK) {
        gr_fuse_wk_destroy(w);
        return st;
    }
    for (int p = 0; p < k->n_params; p++) new_slot(w, p); /* slot = index to start with */
    uint64_t step = LABEL_MAX / (uint64_t)(n + 1);
    w->head = n ? 0 : -1;
    w->tail = n - 1;
    for (int i = 0; i < n; i++) {
        w->next[i] = i + 1 < n ? i + 1 : -1;
        w->prev[i] = i - 1;
        w->fwd[i] = -1;
        w->label[i] = step * (uint64_t)(i + 1);
        count_node(w, i);
    }
    *out = w;
    return GR_OK;
}

/* ==== planning ========================================================================================== */
bool gr_fuse_wk_plan_map(const gr_fuse_wk *w, fuse_ctx *f) {
    const gr_kernel *c = f->c;
    bool target[GR_KMAX_PARAMS] = {false};
    f->n_targets = 0;
    for (int i = 0; i < f->cs->n_args && i < c->n_params; i++) {
        const gr_step_arg *a = &f->cs->args[i];
        if ((a->kind == GR_ARG_VALUE || a->kind == GR_ARG_HOST_SCALAR) && a->value == f->value) {
            if (a->kind != GR_ARG_VALUE || a->elem_offset != 0 || c->params[i].kind != GR_KP_BUFFER ||
                c->params[i].written)
                return false;
            target[i] = true;
            f->targets[f->n_targets++] = w->slot_of[i];
        }
    }
    if (!f->n_targets) return false;
    for (int s = 0; s < c->n_stages; s++)
        if (c->stages[s].kind == GR_KS_STORE && target[c->stages[s].param]) return false;
    const gr_kaccess *acc = NULL;
    for (int t = 0; t < f->n_targets; t++) {
        int slot = f->targets[t];
        if (w->slot_refs[slot] != w->slot_loads[slot]) return false; /* a PARAM node names it */
        for (int id = w->slot_first_load[slot]; id >= 0; id = w->load_next[id]) {
            const gr_kexpr *e = &w->k->nodes.data[id];
            if (e->access.index != -1 || e->access.offset != 0) return false;
            if (acc && !gr_kaccess_equal(acc, &e->access)) return false;
            acc = &e->access;
        }
    }
    if (!acc) return false;
    int64_t r = 1;
    const gr_kernel *p = f->p;
    for (int d = p->n_outer - 1; d >= 0; d--) f->rs[d] = r, r *= p->outer[d];
    bool used[GR_MAX_DIMS] = {false};
    for (int d = 0; d < p->n_outer; d++) f->map[d] = -1;
    for (int j = 0; j < c->n_outer + c->n_inner; j++) {
        bool inner = j >= c->n_outer;
        int64_t ext = inner ? c->inner[j - c->n_outer] : c->outer[j];
        int64_t stride = inner ? acc->inner_stride[j - c->n_outer] : acc->stride[j];
        /* a symbolic dim maps like a larger one even where it is 1 (kir.h, var_outer) */
        bool var = inner ? (c->var_inner >> (j - c->n_outer) & 1) : (c->var_outer >> j & 1);
        if (ext == 0 || (ext == 1 && !var)) continue;
        int found = -1;
        for (int d = 0; d < p->n_outer && found < 0; d++)
            if (!used[d] && p->outer[d] == ext && f->rs[d] == stride && (ext > 1 || (p->var_outer >> d & 1))) found = d;
        if (found < 0) return false;
        used[found] = true;
        f->map[found] = inner ? GR_KIDX_INNER + (j - c->n_outer) : j;
    }
    for (int d = 0; d < p->n_outer; d++)
        if ((p->outer[d] > 1 || (p->var_outer >> d & 1)) && !used[d]) return false;
    return true;
}

int gr_fuse_substitute_cast(const gr_kernel *p) {
    gr_dtype vt = p->params[p->stages[0].param].dtype;
    gr_dtype rt = p->nodes.data[p->stages[0].value].dtype;
    if (rt != vt || vt == GR_F16 || vt == GR_BF16 || vt == GR_I32 || vt == GR_I8 || vt == GR_U8) return (int)vt;
    return -1;
}

gr_status gr_fuse_wk_prepare(gr_fuse_wk *w, fuse_ctx *f, bool *fits, bool *copy) {
    *fits = true;
    *copy = false;
    const gr_kernel *p = f->p, *c = w->k;
    int np = p->nodes.len;
    f->cone = gr_calloc((size_t)(np ? np : 1), sizeof(bool));
    f->pm = gr_malloc(sizeof(int) * (size_t)(np ? np : 1));
    if (!f->cone || !f->pm) return GR_ERR_NOMEM;
    gr_fuse_producer_cone(p, f->cone);
    /* params, as the copying fusion's map_param would add them */
    gr_kparam params[GR_KMAX_PARAMS];
    int n = c->n_params, cone_size = 0;
    memcpy(params, c->params, sizeof(gr_kparam) * (size_t)n);
    memcpy(f->args, f->cs->args, sizeof f->args);
    for (int i = 0; i < GR_KMAX_PARAMS; i++) f->pmap[i] = -1;
    f->n_new_params = 0;
    for (int j = 0; j < np; j++) {
        if (!f->cone[j]) continue;
        cone_size++;
        const gr_kexpr *e = &p->nodes.data[j];
        if (e->op != GR_KX_LOAD && e->op != GR_KX_PARAM) continue;
        if (f->pmap[e->param] >= 0) continue;
        if (p->params[e->param].written) *copy = true; /* a written param would change what CSE may merge */
        int before = n;
        int q = gr_fuse_map_param(&p->params[e->param], &f->ps->args[e->param], params, f->args, &n);
        if (q < 0) {
            *fits = false;
            return GR_OK;
        }
        if (n > before) f->new_params[f->n_new_params++] = e->param;
        f->pmap[e->param] = q;
    }
    /* params bound alike would be merged by CSE: never the case when every
     * step kept them apart, but the copying fusion is the reference */
    for (int a = 0; a < n && !*copy; a++)
        for (int b = 0; b < a && !*copy; b++)
            if (params[a].kind == params[b].kind && params[a].dtype == params[b].dtype && !params[a].written &&
                !params[b].written && gr_step_arg_equal(&f->args[a], &f->args[b]))
                *copy = true;
    if (*copy) return GR_OK;
    /* the splice point: the first load of the intermediate */
    f->first_load = -1;
    for (int t = 0; t < f->n_targets; t++)
        for (int id = w->slot_first_load[f->targets[t]]; id >= 0; id = w->load_next[id])
            if (f->first_load < 0 || w->label[id] < w->label[f->first_load]) f->first_load = id;
    return wk_reserve(w, w->k->nodes.len + cone_size + 1, w->n_slots + f->n_new_params);
}

int gr_fuse_wk_value_loads(const gr_fuse_wk *w, const gr_step *cs, int value, const gr_kaccess **out, int max) {
    const gr_kernel *c = w->k;
    int n = 0, n_target = 0;
    for (int i = 0; i < cs->n_args && i < c->n_params; i++) {
        const gr_step_arg *a = &cs->args[i];
        if ((a->kind != GR_ARG_VALUE && a->kind != GR_ARG_HOST_SCALAR) || a->value != value) continue;
        if (a->kind != GR_ARG_VALUE || a->elem_offset != 0 || c->params[i].kind != GR_KP_BUFFER || c->params[i].written)
            return -1;
        for (int s = 0; s < c->n_stages; s++)
            if (c->stages[s].kind == GR_KS_STORE && c->stages[s].param == i) return -1;
        int slot = w->slot_of[i];
        if (w->slot_refs[slot] != w->slot_loads[slot]) return -1; /* a PARAM node names it */
        for (int id = w->slot_first_load[slot]; id >= 0; id = w->load_next[id]) {
            if (n == max) return -1;
            out[n++] = &w->k->nodes.data[id].access;
        }
        n_target++;
    }
    return n_target ? n : -1;
}

/* ==== applying ============================================================================================ */
/* Drops param `index` (nothing names it any more), as CSE compacts params. */
static void drop_param(gr_fuse_wk *w, gr_step *cs, int index) {
    gr_kernel *k = w->k;
    w->slot_index[w->slot_of[index]] = -1;
    for (int i = index; i + 1 < k->n_params; i++) {
        k->params[i] = k->params[i + 1];
        cs->args[i] = cs->args[i + 1];
        w->slot_of[i] = w->slot_of[i + 1];
        w->slot_index[w->slot_of[i]] = i;
    }
    k->n_params--;
    memset(&cs->args[k->n_params], 0, sizeof cs->args[0]);
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].param > index) k->stages[s].param--;
    if (k->n_points_param > index) k->n_points_param--;
}

void gr_fuse_wk_apply(gr_fuse_wk *w, fuse_ctx *f, gr_step *cs) {
    gr_kernel *k = w->k;
    const gr_kernel *p = f->p;
    /* P's params that C lacks, appended */
    for (int i = 0; i < f->n_new_params; i++) {
        int pp = f->new_params[i], index = k->n_params++;
        k->params[index] = p->params[pp];
        cs->args[index] = f->ps->args[pp];
        new_slot(w, index);
    }
    /* P's cone, spliced in before the first load of the intermediate */
    int np = p->nodes.len, after = w->prev[f->first_load], root = -1;
    int *pm = f->pm;
    for (int j = 0; j < np; j++) {
        if (!f->cone[j]) continue;
        gr_kexpr e = p->nodes.data[j];
        switch (e.op) {
        case GR_KX_INDEX:
            if (f->map[e.which] < 0) { /* extent-1 dim: always 0 */
                e.op = GR_KX_CONST;
                e.i = 0;
                e.f = 0;
                e.which = -1;
            } else {
                e.which = f->map[e.which];
            }
            break;
        case GR_KX_PARAM:
        case GR_KX_LOAD:
            e.param = w->slot_of[f->pmap[e.param]];
            if (e.op == GR_KX_LOAD) {
                gr_kaccess a = e.access, na;
                gr_kaccess_init(&na);
                na.offset = a.offset;
                na.index = a.index >= 0 ? pm[a.index] : -1;
                na.index_stride = a.index_stride;
                na.index_extent = a.index_extent;
                na.origin = a.origin;
                for (int d = 0; d < p->n_outer; d++) {
                    int m = f->map[d];
                    if (m < 0) continue;
                    if (m >= GR_KIDX_INNER) na.inner_stride[m - GR_KIDX_INNER] += a.stride[d];
                    else na.stride[m] += a.stride[d];
                }
                e.access = na;
            }
            break;
        default: /* as fuse.c's copy_producer */
            if (e.a >= 0 && e.op != GR_KX_CONST && e.op != GR_KX_ACC) e.a = pm[e.a];
            if (e.b >= 0 && (e.op == GR_KX_BINARY || e.op == GR_KX_SELECT)) e.b = pm[e.b];
            if (e.c >= 0 && e.op == GR_KX_SELECT) e.c = pm[e.c];
            break;
        }
        int id = k->nodes.len++; /* room reserved by prepare */
        k->nodes.data[id] = e;
        w->fwd[id] = -1;
        insert_after(w, after, id);
        count_node(w, id);
        after = pm[j] = id;
    }
    root = pm[p->stages[0].value];
    int cast = gr_fuse_substitute_cast(p);
    if (cast >= 0) {
        gr_kexpr e;
        memset(&e, 0, sizeof e);
        e.op = GR_KX_CAST;
        e.dtype = (gr_dtype)cast;
        e.a = root;
        int id = k->nodes.len++;
        k->nodes.data[id] = e;
        w->fwd[id] = -1;
        insert_after(w, after, id);
        root = id;
    }
    /* every load of the intermediate now reads the substitute; their params go */
    int drop[GR_KMAX_PARAMS], n_drop = 0;
    for (int t = 0; t < f->n_targets; t++) {
        int slot = f->targets[t];
        for (int id = w->slot_first_load[slot]; id >= 0; id = w->load_next[id]) {
            w->fwd[id] = root;
            unlink_node(w, id);
        }
        w->slot_refs[slot] = w->slot_loads[slot] = 0;
        w->slot_first_load[slot] = -1;
        drop[n_drop++] = w->slot_index[slot];
    }
    for (int i = 1; i < n_drop; i++) /* highest index first, so lower ones stay put */
        for (int j = i; j > 0 && drop[j] > drop[j - 1]; j--) {
            int t = drop[j];
            drop[j] = drop[j - 1];
            drop[j - 1] = t;
        }
    for (int i = 0; i < n_drop; i++) drop_param(w, cs, drop[i]);
    /* names kept unique as CSE keeps them */
    int alt = 0;
    for (int i = 0; i < k->n_params; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(k->params[i].name, k->params[j].name)) {
                gr_name_copy(k->params[i].name, sizeof k->params[i].name, "p", alt++); /* "p%d", without printf */
                j = -1;
            }
    k->source_node = p->source_node >= 0 && (k->source_node < 0 || p->source_node < k->source_node) ? p->source_node
                                                                                                      : k->source_node;
    cs->n_args = k->n_params;
}

/* ==== finishing ============================================================================================ */
static int resolve(gr_fuse_wk *w, int x) {
    int r = x;
    while (w->fwd[r] >= 0) r = w->fwd[r];
    while (w->fwd[x] >= 0) { /* path compression */
        int n = w->fwd[x];
        w->fwd[x] = r;
        x = n;
    }
    return r;
}

gr_status gr_fuse_wk_finish(gr_fuse_wk *w, gr_step *cs) {
    gr_kernel *k = w->k;
    int n = k->nodes.len, live = 0;
    int *pos = w->where; /* pool id -> rank, first; then reused for the permutation */
    for (int i = 0; i < n; i++) pos[i] = -1;
    for (int x = w->head; x >= 0; x = w->next[x]) {
        w->ord[live] = x;
        pos[x] = live++;
    }
    for (int x = w->head; x >= 0; x = w->next[x]) {
        gr_kexpr *e = &k->nodes.data[x];
        int32_t *ops[3] = {&e->a, &e->b, &e->c};
        for (int q = 0; q < n_operands(e->op); q++)
            if (*ops[q] >= 0) *ops[q] = pos[resolve(w, *ops[q])];
        if (e->op == GR_KX_LOAD && e->access.index >= 0) e->access.index = pos[resolve(w, e->access.index)];
        if (e->op == GR_KX_LOAD || e->op == GR_KX_PARAM) e->param = w->slot_index[e->param];
    }
    for (int s = 0; s < k->n_stages; s++) {
        k->stages[s].value = pos[resolve(w, k->stages[s].value)];
        gr_kaccess *sa = &k->stages[s].access;
        if (sa->index >= 0) sa->index = pos[resolve(w, sa->index)]; /* a scatter */
    }
    /* gather nodes[r] = pool[ord[r]] in place: at[slot] holds the pool id stored there, where[id] its slot */
    for (int i = 0; i < n; i++) w->at[i] = w->where[i] = i;
    for (int r = 0; r < live; r++) {
        int id = w->ord[r], s = w->where[id];
        if (s == r) continue;
        gr_kexpr tmp = k->nodes.data[r];
        k->nodes.data[r] = k->nodes.data[s];
        k->nodes.data[s] = tmp;
        int other = w->at[r];
        w->at[s] = other;
        w->where[other] = s;
        w->at[r] = id;
        w->where[id] = r;
    }
    k->nodes.len = live;
    gr_fuse_wk_destroy(w);
    gr_status st = gr_pass_cse_kernel(k, cs->args);
    cs->n_args = k->n_params;
    if (st == GR_OK && GR_VERIFY_EVERY_KERNEL) st = gr_kernel_verify(k);
    if (st != GR_OK && st != GR_ERR_NOMEM) st = gr_error_prefix(GR_ERR_INTERNAL, "fusing into kernel %s: ", k->name);
    return st;
}

/* ==== movement kernels spliced in (fuse-move.c) ============================================================ */
/* Each load of the moved value gets its own substitute, spliced in just before it, where the
 * copying fusion (gr_fuse_move_into) puts it in its copy; the same scratch substitutes and the
 * same param order (first use, in list order), so the finish's CSE gives the same kernel. */
struct gr_fuse_wk_move_plan {
    const gr_fuse_move *m;
    int n_loads;
    int load[GR_FUSE_MOVE_LOADS];       /* pool ids, in list order */
    int root[GR_FUSE_MOVE_LOADS];       /* in sub[] */
    gr_kernel *sub[GR_FUSE_MOVE_LOADS]; /* scratch substitutes */
    int part_index[GR_FUSE_MAX_PARTS];  /* param index of each part's source */
    int n_new;
    int new_part[GR_FUSE_MAX_PARTS];    /* parts whose source is appended, in order */
    int n_targets;
    int targets[GR_KMAX_PARAMS];        /* slots bound to the value */
    int *map;                           /* scratch node -> pool id while splicing */
    int map_n;
};

void gr_fuse_wk_move_release(gr_fuse_wk_move_plan *plan) {
    if (!plan) return;
    for (int l = 0; l < plan->n_loads; l++) gr_kernel_destroy(plan->sub[l]);
    gr_free(plan->map, sizeof(int) * (size_t)(plan->map_n ? plan->map_n : 1));
    gr_free(plan, sizeof *plan);
}

gr_status gr_fuse_wk_move_prepare(gr_fuse_wk *w, const gr_step *cs, const gr_fuse_move *m, int value, bool *fits,
                                  bool *copy, gr_fuse_wk_move_plan **out) {
    *fits = true;
    *copy = false;
    *out = NULL;
    gr_kernel *k = w->k;
    gr_fuse_wk_move_plan *plan = gr_calloc(1, sizeof *plan);
    if (!plan) return GR_ERR_NOMEM;
    plan->m = m;
    gr_status st = GR_OK;
    for (int i = 0; i < cs->n_args && i < k->n_params; i++) {
        if (cs->args[i].kind != GR_ARG_VALUE || cs->args[i].value != value) continue;
        int slot = w->slot_of[i];
        plan->targets[plan->n_targets++] = slot;
        for (int id = w->slot_first_load[slot]; id >= 0; id = w->load_next[id]) {
            if (plan->n_loads == GR_FUSE_MOVE_LOADS) { /* planned away by gr_fuse_wk_value_loads */
                gr_fuse_wk_move_release(plan);
                return gr_error(GR_ERR_INTERNAL, "fuse-grow: more loads of a moved value than planned");
            }
            plan->load[plan->n_loads++] = id;
        }
    }
    for (int a = 1; a < plan->n_loads; a++) /* list order */
        for (int b = a; b > 0 && w->label[plan->load[b]] < w->label[plan->load[b - 1]]; b--) {
            int t = plan->load[b];
            plan->load[b] = plan->load[b - 1];
            plan->load[b - 1] = t;
        }
    int total = 0, longest = 1;
    for (int l = 0; l < plan->n_loads && st == GR_OK; l++) {
        if ((st = gr_kernel_create("move", &plan->sub[l])) != GR_OK) break;
        st = gr_fuse_move_substitute(m, k, &k->nodes.data[plan->load[l]].access, plan->sub[l], &plan->root[l]);
        if (st == GR_OK) {
            total += plan->sub[l]->nodes.len;
            if (plan->sub[l]->nodes.len > longest) longest = plan->sub[l]->nodes.len;
        }
    }
    if (st == GR_OK && !(plan->map = gr_malloc(sizeof(int) * (size_t)longest))) st = GR_ERR_NOMEM;
    if (st == GR_OK) plan->map_n = longest;
    if (st != GR_OK) {
        gr_fuse_wk_move_release(plan);
        return st;
    }
    /* params, as the copying fusion's gr_fuse_map_param adds them */
    gr_kparam params[GR_KMAX_PARAMS];
    gr_step_arg args[GR_KMAX_PARAMS];
    int n = k->n_params;
    memcpy(params, k->params, sizeof(gr_kparam) * (size_t)n);
    memcpy(args, cs->args, sizeof(gr_step_arg) * (size_t)n);
    for (int p = 0; p < GR_FUSE_MAX_PARTS; p++) plan->part_index[p] = -1;
    for (int l = 0; l < plan->n_loads; l++)
        for (int j = 1; j < plan->sub[l]->nodes.len; j++) {
            const gr_kexpr *e = &plan->sub[l]->nodes.data[j];
            if (e->op != GR_KX_LOAD || plan->part_index[e->param] >= 0) continue;
            const gr_kparam *kp;
            const gr_step_arg *ka;
            gr_fuse_move_part_src(m, e->param, &kp, &ka);
            int before = n, q = gr_fuse_map_param(kp, ka, params, args, &n);
            if (q < 0) {
                *fits = false;
                gr_fuse_wk_move_release(plan);
                return GR_OK;
            }
            if (n > before) plan->new_part[plan->n_new++] = e->param;
            plan->part_index[e->param] = q;
        }
    for (int a = 0; a < n && !*copy; a++) /* as gr_fuse_wk_prepare: CSE would merge these */
        for (int b = 0; b < a && !*copy; b++)
            if (params[a].kind == params[b].kind && params[a].dtype == params[b].dtype && !params[a].written &&
                !params[b].written && gr_step_arg_equal(&args[a], &args[b]))
                *copy = true;
    if (!*copy) st = wk_reserve(w, k->nodes.len + total, w->n_slots + plan->n_new);
    if (*copy || st != GR_OK) {
        gr_fuse_wk_move_release(plan);
        return st;
    }
    *out = plan;
    return GR_OK;
}

void gr_fuse_wk_move_apply(gr_fuse_wk *w, gr_step *cs, gr_fuse_wk_move_plan *plan) {
    gr_kernel *k = w->k;
    const gr_fuse_move *m = plan->m;
    for (int i = 0; i < plan->n_new; i++) {
        const gr_kparam *kp;
        const gr_step_arg *ka;
        gr_fuse_move_part_src(m, plan->new_part[i], &kp, &ka);
        int index = k->n_params++;
        k->params[index] = *kp;
        cs->args[index] = *ka;
        new_slot(w, index);
    }
    int *sm = plan->map;
    for (int l = 0; l < plan->n_loads; l++) {
        int at = plan->load[l], after = w->prev[at];
        const gr_kernel *sub = plan->sub[l];
        sm[0] = k->nodes.data[at].access.index;
        for (int j = 1; j < sub->nodes.len; j++) {
            gr_kexpr e = sub->nodes.data[j];
            gr_fuse_remap_operands(&e, sm);
            if (e.op == GR_KX_LOAD) e.param = w->slot_of[plan->part_index[e.param]];
            int id = k->nodes.len++; /* room reserved by prepare */
            k->nodes.data[id] = e;
            w->fwd[id] = -1;
            insert_after(w, after, id);
            count_node(w, id);
            after = sm[j] = id;
        }
        w->fwd[at] = sm[plan->root[l]];
        unlink_node(w, at);
    }
    /* the value's params go (as in gr_fuse_wk_apply) */
    int drop[GR_KMAX_PARAMS], n_drop = 0;
    for (int t = 0; t < plan->n_targets; t++) {
        int slot = plan->targets[t];
        w->slot_refs[slot] = w->slot_loads[slot] = 0;
        w->slot_first_load[slot] = -1;
        drop[n_drop++] = w->slot_index[slot];
    }
    for (int i = 1; i < n_drop; i++)
        for (int j = i; j > 0 && drop[j] > drop[j - 1]; j--) {
            int t = drop[j];
            drop[j] = drop[j - 1];
            drop[j - 1] = t;
        }
    for (int i = 0; i < n_drop; i++) drop_param(w, cs, drop[i]);
    int alt = 0;
    for (int i = 0; i < k->n_params; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(k->params[i].name, k->params[j].name)) {
                gr_name_copy(k->params[i].name, sizeof k->params[i].name, "p", alt++);
                j = -1;
            }
    for (int p = 0; p < m->n_parts; p++) {
        int src = m->part[p]->kernel->source_node;
        if (src >= 0 && (k->source_node < 0 || src < k->source_node)) k->source_node = src;
    }
    cs->n_args = k->n_params;
    gr_fuse_wk_move_release(plan);
}
