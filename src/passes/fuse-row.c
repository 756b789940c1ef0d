/* passes/fuse-row — moves an elementwise consumer of a row reduction's
 * per-row result into the reduction kernel, as a store over the row.
 *
 * Exported RMSNorm (Llama, T5) arrives decomposed: pow, ReduceMean, add eps,
 * sqrt, reciprocal, mul, mul by the weight. Fusion makes two kernels of it: a
 * block kernel R over the rows storing r[row] = 1/sqrt(mean(x^2) + eps), and
 * an elementwise kernel C over [rows..., cols] computing x * r[row] * w[col].
 * fuse.c cannot merge them (its producers have no inner dims), fuse-store.c
 * neither (C reads more than r). Here C's expression becomes a STORE stage of
 * R that walks the row (over_inner): C's last loop dim becomes R's inner dim,
 * its loads of r become R's stored value, and R's load of x and C's are one
 * node after CSE, so the row is read once (with render-cuda's row cache, into
 * registers). Layer norm is lowered as one kernel already; this makes
 * RMSNorm one as well.
 *
 * Reduction R (kernel step i): one inner dim of extent N; a STORE stage, not
 * over the row, of value x to param pu bound to u alone at offset 0, its
 * access row-major contiguous over R's outer dims at offset 0; R does not
 * load u; R is u's only writer.
 * Consumer C (kernel step j > i): no inner dims, every stage a STORE (not
 * over the row, no gather) to a value w first bound by C, not a view, not
 * bound by R; outer dims R's plus one of extent N last (symbolic where R's
 * are); nodes: constants, outer indices (not the linear one), loads (a
 * gather only where it does not read u), unary, binary, select, cast; params: buffers and its
 * point-count shape. Its loads of u (directly or through views at offset 0
 * read only by C) read u[row]: R's store strides on the row dims, stride 0
 * on the last. Every other value C reads is ready before R: its writers and
 * the steps making it a view come before step i.
 * The rewrite: C's stores become R's over_inner stages (C's last dim -> R's
 * inner dim, strides and index alike), loads of u become x rounded as storing
 * into u rounds it, so results are bit-identical. R keeps storing u when
 * something else reads it (or its stage is not R's last), else that stage goes.
 * C is removed; gr_pass_dce removes the unread views. */
#include "passes/fuse-impl.h"
#include <string.h>

typedef struct {
    int n_bind;     /* steps binding the value (an ALIAS step binds its source) */
    int first_bind;
    int view_step;  /* the ALIAS step whose output it is, or -1 */
    int n_write;    /* steps that may write it */
    int last_write; /* the last of them, or -1 */
} row_val;

/* v (and every value it is a view of) is written, and made a view, before step i only. */
static bool ready_before(const gr_step_list *steps, const row_val *val, int nv, int v, int i) {
    for (int hops = 0; v >= 0 && v < nv && hops < 64; hops++) {
        if (val[v].last_write >= i) return false;
        if (val[v].view_step < 0) return true;
        if (val[v].view_step >= i) return false;
        const gr_step *vs = &steps->data[val[v].view_step];
        if (vs->n_args < 1 || vs->args[0].kind != GR_ARG_VALUE) return false;
        v = vs->args[0].value;
    }
    return false;
}

/* C's loop nest, stages, params and nodes as the header says (R: the reduction). */
static bool consumer_ok(const gr_kernel *c, const gr_kernel *r, const gr_step *cs) {
    int no = r->n_outer;
    if (c->n_inner != 0 || c->n_outer != no + 1 || c->n_stages < 1) return false;
    for (int d = 0; d < no; d++)
        if (c->outer[d] != r->outer[d] || ((c->var_outer ^ r->var_outer) >> d & 1)) return false;
    if (c->outer[no] != r->inner[0] || ((c->var_outer >> no & 1) != (r->var_inner & 1))) return false;
    for (int s = 0; s < c->n_stages; s++) {
        const gr_kstage *st = &c->stages[s];
        if (st->kind != GR_KS_STORE || st->over_inner || st->access.index != -1) return false;
    }
    for (int p = 0; p < c->n_params; p++) {
        if (p >= cs->n_args) return false;
        if (c->params[p].kind == GR_KP_BUFFER) {
            if (cs->args[p].kind != GR_ARG_VALUE) return false;
        } else if (!(c->params[p].kind == GR_KP_SHAPE && p == c->n_points_param)) {
            return false;
        }
    }
    for (int i = 0; i < c->nodes.len; i++) {
        const gr_kexpr *e = &c->nodes.data[i];
        switch (e->op) {
        case GR_KX_CONST: case GR_KX_UNARY: case GR_KX_BINARY: case GR_KX_SELECT: case GR_KX_CAST: break;
        case GR_KX_INDEX:
            if (e->which < 0 || e->which > no) return false;
            break;
        case GR_KX_LOAD:
            if (e->param < 0 || e->param >= c->n_params || e->access.index >= i) return false;
            break;
        default: return false;
        }
    }
    return true;
}

/* The stage of R storing u through *pu (bound to u alone at offset 0, never loaded), its
 * access row-major over R's outer dims at offset 0; -1 if none. */
static int row_stage(const gr_step *rs, int u, int *pu) {
    if (rs->kind != GR_STEP_KERNEL || !rs->kernel) return -1;
    const gr_kernel *k = rs->kernel;
    if (k->n_inner != 1) return -1;
    int p = -1;
    for (int a = 0; a < rs->n_args && a < k->n_params; a++)
        if (rs->args[a].kind != GR_ARG_LITERAL && rs->args[a].value == u) {
            if (p >= 0 || rs->args[a].kind != GR_ARG_VALUE || rs->args[a].elem_offset != 0) return -1;
            p = a;
        }
    if (p < 0 || k->params[p].kind != GR_KP_BUFFER) return -1;
    int stage = -1;
    for (int t = 0; t < k->n_stages; t++)
        if (k->stages[t].kind == GR_KS_STORE && k->stages[t].param == p) {
            if (stage >= 0) return -1;
            stage = t;
        }
    if (stage < 0) return -1;
    const gr_kstage *st = &k->stages[stage];
    if (st->over_inner || st->access.offset != 0 || st->access.index != -1) return -1;
    int64_t acc = 1;
    for (int d = k->n_outer - 1; d >= 0; d--) {
        if ((k->outer[d] > 1 || (k->var_outer >> d & 1)) && st->access.stride[d] != acc) return -1;
        acc *= k->outer[d];
    }
    for (int i = 0; i < k->nodes.len; i++)
        if ((k->nodes.data[i].op == GR_KX_LOAD || k->nodes.data[i].op == GR_KX_PARAM) && k->nodes.data[i].param == p) return -1;
    *pu = p;
    return stage;
}

/* C's access of its outer space as R's: the last outer dim becomes the inner dim. */
static gr_kaccess row_access(const gr_kaccess *a, int no) {
    gr_kaccess r = *a;
    r.inner_stride[0] = a->stride[no];
    r.stride[no] = 0;
    for (int d = 1; d < GR_MAX_DIMS; d++) r.inner_stride[d] = 0;
    return r;
}

/* Builds R + C (C's nodes appended, its stores as over_inner stages); *done = false when R
 * has no room for C's params or stages. On success the step holds the new kernel. */
static gr_status fuse_row(gr_step *rs, int stage, int pu, const gr_step *cs, const bool *reads_u, bool keep_u, bool *done) {
    *done = false;
    const gr_kernel *c = cs->kernel;
    int no = rs->kernel->n_outer;
    bool drop_u = !keep_u && stage == rs->kernel->n_stages - 1;
    if (rs->kernel->n_stages - drop_u + c->n_stages > GR_KMAX_STAGES) return GR_OK;
    gr_kernel *n;
    GR_TRY(gr_kernel_clone(rs->kernel, &n));
    gr_step_arg args[GR_KMAX_PARAMS];
    memcpy(args, rs->args, sizeof args);
    int nc = c->nodes.len;
    int *map = gr_malloc(sizeof(int) * (size_t)(nc ? nc : 1));
    if (!map) {
        gr_kernel_destroy(n);
        return gr_nomem();
    }
    int pmap[GR_KMAX_PARAMS];
    for (int p = 0; p < GR_KMAX_PARAMS; p++) pmap[p] = -1;
    bool room = true;
    gr_status st = GR_OK;
    /* x rounded as storing it into u rounds it (as fuse-store.c's substitute) */
    int x = n->stages[stage].value, sub = x;
    gr_dtype ut = n->params[pu].dtype, xt = n->nodes.data[x].dtype;
    if (xt != ut || ut == GR_F16 || ut == GR_BF16 || ut == GR_I32 || ut == GR_I8 || ut == GR_U8)
        st = gr_kx_cast(n, ut, x, &sub);
    for (int i = 0; i < nc && st == GR_OK && room; i++) {
        gr_kexpr e = c->nodes.data[i];
        if (e.op == GR_KX_LOAD && reads_u[e.param]) {
            map[i] = sub;
            if (e.dtype != ut) st = gr_kx_cast(n, e.dtype, sub, &map[i]);
            continue;
        }
        if (e.op == GR_KX_UNARY || e.op == GR_KX_CAST || e.op == GR_KX_BINARY || e.op == GR_KX_SELECT) e.a = map[e.a];
        if (e.op == GR_KX_BINARY || e.op == GR_KX_SELECT) e.b = map[e.b];
        if (e.op == GR_KX_SELECT) e.c = map[e.c];
        if (e.op == GR_KX_INDEX && e.which == no) e.which = GR_KIDX_INNER;
        if (e.op == GR_KX_LOAD) {
            if (pmap[e.param] < 0) pmap[e.param] = gr_fuse_map_param(&c->params[e.param], &cs->args[e.param], n->params, args, &n->n_params);
            if (pmap[e.param] < 0) {
                room = false;
                break;
            }
            e.param = pmap[e.param];
            e.access = row_access(&e.access, no);
            if (e.access.index >= 0) e.access.index = map[e.access.index]; /* a gather (Llama's embedding) */
        }
        st = gr_kernel_add_expr(n, &e, &map[i]);
    }
    if (st == GR_OK && room && drop_u) n->n_stages--;
    for (int s = 0; s < c->n_stages && st == GR_OK && room; s++) {
        const gr_kstage *cst = &c->stages[s];
        int w = n->n_params < GR_KMAX_PARAMS ? n->n_params++ : -1;
        if (w < 0) {
            room = false;
            break;
        }
        n->params[w] = c->params[cst->param];
        n->params[w].written = true;
        args[w] = cs->args[cst->param];
        gr_fuse_unique_param_name(n, w);
        gr_kstage ns = *cst;
        ns.over_inner = true;
        ns.param = w;
        ns.value = map[cst->value];
        ns.access = row_access(&cst->access, no);
        st = gr_kernel_add_stage(n, &ns);
    }
    gr_free(map, sizeof(int) * (size_t)(nc ? nc : 1));
    if (st == GR_OK && room) return gr_fuse_install(n, args, c, rs, "the rows", done);
    gr_kernel_destroy(n);
    return st;
}

/* Which of C's params read u (through views): reads_u[p]; *u_out the value R writes. false
 * when C's reads of it are not u[row] or a view on the way is read by anything else. */
static bool consumer_reads(const gr_step_list *steps, const row_val *val, int nv, const bool *is_output, const gr_step *cs,
                           int nth, int *u_out, bool *reads_u, int *n_reads) {
    const gr_kernel *c = cs->kernel;
    int no = c->n_outer - 1;
    int seen[GR_KMAX_PARAMS], n_seen = 0;
    *u_out = -1;
    *n_reads = 0;
    for (int p = 0; p < c->n_params; p++) reads_u[p] = false;
    /* the nth candidate: a value read broadcast along the last dim (Llama's first RMSNorm also
     * reads the token ids so) */
    for (int i = 0; i < c->nodes.len; i++) {
        const gr_kexpr *e = &c->nodes.data[i];
        if (e->op != GR_KX_LOAD || (c->outer[no] <= 1 && !(c->var_outer >> no & 1)) || e->access.stride[no] != 0) continue;
        if (e->access.offset != 0 || e->access.index != -1 || cs->args[e->param].elem_offset != 0) continue;
        int v = cs->args[e->param].value;
        /* back through views read only by the next one, to the written value */
        while (v >= 0 && v < nv && val[v].view_step >= 0 && val[v].n_bind == 1 && !is_output[v]) {
            const gr_step *vs = &steps->data[val[v].view_step];
            if (vs->n_args < 1 || vs->args[0].kind != GR_ARG_VALUE || vs->args[0].elem_offset != 0) return false;
            v = vs->args[0].value;
        }
        if (v < 0 || v >= nv || val[v].view_step >= 0) continue;
        int at = 0;
        while (at < n_seen && seen[at] != v) at++;
        if (at == n_seen && n_seen < GR_KMAX_PARAMS) seen[n_seen++] = v;
        if (at != nth) continue; /* one u per fusion */
        *u_out = v;
        if (!reads_u[e->param]) (*n_reads)++;
        reads_u[e->param] = true;
    }
    return *u_out >= 0;
}

gr_status gr_pass_fuse_row_consumers(const gr_graph *g, gr_step_list *steps, int *n_fused) {
    *n_fused = 0;
    int nv = g->values.len, ns = steps->len;
    size_t nvs = (size_t)(nv ? nv : 1), nss = (size_t)(ns ? ns : 1);
    row_val *val = gr_malloc(sizeof(row_val) * nvs);
    bool *gone = gr_calloc(nss, sizeof(bool)), *changed = gr_calloc(nss, sizeof(bool));
    bool *is_output = gr_calloc(nvs, sizeof(bool));
    if (!val || !gone || !changed || !is_output) {
        gr_free(val, sizeof(row_val) * nvs);
        gr_free(gone, nss * sizeof(bool));
        gr_free(changed, nss * sizeof(bool));
        gr_free(is_output, nvs * sizeof(bool));
        return gr_nomem();
    }
    for (int v = 0; v < nv; v++) val[v] = (row_val){0, -1, -1, 0, -1};
    for (int o = 0; o < g->outputs.len; o++)
        if (g->outputs.data[o] >= 0 && g->outputs.data[o] < nv) is_output[g->outputs.data[o]] = true;
    for (int j = 0; j < ns; j++) {
        const gr_step *s = &steps->data[j];
        if (s->kind == GR_STEP_ALIAS && s->out_value >= 0 && s->out_value < nv) val[s->out_value].view_step = j;
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++) {
            int v = s->args[a].value;
            if (s->args[a].kind == GR_ARG_LITERAL || v < 0 || v >= nv) continue;
            bool again = false; /* a step binding v in two args counts once */
            for (int b = 0; b < a && !again; b++) again = s->args[b].kind != GR_ARG_LITERAL && s->args[b].value == v;
            if (again) continue;
            if (val[v].n_bind++ == 0) val[v].first_bind = j;
            if (gr_fuse_step_writes(s, a, v)) val[v].n_write++, val[v].last_write = j;
        }
    }
    gr_status st = GR_OK;
    bool reads_u[GR_KMAX_PARAMS];
    for (int j = 0; j < ns && st == GR_OK; j++) {
        gr_step *cs = &steps->data[j];
        if (cs->kind != GR_STEP_KERNEL || !cs->kernel || changed[j] || cs->kernel->n_inner != 0 || cs->kernel->n_outer < 2) continue;
        const gr_kernel *c = cs->kernel;
        if (c->n_params > GR_KMAX_PARAMS) continue;
        int u, n_reads;
        for (int cand = 0; st == GR_OK && consumer_reads(steps, val, nv, is_output, cs, cand, &u, reads_u, &n_reads); cand++) {
            if (val[u].n_write != 1 || g->values.data[u].placement == GR_PLACE_HOST) continue;
            int ri = val[u].first_bind, pu = -1;
            if (ri < 0 || ri >= j || gone[ri] || changed[ri] || val[u].last_write != ri) continue;
            gr_step *rs = &steps->data[ri];
            int stage = row_stage(rs, u, &pu);
            if (stage < 0 || !consumer_ok(c, rs->kernel, cs)) continue;
            /* u read at u[row]: R's store strides on the row dims */
            bool ok = true;
            for (int i = 0; i < c->nodes.len && ok; i++) {
                const gr_kexpr *e = &c->nodes.data[i];
                if (e->op != GR_KX_LOAD || !reads_u[e->param]) continue;
                ok = e->access.stride[c->n_outer - 1] == 0 && e->access.offset == 0 && e->access.index == -1;
                for (int d = 0; d < rs->kernel->n_outer && ok; d++)
                    ok = (c->outer[d] <= 1 && !(c->var_outer >> d & 1)) || e->access.stride[d] == rs->kernel->stages[stage].access.stride[d];
            }
            /* every other value C reads is ready before R; C's outputs are new at C and not R's */
            for (int p = 0; p < c->n_params && ok; p++) {
                if (c->params[p].kind != GR_KP_BUFFER || reads_u[p]) continue;
                int v = cs->args[p].value;
                bool stored = false;
                for (int s = 0; s < c->n_stages; s++) stored = stored || c->stages[s].param == p;
                if (stored) {
                    ok = v >= 0 && v < nv && val[v].first_bind == j && val[v].view_step < 0;
                    for (int q = 0; q < c->n_params && ok; q++) /* not also read by C */
                        ok = q == p || c->params[q].kind != GR_KP_BUFFER || cs->args[q].value != v;
                    for (int i = 0; i < c->nodes.len && ok; i++)
                        ok = c->nodes.data[i].op != GR_KX_LOAD || c->nodes.data[i].param != p;
                } else {
                    ok = !c->params[p].written && ready_before(steps, val, nv, v, ri);
                }
            }
            if (!ok) continue;
            /* u read by anything but R and C (or the first view of the chain C reads it through):
             * R keeps storing it */
            bool keep_u = is_output[u] || val[u].n_bind > 2;
            bool done = false;
            st = fuse_row(rs, stage, pu, cs, reads_u, keep_u, &done);
            if (!done) continue;
            gr_kernel_destroy(cs->kernel);
            cs->kernel = NULL;
            gone[j] = changed[ri] = true;
            (*n_fused)++;
            break;
        }
    }
    int kept = 0;
    for (int j = 0; j < ns; j++)
        if (!gone[j]) {
            if (kept != j) steps->data[kept] = steps->data[j];
            kept++;
        }
    steps->len = kept;
    gr_free(val, sizeof(row_val) * nvs);
    gr_free(gone, nss * sizeof(bool));
    gr_free(changed, nss * sizeof(bool));
    gr_free(is_output, nvs * sizeof(bool));
    return st;
}
