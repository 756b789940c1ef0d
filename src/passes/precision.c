/* passes/precision — runs an f32 model in bf16 or f16 (`--precision`), the way PyTorch's
 * autocast runs one: the matmuls in half precision on the tensor cores, the numerically
 * sensitive ops in f32, everything else in the precision its inputs arrive in.
 *
 * Each node falls in one of three classes (op_class):
 *   LOW   matmul, conv, conv_transpose, attention: float inputs are made half (weights
 *         converted once, activations cast); the output is half. The matmul library call
 *         and the attention kernels accumulate in f32 (codegen/kir.h, cuda-blas.c).
 *   F32   softmax, layer_norm, reduce_sum, reduce_mean, exp, log, pow, erf, gelu, sqrt,
 *         rsqrt, reciprocal, softplus, sin, cos, selu, and any other REDUCE-kind op:
 *         half inputs are cast to f32 (exactly) and the output is f32. Their f32
 *         parameters (layer norm scale and bias) stay f32.
 *   FOLLOW everything else (add, mul, where, relu, tanh, moves, reduce_max, ...): when an
 *         f32 activation is among the float inputs, all are f32 (autocast's "widest type"
 *         promotion); otherwise all are half. Constants are weak: they take the dtype
 *         the node runs in (converted once), unless their values do not survive the
 *         conversion (overflow to inf, or a non-zero that becomes zero: a -3.4e38 mask
 *         fill, a 1e-12 epsilon in f16), in which case they count as f32 activations.
 *
 * Graph inputs keep their declared dtypes (f32 stays f32: the cast happens where a LOW
 * op first reads it), and so do graph outputs (a half result is cast back to f32 under
 * the output's own name). Integer-valued data (a cast from an integer type, a float
 * range, and moves of them: the positions of rotary embeddings) is never fed to a LOW op
 * in half: bf16 holds integers exactly only up to 256 (f16: 2048), so such a matmul stays
 * f32. Only f32 values are converted; f64 and values already half stay as they are.
 * Graphs with control flow (if, loop) are refused: their branches read outer values by
 * name and would need the same conversion.
 *
 * The pass rewrites the graph in place, before specialization (symbolic dims stay
 * symbolic), in O(nodes): casts are appended and the node list is reordered once.
 */
#include "passes/passes.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { PC_FOLLOW = 0, PC_LOW, PC_F32 } pc_class;

static pc_class op_class(gr_op op) {
    switch (op) {
    case GR_OP_MATMUL:
    case GR_OP_CONV:
    case GR_OP_CONV_TRANSPOSE:
    case GR_OP_ATTENTION: return PC_LOW;
    case GR_OP_SOFTMAX:
    case GR_OP_LAYER_NORM:
    case GR_OP_REDUCE_SUM:
    case GR_OP_REDUCE_MEAN:
    case GR_OP_EXP:
    case GR_OP_LOG:
    case GR_OP_POW:
    case GR_OP_ERF:
    case GR_OP_GELU:
    case GR_OP_SQRT:
    case GR_OP_RSQRT:
    case GR_OP_RECIPROCAL:
    case GR_OP_SOFTPLUS:
    case GR_OP_SIN:
    case GR_OP_COS:
    case GR_OP_SELU:
    case GR_OP_BEAM_STEP:
    case GR_OP_SAMPLE: return PC_F32; /* the kernel reads f32 logits; its floats input stays f32 */
    default: break;
    }
    /* an op without a rule here (appended later) goes by its kind: a reduction or a
     * normalisation keeps f32, anything else follows its inputs */
    return gr_op_get(op)->kind == GR_OPK_REDUCE ? PC_F32 : PC_FOLLOW;
}

/* ==== context ================================================================================ */

enum {
    PC_WAS_F32 = 1,  /* f32 before the pass */
    PC_MINE = 2,     /* made half by this pass */
    PC_INDEX = 4,    /* integer-valued data (a cast from an integer type, a range, moves of them) */
    PC_CHECKED = 8,  /* constant: PC_WIDE is known */
    PC_WIDE = 16,    /* constant: some value does not survive the conversion to half */
    PC_RESTORED = 32, /* graph output: cast back to f32 (to_f32) */
};

typedef struct {
    gr_graph *g;
    gr_dtype half;
    int n0;            /* values before the pass: the arrays below cover them */
    int *to_half;      /* converted constant or cast of each original value, or -1 */
    int *to_f32;
    uint8_t *flags;
    int *order;        /* new node order */
    bool *live;        /* per original node: reaches a graph output */
    int n_order, cap_order;
    gr_precision_stats *stats;
} pc_ctx;

static gr_status push_order(pc_ctx *c, int node) {
    if (c->n_order == c->cap_order) {
        int cap = c->cap_order ? 2 * c->cap_order : 64;
        int *grown = gr_malloc(sizeof(int) * (size_t)cap);
        if (!grown) return gr_nomem();
        if (c->order) {
            memcpy(grown, c->order, sizeof(int) * (size_t)c->n_order);
            gr_free(c->order, sizeof(int) * (size_t)c->cap_order);
        }
        c->order = grown;
        c->cap_order = cap;
    }
    c->order[c->n_order++] = node;
    return GR_OK;
}

static const gr_ir_value *val(const pc_ctx *c, int v) { return &c->g->values.data[v]; }

static bool is_mine(const pc_ctx *c, int v) { return v >= c->n0 || (c->flags[v] & PC_MINE); }

/* A float input the pass may change: an f32 value, or one it made half. (A host scalar
 * input, a temperature, is an f32 activation: it keeps its reader in f32.) */
static bool in_play(const pc_ctx *c, int v) {
    if (v < 0) return false;
    const gr_ir_value *x = val(c, v);
    if (!x->typed) return false;
    return x->dtype == GR_F32 || (x->dtype == c->half && is_mine(c, v));
}

static uint16_t to_half_bits(gr_dtype half, float f) { return half == GR_BF16 ? gr_f32_to_bf16(f) : gr_f32_to_half(f); }
static float from_half_bits(gr_dtype half, uint16_t h) { return half == GR_BF16 ? gr_bf16_to_f32(h) : gr_half_to_f32(h); }

/* Does some value of f32 constant v not survive the conversion (overflow, flush to zero)? */
static bool const_is_wide(pc_ctx *c, int v) {
    if (!(c->flags[v] & PC_CHECKED)) {
        const gr_ir_value *x = val(c, v);
        const float *d = x->data;
        size_t n = x->nbytes / sizeof(float);
        bool wide = false;
        for (size_t i = 0; i < n && !wide; i++) {
            float f = d[i];
            if (!isfinite(f) || f == 0) continue;
            float back = from_half_bits(c->half, to_half_bits(c->half, f));
            wide = !isfinite(back) || back == 0;
        }
        c->flags[v] |= PC_CHECKED | (wide ? PC_WIDE : 0);
    }
    return (c->flags[v] & PC_WIDE) != 0;
}

/* "<base>.<suffix>" when no value (node) has that name yet, else NULL (an automatic name). */
static const char *fresh_name(const pc_ctx *c, bool node, const char *base, const char *suffix, char *buf, size_t n) {
    if (!base) return NULL;
    snprintf(buf, n, "%s.%s", base, suffix);
    return (node ? gr_ir_find_node(c->g, buf) : gr_ir_find_value(c->g, buf)) < 0 ? buf : NULL;
}

/* ==== conversions ============================================================================= */

/* The half copy of f32 constant v (made once). */
static gr_status half_const(pc_ctx *c, int v, int *out) {
    if (c->to_half[v] >= 0) return *out = c->to_half[v], GR_OK;
    const gr_ir_value *x = val(c, v);
    int64_t dims[GR_MAX_DIMS];
    GR_TRY(gr_ir_value_shape(c->g, v, dims));
    size_t n = x->nbytes / sizeof(float), bytes = n * sizeof(uint16_t);
    uint16_t *h = gr_malloc(bytes ? bytes : 1);
    if (!h) return gr_nomem();
    const float *d = x->data;
    for (size_t i = 0; i < n; i++) h[i] = to_half_bits(c->half, d[i]);
    char buf[300];
    const char *name = fresh_name(c, false, x->name, gr_dtype_name(c->half), buf, sizeof buf);
    int ndim = x->ndim, line = x->line, col = x->col;
    gr_placement place = x->placement;
    int nv;
    /* owns h from here, on failure too */
    GR_TRY(gr_ir_add_const_owned(c->g, name, c->half, ndim, dims, h, bytes, &nv));
    gr_ir_value *y = &c->g->values.data[nv];
    y->placement = place;
    y->line = line;
    y->col = col;
    c->to_half[v] = nv;
    if (c->stats) {
        c->stats->weights_converted++;
        c->stats->weight_bytes_saved += bytes;
    }
    return *out = nv, GR_OK;
}

/* cast(v, to) as a new node placed before the reader being rewritten (made once per value and dtype). */
static gr_status cast_to(pc_ctx *c, int v, gr_dtype to, int *out) {
    int *memo = v < c->n0 ? (to == GR_F32 ? &c->to_f32[v] : &c->to_half[v]) : NULL;
    if (memo && *memo >= 0) return *out = *memo, GR_OK;
    gr_ir_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)"to";
    a.kind = GR_IR_ATTR_INT;
    a.i = (int64_t)to;
    char nbuf[300], vbuf[300], suffix[16];
    snprintf(suffix, sizeof suffix, "to_%s", gr_dtype_name(to));
    const char *vname = val(c, v)->name;
    const char *node_name = fresh_name(c, true, vname, suffix, nbuf, sizeof nbuf);
    const char *out_name = fresh_name(c, false, vname, gr_dtype_name(to), vbuf, sizeof vbuf);
    int node;
    GR_TRY(gr_ir_add_node(c->g, GR_OP_CAST, node_name, 1, &v, 1, &out_name, 1, &a, &node));
    GR_TRY(gr_ir_infer_node(c->g, node));
    GR_TRY(push_order(c, node));
    int o = c->g->nodes.data[node].out[0];
    if (memo) *memo = o;
    if (c->stats) c->stats->casts++;
    return *out = o, GR_OK;
}

/* ==== nodes =================================================================================== */

static gr_status convert_node(pc_ctx *c, int i) {
    gr_graph *g = c->g;
    gr_op op = g->nodes.data[i].op;
    pc_class cls = op_class(op);
    int n_in = g->nodes.data[i].n_in;
    if (op == GR_OP_ATTENTION && n_in > 3) n_in = 3; /* the mask keeps its dtype: the kernel reads any float */
    bool any = false, strong = false, index = false, wide_const = false;
    for (int s = 0; s < n_in; s++) {
        int v = g->nodes.data[i].in[s];
        if (!in_play(c, v)) continue;
        any = true;
        if (v < c->n0 && (c->flags[v] & PC_INDEX)) index = true;
        if (val(c, v)->dtype == c->half) continue;
        if (val(c, v)->kind == GR_VAL_CONST) {
            if (const_is_wide(c, v)) strong = true, wide_const = true;
        } else {
            strong = true;
        }
    }
    if (any) {
        gr_dtype want;
        if (cls == PC_LOW) want = index || wide_const ? GR_F32 : c->half;
        else if (cls == PC_F32) want = GR_F32;
        else want = strong ? GR_F32 : c->half;
        /* unread nodes (those an attention replaced) are converted too, so they still type-check
         * when shapes are inferred again, but not counted: dead-step elimination drops them */
        if (c->stats && c->live[i]) {
            if (want == GR_F32) c->stats->nodes_f32++;
            else c->stats->nodes_half++;
        }
        for (int s = 0; s < n_in; s++) {
            int v = g->nodes.data[i].in[s], nv = v;
            if (!in_play(c, v) || val(c, v)->dtype == want) continue;
            if (want != GR_F32 && val(c, v)->kind == GR_VAL_CONST) GR_TRY(half_const(c, v, &nv));
            else GR_TRY(cast_to(c, v, want, &nv));
            g->nodes.data[i].in[s] = nv;
        }
        GR_TRY(gr_ir_infer_node(g, i));
        for (int o = 0; o < g->nodes.data[i].n_out; o++) {
            int v = g->nodes.data[i].out[o];
            if (v >= 0 && v < c->n0 && (c->flags[v] & PC_WAS_F32) && val(c, v)->dtype == c->half) c->flags[v] |= PC_MINE;
        }
    }
    return push_order(c, i);
}

/* Integer-valued data: casts from integer types and float ranges, carried through moves and casts. */
static void mark_index(pc_ctx *c) {
    const gr_graph *g = c->g;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        if (n->n_out < 1 || n->out[0] < 0 || !val(c, n->out[0])->typed || !gr_dtype_is_float(val(c, n->out[0])->dtype)) continue;
        bool mark = false;
        if (n->op == GR_OP_RANGE) mark = true;
        else if (n->op == GR_OP_CAST && n->n_in > 0 && n->in[0] >= 0 && val(c, n->in[0])->typed)
            mark = !gr_dtype_is_float(val(c, n->in[0])->dtype) || (c->flags[n->in[0]] & PC_INDEX);
        else if (gr_op_get(n->op)->kind == GR_OPK_MOVE && n->n_in > 0) {
            /* the data inputs: every input of concat, the first of the others */
            int last = n->op == GR_OP_CONCAT ? n->n_in : 1;
            for (int s = 0; s < last; s++)
                if (n->in[s] >= 0 && (c->flags[n->in[s]] & PC_INDEX)) mark = true;
        }
        if (mark)
            for (int o = 0; o < n->n_out; o++)
                if (n->out[o] >= 0) c->flags[n->out[o]] |= PC_INDEX;
    }
}

/* Nodes whose outputs reach a graph output (for the statistics: attention fusion leaves the
 * nodes it replaced in place, and dead-step elimination drops them later). */
static void mark_live(pc_ctx *c, bool *value_live) {
    const gr_graph *g = c->g;
    for (int k = 0; k < g->outputs.len; k++) value_live[g->outputs.data[k]] = true;
    for (int i = g->nodes.len - 1; i >= 0; i--) {
        const gr_ir_node *n = &g->nodes.data[i];
        for (int o = 0; o < n->n_out && !c->live[i]; o++)
            if (n->out[o] >= 0 && value_live[n->out[o]]) c->live[i] = true;
        if (c->live[i])
            for (int s = 0; s < n->n_in; s++)
                if (n->in[s] >= 0) value_live[n->in[s]] = true;
    }
}

/* A graph output that became half: cast back to f32; the f32 value takes the output's name
 * (the half one is renamed "<name>.bf16"), so callers see the declared dtype under it. */
static gr_status restore_output(pc_ctx *c, int k) {
    gr_graph *g = c->g;
    int v = g->outputs.data[k];
    if (v >= c->n0 || !(c->flags[v] & PC_MINE)) return GR_OK;
    if (c->flags[v] & PC_RESTORED) { /* listed twice */
        g->outputs.data[k] = c->to_f32[v];
        return GR_OK;
    }
    int f;
    GR_TRY(cast_to(c, v, GR_F32, &f));
    const char *name = g->values.data[v].name;
    char half_name[300];
    snprintf(half_name, sizeof half_name, "%s.%s", name ? name : "output", gr_dtype_name(c->half));
    for (int n = 1; gr_ir_find_value(g, half_name) >= 0 && n < 1000; n++)
        snprintf(half_name, sizeof half_name, "%s.%s.%d", name ? name : "output", gr_dtype_name(c->half), n);
    char *orig = name ? gr_strdup(name) : NULL;
    if (name && !orig) return gr_nomem();
    gr_status st = gr_ir_rename_value(g, v, half_name);
    if (st == GR_OK && orig) st = gr_ir_rename_value(g, f, orig);
    gr_strfree(orig);
    GR_TRY(st);
    g->values.data[f].line = g->values.data[v].line;
    g->values.data[f].col = g->values.data[v].col;
    g->outputs.data[k] = f;
    c->flags[v] |= PC_RESTORED;
    return GR_OK;
}

/* ==== the pass ================================================================================ */

gr_status gr_pass_convert_precision(gr_graph *g, gr_dtype half, gr_precision_stats *stats) {
    if (stats) memset(stats, 0, sizeof *stats);
    if (half != GR_BF16 && half != GR_F16)
        return gr_error(GR_ERR_INVALID, "precision conversion: target dtype must be bf16 or f16, not %s", gr_dtype_name(half));
    for (int i = 0; i < g->nodes.len; i++)
        if (gr_op_get(g->nodes.data[i].op)->kind == GR_OPK_CONTROL) {
            char where[512];
            gr_ir_node_where(g, &g->nodes.data[i], where, sizeof where);
            return gr_error(GR_ERR_UNSUPPORTED, "%s: graphs with control flow (if, loop) are not converted to %s", where,
                            gr_dtype_name(half));
        }
    pc_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.half = half;
    c.n0 = g->values.len;
    c.stats = stats;
    size_t n0 = (size_t)(c.n0 ? c.n0 : 1);
    int n_nodes = g->nodes.len;
    c.to_half = gr_malloc(n0 * sizeof(int));
    c.to_f32 = gr_malloc(n0 * sizeof(int));
    c.flags = gr_calloc(n0, 1);
    size_t live_n = (size_t)(n_nodes ? n_nodes : 1);
    c.live = gr_calloc(live_n, sizeof(bool));
    bool *value_live = gr_calloc(n0, sizeof(bool));
    gr_status st = c.to_half && c.to_f32 && c.flags && c.live && value_live ? GR_OK : gr_nomem();
    if (st == GR_OK) mark_live(&c, value_live);
    if (value_live) gr_free(value_live, n0 * sizeof(bool));
    if (st == GR_OK) {
        for (int v = 0; v < c.n0; v++) {
            c.to_half[v] = c.to_f32[v] = -1;
            if (g->values.data[v].typed && g->values.data[v].dtype == GR_F32) c.flags[v] |= PC_WAS_F32;
        }
        mark_index(&c);
    }
    for (int i = 0; i < n_nodes && st == GR_OK; i++) st = convert_node(&c, i);
    for (int k = 0; k < g->outputs.len && st == GR_OK; k++) st = restore_output(&c, k);
    if (st == GR_OK && c.n_order != g->nodes.len) st = gr_error(GR_ERR_INTERNAL, "precision: node order lost a node");
    if (st == GR_OK) st = gr_ir_reorder_nodes(g, c.order);
    if (c.to_half) gr_free(c.to_half, n0 * sizeof(int));
    if (c.to_f32) gr_free(c.to_f32, n0 * sizeof(int));
    if (c.flags) gr_free(c.flags, n0);
    if (c.live) gr_free(c.live, live_n * sizeof(bool));
    if (c.order) gr_free(c.order, sizeof(int) * (size_t)c.cap_order);
    return st;
}

gr_status gr_pass_precision(gr_graph *g, gr_dtype half, bool fuse_attention, gr_precision_stats *stats) {
    /* attention first, on the f32 graph: the casts around softmax would hide the pattern,
     * and the fused op is then a LOW op like the matmuls it replaces */
    int n_fused = 0;
    if (fuse_attention) GR_TRY(gr_pass_fuse_attention(g, true, &n_fused));
    GR_TRY(gr_pass_convert_precision(g, half, stats));
    if (stats) stats->attention_fused = n_fused;
    return GR_OK;
}
