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
 * buffer read in place) is not patched in a shared exec: a node patch on CUDA takes the launch
 * geometry of the graph the exec was instantiated from, another binding's after an update.
 * When such an argument changed, the binding's segment is recorded again (host work only)
 * and the exec updated from it (graphs.c, refresh_shared). */
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
    if (!gr_dev_caps_get(s->dev).exec_update) return own_exec(s, st);
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
    if (!st->graph) return gr_error(GR_ERR_INTERNAL, "segment %d: no graph to apply (an earlier re-capture failed)", seg);
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

/* ==== ahead-of-time capture (gr_session_capture_range) ================================================ */
static bool settled(gr_session_t s, const gr_rt_plan *p) {
    for (int k = 0; k < p->segs.len; k++) {
        const gr_rt_segment *st = &p->seg_state[k];
        if (!p->segs.data[k].graphable) continue;
        if (st->state == GR_SEG_FALLBACK || st->state == GR_SEG_CHOSE_EAGER) continue;
        if (st->state == GR_SEG_CAPTURED && (s->opt.mode != GR_MODE_AUTO || st->decided)) continue;
        return false;
    }
    return true;
}

/* Warms up and captures every graphable segment of p (on zeroed placeholders). */
static gr_status prepare_binding(gr_session_t s, gr_rt_plan *p) {
    gr_device *d = s->dev;
    for (int i = 0; i < p->g->inputs.len; i++) {
        if (p->input_host_read[i] && !s->inputs[i].data)
            return gr_error(GR_ERR_INVALID, "capture range: host input '%s' is read on the host: set it before capturing ahead",
                            p->g->values.data[p->g->inputs.data[i]].name);
        if (!p->input_dev[i] || !p->input_bytes[i]) continue;
        /* zeros: valid indices for gathers (token ids), finite for every op */
        GR_TRY(gr_dev_memset(d, s->stream, p->input_dev[i], 0, p->input_bytes[i]));
        p->input_version[i] = 0; /* the next run copies its input */
    }
    /* warm-up, capture (+ replay), and mode auto's timed runs */
    for (int round = 0; round < 3 + 2 * GR_SCG_SAMPLES && !settled(s, p); round++)
        for (int seg = 0; seg < p->segs.len; seg++) {
            gr_status st = p->segs.data[seg].graphable ? gr_rt_segment_run_graph(s, p, seg) : gr_rt_segment_run_eager(s, p, seg);
            if (st != GR_OK) {
                gr_dev_stream_sync(d, s->stream);
                return st;
            }
        }
    return gr_dev_stream_sync(d, s->stream);
}

gr_status gr_session_capture_range(gr_session_t s, const char *dim, int64_t lo, int64_t hi, int progress, gr_capture_report *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!s || !dim) return gr_error(GR_ERR_INVALID, "gr_session_capture_range: NULL session or dim");
    if (s->opt.mode == GR_MODE_EAGER)
        return gr_error(GR_ERR_INVALID, "capture range: the session is in eager mode (graphs are captured in graph and auto modes)");
    if (s->pending) GR_TRY(gr_session_wait(s));
    const gr_graph *g = s->graph;
    int n = g->syms.len, k = -1;
    for (int j = 0; j < n && k < 0; j++)
        if (!strcmp(g->syms.data[j].name, dim)) k = j;
    if (k < 0) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        for (int j = 0; j < n; j++) gr_sb_printf(&sb, "%s'%s'", j ? ", " : "", g->syms.data[j].name);
        char shown[64];
        gr_escape_text(shown, sizeof shown, dim, false);
        gr_status st = gr_error(GR_ERR_NOT_FOUND, "capture range: no symbolic dim '%s' (the model's: %s)", shown,
                                sb.data ? sb.data : "none");
        gr_sb_free(&sb);
        return st;
    }
    const gr_ir_symbol *sym = &g->syms.data[k];
    if (lo > hi || lo < sym->lo || hi > sym->hi) {
        char range[64];
        if (sym->hi >= GR_DX_INF) snprintf(range, sizeof range, ">= %lld", (long long)sym->lo);
        else snprintf(range, sizeof range, "%lld..%lld", (long long)sym->lo, (long long)sym->hi);
        return gr_error(GR_ERR_SHAPE, "capture range: %s=%lld:%lld is not a range inside the dim's range (%s)", sym->name, (long long)lo,
                        (long long)hi, range);
    }
    int64_t *syms = gr_malloc(sizeof(int64_t) * (size_t)n);
    if (!syms) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    for (int j = 0; j < n && st == GR_OK; j++) {
        if (j == k) continue;
        if (s->current) syms[j] = s->current->sym_values[j];
        else if (g->syms.data[j].declared && g->syms.data[j].lo == g->syms.data[j].hi) syms[j] = g->syms.data[j].lo;
        else
            st = gr_error(GR_ERR_INVALID, "capture range over '%s': the model's dim '%s' has no value yet  (run once first, or declare its range as one value)", sym->name,
                          g->syms.data[j].name);
    }
    double t0 = gr_now_us(), capture_us = 0, compile_us = 0;
    long captures0 = s->total_captures, inst0 = s->instantiations, upd0 = s->exec_updates;
    int done = 0;
    long total = (long)(hi - lo + 1), step = total / 10 > 0 ? total / 10 : 1;
    /* largest first: the first binding's graph and arena are the largest, the others fit in what it took */
    for (int64_t v = hi; v >= lo && st == GR_OK; v--) {
        syms[k] = v;
        gr_rt_plan *p = NULL;
        bool known = false;
        for (gr_rt_plan *q = s->plans; q && !known; q = q->next) known = !memcmp(q->sym_values, syms, sizeof(int64_t) * (size_t)n);
        st = gr_rt_plan_for(s, syms, &p);
        if (st != GR_OK) break;
        if (!known) compile_us += p->compile_us;
        double c0 = p->capture_us;
        st = prepare_binding(s, p);
        capture_us += p->capture_us - c0;
        done++;
        if (progress && (done % step == 0 || v == lo))
            fprintf(stderr, "graft: capturing %s=%lld..%lld (largest first): %d/%ld bindings, %.2f s\n", sym->name, (long long)hi,
                    (long long)lo, done, total, (gr_now_us() - t0) / 1e6);
    }
    gr_free(syms, sizeof(int64_t) * (size_t)n);
    /* these runs' outputs are nobody's */
    s->generation++;
    s->has_run = false;
    if (st != GR_OK) return gr_error_prefix(st, "capture range %s=%lld:%lld", sym->name, (long long)lo, (long long)hi);
    if (out) {
        out->bindings = done;
        out->total_ms = (gr_now_us() - t0) / 1e3;
        out->compile_ms = compile_us / 1e3;
        out->capture_ms = capture_us / 1e3;
        out->captures = s->total_captures - captures0;
        out->instantiations = s->instantiations - inst0;
        out->exec_updates = s->exec_updates - upd0;
    }
    return GR_OK;
}
