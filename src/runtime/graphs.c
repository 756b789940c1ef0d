/* runtime/graphs — the graph manager: per segment warm-up → capture →
 * instantiate → replay (torch.compile's CUDA-graph discipline, done in C); in
 * mode auto each segment is timed eager and replayed and the faster kept.
 *
 * What keeps replays correct:
 * - Activations live at fixed arena offsets and external inputs are copied
 *   into per-plan placeholders before the replay (when set again since the
 *   last copy), outside the graph, so no captured pointer ever goes stale. A
 *   caller's device buffer bound in place (gr_session_bind_input_device) is
 *   the exception: the kernel nodes reading it are compared and repointed
 *   before each replay, like host scalars below.
 * - A host scalar read by a kernel (GR_ARG_HOST_SCALAR) is baked into the
 *   captured kernel node by value. Before each replay the current value is
 *   compared with the captured one and, if it changed, the exec node's
 *   arguments are patched (cudaGraphExecKernelNodeSetParams), never replayed stale.
 * - A new shape key gets its own plan and graphs; after max_rerecords
 *   captures of a segment position (one per shape key) new shape keys run
 *   that segment eagerly, with a warning naming it.
 * - A capture that fails (an operation illegal during capture) leaves the
 *   segment eager for good, with the reason recorded for `graft explain`.
 *
 * Graph memory (shape policy exact, graph_memory_mb): each capture's device memory is
 * measured as the drop of the device's free memory across capture, instantiation and
 * upload (cuMemGetInfo on CUDA: the driver's own graph memory included). With a budget,
 * the graphs of the least recently used bindings (plans are kept most recent first) are
 * evicted to make room: before a capture for the size this segment's graph had in another
 * binding, after it for the size measured. An evicted segment keeps its warm-up and its
 * mode-auto decision and is captured again on its binding's next run. A graph that alone
 * exceeds the budget, or that does not fit beside its own binding's other graphs, is
 * released and its segment runs eagerly for that binding (a warning, and explain says so).
 */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>


void gr_rt_segment_release(gr_session_t s, gr_rt_segment *st) {
    gr_device *d = s->dev;
    if (st->exec && !st->exec_shared) {
        s->graph_bytes -= GR_MIN(st->graph_bytes, s->graph_bytes);
        s->graphs_live--;
        gr_dev_exec_destroy(d, st->exec);
    }
    gr_rt_update_forget(s, st); /* shape policy update: the shared exec's applied graph goes */
    gr_dev_graph_destroy(d, st->graph);
    gr_free(st->scalar_node, sizeof(int) * (size_t)st->scalar_cap);
    gr_free(st->scalar_step, sizeof(int) * (size_t)st->scalar_cap);
    gr_free(st->scalar_args, sizeof(gr_karg) * (size_t)st->scalar_cap * GR_KMAX_PARAMS);
    gr_strfree(st->fallback_reason);
    memset(st, 0, sizeof *st);
}

static bool is_work(const gr_step *st) { return st->kind == GR_STEP_KERNEL || st->kind == GR_STEP_LIBCALL; }

static bool has_host_scalar(const gr_step *st) {
    for (int a = 0; a < st->n_args; a++)
        if (st->args[a].kind == GR_ARG_HOST_SCALAR) return true;
    return false;
}

/* A kernel reading a graph input that a caller's device buffer may be bound to in place:
 * its captured address can go stale, so it is compared before each replay like a host scalar. */
static bool reads_movable_input(const gr_rt_plan *p, const gr_step *st) {
    if (st->kind != GR_STEP_KERNEL) return false;
    for (int a = 0; a < st->n_args; a++) {
        if (st->args[a].kind != GR_ARG_VALUE) continue;
        const gr_value_store *vs = &p->mem.values[st->args[a].value];
        if (vs->kind == GR_STORE_ALIAS) vs = &p->mem.values[vs->alias_of];
        if (vs->kind == GR_STORE_INPUT && p->input_in_place[vs->offset]) return true;
    }
    return false;
}

/* Kernel nodes whose arguments the graph manager re-checks before every replay. */
static bool tracked(const gr_rt_plan *p, const gr_step *st) {
    return is_work(st) && (has_host_scalar(st) || reads_movable_input(p, st));
}

static gr_status run_eager(gr_session_t s, gr_rt_plan *p, int seg) {
    const gr_segment *sg = &p->segs.data[seg];
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++) {
        GR_TRY(gr_rt_step_launch(s, p, i));
        if (is_work(&p->steps.data[i])) s->stats.kernels++;
    }
    return GR_OK;
}

static void fall_back(gr_session_t s, gr_rt_plan *p, int seg, const char *why) {
    gr_rt_segment *st = &p->seg_state[seg];
    st->state = GR_SEG_FALLBACK;
    gr_strfree(st->fallback_reason);
    st->fallback_reason = gr_strdup(why);
    fprintf(stderr, "graft: warning: segment %d (steps %d..%d) runs eagerly: %s\n", seg, p->segs.data[seg].first_step,
            p->segs.data[seg].first_step + p->segs.data[seg].n_steps - 1, why);
}

/* ==== graph memory ================================================================================ */
/* Drops segment seg's graph of plan p: its memory is given back; the segment keeps its
 * warm-up and decision, so its binding's next run captures it again straight away. */
void gr_rt_segment_recapture(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    gr_rt_segment keep = *st;
    st->fallback_reason = NULL; /* captured segments have none; kept below either way */
    gr_rt_segment_release(s, st);
    st->records = keep.records;
    st->warmups = GR_WARMUP_RUNS;
    memcpy(st->eager_us, keep.eager_us, sizeof st->eager_us);
    memcpy(st->graph_us, keep.graph_us, sizeof st->graph_us);
    st->n_eager_samples = keep.n_eager_samples;
    st->n_graph_samples = keep.n_graph_samples;
    st->decided = keep.decided;
    st->decision_loaded = keep.decision_loaded;
    st->decision_kept = keep.decision_kept;
    st->evictions = keep.evictions;
    st->fallback_reason = keep.fallback_reason;
    st->state = GR_SEG_EAGER;
}

/* Evicts segment seg's graph of plan p (graph memory budget): dropped, counted. */
static void evict(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    size_t graph_bytes = st->graph_bytes;
    gr_rt_segment_recapture(s, p, seg);
    st->evictions++;
    s->evictions++;
    if (s->opt.verbose) {
        char key[160] = "";
        size_t used = 0;
        for (int k = 0; k < p->n_syms && used < sizeof key; k++) {
            int w = snprintf(key + used, sizeof key - used, "%s%.40s=%lld", k ? ", " : "", s->graph->syms.data[k].name,
                             (long long)p->sym_values[k]);
            if (w < 0) break;
            used += (size_t)w;
        }
        fprintf(stderr, "graft: graph memory budget %zu bytes: evicted the graph of segment %d (%zu bytes) of binding (%s)\n",
                s->graph_budget, seg, graph_bytes, key);
    }
}

/* Drops plan q, whose last graph was just evicted: its arena, placeholders and folded constants
 * go too (the shared arena and the largest binding's plan stay). Its binding is compiled again
 * when it comes back; kernels are shape-generic, so that compiles no kernel. */
static void drop_plan(gr_session_t s, gr_rt_plan *q) {
    if (q == s->max_plan) return;
    for (int k = 0; k < q->segs.len; k++)
        if (q->seg_state[k].exec) return;
    gr_rt_plan **link = &s->plans;
    while (*link && *link != q) link = &(*link)->next;
    if (!*link) return;
    uint64_t b = gr_rt_binding_hash(q);
    bool known = false;
    for (int i = 0; i < s->warmed_bindings.len && !known; i++) known = s->warmed_bindings.data[i] == b;
    /* without room to remember it, the binding just warms up again */
    if (!known && gr_vec_push(&s->warmed_bindings, b) != GR_OK) gr_error_clear();
    *link = q->next;
    if (s->current == q) s->current = NULL; /* a run is in progress: its outputs were stale anyway */
    gr_rt_plan_destroy(s, q);
    s->plans_evicted++;
}

/* Evicts graphs of the least recently used plans other than `keep` until `need` more bytes
 * fit the budget. False when they cannot (what is left belongs to `keep`). */
static bool make_room(gr_session_t s, const gr_rt_plan *keep, size_t need) {
    while (s->graph_bytes + need > s->graph_budget) {
        gr_rt_plan *victim = NULL;
        int victim_seg = -1;
        for (gr_rt_plan *q = s->plans; q; q = q->next) { /* the last one with a graph: least recently used */
            if (q == keep) continue;
            for (int k = 0; k < q->segs.len; k++) /* a shared exec (policy update) frees nothing */
                if (q->seg_state[k].exec && !q->seg_state[k].exec_shared) victim = q, victim_seg = k;
        }
        if (!victim) return false;
        evict(s, victim, victim_seg);
        drop_plan(s, victim);
    }
    return true;
}

/* The size segment seg's graph had in the most recently used other binding (0: none known). */
static size_t expected_bytes(gr_session_t s, const gr_rt_plan *p, int seg) {
    for (gr_rt_plan *q = s->plans; q; q = q->next)
        if (q != p && seg < q->segs.len && q->seg_state[seg].graph_bytes) return q->seg_state[seg].graph_bytes;
    return 0;
}

static size_t free_device_bytes(gr_session_t s) {
    size_t free_bytes = 0, total = 0;
    if (!gr_dev_caps_get(s->dev).mem_info || gr_dev_mem_info(s->dev, &free_bytes, &total) != GR_OK) {
        gr_error_clear();
        return 0;
    }
    return free_bytes;
}

/* Records segment seg's steps into st->graph (the stream captured; nothing runs) and finds the
 * graph nodes of the tracked kernel steps (their arguments as captured in st->scalar_args). */
static gr_status record(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_device *d = s->dev;
    gr_rt_segment *st = &p->seg_state[seg];
    const gr_segment *sg = &p->segs.data[seg];
    st->n_scalar_nodes = 0;
    GR_TRY(gr_dev_capture_begin(d, s->stream));
    gr_status rc = GR_OK;
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps && rc == GR_OK; i++) {
        const gr_step *step = &p->steps.data[i];
        rc = gr_rt_step_launch(s, p, i);
        if (rc != GR_OK || !tracked(p, step)) continue;
        int k = st->n_scalar_nodes++;
        st->scalar_step[k] = i;
        st->scalar_node[k] = -1;
        rc = gr_rt_step_args(s, p, i, &st->scalar_args[(size_t)k * GR_KMAX_PARAMS]);
    }
    gr_dgraph *graph = NULL;
    gr_status end_rc = gr_dev_capture_end(d, s->stream, &graph);
    if (rc == GR_OK) rc = end_rc;
    if (rc != GR_OK) {
        gr_dev_graph_destroy(d, graph);
        return rc;
    }
    st->graph = graph;
    st->n_nodes = gr_dev_graph_num_nodes(d, graph);
    /* A library call may add several nodes (cuBLASLt), so graph nodes are
     * matched to steps by their kernel, not by position. Kernel steps that
     * share a prepared kernel are taken in capture order. */
    if (st->n_scalar_nodes) {
        if (!gr_dev_caps_get(d).graph_nodes)
            return gr_error(GR_ERR_UNSUPPORTED, "device '%s' cannot enumerate graph nodes", gr_dev_name(d));
        int next = 0;
        for (int k = 0; k < st->n_scalar_nodes; k++) {
            const gr_step *step = &p->steps.data[st->scalar_step[k]];
            if (step->kind != GR_STEP_KERNEL)
                return gr_error(GR_ERR_UNSUPPORTED, "segment %d: a library call reads host scalar; cannot patch it in a graph", seg);
            for (int n = next; n < st->n_nodes; n++) {
                gr_gnode_info info;
                GR_TRY(gr_dev_graph_node_info(d, graph, n, &info));
                if (info.kind == GR_GNODE_KERNEL && info.func == p->funcs[st->scalar_step[k]]) {
                    st->scalar_node[k] = n;
                    next = n + 1;
                    break;
                }
            }
            if (st->scalar_node[k] < 0)
                return gr_error(GR_ERR_INTERNAL, "segment %d: no graph node found for kernel '%s'", seg, step->kernel->name);
        }
    }
    return GR_OK;
}

/* Records the segment into a graph, instantiates and uploads it. */
static gr_status capture(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_device *d = s->dev;
    gr_rt_segment *st = &p->seg_state[seg];
    const gr_segment *sg = &p->segs.data[seg];
    if (!gr_dev_caps_get(d).graphs) return gr_error(GR_ERR_UNSUPPORTED, "device '%s' has no CUDA graph support", gr_dev_name(d));
    int n_scalar = 0;
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++)
        if (tracked(p, &p->steps.data[i])) n_scalar++;
    if (n_scalar && !st->scalar_cap) {
        st->scalar_cap = n_scalar;
        st->scalar_node = gr_malloc(sizeof(int) * (size_t)n_scalar);
        st->scalar_step = gr_malloc(sizeof(int) * (size_t)n_scalar);
        st->scalar_args = gr_calloc((size_t)n_scalar * GR_KMAX_PARAMS, sizeof(gr_karg));
        if (!st->scalar_node || !st->scalar_step || !st->scalar_args) return GR_ERR_NOMEM;
    }
    double c0 = gr_dev_clock_us(d);
    GR_TRY(record(s, p, seg));
    double c1 = gr_dev_clock_us(d);
    double t_inst = gr_now_us(); /* instantiation (or exec update) time, for the capture report */
    if (s->opt.shape_policy == GR_SHAPES_UPDATE || s->opt.shape_policy == GR_SHAPES_AUTO) {
        /* shapes.c: the position's exec, updated (auto: own exec while within the budget) */
        GR_TRY(gr_rt_update_instantiate(s, p, seg, expected_bytes(s, p, seg)));
    } else {
        GR_TRY(gr_dev_graph_instantiate(d, st->graph, &st->exec));
        s->graphs_live++; /* counted from here: release uncounts it */
        s->instantiations++;
    }
    GR_TRY(gr_dev_graph_upload(d, st->exec, s->stream));
    s->instantiate_us += gr_now_us() - t_inst;
    st->record_clock_us = c1 - c0;
    st->instantiate_clock_us = gr_dev_clock_us(d) - c1;
    st->records++;
    s->total_captures++;
    st->state = GR_SEG_CAPTURED;
    if (s->opt.verbose) fprintf(stderr, "graft: segment %d captured: %d nodes\n", seg, st->n_nodes);
    return GR_OK;
}

/* Shape policy update: a tracked argument that changed since this binding's capture is not
 * patched into the shared exec (a node patch on CUDA keeps the launch geometry of the graph the
 * exec was instantiated from: another binding's); the segment is recorded again with the new
 * arguments, then the exec is updated from that graph. */
static gr_status refresh_shared(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    bool changed = false;
    for (int k = 0; k < st->n_scalar_nodes && !changed; k++) {
        gr_karg now[GR_KMAX_PARAMS];
        memset(now, 0, sizeof now);
        int i = st->scalar_step[k];
        GR_TRY(gr_rt_step_args(s, p, i, now));
        changed = memcmp(now, &st->scalar_args[(size_t)k * GR_KMAX_PARAMS], sizeof(gr_karg) * (size_t)p->steps.data[i].n_args) != 0;
    }
    if (changed) {
        gr_rt_update_forget(s, st);
        gr_dev_graph_destroy(s->dev, st->graph);
        st->graph = NULL;
        GR_TRY(record(s, p, seg));
        st->records++;
        s->total_captures++;
        s->stats.nodes_updated += st->n_scalar_nodes;
    }
    return gr_rt_update_apply(s, p, seg);
}

/* Patches kernel nodes whose arguments changed since capture: a host scalar's value, or the
 * address of a caller's device buffer bound in place (zero-copy inputs). */
static gr_status refresh_scalars(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_device *d = s->dev;
    gr_rt_segment *st = &p->seg_state[seg];
    if (st->exec_shared) return refresh_shared(s, p, seg);
    for (int k = 0; k < st->n_scalar_nodes; k++) {
        gr_karg now[GR_KMAX_PARAMS];
        memset(now, 0, sizeof now);
        int i = st->scalar_step[k];
        GR_TRY(gr_rt_step_args(s, p, i, now));
        gr_karg *was = &st->scalar_args[(size_t)k * GR_KMAX_PARAMS];
        int n = p->steps.data[i].n_args;
        if (!memcmp(now, was, sizeof(gr_karg) * (size_t)n)) continue;
        if (!gr_dev_caps_get(d).node_set_args)
            return gr_error(GR_ERR_HAZARD, "step %d: an argument changed since capture and device '%s' cannot patch graph nodes",
                            i, gr_dev_name(d));
        GR_TRY(gr_dev_exec_kernel_node_set_args(d, st->exec, st->scalar_node[k], now, n));
        memcpy(was, now, sizeof(gr_karg) * (size_t)n);
        s->stats.nodes_updated++;
    }
    return GR_OK;
}

static int captures_at_position(gr_session_t s, int seg) {
    int n = 0;
    for (gr_rt_plan *q = s->plans; q; q = q->next)
        if (seg < q->segs.len) n += q->seg_state[seg].records;
    return n;
}

/* Mode auto: one run of the segment between two events on an idle stream,
 * so launch gaps count as they would for the caller. */
typedef gr_status (*seg_runner)(gr_session_t s, gr_rt_plan *p, int seg);
static gr_status timed(gr_session_t s, gr_rt_plan *p, int seg, seg_runner run, double *us) {
    gr_device *d = s->dev;
    if (!s->ev_seg_a) GR_TRY(gr_dev_event_create(d, &s->ev_seg_a));
    if (!s->ev_seg_b) GR_TRY(gr_dev_event_create(d, &s->ev_seg_b));
    GR_TRY(gr_dev_stream_sync(d, s->stream));
    s->timed_runs++;
    GR_TRY(gr_dev_event_record(d, s->ev_seg_a, s->stream));
    GR_TRY(run(s, p, seg));
    GR_TRY(gr_dev_event_record(d, s->ev_seg_b, s->stream));
    GR_TRY(gr_dev_stream_sync(d, s->stream));
    return gr_dev_event_elapsed_us(d, s->ev_seg_a, s->ev_seg_b, us);
}

static double min_of(const double *x, int n) {
    double m = x[0];
    for (int i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
    return m;
}

static gr_status replay(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    GR_TRY(refresh_scalars(s, p, seg));
    return gr_dev_graph_launch(s->dev, st->exec, s->stream);
}

gr_status gr_rt_segment_run_graph(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    const gr_segment *sg = &p->segs.data[seg];
    long work = 0;
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++) work += is_work(&p->steps.data[i]);
    if (work == 0) return run_eager(s, p, seg);
    bool auto_mode = s->opt.mode == GR_MODE_AUTO;
    switch (st->state) {
    case GR_SEG_FALLBACK:
    case GR_SEG_CHOSE_EAGER: return run_eager(s, p, seg);
    case GR_SEG_EAGER:
    case GR_SEG_WARMUP:
        if (auto_mode && st->n_eager_samples < GR_SCG_SAMPLES) {
            /* the first timed eager run is the warm-up too */
            st->state = GR_SEG_WARMUP;
            st->warmups = GR_WARMUP_RUNS;
            return timed(s, p, seg, run_eager, &st->eager_us[st->n_eager_samples++]);
        }
        if (st->warmups < GR_WARMUP_RUNS) {
            st->warmups++;
            st->state = GR_SEG_WARMUP;
            return run_eager(s, p, seg);
        }
        /* policy update re-captures into one exec: no instantiation per binding to bound */
        /* ... nor generic's bucket plans: one per power of two of the declared range */
        if (!s->graph_budget && s->opt.shape_policy != GR_SHAPES_UPDATE && s->opt.shape_policy != GR_SHAPES_AUTO &&
            !gr_rt_generic_is_bucket(s, p) && captures_at_position(s, seg) >= s->opt.max_rerecords) {
            char why[256];
            snprintf(why, sizeof why, "re-recorded %d times (one per input shape), limit %d reached", captures_at_position(s, seg),
                     s->opt.max_rerecords);
            fall_back(s, p, seg, why);
            return run_eager(s, p, seg);
        }
        {
            double t0 = gr_now_us();
            /* a best effort: measured below (auto shares an exec instead of evicting) */
            if (s->graph_budget && (s->opt.shape_policy != GR_SHAPES_AUTO || s->autopol)) make_room(s, p, expected_bytes(s, p, seg));
            size_t free0 = free_device_bytes(s);
            gr_status rc = capture(s, p, seg);
            p->capture_us += gr_now_us() - t0;
            if (rc == GR_ERR_NOMEM) {
                gr_rt_segment_release(s, st);
                return rc;
            }
            if (rc != GR_OK) {
                char why[1024];
                snprintf(why, sizeof why, "capture failed: %s", gr_last_error());
                gr_rt_segment_release(s, st);
                st->warmups = GR_WARMUP_RUNS;
                fall_back(s, p, seg, why);
                return run_eager(s, p, seg);
            }
            size_t free1 = free_device_bytes(s);
            st->graph_bytes = free0 > free1 ? free0 - free1 : 0;
            s->graph_bytes += st->graph_bytes;
            if (st->exec_shared) gr_rt_update_add_bytes(s, seg, st->graph_bytes); /* the position's exec holds them */
            if (s->graph_budget && !st->exec_shared) {
                /* the new graph is counted: room is made for nothing more, or it goes */
                s->graph_bytes -= st->graph_bytes;
                bool alone = st->graph_bytes > s->graph_budget;
                bool fits = !alone && make_room(s, p, st->graph_bytes);
                s->graph_bytes += st->graph_bytes;
                if (!fits) {
                    char why[512];
                    if (alone)
                        snprintf(why, sizeof why,
                                 "its graph takes %zu bytes of device memory, more than the whole graph memory budget of %zu "
                                 "bytes (graph_memory_mb / --graph-memory-mb): not kept for this binding",
                                 st->graph_bytes, s->graph_budget);
                    else
                        snprintf(why, sizeof why,
                                 "its graph of %zu bytes does not fit the graph memory budget of %zu bytes beside this "
                                 "binding's other graphs (graph_memory_mb / --graph-memory-mb): not kept for this binding",
                                 st->graph_bytes, s->graph_budget);
                    int records = st->records;
                    gr_rt_segment keep = *st;
                    gr_rt_segment_release(s, st);
                    st->records = records;
                    st->warmups = GR_WARMUP_RUNS;
                    memcpy(st->eager_us, keep.eager_us, sizeof st->eager_us);
                    st->n_eager_samples = keep.n_eager_samples;
                    s->over_budget++;
                    fall_back(s, p, seg, why);
                    return run_eager(s, p, seg);
                }
            }
            if (s->graph_bytes > s->graph_bytes_peak) s->graph_bytes_peak = s->graph_bytes;
        }
        /* replay what was just captured */
        __attribute__((fallthrough));
    case GR_SEG_CAPTURED:
        if (auto_mode && !st->decided) {
            GR_TRY(timed(s, p, seg, replay, &st->graph_us[st->n_graph_samples++]));
            if (st->n_graph_samples == GR_SCG_SAMPLES) {
                st->decided = true;
                s->decisions_measured++;
                double e = min_of(st->eager_us, st->n_eager_samples), g = min_of(st->graph_us, st->n_graph_samples);
                if (s->opt.verbose)
                    fprintf(stderr, "graft: segment %d: eager %.2f us, graph %.2f us: %s\n", seg, e, g, g < e ? "graph" : "eager");
                GR_TRY(gr_rt_decisions_record(s, p, seg, g < e, e, g));
                if (!(g < e)) {
                    /* the graph does not pay here: give it back and stay eager */
                    int w = st->warmups;
                    double es[GR_SCG_SAMPLES], gs[GR_SCG_SAMPLES];
                    memcpy(es, st->eager_us, sizeof es);
                    memcpy(gs, st->graph_us, sizeof gs);
                    int records = st->records;
                    gr_rt_segment_release(s, st);
                    st->warmups = w;
                    st->records = records;
                    memcpy(st->eager_us, es, sizeof es);
                    memcpy(st->graph_us, gs, sizeof gs);
                    st->n_eager_samples = st->n_graph_samples = GR_SCG_SAMPLES;
                    st->decided = true;
                    st->state = GR_SEG_CHOSE_EAGER;
                }
            }
            s->stats.kernels += work;
            if (st->state == GR_SEG_CAPTURED) {
                s->stats.kernels_in_graphs += work;
                s->stats.graph_launches++;
            }
            return GR_OK;
        }
        GR_TRY(refresh_scalars(s, p, seg));
        GR_TRY(gr_dev_graph_launch(s->dev, st->exec, s->stream));
        s->stats.kernels += work;
        s->stats.kernels_in_graphs += work;
        s->stats.graph_launches++;
        return GR_OK;
    }
    return GR_ERR_INTERNAL;
}
