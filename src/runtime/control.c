/* runtime/control — the control runner: `if` nodes predication did not take and while-loops
 * (passes/cond.c lowers each to one control step: args = inputs, captures, outputs).
 *
 * Each subgraph (a loop body, an if branch) is a session of its own over the subgraph made
 * standalone (its captures become inputs), on the parent's device (gr_rt_session_create_child:
 * the parent's device addresses are valid inputs). It plans, fuses and reports errors like
 * any session, and a loop or if nested in it is run by its own runner. Its inputs are bound
 * to the parent's device buffers (read in place, no copy); its outputs are copied into the
 * step's outputs. A loop body gets more nodes (extend_body): iter + 1, and the flag
 * cond && iter + 1 < limit as an i32, limit = min(M, GR_LOOP_MAX_ITERS) given on the host.
 *
 * The loop-carried state lives in the loop's output buffers: the initial values are copied
 * in, each iteration's body reads them in place and its outputs are copied back after it
 * ran (through staging buffers when an output is another carried value's buffer: a swap).
 *
 * Graph mode, on a device with conditional graph nodes (both backends), when every step of
 * the subgraphs' plans can be captured (no host step, no host scalar, inputs read in place):
 *   loop: the body's steps, the state copies and the copy of the flag into the condition
 *         handle are captured once into a device WHILE node; one launch runs every
 *         iteration with no host round trip; the iteration count is read back after it.
 *   if:   the condition is copied into an IF_ELSE handle and each branch's steps (and output
 *         copies) are captured into its body: one launch, no host read of the condition.
 * The graph is captured again only when an address it bakes in (a capture's or an output's
 * buffer) changes. Otherwise (eager mode, or what cannot be captured): the same kernels,
 * and the host reads the flag after each iteration (one synchronisation per iteration) or
 * the if's condition (one) and runs the branch it selects.
 *
 * Either way the control step is a host step: before it the parent's stream is drained and
 * M and the initial condition are read on the host, so it is a partition break (the
 * segments before and after it are graphs of their own; docs/design.md, "Control flow").
 * A loop stops at M iterations, when the condition is false, or with an error at
 * GR_LOOP_MAX_ITERS (a loop without M that never ends: an error, never a hang). */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

#define CTRL_MAX_SUBS 2 /* loop: the body; if: then, else */

typedef struct gr_rt_ctrl {
    gr_session_t parent;
    gr_rt_plan *plan;
    int step;               /* index of the control step in plan */
    int node;               /* the if / loop node of plan->g */
    gr_session_t sub[CTRL_MAX_SUBS];
    int n_caps;
    int caps[GR_KMAX_PARAMS]; /* values of plan->g the subgraphs read (their input names) */
    /* graph mode: the captured conditional (NULL: not captured yet, or not capturable) */
    int capturable;         /* -1 not decided, 0 no (why_not says why), 1 yes */
    char why_not[160];
    gr_dgraph *graph;
    gr_dexec *exec;
    void *key[GR_KMAX_PARAMS]; /* the step's addresses the captured graph bakes in */
    void *scratch;          /* device: iter (i64), limit (i64), one (bool), then staging */
    size_t scratch_bytes;
    long runs, iterations, launches, captures; /* explain */
} gr_rt_ctrl;

/* the iteration cap (GR_LOOP_MAX_ITERS; tests lower it: gr_rt_debug_set_loop_cap) */
static _Atomic int64_t loop_cap = GR_LOOP_MAX_ITERS;
void gr_rt_debug_set_loop_cap(int64_t n) { loop_cap = n > 0 ? n : GR_LOOP_MAX_ITERS; }

#define SCRATCH_ITER 0
#define SCRATCH_LIMIT 8
#define SCRATCH_ONE 16
#define SCRATCH_STAGING 32

/* ==== the standalone subgraph ====================================================== */
/* A clone of sub whose inputs are its own plus one per capture (names of the parent's
 * values `caps`, typed as in parent), symbols dropped (the parent's plan is concrete). */
static gr_status standalone(const gr_graph *parent, const gr_graph *sub, const int *caps, int n_caps, gr_graph **out) {
    gr_graph *g = NULL;
    GR_TRY(gr_ir_graph_clone(sub, &g));
    g->parent = NULL;
    gr_status st = GR_OK;
    for (int i = 0; i < n_caps && st == GR_OK; i++) {
        const gr_ir_value *pv = &parent->values.data[caps[i]];
        int v = gr_ir_find_value(g, pv->name);
        if (v >= 0 && g->values.data[v].kind != GR_VAL_INPUT) continue; /* defined inside: not read from outside */
        if (v < 0) { /* read only by a nested subgraph: a new input of this one */
            st = gr_ir_add_value(g, pv->name, GR_VAL_INPUT, &v);
            if (st != GR_OK) break;
        }
        gr_ir_value *d = &g->values.data[v];
        d->typed = pv->typed;
        d->dtype = pv->dtype;
        d->ndim = pv->ndim;
        d->placement = GR_PLACE_DEVICE;
        for (int k = 0; k < pv->ndim; k++) d->dims[k] = gr_dx_const(pv->dims[k].size);
        st = gr_vec_push(&g->inputs, v);
    }
    /* every dim is concrete in the parent's plan: the clone's symbols are used by no value, so the
     * session binds none of them (its expressions keep their symbols valid) */
    if (st == GR_OK) st = gr_ir_infer_shapes(g);
    if (st != GR_OK) {
        gr_ir_graph_destroy(g);
        return st;
    }
    *out = g;
    return GR_OK;
}

static gr_status node_into(gr_graph *g, gr_op op, const char *base, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs,
                           int *out) {
    char *name = gr_strdup(base);
    for (int k = 2; name && gr_ir_find_node(g, name) >= 0; k++) {
        gr_strfree(name);
        name = gr_sprintf("%s.%d", base, k);
    }
    if (!name) return gr_nomem();
    int node;
    gr_status st = gr_ir_add_node(g, op, name, n_in, in, 1, NULL, n_attr, attrs, &node);
    gr_strfree(name);
    GR_TRY(st);
    *out = g->nodes.data[node].out[0];
    return GR_OK;
}

/* A fresh value name of g from base (taken over). */
static char *fresh_value(const gr_graph *g, char *base) {
    char *s = base;
    for (int k = 2; s && gr_ir_find_value(g, s) >= 0; k++) {
        char *next = gr_sprintf("%s.%d", base, k);
        if (s != base) gr_strfree(s);
        s = next;
    }
    if (s != base) gr_strfree(base);
    return s;
}

/* A loop body (inputs iter, cond, carried..., captures...; outputs cond, carried...) gets
 * the input `limit` (last) and the outputs iter + 1 and flag = cond && iter + 1 < limit (i32):
 * what the WHILE handle takes, computed by the body's own kernels in both modes. */
static gr_status extend_body(gr_graph *g, const char *where) {
    if (g->inputs.len < 2 || g->outputs.len < 1)
        return gr_error(GR_ERR_INVALID, "%s: a loop body needs iter, cond and a condition output", where);
    const gr_ir_value *it = &g->values.data[g->inputs.data[0]], *cv = &g->values.data[g->outputs.data[0]];
    if (!it->typed || it->dtype != GR_I64 || it->ndim != 0)
        return gr_error(GR_ERR_INVALID, "%s: the body's iteration input must be a 0-d i64", where);
    if (!cv->typed || cv->dtype != GR_BOOL || gr_ir_value_numel(cv) != 1)
        return gr_error(GR_ERR_SHAPE, "%s: the body's condition output must be one bool", where);
    char *lname = fresh_value(g, gr_strdup("graft.loop.limit")), *oname = fresh_value(g, gr_strdup("graft.loop.one"));
    int limit = -1, one = -1, it1, lt, cond = g->outputs.data[0], both, flag;
    int64_t v1 = 1;
    gr_status st = lname && oname ? gr_ir_add_input(g, lname, GR_I64, 0, NULL, &limit) : gr_nomem();
    if (st == GR_OK) st = gr_ir_add_const(g, oname, GR_I64, 0, NULL, &v1, &one);
    gr_strfree(lname);
    gr_strfree(oname);
    GR_TRY(st);
    int in2[2] = {g->inputs.data[0], one};
    GR_TRY(node_into(g, GR_OP_ADD, "graft.loop.iter_next", 2, in2, 0, NULL, &it1));
    in2[0] = it1, in2[1] = limit;
    GR_TRY(node_into(g, GR_OP_LESS, "graft.loop.below_limit", 2, in2, 0, NULL, &lt));
    if (g->values.data[cond].ndim != 0) {
        gr_ir_attr shape = {.name = (char *)"shape", .kind = GR_IR_ATTR_INTS, .n = 0};
        GR_TRY(node_into(g, GR_OP_RESHAPE, "graft.loop.cond", 1, &cond, 1, &shape, &cond));
    }
    in2[0] = cond, in2[1] = lt;
    GR_TRY(node_into(g, GR_OP_AND, "graft.loop.go_on", 2, in2, 0, NULL, &both));
    gr_ir_attr to = {.name = (char *)"to", .kind = GR_IR_ATTR_STRING, .s = (char *)"i32"};
    GR_TRY(node_into(g, GR_OP_CAST, "graft.loop.flag", 1, &both, 1, &to, &flag));
    GR_TRY(gr_ir_add_output(g, it1));
    GR_TRY(gr_ir_add_output(g, flag));
    return gr_ir_infer_shapes(g);
}

static gr_status sub_session(gr_rt_ctrl *c, int which, const char *attr, gr_session_t *out) {
    if (c->sub[which]) return *out = c->sub[which], GR_OK;
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    const gr_ir_attr *a = gr_ir_attr_find(n, attr);
    if (!a || a->kind != GR_IR_ATTR_GRAPH || !a->graph) return gr_error(GR_ERR_INVALID, "needs the subgraph '%s'", attr);
    gr_graph *g = NULL;
    GR_TRY(standalone(c->plan->g, a->graph, c->caps, c->n_caps, &g));
    if (n->op == GR_OP_LOOP) {
        gr_status est = extend_body(g, attr);
        if (est != GR_OK) {
            gr_ir_graph_destroy(g);
            return est;
        }
    }

    gr_session_options o = c->parent->opt;
    if (o.mode == GR_MODE_AUTO) o.mode = GR_MODE_EAGER; /* nothing timed per iteration */
    /* graph mode on a device with conditional nodes: this runner captures the subgraph's steps
     * itself (into the conditional node), so its session runs them eagerly, reading its inputs
     * in place; a runner nested in it captures too (ctrl_graphs) */
    bool graphs = (o.mode == GR_MODE_GRAPH || c->parent->ctrl_graphs) && gr_dev_caps_get(c->parent->dev).conditional_nodes;
    if (graphs) o.mode = GR_MODE_EAGER;
    o.arena_policy = GR_ARENA_PER_SHAPE;
    o.graph_memory_mb = 0;
    o.precision = GR_PRECISION_MODEL; /* converted with the parent, if at all */
    gr_status st = gr_rt_session_create_child(g, &o, c->parent, &c->sub[which]);
    gr_ir_graph_destroy(g);
    if (st != GR_OK) return gr_error_prefix(st, "%s", attr);
    c->sub[which]->ctrl_graphs = graphs;
    *out = c->sub[which];
    return GR_OK;
}

/* ==== values ======================================================================== */
static const gr_value_store *store_of(const gr_rt_plan *p, int v) {
    const gr_value_store *st = &p->mem.values[v];
    for (int guard = 0; guard < p->mem.n_values && st->kind == GR_STORE_ALIAS; guard++) st = &p->mem.values[st->alias_of];
    return st;
}

static size_t value_bytes(const gr_graph *g, int v) {
    const gr_ir_value *iv = &g->values.data[v];
    return (size_t)gr_ir_value_numel(iv) * gr_dtype_size(iv->dtype);
}

/* One element of value v (address addr in the parent) read on the host, as a truth value. */
static gr_status read_flag(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc, int v, void *addr, bool *out) {
    const gr_ir_value *iv = &c->plan->g->values.data[v];
    unsigned char buf[16] = {0};
    size_t n = gr_dtype_size(iv->dtype);
    if (gr_ir_value_numel(iv) != 1 || n > sizeof buf) return gr_error(GR_ERR_SHAPE, "'%s' must hold one element", iv->name);
    if (store_of(c->plan, v)->kind == GR_STORE_HOST) memcpy(buf, addr, n);
    else {
        GR_TRY(gr_dev_memcpy(hc->dev, hc->stream, buf, addr, n, GR_COPY_D2H));
        GR_TRY(gr_dev_stream_sync(hc->dev, hc->stream));
    }
    *out = gr_load_f64(buf, iv->dtype, 0) != 0;
    return GR_OK;
}

static gr_status read_i64(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc, int v, void *addr, int64_t *out) {
    const gr_ir_value *iv = &c->plan->g->values.data[v];
    unsigned char buf[16] = {0};
    size_t n = gr_dtype_size(iv->dtype);
    if (gr_ir_value_numel(iv) != 1 || n > sizeof buf) return gr_error(GR_ERR_SHAPE, "'%s' must hold one element", iv->name);
    if (store_of(c->plan, v)->kind == GR_STORE_HOST) memcpy(buf, addr, n);
    else {
        GR_TRY(gr_dev_memcpy(hc->dev, hc->stream, buf, addr, n, GR_COPY_D2H));
        GR_TRY(gr_dev_stream_sync(hc->dev, hc->stream));
    }
    *out = gr_load_i64(buf, iv->dtype, 0);
    return GR_OK;
}

/* Binds input `name` of sub to the parent's value v at addr (in place; host values copied). */
static gr_status bind_in(gr_rt_ctrl *c, gr_session_t sub, const char *name, int v, void *addr) {
    const gr_ir_value *iv = &c->plan->g->values.data[v];
    int64_t dims[GR_MAX_DIMS];
    for (int d = 0; d < iv->ndim; d++) dims[d] = iv->dims[d].size;
    size_t n = value_bytes(c->plan->g, v);
    if (store_of(c->plan, v)->kind == GR_STORE_HOST) return gr_session_set_input(sub, name, iv->dtype, iv->ndim, dims, addr, n);
    return gr_session_bind_input_device(sub, name, iv->dtype, iv->ndim, dims, addr, n);
}

/* Binds the captures: sub's inputs [n_own, end). */
static gr_status bind_captures(gr_rt_ctrl *c, gr_session_t sub, int n_own, int end, const struct gr_step_host_ctx *hc, int first_arg) {
    const gr_graph *sg = sub->graph;
    for (int i = n_own; i < end; i++) {
        const char *name = sg->values.data[sg->inputs.data[i]].name;
        int k = 0;
        while (k < c->n_caps && strcmp(c->plan->g->values.data[c->caps[k]].name, name)) k++;
        if (k == c->n_caps) return gr_error(GR_ERR_INTERNAL, "capture '%s' is not bound by the step", name);
        GR_TRY(bind_in(c, sub, name, c->caps[k], hc->addr[first_arg + k]));
    }
    return GR_OK;
}

/* ==== state copies ===================================================================== */
/* Copies src[i] -> dst[i] (n values, bytes[i] each) on stream st; when a source is another
 * destination (carried values swapped), everything goes through the staging area first. */
static gr_status copy_state(gr_rt_ctrl *c, gr_stream *st, int n, void *const *src, void *const *dst, const size_t *bytes) {
    gr_device *d = c->parent->dev;
    bool staged = false;
    for (int i = 0; i < n && !staged; i++)
        for (int j = 0; j < n && !staged; j++) staged = i != j && bytes[i] && src[i] == dst[j];
    if (!staged) {
        for (int i = 0; i < n; i++)
            if (bytes[i] && src[i] != dst[i]) GR_TRY(gr_dev_memcpy(d, st, dst[i], src[i], bytes[i], GR_COPY_D2D));
        return GR_OK;
    }
    size_t at = SCRATCH_STAGING;
    for (int i = 0; i < n; i++) {
        if (bytes[i]) GR_TRY(gr_dev_memcpy(d, st, (char *)c->scratch + at, src[i], bytes[i], GR_COPY_D2D));
        at += (bytes[i] + 15) / 16 * 16;
    }
    at = SCRATCH_STAGING;
    for (int i = 0; i < n; i++) {
        if (bytes[i]) GR_TRY(gr_dev_memcpy(d, st, dst[i], (char *)c->scratch + at, bytes[i], GR_COPY_D2D));
        at += (bytes[i] + 15) / 16 * 16;
    }
    return GR_OK;
}

/* The runner's device scratch: iter, limit, one, and room to stage `staging` bytes. */
static gr_status scratch_init(gr_rt_ctrl *c, size_t staging) {
    if (c->scratch) return GR_OK;
    size_t bytes = SCRATCH_STAGING + staging;
    GR_TRY(gr_dev_alloc(c->parent->dev, GR_MEM_DEVICE, bytes, &c->scratch));
    c->scratch_bytes = bytes;
    const unsigned char one = 1;
    GR_TRY(gr_dev_memcpy(c->parent->dev, c->parent->stream, (char *)c->scratch + SCRATCH_ONE, &one, 1, GR_COPY_H2D));
    return gr_dev_stream_sync(c->parent->dev, c->parent->stream);
}

/* ==== capture ============================================================================= */
static void drop_graph(gr_rt_ctrl *c) {
    gr_device *d = c->parent->dev;
    if (c->exec) gr_dev_exec_destroy(d, c->exec);
    if (c->graph) gr_dev_graph_destroy(d, c->graph);
    c->exec = NULL;
    c->graph = NULL;
}

/* Can sub's plan be captured here? Its steps device work only, and its inputs read in place
 * (bound to device buffers before this is asked). why: the reason it cannot. */
static bool plan_capturable(gr_session_t sub, char *why, size_t size) {
    gr_rt_plan *p = sub->plans;
    if (!p) return snprintf(why, size, "the subgraph has no plan yet"), false;
    for (int i = 0; i < p->steps.len; i++) {
        const gr_step *st = &p->steps.data[i];
        if (st->kind == GR_STEP_HOST) return snprintf(why, size, "the subgraph holds a host step (a nested if or loop)"), false;
        for (int a = 0; a < st->n_args; a++)
            if (st->args[a].kind == GR_ARG_HOST_SCALAR) return snprintf(why, size, "the subgraph reads a host scalar"), false;
    }
    for (int i = 0; i < p->g->inputs.len; i++)
        if (p->mem.values[p->g->inputs.data[i]].kind == GR_STORE_INPUT && !(sub->inputs[i].dev_ptr && p->input_in_place[i]))
            return snprintf(why, size, "input '%s' of the subgraph is not read in place", p->g->values.data[p->g->inputs.data[i]].name),
                   false;
    return true;
}

/* Whether graph mode can keep this control step on the device (decided once per runner). */
static bool wants_graph(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    if (c->capturable >= 0) return c->capturable == 1;
    c->capturable = 0;
    if (c->parent->opt.mode != GR_MODE_GRAPH && !c->parent->ctrl_graphs) {
        snprintf(c->why_not, sizeof c->why_not, "eager mode");
        return false;
    }
    if (!gr_dev_caps_get(c->parent->dev).conditional_nodes) {
        snprintf(c->why_not, sizeof c->why_not, "the device has no conditional graph nodes");
        return false;
    }
    int first_cap = 0;
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    for (int i = 0; i < n->n_in; i++) first_cap += n->in[i] >= 0;
    for (int k = 0; k < c->n_caps; k++)
        if (store_of(c->plan, c->caps[k])->kind == GR_STORE_HOST) {
            snprintf(c->why_not, sizeof c->why_not, "it reads '%s', a host input", c->plan->g->values.data[c->caps[k]].name);
            return false;
        }
    if (n->op == GR_OP_IF) {
        const gr_ir_value *cv = &c->plan->g->values.data[n->in[0]];
        if (store_of(c->plan, n->in[0])->kind == GR_STORE_HOST || gr_dtype_size(cv->dtype) > sizeof(unsigned)) {
            snprintf(c->why_not, sizeof c->why_not, "its condition is a host value or wider than 4 bytes");
            return false;
        }
    }
    (void)hc;
    (void)first_cap;
    c->capturable = 1;
    return true;
}

/* Is the captured graph still valid for this step's addresses? */
static bool key_same(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    for (int a = 0; a < hc->n_args && a < GR_KMAX_PARAMS; a++)
        if (c->key[a] != hc->addr[a]) return false;
    return true;
}
static void key_set(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    for (int a = 0; a < hc->n_args && a < GR_KMAX_PARAMS; a++) c->key[a] = hc->addr[a];
}

/* Enqueues every step of sub's plan on stream st (sub's own, or the capture's). */
static gr_status launch_plan(gr_session_t sub, gr_stream *st) {
    gr_rt_plan *p = sub->plans;
    gr_stream *own = sub->stream;
    sub->stream = st; /* gr_rt_step_launch enqueues on the session's stream: the capturing one */
    gr_status rc = GR_OK;
    for (int i = 0; i < p->steps.len && rc == GR_OK; i++) rc = gr_rt_step_launch(sub, p, i);
    sub->stream = own;
    return rc;
}

/* Device address of output o of sub's plan. */
static void *sub_out_addr(gr_session_t sub, int o) {
    gr_rt_plan *p = sub->plans;
    return gr_rt_value_addr(sub, p, p->g->outputs.data[o]);
}

/* Ends a capture that failed part way (the stream must leave capture mode), then returns st. */
static gr_status capture_abort(gr_rt_ctrl *c, gr_stream *s, gr_status st) {
    gr_dgraph *g = NULL;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", gr_last_error());
    if (gr_dev_capture_end(c->parent->dev, s, &g) == GR_OK && g) gr_dev_graph_destroy(c->parent->dev, g);
    return gr_error(st, "capturing the conditional node: %s", msg);
}

static gr_status capture_finish(gr_rt_ctrl *c, gr_stream *s) {
    GR_TRY(gr_dev_capture_end(c->parent->dev, s, &c->graph));
    gr_status st = gr_dev_graph_instantiate(c->parent->dev, c->graph, &c->exec);
    if (st != GR_OK) drop_graph(c);
    else c->captures++;
    return st;
}

/* ==== if ============================================================================= */
static gr_status if_outputs(gr_rt_ctrl *c, gr_session_t sub, const struct gr_step_host_ctx *hc, gr_stream *st, bool from_plan) {
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    int first_out = 1 + c->n_caps;
    void *src[GR_KMAX_PARAMS], *dst[GR_KMAX_PARAMS];
    size_t bytes[GR_KMAX_PARAMS];
    for (int o = 0; o < n->n_out; o++) {
        bytes[o] = value_bytes(c->plan->g, n->out[o]);
        dst[o] = hc->addr[first_out + o];
        if (from_plan) src[o] = sub_out_addr(sub, o);
        else {
            gr_output h;
            GR_TRY(gr_session_output(sub, o, &h));
            if (gr_session_output_nbytes(sub, h) != bytes[o])
                return gr_error(GR_ERR_SHAPE, "output %d of the branch has %zu bytes, the node's '%s' %zu", o,
                                gr_session_output_nbytes(sub, h), c->plan->g->values.data[n->out[o]].name, bytes[o]);
            src[o] = NULL;
            if (bytes[o]) GR_TRY(gr_session_output_device_ptr(sub, h, &src[o]));
        }
    }
    for (int o = 0; o < n->n_out; o++) /* outputs are fresh buffers: no overlap with a branch's values */
        if (bytes[o] && src[o] != dst[o]) GR_TRY(gr_dev_memcpy(c->parent->dev, st, dst[o], src[o], bytes[o], GR_COPY_D2D));
    return GR_OK;
}

static gr_status run_if_graph(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc, gr_session_t *subs) {
    gr_device *d = c->parent->dev;
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    gr_stream *s = subs[0]->stream;
    if (c->exec && !key_same(c, hc)) drop_graph(c);
    if (!c->exec) {
        for (int b = 0; b < 2; b++) GR_TRY(bind_captures(c, subs[b], 0, subs[b]->graph->inputs.len, hc, 1));
        for (int b = 0; b < 2; b++)
            if (!plan_capturable(subs[b], c->why_not, sizeof c->why_not)) return c->capturable = 0, GR_ERR_UNSUPPORTED;
        GR_TRY(gr_dev_capture_begin(d, s));
        uint64_t h = 0;
        gr_status st = gr_dev_cond_create(d, s, GR_COND_IF_ELSE, 0, &h);
        size_t cb = gr_dtype_size(c->plan->g->values.data[n->in[0]].dtype);
        /* the flag starts at 0 each launch: the condition's bytes make it non-zero or not */
        if (st == GR_OK) st = gr_dev_memcpy(d, s, (void *)(uintptr_t)h, hc->addr[0], cb, GR_COPY_D2D);
        for (int b = 0; b < 2 && st == GR_OK; b++) {
            st = gr_dev_cond_body_begin(d, s, h, b);
            if (st == GR_OK) st = launch_plan(subs[b], s);
            if (st == GR_OK) st = if_outputs(c, subs[b], hc, s, true);
            if (st == GR_OK) st = gr_dev_cond_body_end(d, s, h, b);
        }
        if (st != GR_OK) return capture_abort(c, s, st);
        GR_TRY(capture_finish(c, s));
        key_set(c, hc);
    }
    GR_TRY(gr_dev_graph_launch(d, c->exec, s));
    c->launches++;
    return gr_dev_stream_sync(d, s);
}

static gr_status run_if(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    c->runs++;
    if (wants_graph(c, hc)) {
        /* both branches compiled; one that cannot be (an error eager mode reports only when it is
         * taken) leaves the if host-driven, so both modes give the same results and errors */
        gr_session_t subs[2];
        gr_status st = sub_session(c, 0, "then_branch", &subs[0]);
        if (st == GR_OK) st = sub_session(c, 1, "else_branch", &subs[1]);
        if (st == GR_ERR_NOMEM) return st;
        if (st != GR_OK) {
            snprintf(c->why_not, sizeof c->why_not, "a branch does not compile: %.120s", gr_last_error());
            c->capturable = 0;
            gr_error_clear();
        } else {
            st = run_if_graph(c, hc, subs);
            if (st != GR_ERR_UNSUPPORTED || c->capturable) return st;
            gr_error_clear(); /* not capturable after all (why_not says why): the host path */
        }
    }
    bool take = false;
    GR_TRY(read_flag(c, hc, n->in[0], hc->addr[0], &take));
    gr_session_t sub;
    GR_TRY(sub_session(c, take ? 0 : 1, take ? "then_branch" : "else_branch", &sub));
    GR_TRY(bind_captures(c, sub, 0, sub->graph->inputs.len, hc, 1));
    GR_TRY(gr_session_run(sub));
    GR_TRY(gr_session_wait(sub));
    GR_TRY(if_outputs(c, sub, hc, hc->stream, false));
    return gr_dev_stream_sync(hc->dev, hc->stream);
}

/* ==== loop =========================================================================== */
typedef struct {
    int n_carried, first_cap, first_out;
    int64_t max_trip, cap, limit; /* cap: loop_cap when the run began; limit = min(M, cap) */
    void *dst[GR_KMAX_PARAMS];
    size_t bytes[GR_KMAX_PARAMS];
} loop_run;

/* The state's sources after an iteration: the body's carried outputs. */
static gr_status body_sources(gr_session_t sub, const loop_run *lr, bool from_plan, void **src) {
    for (int i = 0; i < lr->n_carried; i++) {
        if (from_plan) {
            src[i] = sub_out_addr(sub, 1 + i);
            continue;
        }
        gr_output h;
        GR_TRY(gr_session_output(sub, 1 + i, &h));
        if (gr_session_output_nbytes(sub, h) != lr->bytes[i])
            return gr_error(GR_ERR_SHAPE, "the body's loop-carried output %d has %zu bytes, the state %zu", i, gr_session_output_nbytes(sub, h),
                            lr->bytes[i]);
        src[i] = NULL;
        if (lr->bytes[i]) GR_TRY(gr_session_output_device_ptr(sub, h, &src[i]));
    }
    return GR_OK;
}

static gr_status cap_error(int64_t t, int64_t cap) {
    return gr_error(GR_ERR_UNSUPPORTED, "the loop ran %lld iterations and its condition is still true: graft stops a while-loop at "
                                        "%lld iterations (a loop without M that never ends would hang)",
                    (long long)t, (long long)cap);
}

/* Host-driven: the flag read after each iteration. */
static gr_status loop_host(gr_rt_ctrl *c, gr_session_t sub, const loop_run *lr) {
    const gr_graph *sg = sub->graph;
    const char *iter_name = sg->values.data[sg->inputs.data[0]].name;
    int o_flag = 2 + lr->n_carried;
    GR_TRY(gr_session_set_input(sub, sg->values.data[sg->inputs.data[sg->inputs.len - 1]].name, GR_I64, 0, NULL, &lr->limit,
                                sizeof lr->limit));
    for (int64_t t = 0;; t++) {
        GR_TRY(gr_session_set_input(sub, iter_name, GR_I64, 0, NULL, &t, sizeof t));
        gr_status st = gr_session_run(sub);
        if (st == GR_OK) st = gr_session_wait(sub);
        if (st != GR_OK) return gr_error_prefix(st, "iteration %lld", (long long)t);
        gr_output fo;
        int32_t flag = 0;
        GR_TRY(gr_session_output(sub, o_flag, &fo));
        GR_TRY(gr_session_output_read(sub, fo, &flag, sizeof flag));
        void *src[GR_KMAX_PARAMS];
        GR_TRY(body_sources(sub, lr, false, src));
        GR_TRY(copy_state(c, c->parent->stream, lr->n_carried, src, lr->dst, lr->bytes));
        GR_TRY(gr_dev_stream_sync(c->parent->dev, c->parent->stream));
        c->iterations++;
        if (flag) continue;
        if (t + 1 == lr->cap && lr->max_trip > lr->cap) { /* stopped by the cap, or by the condition? */
            gr_output co;
            unsigned char cond = 0;
            GR_TRY(gr_session_output(sub, 0, &co));
            GR_TRY(gr_session_output_read(sub, co, &cond, 1));
            if (cond) return cap_error(t + 1, lr->cap);
        }
        return GR_OK;
    }
}

/* Graph mode: the body captured once into a WHILE node; one launch runs the loop. */
static gr_status loop_graph(gr_rt_ctrl *c, gr_session_t sub, const loop_run *lr, const struct gr_step_host_ctx *hc) {
    gr_device *d = c->parent->dev;
    gr_stream *s = sub->stream;
    const gr_graph *sg = sub->graph;
    char *sc = c->scratch;
    if (c->exec && !key_same(c, hc)) drop_graph(c);
    if (!c->exec) {
        int64_t zero = 0;
        const gr_graph *gg = sg;
        GR_TRY(gr_session_bind_input_device(sub, gg->values.data[gg->inputs.data[0]].name, GR_I64, 0, NULL, sc + SCRATCH_ITER, 8));
        GR_TRY(gr_session_bind_input_device(sub, gg->values.data[gg->inputs.data[1]].name, GR_BOOL, 0, NULL, sc + SCRATCH_ONE, 1));
        GR_TRY(gr_session_bind_input_device(sub, gg->values.data[gg->inputs.data[gg->inputs.len - 1]].name, GR_I64, 0, NULL,
                                            sc + SCRATCH_LIMIT, 8));
        (void)zero;
        if (!plan_capturable(sub, c->why_not, sizeof c->why_not)) return c->capturable = 0, GR_ERR_UNSUPPORTED;
        void *src[GR_KMAX_PARAMS];
        GR_TRY(body_sources(sub, lr, true, src));
        GR_TRY(gr_dev_capture_begin(d, s));
        uint64_t h = 0;
        gr_status st = gr_dev_cond_create(d, s, GR_COND_WHILE, 1, &h); /* launched only when the first iteration runs */
        if (st == GR_OK) st = gr_dev_cond_body_begin(d, s, h, 0);
        if (st == GR_OK) st = launch_plan(sub, s);
        if (st == GR_OK) st = copy_state(c, s, lr->n_carried, src, lr->dst, lr->bytes);
        if (st == GR_OK) st = gr_dev_memcpy(d, s, sc + SCRATCH_ITER, sub_out_addr(sub, 1 + lr->n_carried), 8, GR_COPY_D2D);
        if (st == GR_OK) st = gr_dev_memcpy(d, s, (void *)(uintptr_t)h, sub_out_addr(sub, 2 + lr->n_carried), 4, GR_COPY_D2D);
        if (st == GR_OK) st = gr_dev_cond_body_end(d, s, h, 0);
        if (st != GR_OK) return capture_abort(c, s, st);
        GR_TRY(capture_finish(c, s));
        key_set(c, hc);
    }
    const int64_t zero = 0;
    GR_TRY(gr_dev_memcpy(d, s, sc + SCRATCH_ITER, &zero, 8, GR_COPY_H2D));
    GR_TRY(gr_dev_memcpy(d, s, sc + SCRATCH_LIMIT, &lr->limit, 8, GR_COPY_H2D));
    GR_TRY(gr_dev_stream_sync(d, s));
    GR_TRY(gr_dev_graph_launch(d, c->exec, s));
    c->launches++;
    GR_TRY(gr_dev_stream_sync(d, s));
    int64_t iters = 0;
    GR_TRY(gr_dev_memcpy(d, s, &iters, sc + SCRATCH_ITER, 8, GR_COPY_D2H));
    GR_TRY(gr_dev_stream_sync(d, s));
    c->iterations += iters;
    if (iters == lr->cap && lr->max_trip > lr->cap) {
        unsigned char cond = 0;
        GR_TRY(gr_dev_memcpy(d, s, &cond, sub_out_addr(sub, 0), 1, GR_COPY_D2H));
        GR_TRY(gr_dev_stream_sync(d, s));
        if (cond) return cap_error(iters, lr->cap);
    }
    return GR_OK;
}

static gr_status run_loop(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    loop_run lr;
    memset(&lr, 0, sizeof lr);
    lr.n_carried = n->n_in - 2;
    if (n->in[0] < 0 || n->in[1] < 0 || n->n_out != lr.n_carried)
        return gr_error(GR_ERR_INVALID, "a while-loop needs M and cond inputs and one output per loop-carried value");
    bool go = false;
    GR_TRY(read_i64(c, hc, n->in[0], hc->addr[0], &lr.max_trip));
    GR_TRY(read_flag(c, hc, n->in[1], hc->addr[1], &go));
    lr.cap = loop_cap;
    lr.limit = lr.max_trip < lr.cap ? lr.max_trip : lr.cap;
    lr.first_cap = n->n_in;
    lr.first_out = n->n_in + c->n_caps;
    /* the state: the loop's outputs, starting as the initial values */
    size_t staging = 0;
    void *init[GR_KMAX_PARAMS];
    for (int i = 0; i < lr.n_carried; i++) {
        lr.bytes[i] = value_bytes(c->plan->g, n->out[i]);
        lr.dst[i] = hc->addr[lr.first_out + i];
        init[i] = hc->addr[2 + i];
        staging += (lr.bytes[i] + 15) / 16 * 16;
    }
    GR_TRY(scratch_init(c, staging));
    GR_TRY(copy_state(c, hc->stream, lr.n_carried, init, lr.dst, lr.bytes));
    GR_TRY(gr_dev_stream_sync(hc->dev, hc->stream));
    if (!go || lr.limit <= 0) return GR_OK;
    gr_session_t sub;
    GR_TRY(sub_session(c, 0, "body", &sub));
    const gr_graph *sg = sub->graph;
    if (sg->inputs.len < 3 + lr.n_carried || sg->outputs.len != 3 + lr.n_carried)
        return gr_error(GR_ERR_INVALID, "the body has %d inputs and %d outputs for %d loop-carried values", sg->inputs.len,
                        sg->outputs.len, lr.n_carried);
    GR_TRY(bind_captures(c, sub, 2 + lr.n_carried, sg->inputs.len - 1, hc, lr.first_cap));
    for (int i = 0; i < lr.n_carried; i++)
        GR_TRY(bind_in(c, sub, sg->values.data[sg->inputs.data[2 + i]].name, n->out[i], lr.dst[i]));
    c->runs++;
    if (wants_graph(c, hc)) {
        gr_status st = loop_graph(c, sub, &lr, hc);
        if (st != GR_ERR_UNSUPPORTED || c->capturable) return st;
        gr_error_clear(); /* not capturable after all (why_not says why): the host path */
    }
    const unsigned char yes = 1;
    GR_TRY(gr_session_set_input(sub, sg->values.data[sg->inputs.data[1]].name, GR_BOOL, 0, NULL, &yes, 1));
    return loop_host(c, sub, &lr);
}

static gr_status ctrl_run(void *user, const struct gr_step_host_ctx *hc) {
    gr_rt_ctrl *c = user;
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    return n->op == GR_OP_IF ? run_if(c, hc) : run_loop(c, hc);
}

/* ==== plan hooks ======================================================================= */
gr_status gr_rt_ctrl_bind(gr_session_t s, gr_rt_plan *p) {
    for (int i = 0; i < p->steps.len; i++) {
        gr_step *st = &p->steps.data[i];
        if (st->kind != GR_STEP_HOST || st->host_fn || st->node < 0 || st->node >= p->g->nodes.len) continue;
        const gr_ir_node *n = &p->g->nodes.data[st->node];
        if (n->op != GR_OP_IF && n->op != GR_OP_LOOP) continue;
        gr_rt_ctrl *c = gr_calloc(1, sizeof *c);
        if (!c) return gr_nomem();
        c->parent = s;
        c->plan = p;
        c->step = i;
        c->node = st->node;
        c->capturable = -1;
        int n_in = 0;
        for (int k = 0; k < n->n_in; k++) n_in += n->in[k] >= 0;
        c->n_caps = st->n_args - n_in - n->n_out;
        for (int k = 0; k < c->n_caps; k++) c->caps[k] = st->args[n_in + k].value;
        st->host_fn = ctrl_run;
        st->host_user = c;
    }
    return GR_OK;
}

void gr_rt_ctrl_free(gr_rt_plan *p) {
    for (int i = 0; i < p->steps.len; i++) {
        gr_step *st = &p->steps.data[i];
        if (st->kind != GR_STEP_HOST || st->host_fn != ctrl_run) continue;
        gr_rt_ctrl *c = st->host_user;
        drop_graph(c);
        if (c->scratch) gr_dev_free(c->parent->dev, c->scratch);
        for (int k = 0; k < CTRL_MAX_SUBS; k++) gr_session_destroy(c->sub[k]);
        gr_free(c, sizeof *c);
        st->host_user = NULL;
        st->host_fn = NULL;
    }
}

void gr_rt_ctrl_explain(gr_session_t s, gr_strbuf *sb) {
    /* every if / loop of the model and what became of it in the current plan */
    const gr_graph *g = s->graph;
    const gr_rt_plan *p = s->current;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        if (n->op != GR_OP_IF && n->op != GR_OP_LOOP) continue;
        const gr_step *st = NULL;
        for (int k = 0; p && k < p->steps.len && !st; k++)
            if (p->steps.data[k].kind == GR_STEP_HOST && p->steps.data[k].node >= 0 && !strcmp(p->g->nodes.data[p->steps.data[k].node].name, n->name))
                st = &p->steps.data[k];
        if (st) {
            const gr_rt_ctrl *c = st->host_fn == ctrl_run ? st->host_user : NULL;
            gr_sb_printf(sb, "control flow: %s", st->reason ? st->reason : n->name);
            if (c && c->capturable == 1)
                gr_sb_printf(sb, "; graph mode: one device %s conditional node (%ld captures, %ld launches)",
                             n->op == GR_OP_LOOP ? "WHILE" : "IF_ELSE", c->captures, c->launches);
            else if (c && c->capturable == 0) gr_sb_printf(sb, "; host-driven: %s", c->why_not);
            if (c) gr_sb_printf(sb, " (%ld runs, %ld iterations so far)", c->runs, c->iterations);
            gr_sb_puts(sb, "\n");
        } else if (!p) {
            gr_sb_printf(sb, "control flow: %s '%s': decided per plan (no plan yet)\n", gr_op_get(n->op)->name, n->name);
        } else if (n->op == GR_OP_IF) {
            gr_sb_printf(sb, "control flow: if '%s': predicated (both branches run, where() selects: no host read, no graph "
                             "break; the branches are straight-line and write at most %lld elements)\n",
                         n->name, (long long)GR_PREDICATE_MAX_ELEMS);
        } else {
            gr_sb_printf(sb, "control flow: loop '%s': unrolled for this binding's trip count (the body inlined per "
                             "iteration, at most 256)\n", n->name);
        }
    }
}
