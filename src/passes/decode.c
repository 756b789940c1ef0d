/* passes/decode — the KV-cache rewrite: one decode step of fixed shapes for every position.
 *
 * A decoder exported as one step reads its cache as inputs `past` [.., past, ..] and
 * returns `present = concat(past, new)` along the sequence axis, so every step is a new
 * shape (a new plan, a new CUDA graph). This pass builds, from the symbolic step graph,
 * a graph of ONE concrete shape for a single-token step (seq 1) at batch b:
 *
 *   - every state input is a buffer of max_len positions on its sequence axis, and the
 *     concat becomes cache_write(past, new, kv_len; axis, delta = -1) (ir/ops.c): the new
 *     token's keys and values are written at position kv_len - 1, kv_len being the device
 *     input `graft.kv_len` (the number of valid positions after this step), in place into
 *     the input's placeholder (gr_ir_value.inplace_of, memory planning): the next step
 *     reads them there. The lowering then writes only the new entries (a scatter store),
 *     where a where(position == kv_len - 1, new, past) walked the whole cache every step;
 *   - the model is specialized at past = max_len - 1 (and every symbol that moves with
 *     it, such as the attention mask's `total`), so each tensor along the cache axis is
 *     max_len long: positions >= kv_len are padding;
 *   - padding must not reach a result: a softmax over a cache axis reads -inf there
 *     (where(position < valid, x, -inf), valid from graft.kv_len), which makes its
 *     output exactly 0 there; a matmul that contracts over a cache axis needs both
 *     operands zero in the padding (state buffers are zero there: only positions < kv_len
 *     are ever written; softmax outputs are after the mask), or gets the same where(.., 0)
 *     on the operand that is not; any other reduction over a cache axis is refused
 *     (GR_ERR_UNSUPPORTED naming the node: the caller keeps the per-length plans).
 *
 * Which axes are cache axes comes from the symbolic graph: an axis whose extent grows by
 * one from the binding at past = max_len - 2 to the one at past = max_len - 1 (the caller
 * passes both bindings); its valid length is kv_len plus the constant by which its extent
 * differs from max_len. Values that the model derives from `past` as numbers are taken at
 * past = max_len - 1; for a single-token step that is what a causal mask needs (every
 * earlier position visible), and the caller checks the rewritten step against the
 * per-length step before trusting it (runtime/decode.c), so a model that computes
 * positions from the cache length is caught, not answered wrongly. */
#include "passes/passes.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- small builders ---------------------------------------------------------------------- */
static gr_status node1(gr_graph *g, gr_op op, const char *name, int n_in, const int *in, int n_attr,
                       const gr_ir_attr *attrs, int *out_value) {
    int n;
    GR_TRY(gr_ir_add_node(g, op, name, n_in, in, 1, NULL, n_attr, attrs, &n));
    *out_value = g->nodes.data[n].out[0];
    return GR_OK;
}

static gr_status const_i64(gr_graph *g, int64_t v, int *out) {
    int64_t dims[1] = {1};
    return gr_ir_add_const(g, NULL, GR_I64, 1, dims, &v, out);
}

/* A scalar constant of dtype t holding v (f32/f16/bf16/f64). */
static gr_status const_scalar(gr_graph *g, gr_dtype t, double v, int *out) {
    unsigned char buf[8];
    if (t == GR_F32) {
        float f = (float)v;
        memcpy(buf, &f, 4);
    } else if (t == GR_F64) {
        memcpy(buf, &v, 8);
    } else if (t == GR_F16 || t == GR_BF16) {
        uint16_t h = t == GR_F16 ? gr_f32_to_half((float)v) : gr_f32_to_bf16((float)v);
        memcpy(buf, &h, 2);
    } else {
        return gr_error(GR_ERR_UNSUPPORTED, "decode rewrite: no %s constant for a mask", gr_dtype_name(t));
    }
    return gr_ir_add_const(g, NULL, t, 0, NULL, buf, out);
}

/* Positions 0..n-1 along axis `axis` of a rank-`rank` value: i64 [n, 1, ..., 1] (rank - axis dims). */
static gr_status positions(gr_graph *g, int64_t n, int axis, int rank, int *out) {
    gr_ir_attr a[4];
    memset(a, 0, sizeof a);
    a[0] = (gr_ir_attr){.name = "start", .kind = GR_IR_ATTR_FLOAT, .f = 0};
    a[1] = (gr_ir_attr){.name = "limit", .kind = GR_IR_ATTR_FLOAT, .f = (double)n};
    a[2] = (gr_ir_attr){.name = "delta", .kind = GR_IR_ATTR_FLOAT, .f = 1};
    a[3] = (gr_ir_attr){.name = "dtype", .kind = GR_IR_ATTR_STRING, .s = "i64"};
    int r;
    GR_TRY(node1(g, GR_OP_RANGE, NULL, 0, NULL, 4, a, &r));
    int64_t shape[GR_MAX_DIMS];
    int nd = rank - axis;
    shape[0] = n;
    for (int i = 1; i < nd; i++) shape[i] = 1;
    gr_ir_attr s = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = shape, .n = nd};
    return node1(g, GR_OP_RESHAPE, NULL, 1, &r, 1, &s, out);
}

/* ---- which axes are cache axes ---------------------------------------------------------- */
typedef struct {
    uint32_t *pad;    /* per value: bit d = axis d grows with the cache */
    int64_t *delta;   /* per value * GR_MAX_DIMS: extent - max_len on a cache axis (valid = kv_len + delta) */
    uint32_t *zero;   /* per value: bit d = zero at every padding position of axis d */
    int cap;
} pad_info;

static void pad_free(pad_info *p) {
    gr_free(p->pad, sizeof(uint32_t) * (size_t)p->cap);
    gr_free(p->delta, sizeof(int64_t) * GR_MAX_DIMS * (size_t)p->cap);
    gr_free(p->zero, sizeof(uint32_t) * (size_t)p->cap);
    memset(p, 0, sizeof *p);
}

static gr_status pad_grow(pad_info *p, int n) {
    if (n <= p->cap) return GR_OK;
    int cap = n + n / 2 + 16;
    uint32_t *pad = gr_calloc((size_t)cap, sizeof(uint32_t));
    int64_t *delta = gr_calloc((size_t)cap * GR_MAX_DIMS, sizeof(int64_t));
    uint32_t *zero = gr_calloc((size_t)cap, sizeof(uint32_t));
    if (!pad || !delta || !zero) {
        gr_free(pad, sizeof(uint32_t) * (size_t)cap);
        gr_free(delta, sizeof(int64_t) * GR_MAX_DIMS * (size_t)cap);
        gr_free(zero, sizeof(uint32_t) * (size_t)cap);
        return GR_ERR_NOMEM;
    }
    if (p->cap) {
        memcpy(pad, p->pad, sizeof(uint32_t) * (size_t)p->cap);
        memcpy(delta, p->delta, sizeof(int64_t) * GR_MAX_DIMS * (size_t)p->cap);
        memcpy(zero, p->zero, sizeof(uint32_t) * (size_t)p->cap);
    }
    pad_free(p);
    p->pad = pad, p->delta = delta, p->zero = zero, p->cap = cap;
    return GR_OK;
}

/* ---- the rewrite ------------------------------------------------------------------------- */
static gr_status refuse(const gr_graph *g, int node, const char *why) {
    char where[512] = "graph";
    if (node >= 0 && node < g->nodes.len) gr_ir_node_where(g, &g->nodes.data[node], where, sizeof where);
    return gr_error(GR_ERR_UNSUPPORTED, "decode rewrite: %s: %s", where, why);
}

/* The valid length of a cache axis: kv_len + delta (i64 [1]). */
static gr_status valid_length(gr_graph *g, int kv_len, int64_t delta, int *out) {
    *out = kv_len;
    if (delta == 0) return GR_OK;
    int c;
    GR_TRY(const_i64(g, delta, &c));
    int in[2] = {kv_len, c};
    return node1(g, GR_OP_ADD, NULL, 2, in, 0, NULL, out);
}

/* where(position < kv_len + delta, x, fill) along `axis`: the value to read instead of x. */
static gr_status masked(gr_graph *g, int x, int axis, int64_t delta, int kv_len, double fill, int *out) {
    const gr_ir_value *xv = &g->values.data[x];
    int rank = xv->ndim;
    gr_dtype t = xv->dtype;
    int64_t extent = xv->dims[axis].size;
    int pos, valid, cond, f;
    GR_TRY(positions(g, extent, axis, rank, &pos));
    GR_TRY(valid_length(g, kv_len, delta, &valid));
    int in[2] = {pos, valid};
    GR_TRY(node1(g, GR_OP_LESS, NULL, 2, in, 0, NULL, &cond));
    GR_TRY(const_scalar(g, t, fill, &f));
    int w[3] = {cond, x, f};
    return node1(g, GR_OP_WHERE, NULL, 3, w, 0, NULL, out);
}

static int norm_axis(int64_t a, int rank) { return (int)(a < 0 ? a + rank : a); }

gr_status gr_pass_decode_rewrite(const gr_graph *src, const gr_decode_spec *spec, gr_graph **out) {
    *out = NULL;
    if (spec->max_len < 2) return gr_error(GR_ERR_INVALID, "decode rewrite: max_len %lld is below 2", (long long)spec->max_len);
    int nv0 = src->values.len;
    pad_info pi = {0};
    gr_graph *g = NULL;
    bool *live = NULL; /* per value (below n_live): an output needs it */
    int n_live = 0;
    gr_status st = pad_grow(&pi, nv0);
    if (st != GR_OK) return st;
    /* cache axes from the symbolic dims at the two bindings */
    for (int v = 0; v < nv0; v++) {
        const gr_ir_value *val = &src->values.data[v];
        if (!val->typed) continue;
        for (int d = 0; d < val->ndim; d++) {
            if (!gr_dx_is_sym(val->dims[d])) continue;
            int64_t a, b;
            if (gr_dx_eval(src, val->dims[d], spec->sym_at_max, &a) != GR_OK ||
                gr_dx_eval(src, val->dims[d], spec->sym_at_max_minus1, &b) != GR_OK) {
                gr_error_clear();
                continue;
            }
            if (a == b) continue;
            pi.pad[v] |= 1u << d;
            /* a merged axis (batch * total) moves by more than one: a cache axis whose
             * valid length is not kv_len + constant; only movement and indexing may touch it */
            pi.delta[v * GR_MAX_DIMS + d] = a - b == 1 ? a - spec->max_len : INT64_MIN;
        }
    }
    if ((st = gr_ir_graph_clone_borrow(src, &g)) != GR_OK) goto fail;
    if ((st = gr_ir_specialize(g, spec->sym_at_max)) != GR_OK) goto fail;
    int kv_len;
    {
        gr_dim d1 = gr_dx_const(1);
        if ((st = gr_ir_add_input(g, "graft.kv_len", GR_I64, 1, &d1, &kv_len)) != GR_OK) goto fail;
    }
    /* state: present = concat(past chain, new) -> cache_write(past, new, kv_len; axis, -1) */
    for (int i = 0; i < spec->n_state; i++) {
        int past = gr_ir_find_value(g, spec->past[i]), pres = gr_ir_find_value(g, spec->present[i]);
        if (past < 0 || g->values.data[past].kind != GR_VAL_INPUT) {
            st = gr_error(GR_ERR_INVALID, "decode rewrite: state input '%s' is not an input of the model", spec->past[i]);
            goto fail;
        }
        int cn = pres >= 0 ? g->values.data[pres].producer : -1;
        if (cn < 0 || g->nodes.data[cn].op != GR_OP_CONCAT || g->nodes.data[cn].n_in != 2) {
            st = gr_error(GR_ERR_UNSUPPORTED,
                          "decode rewrite: state output '%s' is not made by a two-input Concat of its past '%s' and the new "
                          "entries",
                          spec->present[i], spec->past[i]);
            goto fail;
        }
        gr_ir_node *c = &g->nodes.data[cn];
        /* the first operand must be the past input itself or single-input concats / identities of it */
        int first = c->in[0], guard = 0;
        while (first != past && guard++ < 8) {
            int p = g->values.data[first].producer;
            if (p < 0) break;
            const gr_ir_node *pn = &g->nodes.data[p];
            if (!((pn->op == GR_OP_CONCAT || pn->op == GR_OP_IDENTITY) && pn->n_in == 1)) break;
            first = pn->in[0];
        }
        if (first != past) {
            st = refuse(g, cn, "its first operand is not the state input (the cache must grow by concat(past, new))");
            goto fail;
        }
        int64_t axis64;
        if ((st = gr_ir_attr_int(g, c, "axis", 0, &axis64)) != GR_OK) goto fail;
        gr_ir_value *pv = &g->values.data[past];
        int axis = norm_axis(axis64, pv->ndim);
        if (axis < 0 || axis >= pv->ndim || !(pi.pad[past] & (1u << axis)) || pv->dims[axis].size != spec->max_len - 1 ||
            g->values.data[c->in[1]].dims[axis].size != 1) {
            st = refuse(g, cn, "the concat axis is not the cache axis of a single-token step");
            goto fail;
        }
        /* only the concat chain may read the past input: anything else would see the new entry */
        for (int n = 0; n < g->nodes.len; n++) {
            const gr_ir_node *nd = &g->nodes.data[n];
            for (int k = 0; k < nd->n_in; k++) {
                if (nd->in[k] != past || n == cn) continue;
                bool chain = (nd->op == GR_OP_CONCAT || nd->op == GR_OP_IDENTITY) && nd->n_in == 1;
                if (!chain) {
                    st = refuse(g, n, "reads a KV-cache input other than to grow it");
                    goto fail;
                }
            }
        }
        pv->dims[axis].size = spec->max_len;
        int newv = c->in[1];
        for (int a = 0; a < c->n_attr; a++) gr_ir_attr_free(&c->attrs[a]);
        if (!(c->slab & GR_NODE_SLAB_ATTRS)) gr_free(c->attrs, (size_t)c->n_attr * sizeof(gr_ir_attr));
        c->slab &= (uint8_t)~GR_NODE_SLAB_ATTRS;
        c->attrs = NULL, c->n_attr = 0;
        gr_ir_node_free_inputs(c);
        gr_ir_attr ca[2];
        memset(ca, 0, sizeof ca);
        ca[0] = (gr_ir_attr){.name = "axis", .kind = GR_IR_ATTR_INT, .i = axis};
        ca[1] = (gr_ir_attr){.name = "delta", .kind = GR_IR_ATTR_INT, .i = -1};
        int *in3 = gr_malloc(3 * sizeof(int));
        gr_ir_attr *at = gr_calloc(2, sizeof(gr_ir_attr));
        st = in3 && at ? GR_OK : GR_ERR_NOMEM;
        for (int a = 0; a < 2 && st == GR_OK; a++) st = gr_ir_attr_copy(&at[a], &ca[a]);
        if (st != GR_OK) { /* the node keeps no inputs and no attributes: the graph is freed below */
            for (int a = 0; at && a < 2; a++) gr_ir_attr_free(&at[a]);
            gr_free(at, 2 * sizeof(gr_ir_attr));
            gr_free(in3, 3 * sizeof(int));
            goto fail;
        }
        c->in = in3, c->n_in = 3;
        c->attrs = at, c->n_attr = 2;
        c->in[0] = past, c->in[1] = newv, c->in[2] = kv_len;
        c->op = GR_OP_CACHE_WRITE;
        c->attrs_checked = false;
        g->values.data[pres].inplace_of = past + 1;
    }
    if ((st = pad_grow(&pi, g->values.len + 64)) != GR_OK) goto fail;
    /* padding must not reach a result: masks before softmax, zero operands for contractions */
    if ((st = gr_ir_topo_sort(g, "decode rewrite")) != GR_OK) goto fail;
    if ((st = gr_ir_infer_shapes(g)) != GR_OK) goto fail;
    /* state inputs and their updates are zero in the padding (only positions < kv_len are written) */
    for (int i = 0; i < spec->n_state; i++) {
        int past = gr_ir_find_value(g, spec->past[i]), pres = gr_ir_find_value(g, spec->present[i]);
        pi.zero[past] = pi.pad[past];
        pi.zero[pres] = pi.pad[pres];
    }
    /* nodes no output needs are left alone: the unread ones a fused attention replaced (the
     * session's precision pass fuses first) would otherwise get masks that read graft.kv_len
     * and lead nowhere; compilation drops them */
    n_live = g->values.len;
    live = gr_calloc((size_t)n_live + 1, sizeof(bool));
    if (!live) {
        st = GR_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < g->outputs.len; i++) live[g->outputs.data[i]] = true;
    for (int n = g->nodes.len - 1; n >= 0; n--) {
        const gr_ir_node *nd = &g->nodes.data[n];
        bool any = false;
        for (int k = 0; k < nd->n_out; k++) any |= nd->out[k] >= 0 && live[nd->out[k]];
        if (any)
            for (int k = 0; k < nd->n_in; k++)
                if (nd->in[k] >= 0) live[nd->in[k]] = true;
    }
    for (int n = 0; n < g->nodes.len; n++) {
        gr_ir_node *nd = &g->nodes.data[n];
        if (nd->n_out < 1) continue;
        bool needed = false;
        for (int k = 0; k < nd->n_out; k++) needed |= nd->out[k] < 0 || nd->out[k] >= n_live || live[nd->out[k]];
        if (!needed) continue;
        int o = nd->out[0];
        if ((st = pad_grow(&pi, g->values.len + 64)) != GR_OK) goto fail;
        uint32_t in_pad = 0;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0 && nd->in[k] < pi.cap) in_pad |= pi.pad[nd->in[k]];
        if (!in_pad && !pi.pad[o]) continue;
        if (g->values.data[o].inplace_of) continue; /* a state update: zero-padded by construction */
        if (!g->values.data[o].typed) continue;     /* a mask added by this loop: safe by construction */
        const gr_op_info *info = gr_op_get(nd->op);
        int x = nd->n_in > 0 ? nd->in[0] : -1;
        const gr_ir_value *xv = x >= 0 ? &g->values.data[x] : NULL;
        const gr_ir_value *ov = &g->values.data[o];
        if (x >= 0 && x < nv0 && !src->values.data[x].typed && info->kind == GR_OPK_REDUCE) {
            st = refuse(g, n, "its input's shape is not known symbolically, so graft cannot tell whether it spans the KV cache");
            goto fail;
        }
        switch (nd->op) {
        case GR_OP_WHERE: {
            /* zero in the padding when both picks are (a constant 0 counts) */
            uint32_t z = pi.pad[o];
            for (int k = 1; k < 3 && k < nd->n_in; k++) {
                const gr_ir_value *kv = &g->values.data[nd->in[k]];
                bool zero_const = kv->kind == GR_VAL_CONST && gr_ir_value_numel(kv) == 1 && kv->data &&
                                  gr_dtype_is_float(kv->dtype) && gr_load_f64(kv->data, kv->dtype, 0) == 0.0;
                if (!zero_const) z &= kv->ndim <= ov->ndim ? pi.zero[nd->in[k]] << (ov->ndim - kv->ndim) : 0;
            }
            pi.zero[o] = z;
            continue;
        }
        case GR_OP_CAST:
            pi.zero[o] = pi.zero[x];
            continue;
        case GR_OP_SOFTMAX: {
            int64_t ax;
            if ((st = gr_ir_attr_int(g, nd, "axis", -1, &ax)) != GR_OK) goto fail;
            int a = norm_axis(ax, xv->ndim);
            if (!(pi.pad[x] & (1u << a))) {
                pi.zero[o] = 0;
                continue;
            }
            int64_t delta = pi.delta[x * GR_MAX_DIMS + a];
            if (delta == INT64_MIN) {
                st = refuse(g, n, "normalizes over an axis that merges the KV-cache axis with others");
                goto fail;
            }
            int m;
            if ((st = masked(g, x, a, delta, kv_len, -INFINITY, &m)) != GR_OK) goto fail;
            nd = &g->nodes.data[n];
            nd->in[0] = m;
            if ((st = pad_grow(&pi, g->values.len + 64)) != GR_OK) goto fail;
            pi.pad[m] = pi.pad[x];
            pi.zero[o] = pi.pad[o];
            continue;
        }
        case GR_OP_MATMUL: {
            int b = nd->in[1];
            const gr_ir_value *bv = &g->values.data[b];
            if (xv->ndim < 2 || bv->ndim < 2) {
                st = refuse(g, n, "a matrix-vector product over the KV cache");
                goto fail;
            }
            int ak = xv->ndim - 1, bk = bv->ndim - 2;
            bool a_pad = pi.pad[x] & (1u << ak), b_pad = pi.pad[b] & (1u << bk);
            if (!a_pad && !b_pad) continue;
            if (!(a_pad && b_pad)) {
                st = refuse(g, n, "contracts a KV-cache axis with an axis that is not one");
                goto fail;
            }
            int64_t delta = pi.delta[x * GR_MAX_DIMS + ak];
            if (delta == INT64_MIN || delta != pi.delta[b * GR_MAX_DIMS + bk]) {
                st = refuse(g, n, "contracts KV-cache axes of different lengths");
                goto fail;
            }
            for (int side = 0; side < 2; side++) {
                int v = nd->in[side], axis = side ? bk : ak;
                if (pi.zero[v] & (1u << axis)) continue;
                int m;
                if ((st = masked(g, v, axis, delta, kv_len, 0.0, &m)) != GR_OK) goto fail;
                nd = &g->nodes.data[n];
                nd->in[side] = m;
                if ((st = pad_grow(&pi, g->values.len + 64)) != GR_OK) goto fail;
                pi.pad[m] = pi.pad[v];
                pi.zero[m] = pi.pad[v];
            }
            continue;
        }
        case GR_OP_ATTENTION: {
            /* a fused attention (a session's precision pass fuses before this rewrite) over a
             * cache: it reads the valid length as its key_len input and visits only those keys */
            int layout[4];
            if ((st = gr_ir_attention_layout(g, nd, layout)) != GR_OK) goto fail;
            int q = nd->in[0], k = nd->in[1], v = nd->in[2];
            int ka = gr_ir_attention_seq_axis(layout[1]), va = gr_ir_attention_seq_axis(layout[2]);
            bool k_pad = pi.pad[k] & (1u << ka), v_pad = pi.pad[v] & (1u << va);
            if ((pi.pad[k] & ~(1u << ka)) || (pi.pad[v] & ~(1u << va)) || pi.pad[q]) {
                st = refuse(g, n, "a KV-cache axis in an attention operand that is not the keys' axis");
                goto fail;
            }
            if (!k_pad && !v_pad) {
                pi.zero[o] = 0;
                continue;
            }
            int64_t delta = pi.delta[k * GR_MAX_DIMS + ka];
            if (!(k_pad && v_pad) || delta == INT64_MIN || delta != pi.delta[v * GR_MAX_DIMS + va]) {
                st = refuse(g, n, "attends over keys and values whose KV-cache lengths differ");
                goto fail;
            }
            if (nd->n_in > 4 && nd->in[4] >= 0) {
                st = refuse(g, n, "the attention has a key length of its own already");
                goto fail;
            }
            int valid;
            if ((st = valid_length(g, kv_len, delta, &valid)) != GR_OK) goto fail;
            nd = &g->nodes.data[n];
            int *in5 = gr_malloc(5 * sizeof(int));
            if (!in5) {
                st = GR_ERR_NOMEM;
                goto fail;
            }
            for (int k5 = 0; k5 < 4; k5++) in5[k5] = k5 < nd->n_in ? nd->in[k5] : -1;
            in5[4] = valid;
            gr_ir_node_free_inputs(nd);
            nd->in = in5;
            nd->n_in = 5;
            nd->attrs_checked = false;
            pi.zero[o] = 0;
            continue;
        }
        case GR_OP_TRANSPOSE: {
            const int64_t *perm;
            int np;
            if ((st = gr_ir_attr_ints(g, nd, "perm", &perm, &np)) != GR_OK) goto fail;
            uint32_t z = 0;
            for (int d = 0; d < ov->ndim; d++) {
                int64_t from = np < 0 ? xv->ndim - 1 - d : (d < np ? perm[d] : -1);
                if (from >= 0 && from < GR_MAX_DIMS && (pi.zero[x] & (1u << from))) z |= 1u << d;
            }
            pi.zero[o] = z & pi.pad[o];
            continue;
        }
        case GR_OP_CONCAT: {
            int64_t ax;
            if ((st = gr_ir_attr_int(g, nd, "axis", 0, &ax)) != GR_OK) goto fail;
            if (nd->n_in > 1 && (pi.pad[o] & (1u << norm_axis(ax, ov->ndim)))) {
                st = refuse(g, n, "concatenates along a KV-cache axis (only the cache's own growth can be rewritten)");
                goto fail;
            }
        }
        /* fall through */
        case GR_OP_RESHAPE:
        case GR_OP_EXPAND:
        case GR_OP_UNSQUEEZE:
        case GR_OP_SQUEEZE:
        case GR_OP_IDENTITY:
        case GR_OP_SLICE: {
            /* movement: an output cache axis is zero-padded when the input axis it comes from
             * is (matched by extent and the product of the leading extents; expand aligns
             * from the right) */
            uint32_t z = 0;
            int64_t lead_o = 1;
            for (int d = 0; d < ov->ndim; d++) {
                if (pi.pad[o] & (1u << d)) {
                    bool all_zero = true;
                    int n_src = nd->op == GR_OP_CONCAT ? nd->n_in : 1;
                    for (int k = 0; k < n_src && all_zero; k++) {
                        const gr_ir_value *iv = &g->values.data[nd->in[k]];
                        bool found = false;
                        int64_t lead_i = 1;
                        int off = ov->ndim - iv->ndim;
                        for (int e = 0; e < iv->ndim; e++) {
                            bool same = nd->op == GR_OP_EXPAND ? e + off == d
                                                               : (lead_i == lead_o && iv->dims[e].size == ov->dims[d].size);
                            if (same && (pi.zero[nd->in[k]] & (1u << e))) found = true;
                            lead_i *= iv->dims[e].size;
                        }
                        all_zero = found;
                    }
                    if (all_zero) z |= 1u << d;
                }
                lead_o *= ov->dims[d].size;
            }
            pi.zero[o] = z;
            continue;
        }
        case GR_OP_GATHER:
        case GR_OP_GATHER_ELEMENTS:
        case GR_OP_SPLIT:
            continue; /* indexing with positions computed for the padded layout; splits keep axes */
        default:
            break;
        }
        if (info->kind == GR_OPK_UNARY || info->kind == GR_OPK_BINARY || info->kind == GR_OPK_COMPARE ||
            info->kind == GR_OPK_GEN)
            continue; /* elementwise: padding stays in the padding */
        if (info->kind == GR_OPK_REDUCE) {
            uint32_t reduced = 0;
            if (nd->op == GR_OP_LAYER_NORM || nd->op == GR_OP_ARG_MAX || nd->op == GR_OP_ARG_MIN) {
                int64_t ax;
                if ((st = gr_ir_attr_int(g, nd, "axis", nd->op == GR_OP_LAYER_NORM ? -1 : 0, &ax)) != GR_OK) goto fail;
                int a = norm_axis(ax, xv->ndim);
                for (int d = a; d < (nd->op == GR_OP_LAYER_NORM ? xv->ndim : a + 1); d++) reduced |= 1u << d;
            } else {
                const int64_t *axes;
                int na;
                if ((st = gr_ir_attr_ints(g, nd, "axes", &axes, &na)) != GR_OK) goto fail;
                if (na < 0) reduced = ~0u;
                for (int k = 0; k < na; k++) reduced |= 1u << norm_axis(axes[k], xv->ndim);
            }
            if (reduced & pi.pad[x]) {
                st = refuse(g, n, "reduces over a KV-cache axis (graft cannot prove the padding neutral)");
                goto fail;
            }
            continue;
        }
        st = refuse(g, n, "an operation graft does not know to be safe on a padded KV-cache axis");
        goto fail;
    }
    if ((st = gr_ir_topo_sort(g, "decode rewrite")) != GR_OK) goto fail;
    if ((st = gr_ir_infer_shapes(g)) != GR_OK) goto fail;
    if ((st = gr_ir_verify(g)) != GR_OK) goto fail;
    /* one shape for every position: no dim of this graph varies between runs, so none is
     * kept from being structurally 1 (gr_ir_value.var_dims, set by the specialization above
     * for the symbolic graph's batch and seq): a split of the fused q/k/v projection along
     * its last axis, with only 1s before it, is then a view instead of a copy kernel per part */
    for (int v = 0; v < g->values.len; v++) g->values.data[v].var_dims = 0;
    pad_free(&pi);
    gr_free(live, (size_t)n_live + 1);
    *out = g;
    return GR_OK;
fail:
    pad_free(&pi);
    gr_free(live, (size_t)n_live + 1);
    gr_ir_graph_destroy(g);
    return st;
}

/* ---- the decode loop on the device -------------------------------------------------------- */
static gr_status cast_to(gr_graph *g, int x, gr_dtype t, int *out) {
    if (g->values.data[x].typed && g->values.data[x].dtype == t) {
        *out = x;
        return GR_OK;
    }
    gr_ir_attr a = {.name = "to", .kind = GR_IR_ATTR_STRING, .s = (char *)gr_dtype_name(t)};
    return node1(g, GR_OP_CAST, NULL, 1, &x, 1, &a, out);
}

static gr_status binary(gr_graph *g, gr_op op, int a, int b, int *out) {
    int in[2] = {a, b};
    return node1(g, op, NULL, 2, in, 0, NULL, out);
}

static gr_status shaped(gr_graph *g, gr_op op, int x, int ndim, const int64_t *dims, int *out) {
    gr_ir_attr s = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)dims, .n = ndim};
    return node1(g, op, NULL, 1, &x, 1, &s, out);
}

/* min over every element of a rank-nd i64 value, as [1] */
static gr_status min_all(gr_graph *g, int x, int nd, int *out) {
    int64_t axes[GR_MAX_DIMS], one[1] = {1};
    for (int d = 0; d < nd; d++) axes[d] = d;
    gr_ir_attr a[2];
    memset(a, 0, sizeof a);
    a[0] = (gr_ir_attr){.name = "axes", .kind = GR_IR_ATTR_INTS, .ints = axes, .n = nd};
    a[1] = (gr_ir_attr){.name = "keepdims", .kind = GR_IR_ATTR_INT, .i = 0};
    int m;
    GR_TRY(node1(g, GR_OP_REDUCE_MIN, NULL, 1, &x, 2, a, &m));
    return shaped(g, GR_OP_RESHAPE, m, 1, one, out);
}

/* An output named `name`, written in place into input `into` (-1: none). */
static gr_status loop_output(gr_graph *g, int v, const char *name, int into) {
    GR_TRY(gr_ir_rename_value(g, v, name));
    g->values.data[v].inplace_of = into >= 0 ? into + 1 : 0;
    return gr_ir_add_output(g, v);
}

static int loop_input(const gr_graph *g, const char *name);

/* x[:, lo:hi] of a rank-2 value */
static gr_status cols(gr_graph *g, int x, int64_t lo, int64_t hi, int *out) {
    int64_t starts[1] = {lo}, ends[1] = {hi}, axes[1] = {1};
    gr_ir_attr a[3];
    memset(a, 0, sizeof a);
    a[0] = (gr_ir_attr){.name = "starts", .kind = GR_IR_ATTR_INTS, .ints = starts, .n = 1};
    a[1] = (gr_ir_attr){.name = "ends", .kind = GR_IR_ATTR_INTS, .ints = ends, .n = 1};
    a[2] = (gr_ir_attr){.name = "axes", .kind = GR_IR_ATTR_INTS, .ints = axes, .n = 1};
    return node1(g, GR_OP_SLICE, NULL, 1, &x, 3, a, out);
}

/* Beam search's additions to the loop (gr_decode_loop_spec): the state, the cache reorder and the
 * step; *tok is the next token ids [rows, 1] (i64), *done the batch rows' done flags [batch, 1]. */
static gr_status beam_loop(gr_graph *g, const gr_decode_loop_spec *spec, int kv, int lo, int64_t rows, int *tok, int *done) {
    int64_t K = spec->beams, batch = rows / K, V = g->values.data[lo].dims[2].size;
    if (K < 2 || rows % K != 0 || spec->room < 1)
        return gr_error(GR_ERR_INVALID, "decode loop: %lld rows of %lld beams (room %lld)", (long long)rows, (long long)K, (long long)spec->room);
    gr_beam_params p = {.beams = K, .vocab = V, .max_new = spec->room, .stride = spec->room};
    gr_beam_layout l;
    GR_TRY(gr_beam_state_layout(&p, &l));
    int state, params;
    gr_dim d_state[2] = {gr_dx_const(batch), gr_dx_const(l.slots)}, d_p[1] = {gr_dx_const(GR_BEAM_NPARAMS)};
    GR_TRY(gr_ir_add_input(g, "graft.beam", GR_I64, 2, d_state, &state));
    GR_TRY(gr_ir_add_input(g, "graft.beam_params", GR_I64, 1, d_p, &params));
    /* the cache rows the beams continue (the last step's src), read before this step appends */
    int src_cols, src;
    int64_t r1[1] = {rows};
    GR_TRY(cols(g, state, l.src, l.src + K, &src_cols));
    GR_TRY(shaped(g, GR_OP_RESHAPE, src_cols, 1, r1, &src));
    for (int k = 0; k < spec->n_state; k++) {
        int past = loop_input(g, spec->past[k]), upd = -1;
        for (int v = 0; v < g->values.len && past >= 0; v++) {
            const gr_ir_value *val = &g->values.data[v];
            if (val->inplace_of != past + 1 || val->producer < 0) continue;
            const gr_ir_node *nd = &g->nodes.data[val->producer];
            if (nd->op == GR_OP_CACHE_WRITE && nd->n_in == 3 && nd->in[0] == past) upd = val->producer;
        }
        if (upd < 0)
            return gr_error(GR_ERR_UNSUPPORTED, "decode loop: the cache '%s' is not updated in place by the rewrite (beam search reorders it there)",
                            spec->past[k] ? spec->past[k] : "(none)");
        gr_ir_attr a[2];
        memset(a, 0, sizeof a);
        a[0] = (gr_ir_attr){.name = "axis", .kind = GR_IR_ATTR_INT, .i = spec->axis[k]};
        a[1] = (gr_ir_attr){.name = "delta", .kind = GR_IR_ATTR_INT, .i = -1};
        int in[3] = {past, src, kv}, moved;
        char name[64];
        snprintf(name, sizeof name, "graft.beam_reorder.%d", k);
        GR_TRY(node1(g, GR_OP_BEAM_REORDER, name, 3, in, 2, a, &moved));
        g->nodes.data[upd].in[0] = moved;
    }
    /* the step, in place into the state */
    gr_ir_attr a[2];
    memset(a, 0, sizeof a);
    a[0] = (gr_ir_attr){.name = "beams", .kind = GR_IR_ATTR_INT, .i = K};
    a[1] = (gr_ir_attr){.name = "room", .kind = GR_IR_ATTR_INT, .i = spec->room};
    int in[4] = {lo, kv, state, params}, next, tok_cols, tok2, zero;
    GR_TRY(node1(g, GR_OP_BEAM_STEP, "graft.beam_step", 4, in, 2, a, &next));
    GR_TRY(loop_output(g, next, "graft.beam_next", state));
    /* tokens are >= 0 (pad or 0 for dead beams): max(., 0) is the identity, as a kernel (a view
     * could not be written in place into input_ids) */
    int64_t r2[2] = {rows, 1};
    GR_TRY(cols(g, next, l.tok, l.tok + K, &tok_cols));
    GR_TRY(shaped(g, GR_OP_RESHAPE, tok_cols, 2, r2, &tok2));
    GR_TRY(const_i64(g, 0, &zero));
    GR_TRY(binary(g, GR_OP_MAX, tok2, zero, tok));
    return cols(g, next, l.done, l.done + 1, done);
}

/* The input named `name`, or -1 (name NULL or not an input). */
static int loop_input(const gr_graph *g, const char *name) {
    int v = name ? gr_ir_find_value(g, name) : -1;
    return v >= 0 && g->values.data[v].kind == GR_VAL_INPUT ? v : -1;
}

gr_status gr_pass_decode_device_loop(gr_graph *g, const gr_decode_loop_spec *spec) {
    int kv = loop_input(g, "graft.kv_len"), ids = loop_input(g, spec->input_ids);
    int pos = loop_input(g, spec->position_ids), mask = loop_input(g, spec->attention_mask);
    int lo = spec->logits ? gr_ir_find_value(g, spec->logits) : -1;
    if (kv < 0) return gr_error(GR_ERR_INVALID, "decode loop: the graph has no input 'graft.kv_len' (run the decode rewrite first)");
    if (ids < 0) return gr_error(GR_ERR_INVALID, "decode loop: no token-ids input '%s'", spec->input_ids ? spec->input_ids : "(none)");
    if (lo < 0 || g->values.data[lo].producer < 0)
        return gr_error(GR_ERR_INVALID, "decode loop: no logits output '%s'", spec->logits ? spec->logits : "(none)");
    const gr_ir_value *iv = &g->values.data[ids], *lv = &g->values.data[lo];
    if (iv->ndim != 2 || iv->dims[1].size != 1 || (iv->dtype != GR_I64 && iv->dtype != GR_I32))
        return gr_error(GR_ERR_UNSUPPORTED, "decode loop: token ids '%s' are not i64/i32 [batch, 1]", iv->name);
    int64_t b = iv->dims[0].size;
    if (lv->ndim != 3 || lv->dims[0].size != b || lv->dims[1].size != 1 || !gr_dtype_is_float(lv->dtype))
        return gr_error(GR_ERR_UNSUPPORTED, "decode loop: logits '%s' are not floats [batch, 1, vocab]", lv->name);
    if (pos >= 0 && (g->values.data[pos].ndim != 2 || g->values.data[pos].dims[0].size != b || g->values.data[pos].dims[1].size != 1))
        return gr_error(GR_ERR_UNSUPPORTED, "decode loop: position ids '%s' are not [batch, 1]", g->values.data[pos].name);
    if (mask >= 0 && (g->values.data[mask].ndim != 2 || g->values.data[mask].dims[0].size != b ||
                      g->values.data[mask].dims[1].size != spec->max_len))
        return gr_error(GR_ERR_UNSUPPORTED, "decode loop: attention mask '%s' is not [batch, %lld]", g->values.data[mask].name,
                        (long long)spec->max_len);
    /* every reader of an input the loop advances must lead to the logits (so it runs before the
     * token, which every in-place write waits for) */
    int n = g->nodes.len;
    unsigned char *anc = gr_calloc((size_t)(n ? n : 1), 1);
    int *stack = gr_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!anc || !stack) {
        gr_free(anc, (size_t)(n ? n : 1));
        gr_free(stack, sizeof(int) * (size_t)(n ? n : 1));
        return GR_ERR_NOMEM;
    }
    int sp = 0;
    stack[sp++] = lv->producer;
    anc[lv->producer] = 1;
    while (sp) {
        const gr_ir_node *nd = &g->nodes.data[stack[--sp]];
        for (int k = 0; k < nd->n_in; k++) {
            int p = nd->in[k] >= 0 ? g->values.data[nd->in[k]].producer : -1;
            if (p >= 0 && !anc[p]) anc[p] = 1, stack[sp++] = p;
        }
    }
    gr_status st = GR_OK;
    for (int i = 0; i < n && st == GR_OK; i++) {
        const gr_ir_node *nd = &g->nodes.data[i];
        for (int k = 0; k < nd->n_in && st == GR_OK; k++) {
            int v = nd->in[k];
            if ((v == kv || v == ids || (v == pos && pos >= 0) || (v == mask && mask >= 0)) && !anc[i])
                st = refuse(g, i, "reads an input the decode loop advances on the device but does not lead to the logits (graft "
                                  "cannot order the in-place update after it)");
        }
    }
    gr_free(anc, (size_t)(n ? n : 1));
    gr_free(stack, sizeof(int) * (size_t)(n ? n : 1));
    GR_TRY(st);
    for (int i = 0; i < g->outputs.len; i++) {
        int v = g->outputs.data[i];
        if (v == kv || v == ids || (v == pos && pos >= 0) || (v == mask && mask >= 0))
            return gr_error(GR_ERR_UNSUPPORTED, "decode loop: input '%s' is also an output of the model", g->values.data[v].name);
    }
    gr_dtype ids_t = iv->dtype;
    /* position_ids and attention_mask from kv_len: the model reads values computed on the device */
    int64_t bshape[2] = {b, 1};
    if (pos >= 0) {
        int m1, p1, pc, pe;
        GR_TRY(const_i64(g, -1, &m1));
        GR_TRY(binary(g, GR_OP_ADD, kv, m1, &p1));
        GR_TRY(cast_to(g, p1, g->values.data[pos].dtype, &pc));
        GR_TRY(shaped(g, GR_OP_EXPAND, pc, 2, bshape, &pe));
        for (int i = 0; i < g->nodes.len; i++)
            for (int k = 0; k < g->nodes.data[i].n_in; k++)
                if (g->nodes.data[i].in[k] == pos && i < n) g->nodes.data[i].in[k] = pe;
    }
    if (mask >= 0) {
        int r, lt, mc, mr, me;
        int64_t row[2] = {1, spec->max_len}, full[2] = {b, spec->max_len};
        GR_TRY(positions(g, spec->max_len, 0, 1, &r));
        GR_TRY(binary(g, GR_OP_LESS, r, kv, &lt));
        GR_TRY(cast_to(g, lt, g->values.data[mask].dtype, &mc));
        GR_TRY(shaped(g, GR_OP_RESHAPE, mc, 2, row, &mr));
        GR_TRY(shaped(g, GR_OP_EXPAND, mr, 2, full, &me));
        for (int i = 0; i < n; i++)
            for (int k = 0; k < g->nodes.data[i].n_in; k++)
                if (g->nodes.data[i].in[k] == mask) g->nodes.data[i].in[k] = me;
    }
    /* the loop's own state */
    int fin = -1, eos = -1, pad = -1, stop, tokens;
    gr_dim d_b1[2] = {gr_dx_const(b), gr_dx_const(1)}, d_1[1] = {gr_dx_const(1)};
    gr_dim d_tok[2] = {gr_dx_const(spec->max_len), gr_dx_const(b)};
    GR_TRY(gr_ir_add_input(g, "graft.stop", GR_I64, 1, d_1, &stop));
    GR_TRY(gr_ir_add_input(g, "graft.tokens", GR_I64, 2, d_tok, &tokens));
    /* the token: argmax (or a sample), or pad once a row has finished; beam search's */
    int am, am2, tok, tok_in, fin2;
    if (spec->beams > 1) {
        GR_TRY(beam_loop(g, spec, kv, lo, b, &tok, &fin2));
    } else {
        GR_TRY(gr_ir_add_input(g, "graft.finished", GR_BOOL, 2, d_b1, &fin));
        GR_TRY(gr_ir_add_input(g, "graft.eos", GR_I64, 1, d_1, &eos));
        GR_TRY(gr_ir_add_input(g, "graft.pad", GR_I64, 1, d_1, &pad));
        if (spec->sample) {
            int s_ints, s_floats;
            gr_dim d_3[1] = {gr_dx_const(3)}, d_2[1] = {gr_dx_const(2)};
            GR_TRY(gr_ir_add_input(g, "graft.sample_ints", GR_I64, 1, d_3, &s_ints));
            GR_TRY(gr_ir_add_input(g, "graft.sample_floats", GR_F32, 1, d_2, &s_floats));
            int in[4] = {lo, kv, s_ints, s_floats};
            GR_TRY(node1(g, GR_OP_SAMPLE, "graft.sample", 4, in, 0, NULL, &am));
        } else {
            gr_ir_attr a[3];
            memset(a, 0, sizeof a);
            a[0] = (gr_ir_attr){.name = "axis", .kind = GR_IR_ATTR_INT, .i = 2};
            a[1] = (gr_ir_attr){.name = "keepdims", .kind = GR_IR_ATTR_INT, .i = 0};
            a[2] = (gr_ir_attr){.name = "select_last_index", .kind = GR_IR_ATTR_INT, .i = 0};
            GR_TRY(node1(g, GR_OP_ARG_MAX, "graft.greedy", 1, &lo, 3, a, &am));
        }
        GR_TRY(shaped(g, GR_OP_RESHAPE, am, 2, bshape, &am2));
        {
            int w[3] = {fin, pad, am2};
            GR_TRY(node1(g, GR_OP_WHERE, NULL, 3, w, 0, NULL, &tok));
        }
    }
    GR_TRY(loop_output(g, tok, "graft.next_ids", ids_t == GR_I64 ? ids : -1));
    if (ids_t != GR_I64) {
        GR_TRY(cast_to(g, tok, ids_t, &tok_in));
        GR_TRY(loop_output(g, tok_in, "graft.next_input", ids));
    }
    if (fin >= 0) {
        int is_eos;
        GR_TRY(binary(g, GR_OP_EQUAL, tok, eos, &is_eos));
        GR_TRY(binary(g, GR_OP_OR, fin, is_eos, &fin2));
        GR_TRY(loop_output(g, fin2, "graft.finished_next", fin));
    }
    /* tokens[kv_len, :] = tok: the ring the host copies once per launch */
    int col, at, trow, tok2;
    int64_t rshape[2] = {1, b};
    GR_TRY(positions(g, spec->max_len, 0, 2, &col));
    GR_TRY(binary(g, GR_OP_EQUAL, col, kv, &at));
    GR_TRY(shaped(g, GR_OP_RESHAPE, tok, 2, rshape, &trow));
    {
        int w[3] = {at, trow, tokens};
        GR_TRY(node1(g, GR_OP_WHERE, NULL, 3, w, 0, NULL, &tok2));
    }
    GR_TRY(loop_output(g, tok2, "graft.tokens_next", tokens));
    /* go on while kv_len < stop and some row is unfinished */
    int fin_i, all, zero, none_done, below, cont_b, cont;
    GR_TRY(cast_to(g, fin2, GR_I64, &fin_i));
    GR_TRY(min_all(g, fin_i, 2, &all));
    GR_TRY(const_i64(g, 0, &zero));
    GR_TRY(binary(g, GR_OP_EQUAL, all, zero, &none_done));
    GR_TRY(binary(g, GR_OP_LESS, kv, stop, &below));
    GR_TRY(binary(g, GR_OP_AND, below, none_done, &cont_b));
    GR_TRY(cast_to(g, cont_b, GR_I32, &cont));
    GR_TRY(loop_output(g, cont, "graft.cont", -1));
    /* kv_len + 1, written after every other reader of kv_len: the increment is
     * max(min(cont, min(tokens')), 1), which is 1 (cont is 0 or 1, tokens are ids >= 0) but
     * depends on cont and tokens', so no schedule can run it before them */
    int cont_i, tmin, dep, one, inc, kv2;
    GR_TRY(cast_to(g, cont, GR_I64, &cont_i));
    GR_TRY(min_all(g, tok2, 2, &tmin));
    GR_TRY(binary(g, GR_OP_MIN, cont_i, tmin, &dep));
    GR_TRY(const_i64(g, 1, &one));
    GR_TRY(binary(g, GR_OP_MAX, dep, one, &inc));
    GR_TRY(binary(g, GR_OP_ADD, kv, inc, &kv2));
    GR_TRY(loop_output(g, kv2, "graft.kv_next", kv));
    GR_TRY(gr_ir_topo_sort(g, "decode rewrite"));
    GR_TRY(gr_ir_infer_shapes(g));
    return gr_ir_verify(g);
}
