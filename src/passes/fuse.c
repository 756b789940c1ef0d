/* passes/fuse — merges an elementwise producer kernel into the kernels that
 * read its output.
 *
 * Producer P: no inner dims, a single STORE (not over_inner) writing value v
 * contiguously (row-major over P's outer space, offset 0, elem_offset 0), no
 * use of the linear index. v must not be a graph output, must be written by
 * no other step, and every step reading it must be a kernel C later in the
 * list, reading it through params bound to v at elem_offset 0, all loads of
 * which use one access (no gather index). That access must visit each element
 * of v exactly once: every dim of C's loop nest (outer or inner) with extent
 * > 1 matches one dim of P's space with the same extent and P's row-major
 * stride. C may be elementwise, a reduction, softmax, layer_norm, or a copy
 * kernel.
 *
 * Recomputation: with one reader P moves into it. With several readers
 * (at most FUSE_MAX_READERS) P is duplicated into every one of them when it
 * is cheap, i.e. its DAG has at most FUSE_MAX_RECOMPUTE nodes after CSE.
 * Why: these kernels are memory bound, so materializing v costs a full store
 * plus one full load per reader, while recomputing it costs only arithmetic
 * on values the readers (mostly) load anyway. The bounds cap the extra work
 * at 64 nodes per reader per point for each shared value, and keep one big
 * producer from being copied into many kernels. So that the size bound sees
 * everything that would be copied, a sweep that fuses single readers only
 * runs before each sweep that may recompute: a producer is then a maximal
 * single-reader group (a 40-op chain read twice is one 80-node kernel, kept,
 * not 40 small ones each copied twice). If any reader cannot take P (no room
 * for params, a layout P does not have), nothing is fused. Afterwards v has
 * no writer and no reader.
 *
 * Fusion substitutes the loads of v by a copy of P's expression DAG, with P's
 * loop indices and load strides re-mapped onto C's dims and P's params
 * appended to C's (deduplicated when bound identically). The substitute is
 * cast to v's dtype, so rounding (f16, bf16) and wrapping (narrow ints) stay
 * exactly as when v was stored: fused and unfused results are bit-identical.
 * Each fused kernel then goes through gr_pass_cse_kernel (fuse-cse.c), which
 * merges repeated subexpressions so that repeated substitution keeps DAGs
 * linear. A fused kernel keeps C's name and step, and the smaller of the
 * source_nodes (the first of the group).
 *
 * Each sweep visits producers from last to first, so that a value read by
 * several nodes of one chain (x*x + b*x) has a single reader once those
 * readers have been fused together. Sweeps repeat while the recomputing one
 * changes something. Dead steps are removed (gr_pass_dce) before fusing, so
 * a dead reader does not force a duplicate, and after, for what fusion left
 * unread. */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

#define FUSE_MAX_READERS 8    /* readers a producer may be recomputed in */
#define FUSE_MAX_RECOMPUTE 64 /* nodes of a producer DAG that may be recomputed */

typedef struct {
    const gr_kernel *p;     /* producer */
    const gr_step *ps;
    const gr_kernel *c;     /* consumer */
    const gr_step *cs;
    int value;              /* the intermediate */
    int64_t rs[GR_MAX_DIMS]; /* row-major strides of P's space */
    int map[GR_MAX_DIMS];    /* P dim -> C index id (which), or -1 for an extent-1 dim */
    gr_kernel *n;           /* result */
    gr_step_arg args[GR_KMAX_PARAMS];
    int pmap[GR_KMAX_PARAMS];
} fuse_ctx;

bool gr_step_arg_equal(const gr_step_arg *a, const gr_step_arg *b) {
    if (a->kind != b->kind) return false;
    if (a->kind == GR_ARG_LITERAL) return a->literal.bits == b->literal.bits;
    return a->value == b->value && a->elem_offset == b->elem_offset;
}

/* ---- producer / consumer eligibility -------------------------------------------------- */

static int producer_value(const gr_step *s) {
    if (s->kind != GR_STEP_KERNEL || !s->kernel) return -1;
    const gr_kernel *k = s->kernel;
    if (k->n_inner != 0 || k->n_stages != 1) return -1;
    const gr_kstage *st = &k->stages[0];
    if (st->kind != GR_KS_STORE || st->over_inner || st->access.index != -1 || st->access.offset != 0) return -1;
    if (st->param < 0 || st->param >= s->n_args) return -1;
    const gr_step_arg *a = &s->args[st->param];
    if (a->kind != GR_ARG_VALUE || a->elem_offset != 0) return -1;
    int64_t rs[GR_MAX_DIMS];
    int64_t acc = 1;
    for (int d = k->n_outer - 1; d >= 0; d--) rs[d] = acc, acc *= k->outer[d];
    for (int d = 0; d < k->n_outer; d++)
        if (k->outer[d] > 1 && st->access.stride[d] != rs[d]) return -1;
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        if (e->op == GR_KX_INDEX && (e->which < 0 || e->which >= k->n_outer)) return -1; /* linear or inner */
        if (e->op == GR_KX_ACC) return -1;
    }
    return a->value;
}

static bool step_reads(const gr_step *s, int v) {
    if (s->kind == GR_STEP_ALIAS) return s->n_args > 0 && s->args[0].value == v;
    for (int i = 0; i < s->n_args; i++)
        if ((s->args[i].kind == GR_ARG_VALUE || s->args[i].kind == GR_ARG_HOST_SCALAR) && s->args[i].value == v)
            return true;
    return false;
}

static bool is_graph_output(const gr_graph *g, int v) {
    for (int i = 0; i < g->outputs.len; i++)
        if (g->outputs.data[i] == v) return true;
    return false;
}

/* Finds C's load access of v and the dim map; false if fusion does not apply. */
static bool plan_map(fuse_ctx *f) {
    const gr_kernel *c = f->c, *p = f->p;
    bool target[GR_KMAX_PARAMS] = {false};
    int n_target = 0;
    for (int i = 0; i < f->cs->n_args && i < c->n_params; i++) {
        const gr_step_arg *a = &f->cs->args[i];
        if ((a->kind == GR_ARG_VALUE || a->kind == GR_ARG_HOST_SCALAR) && a->value == f->value) {
            if (a->kind != GR_ARG_VALUE || a->elem_offset != 0 || c->params[i].kind != GR_KP_BUFFER ||
                c->params[i].written)
                return false;
            target[i] = true;
            n_target++;
        }
    }
    if (!n_target) return false;
    for (int s = 0; s < c->n_stages; s++)
        if (c->stages[s].kind == GR_KS_STORE && target[c->stages[s].param]) return false;
    const gr_kaccess *acc = NULL;
    for (int i = 0; i < c->nodes.len; i++) {
        const gr_kexpr *e = &c->nodes.data[i];
        if (e->op != GR_KX_LOAD && e->op != GR_KX_PARAM) continue;
        if (e->param < 0 || e->param >= GR_KMAX_PARAMS || !target[e->param]) continue;
        if (e->op != GR_KX_LOAD || e->access.index != -1 || e->access.offset != 0) return false;
        if (acc && !gr_kaccess_equal(acc, &e->access)) return false;
        acc = &e->access;
    }
    if (!acc) return false;
    int64_t r = 1;
    for (int d = p->n_outer - 1; d >= 0; d--) f->rs[d] = r, r *= p->outer[d];
    bool used[GR_MAX_DIMS] = {false};
    for (int d = 0; d < p->n_outer; d++) f->map[d] = -1;
    for (int j = 0; j < c->n_outer + c->n_inner; j++) {
        bool inner = j >= c->n_outer;
        int64_t ext = inner ? c->inner[j - c->n_outer] : c->outer[j];
        int64_t stride = inner ? acc->inner_stride[j - c->n_outer] : acc->stride[j];
        if (ext <= 1) continue;
        int found = -1;
        for (int d = 0; d < p->n_outer && found < 0; d++)
            if (!used[d] && p->outer[d] == ext && f->rs[d] == stride) found = d;
        if (found < 0) return false; /* broadcast (stride 0) or a layout P does not have */
        used[found] = true;
        f->map[found] = inner ? GR_KIDX_INNER + (j - c->n_outer) : j;
    }
    for (int d = 0; d < p->n_outer; d++)
        if (p->outer[d] > 1 && !used[d]) return false;
    return true;
}

/* ---- building the fused kernel ---------------------------------------------------------------- */

/* Index of the fused kernel's param for P's param pp (added on first use). -1: no room. */
static int map_param(fuse_ctx *f, int pp) {
    if (f->pmap[pp] >= 0) return f->pmap[pp];
    const gr_kparam *src = &f->p->params[pp];
    const gr_step_arg *arg = &f->ps->args[pp];
    for (int i = 0; i < f->n->n_params; i++) {
        const gr_kparam *q = &f->n->params[i];
        if (q->kind == src->kind && q->dtype == src->dtype && !q->written && !src->written &&
            gr_step_arg_equal(&f->args[i], arg))
            return f->pmap[pp] = i;
    }
    if (f->n->n_params >= GR_KMAX_PARAMS) return -1;
    int i = f->n->n_params++;
    f->n->params[i] = *src;
    f->args[i] = *arg;
    return f->pmap[pp] = i;
}

/* Appends P's DAG (the cone of its stored value) to the fused kernel; *root = substitute of v. */
static gr_status copy_producer(fuse_ctx *f, int *root, bool *no_room) {
    const gr_kernel *p = f->p;
    int np = p->nodes.len;
    int *pm = gr_malloc(sizeof(int) * (size_t)(np ? np : 1));
    bool *cone = gr_calloc((size_t)(np ? np : 1), sizeof(bool));
    gr_status st = GR_OK;
    if (!pm || !cone) {
        st = gr_nomem();
        goto done;
    }
    int sv = p->stages[0].value;
    cone[sv] = true;
    for (int j = sv; j >= 0; j--) {
        if (!cone[j]) continue;
        const gr_kexpr *x = &p->nodes.data[j];
        const int32_t ops[4] = {x->a, x->b, x->c, x->op == GR_KX_LOAD ? x->access.index : -1};
        int nops = x->op == GR_KX_UNARY || x->op == GR_KX_CAST || x->op == GR_KX_RANDOM ? 1
                 : x->op == GR_KX_BINARY ? 2 : x->op == GR_KX_SELECT ? 3 : 0;
        for (int q = 0; q < nops; q++)
            if (ops[q] >= 0 && ops[q] < j) cone[ops[q]] = true;
        if (ops[3] >= 0 && ops[3] < j) cone[ops[3]] = true;
    }
    for (int j = 0; j < np; j++) {
        pm[j] = -1;
        if (!cone[j]) continue;
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
        case GR_KX_LOAD: {
            int q = map_param(f, e.param);
            if (q < 0) {
                *no_room = true;
                goto done;
            }
            e.param = q;
            if (e.op == GR_KX_LOAD) {
                gr_kaccess a = e.access, na;
                gr_kaccess_init(&na);
                na.offset = a.offset;
                na.index = a.index >= 0 ? pm[a.index] : -1;
                na.index_stride = a.index_stride;
                na.index_extent = a.index_extent;
                na.origin = a.origin;
                for (int d = 0; d < p->n_outer; d++) {
                    int w = f->map[d];
                    if (w < 0) continue;
                    if (w >= GR_KIDX_INNER) na.inner_stride[w - GR_KIDX_INNER] += a.stride[d];
                    else na.stride[w] += a.stride[d];
                }
                e.access = na;
            }
            break;
        }
        default:
            if (e.a >= 0) e.a = pm[e.a];
            if (e.b >= 0) e.b = pm[e.b];
            if (e.c >= 0) e.c = pm[e.c];
            break;
        }
        st = gr_kernel_add_expr(f->n, &e, &pm[j]);
        if (st != GR_OK) goto done;
    }
    *root = pm[sv];
    /* Round / wrap exactly as the store into v did. */
    gr_dtype vt = p->params[p->stages[0].param].dtype;
    gr_dtype rt = p->nodes.data[sv].dtype;
    if (rt != vt || vt == GR_F16 || vt == GR_BF16 || vt == GR_I32 || vt == GR_I8 || vt == GR_U8)
        st = gr_kx_cast(f->n, vt, *root, root);
done:
    gr_free(pm, sizeof(int) * (size_t)(np ? np : 1));
    gr_free(cone, (size_t)(np ? np : 1) * sizeof(bool));
    return st;
}

/* Builds the fused kernel into f->n. *applied = false when it does not fit. */
static gr_status fuse_pair(fuse_ctx *f, bool *applied) {
    *applied = false;
    const gr_kernel *c = f->c;
    gr_kernel *n;
    GR_TRY(gr_kernel_create(c->name, &n));
    f->n = n;
    gr_kernel saved = *n; /* keep the empty node vector */
    *n = *c;
    n->nodes = saved.nodes;
    n->source_node = f->p->source_node >= 0 && (c->source_node < 0 || f->p->source_node < c->source_node)
                         ? f->p->source_node : c->source_node;
    memcpy(f->args, f->cs->args, sizeof f->args);
    for (int i = 0; i < GR_KMAX_PARAMS; i++) f->pmap[i] = -1;
    int nc = c->nodes.len;
    int *cm = gr_malloc(sizeof(int) * (size_t)(nc ? nc : 1));
    if (!cm) {
        gr_kernel_destroy(n);
        f->n = NULL;
        return gr_nomem();
    }
    gr_status st = GR_OK;
    bool no_room = false;
    int root = -1;
    for (int i = 0; i < nc && st == GR_OK; i++) {
        gr_kexpr e = c->nodes.data[i];
        if (e.op == GR_KX_LOAD && f->cs->args[e.param].kind == GR_ARG_VALUE && f->cs->args[e.param].value == f->value) {
            if (root < 0) st = copy_producer(f, &root, &no_room);
            if (no_room) break;
            cm[i] = root;
            continue;
        }
        if (e.a >= 0 && e.op != GR_KX_CONST && e.op != GR_KX_INDEX && e.op != GR_KX_PARAM && e.op != GR_KX_LOAD &&
            e.op != GR_KX_ACC)
            e.a = cm[e.a];
        if (e.b >= 0 && (e.op == GR_KX_BINARY || e.op == GR_KX_SELECT)) e.b = cm[e.b];
        if (e.c >= 0 && e.op == GR_KX_SELECT) e.c = cm[e.c];
        if (e.op == GR_KX_LOAD && e.access.index >= 0) e.access.index = cm[e.access.index];
        st = gr_kernel_add_expr(n, &e, &cm[i]);
    }
    if (st == GR_OK && !no_room) {
        for (int s = 0; s < n->n_stages; s++) n->stages[s].value = cm[n->stages[s].value];
        st = gr_pass_cse_kernel(n, f->args);
        if (st == GR_OK) st = gr_kernel_verify(n);
        if (st == GR_OK) *applied = true;
        else if (st != GR_ERR_NOMEM)
            st = gr_error_prefix(GR_ERR_INTERNAL, "fusing kernel %s into %s: ", f->p->name, c->name);
    }
    gr_free(cm, sizeof(int) * (size_t)(nc ? nc : 1));
    if (!*applied) {
        gr_kernel_destroy(n);
        f->n = NULL;
    }
    return st;
}

/* Tries to fuse step i into all of its readers (into its only one unless
 * `recompute`); *fused tells whether it did. */
static gr_status try_fuse(const gr_graph *g, gr_step_list *steps, int i, bool recompute, bool *fused) {
    *fused = false;
    gr_step *ps = &steps->data[i];
    int v = producer_value(ps);
    if (v < 0 || is_graph_output(g, v)) return GR_OK;
    if (v < g->values.len && g->values.data[v].placement == GR_PLACE_HOST) return GR_OK;
    int readers[FUSE_MAX_READERS], n_readers = 0;
    for (int j = 0; j < steps->len; j++) {
        if (j == i) continue;
        const gr_step *s = &steps->data[j];
        for (int a = 0; a < s->n_args && s->kind == GR_STEP_KERNEL && s->kernel; a++)
            if (a < s->kernel->n_params && s->kernel->params[a].written && s->args[a].kind == GR_ARG_VALUE &&
                s->args[a].value == v)
                return GR_OK; /* another writer */
        if (s->kind == GR_STEP_LIBCALL && s->n_args > 2 && s->args[2].value == v) return GR_OK;
        if (!step_reads(s, v)) continue;
        if (j <= i || s->kind != GR_STEP_KERNEL || !s->kernel) return GR_OK;
        if (n_readers == (recompute ? FUSE_MAX_READERS : 1)) return GR_OK; /* too many copies */
        readers[n_readers++] = j;
    }
    if (n_readers == 0) return GR_OK; /* dead: left to gr_pass_dce */
    if (n_readers > 1 && ps->kernel->nodes.len > FUSE_MAX_RECOMPUTE) return GR_OK; /* too dear to recompute */
    fuse_ctx f[FUSE_MAX_READERS];
    memset(f, 0, sizeof f);
    for (int r = 0; r < n_readers; r++) {
        f[r].p = ps->kernel;
        f[r].ps = ps;
        f[r].c = steps->data[readers[r]].kernel;
        f[r].cs = &steps->data[readers[r]];
        f[r].value = v;
        if (!plan_map(&f[r])) return GR_OK;
    }
    gr_status st = GR_OK;
    bool all = true;
    for (int r = 0; r < n_readers && all; r++) {
        bool applied = false;
        st = fuse_pair(&f[r], &applied);
        all = st == GR_OK && applied;
    }
    if (!all) {
        for (int r = 0; r < n_readers; r++) gr_kernel_destroy(f[r].n);
        return st;
    }
    /* commit: nothing below fails */
    for (int r = 0; r < n_readers; r++) {
        gr_step *cs = &steps->data[readers[r]];
        gr_kernel_destroy(cs->kernel);
        cs->kernel = f[r].n;
        cs->n_args = f[r].n->n_params;
        memset(cs->args, 0, sizeof cs->args);
        memcpy(cs->args, f[r].args, sizeof(gr_step_arg) * (size_t)f[r].n->n_params);
    }
    gr_kernel_destroy(ps->kernel);
    gr_strfree(ps->reason);
    memmove(&steps->data[i], &steps->data[i + 1], sizeof(gr_step) * (size_t)(steps->len - i - 1));
    steps->len--;
    *fused = true;
    return GR_OK;
}

/* One sweep over the producers, last to first; *n_fused counts the fusions. */
static gr_status fuse_sweep(const gr_graph *g, gr_step_list *steps, bool recompute, int *n_fused) {
    *n_fused = 0;
    for (int i = steps->len - 1; i >= 0; i--) {
        bool fused;
        GR_TRY(try_fuse(g, steps, i, recompute, &fused)); /* a fused step i is gone; i - 1 is unaffected */
        *n_fused += fused;
    }
    return GR_OK;
}

gr_status gr_pass_fuse(const gr_graph *g, gr_step_list *steps) {
    if (!g || !steps) return gr_error(GR_ERR_INVALID, "gr_pass_fuse: NULL argument");
    GR_TRY(gr_pass_dce(g, steps));
    /* A single-reader sweep first, so that a producer considered for
     * recomputation is a maximal group (what will be copied is all there and
     * counted), then a sweep that may recompute; repeated while that changes
     * something (merging readers can make a value single-reader again). */
    for (;;) {
        int n_single, n_multi;
        GR_TRY(fuse_sweep(g, steps, false, &n_single));
        GR_TRY(fuse_sweep(g, steps, true, &n_multi));
        if (n_multi == 0) break;
    }
    /* copies that only permute a matmul operand or result go into its descriptor */
    GR_TRY(gr_pass_fuse_matmul_layouts(g, steps));
    return gr_pass_dce(g, steps);
}
