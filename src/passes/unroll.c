/* passes/unroll — a `loop` whose trip count is a data-dependent symbol (an ONNX Loop
 * with a run-time M, frontend/onnx/onnx-control.c), unrolled for the binding.
 *
 * After specialization the node's `trip` attribute holds this binding's count (read
 * on the host by runtime/probe.c before the plan was chosen), so the body is inlined
 * that many times, in place of the node: iteration t reads the constant t, the
 * condition true and the previous iteration's carried values; the loop's carried
 * outputs are the last iteration's (identity nodes writing the loop's own output
 * values, so readers keep their indices) and each scan output is the iterations'
 * values stacked on a new leading axis (a `fill` of [0, ...] for zero iterations).
 * Each binding is a straight-line graph: fused, planned and captured as any other.
 * The count's range (at most 256 iterations, set by the importer) bounds the work.
 *
 * Nodes and values are addressed by index: appending to g moves its arrays. */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

#define GR_UNROLL_MAX 256 /* iterations of one loop, as the ONNX importer's unrolling */

/* base (taken over) made unique among g's node (node) or value (!node) names */
static char *unique_name(const gr_graph *g, bool node, char *base) {
    char *s = base;
    for (int k = 2; s && (node ? gr_ir_find_node(g, s) : gr_ir_find_value(g, s)) >= 0; k++) {
        char *next = gr_sprintf("%s.%d", base, k);
        if (s != base) gr_strfree(s);
        s = next;
    }
    if (s != base) gr_strfree(base);
    return s;
}

/* A node writing `value` (an existing value of g: the loop's output) from in[0..n_in). */
static gr_status emit_into(gr_graph *g, const char *loop, const char *tag, gr_op op, int n_in, const int *in, int n_attr,
                           const gr_ir_attr *attrs, int value) {
    char *name = unique_name(g, true, gr_sprintf("%s.%s", loop, tag));
    if (!name) return gr_nomem();
    int node;
    gr_status st = gr_ir_add_node(g, op, name, n_in, in, 1, NULL, n_attr, attrs, &node);
    gr_strfree(name);
    GR_TRY(st);
    int fresh = g->nodes.data[node].out[0];
    g->nodes.data[node].out[0] = value;
    if (fresh == g->values.len - 1) {
        gr_strfree(g->values.data[fresh].name);
        g->values.len--;
    }
    g->values.data[value].typed = false;
    return GR_OK;
}

static gr_status emit_fresh(gr_graph *g, const char *loop, const char *tag, gr_op op, int n_in, const int *in, int n_attr,
                            const gr_ir_attr *attrs, int *out) {
    char *name = unique_name(g, true, gr_sprintf("%s.%s", loop, tag));
    if (!name) return gr_nomem();
    int node;
    gr_status st = gr_ir_add_node(g, op, name, n_in, in, 1, NULL, n_attr, attrs, &node);
    gr_strfree(name);
    GR_TRY(st);
    *out = g->nodes.data[node].out[0];
    return GR_OK;
}

static gr_status add_scalar(gr_graph *g, const char *loop, const char *tag, gr_dtype t, int64_t v, int *out) {
    char *name = unique_name(g, false, gr_sprintf("%s.%s", loop, tag));
    if (!name) return gr_nomem();
    uint8_t b = (uint8_t)(v != 0);
    gr_status st = gr_ir_add_const(g, name, t, 0, NULL, t == GR_BOOL ? (const void *)&b : (const void *)&v, out);
    gr_strfree(name);
    return st;
}

/* One iteration t of body b inlined into g: map[] of b's values (inputs given). */
static gr_status inline_iteration(gr_graph *g, const char *loop, const char *where, const gr_graph *b, int t, int *map) {
    gr_status st = GR_OK;
    for (int v = 0; v < b->values.len && st == GR_OK; v++) {
        const gr_ir_value *val = &b->values.data[v];
        if (map[v] >= 0) continue;
        if (val->kind == GR_VAL_INPUT) { /* a capture of an outer value, by name */
            map[v] = gr_ir_find_value(g, val->name);
            if (map[v] < 0) st = gr_error(GR_ERR_INVALID, "%s: the body reads '%s', which the graph does not define", where, val->name);
        } else if (val->kind == GR_VAL_CONST) {
            int64_t dims[GR_MAX_DIMS];
            for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].size;
            char *name = unique_name(g, false, gr_sprintf("%s.iter%d.%s", loop, t, val->name));
            st = name ? gr_ir_add_const(g, name, val->dtype, val->ndim, dims, val->data, &map[v]) : gr_nomem();
            if (st == GR_OK) g->values.data[map[v]].placement = val->placement;
            gr_strfree(name);
        }
    }
    for (int i = 0; i < b->nodes.len && st == GR_OK; i++) {
        const gr_ir_node *n = &b->nodes.data[i];
        int in[64];
        if (n->n_in > 64) return gr_error(GR_ERR_UNSUPPORTED, "%s: body node '%s' has more than 64 inputs", where, n->name);
        for (int k = 0; k < n->n_in && st == GR_OK; k++) {
            in[k] = n->in[k] < 0 ? -1 : map[n->in[k]];
            if (n->in[k] >= 0 && in[k] < 0) st = gr_error(GR_ERR_INVALID, "%s: body node '%s' reads an undefined value", where, n->name);
        }
        char *name = st == GR_OK ? unique_name(g, true, gr_sprintf("%s.iter%d.%s", loop, t, n->name)) : NULL;
        if (st == GR_OK && !name) st = gr_nomem();
        int node = -1;
        if (st == GR_OK) st = gr_ir_add_node(g, n->op, name, n->n_in, in, n->n_out, NULL, n->n_attr, n->attrs, &node);
        gr_strfree(name);
        if (st != GR_OK) break;
        gr_ir_node *nn = &g->nodes.data[node];
        nn->line = n->line;
        nn->col = n->col;
        for (int k = 0; k < nn->n_attr && st == GR_OK; k++) st = gr_ir_attr_import_exprs(g, b, &nn->attrs[k]);
        for (int k = 0; k < n->n_out; k++) map[n->out[k]] = g->nodes.data[node].out[k];
    }
    return st;
}

static gr_status unroll_one(gr_graph *g, int k) {
    char where[512];
    gr_ir_node_where(g, &g->nodes.data[k], where, sizeof where);
    const gr_ir_attr *body_a = gr_ir_attr_find(&g->nodes.data[k], "body"), *trip_a = gr_ir_attr_find(&g->nodes.data[k], "trip");
    const gr_graph *b = body_a && body_a->kind == GR_IR_ATTR_GRAPH ? body_a->graph : NULL;
    if (!b) return gr_error(GR_ERR_INVALID, "%s: needs a body subgraph", where);
    if (!trip_a || trip_a->kind != GR_IR_ATTR_INT)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: a loop without a trip count bound at plan time is not supported", where);
    if (trip_a->sym) return gr_error(GR_ERR_INVALID, "%s: its trip count is not bound for this plan", where);
    int64_t trip = trip_a->i;
    if (trip > GR_UNROLL_MAX) /* a data-dependent count's range stops it earlier, naming the ONNX node */
        return gr_error(GR_ERR_UNSUPPORTED, "%s: %lld iterations at this binding, more than the %d graft unrolls", where, (long long)trip,
                        GR_UNROLL_MAX);
    int n_in = g->nodes.data[k].n_in, n_out = g->nodes.data[k].n_out, n_carried = n_in - 2, n_scan = n_out - n_carried;
    if (trip < 0 || n_carried < 0 || n_scan < 0 || b->inputs.len < 2 + n_carried ||
        b->outputs.len != 1 + n_carried + n_scan)
        return gr_error(GR_ERR_INVALID, "%s: trip count %lld, %d carried values, %d scan outputs and a body of %d inputs and %d "
                                        "outputs do not fit",
                        where, (long long)trip, n_carried, n_scan, b->inputs.len, b->outputs.len);
    char *loop = gr_strdup(g->nodes.data[k].name);
    size_t ints = (size_t)(n_in + n_out + 1) + (size_t)b->values.len + (size_t)(n_scan ? n_scan : 1) * (size_t)(trip ? trip : 1);
    int *buf = gr_malloc(sizeof(int) * ints);
    if (!loop || !buf) {
        gr_strfree(loop);
        gr_free(buf, sizeof(int) * ints);
        return gr_nomem();
    }
    int *state = buf, *outs = state + (n_carried ? n_carried : 0), *map = outs + n_out + 1, *scans = map + b->values.len;
    for (int i = 0; i < n_carried; i++) state[i] = g->nodes.data[k].in[2 + i];
    for (int o = 0; o < n_out; o++) outs[o] = g->nodes.data[k].out[o];
    int first_node = g->nodes.len;
    gr_status st = GR_OK;
    for (int64_t t = 0; t < trip && st == GR_OK; t++) {
        for (int v = 0; v < b->values.len; v++) map[v] = -1;
        char tag[64];
        snprintf(tag, sizeof tag, "iter%lld.i", (long long)t);
        st = add_scalar(g, loop, tag, GR_I64, t, &map[b->inputs.data[0]]);
        snprintf(tag, sizeof tag, "iter%lld.cond", (long long)t);
        if (st == GR_OK) st = add_scalar(g, loop, tag, GR_BOOL, 1, &map[b->inputs.data[1]]);
        for (int i = 0; i < n_carried && st == GR_OK; i++) map[b->inputs.data[2 + i]] = state[i];
        if (st == GR_OK) st = inline_iteration(g, loop, where, b, (int)t, map);
        for (int i = 0; i < n_carried && st == GR_OK; i++) state[i] = map[b->outputs.data[1 + i]];
        for (int j = 0; j < n_scan && st == GR_OK; j++) {
            int64_t ax = 0;
            gr_ir_attr a = {.name = (char *)"axes", .kind = GR_IR_ATTR_INTS, .ints = &ax, .n = 1};
            int v = map[b->outputs.data[1 + n_carried + j]];
            snprintf(tag, sizeof tag, "iter%lld.scan%d", (long long)t, j);
            st = emit_fresh(g, loop, tag, GR_OP_UNSQUEEZE, 1, &v, 1, &a, &scans[(int64_t)j * trip + t]);
        }
    }
    for (int i = 0; i < n_carried && st == GR_OK; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "out%d", i);
        st = emit_into(g, loop, tag, GR_OP_IDENTITY, 1, &state[i], 0, NULL, outs[i]);
    }
    for (int j = 0; j < n_scan && st == GR_OK; j++) {
        char tag[64];
        snprintf(tag, sizeof tag, "scan%d", j);
        if (trip > 0) {
            gr_ir_attr a = {.name = (char *)"axis", .kind = GR_IR_ATTR_INT, .i = 0};
            st = emit_into(g, loop, tag, GR_OP_CONCAT, (int)trip, &scans[(int64_t)j * trip], 1, &a, outs[n_carried + j]);
            continue;
        }
        /* no iteration: [0, body output's shape] (concrete after specialization) */
        const gr_ir_value *bv = &b->values.data[b->outputs.data[1 + n_carried + j]];
        if (!bv->typed || bv->ndim + 1 > GR_MAX_DIMS) {
            st = gr_error(GR_ERR_UNSUPPORTED, "%s: scan output %d of zero iterations has no known shape", where, j);
            break;
        }
        int64_t shape[GR_MAX_DIMS];
        shape[0] = 0;
        for (int d = 0; d < bv->ndim; d++) shape[d + 1] = bv->dims[d].size;
        for (int d = 0; d < bv->ndim && st == GR_OK; d++)
            if (gr_dx_is_sym(bv->dims[d])) st = gr_error(GR_ERR_UNSUPPORTED, "%s: scan output %d has a symbolic shape", where, j);
        gr_ir_attr a[3] = {{.name = (char *)"shape", .kind = GR_IR_ATTR_INTS, .ints = shape, .n = bv->ndim + 1},
                           {.name = (char *)"value", .kind = GR_IR_ATTR_FLOAT, .f = 0},
                           {.name = (char *)"dtype", .kind = GR_IR_ATTR_STRING, .s = (char *)gr_dtype_name(bv->dtype)}};
        if (st == GR_OK) st = emit_into(g, loop, tag, GR_OP_FILL, 0, NULL, 3, a, outs[n_carried + j]);
    }
    if (st == GR_OK) gr_ir_splice_nodes(g, k, first_node);
    gr_strfree(loop);
    gr_free(buf, sizeof(int) * ints);
    return st; /* on failure the pipeline drops the whole clone */
}

gr_status gr_pass_unroll_loops(gr_graph *g) {
    bool changed = false;
    for (int k = 0; k < g->nodes.len; k++) {
        if (g->nodes.data[k].op != GR_OP_LOOP) continue;
        if (!gr_ir_attr_find(&g->nodes.data[k], "trip")) continue; /* a while-loop: lowered to a control step (cond.c) */
        GR_TRY(unroll_one(g, k));
        changed = true;
        k--; /* node k is now the first inlined node (a nested loop is unrolled in turn) */
    }
    return changed ? gr_ir_infer_shapes(g) : GR_OK;
}
