/* runtime/session — the public session API: create, bind inputs, run, read
 * outputs (generation-tagged), stats, explain. */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

void gr_session_options_init(gr_session_options *o) {
    memset(o, 0, sizeof *o);
    o->device = GR_DEVICE_AUTO;
    o->mode = GR_MODE_EAGER;
    o->max_rerecords = 8;
}

static bool graph_is_concrete(const gr_graph *g) {
    for (int i = 0; i < g->inputs.len; i++)
        if (!gr_ir_value_concrete(&g->values.data[g->inputs.data[i]])) return false;
    return true;
}

gr_status gr_session_create(gr_graph_t graph, const gr_session_options *opt, gr_session_t *out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_session_create: out is NULL");
    *out = NULL;
    if (!graph) return gr_error(GR_ERR_INVALID, "gr_session_create: graph is NULL");
    GR_TRY(gr_ir_verify(graph));
    if (graph->outputs.len == 0) return gr_error(GR_ERR_INVALID, "graph '%s' has no outputs", graph->origin ? graph->origin : "<api>");
    gr_session_t s = gr_calloc(1, sizeof *s);
    if (!s) return GR_ERR_NOMEM;
    if (opt) s->opt = *opt;
    else gr_session_options_init(&s->opt);
    if (s->opt.max_rerecords <= 0) s->opt.max_rerecords = 8;
    gr_status st;
    if ((st = gr_ir_graph_clone(graph, &s->graph)) != GR_OK) goto fail;
    if ((st = gr_ir_infer_shapes(s->graph)) != GR_OK) goto fail;
    s->inputs = gr_calloc((size_t)(s->graph->inputs.len ? s->graph->inputs.len : 1), sizeof(gr_rt_input));
    if (!s->inputs) {
        st = GR_ERR_NOMEM;
        goto fail;
    }
    if ((st = gr_device_open(s->opt.device, s->opt.cache_dir, s->opt.verbose, &s->dev)) != GR_OK) goto fail;
    if ((st = s->dev->iface->stream_create(s->dev->ctx, &s->stream)) != GR_OK) goto fail;
    if (s->dev->iface->event_create) {
        if ((st = s->dev->iface->event_create(s->dev->ctx, &s->ev_start)) != GR_OK) goto fail;
        if ((st = s->dev->iface->event_create(s->dev->ctx, &s->ev_end)) != GR_OK) goto fail;
    }
    /* a graph without symbolic dims compiles now, so errors surface at creation */
    if (graph_is_concrete(s->graph)) {
        if ((st = gr_rt_plan_build(s, NULL, &s->plans)) != GR_OK) goto fail;
    }
    *out = s;
    return GR_OK;
fail:
    gr_session_destroy(s);
    return st;
}

void gr_session_destroy(gr_session_t s) {
    if (!s) return;
    if (s->pending && s->dev && s->stream) gr_dev_sync(s->dev, s->stream);
    while (s->plans) {
        gr_rt_plan *n = s->plans->next;
        gr_rt_plan_destroy(s, s->plans);
        s->plans = n;
    }
    if (s->inputs) {
        for (int i = 0; s->graph && i < s->graph->inputs.len; i++)
            if (s->inputs[i].data && s->dev) gr_dev_free(s->dev, s->inputs[i].data);
        gr_free(s->inputs, 0);
    }
    if (s->dev) {
        if (s->ev_start) s->dev->iface->event_destroy(s->dev->ctx, s->ev_start);
        if (s->ev_end) s->dev->iface->event_destroy(s->dev->ctx, s->ev_end);
        if (s->ev_seg_a) s->dev->iface->event_destroy(s->dev->ctx, s->ev_seg_a);
        if (s->ev_seg_b) s->dev->iface->event_destroy(s->dev->ctx, s->ev_seg_b);
        if (s->stream) s->dev->iface->stream_destroy(s->dev->ctx, s->stream);
        gr_device_destroy(s->dev);
    }
    gr_ir_graph_destroy(s->graph);
    gr_free(s, sizeof *s);
}

const char *gr_session_device_name(gr_session_t s) { return s && s->dev ? s->dev->iface->name(s->dev->ctx) : "?"; }

/* ==== inputs ================================================================================ */
static int find_input(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->inputs.len; i++)
        if (!strcmp(g->values.data[g->inputs.data[i]].name, name)) return i;
    return -1;
}

gr_status gr_session_set_input(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims,
                               const void *data, size_t nbytes) {
    if (!s || !name) return gr_error(GR_ERR_INVALID, "gr_session_set_input: NULL session or name");
    int i = find_input(s->graph, name);
    if (i < 0) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        for (int k = 0; k < s->graph->inputs.len; k++)
            gr_sb_printf(&sb, "%s'%s'", k ? ", " : "", s->graph->values.data[s->graph->inputs.data[k]].name);
        gr_status st = gr_error(GR_ERR_NOT_FOUND, "no input named '%s' (inputs: %s)", name, sb.data ? sb.data : "none");
        gr_sb_free(&sb);
        return st;
    }
    const gr_ir_value *v = &s->graph->values.data[s->graph->inputs.data[i]];
    char want[256];
    gr_ir_type_str(s->graph, v, want, sizeof want);
    if (dtype != v->dtype)
        return gr_error(GR_ERR_SHAPE, "input '%s': dtype %s given, graph expects %s", name, gr_dtype_name(dtype), want);
    if (ndim != v->ndim)
        return gr_error(GR_ERR_SHAPE, "input '%s': rank %d given, graph expects %s", name, ndim, want);
    int64_t numel = 1;
    if (ndim > 0 && !dims) return gr_error(GR_ERR_INVALID, "input '%s': dims is NULL", name);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0) return gr_error(GR_ERR_SHAPE, "input '%s': dim %d is negative", name, d);
        if (v->dims[d].sym == GR_SYM_NONE && dims[d] != v->dims[d].size)
            return gr_error(GR_ERR_SHAPE, "input '%s': dim %d is %lld, graph expects %s", name, d, (long long)dims[d], want);
    }
    /* checked: a wrapped count could match a small buffer and bind a huge shape */
    if (!gr_shape_numel_checked(ndim, dims, &numel))
        return gr_error(GR_ERR_SHAPE, "input '%s': the shape holds more than %lld elements", name, (long long)GR_MAX_NUMEL);
    size_t need = (size_t)numel * gr_dtype_size(dtype);
    if (nbytes != need)
        return gr_error(GR_ERR_SHAPE, "input '%s': %zu bytes given, shape needs %zu", name, nbytes, need);
    if (need && !data) return gr_error(GR_ERR_INVALID, "input '%s': data is NULL", name);
    gr_rt_input *in = &s->inputs[i];
    if (s->pending && (need > in->cap || !in->data)) GR_TRY(gr_session_wait(s));
    if (need > in->cap || !in->data) {
        /* page-locked, so the copy into the placeholder is a true asynchronous DMA */
        void *p = NULL;
        GR_TRY(gr_dev_alloc(s->dev, GR_MEM_HOST_PINNED, need ? need : 1, &p));
        if (in->data) gr_dev_free(s->dev, in->data);
        in->data = p;
        in->cap = need ? need : 1;
    }
    /* the previous run may still be copying from this buffer */
    if (s->pending) GR_TRY(gr_session_wait(s));
    if (need) memcpy(in->data, data, need);
    in->version = ++s->input_versions;
    in->nbytes = need;
    in->dtype = dtype;
    in->ndim = ndim;
    for (int d = 0; d < ndim; d++) in->dims[d] = dims[d];
    in->set = true;
    return GR_OK;
}

/* Shape key from the bound inputs: each symbolic dim's value, checked for consistency. */
static gr_status resolve_syms(gr_session_t s, int64_t *syms) {
    const gr_graph *g = s->graph;
    int *from = gr_malloc(sizeof(int) * (size_t)(g->syms.len ? g->syms.len : 1));
    if (!from) return GR_ERR_NOMEM;
    for (int k = 0; k < g->syms.len; k++) syms[k] = -1, from[k] = -1;
    gr_status st = GR_OK;
    for (int i = 0; i < g->inputs.len && st == GR_OK; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        if (!s->inputs[i].set) {
            st = gr_error(GR_ERR_INVALID, "input '%s' was not set before run", v->name);
            break;
        }
        for (int d = 0; d < v->ndim; d++) {
            int sym = v->dims[d].sym;
            if (sym == GR_SYM_NONE) continue;
            int64_t have = s->inputs[i].dims[d];
            if (syms[sym] < 0) {
                syms[sym] = have;
                from[sym] = i;
            } else if (syms[sym] != have) {
                st = gr_error(GR_ERR_SHAPE, "symbolic dim '%s' is %lld in input '%s' but %lld in input '%s'", g->syms.data[sym],
                              (long long)syms[sym], g->values.data[g->inputs.data[from[sym]]].name, (long long)have, v->name);
                break;
            }
        }
    }
    for (int k = 0; k < g->syms.len && st == GR_OK; k++)
        if (syms[k] < 0) st = gr_error(GR_ERR_SHAPE, "symbolic dim '%s' is not bound by any input", g->syms.data[k]);
    gr_free(from, 0);
    return st;
}

static gr_status select_plan(gr_session_t s, gr_rt_plan **out) {
    int n = s->graph->syms.len;
    int64_t *syms = gr_malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!syms) return GR_ERR_NOMEM;
    gr_status st = resolve_syms(s, syms);
    if (st != GR_OK) {
        gr_free(syms, 0);
        return st;
    }
    gr_rt_plan *prev = NULL;
    for (gr_rt_plan *p = s->plans; p; prev = p, p = p->next) {
        if (n && memcmp(p->sym_values, syms, sizeof(int64_t) * (size_t)n)) continue;
        if (prev) { /* most recent first */
            prev->next = p->next;
            p->next = s->plans;
            s->plans = p;
        }
        gr_free(syms, 0);
        *out = p;
        return GR_OK;
    }
    if (s->opt.verbose && n) {
        fprintf(stderr, "graft: new shape key (");
        for (int k = 0; k < n; k++) fprintf(stderr, "%s%s=%lld", k ? ", " : "", s->graph->syms.data[k], (long long)syms[k]);
        fprintf(stderr, "): compiling a plan\n");
    }
    gr_rt_plan *p;
    st = gr_rt_plan_build(s, syms, &p);
    gr_free(syms, 0);
    if (st != GR_OK) return st;
    p->next = s->plans;
    s->plans = p;
    *out = p;
    return GR_OK;
}

/* ==== run ====================================================================================== */
static gr_status run_segment_eager(gr_session_t s, gr_rt_plan *p, int seg) {
    const gr_segment *sg = &p->segs.data[seg];
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++) {
        gr_status st = gr_rt_step_launch(s, p, i);
        if (st != GR_OK) {
            /* the node the error is about (a gather fused into this step's
             * kernel names its own node), else the step's */
            int node = gr_error_node() >= 0 ? gr_error_node() : p->steps.data[i].node;
            gr_error_set_node(-1); /* named here: gr_session_run must not name it again */
            if (node >= 0 && node < p->g->nodes.len) {
                char where[512];
                gr_ir_node_where(p->g, &p->g->nodes.data[node], where, sizeof where);
                return gr_error_prefix(st, "%s", where);
            }
            return st;
        }
        if (p->steps.data[i].kind == GR_STEP_KERNEL || p->steps.data[i].kind == GR_STEP_LIBCALL) s->stats.kernels++;
    }
    return GR_OK;
}

gr_status gr_session_run(gr_session_t s) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_run: session is NULL");
    if (s->pending) GR_TRY(gr_session_wait(s));
    gr_rt_plan *p;
    GR_TRY(select_plan(s, &p));
    gr_device *d = s->dev;
    /* a run invalidates every output handle of earlier runs, success or not */
    s->generation++;
    s->has_run = false;
    memset(&s->stats, 0, sizeof s->stats);
    s->run_t0 = d->iface->clock_us(d->ctx);
    gr_status st = GR_OK;
    gr_error_set_node(-1);
    if (s->ev_start) st = d->iface->event_record(d->ctx, s->ev_start, s->stream);
    /* external inputs into their placeholders (outside any graph), only when
     * they changed since this plan last copied them */
    for (int i = 0; i < p->g->inputs.len && st == GR_OK; i++) {
        if (!p->input_dev[i] || !p->input_bytes[i]) continue;
        if (p->input_version[i] == s->inputs[i].version) continue;
        st = gr_dev_memcpy(d, s->stream, p->input_dev[i], s->inputs[i].data, p->input_bytes[i], GR_COPY_H2D);
        if (st != GR_OK) break;
        p->input_version[i] = s->inputs[i].version;
        s->stats.copies++;
        s->stats.bytes_copied += p->input_bytes[i];
    }
    for (int seg = 0; seg < p->segs.len && st == GR_OK; seg++) {
        if (s->opt.mode != GR_MODE_EAGER && p->segs.data[seg].graphable) st = gr_rt_segment_run_graph(s, p, seg);
        else st = run_segment_eager(s, p, seg);
    }
    if (st == GR_OK && s->ev_end) st = d->iface->event_record(d->ctx, s->ev_end, s->stream);
    if (st != GR_OK && gr_error_node() >= 0 && gr_error_node() < p->g->nodes.len) {
        /* a kernel of a replayed graph failed: name the node it is about */
        char where[512];
        gr_ir_node_where(p->g, &p->g->nodes.data[gr_error_node()], where, sizeof where);
        gr_error_set_node(-1);
        gr_error_prefix(st, "%s", where);
    }
    if (st != GR_OK) {
        /* the device may hold partial work: drain it; placeholders must be re-filled */
        gr_dev_sync(d, s->stream);
        for (int i = 0; i < p->g->inputs.len; i++) p->input_version[i] = 0;
        return st;
    }
    s->stats.arena_bytes = p->mem.arena_bytes;
    s->stats.weight_bytes = p->mem.const_bytes;
    s->stats.segments = p->segs.len;
    for (int seg = 0; seg < p->segs.len; seg++)
        if (p->seg_state[seg].state == GR_SEG_CAPTURED) s->stats.segments_in_graphs++;
    s->stats.captures = s->total_captures;
    s->stats.compile_us = p->compile_us;
    s->stats.capture_us = p->capture_us;
    s->current = p;
    s->pending = true;
    s->has_run = true;
    return GR_OK;
}

gr_status gr_session_wait(gr_session_t s) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_wait: session is NULL");
    if (!s->pending) return GR_OK;
    gr_device *d = s->dev;
    s->pending = false;
    gr_status st = gr_dev_sync(d, s->stream);
    if (st != GR_OK) {
        s->has_run = false; /* outputs of a failed run are not readable */
        return st;
    }
    s->stats.time_us = d->iface->clock_us(d->ctx) - s->run_t0;
    if (s->ev_start && s->ev_end) d->iface->event_elapsed_us(d->ctx, s->ev_start, s->ev_end, &s->stats.gpu_time_us);
    if (d->iface->mem_in_use) s->stats.device_bytes = d->iface->mem_in_use(d->ctx);
    return GR_OK;
}

double gr_session_clock_us(gr_session_t s) { return s && s->dev ? s->dev->iface->clock_us(s->dev->ctx) : 0.0; }

/* ==== outputs ===================================================================================== */
static gr_status check_output(gr_session_t s, gr_output o) {
    if (!s) return gr_error(GR_ERR_INVALID, "session is NULL");
    if (s->pending) GR_TRY(gr_session_wait(s));
    if (!s->has_run || !s->current) return gr_error(GR_ERR_STALE, "no successful run yet: outputs are not available");
    if (o.generation != s->generation)
        return gr_error(GR_ERR_STALE,
                        "output %d is from run %llu but the session has run again (now run %llu): its memory was reused; "
                        "copy outputs out (gr_session_output_read) before the next run",
                        o.index, (unsigned long long)o.generation, (unsigned long long)s->generation);
    if (o.index < 0 || o.index >= s->graph->outputs.len)
        return gr_error(GR_ERR_INVALID, "output index %d out of range (0..%d)", o.index, s->graph->outputs.len - 1);
    return GR_OK;
}

gr_status gr_session_output(gr_session_t s, int i, gr_output *out) {
    if (!s || !out) return gr_error(GR_ERR_INVALID, "gr_session_output: NULL argument");
    if (s->pending) GR_TRY(gr_session_wait(s));
    if (!s->has_run) return gr_error(GR_ERR_STALE, "no successful run yet: outputs are not available");
    if (i < 0 || i >= s->graph->outputs.len)
        return gr_error(GR_ERR_INVALID, "output index %d out of range (graph has %d outputs)", i, s->graph->outputs.len);
    out->generation = s->generation;
    out->index = i;
    return GR_OK;
}

gr_status gr_session_output_info(gr_session_t s, gr_output o, gr_value_info *info) {
    GR_TRY(check_output(s, o));
    gr_rt_plan *p = s->current;
    const gr_ir_value *v = &p->g->values.data[p->g->outputs.data[o.index]];
    memset(info, 0, sizeof *info);
    info->name = v->name;
    info->dtype = v->dtype;
    info->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) info->dims[d] = v->dims[d].size;
    return GR_OK;
}

size_t gr_session_output_nbytes(gr_session_t s, gr_output o) {
    if (check_output(s, o) != GR_OK) return 0;
    gr_rt_plan *p = s->current;
    const gr_ir_value *v = &p->g->values.data[p->g->outputs.data[o.index]];
    return (size_t)gr_ir_value_numel(v) * gr_dtype_size(v->dtype);
}

gr_status gr_session_output_read(gr_session_t s, gr_output o, void *dst, size_t nbytes) {
    GR_TRY(check_output(s, o));
    gr_rt_plan *p = s->current;
    int v = p->g->outputs.data[o.index];
    const gr_ir_value *val = &p->g->values.data[v];
    size_t need = (size_t)gr_ir_value_numel(val) * gr_dtype_size(val->dtype);
    if (nbytes < need) return gr_error(GR_ERR_INVALID, "output '%s' needs %zu bytes, buffer has %zu", val->name, need, nbytes);
    if (!need) return GR_OK;
    if (!dst) return gr_error(GR_ERR_INVALID, "output '%s': destination is NULL", val->name);
    void *src = gr_rt_value_addr(s, p, v);
    if (!src) return gr_error(GR_ERR_INTERNAL, "output '%s' has no storage", val->name);
    gr_value_store *st = &p->mem.values[v];
    if (st->kind == GR_STORE_ALIAS) st = &p->mem.values[st->alias_of];
    if (st->kind == GR_STORE_HOST) {
        memcpy(dst, src, need);
        return GR_OK;
    }
    GR_TRY(gr_dev_memcpy(s->dev, s->stream, dst, src, need, GR_COPY_D2H));
    return gr_dev_sync(s->dev, s->stream);
}

gr_status gr_session_stats(gr_session_t s, gr_run_stats *out) {
    if (!s || !out) return gr_error(GR_ERR_INVALID, "gr_session_stats: NULL argument");
    if (s->pending) GR_TRY(gr_session_wait(s));
    *out = s->stats;
    if (!s->has_run && s->plans) {
        out->arena_bytes = s->plans->mem.arena_bytes;
        out->weight_bytes = s->plans->mem.const_bytes;
        out->segments = s->plans->segs.len;
    }
    return GR_OK;
}
