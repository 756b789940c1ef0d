/* passes/lower-window — conv, conv_transpose, max_pool, avg_pool, pad, resize.
 *
 * Window ops are one direct kernel each: one outer point per output element
 * ([N, group, C_out/group, out...] for convolutions, [N, C, out...] for
 * pools), and the reduction over the window ([C_in/group, kernel...] or
 * [kernel...]) as the inner space. The input position of a tap is
 *   p = o*stride + k*dilation - pad_begin              (conv, pools)
 *   p = (o + pad_begin - k*dilation) / stride          (conv_transpose, when
 *       that division is exact)
 * and a tap outside [0, in) reads 0 (conv, avg_pool) or -inf (max_pool)
 * through a select. The load itself always reads a clamped position, through
 * the access's gather index (the spatial offset), because kernel IR evaluates
 * every node of a select (the CUDA code is straight-line): a padding tap must
 * still read inside the buffer. Channels and batch stay plain strides.
 *
 * Group-1 convolutions with long reductions go to the matmul library instead
 * (im2col + matmul, below lower_window).
 *
 * pad and resize are elementwise kernels over the output with one gathered
 * load per tap (resize linear: 2 taps per resized dim). */
#include "passes/lower-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { WK_CONV = 0, WK_CONVT, WK_MAX, WK_AVG } wkind;

static gr_status i64c(gr_kernel *k, int64_t v, int *out) { return gr_kx_const_i(k, GR_I64, v, out); }
static gr_status bin(gr_kernel *k, gr_kbinary fn, gr_dtype t, int a, int b, int *out) { return gr_kx_binary(k, fn, t, a, b, out); }

/* clamp(v, 0, hi) on i64 nodes */
static gr_status clamp0(gr_kernel *k, int v, int64_t hi, int *out) {
    int z, h;
    GR_TRY(i64c(k, 0, &z));
    GR_TRY(i64c(k, hi, &h));
    GR_TRY(bin(k, GR_KB_MAX, GR_I64, v, z, out));
    return bin(k, GR_KB_MIN, GR_I64, *out, h, out);
}

/* lo <= v < hi as a bool node */
static gr_status in_range(gr_kernel *k, int v, int64_t lo, int64_t hi, int *out) {
    int l, h, a, b;
    GR_TRY(i64c(k, lo, &l));
    GR_TRY(i64c(k, hi, &h));
    GR_TRY(bin(k, GR_KB_GE, GR_BOOL, v, l, &a));
    GR_TRY(bin(k, GR_KB_LT, GR_BOOL, v, h, &b));
    return bin(k, GR_KB_AND, GR_BOOL, a, b, out);
}

static gr_status and_into(gr_kernel *k, int *acc, int v) {
    if (*acc < 0) return *acc = v, GR_OK;
    return bin(k, GR_KB_AND, GR_BOOL, *acc, v, acc);
}

static gr_status add_reduce(gr_kernel *k, gr_kreduce fn, int value, gr_dtype t, int *acc_node) {
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

/* ==== window kernels ====================================================================== */

static gr_status window_body(gr_lctx *c, gr_lkb *b, wkind kind, const gr_ir_window *w, int sp0, int in0) {
    gr_kernel *k = b->k;
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int ns = w->n_spatial;
    int64_t xd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    gr_dtype xt = lw_val(c, x)->dtype, t = lw_acc_dtype(xt);
    int64_t sp_stride[GR_MAX_DIMS], sp = 1;
    lw_rowmajor(ns, w->in, sp_stride);
    for (int d = 0; d < ns; d++) sp *= w->in[d];
    int64_t kp = 1, k_stride[GR_MAX_DIMS];
    lw_rowmajor(ns, w->kernel, k_stride);
    for (int d = 0; d < ns; d++) kp *= w->kernel[d];

    /* tap positions, validity and the clamped linear spatial index */
    int valid = -1, count_ok = -1, lin = -1;
    for (int d = 0; d < ns; d++) {
        int o, r, p, tmp, cst;
        GR_TRY(gr_kx_index(k, sp0 + d, &o));
        GR_TRY(gr_kx_index(k, GR_KIDX_INNER + in0 + d, &r));
        if (kind == WK_CONVT) { /* t = o + pb - k*dil; exact multiple of stride, p = t / stride */
            GR_TRY(i64c(k, w->dil[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, r, cst, &tmp));
            GR_TRY(i64c(k, w->pad_begin[d], &cst));
            GR_TRY(bin(k, GR_KB_ADD, GR_I64, o, cst, &p));
            GR_TRY(bin(k, GR_KB_SUB, GR_I64, p, tmp, &p));
            int nonneg, z;
            GR_TRY(i64c(k, 0, &z));
            GR_TRY(bin(k, GR_KB_GE, GR_BOOL, p, z, &nonneg));
            GR_TRY(and_into(k, &valid, nonneg));
            if (w->stride[d] > 1) {
                int m, ex;
                GR_TRY(i64c(k, w->stride[d], &cst));
                GR_TRY(bin(k, GR_KB_MOD, GR_I64, p, cst, &m));
                GR_TRY(bin(k, GR_KB_EQ, GR_BOOL, m, z, &ex));
                GR_TRY(and_into(k, &valid, ex));
                GR_TRY(bin(k, GR_KB_DIV, GR_I64, p, cst, &p));
            }
        } else { /* padded position q = o*stride + k*dil; p = q - pb */
            int q;
            GR_TRY(i64c(k, w->stride[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, o, cst, &q));
            GR_TRY(i64c(k, w->dil[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, r, cst, &tmp));
            GR_TRY(bin(k, GR_KB_ADD, GR_I64, q, tmp, &q));
            if (kind == WK_AVG) { /* count_include_pad counts taps inside the explicitly padded input */
                int inpad, lim;
                GR_TRY(i64c(k, w->in[d] + w->pad_begin[d] + w->pad_end[d], &lim));
                GR_TRY(bin(k, GR_KB_LT, GR_BOOL, q, lim, &inpad));
                GR_TRY(and_into(k, &count_ok, inpad));
            }
            GR_TRY(i64c(k, w->pad_begin[d], &cst));
            GR_TRY(bin(k, GR_KB_SUB, GR_I64, q, cst, &p));
        }
        int ok, cl;
        GR_TRY(in_range(k, p, 0, w->in[d], &ok));
        GR_TRY(and_into(k, &valid, ok));
        GR_TRY(clamp0(k, p, w->in[d] - 1, &cl));
        if (sp_stride[d] != 1) {
            GR_TRY(i64c(k, sp_stride[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, cl, cst, &cl));
        }
        if (lin < 0) lin = cl;
        else GR_TRY(bin(k, GR_KB_ADD, GR_I64, lin, cl, &lin));
    }

    /* x: [N, C, spatial]; conv reads channel g*C_in/group + ci */
    gr_kaccess xa;
    gr_kaccess_init(&xa);
    xa.stride[0] = xd[1] * sp;
    if (kind == WK_CONV || kind == WK_CONVT) {
        int64_t cin_g = xd[1] / w->group;
        xa.stride[1] = cin_g * sp;
        xa.inner_stride[0] = sp;
    } else {
        xa.stride[1] = sp;
    }
    xa.index = lin;
    xa.index_stride = 1;
    xa.index_extent = sp;
    int xl, zero, v;
    GR_TRY(lw_load(c, b, x, &xa, &xl));
    if (t != xt) GR_TRY(gr_kx_cast(k, t, xl, &xl));

    if (kind == WK_CONV || kind == WK_CONVT) {
        int wv = lw_in(c, 1), bias = n->n_in > 2 ? lw_in(c, 2) : -1;
        int64_t wd[GR_MAX_DIMS];
        lw_shape(c, wv, wd);
        int64_t cin_g = xd[1] / w->group;
        int64_t cout_g = kind == WK_CONV ? wd[0] / w->group : wd[1];
        gr_kaccess wa;
        gr_kaccess_init(&wa);
        if (kind == WK_CONV) { /* [C_out, C_in/group, kernel...] */
            wa.stride[1] = cout_g * cin_g * kp;
            wa.stride[2] = cin_g * kp;
            wa.inner_stride[0] = kp;
        } else { /* [C_in, C_out/group, kernel...] */
            wa.stride[1] = cin_g * cout_g * kp;
            wa.stride[2] = kp;
            wa.inner_stride[0] = cout_g * kp;
        }
        for (int d = 0; d < ns; d++) wa.inner_stride[1 + d] = k_stride[d];
        int wl, prod, acc;
        GR_TRY(lw_load(c, b, wv, &wa, &wl));
        if (t != xt) GR_TRY(gr_kx_cast(k, t, wl, &wl));
        GR_TRY(gr_kx_const_f(k, t, 0.0, &zero));
        GR_TRY(gr_kx_select(k, t, valid, xl, zero, &xl));
        GR_TRY(bin(k, GR_KB_MUL, t, xl, wl, &prod));
        GR_TRY(add_reduce(k, GR_KR_SUM, prod, t, &acc));
        v = acc;
        if (bias >= 0) {
            gr_kaccess ba;
            gr_kaccess_init(&ba);
            ba.stride[1] = cout_g;
            ba.stride[2] = 1;
            int bl;
            GR_TRY(lw_load(c, b, bias, &ba, &bl));
            if (t != xt) GR_TRY(gr_kx_cast(k, t, bl, &bl));
            GR_TRY(bin(k, GR_KB_ADD, t, v, bl, &v));
        }
    } else if (kind == WK_MAX) {
        int ninf; /* integers: an all-padding window (none in valid ONNX) gives the type's minimum */
        if (gr_dtype_is_float(t)) GR_TRY(gr_kx_const_f(k, t, -INFINITY, &ninf));
        else GR_TRY(gr_kx_const_i(k, t, xt == GR_U8 ? 0 : xt == GR_I8 ? -128 : xt == GR_I32 ? INT32_MIN : INT64_MIN, &ninf));
        GR_TRY(gr_kx_select(k, t, valid, xl, ninf, &xl));
        GR_TRY(add_reduce(k, GR_KR_MAX, xl, t, &v));
    } else {
        int64_t cip;
        GR_TRY(gr_ir_attr_int(c->g, n, "count_include_pad", 0, &cip));
        int one, s, cnt, cnt_sel;
        GR_TRY(gr_kx_const_f(k, t, 0.0, &zero));
        GR_TRY(gr_kx_const_f(k, t, 1.0, &one));
        GR_TRY(gr_kx_select(k, t, valid, xl, zero, &xl));
        GR_TRY(add_reduce(k, GR_KR_SUM, xl, t, &s));
        GR_TRY(gr_kx_select(k, t, cip ? count_ok : valid, one, zero, &cnt_sel));
        GR_TRY(add_reduce(k, GR_KR_SUM, cnt_sel, t, &cnt));
        GR_TRY(bin(k, GR_KB_DIV, t, s, cnt, &v));
    }
    if (t != xt) GR_TRY(gr_kx_cast(k, xt, v, &v));
    return lw_store_contig(c, b, y, v);
}

/* ==== small windows, unrolled =================================================================
 * A window of at most WIN_UNROLL_MAX taps (C_in/group x kernel: a 3x3 pool or depthwise conv)
 * is an elementwise kernel with every tap written out, one thread per output element on CUDA,
 * instead of a block per output element reducing a handful of values. The arithmetic is the
 * same per tap (validity, clamped position, select), in tap order; validity is separable, so
 * avg_pool's count is the product over dims of each dim's valid taps. */
#define WIN_UNROLL_MAX 16

typedef struct {
    int valid[GR_MAX_DIMS][WIN_UNROLL_MAX]; /* bool node: tap k of dim d inside x */
    int term[GR_MAX_DIMS][WIN_UNROLL_MAX];  /* i64 node: clamped position * spatial stride */
    int padded[GR_MAX_DIMS][WIN_UNROLL_MAX];/* bool node: inside the explicitly padded x (avg_pool) */
} unroll_dims;

static gr_status unroll_dim(gr_kernel *k, wkind kind, const gr_ir_window *w, int d, int o, int64_t sp_stride, unroll_dims *u) {
    int base, cst;
    if (kind == WK_CONVT) { /* t = o + pb - k*dil */
        GR_TRY(i64c(k, w->pad_begin[d], &cst));
        GR_TRY(bin(k, GR_KB_ADD, GR_I64, o, cst, &base));
    } else { /* q = o*stride + k*dil; p = q - pb */
        GR_TRY(i64c(k, w->stride[d], &cst));
        GR_TRY(bin(k, GR_KB_MUL, GR_I64, o, cst, &base));
    }
    for (int64_t kk = 0; kk < w->kernel[d]; kk++) {
        int p, ok, cl, q = base;
        if (kind == WK_CONVT) {
            int z, nonneg;
            GR_TRY(i64c(k, -kk * w->dil[d], &cst));
            GR_TRY(bin(k, GR_KB_ADD, GR_I64, base, cst, &p));
            GR_TRY(i64c(k, 0, &z));
            GR_TRY(bin(k, GR_KB_GE, GR_BOOL, p, z, &nonneg));
            if (w->stride[d] > 1) {
                int m, ex;
                GR_TRY(i64c(k, w->stride[d], &cst));
                GR_TRY(bin(k, GR_KB_MOD, GR_I64, p, cst, &m));
                GR_TRY(bin(k, GR_KB_EQ, GR_BOOL, m, z, &ex));
                GR_TRY(bin(k, GR_KB_AND, GR_BOOL, nonneg, ex, &nonneg));
                GR_TRY(bin(k, GR_KB_DIV, GR_I64, p, cst, &p));
            }
            GR_TRY(in_range(k, p, 0, w->in[d], &ok));
            GR_TRY(bin(k, GR_KB_AND, GR_BOOL, nonneg, ok, &ok));
        } else {
            if (kk) {
                GR_TRY(i64c(k, kk * w->dil[d], &cst));
                GR_TRY(bin(k, GR_KB_ADD, GR_I64, base, cst, &q));
            }
            if (kind == WK_AVG) {
                int lim;
                GR_TRY(i64c(k, w->in[d] + w->pad_begin[d] + w->pad_end[d], &lim));
                GR_TRY(bin(k, GR_KB_LT, GR_BOOL, q, lim, &u->padded[d][kk]));
            }
            GR_TRY(i64c(k, w->pad_begin[d], &cst));
            GR_TRY(bin(k, GR_KB_SUB, GR_I64, q, cst, &p));
            GR_TRY(in_range(k, p, 0, w->in[d], &ok));
        }
        GR_TRY(clamp0(k, p, w->in[d] - 1, &cl));
        if (sp_stride != 1) {
            GR_TRY(i64c(k, sp_stride, &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, cl, cst, &cl));
        }
        u->valid[d][kk] = ok;
        u->term[d][kk] = cl;
    }
    return GR_OK;
}

static gr_status window_unrolled(gr_lctx *c, gr_lkb *b, wkind kind, const gr_ir_window *w, int sp0) {
    gr_kernel *k = b->k;
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int ns = w->n_spatial;
    int64_t xd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    gr_dtype xt = lw_val(c, x)->dtype, t = lw_acc_dtype(xt);
    int64_t sp_stride[GR_MAX_DIMS], sp = 1, kp = 1, k_stride[GR_MAX_DIMS];
    lw_rowmajor(ns, w->in, sp_stride);
    lw_rowmajor(ns, w->kernel, k_stride);
    for (int d = 0; d < ns; d++) sp *= w->in[d], kp *= w->kernel[d];
    unroll_dims u;
    for (int d = 0; d < ns; d++) {
        int o;
        GR_TRY(gr_kx_index(k, sp0 + d, &o));
        GR_TRY(unroll_dim(k, kind, w, d, o, sp_stride[d], &u));
    }
    bool conv = kind == WK_CONV || kind == WK_CONVT;
    int64_t cin_g = conv ? xd[1] / w->group : 1, cout_g = 1;
    int xp, wp = -1, wv = conv ? lw_in(c, 1) : -1;
    GR_TRY(lw_param_buffer(b, x, xt, 0, false, &xp));
    gr_kaccess xa, wa;
    gr_kaccess_init(&xa);
    gr_kaccess_init(&wa);
    xa.stride[0] = xd[1] * sp;
    xa.stride[1] = conv ? cin_g * sp : sp;
    xa.index_stride = 1;
    xa.index_extent = sp;
    if (conv) {
        int64_t wd[GR_MAX_DIMS];
        lw_shape(c, wv, wd);
        cout_g = kind == WK_CONV ? wd[0] / w->group : wd[1];
        GR_TRY(lw_param_buffer(b, wv, lw_val(c, wv)->dtype, 0, false, &wp));
        wa.stride[1] = cin_g * cout_g * kp;
        wa.stride[2] = kind == WK_CONV ? cin_g * kp : kp;
    }
    int zero, acc = -1, ninf = -1;
    if (gr_dtype_is_float(t)) GR_TRY(gr_kx_const_f(k, t, 0.0, &zero));
    else GR_TRY(gr_kx_const_i(k, t, 0, &zero));
    if (kind == WK_MAX) {
        if (gr_dtype_is_float(t)) GR_TRY(gr_kx_const_f(k, t, -INFINITY, &ninf));
        else GR_TRY(gr_kx_const_i(k, t, xt == GR_U8 ? 0 : xt == GR_I8 ? -128 : xt == GR_I32 ? INT32_MIN : INT64_MIN, &ninf));
    }
    int64_t taps = cin_g * kp;
    for (int64_t tap = 0; tap < taps; tap++) {
        int64_t ci = tap / kp, rem = tap % kp, kk[GR_MAX_DIMS];
        for (int d = 0; d < ns; d++) kk[d] = rem / k_stride[d] % w->kernel[d];
        int lin = -1, valid = -1, xl, v;
        for (int d = 0; d < ns; d++) {
            if (lin < 0) lin = u.term[d][kk[d]];
            else GR_TRY(bin(k, GR_KB_ADD, GR_I64, lin, u.term[d][kk[d]], &lin));
            GR_TRY(and_into(k, &valid, u.valid[d][kk[d]]));
        }
        gr_kaccess a = xa;
        a.offset = ci * sp;
        a.index = lin;
        GR_TRY(gr_kx_load(k, xp, &a, &xl));
        if (t != xt) GR_TRY(gr_kx_cast(k, t, xl, &xl));
        GR_TRY(gr_kx_select(k, t, valid, xl, kind == WK_MAX ? ninf : zero, &v));
        if (conv) {
            gr_kaccess wa1 = wa;
            wa1.offset = (kind == WK_CONV ? ci * kp : ci * cout_g * kp) + rem;
            int wl;
            GR_TRY(gr_kx_load(k, wp, &wa1, &wl));
            if (t != xt) GR_TRY(gr_kx_cast(k, t, wl, &wl));
            GR_TRY(bin(k, GR_KB_MUL, t, v, wl, &v));
        }
        if (acc < 0) acc = v;
        else GR_TRY(bin(k, kind == WK_MAX ? GR_KB_MAX : GR_KB_ADD, t, acc, v, &acc));
    }
    if (kind == WK_AVG) { /* count = prod_d (taps of dim d that count) */
        int64_t cip;
        GR_TRY(gr_ir_attr_int(c->g, n, "count_include_pad", 0, &cip));
        int one, cnt = -1;
        GR_TRY(gr_kx_const_f(k, t, 1.0, &one));
        for (int d = 0; d < ns; d++) {
            int cd = -1;
            for (int64_t kk = 0; kk < w->kernel[d]; kk++) {
                int s1;
                GR_TRY(gr_kx_select(k, t, cip ? u.padded[d][kk] : u.valid[d][kk], one, zero, &s1));
                if (cd < 0) cd = s1;
                else GR_TRY(bin(k, GR_KB_ADD, t, cd, s1, &cd));
            }
            if (cnt < 0) cnt = cd;
            else GR_TRY(bin(k, GR_KB_MUL, t, cnt, cd, &cnt));
        }
        GR_TRY(bin(k, GR_KB_DIV, t, acc, cnt, &acc));
    }
    if (conv && n->n_in > 2 && n->in[2] >= 0) {
        gr_kaccess ba;
        gr_kaccess_init(&ba);
        ba.stride[1] = cout_g;
        ba.stride[2] = 1;
        int bl;
        GR_TRY(lw_load(c, b, n->in[2], &ba, &bl));
        if (t != xt) GR_TRY(gr_kx_cast(k, t, bl, &bl));
        GR_TRY(bin(k, GR_KB_ADD, t, acc, bl, &acc));
    }
    if (t != xt) GR_TRY(gr_kx_cast(k, xt, acc, &acc));
    return lw_store_contig(c, b, y, acc);
}

static gr_status lower_window(gr_lctx *c, wkind kind) {
    gr_ir_window w;
    GR_TRY(gr_ir_window_geometry(c->g, c->node, &w));
    int x = lw_in(c, 0), y = lw_out(c, 0);
    if (lw_numel(c, y) == 0) return GR_OK;
    int64_t xd[GR_MAX_DIMS], yd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    lw_shape(c, y, yd);
    int ns = w.n_spatial;
    int64_t outer[GR_MAX_DIMS];
    int n_outer = 0, sp0, in0;
    outer[n_outer++] = yd[0];
    if (kind == WK_CONV || kind == WK_CONVT) {
        outer[n_outer++] = w.group;
        outer[n_outer++] = yd[1] / w.group;
    } else {
        outer[n_outer++] = yd[1];
    }
    sp0 = n_outer;
    for (int d = 0; d < ns; d++) outer[n_outer++] = yd[2 + d];
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, n_outer, outer));
    gr_kernel *k = b.k;
    /* batch and spatial dims symbolic in the model stay "larger than 1" at every binding
     * (kir.h, var_outer): one kernel structure for all of them */
    uint32_t yvar = lw_val(c, y)->var_dims;
    k->var_outer = (yvar & 1u);
    for (int d = 0; d < ns; d++) k->var_outer |= (yvar >> (2 + d) & 1u) << (sp0 + d);
    k->n_inner = 0;
    int64_t taps = kind == WK_CONV || kind == WK_CONVT ? xd[1] / w.group : 1;
    for (int d = 0; d < ns; d++) taps *= w.kernel[d];
    gr_status st;
    if (taps <= WIN_UNROLL_MAX) {
        st = window_unrolled(c, &b, kind, &w, sp0);
    } else {
        if (kind == WK_CONV || kind == WK_CONVT) k->inner[k->n_inner++] = xd[1] / w.group;
        in0 = k->n_inner;
        for (int d = 0; d < ns; d++) k->inner[k->n_inner++] = w.kernel[d];
        st = window_body(c, &b, kind, &w, sp0, in0);
    }
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

/* ==== conv as im2col + matmul =================================================================
 * A group-1 convolution with a long reduction (C_in * kernel >= CONV_GEMM_MIN_K) and enough
 * output channels runs on the matmul library (cuBLASLt on CUDA): an im2col kernel writes
 * col[n, (ci, k...), (o...)] (0 for padding taps) into a temporary, then one batched matmul
 * y[n] = W[C_out, C_in*K] @ col[n] (W broadcast over the batch), then a kernel adds the bias
 * per output channel (it fuses with a following elementwise op). A 1x1 convolution with unit
 * strides and no padding reads x itself as col. The direct kernel stays for grouped and
 * depthwise convolutions and short reductions, where the matmul would be tiny or many. */
#define CONV_GEMM_MIN_K 32
#define CONV_GEMM_MIN_COUT 8

static bool conv_use_gemm(const gr_lctx *c, const gr_ir_window *w) {
    int64_t xd[GR_MAX_DIMS], wd[GR_MAX_DIMS];
    lw_shape(c, lw_in(c, 0), xd);
    lw_shape(c, lw_in(c, 1), wd);
    int64_t kp = 1;
    for (int d = 0; d < w->n_spatial; d++) kp *= w->kernel[d];
    return w->group == 1 && w->n_spatial <= 3 && xd[1] * kp >= CONV_GEMM_MIN_K && wd[0] >= CONV_GEMM_MIN_COUT;
}

static gr_status im2col_body(gr_lctx *c, gr_lkb *b, const gr_ir_window *w, int col) {
    gr_kernel *k = b->k;
    int x = lw_in(c, 0), ns = w->n_spatial;
    int64_t xd[GR_MAX_DIMS], sp_stride[GR_MAX_DIMS], sp = 1;
    lw_shape(c, x, xd);
    lw_rowmajor(ns, w->in, sp_stride);
    for (int d = 0; d < ns; d++) sp *= w->in[d];
    int valid = -1, lin = -1;
    for (int d = 0; d < ns; d++) { /* outer: [N, C_in, k_1..k_s, o_1..o_s] */
        int o, r, q, tmp, cst, ok, cl;
        GR_TRY(gr_kx_index(k, 2 + d, &r));
        GR_TRY(gr_kx_index(k, 2 + ns + d, &o));
        GR_TRY(i64c(k, w->stride[d], &cst));
        GR_TRY(bin(k, GR_KB_MUL, GR_I64, o, cst, &q));
        GR_TRY(i64c(k, w->dil[d], &cst));
        GR_TRY(bin(k, GR_KB_MUL, GR_I64, r, cst, &tmp));
        GR_TRY(bin(k, GR_KB_ADD, GR_I64, q, tmp, &q));
        GR_TRY(i64c(k, w->pad_begin[d], &cst));
        GR_TRY(bin(k, GR_KB_SUB, GR_I64, q, cst, &q));
        GR_TRY(in_range(k, q, 0, w->in[d], &ok));
        GR_TRY(and_into(k, &valid, ok));
        GR_TRY(clamp0(k, q, w->in[d] - 1, &cl));
        if (sp_stride[d] != 1) {
            GR_TRY(i64c(k, sp_stride[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, cl, cst, &cl));
        }
        if (lin < 0) lin = cl;
        else GR_TRY(bin(k, GR_KB_ADD, GR_I64, lin, cl, &lin));
    }
    gr_kaccess xa;
    gr_kaccess_init(&xa);
    xa.stride[0] = xd[1] * sp;
    xa.stride[1] = sp;
    xa.index = lin;
    xa.index_stride = 1;
    xa.index_extent = sp;
    gr_dtype xt = lw_val(c, x)->dtype;
    int xl, zero;
    GR_TRY(lw_load(c, b, x, &xa, &xl));
    GR_TRY(lw_const(k, xt, 0.0, &zero));
    GR_TRY(gr_kx_select(k, xt, valid, xl, zero, &xl));
    return lw_store_contig(c, b, col, xl);
}

static gr_status lower_conv_gemm(gr_lctx *c, const gr_ir_window *w) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), wv = lw_in(c, 1), bias = n->n_in > 2 ? lw_in(c, 2) : -1, y = lw_out(c, 0);
    int ns = w->n_spatial;
    gr_dtype xt = lw_val(c, x)->dtype;
    int64_t xd[GR_MAX_DIMS], yd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    lw_shape(c, y, yd);
    int64_t N = xd[0], cin = xd[1], cout = yd[1], kp = 1, P = 1;
    for (int d = 0; d < ns; d++) kp *= w->kernel[d], P *= w->out[d];
    int64_t K = cin * kp;
    bool direct = kp == 1;
    for (int d = 0; d < ns; d++) direct &= w->stride[d] == 1 && w->pad_begin[d] == 0 && w->pad_end[d] == 0;
    int col = x;
    if (!direct) {
        int64_t cd[3] = {N, K, P}, outer[GR_MAX_DIMS];
        GR_TRY(lw_temp_value(c, xt, 3, cd, &col));
        int no = 0;
        outer[no++] = N;
        outer[no++] = cin;
        for (int d = 0; d < ns; d++) outer[no++] = w->kernel[d];
        for (int d = 0; d < ns; d++) outer[no++] = w->out[d];
        gr_lkb b;
        GR_TRY(lw_kernel_begin(c, &b, no, outer));
        uint32_t yvar = lw_val(c, y)->var_dims; /* symbolic batch / spatial dims: kir.h, var_outer */
        b.k->var_outer = yvar & 1u;
        for (int d = 0; d < ns; d++) b.k->var_outer |= (yvar >> (2 + d) & 1u) << (2 + ns + d);
        gr_status st = im2col_body(c, &b, w, col);
        if (st != GR_OK) {
            lw_abort_kernel(&b);
            return st;
        }
        GR_TRY(lw_emit_kernel(c, &b));
    }
    int mm = y;
    if (bias >= 0) GR_TRY(lw_temp_value(c, xt, 3, (int64_t[3]){N, cout, P}, &mm));
    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.node = c->node;
    s.out_value = -1;
    s.n_args = GR_LIB_MATMUL_NARGS;
    gr_libcall *call = &s.call;
    call->kind = GR_LIB_MATMUL;
    call->dtype = xt;
    call->m = cout;
    call->n = P;
    call->k = K;
    call->batch = N;
    call->lda = K;
    call->ldb = P;
    call->ldc = P;
    call->alpha = 1.0;
    call->batch_stride_a = 0; /* the weight, shared by every image */
    call->batch_stride_b = K * P;
    call->batch_stride_c = cout * P;
    call->bias = GR_BIAS_NONE;
    call->epilogue = GR_EPI_NONE;
    snprintf(call->name, sizeof call->name, "k%d_conv_gemm", c->node);
    s.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = wv};
    s.args[1] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = col};
    s.args[2] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = mm};
    s.args[3] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    s.args[4] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    if (gr_vec_push(c->out, s) != GR_OK) return gr_nomem();
    if (bias < 0) return GR_OK;
    /* y = mm + bias[co], over y's own dims so that an elementwise reader can take it in (fusion
     * matches loop dims one to one) */
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, 2 + ns, yd));
    gr_kaccess ma, ba;
    gr_kaccess_init(&ma);
    lw_rowmajor(2 + ns, yd, ma.stride);
    gr_kaccess_init(&ba);
    ba.stride[1] = 1;
    int ml, bl, v;
    gr_status st = lw_load(c, &b, mm, &ma, &ml);
    if (st == GR_OK) st = lw_load(c, &b, bias, &ba, &bl);
    if (st == GR_OK) st = bin(b.k, GR_KB_ADD, xt, ml, bl, &v);
    if (st == GR_OK) st = lw_store_contig(c, &b, y, v);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

gr_status lw_lower_conv(gr_lctx *c) {
    if (lw_node(c)->op == GR_OP_CONV) {
        gr_ir_window w;
        GR_TRY(gr_ir_window_geometry(c->g, c->node, &w));
        if (lw_numel(c, lw_out(c, 0)) > 0 && conv_use_gemm(c, &w)) return lower_conv_gemm(c, &w);
    }
    return lower_window(c, lw_node(c)->op == GR_OP_CONV_TRANSPOSE ? WK_CONVT : WK_CONV);
}
gr_status lw_lower_pool(gr_lctx *c) { return lower_window(c, lw_node(c)->op == GR_OP_MAX_POOL ? WK_MAX : WK_AVG); }

/* ==== pad ========================================================================================
 * Source position per dim: s = o - pad_begin; constant: outside [0, in) reads `value`;
 * edge: clamped; reflect: mirrored about the end elements (period 2*(in - 1)); wrap: s mod in. */

static gr_status pad_body(gr_lctx *c, gr_lkb *b, int mode, const int64_t *pads, double value) {
    gr_kernel *k = b->k;
    int x = lw_in(c, 0), y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype;
    int64_t xd[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int r = lw_shape(c, x, xd);
    lw_rowmajor(r, xd, rs);
    int v;
    if (lw_numel(c, x) == 0) { /* constant mode only (the shape rule refuses the others): all value */
        GR_TRY(lw_const(k, xt, value, &v));
        return lw_store_contig(c, b, y, v);
    }
    int valid = -1, lin = -1;
    for (int d = 0; d < r; d++) {
        int o, s, cst;
        GR_TRY(gr_kx_index(k, d, &o));
        if (pads[d] != 0) {
            GR_TRY(i64c(k, pads[d], &cst));
            GR_TRY(bin(k, GR_KB_SUB, GR_I64, o, cst, &s));
        } else {
            s = o;
        }
        int64_t in = xd[d];
        bool may_leave = pads[d] > 0 || pads[r + d] > 0;
        if (may_leave) {
            if (mode == 0) {
                int ok;
                GR_TRY(in_range(k, s, 0, in, &ok));
                GR_TRY(and_into(k, &valid, ok));
                GR_TRY(clamp0(k, s, in - 1, &s));
            } else if (mode == 2 || in == 1) { /* edge; reflect and wrap of one element repeat it too */
                GR_TRY(clamp0(k, s, in - 1, &s));
            } else {
                int64_t period = mode == 1 ? 2 * (in - 1) : in;
                int pc, m;
                GR_TRY(i64c(k, period, &pc));
                GR_TRY(bin(k, GR_KB_MOD, GR_I64, s, pc, &m)); /* C's %: then make it non-negative */
                GR_TRY(bin(k, GR_KB_ADD, GR_I64, m, pc, &m));
                GR_TRY(bin(k, GR_KB_MOD, GR_I64, m, pc, &m));
                if (mode == 1) { /* m in [0, period): m < in ? m : period - m */
                    int lim, lt, mir;
                    GR_TRY(i64c(k, in, &lim));
                    GR_TRY(bin(k, GR_KB_LT, GR_BOOL, m, lim, &lt));
                    GR_TRY(bin(k, GR_KB_SUB, GR_I64, pc, m, &mir));
                    GR_TRY(gr_kx_select(k, GR_I64, lt, m, mir, &m));
                }
                s = m;
            }
        }
        if (rs[d] != 1) {
            GR_TRY(i64c(k, rs[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, s, cst, &s));
        }
        if (lin < 0) lin = s;
        else GR_TRY(bin(k, GR_KB_ADD, GR_I64, lin, s, &lin));
    }
    gr_kaccess xa;
    gr_kaccess_init(&xa);
    if (lin < 0) GR_TRY(i64c(k, 0, &lin)); /* rank 0 */
    xa.index = lin;
    xa.index_stride = 1;
    xa.index_extent = lw_numel(c, x);
    GR_TRY(lw_load(c, b, x, &xa, &v));
    if (valid >= 0) {
        int cv;
        GR_TRY(lw_const(k, xt, value, &cv));
        GR_TRY(gr_kx_select(k, xt, valid, v, cv, &v));
    }
    return lw_store_contig(c, b, y, v);
}

gr_status lw_lower_pad(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    const int64_t *pads;
    int np;
    GR_TRY(gr_ir_attr_ints(c->g, n, "pads", &pads, &np));
    int r = lw_val(c, x)->ndim;
    if (np != 2 * r) return gr_error(GR_ERR_INVALID, "%s: pads has %d values, expected %d", lw_where(c), np, 2 * r);
    const char *ms;
    GR_TRY(gr_ir_attr_string(c->g, n, "mode", "constant", &ms));
    int mode;
    if (gr_ir_pad_mode(ms, &mode) != GR_OK) return gr_error(GR_ERR_INVALID, "%s: unknown mode '%s'", lw_where(c), ms);
    double value;
    GR_TRY(gr_ir_attr_float(c->g, n, "value", 0.0, &value));
    if (lw_numel(c, y) == 0) return GR_OK;
    int64_t xd[GR_MAX_DIMS];
    lw_shape(c, x, xd);
    for (int d = 0; d < r; d++)
        if (xd[d] == 0 && mode != 0)
            return gr_error(GR_ERR_SHAPE, "%s: dim %d is empty: mode '%s' has nothing to repeat", lw_where(c), d, ms);
    int64_t yd[GR_MAX_DIMS];
    lw_shape(c, y, yd);
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, r, yd));
    gr_status st = pad_body(c, &b, mode, pads, value);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}

/* ==== resize =======================================================================================
 * Per output dim: x_in = transform(o) in f64 (coord: half_pixel (o + 0.5)/scale - 0.5,
 * pytorch_half_pixel (the same, -0.5 when out_f == 1), align_corners o*(in - 1)/(out_f - 1) (0
 * when out_f == 1), asymmetric o/scale, tf_half_pixel_for_nn (o + 0.5)/scale, half_pixel_symmetric
 * (half_pixel shifted by in/2 * (1 - out/out_f)), where out_f = in*scale is the resized length as
 * a real number, as ONNX defines it). nearest picks
 * floor / ceil / round_prefer_floor (ceil(x - 0.5)) / round_prefer_ceil (floor(x + 0.5)), clamped
 * into [0, in); linear reads floor(x) and floor(x) + 1 (clamped) weighted by the fraction. A dim
 * whose size and scale are unchanged reads o directly. */

enum { CO_HALF = 0, CO_PYTORCH_HALF, CO_ALIGN, CO_ASYM, CO_TF_HALF_NN, CO_HALF_SYM };

/* out_f = in * scale, the resized length as a real number (ONNX: not the rounded output size) */
static gr_status resize_coord(gr_kernel *k, int coord, int o, int64_t in, int64_t out, double scale, int *xf) {
    int of, cst;
    double out_f = scale * (double)in;
    GR_TRY(gr_kx_cast(k, GR_F64, o, &of));
    switch (coord) {
    case CO_HALF_SYM: { /* offset + (o + 0.5)/scale - 0.5, offset = in/2 * (1 - out/out_f) */
        double offset = (double)in / 2.0 * (1.0 - (double)out / out_f);
        GR_TRY(gr_kx_const_f(k, GR_F64, 0.5, &cst));
        GR_TRY(bin(k, GR_KB_ADD, GR_F64, of, cst, xf));
        GR_TRY(gr_kx_const_f(k, GR_F64, scale, &cst));
        GR_TRY(bin(k, GR_KB_DIV, GR_F64, *xf, cst, xf));
        GR_TRY(gr_kx_const_f(k, GR_F64, offset - 0.5, &cst));
        return bin(k, GR_KB_ADD, GR_F64, *xf, cst, xf);
    }
    case CO_HALF:
    case CO_PYTORCH_HALF:
    case CO_TF_HALF_NN:
        if (coord == CO_PYTORCH_HALF && out_f == 1.0) return gr_kx_const_f(k, GR_F64, -0.5, xf);
        GR_TRY(gr_kx_const_f(k, GR_F64, 0.5, &cst));
        GR_TRY(bin(k, GR_KB_ADD, GR_F64, of, cst, xf));
        GR_TRY(gr_kx_const_f(k, GR_F64, scale, &cst));
        GR_TRY(bin(k, GR_KB_DIV, GR_F64, *xf, cst, xf));
        if (coord == CO_TF_HALF_NN) return GR_OK;
        GR_TRY(gr_kx_const_f(k, GR_F64, 0.5, &cst));
        return bin(k, GR_KB_SUB, GR_F64, *xf, cst, xf);
    case CO_ALIGN:
        if (out_f == 1.0) return gr_kx_const_f(k, GR_F64, 0.0, xf);
        GR_TRY(gr_kx_const_f(k, GR_F64, (double)(in - 1), &cst));
        GR_TRY(bin(k, GR_KB_MUL, GR_F64, of, cst, xf));
        GR_TRY(gr_kx_const_f(k, GR_F64, out_f - 1.0, &cst));
        return bin(k, GR_KB_DIV, GR_F64, *xf, cst, xf);
    default:
        GR_TRY(gr_kx_const_f(k, GR_F64, scale, &cst));
        return bin(k, GR_KB_DIV, GR_F64, of, cst, xf);
    }
}

#define RESIZE_MAX_LINEAR 3 /* resized dims of a linear resize: 2^3 taps */

static gr_status resize_body(gr_lctx *c, gr_lkb *b, bool linear, int coord, int nmode, const double *scales) {
    gr_kernel *k = b->k;
    int x = lw_in(c, 0), y = lw_out(c, 0);
    gr_dtype xt = lw_val(c, x)->dtype, t = lw_acc_dtype(xt);
    int64_t xd[GR_MAX_DIMS], yd[GR_MAX_DIMS], rs[GR_MAX_DIMS];
    int r = lw_shape(c, x, xd);
    lw_shape(c, y, yd);
    lw_rowmajor(r, xd, rs);
    int base = -1;                  /* linear index of the unresized dims (and nearest dims) */
    int lo[GR_MAX_DIMS], hi[GR_MAX_DIMS], frac[GR_MAX_DIMS], lin_dims[GR_MAX_DIMS];
    int n_lin = 0;
    for (int d = 0; d < r; d++) {
        int o, cst, s;
        GR_TRY(gr_kx_index(k, d, &o));
        double scale = scales ? scales[d] : (double)yd[d] / (double)xd[d];
        if (xd[d] == yd[d] && scale == 1.0) {
            s = o;
        } else {
            int xf;
            GR_TRY(resize_coord(k, coord, o, xd[d], yd[d], scale, &xf));
            if (!linear) {
                int h;
                switch (nmode) {
                case 0: GR_TRY(gr_kx_const_f(k, GR_F64, -0.5, &h)); GR_TRY(bin(k, GR_KB_ADD, GR_F64, xf, h, &xf));
                        GR_TRY(gr_kx_unary(k, GR_KU_CEIL, GR_F64, xf, &xf)); break; /* round_prefer_floor */
                case 1: GR_TRY(gr_kx_const_f(k, GR_F64, 0.5, &h)); GR_TRY(bin(k, GR_KB_ADD, GR_F64, xf, h, &xf));
                        GR_TRY(gr_kx_unary(k, GR_KU_FLOOR, GR_F64, xf, &xf)); break; /* round_prefer_ceil */
                case 2: GR_TRY(gr_kx_unary(k, GR_KU_FLOOR, GR_F64, xf, &xf)); break;
                default: GR_TRY(gr_kx_unary(k, GR_KU_CEIL, GR_F64, xf, &xf)); break;
                }
                GR_TRY(gr_kx_cast(k, GR_I64, xf, &s));
                GR_TRY(clamp0(k, s, xd[d] - 1, &s));
            } else {
                if (n_lin == RESIZE_MAX_LINEAR)
                    return gr_error(GR_ERR_UNSUPPORTED, "%s: linear resize of more than %d dims is not supported", lw_where(c),
                                    RESIZE_MAX_LINEAR);
                int fl, i0, i1, one, ff;
                GR_TRY(gr_kx_unary(k, GR_KU_FLOOR, GR_F64, xf, &fl));
                GR_TRY(bin(k, GR_KB_SUB, GR_F64, xf, fl, &ff));
                if (t != GR_F64) GR_TRY(gr_kx_cast(k, t, ff, &ff));
                GR_TRY(gr_kx_cast(k, GR_I64, fl, &i0));
                GR_TRY(i64c(k, 1, &one));
                GR_TRY(bin(k, GR_KB_ADD, GR_I64, i0, one, &i1));
                GR_TRY(clamp0(k, i0, xd[d] - 1, &i0));
                GR_TRY(clamp0(k, i1, xd[d] - 1, &i1));
                if (rs[d] != 1) {
                    GR_TRY(i64c(k, rs[d], &cst));
                    GR_TRY(bin(k, GR_KB_MUL, GR_I64, i0, cst, &i0));
                    GR_TRY(bin(k, GR_KB_MUL, GR_I64, i1, cst, &i1));
                }
                lo[n_lin] = i0;
                hi[n_lin] = i1;
                frac[n_lin] = ff;
                lin_dims[n_lin++] = d;
                continue;
            }
        }
        if (rs[d] != 1) {
            GR_TRY(i64c(k, rs[d], &cst));
            GR_TRY(bin(k, GR_KB_MUL, GR_I64, s, cst, &s));
        }
        if (base < 0) base = s;
        else GR_TRY(bin(k, GR_KB_ADD, GR_I64, base, s, &base));
    }
    (void)lin_dims;
    if (base < 0) GR_TRY(i64c(k, 0, &base));
    int v = -1, one_t;
    GR_TRY(gr_kx_const_f(k, t, 1.0, &one_t));
    for (int tap = 0; tap < (1 << n_lin); tap++) {
        int idx = base, wgt = -1;
        for (int j = 0; j < n_lin; j++) {
            bool up = (tap >> j) & 1;
            GR_TRY(bin(k, GR_KB_ADD, GR_I64, idx, up ? hi[j] : lo[j], &idx));
            int wj = frac[j];
            if (!up) GR_TRY(bin(k, GR_KB_SUB, t, one_t, frac[j], &wj));
            if (wgt < 0) wgt = wj;
            else GR_TRY(bin(k, GR_KB_MUL, t, wgt, wj, &wgt));
        }
        gr_kaccess xa;
        gr_kaccess_init(&xa);
        xa.index = idx;
        xa.index_stride = 1;
        xa.index_extent = lw_numel(c, x);
        int l;
        GR_TRY(lw_load(c, b, x, &xa, &l));
        if (t != xt) GR_TRY(gr_kx_cast(k, t, l, &l));
        if (wgt >= 0) GR_TRY(bin(k, GR_KB_MUL, t, l, wgt, &l));
        if (v < 0) v = l;
        else GR_TRY(bin(k, GR_KB_ADD, t, v, l, &v));
    }
    if (t != xt) GR_TRY(gr_kx_cast(k, xt, v, &v));
    return lw_store_contig(c, b, y, v);
}

gr_status lw_lower_resize(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    const char *mode, *coord, *nm;
    GR_TRY(gr_ir_attr_string(c->g, n, "mode", "nearest", &mode));
    GR_TRY(gr_ir_attr_string(c->g, n, "coord", "half_pixel", &coord));
    GR_TRY(gr_ir_attr_string(c->g, n, "nearest_mode", "round_prefer_floor", &nm));
    bool linear;
    if (!strcmp(mode, "nearest")) linear = false;
    else if (!strcmp(mode, "linear")) linear = true;
    else return gr_error(GR_ERR_UNSUPPORTED, "%s: resize mode '%s' is not supported (nearest, linear)", lw_where(c), mode);
    static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                         "half_pixel_symmetric"};
    int co = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(coord, coords[i])) co = i;
    if (co < 0) return gr_error(GR_ERR_UNSUPPORTED, "%s: coordinate_transformation_mode '%s' is not supported", lw_where(c), coord);
    static const char *const nmodes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    int nmi = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(nm, nmodes[i])) nmi = i;
    if (nmi < 0) return gr_error(GR_ERR_UNSUPPORTED, "%s: nearest_mode '%s' is not supported", lw_where(c), nm);
    const double *scales;
    int ns;
    GR_TRY(gr_ir_attr_floats(c->g, n, "scales", &scales, &ns));
    if (lw_numel(c, y) == 0) return GR_OK;
    if (lw_numel(c, x) == 0) return gr_error(GR_ERR_SHAPE, "%s: resize of an empty input to a non-empty output", lw_where(c));
    int64_t yd[GR_MAX_DIMS];
    int r = lw_shape(c, y, yd);
    gr_lkb b;
    GR_TRY(lw_kernel_begin(c, &b, r, yd));
    gr_status st = resize_body(c, &b, linear, co, nmi, ns > 0 ? scales : NULL);
    if (st != GR_OK) {
        lw_abort_kernel(&b);
        return st;
    }
    return lw_emit_kernel(c, &b);
}
