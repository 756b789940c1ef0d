/* passes/attention — recognises scaled dot-product attention and replaces it by one
 * `attention` node (ir/ops.c), which runs as a fused kernel that never materialises the
 * [seq_q, seq_k] score matrix.
 *
 * The pattern, as the exporters write it (GPT-2, BERT and Llama exports of
 * tests/data/onnx/dyn, dynamo and TorchScript):
 *
 *   S = matmul(Q, KT)                 Q [B,H,Sq,D]; KT [B,H,D,Sk] (or K with trans_b)
 *   T = mul(S, c) | div(S, c)         c a one-element float constant (optional; repeated)
 *   U = add(T, M) | add(M, T)         M a float mask broadcasting to [B,H,Sq,Sk] (optional)
 *   W = where(less(positions, L), U, -inf)   (optional: the decode rewrite's key length)
 *   P = softmax(W | U, axis=-1)
 *   O = matmul(P | where(isnan(P), 0, P), V)    V [B,H,Sk,Dv]

 * Scales may also sit on Q and on K^T (mul by a one-element constant each, as PyTorch's SDPA
 * export writes sqrt(scale) on both); the NaN guard after the softmax is what that export
 * writes for rows that see no key, which the fused kernel makes 0 as well.
 *
 * K is taken back out of KT: KT = transpose(X, p) gives K = transpose(X, p with its last
 * two entries swapped), which is X itself when that is the identity; otherwise K is
 * transpose(KT, [0,1,3,2]). Grouped-query heads: when K and V both are
 * reshape(expand(unsqueeze(Xkv, axes=[2]), [B,Hkv,r,S,D]), [B,Hkv*r,S,D]) (the
 * repeat_kv of Llama's export), the attention reads Xkv with Hkv heads directly.
 *
 * Each intermediate (S, T, U, P) must have the chain's next node as its only reader and
 * not be a graph output, so nothing else needs the scores. Shapes may be symbolic: dims
 * are compared as expressions (gr_dx_equal), and the rewrite happens before
 * specialization, so every binding compiles the same op. What is not matched stays
 * unfused (a softmax on another axis, a mask that does not broadcast to the scores, a
 * scale that is not a constant, batch dims that broadcast inside the matmuls).
 *
 * The key-length form: passes/decode.c masks the padding of a KV cache of max_len positions
 * before each softmax over it as where(position < L, x, -inf), L = the valid length (from the
 * device input graft.kv_len). With positions 0..Sk-1 along the keys (a range, reshaped, or the
 * constant folding made of it) and L one i64 value, L becomes the attention's key_len input:
 * the kernel reads L on the device and visits only the valid keys (parameter indirection), so
 * one compiled step serves every cache length without reading the padding.
 *
 * f16/bf16 attention is fused, and f32 attention whose Q and V head dims are both 64 or both
 * 128 (cuda-attn.c's tiled f32 kernel, exact FMA on CUDA cores: 211 us against the unfused
 * path's 283 us at b8 h12 s512 d64 on the H100, 154 us causal). Other f32 (and f64) attention
 * is fused only with include_f32 or in the key-length form: the generic kernel is slower than
 * the unfused path for prefill (bench/attention), but a decode step's one query row is cheaper
 * fused. Head dims must be concrete and at most 256 (what the CUDA kernels take).
 *
 * Layouts (the `layout` attribute, ops.c): an exporter makes Q, K and V [B,H,S,D] by
 * transposing a projection's [B,S,H,D] view (perm [0,2,1,3]), and transposes O back the
 * same way before the output projection. Each of those transposes would be a copy kernel
 * around the attention. The attention reads the transpose's input instead, marked
 * layout 1 ([B,S,H,D]); K^T = transpose(X, [0,2,3,1]) gives K = X with layout 1 too, so
 * no K transpose is added. When O's only reader is transpose(O, [0,2,1,3]), the attention
 * writes O as [B,S,H,D] (layout 1) and that transpose's perm becomes the identity, which
 * lowers to a view. Lowering then binds a layout-1 operand that is a view of a split or
 * slice of the last axis (the q/k/v split of GPT-2's fused c_attn) to the split's input
 * at the slice's column offset (lower-gen.c), so the attention reads the projection's
 * output in place. Strides are computed there per binding, from concrete dims.
 *
 * The old nodes stay in the graph, unread; their steps are removed by dead-step
 * elimination after lowering (passes/dce.c), so they cost compile time only.
 */
#include "passes/passes.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ==== graph queries ======================================================================== */

typedef struct {
    gr_graph *g;
    bool include_f32;
    int *readers; /* readers[v]: number of node inputs reading value v (+1 if a graph output) */
    size_t readers_bytes;
} at_ctx;

static const gr_ir_value *val(const at_ctx *c, int v) { return &c->g->values.data[v]; }

/* The node producing v with op `op`, read only by one node, or NULL. */
static const gr_ir_node *single_use_producer(const at_ctx *c, int v, gr_op op) {
    if (v < 0) return NULL;
    const gr_ir_value *x = val(c, v);
    if (x->kind != GR_VAL_NODE || x->producer < 0 || c->readers[v] != 1) return NULL;
    const gr_ir_node *n = &c->g->nodes.data[x->producer];
    return n->op == op && n->n_out == 1 ? n : NULL;
}

static const gr_ir_node *producer(const at_ctx *c, int v, gr_op op) {
    if (v < 0) return NULL;
    const gr_ir_value *x = val(c, v);
    if (x->kind != GR_VAL_NODE || x->producer < 0) return NULL;
    const gr_ir_node *n = &c->g->nodes.data[x->producer];
    return n->op == op ? n : NULL;
}

static bool is_4d_float(const at_ctx *c, int v) {
    const gr_ir_value *x = val(c, v);
    return x->typed && x->ndim == 4 && gr_dtype_is_float(x->dtype);
}

/* A one-element float constant: its value. */
static bool scalar_const(const at_ctx *c, int v, double *out) {
    const gr_ir_value *x = val(c, v);
    if (x->kind != GR_VAL_CONST || !x->typed || !gr_dtype_is_float(x->dtype) || !x->data) return false;
    if (gr_ir_value_numel(x) != 1) return false;
    *out = gr_load_f64(x->data, x->dtype, 0);
    return isfinite(*out) && *out != 0;
}

static bool plain_matmul(const at_ctx *c, const gr_ir_node *n, bool allow_trans_b, int64_t *trans_b, double *alpha) {
    if ((n->n_in > 2 && n->in[2] >= 0) || gr_ir_attr_find(n, "epilogue")) return false;
    int64_t ta = 0;
    if (gr_ir_attr_int(c->g, n, "trans_a", 0, &ta) != GR_OK || gr_ir_attr_int(c->g, n, "trans_b", 0, trans_b) != GR_OK ||
        gr_ir_attr_float(c->g, n, "alpha", 1.0, alpha) != GR_OK) {
        gr_error_clear();
        return false;
    }
    return ta == 0 && (*trans_b == 0 || (allow_trans_b && *trans_b == 1)) && isfinite(*alpha);
}

static bool same_dims(const gr_ir_value *a, const gr_ir_value *b, int n) {
    for (int i = 0; i < n; i++)
        if (!gr_dx_equal(a->dims[i], b->dims[i])) return false;
    return true;
}

/* The mask broadcasts onto scores u (every dim 1 or equal to u's, rank <= 4, float). */
static bool mask_fits(const at_ctx *c, int m, int u) {
    const gr_ir_value *mv = val(c, m), *uv = val(c, u);
    if (!mv->typed || !gr_dtype_is_float(mv->dtype) || mv->ndim > 4) return false;
    for (int i = 0; i < mv->ndim; i++) {
        gr_dim d = mv->dims[i];
        if (!gr_dx_is_sym(d) && d.size == 1) continue;
        if (!gr_dx_equal(d, uv->dims[4 - mv->ndim + i])) return false;
    }
    return true;
}

/* x = reshape(expand(unsqueeze(kv, axes=[2]), [B,Hkv,r,S,D]), [B,Hkv*r,S,D]): kv, else -1. */
static int repeat_kv_source(const at_ctx *c, int x) {
    const gr_ir_node *rs = producer(c, x, GR_OP_RESHAPE);
    if (!rs) return -1;
    const gr_ir_node *ex = producer(c, rs->in[0], GR_OP_EXPAND);
    if (!ex) return -1;
    const gr_ir_node *un = producer(c, ex->in[0], GR_OP_UNSQUEEZE);
    if (!un) return -1;
    const int64_t *axes = NULL;
    int n_axes = 0;
    if (gr_ir_attr_ints(c->g, un, "axes", &axes, &n_axes) != GR_OK) return gr_error_clear(), -1;
    int kv = un->in[0];
    if (n_axes != 1 || (axes[0] != 2 && axes[0] != -3) || !is_4d_float(c, kv)) return -1;
    const gr_ir_value *kvv = val(c, kv), *ev = val(c, ex->out[0]), *xv = val(c, x);
    if (!ev->typed || ev->ndim != 5 || !xv->typed || xv->ndim != 4) return -1;
    /* expand keeps B, Hkv, S, D and repeats the new axis */
    if (!gr_dx_equal(ev->dims[0], kvv->dims[0]) || !gr_dx_equal(ev->dims[1], kvv->dims[1]) ||
        !gr_dx_equal(ev->dims[3], kvv->dims[2]) || !gr_dx_equal(ev->dims[4], kvv->dims[3]))
        return -1;
    /* the reshape merges (Hkv, r) into heads: x is [B, Hkv*r, S, D] */
    gr_dim heads;
    if (gr_dx_binary(c->g, GR_DX_MUL, ev->dims[1], ev->dims[2], &heads) != GR_OK) return gr_error_clear(), -1;
    if (!gr_dx_equal(xv->dims[0], kvv->dims[0]) || !gr_dx_equal(xv->dims[1], heads) ||
        !gr_dx_equal(xv->dims[2], kvv->dims[2]) || !gr_dx_equal(xv->dims[3], kvv->dims[3]))
        return -1;
    return kv;
}

/* perm is [0,2,1,3] (negative entries count from the end) */
static bool swaps_heads_and_seq(const int64_t *perm, int n) {
    static const int64_t want[4] = {0, 2, 1, 3};
    if (n != 4) return false;
    for (int i = 0; i < 4; i++)
        if (perm[i] != want[i] && perm[i] + 4 != want[i]) return false;
    return true;
}

/* x = transpose(src, [0,2,1,3]) with src a 4-d float of x's dtype: src (x laid out
 * [B,S,H,D]), else -1. The transpose may have other readers: they keep it. */
static int bshd_source(const at_ctx *c, int x) {
    const gr_ir_node *tr = producer(c, x, GR_OP_TRANSPOSE);
    if (!tr) return -1;
    const int64_t *perm = NULL;
    int np = -1;
    if (gr_ir_attr_ints(c->g, tr, "perm", &perm, &np) != GR_OK) return gr_error_clear(), -1;
    int src = tr->in[0];
    if (!swaps_heads_and_seq(perm, np) || !is_4d_float(c, src) || val(c, src)->dtype != val(c, x)->dtype) return -1;
    return src;
}

/* Is v the positions 0..n-1 along the last axis: reshape(range(0, n, 1)) or a constant
 * holding them (session-level folding makes one), of shape [.., n] with every other dim 1? */
static bool key_positions(const at_ctx *c, int v, int64_t n) {
    const gr_ir_value *x = val(c, v);
    if (!x->typed || x->ndim < 1 || x->ndim > 4 || !gr_dtype_is_int(x->dtype)) return false;
    for (int i = 0; i < x->ndim; i++)
        if (gr_dx_is_sym(x->dims[i]) || x->dims[i].size != (i == x->ndim - 1 ? n : 1)) return false;
    if (x->kind == GR_VAL_CONST) {
        if (!x->data) return false;
        for (int64_t j = 0; j < n; j++)
            if (gr_load_f64(x->data, x->dtype, j) != (double)j) return false;
        return true;
    }
    const gr_ir_node *p = producer(c, v, GR_OP_RESHAPE);
    if (p) v = p->in[0];
    const gr_ir_node *r = producer(c, v, GR_OP_RANGE);
    double start, limit, delta;
    if (!r || gr_ir_attr_float(c->g, r, "start", 0, &start) != GR_OK || gr_ir_attr_float(c->g, r, "limit", 0, &limit) != GR_OK ||
        gr_ir_attr_float(c->g, r, "delta", 1, &delta) != GR_OK)
        return gr_error_clear(), false;
    return start == 0 && delta == 1 && limit == (double)n && gr_ir_value_numel(val(c, v)) == n;
}

/* The key-length form the decode rewrite (passes/decode.c) puts before a softmax over a KV
 * cache of sk positions: w = where(less(positions, L), u, -inf), L one integer (the valid
 * length, read from the device). Its L, else -1. */
static int key_length_form(const at_ctx *c, const gr_ir_node *w, gr_dim sk) {
    if (w->n_in != 3 || w->n_out != 1 || gr_dx_is_sym(sk)) return -1;
    const gr_ir_value *fill = val(c, w->in[2]);
    if (fill->kind != GR_VAL_CONST || !fill->data || gr_ir_value_numel(fill) != 1 || !gr_dtype_is_float(fill->dtype) ||
        gr_load_f64(fill->data, fill->dtype, 0) != -INFINITY)
        return -1;
    const gr_ir_node *lt = producer(c, w->in[0], GR_OP_LESS);
    if (!lt || lt->n_in != 2 || !key_positions(c, lt->in[0], sk.size)) return -1;
    const gr_ir_value *L = val(c, lt->in[1]);
    if (!L->typed || L->dtype != GR_I64 || L->ndim > 4) return -1;
    for (int i = 0; i < L->ndim; i++)
        if (gr_dx_is_sym(L->dims[i]) || L->dims[i].size != 1) return -1;
    /* u keeps the where's shape: the condition only broadcasts along the keys */
    if (!same_dims(val(c, w->in[1]), val(c, w->out[0]), 4)) return -1;
    return lt->in[1];
}

/* p = where(isnan(x), 0, x) with x = softmax(..) read only there (the guard PyTorch's SDPA
 * export puts after the softmax: a row that sees no key is 0, as the fused kernel makes it):
 * the softmax, else NULL. */
static const gr_ir_node *nan_guarded_softmax(const at_ctx *c, int p) {
    const gr_ir_node *w = single_use_producer(c, p, GR_OP_WHERE);
    if (!w || w->n_in != 3) return NULL;
    int x = w->in[2];
    const gr_ir_node *nan = single_use_producer(c, w->in[0], GR_OP_ISNAN);
    if (!nan || nan->in[0] != x || c->readers[x] != 2) return NULL;
    const gr_ir_value *z = val(c, w->in[1]);
    if (z->kind != GR_VAL_CONST || !z->data || gr_ir_value_numel(z) != 1 || !gr_dtype_is_float(z->dtype) ||
        gr_load_f64(z->data, z->dtype, 0) != 0.0)
        return NULL;
    const gr_ir_value *xv = val(c, x);
    if (xv->kind != GR_VAL_NODE || xv->producer < 0) return NULL;
    const gr_ir_node *sm = &c->g->nodes.data[xv->producer];
    return sm->op == GR_OP_SOFTMAX && sm->n_out == 1 && same_dims(xv, val(c, p), 4) ? sm : NULL;
}

/* x = mul(y, k) or mul(k, y) with k a one-element constant, read only by its reader: folds k
 * into *scale and returns y (repeatedly: any number of such muls), else x. PyTorch's SDPA
 * export scales Q and K^T by sqrt(scale) each instead of the scores. */
static int strip_scalar_muls(const at_ctx *c, int x, double *scale) {
    for (;;) {
        const gr_ir_node *mul = single_use_producer(c, x, GR_OP_MUL);
        double k;
        int y;
        if (!mul || mul->n_in != 2) return x;
        if (scalar_const(c, mul->in[1], &k)) y = mul->in[0];
        else if (scalar_const(c, mul->in[0], &k)) y = mul->in[1];
        else return x;
        if (!is_4d_float(c, y) || !same_dims(val(c, y), val(c, x), 4) || val(c, y)->dtype != val(c, x)->dtype) return x;
        *scale *= k;
        x = y;
    }
}

/* ==== matching ================================================================================ */

typedef struct {
    int key_len;         /* the key-length form's L (key_length_form), or -1 */
    int q, k, v, mask;   /* values; k is [B,Hk,Sk,D] when k_perm is NULL */
    int k_src;           /* when >= 0: k = transpose(k_src, k_perm) must be made */
    int64_t k_perm[4];
    double scale;
    int64_t layout[4];   /* q, k, v, out: 0 [B,H,S,D], 1 [B,S,H,D] (ops.c) */
    int out_transpose;   /* node transposing O back to [B,S,H,D] (its only reader), or -1 */
} at_match;

static bool match(const at_ctx *c, const gr_ir_node *pv, at_match *m) {
    memset(m, 0, sizeof *m);
    m->mask = -1;
    m->k_src = -1;
    int64_t tb;
    double alpha;
    if (pv->n_in < 2 || !plain_matmul(c, pv, false, &tb, &alpha) || alpha != 1.0) return false;
    if (!is_4d_float(c, pv->in[0]) || !is_4d_float(c, pv->in[1]) || !is_4d_float(c, pv->out[0])) return false;
    const gr_ir_node *sm = single_use_producer(c, pv->in[0], GR_OP_SOFTMAX);
    if (!sm) sm = nan_guarded_softmax(c, pv->in[0]);
    if (!sm) return false;
    int64_t axis;
    if (gr_ir_attr_int(c->g, sm, "axis", -1, &axis) != GR_OK) return gr_error_clear(), false;
    if (axis != -1 && axis != 3) return false;
    int u = sm->in[0];
    m->key_len = -1;
    const gr_ir_node *kw = single_use_producer(c, u, GR_OP_WHERE);
    if (kw && is_4d_float(c, u)) {
        int L = key_length_form(c, kw, val(c, u)->dims[3]);
        if (L >= 0) m->key_len = L, u = kw->in[1];
    }
    int t = u;
    m->scale = 1.0;
    const gr_ir_node *add = single_use_producer(c, u, GR_OP_ADD);
    if (add) {
        /* the operand leading to the scores is the one with a scale or the matmul above it */
        for (int side = 0; side < 2; side++) {
            int a = add->in[side], b = add->in[1 - side];
            if ((single_use_producer(c, a, GR_OP_MUL) || single_use_producer(c, a, GR_OP_DIV) ||
                 single_use_producer(c, a, GR_OP_MATMUL)) &&
                is_4d_float(c, a) && same_dims(val(c, a), val(c, u), 4) && mask_fits(c, b, u)) {
                t = a;
                m->mask = b;
                break;
            }
        }
        if (m->mask < 0) return false;
    }
    /* scale: mul/div by one-element constants, in any number */
    for (;;) {
        const gr_ir_node *mul = single_use_producer(c, t, GR_OP_MUL), *div = single_use_producer(c, t, GR_OP_DIV);
        const gr_ir_node *op = mul ? mul : div;
        if (!op) break;
        double k;
        int x;
        if (scalar_const(c, op->in[1], &k)) x = op->in[0];
        else if (mul && scalar_const(c, op->in[0], &k)) x = op->in[1];
        else return false;
        if (!is_4d_float(c, x) || !same_dims(val(c, x), val(c, t), 4)) return false;
        m->scale = div ? m->scale / k : m->scale * k;
        t = x;
    }
    const gr_ir_node *qk = single_use_producer(c, t, GR_OP_MATMUL);
    if (!qk || qk->n_in < 2 || !plain_matmul(c, qk, true, &tb, &alpha)) return false;
    m->scale *= alpha;
    m->q = strip_scalar_muls(c, qk->in[0], &m->scale);
    m->v = pv->in[1];
    int kt = strip_scalar_muls(c, qk->in[1], &m->scale);
    if (!is_4d_float(c, m->q) || !is_4d_float(c, kt)) return false;
    const gr_ir_value *qv = val(c, m->q), *ktv = val(c, kt), *vv = val(c, m->v), *sv = val(c, t);
    if (qv->dtype != ktv->dtype || qv->dtype != vv->dtype || qv->dtype != sv->dtype) return false;
    /* f32 with head dims of 64 or 128 (the tiled f32 kernel's), f16/bf16 always; other f32
     * and f64 only where asked, or in a decode step (the key-length form): there the fused
     * kernel reads only the valid keys, where the unfused path runs five kernels over all of them */
    const bool half = qv->dtype == GR_F16 || qv->dtype == GR_BF16;
    const bool tiled_f32 = qv->dtype == GR_F32 && !gr_dx_is_sym(qv->dims[3]) && !gr_dx_is_sym(vv->dims[3]) &&
                           qv->dims[3].size == vv->dims[3].size && (qv->dims[3].size == 64 || qv->dims[3].size == 128);
    if (!c->include_f32 && m->key_len < 0 && !half && !tiled_f32) return false;
    /* the device kernels take head dims up to 256 */
    if (gr_dx_is_sym(qv->dims[3]) || qv->dims[3].size > 256 || gr_dx_is_sym(vv->dims[3]) || vv->dims[3].size > 256)
        return false;
    /* no batch broadcasting inside the matmuls: Q, K^T, V share [B, H] */
    if (!same_dims(qv, ktv, 2) || !same_dims(qv, vv, 2)) return false;
    gr_dim sk = tb ? ktv->dims[2] : ktv->dims[3], dk = tb ? ktv->dims[3] : ktv->dims[2];
    if (!gr_dx_equal(dk, qv->dims[3]) || !gr_dx_equal(sk, vv->dims[2])) return false;
    if (!gr_dx_equal(sv->dims[2], qv->dims[2]) || !gr_dx_equal(sv->dims[3], sk)) return false;
    if (tb) {
        m->k = kt;
    } else {
        const gr_ir_node *tr = producer(c, kt, GR_OP_TRANSPOSE);
        const int64_t *perm = NULL;
        int np = -1;
        if (tr && gr_ir_attr_ints(c->g, tr, "perm", &perm, &np) != GR_OK) gr_error_clear(), np = -1;
        if (tr && np == 4) {
            int64_t p[4] = {perm[0], perm[1], perm[3], perm[2]};
            bool ident = true;
            for (int i = 0; i < 4; i++) ident = ident && (p[i] == i || p[i] == i - 4);
            if (ident) m->k = tr->in[0];
            else {
                m->k_src = tr->in[0];
                memcpy(m->k_perm, p, sizeof p);
            }
        } else {
            m->k_src = kt;
            int64_t p[4] = {0, 1, 3, 2};
            memcpy(m->k_perm, p, sizeof p);
        }
    }
    /* grouped-query heads: read the kv heads before their repeat */
    if (m->k_src < 0) {
        int kk = repeat_kv_source(c, m->k), vk = repeat_kv_source(c, m->v);
        if (kk >= 0 && vk >= 0 && gr_dx_equal(val(c, kk)->dims[1], val(c, vk)->dims[1])) {
            m->k = kk;
            m->v = vk;
        }
    }
    /* layouts: read the [B,S,H,D] tensors the exporter transposed (see the top) */
    if (m->k_src >= 0 && swaps_heads_and_seq(m->k_perm, 4) && val(c, m->k_src)->dtype == qv->dtype) {
        m->k = m->k_src;
        m->k_src = -1;
        m->layout[1] = 1;
    }
    int *operand[3] = {&m->q, &m->k, &m->v};
    for (int i = 0; i < 3; i++) {
        if (i == 1 && (m->k_src >= 0 || m->layout[1])) continue;
        int src = bshd_source(c, *operand[i]);
        if (src >= 0) *operand[i] = src, m->layout[i] = 1;
    }
    m->out_transpose = -1;
    int o = pv->out[0];
    if (c->readers[o] == 1)
        for (int i = 0; i < c->g->nodes.len && m->out_transpose < 0; i++) {
            const gr_ir_node *n = &c->g->nodes.data[i];
            if (n->op != GR_OP_TRANSPOSE || n->n_in < 1 || n->in[0] != o || n->n_out != 1) continue;
            const int64_t *perm = NULL;
            int np = -1;
            if (gr_ir_attr_ints(c->g, n, "perm", &perm, &np) != GR_OK) gr_error_clear(), np = -1;
            if (swaps_heads_and_seq(perm, np) && val(c, n->out[0])->dtype == val(c, o)->dtype) {
                m->out_transpose = i;
                m->layout[3] = 1;
            }
        }
    return true;
}

/* ==== rewriting =============================================================================== */

/* Adds transpose(src, perm) at the end of the node list; its output in *out. */
static gr_status add_transpose(gr_graph *g, const char *base, int src, const int64_t *perm, int *out) {
    gr_ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)"perm";
    a.kind = GR_IR_ATTR_INTS;
    a.ints = (int64_t *)perm;
    a.n = 4;
    char name[300];
    snprintf(name, sizeof name, "%s.k", base);
    int node;
    GR_TRY(gr_ir_add_node(g, GR_OP_TRANSPOSE, gr_ir_find_node(g, name) < 0 ? name : NULL, 1, &src, 1, NULL, 1, &a, &node));
    *out = g->nodes.data[node].out[0];
    return gr_ir_infer_node(g, node);
}

/* Replaces node `at` (the P @ V matmul) by [transpose of K,] attention producing its output value. */
static gr_status rewrite(gr_graph *g, int at, const at_match *m) {
    int first_node = g->nodes.len;
    char base[256];
    snprintf(base, sizeof base, "%s", g->nodes.data[at].name);
    int k = m->k;
    gr_status st = GR_OK;
    if (m->k_src >= 0) st = add_transpose(g, base, m->k_src, m->k_perm, &k);
    gr_ir_attr attrs[3];
    memset(attrs, 0, sizeof attrs);
    attrs[0].name = (char *)"scale";
    attrs[0].kind = GR_IR_ATTR_FLOAT;
    attrs[0].f = m->scale;
    attrs[1].name = (char *)"causal";
    attrs[1].kind = GR_IR_ATTR_INT;
    attrs[1].i = 0;
    int64_t layout[4];
    memcpy(layout, m->layout, sizeof layout);
    attrs[2].name = (char *)"layout";
    attrs[2].kind = GR_IR_ATTR_INTS;
    attrs[2].ints = layout;
    attrs[2].n = 4;
    bool any_layout = layout[0] || layout[1] || layout[2] || layout[3];
    int in[5] = {m->q, k, m->v, m->mask, m->key_len};
    int n_in = m->key_len >= 0 ? 5 : m->mask >= 0 ? 4 : 3;
    char name[300];
    snprintf(name, sizeof name, "%s.attention", base);
    int node = -1;
    if (st == GR_OK)
        st = gr_ir_add_node(g, GR_OP_ATTENTION, gr_ir_find_node(g, name) < 0 ? name : NULL, n_in, in, 1, NULL,
                            any_layout ? 3 : 2, attrs, &node);
    if (st != GR_OK) {
        while (g->nodes.len > first_node) gr_ir_remove_last_node(g);
        return st;
    }
    /* the attention produces the matmul's own output value (readers keep their index) */
    int old_out = g->nodes.data[at].out[0];
    int fresh = g->nodes.data[node].out[0];
    g->nodes.data[node].out[0] = old_out;
    if (fresh == g->values.len - 1) {
        gr_strfree(g->values.data[fresh].name);
        g->values.len--;
    }
    /* O is written [B,S,H,D]: the transpose back to that becomes the identity (a view) */
    if (m->out_transpose >= 0) {
        gr_ir_attr *perm = (gr_ir_attr *)gr_ir_attr_find(&g->nodes.data[m->out_transpose], "perm");
        for (int i = 0; perm && i < 4 && i < perm->n; i++) perm->ints[i] = i;
    }
    gr_ir_splice_nodes(g, at, first_node);
    return GR_OK;
}

static gr_status count_readers(at_ctx *c) {
    gr_graph *g = c->g;
    if (c->readers) gr_free(c->readers, c->readers_bytes);
    c->readers_bytes = sizeof(int) * (size_t)(g->values.len + 1);
    c->readers = gr_calloc((size_t)(g->values.len + 1), sizeof(int));
    if (!c->readers) return c->readers_bytes = 0, GR_ERR_NOMEM;
    for (int i = 0; i < g->nodes.len; i++)
        for (int j = 0; j < g->nodes.data[i].n_in; j++)
            if (g->nodes.data[i].in[j] >= 0) c->readers[g->nodes.data[i].in[j]]++;
    for (int i = 0; i < g->outputs.len; i++) c->readers[g->outputs.data[i]]++;
    return GR_OK;
}

gr_status gr_pass_fuse_attention(gr_graph *g, bool include_f32, int *n_fused) {
    if (n_fused) *n_fused = 0;
    at_ctx c = {.g = g, .include_f32 = include_f32, .readers = NULL, .readers_bytes = 0};
    gr_status st = count_readers(&c);
    int fused = 0;
    for (int i = 0; i < g->nodes.len && st == GR_OK; i++) {
        if (g->nodes.data[i].op != GR_OP_MATMUL) continue;
        at_match m;
        if (!match(&c, &g->nodes.data[i], &m)) continue;
        st = rewrite(g, i, &m);
        if (st != GR_OK) break;
        fused++;
        /* the rewrite moved nodes and may have added values: count again */
        st = count_readers(&c);
    }
    if (c.readers) gr_free(c.readers, c.readers_bytes);
    if (st == GR_OK && fused) st = gr_ir_infer_shapes(g);
    if (n_fused) *n_fused = fused;
    return st;
}
