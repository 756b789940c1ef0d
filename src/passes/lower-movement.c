/* passes/lower-movement — data movement that needs a copy: transpose, expand,
 * slice (negative steps are negative strides plus an offset), concat (one
 * kernel per input), split (views when the split is on a leading contiguous
 * boundary, else one copy kernel per output), gather / gather_elements
 * (a LOAD whose access.index is a LOAD of the indices) and trilu (a SELECT on
 * loop-index comparisons). Views without copies (reshape, squeeze, ...) are
 * ALIAS steps made in lower.c. */
#include "passes/lower-impl.h"
#include <string.h>

/* One kernel over the output's shape: y = x read through `acc` (converted to y's dtype). */
static gr_status copy_kernel(gr_lctx *c, int x, int y, const gr_kaccess *acc) {
    int64_t dims[GR_MAX_DIMS];
    int nd = lw_shape(c, y, dims);
    if (gr_shape_numel(nd, dims) == 0) return GR_OK;
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, nd, dims));
    int v;
    gr_status st = lw_load(c, &b, x, acc, &v);
    if (st == GR_OK && lw_val(c, x)->dtype != lw_val(c, y)->dtype) st = gr_kx_cast(b.k, lw_val(c, y)->dtype, v, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

static gr_status shape_mismatch(const gr_lctx *c, int d, int64_t want, int64_t got) {
    return gr_error(GR_ERR_SHAPE, "%s: output dim %d is %lld, expected %lld", lw_where(c), d, (long long)got, (long long)want);
}

/* ==== transpose / expand ======================================================================= */

gr_status lw_lower_transpose(gr_lctx *c) {
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int64_t xd[GR_MAX_DIMS], yd[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int nd = lw_shape(c, x, xd);
    lw_shape(c, y, yd);
    lw_rowmajor(nd, xd, rs);
    const int64_t *perm;
    int np;
    GR_TRY(gr_ir_attr_ints(c->g, lw_node(c), "perm", &perm, &np));
    if (np >= 0 && np != nd) return gr_error(GR_ERR_SHAPE, "%s: perm has %d entries for rank %d", lw_where(c), np, nd);
    if (lw_val(c, y)->ndim != nd) return gr_error(GR_ERR_SHAPE, "%s: output rank differs from input rank", lw_where(c));
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    bool used[GR_MAX_DIMS] = {false}, identity = true;
    for (int j = 0; j < nd; j++) {
        int64_t p = np < 0 ? nd - 1 - j : perm[j];
        if (p < 0) p += nd;
        if (p < 0 || p >= nd || used[p]) return gr_error(GR_ERR_SHAPE, "%s: perm is not a permutation", lw_where(c));
        used[p] = true;
        if (yd[j] != xd[p]) return shape_mismatch(c, j, xd[p], yd[j]);
        acc.stride[j] = rs[p];
        identity = identity && p == j;
    }
    /* the identity permutation (a fused attention's transpose back, passes/attention.c) is a view */
    if (identity && lw_val(c, x)->dtype == lw_val(c, y)->dtype) return lw_emit_alias(c, x, 0, y);
    return copy_kernel(c, x, y, &acc);
}

gr_status lw_lower_expand(gr_lctx *c) {
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int64_t xd[GR_MAX_DIMS], yd[GR_MAX_DIMS];
    int nx = lw_shape(c, x, xd), ny = lw_shape(c, y, yd);
    if (nx > ny) return gr_error(GR_ERR_SHAPE, "%s: output rank %d below input rank %d", lw_where(c), ny, nx);
    for (int d = 0; d < nx; d++)
        if (xd[d] != 1 && xd[d] != yd[d + ny - nx]) return shape_mismatch(c, d + ny - nx, xd[d], yd[d + ny - nx]);
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    lw_bcast_strides(c, x, ny, yd, lw_val(c, y)->var_dims, acc.stride);
    return copy_kernel(c, x, y, &acc);
}

/* ==== slice ======================================================================================== */

gr_status lw_lower_slice(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int64_t xd[GR_MAX_DIMS], yd[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int nd = lw_shape(c, x, xd);
    lw_rowmajor(nd, xd, rs);
    const int64_t *starts, *ends, *axes, *steps;
    int ns, ne, na, nst;
    GR_TRY(gr_ir_attr_ints(c->g, n, "starts", &starts, &ns));
    GR_TRY(gr_ir_attr_ints(c->g, n, "ends", &ends, &ne));
    GR_TRY(gr_ir_attr_ints(c->g, n, "axes", &axes, &na));
    GR_TRY(gr_ir_attr_ints(c->g, n, "steps", &steps, &nst));
    if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return gr_error(GR_ERR_INVALID, "%s: starts, ends, axes and steps must have the same length", lw_where(c));
    if (lw_val(c, y)->ndim != nd) return gr_error(GR_ERR_SHAPE, "%s: output rank differs from input rank", lw_where(c));
    lw_shape(c, y, yd);
    int64_t start[GR_MAX_DIMS], step[GR_MAX_DIMS], count[GR_MAX_DIMS];
    for (int d = 0; d < nd; d++) start[d] = 0, step[d] = 1, count[d] = xd[d];
    bool seen[GR_MAX_DIMS] = {false};
    for (int i = 0; i < ns; i++) {
        int a;
        GR_TRY(lw_axis(c, na >= 0 ? axes[i] : i, nd, &a));
        if (seen[a]) return gr_error(GR_ERR_INVALID, "%s: axis %d sliced twice", lw_where(c), a);
        seen[a] = true;
        int64_t s = nst >= 0 ? steps[i] : 1;
        if (!gr_ir_slice_axis(xd[a], starts[i], ends[i], s, &start[a], &count[a]))
            return gr_error(GR_ERR_INVALID, "%s: step 0 on axis %d", lw_where(c), a);
        step[a] = s;
    }
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    for (int d = 0; d < nd; d++) {
        if (count[d] != yd[d]) return shape_mismatch(c, d, count[d], yd[d]);
        if (count[d] > 0) acc.offset += start[d] * rs[d];
        /* a dim taken once needs no stride; any other has |step| < dim, so
         * step * stride stays within the input's element count. A symbolic dim taken
         * once keeps a stride (never used, index 0) for the layout class of larger
         * bindings (kir.h, var_outer). */
        if (count[d] > 1) acc.stride[d] = step[d] * rs[d];
        else acc.stride[d] = (lw_val(c, y)->var_dims >> d & 1) ? (step[d] < 0 ? -rs[d] : rs[d]) : 0;
    }
    return copy_kernel(c, x, y, &acc);
}

/* ==== concat / split =================================================================================== */

gr_status lw_lower_concat(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int y = lw_out(c, 0);
    int64_t yd[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int nd = lw_shape(c, y, yd);
    lw_rowmajor(nd, yd, rs);
    int64_t axis64;
    GR_TRY(gr_ir_attr_int(c->g, n, "axis", 0, &axis64));
    int axis;
    GR_TRY(lw_axis(c, axis64, nd, &axis));
    int64_t pos = 0;
    for (int i = 0; i < n->n_in; i++) {
        int x = n->in[i];
        if (x < 0 || lw_val(c, x)->ndim != nd) return gr_error(GR_ERR_SHAPE, "%s: input %d has the wrong rank", lw_where(c), i);
        int64_t xd[GR_MAX_DIMS];
        lw_shape(c, x, xd);
        for (int d = 0; d < nd; d++)
            if (d != axis && xd[d] != yd[d])
                return gr_error(GR_ERR_SHAPE, "%s: input %d dim %d is %lld, output has %lld", lw_where(c), i, d,
                                (long long)xd[d], (long long)yd[d]);
        pos += xd[axis];
    }
    if (pos != yd[axis]) return shape_mismatch(c, axis, pos, yd[axis]);
    pos = 0;
    for (int i = 0; i < lw_node(c)->n_in; i++) {
        int x = lw_node(c)->in[i];
        int64_t xd[GR_MAX_DIMS];
        lw_shape(c, x, xd);
        int64_t here = pos;
        pos += xd[axis];
        if (gr_shape_numel(nd, xd) == 0) continue;
        gr_lkb b;
        GR_TRY(lw_kernel_begin(c, &b, nd, xd));
        gr_kaccess in, out;
        gr_kaccess_init(&in);
        gr_kaccess_init(&out);
        lw_rowmajor(nd, xd, in.stride);
        memcpy(out.stride, rs, sizeof(int64_t) * (size_t)nd); /* past nd: the zeros of gr_kaccess_init, not stack bytes */
        out.offset = here * rs[axis];
        int v;
        gr_status st = lw_load(c, &b, x, &in, &v);
        if (st == GR_OK && lw_val(c, x)->dtype != lw_val(c, y)->dtype) st = gr_kx_cast(b.k, lw_val(c, y)->dtype, v, &v);
        if (st == GR_OK) st = lw_store(c, &b, y, v, &out, false);
        if (st != GR_OK) {
            lw_abort_kernel(&b);
            return st;
        }
        GR_TRY(lw_emit_kernel(c, &b));
    }
    return GR_OK;
}

gr_status lw_lower_split(gr_lctx *c) {
    int x = lw_in(c, 0);
    int64_t xd[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int nd = lw_shape(c, x, xd);
    lw_rowmajor(nd, xd, rs);
    int64_t axis64;
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "axis", 0, &axis64));
    int axis;
    GR_TRY(lw_axis(c, axis64, nd, &axis));
    int n_out = lw_node(c)->n_out;
    int64_t total = 0;
    for (int j = 0; j < n_out; j++) {
        int y = lw_out(c, j);
        int64_t yd[GR_MAX_DIMS];
        if (lw_val(c, y)->ndim != nd) return gr_error(GR_ERR_SHAPE, "%s: output %d has the wrong rank", lw_where(c), j);
        lw_shape(c, y, yd);
        for (int d = 0; d < nd; d++)
            if (d != axis && yd[d] != xd[d]) return shape_mismatch(c, d, xd[d], yd[d]);
        total += yd[axis];
    }
    if (total != xd[axis]) return gr_error(GR_ERR_SHAPE, "%s: outputs cover %lld of %lld along axis %d", lw_where(c),
                                           (long long)total, (long long)xd[axis], axis);
    /* With only size-1 dims before the axis each part is one contiguous run: a view
     * (not where a symbolic dim is 1 only at this binding: one structure for all). */
    bool contiguous = gr_shape_numel(axis, xd) == 1 && !(lw_val(c, x)->var_dims & ((1u << axis) - 1));
    int64_t pos = 0;
    for (int j = 0; j < n_out; j++) {
        int y = lw_out(c, j);
        int64_t here = pos;
        pos += lw_val(c, y)->dims[axis].size;
        if (contiguous && lw_val(c, y)->dtype == lw_val(c, x)->dtype) {
            GR_TRY(lw_emit_alias(c, x, here * rs[axis], y));
            continue;
        }
        gr_kaccess acc;
        gr_kaccess_init(&acc);
        memcpy(acc.stride, rs, sizeof(int64_t) * (size_t)nd); /* past nd: zeros (CSE compares all dims) */
        acc.offset = here * rs[axis];
        GR_TRY(copy_kernel(c, x, y, &acc));
    }
    return GR_OK;
}

/* ==== gather / gather_elements ============================================================================ */

/* y = data read at `da` plus index(idx read at `ia`) * index_stride, over y's shape yd. */
static gr_status gather_kernel(gr_lctx *c, int ny, const int64_t *yd, int idx, const gr_kaccess *ia, int data, gr_kaccess *da,
                               int64_t index_stride, int64_t index_extent) {
    if (gr_shape_numel(ny, yd) == 0) return GR_OK;
    if (index_extent <= 0) /* shape inference refuses this; a graph built around it still gets a clear message */
        return gr_error(GR_ERR_SHAPE, "%s: gathers from an empty axis: every index is out of range", lw_where(c));
    da->index_stride = index_stride;
    da->index_extent = index_extent;
    da->origin = c->node; /* an out-of-range index names this node even once fused into another kernel */
    int y = lw_out(c, 0);
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, ny, yd));
    int iv, v;
    gr_status st = lw_load(c, &b, idx, ia, &iv);
    da->index = iv;
    if (st == GR_OK) st = lw_load(c, &b, data, da, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

gr_status lw_lower_gather(gr_lctx *c) {
    int data = lw_in(c, 0), idx = lw_in(c, 1), y = lw_out(c, 0);
    gr_dtype it = lw_val(c, idx)->dtype;
    if (it != GR_I32 && it != GR_I64) return gr_error(GR_ERR_SHAPE, "%s: indices must be i32 or i64, got %s", lw_where(c), gr_dtype_name(it));
    int64_t dd[GR_MAX_DIMS], id[GR_MAX_DIMS], yd[GR_MAX_DIMS], drs[GR_MAX_DIMS], irs[GR_MAX_DIMS];
    int nd = lw_shape(c, data, dd), ni = lw_shape(c, idx, id), ny = lw_shape(c, y, yd);
    int64_t axis64;
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "axis", 0, &axis64));
    int a;
    GR_TRY(lw_axis(c, axis64, nd, &a));
    if (ny != nd - 1 + ni) return gr_error(GR_ERR_SHAPE, "%s: output rank %d, expected %d", lw_where(c), ny, nd - 1 + ni);
    lw_rowmajor(nd, dd, drs);
    lw_rowmajor(ni, id, irs);
    gr_kaccess ia, da;
    gr_kaccess_init(&ia);
    gr_kaccess_init(&da);
    for (int d = 0; d < ny; d++) {
        int64_t want;
        if (d < a) want = dd[d], da.stride[d] = drs[d];
        else if (d < a + ni) want = id[d - a], ia.stride[d] = irs[d - a];
        else want = dd[d - ni + 1], da.stride[d] = drs[d - ni + 1];
        if (want != yd[d]) return shape_mismatch(c, d, want, yd[d]);
    }
    return gather_kernel(c, ny, yd, idx, &ia, data, &da, drs[a], dd[a]);
}

gr_status lw_lower_gather_elements(gr_lctx *c) {
    int data = lw_in(c, 0), idx = lw_in(c, 1), y = lw_out(c, 0);
    gr_dtype it = lw_val(c, idx)->dtype;
    if (it != GR_I32 && it != GR_I64) return gr_error(GR_ERR_SHAPE, "%s: indices must be i32 or i64, got %s", lw_where(c), gr_dtype_name(it));
    int64_t dd[GR_MAX_DIMS], id[GR_MAX_DIMS], yd[GR_MAX_DIMS], drs[GR_MAX_DIMS];
    int nd = lw_shape(c, data, dd), ni = lw_shape(c, idx, id), ny = lw_shape(c, y, yd);
    int64_t axis64;
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "axis", 0, &axis64));
    int a;
    GR_TRY(lw_axis(c, axis64, nd, &a));
    if (ni != nd || ny != nd) return gr_error(GR_ERR_SHAPE, "%s: data, indices and output must have the same rank", lw_where(c));
    lw_rowmajor(nd, dd, drs);
    gr_kaccess ia, da;
    gr_kaccess_init(&ia);
    gr_kaccess_init(&da);
    lw_bcast_strides(c, idx, ny, yd, lw_val(c, lw_out(c, 0))->var_dims, ia.stride);
    for (int d = 0; d < nd; d++) {
        if (id[d] != yd[d] && id[d] != 1) return shape_mismatch(c, d, id[d], yd[d]);
        if (d == a) continue;
        if (dd[d] != yd[d] && dd[d] != 1) return shape_mismatch(c, d, dd[d], yd[d]);
        da.stride[d] = dd[d] == 1 ? 0 : drs[d];
    }
    return gather_kernel(c, ny, yd, idx, &ia, data, &da, drs[a], dd[a]);
}

/* ==== trilu ================================================================================================
 * keep x[..., r, col] where (upper ? col - r >= k : col - r <= k), else 0. */

gr_status lw_lower_trilu(gr_lctx *c) {
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int64_t upper, kk;
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "upper", 1, &upper));
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "k", 0, &kk));
    int64_t xd[GR_MAX_DIMS];
    int nd = lw_shape(c, x, xd);
    if (nd < 2) return gr_error(GR_ERR_SHAPE, "%s: trilu needs at least 2 dims, got %d", lw_where(c), nd);
    if (gr_shape_numel(nd, xd) == 0) return GR_OK;
    gr_dtype t = lw_val(c, x)->dtype;
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, nd, xd));
    gr_kernel *k = b.k;
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    lw_rowmajor(nd, xd, acc.stride);
    int r, col, diff, ck, keep, v, zero;
    gr_status st = gr_kx_index(k, nd - 2, &r);
    if (st == GR_OK) st = gr_kx_index(k, nd - 1, &col);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_SUB, GR_I64, col, r, &diff);
    if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, kk, &ck);
    if (st == GR_OK) st = gr_kx_binary(k, upper ? GR_KB_GE : GR_KB_LE, GR_BOOL, diff, ck, &keep);
    if (st == GR_OK) st = lw_load(c, &b, x, &acc, &v);
    if (st == GR_OK) st = lw_const(k, t, 0.0, &zero);
    if (st == GR_OK) st = gr_kx_select(k, t, keep, v, zero, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

/* ==== cache_write ==========================================================================================
 * y = cache with new at positions kv_len[0] + delta + j of `axis` (ir/ops.c). One kernel over new's elements
 * whose store scatters along the axis (codegen/kir.h): y[.., wrap(kv + delta + o_axis), ..] = new[.., o_axis,
 * ..]. When y is written in place into the cache input (the decode rewrite: gr_ir_value.inplace_of, memory
 * planning aliases them), that is all: the other positions are already there. Otherwise a copy of the cache
 * comes first. Why: the rewrite's former where(position == kv_len - 1, new, past) walked the whole
 * [B, H, max_len, D] cache every step for one position (decode profile: 24 such kernels per GPT-2 step). */
gr_status lw_lower_cache_write(gr_lctx *c) {
    int cache = lw_in(c, 0), nw = lw_in(c, 1), kv = lw_in(c, 2), y = lw_out(c, 0);
    int64_t axis64, delta;
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "axis", 0, &axis64));
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "delta", 0, &delta));
    int64_t yd[GR_MAX_DIMS], nd_[GR_MAX_DIMS], ys[GR_MAX_DIMS], ns[GR_MAX_DIMS];
    int ny = lw_shape(c, y, yd), nn = lw_shape(c, nw, nd_), a;
    GR_TRY(lw_axis(c, axis64, ny, &a));
    if (nn != ny || lw_val(c, nw)->dtype != lw_val(c, y)->dtype) return gr_error(GR_ERR_SHAPE, "%s: new entries do not match the cache", lw_where(c));
    for (int d = 0; d < ny; d++)
        if (d == a ? nd_[d] > yd[d] : nd_[d] != yd[d]) return shape_mismatch(c, d, nd_[d], yd[d]);
    if (lw_numel(c, y) == 0) return GR_OK;
    lw_rowmajor(ny, yd, ys);
    lw_rowmajor(nn, nd_, ns);
    gr_lkb b;
    const gr_ir_value *yv = lw_val(c, y);
    bool in_place = yv->inplace_of == cache + 1 && lw_val(c, cache)->kind == GR_VAL_INPUT;
    if (!in_place) { /* y = cache first */
        gr_kaccess ca;
        gr_kaccess_init(&ca);
        for (int d = 0; d < ny; d++) ca.stride[d] = ys[d];
        int v;
        GR_TRY(lw_kernel_begin(c, &b, ny, yd));
        gr_status st = lw_load(c, &b, cache, &ca, &v);
        if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
        if (st != GR_OK) {
            lw_abort_kernel(&b);
            return st;
        }
        GR_TRY(lw_emit_kernel(c, &b));
    }
    if (gr_shape_numel(nn, nd_) == 0) return GR_OK;
    GR_TRY(lw_kernel_begin(c, &b, nn, nd_));
    gr_kaccess na, ka, sa;
    gr_kaccess_init(&na);
    gr_kaccess_init(&ka); /* kv_len[0] at every point */
    gr_kaccess_init(&sa);
    for (int d = 0; d < nn; d++) {
        na.stride[d] = nd_[d] == 1 ? 0 : ns[d];
        sa.stride[d] = d == a || nd_[d] == 1 ? 0 : ys[d];
    }
    int v = -1, kl = -1, dc, pos, o;
    gr_status st = lw_load(c, &b, nw, &na, &v);
    if (st == GR_OK) st = lw_load(c, &b, kv, &ka, &kl);
    if (st == GR_OK && delta != 0) {
        st = gr_kx_const_i(b.k, GR_I64, delta, &dc);
        if (st == GR_OK) st = gr_kx_binary(b.k, GR_KB_ADD, GR_I64, kl, dc, &kl);
    }
    pos = kl;
    if (st == GR_OK && nd_[a] > 1) {
        st = gr_kx_index(b.k, a, &o);
        if (st == GR_OK) st = gr_kx_binary(b.k, GR_KB_ADD, GR_I64, kl, o, &pos);
    }
    sa.index = pos;
    sa.index_stride = ys[a];
    sa.index_extent = yd[a];
    sa.origin = c->node; /* an out-of-range position names this node */
    int p;
    if (st == GR_OK) st = lw_param_buffer(&b, y, lw_val(c, y)->dtype, 0, true, &p);
    if (st == GR_OK) {
        gr_kstage s;
        memset(&s, 0, sizeof s);
        s.kind = GR_KS_STORE;
        s.value = v;
        s.param = p;
        s.access = sa;
        st = gr_kernel_add_stage(b.k, &s);
    }
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}
