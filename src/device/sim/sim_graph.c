/* device/sim — stream capture, graphs and exec graphs.
 *
 * A captured graph is a tree of bodies: the root body is the serial chain of captured
 * operations; a conditional node owns one body per branch. Nodes are numbered in
 * pre-order (a conditional node, then its then-body, then its else-body), which is the
 * numbering of graph_node_info and exec_kernel_node_set_args.
 *
 * Kernel nodes keep a by-value copy of their gr_karg array, as CUDA does: a replay uses
 * the captured scalars and pointers, whatever the host changed since. */
#include "device/sim/sim-impl.h"
#include <stdio.h>
#include <string.h>

#define GR_SIM_MAX_WHILE_ITERATIONS 10000000L

/* ==== bodies ============================================================================= */

static void node_free(gr_sim_node *n) {
    if (n->args) gr_free(n->args, (size_t)n->n_args * sizeof(gr_karg));
    n->args = NULL;
    gr_sim_body_free(&n->body[0]);
    gr_sim_body_free(&n->body[1]);
}

void gr_sim_body_free(gr_sim_body *b) {
    for (int i = 0; i < b->nodes.len; i++) node_free(&b->nodes.data[i]);
    gr_vec_free(&b->nodes);
}

static gr_status body_copy(gr_sim_body *dst, const gr_sim_body *src);

static gr_status node_copy(gr_sim_node *dst, const gr_sim_node *src) {
    *dst = *src;
    dst->args = NULL;
    memset(dst->body, 0, sizeof(dst->body));
    if (src->args) {
        dst->args = gr_malloc((size_t)src->n_args * sizeof(gr_karg));
        if (!dst->args) return GR_ERR_NOMEM;
        memcpy(dst->args, src->args, (size_t)src->n_args * sizeof(gr_karg));
    }
    for (int b = 0; b < 2; b++) {
        gr_status st = body_copy(&dst->body[b], &src->body[b]);
        if (st != GR_OK) {
            node_free(dst);
            return st;
        }
    }
    return GR_OK;
}

static gr_status body_copy(gr_sim_body *dst, const gr_sim_body *src) {
    memset(dst, 0, sizeof(*dst));
    if (src->nodes.len == 0) return GR_OK;
    GR_TRY(gr_vec_reserve(&dst->nodes, src->nodes.len));
    for (int i = 0; i < src->nodes.len; i++) {
        gr_status st = node_copy(&dst->nodes.data[i], &src->nodes.data[i]);
        if (st != GR_OK) {
            gr_sim_body_free(dst);
            return st;
        }
        dst->nodes.len = i + 1;
    }
    return GR_OK;
}

static int body_count(const gr_sim_body *b) {
    int n = 0;
    for (int i = 0; i < b->nodes.len; i++)
        n += 1 + body_count(&b->nodes.data[i].body[0]) + body_count(&b->nodes.data[i].body[1]);
    return n;
}

/* pre-order lookup: *index counts down */
static gr_sim_node *body_find(gr_sim_body *b, int *index) {
    for (int i = 0; i < b->nodes.len; i++) {
        gr_sim_node *n = &b->nodes.data[i];
        if (*index == 0) return n;
        (*index)--;
        for (int br = 0; br < 2; br++) {
            gr_sim_node *hit = body_find(&n->body[br], index);
            if (hit) return hit;
        }
    }
    return NULL;
}

/* ==== capture ============================================================================= */

gr_status gr_sim_capture_begin(void *ctx, gr_stream *s) {
    if (!s) return gr_error(GR_ERR_INVALID, "sim: capture_begin: NULL stream");
    if (s->capturing) return gr_error(GR_ERR_INVALID, "sim: capture_begin: the stream is already capturing");
    gr_dgraph *g = gr_calloc(1, sizeof(*g));
    if (!g) return GR_ERR_NOMEM;
    s->graph = g;
    s->capturing = true;
    s->invalid = false;
    s->invalid_msg[0] = 0;
    s->depth = 1;
    s->target[0] = &g->root;
    return GR_OK;
}

gr_status gr_sim_capture_end(void *ctx, gr_stream *s, gr_dgraph **out) {
    *out = NULL;
    if (!s) return gr_error(GR_ERR_INVALID, "sim: capture_end: NULL stream");
    if (!s->capturing) return gr_error(GR_ERR_INVALID, "sim: capture_end: the stream is not capturing");
    gr_dgraph *g = s->graph;
    int depth = s->depth;
    s->graph = NULL;
    s->capturing = false;
    s->depth = 0;
    if (s->invalid) {
        gr_sim_graph_destroy(ctx, g);
        s->invalid = false;
        return gr_error(GR_ERR_HAZARD, "sim: stream capture was invalidated: %s", s->invalid_msg);
    }
    if (depth != 1) {
        gr_sim_graph_destroy(ctx, g);
        return gr_error(GR_ERR_INVALID, "sim: capture ended inside a conditional body (cond_body_end missing)");
    }
    *out = g;
    return GR_OK;
}

static gr_status append(gr_sim_ctx *c, gr_stream *s, const gr_sim_node *n) {
    gr_sim_body *b = s->target[s->depth - 1];
    GR_TRY(gr_vec_push(&b->nodes, *n));
    c->host_us += gr_sim_cost.capture_per_node_us;
    return GR_OK;
}

gr_status gr_sim_capture_kernel(gr_sim_ctx *c, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args) {
    gr_sim_node n;
    memset(&n, 0, sizeof(n));
    n.kind = GR_GNODE_KERNEL;
    n.func = f;
    n.n_args = n_args;
    n.cond = -1;
    n.args = gr_malloc((size_t)(n_args > 0 ? n_args : 1) * sizeof(gr_karg));
    if (!n.args) return GR_ERR_NOMEM;
    if (n_args > 0) memcpy(n.args, args, (size_t)n_args * sizeof(gr_karg)); /* by value, like CUDA */
    gr_status st = append(c, s, &n);
    if (st != GR_OK) gr_free(n.args, (size_t)(n_args > 0 ? n_args : 1) * sizeof(gr_karg));
    return st;
}

gr_status gr_sim_capture_libcall(gr_sim_ctx *c, gr_stream *s, const gr_libcall *call, const gr_karg *args) {
    gr_sim_node n;
    memset(&n, 0, sizeof(n));
    n.kind = GR_GNODE_LIBCALL;
    n.call = *call;
    n.cond = -1;
    memcpy(n.largs, args, sizeof(gr_karg) * (size_t)gr_libcall_nargs(call));
    return append(c, s, &n);
}

gr_status gr_sim_capture_copy(gr_sim_ctx *c, gr_stream *s, void *dst, const void *src, size_t bytes,
                              gr_copy_kind kind, int memset_value, bool is_memset) {
    gr_sim_node n;
    memset(&n, 0, sizeof(n));
    n.kind = is_memset ? GR_GNODE_MEMSET : GR_GNODE_COPY;
    n.dst = dst;
    n.src = src;
    n.bytes = bytes;
    n.copy_kind = kind;
    n.value = memset_value;
    n.cond = -1;
    return append(c, s, &n);
}

/* ==== updatable nodes and conditionals ===================================================== */

gr_status gr_sim_mark_updatable(void *ctx, gr_stream *s, uint64_t *out_handle) {
    gr_sim_ctx *c = ctx;
    *out_handle = 0;
    if (!s || !s->capturing) return gr_error(GR_ERR_INVALID, "sim: capture_mark_updatable outside a capture");
    gr_sim_body *b = s->target[s->depth - 1];
    if (b->nodes.len == 0 || b->nodes.data[b->nodes.len - 1].kind != GR_GNODE_KERNEL)
        return gr_error(GR_ERR_INVALID, "sim: capture_mark_updatable: the last captured node is not a kernel");
    gr_sim_node *n = &b->nodes.data[b->nodes.len - 1];
    if (!n->dev_args) {
        void *block;
        GR_TRY(gr_sim_alloc_internal(c, (size_t)(n->n_args > 0 ? n->n_args : 1) * sizeof(gr_karg), &block));
        if (n->n_args > 0) memcpy(block, n->args, (size_t)n->n_args * sizeof(gr_karg));
        n->dev_args = block;
    }
    *out_handle = (uint64_t)(uintptr_t)n->dev_args;
    return GR_OK;
}

static int cond_index(gr_sim_ctx *c, uint64_t handle) {
    for (int i = 0; i < c->conds.len; i++)
        if ((uint64_t)(uintptr_t)c->conds.data[i].flag == handle) return i;
    return -1;
}

gr_status gr_sim_cond_create(void *ctx, gr_stream *s, gr_cond_kind kind, unsigned default_value, uint64_t *out) {
    gr_sim_ctx *c = ctx;
    *out = 0;
    if (!s || !s->capturing) return gr_error(GR_ERR_INVALID, "sim: cond_create outside a capture");
    if ((int)kind < 0 || kind > GR_COND_WHILE) return gr_error(GR_ERR_INVALID, "sim: cond_create: bad kind %d", (int)kind);
    if (s->invalid)
        return gr_error(GR_ERR_HAZARD, "sim: cond_create on a stream whose capture was invalidated (%s)", s->invalid_msg);
    GR_TRY(gr_vec_reserve(&c->conds, c->conds.len + 1));
    void *flag;
    GR_TRY(gr_sim_alloc_internal(c, sizeof(unsigned), &flag));
    *(unsigned *)flag = default_value;
    gr_sim_cond cd = {.flag = flag, .default_value = default_value, .kind = kind};
    c->conds.data[c->conds.len++] = cd;
    *out = (uint64_t)(uintptr_t)flag;
    return GR_OK;
}

gr_status gr_sim_cond_body_begin(void *ctx, gr_stream *s, uint64_t handle, int branch) {
    gr_sim_ctx *c = ctx;
    if (!s || !s->capturing) return gr_error(GR_ERR_INVALID, "sim: cond_body_begin outside a capture");
    int ci = cond_index(c, handle);
    if (ci < 0) return gr_error(GR_ERR_INVALID, "sim: cond_body_begin: unknown condition handle 0x%llx", (unsigned long long)handle);
    int max_branch = c->conds.data[ci].kind == GR_COND_IF_ELSE ? 1 : 0;
    if (branch < 0 || branch > max_branch)
        return gr_error(GR_ERR_INVALID, "sim: cond_body_begin: branch %d does not exist for this conditional", branch);
    if (s->depth >= GR_SIM_MAX_NEST) return gr_error(GR_ERR_UNSUPPORTED, "sim: conditionals nested deeper than %d", GR_SIM_MAX_NEST - 1);
    gr_sim_body *b = s->target[s->depth - 1];
    gr_sim_node *last = b->nodes.len ? &b->nodes.data[b->nodes.len - 1] : NULL;
    bool have = last && last->kind == GR_GNODE_CONDITIONAL && last->cond == ci;
    if (branch == 0 && !(have && last->body[0].nodes.len == 0 && last->body[1].nodes.len == 0)) {
        /* the conditional node is placed here, when its first body begins */
        gr_sim_node n;
        memset(&n, 0, sizeof(n));
        n.kind = GR_GNODE_CONDITIONAL;
        n.cond = ci;
        GR_TRY(append(c, s, &n));
        last = &b->nodes.data[b->nodes.len - 1];
    } else if (!have) {
        return gr_error(GR_ERR_INVALID, "sim: cond_body_begin: branch %d must directly follow branch 0 of the same conditional", branch);
    }
    s->target[s->depth++] = &last->body[branch];
    return GR_OK;
}

gr_status gr_sim_cond_body_end(void *ctx, gr_stream *s, uint64_t handle, int branch) {
    gr_sim_ctx *c = ctx;
    if (!s || !s->capturing || s->depth <= 1) return gr_error(GR_ERR_INVALID, "sim: cond_body_end without cond_body_begin");
    int ci = cond_index(c, handle);
    gr_sim_body *parent = s->target[s->depth - 2];
    bool ok = false;
    for (int i = 0; ci >= 0 && i < parent->nodes.len; i++)
        if (parent->nodes.data[i].cond == ci && parent->nodes.data[i].kind == GR_GNODE_CONDITIONAL &&
            branch >= 0 && branch < 2 && &parent->nodes.data[i].body[branch] == s->target[s->depth - 1])
            ok = true;
    if (!ok) return gr_error(GR_ERR_INVALID, "sim: cond_body_end does not match the open body (handle or branch)");
    s->depth--;
    return GR_OK;
}

/* ==== graphs and exec graphs =================================================================== */

void gr_sim_graph_destroy(void *ctx, gr_dgraph *g) {
    if (!g) return;
    gr_sim_body_free(&g->root);
    gr_free(g, sizeof(*g));
}

int gr_sim_graph_num_nodes(void *ctx, gr_dgraph *g) { return g ? body_count(&g->root) : 0; }

gr_status gr_sim_graph_node_info(void *ctx, gr_dgraph *g, int node, gr_gnode_info *out) {
    memset(out, 0, sizeof(*out));
    int idx = node;
    gr_sim_node *n = (g && node >= 0) ? body_find(&g->root, &idx) : NULL;
    if (!n) return gr_error(GR_ERR_INVALID, "sim: graph has no node %d", node);
    out->kind = n->kind;
    out->func = n->kind == GR_GNODE_KERNEL ? n->func : NULL;
    out->n_args = n->kind == GR_GNODE_KERNEL ? n->n_args : n->kind == GR_GNODE_LIBCALL ? gr_libcall_nargs(&n->call) : 0;
    return GR_OK;
}

/* Bytes of an exec's node records and argument blocks, nested bodies included. */
static size_t body_bytes(const gr_sim_body *b) {
    size_t n = 0;
    for (int i = 0; i < b->nodes.len; i++) {
        const gr_sim_node *node = &b->nodes.data[i];
        n += sizeof *node + (size_t)node->n_args * sizeof(gr_karg);
        if (node->kind == GR_GNODE_CONDITIONAL) n += body_bytes(&node->body[0]) + body_bytes(&node->body[1]);
    }
    return n;
}

gr_status gr_sim_graph_instantiate(void *ctx, gr_dgraph *g, gr_dexec **out) {
    gr_sim_ctx *c = ctx;
    *out = NULL;
    if (!g) return gr_error(GR_ERR_INVALID, "sim: instantiate of a NULL graph");
    gr_dexec *e = gr_calloc(1, sizeof(*e));
    if (!e) return GR_ERR_NOMEM;
    gr_status st = body_copy(&e->root, &g->root);
    if (st != GR_OK) {
        gr_free(e, sizeof(*e));
        return st;
    }
    c->host_us += gr_sim_cost.instantiate_per_node_us * body_count(&g->root);
    e->bytes = body_bytes(&e->root);
    c->graph_bytes += e->bytes;
    *out = e;
    return GR_OK;
}

void gr_sim_exec_destroy(void *ctx, gr_dexec *e) {
    if (!e) return;
    gr_sim_ctx *c = ctx;
    c->graph_bytes -= e->bytes;
    gr_sim_body_free(&e->root);
    gr_free(e, sizeof(*e));
}

gr_status gr_sim_graph_upload(void *ctx, gr_dexec *e, gr_stream *s) {
    gr_sim_ctx *c = ctx;
    if (!e || !s) return gr_error(GR_ERR_INVALID, "sim: graph_upload: NULL exec or stream");
    if (!e->uploaded) c->host_us += gr_sim_cost.upload_base_us + gr_sim_cost.upload_per_node_us * body_count(&e->root);
    e->uploaded = true;
    return GR_OK;
}

static void reset_conditions(gr_sim_ctx *c, const gr_sim_body *b) {
    for (int i = 0; i < b->nodes.len; i++) {
        const gr_sim_node *n = &b->nodes.data[i];
        if (n->kind == GR_GNODE_CONDITIONAL && n->cond >= 0 && n->cond < c->conds.len)
            *c->conds.data[n->cond].flag = c->conds.data[n->cond].default_value;
        reset_conditions(c, &n->body[0]);
        reset_conditions(c, &n->body[1]);
    }
}

/* Runs a body in order; *index is the pre-order number of its first node; *t accumulates
 * device time from `start`, when the graph begins on its stream. */
static gr_status replay_body(gr_sim_ctx *c, const gr_sim_body *b, int index, double start, double *t) {
    char what[128];
    for (int i = 0; i < b->nodes.len; i++) {
        const gr_sim_node *n = &b->nodes.data[i];
        switch (n->kind) {
        case GR_GNODE_KERNEL: {
            snprintf(what, sizeof(what), "graph node %d (kernel %s)", index, n->func->k->name);
            const gr_karg *args = n->dev_args ? n->dev_args : n->args;
            GR_TRY(gr_sim_run_kernel(c, n->func, args, n->n_args, what));
            *t += gr_sim_cost.graph_node_us + gr_sim_kernel_time(n->func);
            break;
        }
        case GR_GNODE_LIBCALL:
            snprintf(what, sizeof(what), "graph node %d (libcall %s)", index, n->call.name);
            if (gr_lib_is_collective(n->call.kind)) { /* waits for the other ranks' graphs (sim-comm.c) */
                c->coll_arrive_us = start + *t + gr_sim_cost.graph_node_us;
                GR_TRY(gr_sim_run_libcall(c, &n->call, n->largs, what));
                *t = c->coll_done_us - start;
                break;
            }
            GR_TRY(gr_sim_run_libcall(c, &n->call, n->largs, what));
            *t += gr_sim_cost.graph_node_us + gr_sim_libcall_time(&n->call);
            break;
        case GR_GNODE_COPY:
            snprintf(what, sizeof(what), "graph node %d (copy of %zu bytes)", index, n->bytes);
            GR_TRY(gr_sim_run_copy(c, n->dst, n->src, n->bytes, n->copy_kind, false, what));
            *t += GR_MAX(gr_sim_cost.graph_node_us, gr_sim_copy_time(n->bytes, n->copy_kind) - gr_sim_cost.graph_latency_us);
            break;
        case GR_GNODE_MEMSET:
            snprintf(what, sizeof(what), "graph node %d (memset of %zu bytes)", index, n->bytes);
            GR_TRY(gr_sim_run_memset(c, n->dst, n->value, n->bytes, what));
            *t += gr_sim_cost.graph_node_us + (double)n->bytes / gr_sim_cost.mem_bytes_per_us;
            break;
        case GR_GNODE_CONDITIONAL: {
            if (n->cond < 0 || n->cond >= c->conds.len)
                return gr_error(GR_ERR_INTERNAL, "graph node %d: bad condition", index);
            const gr_sim_cond *cd = &c->conds.data[n->cond];
            int then_index = index + 1, else_index = then_index + body_count(&n->body[0]);
            *t += gr_sim_cost.cond_node_us;
            if (cd->kind == GR_COND_WHILE) {
                long iters = 0;
                while (*cd->flag != 0) {
                    if (++iters > GR_SIM_MAX_WHILE_ITERATIONS)
                        return gr_error(GR_ERR_DEVICE, "graph node %d: WHILE conditional did not terminate after %ld iterations",
                                        index, GR_SIM_MAX_WHILE_ITERATIONS);
                    GR_TRY(replay_body(c, &n->body[0], then_index, start, t));
                    *t += gr_sim_cost.cond_node_us;
                }
            } else if (*cd->flag != 0) {
                GR_TRY(replay_body(c, &n->body[0], then_index, start, t));
            } else if (cd->kind == GR_COND_IF_ELSE) {
                GR_TRY(replay_body(c, &n->body[1], else_index, start, t));
            }
            index = else_index + body_count(&n->body[1]) - 1;
            break;
        }
        }
        index++;
    }
    return GR_OK;
}

gr_status gr_sim_graph_launch(void *ctx, gr_dexec *e, gr_stream *s) {
    gr_sim_ctx *c = ctx;
    if (!e || !s) return gr_error(GR_ERR_INVALID, "sim: graph_launch: NULL exec or stream");
    if (s->capturing) return gr_error(GR_ERR_UNSUPPORTED, "sim: graph_launch into a capturing stream (child graphs) is not supported");
    double submit = c->host_us;
    c->host_us += gr_sim_cost.graph_submit_us;
    reset_conditions(c, &e->root);
    double t = 0;
    double start = GR_MAX(submit + gr_sim_cost.graph_latency_us, s->free_us);
    gr_status st = replay_body(c, &e->root, 0, start, &t);
    s->free_us = start + t;
    return st;
}

gr_status gr_sim_exec_set_args(void *ctx, gr_dexec *e, int node, const gr_karg *args, int n_args) {
    gr_sim_ctx *c = ctx;
    int idx = node;
    gr_sim_node *n = (e && node >= 0) ? body_find(&e->root, &idx) : NULL;
    if (!n) return gr_error(GR_ERR_INVALID, "sim: exec_kernel_node_set_args: no node %d", node);
    if (n->kind != GR_GNODE_KERNEL) return gr_error(GR_ERR_INVALID, "sim: exec_kernel_node_set_args: node %d is not a kernel node", node);
    if (n_args != n->n_args)
        return gr_error(GR_ERR_INVALID, "sim: exec_kernel_node_set_args: node %d (kernel %s) has %d args, got %d", node,
                        n->func->k->name, n->n_args, n_args);
    if (n_args > 0) {
        memcpy(n->args, args, (size_t)n_args * sizeof(gr_karg));
        if (n->dev_args) memcpy(n->dev_args, args, (size_t)n_args * sizeof(gr_karg));
    }
    c->host_us += gr_sim_cost.set_args_us;
    return GR_OK;
}

static bool same_topology(const gr_sim_body *a, const gr_sim_body *b, int *where, int index) {
    if (a->nodes.len != b->nodes.len) {
        *where = index;
        return false;
    }
    for (int i = 0; i < a->nodes.len; i++) {
        const gr_sim_node *x = &a->nodes.data[i], *y = &b->nodes.data[i];
        if (x->kind != y->kind || (x->kind == GR_GNODE_KERNEL && x->n_args != y->n_args) ||
            (x->kind == GR_GNODE_MEMSET && x->bytes != y->bytes)) {
            *where = index;
            return false;
        }
        if (!same_topology(&x->body[0], &y->body[0], where, index + 1)) return false;
        if (!same_topology(&x->body[1], &y->body[1], where, index + 1 + body_count(&x->body[0]))) return false;
        index += 1 + body_count(&x->body[0]) + body_count(&x->body[1]);
    }
    return true;
}

static void update_params(gr_sim_body *dst, const gr_sim_body *src) {
    for (int i = 0; i < dst->nodes.len; i++) {
        gr_sim_node *x = &dst->nodes.data[i];
        const gr_sim_node *y = &src->nodes.data[i];
        switch (x->kind) {
        case GR_GNODE_KERNEL:
            x->func = y->func;
            memcpy(x->args, y->args, (size_t)x->n_args * sizeof(gr_karg));
            if (x->dev_args) memcpy(x->dev_args, y->args, (size_t)x->n_args * sizeof(gr_karg));
            break;
        case GR_GNODE_LIBCALL:
            x->call = y->call;
            memcpy(x->largs, y->largs, sizeof(x->largs));
            break;
        case GR_GNODE_COPY:
        case GR_GNODE_MEMSET:
            x->dst = y->dst;
            x->src = y->src;
            x->bytes = y->bytes;
            x->copy_kind = y->copy_kind;
            x->value = y->value;
            break;
        case GR_GNODE_CONDITIONAL: x->cond = y->cond; break;
        }
        update_params(&x->body[0], &y->body[0]);
        update_params(&x->body[1], &y->body[1]);
    }
}

gr_status gr_sim_exec_update(void *ctx, gr_dexec *e, gr_dgraph *g) {
    gr_sim_ctx *c = ctx;
    if (!e || !g) return gr_error(GR_ERR_INVALID, "sim: exec_update: NULL exec or graph");
    int where = -1;
    if (!same_topology(&e->root, &g->root, &where, 0))
        return gr_error(GR_ERR_INVALID, "sim: exec_update: graph topology differs from the exec graph (at node %d)", where);
    update_params(&e->root, &g->root);
    c->host_us += gr_sim_cost.exec_update_per_node_us * body_count(&g->root);
    return GR_OK;
}
