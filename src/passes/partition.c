/* passes/partition — split the step list into segments at what a CUDA graph
 * cannot hold. Each break records its cause and the IR node responsible, for
 * `graft explain`. */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

static gr_status push_segment(gr_segment_list *out, int first, int n, bool graphable, const char *reason, int node) {
    gr_segment seg = {.first_step = first, .n_steps = n, .graphable = graphable, .break_reason = NULL, .break_node = node};
    if (reason && !(seg.break_reason = gr_strdup(reason))) return GR_ERR_NOMEM;
    if (gr_vec_push(out, seg) != GR_OK) {
        gr_strfree(seg.break_reason);
        return GR_ERR_NOMEM;
    }
    return GR_OK;
}

gr_status gr_pass_partition(const gr_graph *g, gr_step_list *steps, gr_segment_list *out) {
    memset(out, 0, sizeof *out);
    int start = 0;
    const char *pending_reason = NULL;
    int pending_node = -1;
    char buf[512];
    for (int i = 0; i <= steps->len; i++) {
        bool end = i == steps->len;
        if (!end && steps->data[i].kind != GR_STEP_HOST) continue;
        /* a device run [start, i) */
        if (i > start) {
            gr_status st = push_segment(out, start, i - start, true, pending_reason, pending_node);
            if (st != GR_OK) goto fail;
            pending_reason = NULL;
            pending_node = -1;
        }
        if (end) break;
        const gr_step *h = &steps->data[i];
        const char *why = h->reason ? h->reason : "host step";
        if (h->node >= 0 && h->node < g->nodes.len) {
            char where[400];
            gr_ir_node_where(g, &g->nodes.data[h->node], where, sizeof where);
            snprintf(buf, sizeof buf, "%s: %s", where, why);
        } else {
            snprintf(buf, sizeof buf, "%s", why);
        }
        gr_status st = push_segment(out, i, 1, false, buf, h->node);
        if (st != GR_OK) goto fail;
        pending_reason = "after a host step";
        pending_node = h->node;
        start = i + 1;
    }
    for (int s = 0; s < out->len; s++)
        for (int i = 0; i < out->data[s].n_steps; i++) steps->data[out->data[s].first_step + i].segment = s;
    return GR_OK;
fail:
    gr_segment_list_free(out);
    return GR_ERR_NOMEM;
}

gr_status gr_pass_partition_none(gr_step_list *steps, gr_segment_list *out) {
    memset(out, 0, sizeof *out);
    if (steps->len == 0) return GR_OK;
    GR_TRY(push_segment(out, 0, steps->len, true, NULL, -1));
    for (int i = 0; i < steps->len; i++) steps->data[i].segment = 0;
    return GR_OK;
}

void gr_segment_list_free(gr_segment_list *l) {
    for (int i = 0; i < l->len; i++) gr_strfree(l->data[i].break_reason);
    gr_vec_free(l);
}
