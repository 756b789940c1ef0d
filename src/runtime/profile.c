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

gr_status gr_session_profile(gr_session_t s, char **out_text, double *kernel_sum_us) {
    if (!s || !out_text) return gr_error(GR_ERR_INVALID, "gr_session_profile: NULL argument");
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
    for (int i = 0; i < n && st == GR_OK; i++) {
        const gr_step *step = &p->steps.data[i];
        if (step->kind != GR_STEP_KERNEL && step->kind != GR_STEP_LIBCALL) continue;
        double us = per[i];
        times[n_work++] = (step_time){i, us};
        sum += us;
    }
    if (st == GR_OK) {
        qsort(times, (size_t)n_work, sizeof *times, slowest_first);
        gr_strbuf sb;
        gr_sb_init(&sb);
        if (graphs)
            gr_sb_printf(&sb, "per-kernel device time (%s; each kernel replayed %d times in a graph of its own), %d kernels, sum %.3f us:\n",
                         gr_dev_name(d), R, n_work, sum);
        else
            gr_sb_printf(&sb, "per-kernel device time (%s; events around each eager launch, launch gaps included), %d kernels, sum %.3f us:\n",
                         gr_dev_name(d), n_work, sum);
        for (int k = 0; k < n_work; k++) {
            const gr_step *step = &p->steps.data[times[k].step];
            const char *name = step->kind == GR_STEP_KERNEL ? step->kernel->name : step->call.name;
            gr_sb_printf(&sb, "  %9.3f us  %5.1f%%  [%3d] %s\n", times[k].us, sum > 0 ? 100.0 * times[k].us / sum : 0.0, times[k].step, name);
        }
        *out_text = gr_sb_take(&sb);
        if (!*out_text) st = GR_ERR_NOMEM;
    }
    if (kernel_sum_us) *kernel_sum_us = sum;
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
