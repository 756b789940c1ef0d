/* passes/cond — control flow that stays control flow: the `if` nodes predication does
 * not take and the `loop` nodes no trip count binds (while-loops) become one step each,
 * run by the runtime's control runner (runtime/control.c).
 *
 * Which strategy each node gets is decided here and in control.c, and written into the
 * step's `reason` (what `graft explain` prints):
 *   if:   predicated (control.c: both branches inlined, where() selects) when both branches
 *         are straight-line and touch at most GR_PREDICATE_MAX_ELEMS elements together;
 *         else conditional execution (the condition read, one branch run).
 *   loop: unrolled when its trip count is bound per plan (frontend / unroll.c); a loop whose
 *         body computes its own condition (a while-loop) is a conditional loop step.
 *
 * The step binds, in this order: the node's inputs, the values of the graph that its
 * subgraphs read (captures, at any depth: gr_pass_control_captures), the node's outputs.
 * The outputs are what the step writes (memplan: param_written). */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

#define COND_MAX_NEST 64 /* subgraph levels walked (the ONNX importer stops at 16) */

static bool listed_input(const gr_graph *g, int v) {
    for (int j = 0; j < g->inputs.len; j++)
        if (g->inputs.data[j] == v) return true;
    return false;
}

static gr_status add_unique(int v, int *out, int max, int *n, const char *where) {
    for (int k = 0; k < *n; k++)
        if (out[k] == v) return GR_OK;
    if (*n >= max)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: its subgraphs read more than %d values of the enclosing graph", where, max);
    out[(*n)++] = v;
    return GR_OK;
}

/* Captures of sub (nested in chain[0..depth)) that no graph between g and sub defines. */
static gr_status walk(const gr_graph *g, const gr_graph **chain, int depth, const gr_graph *sub, int *out, int max, int *n,
                      const char *where) {
    if (depth >= COND_MAX_NEST) return gr_error(GR_ERR_UNSUPPORTED, "%s: subgraphs nest more than %d levels", where, COND_MAX_NEST);
    for (int i = 0; i < sub->values.len; i++) {
        const gr_ir_value *v = &sub->values.data[i];
        if (v->kind != GR_VAL_INPUT || listed_input(sub, i)) continue;
        bool inner = false; /* defined by an intermediate graph: that graph's capture, not g's */
        for (int k = 1; k < depth && !inner; k++) inner = gr_ir_find_value(chain[k], v->name) >= 0;
        if (inner) continue;
        int gv = gr_ir_find_value(g, v->name);
        if (gv < 0) return gr_error(GR_ERR_INVALID, "%s: a subgraph reads '%s', which no enclosing graph defines", where, v->name);
        GR_TRY(add_unique(gv, out, max, n, where));
    }
    chain[depth] = sub;
    for (int i = 0; i < sub->nodes.len; i++) {
        const gr_ir_node *nd = &sub->nodes.data[i];
        for (int a = 0; a < nd->n_attr; a++)
            if (nd->attrs[a].kind == GR_IR_ATTR_GRAPH && nd->attrs[a].graph)
                GR_TRY(walk(g, chain, depth + 1, nd->attrs[a].graph, out, max, n, where));
    }
    return GR_OK;
}

gr_status gr_pass_control_captures(const gr_graph *g, const gr_ir_node *n, int *out, int max, int *n_out) {
    char where[512];
    gr_ir_node_where(g, n, where, sizeof where);
    const gr_graph *chain[COND_MAX_NEST + 1];
    chain[0] = g;
    *n_out = 0;
    for (int a = 0; a < n->n_attr; a++)
        if (n->attrs[a].kind == GR_IR_ATTR_GRAPH && n->attrs[a].graph) GR_TRY(walk(g, chain, 1, n->attrs[a].graph, out, max, n_out, where));
    return GR_OK;
}

/* Elements a graph's nodes write (outputs' numel), recursively; a loop counts as
 * unbounded (INT64_MAX) and an unknown shape too: either makes predication refuse. */
int64_t gr_pass_graph_work(const gr_graph *g) {
    int64_t total = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        if (n->op == GR_OP_LOOP) return INT64_MAX;
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].kind == GR_IR_ATTR_GRAPH && n->attrs[a].graph) {
                int64_t w = gr_pass_graph_work(n->attrs[a].graph);
                if (w == INT64_MAX || total > INT64_MAX - w) return INT64_MAX;
                total += w;
            }
        for (int k = 0; k < n->n_out; k++) {
            if (n->out[k] < 0) continue;
            int64_t e = gr_ir_value_numel(&g->values.data[n->out[k]]);
            if (e < 0 || total > INT64_MAX - e) return INT64_MAX;
            total += e;
        }
    }
    return total;
}

gr_status gr_pass_control_step(gr_graph *g, int node, gr_step *s) {
    const gr_ir_node *n = &g->nodes.data[node];
    char where[512];
    gr_ir_node_where(g, n, where, sizeof where);
    const char *need[2] = {n->op == GR_OP_IF ? "then_branch" : "body", n->op == GR_OP_IF ? "else_branch" : NULL};
    for (int k = 0; k < 2; k++) {
        const gr_ir_attr *a = need[k] ? gr_ir_attr_find(n, need[k]) : NULL;
        if (need[k] && (!a || a->kind != GR_IR_ATTR_GRAPH || !a->graph))
            return gr_error(GR_ERR_INVALID, "%s: needs the subgraph attribute '%s'", where, need[k]);
    }
    if (n->op == GR_OP_LOOP && n->n_out > n->n_in - 2)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: a while-loop (no trip count bound at plan time) with %d scan output(s): their "
                                            "length is data-dependent; graft runs while-loops with loop-carried values only",
                        where, n->n_out - (n->n_in - 2));
    int caps[GR_KMAX_PARAMS], n_caps = 0, n_in = 0;
    for (int i = 0; i < n->n_in; i++) n_in += n->in[i] >= 0;
    int room = GR_KMAX_PARAMS - n_in - n->n_out;
    if (room < 0)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: %d inputs and %d outputs, more than the %d values a control step binds", where, n_in,
                        n->n_out, GR_KMAX_PARAMS);
    GR_TRY(gr_pass_control_captures(g, n, caps, room, &n_caps));
    memset(s, 0, sizeof *s);
    s->kind = GR_STEP_HOST;
    s->node = node;
    s->out_value = -1; /* several outputs: memplan takes the node's outputs as written */
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] >= 0) s->args[s->n_args++] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = n->in[i]};
    for (int i = 0; i < n_caps; i++) s->args[s->n_args++] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = caps[i]};
    for (int i = 0; i < n->n_out; i++) s->args[s->n_args++] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = n->out[i]};
    if (n->op == GR_OP_LOOP) {
        s->reason = gr_sprintf("loop '%s': a while-loop (its body computes the condition), a plan of its own: graph mode "
                               "captures it once into a device WHILE conditional node (no host read per iteration), eager "
                               "runs the same kernels and reads the condition after each iteration; at most %lld iterations",
                               n->name, (long long)GR_LOOP_MAX_ITERS);
    } else {
        int64_t work = 0;
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].kind == GR_IR_ATTR_GRAPH && n->attrs[a].graph) {
                int64_t w = gr_pass_graph_work(n->attrs[a].graph);
                work = w == INT64_MAX || work > INT64_MAX - w ? INT64_MAX : work + w;
            }
        if (work == INT64_MAX)
            s->reason = gr_sprintf("if '%s': conditional execution (a branch holds a loop or a shape unknown here, so "
                                   "predication cannot bound its work): graph mode a device IF_ELSE conditional node, eager the "
                                   "condition read on the host and one branch run",
                                   n->name);
        else
            s->reason = gr_sprintf("if '%s': conditional execution (the branches write %lld elements, more than the %lld "
                                   "predication runs both for): graph mode a device IF_ELSE conditional node, eager the condition read "
                                   "on the host and one branch run",
                                   n->name, (long long)work, (long long)GR_PREDICATE_MAX_ELEMS);
    }
    return s->reason ? GR_OK : gr_nomem();
}
