/* runtime/session — the public session API: create, bind inputs (host data, or a caller's
 * device buffer), run (asynchronous; gr_session_wait), read outputs (generation-tagged),
 * stats. explain.c and profile.c hold gr_session_explain and gr_session_profile; devio.c
 * the device-memory helpers and caller streams. */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

void gr_session_options_init(gr_session_options *o) {
    memset(o, 0, sizeof *o);
    o->device = GR_DEVICE_AUTO;
    o->mode = GR_MODE_EAGER;
    o->max_rerecords = 8;
    o->shape_policy = GR_SHAPES_DEFAULT;
}

/* ==== shape policies ============================================================================ */
static const char *const shape_policy_names[] = {"exact", "pad", "generic", "update", "auto", "default"};
_Static_assert(sizeof shape_policy_names / sizeof shape_policy_names[0] == GR_SHAPES_COUNT,
               "a name per gr_shape_policy");

const char *gr_shape_policy_name(int policy) {
    return policy >= 0 && policy < GR_SHAPES_COUNT ? shape_policy_names[policy] : "?";
}

gr_status gr_shape_policy_parse(const char *name, int *out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_shape_policy_parse: out is NULL");
    for (int k = 0; name && k < GR_SHAPES_COUNT; k++)
        if (!strcmp(name, shape_policy_names[k])) return *out = k, GR_OK;
    char shown[64];
    gr_escape_text(shown, sizeof shown, name ? name : "(null)", false);
    return gr_error(GR_ERR_INVALID, "unknown shape policy '%s' (expected exact, pad, generic, update, auto or default)", shown);
}

/* The options gr_session_create refuses before doing any work. */
static gr_status check_shape_options(const gr_session_options *o) {
    if (o->shape_policy < 0 || o->shape_policy >= GR_SHAPES_COUNT)
        return gr_error(GR_ERR_INVALID, "shape_policy %d is not a gr_shape_policy (0..%d)", o->shape_policy, GR_SHAPES_COUNT - 1);
    /* !(x >= 0) also refuses NaN */
    if (!(o->graph_memory_mb >= 0) || o->graph_memory_mb > 1e12)
        return gr_error(GR_ERR_INVALID, "graph_memory_mb %g is not a size in MiB (0 = no limit, else a positive number)",
                        o->graph_memory_mb);
    return GR_OK;
}

void gr_rt_stats_totals(gr_session_t s, gr_run_stats *out) {
    out->captures = s->total_captures;
    out->graph_bytes = s->graph_bytes;
    out->graph_bytes_peak = s->graph_bytes_peak;
    out->graph_budget_bytes = s->graph_budget;
    out->instantiations = s->instantiations;
    out->evictions = s->evictions;
    out->graphs_live = s->graphs_live;
    out->over_budget = s->over_budget;
    out->plans_evicted = s->plans_evicted;
    out->timed_runs = s->timed_runs;
    out->decisions_measured = s->decisions_measured;
    out->decisions_loaded = s->decisions_loaded;
    out->exec_updates = s->exec_updates;
    out->exec_updates_refused = s->exec_updates_refused;
    out->padded_runs = gr_rt_pad_runs(s);
    out->generic_runs = s->generic_runs;
    out->generic_replays = s->generic_replays;
    out->table_refreshes = s->table_refreshes;
    out->table_bytes = s->table_bytes;
    out->shape_decisions_measured = s->autopol_measured;
    out->shape_decisions_loaded = s->autopol_loaded;
    out->shape_measure_runs = s->autopol_runs;
    gr_rt_tmpl_stats(s, &out->plans_compiled, &out->plans_instantiated);
    out->waits_on_host = s->waits_on_host;
}

/* ==== shared weights ============================================================================ */
static size_t ptr_hash(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* The index from host data pointer to s->graph value, built once. */
static gr_status weights_init(gr_session_t s) {
    const gr_graph *g = s->graph;
    size_t cap = 16;
    while (cap < (size_t)g->values.len * 2 + 2) cap *= 2;
    s->weight_slots = gr_calloc(cap, sizeof(int32_t));
    if (!s->weight_slots) return GR_ERR_NOMEM;
    s->weight_cap = cap; /* before the next allocation: destroy frees by it */
    s->weight_dev = gr_calloc((size_t)g->values.len + 1, sizeof(void *));
    if (!s->weight_dev) return GR_ERR_NOMEM;
    for (int v = 0; v < g->values.len; v++) {
        if (g->values.data[v].kind != GR_VAL_CONST || !g->values.data[v].data) continue;
        size_t h = ptr_hash(g->values.data[v].data, cap);
        while (s->weight_slots[h]) h = (h + 1) & (cap - 1);
        s->weight_slots[h] = v + 1;
    }
    return GR_OK;
}

/* The parent's device copy of a constant equal to `val` (gr_rt_session_create_child), or NULL. */
static gr_status parent_weight(gr_session_t s, const gr_ir_value *val, void **dev) {
    *dev = NULL;
    gr_session_t p = s->weights_from;
    int pv = val->name && val->nbytes ? gr_ir_find_value(p->graph, val->name) : -1;
    if (pv < 0) return GR_OK;
    const gr_ir_value *pval = &p->graph->values.data[pv];
    if (pval->kind != GR_VAL_CONST || !pval->data || pval->dtype != val->dtype || pval->nbytes != val->nbytes ||
        memcmp(pval->data, val->data, val->nbytes) != 0)
        return GR_OK;
    GR_TRY(gr_rt_weight(p, pval->data, dev));
    /* uploaded on the parent's stream: there before this session's stream reads it */
    return gr_dev_stream_sync(p->dev, p->stream);
}

gr_status gr_rt_weight(gr_session_t s, const void *host, void **dev) {
    *dev = NULL;
    int v = -1;
    for (size_t h = ptr_hash(host, s->weight_cap); s->weight_slots[h]; h = (h + 1) & (s->weight_cap - 1))
        if (s->graph->values.data[s->weight_slots[h] - 1].data == host) {
            v = s->weight_slots[h] - 1;
            break;
        }
    if (v < 0) return gr_error(GR_ERR_INTERNAL, "a plan's weight is not a constant of the session's graph");
    if (!s->weight_dev[v] && s->weights_from) {
        GR_TRY(parent_weight(s, &s->graph->values.data[v], dev));
        if (*dev) return GR_OK;
    }
    if (!s->weight_dev[v]) {
        const gr_ir_value *val = &s->graph->values.data[v];
        size_t n = val->nbytes ? val->nbytes : 1;
        void *p = NULL;
        GR_TRY(gr_dev_alloc(s->dev, GR_MEM_DEVICE, n, &p));
        gr_status st = val->nbytes ? gr_dev_memcpy(s->dev, s->stream, p, val->data, val->nbytes, GR_COPY_H2D) : GR_OK;
        if (st != GR_OK) {
            gr_dev_free(s->dev, p);
            return st;
        }
        s->weight_dev[v] = p;
        s->weight_bytes += val->nbytes;
    }
    *dev = s->weight_dev[v];
    return GR_OK;
}

static bool graph_is_concrete(const gr_graph *g) {
    if (gr_rt_probe_needed(g)) return false; /* data-dependent dims: bound at each run (probe.c) */
    for (int i = 0; i < g->inputs.len; i++)
        if (!gr_ir_value_concrete(&g->values.data[g->inputs.data[i]])) return false;
    return true;
}

/* parent: gr_rt_session_create_child's (its device and weights); *devp: a device the session
 * takes (tensor parallelism's ranks), consumed (set NULL) once the session holds it. Neither:
 * the session opens opt->device. */
static gr_status session_create(gr_graph_t graph, const gr_session_options *opt, gr_session_t parent, gr_device **devp,
                                gr_session_t *out);

gr_status gr_session_create(gr_graph_t graph, const gr_session_options *opt, gr_session_t *out) {
    if (opt && opt->tp > 1) return gr_rt_tp_create(graph, opt, out); /* tp.c */
    if (opt && opt->tp < 0) return gr_error(GR_ERR_INVALID, "gr_session_create: tp %d (ranks) is negative", opt->tp);
    return session_create(graph, opt, NULL, NULL, out);
}

gr_status gr_rt_session_create_child(gr_graph_t graph, const gr_session_options *opt, gr_session_t parent, gr_session_t *out) {
    if (!parent) return gr_error(GR_ERR_INVALID, "gr_rt_session_create_child: parent is NULL");
    return session_create(graph, opt, parent, NULL, out);
}

gr_status gr_rt_session_create_on(gr_graph_t graph, const gr_session_options *opt, gr_device *dev, gr_session_t *out) {
    gr_status st = session_create(graph, opt, NULL, &dev, out);
    gr_device_destroy(dev); /* not taken: an early failure */
    return st;
}

static gr_status session_create(gr_graph_t graph, const gr_session_options *opt, gr_session_t parent, gr_device **devp,
                                gr_session_t *out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_session_create: out is NULL");
    *out = NULL;
    if (!graph) return gr_error(GR_ERR_INVALID, "gr_session_create: graph is NULL");
    double t0 = gr_now_us();
    GR_TRY(gr_ir_verify(graph));
    double t_verify = gr_now_us();
    if (graph->outputs.len == 0) return gr_error(GR_ERR_INVALID, "graph '%s' has no outputs", graph->origin ? graph->origin : "<api>");
    if (opt) GR_TRY(check_shape_options(opt));
    gr_session_t s = gr_calloc(1, sizeof *s);
    if (!s) return GR_ERR_NOMEM;
    if (devp) s->dev = *devp, *devp = NULL;
    if (opt) s->opt = *opt;
    else gr_session_options_init(&s->opt);
    if (s->opt.max_rerecords <= 0) s->opt.max_rerecords = 8;
    gr_status st;
    if ((st = gr_ir_graph_clone(graph, &s->graph)) != GR_OK) goto fail;
    double t_clone = gr_now_us();
    if ((st = gr_ir_infer_shapes(s->graph)) != GR_OK) goto fail;
    /* the default shape policy: auto where graph mode meets symbolic dims (issue 11: per segment
     * measured, then adapted to the calls per binding seen, autopol.c); exact where there is one
     * binding (a static model) or the mode decides graphs itself (auto) or makes none (eager) */
    if (s->opt.shape_policy == GR_SHAPES_DEFAULT) {
        s->shape_policy_default = true;
        s->opt.shape_policy = s->opt.mode == GR_MODE_GRAPH && s->graph->syms.len > 0 ? GR_SHAPES_AUTO : GR_SHAPES_EXACT;
    }
    if (s->opt.precision < 0 || s->opt.precision >= GR_PRECISION_COUNT) {
        st = gr_error(GR_ERR_INVALID, "gr_session_create: precision %d is not a gr_precision (bf16 or f16)", s->opt.precision);
        goto fail;
    }
    /* once, before folding: the half weights belong to the session's graph, so every
     * binding's plan shares them (uploaded once) and no binding converts again */
    if (s->opt.precision != GR_PRECISION_MODEL &&
        (st = gr_pass_precision(s->graph, gr_rt_precision_dtype(s->opt.precision), !s->opt.no_fuse_attention, &s->precision)) != GR_OK) {
        st = gr_error_prefix(st, "precision %s", gr_dtype_name(gr_rt_precision_dtype(s->opt.precision)));
        goto fail;
    }
    if (s->opt.verbose)
        fprintf(stderr, "graft: session phases (ms): verify %.1f clone %.1f shapes %.1f\n", (t_verify - t0) / 1e3,
                (t_clone - t_verify) / 1e3, (gr_now_us() - t_clone) / 1e3);
    s->inputs = gr_calloc((size_t)s->graph->inputs.len, sizeof(gr_rt_input));
    if (!s->inputs) {
        st = GR_ERR_NOMEM;
        goto fail;
    }
    /* what no binding changes (weight-only subgraphs) folds once, here, into shared weights;
     * each binding's plan folds only what depends on its shape */
    if (!graph_is_concrete(s->graph) && (st = gr_pass_fold_constants(s->graph)) != GR_OK) goto fail;
    /* once, not per binding: which nodes each plan must not fold (gr_rt_plan_build) */
    if (s->graph->syms.len > 0 && (st = gr_pass_mark_superlinear(s->graph)) != GR_OK) goto fail;
    /* shape policy pad: which symbols padding provably leaves the real rows of (shapes.c) */
    if ((s->opt.shape_policy == GR_SHAPES_PAD || s->opt.shape_policy == GR_SHAPES_AUTO) && s->opt.mode != GR_MODE_EAGER &&
        (st = gr_rt_pad_init(s)) != GR_OK)
        goto fail;
    /* shape policy auto measured per segment, and where generic's machinery is on (autopol.c) */
    if ((st = gr_rt_autopol_init(s)) != GR_OK) goto fail;
    if ((st = weights_init(s)) != GR_OK) goto fail;
    if (parent) {
        s->dev = parent->dev, s->dev_borrowed = true, s->weights_from = parent;
    } else if (!s->dev && (st = gr_device_open(s->opt.device, s->opt.cache_dir, s->opt.verbose, &s->dev)) != GR_OK) {
        goto fail;
    }
    if ((st = gr_dev_stream_create(s->dev, &s->stream)) != GR_OK) goto fail;
    if (s->opt.graph_memory_mb > 0) {
        if (!gr_dev_caps_get(s->dev).mem_info) {
            st = gr_error(GR_ERR_UNSUPPORTED, "graph_memory_mb: device '%s' cannot report its free memory, so graph memory "
                                              "cannot be measured", gr_dev_name(s->dev));
            goto fail;
        }
        double bytes = s->opt.graph_memory_mb * 1048576.0;
        s->graph_budget = bytes < 1 ? 1 : (size_t)bytes;
    }
    if ((s->opt.mode == GR_MODE_AUTO || s->autopol) && (st = gr_rt_decisions_open(s)) != GR_OK) goto fail;
    if (gr_dev_caps_get(s->dev).events) {
        if ((st = gr_dev_event_create(s->dev, &s->ev_start)) != GR_OK) goto fail;
        if ((st = gr_dev_event_create(s->dev, &s->ev_end)) != GR_OK) goto fail;
    }
    /* a graph without symbolic dims compiles now, so errors surface at creation;
     * under GR_ARENA_MAX_SHAPE a symbolic one compiles its largest binding now */
    if ((st = gr_rt_probe_check_options(s)) != GR_OK) goto fail; /* probe.c */
    /* shape policy generic places every binding at the largest binding's addresses too (generic.c) */
    bool generic = s->generic_infra && s->opt.mode != GR_MODE_EAGER;
    if (!graph_is_concrete(s->graph) && (s->opt.arena_policy == GR_ARENA_MAX_SHAPE || generic)) {
        if ((st = gr_rt_max_plan_init(s)) != GR_OK) goto fail;
    } else if (graph_is_concrete(s->graph)) {
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
    if (s->tp) gr_rt_tp_destroy(s); /* the other ranks first */
    if (s->pending && s->dev && s->stream) gr_dev_stream_sync(s->dev, s->stream);
    gr_rt_probe_destroy(s);
    gr_rt_tmpl_free(s);
    while (s->plans) {
        gr_rt_plan *n = s->plans->next;
        gr_rt_plan_destroy(s, s->plans);
        s->plans = n;
    }
    gr_rt_shapes_free(s); /* after the plans: their graphs were applied to its execs */
    gr_rt_autopol_free(s);
    if (s->shared_arena && s->dev) gr_dev_free(s->dev, s->shared_arena);
    gr_rt_gen_free(s);
    gr_rt_decisions_close(s);
    gr_vec_free(&s->warmed_bindings);
    gr_pipeline_scratch_free(&s->plan_scratch);
    if (s->max_syms) gr_free(s->max_syms, sizeof(int64_t) * (size_t)s->graph->syms.len);
    if (s->generic_input_owner) gr_free(s->generic_input_owner, sizeof(long) * (size_t)(s->graph->inputs.len ? s->graph->inputs.len : 1));
    if (s->inputs) {
        for (int i = 0; s->graph && i < s->graph->inputs.len; i++)
            if (s->inputs[i].data && s->dev) gr_dev_free(s->dev, s->inputs[i].data);
        gr_free(s->inputs, (size_t)s->graph->inputs.len * sizeof(gr_rt_input));
    }
    if (s->weight_dev) {
        for (int v = 0; v < s->graph->values.len; v++)
            if (s->weight_dev[v] && s->dev) gr_dev_free(s->dev, s->weight_dev[v]);
        gr_free(s->weight_dev, ((size_t)s->graph->values.len + 1) * sizeof(void *));
    }
    gr_free(s->weight_slots, s->weight_cap * sizeof(int32_t));
    if (s->dev) {
        gr_dev_event_destroy(s->dev, s->ev_start);
        gr_dev_event_destroy(s->dev, s->ev_end);
        gr_dev_event_destroy(s->dev, s->ev_seg_a);
        gr_dev_event_destroy(s->dev, s->ev_seg_b);
        gr_dev_event_destroy(s->dev, s->ev_order);
        gr_dev_event_destroy(s->dev, s->ev_done);
        gr_dev_stream_destroy(s->dev, s->ext_stream);
        gr_dev_stream_destroy(s->dev, s->stream);
        if (!s->dev_borrowed) gr_device_destroy(s->dev);
    }
    gr_ir_graph_destroy(s->graph);
    gr_free(s, sizeof *s);
}

const char *gr_session_device_name(gr_session_t s) { return s ? gr_dev_name(s->dev) : "?"; }
gr_device_kind gr_session_device_kind(gr_session_t s) { return s && s->dev ? s->dev->kind : GR_DEVICE_AUTO; }

int gr_session_shape_policy(gr_session_t s, int *by_default) {
    if (by_default) *by_default = s && s->shape_policy_default;
    return s ? s->opt.shape_policy : -1;
}

/* ==== inputs ================================================================================ */
static int find_input(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->inputs.len; i++)
        if (!strcmp(g->values.data[g->inputs.data[i]].name, name)) return i;
    return -1;
}

/* Checks a binding of input `name` (set_input, bind_input_device): its index and byte size. */
static gr_status check_input(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                             size_t nbytes, int *index, size_t *bytes) {
    int i = find_input(s->graph, name);
    if (i >= 0 && !strncmp(name, "__graft_valid_", 14)) i = -1; /* shape policy pad's own (shapes.c) */
    if (i < 0) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        for (int k = 0, shown = 0; k < s->graph->inputs.len; k++) {
            const char *in_name = s->graph->values.data[s->graph->inputs.data[k]].name;
            if (!strncmp(in_name, "__graft_valid_", 14)) continue; /* not the caller's to set */
            gr_sb_printf(&sb, "%s'%s'", shown++ ? ", " : "", in_name);
        }
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
        if (!gr_dx_is_sym(v->dims[d]) && dims[d] != v->dims[d].size)
            return gr_error(GR_ERR_SHAPE, "input '%s': dim %d is %lld, graph expects %s", name, d, (long long)dims[d], want);
    }
    /* checked: a wrapped count could match a small buffer and bind a huge shape */
    if (!gr_shape_numel_checked(ndim, dims, &numel))
        return gr_error(GR_ERR_SHAPE, "input '%s': the shape holds more than %lld elements", name, (long long)GR_MAX_NUMEL);
    size_t need = (size_t)numel * gr_dtype_size(dtype);
    if (nbytes != need)
        return gr_error(GR_ERR_SHAPE, "input '%s': %zu bytes given, shape needs %zu", name, nbytes, need);
    if (need && !data) return gr_error(GR_ERR_INVALID, "input '%s': data is NULL", name);
    *index = i;
    *bytes = need;
    return GR_OK;
}

static gr_status set_input_one(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                               size_t nbytes);
gr_status gr_session_set_input(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims,
                               const void *data, size_t nbytes) {
    if (s && s->tp) return gr_rt_tp_set_input(s, name, dtype, ndim, dims, data, nbytes); /* every rank */
    return set_input_one(s, name, dtype, ndim, dims, data, nbytes);
}

gr_status gr_rt_set_input_one(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                              size_t nbytes) {
    return set_input_one(s, name, dtype, ndim, dims, data, nbytes);
}

static gr_status set_input_one(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                               size_t nbytes) {
    if (!s || !name) return gr_error(GR_ERR_INVALID, "gr_session_set_input: NULL session or name");
    int i;
    size_t need;
    GR_TRY(check_input(s, name, dtype, ndim, dims, data, nbytes, &i, &need));
    gr_rt_input *in = &s->inputs[i];
    if (s->pending && (need > in->cap || !in->data)) GR_TRY(gr_session_wait(s));
    if (need > in->cap || !in->data) {
        /* page-locked where the device has it, so the copy into the placeholder
         * is a true asynchronous DMA; else pageable host memory (still copied
         * outside any graph, so capture is unaffected) */
        void *p = NULL;
        gr_mem_kind kind = gr_dev_caps_get(s->dev).pinned_memory ? GR_MEM_HOST_PINNED : GR_MEM_HOST;
        GR_TRY(gr_dev_alloc(s->dev, kind, need ? need : 1, &p));
        if (in->data) gr_dev_free(s->dev, in->data);
        in->data = p;
        in->cap = need ? need : 1;
    }
    /* the previous run may still be copying from this buffer */
    if (s->pending) GR_TRY(gr_session_wait(s));
    if (need) memcpy(in->data, data, need);
    in->version = ++s->input_versions;
    in->dev_ptr = NULL;
    in->dev_bound = false;
    in->nbytes = need;
    in->dtype = dtype;
    in->ndim = ndim;
    for (int d = 0; d < ndim; d++) in->dims[d] = dims[d];
    in->set = true;
    return GR_OK;
}

gr_status gr_session_bind_input_device(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims,
                                      void *dev_ptr, size_t nbytes) {
    return gr_rt_bind_device(s, name, dtype, ndim, dims, dev_ptr, nbytes, true);
}

gr_status gr_rt_bind_device(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, void *dev_ptr,
                            size_t nbytes, bool wait_pending) {
    if (!s || !name) return gr_error(GR_ERR_INVALID, "gr_session_bind_input_device: NULL session or name");
    GR_RT_NO_TP(s, "gr_session_bind_input_device");
    int i;
    size_t need;
    GR_TRY(check_input(s, name, dtype, ndim, dims, dev_ptr, nbytes, &i, &need));
    /* the previous run may still read the buffer bound before (gr_session_run_device leaves
     * that to the caller's stream order: the documented lifetime of a bound buffer) */
    if (s->pending && wait_pending) GR_TRY(gr_session_wait(s));
    gr_rt_input *in = &s->inputs[i];
    in->version = ++s->input_versions;
    in->dev_ptr = need ? dev_ptr : NULL; /* a 0-byte input has no buffer: its placeholder stands for it */
    in->dev_bound = true;
    in->nbytes = need;
    in->dtype = dtype;
    in->ndim = ndim;
    for (int d = 0; d < ndim; d++) in->dims[d] = dims[d];
    in->set = true;
    return GR_OK;
}

/* Shape key from the bound inputs: each symbol's value, checked.
 *
 * 1. A dim that is a plain symbol binds it; two inputs disagreeing on a
 *    symbol is an error naming both inputs and the symbol.
 * 2. A symbol that appears only inside expressions ("past + 1") is solved
 *    from a dim whose expression has it as its only unbound symbol, when the
 *    expression is linear in it (found by evaluating at two points, then
 *    checked by evaluating at the solution).
 * 3. Every input dim is then evaluated and must equal the given size, and
 *    every symbol must lie in its declared range (default: >= 1). */
static const char *input_name(const gr_graph *g, int i) { return g->values.data[g->inputs.data[i]].name; }

static gr_status solve_linear(const gr_graph *g, gr_dim e, int32_t sym, int64_t *syms, int64_t want, bool *solved) {
    *solved = false;
    int64_t f0, f1;
    syms[sym] = 0;
    gr_status st = gr_dx_eval(g, e, syms, &f0);
    if (st == GR_OK) {
        syms[sym] = 1;
        st = gr_dx_eval(g, e, syms, &f1);
    }
    syms[sym] = -1;
    if (st != GR_OK) return gr_error_clear(), GR_OK;
    int64_t slope = f1 - f0, num = want - f0;
    if (slope == 0 || num % slope != 0 || num / slope < 0) return GR_OK;
    int64_t x = num / slope, check;
    syms[sym] = x;
    if (gr_dx_eval(g, e, syms, &check) != GR_OK || check != want) {
        gr_error_clear();
        syms[sym] = -1;
        return GR_OK;
    }
    *solved = true;
    return GR_OK;
}

static gr_status resolve_syms(gr_session_t s, int64_t *syms) {
    const gr_graph *g = s->graph;
    int n = g->syms.len;
    int *from = gr_malloc(sizeof(int) * (size_t)(n ? n : 1));
    bool *used = gr_calloc((size_t)(n ? n : 1), sizeof(bool));
    if (!from || !used) {
        gr_free(from, sizeof(int) * (size_t)(n ? n : 1));
        gr_free(used, (size_t)(n ? n : 1) * sizeof(bool));
        return GR_ERR_NOMEM;
    }
    for (int k = 0; k < n; k++) syms[k] = -1, from[k] = -1;
    gr_status st = GR_OK;
    for (int i = 0; i < g->inputs.len && st == GR_OK; i++)
        if (!s->inputs[i].set) st = gr_error(GR_ERR_INVALID, "input '%s' was not set before run", input_name(g, i));
    /* 1. plain symbols */
    for (int i = 0; i < g->inputs.len && st == GR_OK; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        for (int d = 0; d < v->ndim && st == GR_OK; d++) {
            int32_t sym = gr_dx_as_symbol(g, v->dims[d]);
            if (sym < 0) continue;
            int64_t have = s->inputs[i].dims[d];
            if (syms[sym] < 0) {
                syms[sym] = have;
                from[sym] = i;
            } else if (syms[sym] != have) {
                st = gr_error(GR_ERR_SHAPE, "symbolic dim '%s' is %lld in input '%s' but %lld in input '%s'", g->syms.data[sym].name,
                              (long long)syms[sym], input_name(g, from[sym]), (long long)have, v->name);
            }
        }
    }
    /* 2. symbols only inside expressions */
    for (bool progress = true; progress && st == GR_OK;) {
        progress = false;
        for (int i = 0; i < g->inputs.len && st == GR_OK; i++) {
            const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
            for (int d = 0; d < v->ndim && st == GR_OK; d++) {
                if (!gr_dx_is_sym(v->dims[d])) continue;
                memset(used, 0, (size_t)(n ? n : 1) * sizeof(bool));
                gr_dx_symbols_of(g, v->dims[d], used);
                int32_t unbound = -1, count = 0;
                for (int k = 0; k < n; k++)
                    if (used[k] && syms[k] < 0) unbound = k, count++;
                if (count != 1) continue;
                bool solved;
                st = solve_linear(g, v->dims[d], unbound, syms, s->inputs[i].dims[d], &solved);
                if (solved) from[unbound] = i, progress = true;
            }
        }
    }
    /* a symbol no input dim holds cannot be bound: left without a value (specialization
     * names what uses it, if anything does) */
    memset(used, 0, (size_t)(n ? n : 1) * sizeof(bool));
    for (int i = 0; i < g->inputs.len; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        for (int d = 0; d < v->ndim; d++) gr_dx_symbols_of(g, v->dims[d], used);
    }
    for (int k = 0; k < n && st == GR_OK; k++)
        if (syms[k] < 0 && used[k]) st = gr_error(GR_ERR_SHAPE, "symbolic dim '%s' is not bound by any input", g->syms.data[k].name);
    /* 3. ranges, then every dim against its expression */
    for (int k = 0; k < n && st == GR_OK; k++) {
        const gr_ir_symbol *sym = &g->syms.data[k];
        if (syms[k] < 0 || (syms[k] >= sym->lo && syms[k] <= sym->hi)) continue;
        char range[64];
        if (sym->hi >= GR_DX_INF) snprintf(range, sizeof range, ">= %lld", (long long)sym->lo);
        else snprintf(range, sizeof range, "in %lld..%lld", (long long)sym->lo, (long long)sym->hi);
        st = gr_error(GR_ERR_SHAPE, "symbolic dim '%s' is %lld (from input '%s'), outside its %s range (%s)", sym->name,
                      (long long)syms[k], input_name(g, from[k]), sym->declared ? "declared" : "default", range);
    }
    for (int i = 0; i < g->inputs.len && st == GR_OK; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        for (int d = 0; d < v->ndim && st == GR_OK; d++) {
            if (!gr_dx_is_sym(v->dims[d]) || gr_dx_as_symbol(g, v->dims[d]) >= 0) continue;
            int64_t want;
            st = gr_dx_eval(g, v->dims[d], syms, &want);
            if (st == GR_OK && want != s->inputs[i].dims[d]) {
                char e[160];
                gr_dx_str(g, v->dims[d], e, sizeof e);
                st = gr_error(GR_ERR_SHAPE, "input '%s': dim %d is %lld, but the graph says it is %s = %lld for this binding", v->name, d,
                              (long long)s->inputs[i].dims[d], e, (long long)want);
            }
        }
    }
    gr_free(from, sizeof(int) * (size_t)(n ? n : 1));
    gr_free(used, (size_t)(n ? n : 1) * sizeof(bool));
    return st;
}

static gr_status select_plan(gr_session_t s, gr_rt_plan **out, gr_rt_plan **rep) {
    int n = s->graph->syms.len;
    int64_t *syms = gr_malloc(sizeof(int64_t) * (size_t)n);
    if (!syms) return GR_ERR_NOMEM;
    gr_status st = gr_rt_pad_prepare(s); /* shapes.c: the masks' real-length inputs */
    if (st == GR_OK) st = resolve_syms(s, syms);
    if (st == GR_OK) st = gr_rt_probe_bind(s, syms); /* data-dependent symbols (probe.c) */
    if (st == GR_OK) gr_rt_pad_round(s, syms, true); /* shapes.c: capture sizes (policies pad, auto) */
    if (st != GR_OK) {
        gr_free(syms, sizeof(int64_t) * (size_t)n);
        return st;
    }
    st = gr_rt_generic_select(s, syms, out, rep); /* gr_rt_plan_for, and generic's bucket plan (generic.c) */
    gr_free(syms, sizeof(int64_t) * (size_t)n);
    return st;
}

gr_rt_plan *gr_rt_plan_find(gr_session_t s, const int64_t *syms) {
    int n = s->graph->syms.len;
    for (gr_rt_plan *p = s->plans; p; p = p->next)
        if (!n || !memcmp(p->sym_values, syms, sizeof(int64_t) * (size_t)n)) return p;
    return NULL;
}

gr_status gr_rt_plan_for(gr_session_t s, const int64_t *syms, gr_rt_plan **out) {
    int n = s->graph->syms.len;
    gr_rt_plan *prev = NULL;
    for (gr_rt_plan *p = s->plans; p; prev = p, p = p->next) {
        if (n && memcmp(p->sym_values, syms, sizeof(int64_t) * (size_t)n)) continue;
        if (prev) { /* most recent first */
            prev->next = p->next;
            p->next = s->plans;
            s->plans = p;
        }
        *out = p;
        return GR_OK;
    }
    if (s->opt.verbose && n) {
        fprintf(stderr, "graft: new shape key (");
        for (int k = 0; k < n; k++) {
            char name[256]; /* a model's name: no terminal escapes */
            gr_escape_text(name, sizeof name, s->graph->syms.data[k].name, false);
            fprintf(stderr, "%s%s=%lld", k ? ", " : "", name, (long long)syms[k]);
        }
        fprintf(stderr, "): compiling a plan\n");
    }
    gr_rt_plan *p;
    GR_TRY(gr_rt_plan_build(s, syms, &p));
    p->next = s->plans;
    s->plans = p;
    *out = p;
    return GR_OK;
}

/* ==== run ====================================================================================== */
gr_status gr_rt_segment_run_eager(gr_session_t s, gr_rt_plan *p, int seg) {
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

/* Graph input read by step argument value v (through a view), or -1. */
static int input_of_arg(const gr_rt_plan *p, int v) {
    const gr_value_store *st = &p->mem.values[v];
    if (st->kind == GR_STORE_ALIAS) st = &p->mem.values[st->alias_of];
    return st->kind == GR_STORE_INPUT ? (int)st->offset : -1;
}

/* A caller's device buffer bound to input i (gr_session_bind_input_device): read in place,
 * or copied into the placeholder, and mirrored to host memory where a step reads it there. */
static gr_status device_input(gr_session_t s, gr_rt_plan *p, int i) {
    gr_device *d = s->dev;
    gr_rt_input *in = &s->inputs[i];
    size_t n = p->input_bytes[i];
    if (!n) return GR_OK;
    if (p->input_host_read[i] && in->host_version != in->version) {
        if (n > in->cap || !in->data) {
            void *h = NULL;
            gr_mem_kind kind = gr_dev_caps_get(d).pinned_memory ? GR_MEM_HOST_PINNED : GR_MEM_HOST;
            GR_TRY(gr_dev_alloc(d, kind, n, &h));
            if (in->data) gr_dev_free(d, in->data);
            in->data = h;
            in->cap = n;
        }
        /* the host reads it when the step is launched: it must be there now */
        GR_TRY(gr_dev_memcpy(d, s->stream, in->data, in->dev_ptr, n, GR_COPY_D2H));
        GR_TRY(gr_dev_stream_sync(d, s->stream));
        in->host_version = in->version;
        s->stats.copies++;
        s->stats.bytes_copied += n;
    }
    if (p->mem.values[p->g->inputs.data[i]].kind != GR_STORE_INPUT) return GR_OK; /* read only on the host */
    if (p->input_in_place[i]) {
        s->stats.inputs_in_place++;
        return GR_OK;
    }
    if (p->input_version[i] == in->version) return GR_OK;
    GR_TRY(gr_rt_input_placeholder(s, p, i));
    bool padded = false; /* shape policy pad: zero-filled past the real extent (shapes.c) */
    GR_TRY(gr_rt_pad_input(s, p, i, in->dev_ptr, GR_COPY_D2D, &padded));
    if (padded) {
        p->input_version[i] = in->version;
        return GR_OK;
    }
    GR_TRY(gr_dev_memcpy(d, s->stream, p->input_dev[i], in->dev_ptr, n, GR_COPY_D2D));
    p->input_version[i] = in->version;
    s->stats.copies++;
    s->stats.bytes_copied += n;
    return GR_OK;
}

/* Inputs a captured library call reads (input_libcall): the first address a run reads one
 * at is pinned. A run that finds it elsewhere (bound to another buffer, or set from host
 * memory into the placeholder) moves a bound input to its placeholder for good (copied from
 * now on, as a buffer that changes every call needs) and drops the graphs of the segments
 * whose library calls read it, to be captured again with the new address. */
static gr_status pin_libcall_inputs(gr_session_t s, gr_rt_plan *p) {
    for (int i = 0; i < p->g->inputs.len; i++) {
        if (!p->input_libcall[i]) continue;
        void *addr = gr_rt_input_addr(s, p, i);
        if (!p->input_pinned[i] || addr == p->input_pinned[i]) {
            p->input_pinned[i] = addr;
            continue;
        }
        if (s->inputs[i].dev_bound && p->input_in_place[i]) {
            p->input_in_place[i] = false;
            p->input_version[i] = 0;
            GR_TRY(device_input(s, p, i));
            s->stats.inputs_in_place--; /* (counted by the first pass) */
            addr = gr_rt_input_addr(s, p, i);
        }
        p->input_pinned[i] = addr;
        bool waited = false; /* a graph about to be dropped may still run: the last run must be over */
        for (int seg = 0; seg < p->segs.len; seg++) {
            const gr_segment *sg = &p->segs.data[seg];
            if (!p->seg_state[seg].graph && !p->seg_state[seg].exec) continue;
            bool reads = false;
            for (int k = sg->first_step; k < sg->first_step + sg->n_steps && !reads; k++) {
                const gr_step *step = &p->steps.data[k];
                if (step->kind != GR_STEP_LIBCALL) continue;
                for (int a = 0; a < step->n_args && !reads; a++)
                    reads = step->args[a].kind != GR_ARG_LITERAL && input_of_arg(p, step->args[a].value) == i;
            }
            if (!reads) continue;
            if (!waited && s->pending) GR_TRY(gr_session_wait(s));
            waited = true;
            gr_rt_segment_recapture(s, p, seg);
        }
    }
    return GR_OK;
}

/* the placeholder of input i in the current binding's plan, for writing on the device */
static gr_status own_placeholder(gr_session_t s, int i, gr_rt_plan **out) {
    if (s->tp) return gr_error(GR_ERR_UNSUPPORTED, "writing into an input's placeholder: not under tensor parallelism");
    if (i < 0 || i >= s->graph->inputs.len) return gr_error(GR_ERR_INVALID, "input index %d out of range", i);
    if (s->pending) GR_TRY(gr_session_wait(s));
    gr_rt_plan *rep_unused;
    GR_TRY(select_plan(s, out, &rep_unused));
    gr_rt_generic_inputs(s, *out); /* generic: a shared placeholder is this binding's from here */
    const gr_rt_input *in = &s->inputs[i];
    const char *name = s->graph->values.data[s->graph->inputs.data[i]].name;
    if (in->dev_bound || (*out)->mem.values[(*out)->g->inputs.data[i]].kind != GR_STORE_INPUT)
        return gr_error(GR_ERR_UNSUPPORTED, "input '%s' has no placeholder of its own to write into", name);
    GR_TRY(gr_rt_input_placeholder(s, *out, i)); /* (made on first use) */
    if (!in->set || (*out)->input_bytes[i] != in->nbytes) /* (shape policy pad: a placeholder of another layout) */
        return gr_error(GR_ERR_UNSUPPORTED, "input '%s': its placeholder does not hold the bound shape as it is", name);
    return GR_OK;
}

gr_status gr_rt_input_zero(gr_session_t s, int i) {
    gr_rt_plan *p;
    GR_TRY(own_placeholder(s, i, &p));
    GR_TRY(gr_dev_memset(s->dev, s->stream, p->input_dev[i], 0, p->input_bytes[i]));
    p->input_version[i] = s->inputs[i].version;
    return GR_OK;
}

gr_status gr_rt_input_write_rows(gr_session_t s, int i, const void *src, size_t src_pitch, size_t dst_pitch, size_t row_bytes,
                                 size_t rows) {
    gr_rt_plan *p;
    GR_TRY(own_placeholder(s, i, &p));
    gr_rt_input *in = &s->inputs[i];
    const char *name = s->graph->values.data[s->graph->inputs.data[i]].name;
    size_t need = 0;
    if (rows && (__builtin_mul_overflow(rows - 1, dst_pitch, &need) || __builtin_add_overflow(need, row_bytes, &need) ||
                 need > p->input_bytes[i] || row_bytes > dst_pitch))
        return gr_error(GR_ERR_INVALID, "input '%s': %zu rows of %zu bytes at pitch %zu do not fit its %zu bytes", name, rows, row_bytes,
                        dst_pitch, p->input_bytes[i]);
    if (p->input_version[i] != in->version) { /* its host value first: the run must not copy it over what is written */
        if (p->input_bytes[i])
            GR_TRY(gr_dev_memcpy(s->dev, s->stream, p->input_dev[i], in->data, p->input_bytes[i], GR_COPY_H2D));
        p->input_version[i] = in->version;
    }
    return gr_dev_memcpy2d(s->dev, s->stream, p->input_dev[i], dst_pitch, src, src_pitch, row_bytes, rows, GR_COPY_D2D);
}

gr_status gr_session_run(gr_session_t s) {
    if (s && s->tp) return gr_rt_tp_run(s); /* every rank, one thread each */
    return gr_rt_run_one(s);
}

/* Whether a run may be queued on the device behind the pending one instead of waiting for
 * it on the host: the steady state of graph mode, where a run only copies and repoints inputs,
 * refreshes a generic table from constant host memory and launches existing execs, all ordered
 * on the session's stream. With symbolic dims, the plans the run will take are looked up first
 * (next_plans: no plan built, evicted or reordered): they must exist, and every segment with
 * work must replay an exec it already has, with no exec update to apply (shape policy update's
 * shared exec holding another binding's graph) and no decision left to measure (mode auto,
 * shape policy auto, generic's proof). Anything else (a new binding, a capture, eager or timed
 * segments, probes of data-dependent dims, a padded binding's new real length, tensor
 * parallelism) waits as before: those may free or rewrite what the pending run reads. */
static const char *next_plans(gr_session_t s, gr_rt_plan **p, gr_rt_plan **rep) {
    int n = s->graph->syms.len;
    if (gr_rt_probe_needed(s->graph)) return "the model has data-dependent dims";
    int64_t *syms = gr_malloc(sizeof(int64_t) * (size_t)n);
    if (!syms) return "out of memory";
    const char *why = NULL;
    /* a binding resolve_syms refuses: the run waits, then reports it (setting the error again) */
    if (resolve_syms(s, syms) != GR_OK) why = "the binding is not resolved";
    if (!why && !gr_rt_pad_peek(s, syms)) why = "a padded binding's real length changes";
    if (!why && !gr_rt_generic_peek(s, syms, p, rep)) why = "a new binding (its plan is built by this run)";
    gr_free(syms, sizeof(int64_t) * (size_t)n);
    return why;
}

static const char *queue_refusal(gr_session_t s, int *at_seg) {
    gr_rt_plan *p = s->current, *rep = NULL;
    *at_seg = -1;
    if (!p) return "no plan yet";
    if (s->tp) return "tensor parallel";
    if (s->opt.mode == GR_MODE_EAGER) return "eager mode";
    if (s->graph->syms.len) {
        const char *why = next_plans(s, &p, &rep);
        if (why) return why;
    } else if (s->plans != p || p->next) return "several plans";
    for (int seg = 0; seg < p->segs.len; seg++) {
        const gr_segment *sg = &p->segs.data[seg];
        bool work = false;
        for (int i = sg->first_step; i < sg->first_step + sg->n_steps && !work; i++)
            work = p->steps.data[i].kind == GR_STEP_KERNEL || p->steps.data[i].kind == GR_STEP_LIBCALL;
        if (!work) continue;
        *at_seg = seg;
        if (!sg->graphable) return "it has kernels and is not captured";
        /* the plan whose exec runs it: the bucket's under generic (policy generic, or auto's choice) */
        gr_rt_plan *q = p;
        if (s->autopol) {
            int policy = gr_rt_autopol_policy(s, p, seg);
            if (policy < 0) return "shape policy auto has not decided it";
            if (policy == GR_SHAPES_GENERIC) q = gr_rt_generic_runner(p, rep, seg);
        } else if (s->opt.shape_policy == GR_SHAPES_GENERIC) q = gr_rt_generic_runner(p, rep, seg); /* as gr_rt_run_segment */
        if (!q) return "shape policy generic has not proven it for its bucket";
        const gr_rt_segment *ss = &q->seg_state[seg];
        if (ss->state != GR_SEG_CAPTURED || !ss->exec) return "it has kernels and is not captured";
        if (s->opt.mode == GR_MODE_AUTO && !ss->decided) return "mode auto is still timing it";
        if (ss->exec_shared && !gr_rt_update_holds(s, q, seg)) return "its shared exec holds another binding's graph";
        *at_seg = -1;
    }
    return NULL;
}

/* Verbose: says why a run waits for the previous one on the host (each time the reason
 * changes), since a host that waits cannot overlap the caller's next work with the GPU's. */
static bool run_may_queue(gr_session_t s) {
    int seg;
    const char *why = queue_refusal(s, &seg);
    if (why && s->opt.verbose && (why != s->wait_why || seg != s->wait_seg)) {
        if (seg >= 0) fprintf(stderr, "graft: a run waits for the previous one on the host: segment %d: %s\n", seg, why);
        else fprintf(stderr, "graft: a run waits for the previous one on the host: %s\n", why);
    }
    s->wait_why = why;
    s->wait_seg = seg;
    return !why;
}

gr_status gr_rt_run_one(gr_session_t s) { return gr_rt_run_queued(s, false); }

gr_status gr_rt_run_queued(gr_session_t s, bool may_queue) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_run: session is NULL");
    if (s->pending && !(may_queue && run_may_queue(s))) {
        GR_TRY(gr_session_wait(s));
        s->waits_on_host++;
    }
    GR_TRY(gr_rt_autopol_revise(s)); /* shape policy auto: re-chosen as the calls per binding grow */
    gr_rt_plan *p, *rep = NULL;
    GR_TRY(select_plan(s, &p, &rep));
    gr_device *d = s->dev;
    /* a run invalidates every output handle of earlier runs, success or not */
    s->generation++;
    s->has_run = false;
    memset(&s->stats, 0, sizeof s->stats);
    s->run_t0 = gr_dev_clock_us(d);
    gr_status st = GR_OK;
    gr_error_set_node(-1);
    if (s->ev_start) st = gr_dev_event_record(d, s->ev_start, s->stream);
    /* external inputs into their placeholders (outside any graph), only when
     * they changed since this plan last copied them */
    gr_rt_generic_inputs(s, p); /* generic: shared placeholders another plan filled are refilled */
    for (int i = 0; i < p->g->inputs.len && st == GR_OK; i++) {
        gr_rt_input *in = &s->inputs[i];
        if (in->dev_bound) {
            st = device_input(s, p, i);
            continue;
        }
        if (p->mem.values[p->g->inputs.data[i]].kind != GR_STORE_INPUT || !p->input_bytes[i]) continue;
        if (p->input_version[i] == in->version) continue;
        st = gr_rt_input_placeholder(s, p, i);
        if (st != GR_OK) break;
        bool padded = false; /* shape policy pad: zero-filled past the real extent (shapes.c) */
        st = gr_rt_pad_input(s, p, i, in->data, GR_COPY_H2D, &padded);
        if (st != GR_OK) break;
        if (padded) {
            p->input_version[i] = in->version;
            continue;
        }
        st = gr_dev_memcpy(d, s->stream, p->input_dev[i], in->data, p->input_bytes[i], GR_COPY_H2D);
        if (st != GR_OK) break;
        p->input_version[i] = in->version;
        s->stats.copies++;
        s->stats.bytes_copied += p->input_bytes[i];
    }
    if (st == GR_OK) st = pin_libcall_inputs(s, p);
    for (int seg = 0; seg < p->segs.len && st == GR_OK; seg++) st = gr_rt_run_segment(s, p, rep, seg); /* autopol.c */
    if (st == GR_OK) st = gr_rt_autopol_decide(s, p); /* shape policy auto: the segments measured in this run */
    if (st == GR_OK) gr_rt_autopol_count(s, p);
    if (st == GR_OK && s->ev_end) st = gr_dev_event_record(d, s->ev_end, s->stream);
    if (st != GR_OK && gr_error_node() >= 0 && gr_error_node() < p->g->nodes.len) {
        /* a kernel of a replayed graph failed: name the node it is about */
        char where[512];
        gr_ir_node_where(p->g, &p->g->nodes.data[gr_error_node()], where, sizeof where);
        gr_error_set_node(-1);
        gr_error_prefix(st, "%s", where);
    }
    if (st != GR_OK) {
        /* the device may hold partial work: drain it; placeholders must be re-filled */
        gr_dev_stream_sync(d, s->stream);
        for (int i = 0; i < p->g->inputs.len; i++) p->input_version[i] = 0;
        return st;
    }
    s->stats.arena_bytes = p->mem.arena_bytes;
    s->stats.weight_bytes = p->mem.const_bytes + s->weight_bytes;
    s->stats.segments = p->segs.len;
    for (int seg = 0; seg < p->segs.len; seg++)
        if (p->seg_state[seg].state == GR_SEG_CAPTURED) s->stats.segments_in_graphs++;
    gr_rt_stats_totals(s, &s->stats);
    s->stats.compile_us = p->compile_us;
    s->stats.capture_us = p->capture_us;
    s->current = p;
    s->pending = true;
    s->has_run = true;
    return GR_OK;
}

gr_status gr_session_wait(gr_session_t s) {
    if (s && s->tp && s->pending) return gr_rt_tp_wait(s);
    return gr_rt_wait_one(s);
}

gr_status gr_rt_wait_one(gr_session_t s) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_wait: session is NULL");
    if (!s->pending) return GR_OK;
    gr_device *d = s->dev;
    s->pending = false;
    gr_status st = gr_dev_stream_sync(d, s->stream);
    if (st != GR_OK) {
        s->has_run = false; /* outputs of a failed run are not readable */
        return st;
    }
    s->stats.time_us = gr_dev_clock_us(d) - s->run_t0;
    if (s->ev_start && s->ev_end) gr_dev_event_elapsed_us(d, s->ev_start, s->ev_end, &s->stats.gpu_time_us);
    /* graft's allocations plus its graphs' measured memory (the driver's, not an allocation of ours) */
    s->stats.device_bytes = gr_dev_mem_in_use(d) + s->graph_bytes;
    return GR_OK;
}

double gr_session_clock_us(gr_session_t s) { return s && s->dev ? gr_dev_clock_us(s->dev) : 0.0; }

/* ==== outputs ===================================================================================== */
static gr_status check_output_now(gr_session_t s, gr_output o);
static gr_status check_output(gr_session_t s, gr_output o) {
    if (!s) return gr_error(GR_ERR_INVALID, "session is NULL");
    if (s->pending) GR_TRY(gr_session_wait(s));
    return check_output_now(s, o);
}

/* the checks alone: the run may still be in flight (its plan and generation are set at enqueue) */
static gr_status check_output_now(gr_session_t s, gr_output o) {
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
    if (!s || !info) return gr_error(GR_ERR_INVALID, "gr_session_output_info: NULL argument");
    GR_TRY(check_output_now(s, o)); /* the plan (and its dims) is set at enqueue: no wait */
    gr_rt_plan *p = s->current;
    const gr_ir_value *v = &p->g->values.data[p->g->outputs.data[o.index]];
    memset(info, 0, sizeof *info);
    info->name = v->name;
    info->dtype = v->dtype;
    info->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) info->dims[d] = v->dims[d].size;
    int axis;
    int64_t outer, padded;
    size_t inner;
    gr_rt_pad_output(s, p, o.index, info->dims, &axis, &outer, &inner, &padded); /* pad: the real dims */
    return GR_OK;
}

size_t gr_session_output_nbytes(gr_session_t s, gr_output o) {
    if (check_output(s, o) != GR_OK) return 0;
    gr_rt_plan *p = s->current;
    const gr_ir_value *v = &p->g->values.data[p->g->outputs.data[o.index]];
    int64_t dims[GR_MAX_DIMS], outer, padded;
    int axis;
    size_t inner;
    if (gr_rt_pad_output(s, p, o.index, dims, &axis, &outer, &inner, &padded)) return (size_t)outer * (size_t)dims[axis] * inner;
    return (size_t)gr_ir_value_numel(v) * gr_dtype_size(v->dtype);
}

gr_status gr_session_output_read(gr_session_t s, gr_output o, void *dst, size_t nbytes) {
    GR_TRY(check_output(s, o));
    gr_rt_plan *p = s->current;
    int v = p->g->outputs.data[o.index];
    const gr_ir_value *val = &p->g->values.data[v];
    size_t need = (size_t)gr_ir_value_numel(val) * gr_dtype_size(val->dtype);
    int64_t pdims[GR_MAX_DIMS], outer = 0, padded = 0;
    int axis = -1;
    size_t inner = 0;
    bool cut = gr_rt_pad_output(s, p, o.index, pdims, &axis, &outer, &inner, &padded); /* pad: the real rows only */
    if (cut) need = (size_t)outer * (size_t)pdims[axis] * inner;
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
    if (cut) {
        size_t r = (size_t)pdims[axis] * inner, c = (size_t)padded * inner;
        for (int64_t k = 0; k < outer && r; k++)
            GR_TRY(gr_dev_memcpy(s->dev, s->stream, (char *)dst + (size_t)k * r, (const char *)src + (size_t)k * c, r, GR_COPY_D2H));
        return gr_dev_stream_sync(s->dev, s->stream);
    }
    GR_TRY(gr_dev_memcpy(s->dev, s->stream, dst, src, need, GR_COPY_D2H));
    return gr_dev_stream_sync(s->dev, s->stream);
}

gr_status gr_session_output_device_ptr(gr_session_t s, gr_output o, void **dev_ptr) {
    if (dev_ptr) *dev_ptr = NULL;
    if (!dev_ptr) return gr_error(GR_ERR_INVALID, "gr_session_output_device_ptr: dev_ptr is NULL");
    GR_TRY(check_output(s, o));
    return gr_rt_output_device_ptr(s, o, dev_ptr);
}

gr_status gr_rt_output_device_ptr(gr_session_t s, gr_output o, void **dev_ptr) {
    *dev_ptr = NULL;
    GR_TRY(check_output_now(s, o));
    gr_rt_plan *p = s->current;
    int v = p->g->outputs.data[o.index];
    const gr_ir_value *val = &p->g->values.data[v];
    const gr_value_store *st = &p->mem.values[v];
    if (st->kind == GR_STORE_ALIAS) st = &p->mem.values[st->alias_of];
    if (st->kind == GR_STORE_HOST)
        return gr_error(GR_ERR_UNSUPPORTED, "output '%s' is kept in host memory (a host input): read it with gr_session_output_read",
                        val->name);
    if (!gr_ir_value_numel(val)) return GR_OK; /* no elements: no address */
    int64_t pdims[GR_MAX_DIMS], outer, padded;
    int axis;
    size_t inner;
    if (gr_rt_pad_output(s, p, o.index, pdims, &axis, &outer, &inner, &padded) && outer > 1)
        return gr_error(GR_ERR_UNSUPPORTED,
                        "output '%s' was computed padded (shape policy pad) along axis %d, which is not its outermost: its real "
                        "part is not contiguous; read it with gr_session_output_read",
                        val->name, axis);
    *dev_ptr = gr_rt_value_addr(s, p, v); /* padded along the outermost axis: the real part is its prefix */
    if (!*dev_ptr) return gr_error(GR_ERR_INTERNAL, "output '%s' has no storage", val->name);
    return GR_OK;
}

gr_status gr_session_stats(gr_session_t s, gr_run_stats *out) {
    if (!s || !out) return gr_error(GR_ERR_INVALID, "gr_session_stats: NULL argument");
    if (s->pending) GR_TRY(gr_session_wait(s));
    *out = s->stats;
    gr_rt_stats_totals(s, out);
    if (!s->has_run && s->plans) {
        out->arena_bytes = s->plans->mem.arena_bytes;
        out->weight_bytes = s->plans->mem.const_bytes + s->weight_bytes;
        out->segments = s->plans->segs.len;
    }
    return GR_OK;
}
