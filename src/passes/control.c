/* passes/control — data-dependent `if` without a graph break.
 *
 * GraphMend's transformation: an `if` whose branches are pure (every graft
 * op is) and whose outputs have the same shapes in both branches is replaced
 * by both branches inlined plus `where(cond, then_out, else_out)` per output.
 * Both branches run; the condition never leaves the device, so nothing is
 * read on the host and the whole model stays in one CUDA graph. The cost is
 * the untaken branch's work, which is what predication trades for a graph.
 *
 * Not handled (clear errors, no silent fallback): branches whose outputs
 * differ in shape (a data-dependent output shape) and `loop` inside a branch.
 */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

static gr_graph *branch_of(const gr_ir_node *n, const char *name) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    return a && a->kind == GR_IR_ATTR_GRAPH ? a->graph : NULL;
}

/* Inlines the nodes of branch `b` into g (appended), mapping its values; out_map
 * receives the parent value of each branch output. */
static gr_status inline_branch(gr_graph *g, const gr_ir_node *ifn, const char *tag, const gr_graph *b, int *out_map) {
    int nv = b->values.len;
    int *map = gr_malloc(sizeof(int) * (size_t)(nv ? nv : 1));
    if (!map) return GR_ERR_NOMEM;
    for (int v = 0; v < nv; v++) map[v] = -1;
    gr_status st = GR_OK;
    char where[512];
    gr_ir_node_where(g, ifn, where, sizeof where);
    for (int v = 0; v < nv && st == GR_OK; v++) {
        const gr_ir_value *val = &b->values.data[v];
        if (val->kind == GR_VAL_INPUT) {
            /* a captured value of the enclosing graph, by name */
            map[v] = gr_ir_find_value(g, val->name);
            if (map[v] < 0) st = gr_error(GR_ERR_INVALID, "%s: %s branch reads '%s', which the enclosing graph does not define", where, tag, val->name);
        } else if (val->kind == GR_VAL_CONST) {
            char *name = gr_sprintf("%s.%s.%s", ifn->name, tag, val->name);
            int64_t dims[GR_MAX_DIMS];
            for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].size;
            st = name ? gr_ir_add_const(g, name, val->dtype, val->ndim, dims, val->data, &map[v]) : GR_ERR_NOMEM;
            gr_strfree(name);
        }
    }
    for (int i = 0; i < b->nodes.len && st == GR_OK; i++) {
        const gr_ir_node *n = &b->nodes.data[i];
        if (n->op == GR_OP_LOOP || n->op == GR_OP_IF) {
            st = gr_error(GR_ERR_UNSUPPORTED, "%s: %s branch holds a %s node '%s'; only straight-line branches are predicated", where,
                          tag, gr_op_get(n->op)->name, n->name);
            break;
        }
        int in[64];
        if (n->n_in > 64) {
            st = gr_error(GR_ERR_UNSUPPORTED, "%s: node '%s' has too many inputs to inline", where, n->name);
            break;
        }
        for (int k = 0; k < n->n_in; k++) in[k] = n->in[k] < 0 ? -1 : map[n->in[k]];
        char *names[16] = {0};
        int n_out = n->n_out > 16 ? 16 : n->n_out;
        for (int k = 0; k < n_out; k++) names[k] = gr_sprintf("%s.%s.%s", ifn->name, tag, b->values.data[n->out[k]].name);
        char *node_name = gr_sprintf("%s.%s.%s", ifn->name, tag, n->name);
        int new_node = -1;
        bool names_ok = node_name != NULL;
        for (int k = 0; k < n_out; k++) names_ok = names_ok && names[k];
        if (!names_ok) st = GR_ERR_NOMEM;
        else if (n->n_out > 16) st = gr_error(GR_ERR_UNSUPPORTED, "%s: node '%s' has too many outputs to inline", where, n->name);
        else st = gr_ir_add_node(g, n->op, node_name, n->n_in, in, n->n_out, (const char *const *)names, n->n_attr, n->attrs, &new_node);
        if (st == GR_OK) {
            gr_ir_node *nn = &g->nodes.data[new_node];
            nn->line = n->line;
            nn->col = n->col;
            for (int k = 0; k < n->n_out; k++) map[n->out[k]] = nn->out[k];
        }
        for (int k = 0; k < n_out; k++) gr_strfree(names[k]);
        gr_strfree(node_name);
    }
    for (int o = 0; o < b->outputs.len && st == GR_OK; o++) {
        out_map[o] = map[b->outputs.data[o]];
        if (out_map[o] < 0) st = gr_error(GR_ERR_INVALID, "%s: %s branch output %d is not defined", where, tag, o);
    }
    gr_free(map, 0);
    return st;
}

static bool same_shape(const gr_ir_value *a, const gr_ir_value *b) {
    if (!a->typed || !b->typed) return true; /* decided by shape inference of where */
    if (a->ndim != b->ndim || a->dtype != b->dtype) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d].size != b->dims[d].size || a->dims[d].sym != b->dims[d].sym) return false;
    return true;
}

static gr_status predicate_one(gr_graph *g, int k) {
    gr_ir_node *ifn = &g->nodes.data[k];
    char where[512];
    gr_ir_node_where(g, ifn, where, sizeof where);
    gr_graph *tb = branch_of(ifn, "then_branch"), *eb = branch_of(ifn, "else_branch");
    if (!tb || !eb) return gr_error(GR_ERR_INVALID, "%s: needs then_branch and else_branch subgraphs", where);
    /* nested ifs first, inside each branch */
    GR_TRY(gr_pass_predicate_if(tb));
    GR_TRY(gr_pass_predicate_if(eb));
    ifn = &g->nodes.data[k];
    if (tb->outputs.len != ifn->n_out || eb->outputs.len != ifn->n_out)
        return gr_error(GR_ERR_INVALID, "%s: branches give %d and %d outputs, the node has %d", where, tb->outputs.len, eb->outputs.len,
                        ifn->n_out);
    for (int o = 0; o < ifn->n_out; o++) {
        const gr_ir_value *tv = &tb->values.data[tb->outputs.data[o]], *ev = &eb->values.data[eb->outputs.data[o]];
        if (!same_shape(tv, ev)) {
            char ts[128], es[128];
            gr_ir_type_str(tb, tv, ts, sizeof ts);
            gr_ir_type_str(eb, ev, es, sizeof es);
            return gr_error(GR_ERR_UNSUPPORTED,
                            "%s: output %d is %s in then_branch but %s in else_branch: a data-dependent output shape; "
                            "graft predicates `if` (both branches run, where() picks) and cannot when the shapes differ",
                            where, o, ts, es);
        }
    }
    int first_new = g->nodes.len;
    int n_out = ifn->n_out;
    int cond = ifn->in[0];
    char *if_name = gr_strdup(ifn->name);
    int *outs = gr_malloc(sizeof(int) * (size_t)(n_out ? n_out : 1) * 3);
    if (!if_name || !outs) {
        gr_strfree(if_name);
        gr_free(outs, 0);
        return GR_ERR_NOMEM;
    }
    for (int o = 0; o < n_out; o++) outs[o] = g->nodes.data[k].out[o];
    int *tmap = outs + n_out, *emap = outs + 2 * n_out;
    /* the if node may move while nodes are appended: re-fetch it */
    gr_status st = inline_branch(g, &g->nodes.data[k], "then", tb, tmap);
    if (st == GR_OK) st = inline_branch(g, &g->nodes.data[k], "else", eb, emap);
    for (int o = 0; o < n_out && st == GR_OK; o++) {
        int in[3] = {cond, tmap[o], emap[o]};
        char *nm = gr_sprintf("%s.select%d", if_name, o);
        int node = -1;
        st = nm ? gr_ir_add_node(g, GR_OP_WHERE, nm, 3, in, 1, NULL, 0, NULL, &node) : GR_ERR_NOMEM;
        gr_strfree(nm);
        if (st != GR_OK) break;
        /* the where produces the if's own output value (readers keep their index) */
        int fresh = g->nodes.data[node].out[0];
        g->nodes.data[node].out[0] = outs[o];
        if (fresh == g->values.len - 1) {
            gr_strfree(g->values.data[fresh].name);
            g->values.len--;
        }
        g->values.data[outs[o]].typed = false;
    }
    if (st == GR_OK) {
        gr_ir_splice_nodes(g, k, first_new);
    } else {
        /* undo: drop every appended node (their values are the last ones) */
        while (g->nodes.len > first_new) {
            gr_ir_node *last = &g->nodes.data[g->nodes.len - 1];
            if (last->op == GR_OP_WHERE) last->n_out = 0; /* its output is the if's: keep it */
            gr_ir_remove_last_node(g);
        }
    }
    gr_strfree(if_name);
    gr_free(outs, 0);
    return st;
}

gr_status gr_pass_predicate_if(gr_graph *g) {
    bool changed = false;
    for (int k = 0; k < g->nodes.len; k++) {
        if (g->nodes.data[k].op != GR_OP_IF) continue;
        GR_TRY(predicate_one(g, k));
        changed = true;
        k--; /* node k is now the first inlined node: rescan from there */
    }
    return changed ? gr_ir_infer_shapes(g) : GR_OK;
}
