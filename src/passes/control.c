/* passes/control — data-dependent `if` without a graph break.
 *
 * GraphMend's transformation: an `if` whose outputs have the same shapes in
 * both branches is replaced by both branches inlined plus
 * `where(cond, then_out, else_out)` per output. Both branches run; the
 * condition never leaves the device, so nothing is read on the host and the
 * whole model stays in one CUDA graph. The cost is the untaken branch's work,
 * which is what predication trades for a graph.
 *
 * Running the untaken branch must be harmless. Every graft op is pure and
 * total except gather / gather_elements, whose out-of-range indices are a
 * run-time error (the simulator reports it; CUDA clamps). So the index input
 * of each gather inlined from a branch is guarded:
 *     then branch: idx' = where(cond, idx, 0)    else branch: idx' = where(cond, 0, idx)
 * In the taken branch idx' == idx: its errors are reported exactly as without
 * the `if`, naming the inlined node ("<if>.<branch>.<node>", at the original
 * node's line). In the untaken branch every index is 0, valid on any
 * non-empty axis, and shape inference refuses a non-empty gather from an
 * empty axis at compile time, whichever branch holds it. The guard is one
 * elementwise select on the indices, which fusion folds into the gather's
 * kernel; it keeps predication (no host read of the condition, no graph
 * break) where a partition break or a conditional node would cost a host
 * synchronization or a graph per branch. Graph and eager modes run the same
 * kernels, so their results stay identical.
 *
 * The condition is one element of any rank (checked by shape inference); it
 * is reshaped to 0-d first so that where() keeps the branches' shapes.
 *
 * Predication is chosen only when it is cheap: both branches straight-line
 * (no loop, no `if` that stayed) and writing at most GR_PREDICATE_MAX_ELEMS
 * elements together (passes.h says why that number). Any other `if` stays an
 * `if` node: conditional execution (passes/cond.c, runtime/control.c), the
 * condition read and one branch run.
 *
 * Not handled (a clear error, no silent fallback): branches whose outputs
 * differ in shape (a data-dependent output shape). Nested `if`s are
 * predicated innermost first; a branch may read values of any enclosing graph.
 *
 * Nodes and values are addressed by index throughout: appending to g moves
 * its arrays, so no pointer into them is held across an append.
 */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

typedef struct {
    gr_graph *g;
    const char *if_name; /* a copy: the if node moves while nodes are appended */
    const char *where;   /* "node 'y' (if) at f.gir:3:5" */
    int cond;            /* the condition as a 0-d bool value of g */
    int zero[GR_DTYPE_COUNT]; /* per branch: 0-d zero index constants, made on first use */
} pred_ctx;

static bool node_name_used(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->nodes.len; i++)
        if (!strcmp(g->nodes.data[i].name, name)) return true;
    return false;
}

/* base (taken over; NULL = no memory), made unique among g's node names
 * (node) or value names (!node) with a ".2", ".3", ... suffix: names made
 * here must not collide with the user's or with earlier inlining (nested
 * ifs). Returns a string to free with gr_strfree, or NULL. */
static char *fresh_name(const gr_graph *g, bool node, char *base) {
    char *s = base;
    for (int k = 2; s && (node ? node_name_used(g, s) : gr_ir_find_value(g, s) >= 0); k++) {
        char *next = gr_sprintf("%s.%d", base, k);
        if (s != base) gr_strfree(s);
        s = next;
    }
    if (s != base) gr_strfree(base);
    return s;
}

/* prefix.tag.name, unique among g's nodes or values */
static char *inlined_name(const gr_graph *g, bool node, const char *prefix, const char *tag, const char *name) {
    return fresh_name(g, node, gr_sprintf("%s.%s.%s", prefix, tag, name));
}

static gr_graph *branch_of(const gr_ir_node *n, const char *name) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    return a && a->kind == GR_IR_ATTR_GRAPH ? a->graph : NULL;
}

/* Inputs whose values can make an op fail at run time (an index out of
 * range): the slot, or -1 when the op cannot fail. */
static int failing_index_slot(gr_op op) {
    switch (op) {
    case GR_OP_GATHER:
    case GR_OP_GATHER_ELEMENTS: return 1;
    default: return -1;
    }
}

/* Value of g named like the captured value `cap` of a branch: g's own, or a
 * capture of an enclosing graph's value added to g (when g is itself a branch
 * and the branch reads past it). -1 when no graph defines it. */
static gr_status find_capture(gr_graph *g, const gr_ir_value *cap, int *out) {
    *out = gr_ir_find_value(g, cap->name);
    if (*out >= 0) return GR_OK;
    const gr_graph *owner = g->parent;
    int ov = -1;
    for (; owner && (ov = gr_ir_find_value(owner, cap->name)) < 0; owner = owner->parent) {}
    if (ov < 0) return GR_OK;
    gr_ir_value o = owner->values.data[ov]; /* a copy: adding to g cannot move it */
    for (int i = 0; i < o.ndim; i++)
        GR_TRY(gr_dx_import(g, owner, o.dims[i], &o.dims[i]));
    int v;
    GR_TRY(gr_ir_add_value(g, cap->name, GR_VAL_INPUT, &v));
    gr_ir_value *d = &g->values.data[v];
    d->typed = o.typed;
    d->dtype = o.dtype;
    d->ndim = o.ndim;
    d->placement = o.placement;
    d->line = o.line;
    d->col = o.col;
    for (int i = 0; i < o.ndim; i++) d->dims[i] = o.dims[i];
    *out = v;
    return GR_OK;
}

/* idx' = where(cond, idx, 0) for the then branch, where(cond, 0, idx) for the else branch. */
static gr_status guard_index(pred_ctx *pc, const char *tag, bool then_branch, const char *node_name, gr_dtype t, int idx,
                             int *out) {
    gr_graph *g = pc->g;
    if ((unsigned)t >= GR_DTYPE_COUNT)
        return gr_error(GR_ERR_INTERNAL, "%s: %s branch node '%s' has an untyped index", pc->where, tag, node_name);
    if (pc->zero[t] < 0) {
        char zname[32];
        snprintf(zname, sizeof zname, "zero_%s", gr_dtype_name(t));
        char *name = inlined_name(g, false, pc->if_name, tag, zname);
        if (!name) return GR_ERR_NOMEM;
        unsigned char bytes[8] = {0}; /* 0 in any index dtype */
        gr_status st = gr_ir_add_const(g, name, t, 0, NULL, bytes, &pc->zero[t]);
        gr_strfree(name);
        GR_TRY(st);
    }
    char *gname = gr_sprintf("guard.%s", node_name);
    char *name = gname ? inlined_name(g, true, pc->if_name, tag, gname) : NULL;
    gr_strfree(gname);
    if (!name) return GR_ERR_NOMEM;
    int in[3] = {pc->cond, then_branch ? idx : pc->zero[t], then_branch ? pc->zero[t] : idx};
    int node;
    gr_status st = gr_ir_add_node(g, GR_OP_WHERE, name, 3, in, 1, NULL, 0, NULL, &node);
    gr_strfree(name);
    GR_TRY(st);
    *out = g->nodes.data[node].out[0];
    return GR_OK;
}

/* Inlines one node n of branch b (inputs already mapped into g through map). */
static gr_status inline_node(pred_ctx *pc, const char *tag, bool then_branch, const gr_graph *b, const gr_ir_node *n, int *map) {
    gr_graph *g = pc->g;
    if (n->op == GR_OP_LOOP || n->op == GR_OP_IF)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: %s branch holds a %s node '%s'; only straight-line branches are predicated",
                        pc->where, tag, gr_op_get(n->op)->name, n->name);
    int *in = gr_malloc(sizeof(int) * (size_t)(n->n_in ? n->n_in : 1));
    char **names = gr_calloc((size_t)(n->n_out ? n->n_out : 1), sizeof(char *));
    char *node_name = inlined_name(g, true, pc->if_name, tag, n->name);
    gr_status st = in && names && node_name ? GR_OK : GR_ERR_NOMEM;
    for (int k = 0; k < n->n_out && st == GR_OK; k++) {
        if (!(names[k] = inlined_name(g, false, pc->if_name, tag, b->values.data[n->out[k]].name))) st = GR_ERR_NOMEM;
        for (int j = 0; j < k && st == GR_OK; j++) /* two outputs may not take the same fresh name */
            if (!strcmp(names[j], names[k])) st = gr_error(GR_ERR_INVALID, "%s: node '%s' names two outputs alike", pc->where, n->name);
    }
    for (int k = 0; k < n->n_in && st == GR_OK; k++) {
        in[k] = n->in[k] < 0 ? -1 : map[n->in[k]];
        if (n->in[k] >= 0 && in[k] < 0)
            st = gr_error(GR_ERR_INVALID, "%s: %s branch node '%s' reads a value the branch does not define", pc->where, tag,
                          n->name);
    }
    int slot = failing_index_slot(n->op);
    if (st == GR_OK && slot >= 0 && slot < n->n_in && in[slot] >= 0) {
        const gr_ir_value *iv = &b->values.data[n->in[slot]];
        st = guard_index(pc, tag, then_branch, n->name, iv->typed ? iv->dtype : GR_DTYPE_COUNT, in[slot], &in[slot]);
    }
    int new_node = -1;
    if (st == GR_OK)
        st = gr_ir_add_node(g, n->op, node_name, n->n_in, in, n->n_out, (const char *const *)names, n->n_attr, n->attrs,
                            &new_node);
    if (st == GR_OK) {
        gr_ir_node *nn = &g->nodes.data[new_node]; /* fresh after the append; not kept */
        nn->line = n->line;
        nn->col = n->col;
        for (int k = 0; k < nn->n_attr && st == GR_OK; k++) st = gr_ir_attr_import_exprs(g, b, &nn->attrs[k]);
        for (int k = 0; k < n->n_out; k++) map[n->out[k]] = nn->out[k];
    }
    for (int k = 0; names && k < n->n_out; k++) gr_strfree(names[k]);
    gr_free(names, (size_t)(n->n_out ? n->n_out : 1) * sizeof(char *));
    gr_free(in, sizeof(int) * (size_t)(n->n_in ? n->n_in : 1));
    gr_strfree(node_name);
    return st;
}

/* Inlines the nodes of branch b into g (appended), mapping its values;
 * out_map receives the value of g holding each branch output. */
static gr_status inline_branch(pred_ctx *pc, bool then_branch, const gr_graph *b, int *out_map) {
    gr_graph *g = pc->g;
    const char *tag = then_branch ? "then" : "else";
    for (int t = 0; t < GR_DTYPE_COUNT; t++) pc->zero[t] = -1;
    int nv = b->values.len;
    int *map = gr_malloc(sizeof(int) * (size_t)(nv ? nv : 1));
    if (!map) return GR_ERR_NOMEM;
    for (int v = 0; v < nv; v++) map[v] = -1;
    gr_status st = GR_OK;
    for (int v = 0; v < nv && st == GR_OK; v++) {
        const gr_ir_value *val = &b->values.data[v];
        if (val->kind == GR_VAL_INPUT) {
            /* a captured value of an enclosing graph, by name */
            st = find_capture(g, val, &map[v]);
            if (st == GR_OK && map[v] < 0)
                st = gr_error(GR_ERR_INVALID, "%s: %s branch reads '%s', which no enclosing graph defines", pc->where, tag,
                              val->name);
        } else if (val->kind == GR_VAL_CONST) {
            char *name = inlined_name(g, false, pc->if_name, tag, val->name);
            int64_t dims[GR_MAX_DIMS];
            for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].size;
            st = name ? gr_ir_add_const(g, name, val->dtype, val->ndim, dims, val->data, &map[v]) : GR_ERR_NOMEM;
            if (st == GR_OK) g->values.data[map[v]].placement = val->placement;
            gr_strfree(name);
        }
    }
    for (int i = 0; i < b->nodes.len && st == GR_OK; i++) st = inline_node(pc, tag, then_branch, b, &b->nodes.data[i], map);
    for (int o = 0; o < b->outputs.len && st == GR_OK; o++) {
        out_map[o] = map[b->outputs.data[o]];
        if (out_map[o] < 0) st = gr_error(GR_ERR_INVALID, "%s: %s branch output %d is not defined", pc->where, tag, o);
    }
    gr_free(map, sizeof(int) * (size_t)(nv ? nv : 1));
    return st;
}

static bool same_shape(const gr_ir_value *a, const gr_ir_value *b) {
    if (!a->typed || !b->typed) return true; /* decided by shape inference of where */
    if (a->ndim != b->ndim || a->dtype != b->dtype) return false;
    for (int d = 0; d < a->ndim; d++)
        if (!gr_dx_equal(a->dims[d], b->dims[d])) return false;
    return true;
}

/* The condition as a 0-d value: itself, or reshape(cond, shape=[]). */
static gr_status scalar_cond(pred_ctx *pc, int cond, int *out) {
    gr_graph *g = pc->g;
    const gr_ir_value *c = &g->values.data[cond];
    if (c->typed && c->ndim == 0) return *out = cond, GR_OK;
    char *name = fresh_name(g, true, gr_sprintf("%s.cond", pc->if_name));
    if (!name) return GR_ERR_NOMEM;
    gr_ir_attr shape = {.name = (char *)"shape", .kind = GR_IR_ATTR_INTS, .n = 0};
    int node;
    gr_status st = gr_ir_add_node(g, GR_OP_RESHAPE, name, 1, &cond, 1, NULL, 1, &shape, &node);
    gr_strfree(name);
    GR_TRY(st);
    GR_TRY(gr_ir_infer_node(g, node));
    *out = g->nodes.data[node].out[0];
    return GR_OK;
}

/* Drops what a failed predication appended (nodes from first_node, values
 * from first_value); the if node and its output values stay as they were. */
static void undo(gr_graph *g, int first_node, int first_value) {
    while (g->nodes.len > first_node) gr_ir_remove_last_node(g);
    for (int i = first_value; i < g->values.len; i++) {
        gr_strfree(g->values.data[i].name);
        gr_free(g->values.data[i].data, g->values.data[i].nbytes);
    }
    if (g->values.len > first_value) g->values.len = first_value;
}

static bool has_control(const gr_graph *b) {
    for (int i = 0; i < b->nodes.len; i++)
        if (b->nodes.data[i].op == GR_OP_LOOP || b->nodes.data[i].op == GR_OP_IF) return true;
    return false;
}

/* *kept: the `if` stays (conditional execution) */
static gr_status predicate_one(gr_graph *g, int k, bool *kept) {
    *kept = false;
    char where[512];
    gr_ir_node_where(g, &g->nodes.data[k], where, sizeof where);
    gr_graph *tb = branch_of(&g->nodes.data[k], "then_branch"), *eb = branch_of(&g->nodes.data[k], "else_branch");
    if (!tb || !eb) return gr_error(GR_ERR_INVALID, "%s: needs then_branch and else_branch subgraphs", where);
    /* nested ifs first, inside each branch (the branch graphs are owned by the
     * node's attributes, which do not move when g's node array does) */
    GR_TRY(gr_pass_predicate_if(tb));
    GR_TRY(gr_pass_predicate_if(eb));
    /* the strategy (passes/cond.c): a branch that keeps control flow or writes more than the
     * threshold makes the `if` conditional execution, left for lowering */
    int64_t wt = gr_pass_graph_work(tb), we = gr_pass_graph_work(eb);
    if (wt > GR_PREDICATE_MAX_ELEMS || we > GR_PREDICATE_MAX_ELEMS - wt || has_control(tb) || has_control(eb)) {
        *kept = true;
        return GR_OK;
    }
    int n_out = g->nodes.data[k].n_out;
    if (tb->outputs.len != n_out || eb->outputs.len != n_out)
        return gr_error(GR_ERR_INVALID, "%s: branches give %d and %d outputs, the node has %d", where, tb->outputs.len,
                        eb->outputs.len, n_out);
    for (int o = 0; o < n_out; o++) {
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
    int first_node = g->nodes.len, first_value = g->values.len;
    pred_ctx pc = {.g = g, .where = where, .if_name = gr_strdup(g->nodes.data[k].name)};
    int *outs = gr_malloc(sizeof(int) * (size_t)(n_out ? n_out : 1) * 3);
    if (!pc.if_name || !outs) {
        gr_strfree((char *)pc.if_name);
        gr_free(outs, sizeof(int) * (size_t)(n_out ? n_out : 1) * 3);
        return GR_ERR_NOMEM;
    }
    for (int o = 0; o < n_out; o++) outs[o] = g->nodes.data[k].out[o];
    int *tmap = outs + n_out, *emap = outs + 2 * n_out;
    gr_status st = scalar_cond(&pc, g->nodes.data[k].in[0], &pc.cond);
    if (st == GR_OK) st = inline_branch(&pc, true, tb, tmap);
    if (st == GR_OK) st = inline_branch(&pc, false, eb, emap);
    int selects_from = g->nodes.len;
    for (int o = 0; o < n_out && st == GR_OK; o++) {
        int in[3] = {pc.cond, tmap[o], emap[o]};
        char *nm = fresh_name(g, true, gr_sprintf("%s.select%d", pc.if_name, o));
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
        gr_ir_splice_nodes(g, k, first_node);
    } else {
        /* the selects' outputs are the if's own values: detach them before undoing */
        for (int i = selects_from; i < g->nodes.len; i++)
            for (int j = 0; j < g->nodes.data[i].n_out; j++) g->nodes.data[i].out[j] = -1;
        undo(g, first_node, first_value);
    }
    gr_strfree((char *)pc.if_name);
    gr_free(outs, sizeof(int) * (size_t)(n_out ? n_out : 1) * 3);
    return st;
}

gr_status gr_pass_predicate_if(gr_graph *g) {
    bool changed = false;
    for (int k = 0; k < g->nodes.len; k++) {
        if (g->nodes.data[k].op != GR_OP_IF) continue;
        bool kept;
        GR_TRY(predicate_one(g, k, &kept));
        if (kept) continue;
        changed = true;
        k--; /* node k is now the first inlined node: rescan from there */
    }
    return changed ? gr_ir_infer_shapes(g) : GR_OK;
}
