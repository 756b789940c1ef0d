/* passes/lower-reduce — reductions, softmax and layer_norm.
 *
 * Each is one kernel whose outer dims are the kept dims of the input and whose
 * inner dims are the reduced ones (in input order), so the kernel's iteration
 * space (outer ∪ inner) is exactly the input's elements — which is what lets
 * fusion substitute an elementwise producer of the input into the load.
 * f16/bf16 inputs are cast to f32 on load and accumulated in f32; integer
 * sums accumulate in i64 (wrapped to the output width by the store). */
#include "passes/lower-impl.h"
#include <string.h>

/* Splits x's dims into outer (is_inner[d] false) and inner dims and sets the
 * kernel's loop nest and a load access reading x in place. */
static void split_space(const gr_lctx *c, int x, const bool *is_inner, gr_kernel *k, gr_kaccess *acc) {
    int64_t dims[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int nd = lw_shape(c, x, dims);
    lw_rowmajor(nd, dims, rs);
    gr_kaccess_init(acc);
    uint32_t var = c->g->values.data[x].var_dims;
    k->n_outer = k->n_inner = 0;
    k->var_outer = k->var_inner = 0;
    for (int d = 0; d < nd; d++) {
        if (is_inner[d]) {
            acc->inner_stride[k->n_inner] = rs[d];
            k->var_inner |= (var >> d & 1u) << k->n_inner;
            k->inner[k->n_inner++] = dims[d];
        } else {
            acc->stride[k->n_outer] = rs[d];
            k->var_outer |= (var >> d & 1u) << k->n_outer;
            k->outer[k->n_outer++] = dims[d];
        }
    }
}

static gr_status add_reduce(gr_kernel *k, gr_kreduce fn, int value, int *acc_node, gr_dtype t) {
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_REDUCE;
    s.reduce = fn;
    s.value = value;
    s.param = -1;
    gr_kaccess_init(&s.access);
    int stage = k->n_stages;
    GR_TRY(gr_kernel_add_stage(k, &s));
    return gr_kx_acc(k, stage, t, acc_node);
}

/* Starts the kernel over x split by is_inner and loads x converted to `t`. */
static gr_status begin_split(gr_lctx *c, gr_lkb *b, int x, const bool *is_inner, gr_dtype t, gr_kaccess *acc,
                             int *xload) {
    int64_t none[1] = {0};
    GR_TRY(lw_kernel_begin(c, b, 0, none));
    split_space(c, x, is_inner, b->k, acc);
    b->args[b->k->n_points_param].literal.i = gr_kernel_points(b->k);
    gr_status st = lw_load(c, b, x, acc, xload);
    if (st == GR_OK && t != lw_val(c, x)->dtype) st = gr_kx_cast(b->k, t, *xload, xload);
    if (st != GR_OK) lw_abort_kernel(b);
    return st;
}

static gr_status finish(gr_lctx *c, gr_lkb *b, gr_status st) {
    if (st != GR_OK) {
        lw_abort_kernel(b);
        return st;
    }
    return lw_emit_kernel(c, b);
}

/* ==== reduce_* ============================================================================ */

gr_status lw_lower_reduce(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype, yt = lw_val(c, y)->dtype;
    int nd = lw_val(c, x)->ndim;
    const int64_t *axes;
    int n_axes;
    GR_TRY(gr_ir_attr_ints(c->g, n, "axes", &axes, &n_axes));
    bool is_inner[GR_MAX_DIMS] = {false};
    for (int i = 0; i < n_axes; i++) {
        int a;
        GR_TRY(lw_axis(c, axes[i], nd, &a));
        is_inner[a] = true;
    }
    if (n_axes <= 0)
        for (int d = 0; d < nd; d++) is_inner[d] = true;
    if (lw_numel(c, y) == 0) return GR_OK;

    gr_kreduce fn = n->op == GR_OP_REDUCE_MAX ? GR_KR_MAX : n->op == GR_OP_REDUCE_MIN ? GR_KR_MIN
                    : n->op == GR_OP_REDUCE_PROD ? GR_KR_PROD : GR_KR_SUM;
    gr_dtype t = lw_acc_dtype(xt);
    if ((fn == GR_KR_SUM || fn == GR_KR_PROD) && gr_dtype_is_int(xt)) t = GR_I64;
    /* bool max/min run on i64 and come back as acc > 0: an empty max (init
     * INT64_MIN) is false and an empty min (INT64_MAX) true, as ONNX wants */
    if (xt == GR_BOOL) t = GR_I64;
    gr_lkb b;
    gr_kaccess acc;
    int xl;
    GR_TRY(begin_split(c, &b, x, is_inner, t, &acc, &xl));
    if (gr_kernel_points(b.k) != lw_numel(c, y)) {
        lw_abort_kernel(&b);
        return gr_error(GR_ERR_SHAPE, "%s: output has %lld elements, expected %lld", lw_where(c),
                        (long long)lw_numel(c, y), (long long)gr_kernel_points(b.k));
    }
    int v;
    gr_status st = add_reduce(b.k, fn, xl, &v, t);
    int64_t count = gr_kernel_inner_points(b.k);
    if (st == GR_OK && n->op == GR_OP_REDUCE_MEAN) {
        int cnt;
        if (!gr_dtype_is_float(t) && count == 0) {
            st = gr_kx_const_i(b.k, t, 0, &v); /* integer mean of nothing: 0 rather than a division by zero */
        } else {
            st = lw_const(b.k, t, (double)count, &cnt);
            if (st == GR_OK) st = gr_kx_binary(b.k, GR_KB_DIV, t, v, cnt, &v);
        }
    }
    if (st == GR_OK && xt == GR_BOOL && fn != GR_KR_SUM) {
        int zero;
        st = gr_kx_const_i(b.k, t, 0, &zero);
        if (st == GR_OK) st = gr_kx_binary(b.k, GR_KB_GT, GR_BOOL, v, zero, &v);
        if (st == GR_OK && yt != GR_BOOL) st = gr_kx_cast(b.k, yt, v, &v);
    } else if (st == GR_OK && t != yt) {
        st = gr_kx_cast(b.k, yt, v, &v);
    }
    gr_kaccess out;
    gr_kaccess_init(&out);
    lw_rowmajor(b.k->n_outer, b.k->outer, out.stride);
    if (st == GR_OK) st = lw_store(c, &b, y, v, &out, false);
    return finish(c, &b, st);
}

/* ==== softmax ================================================================================
 * m = max_r x;  s = sum_r exp(x - m);  y = exp(x - m) / s */

gr_status lw_lower_softmax(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype;
    if (!gr_dtype_is_float(xt)) return gr_error(GR_ERR_UNSUPPORTED, "%s: softmax needs a float input, got %s", lw_where(c), gr_dtype_name(xt));
    int64_t axis;
    GR_TRY(gr_ir_attr_int(c->g, n, "axis", -1, &axis));
    int nd = lw_val(c, x)->ndim, a;
    if (nd == 0) return gr_error(GR_ERR_SHAPE, "%s: softmax of a scalar", lw_where(c));
    GR_TRY(lw_axis(c, axis, nd, &a));
    if (lw_numel(c, y) == 0) return GR_OK;
    bool is_inner[GR_MAX_DIMS] = {false};
    is_inner[a] = true;
    gr_dtype t = lw_acc_dtype(xt);
    gr_lkb b;
    gr_kaccess acc;
    int xl, m, d, e, s, q;
    GR_TRY(begin_split(c, &b, x, is_inner, t, &acc, &xl));
    gr_status st = add_reduce(b.k, GR_KR_MAX, xl, &m, t);
    if (st == GR_OK) st = gr_kx_binary(b.k, GR_KB_SUB, t, xl, m, &d);
    if (st == GR_OK) st = gr_kx_unary(b.k, GR_KU_EXP, t, d, &e);
    if (st == GR_OK) st = add_reduce(b.k, GR_KR_SUM, e, &s, t);
    if (st == GR_OK) st = gr_kx_binary(b.k, GR_KB_DIV, t, e, s, &q);
    if (st == GR_OK && t != xt) st = gr_kx_cast(b.k, xt, q, &q);
    if (st == GR_OK) st = lw_store(c, &b, y, q, &acc, true);
    return finish(c, &b, st);
}

/* ==== layer_norm ===============================================================================
 * over dims [axis, ndim):  mean = sum x / n;  var = sum (x - mean)^2 / n;
 * y = (x - mean) / sqrt(var + epsilon) * scale + bias */

static gr_status param_load_split(gr_lctx *c, gr_lkb *b, int v, int x, int axis, gr_dtype t, int *out) {
    int64_t xd[GR_MAX_DIMS], st[GR_MAX_DIMS];
    int nd = lw_shape(c, x, xd);
    lw_bcast_strides(c, v, nd, xd, lw_val(c, x)->var_dims, st);
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    for (int d = 0; d < nd; d++) {
        if (d < axis) acc.stride[d] = st[d];
        else acc.inner_stride[d - axis] = st[d];
    }
    GR_TRY(lw_load(c, b, v, &acc, out));
    if (lw_val(c, v)->dtype != t) GR_TRY(gr_kx_cast(b->k, t, *out, out));
    return GR_OK;
}

gr_status lw_lower_layer_norm(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), scale = lw_in(c, 1), bias = n->n_in > 2 ? lw_in(c, 2) : -1, y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype;
    if (!gr_dtype_is_float(xt))
        return gr_error(GR_ERR_UNSUPPORTED, "%s: layer_norm needs a float input, got %s", lw_where(c), gr_dtype_name(xt));
    if (scale < 0) return gr_error(GR_ERR_INVALID, "%s: scale input is missing", lw_where(c));
    int64_t axis64;
    double eps;
    GR_TRY(gr_ir_attr_int(c->g, n, "axis", -1, &axis64));
    GR_TRY(gr_ir_attr_float(c->g, n, "epsilon", 1e-5, &eps));
    int nd = lw_val(c, x)->ndim, axis;
    if (nd == 0) return gr_error(GR_ERR_SHAPE, "%s: layer_norm of a scalar", lw_where(c));
    GR_TRY(lw_axis(c, axis64, nd, &axis));
    const int ins[2] = {scale, bias};
    for (int i = 0; i < 2; i++) { /* scale / bias must broadcast to x's normalized dims */
        if (ins[i] < 0) continue;
        const gr_ir_value *p = lw_val(c, ins[i]);
        if (p->ndim > nd) return gr_error(GR_ERR_SHAPE, "%s: %s has more dims than x", lw_where(c), i ? "bias" : "scale");
        for (int d = 0; d < p->ndim; d++) {
            int64_t pd = p->dims[d].size, xd = lw_val(c, x)->dims[d + nd - p->ndim].size;
            if (pd != 1 && pd != xd)
                return gr_error(GR_ERR_SHAPE, "%s: %s does not broadcast to x", lw_where(c), i ? "bias" : "scale");
        }
    }
    if (lw_numel(c, y) == 0) return GR_OK;
    bool is_inner[GR_MAX_DIMS] = {false};
    for (int d = axis; d < nd; d++) is_inner[d] = true;
    gr_dtype t = lw_acc_dtype(xt);
    gr_lkb b;
    gr_kaccess acc;
    int xl, s0, cnt, mean, dev, sq, s1, var, ce, ve, den, r, sc, bi;
    GR_TRY(begin_split(c, &b, x, is_inner, t, &acc, &xl));
    gr_kernel *k = b.k;
    gr_status st = add_reduce(k, GR_KR_SUM, xl, &s0, t);
    if (st == GR_OK) st = gr_kx_const_f(k, t, (double)gr_kernel_inner_points(k), &cnt);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_DIV, t, s0, cnt, &mean);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_SUB, t, xl, mean, &dev);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, t, dev, dev, &sq);
    if (st == GR_OK) st = add_reduce(k, GR_KR_SUM, sq, &s1, t);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_DIV, t, s1, cnt, &var);
    if (st == GR_OK) st = gr_kx_const_f(k, t, eps, &ce);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, t, var, ce, &ve);
    if (st == GR_OK) st = gr_kx_unary(k, GR_KU_SQRT, t, ve, &den);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_DIV, t, dev, den, &r);
    if (st == GR_OK) st = param_load_split(c, &b, scale, x, axis, t, &sc);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, t, r, sc, &r);
    if (st == GR_OK && bias >= 0) {
        st = param_load_split(c, &b, bias, x, axis, t, &bi);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, t, r, bi, &r);
    }
    if (st == GR_OK && t != xt) st = gr_kx_cast(k, xt, r, &r);
    if (st == GR_OK) st = lw_store(c, &b, y, r, &acc, true);
    return finish(c, &b, st);
}

/* ==== arg_max / arg_min ========================================================================
 * One kernel, two reduce stages over the axis:  m = max_r x  (min for arg_min; NaN
 * propagates);  i = min_r (x == m || isnan(x) ? r : n)  (max_r ... : -1 with
 * select_last_index). A NaN is therefore the extreme value, and its first (last)
 * index wins, as numpy's argmax/argmin and the ONNX reference give.
 *
 * A long axis of fixed length (a vocabulary: decoding's greedy token) is split into chunks of
 * LW_ARG_CHUNK points: kernel 1 takes the same two stages over each chunk (cm_g, ci_g: its
 * extreme and that extreme's first (last) index in the chunk), kernel 2 the same two stages
 * over the chunks (m = max_g cm_g; i = min_g (cm_g == m || isnan(cm_g) ? ci_g : n)), which is
 * the same index: a chunk holds the row's first (last) extreme iff its own extreme equals m
 * (or is a NaN when m is), and then ci_g is that point. Why: one block per row of 50257 f32
 * took 42.8 us on the H100 (decode profile, GPT-2 greedy step; reading the row takes under
 * 2 us): a row's two passes ran as one latency-bound loop on one SM. Chunks of 512 are warp
 * rows (render-cuda's warp-row form: every load of a lane in flight at once), ~100 of them
 * for a vocabulary. The last chunk's points past the row read the row's last element again
 * (a clamped gather index) and never count as a hit, so the value and index stay exact. */
#define LW_ARG_SPLIT_MIN 4096 /* axes at least this long are split */
#define LW_ARG_CHUNK 512

/* x's kept dims (all but axis a) and their row-major strides in x; returns their count. */
static int kept_dims(int nd, const int64_t *xd, const int64_t *xs, int a, int64_t *dims, int64_t *strides) {
    int n = 0;
    for (int d = 0; d < nd; d++) {
        if (d == a) continue;
        dims[n] = xd[d];
        strides[n++] = xs[d];
    }
    return n;
}

/* The two stages of an arg reduction over value xl (dtype t) whose candidate index is idx:
 * extreme m, then the first (last) idx where xl == m or xl is NaN and `valid` (-1: always). */
static gr_status arg_stages(gr_kernel *k, bool is_max, bool last, gr_dtype t, int xl, int idx, int valid, int64_t miss_value,
                            int *m, int *res) {
    int hit, nan, miss, cand;
    GR_TRY(add_reduce(k, is_max ? GR_KR_MAX : GR_KR_MIN, xl, m, t));
    GR_TRY(gr_kx_binary(k, GR_KB_EQ, GR_BOOL, xl, *m, &hit));
    if (gr_dtype_is_float(t)) {
        GR_TRY(gr_kx_unary(k, GR_KU_ISNAN, GR_BOOL, xl, &nan));
        GR_TRY(gr_kx_binary(k, GR_KB_OR, GR_BOOL, hit, nan, &hit));
    }
    if (valid >= 0) GR_TRY(gr_kx_binary(k, GR_KB_AND, GR_BOOL, hit, valid, &hit));
    GR_TRY(gr_kx_const_i(k, GR_I64, last ? -1 : miss_value, &miss));
    GR_TRY(gr_kx_select(k, GR_I64, hit, idx, miss, &cand));
    return add_reduce(k, last ? GR_KR_MAX : GR_KR_MIN, cand, res, GR_I64);
}

static gr_status arg_reduce_split(gr_lctx *c, bool is_max, bool last, int a) {
    int x = lw_in(c, 0), y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype, t = lw_acc_dtype(xt);
    int64_t xd[GR_MAX_DIMS], xs[GR_MAX_DIMS], od[GR_MAX_DIMS], os[GR_MAX_DIMS];
    int nd = lw_shape(c, x, xd);
    lw_rowmajor(nd, xd, xs);
    int no = kept_dims(nd, xd, xs, a, od, os);
    int64_t len = xd[a], chunks = (len + LW_ARG_CHUNK - 1) / LW_ARG_CHUNK;
    uint32_t xvar = lw_val(c, x)->var_dims, ovar = 0;
    for (int d = 0, o = 0; d < nd; d++)
        if (d != a) ovar |= (xvar >> d & 1u) << o++;
    /* partials [kept..., chunks]: each chunk's extreme (t) and its index (i64) */
    int64_t pd[GR_MAX_DIMS];
    for (int d = 0; d < no; d++) pd[d] = od[d];
    pd[no] = chunks;
    int cm = -1, ci = -1;
    GR_TRY(lw_temp_value(c, t, no + 1, pd, &cm));
    GR_TRY(lw_temp_value(c, GR_I64, no + 1, pd, &ci));
    /* kernel 1: outer [kept..., chunks], inner [LW_ARG_CHUNK] */
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, no + 1, pd));
    gr_kernel *k = b.k;
    k->n_inner = 1;
    k->inner[0] = LW_ARG_CHUNK;
    k->var_outer = ovar, k->var_inner = 0;
    gr_kaccess xa;
    gr_kaccess_init(&xa);
    for (int d = 0; d < no; d++) xa.stride[d] = os[d];
    xa.index_stride = xs[a];
    xa.index_extent = len;
    xa.origin = c->node;
    int g, r, base, chunk_c, pos = -1, last_c, idx = -1, n_c, valid = -1, xl, m, res;
    gr_status st = gr_kx_index(k, no, &g);
    if (st == GR_OK) st = gr_kx_index(k, GR_KIDX_INNER, &r);
    if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, LW_ARG_CHUNK, &chunk_c);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, GR_I64, g, chunk_c, &base);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, GR_I64, base, r, &pos);
    if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, len - 1, &last_c);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MIN, GR_I64, pos, last_c, &idx);
    if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, len, &n_c);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_LT, GR_BOOL, pos, n_c, &valid);
    xa.index = idx;
    if (st == GR_OK) st = lw_load(c, &b, x, &xa, &xl);
    if (st == GR_OK && t != xt) st = gr_kx_cast(k, t, xl, &xl);
    if (st == GR_OK) st = arg_stages(k, is_max, last, t, xl, pos, valid, len, &m, &res);
    gr_kaccess pa;
    gr_kaccess_init(&pa);
    lw_rowmajor(no + 1, pd, pa.stride);
    if (st == GR_OK) st = lw_store(c, &b, cm, m, &pa, false);
    if (st == GR_OK) st = lw_store(c, &b, ci, res, &pa, false);
    GR_TRY(finish(c, &b, st));
    /* kernel 2: outer [kept...], inner [chunks] */
    GR_TRY(lw_kernel_begin(c, &b, no, od));
    k = b.k;
    k->n_inner = 1;
    k->inner[0] = chunks;
    k->var_outer = ovar, k->var_inner = xvar >> a & 1u; /* the chunk count follows a symbolic length */
    gr_kaccess ra;
    gr_kaccess_init(&ra);
    for (int d = 0; d < no; d++) ra.stride[d] = pa.stride[d];
    ra.inner_stride[0] = 1;
    int cml, cil;
    st = lw_load(c, &b, cm, &ra, &cml);
    if (st == GR_OK) st = lw_load(c, &b, ci, &ra, &cil);
    if (st == GR_OK) st = arg_stages(k, is_max, last, t, cml, cil, -1, len, &m, &res);
    gr_kaccess out;
    gr_kaccess_init(&out);
    lw_rowmajor(k->n_outer, k->outer, out.stride);
    if (st == GR_OK) st = lw_store(c, &b, y, res, &out, false);
    return finish(c, &b, st);
}

gr_status lw_lower_arg_reduce(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype;
    int64_t axis, last;
    GR_TRY(gr_ir_attr_int(c->g, n, "axis", 0, &axis));
    GR_TRY(gr_ir_attr_int(c->g, n, "select_last_index", 0, &last));
    int nd = lw_val(c, x)->ndim, a;
    if (nd == 0) return gr_error(GR_ERR_SHAPE, "%s: arg reduction of a scalar", lw_where(c));
    GR_TRY(lw_axis(c, axis, nd, &a));
    int64_t xd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    if (xd[a] == 0) return gr_error(GR_ERR_SHAPE, "%s: arg reduction over an empty axis has no index to return", lw_where(c));
    if (lw_numel(c, y) == 0) return GR_OK;
    if (xd[a] >= LW_ARG_SPLIT_MIN && !(lw_val(c, x)->var_dims >> a & 1u))
        return arg_reduce_split(c, n->op == GR_OP_ARG_MAX, last != 0, a);
    bool is_inner[GR_MAX_DIMS] = {false};
    is_inner[a] = true;
    gr_dtype t = lw_acc_dtype(xt);
    gr_lkb b;
    gr_kaccess acc;
    int xl, m, hit, nan, idx, miss, cand, res;
    GR_TRY(begin_split(c, &b, x, is_inner, t, &acc, &xl));
    gr_kernel *k = b.k;
    gr_status st = add_reduce(k, n->op == GR_OP_ARG_MAX ? GR_KR_MAX : GR_KR_MIN, xl, &m, t);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_EQ, GR_BOOL, xl, m, &hit);
    if (st == GR_OK && gr_dtype_is_float(t)) {
        st = gr_kx_unary(k, GR_KU_ISNAN, GR_BOOL, xl, &nan);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_OR, GR_BOOL, hit, nan, &hit);
    }
    if (st == GR_OK) st = gr_kx_index(k, GR_KIDX_INNER, &idx);
    if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, last ? -1 : xd[a], &miss);
    if (st == GR_OK) st = gr_kx_select(k, GR_I64, hit, idx, miss, &cand);
    if (st == GR_OK) st = add_reduce(k, last ? GR_KR_MAX : GR_KR_MIN, cand, &res, GR_I64);
    gr_kaccess out;
    gr_kaccess_init(&out);
    lw_rowmajor(k->n_outer, k->outer, out.stride);
    if (st == GR_OK) st = lw_store(c, &b, y, res, &out, false);
    return finish(c, &b, st);
}
