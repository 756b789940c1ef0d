/* frontend/onnx/onnx-control — ONNX control flow: If, Loop, Scan (subgraph
 * scopes themselves are in onnx.c: ox_import_subgraph, ox_inline_graph). */
#include "frontend/onnx/onnx-impl.h"
#include <stdio.h>
#include <string.h>

static gr_ir_attr A_int(const char *name, int64_t v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INT, .i = v}; }
static gr_ir_attr A_ints(const char *name, const int64_t *v, int n) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)v, .n = n};
}
static const gr_ir_value *irv(const ox_ctx *c, int ir) { return &c->g->values.data[ir]; }

/* ---- control flow: If, Loop, Scan ------------------------------------------------------------
 * If: a condition known at import time inlines the branch it selects; otherwise
 * both branches become IR subgraphs of an `if` node, which passes/control.c
 * predicates (both run, `where` selects; no host read, no graph break).
 * Loop and Scan are unrolled at import (each iteration an inlined copy of the
 * body) when their trip count is known then; a run-time trip count is a
 * data-dependent dim unrolled per binding (loop_run_time_trip, scan_symbolic);
 * a body that computes its condition is a while-loop (loop_while), run by the
 * runtime's control runner (docs/design.md §3c). */
#define OX_MAX_UNROLL 256          /* iterations of one Loop / Scan */
#define OX_MAX_UNROLLED_NODES 65536 /* body nodes times iterations */

/* IR value of an inlined body's result (a constant is materialized). */
static gr_status value_to_ir(ox_ctx *c, ox_value *v, const char *what, int *ir) {
    if (v->unavailable) return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s %s", what, v->unavailable);
    if (v->seq) return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s is a tensor sequence (not supported here)", what);
    if (v->ir >= 0) return *ir = v->ir, GR_OK;
    if (!v->konst) return ox_node_error(c, GR_ERR_INTERNAL, "%s has no value", what);
    if (ox_tensor_has_sym(v->konst))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s is computed from symbolic dims (not supported as a loop value)", what);
    ox_tensor *t;
    GR_TRY(ox_tensor_cast(v->konst, v->konst->dtype, &t));
    GR_TRY(ox_const_ir(c, t, ir));
    v->ir = *ir;
    return GR_OK;
}

/* Binds ONNX output `name` of the current node to v: a constant stays one (so
 * later shape arithmetic still folds), an IR value gets a named identity. */
static gr_status bind_value(ox_ctx *c, const char *name, ox_value *v) {
    if (!name || !*name) return GR_OK;
    int vi;
    if (v->unavailable || v->seq || (v->konst && v->ir < 0)) {
        GR_TRY(ox_define(c, name, &vi));
        return ox_value_copy(&c->vals.data[vi], v);
    }
    int ir, out;
    GR_TRY(value_to_ir(c, v, name, &ir));
    GR_TRY(ox_emit(c, GR_OP_IDENTITY, 1, &ir, 0, NULL, 1, &name, true, &out));
    return ox_define_ir(c, name, out);
}

static void values_init(ox_value *v, int n) {
    memset(v, 0, sizeof *v * (size_t)n);
    for (int i = 0; i < n; i++) v[i].ir = -1;
}
static void values_clear(ox_value *v, int n) {
    for (int i = 0; i < n; i++) ox_value_clear(&v[i]);
}

static const Onnx__GraphProto *graph_attr(ox_ctx *c, const char *name) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    return a ? a->g : NULL;
}

gr_status ox_cv_if(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 1, 1, 1));
    const Onnx__GraphProto *tb = graph_attr(c, "then_branch"), *eb = graph_attr(c, "else_branch");
    if (!tb || !eb) return ox_node_error(c, GR_ERR_INVALID, "graph attributes 'then_branch' and 'else_branch' are required");
    int n_out = (int)c->node->n_output;
    if (n_out > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 outputs");
    if ((int)tb->n_output != n_out || (int)eb->n_output != n_out)
        return ox_node_error(c, GR_ERR_INVALID, "the branches have %zu and %zu outputs, the node %d", tb->n_output, eb->n_output, n_out);
    if (tb->n_input || eb->n_input) return ox_node_error(c, GR_ERR_INVALID, "a branch declares inputs (branches take none)");
    int cvi = ox_in(c, 0);
    if (cvi < 0) return ox_node_error(c, GR_ERR_INVALID, "input 0 ('cond') is required");
    const ox_tensor *ck = c->vals.data[cvi].konst;
    if (ck && !ox_tensor_has_sym(ck)) { /* known now: inline the branch it selects */
        if (ox_tensor_numel(ck) != 1) return ox_node_error(c, GR_ERR_SHAPE, "the condition must hold one element");
        bool take = gr_load_f64(ck->data, ck->dtype, 0) != 0;
        char *what = gr_sprintf("%s/%s", c->node_name, take ? "then" : "else");
        if (!what) return GR_ERR_NOMEM;
        ox_value outs[64];
        values_init(outs, n_out);
        gr_status st = ox_inline_graph(c, take ? tb : eb, what, NULL, outs);
        for (int i = 0; st == GR_OK && i < n_out; i++) st = bind_value(c, c->node->output[i], &outs[i]);
        values_clear(outs, n_out);
        gr_strfree(what);
        return st;
    }
    char *wt = gr_sprintf("node '%s' (If) then_branch", c->node_name), *we = gr_sprintf("node '%s' (If) else_branch", c->node_name);
    gr_graph *tg = NULL, *eg = NULL;
    gr_status st = wt && we ? GR_OK : GR_ERR_NOMEM;
    int cond = -1, outs[64];
    if (st == GR_OK) st = ox_in_ir(c, 0, &cond);
    if (st == GR_OK) st = ox_import_subgraph(c, tb, wt, &tg);
    if (st == GR_OK) st = ox_import_subgraph(c, eb, we, &eg);
    if (st == GR_OK) {
        gr_ir_attr attrs[2] = {{.name = "then_branch", .kind = GR_IR_ATTR_GRAPH, .graph = tg},
                               {.name = "else_branch", .kind = GR_IR_ATTR_GRAPH, .graph = eg}};
        const char *names[64];
        ox_out_names(c, names, n_out);
        st = ox_emit(c, op, 1, &cond, 2, attrs, n_out, names, true, outs);
    }
    gr_ir_graph_destroy(tg);
    gr_ir_graph_destroy(eg);
    gr_strfree(wt);
    gr_strfree(we);
    if (st != GR_OK) return st;
    return ox_bind_outputs(c, n_out, outs, NULL);
}

/* A count or flag input of a Loop: known at import time (else *known = false). */
static gr_status loop_scalar(ox_ctx *c, int i, const char *what, bool *present, bool *known, int64_t *v) {
    int vi = ox_in(c, i);
    *present = vi >= 0;
    *known = false;
    if (vi < 0) return GR_OK;
    const ox_value *x = &c->vals.data[vi];
    if (!x->konst || ox_tensor_has_sym(x->konst)) return GR_OK;
    if (ox_tensor_numel(x->konst) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must hold one element", what);
    *known = true;
    *v = gr_load_i64(x->konst->data, x->konst->dtype, 0);
    return GR_OK;
}

/* Stacks per-iteration values along a new axis (reversed when `reverse`) into the node's output `name`. */
static gr_status stack_outputs(ox_ctx *c, const char *name, ox_value *vals, int n, int64_t axis, bool reverse) {
    if (!name || !*name) return GR_OK;
    if (n == 0) return ox_node_error(c, GR_ERR_UNSUPPORTED, "a scan output of zero iterations has no known shape (not supported)");
    int parts[OX_MAX_UNROLL], ax = 0;
    for (int i = 0; i < n; i++) {
        int ir;
        GR_TRY(value_to_ir(c, &vals[reverse ? n - 1 - i : i], "a scan output", &ir));
        const gr_ir_value *v = irv(c, ir);
        if (!v->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of a scan output is not known");
        int r = v->ndim + 1;
        if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "scan output axis %lld out of range for rank %d", (long long)axis, r);
        ax = (int)(axis < 0 ? axis + r : axis);
        GR_TRY(ox_unsqueeze_ir(c, ir, ax, &parts[i]));
    }
    gr_ir_attr a = A_int("axis", ax);
    int out;
    GR_TRY(ox_emit(c, GR_OP_CONCAT, n, parts, 1, &a, 1, &name, true, &out));
    return ox_define_ir(c, name, out);
}

/* A one-element M or cond input as a 0-d i64 (M) or bool (cond) IR value; absent: the
 * constant `absent` (M: INT64_MAX, no bound but graft's iteration cap; cond: true). */
static gr_status loop_control_ir(ox_ctx *c, int i, bool m, int *out) {
    if (ox_in(c, i) < 0) return ox_scalar_const_ir(c, m ? GR_I64 : GR_BOOL, m ? 4611686018427387904.0 : 1.0, out);
    int v;
    GR_TRY(ox_in_ir(c, i, &v));
    const gr_ir_value *iv = irv(c, v);
    if (!iv->typed || gr_ir_value_numel(iv) != 1 || (m && !gr_dtype_is_int(iv->dtype)))
        return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must be one %s", m ? "M" : "cond", m ? "integer" : "element");
    if (iv->ndim) GR_TRY(ox_reshape_ir(c, v, NULL, 0, &v));
    gr_dtype want = m ? GR_I64 : GR_BOOL;
    if (irv(c, v)->dtype != want && m) {
        gr_ir_attr to = {.name = (char *)"to", .kind = GR_IR_ATTR_STRING, .s = (char *)"i64"};
        GR_TRY(ox_emit(c, GR_OP_CAST, 1, &v, 1, &to, 1, NULL, false, &v));
    } else if (irv(c, v)->dtype != want) {
        int z, eq;
        GR_TRY(ox_scalar_const_ir(c, irv(c, v)->dtype, 0.0, &z));
        GR_TRY(ox_emit2(c, GR_OP_EQUAL, v, z, &eq));
        GR_TRY(ox_emit(c, GR_OP_NOT, 1, &eq, 0, NULL, 1, NULL, false, &v));
    }
    *out = v;
    return GR_OK;
}

/* A while-loop: Loop whose body computes its condition. A `loop` node without a `trip`
 * attribute, which passes/cond.c lowers to a control step run by runtime/control.c (the
 * body a plan of its own, the condition read after each iteration). Loop-carried values
 * keep their shapes across iterations (checked here: a body that changes one is refused).
 * Scan outputs would have a data-dependent length: not supported for a while-loop. */
/* Scan outputs of a while-loop have a data-dependent length, the iteration count. Two nodes:
 * a while-loop over the carried values plus a counter (its last output: the count, a
 * data-dependent symbol the probe computes before each run, runtime/probe.c), and the Loop
 * unrolled per binding for that count (passes/unroll.c: every iteration is known to run, so
 * the body's condition is not needed), which gives the carried values and the stacked scan
 * outputs. At most OX_MAX_UNROLL iterations (the symbol's range: a longer loop is a clear
 * error at run time naming the node); the counting loop runs in the probe and again in the
 * plan (the probe's documented cost). */
static gr_status loop_while_scans(ox_ctx *c, gr_graph *bg, int *in, int n_state, int n_scan) {
    gr_graph *cg = NULL;
    gr_status st = gr_ir_graph_clone(bg, &cg);
    if (st != GR_OK) return st;
    cg->parent = bg->parent;
    int cnt_in = -1, one = -1, cnt_out = -1, node = -1;
    int64_t v1 = 1;
    st = gr_ir_add_input(cg, "graft.loop.count", GR_I64, 0, NULL, &cnt_in);
    if (st == GR_OK) st = gr_ir_add_const(cg, "graft.loop.count_one", GR_I64, 0, NULL, &v1, &one);
    if (st == GR_OK) {
        int add_in[2] = {cnt_in, one};
        st = gr_ir_add_node(cg, GR_OP_ADD, "graft.loop.count_next", 2, add_in, 1, NULL, 0, NULL, &node);
    }
    if (st == GR_OK) {
        cnt_out = cg->nodes.data[node].out[0];
        cg->outputs.len = 1 + n_state; /* the scan outputs are the unrolled loop's */
        st = gr_vec_push(&cg->outputs, cnt_out);
    }
    int zero = -1, outs[65], trip_count = -1;
    if (st == GR_OK) st = ox_scalar_const_ir(c, GR_I64, 0.0, &zero);
    if (st == GR_OK) {
        int cin[67];
        for (int i = 0; i < 2 + n_state; i++) cin[i] = in[i];
        cin[2 + n_state] = zero;
        gr_ir_attr attrs[1] = {{.name = (char *)"body", .kind = GR_IR_ATTR_GRAPH, .graph = cg}};
        st = ox_emit(c, GR_OP_LOOP, 3 + n_state, cin, 1, attrs, 1 + n_state, NULL, false, outs);
    }
    gr_ir_graph_destroy(cg);
    GR_TRY(st);
    trip_count = outs[n_state];
    /* the count's range: M when it is a constant below the unroll limit */
    int64_t hi = OX_MAX_UNROLL, m = 0;
    bool m_present = false, m_known = false;
    GR_TRY(loop_scalar(c, 0, "M", &m_present, &m_known, &m));
    if (m_known && m < hi) hi = m < 0 ? 0 : m;
    gr_dim trip;
    GR_TRY(ox_data_symbol(c, "loop", trip_count, hi, &trip));
    int uin[66], uouts[128], t;
    GR_TRY(ox_scalar_const_ir(c, GR_BOOL, 1.0, &t));
    uin[0] = trip_count;
    uin[1] = t;
    for (int i = 0; i < n_state; i++) uin[2 + i] = in[2 + i];
    gr_ir_attr attrs[2] = {{.name = (char *)"body", .kind = GR_IR_ATTR_GRAPH, .graph = bg},
                           {.name = (char *)"trip", .kind = GR_IR_ATTR_INT, .sym = true, .expr = trip.expr}};
    const char *names[128];
    ox_out_names(c, names, n_state + n_scan);
    GR_TRY(ox_emit(c, GR_OP_LOOP, 2 + n_state, uin, 2, attrs, n_state + n_scan, names, true, uouts));
    for (int i = 0; i < n_state + n_scan; i++)
        if (!irv(c, uouts[i])->typed)
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "the type of output %d is not known (the body changes a loop-carried "
                                                        "value's type or shape)", i);
    return ox_bind_outputs(c, n_state + n_scan, uouts, NULL);
}

static gr_status loop_while(ox_ctx *c, const Onnx__GraphProto *body, int n_state, int n_scan) {
    if (n_state + n_scan > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "too many loop outputs");
    int in[67], outs[64];
    for (int i = 0; i < n_state; i++) {
        int vi = ox_in(c, 2 + i);
        if (vi < 0) return ox_node_error(c, GR_ERR_INVALID, "loop-carried input %d is missing", i);
        GR_TRY(value_to_ir(c, &c->vals.data[vi], "a loop-carried input", &in[2 + i]));
    }
    GR_TRY(loop_control_ir(c, 0, true, &in[0]));
    GR_TRY(loop_control_ir(c, 1, false, &in[1]));
    char *what = gr_sprintf("node '%s' (Loop) body", c->node_name);
    if (!what) return gr_nomem();
    gr_graph *bg = NULL;
    bool cond_true = false;
    gr_status st = ox_import_loop_body(c, body, what, n_state, in + 2, &bg, &cond_true);
    gr_strfree(what);
    for (int i = 0; st == GR_OK && i < n_state; i++) { /* fixed shapes across iterations */
        const gr_ir_value *init = irv(c, in[2 + i]), *bo = &bg->values.data[bg->outputs.data[1 + i]];
        bool same = bo->typed && init->typed && bo->dtype == init->dtype && bo->ndim == init->ndim;
        for (int d = 0; same && d < bo->ndim; d++) {
            gr_dim x;
            st = gr_dx_import(c->g, bg, bo->dims[d], &x);
            if (st == GR_ERR_UNSUPPORTED) gr_error_clear(), st = GR_OK, same = false;
            else same = st == GR_OK && gr_dx_equal(x, init->dims[d]);
        }
        if (st == GR_OK && !same) {
            char a[128], b[128];
            gr_ir_type_str(c->g, init, a, sizeof a);
            gr_ir_type_str(bg, bo, b, sizeof b);
            st = ox_node_error(c, GR_ERR_SHAPE, "loop-carried value %d enters as %s but the body gives %s: a while-loop's "
                                                "loop-carried values must keep their type and shape across iterations", i, a, b);
        }
    }
    if (st == GR_OK && n_scan > 0) {
        st = loop_while_scans(c, bg, in, n_state, n_scan);
        gr_ir_graph_destroy(bg);
        return st;
    }
    if (st == GR_OK) {
        gr_ir_attr attrs[1] = {{.name = (char *)"body", .kind = GR_IR_ATTR_GRAPH, .graph = bg}};
        const char *names[64];
        ox_out_names(c, names, n_state);
        st = ox_emit(c, GR_OP_LOOP, 2 + n_state, in, 1, attrs, n_state, names, true, outs);
    }
    gr_ir_graph_destroy(bg);
    GR_TRY(st);
    for (int i = 0; i < n_state; i++)
        if (!irv(c, outs[i])->typed)
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "the type of output %d is not known (the body changes a loop-carried "
                                                        "value's type or shape)", i);
    return ox_bind_outputs(c, n_state, outs, NULL);
}

/* Loop(M, cond, v...) with M or the initial condition computed at run time, whose body
 * keeps the condition true (passes it on or writes true; checked at import with the
 * condition input set to true): it runs trip = cond ? max(M, 0) : 0 iterations. trip is
 * a data-dependent symbol (runtime/probe.c reads it before each run) and the body an IR
 * subgraph of a `loop` node whose `trip` attribute is that symbol; passes/unroll.c
 * unrolls it per binding. At most OX_MAX_UNROLL iterations (the symbol's range: a larger
 * M is a clear error at run time, naming the node). A body that computes its condition
 * (a while-loop) is not supported: it would need the device's conditional nodes. */
static gr_status loop_run_time_trip(ox_ctx *c, const Onnx__GraphProto *body, int n_state, int n_scan, bool run_time_cond) {
    int n_out = n_state + n_scan, in[66], m;
    for (int i = 0; i < n_state; i++) {
        int vi = ox_in(c, 2 + i);
        if (vi < 0) return ox_node_error(c, GR_ERR_INVALID, "loop-carried input %d is missing", i);
        GR_TRY(value_to_ir(c, &c->vals.data[vi], "a loop-carried input", &in[2 + i]));
    }
    GR_TRY(ox_in_ir(c, 0, &m));
    const gr_ir_value *mv = irv(c, m);
    if (!mv->typed || gr_ir_value_numel(mv) != 1 || !gr_dtype_is_int(mv->dtype))
        return ox_node_error(c, GR_ERR_SHAPE, "input 'M' must be one integer");
    if (mv->ndim) GR_TRY(ox_reshape_ir(c, m, NULL, 0, &m));
    if (irv(c, m)->dtype != GR_I64) {
        gr_ir_attr to = {.name = (char *)"to", .kind = GR_IR_ATTR_STRING, .s = (char *)"i64"};
        GR_TRY(ox_emit(c, GR_OP_CAST, 1, &m, 1, &to, 1, NULL, false, &m));
    }
    int zero, count, cond;
    GR_TRY(ox_scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(ox_emit2(c, GR_OP_MAX, m, zero, &count)); /* ONNX: M <= 0 runs no iteration */
    if (run_time_cond) { /* false before the first iteration: none */
        int c0, ce;
        GR_TRY(ox_in_ir(c, 1, &c0));
        const gr_ir_value *cv = irv(c, c0);
        if (!cv->typed || gr_ir_value_numel(cv) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'cond' must be one element");
        if (cv->ndim) GR_TRY(ox_reshape_ir(c, c0, NULL, 0, &c0));
        if (irv(c, c0)->dtype != GR_BOOL) {
            int z, eq;
            GR_TRY(ox_scalar_const_ir(c, irv(c, c0)->dtype, 0.0, &z));
            GR_TRY(ox_emit2(c, GR_OP_EQUAL, c0, z, &eq));
            GR_TRY(ox_emit(c, GR_OP_NOT, 1, &eq, 0, NULL, 1, NULL, false, &c0));
        }
        int w[3] = {c0, count, zero};
        GR_TRY(ox_emit(c, GR_OP_WHERE, 3, w, 0, NULL, 1, NULL, false, &ce));
        count = ce;
    }
    GR_TRY(ox_scalar_const_ir(c, GR_BOOL, 1.0, &cond));
    int64_t per = body->n_node ? OX_MAX_UNROLLED_NODES / (int64_t)body->n_node : OX_MAX_UNROLL;
    int64_t hi = per < OX_MAX_UNROLL ? per : OX_MAX_UNROLL;
    char *what = gr_sprintf("node '%s' (Loop) body", c->node_name);
    if (!what) return gr_nomem();
    gr_graph *bg = NULL;
    bool cond_true = false;
    gr_status st = ox_import_loop_body(c, body, what, n_state, in + 2, &bg, &cond_true);
    gr_strfree(what);
    if (st == GR_OK && !cond_true) { /* a while-loop: its own node (what was emitted above is dead code, removed by DCE) */
        gr_ir_graph_destroy(bg);
        return loop_while(c, body, n_state, n_scan);
    }
    /* nothing stacked per iteration: a loop step bounded by M (the device's WHILE node in graph
     * mode), any count, no probe; unrolling per count is kept for scan outputs, whose shape
     * depends on the count (at most OX_MAX_UNROLL iterations) */
    if (st == GR_OK && n_scan == 0) {
        gr_ir_graph_destroy(bg);
        return loop_while(c, body, n_state, n_scan);
    }
    gr_dim trip;
    if (st == GR_OK) st = ox_data_symbol(c, "loop", count, hi, &trip);
    int outs[128];
    if (st == GR_OK) {
        in[0] = count;
        in[1] = cond;
        gr_ir_attr attrs[2] = {{.name = (char *)"body", .kind = GR_IR_ATTR_GRAPH, .graph = bg},
                               {.name = (char *)"trip", .kind = GR_IR_ATTR_INT, .sym = true, .expr = trip.expr}};
        const char *names[128];
        ox_out_names(c, names, n_out);
        st = ox_emit(c, GR_OP_LOOP, 2 + n_state, in, 2, attrs, n_out, names, true, outs);
    }
    gr_ir_graph_destroy(bg);
    GR_TRY(st);
    for (int i = 0; i < n_out; i++)
        if (!irv(c, outs[i])->typed)
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "the type of output %d is not known (the body changes a loop-carried "
                                                        "value's type or shape)", i);
    return ox_bind_outputs(c, n_out, outs, NULL);
}

gr_status ox_cv_loop(ox_ctx *c, gr_op op) {
    (void)op;
    const Onnx__GraphProto *body = graph_attr(c, "body");
    if (!body) return ox_node_error(c, GR_ERR_INVALID, "graph attribute 'body' is required");
    int n_in = ox_n_in(c), n_state = n_in - 2, n_out = (int)c->node->n_output;
    if (n_in < 2) return ox_node_error(c, GR_ERR_INVALID, "expects at least 2 inputs (M, cond), got %d", n_in);
    if (n_state > 64 || n_out > 128) return ox_node_error(c, GR_ERR_UNSUPPORTED, "too many loop-carried values");
    int n_scan = n_out - n_state;
    if (n_scan < 0 || (int)body->n_input != 2 + n_state || (int)body->n_output != 1 + n_state + n_scan)
        return ox_node_error(c, GR_ERR_INVALID, "the body has %zu inputs and %zu outputs; %d loop-carried values and %d outputs need %d and %d",
                             body->n_input, body->n_output, n_state, n_out, 2 + n_state, 1 + n_out);
    bool m_present, m_known, c_present, c_known;
    int64_t trip = 0, cond0 = 1;
    GR_TRY(loop_scalar(c, 0, "M", &m_present, &m_known, &trip));
    GR_TRY(loop_scalar(c, 1, "cond", &c_present, &c_known, &cond0));
    /* a trip count known only at run time: M computed then, or a run-time initial condition */
    if (m_present && (!m_known || (c_present && !c_known)) && !(c_known && cond0 == 0))
        return loop_run_time_trip(c, body, n_state, n_scan, c_present && !c_known);
    if (c_present && !c_known) return loop_while(c, body, n_state, n_scan); /* no M: the condition bounds it */
    if (m_present && trip < 0) trip = 0;
    /* without M the condition ends the loop; the iteration bound below stops a runaway one */
    int64_t limit = m_present ? trip : OX_MAX_UNROLL + 1;
    /* too long to unroll and nothing stacked per iteration: a loop step (the device's WHILE node
     * in graph mode), whose counter bounds it by M, instead of an error */
    if (m_present && n_scan == 0 && (trip > OX_MAX_UNROLL || (int64_t)body->n_node * trip > OX_MAX_UNROLLED_NODES))
        return loop_while(c, body, n_state, n_scan);
    if (m_present && (trip > OX_MAX_UNROLL || (int64_t)body->n_node * trip > OX_MAX_UNROLLED_NODES))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "a trip count of %lld is too many iterations to unroll (at most %d, and %d body nodes in all)",
                             (long long)trip, OX_MAX_UNROLL, OX_MAX_UNROLLED_NODES);
    ox_value state[64], *scans = NULL, in[66], out[129];
    values_init(state, n_state);
    values_init(in, 2 + n_state);
    values_init(out, 1 + n_out);
    size_t scans_bytes = sizeof(ox_value) * (size_t)(n_scan ? n_scan : 1) * OX_MAX_UNROLL;
    gr_status st = (scans = gr_malloc(scans_bytes)) ? GR_OK : GR_ERR_NOMEM;
    if (scans) values_init(scans, (int)(scans_bytes / sizeof(ox_value)));
    for (int i = 0; st == GR_OK && i < n_state; i++) {
        int vi = ox_in(c, 2 + i);
        if (vi < 0) st = ox_node_error(c, GR_ERR_INVALID, "loop-carried input %d is missing", i);
        else st = ox_value_copy(&state[i], &c->vals.data[vi]);
    }
    int iters = 0;
    bool go = cond0 != 0, run_time_cond = false;
    while (st == GR_OK && go && iters < limit) {
        if (iters == OX_MAX_UNROLL || (int64_t)body->n_node * (iters + 1) > OX_MAX_UNROLLED_NODES) {
            st = ox_node_error(c, GR_ERR_UNSUPPORTED, "the loop runs more than %d iterations (or %d body nodes), too many to unroll",
                               OX_MAX_UNROLL, OX_MAX_UNROLLED_NODES);
            break;
        }
        values_clear(in, 2 + n_state);
        st = ox_tensor_new(GR_I64, 0, NULL, &in[0].konst);
        if (st == GR_OK) {
            *(int64_t *)in[0].konst->data = iters;
            st = ox_tensor_new(GR_BOOL, 0, NULL, &in[1].konst);
        }
        if (st == GR_OK) *(uint8_t *)in[1].konst->data = 1;
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&in[2 + i], &state[i]);
        char *what = st == GR_OK ? gr_sprintf("%s/iter%d", c->node_name, iters) : NULL;
        if (st == GR_OK && !what) st = GR_ERR_NOMEM;
        values_clear(out, 1 + n_out);
        if (st == GR_OK) st = ox_inline_graph(c, body, what, in, out);
        gr_strfree(what);
        if (st != GR_OK) break;
        const ox_tensor *ck = out[0].konst;
        if (!ck || ox_tensor_has_sym(ck) || ox_tensor_numel(ck) != 1) {
            run_time_cond = true; /* a while-loop: the unrolled nodes so far are dead code */
            break;
        }
        go = gr_load_f64(ck->data, ck->dtype, 0) != 0;
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&state[i], &out[1 + i]);
        for (int k = 0; st == GR_OK && k < n_scan; k++) st = ox_value_copy(&scans[k * OX_MAX_UNROLL + iters], &out[1 + n_state + k]);
        iters++;
    }
    if (st == GR_OK && run_time_cond) st = loop_while(c, body, n_state, n_scan);
    for (int i = 0; st == GR_OK && !run_time_cond && i < n_state; i++) st = bind_value(c, c->node->output[i], &state[i]);
    for (int k = 0; st == GR_OK && !run_time_cond && k < n_scan; k++)
        st = stack_outputs(c, c->node->output[n_state + k], &scans[k * OX_MAX_UNROLL], iters, 0, false);
    values_clear(state, n_state);
    values_clear(in, 2 + n_state);
    values_clear(out, 1 + n_out);
    if (scans) {
        values_clear(scans, (int)(scans_bytes / sizeof(ox_value)));
        gr_free(scans, scans_bytes);
    }
    return st;
}

/* reversed along axis: gather(x, (n - 1) - iota(n), axis) */
static gr_status reverse_ir(ox_ctx *c, int x, gr_dim n, int axis, int *out) {
    gr_dim last;
    gr_status st = gr_dx_binary(c->g, GR_DX_SUB, n, gr_dx_const(1), &last);
    if (st != GR_OK) return ox_node_error(c, st == GR_ERR_NOMEM ? st : GR_ERR_SHAPE, "the sequence length minus one is not expressible");
    int iota, l, idx;
    GR_TRY(ox_iota_ir(c, n, &iota));
    GR_TRY(ox_dim_scalar_ir(c, last, GR_I64, &l));
    GR_TRY(ox_emit2(c, GR_OP_SUB, l, iota, &idx));
    int in[2] = {x, idx};
    gr_ir_attr a = A_int("axis", axis);
    return ox_emit(c, GR_OP_GATHER, 2, in, 1, &a, 1, NULL, false, out);
}

/* Scan over a symbolic sequence length T: a `loop` node whose trip attribute is T, unrolled
 * per binding (passes/unroll.c, at most 256 steps); its body slices scan input j at the
 * iteration number (a gather; reversed inputs are reversed first), and the stacked scan
 * outputs are reversed and moved to their output axes afterwards. */
static gr_status scan_symbolic(ox_ctx *c, const Onnx__GraphProto *body, int n_state, int m, int n_scan_out, const int *xs_in,
                               const int *axes, gr_dim len, const int64_t *in_dirs, const int64_t *out_axes, const int64_t *out_dirs) {
    int in[130], xs[64], outs[130];
    for (int i = 0; i < n_state; i++) {
        int vi = ox_in(c, i);
        if (vi < 0) return ox_node_error(c, GR_ERR_INVALID, "state input %d is missing", i);
        GR_TRY(value_to_ir(c, &c->vals.data[vi], "a state input", &in[2 + i]));
    }
    for (int j = 0; j < m; j++) {
        xs[j] = xs_in[j];
        if (in_dirs && in_dirs[j]) GR_TRY(reverse_ir(c, xs[j], len, axes[j], &xs[j]));
    }
    GR_TRY(ox_dim_scalar_ir(c, len, GR_I64, &in[0]));
    GR_TRY(ox_scalar_const_ir(c, GR_BOOL, 1.0, &in[1]));
    char *what = gr_sprintf("node '%s' (Scan) body", c->node_name);
    if (!what) return gr_nomem();
    gr_graph *bg = NULL;
    gr_status st = ox_import_scan_body(c, body, what, n_state, in + 2, m, xs, axes, &bg);
    gr_strfree(what);
    int n_out = n_state + n_scan_out;
    if (st == GR_OK) {
        gr_ir_attr attrs[2] = {{.name = (char *)"body", .kind = GR_IR_ATTR_GRAPH, .graph = bg},
                               {.name = (char *)"trip", .kind = GR_IR_ATTR_INT, .sym = true, .expr = len.expr}};
        st = ox_emit(c, GR_OP_LOOP, 2 + n_state, in, 2, attrs, n_out, NULL, false, outs);
    }
    gr_ir_graph_destroy(bg);
    GR_TRY(st);
    for (int i = 0; i < n_out; i++)
        if (!irv(c, outs[i])->typed)
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "the type of output %d is not known (the body changes a state's type or shape)", i);
    for (int i = 0; i < n_state; i++) {
        ox_value v = {.ir = outs[i]};
        GR_TRY(bind_value(c, c->node->output[i], &v));
    }
    for (int k = 0; k < n_scan_out; k++) {
        const char *name = c->node->output[n_state + k];
        if (!name || !*name) continue;
        int y = outs[n_state + k], r = irv(c, y)->ndim;
        if (out_dirs && out_dirs[k]) GR_TRY(reverse_ir(c, y, len, 0, &y));
        int64_t a = out_axes ? out_axes[k] : 0;
        if (a < -r || a >= r) return ox_node_error(c, GR_ERR_SHAPE, "scan output axis %lld out of range for rank %d", (long long)a, r);
        if (a < 0) a += r;
        if (a > 0) { /* the stacked axis 0 moves to a */
            int64_t perm[GR_MAX_DIMS];
            for (int d = 0, src = 1; d < r; d++) perm[d] = d == a ? 0 : src++;
            gr_ir_attr p = A_ints("perm", perm, r);
            GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &y, 1, &p, 1, NULL, false, &y));
        }
        ox_value v = {.ir = y};
        GR_TRY(bind_value(c, name, &v));
    }
    return GR_OK;
}

/* Scan (opset 9+): unrolled over the scan inputs' sequence length, which must be known. */
gr_status ox_cv_scan(ox_ctx *c, gr_op op) {
    (void)op;
    const Onnx__GraphProto *body = graph_attr(c, "body");
    if (!body) return ox_node_error(c, GR_ERR_INVALID, "graph attribute 'body' is required");
    int64_t n_scan_in;
    GR_TRY(ox_attr_int(c, "num_scan_inputs", -1, &n_scan_in));
    int n_in = ox_n_in(c), n_out = (int)c->node->n_output;
    if (n_scan_in < 1 || n_scan_in > n_in) return ox_node_error(c, GR_ERR_INVALID, "num_scan_inputs must be in [1, %d]", n_in);
    int m = (int)n_scan_in, n_state = n_in - m, n_scan_out = n_out - n_state;
    if (n_in > 64 || n_out > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "too many inputs or outputs");
    if (n_scan_out < 0 || (int)body->n_input != n_in || (int)body->n_output != n_out)
        return ox_node_error(c, GR_ERR_INVALID, "the body has %zu inputs and %zu outputs, the node %d and %d", body->n_input, body->n_output, n_in, n_out);
    const int64_t *in_axes, *in_dirs, *out_axes, *out_dirs;
    int n_ia, n_id, n_oa, n_od;
    GR_TRY(ox_attr_ints(c, "scan_input_axes", &in_axes, &n_ia));
    GR_TRY(ox_attr_ints(c, "scan_input_directions", &in_dirs, &n_id));
    GR_TRY(ox_attr_ints(c, "scan_output_axes", &out_axes, &n_oa));
    GR_TRY(ox_attr_ints(c, "scan_output_directions", &out_dirs, &n_od));
    if ((n_ia >= 0 && n_ia != m) || (n_id >= 0 && n_id != m) || (n_oa >= 0 && n_oa != n_scan_out) || (n_od >= 0 && n_od != n_scan_out))
        return ox_node_error(c, GR_ERR_INVALID, "scan axes / directions lists do not match the number of scan inputs or outputs");
    int xs[64], axes[64];
    int64_t T = -1;
    gr_dim len = gr_dx_const(-1);
    bool symbolic = false;
    for (int j = 0; j < m; j++) {
        GR_TRY(ox_in_ir(c, n_state + j, &xs[j]));
        const gr_ir_value *v = irv(c, xs[j]);
        if (!v->typed || v->ndim < 1) return ox_node_error(c, GR_ERR_SHAPE, "scan input %d must have rank >= 1 and a known shape", j);
        int64_t a = n_ia > 0 ? in_axes[j] : 0;
        if (a < -v->ndim || a >= v->ndim) return ox_node_error(c, GR_ERR_SHAPE, "scan input axis %lld out of range", (long long)a);
        axes[j] = (int)(a < 0 ? a + v->ndim : a);
        gr_dim d = v->dims[axes[j]];
        if (j > 0 && !gr_dx_equal(d, len) && (gr_dx_is_sym(d) || gr_dx_is_sym(len)))
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "scan inputs 0 and %d have sequence lengths graft cannot show equal", j);
        symbolic |= gr_dx_is_sym(d);
        len = d;
        if (gr_dx_is_sym(d)) continue;
        if (T >= 0 && d.size != T) return ox_node_error(c, GR_ERR_SHAPE, "scan inputs differ in sequence length (%lld, %lld)", (long long)T, (long long)d.size);
        T = d.size;
    }
    if (symbolic) /* a length bound at run time: a loop unrolled per binding */
        return scan_symbolic(c, body, n_state, m, n_scan_out, xs, axes, len, n_id > 0 ? in_dirs : NULL, n_oa > 0 ? out_axes : NULL,
                             n_od > 0 ? out_dirs : NULL);
    if (T > OX_MAX_UNROLL || (int64_t)body->n_node * T > OX_MAX_UNROLLED_NODES)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "a sequence of %lld steps is too long to unroll (at most %d)", (long long)T, OX_MAX_UNROLL);
    ox_value state[64], in[64], out[64], *scans = NULL;
    values_init(state, n_state);
    values_init(in, n_in);
    values_init(out, n_out);
    size_t scans_bytes = sizeof(ox_value) * (size_t)(n_scan_out ? n_scan_out : 1) * OX_MAX_UNROLL;
    gr_status st = (scans = gr_malloc(scans_bytes)) ? GR_OK : GR_ERR_NOMEM;
    if (scans) values_init(scans, (int)(scans_bytes / sizeof(ox_value)));
    for (int i = 0; st == GR_OK && i < n_state; i++) {
        int vi = ox_in(c, i);
        if (vi < 0) st = ox_node_error(c, GR_ERR_INVALID, "state input %d is missing", i);
        else st = ox_value_copy(&state[i], &c->vals.data[vi]);
    }
    for (int64_t t = 0; st == GR_OK && t < T; t++) {
        values_clear(in, n_in);
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&in[i], &state[i]);
        for (int j = 0; st == GR_OK && j < m; j++) {
            int64_t pos = (n_id > 0 && in_dirs[j]) ? T - 1 - t : t, end = pos + 1, ax = axes[j];
            gr_ir_attr sl[3] = {A_ints("starts", &pos, 1), A_ints("ends", &end, 1), A_ints("axes", &ax, 1)};
            int part;
            st = ox_emit(c, GR_OP_SLICE, 1, &xs[j], 3, sl, 1, NULL, false, &part);
            gr_ir_attr sq = A_ints("axes", &ax, 1);
            if (st == GR_OK) st = ox_emit(c, GR_OP_SQUEEZE, 1, &part, 1, &sq, 1, NULL, false, &in[n_state + j].ir);
        }
        char *what = st == GR_OK ? gr_sprintf("%s/step%lld", c->node_name, (long long)t) : NULL;
        if (st == GR_OK && !what) st = GR_ERR_NOMEM;
        values_clear(out, n_out);
        if (st == GR_OK) st = ox_inline_graph(c, body, what, in, out);
        gr_strfree(what);
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&state[i], &out[i]);
        for (int k = 0; st == GR_OK && k < n_scan_out; k++) st = ox_value_copy(&scans[k * OX_MAX_UNROLL + t], &out[n_state + k]);
    }
    for (int i = 0; st == GR_OK && i < n_state; i++) st = bind_value(c, c->node->output[i], &state[i]);
    for (int k = 0; st == GR_OK && k < n_scan_out; k++)
        st = stack_outputs(c, c->node->output[n_state + k], &scans[k * OX_MAX_UNROLL], (int)T, n_oa > 0 ? out_axes[k] : 0,
                           n_od > 0 && out_dirs[k]);
    values_clear(state, n_state);
    values_clear(in, n_in);
    values_clear(out, n_out);
    if (scans) {
        values_clear(scans, (int)(scans_bytes / sizeof(ox_value)));
        gr_free(scans, scans_bytes);
    }
    return st;
}
