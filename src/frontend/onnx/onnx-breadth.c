/* frontend/onnx/onnx-breadth — model-breadth ops on run-time tensors: ArgMax,
 * ArgMin, Mod, Tile, OneHot, TopK, ScatterElements, ScatterND, and the ops with
 * data-dependent output shapes (NonZero, Range on run-time scalars). All but ArgMax/ArgMin (one IR
 * op with its own kernel) decompose into IR ops, so the simulator and the CUDA
 * backend run the same kernels. */
#include "frontend/onnx/onnx-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static gr_ir_attr A_int(const char *name, int64_t v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INT, .i = v}; }
static gr_ir_attr A_str(const char *name, const char *s) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_STRING, .s = (char *)s};
}
static gr_ir_attr A_ints(const char *name, const int64_t *v, int n) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)v, .n = n};
}
static const gr_ir_value *irv(const ox_ctx *c, int ir) { return &c->g->values.data[ir]; }

/* ---- model-breadth ops (issue 14): ArgMax/ArgMin, TopK, Mod, Tile, OneHot, ... -------- */

gr_status ox_cv_arg(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int64_t axis, keepdims, last;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    GR_TRY(ox_attr_int(c, "keepdims", 1, &keepdims));
    GR_TRY(ox_attr_int(c, "select_last_index", 0, &last));
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    gr_ir_attr attrs[3] = {A_int("axis", axis), A_int("keepdims", keepdims != 0), A_int("select_last_index", last != 0)};
    return ox_emit1(c, op, 1, &x, 3, attrs);
}

/* Mod(a, b; fmod): fmod=1 is C's remainder (the sign of a); fmod=0 is the floor
 * remainder (the sign of b): r = a mod b, plus b where r != 0 and r, b differ in sign.
 * ONNX asks fmod=1 for floats; fmod=0 on floats gets np.mod's answer, as the reference does. */
gr_status ox_cv_mod(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 2, 2, 1));
    int64_t fmod;
    GR_TRY(ox_attr_int(c, "fmod", 0, &fmod));
    if (fmod != 0 && fmod != 1) return ox_node_error(c, GR_ERR_INVALID, "attribute 'fmod' must be 0 or 1, got %lld", (long long)fmod);
    int in[2];
    GR_TRY(ox_in_ir(c, 0, &in[0]));
    GR_TRY(ox_in_ir(c, 1, &in[1]));
    const gr_ir_value *av = irv(c, in[0]), *bv = irv(c, in[1]);
    if (av->typed && bv->typed && av->dtype != bv->dtype)
        return ox_node_error(c, GR_ERR_SHAPE, "A and B have different dtypes (%s, %s)", gr_dtype_name(av->dtype), gr_dtype_name(bv->dtype));
    if (av->typed && av->dtype == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "Mod of bool");
    if (fmod || (av->typed && gr_dtype_is_int(av->dtype) && av->dtype == GR_U8)) return ox_emit1(c, op, 2, in, 0, NULL);
    gr_dtype dt = av->typed ? av->dtype : GR_F32;
    int r, zero, rz, rneg, bneg, same, keep, rb;
    GR_TRY(ox_emit2(c, op, in[0], in[1], &r));
    GR_TRY(ox_scalar_const_ir(c, dt, 0.0, &zero));
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, r, zero, &rz));
    GR_TRY(ox_emit2(c, GR_OP_LESS, r, zero, &rneg));
    GR_TRY(ox_emit2(c, GR_OP_LESS, in[1], zero, &bneg));
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, rneg, bneg, &same));
    GR_TRY(ox_emit2(c, GR_OP_OR, rz, same, &keep)); /* keep r unless r != 0 and the signs differ */
    GR_TRY(ox_emit2(c, GR_OP_ADD, r, in[1], &rb));
    int w[3] = {keep, r, rb};
    return ox_emit1(c, GR_OP_WHERE, 3, w, 0, NULL);
}

/* Tile(x, repeats): x viewed as [.., 1, d_i, ..] (a 1 before each repeated dim),
 * expanded to [.., r_i, d_i, ..], reshaped to [.., r_i*d_i, ..]. repeats must be
 * known at import time; dims may be symbolic. */
gr_status ox_cv_tile(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 2, 2, 1));
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int r = xv->ndim, n;
    int64_t rep[GR_MAX_DIMS];
    GR_TRY(ox_need_ints(c, 1, "repeats", rep, GR_MAX_DIMS, &n));
    if (n != r) return ox_node_error(c, GR_ERR_SHAPE, "repeats has %d entries for an input of rank %d", n, r);
    gr_dim xd[GR_MAX_DIMS], mid[GR_MAX_DIMS], big[GR_MAX_DIMS], fin[GR_MAX_DIMS];
    int nm = 0;
    for (int i = 0; i < r; i++) {
        xd[i] = xv->dims[i];
        if (rep[i] < 0) return ox_node_error(c, GR_ERR_INVALID, "repeats[%d] = %lld is negative", i, (long long)rep[i]);
        if (rep[i] != 1) {
            if (nm == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "tiling needs more than %d dims", GR_MAX_DIMS);
            mid[nm] = gr_dx_const(1);
            big[nm++] = gr_dx_const(rep[i]);
        }
        if (nm == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "tiling needs more than %d dims", GR_MAX_DIMS);
        mid[nm] = xd[i];
        big[nm++] = xd[i];
        gr_status st = gr_dx_binary(c->g, GR_DX_MUL, xd[i], gr_dx_const(rep[i]), &fin[i]);
        if (st != GR_OK) return ox_node_error(c, st == GR_ERR_NOMEM ? st : GR_ERR_SHAPE, "dim %d times %lld is not expressible", i, (long long)rep[i]);
    }
    GR_TRY(ox_check_target_sshape(c, "the tiled shape", fin, r));
    if (nm == r) return ox_emit1(c, GR_OP_IDENTITY, 1, &x, 0, NULL);
    int v, e;
    GR_TRY(ox_reshape_ir(c, x, mid, nm, &v));
    int64_t bv[GR_MAX_DIMS];
    int32_t be[GR_MAX_DIMS];
    gr_ir_attr ea = ox_attr_sints("shape", big, nm, bv, be);
    GR_TRY(ox_emit(c, GR_OP_EXPAND, 1, &v, 1, &ea, 1, NULL, false, &e));
    int64_t fv[GR_MAX_DIMS];
    int32_t fe[GR_MAX_DIMS];
    gr_ir_attr ra = ox_attr_sints("shape", fin, r, fv, fe);
    return ox_emit1(c, GR_OP_RESHAPE, 1, &e, 1, &ra);
}

/* OneHot(indices, depth, values; axis=-1): where(unsqueeze(idx, axis) == iota(depth),
 * on, off) with negative indices counted from depth; an index outside
 * [-depth, depth) matches nothing (all off), as ONNX says. */
gr_status ox_cv_one_hot(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 3, 3, 1));
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    const ox_tensor *dt;
    GR_TRY(ox_need_const(c, 1, "depth", &dt));
    if (ox_tensor_numel(dt) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'depth' must hold one value");
    double dd = gr_load_f64(dt->data, dt->dtype, 0);
    if (!(dd >= 1 && dd <= (double)OX_MAX_ELEMS)) return ox_node_error(c, GR_ERR_INVALID, "depth %g is not a positive size", dd);
    int64_t depth = (int64_t)dd;
    int idx, vals;
    GR_TRY(ox_in_ir(c, 0, &idx));
    GR_TRY(ox_in_ir(c, 2, &vals));
    const gr_ir_value *iv = irv(c, idx), *vv = irv(c, vals);
    if (!iv->typed || !vv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shapes of the inputs are not known");
    if (gr_ir_value_numel(vv) != 2 || vv->ndim != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'values' must be [off_value, on_value]");
    int r = iv->ndim + 1;
    if (r > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the result has more than %d dims", GR_MAX_DIMS);
    if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for an output of rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    if (iv->dtype != GR_I64) {
        gr_ir_attr to = A_str("to", "i64");
        GR_TRY(ox_emit(c, GR_OP_CAST, 1, &idx, 1, &to, 1, NULL, false, &idx));
    }
    int zero, dep, neg, wrapped, u, io, ior, eq, on, off;
    GR_TRY(ox_scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(ox_scalar_const_ir(c, GR_I64, (double)depth, &dep));
    GR_TRY(ox_emit2(c, GR_OP_LESS, idx, zero, &neg));
    GR_TRY(ox_emit2(c, GR_OP_ADD, idx, dep, &wrapped));
    GR_TRY(ox_where_ir(c, neg, wrapped, idx, &idx));
    GR_TRY(ox_unsqueeze_ir(c, idx, a, &u));
    GR_TRY(ox_iota_ir(c, gr_dx_const(depth), &io));
    gr_dim sh[GR_MAX_DIMS];
    sh[0] = gr_dx_const(depth);
    for (int i = a + 1; i < r; i++) sh[i - a] = gr_dx_const(1);
    GR_TRY(ox_reshape_ir(c, io, sh, r - a, &ior));
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, u, ior, &eq));
    for (int k = 0; k < 2; k++) {
        int64_t s0 = k, e0 = k + 1, ax = 0;
        gr_ir_attr sl[3] = {A_ints("starts", &s0, 1), A_ints("ends", &e0, 1), A_ints("axes", &ax, 1)};
        GR_TRY(ox_emit(c, GR_OP_SLICE, 1, &vals, 3, sl, 1, NULL, false, k ? &on : &off));
    }
    int w[3] = {eq, on, off};
    return ox_emit1(c, GR_OP_WHERE, 3, w, 0, NULL);
}

/* TopK(x, k; axis=-1, largest=1, sorted=1) with k known at import time, by ranks: with
 * the axis moved last, rank[i] = #{l : l comes before i} where l comes before i when
 * x[l] is larger (smaller) or equal with l < i, NaN counting as larger than
 * everything (numpy's sort order, which the ONNX reference uses); the j-th index
 * is the i whose rank is j, and the values are gathered at the indices. Always
 * sorted (sorted=0 lets any order through). O(n^2) compare work per row, fused
 * into one reduction: meant for the small rows exporters use it on. */
gr_status ox_cv_top_k(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 2, 2, 1));
    int64_t axis, largest, sorted_;
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    GR_TRY(ox_attr_int(c, "largest", 1, &largest));
    GR_TRY(ox_attr_int(c, "sorted", 1, &sorted_));
    int64_t k;
    int nk;
    GR_TRY(ox_need_ints(c, 1, "K", &k, 1, &nk));
    if (nk != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'K' must hold one value");
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int r = xv->ndim;
    if (r < 1 || r + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "TopK of a rank-%d tensor is not supported", r);
    if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    if (xv->dtype == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "TopK of bool");
    if (gr_dx_is_sym(xv->dims[a]))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "TopK along a symbolic dim is not supported (the axis length must be known to check K)");
    int64_t n = xv->dims[a].size;
    if (k < 0 || k > n) return ox_node_error(c, GR_ERR_SHAPE, "K = %lld is outside [0, %lld] (the axis length)", (long long)k, (long long)n);
    bool fl = gr_dtype_is_float(xv->dtype);
    int64_t perm[GR_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++)
        if (i != a) perm[j++] = i;
    perm[r - 1] = a;
    int xt = x;
    if (a != r - 1) {
        gr_ir_attr p = A_ints("perm", perm, r);
        GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &x, 1, &p, 1, NULL, false, &xt));
    }
    int xi, xl, io, ii, il, gt, eqv, idxlt, tie, before, cnt, rank;
    GR_TRY(ox_unsqueeze_ir(c, xt, r, &xi));     /* [.., n, 1]: element i */
    GR_TRY(ox_unsqueeze_ir(c, xt, r - 1, &xl)); /* [.., 1, n]: element l */
    GR_TRY(ox_emit2(c, largest ? GR_OP_GREATER : GR_OP_LESS, xl, xi, &gt));
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, xl, xi, &eqv));
    if (fl) {
        int nl, ni, nni, nnl, t;
        GR_TRY(ox_emit(c, GR_OP_ISNAN, 1, &xl, 0, NULL, 1, NULL, false, &nl));
        GR_TRY(ox_emit(c, GR_OP_ISNAN, 1, &xi, 0, NULL, 1, NULL, false, &ni));
        GR_TRY(ox_emit(c, GR_OP_NOT, 1, &ni, 0, NULL, 1, NULL, false, &nni));
        GR_TRY(ox_emit(c, GR_OP_NOT, 1, &nl, 0, NULL, 1, NULL, false, &nnl));
        /* largest: a NaN l beats a number i; smallest: a number l beats a NaN i */
        GR_TRY(largest ? ox_emit2(c, GR_OP_AND, nl, nni, &t) : ox_emit2(c, GR_OP_AND, nnl, ni, &t));
        GR_TRY(ox_emit2(c, GR_OP_OR, gt, t, &gt));
        GR_TRY(ox_emit2(c, GR_OP_AND, nl, ni, &t));
        GR_TRY(ox_emit2(c, GR_OP_OR, eqv, t, &eqv));
    }
    GR_TRY(ox_iota_ir(c, gr_dx_const(n), &io));
    GR_TRY(ox_unsqueeze_ir(c, io, 1, &ii)); /* [n, 1] */
    GR_TRY(ox_unsqueeze_ir(c, io, 0, &il)); /* [1, n] */
    GR_TRY(ox_emit2(c, GR_OP_LESS, il, ii, &idxlt));
    GR_TRY(ox_emit2(c, GR_OP_AND, eqv, idxlt, &tie));
    GR_TRY(ox_emit2(c, GR_OP_OR, gt, tie, &before));
    gr_ir_attr to = A_str("to", "i64");
    GR_TRY(ox_emit(c, GR_OP_CAST, 1, &before, 1, &to, 1, NULL, false, &cnt));
    int64_t lastax = -1;
    gr_ir_attr rs[2] = {A_ints("axes", &lastax, 1), A_int("keepdims", 0)};
    GR_TRY(ox_emit(c, GR_OP_REDUCE_SUM, 1, &cnt, 2, rs, 1, NULL, false, &rank)); /* [.., n] */
    int ru, jo, ju, sel, zero, pick, idx, vals;
    GR_TRY(ox_unsqueeze_ir(c, rank, r - 1, &ru)); /* [.., 1, n] */
    GR_TRY(ox_iota_ir(c, gr_dx_const(k), &jo));
    GR_TRY(ox_unsqueeze_ir(c, jo, 1, &ju));       /* [k, 1] */
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, ru, ju, &sel)); /* [.., k, n] */
    GR_TRY(ox_scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(ox_where_ir(c, sel, il, zero, &pick));
    GR_TRY(ox_emit(c, GR_OP_REDUCE_SUM, 1, &pick, 2, rs, 1, NULL, false, &idx)); /* [.., k] */
    int gin[2] = {xt, idx};
    gr_ir_attr ga = A_int("axis", r - 1);
    const char *names[2];
    ox_out_names(c, names, 2);
    int outs[2];
    if (a == r - 1) {
        GR_TRY(ox_emit(c, GR_OP_GATHER_ELEMENTS, 2, gin, 1, &ga, 1, &names[0], names[0] != NULL, &outs[0]));
        GR_TRY(ox_emit(c, GR_OP_IDENTITY, 1, &idx, 0, NULL, 1, &names[1], names[1] != NULL, &outs[1]));
        return ox_bind_outputs(c, 2, outs, NULL);
    }
    GR_TRY(ox_emit(c, GR_OP_GATHER_ELEMENTS, 2, gin, 1, &ga, 1, NULL, false, &vals));
    int64_t inv[GR_MAX_DIMS];
    for (int i = 0; i < r; i++) inv[perm[i]] = i;
    gr_ir_attr p = A_ints("perm", inv, r);
    GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &vals, 1, &p, 1, &names[0], names[0] != NULL, &outs[0]));
    GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &idx, 1, &p, 1, &names[1], names[1] != NULL, &outs[1]));
    return ox_bind_outputs(c, 2, outs, NULL);
}

/* ---- ScatterElements / ScatterND on run-time tensors --------------------------------------
 * No scatter kernel: out[p] is computed at every output position p from a match
 * matrix M[p, u] = (target of update u == p), so each output element is written
 * once (no atomics, same bits on every device). reduction none: the last matching
 * update wins (ONNX leaves duplicates undefined; the reference's sequential
 * assignment keeps the last), no match keeps data. add / mul / max / min fold the
 * matching updates into data: data op reduce(where(M, update, identity)) with
 * identity 0, 1, or data itself for max/min. O(positions x updates) compare work, fused into
 * one reduction per output; an index outside its dim matches nothing. */
typedef enum { SC_NONE, SC_ADD, SC_MUL, SC_MAX, SC_MIN } sc_red;

/* The node's final IR node (named, bound to the ONNX output) when `last`, else a helper into *out. */
static gr_status emit_final(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, bool last, int *out) {
    if (last) return ox_emit1(c, op, n_in, in, n_attr, attrs);
    return ox_emit(c, op, n_in, in, n_attr, attrs, 1, NULL, false, out);
}

static gr_status scatter_reduction(ox_ctx *c, sc_red *out) {
    char red[16];
    GR_TRY(ox_attr_string(c, "reduction", "none", red, sizeof red));
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(red, names[i])) return *out = (sc_red)i, GR_OK;
    return ox_node_error(c, GR_ERR_INVALID, "reduction '%s' is not one of none, add, mul, max, min", red);
}

/* m: the match matrix, its update axis `uax` (of length n_upd); upd_b: the updates
 * shaped to broadcast against m (with n_after trailing dims m lacks); data: the
 * output's shape. none gathers update j from upd_src along axis gax (Gather, or
 * GatherElements when `elements`). The last node is the ONNX node's output when
 * `last`, else returned in *out. */
static gr_status scatter_combine(ox_ctx *c, sc_red red, int m, int uax, int n_after, gr_dim n_upd, int upd_b,
                                 int upd_src, int gax, bool elements, int data, bool last, int *out) {
    gr_dtype dt = irv(c, data)->dtype;
    if (red == SC_NONE) {
        int jo, minus1, cand, jsel, zero, any, jc, val, anyr;
        GR_TRY(ox_iota_ir(c, n_upd, &jo));
        GR_TRY(ox_scalar_const_ir(c, GR_I64, -1.0, &minus1));
        GR_TRY(ox_where_ir(c, m, jo, minus1, &cand));
        int64_t ax = uax;
        gr_ir_attr rs[2] = {A_ints("axes", &ax, 1), A_int("keepdims", 0)};
        GR_TRY(ox_emit(c, GR_OP_REDUCE_MAX, 1, &cand, 2, rs, 1, NULL, false, &jsel));
        GR_TRY(ox_scalar_const_ir(c, GR_I64, 0.0, &zero));
        GR_TRY(ox_emit2(c, GR_OP_GREATER_EQUAL, jsel, zero, &any));
        GR_TRY(ox_emit2(c, GR_OP_MAX, jsel, zero, &jc));
        int gin[2] = {upd_src, jc};
        gr_ir_attr ga = A_int("axis", gax);
        GR_TRY(ox_emit(c, elements ? GR_OP_GATHER_ELEMENTS : GR_OP_GATHER, 2, gin, 1, &ga, 1, NULL, false, &val));
        anyr = any;
        for (int i = 0; i < n_after; i++) GR_TRY(ox_unsqueeze_ir(c, anyr, irv(c, anyr)->ndim, &anyr));
        int w[3] = {anyr, val, data};
        return emit_final(c, GR_OP_WHERE, 3, w, 0, NULL, last, out);
    }
    int ident, mb = m, sel, r;
    for (int i = 0; i < n_after; i++) GR_TRY(ox_unsqueeze_ir(c, mb, irv(c, mb)->ndim, &mb));
    if (red == SC_ADD || red == SC_MUL) GR_TRY(ox_scalar_const_ir(c, dt, red == SC_ADD ? 0.0 : 1.0, &ident));
    else GR_TRY(ox_unsqueeze_ir(c, data, uax, &ident));
    GR_TRY(ox_where_ir(c, mb, upd_b, ident, &sel));
    int64_t ax = uax;
    gr_ir_attr rs[2] = {A_ints("axes", &ax, 1), A_int("keepdims", 0)};
    gr_op rop = red == SC_ADD ? GR_OP_REDUCE_SUM : red == SC_MUL ? GR_OP_REDUCE_PROD : red == SC_MAX ? GR_OP_REDUCE_MAX : GR_OP_REDUCE_MIN;
    GR_TRY(ox_emit(c, rop, 1, &sel, 2, rs, 1, NULL, false, &r));
    /* where every update matches, data is not among the reduced values: fold it in */
    int pair[2] = {data, r};
    gr_op fold = red == SC_ADD ? GR_OP_ADD : red == SC_MUL ? GR_OP_MUL : red == SC_MAX ? GR_OP_MAX : GR_OP_MIN;
    return emit_final(c, fold, 2, pair, 0, NULL, last, out);
}

static gr_status scatter_check_types(ox_ctx *c, int data, int idx, int upd) {
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx), *uv = irv(c, upd);
    if (!dv->typed || !iv->typed || !uv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shapes of the inputs are not known");
    if (!gr_dtype_is_int(iv->dtype)) return ox_node_error(c, GR_ERR_SHAPE, "indices must be integers");
    if (uv->dtype != dv->dtype) return ox_node_error(c, GR_ERR_SHAPE, "updates (%s) and data (%s) differ in dtype", gr_dtype_name(uv->dtype), gr_dtype_name(dv->dtype));
    return GR_OK;
}


gr_status ox_cv_scatter_elements(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 3, 3, 1));
    int64_t axis;
    sc_red red = SC_NONE;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    GR_TRY(scatter_reduction(c, &red));
    int data, idx, upd;
    GR_TRY(ox_in_ir(c, 0, &data));
    GR_TRY(ox_in_ir(c, 1, &idx));
    GR_TRY(ox_in_ir(c, 2, &upd));
    GR_TRY(scatter_check_types(c, data, idx, upd));
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx), *uv = irv(c, upd);
    int r = dv->ndim;
    if (r < 1 || r + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "ScatterElements of a rank-%d tensor is not supported", r);
    if (iv->ndim != r || uv->ndim != r) return ox_node_error(c, GR_ERR_SHAPE, "data, indices and updates must have the same rank");
    if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    for (int i = 0; i < r; i++) {
        if (!gr_dx_equal(iv->dims[i], uv->dims[i])) return ox_node_error(c, GR_ERR_SHAPE, "indices and updates differ in shape (dim %d)", i);
        if (i != a && !gr_dx_equal(iv->dims[i], dv->dims[i]))
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "indices smaller than data in dim %d (not the axis) is not supported", i);
    }
    gr_dim n = dv->dims[a], m = iv->dims[a];
    if (!gr_dx_is_sym(m) && m.size == 0) return ox_emit1(c, GR_OP_IDENTITY, 1, &data, 0, NULL);
    int64_t perm[GR_MAX_DIMS], inv[GR_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++)
        if (i != a) perm[j++] = i;
    perm[r - 1] = a;
    for (int i = 0; i < r; i++) inv[perm[i]] = i;
    int d = data, ix = idx, u = upd;
    if (a != r - 1) {
        gr_ir_attr p = A_ints("perm", perm, r);
        GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &data, 1, &p, 1, NULL, false, &d));
        GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &idx, 1, &p, 1, NULL, false, &ix));
        GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &upd, 1, &p, 1, NULL, false, &u));
    }
    if (irv(c, ix)->dtype != GR_I64) {
        gr_ir_attr to = A_str("to", "i64");
        GR_TRY(ox_emit(c, GR_OP_CAST, 1, &ix, 1, &to, 1, NULL, false, &ix));
    }
    int zero, nn, neg, wr, iu, io, ion, mm, ub;
    GR_TRY(ox_scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(ox_dim_scalar_ir(c, n, GR_I64, &nn));
    GR_TRY(ox_emit2(c, GR_OP_LESS, ix, zero, &neg));
    GR_TRY(ox_emit2(c, GR_OP_ADD, ix, nn, &wr));
    GR_TRY(ox_where_ir(c, neg, wr, ix, &ix));
    GR_TRY(ox_unsqueeze_ir(c, ix, r - 1, &iu)); /* [.., 1, m] */
    GR_TRY(ox_iota_ir(c, n, &io));
    GR_TRY(ox_unsqueeze_ir(c, io, 1, &ion));   /* [n, 1] */
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, iu, ion, &mm)); /* [.., n, m] */
    GR_TRY(ox_unsqueeze_ir(c, u, r - 1, &ub));  /* [.., 1, m] */
    if (a == r - 1) return scatter_combine(c, red, mm, r, 0, m, ub, u, r - 1, true, d, true, NULL);
    int res;
    GR_TRY(scatter_combine(c, red, mm, r, 0, m, ub, u, r - 1, true, d, false, &res));
    gr_ir_attr p = A_ints("perm", inv, r);
    return ox_emit1(c, GR_OP_TRANSPOSE, 1, &res, 1, &p);
}

/* ScatterND(data, indices [M.., k], updates [M.., data dims k..]): data viewed as
 * [P, R..] (P = prod of its first k dims), the index tuples as linear indices
 * [U] (U = prod M), updates as [U, R..]; M[p, u] = (lin[u] == p). */
gr_status ox_cv_scatter_nd(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 3, 3, 1));
    sc_red red = SC_NONE;
    GR_TRY(scatter_reduction(c, &red));
    int data, idx, upd;
    GR_TRY(ox_in_ir(c, 0, &data));
    GR_TRY(ox_in_ir(c, 1, &idx));
    GR_TRY(ox_in_ir(c, 2, &upd));
    GR_TRY(scatter_check_types(c, data, idx, upd));
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx), *uv = irv(c, upd);
    int r = dv->ndim, q = iv->ndim;
    if (q < 1) return ox_node_error(c, GR_ERR_SHAPE, "indices must have rank >= 1");
    gr_dim kd = iv->dims[q - 1];
    if (gr_dx_is_sym(kd)) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the indices' last dim (the index tuple length) must be concrete");
    int k = (int)kd.size;
    if (k < 1 || k > r) return ox_node_error(c, GR_ERR_SHAPE, "index tuples of length %d for data of rank %d", k, r);
    int nr = r - k;
    if (uv->ndim != q - 1 + nr) return ox_node_error(c, GR_ERR_SHAPE, "updates must have rank %d (indices' dims but the last, then data's dims from %d)", q - 1 + nr, k);
    gr_dim ddims[GR_MAX_DIMS], idims[GR_MAX_DIMS];
    for (int i = 0; i < r; i++) ddims[i] = dv->dims[i];
    for (int i = 0; i < q; i++) idims[i] = iv->dims[i];
    for (int i = 0; i < q - 1; i++)
        if (!gr_dx_equal(uv->dims[i], idims[i])) return ox_node_error(c, GR_ERR_SHAPE, "updates dim %d differs from indices dim %d", i, i);
    for (int i = 0; i < nr; i++)
        if (!gr_dx_equal(uv->dims[q - 1 + i], ddims[k + i])) return ox_node_error(c, GR_ERR_SHAPE, "updates dim %d differs from data dim %d", q - 1 + i, k + i);
    if (nr + 2 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "ScatterND with %d trailing dims is not supported", nr);
    gr_dim P, U, shape[GR_MAX_DIMS];
    GR_TRY(ox_dims_product(c, ddims, 0, k, &P));
    GR_TRY(ox_dims_product(c, idims, 0, q - 1, &U));
    if (!gr_dx_is_sym(U) && U.size == 0) return ox_emit1(c, GR_OP_IDENTITY, 1, &data, 0, NULL);
    int d2, u2, lin, io, ion, linu, mm, ub;
    shape[0] = P;
    for (int i = 0; i < nr; i++) shape[1 + i] = ddims[k + i];
    GR_TRY(ox_reshape_ir(c, data, shape, nr + 1, &d2));
    shape[0] = U;
    GR_TRY(ox_reshape_ir(c, upd, shape, nr + 1, &u2));
    GR_TRY(ox_nd_linear_index(c, idx, ddims, k, &lin));
    GR_TRY(ox_reshape_ir(c, lin, &U, 1, &lin));
    if (irv(c, lin)->dtype != GR_I64) {
        gr_ir_attr to = A_str("to", "i64");
        GR_TRY(ox_emit(c, GR_OP_CAST, 1, &lin, 1, &to, 1, NULL, false, &lin));
    }
    GR_TRY(ox_iota_ir(c, P, &io));
    GR_TRY(ox_unsqueeze_ir(c, io, 1, &ion));   /* [P, 1] */
    GR_TRY(ox_unsqueeze_ir(c, lin, 0, &linu)); /* [1, U] */
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, linu, ion, &mm)); /* [P, U] */
    GR_TRY(ox_unsqueeze_ir(c, u2, 0, &ub));    /* [1, U, R..] */
    int res;
    GR_TRY(scatter_combine(c, red, mm, 1, nr, U, ub, u2, 0, false, d2, false, &res));
    int64_t sv[GR_MAX_DIMS];
    int32_t se[GR_MAX_DIMS];
    gr_ir_attr ra = ox_attr_sints("shape", ddims, r, sv, se);
    return ox_emit1(c, GR_OP_RESHAPE, 1, &res, 1, &ra);
}

/* ---- data-dependent output shapes (runtime/probe.c) ------------------------------------------
 * NonZero's count and the length of a Range over run-time scalars are data-dependent
 * symbols: the importer emits the IR that computes the count (a 1-element value) and
 * makes a symbol whose run-time value it is (gr_ir_data_symbol). The session computes
 * the counts before each run (one host synchronisation) and plans the rest for them. */

/* Symbol name for a node: base_<node> with characters outside [A-Za-z0-9_.] replaced. */
static char *count_symbol_name(const char *base, const char *node) {
    char *s = gr_sprintf("%s_%s", base, node);
    for (char *p = s; p && *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.')) *p = '_';
    return s;
}

gr_status ox_data_symbol(ox_ctx *c, const char *base, int count_ir, int64_t hi, gr_dim *out) {
    if (c->g->parent)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s inside an If branch has a data-dependent output shape (not supported there: "
                                                    "the branches of a run-time If must have the same shapes)", c->node->op_type);
    char *name = count_symbol_name(base, c->node_name), *origin = gr_sprintf("%s '%s'", c->node->op_type, c->node_name);
    gr_status st = name && origin ? gr_ir_data_symbol(c->g, name, count_ir, hi, origin, out) : gr_nomem();
    gr_strfree(name);
    gr_strfree(origin);
    return st;
}

static gr_status reduce_sum_ir(ox_ctx *c, int x, int64_t axis, int *out) {
    gr_ir_attr a[2] = {A_ints("axes", &axis, 1), A_int("keepdims", 0)};
    return ox_emit(c, GR_OP_REDUCE_SUM, 1, &x, 2, a, 1, NULL, false, out);
}

static gr_status cast_ir(ox_ctx *c, int x, gr_dtype to, int *out) {
    gr_ir_attr a = A_str("to", gr_dtype_name(to));
    return ox_emit(c, GR_OP_CAST, 1, &x, 1, &a, 1, NULL, false, out);
}

/* NonZero(x) -> [rank, nnz] i64, the coordinates of the non-zero elements in row-major
 * order. With m the flattened mask (x != 0) and rank_j = sum_{i<j} m_i (an exclusive
 * prefix count as a masked sum over an [N, N] compare: O(N^2) work, fused into one
 * reduction kernel), the k-th non-zero is the j with m_j and rank_j == k, found by a
 * compare-and-select reduction over [nnz, N] (O(nnz * N)); its coordinates are
 * (j // stride_a) % d_a. Meant for the masks exporters apply it to (thousands of
 * elements); nnz = sum(m) is the data-dependent symbol. */
gr_status ox_cv_nonzero(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    int x;
    GR_TRY(ox_in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int r = xv->ndim;
    if (r < 1) return ox_node_error(c, GR_ERR_UNSUPPORTED, "NonZero of a rank-0 tensor is not supported (numpy deprecates it)");
    gr_dtype dt = xv->dtype;
    gr_dim dims[GR_MAX_DIMS], n;
    for (int i = 0; i < r; i++) dims[i] = xv->dims[i];
    GR_TRY(ox_dims_product(c, dims, 0, r, &n));
    int mb = x, flat, mi, count, zero;
    if (dt != GR_BOOL) { /* x != 0 (NaN is non-zero) */
        int eq;
        GR_TRY(ox_scalar_const_ir(c, dt, 0.0, &zero));
        GR_TRY(ox_emit2(c, GR_OP_EQUAL, x, zero, &eq));
        GR_TRY(ox_emit(c, GR_OP_NOT, 1, &eq, 0, NULL, 1, NULL, false, &mb));
    }
    GR_TRY(ox_reshape_ir(c, mb, &n, 1, &flat));
    GR_TRY(cast_ir(c, flat, GR_I64, &mi));
    GR_TRY(reduce_sum_ir(c, mi, 0, &count));
    gr_dim nnz;
    GR_TRY(ox_data_symbol(c, "nonzero", count, gr_dx_is_sym(n) ? GR_DX_INF : n.size, &nnz));
    int iota, ri, rj, lt, mrow, zero64, contrib, rank;
    GR_TRY(ox_iota_ir(c, n, &iota));
    GR_TRY(ox_unsqueeze_ir(c, iota, 1, &ri)); /* [N, 1]: i */
    GR_TRY(ox_unsqueeze_ir(c, iota, 0, &rj)); /* [1, N]: j */
    GR_TRY(ox_emit2(c, GR_OP_LESS, rj, ri, &lt));
    GR_TRY(ox_unsqueeze_ir(c, mi, 0, &mrow));
    GR_TRY(ox_scalar_const_ir(c, GR_I64, 0.0, &zero64));
    GR_TRY(ox_where_ir(c, lt, mrow, zero64, &contrib));
    GR_TRY(reduce_sum_ir(c, contrib, 1, &rank)); /* [N]: non-zeros before j */
    int kio, kc, rrow, hit, mbrow, sel, pick, idx;
    GR_TRY(ox_iota_ir(c, nnz, &kio));
    GR_TRY(ox_unsqueeze_ir(c, kio, 1, &kc));      /* [nnz, 1]: k */
    GR_TRY(ox_unsqueeze_ir(c, rank, 0, &rrow));   /* [1, N] */
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, rrow, kc, &hit));
    GR_TRY(ox_unsqueeze_ir(c, flat, 0, &mbrow));
    GR_TRY(ox_emit2(c, GR_OP_AND, hit, mbrow, &sel));
    GR_TRY(ox_where_ir(c, sel, rj, zero64, &pick));
    GR_TRY(reduce_sum_ir(c, pick, 1, &idx));      /* [nnz]: flat index of the k-th non-zero */
    int parts[GR_MAX_DIMS];
    for (int a = 0; a < r; a++) {
        gr_dim stride;
        int q = idx;
        GR_TRY(ox_dims_product(c, dims, a + 1, r, &stride));
        if (gr_dx_is_sym(stride) || stride.size != 1) {
            int sv;
            GR_TRY(ox_dim_scalar_ir(c, stride, GR_I64, &sv));
            GR_TRY(ox_emit2(c, GR_OP_DIV, q, sv, &q));
        }
        if (a > 0) {
            int dv;
            GR_TRY(ox_dim_scalar_ir(c, dims[a], GR_I64, &dv));
            GR_TRY(ox_emit2(c, GR_OP_MOD, q, dv, &q));
        }
        GR_TRY(ox_unsqueeze_ir(c, q, 0, &parts[a]));
    }
    if (r == 1) return ox_emit1(c, GR_OP_IDENTITY, 1, parts, 0, NULL);
    gr_ir_attr ca = A_int("axis", 0);
    return ox_emit1(c, GR_OP_CONCAT, r, parts, 1, &ca);
}

/* Range(start, limit, delta) on run-time scalars: the length max(ceil((limit - start) /
 * delta), 0), computed in f64 (NaN when delta is 0, which the probe refuses), is a
 * data-dependent symbol; the output is start + iota(length) * delta in the inputs' dtype.
 * The length is bounded by 2^31 - 1 elements and 4 GiB of output. */
#define OX_RANGE_MAX_ELEMS (((int64_t)1 << 31) - 1)
#define OX_RANGE_MAX_BYTES ((int64_t)1 << 32)
gr_status ox_range_runtime(ox_ctx *c) {
    static const char *names[3] = {"start", "limit", "delta"};
    int in[3], f[3];
    gr_dtype dt = GR_F32;
    for (int i = 0; i < 3; i++) {
        GR_TRY(ox_in_ir(c, i, &in[i]));
        const gr_ir_value *v = irv(c, in[i]);
        if (!v->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the type of input '%s' is not known", names[i]);
        if (gr_ir_value_numel(v) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must be a scalar", names[i]);
        if (i == 0) dt = v->dtype;
        else if (v->dtype != dt)
            return ox_node_error(c, GR_ERR_SHAPE, "inputs 'start' and '%s' have different dtypes (%s, %s)", names[i], gr_dtype_name(dt),
                                 gr_dtype_name(v->dtype));
        if (v->ndim) { /* [1] or [1, 1]: a 0-d scalar, so the arithmetic below stays 0-d */
            GR_TRY(ox_reshape_ir(c, in[i], NULL, 0, &in[i]));
        }
    }
    if (dt != GR_F32 && dt != GR_F64 && dt != GR_I32 && dt != GR_I64 && dt != GR_F16 && dt != GR_I8)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "Range of %s is not supported", gr_dtype_name(dt));
    for (int i = 0; i < 3; i++) {
        if (dt == GR_F64) f[i] = in[i];
        else GR_TRY(cast_ir(c, in[i], GR_F64, &f[i]));
    }
    int span, q, up, zero, nan, dz, len, count;
    GR_TRY(ox_emit2(c, GR_OP_SUB, f[1], f[0], &span));
    GR_TRY(ox_emit2(c, GR_OP_DIV, span, f[2], &q));
    GR_TRY(ox_emit(c, GR_OP_CEIL, 1, &q, 0, NULL, 1, NULL, false, &up));
    GR_TRY(ox_scalar_const_ir(c, GR_F64, 0.0, &zero));
    GR_TRY(ox_emit2(c, GR_OP_MAX, up, zero, &len));
    GR_TRY(ox_scalar_const_ir(c, GR_F64, NAN, &nan));
    GR_TRY(ox_emit2(c, GR_OP_EQUAL, f[2], zero, &dz));
    GR_TRY(ox_where_ir(c, dz, nan, len, &count));
    int64_t hi = OX_RANGE_MAX_BYTES / (int64_t)gr_dtype_size(dt);
    if (hi > OX_RANGE_MAX_ELEMS) hi = OX_RANGE_MAX_ELEMS;
    gr_dim length;
    GR_TRY(ox_data_symbol(c, "range", count, hi, &length));
    int iota, it, step;
    GR_TRY(ox_iota_ir(c, length, &iota));
    if (dt == GR_I64) it = iota;
    else GR_TRY(cast_ir(c, iota, dt, &it));
    GR_TRY(ox_emit2(c, GR_OP_MUL, it, in[2], &step));
    int sum[2] = {in[0], step};
    return ox_emit1(c, GR_OP_ADD, 2, sum, 0, NULL);
}
