/* passes/lower-gen — generators (fill, range, random_uniform, random_normal)
 * and matmul (a library call, or a reduction kernel for integer dtypes and
 * K = 0, where the vendor library has nothing to offer). */
#include "passes/lower-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static gr_status finish(gr_lctx *c, gr_lkb *b, gr_status st) {
    if (st != GR_OK) {
        lw_abort_kernel(b);
        return st;
    }
    return lw_emit_kernel(c, b);
}

/* ==== fill / range ============================================================================ */

gr_status lw_lower_fill(gr_lctx *c) {
    int y = lw_out(c, 0);
    gr_dtype t = lw_val(c, y)->dtype;
    int64_t yd[GR_MAX_DIMS];
    int nd = lw_shape(c, y, yd);
    const gr_ir_attr *va = gr_ir_attr_find(lw_node(c), "value");
    double value;
    GR_TRY(gr_ir_attr_float(c->g, lw_node(c), "value", 0.0, &value));
    if (gr_shape_numel(nd, yd) == 0) return GR_OK;
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, nd, yd));
    int v;
    gr_status st = (va && va->kind == GR_IR_ATTR_INT && !gr_dtype_is_float(t)) ? gr_kx_const_i(b.k, t, va->i, &v)
                                                                               : gr_kx_const_f(b.k, t, value, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    return finish(c, &b, st);
}

/* y[i] = start + i * delta: in f64 then converted for float dtypes, in i64 for integers. */
gr_status lw_lower_range(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int y = lw_out(c, 0);
    gr_dtype t = lw_val(c, y)->dtype;
    double start, delta;
    GR_TRY(gr_ir_attr_float(c->g, n, "start", 0.0, &start));
    GR_TRY(gr_ir_attr_float(c->g, n, "delta", 1.0, &delta));
    const gr_ir_attr *sa = gr_ir_attr_find(n, "start"), *da = gr_ir_attr_find(n, "delta");
    int64_t yd[GR_MAX_DIMS];
    int nd = lw_shape(c, y, yd);
    if (nd != 1) return gr_error(GR_ERR_SHAPE, "%s: range output must be 1-D, got rank %d", lw_where(c), nd);
    if (yd[0] == 0) return GR_OK;
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, 1, yd));
    gr_kernel *k = b.k;
    int i, cs, cd, v;
    gr_status st = gr_kx_index(k, 0, &i);
    if (gr_dtype_is_float(t)) {
        if (st == GR_OK) st = gr_kx_cast(k, GR_F64, i, &i);
        if (st == GR_OK) st = gr_kx_const_f(k, GR_F64, start, &cs);
        if (st == GR_OK) st = gr_kx_const_f(k, GR_F64, delta, &cd);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, GR_F64, i, cd, &v);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, GR_F64, cs, v, &v);
    } else {
        int64_t s64 = sa && sa->kind == GR_IR_ATTR_INT ? sa->i : (int64_t)start;
        int64_t d64 = da && da->kind == GR_IR_ATTR_INT ? da->i : (int64_t)delta;
        if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, s64, &cs);
        if (st == GR_OK) st = gr_kx_const_i(k, GR_I64, d64, &cd);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, GR_I64, i, cd, &v);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, GR_I64, cs, v, &v);
    }
    if (st == GR_OK) st = gr_kx_cast(k, t, v, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    return finish(c, &b, st);
}

/* ==== random ===================================================================================
 * Element i (row-major linear index of the output) is, with RANDOM(seed, n, p)
 * the generator of kir.h at counter n and precision p:
 *   random_uniform: u = RANDOM(seed, i, f64 if dtype is f64 else f32)
 *                   y = (dtype)(low + (high - low) * (double)u)          [in f64]
 *   random_normal:  u1 = RANDOM(seed, 2i, f64), u2 = RANDOM(seed, 2i+1, f64)
 *                   z = sqrt(-2 * log(1 - u1)) * cos(2*pi * u2)          [in f64]
 *                   y = (dtype)(mean + std * z)                          [in f64]
 * with pi = 3.14159265358979323846. Every backend (the CUDA renderer
 * included) must reproduce exactly this so a seed gives the same bits. */

static gr_status kx_random(gr_kernel *k, gr_dtype t, int64_t seed, int counter, int *out) {
    gr_kexpr e;
    memset(&e, 0, sizeof e);
    e.op = GR_KX_RANDOM;
    e.dtype = t;
    e.a = counter;
    e.b = e.c = -1;
    e.which = -1;
    e.param = -1;
    e.i = seed;
    gr_kaccess_init(&e.access);
    return gr_kernel_add_expr(k, &e, out);
}

static gr_status normal_expr(gr_kernel *k, int64_t seed, int lin, int *out) {
    int two, one, c1, c2, u1, u2, m2, om, lg, r, tp, ang, cs;
    GR_TRY(gr_kx_const_i(k, GR_I64, 2, &two));
    GR_TRY(gr_kx_const_i(k, GR_I64, 1, &one));
    GR_TRY(gr_kx_binary(k, GR_KB_MUL, GR_I64, lin, two, &c1));
    GR_TRY(gr_kx_binary(k, GR_KB_ADD, GR_I64, c1, one, &c2));
    GR_TRY(kx_random(k, GR_F64, seed, c1, &u1));
    GR_TRY(kx_random(k, GR_F64, seed, c2, &u2));
    GR_TRY(gr_kx_const_f(k, GR_F64, -2.0, &m2));
    GR_TRY(gr_kx_const_f(k, GR_F64, 1.0, &om));
    GR_TRY(gr_kx_binary(k, GR_KB_SUB, GR_F64, om, u1, &lg));
    GR_TRY(gr_kx_unary(k, GR_KU_LOG, GR_F64, lg, &lg));
    GR_TRY(gr_kx_binary(k, GR_KB_MUL, GR_F64, m2, lg, &r));
    GR_TRY(gr_kx_unary(k, GR_KU_SQRT, GR_F64, r, &r));
    GR_TRY(gr_kx_const_f(k, GR_F64, 2.0 * 3.14159265358979323846, &tp));
    GR_TRY(gr_kx_binary(k, GR_KB_MUL, GR_F64, tp, u2, &ang));
    GR_TRY(gr_kx_unary(k, GR_KU_COS, GR_F64, ang, &cs));
    return gr_kx_binary(k, GR_KB_MUL, GR_F64, r, cs, out);
}

gr_status lw_lower_random(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    bool normal = n->op == GR_OP_RANDOM_NORMAL;
    int y = lw_out(c, 0);
    gr_dtype t = lw_val(c, y)->dtype;
    if (!gr_dtype_is_float(t))
        return gr_error(GR_ERR_UNSUPPORTED, "%s: random values need a float dtype, got %s", lw_where(c), gr_dtype_name(t));
    int64_t seed;
    double p0, p1;
    GR_TRY(gr_ir_attr_int(c->g, n, "seed", 0, &seed));
    GR_TRY(gr_ir_attr_float(c->g, n, normal ? "mean" : "low", 0.0, &p0));
    GR_TRY(gr_ir_attr_float(c->g, n, normal ? "std" : "high", 1.0, &p1));
    int64_t yd[GR_MAX_DIMS];
    int nd = lw_shape(c, y, yd);
    if (gr_shape_numel(nd, yd) == 0) return GR_OK;
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, nd, yd));
    gr_kernel *k = b.k;
    int lin, z, c0, scale, v;
    gr_status st = gr_kx_index(k, GR_KIDX_LINEAR, &lin);
    if (st == GR_OK) {
        if (normal) {
            st = normal_expr(k, seed, lin, &z);
        } else {
            st = kx_random(k, t == GR_F64 ? GR_F64 : GR_F32, seed, lin, &z);
            if (st == GR_OK && t != GR_F64) st = gr_kx_cast(k, GR_F64, z, &z);
        }
    }
    if (st == GR_OK) st = gr_kx_const_f(k, GR_F64, p0, &c0);
    if (st == GR_OK) st = gr_kx_const_f(k, GR_F64, normal ? p1 : p1 - p0, &scale);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, GR_F64, scale, z, &v);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, GR_F64, c0, v, &v);
    if (st == GR_OK && t != GR_F64) st = gr_kx_cast(k, t, v, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    return finish(c, &b, st);
}

/* ==== matmul ======================================================================================
 * numpy matmul: a [..., M, K] (stored [..., K, M] with trans_a), b [..., K, N];
 * 1-D a is a row [1, K], 1-D b a column [K, 1] (trans ignored), the dim
 * dropped from the result. Batch dims broadcast. */

typedef struct {
    int a, b, bias, residual, y;
    int na, nb, nbo;             /* ranks of a, b, output batch */
    int64_t ad[GR_MAX_DIMS], bd[GR_MAX_DIMS], yd[GR_MAX_DIMS];
    int64_t batch_dims[GR_MAX_DIMS];
    int64_t m, n, k, batch;
    bool ta, tb;
    double alpha;
    gr_dtype t;
    gr_epilogue epilogue; /* the node's `epilogue` attribute (passes/epilogue.c) */
} mm_info;

/* Batch dims of an operand padded to the output batch rank (leading 1s). */
static void operand_batch(const int64_t *dims, int nd, int nbo, int64_t *out) {
    int nob = nd > 2 ? nd - 2 : 0;
    for (int d = 0; d < nbo; d++) out[d] = d < nbo - nob ? 1 : dims[d - (nbo - nob)];
}

static gr_status mm_analyze(gr_lctx *c, mm_info *mi) {
    const gr_ir_node *n = lw_node(c);
    memset(mi, 0, sizeof *mi);
    mi->a = lw_in(c, 0);
    mi->b = lw_in(c, 1);
    mi->bias = n->n_in > 2 ? lw_in(c, 2) : -1;
    mi->residual = n->n_in > 3 ? lw_in(c, 3) : -1;
    mi->y = lw_out(c, 0);
    int64_t ta, tb;
    GR_TRY(gr_ir_attr_int(c->g, n, "trans_a", 0, &ta));
    GR_TRY(gr_ir_attr_int(c->g, n, "trans_b", 0, &tb));
    GR_TRY(gr_ir_attr_float(c->g, n, "alpha", 1.0, &mi->alpha));
    const char *epi;
    GR_TRY(gr_ir_attr_string(c->g, n, "epilogue", "none", &epi));
    /* erf GELU is not a fusion target (cuBLASLt has only the tanh form): not accepted */
    if (!gr_epilogue_parse(epi, &mi->epilogue) || mi->epilogue == GR_EPI_GELU)
        return gr_error(GR_ERR_INVALID, "%s: epilogue must be \"none\", \"relu\" or \"gelu_tanh\", got \"%s\"", lw_where(c), epi);
    mi->na = lw_shape(c, mi->a, mi->ad);
    mi->nb = lw_shape(c, mi->b, mi->bd);
    int ny = lw_shape(c, mi->y, mi->yd);
    mi->t = lw_val(c, mi->y)->dtype;
    if (mi->epilogue == GR_EPI_GELU_TANH && !gr_dtype_is_float(mi->t))
        return gr_error(GR_ERR_INVALID, "%s: epilogue gelu_tanh needs a float matmul, not %s", lw_where(c), gr_dtype_name(mi->t));
    if (mi->na < 1 || mi->nb < 1) return gr_error(GR_ERR_SHAPE, "%s: matmul operands need at least 1 dim", lw_where(c));
    if (lw_val(c, mi->a)->dtype != mi->t || lw_val(c, mi->b)->dtype != mi->t)
        return gr_error(GR_ERR_SHAPE, "%s: operand dtypes differ from the output's", lw_where(c));
    mi->ta = mi->na > 1 && ta;
    mi->tb = mi->nb > 1 && tb;
    int64_t ka;
    if (mi->na == 1) mi->m = 1, ka = mi->ad[0];
    else if (mi->ta) mi->m = mi->ad[mi->na - 1], ka = mi->ad[mi->na - 2];
    else mi->m = mi->ad[mi->na - 2], ka = mi->ad[mi->na - 1];
    if (mi->nb == 1) mi->n = 1, mi->k = mi->bd[0];
    else if (mi->tb) mi->n = mi->bd[mi->nb - 2], mi->k = mi->bd[mi->nb - 1];
    else mi->n = mi->bd[mi->nb - 1], mi->k = mi->bd[mi->nb - 2];
    if (ka != mi->k)
        return gr_error(GR_ERR_SHAPE, "%s: inner dims differ (%lld vs %lld)", lw_where(c), (long long)ka, (long long)mi->k);
    int nab = mi->na > 2 ? mi->na - 2 : 0, nbb = mi->nb > 2 ? mi->nb - 2 : 0;
    mi->nbo = GR_MAX(nab, nbb);
    int64_t pa[GR_MAX_DIMS], pb[GR_MAX_DIMS];
    operand_batch(mi->ad, mi->na, mi->nbo, pa);
    operand_batch(mi->bd, mi->nb, mi->nbo, pb);
    mi->batch = 1;
    for (int d = 0; d < mi->nbo; d++) {
        if (pa[d] != pb[d] && pa[d] != 1 && pb[d] != 1)
            return gr_error(GR_ERR_SHAPE, "%s: batch dim %d does not broadcast (%lld vs %lld)", lw_where(c), d,
                            (long long)pa[d], (long long)pb[d]);
        mi->batch_dims[d] = pa[d] == 1 ? pb[d] : pa[d];
        mi->batch *= mi->batch_dims[d];
    }
    int want = mi->nbo + (mi->na > 1) + (mi->nb > 1);
    int64_t wd[GR_MAX_DIMS];
    memcpy(wd, mi->batch_dims, sizeof wd);
    if (mi->na > 1) wd[mi->nbo] = mi->m;
    if (mi->nb > 1) wd[want - 1] = mi->n;
    if (ny != want) return gr_error(GR_ERR_SHAPE, "%s: output rank %d, expected %d", lw_where(c), ny, want);
    for (int d = 0; d < ny; d++)
        if (wd[d] != mi->yd[d]) return gr_error(GR_ERR_SHAPE, "%s: output dim %d is %lld, expected %lld", lw_where(c), d,
                                                (long long)mi->yd[d], (long long)wd[d]);
    if (mi->bias >= 0) {
        const gr_ir_value *bv = lw_val(c, mi->bias);
        if (bv->ndim > ny) return gr_error(GR_ERR_SHAPE, "%s: bias has more dims than the output", lw_where(c));
        for (int d = 0; d < bv->ndim; d++) {
            int64_t s = bv->dims[d].size, o = mi->yd[d + ny - bv->ndim];
            if (s != 1 && s != o) return gr_error(GR_ERR_SHAPE, "%s: bias does not broadcast to the output", lw_where(c));
        }
    }
    if (mi->residual >= 0) {
        /* ops.c: exactly the output's shape and dtype, beside no bias or a row bias */
        int64_t rd[GR_MAX_DIMS];
        int nr = lw_shape(c, mi->residual, rd);
        bool same = nr == ny && lw_val(c, mi->residual)->dtype == mi->t;
        for (int d = 0; same && d < ny; d++) same = rd[d] == mi->yd[d];
        if (!same) return gr_error(GR_ERR_SHAPE, "%s: the residual is not of the output's shape and dtype", lw_where(c));
    }
    return GR_OK;
}

/* Fallback: outer = batch..., M, N; inner = K; REDUCE SUM a*b; y = alpha*acc + bias. */
static gr_status mm_kernel(gr_lctx *c, const mm_info *mi) {
    int64_t full[GR_MAX_DIMS + 2];
    int nf = mi->nbo + 2;
    memcpy(full, mi->batch_dims, sizeof(int64_t) * (size_t)mi->nbo);
    full[mi->nbo] = mi->m;
    full[mi->nbo + 1] = mi->n;
    int64_t ars[GR_MAX_DIMS], brs[GR_MAX_DIMS], ab[GR_MAX_DIMS], bb[GR_MAX_DIMS];
    lw_rowmajor(mi->na, mi->ad, ars);
    lw_rowmajor(mi->nb, mi->bd, brs);
    operand_batch(mi->ad, mi->na, mi->nbo, ab);
    operand_batch(mi->bd, mi->nb, mi->nbo, bb);
    gr_kaccess aa, ba, ya;
    gr_kaccess_init(&aa);
    gr_kaccess_init(&ba);
    gr_kaccess_init(&ya);
    for (int d = 0; d < mi->nbo; d++) {
        int sa = d - (mi->nbo - (mi->na - 2)), sb = d - (mi->nbo - (mi->nb - 2));
        aa.stride[d] = (ab[d] == 1 || sa < 0) ? 0 : ars[sa];
        ba.stride[d] = (bb[d] == 1 || sb < 0) ? 0 : brs[sb];
    }
    if (mi->na == 1) aa.inner_stride[0] = 1;
    else if (mi->ta) aa.stride[mi->nbo] = 1, aa.inner_stride[0] = ars[mi->na - 2];
    else aa.stride[mi->nbo] = ars[mi->na - 2], aa.inner_stride[0] = 1;
    if (mi->nb == 1) ba.inner_stride[0] = 1;
    else if (mi->tb) ba.stride[mi->nbo + 1] = brs[mi->nb - 2], ba.inner_stride[0] = 1;
    else ba.stride[mi->nbo + 1] = 1, ba.inner_stride[0] = brs[mi->nb - 2];
    lw_rowmajor(nf, full, ya.stride);
    gr_dtype at = lw_acc_dtype(mi->t);
    if (gr_dtype_is_int(mi->t) || mi->t == GR_BOOL) at = GR_I64;

    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, nf, full));
    gr_kernel *k = b.k;
    k->n_inner = 1;
    k->inner[0] = mi->k;
    /* the contraction length symbolic in the model: a row length of every binding (kir.h) */
    int ka = mi->na == 1 ? 0 : mi->ta ? mi->na - 2 : mi->na - 1, kb = mi->nb == 1 ? 0 : mi->tb ? mi->nb - 1 : mi->nb - 2;
    k->var_inner = ((lw_val(c, mi->a)->var_dims >> ka) | (lw_val(c, mi->b)->var_dims >> kb)) & 1u;
    int x, w, p, acc, ca, bi;
    gr_status st = lw_load(c, &b, mi->a, &aa, &x);
    if (st == GR_OK && at != mi->t) st = gr_kx_cast(k, at, x, &x);
    if (st == GR_OK) st = lw_load(c, &b, mi->b, &ba, &w);
    if (st == GR_OK && at != mi->t) st = gr_kx_cast(k, at, w, &w);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, at, x, w, &p);
    if (st == GR_OK) {
        gr_kstage s;
        memset(&s, 0, sizeof s);
        s.kind = GR_KS_REDUCE;
        s.reduce = GR_KR_SUM;
        s.value = p;
        s.param = -1;
        gr_kaccess_init(&s.access);
        st = gr_kernel_add_stage(k, &s);
    }
    if (st == GR_OK) st = gr_kx_acc(k, 0, at, &acc);
    if (st == GR_OK && mi->alpha != 1.0) {
        st = lw_const(k, at, mi->alpha, &ca);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, at, ca, acc, &acc);
    }
    /* bias, then the residual: each broadcast to the output shape, its strides spread onto
     * (batch..., M, N) */
    const int added[2] = {mi->bias, mi->residual};
    for (int t = 0; t < 2 && st == GR_OK; t++) {
        if (added[t] < 0) continue;
        int ny = mi->nbo + (mi->na > 1) + (mi->nb > 1);
        int64_t ys[GR_MAX_DIMS];
        lw_bcast_strides(c, added[t], ny, mi->yd, 0, ys);
        gr_kaccess bacc;
        gr_kaccess_init(&bacc);
        for (int d = 0; d < mi->nbo; d++) bacc.stride[d] = ys[d];
        if (mi->na > 1) bacc.stride[mi->nbo] = ys[mi->nbo];
        if (mi->nb > 1) bacc.stride[mi->nbo + 1] = ys[ny - 1];
        st = lw_load(c, &b, added[t], &bacc, &bi);
        if (st == GR_OK && lw_val(c, added[t])->dtype != at) st = gr_kx_cast(k, at, bi, &bi);
        if (st == GR_OK) st = gr_kx_binary(k, GR_KB_ADD, at, acc, bi, &acc);
    }
    /* the epilogue in the accumulation dtype, before the one rounding, as the library call's */
    if (st == GR_OK && mi->epilogue != GR_EPI_NONE)
        st = gr_kx_unary(k, mi->epilogue == GR_EPI_RELU ? GR_KU_RELU : GR_KU_GELU_TANH, at, acc, &acc);
    if (st == GR_OK && at != mi->t) st = gr_kx_cast(k, mi->t, acc, &acc);
    if (st == GR_OK) st = lw_store(c, &b, mi->y, acc, &ya, false);
    return finish(c, &b, st);
}

/* Batch stride of an operand, or -1 when one stride cannot express its broadcast. */
static int64_t batch_stride(const int64_t *dims, int nd, const mm_info *mi, int64_t mat) {
    int64_t pb[GR_MAX_DIMS];
    operand_batch(dims, nd, mi->nbo, pb);
    if (gr_shape_numel(mi->nbo, pb) == 1) return 0;
    for (int d = 0; d < mi->nbo; d++)
        if (pb[d] != mi->batch_dims[d]) return -1;
    return mat;
}

/* Copies an operand to the full output batch shape (its last two dims kept). */
static gr_status mm_expand_operand(gr_lctx *c, const mm_info *mi, int v, const int64_t *dims, int nd, int *out) {
    int64_t td[GR_MAX_DIMS];
    memcpy(td, mi->batch_dims, sizeof(int64_t) * (size_t)mi->nbo);
    td[mi->nbo] = dims[nd - 2];
    td[mi->nbo + 1] = dims[nd - 1];
    return lw_materialize(c, v, mi->t, mi->nbo + 2, td, out);
}

gr_status lw_lower_matmul(gr_lctx *c) {
    mm_info mi;
    GR_TRY(mm_analyze(c, &mi));
    if (lw_numel(c, mi.y) == 0) return GR_OK;
    if (!gr_dtype_is_float(mi.t) || mi.k == 0) return mm_kernel(c, &mi);
    /* shape policy generic: a product of two activations (attention's scores and values) has the
     * symbol in its n or k, which a captured library call cannot take from the slot table */
    if (c->activation_matmul_kernels && c->g->values.data[mi.a].kind != GR_VAL_CONST &&
        c->g->values.data[mi.b].kind != GR_VAL_CONST)
        return mm_kernel(c, &mi);

    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.node = c->node;
    s.out_value = -1;
    s.n_args = GR_LIB_MATMUL_NARGS;
    gr_libcall *call = &s.call;
    call->kind = GR_LIB_MATMUL;
    call->dtype = mi.t;
    call->m = mi.m;
    call->n = mi.n;
    call->k = mi.k;
    call->batch = mi.batch;
    call->trans_a = mi.ta;
    call->trans_b = mi.tb;
    call->lda = mi.ta ? mi.m : mi.k;
    call->ldb = mi.tb ? mi.k : mi.n;
    call->ldc = mi.n;
    call->alpha = mi.alpha;
    call->epilogue = mi.epilogue;
    snprintf(call->name, sizeof call->name, "k%d_matmul", c->node);

    int a = mi.a, b = mi.b;
    int64_t sa = batch_stride(mi.ad, mi.na, &mi, mi.m * mi.k);
    if (sa < 0) {
        GR_TRY(mm_expand_operand(c, &mi, mi.a, mi.ad, mi.na, &a));
        sa = mi.m * mi.k;
    }
    int64_t sb = batch_stride(mi.bd, mi.nb, &mi, mi.k * mi.n);
    if (sb < 0) {
        GR_TRY(mm_expand_operand(c, &mi, mi.b, mi.bd, mi.nb, &b));
        sb = mi.k * mi.n;
    }
    call->batch_stride_a = sa;
    call->batch_stride_b = sb;
    call->batch_stride_c = mi.m * mi.n;
    /* A weight shared by every batch (a Linear over [batch, seq, in]) with A and C contiguous
     * across the batches: one GEMM of batch*m rows, as Inductor's mm over the flattened view
     * (the library tiles all rows at once instead of each batch's m rows; same products and
     * sums per element). A FULL bias and a residual have C's layout, a ROW bias no batch stride. */
    if (call->batch > 1 && sb == 0 && !mi.ta && sa == mi.m * mi.k) {
        call->m = mi.m * mi.batch;
        call->batch = 1;
        call->batch_stride_a = call->batch_stride_c = 0;
    }

    s.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = a};
    s.args[1] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = b};
    s.args[2] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = mi.y};
    s.args[3] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    s.args[4] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    if (mi.residual >= 0) {
        call->residual = true; /* C's layout: the output's shape, dense (mm_analyze) */
        s.args[4] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = mi.residual};
    }
    call->bias = GR_BIAS_NONE;
    if (mi.bias >= 0) {
        const gr_ir_value *bv = lw_val(c, mi.bias);
        int ny = lw_val(c, mi.y)->ndim;
        bool row = bv->dtype == mi.t && mi.nb > 1;
        for (int d = 0; row && d < bv->ndim; d++) {
            int64_t sz = bv->dims[d].size;
            if (d < bv->ndim - 1 ? sz != 1 : sz != mi.n) row = false;
        }
        if (bv->ndim == 0 && mi.n != 1) row = false;
        int bias = mi.bias;
        if (row) {
            call->bias = GR_BIAS_ROW;
            call->batch_stride_bias = 0;
        } else {
            /* FULL: a tensor of the output's layout, one [M, N] block per batch; it takes
             * cuBLASLt's C, so beside a residual (a 1-D b's bias) the generated kernel adds both */
            if (mi.residual >= 0) return mm_kernel(c, &mi);
            bool same = bv->dtype == mi.t && gr_ir_value_numel(bv) == lw_numel(c, mi.y);
            if (!same) GR_TRY(lw_materialize(c, mi.bias, mi.t, ny, mi.yd, &bias));
            call->bias = GR_BIAS_FULL;
            call->batch_stride_bias = mi.m * mi.n;
        }
        s.args[3] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = bias};
    }
    if (gr_vec_push(c->out, s) != GR_OK) return gr_nomem();
    return GR_OK;
}

/* ==== attention ==============================================================================
 * One library call; the mask is read through broadcast strides, cast first when its dtype is
 * neither q's nor f32 (the two the device kernels read).
 *
 * Operand views: each of q, k, v and out is a contiguous value laid out [B,H,S,D] or
 * [B,S,H,D] (the node's `layout`, ops.c), which gives its batch, head and seq strides. An
 * input is read in place further up when it is, through views (reshape, squeeze, unsqueeze,
 * identity: ALIAS steps), a split or a step-1 slice of the last axis of a value X whose rows
 * are its rows (one row per (b, s) in [B,S,H,D], per (b, h, s) in [B,H,S,D]): the call
 * reads X at the slice's first column (the step argument's elem_offset) with X's row length
 * as the row stride. The split's copy kernel is then unread, and dead-step elimination
 * removes it (GPT-2's q/k/v split of the fused c_attn output). Sizes are this binding's,
 * so a symbolic model gets its strides per binding. Memory planning needs nothing more: the
 * call's args name the values it reads (X keeps its buffer live up to the call), and it
 * writes only args[2]. */

typedef struct {
    int value;         /* bound value */
    int64_t offset;    /* elements from its start */
    int64_t stride[3]; /* batch, head, seq */
} at_view;

static bool is_view_op(gr_op op) {
    return op == GR_OP_RESHAPE || op == GR_OP_SQUEEZE || op == GR_OP_UNSQUEEZE || op == GR_OP_IDENTITY;
}

static const gr_ir_node *producer_node(const gr_lctx *c, int v) {
    const gr_ir_value *x = lw_val(c, v);
    if (x->kind != GR_VAL_NODE || x->producer < 0 || x->producer >= c->g->nodes.len) return NULL;
    return &c->g->nodes.data[x->producer];
}

/* v is a split or step-1 slice of the last axis of X (same leading dims and dtype): X and
 * the first column taken in *src, *col. */
static bool last_axis_slice(const gr_lctx *c, int v, int *src, int64_t *col) {
    const gr_ir_node *p = producer_node(c, v);
    if (!p || p->n_in < 1 || p->in[0] < 0) return false;
    int x = p->in[0];
    const gr_ir_value *xv = lw_val(c, x), *vv = lw_val(c, v);
    if (xv->dtype != vv->dtype || xv->placement != vv->placement || xv->ndim != vv->ndim || xv->ndim < 1) return false;
    int nd = xv->ndim;
    int64_t xd[GR_MAX_DIMS], vd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    lw_shape(c, v, vd);
    for (int d = 0; d < nd - 1; d++)
        if (xd[d] != vd[d]) return false;
    if (p->op == GR_OP_SPLIT) {
        int64_t axis;
        if (gr_ir_attr_int(c->g, p, "axis", 0, &axis) != GR_OK) return gr_error_clear(), false;
        if (axis != nd - 1 && axis != -1) return false;
        int64_t at = 0;
        for (int j = 0; j < p->n_out; j++) {
            if (p->out[j] == v) {
                *src = x, *col = at;
                return at + vd[nd - 1] <= xd[nd - 1];
            }
            if (p->out[j] < 0) return false;
            at += lw_val(c, p->out[j])->dims[nd - 1].size;
        }
        return false;
    }
    if (p->op != GR_OP_SLICE) return false;
    const int64_t *starts, *ends, *axes, *steps;
    int ns, ne, na, nst;
    if (gr_ir_attr_ints(c->g, p, "starts", &starts, &ns) != GR_OK || gr_ir_attr_ints(c->g, p, "ends", &ends, &ne) != GR_OK ||
        gr_ir_attr_ints(c->g, p, "axes", &axes, &na) != GR_OK || gr_ir_attr_ints(c->g, p, "steps", &steps, &nst) != GR_OK)
        return gr_error_clear(), false;
    if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns)) return false;
    bool found = false;
    for (int i = 0; i < ns; i++) {
        int64_t a = na >= 0 ? axes[i] : i;
        if (a < 0) a += nd;
        int64_t first, count;
        if (nst >= 0 && steps[i] != 1) return false;
        if (a != nd - 1 || found || !gr_ir_slice_axis(xd[nd - 1], starts[i], ends[i], 1, &first, &count)) return false;
        if (count != vd[nd - 1] || first + count > xd[nd - 1]) return false;
        found = true;
        *col = first;
    }
    *src = x;
    return found;
}

/* The view the call reads operand value v (laid out per `layout`) through; inputs only look
 * further up (look_through): the output is written where it is. */
static void operand_view(const gr_lctx *c, int v, int layout, bool look_through, at_view *out) {
    int64_t d[GR_MAX_DIMS];
    lw_shape(c, v, d); /* [B,H,S,D] or [B,S,H,D] */
    int64_t heads = d[gr_ir_attention_heads_axis(layout)], seq = d[gr_ir_attention_seq_axis(layout)], dim = d[3];
    /* rows: of heads*dim elements per (b, s), or of dim per (b, h, s) */
    int64_t row = layout ? heads * dim : dim, row_stride = row;
    out->value = v;
    out->offset = 0;
    int w = v;
    while (look_through) {
        const gr_ir_node *p = producer_node(c, w);
        if (!p || !is_view_op(p->op) || p->n_in < 1 || p->in[0] < 0 || lw_val(c, p->in[0])->dtype != lw_val(c, w)->dtype) break;
        w = p->in[0];
    }
    const gr_ir_value *wv = lw_val(c, w);
    int src;
    int64_t col;
    if (look_through && wv->ndim >= 1 && wv->dims[wv->ndim - 1].size == row && last_axis_slice(c, w, &src, &col)) {
        int64_t sd[GR_MAX_DIMS];
        int ns = lw_shape(c, src, sd);
        out->value = src;
        out->offset = col;
        row_stride = sd[ns - 1];
    }
    if (layout) {
        out->stride[0] = seq * row_stride;
        out->stride[1] = dim;
        out->stride[2] = row_stride;
    } else {
        out->stride[0] = heads * seq * row_stride;
        out->stride[1] = seq * row_stride;
        out->stride[2] = row_stride;
    }
}

gr_status lw_lower_attention(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int q = lw_in(c, 0), k = lw_in(c, 1), v = lw_in(c, 2), m = n->n_in > 3 ? lw_in(c, 3) : -1, y = lw_out(c, 0);
    int kl = n->n_in > 4 ? lw_in(c, 4) : -1;
    const gr_ir_value *qv = lw_val(c, q), *kv = lw_val(c, k), *vv = lw_val(c, v);
    double scale;
    int64_t causal;
    int layout[4];
    GR_TRY(gr_ir_attr_float(c->g, n, "scale", 1.0, &scale));
    GR_TRY(gr_ir_attr_int(c->g, n, "causal", 0, &causal));
    GR_TRY(gr_ir_attention_layout(c->g, n, layout));
    if (lw_numel(c, y) == 0) return GR_OK;
    if (qv->ndim != 4 || kv->ndim != 4 || vv->ndim != 4 || lw_val(c, y)->ndim != 4)
        return gr_error(GR_ERR_SHAPE, "%s: attention operands must be 4-d", lw_where(c));
    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.node = c->node;
    s.out_value = -1;
    s.n_args = GR_LIB_ATTENTION_NARGS;
    gr_libcall *call = &s.call;
    call->kind = GR_LIB_ATTENTION;
    call->dtype = qv->dtype;
    call->batch = qv->dims[0].size;
    call->heads = qv->dims[gr_ir_attention_heads_axis(layout[0])].size;
    call->seq_q = qv->dims[gr_ir_attention_seq_axis(layout[0])].size;
    call->head_dim = qv->dims[3].size;
    call->kv_heads = kv->dims[gr_ir_attention_heads_axis(layout[1])].size;
    call->seq_k = kv->dims[gr_ir_attention_seq_axis(layout[1])].size;
    call->head_dim_v = vv->dims[3].size;
    call->alpha = scale;
    call->causal = causal != 0;
    snprintf(call->name, sizeof call->name, "k%d_attention", c->node);
    gr_libcall_attention_dense(call);
    at_view views[4];
    const int vals[4] = {q, k, v, y};
    int64_t *strides[4] = {call->q_stride, call->k_stride, call->v_stride, call->o_stride};
    static const int slot[4] = {0, 1, 3, 2}; /* args: [0]=Q [1]=K [2]=O [3]=V */
    for (int i = 0; i < 4; i++) {
        operand_view(c, vals[i], layout[i], i < 3, &views[i]);
        memcpy(strides[i], views[i].stride, sizeof views[i].stride);
        s.args[slot[i]] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = views[i].value, .elem_offset = views[i].offset};
    }
    s.args[4] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    if (m >= 0) {
        const gr_ir_value *mv = lw_val(c, m);
        if (mv->dtype != qv->dtype && mv->dtype != GR_F32) {
            int64_t md[GR_MAX_DIMS];
            for (int i = 0; i < mv->ndim; i++) md[i] = mv->dims[i].size;
            GR_TRY(lw_materialize(c, m, GR_F32, mv->ndim, md, &m));
            mv = lw_val(c, m);
        }
        int64_t full[4] = {call->batch, call->heads, call->seq_q, call->seq_k};
        lw_bcast_strides(c, m, 4, full, 0, call->mask_stride); /* per binding, like a matmul bias */
        call->has_mask = true;
        call->mask_dtype = mv->dtype;
        s.args[4] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = m};
    }
    if (kl >= 0) { /* the number of visible keys, read by the device at run time */
        call->key_len_arg = true;
        s.args[GR_LIB_ATTENTION_KEY_LEN] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = kl};
        s.n_args = gr_libcall_nargs(call);
    }
    if (gr_vec_push(c->out, s) != GR_OK) return gr_nomem();
    return GR_OK;
}
