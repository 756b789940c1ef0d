/* passes/fuse-move — recomputes kernels that only move data (a transpose, a
 * slice, an expand copy, and the part kernels of a concat) in the kernels that
 * read what they wrote, through whatever affine accesses those use (issue 15:
 * Llama's RoPE was a transpose copy after each q/k projection, rotate_half as
 * two concat kernels and the add, ~460 us of a 2151 us call at bf16 b8 s512,
 * where Inductor runs one pointwise kernel; fuse.c's general fusion needs one
 * access per reader that matches the producer's space dim for dim).
 *
 * A movement kernel M: no inner dims, one STORE (not over_inner, no gather) of
 * a LOAD without gather behind at most MOVE_MAX_CHAIN neg or cast nodes (the
 * neg of rotate_half, a precision cast): nothing a reader reading M's output
 * more than once per element (a broadcast) would pay for again. The moved value v has a space
 * S (extents ext, row-major strides rs, symbolic dims var):
 *   - one writer M storing v contiguously (fuse.c's producer_value): S is M's
 *     loop nest, and M is the only part;
 *   - a concat: several movement kernels ("parts") each writing a box of v
 *     (v's graph shape) that is full on every dim but one, the axis, which
 *     the boxes tile without gap or overlap; at most GR_FUSE_MAX_PARTS.
 *
 * A reader C's load of v at address  o + sum_j s_j * i_j  (+ a gather term
 * wrap(x) * s_g, i_j C's loop indices) is decomposed into coordinates of S:
 * the offset o by S's mixed radix (off_d), each term i_j onto the outermost
 * dim d of S whose rs[d] divides s_j, with a factor k_j = s_j / rs[d]
 * (negative for reversed walks). The load is fused only when each
 * coordinate  off_d + sum k_j * i_j  stays within [0, ext[d]) over C's whole
 * loop nest (interval bounds at the box corners): then those coordinates are
 * the element the address names, so M's value there is M's load at the
 * composed affine address. Why the outermost dim: a term mapped onto an inner
 * dim d' with rs[d] = q * rs[d'] has |k| >= ext[d'] and leaves the range at
 * its second index, so the choice is forced. A symbolic dim of C (var_outer /
 * var_inner) must map with factor 1 onto a symbolic dim of S of its extent
 * and no offset, and nothing else may land on a symbolic dim of S: so every
 * binding of a symbolic model decides alike (kir.h, var_outer).
 *
 * Each load of v is replaced by its own substitute: M's load at the composed
 * access, M's unary/cast chain, then the cast to v's dtype the store made
 * (bit-identical, as in fuse.c). For a concat, a load whose axis coordinate
 * stays within one part reads that part directly; one that crosses parts
 * computes the axis coordinate pos from C's indices and picks
 *   pos < start_1 ? part_0 : pos < start_2 ? part_1 : ...
 * where part p's load gathers at clamp(pos - start_p, 0, len_p - 1) along
 * the axis, so every load stays inside its part whichever is selected (a
 * SELECT evaluates both arms). rotate_half, concat(-x[..., h:], x[..., :h])
 * read by the add, becomes one select over two clamped loads of x, and the
 * transpose behind x then goes in through those loads too.
 *
 * fuse.c decides when (a single producer only where its general fusion does
 * not apply, under the same reader limits and recompute rule; a concat into
 * its one reader) and commits; this file plans and builds. A reader in
 * growing form (fuse-grow.c) is planned through gr_fuse_wk_value_loads and
 * finished before it is rebuilt here, so both forms give the same kernel. */
#include "passes/fuse-impl.h"
#include <string.h>

#define MOVE_MAX_CHAIN 4 /* unary / cast nodes between a movement kernel's load and its store */

int gr_fuse_move_load(const gr_kernel *k) {
    if (!k || k->n_inner != 0 || k->n_stages != 1) return -1;
    const gr_kstage *st = &k->stages[0];
    if (st->kind != GR_KS_STORE || st->over_inner || st->access.index != -1) return -1;
    int x = st->value;
    for (int n = 0;; n++) {
        if (x < 0 || x >= k->nodes.len) return -1;
        const gr_kexpr *e = &k->nodes.data[x];
        if (e->op == GR_KX_LOAD) {
            if (e->access.index != -1 || e->param < 0 || e->param >= k->n_params ||
                k->params[e->param].kind != GR_KP_BUFFER || k->params[e->param].written)
                return -1;
            return x;
        }
        /* only sign flips and conversions: recomputed per read, and a broadcast read repeats them */
        if (!(e->op == GR_KX_CAST || (e->op == GR_KX_UNARY && e->fn == GR_KU_NEG)) || n == MOVE_MAX_CHAIN || e->a >= x)
            return -1;
        x = e->a;
    }
}

static bool space_init(gr_fuse_move *m, int nd, const int64_t *ext, uint32_t var) {
    if (nd < 0 || nd > GR_MAX_DIMS) return false;
    m->nd = nd;
    m->var = var;
    int64_t r = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (ext[d] < 1) return false; /* an empty value: nothing to fuse */
        m->ext[d] = ext[d];
        m->rs[d] = r;
        if (gr_mul_overflow(r, ext[d], &r)) return false;
    }
    return true;
}

bool gr_fuse_move_single(const gr_step *ps, int step, gr_fuse_move *m) {
    memset(m, 0, sizeof *m);
    const gr_kernel *p = ps->kernel;
    if (gr_fuse_move_load(p) < 0 || !space_init(m, p->n_outer, p->outer, p->var_outer)) return false;
    m->axis = -1;
    m->n_parts = 1;
    m->part[0] = ps;
    m->part_step[0] = step;
    return true;
}

bool gr_fuse_move_parts(const gr_ir_value *val, int value, const gr_step *const *parts, const int *steps, int n,
                        gr_fuse_move *m) {
    memset(m, 0, sizeof *m);
    if (n < 2 || n > GR_FUSE_MAX_PARTS) return false;
    int64_t ext[GR_MAX_DIMS];
    if (val->ndim > GR_MAX_DIMS) return false;
    for (int d = 0; d < val->ndim; d++) ext[d] = val->dims[d].size;
    if (!space_init(m, val->ndim, ext, val->var_dims)) return false;
    m->axis = -1;
    for (int i = 0; i < n; i++) {
        const gr_kernel *k = parts[i]->kernel;
        if (gr_fuse_move_load(k) < 0 || k->n_outer != m->nd) return false;
        for (int d = 0; d < m->nd; d++) {
            if (k->outer[d] < 1 || k->outer[d] > m->ext[d]) return false;
            if (k->outer[d] == m->ext[d]) continue;
            if (m->axis >= 0 && m->axis != d) return false;
            m->axis = d;
        }
    }
    /* an axis where every part is full cannot hold two parts; a symbolic axis would decide by binding */
    if (m->axis < 0 || (m->var >> m->axis & 1)) return false;
    int ax = m->axis;
    for (int i = 0; i < n; i++) {
        const gr_step *s = parts[i];
        const gr_kernel *k = s->kernel;
        const gr_kstage *st = &k->stages[0];
        if (st->param < 0 || st->param >= s->n_args) return false;
        const gr_step_arg *a = &s->args[st->param];
        if (a->kind != GR_ARG_VALUE || a->value != value || a->elem_offset != 0) return false;
        for (int p = 0; p < k->n_params; p++)
            if ((k->params[p].written && p != st->param) ||
                (p < s->n_args && !k->params[p].written && s->args[p].kind == GR_ARG_VALUE && s->args[p].value == value))
                return false;
        int64_t start = st->access.offset / m->rs[ax];
        if (start * m->rs[ax] != st->access.offset || start < 0 || start + k->outer[ax] > m->ext[ax]) return false;
        for (int d = 0; d < m->nd; d++)
            if ((k->outer[d] > 1 || (k->var_outer >> d & 1) || (m->var >> d & 1)) && st->access.stride[d] != m->rs[d])
                return false;
        /* insert in start order */
        int at = i;
        while (at > 0 && m->start[at - 1] > start) {
            m->start[at] = m->start[at - 1];
            m->len[at] = m->len[at - 1];
            m->part[at] = m->part[at - 1];
            m->part_step[at] = m->part_step[at - 1];
            at--;
        }
        m->start[at] = start;
        m->len[at] = k->outer[ax];
        m->part[at] = s;
        m->part_step[at] = steps[i];
    }
    m->n_parts = n;
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (m->start[i] != pos) return false; /* a gap or an overlap */
        pos += m->len[i];
    }
    return pos == m->ext[ax];
}

/* ==== decomposing a reader's access ================================================================== */

typedef struct {
    int n;                          /* terms */
    int dim[2 * GR_MAX_DIMS + 1];   /* the dim of S each term moves along */
    int64_t k[2 * GR_MAX_DIMS + 1]; /* its factor */
    int id[2 * GR_MAX_DIMS + 1];    /* C's index id (outer j, GR_KIDX_INNER + j), -1: C's gather */
    int64_t off[GR_MAX_DIMS], lo[GR_MAX_DIMS], hi[GR_MAX_DIMS];
    int first, last;                /* the parts the access reaches */
} move_map;

static bool add_term(const gr_fuse_move *m, move_map *mm, int id, int64_t s, int64_t n, bool var, uint32_t *taken) {
    bool gather = id < 0;
    if (n == 0 || (!gather && (s == 0 || (n == 1 && !var)))) return true; /* no points, broadcast, index 0 */
    if (s == 0) return false;
    int d = -1;
    if (var) {
        for (int q = 0; q < m->nd && d < 0; q++)
            if ((m->var >> q & 1) && !(*taken >> q & 1) && m->rs[q] == s && m->ext[q] == n) d = q;
        if (d < 0) return false;
        *taken |= 1u << d;
    } else {
        for (int q = 0; q < m->nd && d < 0; q++)
            if ((m->ext[q] > 1 || (m->var >> q & 1)) && s % m->rs[q] == 0) d = q;
        if (d < 0 || (m->var >> d & 1)) return false;
    }
    int64_t k = s / m->rs[d], span;
    if (gr_mul_overflow(k, n - 1, &span)) return false;
    if (gr_add_overflow(span > 0 ? mm->hi[d] : mm->lo[d], span, span > 0 ? &mm->hi[d] : &mm->lo[d])) return false;
    mm->dim[mm->n] = d;
    mm->k[mm->n] = k;
    mm->id[mm->n] = id;
    mm->n++;
    return true;
}

static bool map_access(const gr_fuse_move *m, const gr_kernel *c, const gr_kaccess *a, move_map *mm) {
    memset(mm, 0, sizeof *mm);
    if (a->offset < 0 || m->nd == 0) return false;
    int64_t rem = a->offset;
    for (int d = 0; d < m->nd; d++) {
        if (m->ext[d] <= 1) continue;
        mm->off[d] = rem / m->rs[d];
        rem -= mm->off[d] * m->rs[d];
    }
    if (rem != 0) return false;
    uint32_t taken = 0;
    for (int j = 0; j < c->n_outer; j++)
        if (!add_term(m, mm, j, a->stride[j], c->outer[j], c->var_outer >> j & 1, &taken)) return false;
    for (int j = 0; j < c->n_inner; j++)
        if (!add_term(m, mm, GR_KIDX_INNER + j, a->inner_stride[j], c->inner[j], c->var_inner >> j & 1, &taken))
            return false;
    if (a->index >= 0 && (a->index_extent < 1 || !add_term(m, mm, -1, a->index_stride, a->index_extent, false, &taken)))
        return false;
    for (int d = 0; d < m->nd; d++) {
        if ((m->var >> d & 1) && mm->off[d] != 0) return false;
        int64_t lo, hi;
        if (gr_add_overflow(mm->off[d], mm->lo[d], &lo) || gr_add_overflow(mm->off[d], mm->hi[d], &hi)) return false;
        if (lo < 0 || hi > m->ext[d] - 1) return false; /* leaves S: v's other elements are not M's */
    }
    mm->first = mm->last = 0;
    if (m->axis < 0) return true;
    int ax = m->axis;
    int64_t lo = mm->off[ax] + mm->lo[ax], hi = mm->off[ax] + mm->hi[ax];
    for (int p = 0; p < m->n_parts; p++) {
        if (m->start[p] <= lo) mm->first = p;
        if (m->start[p] <= hi) mm->last = p;
    }
    /* crossing parts takes the gather slot for the clamped axis index */
    return mm->first == mm->last || a->index < 0;
}

bool gr_fuse_move_plan(const gr_fuse_move *m, const gr_kernel *c, const gr_kaccess *const *loads, int n_loads) {
    move_map mm;
    for (int i = 0; i < n_loads; i++)
        if (!map_access(m, c, loads[i], &mm)) return false;
    return n_loads > 0;
}

/* The bindings of value in c (a kernel in ordinary form): the accesses of its loads, n of
 * them (at most max), or -1 when c cannot take the substitution (value bound at an offset,
 * written, a PARAM node or a store naming it, too many loads). */
int gr_fuse_move_loads(const gr_kernel *c, const gr_step *cs, int value, const gr_kaccess **out, int max) {
    bool target[GR_KMAX_PARAMS] = {false};
    int n_target = 0, n = 0;
    for (int i = 0; i < cs->n_args && i < c->n_params; i++) {
        const gr_step_arg *a = &cs->args[i];
        if ((a->kind == GR_ARG_VALUE || a->kind == GR_ARG_HOST_SCALAR) && a->value == value) {
            if (a->kind != GR_ARG_VALUE || a->elem_offset != 0 || c->params[i].kind != GR_KP_BUFFER || c->params[i].written)
                return -1;
            target[i] = true;
            n_target++;
        }
    }
    if (!n_target) return -1;
    for (int s = 0; s < c->n_stages; s++)
        if (c->stages[s].kind == GR_KS_STORE && c->stages[s].param >= 0 && c->stages[s].param < GR_KMAX_PARAMS &&
            target[c->stages[s].param])
            return -1;
    for (int i = 0; i < c->nodes.len; i++) {
        const gr_kexpr *e = &c->nodes.data[i];
        if (e->op != GR_KX_LOAD && e->op != GR_KX_PARAM) continue;
        if (e->param < 0 || e->param >= GR_KMAX_PARAMS || !target[e->param]) continue;
        if (e->op != GR_KX_LOAD || n == max) return -1;
        out[n++] = &e->access;
    }
    return n;
}

/* ==== building the substitutes ======================================================================== */
/* A substitute is built into a scratch kernel of its own (gr_fuse_move_substitute), then
 * copied into the reader: by gr_fuse_move_into for a kernel in ordinary form, spliced in by
 * gr_fuse_wk_move_apply for one grown in place. Both see the same nodes (constants too: their
 * origins come from the scratch kernel, kir.c), so both forms build the same kernel. In the
 * scratch kernel node 0 stands for C's gather index, and a LOAD's param is the part it reads. */

void gr_fuse_remap_operands(gr_kexpr *e, const int *map) {
    switch (e->op) {
    case GR_KX_SELECT: if (e->c >= 0) e->c = map[e->c]; /* fall through */
    case GR_KX_BINARY: if (e->b >= 0) e->b = map[e->b]; /* fall through */
    case GR_KX_UNARY: case GR_KX_CAST: case GR_KX_RANDOM: if (e->a >= 0) e->a = map[e->a]; break;
    case GR_KX_LOAD: if (e->access.index >= 0) e->access.index = map[e->access.index]; break;
    default: break;
    }
}

typedef struct {
    const gr_fuse_move *m;
    gr_kernel *n; /* the scratch kernel */
} move_build;

static gr_status const_i64(move_build *b, int64_t v, int *out) { return gr_kx_const_i(b->n, GR_I64, v, out); }

/* Part p's value where the access mapped by mm reads it. pos >= 0: the axis coordinate
 * (an i64 node), read through a clamped gather; else the part holds the whole range.
 * ca: C's access (its gather index is node 0). */
static gr_status part_value(move_build *b, int p, const move_map *mm, const gr_kaccess *ca, int pos, int *out) {
    const gr_fuse_move *m = b->m;
    const gr_kernel *pk = m->part[p]->kernel;
    int li = gr_fuse_move_load(pk);
    const gr_kexpr *l = &pk->nodes.data[li];
    int ax = m->axis;
    gr_kaccess na;
    gr_kaccess_init(&na);
    na.offset = l->access.offset;
    for (int d = 0; d < m->nd; d++) {
        if (pos >= 0 && d == ax) continue;
        int64_t coord = mm->off[d] - (d == ax ? m->start[p] : 0); /* in the part's own space */
        na.offset += l->access.stride[d] * coord;
    }
    for (int t = 0; t < mm->n; t++) {
        int d = mm->dim[t];
        if (pos >= 0 && d == ax) continue;
        int64_t s = l->access.stride[d] * mm->k[t];
        int id = mm->id[t];
        if (id < 0) {
            na.index = 0;
            na.index_stride = s;
            na.index_extent = ca->index_extent;
            na.origin = ca->origin;
        } else if (id >= GR_KIDX_INNER) {
            na.inner_stride[id - GR_KIDX_INNER] += s;
        } else {
            na.stride[id] += s;
        }
    }
    if (pos >= 0) { /* clamp(pos - start, 0, len - 1): in the part whichever arm is taken */
        int x = pos, c;
        int64_t lo = mm->off[ax] + mm->lo[ax], hi = mm->off[ax] + mm->hi[ax]; /* pos's range */
        if (m->start[p] != 0) {
            GR_TRY(const_i64(b, m->start[p], &c));
            GR_TRY(gr_kx_binary(b->n, GR_KB_SUB, GR_I64, x, c, &x));
        }
        if (hi > m->start[p] + m->len[p] - 1) {
            GR_TRY(const_i64(b, m->len[p] - 1, &c));
            GR_TRY(gr_kx_binary(b->n, GR_KB_MIN, GR_I64, x, c, &x));
        }
        if (lo < m->start[p]) {
            GR_TRY(const_i64(b, 0, &c));
            GR_TRY(gr_kx_binary(b->n, GR_KB_MAX, GR_I64, x, c, &x));
        }
        na.index = x;
        na.index_stride = l->access.stride[ax];
        na.index_extent = m->len[p];
        na.origin = -1;
    }
    gr_kexpr e = *l;
    e.param = p;
    e.access = na;
    int x;
    GR_TRY(gr_kernel_add_expr(b->n, &e, &x));
    /* the neg / cast chain, in order */
    int chain[MOVE_MAX_CHAIN + 1], nc = 0;
    for (int y = pk->stages[0].value; y != li; y = pk->nodes.data[y].a) chain[nc++] = y;
    for (int i = nc - 1; i >= 0; i--) {
        gr_kexpr u = pk->nodes.data[chain[i]];
        u.a = x;
        GR_TRY(gr_kernel_add_expr(b->n, &u, &x));
    }
    int cast = gr_fuse_substitute_cast(pk); /* as the store into v rounded */
    if (cast >= 0) GR_TRY(gr_kx_cast(b->n, (gr_dtype)cast, x, &x));
    *out = x;
    return GR_OK;
}

gr_status gr_fuse_move_substitute(const gr_fuse_move *m, const gr_kernel *c, const gr_kaccess *ca, gr_kernel *scratch,
                                  int *root) {
    move_build mb = {.m = m, .n = scratch}, *b = &mb;
    scratch->nodes.len = 0;
    int ph;
    GR_TRY(gr_kx_index(scratch, GR_KIDX_LINEAR, &ph)); /* node 0: C's gather index */
    move_map mm;
    if (!map_access(m, c, ca, &mm)) return gr_error(GR_ERR_INTERNAL, "fuse-move: an access planned as fusable is not");
    if (mm.first == mm.last) return part_value(b, mm.first, &mm, ca, -1, root);
    const gr_kernel *p0 = m->part[0]->kernel;
    gr_dtype vt = p0->params[p0->stages[0].param].dtype;
    /* pos = off + sum k * index along the axis */
    int ax = m->axis, pos = -1;
    for (int t = 0; t < mm.n; t++) {
        if (mm.dim[t] != ax) continue;
        int x;
        GR_TRY(gr_kx_index(b->n, mm.id[t], &x));
        if (mm.k[t] != 1) {
            int kc;
            GR_TRY(const_i64(b, mm.k[t], &kc));
            GR_TRY(gr_kx_binary(b->n, GR_KB_MUL, GR_I64, x, kc, &x));
        }
        if (pos < 0) pos = x;
        else GR_TRY(gr_kx_binary(b->n, GR_KB_ADD, GR_I64, pos, x, &pos));
    }
    if (mm.off[ax] != 0) { /* (crossing parts needs a term on the axis: pos is set) */
        int oc;
        GR_TRY(const_i64(b, mm.off[ax], &oc));
        GR_TRY(gr_kx_binary(b->n, GR_KB_ADD, GR_I64, pos, oc, &pos));
    }
    int val;
    GR_TRY(part_value(b, mm.last, &mm, ca, pos, &val));
    for (int p = mm.last - 1; p >= mm.first; p--) {
        int mine, bound, cond;
        GR_TRY(part_value(b, p, &mm, ca, pos, &mine));
        GR_TRY(const_i64(b, m->start[p + 1], &bound));
        GR_TRY(gr_kx_binary(b->n, GR_KB_LT, GR_BOOL, pos, bound, &cond));
        GR_TRY(gr_kx_select(b->n, vt, cond, mine, val, &val));
    }
    *root = val;
    return GR_OK;
}

void gr_fuse_move_part_src(const gr_fuse_move *m, int p, const gr_kparam **param, const gr_step_arg **arg) {
    const gr_step *ps = m->part[p];
    const gr_kexpr *l = &ps->kernel->nodes.data[gr_fuse_move_load(ps->kernel)];
    *param = &ps->kernel->params[l->param];
    *arg = &ps->args[l->param];
}

gr_status gr_fuse_move_into(const gr_fuse_move *m, int value, const gr_step *cs, gr_kernel **out, gr_step_arg *args,
                            bool *applied) {
    *applied = false;
    *out = NULL;
    const gr_kernel *c = cs->kernel;
    gr_kernel *n, *scratch;
    GR_TRY(gr_kernel_create(c->name, &n));
    gr_status st = gr_kernel_create("move", &scratch);
    if (st != GR_OK) {
        gr_kernel_destroy(n);
        return st;
    }
    gr_kernel saved = *n; /* keep the empty node vector */
    *n = *c;
    n->nodes = saved.nodes;
    for (int p = 0; p < m->n_parts; p++) {
        int src = m->part[p]->kernel->source_node;
        if (src >= 0 && (n->source_node < 0 || src < n->source_node)) n->source_node = src;
    }
    memcpy(args, cs->args, sizeof(gr_step_arg) * GR_KMAX_PARAMS);
    int nc = c->nodes.len, *cm = gr_malloc(sizeof(int) * (size_t)(nc ? nc : 1)), *sm = NULL;
    size_t sm_n = 0;
    if (!cm) st = gr_nomem();
    bool no_room = false;
    for (int i = 0; i < nc && st == GR_OK && !no_room; i++) {
        gr_kexpr e = c->nodes.data[i];
        int idx = e.op == GR_KX_LOAD && e.access.index >= 0 ? cm[e.access.index] : -1;
        if (e.op == GR_KX_LOAD && cs->args[e.param].kind == GR_ARG_VALUE && cs->args[e.param].value == value) {
            int root;
            if ((st = gr_fuse_move_substitute(m, c, &e.access, scratch, &root)) != GR_OK) break;
            if ((size_t)scratch->nodes.len > sm_n) {
                gr_free(sm, sizeof(int) * sm_n);
                sm_n = (size_t)scratch->nodes.len;
                if (!(sm = gr_malloc(sizeof(int) * sm_n))) {
                    sm_n = 0;
                    st = gr_nomem();
                    break;
                }
            }
            sm[0] = idx;
            for (int j = 1; j < scratch->nodes.len && st == GR_OK; j++) {
                gr_kexpr x = scratch->nodes.data[j];
                gr_fuse_remap_operands(&x, sm);
                if (x.op == GR_KX_LOAD) {
                    const gr_kparam *kp;
                    const gr_step_arg *ka;
                    gr_fuse_move_part_src(m, x.param, &kp, &ka);
                    if ((x.param = gr_fuse_map_param(kp, ka, n->params, args, &n->n_params)) < 0) {
                        no_room = true;
                        break;
                    }
                }
                st = gr_kernel_add_expr(n, &x, &sm[j]);
            }
            if (st == GR_OK && !no_room) cm[i] = sm[root];
            continue;
        }
        if (e.a >= 0 && e.op != GR_KX_CONST && e.op != GR_KX_INDEX && e.op != GR_KX_PARAM && e.op != GR_KX_LOAD &&
            e.op != GR_KX_ACC)
            e.a = cm[e.a];
        if (e.b >= 0 && (e.op == GR_KX_BINARY || e.op == GR_KX_SELECT)) e.b = cm[e.b];
        if (e.c >= 0 && e.op == GR_KX_SELECT) e.c = cm[e.c];
        if (e.op == GR_KX_LOAD && e.access.index >= 0) e.access.index = idx;
        st = gr_kernel_add_expr(n, &e, &cm[i]);
    }
    if (st == GR_OK && !no_room) {
        for (int s = 0; s < n->n_stages; s++) {
            n->stages[s].value = cm[n->stages[s].value];
            if (n->stages[s].access.index >= 0) n->stages[s].access.index = cm[n->stages[s].access.index]; /* a scatter */
        }
        st = gr_pass_cse_kernel(n, args); /* merges repeated substitutes, drops v's params */
        if (st == GR_OK && GR_VERIFY_EVERY_KERNEL) st = gr_kernel_verify(n);
        if (st == GR_OK) *applied = true;
        else if (st != GR_ERR_NOMEM)
            st = gr_error_prefix(GR_ERR_INTERNAL, "fusing movement kernel %s into %s: ", m->part[0]->kernel->name, c->name);
    }
    gr_free(cm, sizeof(int) * (size_t)(nc ? nc : 1));
    gr_free(sm, sizeof(int) * sm_n);
    gr_kernel_destroy(scratch);
    if (*applied) *out = n;
    else gr_kernel_destroy(n);
    return st;
}
