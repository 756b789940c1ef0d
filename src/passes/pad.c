/* passes/pad — the proof behind shape policy pad (runtime/shapes.c): running a binding at a
 * larger value of symbol k (a capture size), its inputs zero-filled past their real extent,
 * leaves every output's real part (the first `real` positions along each axis of extent k)
 * unchanged.
 *
 * It holds when no value mixes positions along a padded axis into other positions: every dim
 * that depends on k is k itself (so padding appends positions at the end of that axis and,
 * with the outer dims unchanged, real positions keep their coordinates); no reduction, softmax,
 * norm, slice, concat, split or gather runs along a padded axis; a reshape keeps the padded
 * axis with the same dims outside and inside it; a matmul contracts over a padded axis only
 * when both operands are known to hold zeros there (zero-filled inputs moved or copied, never
 * computed: a computed pad may be inf or NaN, and 0 * inf is NaN); a gather's indices along a
 * padded axis are zero-filled inputs (valid indices; computed ones might be out of range); a
 * causal attention over a query and key axis both padded masks the padded keys itself; no
 * attribute is computed from k (a fill of dim(seq) would hold the padded value), except a
 * shape entry that is k itself and a range's limit. Any other op touching a padded axis is
 * refused, naming the node. */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

typedef struct {
    uint32_t pad;  /* bit d: axis d is padded (its dim is symbol k) */
    /* What positions past the real extent along a padded axis hold, where the value's other
     * padded coordinates are real (the only ones a real result can combine them with): */
    bool zero;     /* zeros (a zero-filled input moved, a mask, a softmax over masked scores) */
    bool neginf;   /* -inf (a mask the runtime inserted before a softmax or max) */
    bool filled;   /* zeros at every padded position: a zero-filled input, only moved */
    bool seen;     /* state computed (an input, a constant, or its node analysed) */
} pad_state;

static bool refuse(const gr_graph *g, const gr_ir_node *n, char *why, size_t size, const char *fmt, const char *detail) {
    char where[256] = "";
    if (n) gr_ir_node_where(g, n, where, sizeof where);
    char msg[256];
    snprintf(msg, sizeof msg, fmt, detail ? detail : "");
    snprintf(why, size, "%s%s%s", where, where[0] ? ": " : "", msg);
    return false;
}

/* The padded axes of value v; false when a dim depends on k without being k. */
static bool axes_of(const gr_graph *g, int v, int k, uint32_t *mask, bool *used) {
    const gr_ir_value *val = &g->values.data[v];
    *mask = 0;
    for (int d = 0; d < val->ndim; d++) {
        if (!gr_dx_is_sym(val->dims[d])) continue;
        if (gr_dx_as_symbol(g, val->dims[d]) == k) {
            *mask |= 1u << d;
            continue;
        }
        memset(used, 0, sizeof(bool) * (size_t)g->syms.len);
        gr_dx_symbols_of(g, val->dims[d], used);
        if (used[k]) return false;
    }
    return true;
}

static int popcount32(uint32_t x) {
    int n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

static int first_axis(uint32_t mask) {
    for (int d = 0; d < 32; d++)
        if (mask & (1u << d)) return d;
    return -1;
}

/* axis attribute value normalised to 0..ndim-1 (-1 when out of range) */
static int norm_axis(int64_t a, int ndim) {
    if (a < 0) a += ndim;
    return a >= 0 && a < ndim ? (int)a : -1;
}

/* Product of value v's dims in [lo, hi) when all are concrete; -1 otherwise. */
static int64_t concrete_product(const gr_ir_value *v, int lo, int hi) {
    int64_t p = 1;
    for (int d = lo; d < hi; d++) {
        if (gr_dx_is_sym(v->dims[d]) || v->dims[d].size < 0) return -1;
        if (v->dims[d].size && p > INT64_MAX / v->dims[d].size) return -1;
        p *= v->dims[d].size;
    }
    return p;
}

/* Bit set of the axes a reduce-kind node reduces over. */
static bool reduced_axes(const gr_graph *g, const gr_ir_node *n, int ndim, uint32_t *out) {
    *out = 0;
    if (n->op == GR_OP_SOFTMAX || n->op == GR_OP_LAYER_NORM || n->op == GR_OP_ARG_MAX || n->op == GR_OP_ARG_MIN) {
        int64_t a = n->op == GR_OP_LAYER_NORM ? -1 : n->op == GR_OP_SOFTMAX ? -1 : 0;
        if (gr_ir_attr_int(g, n, "axis", a, &a) != GR_OK) return false;
        int ax = norm_axis(a, ndim);
        if (ax < 0) return false;
        /* layer norm normalises over axis..ndim-1 */
        for (int d = ax; d < (n->op == GR_OP_LAYER_NORM ? ndim : ax + 1); d++) *out |= 1u << d;
        return true;
    }
    const int64_t *axes = NULL;
    int n_axes = 0;
    if (gr_ir_attr_find(n, "axes") && gr_ir_attr_ints(g, n, "axes", &axes, &n_axes) != GR_OK) return false;
    if (!n_axes) {
        *out = ndim >= 32 ? 0xffffffffu : (1u << ndim) - 1;
        return true;
    }
    for (int i = 0; i < n_axes; i++) {
        int ax = norm_axis(axes[i], ndim);
        if (ax < 0) return false;
        *out |= 1u << ax;
    }
    return true;
}

static bool depends_on(const gr_graph *g, int32_t expr, int k, bool *used) {
    if (expr == GR_SYM_NONE) return false;
    memset(used, 0, sizeof(bool) * (size_t)g->syms.len);
    gr_dx_symbols_of(g, (gr_dim){.size = -1, .expr = expr}, used);
    return used[k];
}

/* An attribute computed from k (fill's value = dim(seq), a slice end) would take the padded
 * value. Allowed: a shape attribute whose entry is k itself (the output dim, checked as a dim)
 * and a range's limit k (its values at real positions do not depend on the limit). */
static bool attrs_keep_rows(const gr_graph *g, const gr_ir_node *n, int k, bool *used) {
    for (int a = 0; a < n->n_attr; a++) {
        const gr_ir_attr *at = &n->attrs[a];
        if (at->sym && depends_on(g, at->expr, k, used)) {
            bool range_limit = n->op == GR_OP_RANGE && !strcmp(at->name, "limit") &&
                               gr_dx_as_symbol(g, (gr_dim){.size = -1, .expr = at->expr}) == k;
            if (!range_limit) return false;
        }
        for (int i = 0; at->exprs && i < at->n; i++) {
            if (!depends_on(g, at->exprs[i], k, used)) continue;
            bool shape = (n->op == GR_OP_RESHAPE || n->op == GR_OP_EXPAND || n->op == GR_OP_FILL) && !strcmp(at->name, "shape") &&
                         gr_dx_as_symbol(g, (gr_dim){.size = -1, .expr = at->exprs[i]}) == k;
            if (!shape) return false;
        }
    }
    return true;
}

static bool unary_keeps_zero(gr_op op) {
    switch (op) {
    case GR_OP_IDENTITY: case GR_OP_NEG: case GR_OP_ABS: case GR_OP_RELU: case GR_OP_CAST: return true;
    default: return false;
    }
}

/* A reduction or contraction along the padded axis that a mask of operand `slot` would make
 * exact: recorded when the caller can insert masks, else a refusal. */
static bool maskable(const gr_graph *g, const gr_ir_node *n, int node, int slot, int axis, int fill, gr_pad_site *sites,
                     int max_sites, int *n_sites, char *why, size_t why_size, const char *what) {
    if (!sites || *n_sites >= max_sites) return refuse(g, n, why, why_size, "%s", what);
    sites[(*n_sites)++] = (gr_pad_site){.node = node, .slot = slot, .axis = axis, .fill = fill};
    return true;
}

gr_status gr_pass_pad_proof(const gr_graph *g, int k, const uint8_t *known, gr_pad_site *sites, int max_sites, int *n_sites,
                            bool *proven, char *why, size_t why_size) {
    *proven = false;
    if (n_sites) *n_sites = 0;
    if (k < 0 || k >= g->syms.len) return refuse(g, NULL, why, why_size, "no symbol to pad%s", NULL), GR_OK;
    if (g->syms.data[k].data_value >= 0)
        return refuse(g, NULL, why, why_size, "'%s' is data-dependent: its value is computed, not bound", g->syms.data[k].name), GR_OK;
    int nv = g->values.len;
    pad_state *state = gr_calloc((size_t)(nv ? nv : 1), sizeof *state);
    bool *used = gr_calloc((size_t)(g->syms.len ? g->syms.len : 1), sizeof(bool));
    if (!state || !used) {
        gr_free(state, sizeof *state * (size_t)(nv ? nv : 1));
        gr_free(used, sizeof(bool) * (size_t)(g->syms.len ? g->syms.len : 1));
        return GR_ERR_NOMEM;
    }
    bool ok = true;
    for (int v = 0; v < nv && ok; v++) {
        const gr_ir_value *val = &g->values.data[v];
        if (!axes_of(g, v, k, &state[v].pad, used)) {
            char msg[200];
            snprintf(msg, sizeof msg, "value '%.80s' has a dim that depends on '%.40s' without being it", val->name, g->syms.data[k].name);
            ok = refuse(g, val->producer >= 0 ? &g->nodes.data[val->producer] : NULL, why, why_size, "%s", msg);
            break;
        }
        if (val->kind == GR_VAL_INPUT) {
            state[v].seen = true;
            state[v].zero = state[v].filled = true; /* the runtime zero-fills it */
            if (popcount32(state[v].pad) > 1)
                ok = refuse(g, NULL, why, why_size, "input '%s' has more than one padded axis", val->name);
            else if (state[v].pad && val->placement == GR_PLACE_HOST)
                ok = refuse(g, NULL, why, why_size, "input '%s' is read on the host", val->name);
        } else if (val->kind == GR_VAL_CONST) {
            state[v].seen = true;
        }
    }
    for (int i = 0; i < g->nodes.len && ok; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        uint32_t any = 0;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0) any |= state[n->in[j]].pad;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0) any |= state[n->out[j]].pad;
        bool zero_out = false, filled_out = false;
        const gr_ir_value *out = n->n_out > 0 && n->out[0] >= 0 ? &g->values.data[n->out[0]] : NULL;
        const pad_state *in0 = n->n_in > 0 && n->in[0] >= 0 ? &state[n->in[0]] : NULL;
        if (!attrs_keep_rows(g, n, k, used)) {
            char msg[160];
            snprintf(msg, sizeof msg, "an attribute is computed from '%.40s' (its value would be the padded one)", g->syms.data[k].name);
            ok = refuse(g, n, why, why_size, "%s", msg);
            break;
        }
        if (!any) goto next; /* k plays no part here */
        switch (gr_op_get(n->op)->kind) {
        case GR_OPK_UNARY:
            zero_out = unary_keeps_zero(n->op) && in0 && in0->seen && in0->zero;
            filled_out = (n->op == GR_OP_IDENTITY || n->op == GR_OP_CAST) && in0 && in0->filled;
            break;
        case GR_OPK_BINARY:
        case GR_OPK_COMPARE: break; /* position-wise (broadcasting keeps coordinates) */
        case GR_OPK_REDUCE: {
            uint32_t red = 0;
            if (!in0 || !reduced_axes(g, n, g->values.data[n->in[0]].ndim, &red)) {
                ok = refuse(g, n, why, why_size, "cannot tell which axes it reduces%s", NULL);
                break;
            }
            if (red & in0->pad) {
                char msg[160];
                int ax = first_axis(red & in0->pad);
                snprintf(msg, sizeof msg, "reduces over the padded axis %d (padding would change the real rows)", ax);
                /* exact once the padding holds the reduction's identity: -inf for softmax and max, 0 for a sum */
                bool inf_ok = n->op == GR_OP_SOFTMAX || n->op == GR_OP_REDUCE_MAX, zero_ok = n->op == GR_OP_REDUCE_SUM;
                if ((inf_ok && in0->neginf) || (zero_ok && in0->zero)) ok = true;
                else if (inf_ok || zero_ok)
                    ok = maskable(g, n, i, 0, ax, inf_ok ? GR_PAD_NEG_INF : GR_PAD_ZERO, sites, max_sites, n_sites, why, why_size, msg);
                else ok = refuse(g, n, why, why_size, "%s", msg);
                zero_out = n->op == GR_OP_SOFTMAX; /* exp(-inf) = 0 exactly */
            }
            break;
        }
        case GR_OPK_MOVE:
            switch (n->op) {
            case GR_OP_TRANSPOSE:
            case GR_OP_SQUEEZE:
            case GR_OP_UNSQUEEZE: zero_out = in0 && in0->zero, filled_out = in0 && in0->filled; break;
            case GR_OP_EXPAND:
                zero_out = in0 && in0->zero && out && state[n->out[0]].pad == in0->pad;
                filled_out = zero_out && in0->filled;
                break;
            case GR_OP_RESHAPE: {
                const gr_ir_value *iv = &g->values.data[n->in[0]];
                uint32_t pi = in0->pad, po = out ? state[n->out[0]].pad : 0;
                if (popcount32(pi) != 1 || popcount32(po) != 1) {
                    ok = refuse(g, n, why, why_size, "reshape does not keep exactly one padded axis in place%s", NULL);
                    break;
                }
                int a = first_axis(pi), b = first_axis(po);
                int64_t pre_i = concrete_product(iv, 0, a), pre_o = concrete_product(out, 0, b);
                int64_t post_i = concrete_product(iv, a + 1, iv->ndim), post_o = concrete_product(out, b + 1, out->ndim);
                if (pre_i < 0 || pre_i != pre_o || post_i < 0 || post_i != post_o)
                    ok = refuse(g, n, why, why_size, "reshape merges or splits the padded axis with others%s", NULL);
                zero_out = in0->zero;
                filled_out = in0->filled;
                break;
            }
            case GR_OP_GATHER: {
                int64_t a = 0;
                gr_ir_attr_int(g, n, "axis", 0, &a);
                int ax = norm_axis(a, g->values.data[n->in[0]].ndim);
                const pad_state *idx = &state[n->in[1]];
                if (ax < 0 || (in0->pad & (1u << ax)))
                    ok = refuse(g, n, why, why_size, "gathers along the padded axis%s", NULL);
                else if (idx->pad && !(idx->seen && idx->filled))
                    ok = refuse(g, n, why, why_size,
                                "its indices along the padded axis are computed (padding could hold an index out of range)%s", NULL);
                break;
            }
            default:
                ok = refuse(g, n, why, why_size, "%s along or beside a padded axis is not proven row-independent",
                            gr_op_get(n->op)->name);
                break;
            }
            break;
        case GR_OPK_GEN:
            if (n->op != GR_OP_RANGE && n->op != GR_OP_FILL)
                ok = refuse(g, n, why, why_size, "%s over a padded axis depends on the padded extent", gr_op_get(n->op)->name);
            break;
        case GR_OPK_OTHER:
            if (n->op == GR_OP_WHERE) break;
            if (n->op == GR_OP_MATMUL) {
                const gr_ir_value *av = &g->values.data[n->in[0]], *bv = &g->values.data[n->in[1]];
                int64_t ta = 0, tb = 0;
                gr_ir_attr_int(g, n, "trans_a", 0, &ta);
                gr_ir_attr_int(g, n, "trans_b", 0, &tb);
                int ka = av->ndim == 1 ? 0 : ta ? av->ndim - 2 : av->ndim - 1;
                int kb = bv->ndim == 1 ? 0 : tb ? bv->ndim - 1 : bv->ndim - 2;
                const pad_state *sa = &state[n->in[0]], *sb = &state[n->in[1]];
                bool contracted = (sa->pad & (1u << ka)) || (sb->pad & (1u << kb));
                static const char *what = "contracts over the padded axis with an operand whose padding is computed, not zero-filled";
                if (contracted && !(sa->seen && sa->zero))
                    ok = maskable(g, n, i, 0, ka, GR_PAD_ZERO, sites, max_sites, n_sites, why, why_size, what);
                if (ok && contracted && !(sb->seen && sb->zero))
                    ok = maskable(g, n, i, 1, kb, GR_PAD_ZERO, sites, max_sites, n_sites, why, why_size, what);
                break;
            }
            if (n->op == GR_OP_ATTENTION) {
                int64_t causal = 0;
                gr_ir_attr_int(g, n, "causal", 0, &causal);
                int layout[4]; /* the sequence axis of each operand (ops.c) */
                if (gr_ir_attention_layout(g, n, layout) != GR_OK) {
                    gr_error_clear();
                    ok = refuse(g, n, why, why_size, "%s", "bad attention layout");
                    break;
                }
                const gr_ir_value *q = &g->values.data[n->in[0]];
                uint32_t kq = q->ndim == 4 ? 1u << gr_ir_attention_seq_axis(layout[0]) : 0;
                const pad_state *sk = &state[n->in[1]];
                const gr_ir_value *kv = &g->values.data[n->in[1]];
                uint32_t kk = kv->ndim == 4 ? 1u << gr_ir_attention_seq_axis(layout[1]) : 0;
                uint32_t kvv = kv->ndim == 4 ? 1u << gr_ir_attention_seq_axis(layout[2]) : 0;
                bool key_padded = (sk->pad & kk) || (n->n_in > 2 && n->in[2] >= 0 && (state[n->in[2]].pad & kvv));
                bool masked = n->n_in > 3 && n->in[3] >= 0;
                if (key_padded && !(causal && (in0->pad & kq) && !masked))
                    ok = refuse(g, n, why, why_size, "attends over padded keys without a causal mask over padded queries%s", NULL);
                break;
            }
            ok = refuse(g, n, why, why_size, "%s on a padded value is not proven row-independent", gr_op_get(n->op)->name);
            break;
        default:
            ok = refuse(g, n, why, why_size, "%s on a padded value is not proven row-independent", gr_op_get(n->op)->name);
            break;
        }
    next:
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0) {
                int v = n->out[j];
                state[v].seen = true;
                state[v].zero = zero_out;
                state[v].filled = filled_out;
                /* a mask the runtime inserted (a where of the padded positions) */
                if (known && known[v] == GR_PAD_ZERO) state[v].zero = true;
                if (known && known[v] == GR_PAD_NEG_INF) state[v].neginf = true;
            }
    }
    for (int i = 0; i < g->outputs.len && ok; i++)
        if (popcount32(state[g->outputs.data[i]].pad) > 1)
            ok = refuse(g, NULL, why, why_size, "output '%s' has more than one padded axis", g->values.data[g->outputs.data[i]].name);
    gr_free(state, sizeof *state * (size_t)(nv ? nv : 1));
    gr_free(used, sizeof(bool) * (size_t)(g->syms.len ? g->syms.len : 1));
    *proven = ok;
    return GR_OK;
}
