/* passes/fuse-matmul — lets matmul library calls read and write permuted
 * layouts through their descriptor instead of through copy kernels.
 *
 * A copy kernel K (no inner dims, one STORE, not over the inner space, of a
 * single LOAD of the same dtype, no gather index, no broadcast) writes value
 * v contiguously: v[rowmajor(o)] = u[base + sum_d S[d]*o[d]]. Attention
 * blocks make many: q.view(b,n,h,d).permute(0,2,1,3) feeding q @ k^T, the
 * split of a fused qkv projection, the permute back after att @ v. cuBLASLt
 * reads an operand through a leading dim and a strided-batch offset, so
 * these copies can go:
 *
 * Operand: v (and every view of it) is read only as operand A or B of matmul
 * libcalls. Each such operand sees v through the 3-D view [batch, rows,
 * cols] (op(X)'s rows and cols; strides bs, ld and 1, or 1 and ld when
 * trans) at offset 0 covering v exactly once. Sorting that view's dims by
 * stride gives a row-major split of v, so K's map (E[d], S[d]) can be
 * reshaped onto it as numpy reshapes a strided view without copying
 * (consecutive dims that merge must be contiguous in u). That gives the
 * operand's strides in u; the descriptor can express them when rows or cols
 * has unit stride (the other one becomes the leading dim, trans follows) and
 * the leading dim is at least the stored row length, and the batch stride is
 * positive. Then the operand is rebound to u at elem_offset base and K
 * becomes dead (gr_pass_dce removes it). The pass repeats, so a chain of
 * copies (split, then transpose) folds in one after the other.
 *
 * Output: a matmul M writes v1 contiguously ([batch, m, n], no FULL bias or
 * residual, which share C's leading dim), and v1 (with its views) is read only by a
 * copy kernel K that is a permutation of v1 (offset 0, every element once).
 * v1 is then K's output v2 read through the inverse permutation, reshaped the
 * same way onto [batch, m, n]; when n has unit stride in v2, M writes v2
 * directly with ldc and batch_stride_c, and K is removed.
 *
 * Results are bit-identical: the reference matmul accumulates every output
 * element over k in ascending order whatever the strides are (libcall.c), and
 * a copy changes no bits. Values written by more than one step (concat
 * pieces), views written into, graph outputs, host values and steps that
 * could write u between K and a reader are left alone. */
#include "passes/passes.h"
#include <string.h>

#define FM_VIEW_DIMS 3 /* batch, rows, cols */
#define FM_MAX_OPERANDS 16 /* matmul operands one copy may be folded into */

/* ---- strided views ----------------------------------------------------------------- */

/* Source map of a copy: element at row-major position of dims ext[] sits at
 * base + sum stride[d]*i[d] of the source. */
typedef struct {
    int nd;
    int64_t ext[GR_MAX_DIMS];
    int64_t stride[GR_MAX_DIMS];
    int64_t base;
} fm_map;

/* Is (ext, stride) over the dims with ext > 1 an exact, offset-0 permutation
 * of a row-major layout of `total` elements? Returns the order (largest
 * stride first) in order[] and the count of such dims in *n_order. */
static bool permuted_rowmajor(int nd, const int64_t *ext, const int64_t *stride, int64_t total, int *order,
                              int *n_order) {
    int n = 0;
    for (int d = 0; d < nd; d++) {
        if (ext[d] <= 0) return false;
        if (ext[d] == 1) continue;
        int at = n++;
        while (at > 0 && stride[order[at - 1]] < stride[d]) order[at] = order[at - 1], at--;
        order[at] = d;
    }
    int64_t expect = 1;
    for (int q = n - 1; q >= 0; q--) {
        if (stride[order[q]] != expect) return false;
        expect *= ext[order[q]];
    }
    *n_order = n;
    return expect == total;
}

/* Reshapes the strided map onto new dims (all > 1, same element count) without a
 * copy, as numpy's nocopy reshape: out[j] = the stride of new dim j. */
static bool reshape_map(const fm_map *map, int n_new, const int64_t *new_ext, int64_t *out) {
    int64_t oe[GR_MAX_DIMS], os[GR_MAX_DIMS];
    int no = 0;
    for (int d = 0; d < map->nd; d++) {
        if (map->ext[d] == 1) continue;
        if (map->stride[d] == 0) return false; /* broadcast */
        oe[no] = map->ext[d];
        os[no] = map->stride[d];
        no++;
    }
    int oi = 0, ni = 0;
    while (ni < n_new && oi < no) {
        int oj = oi + 1, nj = ni + 1;
        int64_t np = new_ext[ni], op = oe[oi];
        while (np != op) {
            if (np < op) {
                if (nj >= n_new) return false;
                np *= new_ext[nj++];
            } else {
                if (oj >= no) return false;
                op *= oe[oj++];
            }
        }
        for (int ok = oi; ok < oj - 1; ok++)
            if (os[ok] != oe[ok + 1] * os[ok + 1]) return false; /* merged dims must be contiguous */
        out[nj - 1] = os[oj - 1];
        for (int nk = nj - 1; nk > ni; nk--) out[nk - 1] = out[nk] * new_ext[nk];
        ni = nj;
        oi = oj;
    }
    return ni == n_new && oi == no;
}

/* A view of v (dims ext[], strides stride[] in v's elements, offset 0) covering
 * v's `total` elements once (stride-0 dims excepted: they broadcast and keep
 * stride 0), composed with v's source map: out[] = strides in the source
 * (0 for dims of extent 1). */
static bool compose(int nd, const int64_t *ext, const int64_t *stride, int64_t total, const fm_map *map, int64_t *out) {
    int64_t cext[FM_VIEW_DIMS], cstride[FM_VIEW_DIMS];
    int idx[FM_VIEW_DIMS], nc = 0;
    for (int d = 0; d < nd; d++) {
        out[d] = 0;
        if (ext[d] > 1 && stride[d] != 0) idx[nc] = d, cext[nc] = ext[d], cstride[nc] = stride[d], nc++;
    }
    int order[FM_VIEW_DIMS], n_order = 0;
    if (!permuted_rowmajor(nc, cext, cstride, total, order, &n_order)) return false;
    int64_t new_ext[FM_VIEW_DIMS], new_stride[FM_VIEW_DIMS];
    for (int q = 0; q < n_order; q++) new_ext[q] = cext[order[q]];
    if (n_order > 0 && !reshape_map(map, n_order, new_ext, new_stride)) return false;
    if (n_order == 0) { /* a single element: the map must agree that it is one */
        for (int d = 0; d < map->nd; d++)
            if (map->ext[d] != 1) return false;
    }
    for (int q = 0; q < n_order; q++) out[idx[order[q]]] = new_stride[q];
    return true;
}

/* ---- copy kernels ----------------------------------------------------------------------- */

typedef struct {
    int src, dst;     /* values u (read) and v (written) */
    fm_map map;       /* v's elements in u */
} fm_copy;

static bool parse_copy(const gr_graph *g, const gr_step *s, fm_copy *c) {
    if (s->kind != GR_STEP_KERNEL || !s->kernel) return false;
    const gr_kernel *k = s->kernel;
    if (k->n_inner != 0 || k->n_stages != 1 || k->n_outer > GR_MAX_DIMS) return false;
    const gr_kstage *st = &k->stages[0];
    if (st->kind != GR_KS_STORE || st->over_inner || st->access.index != -1 || st->access.offset != 0) return false;
    if (st->param < 0 || st->param >= k->n_params || st->param >= s->n_args) return false;
    if (st->value < 0 || st->value >= k->nodes.len) return false;
    const gr_kexpr *ld = &k->nodes.data[st->value];
    if (ld->op != GR_KX_LOAD || ld->access.index != -1 || ld->param < 0 || ld->param >= k->n_params ||
        ld->param >= s->n_args || ld->param == st->param)
        return false;
    const gr_kparam *sp = &k->params[st->param], *lp = &k->params[ld->param];
    if (sp->kind != GR_KP_BUFFER || lp->kind != GR_KP_BUFFER || lp->written || sp->dtype != lp->dtype ||
        ld->dtype != sp->dtype)
        return false;
    const gr_step_arg *sa = &s->args[st->param], *la = &s->args[ld->param];
    if (sa->kind != GR_ARG_VALUE || la->kind != GR_ARG_VALUE || sa->elem_offset != 0) return false;
    if (sa->value < 0 || sa->value >= g->values.len || la->value < 0 || la->value >= g->values.len) return false;
    if (g->values.data[sa->value].dtype != sp->dtype || g->values.data[la->value].dtype != lp->dtype) return false;
    /* writes all of v, row-major, each element once */
    int64_t rs = 1;
    for (int d = k->n_outer - 1; d >= 0; d--) {
        if (k->outer[d] <= 0) return false;
        if (k->outer[d] > 1 && st->access.stride[d] != rs) return false;
        if (k->outer[d] > 1 && ld->access.stride[d] == 0) return false; /* broadcast */
        rs *= k->outer[d];
    }
    if (gr_ir_value_numel(&g->values.data[sa->value]) != rs) return false;
    c->src = la->value;
    c->dst = sa->value;
    c->map.nd = k->n_outer;
    c->map.base = la->elem_offset + ld->access.offset;
    for (int d = 0; d < k->n_outer; d++) c->map.ext[d] = k->outer[d], c->map.stride[d] = ld->access.stride[d];
    return c->map.base >= 0;
}

/* ---- value facts ---------------------------------------------------------------------------- */

typedef struct {
    int step, next;
} fm_link;

typedef struct {
    const gr_graph *g;
    gr_step_list *steps;
    int nv;
    int *view_of;         /* ALIAS source of a view, -1 for a root */
    int64_t *view_off;    /* its elem offset in the source */
    int *root;            /* root_of, computed once per value */
    int64_t *root_off;
    bool *is_output;      /* per root: it or one of its views is a graph output */
    /* Per round: the steps touching each root (step_touches_root), so a copy
     * finds its readers without scanning every step. Chains may hold stale
     * entries (a step rebound since, or removed): users re-check each step. */
    int *touch_head;      /* per root: chain in links, -1 = none */
    GR_VEC(fm_link) links;
    bool *dead;           /* per step: removed this round (compacted after it) */
    int *n_host;          /* n_host[j]: HOST steps among steps [0, j) */
    int *stamp;           /* per step: last query that met it */
    int stamp_now;
    int cap_steps;
} fm_ctx;

/* Root of v through views; *off (optional) accumulates the elem offset. */
static int root_of(const fm_ctx *c, int v, int64_t *off) {
    if (v >= 0 && v < c->nv) {
        if (off) *off = c->root_off[v];
        return c->root[v];
    }
    if (off) *off = 0;
    return v;
}

/* The walk root_of's table is made of (views of views, with a guard against cycles). */
static int walk_root(const fm_ctx *c, int v, int64_t *off) {
    int64_t o = 0;
    for (int guard = 0; v >= 0 && v < c->nv && c->view_of[v] >= 0 && guard <= c->nv; guard++) {
        o += c->view_off[v];
        v = c->view_of[v];
    }
    *off = o;
    return v;
}

static bool step_writes_root(const fm_ctx *c, const gr_step *s, int root) {
    switch (s->kind) {
    case GR_STEP_ALIAS: return false;
    case GR_STEP_LIBCALL:
        return s->n_args > 2 && s->args[2].kind == GR_ARG_VALUE && root_of(c, s->args[2].value, NULL) == root;
    case GR_STEP_KERNEL:
        if (!s->kernel) return true;
        for (int p = 0; p < s->kernel->n_params && p < s->n_args; p++)
            if (s->kernel->params[p].written && s->args[p].kind == GR_ARG_VALUE &&
                root_of(c, s->args[p].value, NULL) == root)
                return true;
        return false;
    case GR_STEP_HOST: return true; /* may write anything it binds; be safe */
    }
    return true;
}

/* Does step s bind a value with this root in any way (HOST: also its node's inputs)? */
static bool step_touches_root(const fm_ctx *c, const gr_step *s, int root) {
    if (s->kind == GR_STEP_ALIAS) return false;
    for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
        if ((s->args[a].kind == GR_ARG_VALUE || s->args[a].kind == GR_ARG_HOST_SCALAR) &&
            root_of(c, s->args[a].value, NULL) == root)
            return true;
    if (s->kind == GR_STEP_HOST && s->node >= 0 && s->node < c->g->nodes.len) {
        const gr_ir_node *nd = &c->g->nodes.data[s->node];
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && root_of(c, nd->in[i], NULL) == root) return true;
    }
    return false;
}

static void touch_add(fm_ctx *c, int root, int step) {
    if (root < 0 || root >= c->nv) return;
    c->links.data[c->links.len] = (fm_link){step, c->touch_head[root]};
    c->touch_head[root] = c->links.len++;
}

/* Room for the links one rebinding may add (callers reserve before they commit). */
static gr_status touch_reserve(fm_ctx *c) { return gr_vec_reserve(&c->links, c->links.len + FM_MAX_OPERANDS + 1); }

static gr_status touch_build(fm_ctx *c) {
    gr_step_list *steps = c->steps;
    c->links.len = 0;
    for (int v = 0; v < c->nv; v++) c->touch_head[v] = -1;
    c->n_host[0] = 0;
    for (int j = 0; j < steps->len; j++) {
        const gr_step *s = &steps->data[j];
        c->dead[j] = false;
        c->stamp[j] = -1;
        c->n_host[j + 1] = c->n_host[j] + (s->kind == GR_STEP_HOST);
        if (s->kind == GR_STEP_ALIAS) continue;
        int extra = s->kind == GR_STEP_HOST && s->node >= 0 && s->node < c->g->nodes.len ? c->g->nodes.data[s->node].n_in : 0;
        GR_TRY(gr_vec_reserve(&c->links, c->links.len + s->n_args + extra));
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
            if (s->args[a].kind == GR_ARG_VALUE || s->args[a].kind == GR_ARG_HOST_SCALAR)
                touch_add(c, root_of(c, s->args[a].value, NULL), j);
        for (int i = 0; i < extra; i++)
            if (c->g->nodes.data[s->node].in[i] >= 0) touch_add(c, root_of(c, c->g->nodes.data[s->node].in[i], NULL), j);
    }
    return GR_OK;
}

/* Runs the statement after it with j = every live step other than `skip`
 * that touches root, each once (in no particular order: every use decides
 * on the set of such steps, not on their order). */
#define FOR_TOUCHING(c, root, skip, j)                                                                            \
    for (int e_ = (root) >= 0 && (root) < (c)->nv ? (c)->touch_head[(root)] : -1, j = -1, q_ = ++(c)->stamp_now; \
         e_ >= 0; e_ = (c)->links.data[e_].next)                                                                  \
        if ((j = (c)->links.data[e_].step) == (skip) || (c)->dead[j] || (c)->stamp[j] == q_ ||                  \
            ((c)->stamp[j] = q_, !step_touches_root((c), &(c)->steps->data[j], (root)))) {                        \
        } else

/* A root value a pass may retarget: a device node value, not a view, no graph
 * output among it and its views. */
static bool private_root(const fm_ctx *c, int v) {
    if (v < 0 || v >= c->nv || c->view_of[v] >= 0 || c->is_output[v]) return false;
    const gr_ir_value *x = &c->g->values.data[v];
    return x->kind == GR_VAL_NODE && x->placement != GR_PLACE_HOST;
}

/* ---- operands ------------------------------------------------------------------------------ */

typedef struct {
    int step, which;      /* libcall step, operand 0 (A) or 1 (B) */
    bool trans;
    int64_t ld, batch_stride;
    gr_step_arg arg;
} fm_operand;

/* The new binding of operand `which` of libcall s (reading v through `off`) when v = copy of cp. */
static bool plan_operand(const gr_step *s, int which, int64_t off, int64_t v_numel, const fm_copy *cp, fm_operand *o) {
    const gr_libcall *call = &s->call;
    if (call->kind != GR_LIB_MATMUL || off != 0) return false;
    int64_t rows = which == 0 ? call->m : call->k, cols = which == 0 ? call->k : call->n;
    bool trans = which == 0 ? call->trans_a : call->trans_b;
    int64_t ld = which == 0 ? call->lda : call->ldb;
    int64_t bs = which == 0 ? call->batch_stride_a : call->batch_stride_b;
    if (rows <= 0 || cols <= 0 || call->batch <= 0 || bs < 0) return false;
    int64_t ext[FM_VIEW_DIMS] = {call->batch, rows, cols};
    int64_t stride[FM_VIEW_DIMS] = {call->batch > 1 ? bs : 0, trans ? 1 : ld, trans ? ld : 1};
    int64_t ns[FM_VIEW_DIMS];
    if (!compose(FM_VIEW_DIMS, ext, stride, v_numel, &cp->map, ns)) return false;
    bool keep = (cols == 1 || ns[2] == 1) && (rows == 1 || ns[1] >= cols);
    bool flip = (rows == 1 || ns[1] == 1) && (cols == 1 || ns[2] >= rows);
    bool new_trans;
    if (keep && (!trans || !flip)) new_trans = false;
    else if (flip) new_trans = true;
    else return false;
    o->step = -1;
    o->which = which;
    o->trans = new_trans;
    o->ld = new_trans ? (cols == 1 ? rows : ns[2]) : (rows == 1 ? cols : ns[1]);
    o->batch_stride = bs;
    if (call->batch > 1 && bs != 0) {
        if (ns[0] <= 0) return false;
        o->batch_stride = ns[0];
    }
    o->arg = (gr_step_arg){.kind = GR_ARG_VALUE, .value = cp->src, .elem_offset = cp->map.base};
    return true;
}

/* Rebinds every reader of copy step i's output (parsed into *copy) to its source; true when done. */
static bool try_operands(fm_ctx *c, int i, const fm_copy *copy) {
    const gr_step_list *steps = c->steps;
    fm_copy cp = *copy;
    if (!private_root(c, cp.dst)) return false;
    int64_t numel = gr_ir_value_numel(&c->g->values.data[cp.dst]);
    int src_root = root_of(c, cp.src, NULL);
    if (src_root == cp.dst) return false;
    fm_operand ops[FM_MAX_OPERANDS];
    int n_ops = 0, last = i;
    FOR_TOUCHING(c, cp.dst, i, j) {
        const gr_step *s = &steps->data[j];
        if (s->kind != GR_STEP_LIBCALL || j < i || s->n_args < 3) return false;
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++) {
            const gr_step_arg *arg = &s->args[a];
            if (arg->kind != GR_ARG_VALUE && arg->kind != GR_ARG_HOST_SCALAR) continue;
            int64_t off;
            if (root_of(c, arg->value, &off) != cp.dst) continue;
            if (a > 1 || arg->kind != GR_ARG_VALUE || n_ops == FM_MAX_OPERANDS) return false; /* C or bias */
            if (!plan_operand(s, a, off + arg->elem_offset, numel, &cp, &ops[n_ops])) return false;
            ops[n_ops++].step = j;
        }
        if (j > last) last = j;
    }
    if (n_ops == 0) return false;
    /* u must hold the same data until the last reader (which must not write it
     * either): no step in (i, last] writes its root, and no host step (which
     * may write anything) lies between */
    if (c->n_host[last + 1] - c->n_host[i + 1] > 0) return false;
    FOR_TOUCHING(c, src_root, -1, j)
        if (j > i && j <= last && step_writes_root(c, &steps->data[j], src_root)) return false;
    for (int q = 0; q < n_ops; q++) {
        gr_step *s = &steps->data[ops[q].step];
        touch_add(c, src_root, ops[q].step); /* room reserved by the caller */
        s->args[ops[q].which] = ops[q].arg;
        if (ops[q].which == 0) {
            s->call.trans_a = ops[q].trans;
            s->call.lda = ops[q].ld;
            s->call.batch_stride_a = ops[q].batch_stride;
        } else {
            s->call.trans_b = ops[q].trans;
            s->call.ldb = ops[q].ld;
            s->call.batch_stride_b = ops[q].batch_stride;
        }
    }
    return true;
}

/* ---- outputs ----------------------------------------------------------------------------------- */

/* Makes the matmul writing copy step i's input (parsed into *copy) write its output instead; removes step i. */
static bool try_output(fm_ctx *c, int i, const fm_copy *copy) {
    gr_step_list *steps = c->steps;
    fm_copy cp = *copy;
    int64_t off;
    int v1 = root_of(c, cp.src, &off);
    off += cp.map.base;
    int v2 = cp.dst;
    if (off != 0 || v1 == v2 || !private_root(c, v1) || v2 < 0 || v2 >= c->nv || c->view_of[v2] >= 0 ||
        c->g->values.data[v2].placement == GR_PLACE_HOST || c->g->values.data[v2].kind != GR_VAL_NODE)
        return false;
    int64_t numel = gr_ir_value_numel(&c->g->values.data[v1]);
    if (numel <= 0 || gr_ir_value_numel(&c->g->values.data[v2]) != numel) return false;
    /* v1: one writer M (a matmul, before i), one reader (step i); v2: one writer (step i) */
    int m_step = -1;
    FOR_TOUCHING(c, v2, i, j) {
        if (j < i) return false;
        if (step_writes_root(c, &steps->data[j], v2)) return false;
    }
    FOR_TOUCHING(c, v1, i, j) {
        const gr_step *s = &steps->data[j];
        if (s->kind != GR_STEP_LIBCALL || m_step >= 0 || j > i || s->n_args < 3) return false;
        for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
            if (a != 2 && (s->args[a].kind == GR_ARG_VALUE || s->args[a].kind == GR_ARG_HOST_SCALAR) &&
                root_of(c, s->args[a].value, NULL) == v1)
                return false;
        if (s->args[2].kind != GR_ARG_VALUE || s->args[2].value != v1 || s->args[2].elem_offset != 0) return false;
        m_step = j;
    }
    if (m_step < 0) return false;
    gr_step *ms = &steps->data[m_step];
    const gr_libcall *call = &ms->call;
    if (call->kind != GR_LIB_MATMUL || call->bias == GR_BIAS_FULL || call->residual || call->m <= 0 || call->n <= 0 ||
        call->batch <= 0 || call->ldc != call->n || (call->batch > 1 && call->batch_stride_c != call->m * call->n) ||
        call->batch * call->m * call->n != numel)
        return false;
    /* the copy must be a permutation of v1; its inverse is v1's map into v2 */
    int order[GR_MAX_DIMS], n_order;
    if (!permuted_rowmajor(cp.map.nd, cp.map.ext, cp.map.stride, numel, order, &n_order)) return false;
    int64_t rs[GR_MAX_DIMS], acc = 1;
    for (int d = cp.map.nd - 1; d >= 0; d--) rs[d] = acc, acc *= cp.map.ext[d];
    fm_map inv;
    memset(&inv, 0, sizeof inv);
    inv.nd = n_order;
    for (int q = 0; q < n_order; q++) inv.ext[q] = cp.map.ext[order[q]], inv.stride[q] = rs[order[q]];
    int64_t ext[FM_VIEW_DIMS] = {call->batch, call->m, call->n};
    int64_t stride[FM_VIEW_DIMS] = {call->batch > 1 ? call->m * call->n : 0, call->n, 1};
    int64_t ns[FM_VIEW_DIMS];
    if (!compose(FM_VIEW_DIMS, ext, stride, numel, &inv, ns)) return false;
    if ((call->n > 1 && ns[2] != 1) || (call->m > 1 && ns[1] < call->n) || (call->batch > 1 && ns[0] <= 0)) return false;
    /* commit */
    ms->args[2] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = v2, .elem_offset = 0};
    ms->call.ldc = call->m > 1 ? ns[1] : call->n;
    if (call->batch > 1) ms->call.batch_stride_c = ns[0];
    touch_add(c, v2, m_step); /* room reserved by the caller */
    gr_step *ks = &steps->data[i];
    gr_kernel_destroy(ks->kernel);
    ks->kernel = NULL;
    gr_strfree(ks->reason);
    ks->reason = NULL;
    c->dead[i] = true; /* the list is compacted after the round */
    return true;
}

/* ---- driver -------------------------------------------------------------------------------------- */

gr_status gr_pass_fuse_matmul_layouts(const gr_graph *g, gr_step_list *steps) {
    if (!g || !steps) return gr_error(GR_ERR_INVALID, "gr_pass_fuse_matmul_layouts: NULL argument");
    fm_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.steps = steps;
    c.nv = g->values.len;
    size_t nv = (size_t)(c.nv ? c.nv : 1);
    size_t ns = (size_t)steps->len + 1;
    c.view_of = gr_malloc(nv * sizeof(int));
    c.view_off = gr_malloc(nv * sizeof(int64_t));
    c.root = gr_malloc(nv * sizeof(int));
    c.root_off = gr_malloc(nv * sizeof(int64_t));
    c.is_output = gr_calloc(nv, sizeof(bool));
    c.touch_head = gr_malloc(nv * sizeof(int));
    c.dead = gr_calloc(ns, sizeof(bool));
    c.n_host = gr_malloc(ns * sizeof(int));
    c.stamp = gr_malloc(ns * sizeof(int));
    gr_status st = GR_OK;
    if (!c.view_of || !c.view_off || !c.root || !c.root_off || !c.is_output || !c.touch_head || !c.dead || !c.n_host ||
        !c.stamp) {
        st = gr_nomem();
        goto done;
    }
    for (int v = 0; v < c.nv; v++) c.view_of[v] = -1, c.view_off[v] = 0;
    for (int i = 0; i < steps->len; i++) {
        const gr_step *s = &steps->data[i];
        if (s->kind != GR_STEP_ALIAS || s->n_args < 1 || s->out_value < 0 || s->out_value >= c.nv) continue;
        c.view_of[s->out_value] = s->args[0].value;
        c.view_off[s->out_value] = s->args[0].elem_offset;
    }
    for (int v = 0; v < c.nv; v++) c.root[v] = walk_root(&c, v, &c.root_off[v]);
    for (int o = 0; o < g->outputs.len; o++) {
        int v = g->outputs.data[o];
        if (v >= 0 && v < c.nv) c.is_output[root_of(&c, v, NULL)] = true;
    }
    /* Each sweep leaves the copies it bypassed dead; removing them lets the next
     * sweep see the copy before (split → transpose → matmul) as read by matmuls only. */
    for (int round = 0; round < 16 && st == GR_OK; round++) {
        bool changed = false;
        st = touch_build(&c);
        for (int i = steps->len - 1; i >= 0 && st == GR_OK; i--) {
            if (c.dead[i]) continue;
            if ((st = touch_reserve(&c)) != GR_OK) break;
            /* both apply to copy steps only; try_operands changes nothing when it fails */
            fm_copy cp;
            if (parse_copy(g, &steps->data[i], &cp) && (try_operands(&c, i, &cp) || try_output(&c, i, &cp))) changed = true;
        }
        int kept = 0;
        for (int i = 0; i < steps->len; i++) {
            if (c.dead[i]) continue;
            if (kept != i) steps->data[kept] = steps->data[i]; /* a step is ~1.1 KB: no copy in place */
            kept++;
        }
        steps->len = kept;
        if (!changed || st != GR_OK) break;
        st = gr_pass_dce(g, steps);
    }
done:
    gr_free(c.view_of, nv * sizeof(int));
    gr_free(c.view_off, nv * sizeof(int64_t));
    gr_free(c.root, nv * sizeof(int));
    gr_free(c.root_off, nv * sizeof(int64_t));
    gr_free(c.is_output, nv * sizeof(bool));
    gr_free(c.touch_head, nv * sizeof(int));
    gr_vec_free(&c.links);
    gr_free(c.dead, ns * sizeof(bool));
    gr_free(c.n_host, ns * sizeof(int));
    gr_free(c.stamp, ns * sizeof(int));
    return st;
}
