/* passes/shard — tensor parallelism: one rank's graph of a model split over N ranks.
 *
 * Found from the graph's structure, not from names (Megatron-LM's layout):
 * - column: a matmul of an activation by a constant 2-D weight keeps 1/N of the weight's
 *   output columns; its output is split along the last axis. When the output is cut into
 *   parts by a Split on that axis (GPT-2's fused c_attn: q, k, v), each part is divided,
 *   so every rank holds its share of each part.
 * - heads: a split axis travels through reshapes, transposes, element-wise ops, softmax and
 *   the attention matmuls; a reshape that splits the columns into [heads, head_dim] keeps
 *   the split on the heads axis (heads divisible by N, grouped-query K/V heads too).
 * - row: a matmul whose activation is split along its inner (K) axis keeps 1/N of the
 *   weight's rows and gives a partial sum: an all_reduce follows, then the bias.
 * - vocab: a gather from a constant table (embeddings) keeps 1/N of the rows; ids outside
 *   the rank's rows read row 0 and are zeroed, and an all_reduce sums the ranks' rows.
 *   The LM head is a column split whose output meets the graph's output: all_gather.
 * - gather: a split value reaching an op no rule covers (layer norm over the split axis,
 *   a graph output, ...) is all-gathered first, so every graph is split correctly;
 *   `graft explain --tp N` lists each split and each collective.
 * A split that cannot be made (columns or heads not divisible by N) is an error naming
 * the node. Each rank's graph keeps only its slices of the split weights.
 *
 * The analysis reads the unsplit graph `src` (shapes inferred); the rank's graph is a
 * clone edited in place (inputs rewired, collectives and slices appended), then put back
 * in topological order, re-inferred and pruned of the unsplit weights. */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

#define MAX_GROUPS 8
/* A gather table is split by rows from this many rows on: a vocabulary. Smaller tables
 * (positions, token types) stay whole: splitting one saves little memory and costs an
 * all_reduce of the activations per run. */
#define MIN_VOCAB_ROWS 256

typedef struct {
    bool split;
    int axis;                   /* split axis (of the unsplit value) */
    int n_groups;               /* the axis is n_groups parts (q, k, v), each divided over the ranks */
    int64_t groups[MAX_GROUPS]; /* full sizes of the parts */
} vstate;

typedef struct {
    const gr_graph *src;
    gr_graph *g;                /* the rank's graph (a clone of src, edited) */
    int n, rank;
    int nv0;                    /* values of src: the states and maps below cover them */
    vstate *st;
    int *cur;                   /* value of g holding src value v for this rank (split: its slice) */
    int *rep;                   /* all-gathered form of a split value, -1 until made */
    int *sliced;                /* a constant's slice for this rank, -1 until made */
    vstate *sliced_as;          /* ... and how it was cut (axis, parts) */
    int *uses, *first_use;      /* consumers of each src value */
    int seq;                    /* names of inserted nodes */
    gr_strbuf *report;
    gr_shard_stats *stats;
} shard_ctx;

static const char *node_name(const shard_ctx *c, int node) { return c->src->nodes.data[node].name; }
static const gr_ir_value *sval(const shard_ctx *c, int v) { return &c->src->values.data[v]; }

static gr_status cannot(const shard_ctx *c, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static gr_status cannot(const shard_ctx *c, int node, const char *fmt, ...) {
    char where[512] = "a graph output", why[512];
    if (node >= 0) gr_ir_node_where(c->src, &c->src->nodes.data[node], where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return gr_error(GR_ERR_UNSUPPORTED, "tensor parallelism over %d ranks: cannot split %s: %s", c->n, where, why);
}

static void note(shard_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(shard_ctx *c, const char *fmt, ...) {
    if (!c->report) return;
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    gr_sb_printf(c->report, "  %s\n", line);
}

static int norm_axis(int64_t a, int nd) { return (int)(a < 0 ? a + nd : a); }

static bool concrete(gr_dim d) { return !gr_dx_is_sym(d); }

/* ==== building blocks ======================================================================== */
static gr_status add1(shard_ctx *c, gr_op op, const char *base, const char *what, int n_in, const int *in, int n_attr,
                      const gr_ir_attr *attrs, int *out_value) {
    char name[300];
    snprintf(name, sizeof name, "%s/tp_%s_%d", base, what, c->seq++);
    const char *out_name = name;
    int node;
    GR_TRY(gr_ir_add_node(c->g, op, name, n_in, in, 1, &out_name, n_attr, attrs, &node));
    *out_value = c->g->nodes.data[node].out[0];
    return GR_OK;
}

static gr_status add_collective(shard_ctx *c, gr_op op, const char *base, int in, int *out) {
    gr_ir_attr a = {.name = "ranks", .kind = GR_IR_ATTR_INT, .i = c->n};
    GR_TRY(add1(c, op, base, op == GR_OP_ALL_REDUCE ? "all_reduce" : "all_gather", 1, &in, 1, &a, out));
    if (op == GR_OP_ALL_REDUCE) c->stats->all_reduces++;
    else c->stats->all_gathers++;
    return GR_OK;
}

static gr_status scalar_const(shard_ctx *c, gr_dtype t, double v, int *out) {
    unsigned char buf[8] = {0};
    gr_store_f64(buf, t, 0, v);
    return gr_ir_add_const(c->g, NULL, t, 0, NULL, buf, out);
}

/* sizes of this rank's share of each part along an axis of full extent `extent` */
static bool group_ok(const shard_ctx *c, const vstate *s, int64_t extent) {
    int64_t sum = 0;
    for (int i = 0; i < s->n_groups; i++) {
        if (s->groups[i] % c->n) return false;
        sum += s->groups[i];
    }
    return sum == extent;
}

static vstate split_state(int axis, int n_groups, const int64_t *groups) {
    vstate s = {.split = true, .axis = axis, .n_groups = n_groups};
    for (int i = 0; i < n_groups; i++) s.groups[i] = groups[i];
    return s;
}

/* This rank's slice of constant v along `axis`, part by part (cached per value and axis). */
static gr_status slice_const(shard_ctx *c, int v, int axis, const vstate *parts, int *out) {
    const gr_ir_value *x = sval(c, v);
    int64_t dims[GR_MAX_DIMS];
    GR_TRY(gr_ir_value_shape(c->src, v, dims));
    vstate whole = {.split = true, .axis = axis, .n_groups = 1, .groups = {dims[axis]}};
    if (!parts || parts->n_groups < 1) parts = &whole;
    /* one slice per constant, as every use of it so far cut it: a tied embedding and LM head share it */
    if (c->sliced[v] >= 0) {
        const vstate *was = &c->sliced_as[v];
        if (was->axis == axis && was->n_groups == parts->n_groups &&
            !memcmp(was->groups, parts->groups, sizeof(int64_t) * (size_t)parts->n_groups))
            return *out = c->sliced[v], GR_OK;
        return gr_error(GR_ERR_UNSUPPORTED, "tensor parallelism over %d ranks: constant '%s' would be split two ways", c->n,
                        x->name);
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int d = axis + 1; d < x->ndim; d++) inner *= dims[d];
    size_t es = gr_dtype_size(x->dtype);
    int64_t local = dims[axis] / c->n;
    size_t bytes = (size_t)(outer * local * inner) * es;
    char *data = gr_malloc(bytes ? bytes : 1);
    if (!data) return gr_nomem();
    char *dst = data;
    for (int64_t o = 0; o < outer; o++) {
        int64_t base = 0;
        for (int p = 0; p < parts->n_groups; p++) {
            int64_t share = parts->groups[p] / c->n;
            const char *from = (const char *)x->data + (size_t)((o * dims[axis] + base + c->rank * share) * inner) * es;
            memcpy(dst, from, (size_t)(share * inner) * es);
            dst += (size_t)(share * inner) * es;
            base += parts->groups[p];
        }
    }
    int64_t ldims[GR_MAX_DIMS];
    memcpy(ldims, dims, sizeof ldims);
    ldims[axis] = local;
    char name[300];
    snprintf(name, sizeof name, "%s/tp_rank%d", x->name, c->rank);
    int nv;
    gr_status st = gr_ir_add_const_owned(c->g, name, x->dtype, x->ndim, ldims, data, bytes, &nv);
    if (st != GR_OK) return st; /* add_const_owned frees data on failure */
    c->sliced[v] = nv;
    c->sliced_as[v] = *parts;
    c->sliced_as[v].axis = axis;
    c->stats->split_weight_bytes += x->nbytes;
    *out = nv;
    return GR_OK;
}

/* The whole (replicated) form of src value v on this rank: v itself, or its all_gather. */
static gr_status whole(shard_ctx *c, int v, int at_node, int *out) {
    if (!c->st[v].split) return *out = c->cur[v], GR_OK;
    if (c->rep[v] >= 0) return *out = c->rep[v], GR_OK;
    const gr_ir_value *x = sval(c, v);
    const vstate *s = &c->st[v];
    int64_t part = s->groups[0];
    for (int i = 1; i < s->n_groups; i++)
        if (s->groups[i] != part) return cannot(c, at_node, "its input '%s' is split in parts of unequal sizes and cannot be gathered", x->name);
    /* [N, pre..., parts, share, post...] -> [pre..., parts, N, share, post...] -> the whole shape */
    int ax = s->axis, nd = x->ndim;
    gr_dim shape[GR_MAX_DIMS + 2];
    int k = 0;
    shape[k++] = gr_dx_const(c->n);
    for (int d = 0; d < ax; d++) shape[k++] = x->dims[d];
    shape[k++] = gr_dx_const(s->n_groups);
    shape[k++] = gr_dx_const(part / c->n);
    for (int d = ax + 1; d < nd; d++) shape[k++] = x->dims[d];
    if (k > GR_MAX_DIMS) return cannot(c, at_node, "gathering '%s' needs more than %d dims", x->name, GR_MAX_DIMS);
    int64_t perm[GR_MAX_DIMS];
    int p = 0;
    for (int d = 0; d < ax; d++) perm[p++] = 1 + d;
    perm[p++] = 1 + ax;
    perm[p++] = 0;
    for (int d = 2 + ax; d < k; d++) perm[p++] = d;
    int ag, r1, tr, r2;
    GR_TRY(add_collective(c, GR_OP_ALL_GATHER, x->name, c->cur[v], &ag));
    gr_ir_attr a;
    memset(&a, 0, sizeof a);
    GR_TRY(gr_ir_attr_make_sints(&a, "shape", shape, k));
    gr_status st = add1(c, GR_OP_RESHAPE, x->name, "parts", 1, &ag, 1, &a, &r1);
    gr_ir_attr_free(&a);
    GR_TRY(st);
    gr_ir_attr pa = {.name = "perm", .kind = GR_IR_ATTR_INTS, .ints = perm, .n = k};
    GR_TRY(add1(c, GR_OP_TRANSPOSE, x->name, "ranks_in_place", 1, &r1, 1, &pa, &tr));
    memset(&a, 0, sizeof a);
    GR_TRY(gr_ir_attr_make_sints(&a, "shape", x->dims, nd));
    st = add1(c, GR_OP_RESHAPE, x->name, "whole", 1, &tr, 1, &a, &r2);
    gr_ir_attr_free(&a);
    GR_TRY(st);
    c->rep[v] = r2;
    if (at_node < 0) note(c, "gather   '%s' split on axis %d, all_gather for the graph output", x->name, ax);
    else note(c, "gather   '%s' split on axis %d, all_gather before node '%s' (%s)", x->name, ax, node_name(c, at_node),
              gr_op_get(c->src->nodes.data[at_node].op)->name);
    *out = r2;
    return GR_OK;
}

/* Replicated value v read by an op whose output is split on axis oa of an out_nd-dim space
 * (right-aligned broadcasting): v itself where it broadcasts along oa, else its slice. false
 * when it cannot be sliced. */
static gr_status local_for(shard_ctx *c, int v, int out_nd, int oa, const vstate *parts, int *out, bool *ok) {
    const gr_ir_value *x = sval(c, v);
    int k = oa - (out_nd - x->ndim);
    *ok = true;
    if (k < 0 || (concrete(x->dims[k]) && x->dims[k].size == 1)) return *out = c->cur[v], GR_OK;
    int64_t extent = x->dims[k].size;
    if (!concrete(x->dims[k]) || !group_ok(c, parts, extent)) return *ok = false, GR_OK;
    if (x->kind == GR_VAL_CONST && c->cur[v] == v) return slice_const(c, v, k, parts, out);
    if (parts->n_groups != 1) return *ok = false, GR_OK;
    int64_t start = c->rank * (extent / c->n), end = start + extent / c->n, axis = k, step = 1;
    gr_ir_attr a[4] = {
        {.name = "starts", .kind = GR_IR_ATTR_INTS, .ints = &start, .n = 1},
        {.name = "ends", .kind = GR_IR_ATTR_INTS, .ints = &end, .n = 1},
        {.name = "axes", .kind = GR_IR_ATTR_INTS, .ints = &axis, .n = 1},
        {.name = "steps", .kind = GR_IR_ATTR_INTS, .ints = &step, .n = 1},
    };
    return add1(c, GR_OP_SLICE, x->name, "slice", 1, &c->cur[v], 4, a, out);
}

/* Every split input of node gathered: the node runs whole (the fallback of any op). */
static gr_status run_whole(shard_ctx *c, int node) {
    const gr_ir_node *n = &c->src->nodes.data[node]; /* g's node array grows below: index it afresh */
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0) continue;
        int w;
        GR_TRY(whole(c, v, node, &w));
        c->g->nodes.data[node].in[i] = w;
    }
    return GR_OK;
}

static void set_out(shard_ctx *c, int node, int slot, vstate s) { c->st[c->src->nodes.data[node].out[slot]] = s; }

/* ==== rules ================================================================================== */
/* Element-wise ops (broadcasting): the split inputs agree on an output axis, the others are
 * sliced along it or broadcast along it. */
static gr_status rule_elementwise(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    const gr_ir_value *y = sval(c, n->out[0]);
    int oa = -1;
    const vstate *parts = NULL;
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0 || !c->st[v].split) continue;
        int a = c->st[v].axis + (y->ndim - sval(c, v)->ndim);
        if (oa >= 0 && (a != oa || memcmp(parts->groups, c->st[v].groups, sizeof parts->groups) ||
                        parts->n_groups != c->st[v].n_groups))
            return *done = false, GR_OK;
        oa = a;
        parts = &c->st[v];
    }
    if (oa < 0) return *done = true, GR_OK; /* nothing split: unchanged */
    int local[8];
    if (n->n_in > 8) return *done = false, GR_OK;
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        local[i] = v;
        if (v < 0) continue;
        if (c->st[v].split) {
            local[i] = c->cur[v];
            continue;
        }
        bool ok;
        GR_TRY(local_for(c, v, y->ndim, oa, parts, &local[i], &ok));
        if (!ok) return *done = false, GR_OK;
    }
    for (int i = 0; i < n->n_in; i++) c->g->nodes.data[node].in[i] = local[i];
    set_out(c, node, 0, split_state(oa, parts->n_groups, parts->groups));
    return *done = true, GR_OK;
}

/* Where a split on axis `ax` of `in` lands in the view `out` (reshape, squeeze, unsqueeze,
 * identity): the out axis whose leading dims hold as many elements as in's dims before ax,
 * and whose extent divides by N (so each rank's block is whole rows of it). -1 if none. */
static gr_status view_axis(shard_ctx *c, const gr_ir_value *in, const gr_ir_value *out, int ax, int *oa) {
    *oa = -1;
    gr_dim pin = gr_dx_const(1), pout = gr_dx_const(1);
    for (int d = 0; d < ax; d++) GR_TRY(gr_dx_binary(c->g, GR_DX_MUL, pin, in->dims[d], &pin));
    for (int b = 0; b < out->ndim; b++) {
        if (gr_dx_equal(pout, pin) && concrete(out->dims[b]) && out->dims[b].size > 1) {
            if (out->dims[b].size % c->n == 0) *oa = b;
            return GR_OK;
        }
        GR_TRY(gr_dx_binary(c->g, GR_DX_MUL, pout, out->dims[b], &pout));
    }
    return GR_OK;
}

static gr_status rule_view(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int v = n->in[0];
    const vstate *s = &c->st[v];
    const gr_ir_value *x = sval(c, v), *y = sval(c, n->out[0]);
    int oa;
    gr_status st = view_axis(c, x, y, s->axis, &oa);
    if (st == GR_ERR_UNSUPPORTED) gr_error_clear(), oa = -1;
    else GR_TRY(st);
    if (oa < 0) {
        if (n->op == GR_OP_RESHAPE && s->n_groups == 1)
            return cannot(c, node, "it reshapes '%s' (split on axis %d into %d) so that the ranks' blocks are not whole "
                                   "slices of an output axis (heads or columns not divisible by %d)",
                          x->name, s->axis, c->n, c->n);
        return *done = false, GR_OK;
    }
    /* parts survive only when the axis is kept as it is */
    bool same = y->dims[oa].size == x->dims[s->axis].size;
    if (s->n_groups > 1 && !same) return *done = false, GR_OK;
    gr_ir_node *gn = &c->g->nodes.data[node];
    if (n->op == GR_OP_RESHAPE) {
        const gr_ir_attr *a0 = gr_ir_attr_find(n, "shape");
        gr_ir_attr *a = NULL;
        for (int i = 0; i < gn->n_attr; i++)
            if (!strcmp(gn->attrs[i].name, "shape")) a = &gn->attrs[i];
        if (!a0 || !a || a->n != y->ndim) return *done = false, GR_OK;
        if (a->exprs && a->exprs[oa] != GR_SYM_NONE) return *done = false, GR_OK;
        if (a->ints[oa] > 0) a->ints[oa] /= c->n;
        else if (a->ints[oa] != -1) return *done = false, GR_OK;
    }
    gn->in[0] = c->cur[v];
    if (y->dims[oa].size < x->dims[s->axis].size) note(c, "heads    node '%s' (reshape): axis %d of %lld -> %lld per rank", n->name, oa,
                    (long long)y->dims[oa].size, (long long)(y->dims[oa].size / c->n));
    set_out(c, node, 0, split_state(oa, s->n_groups, same ? s->groups : (int64_t[]){y->dims[oa].size}));
    return *done = true, GR_OK;
}

static gr_status rule_transpose(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int v = n->in[0], nd = sval(c, v)->ndim;
    const int64_t *perm;
    int np;
    GR_TRY(gr_ir_attr_ints(c->src, n, "perm", &perm, &np));
    int oa = -1;
    for (int i = 0; i < nd; i++) {
        int from = np < 0 ? nd - 1 - i : norm_axis(perm[i], nd);
        if (from == c->st[v].axis) oa = i;
    }
    if (oa < 0) return *done = false, GR_OK;
    c->g->nodes.data[node].in[0] = c->cur[v];
    set_out(c, node, 0, split_state(oa, c->st[v].n_groups, c->st[v].groups));
    return *done = true, GR_OK;
}

static gr_status rule_expand(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int v = n->in[0];
    const gr_ir_value *x = sval(c, v), *y = sval(c, n->out[0]);
    int oa = c->st[v].axis + (y->ndim - x->ndim);
    gr_ir_node *gn = &c->g->nodes.data[node];
    gr_ir_attr *a = NULL;
    for (int i = 0; i < gn->n_attr; i++)
        if (!strcmp(gn->attrs[i].name, "shape")) a = &gn->attrs[i];
    if (!a) return *done = false, GR_OK;
    int j = oa - (y->ndim - a->n);
    if (j >= 0) {
        if (a->exprs && a->exprs[j] != GR_SYM_NONE) return *done = false, GR_OK;
        if (a->ints[j] == x->dims[c->st[v].axis].size) a->ints[j] /= c->n;
        else if (a->ints[j] != 1 && a->ints[j] != -1) return *done = false, GR_OK;
    }
    gn->in[0] = c->cur[v];
    set_out(c, node, 0, split_state(oa, c->st[v].n_groups, c->st[v].groups));
    return *done = true, GR_OK;
}

/* reductions and normalizations along axes other than the split one */
static gr_status rule_reduce(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int v = n->in[0], nd = sval(c, v)->ndim, ax = c->st[v].axis, oa = ax;
    *done = false;
    if (n->op == GR_OP_SOFTMAX || n->op == GR_OP_LAYER_NORM || n->op == GR_OP_ARG_MAX || n->op == GR_OP_ARG_MIN) {
        int64_t axis, keep = 1;
        GR_TRY(gr_ir_attr_int(c->src, n, "axis", n->op == GR_OP_ARG_MAX || n->op == GR_OP_ARG_MIN ? 0 : -1, &axis));
        int a = norm_axis(axis, nd);
        if (n->op == GR_OP_LAYER_NORM ? ax >= a : ax == a) return GR_OK;
        if (n->op == GR_OP_ARG_MAX || n->op == GR_OP_ARG_MIN) {
            GR_TRY(gr_ir_attr_int(c->src, n, "keepdims", 1, &keep));
            if (!keep && a < ax) oa--;
        }
        for (int i = 1; i < n->n_in; i++)
            if (n->in[i] >= 0 && c->st[n->in[i]].split) return GR_OK;
    } else {
        const int64_t *axes;
        int na;
        int64_t keep;
        GR_TRY(gr_ir_attr_ints(c->src, n, "axes", &axes, &na));
        GR_TRY(gr_ir_attr_int(c->src, n, "keepdims", 1, &keep));
        if (na <= 0) return GR_OK;
        for (int i = 0; i < na; i++) {
            int a = norm_axis(axes[i], nd);
            if (a == ax) return GR_OK;
            if (!keep && a < ax) oa--;
        }
    }
    c->g->nodes.data[node].in[0] = c->cur[v];
    set_out(c, node, 0, split_state(oa, c->st[v].n_groups, c->st[v].groups));
    return *done = true, GR_OK;
}

static gr_status rule_slice(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int v = n->in[0], nd = sval(c, v)->ndim;
    const int64_t *axes;
    int na, ns;
    const int64_t *starts;
    GR_TRY(gr_ir_attr_ints(c->src, n, "axes", &axes, &na));
    GR_TRY(gr_ir_attr_ints(c->src, n, "starts", &starts, &ns));
    *done = false;
    for (int i = 0; i < (na < 0 ? ns : na); i++)
        if ((na < 0 ? i : norm_axis(axes[i], nd)) == c->st[v].axis) return GR_OK;
    c->g->nodes.data[node].in[0] = c->cur[v];
    set_out(c, node, 0, c->st[v]);
    return *done = true, GR_OK;
}

static gr_status rule_split(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int v = n->in[0], nd = sval(c, v)->ndim;
    const vstate *s = &c->st[v];
    int64_t axis;
    GR_TRY(gr_ir_attr_int(c->src, n, "axis", 0, &axis));
    int a = norm_axis(axis, nd);
    *done = false;
    gr_ir_node *gn = &c->g->nodes.data[node];
    if (a != s->axis) {
        gn->in[0] = c->cur[v];
        for (int i = 0; i < n->n_out; i++) set_out(c, node, i, *s);
        return *done = true, GR_OK;
    }
    /* along the split axis: only where each output is one of the parts (q, k, v) */
    if (s->n_groups != n->n_out) return GR_OK;
    for (int i = 0; i < n->n_out; i++)
        if (sval(c, n->out[i])->dims[a].size != s->groups[i]) return GR_OK;
    gr_ir_attr *sa = NULL;
    for (int i = 0; i < gn->n_attr; i++)
        if (!strcmp(gn->attrs[i].name, "split")) sa = &gn->attrs[i];
    if (sa) {
        if (sa->exprs || sa->n != n->n_out) return GR_OK;
        for (int i = 0; i < sa->n; i++) sa->ints[i] /= c->n;
    }
    gn->in[0] = c->cur[v];
    for (int i = 0; i < n->n_out; i++) set_out(c, node, i, split_state(a, 1, &s->groups[i]));
    note(c, "parts    node '%s' (split): %d parts of the split axis, each 1/%d per rank", n->name, n->n_out, c->n);
    return *done = true, GR_OK;
}

static gr_status rule_concat(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    const gr_ir_value *y = sval(c, n->out[0]);
    int64_t axis;
    GR_TRY(gr_ir_attr_int(c->src, n, "axis", 0, &axis));
    /* element-wise along every axis but the concatenated one */
    int ca = norm_axis(axis, y->ndim);
    for (int i = 0; i < n->n_in; i++)
        if (c->st[n->in[i]].split && c->st[n->in[i]].axis == ca) return *done = false, GR_OK;
    return rule_elementwise(c, node, done);
}

/* gather: a vocabulary-split embedding table, or a gather along another axis of a split value */
static gr_status rule_gather(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int data = n->in[0], idx = n->in[1];
    const gr_ir_value *dv = sval(c, data), *iv = sval(c, idx);
    int64_t axis;
    GR_TRY(gr_ir_attr_int(c->src, n, "axis", 0, &axis));
    int a = norm_axis(axis, dv->ndim);
    *done = false;
    if (c->st[idx].split) return GR_OK;
    if (c->st[data].split) {
        if (c->st[data].axis == a) return GR_OK;
        int oa = c->st[data].axis < a ? c->st[data].axis : c->st[data].axis + iv->ndim - 1;
        c->g->nodes.data[node].in[0] = c->cur[data];
        set_out(c, node, 0, split_state(oa, c->st[data].n_groups, c->st[data].groups));
        return *done = true, GR_OK;
    }
    /* vocab split: a float table of 2+ dims, rows along axis 0, ids computed at run time */
    if (dv->kind != GR_VAL_CONST || a != 0 || dv->ndim < 2 || !gr_dtype_is_float(dv->dtype) || iv->kind == GR_VAL_CONST ||
        !gr_dtype_is_int(iv->dtype) || !concrete(dv->dims[0]))
        return *done = true, GR_OK; /* nothing split: unchanged */
    int64_t rows = dv->dims[0].size;
    if (rows < MIN_VOCAB_ROWS) return *done = true, GR_OK; /* positions, token types: kept whole */
    if (rows % c->n)
        return cannot(c, node, "the table '%s' has %lld rows, not divisible by %d ranks", dv->name, (long long)rows, c->n);
    int64_t share = rows / c->n;
    int table = -1, off = -1, zero_i = -1, lim = -1, local = -1, ge = -1, lt = -1, ok = -1, safe = -1, y0 = -1, ok_u = -1,
        zero_f = -1, masked = -1, red = -1;
    GR_TRY(slice_const(c, data, 0, NULL, &table));
    GR_TRY(scalar_const(c, iv->dtype, (double)(c->rank * share), &off));
    GR_TRY(scalar_const(c, iv->dtype, 0, &zero_i));
    GR_TRY(scalar_const(c, iv->dtype, (double)share, &lim));
    GR_TRY(scalar_const(c, dv->dtype, 0, &zero_f));
    const char *base = n->name;
    int in2[3];
    in2[0] = c->cur[idx], in2[1] = off;
    GR_TRY(add1(c, GR_OP_SUB, base, "local_ids", 2, in2, 0, NULL, &local));
    in2[0] = local, in2[1] = zero_i;
    GR_TRY(add1(c, GR_OP_GREATER_EQUAL, base, "ge", 2, in2, 0, NULL, &ge));
    in2[0] = local, in2[1] = lim;
    GR_TRY(add1(c, GR_OP_LESS, base, "lt", 2, in2, 0, NULL, &lt));
    in2[0] = ge, in2[1] = lt;
    GR_TRY(add1(c, GR_OP_AND, base, "mine", 2, in2, 0, NULL, &ok));
    in2[0] = ok, in2[1] = local, in2[2] = zero_i;
    GR_TRY(add1(c, GR_OP_WHERE, base, "safe_ids", 3, in2, 0, NULL, &safe));
    y0 = c->g->nodes.data[node].out[0];
    c->g->nodes.data[node].in[0] = table;
    c->g->nodes.data[node].in[1] = safe;
    /* the mask gets the table's trailing dims as ones */
    int64_t ax_u[GR_MAX_DIMS];
    int nu = dv->ndim - 1;
    for (int i = 0; i < nu; i++) ax_u[i] = iv->ndim + i;
    gr_ir_attr ua = {.name = "axes", .kind = GR_IR_ATTR_INTS, .ints = ax_u, .n = nu};
    GR_TRY(add1(c, GR_OP_UNSQUEEZE, base, "mine_rows", 1, &ok, 1, &ua, &ok_u));
    in2[0] = ok_u, in2[1] = y0, in2[2] = zero_f;
    GR_TRY(add1(c, GR_OP_WHERE, base, "masked", 3, in2, 0, NULL, &masked));
    GR_TRY(add_collective(c, GR_OP_ALL_REDUCE, base, masked, &red));
    c->cur[n->out[0]] = red;
    note(c, "vocab    node '%s' (gather): table '%s' %lld rows -> %lld per rank, ids outside zeroed, then all_reduce", n->name,
         dv->name, (long long)rows, (long long)share);
    c->stats->splits++;
    return *done = true, GR_OK;
}

/* The parts of a column split's output: a Split along the last axis downstream (through
 * reshapes that keep that axis), else one part. */
static void column_parts(shard_ctx *c, int y, int64_t cols, vstate *s) {
    s->n_groups = 1;
    s->groups[0] = cols;
    for (int hop = 0; hop < 4 && c->uses[y] == 1 && c->first_use[y] >= 0; hop++) {
        const gr_ir_node *u = &c->src->nodes.data[c->first_use[y]];
        const gr_ir_value *uy = sval(c, u->out[0]);
        if (u->op == GR_OP_RESHAPE && uy->ndim > 0 && concrete(uy->dims[uy->ndim - 1]) && uy->dims[uy->ndim - 1].size == cols) {
            y = u->out[0];
            continue;
        }
        if (u->op != GR_OP_SPLIT || u->n_out < 2 || u->n_out > MAX_GROUPS) return;
        int64_t axis = 0;
        if (gr_ir_attr_int(c->src, u, "axis", 0, &axis) != GR_OK) return gr_error_clear();
        int nd = sval(c, y)->ndim;
        if (norm_axis(axis, nd) != nd - 1) return;
        int64_t sum = 0;
        for (int i = 0; i < u->n_out; i++) {
            const gr_ir_value *o = sval(c, u->out[i]);
            if (!concrete(o->dims[nd - 1])) return;
            sum += o->dims[nd - 1].size;
        }
        if (sum != cols) return;
        s->n_groups = u->n_out;
        for (int i = 0; i < u->n_out; i++) s->groups[i] = sval(c, u->out[i])->dims[nd - 1].size;
        return;
    }
}

static gr_status rule_matmul(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    int A = n->in[0], B = n->in[1], bias = n->n_in > 2 ? n->in[2] : -1, res = n->n_in > 3 ? n->in[3] : -1, y = n->out[0];
    const gr_ir_value *av = sval(c, A), *bv = sval(c, B), *yv = sval(c, y);
    int64_t ta, tb;
    GR_TRY(gr_ir_attr_int(c->src, n, "trans_a", 0, &ta));
    GR_TRY(gr_ir_attr_int(c->src, n, "trans_b", 0, &tb));
    gr_ir_node *gn = &c->g->nodes.data[node];
    bool weight = bv->kind == GR_VAL_CONST && bv->ndim == 2 && !c->st[B].split && c->cur[B] == B;
    const vstate *sa = &c->st[A], *sb = &c->st[B];
    *done = false;
    if ((bias >= 0 && c->st[bias].split) || (res >= 0 && c->st[res].split)) return GR_OK;
    /* row: A split along its inner axis by a weight */
    if (weight && sa->split && av->ndim >= 2 && sa->axis == (ta ? av->ndim - 2 : av->ndim - 1)) {
        int kax = tb ? 1 : 0, w;
        if (!group_ok(c, sa, bv->dims[kax].size)) return GR_OK;
        GR_TRY(slice_const(c, B, kax, sa, &w));
        gn->in[0] = c->cur[A];
        gn->in[1] = w;
        /* the bias and the residual are added once, after the sum */
        if (bias >= 0) c->g->nodes.data[node].in[2] = -1;
        if (res >= 0) c->g->nodes.data[node].in[3] = -1;
        int red;
        GR_TRY(add_collective(c, GR_OP_ALL_REDUCE, n->name, gn->out[0], &red));
        if (bias >= 0) {
            int in2[2] = {red, c->cur[bias]};
            GR_TRY(add1(c, GR_OP_ADD, n->name, "bias", 2, in2, 0, NULL, &red));
        }
        if (res >= 0) {
            int in2[2] = {red, c->cur[res]};
            GR_TRY(add1(c, GR_OP_ADD, n->name, "residual", 2, in2, 0, NULL, &red));
        }
        c->cur[y] = red;
        note(c, "row      node '%s' (matmul): weight '%s' [%lld, %lld] -> %lld %s per rank, then all_reduce%s", n->name,
             bv->name, (long long)bv->dims[0].size, (long long)bv->dims[1].size, (long long)(bv->dims[kax].size / c->n),
             kax == 0 ? "rows" : "columns", bias >= 0 ? " and the bias" : "");
        c->stats->splits++;
        return *done = true, GR_OK;
    }
    /* column: a replicated activation by a weight */
    if (weight && !sa->split && av->kind != GR_VAL_CONST && av->ndim >= 2) {
        int nax = tb ? 0 : 1, w;
        int64_t cols = bv->dims[nax].size;
        vstate parts;
        column_parts(c, y, cols, &parts);
        if (!group_ok(c, &parts, cols)) {
            if (parts.n_groups > 1)
                return cannot(c, node, "its weight '%s' has %d parts of %lld columns (fused q/k/v), not divisible by %d ranks",
                              bv->name, parts.n_groups, (long long)parts.groups[0], c->n);
            return cannot(c, node, "its weight '%s' has %lld output columns, not divisible by %d ranks", bv->name,
                          (long long)cols, c->n);
        }
        GR_TRY(slice_const(c, B, nax, &parts, &w));
        gn->in[1] = w;
        if (bias >= 0) {
            bool ok;
            int lb;
            GR_TRY(local_for(c, bias, yv->ndim, yv->ndim - 1, &parts, &lb, &ok));
            if (!ok) return cannot(c, node, "its bias '%s' cannot be split with its columns", sval(c, bias)->name);
            c->g->nodes.data[node].in[2] = lb;
        }
        if (res >= 0) {
            bool ok;
            int lr;
            GR_TRY(local_for(c, res, yv->ndim, yv->ndim - 1, &parts, &lr, &ok));
            if (!ok) return cannot(c, node, "its residual '%s' cannot be split with its columns", sval(c, res)->name);
            c->g->nodes.data[node].in[3] = lr;
        }
        set_out(c, node, 0, split_state(yv->ndim - 1, parts.n_groups, parts.groups));
        char partsdesc[64] = "";
        if (parts.n_groups > 1) snprintf(partsdesc, sizeof partsdesc, " (%d parts, each divided)", parts.n_groups);
        note(c, "column   node '%s' (matmul): weight '%s' [%lld, %lld] -> %lld columns per rank%s", n->name, bv->name,
             (long long)bv->dims[0].size, (long long)bv->dims[1].size, (long long)(cols / c->n), partsdesc);
        c->stats->splits++;
        return *done = true, GR_OK;
    }
    if (!sa->split && !sb->split) return *done = true, GR_OK; /* nothing split: unchanged */
    /* batched: split batch axes (attention heads), or A's rows, or B's columns */
    int oa = -1;
    const vstate *parts = NULL;
    if (sa->split) {
        if (av->ndim < 2) return GR_OK;
        if (sa->axis < av->ndim - 2) oa = sa->axis + (yv->ndim - av->ndim);
        else if (sa->axis == (ta ? av->ndim - 1 : av->ndim - 2)) oa = yv->ndim - 2;
        else return GR_OK;
        parts = sa;
    }
    if (sb->split) {
        if (bv->ndim < 2) return GR_OK;
        int ob;
        if (sb->axis < bv->ndim - 2) ob = sb->axis + (yv->ndim - bv->ndim);
        else if (sb->axis == (tb ? bv->ndim - 2 : bv->ndim - 1)) ob = yv->ndim - 1;
        else return GR_OK;
        if (oa >= 0 && (ob != oa || sb->n_groups != sa->n_groups || memcmp(sb->groups, sa->groups, sizeof sa->groups)))
            return GR_OK;
        oa = ob;
        parts = sb;
    }
    int loc[3] = {c->cur[A], c->cur[B], bias >= 0 ? c->cur[bias] : -1};
    bool ok = true;
    /* a replicated operand: sliced along a shared batch axis, as is along M or N */
    if (!sa->split && oa < yv->ndim - 2) GR_TRY(local_for(c, A, yv->ndim - 2, oa, parts, &loc[0], &ok));
    if (ok && !sb->split && oa < yv->ndim - 2) GR_TRY(local_for(c, B, yv->ndim - 2, oa, parts, &loc[1], &ok));
    if (ok && bias >= 0) GR_TRY(local_for(c, bias, yv->ndim, oa, parts, &loc[2], &ok));
    if (!ok) return GR_OK;
    for (int i = 0; i < n->n_in; i++) c->g->nodes.data[node].in[i] = loc[i];
    set_out(c, node, 0, split_state(oa, parts->n_groups, parts->groups));
    return *done = true, GR_OK;
}

/* fused attention (a .gir model or an earlier pass): heads split on axis 1 of q, k, v */
static gr_status rule_attention(shard_ctx *c, int node, bool *done) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    *done = false;
    /* operands laid out [B,S,H,D] (ops.c, made after sharding) are left to the generic rule */
    if (gr_ir_attr_find(n, "layout")) return GR_OK;
    for (int i = 0; i < 3; i++)
        if (!c->st[n->in[i]].split || c->st[n->in[i]].axis != 1 || c->st[n->in[i]].n_groups != 1) return GR_OK;
    int loc[4];
    for (int i = 0; i < 3; i++) loc[i] = c->cur[n->in[i]];
    if (n->n_in > 3 && n->in[3] >= 0) {
        bool ok;
        if (c->st[n->in[3]].split) return GR_OK;
        GR_TRY(local_for(c, n->in[3], 4, 1, &c->st[n->in[0]], &loc[3], &ok));
        if (!ok) return GR_OK;
    }
    for (int i = 0; i < n->n_in; i++) c->g->nodes.data[node].in[i] = loc[i];
    set_out(c, node, 0, c->st[n->in[0]]);
    note(c, "heads    node '%s' (attention): %lld heads -> %lld per rank", n->name, (long long)sval(c, n->in[0])->dims[1].size,
         (long long)(sval(c, n->in[0])->dims[1].size / c->n));
    return *done = true, GR_OK;
}

static gr_status visit(shard_ctx *c, int node) {
    const gr_ir_node *n = &c->src->nodes.data[node];
    const gr_op_info *info = gr_op_get(n->op);
    bool any_split = false, replaced = false;
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0) continue;
        any_split |= c->st[v].split;
        if (c->cur[v] != v) replaced = true;
    }
    bool done = false;
    if (n->op == GR_OP_MATMUL) GR_TRY(rule_matmul(c, node, &done));
    else if (n->op == GR_OP_GATHER) GR_TRY(rule_gather(c, node, &done));
    else if (!any_split) done = true;
    else if (info->kind == GR_OPK_UNARY || info->kind == GR_OPK_BINARY || info->kind == GR_OPK_COMPARE || n->op == GR_OP_WHERE) {
        if (n->op == GR_OP_IDENTITY) GR_TRY(rule_view(c, node, &done));
        else GR_TRY(rule_elementwise(c, node, &done));
    } else if (n->op == GR_OP_RESHAPE || n->op == GR_OP_SQUEEZE || n->op == GR_OP_UNSQUEEZE) GR_TRY(rule_view(c, node, &done));
    else if (n->op == GR_OP_TRANSPOSE) GR_TRY(rule_transpose(c, node, &done));
    else if (n->op == GR_OP_EXPAND) GR_TRY(rule_expand(c, node, &done));
    else if (n->op == GR_OP_SLICE) GR_TRY(rule_slice(c, node, &done));
    else if (n->op == GR_OP_SPLIT) GR_TRY(rule_split(c, node, &done));
    else if (n->op == GR_OP_CONCAT) GR_TRY(rule_concat(c, node, &done));
    else if (n->op == GR_OP_ATTENTION) GR_TRY(rule_attention(c, node, &done));
    else if (info->kind == GR_OPK_REDUCE) GR_TRY(rule_reduce(c, node, &done));
    if (!done) {
        GR_TRY(run_whole(c, node));
        for (int i = 0; i < n->n_out; i++) c->st[n->out[i]].split = false;
        return GR_OK;
    }
    /* a rule that left an input as it was reads the value's current form (an all_reduce's
     * result, a gathered whole) */
    if (replaced || any_split) {
        gr_ir_node *gn = &c->g->nodes.data[node];
        for (int i = 0; i < n->n_in; i++) {
            int v = n->in[i];
            if (v >= 0 && gn->in[i] == v && c->cur[v] != v) gn->in[i] = c->cur[v];
        }
    }
    return GR_OK;
}

/* ==== driver ================================================================================= */
/* The graph output i reads its whole value, under the output's own name. */
static gr_status finish_output(shard_ctx *c, int i) {
    int v = c->src->outputs.data[i];
    int w;
    GR_TRY(whole(c, v, -1, &w));
    if (w == v) return GR_OK;
    for (int j = 0; j < i; j++) /* an output listed twice: already renamed */
        if (c->src->outputs.data[j] == v) return c->g->outputs.data[i] = c->g->outputs.data[j], GR_OK;
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/tp_local", c->src->values.data[v].name);
    GR_TRY(gr_ir_rename_value(c->g, v, tmp));
    GR_TRY(gr_ir_rename_value(c->g, w, c->src->values.data[v].name));
    c->g->outputs.data[i] = w;
    return GR_OK;
}

#define SHARD_ARRAYS 8
gr_status gr_pass_shard(const gr_graph *src, int n_ranks, int rank, gr_graph **out, gr_strbuf *report, gr_shard_stats *stats) {
    *out = NULL;
    gr_shard_stats local_stats;
    memset(&local_stats, 0, sizeof local_stats);
    if (!stats) stats = &local_stats;
    memset(stats, 0, sizeof *stats);
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
        return gr_error(GR_ERR_INVALID, "tensor parallelism: rank %d of %d ranks", rank, n_ranks);
    for (int i = 0; i < src->syms.len; i++)
        if (src->syms.data[i].data_value >= 0)
            return gr_error(GR_ERR_UNSUPPORTED, "tensor parallelism: the model has a data-dependent dim ('%s', from %s)",
                            src->syms.data[i].name, src->syms.data[i].origin ? src->syms.data[i].origin : "a node");
    for (int i = 0; i < src->nodes.len; i++)
        if (gr_op_get(src->nodes.data[i].op)->kind == GR_OPK_CONTROL) {
            /* a branch or body reads outer values by name: it would read a rank's partial sums */
            char where[512];
            gr_ir_node_where(src, &src->nodes.data[i], where, sizeof where);
            return gr_error(GR_ERR_UNSUPPORTED, "tensor parallelism: %s: control flow (if/loop) is not split", where);
        }
    for (int i = 0; i < src->nodes.len; i++)
        for (int k = 0; k < src->nodes.data[i].n_out; k++)
            if (!src->values.data[src->nodes.data[i].out[k]].typed)
                return gr_error(GR_ERR_INVALID, "tensor parallelism: node '%s' has no inferred shape", src->nodes.data[i].name);
    shard_ctx c;
    memset(&c, 0, sizeof c);
    c.src = src;
    c.n = n_ranks;
    c.rank = rank;
    c.nv0 = src->values.len;
    c.report = rank == 0 ? report : NULL;
    c.stats = stats;
    size_t nv = (size_t)(c.nv0 ? c.nv0 : 1);
    c.st = gr_calloc(nv, sizeof(vstate));
    c.sliced_as = gr_calloc(nv, sizeof(vstate));
    int **arrays[] = {&c.cur, &c.rep, &c.sliced, &c.uses, &c.first_use};
    gr_status st = c.st && c.sliced_as ? GR_OK : gr_nomem();
    for (size_t i = 0; st == GR_OK && i < sizeof arrays / sizeof arrays[0]; i++)
        if (!(*arrays[i] = gr_malloc(nv * sizeof(int)))) st = gr_nomem();
    if (st != GR_OK) goto done;
    for (int v = 0; v < c.nv0; v++) c.cur[v] = v, c.rep[v] = -1, c.sliced[v] = -1, c.uses[v] = 0, c.first_use[v] = -1;
    for (int i = 0; i < src->nodes.len; i++)
        for (int k = 0; k < src->nodes.data[i].n_in; k++) {
            int v = src->nodes.data[i].in[k];
            if (v < 0) continue;
            if (c.uses[v]++ == 0) c.first_use[v] = i;
        }
    for (int i = 0; i < src->outputs.len; i++) c.uses[src->outputs.data[i]]++;
    if ((st = gr_ir_graph_clone(src, &c.g)) != GR_OK) goto done;
    if (c.report) gr_sb_printf(c.report, "tensor parallelism: %d ranks (one host thread per rank, collectives in the ranks' graphs)\n", n_ranks);
    for (int i = 0; i < src->nodes.len && st == GR_OK; i++) st = visit(&c, i);
    for (int i = 0; i < src->outputs.len && st == GR_OK; i++) st = finish_output(&c, i);
    if (st != GR_OK) goto done;
    for (int v = 0; v < c.g->values.len; v++)
        if (c.g->values.data[v].kind == GR_VAL_NODE) c.g->values.data[v].typed = false;
    if ((st = gr_ir_topo_sort(c.g, "tensor parallelism")) != GR_OK) goto done;
    if ((st = gr_ir_infer_shapes(c.g)) != GR_OK) {
        st = gr_error_prefix(st, "tensor parallelism over %d ranks: rank %d's graph", n_ranks, rank);
        goto done;
    }
    if ((st = gr_ir_prune(c.g)) != GR_OK) goto done;
    for (int v = 0; v < c.g->values.len; v++)
        if (c.g->values.data[v].kind == GR_VAL_CONST) stats->rank_weight_bytes += c.g->values.data[v].nbytes;
    if (c.report)
        gr_sb_printf(c.report, "  per run: %d all_reduce, %d all_gather; split weights %.2f MB -> %.2f MB per rank\n",
                     stats->all_reduces, stats->all_gathers, (double)stats->split_weight_bytes / 1e6,
                     (double)stats->split_weight_bytes / 1e6 / n_ranks);
    *out = c.g;
    c.g = NULL;
done:
    gr_ir_graph_destroy(c.g);
    gr_free(c.st, c.st ? nv * sizeof(vstate) : 0);
    gr_free(c.sliced_as, c.sliced_as ? nv * sizeof(vstate) : 0);
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) gr_free(*arrays[i], *arrays[i] ? nv * sizeof(int) : 0);
    return st;
}
