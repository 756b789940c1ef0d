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
 * is cheap, i.e. its DAG has at most FUSE_MAX_RECOMPUTE nodes after CSE and
 * the copies move fewer bytes than storing v once (recompute_pays).
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
 * A fused kernel goes through gr_pass_cse_kernel (fuse-cse.c), which merges
 * repeated subexpressions so that repeated substitution keeps DAGs linear.
 * A fused kernel keeps C's name and step, and the smaller of the
 * source_nodes (the first of the group).
 *
 * Cost: the first fusion into a kernel in a sweep copies it (as described);
 * later ones splice P's nodes into it in place (fuse-grow.c; the growing form
 * is made at the second fusion), and CSE runs once when the sweep ends, giving node for node the kernel that copying and
 * merging at every step gives, so a chain of N fusions costs O(N), not
 * O(N^2). A producer's readers come from an index of the steps binding each
 * value, and fused-away steps are compacted once per sweep.
 *
 * Movement kernels (fuse-move.c): where P only moves data (a load, perhaps
 * negated or cast: a transpose, slice or expand copy) and some reader does
 * not read v through one access matching P's space, P is still recomputed
 * in every reader (same limits and recompute rule) through whatever affine
 * accesses they use, each load of v by its own composed load; and the part
 * kernels of a concat (several movement kernels writing disjoint boxes of
 * v) go into v's one reader as a select over clamped loads of the parts.
 * Llama's RoPE (transpose, rotate_half's two concat parts, the add) is one
 * kernel so.
 *
 * Each sweep visits producers from last to first, so that a value read by
 * several nodes of one chain (x*x + b*x) has a single reader once those
 * readers have been fused together. Sweeps repeat while the recomputing one
 * changes something. Dead steps are removed (gr_pass_dce) before fusing, so
 * a dead reader does not force a duplicate, and after, for what fusion left
 * unread. Before that, a consumer that is a function of one kernel's output
 * alone (the cast the precision pass puts behind a layer norm or a gelu,
 * reached through views) moves into that kernel's store (fuse-store.c). */
#include "passes/fuse-impl.h"
#include <stdio.h>
#include <string.h>

#define FUSE_MAX_READERS 8    /* readers a producer may be recomputed in */
#define FUSE_MAX_RECOMPUTE 64 /* nodes of a producer DAG that may be recomputed */

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

/* Finds C's load access of v and the dim map; false if fusion does not apply. */
bool gr_fuse_plan_map(fuse_ctx *f) {
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
        /* a symbolic dim maps like a larger one even where it is 1 (kir.h, var_outer) */
        bool var = inner ? (c->var_inner >> (j - c->n_outer) & 1) : (c->var_outer >> j & 1);
        if (ext == 0 || (ext == 1 && !var)) continue;
        int found = -1;
        for (int d = 0; d < p->n_outer && found < 0; d++)
            if (!used[d] && p->outer[d] == ext && f->rs[d] == stride && (ext > 1 || (p->var_outer >> d & 1))) found = d;
        if (found < 0) return false; /* broadcast (stride 0) or a layout P does not have */
        used[found] = true;
        f->map[found] = inner ? GR_KIDX_INNER + (j - c->n_outer) : j;
    }
    for (int d = 0; d < p->n_outer; d++)
        if ((p->outer[d] > 1 || (p->var_outer >> d & 1)) && !used[d]) return false;
    return true;
}

/* ---- building the fused kernel ---------------------------------------------------------------- */

int gr_fuse_map_param(const gr_kparam *src, const gr_step_arg *arg, gr_kparam *params, gr_step_arg *args, int *n) {
    for (int i = 0; i < *n; i++) {
        const gr_kparam *q = &params[i];
        if (q->kind == src->kind && q->dtype == src->dtype && !q->written && !src->written && gr_step_arg_equal(&args[i], arg))
            return i;
    }
    if (*n >= GR_KMAX_PARAMS) return -1;
    int i = (*n)++;
    params[i] = *src;
    args[i] = *arg;
    return i;
}

/* Index of the fused kernel's param for P's param pp (added on first use). -1: no room. */
static int map_param(fuse_ctx *f, int pp) {
    if (f->pmap[pp] >= 0) return f->pmap[pp];
    int q = gr_fuse_map_param(&f->p->params[pp], &f->ps->args[pp], f->n->params, f->args, &f->n->n_params);
    return q < 0 ? -1 : (f->pmap[pp] = q);
}

void gr_fuse_producer_cone(const gr_kernel *p, bool *cone) {
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
    gr_fuse_producer_cone(p, cone);
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
        default: /* operands only: other fields are unused here and stay as they are */
            if (e.a >= 0 && e.op != GR_KX_CONST && e.op != GR_KX_ACC) e.a = pm[e.a];
            if (e.b >= 0 && (e.op == GR_KX_BINARY || e.op == GR_KX_SELECT)) e.b = pm[e.b];
            if (e.c >= 0 && e.op == GR_KX_SELECT) e.c = pm[e.c];
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
        for (int s = 0; s < n->n_stages; s++) {
            n->stages[s].value = cm[n->stages[s].value];
            if (n->stages[s].access.index >= 0) n->stages[s].access.index = cm[n->stages[s].access.index]; /* a scatter */
        }
        st = gr_pass_cse_kernel(n, f->args);
        if (st == GR_OK && GR_VERIFY_EVERY_KERNEL) st = gr_kernel_verify(n);
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

/* ==== sweeps ====================================================================================== */

/* Test hook: every fusion copies its consumer (the reference the growing
 * fusion must match, tests/test_compile_scale.c). */
static bool copy_always;
void gr_pass_fuse_debug_copy_always(bool on) { copy_always = on; }

typedef struct {
    int step, next;
} ref_link;

/* One sweep's state. Which steps bind each value (any arg) is indexed once
 * per sweep (CSR), and a fusion chains the consumer's new bindings on, so a
 * producer's readers are found without scanning every step. Entries may be
 * stale (the step no longer binds the value, or was fused away): every use
 * re-checks the step. Fused-away producers are marked dead and the list is
 * compacted at the end of the sweep, instead of moving every later step. */
typedef struct {
    const gr_graph *g;
    gr_step_list *steps;
    const bool *is_output; /* per value */
    int nv;
    int *ref_start, *ref_steps; /* CSR over values */
    int *extra_head;            /* per value: chain in extra, -1 = none */
    GR_VEC(ref_link) extra;
    bool *dead;                 /* per step */
    gr_fuse_wk **wk;            /* per step: kernel being grown, or NULL */
    /* per step: a kernel a copying fusion just made (merged by CSE), which starts growing at
     * its next fusion. Why not at once: most are fused into no more than once in a sweep, and
     * making the growing form and going back (another CSE) was ~5% of a new binding's plan. */
    bool *grow;
    int *stamp;                 /* per step: last producer that looked at it */
    int n_steps;
} sweep_ctx;

static bool binds(const gr_step *s, int v) {
    for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
        if (s->args[a].value == v) return true;
    return false;
}

static gr_status add_refs(sweep_ctx *sc, int j) {
    const gr_step *s = &sc->steps->data[j];
    GR_TRY(gr_vec_reserve(&sc->extra, sc->extra.len + GR_KMAX_PARAMS));
    for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++) {
        int v = s->args[a].value;
        if (v < 0 || v >= sc->nv) continue;
        sc->extra.data[sc->extra.len] = (ref_link){j, sc->extra_head[v]};
        sc->extra_head[v] = sc->extra.len++;
    }
    return GR_OK;
}

static void sweep_free(sweep_ctx *sc) {
    size_t nv1 = (size_t)sc->nv + 1, ns = (size_t)(sc->n_steps ? sc->n_steps : 1);
    if (sc->ref_start) gr_free(sc->ref_steps, sizeof(int) * (size_t)(sc->ref_start[sc->nv] ? sc->ref_start[sc->nv] : 1));
    gr_free(sc->ref_start, sizeof(int) * nv1);
    gr_free(sc->extra_head, sizeof(int) * nv1);
    gr_vec_free(&sc->extra);
    gr_free(sc->dead, sizeof(bool) * ns);
    gr_free(sc->wk, sizeof(gr_fuse_wk *) * ns);
    gr_free(sc->grow, sizeof(bool) * ns);
    gr_free(sc->stamp, sizeof(int) * ns);
}

static gr_status sweep_init(sweep_ctx *sc, const gr_graph *g, gr_step_list *steps, const bool *is_output) {
    memset(sc, 0, sizeof *sc);
    sc->g = g;
    sc->steps = steps;
    sc->is_output = is_output;
    sc->nv = g->values.len;
    sc->n_steps = steps->len;
    size_t nv1 = (size_t)sc->nv + 1, ns = (size_t)(steps->len ? steps->len : 1);
    sc->ref_start = gr_calloc(nv1, sizeof(int));
    sc->extra_head = gr_malloc(sizeof(int) * nv1);
    sc->dead = gr_calloc(ns, sizeof(bool));
    sc->wk = gr_calloc(ns, sizeof(gr_fuse_wk *));
    sc->grow = gr_calloc(ns, sizeof(bool));
    sc->stamp = gr_malloc(sizeof(int) * ns);
    if (!sc->ref_start || !sc->extra_head || !sc->dead || !sc->wk || !sc->grow || !sc->stamp) {
        sweep_free(sc);
        return gr_nomem();
    }
    for (int v = 0; v < sc->nv; v++) sc->extra_head[v] = -1;
    for (int j = 0; j < steps->len; j++) sc->stamp[j] = -1;
    for (int j = 0; j < steps->len; j++) {
        const gr_step *s = &steps->data[j];
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
            if (s->args[a].value >= 0 && s->args[a].value < sc->nv) sc->ref_start[s->args[a].value + 1]++;
    }
    for (int v = 0; v < sc->nv; v++) sc->ref_start[v + 1] += sc->ref_start[v];
    int total = sc->ref_start[sc->nv];
    sc->ref_steps = gr_malloc(sizeof(int) * (size_t)(total ? total : 1));
    int *fill = gr_malloc(sizeof(int) * nv1);
    if (!sc->ref_steps || !fill) {
        gr_free(fill, sizeof(int) * nv1);
        sweep_free(sc);
        return gr_nomem();
    }
    memcpy(fill, sc->ref_start, sizeof(int) * nv1);
    for (int j = 0; j < steps->len; j++) {
        const gr_step *s = &steps->data[j];
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
            if (s->args[a].value >= 0 && s->args[a].value < sc->nv) sc->ref_steps[fill[s->args[a].value]++] = j;
    }
    gr_free(fill, sizeof(int) * nv1);
    return GR_OK;
}

/* Applies the checks of a step j that binds v: *stop when fusion of step i
 * is off (another writer, an earlier or non-kernel reader, too many readers). */
static void judge_step(const gr_step_list *steps, int i, int j, int v, int limit, int *readers, int *n_readers, bool *stop) {
    const gr_step *s = &steps->data[j];
    for (int a = 0; a < s->n_args && s->kind == GR_STEP_KERNEL && s->kernel; a++)
        if (a < s->kernel->n_params && s->kernel->params[a].written && s->args[a].kind == GR_ARG_VALUE &&
            s->args[a].value == v) {
            *stop = true; /* another writer */
            return;
        }
    if (s->kind == GR_STEP_LIBCALL && s->n_args > 2 && s->args[2].value == v) {
        *stop = true;
        return;
    }
    if (!step_reads(s, v)) return;
    if (j <= i || s->kind != GR_STEP_KERNEL || !s->kernel || *n_readers == limit) {
        *stop = true;
        return;
    }
    readers[(*n_readers)++] = j;
}

/* Readers of v through views. An ALIAS step viewing v at element offset 0 (a reshape, a
 * squeeze: v's elements at v's addresses) makes its kernel readers readers of v: each of their
 * args binding the view is bound to v for the attempt (the same address, so the kernel is
 * unchanged), and the view goes with dead-step elimination once nothing reads it. Why: the
 * decode step's K and V slices of GPT-2's fused q/k/v projection reach the cache append through
 * a reshape, and the split copy writing each slice could not go into the append (issue 12). A
 * view that is a graph output, is written, is read by a step that is not a kernel, or views v
 * at another offset stops the fusion, as any such reader of v does. */
enum { FUSE_MAX_VIEW_BINDS = 16, FUSE_MAX_VIEW_DEPTH = 4 };
typedef struct {
    int step, arg, view;   /* steps[step].args[arg] bound view, now v */
    const gr_kernel *kernel; /* the step's kernel when it was rebound */
} view_bind;

static void judge_view(sweep_ctx *sc, int i, int v, int view, int depth, int limit, int *readers, int *n_readers, view_bind *vb,
                       int *n_vb, bool *stop) {
    const gr_step_list *steps = sc->steps;
    if (view < 0 || view >= sc->nv || sc->is_output[view] || depth > FUSE_MAX_VIEW_DEPTH) {
        *stop = true;
        return;
    }
    for (int pass = 0; pass < 2 && !*stop; pass++) {
        int e = pass ? sc->extra_head[view] : sc->ref_start[view];
        while (!*stop && (pass ? e >= 0 : e < sc->ref_start[view + 1])) {
            int j = pass ? sc->extra.data[e].step : sc->ref_steps[e];
            e = pass ? sc->extra.data[e].next : e + 1;
            const gr_step *s = &steps->data[j];
            if (sc->dead[j] || !binds(s, view)) continue;
            if (s->kind == GR_STEP_ALIAS) {
                if (s->args[0].value != view) continue; /* a step viewing nothing of it: its output */
                if (s->args[0].elem_offset != 0) *stop = true;
                else judge_view(sc, i, v, s->out_value, depth + 1, limit, readers, n_readers, vb, n_vb, stop);
                continue;
            }
            if (j <= i || s->kind != GR_STEP_KERNEL || !s->kernel) {
                *stop = true;
                return;
            }
            bool seen = false; /* a reader reached twice (two views, or v and a view) binds each once */
            for (int q = 0; q < *n_vb && !seen; q++) seen = vb[q].step == j && vb[q].view == view;
            if (seen) continue;
            for (int a = 0; a < s->n_args && a < s->kernel->n_params; a++) {
                if (s->args[a].kind == GR_ARG_HOST_SCALAR && s->args[a].value == view) *stop = true;
                if (s->kernel->params[a].written && s->args[a].value == v) *stop = true; /* another writer of v */
                if (s->args[a].kind != GR_ARG_VALUE || s->args[a].value != view) continue;
                if (s->kernel->params[a].written || *n_vb == FUSE_MAX_VIEW_BINDS) *stop = true;
                else vb[(*n_vb)++] = (view_bind){j, a, view, s->kernel};
            }
            if (*stop) return;
            if (sc->stamp[j] == i) continue; /* among v's readers already */
            sc->stamp[j] = i;
            if (*n_readers == limit) {
                *stop = true;
                return;
            }
            readers[(*n_readers)++] = j;
        }
    }
}

/* Whether a load streams a full tensor (one element per point of P's space,
 * or a gather) rather than a broadcast operand (a stride 0 along a dim that
 * is larger than 1 or symbolic: bias rows, position tables, per-row ids),
 * which stays in cache. Decided on the loop nest's shape, not its extents,
 * so every binding of a symbolic model decides alike (kir.h, var_outer). */
static bool load_is_full(const gr_kernel *k, const gr_kexpr *e) {
    if (e->access.index >= 0) return true;
    for (int d = 0; d < k->n_outer; d++)
        if ((k->outer[d] > 1 || (k->var_outer >> d & 1)) && e->access.stride[d] == 0) return false;
    return true;
}

/* Recompute or materialise a producer P of value v with R > 1 readers.
 * Counting bytes per point of v's space (these kernels are memory bound):
 *   materialised: P reads its full operands once (L) and writes v, each
 *                 reader reads v:                      L + (1 + R) * |v|
 *   recomputed:   each reader r reads those full operands of P that it
 *                 does not read already:               sum_r new_r
 * Recompute only when that is strictly less. Why: duplicating every cheap
 * producer made a transformer's residual stream quadratic (h_k = h_{k-1} +
 * x_k is read by a layer norm and by h_{k+1}: copying it into both made
 * h_{k+1}'s kernel read h_{k-1}, x_k and x_{k+1}, and so on down the layers,
 * the last layer norm of a 12-layer GPT-2 reading ~25 tensors). Under this
 * rule a copy costs less than 3 full loads per reader (R = 2, new_r = L:
 * L < 3|v|; more readers, less), and duplicated work cannot grow with depth:
 * a copy makes its readers read the producer's operands, so the next
 * producer up a chain finds one reader more per level, and with two full
 * operands as wide as v (L = 2|v|: R * L < L + (R + 1)|v| needs R < 3) the
 * bf16 stream is materialised every other layer; an f32 stream with bf16
 * branch outputs (L = 1.5|v|, R < 5) every fourth. A producer of one full
 * operand (exp(x), x * 0.5 + c) adds no operand to its readers and is
 * recomputed into up to FUSE_MAX_READERS of them, as before.
 * tests/test_fuse_plan.c: the widest kernel is the same at 6 and 24 layers. */
static bool recompute_pays(const gr_step *ps, const gr_step_list *steps, const int *readers, int n_readers) {
    const gr_kernel *p = ps->kernel;
    int vp = p->stages[0].param;
    int64_t v_bytes = (int64_t)gr_dtype_size(p->params[vp].dtype);
    int64_t loads = 0, recomputed = 0;
    bool seen[GR_KMAX_PARAMS] = {false};
    for (int i = 0; i < p->nodes.len; i++) {
        const gr_kexpr *e = &p->nodes.data[i];
        if (e->op != GR_KX_LOAD || e->param < 0 || e->param >= ps->n_args || seen[e->param] || !load_is_full(p, e))
            continue;
        seen[e->param] = true;
        int64_t bytes = (int64_t)gr_dtype_size(p->params[e->param].dtype);
        loads += bytes;
        for (int r = 0; r < n_readers; r++) {
            const gr_step *cs = &steps->data[readers[r]];
            bool has = false;
            for (int a = 0; a < cs->n_args && a < cs->kernel->n_params && !has; a++)
                has = cs->kernel->params[a].kind == GR_KP_BUFFER && !cs->kernel->params[a].written &&
                      gr_step_arg_equal(&cs->args[a], &ps->args[e->param]);
            if (!has) recomputed += bytes;
        }
    }
    return recomputed < loads + (1 + (int64_t)n_readers) * v_bytes;
}

/* Fuses the movement kernels of m (fuse-move.c: one producer, or a concat's
 * parts) into every reader of v, or into none; *fused tells whether it did. */
static gr_status fuse_move(sweep_ctx *sc, const gr_fuse_move *m, int v, const int *readers, int n_readers, bool *fused) {
    *fused = false;
    gr_step_list *steps = sc->steps;
    const gr_kaccess *loads[GR_FUSE_MOVE_LOADS];
    for (int r = 0; r < n_readers; r++) {
        int j = readers[r];
        const gr_step *cs = &steps->data[j];
        int n = sc->wk[j] ? gr_fuse_wk_value_loads(sc->wk[j], cs, v, loads, GR_FUSE_MOVE_LOADS)
                          : gr_fuse_move_loads(cs->kernel, cs, v, loads, GR_FUSE_MOVE_LOADS);
        if (n <= 0 || !gr_fuse_move_plan(m, cs->kernel, loads, n)) return GR_OK;
    }
    gr_kernel *made[FUSE_MAX_READERS] = {NULL};
    gr_fuse_wk_move_plan *plans[FUSE_MAX_READERS] = {NULL};
    gr_step_arg args[FUSE_MAX_READERS][GR_KMAX_PARAMS];
    gr_status st = GR_OK;
    bool all = true;
    for (int r = 0; r < n_readers && all && st == GR_OK; r++) {
        int j = readers[r];
        if (sc->wk[j]) { /* spliced into the kernel grown in place */
            bool copy = false;
            st = gr_fuse_wk_move_prepare(sc->wk[j], &steps->data[j], m, v, &all, &copy, &plans[r]);
            if (st != GR_OK || !all || !copy) continue;
            /* growing cannot match copying here: back to ordinary form, then copy */
            st = gr_fuse_wk_finish(sc->wk[j], &steps->data[j]);
            sc->wk[j] = NULL;
            if (st != GR_OK) break;
        }
        st = gr_fuse_move_into(m, v, &steps->data[j], &made[r], args[r], &all);
    }
    if (all && st == GR_OK) st = gr_vec_reserve(&sc->extra, sc->extra.len + n_readers * GR_KMAX_PARAMS);
    if (!all || st != GR_OK) {
        for (int r = 0; r < n_readers; r++) {
            gr_kernel_destroy(made[r]);
            gr_fuse_wk_move_release(plans[r]);
        }
        return st;
    }
    /* commit: nothing below fails */
    for (int r = 0; r < n_readers; r++) {
        int j = readers[r];
        gr_step *cs = &steps->data[j];
        if (plans[r]) {
            gr_fuse_wk_move_apply(sc->wk[j], cs, plans[r]);
        } else {
            gr_kernel_destroy(cs->kernel);
            cs->kernel = made[r];
            cs->n_args = made[r]->n_params;
            memset(cs->args, 0, sizeof cs->args);
            memcpy(cs->args, args[r], sizeof(gr_step_arg) * (size_t)made[r]->n_params);
            sc->grow[j] = !copy_always;
        }
        (void)add_refs(sc, j); /* room reserved above */
    }
    for (int p = 0; p < m->n_parts; p++) {
        gr_step *ps = &steps->data[m->part_step[p]];
        gr_kernel_destroy(ps->kernel);
        ps->kernel = NULL;
        gr_strfree(ps->reason);
        ps->reason = NULL;
        sc->dead[m->part_step[p]] = true;
    }
    *fused = true;
    return GR_OK;
}

/* Whether fusing producer step ps into reader cs could race: cs scatters (its threads store to
 * data-dependent addresses, codegen/kir.h) and ps reads a value cs writes, or the input such a
 * value is written in place into (gr_ir_value.inplace_of: the decode rewrite's cache append).
 * Elsewhere a scatter kernel takes producers into its loads like any reader: its stores, index
 * included, are kept as they are. */
static bool scatter_hazard(const gr_graph *g, const gr_step *ps, const gr_step *cs) {
    const gr_kernel *c = cs->kernel;
    if (!c || !gr_kernel_scatters(c)) return false;
    for (int s = 0; s < c->n_stages; s++) {
        const gr_kstage *st = &c->stages[s];
        if (st->kind != GR_KS_STORE || st->param < 0 || st->param >= cs->n_args || cs->args[st->param].kind != GR_ARG_VALUE) return true;
        int w = cs->args[st->param].value, alias = -1;
        if (w >= 0 && w < g->values.len && g->values.data[w].inplace_of > 0) alias = g->values.data[w].inplace_of - 1;
        for (int a = 0; a < ps->n_args; a++)
            if ((ps->args[a].kind == GR_ARG_VALUE || ps->args[a].kind == GR_ARG_HOST_SCALAR) &&
                (ps->args[a].value == w || ps->args[a].value == alias))
                return true;
    }
    return false;
}

/* Step i as the last-written part of a concat (several movement kernels writing
 * disjoint boxes of one value, fuse-move.c) fused into the value's one reader. */
static gr_status try_fuse_parts(sweep_ctx *sc, int i, bool *fused) {
    *fused = false;
    gr_step_list *steps = sc->steps;
    const gr_step *ps = &steps->data[i];
    if (ps->kind != GR_STEP_KERNEL || !ps->kernel || gr_fuse_move_load(ps->kernel) < 0) return GR_OK;
    int sp = ps->kernel->stages[0].param;
    if (sp < 0 || sp >= ps->n_args || ps->args[sp].kind != GR_ARG_VALUE) return GR_OK;
    int v = ps->args[sp].value;
    if (v < 0 || v >= sc->nv || sc->is_output[v] || sc->g->values.data[v].placement == GR_PLACE_HOST) return GR_OK;
    /* every step binding v, once each */
    enum { MAX_BINDERS = 2 * GR_FUSE_MAX_PARTS };
    int seen[MAX_BINDERS], n_seen = 0;
    int writers[GR_FUSE_MAX_PARTS], n_writers = 0, reader = -1, last_writer = -1;
    const gr_step *parts[GR_FUSE_MAX_PARTS];
    for (int pass = 0; pass < 2; pass++) {
        int e = pass ? sc->extra_head[v] : sc->ref_start[v];
        while (pass ? e >= 0 : e < sc->ref_start[v + 1]) {
            int j = pass ? sc->extra.data[e].step : sc->ref_steps[e];
            e = pass ? sc->extra.data[e].next : e + 1;
            if (sc->dead[j] || !binds(&steps->data[j], v)) continue;
            bool dup = false;
            for (int q = 0; q < n_seen && !dup; q++) dup = seen[q] == j;
            if (dup) continue;
            if (n_seen == MAX_BINDERS) return GR_OK;
            seen[n_seen++] = j;
            const gr_step *s = &steps->data[j];
            bool writes = false;
            for (int a = 0; a < s->n_args && s->kind == GR_STEP_KERNEL && s->kernel && a < s->kernel->n_params; a++)
                writes |= s->kernel->params[a].written && s->args[a].kind == GR_ARG_VALUE && s->args[a].value == v;
            if (s->kind == GR_STEP_LIBCALL && s->n_args > 2 && s->args[2].value == v) return GR_OK; /* written by a call */
            if (writes) {
                if (n_writers == GR_FUSE_MAX_PARTS) return GR_OK;
                parts[n_writers] = s;
                writers[n_writers++] = j;
                if (j > last_writer) last_writer = j;
            } else if (step_reads(s, v)) {
                if (reader >= 0 || s->kind != GR_STEP_KERNEL || !s->kernel) return GR_OK; /* one kernel reader */
                reader = j;
            }
        }
    }
    /* tried once, at the last writer; every write before the read */
    if (n_writers < 2 || last_writer != i || reader < 0 || reader < last_writer) return GR_OK;
    gr_fuse_move m;
    if (!gr_fuse_move_parts(&sc->g->values.data[v], v, parts, writers, n_writers, &m)) return GR_OK;
    for (int p = 0; p < n_writers; p++)
        if (scatter_hazard(sc->g, parts[p], &steps->data[reader])) return GR_OK;
    return fuse_move(sc, &m, v, &reader, 1, fused);
}

static gr_status fuse_readers(sweep_ctx *sc, int i, int v, int *readers, int n_readers, bool *fused);

/* Tries to fuse step i into all of its readers (into its only one unless
 * `recompute`); *fused tells whether it did. */
static gr_status try_fuse(sweep_ctx *sc, int i, bool recompute, bool *fused) {
    *fused = false;
    gr_step_list *steps = sc->steps;
    const gr_graph *g = sc->g;
    gr_step *ps = &steps->data[i];
    int v = producer_value(ps);
    if (v < 0) return try_fuse_parts(sc, i, fused);
    if (v >= sc->nv || sc->is_output[v]) return GR_OK;
    if (g->values.data[v].placement == GR_PLACE_HOST) return GR_OK;
    int readers[FUSE_MAX_READERS], n_readers = 0, limit = recompute ? FUSE_MAX_READERS : 1;
    view_bind vb[FUSE_MAX_VIEW_BINDS];
    int n_vb = 0;
    bool stop = false;
    for (int pass = 0; pass < 2 && !stop; pass++) {
        int e = pass ? sc->extra_head[v] : sc->ref_start[v];
        while (!stop && (pass ? e >= 0 : e < sc->ref_start[v + 1])) {
            int j = pass ? sc->extra.data[e].step : sc->ref_steps[e];
            e = pass ? sc->extra.data[e].next : e + 1;
            if (j == i || sc->dead[j] || !binds(&steps->data[j], v)) continue;
            const gr_step *s = &steps->data[j];
            if (s->kind == GR_STEP_ALIAS && s->n_args > 0 && s->args[0].kind == GR_ARG_VALUE && s->args[0].value == v &&
                s->args[0].elem_offset == 0 && j > i) {
                judge_view(sc, i, v, s->out_value, 1, limit, readers, &n_readers, vb, &n_vb, &stop);
                continue;
            }
            if (sc->stamp[j] == i) continue;
            sc->stamp[j] = i;
            judge_step(steps, i, j, v, limit, readers, &n_readers, &stop);
        }
    }
    if (stop) return try_fuse_parts(sc, i, fused); /* perhaps another writer: a concat's part */
    if (n_readers == 0) return GR_OK; /* no readers: dead, left to gr_pass_dce */
    /* readers through views read v for the attempt; put back where nothing was fused */
    for (int q = 0; q < n_vb; q++) steps->data[vb[q].step].args[vb[q].arg].value = v;
    gr_status st = fuse_readers(sc, i, v, readers, n_readers, fused);
    for (int q = 0; q < n_vb && !*fused; q++) {
        gr_step *s = &steps->data[vb[q].step];
        if (s->kernel == vb[q].kernel && vb[q].arg < s->n_args && s->args[vb[q].arg].value == v) {
            s->args[vb[q].arg].value = vb[q].view;
            continue;
        }
        /* a reader whose kernel changed form meanwhile (a growing one finished: its args may have
         * moved) keeps v, the same address; it joins v's readers so later sweeps see it */
        gr_status rs = add_refs(sc, vb[q].step);
        if (st == GR_OK) st = rs;
    }
    return st;
}

/* Fuses step i, the producer of v, into readers[0..n_readers) (all of them or none). */
static gr_status fuse_readers(sweep_ctx *sc, int i, int v, int *readers, int n_readers, bool *fused) {
    *fused = false;
    gr_step_list *steps = sc->steps;
    const gr_graph *g = sc->g;
    gr_step *ps = &steps->data[i];
    for (int a = 1; a < n_readers; a++) /* in list order, as a scan of the steps finds them */
        for (int b = a; b > 0 && readers[b] < readers[b - 1]; b--) {
            int t = readers[b];
            readers[b] = readers[b - 1];
            readers[b - 1] = t;
        }
    if (n_readers > 1 && ps->kernel->nodes.len > FUSE_MAX_RECOMPUTE) return GR_OK; /* too dear to recompute */
    if (n_readers > 1 && !recompute_pays(ps, steps, readers, n_readers)) return GR_OK; /* materialised */
    fuse_ctx f[FUSE_MAX_READERS];
    memset(f, 0, sizeof f[0] * (size_t)n_readers); /* only these are read (each f is ~2 KB) */
    for (int r = 0; r < n_readers; r++) {
        int j = readers[r];
        if (scatter_hazard(g, ps, &steps->data[j])) return GR_OK;
        if (!sc->wk[j] && sc->grow[j]) { /* fused into a second time in this sweep: grow it from now on */
            GR_TRY(gr_fuse_wk_create(steps->data[j].kernel, &sc->wk[j]));
            sc->grow[j] = false;
        }
        f[r].p = ps->kernel;
        f[r].ps = ps;
        f[r].c = steps->data[readers[r]].kernel;
        f[r].cs = &steps->data[readers[r]];
        f[r].value = v;
        gr_fuse_wk *w = sc->wk[readers[r]];
        if (!(w ? gr_fuse_wk_plan_map(w, &f[r]) : gr_fuse_plan_map(&f[r]))) {
            /* not one access matching P's space: a movement kernel may still go in (fuse-move.c) */
            gr_fuse_move m;
            if (!gr_fuse_move_single(ps, i, &m)) return GR_OK;
            return fuse_move(sc, &m, v, readers, n_readers, fused);
        }
    }
    /* build every reader's result first (nothing changes yet), then commit */
    gr_status st = GR_OK;
    bool all = true;
    for (int r = 0; r < n_readers && all && st == GR_OK; r++) {
        int j = readers[r];
        if (sc->wk[j]) {
            bool fits, copy;
            st = gr_fuse_wk_prepare(sc->wk[j], &f[r], &fits, &copy);
            if (st != GR_OK || !fits) {
                all = false;
                break;
            }
            if (!copy) continue;
            /* growing cannot match copying here: back to ordinary form, then copy */
            gr_fuse_ctx_release(&f[r]);
            st = gr_fuse_wk_finish(sc->wk[j], &steps->data[j]);
            sc->wk[j] = NULL;
            if (st != GR_OK || !gr_fuse_plan_map(&f[r])) {
                all = false;
                break;
            }
        }
        bool applied = false;
        st = fuse_pair(&f[r], &applied);
        all = st == GR_OK && applied;
    }
    if (all && st == GR_OK) st = gr_vec_reserve(&sc->extra, sc->extra.len + n_readers * GR_KMAX_PARAMS);
    if (!all || st != GR_OK) {
        for (int r = 0; r < n_readers; r++) {
            gr_kernel_destroy(f[r].n);
            gr_fuse_ctx_release(&f[r]);
        }
        return st;
    }
    /* commit: nothing below fails */
    for (int r = 0; r < n_readers; r++) {
        int j = readers[r];
        gr_step *cs = &steps->data[j];
        if (f[r].n) {
            gr_kernel_destroy(cs->kernel);
            cs->kernel = f[r].n;
            cs->n_args = f[r].n->n_params;
            memset(cs->args, 0, sizeof cs->args);
            memcpy(cs->args, f[r].args, sizeof(gr_step_arg) * (size_t)f[r].n->n_params);
            sc->grow[j] = !copy_always;
        } else {
            gr_fuse_wk_apply(sc->wk[j], &f[r], cs);
        }
        gr_fuse_ctx_release(&f[r]);
        (void)add_refs(sc, j); /* room reserved above */
    }
    gr_kernel_destroy(ps->kernel);
    ps->kernel = NULL;
    gr_strfree(ps->reason);
    ps->reason = NULL;
    sc->dead[i] = true;
    *fused = true;
    return GR_OK;
}

/* One sweep over the producers, last to first; *n_fused counts the fusions.
 * Whatever happens, grown kernels are finished and the list compacted, so
 * the list stays valid after an error. */
static gr_status fuse_sweep(const gr_graph *g, gr_step_list *steps, const bool *is_output, bool recompute, int *n_fused) {
    *n_fused = 0;
    sweep_ctx sc;
    GR_TRY(sweep_init(&sc, g, steps, is_output));
    gr_status st = GR_OK;
    for (int i = steps->len - 1; i >= 0 && st == GR_OK; i--) {
        bool fused;
        st = try_fuse(&sc, i, recompute, &fused);
        *n_fused += fused;
    }
    for (int j = 0; j < steps->len; j++) {
        if (!sc.wk[j]) continue;
        gr_status fs = gr_fuse_wk_finish(sc.wk[j], &steps->data[j]);
        sc.wk[j] = NULL;
        if (st == GR_OK) st = fs;
    }
    int kept = 0;
    for (int j = 0; j < steps->len; j++)
        if (!sc.dead[j]) {
            if (kept != j) steps->data[kept] = steps->data[j]; /* a step is ~1.1 KB: no copy in place */
            kept++;
        }
    steps->len = kept;
    sweep_free(&sc);
    return st;
}

gr_status gr_pass_fuse(const gr_graph *g, gr_step_list *steps) {
    if (!g || !steps) return gr_error(GR_ERR_INVALID, "gr_pass_fuse: NULL argument");
    GR_TRY(gr_pass_dce(g, steps));
    size_t nv = (size_t)(g->values.len ? g->values.len : 1);
    bool *is_output = gr_calloc(nv, sizeof(bool));
    if (!is_output) return gr_nomem();
    for (int o = 0; o < g->outputs.len; o++)
        if (g->outputs.data[o] >= 0 && g->outputs.data[o] < g->values.len) is_output[g->outputs.data[o]] = true;
    /* A single-reader sweep first, so that a producer considered for
     * recomputation is a maximal group (what will be copied is all there and
     * counted), then a sweep that may recompute; repeated while that changes
     * something (merging readers can make a value single-reader again). */
    gr_status st = GR_OK;
    for (;;) {
        int n_single, n_multi;
        if ((st = fuse_sweep(g, steps, is_output, false, &n_single)) != GR_OK) break;
        if ((st = fuse_sweep(g, steps, is_output, true, &n_multi)) != GR_OK) break;
        if (n_multi == 0) break;
    }
    gr_free(is_output, nv * sizeof(bool));
    GR_TRY(st);
    /* casts of a kernel's output (through views) into that kernel's store (fuse-store.c) */
    int n_store;
    GR_TRY(gr_pass_fuse_store_consumers(g, steps, &n_store));
    /* then consumers of a row reduction's per-row result into its rows (fuse-row.c): after the
     * store fusion, which is what puts RMSNorm's eps, sqrt and reciprocal into the reduction;
     * once more for a cast of such a consumer's output */
    int n_row;
    GR_TRY(gr_pass_fuse_row_consumers(g, steps, &n_row));
    if (n_row) GR_TRY(gr_pass_fuse_store_consumers(g, steps, &n_store));
    /* copies that only permute a matmul operand or result go into its descriptor */
    GR_TRY(gr_pass_fuse_matmul_layouts(g, steps));
    return gr_pass_dce(g, steps);
}
