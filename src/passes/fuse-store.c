/* passes/fuse-store — moves an elementwise consumer into its producer's store.
 *
 * fuse.c moves an elementwise *producer* into its readers, which needs the
 * producer to have no inner dims and each reader to visit the intermediate
 * dim for dim. Neither holds for the commonest waste under --precision:
 * a layer_norm (a reduction kernel, storing over_inner) or a gelu writes f32,
 * a view reshapes it (an ALIAS step; fuse.c looks through such views, but a
 * reduction is no producer it moves), and a cast kernel rounds it to bf16 for
 * the next matmul. Here the consumer goes
 * into the producer instead: the producer's store writes the consumer's
 * output, through the consumer's expression, and the f32 intermediate (one
 * store and one load per element) and the cast kernel disappear.
 *
 * Consumer C (kernel step): no inner dims, one STORE (not over_inner) to an
 * output w; its only buffer read is one param q, every load of which uses
 * C's store access, and that access is row-major contiguous over C's loop
 * nest at offset 0 (so C computes w[i] = f(v[i]) for every element i of v and
 * of w, which have the same element count); its nodes are constants, loads
 * of q and unary / binary / select / cast (no index, no accumulator, no
 * scalar param, no random). v is reached from the producer's output u
 * through zero or more ALIAS steps at element offset 0.
 * Producer P (kernel step before C): the only step writing u, through one
 * param bound to u alone and stored by one STORE stage (any kernel: an
 * elementwise one, a reduction's over_inner store), not loading it.
 * The views and v have no other reader and are not graph outputs; no step
 * between P and C binds w, and w is not a view.
 * The rewrite: P's param for u becomes w (C's dtype and binding) and its
 * store value f(round_u(x)), where x is what P stored and round_u the
 * conversion that storing into u did (so results are bit-identical); the
 * store's addresses are unchanged, which is right because w[i] pairs with
 * u[i]. When u has other readers or is a graph output, P keeps storing u and
 * gets a second STORE stage for w (same addresses) instead. C is removed;
 * the views, now unread, go in the caller's gr_pass_dce.
 * One pass over the steps with per-value counts: linear in the plan. */
#include "passes/fuse-impl.h"
#include <string.h>

typedef struct {
    int n_bind;     /* steps binding the value in an arg (an ALIAS step binds its source) */
    int first_bind; /* the first of them */
    int view_step;  /* the ALIAS step whose output it is, or -1 */
    int n_write;    /* steps that may write it (a library call or host step: any value it binds) */
} store_val;

/* Two accesses of k address the same element at every point (strides along
 * an extent-1 dim that is not symbolic never matter). */
static bool same_points(const gr_kernel *k, const gr_kaccess *a, const gr_kaccess *b) {
    if (a->offset != b->offset || a->index != b->index) return false;
    for (int d = 0; d < k->n_outer; d++)
        if ((k->outer[d] > 1 || (k->var_outer >> d & 1)) && a->stride[d] != b->stride[d]) return false;
    return true;
}

/* C is a pure function of one load: its read param, else -1. */
static int pure_consumer(const gr_step *s) {
    if (s->kind != GR_STEP_KERNEL || !s->kernel) return -1;
    const gr_kernel *k = s->kernel;
    if (k->n_inner != 0 || k->n_stages != 1) return -1;
    const gr_kstage *st = &k->stages[0];
    if (st->kind != GR_KS_STORE || st->over_inner || st->access.index != -1 || st->access.offset != 0) return -1;
    int64_t acc = 1;
    for (int d = k->n_outer - 1; d >= 0; d--) {
        if ((k->outer[d] > 1 || (k->var_outer >> d & 1)) && st->access.stride[d] != acc) return -1;
        acc *= k->outer[d];
    }
    int q = -1;
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        switch (e->op) {
        case GR_KX_CONST: case GR_KX_UNARY: case GR_KX_BINARY: case GR_KX_SELECT: case GR_KX_CAST: break;
        case GR_KX_LOAD:
            if (e->param < 0 || e->param >= k->n_params || (q >= 0 && e->param != q)) return -1;
            if (e->access.index != -1 || !same_points(k, &e->access, &st->access)) return -1;
            q = e->param;
            break;
        default: return -1;
        }
    }
    if (q < 0 || q == st->param || q >= s->n_args || k->params[q].kind != GR_KP_BUFFER || k->params[q].written) return -1;
    for (int p = 0; p < k->n_params && p < s->n_args; p++) { /* only q is read; only the store written */
        if (k->params[p].kind != GR_KP_BUFFER && k->params[p].kind != GR_KP_SHAPE) return -1;
        if (k->params[p].kind == GR_KP_BUFFER && p != q && p != st->param) return -1;
    }
    const gr_step_arg *in = &s->args[q], *out = &s->args[st->param];
    if (in->kind != GR_ARG_VALUE || in->elem_offset != 0 || out->kind != GR_ARG_VALUE || out->elem_offset != 0) return -1;
    if (in->value == out->value) return -1;
    return q;
}

/* The STORE stage of P writing u through param *param (bound to u alone,
 * never loaded), or -1. */
static int producer_stage(const gr_step *s, int u, int *param) {
    if (s->kind != GR_STEP_KERNEL || !s->kernel) return -1;
    const gr_kernel *k = s->kernel;
    int pu = -1;
    for (int a = 0; a < s->n_args && a < k->n_params; a++)
        if ((s->args[a].kind == GR_ARG_VALUE || s->args[a].kind == GR_ARG_HOST_SCALAR) && s->args[a].value == u) {
            if (pu >= 0 || s->args[a].kind != GR_ARG_VALUE || s->args[a].elem_offset != 0) return -1;
            pu = a;
        }
    if (pu < 0 || k->params[pu].kind != GR_KP_BUFFER || !k->params[pu].written) return -1;
    int stage = -1;
    for (int t = 0; t < k->n_stages; t++)
        if (k->stages[t].kind == GR_KS_STORE && k->stages[t].param == pu) {
            if (stage >= 0) return -1;
            stage = t;
        }
    for (int i = 0; i < k->nodes.len; i++)
        if ((k->nodes.data[i].op == GR_KX_LOAD || k->nodes.data[i].op == GR_KX_PARAM) && k->nodes.data[i].param == pu)
            return -1;
    *param = pu;
    return stage;
}

/* Appends C's expression to P with loads of q replaced by `sub`; *root = C's stored value. */
static gr_status append_consumer(gr_kernel *p, const gr_kernel *c, int q, int sub, int *root) {
    int n = c->nodes.len;
    int *map = gr_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!map) return gr_nomem();
    gr_status st = GR_OK;
    for (int i = 0; i < n && st == GR_OK; i++) {
        gr_kexpr e = c->nodes.data[i];
        if (e.op == GR_KX_LOAD && e.param == q) {
            map[i] = sub;
            continue;
        }
        if (e.op == GR_KX_UNARY || e.op == GR_KX_CAST || e.op == GR_KX_BINARY || e.op == GR_KX_SELECT) e.a = map[e.a];
        if (e.op == GR_KX_BINARY || e.op == GR_KX_SELECT) e.b = map[e.b];
        if (e.op == GR_KX_SELECT) e.c = map[e.c];
        st = gr_kernel_add_expr(p, &e, &map[i]);
    }
    if (st == GR_OK) *root = map[c->stages[0].value];
    gr_free(map, sizeof(int) * (size_t)(n ? n : 1));
    return st;
}

/* Rewrites P to store C's output: in place of u, or (keep_u) in a stage of
 * its own after P's others. *done = false when P has no room. */
static gr_status fuse_into_store(gr_step *ps, int stage, int pu, const gr_step *cs, int q, bool keep_u, bool *done) {
    *done = false;
    const gr_kernel *c = cs->kernel;
    if (keep_u && (ps->kernel->n_params >= GR_KMAX_PARAMS || ps->kernel->n_stages >= GR_KMAX_STAGES)) return GR_OK;
    gr_kernel *n;
    GR_TRY(gr_kernel_clone(ps->kernel, &n));
    int x = n->stages[stage].value, sub = x, root = -1;
    /* round / wrap exactly as storing into u did (as fuse.c's substitute) */
    gr_dtype ut = n->params[pu].dtype, xt = n->nodes.data[x].dtype;
    gr_status st = GR_OK;
    if (xt != ut || ut == GR_F16 || ut == GR_BF16 || ut == GR_I32 || ut == GR_I8 || ut == GR_U8)
        st = gr_kx_cast(n, ut, x, &sub);
    if (st == GR_OK) st = append_consumer(n, c, q, sub, &root);
    if (st == GR_OK) {
        const gr_kparam *w = &c->params[c->stages[0].param];
        gr_step_arg args[GR_KMAX_PARAMS];
        memcpy(args, ps->args, sizeof args);
        int pw = pu;
        if (keep_u) {
            pw = n->n_params++;
            n->params[pw] = *w;
            gr_fuse_unique_param_name(n, pw);
            n->stages[n->n_stages] = n->stages[stage];
            stage = n->n_stages++;
            n->stages[stage].param = pw;
        }
        n->params[pw].dtype = w->dtype;
        n->stages[stage].value = root;
        args[pw] = cs->args[c->stages[0].param];
        return gr_fuse_install(n, args, c, ps, "the store", done);
    }
    gr_kernel_destroy(n);
    return st;
}

void gr_fuse_unique_param_name(gr_kernel *n, int w) {
    for (int a = 0, alt = 0; a < w; a++)
        if (!strcmp(n->params[a].name, n->params[w].name)) {
            gr_name_copy(n->params[w].name, sizeof n->params[w].name, "y", w + 100 * alt++);
            a = -1;
        }
}

gr_status gr_fuse_install(gr_kernel *n, gr_step_arg *args, const gr_kernel *c, gr_step *into, const char *what,
                          bool *done) {
    gr_status st = gr_pass_cse_kernel(n, args);
    if (st == GR_OK && GR_VERIFY_EVERY_KERNEL) st = gr_kernel_verify(n);
    if (st != GR_OK) {
        if (st != GR_ERR_NOMEM)
            st = gr_error_prefix(GR_ERR_INTERNAL, "fusing kernel %s into %s of %s: ", c->name, what, into->kernel->name);
        gr_kernel_destroy(n);
        return st;
    }
    if (n->source_node < 0 || (c->source_node >= 0 && c->source_node < n->source_node)) n->source_node = c->source_node;
    gr_kernel_destroy(into->kernel);
    into->kernel = n;
    memcpy(into->args, args, sizeof into->args); /* args has GR_KMAX_PARAMS entries */
    into->n_args = n->n_params;
    *done = true;
    return GR_OK;
}

gr_status gr_pass_fuse_store_consumers(const gr_graph *g, gr_step_list *steps, int *n_fused) {
    *n_fused = 0;
    int nv = g->values.len, ns = steps->len;
    size_t nvs = (size_t)(nv ? nv : 1), nss = (size_t)(ns ? ns : 1);
    store_val *val = gr_malloc(sizeof(store_val) * nvs);
    bool *gone = gr_calloc(nss, sizeof(bool)), *changed = gr_calloc(nss, sizeof(bool));
    if (!val || !gone || !changed) {
        gr_free(val, sizeof(store_val) * nvs);
        gr_free(gone, nss * sizeof(bool));
        gr_free(changed, nss * sizeof(bool));
        return gr_nomem();
    }
    for (int v = 0; v < nv; v++) val[v] = (store_val){0, -1, -1, 0};
    for (int j = 0; j < ns; j++) {
        const gr_step *s = &steps->data[j];
        if (s->kind == GR_STEP_ALIAS && s->out_value >= 0 && s->out_value < nv) val[s->out_value].view_step = j;
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++) {
            int v = s->args[a].value;
            if (s->args[a].kind == GR_ARG_LITERAL || v < 0 || v >= nv) continue;
            bool again = false; /* a step binding v in two args counts once */
            for (int b = 0; b < a && !again; b++)
                again = s->args[b].kind != GR_ARG_LITERAL && s->args[b].value == v;
            if (again) continue;
            if (val[v].n_bind++ == 0) val[v].first_bind = j;
            if (gr_fuse_step_writes(s, a, v)) val[v].n_write++;
        }
    }
    bool *is_output = gr_calloc(nvs, sizeof(bool));
    if (!is_output) {
        gr_free(val, sizeof(store_val) * nvs);
        gr_free(gone, nss * sizeof(bool));
        gr_free(changed, nss * sizeof(bool));
        return gr_nomem();
    }
    for (int o = 0; o < g->outputs.len; o++)
        if (g->outputs.data[o] >= 0 && g->outputs.data[o] < nv) is_output[g->outputs.data[o]] = true;
    gr_status st = GR_OK;
    for (int j = 0; j < ns && st == GR_OK; j++) {
        const gr_step *cs = &steps->data[j];
        int q = pure_consumer(cs);
        if (q < 0 || changed[j]) continue;
        int w = cs->args[cs->kernel->stages[0].param].value;
        int u = cs->args[q].value;
        if (w < 0 || w >= nv || val[w].view_step >= 0 || val[w].first_bind != j || is_output[u]) continue;
        int64_t wn = gr_ir_value_numel(&g->values.data[w]);
        if (wn < 0 || wn != gr_kernel_points(cs->kernel) || gr_ir_value_numel(&g->values.data[u]) != wn) continue;
        /* back through the views: each read by the next only */
        /* back through the views, each bound by the next only, to u */
        bool ok = val[u].view_step < 0 || (val[u].n_bind == 1 && !is_output[u]);
        while (ok && val[u].view_step >= 0) {
            const gr_step *vs = &steps->data[val[u].view_step];
            if (vs->n_args < 1 || vs->args[0].kind != GR_ARG_VALUE || vs->args[0].elem_offset != 0) ok = false;
            else {
                u = vs->args[0].value;
                ok = u >= 0 && u < nv && gr_ir_value_numel(&g->values.data[u]) == wn &&
                     (val[u].view_step < 0 || (val[u].n_bind == 1 && !is_output[u]));
            }
        }
        if (!ok || g->values.data[u].placement == GR_PLACE_HOST) continue;
        /* u read elsewhere too (BERT's f32 residual stream and its bf16 copy for the next
         * matmul): P writes both, which still saves C's read of u and its launch */
        bool keep_u = is_output[u] || val[u].n_bind > 2;
        if (val[u].n_write != 1) continue; /* P must be its only writer (not so for a concat's pieces) */
        int pi = val[u].first_bind, pu = -1;
        if (pi < 0 || pi >= j || gone[pi] || changed[pi]) continue;
        int stage = producer_stage(&steps->data[pi], u, &pu);
        if (stage < 0) continue;
        bool done = false;
        st = fuse_into_store(&steps->data[pi], stage, pu, cs, q, keep_u, &done);
        if (!done) continue;
        gr_kernel_destroy(steps->data[j].kernel);
        steps->data[j].kernel = NULL;
        gone[j] = changed[pi] = true;
        (*n_fused)++;
    }
    int kept = 0;
    for (int j = 0; j < ns; j++)
        if (!gone[j]) {
            if (kept != j) steps->data[kept] = steps->data[j];
            kept++;
        }
    steps->len = kept;
    gr_free(val, sizeof(store_val) * nvs);
    gr_free(gone, nss * sizeof(bool));
    gr_free(changed, nss * sizeof(bool));
    gr_free(is_output, nvs * sizeof(bool));
    return st;
}
