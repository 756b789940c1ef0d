/* passes/dce — dead-step elimination.
 *
 * A step is dead when nothing observable depends on what it writes: none of
 * the values it writes is a graph output or is read by a live later step.
 * Kernel and library-call steps die by that rule, and so do ALIAS steps whose
 * view is unused. HOST steps always stay (they may do more than write values).
 *
 * Readers always come after writers in a step list, so one backward sweep
 * reaches the fixed point: when step i is judged, every later step has been,
 * and `needed` holds exactly the values the live later steps read (plus the
 * graph outputs). A live step marks everything it reads as needed, including
 * the values it writes (a kernel may read-modify-write, and a value written
 * in pieces by several steps keeps all of its earlier writers).
 *
 * Conservative where the rule would need aliasing analysis: a write into a
 * value that is itself a view (the out_value of an ALIAS step) is kept, since
 * it changes the viewed value, and a binding outside the graph's values keeps
 * its step.
 */
#include "passes/passes.h"
#include <string.h>

static void mark_reads(const gr_graph *g, const gr_step *s, bool *needed, int n_values) {
    if (s->kind == GR_STEP_ALIAS) {
        if (s->n_args > 0 && s->args[0].value >= 0 && s->args[0].value < n_values) needed[s->args[0].value] = true;
        return;
    }
    for (int a = 0; a < s->n_args && a < GR_KMAX_PARAMS; a++)
        if ((s->args[a].kind == GR_ARG_VALUE || s->args[a].kind == GR_ARG_HOST_SCALAR) && s->args[a].value >= 0 &&
            s->args[a].value < n_values)
            needed[s->args[a].value] = true;
    if (s->kind == GR_STEP_HOST && s->node >= 0 && s->node < g->nodes.len) {
        const gr_ir_node *nd = &g->nodes.data[s->node];
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && nd->in[i] < n_values) needed[nd->in[i]] = true;
    }
}

/* Does a write into value v keep its step alive? */
static bool write_matters(int v, const bool *needed, const bool *is_view, int n_values) {
    if (v < 0 || v >= n_values) return true;
    return needed[v] || is_view[v];
}

static bool step_live(const gr_step *s, const bool *needed, const bool *is_view, int n_values) {
    switch (s->kind) {
    case GR_STEP_HOST: return true;
    case GR_STEP_ALIAS: return s->out_value < 0 || s->out_value >= n_values || needed[s->out_value];
    case GR_STEP_LIBCALL:
        return s->n_args < 3 || s->args[2].kind != GR_ARG_VALUE ||
               write_matters(s->args[2].value, needed, is_view, n_values);
    case GR_STEP_KERNEL: {
        const gr_kernel *k = s->kernel;
        if (!k) return true;
        bool writes = false;
        for (int p = 0; p < k->n_params && p < s->n_args; p++) {
            if (!k->params[p].written) continue;
            writes = true;
            if (s->args[p].kind != GR_ARG_VALUE || write_matters(s->args[p].value, needed, is_view, n_values))
                return true;
        }
        return !writes; /* a kernel that writes nothing we know of: keep */
    }
    }
    return true;
}

gr_status gr_pass_dce(const gr_graph *g, gr_step_list *steps) {
    if (!g || !steps) return gr_error(GR_ERR_INVALID, "gr_pass_dce: NULL argument");
    if (steps->len == 0) return GR_OK;
    int n_values = g->values.len;
    size_t nv = (size_t)(n_values ? n_values : 1);
    bool *needed = gr_calloc(nv, sizeof(bool));
    bool *is_view = gr_calloc(nv, sizeof(bool));
    bool *live = gr_calloc((size_t)steps->len, sizeof(bool));
    if (!needed || !is_view || !live) {
        gr_free(needed, nv * sizeof(bool));
        gr_free(is_view, nv * sizeof(bool));
        gr_free(live, (size_t)steps->len * sizeof(bool));
        return gr_nomem();
    }
    for (int i = 0; i < g->outputs.len; i++)
        if (g->outputs.data[i] >= 0 && g->outputs.data[i] < n_values) needed[g->outputs.data[i]] = true;
    for (int i = 0; i < steps->len; i++) {
        const gr_step *s = &steps->data[i];
        if (s->kind == GR_STEP_ALIAS && s->out_value >= 0 && s->out_value < n_values) is_view[s->out_value] = true;
    }
    for (int i = steps->len - 1; i >= 0; i--) {
        const gr_step *s = &steps->data[i];
        live[i] = step_live(s, needed, is_view, n_values);
        if (live[i]) mark_reads(g, s, needed, n_values);
    }
    int kept = 0, n_steps = steps->len;
    for (int i = 0; i < n_steps; i++) {
        gr_step *s = &steps->data[i];
        if (live[i]) {
            if (kept != i) steps->data[kept] = *s;
            kept++;
            continue;
        }
        gr_kernel_destroy(s->kernel);
        gr_strfree(s->reason);
    }
    steps->len = kept;
    gr_free(needed, nv * sizeof(bool));
    gr_free(is_view, nv * sizeof(bool));
    gr_free(live, (size_t)n_steps * sizeof(bool));
    return GR_OK;
}
