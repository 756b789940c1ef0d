/* runtime/probe — the partition break of data-dependent shapes.
 *
 * NonZero's count, the length of a Range over run-time scalars and a Loop's
 * run-time trip count are data-dependent symbols (gr_ir_symbol.data_value): no
 * input shape binds them, and every shape downstream is an expression over them.
 * Before each run the session runs a *probe*: a session of its own over the
 * graph pruned to the values that compute those counts (gr_ir_prune; the
 * prefix of the graph is computed twice, once here and once in the main plan),
 * reads the counts on the host (the break: one synchronisation per run), checks
 * them against their ranges and binds them. The main plan is then selected or
 * compiled for the full binding (inputs and counts), as for any binding, so
 * plans, kernels and captured graphs are cached per count.
 *
 * Why a nested session: it is a plan cache keyed by the input binding, with the
 * same modes (the probe's segments are captured in graph mode) and the same
 * errors, and a count that itself depends on another data-dependent symbol (a
 * NonZero of a NonZero's output) is probed by the probe's own probe. */
#include "runtime/runtime-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

struct gr_rt_probe {
    gr_session_t sub;   /* session over the pruned graph whose outputs are the counts; NULL: nothing to probe */
    int n_syms;
    int *sym_out;       /* per symbol of the session's graph: output of sub holding its count, or -1 */
    int n_inputs;
    uint64_t *versions; /* per input: the version last given to sub */
    long runs;          /* probe runs (host synchronisations) */
};

bool gr_rt_probe_needed(const gr_graph *g) {
    for (int k = 0; k < g->syms.len; k++)
        if (g->syms.data[k].data_value >= 0) return true;
    return false;
}

gr_status gr_rt_probe_check_options(gr_session_t s) {
    const gr_graph *g = s->graph;
    if (s->opt.arena_policy != GR_ARENA_MAX_SHAPE) return GR_OK;
    for (int k = 0; k < g->syms.len; k++)
        if (g->syms.data[k].data_value >= 0)
            /* its largest binding would plan for the count's bound (2^31 elements for a Range) */
            return gr_error(GR_ERR_UNSUPPORTED, "arena policy max shape (--arena max): %s has a data-dependent output shape, so "
                                                "there is no largest binding to plan one arena for; use the per-binding arena",
                            g->syms.data[k].origin ? g->syms.data[k].origin : g->syms.data[k].name);
    return GR_OK;
}

void gr_rt_probe_destroy(gr_session_t s) {
    gr_rt_probe *pr = s->probe;
    if (!pr) return;
    gr_session_destroy(pr->sub);
    gr_free(pr->sym_out, sizeof(int) * ((size_t)pr->n_syms + 1));
    gr_free(pr->versions, sizeof(uint64_t) * ((size_t)pr->n_inputs + 1));
    gr_free(pr, sizeof *pr);
    s->probe = NULL;
}

/* The probe's session: s->graph pruned to the count values of the data-dependent
 * symbols it uses, those values its outputs. */
static gr_status probe_create(gr_session_t s, gr_rt_probe *pr) {
    const gr_graph *g = s->graph;
    bool *used = gr_calloc((size_t)g->syms.len + 1, sizeof(bool));
    if (!used) return gr_nomem();
    gr_ir_syms_used(g, used);
    gr_graph *pg = NULL;
    gr_status st = gr_ir_graph_clone_borrow(g, &pg);
    if (st == GR_OK) pg->outputs.len = 0;
    for (int k = 0; st == GR_OK && k < g->syms.len; k++) {
        int32_t dv = g->syms.data[k].data_value;
        if (!used[k] || dv < 0) continue;
        for (int o = 0; o < pg->outputs.len && pr->sym_out[k] < 0; o++)
            if (pg->outputs.data[o] == dv) pr->sym_out[k] = o;
        if (pr->sym_out[k] >= 0) continue;
        pr->sym_out[k] = pg->outputs.len;
        st = gr_vec_push(&pg->outputs, dv);
    }
    gr_free(used, (size_t)g->syms.len + 1);
    if (st == GR_OK && pg->outputs.len == 0) { /* no symbol in use: nothing to compute */
        gr_ir_graph_destroy(pg);
        return GR_OK;
    }
    if (st == GR_OK) st = gr_ir_prune(pg);
    gr_session_options o = s->opt;
    if (o.mode == GR_MODE_AUTO) o.mode = GR_MODE_EAGER; /* a few small kernels: nothing to time */
    o.arena_policy = GR_ARENA_PER_SHAPE;
    o.graph_memory_mb = 0;
    o.precision = GR_PRECISION_MODEL; /* counts are exact: converted already if s converted */
    if (st == GR_OK) st = gr_session_create(pg, &o, &pr->sub);
    gr_ir_graph_destroy(pg);
    return st;
}

/* "NonZero 'nz', Range 'r'" for messages */
static void origins(const gr_graph *g, const gr_rt_probe *pr, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < g->syms.len && at + 1 < size; k++) {
        if (pr->sym_out[k] < 0) continue;
        int n = snprintf(buf + at, size - at, "%s%s", at ? ", " : "", g->syms.data[k].origin ? g->syms.data[k].origin : g->syms.data[k].name);
        if (n < 0) break;
        at += (size_t)n;
    }
}

static gr_status probe_run(gr_session_t s, gr_rt_probe *pr) {
    const gr_graph *g = s->graph;
    gr_status st = GR_OK;
    for (int i = 0; i < g->inputs.len && st == GR_OK; i++) {
        const gr_rt_input *in = &s->inputs[i];
        if (pr->versions[i] == in->version) continue;
        const char *name = g->values.data[g->inputs.data[i]].name;
        if (in->dev_bound) st = gr_session_bind_input_device(pr->sub, name, in->dtype, in->ndim, in->dims, in->dev_ptr, in->nbytes);
        else st = gr_session_set_input(pr->sub, name, in->dtype, in->ndim, in->dims, in->data, in->nbytes);
        if (st == GR_OK) pr->versions[i] = in->version;
    }
    if (st == GR_OK) st = gr_session_run(pr->sub);
    if (st == GR_OK) st = gr_session_wait(pr->sub);
    if (st == GR_OK) pr->runs++;
    return st;
}

gr_status gr_rt_probe_bind(gr_session_t s, int64_t *syms) {
    const gr_graph *g = s->graph;
    if (!gr_rt_probe_needed(g)) return GR_OK;
    gr_rt_probe *pr = s->probe;
    char what[512];
    if (!pr) {
        if (!(pr = gr_calloc(1, sizeof *pr))) return gr_nomem();
        s->probe = pr; /* from here on gr_rt_probe_destroy frees it */
        pr->n_syms = g->syms.len;
        pr->n_inputs = g->inputs.len;
        pr->sym_out = gr_malloc(sizeof(int) * ((size_t)pr->n_syms + 1));
        pr->versions = gr_calloc((size_t)pr->n_inputs + 1, sizeof(uint64_t));
        gr_status st = pr->sym_out && pr->versions ? GR_OK : gr_nomem();
        for (int k = 0; st == GR_OK && k < pr->n_syms; k++) pr->sym_out[k] = -1;
        if (st == GR_OK) st = probe_create(s, pr);
        if (st != GR_OK) { /* the next run tries again */
            if (pr->sym_out) origins(g, pr, what, sizeof what);
            else what[0] = 0;
            gr_rt_probe_destroy(s);
            return gr_error_prefix(st, "compiling the computation of the data-dependent counts (%s)", what);
        }
    }
    if (!pr->sub) return GR_OK;
    origins(g, pr, what, sizeof what);
    gr_status st = probe_run(s, pr);
    if (st != GR_OK) return gr_error_prefix(st, "computing the data-dependent counts (%s)", what);
    for (int k = 0; k < g->syms.len; k++) {
        if (pr->sym_out[k] < 0) continue;
        const gr_ir_symbol *sym = &g->syms.data[k];
        const char *origin = sym->origin ? sym->origin : sym->name;
        gr_output o;
        gr_value_info info;
        unsigned char buf[16];
        GR_TRY(gr_session_output(pr->sub, pr->sym_out[k], &o));
        GR_TRY(gr_session_output_info(pr->sub, o, &info));
        int64_t numel = 1;
        for (int d = 0; d < info.ndim; d++) numel *= info.dims[d];
        if (numel != 1 || gr_dtype_size(info.dtype) > sizeof buf)
            return gr_error(GR_ERR_INTERNAL, "%s: its count is not one element", origin);
        GR_TRY(gr_session_output_read(pr->sub, o, buf, sizeof buf));
        double v = gr_load_f64(buf, info.dtype, 0);
        /* a count read from the device is checked before anything is planned for it */
        if (!isfinite(v))
            return gr_error(GR_ERR_INVALID, "%s: the count computed at run time is not a finite number (%g; a Range's delta of 0?)", origin, v);
        if (v != floor(v) || v < (double)sym->lo || v > (double)sym->hi)
            return gr_error(GR_ERR_SHAPE, "%s: the count computed at run time is %.17g, outside %lld..%lld (symbol '%s'); graft plans "
                                          "no allocation for it",
                            origin, v, (long long)sym->lo, (long long)sym->hi, sym->name);
        syms[k] = (int64_t)v;
    }
    if (s->opt.verbose) {
        fprintf(stderr, "graft: data-dependent counts:");
        for (int k = 0; k < g->syms.len; k++)
            if (pr->sym_out[k] >= 0) fprintf(stderr, " %s=%lld", g->syms.data[k].name, (long long)syms[k]);
        fprintf(stderr, "\n");
    }
    return GR_OK;
}

void gr_rt_probe_explain(gr_session_t s, gr_strbuf *sb) {
    const gr_graph *g = s->graph;
    const gr_rt_probe *pr = s->probe;
    if (!pr || !pr->sub) return;
    for (int k = 0; k < g->syms.len; k++) {
        if (pr->sym_out[k] < 0) continue;
        const gr_ir_symbol *sym = &g->syms.data[k];
        gr_sb_printf(sb, "partition break: %s: output shape depends on tensor data; graft runs the graph up to its count, reads the "
                         "count on the host (one synchronisation per run) and plans the rest for it (dim '%s', range %lld..%lld",
                     sym->origin ? sym->origin : sym->name, sym->name, (long long)sym->lo, (long long)sym->hi);
        if (s->current && k < s->current->n_syms) gr_sb_printf(sb, ", %lld in this binding", (long long)s->current->sym_values[k]);
        gr_sb_puts(sb, ")\n");
    }
    gr_sb_printf(sb, "probe: %ld runs (one host synchronisation each); the counts' computation is a plan of its own per input binding\n",
                 pr->runs);
}
