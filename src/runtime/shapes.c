/* runtime/shapes — shape policies of graph mode beyond one graph per binding (issue 11).
 *
 * update: one instantiated exec per segment position serves every binding. A new binding's
 * segment is captured as usual (a host-side graph, cheap) and applied to the session's exec of
 * that position with an exec update (cudaGraphExecUpdate: ~0.45 us per node on the H100
 * against ~6 us per node for an instantiation, design §Deployment), so graph memory does not
 * grow with the number of bindings. Each binding keeps its captured graph; a replay of a
 * binding other than the one applied last updates the exec from its graph first. Where the
 * driver refuses the update (a different topology: a library call that picked another
 * algorithm with more nodes, a dim of 1 that turned a copy into a view), the binding gets its
 * own exec (an instantiation, as policy exact), and explain says why.
 *
 * A segment whose kernel nodes are patched before replays (host scalars, a caller's device
 * buffer read in place) keeps its own exec too: a node patch on CUDA takes the launch
 * geometry of the graph the exec was instantiated from, which is another binding's after an
 * update. */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

typedef struct {
    gr_dexec *exec;          /* the position's exec, owned here */
    const gr_dgraph *applied; /* the graph whose parameters the exec holds now */
    size_t bytes;            /* its graph memory as measured at instantiation */
    long updates;            /* updates applied (capture or replay) */
    char refused[192];       /* the last refused update's reason ("" if none) */
} shared_exec;

struct gr_rt_shapes {
    shared_exec *slots;
    int n_slots;
};

/* ==== update ======================================================================================= */
static gr_status slot_of(gr_session_t s, int seg, shared_exec **out) {
    if (!s->shapes) {
        s->shapes = gr_calloc(1, sizeof *s->shapes);
        if (!s->shapes) return GR_ERR_NOMEM;
    }
    struct gr_rt_shapes *sh = s->shapes;
    if (seg >= sh->n_slots) {
        int n = seg + 1 > 2 * sh->n_slots ? seg + 1 : 2 * sh->n_slots;
        shared_exec *grown = gr_calloc((size_t)n, sizeof *grown);
        if (!grown) return GR_ERR_NOMEM;
        if (sh->n_slots) memcpy(grown, sh->slots, sizeof *grown * (size_t)sh->n_slots);
        gr_free(sh->slots, sizeof *sh->slots * (size_t)sh->n_slots);
        sh->slots = grown;
        sh->n_slots = n;
    }
    *out = &sh->slots[seg];
    return GR_OK;
}

static gr_status own_exec(gr_session_t s, gr_rt_segment *st) {
    GR_TRY(gr_dev_graph_instantiate(s->dev, st->graph, &st->exec));
    s->graphs_live++; /* counted from here: release uncounts it */
    s->instantiations++;
    return GR_OK;
}

gr_status gr_rt_update_instantiate(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    if (st->n_scalar_nodes || !gr_dev_caps_get(s->dev).exec_update) return own_exec(s, st);
    shared_exec *u;
    GR_TRY(slot_of(s, seg, &u));
    if (!u->exec) {
        GR_TRY(gr_dev_graph_instantiate(s->dev, st->graph, &u->exec));
        s->graphs_live++;
        s->instantiations++;
        u->applied = st->graph;
        st->exec = u->exec;
        st->exec_shared = true;
        return GR_OK;
    }
    gr_status rc = gr_dev_exec_update(s->dev, u->exec, st->graph);
    if (rc == GR_ERR_NOMEM) return rc;
    if (rc != GR_OK) {
        /* the exec keeps the parameters it had: nothing was applied */
        snprintf(u->refused, sizeof u->refused, "%s", gr_last_error());
        gr_error_clear();
        s->exec_updates_refused++;
        if (s->opt.verbose) fprintf(stderr, "graft: segment %d: exec update refused, instantiating: %s\n", seg, u->refused);
        return own_exec(s, st);
    }
    u->applied = st->graph;
    u->updates++;
    s->exec_updates++;
    st->exec = u->exec;
    st->exec_shared = true;
    return GR_OK;
}

gr_status gr_rt_update_apply(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    if (!st->exec_shared) return GR_OK;
    shared_exec *u = &s->shapes->slots[seg];
    if (u->applied == st->graph) return GR_OK;
    /* the same topology was accepted at this binding's capture: a refusal now is an error */
    GR_TRY(gr_dev_exec_update(s->dev, u->exec, st->graph));
    u->applied = st->graph;
    u->updates++;
    s->exec_updates++;
    return GR_OK;
}

void gr_rt_update_add_bytes(gr_session_t s, int seg, size_t bytes) {
    if (s->shapes && seg < s->shapes->n_slots) s->shapes->slots[seg].bytes += bytes;
}

void gr_rt_update_forget(gr_session_t s, const gr_rt_segment *st) {
    if (!s->shapes || !st->graph) return;
    for (int k = 0; k < s->shapes->n_slots; k++)
        if (s->shapes->slots[k].applied == st->graph) s->shapes->slots[k].applied = NULL;
}

/* explain: what the update policy did at segment position seg ("" when nothing) */
void gr_rt_update_explain(gr_session_t s, const gr_rt_segment *st, int seg, gr_strbuf *sb) {
    if (s->opt.shape_policy != GR_SHAPES_UPDATE) return;
    if (st->exec && st->n_scalar_nodes) {
        gr_sb_puts(sb, "  shape policy update: own exec (its kernel nodes are patched before replays: host scalars or "
                       "in-place inputs)\n");
        return;
    }
    if (!s->shapes || seg >= s->shapes->n_slots) return;
    const shared_exec *u = &s->shapes->slots[seg];
    if (st->exec_shared)
        gr_sb_printf(sb, "  shape policy update: the position's one exec (%zu bytes), %ld exec updates so far%s\n", u->bytes,
                     u->updates, u->applied == st->graph ? ", this binding's parameters applied" : "");
    else if (st->exec && u->refused[0]) gr_sb_printf(sb, "  shape policy update: own exec, the update was refused: %s\n", u->refused);
}

void gr_rt_shapes_free(gr_session_t s) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh) return;
    for (int k = 0; k < sh->n_slots; k++) {
        if (!sh->slots[k].exec) continue;
        gr_dev_exec_destroy(s->dev, sh->slots[k].exec);
        s->graph_bytes -= GR_MIN(sh->slots[k].bytes, s->graph_bytes);
        s->graphs_live--;
    }
    gr_free(sh->slots, sizeof *sh->slots * (size_t)sh->n_slots);
    gr_free(sh, sizeof *sh);
    s->shapes = NULL;
}
