/* runtime/control — the control runner: `if` nodes predication did not take and while-loops
 * (passes/cond.c lowers each to one control step: args = inputs, captures, outputs).
 *
 * Each subgraph (a loop body, an if branch) is a session of its own over the subgraph made
 * standalone (its captures become inputs), created on first use with the parent's device
 * and mode, as the probe's session is (runtime/probe.c): it plans, fuses, captures graphs and
 * reports errors like any session, and a loop or if nested in it is run by its own runner.
 * Its inputs are bound to the parent's device buffers (read in place, no copy) and its
 * outputs are copied into the step's outputs.
 *
 * if:   the condition is read on the host (the step already drained the stream), one
 *       branch runs, its outputs are copied out.
 * loop: the loop-carried state lives in the loop's output buffers: the initial values are
 *       copied in, each iteration's body reads them in place and its outputs are copied
 *       back after it ran; the body's condition is read on the host after each iteration
 *       (one synchronisation per iteration; in graph mode each iteration is one replay of
 *       the body's graph). The loop stops when the condition is false, at M iterations, or
 *       with an error at GR_LOOP_MAX_ITERS (a loop without M that never stops: no hang).
 *
 * The control step is a host step, so it is a partition break: the segments before and
 * after it are captured as graphs of their own (docs/design.md, "Control flow"). */
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
    long runs, iterations;  /* explain */
} gr_rt_ctrl;

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
    if (st == GR_OK) {
        /* every dim is concrete in the parent's plan: symbols left in the clone bind nothing */
        g->syms.len = 0;
        st = gr_ir_infer_shapes(g);
    }
    if (st != GR_OK) {
        gr_ir_graph_destroy(g);
        return st;
    }
    *out = g;
    return GR_OK;
}

static gr_status sub_session(gr_rt_ctrl *c, int which, const char *attr, gr_session_t *out) {
    if (c->sub[which]) return *out = c->sub[which], GR_OK;
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    const gr_ir_attr *a = gr_ir_attr_find(n, attr);
    if (!a || a->kind != GR_IR_ATTR_GRAPH || !a->graph) return gr_error(GR_ERR_INVALID, "needs the subgraph '%s'", attr);
    gr_graph *g = NULL;
    GR_TRY(standalone(c->plan->g, a->graph, c->caps, c->n_caps, &g));
    gr_session_options o = c->parent->opt;
    if (o.mode == GR_MODE_AUTO) o.mode = GR_MODE_EAGER; /* nothing timed per iteration */
    o.arena_policy = GR_ARENA_PER_SHAPE;
    o.graph_memory_mb = 0;
    o.precision = GR_PRECISION_MODEL; /* converted with the parent, if at all */
    gr_status st = gr_rt_session_create_on(c->parent, g, &o, &c->sub[which]);
    gr_ir_graph_destroy(g);
    if (st != GR_OK) return gr_error_prefix(st, "%s", attr);
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

/* Binds the captures: sub's inputs past its first n_own. */
static gr_status bind_captures(gr_rt_ctrl *c, gr_session_t sub, int n_own, const struct gr_step_host_ctx *hc, int first_arg) {
    const gr_graph *sg = sub->graph;
    for (int i = n_own; i < sg->inputs.len; i++) {
        const char *name = sg->values.data[sg->inputs.data[i]].name;
        int k = 0;
        while (k < c->n_caps && strcmp(c->plan->g->values.data[c->caps[k]].name, name)) k++;
        if (k == c->n_caps) return gr_error(GR_ERR_INTERNAL, "capture '%s' is not bound by the step", name);
        GR_TRY(bind_in(c, sub, name, c->caps[k], hc->addr[first_arg + k]));
    }
    return GR_OK;
}

/* Output o of sub copied into dst (the parent's value v). */
static gr_status copy_out(gr_rt_ctrl *c, gr_session_t sub, int o, int v, void *dst, const struct gr_step_host_ctx *hc) {
    size_t n = value_bytes(c->plan->g, v);
    gr_output h;
    GR_TRY(gr_session_output(sub, o, &h));
    if (gr_session_output_nbytes(sub, h) != n)
        return gr_error(GR_ERR_SHAPE, "output %d of the subgraph has %zu bytes, the node's '%s' %zu", o, gr_session_output_nbytes(sub, h),
                        c->plan->g->values.data[v].name, n);
    if (!n) return GR_OK;
    void *src = NULL;
    GR_TRY(gr_session_output_device_ptr(sub, h, &src));
    if (src == dst) return GR_OK;
    return gr_dev_memcpy(hc->dev, hc->stream, dst, src, n, GR_COPY_D2D);
}

/* ==== if ============================================================================= */
static gr_status run_if(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    bool take = false;
    GR_TRY(read_flag(c, hc, n->in[0], hc->addr[0], &take));
    gr_session_t sub;
    GR_TRY(sub_session(c, take ? 0 : 1, take ? "then_branch" : "else_branch", &sub));
    GR_TRY(bind_captures(c, sub, 0, hc, 1));
    GR_TRY(gr_session_run(sub));
    GR_TRY(gr_session_wait(sub));
    int first_out = 1 + c->n_caps;
    for (int o = 0; o < n->n_out; o++) GR_TRY(copy_out(c, sub, o, n->out[o], hc->addr[first_out + o], hc));
    return gr_dev_stream_sync(hc->dev, hc->stream);
}

/* ==== loop =========================================================================== */
static gr_status run_loop(gr_rt_ctrl *c, const struct gr_step_host_ctx *hc) {
    const gr_ir_node *n = &c->plan->g->nodes.data[c->node];
    int n_carried = n->n_in - 2;
    if (n->in[0] < 0 || n->in[1] < 0 || n->n_out != n_carried)
        return gr_error(GR_ERR_INVALID, "a while-loop needs M and cond inputs and one output per loop-carried value");
    int64_t max_trip = 0;
    bool go = false;
    GR_TRY(read_i64(c, hc, n->in[0], hc->addr[0], &max_trip));
    GR_TRY(read_flag(c, hc, n->in[1], hc->addr[1], &go));
    int first_cap = n->n_in, first_out = n->n_in + c->n_caps;
    /* the state: the loop's outputs, starting as the initial values */
    for (int i = 0; i < n_carried; i++) {
        size_t bytes = value_bytes(c->plan->g, n->out[i]);
        if (bytes && hc->addr[first_out + i] != hc->addr[2 + i])
            GR_TRY(gr_dev_memcpy(hc->dev, hc->stream, hc->addr[first_out + i], hc->addr[2 + i], bytes, GR_COPY_D2D));
    }
    GR_TRY(gr_dev_stream_sync(hc->dev, hc->stream));
    if (!go || max_trip <= 0) return GR_OK;
    gr_session_t sub;
    GR_TRY(sub_session(c, 0, "body", &sub));
    const gr_graph *sg = sub->graph;
    if (sg->inputs.len < 2 + n_carried || sg->outputs.len != 1 + n_carried)
        return gr_error(GR_ERR_INVALID, "the body has %d inputs and %d outputs for %d loop-carried values", sg->inputs.len, sg->outputs.len,
                        n_carried);
    GR_TRY(bind_captures(c, sub, 2 + n_carried, hc, first_cap));
    for (int i = 0; i < n_carried; i++)
        GR_TRY(bind_in(c, sub, sg->values.data[sg->inputs.data[2 + i]].name, n->out[i], hc->addr[first_out + i]));
    const char *iter_name = sg->values.data[sg->inputs.data[0]].name, *cond_name = sg->values.data[sg->inputs.data[1]].name;
    const unsigned char yes = 1;
    GR_TRY(gr_session_set_input(sub, cond_name, GR_BOOL, 0, NULL, &yes, 1));
    c->runs++;
    for (int64_t t = 0; go && t < max_trip; t++) {
        if (t >= GR_LOOP_MAX_ITERS)
            return gr_error(GR_ERR_UNSUPPORTED, "the loop ran %lld iterations and its condition is still true: graft stops a "
                                                "while-loop at %lld iterations (a loop without M that never ends would hang)",
                            (long long)t, (long long)GR_LOOP_MAX_ITERS);
        GR_TRY(gr_session_set_input(sub, iter_name, GR_I64, 0, NULL, &t, sizeof t));
        gr_status st = gr_session_run(sub);
        if (st == GR_OK) st = gr_session_wait(sub);
        if (st != GR_OK) return gr_error_prefix(st, "iteration %lld", (long long)t);
        gr_output co;
        unsigned char cb[16] = {0};
        gr_value_info ci;
        GR_TRY(gr_session_output(sub, 0, &co));
        GR_TRY(gr_session_output_info(sub, co, &ci));
        size_t cn = gr_session_output_nbytes(sub, co);
        if (cn != gr_dtype_size(ci.dtype) || cn > sizeof cb)
            return gr_error(GR_ERR_SHAPE, "iteration %lld: the body's condition output must hold one element", (long long)t);
        GR_TRY(gr_session_output_read(sub, co, cb, cn));
        go = gr_load_f64(cb, ci.dtype, 0) != 0;
        /* the body has finished reading the state: the new values replace it */
        for (int i = 0; i < n_carried; i++) GR_TRY(copy_out(c, sub, 1 + i, n->out[i], hc->addr[first_out + i], hc));
        GR_TRY(gr_dev_stream_sync(hc->dev, hc->stream));
        c->iterations++;
    }
    return GR_OK;
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
