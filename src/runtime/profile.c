/* runtime/profile — per-kernel device times of one eager run of the current
 * plan (events between steps), for `graft bench --profile` and for the
 * benchmark's "sum of kernel times". */
#include "runtime/runtime-impl.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    int step;
    double us;
} step_time;

static int slowest_first(const void *a, const void *b) {
    const step_time *x = a, *y = b;
    return x->us < y->us ? 1 : x->us > y->us ? -1 : x->step - y->step;
}

/* ==== kernel classes ========================================================================== */

static const char *const class_names[] = {
    [GR_KCLASS_MATMUL] = "matmul",         [GR_KCLASS_ATTENTION] = "attention",   [GR_KCLASS_ELEMENTWISE] = "elementwise",
    [GR_KCLASS_REDUCTION] = "norm/reduction", [GR_KCLASS_COPY] = "copy/movement", [GR_KCLASS_OTHER] = "other",
};
_Static_assert(sizeof class_names / sizeof class_names[0] == GR_KCLASS_COUNT, "one name per kernel class");

const char *gr_kernel_class_name(int c) { return c >= 0 && c < GR_KCLASS_COUNT ? class_names[c] : "?"; }

/* Does the kernel compute (any unary/binary/select/random node, or a cast that changes
 * the type), rather than only move data (loads, stores, gathers by a loaded index)?
 * Decides elementwise vs copy for kernels without reductions; integer arithmetic counts
 * (position ids, masks are elementwise work). */
static bool computes(const gr_kernel *k) {
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *x = &k->nodes.data[i];
        switch (x->op) {
        case GR_KX_UNARY:
        case GR_KX_BINARY:
        case GR_KX_SELECT:
        case GR_KX_RANDOM: return true;
        case GR_KX_CAST:
            if (x->a >= 0 && x->a < i && k->nodes.data[x->a].dtype != x->dtype) return true;
            break;
        default: break;
        }
    }
    return false;
}

static bool is_window_op(gr_op op) {
    return op == GR_OP_CONV || op == GR_OP_CONV_TRANSPOSE || op == GR_OP_MAX_POOL || op == GR_OP_AVG_POOL;
}

/* The class of a step, from what it is: the library call's kind, then for a kernel its
 * stages (a REDUCE stage: a reduction or normalisation, unless its IR node is a conv or
 * pool, "other"), its IR node's op kind (generators: "other") and its expression (float
 * arithmetic: elementwise; only loads and stores: copy/movement). */
int gr_rt_step_class(const gr_rt_plan *p, const gr_step *st) {
    if (st->kind == GR_STEP_LIBCALL && (gr_lib_is_collective(st->call.kind) || st->call.kind == GR_LIB_SAMPLE ||
                                       st->call.kind == GR_LIB_BEAM_STEP || st->call.kind == GR_LIB_BEAM_REORDER))
        return GR_KCLASS_OTHER;
    if (st->kind == GR_STEP_LIBCALL) return st->call.kind == GR_LIB_ATTENTION ? GR_KCLASS_ATTENTION : GR_KCLASS_MATMUL;
    if (st->kind != GR_STEP_KERNEL || !st->kernel) return GR_KCLASS_OTHER;
    const gr_kernel *k = st->kernel;
    int node = k->source_node >= 0 ? k->source_node : st->node;
    bool known = node >= 0 && node < p->g->nodes.len;
    gr_op op = known ? p->g->nodes.data[node].op : GR_OP_IDENTITY;
    if (known && is_window_op(op)) return GR_KCLASS_OTHER; /* direct convolutions and pools */
    for (int i = 0; i < k->n_stages; i++)
        if (k->stages[i].kind == GR_KS_REDUCE) return GR_KCLASS_REDUCTION;
    if (known && gr_op_get(op)->kind == GR_OPK_GEN) return GR_KCLASS_OTHER;
    return computes(k) ? GR_KCLASS_ELEMENTWISE : GR_KCLASS_COPY;
}

static void class_table(gr_strbuf *sb, const gr_profile_classes *pc, double sum) {
    int order[GR_KCLASS_COUNT];
    for (int c = 0; c < GR_KCLASS_COUNT; c++) order[c] = c;
    /* slowest first (insertion sort of six) */
    for (int i = 1; i < GR_KCLASS_COUNT; i++)
        for (int j = i; j > 0 && pc->us[order[j]] > pc->us[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    gr_sb_printf(sb, "device time per kernel class (slowest first), sum %.3f us:\n", sum);
    gr_sb_printf(sb, "  %-15s %12s %7s %8s\n", "class", "time us", "share", "kernels");
    for (int i = 0; i < GR_KCLASS_COUNT; i++) {
        int c = order[i];
        if (!pc->kernels[c]) continue;
        gr_sb_printf(sb, "  %-15s %12.3f %6.1f%% %8d\n", class_names[c], pc->us[c], sum > 0 ? 100.0 * pc->us[c] / sum : 0.0,
                     pc->kernels[c]);
    }
}

gr_status gr_session_profile(gr_session_t s, char **out_text, double *kernel_sum_us) {
    return gr_session_profile_classes(s, out_text, kernel_sum_us, NULL);
}

gr_status gr_session_profile_classes(gr_session_t s, char **out_text, double *kernel_sum_us, gr_profile_classes *classes) {
    if (classes) memset(classes, 0, sizeof *classes);
    if (!s || !out_text) return gr_error(GR_ERR_INVALID, "gr_session_profile: NULL argument");
    GR_RT_NO_TP(s, "gr_session_profile");
    *out_text = NULL;
    if (s->pending) GR_TRY(gr_session_wait(s));
    gr_rt_plan *p = s->current;
    if (!p) return gr_error(GR_ERR_INVALID, "gr_session_profile: run the session once first");
    gr_device *d = s->dev;
    gr_dev_caps caps = gr_dev_caps_get(d);
    if (!caps.events) return gr_error(GR_ERR_UNSUPPORTED, "device '%s' has no events", gr_dev_name(d));
    int n = p->steps.len;
    gr_event **ev = gr_calloc(2, sizeof(gr_event *));
    step_time *times = gr_calloc((size_t)n, sizeof(step_time));
    gr_status st = ev && times ? GR_OK : GR_ERR_NOMEM;
    for (int i = 0; i < 2 && st == GR_OK; i++) st = gr_dev_event_create(d, &ev[i]);
    /* Each kernel is captured R times into a graph of its own and replayed
     * between two events: back-to-back graph nodes leave no launch gaps, so
     * this measures the kernel, not the host's launch rate. Devices without
     * graphs fall back to events around eager launches (an upper bound). */
    bool graphs = caps.graphs;
    enum { R = 10 };
    double *per = gr_calloc((size_t)n, sizeof(double));
    if (!per && st == GR_OK) st = GR_ERR_NOMEM;
    for (int i = 0; i < n && st == GR_OK; i++) {
        const gr_step *step = &p->steps.data[i];
        if (step->kind != GR_STEP_KERNEL && step->kind != GR_STEP_LIBCALL) continue;
        if (graphs) {
            gr_dgraph *g = NULL;
            gr_dexec *e = NULL;
            st = gr_dev_capture_begin(d, s->stream);
            for (int r = 0; r < R && st == GR_OK; r++) st = gr_rt_step_launch(s, p, i);
            gr_status end = gr_dev_capture_end(d, s->stream, &g);
            if (st == GR_OK) st = end;
            if (st == GR_OK) st = gr_dev_graph_instantiate(d, g, &e);
            if (st == GR_OK) st = gr_dev_graph_launch(d, e, s->stream); /* warm */
            if (st == GR_OK) st = gr_dev_event_record(d, ev[0], s->stream);
            if (st == GR_OK) st = gr_dev_graph_launch(d, e, s->stream);
            if (st == GR_OK) st = gr_dev_event_record(d, ev[1], s->stream);
            if (st == GR_OK) st = gr_dev_stream_sync(d, s->stream);
            if (st == GR_OK) st = gr_dev_event_elapsed_us(d, ev[0], ev[1], &per[i]);
            per[i] /= R;
            gr_dev_exec_destroy(d, e);
            gr_dev_graph_destroy(d, g);
        } else {
            st = gr_dev_event_record(d, ev[0], s->stream);
            if (st == GR_OK) st = gr_rt_step_launch(s, p, i);
            if (st == GR_OK) st = gr_dev_event_record(d, ev[1], s->stream);
            if (st == GR_OK) st = gr_dev_stream_sync(d, s->stream);
            if (st == GR_OK) st = gr_dev_event_elapsed_us(d, ev[0], ev[1], &per[i]);
        }
    }
    int n_work = 0;
    double sum = 0;
    gr_profile_classes pc;
    memset(&pc, 0, sizeof pc);
    for (int i = 0; i < n && st == GR_OK; i++) {
        const gr_step *step = &p->steps.data[i];
        if (step->kind != GR_STEP_KERNEL && step->kind != GR_STEP_LIBCALL) continue;
        double us = per[i];
        times[n_work++] = (step_time){i, us};
        sum += us;
        int c = gr_rt_step_class(p, step);
        pc.us[c] += us;
        pc.kernels[c]++;
    }
    if (st == GR_OK) {
        qsort(times, (size_t)n_work, sizeof *times, slowest_first);
        gr_strbuf sb;
        gr_sb_init(&sb);
        class_table(&sb, &pc, sum);
        if (graphs)
            gr_sb_printf(&sb, "per-kernel device time (%s; each kernel replayed %d times in a graph of its own), %d kernels, sum %.3f us:\n",
                         gr_dev_name(d), R, n_work, sum);
        else
            gr_sb_printf(&sb, "per-kernel device time (%s; events around each eager launch, launch gaps included), %d kernels, sum %.3f us:\n",
                         gr_dev_name(d), n_work, sum);
        for (int k = 0; k < n_work; k++) {
            const gr_step *step = &p->steps.data[times[k].step];
            const char *name = step->kind == GR_STEP_KERNEL ? step->kernel->name : step->call.name;
            gr_sb_printf(&sb, "  %9.3f us  %5.1f%%  [%3d] %-14s %s\n", times[k].us, sum > 0 ? 100.0 * times[k].us / sum : 0.0,
                         times[k].step, class_names[gr_rt_step_class(p, step)], name);
        }
        *out_text = gr_sb_take(&sb);
        if (!*out_text) st = GR_ERR_NOMEM;
    }
    if (kernel_sum_us) *kernel_sum_us = sum;
    if (classes && st == GR_OK) *classes = pc;
    if (ev)
        for (int i = 0; i < 2; i++)
            gr_dev_event_destroy(d, ev[i]);
    gr_free(ev, 2 * sizeof(gr_event *));
    gr_free(times, (size_t)n * sizeof(step_time));
    gr_free(per, (size_t)n * sizeof(double));
    /* the profile run rewrote activations: outputs of the last run stay valid
     * (same plan, same inputs), so nothing else changes */
    return st;
}
