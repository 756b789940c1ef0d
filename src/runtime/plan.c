/* runtime/plan — compile a graph for one concrete shape key: the pass
 * pipeline, device memory (arena, constants, input placeholders), kernel
 * preparation; and the per-step argument binding used by every mode. */
#include "runtime/runtime-impl.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== build ======================================================================== */
/* GR_ARENA_MAX_SHAPE: gives p's arena values the offsets the largest binding's
 * plan gave them, if each fits its slot and no two values live at the same
 * time then overlap (checked with p's own live ranges, so a plan whose steps
 * differ from the largest binding's is still placed correctly or refused). */
static bool adopt_max_offsets(gr_session_t s, gr_rt_plan *p) {
    /* shape policy generic: the bucket's plan, so a binding runs at its bucket's addresses (generic.c) */
    const gr_rt_plan *m = s->layout_plan ? s->layout_plan : s->max_plan;
    gr_mem_plan *mem = &p->mem;
    int n = 0;
    for (int v = 0; v < mem->n_values; v++) {
        gr_value_store *st = &mem->values[v];
        if (st->kind != GR_STORE_ARENA) continue;
        if (v >= m->mem.n_values || m->mem.values[v].kind != GR_STORE_ARENA || m->mem.values[v].bytes < st->bytes) {
            snprintf(p->arena_note, sizeof p->arena_note, "value '%.60s' (%zu bytes) has no slot of that size in the largest binding's plan",
                     p->g->values.data[v].name, st->bytes);
            return false;
        }
        n++;
    }
    for (int a = 0; a < mem->n_values; a++) {
        const gr_value_store *x = &mem->values[a];
        if (x->kind != GR_STORE_ARENA || !x->bytes) continue;
        size_t xo = m->mem.values[a].offset;
        for (int b = a + 1; b < mem->n_values; b++) {
            const gr_value_store *y = &mem->values[b];
            if (y->kind != GR_STORE_ARENA || !y->bytes) continue;
            if (x->last_step < y->first_step || y->last_step < x->first_step) continue;
            size_t yo = m->mem.values[b].offset;
            if (xo < yo + y->bytes && yo < xo + x->bytes) {
                snprintf(p->arena_note, sizeof p->arena_note,
                         "values '%.50s' and '%.50s' are live together here but share memory in the largest binding's plan",
                         p->g->values.data[a].name, p->g->values.data[b].name);
                return false;
            }
        }
    }
    for (int v = 0; v < mem->n_values; v++)
        if (mem->values[v].kind == GR_STORE_ARENA) mem->values[v].offset = m->mem.values[v].offset;
    (void)n;
    return true;
}

/* Graph input read by step argument `v` (through a view), or -1. */
static int input_of(const gr_rt_plan *p, int v) {
    const gr_value_store *st = &p->mem.values[v];
    if (st->kind == GR_STORE_ALIAS) st = &p->mem.values[st->alias_of];
    return st->kind == GR_STORE_INPUT || st->kind == GR_STORE_HOST ? (int)st->offset : -1;
}

/* How a caller's device buffer bound to each input is read (runtime-impl.h). Kernel
 * arguments can be repointed in a replayed graph (the graph manager compares and patches
 * them, graphs.c); a library call's captured nodes cannot, so an input a library call
 * reads inside a graph is read in place only at its pinned address (input_libcall). */
static void mark_device_input_use(gr_session_t s, gr_rt_plan *p) {
    int ni = p->g->inputs.len;
    bool graphs = s->opt.mode != GR_MODE_EAGER;
    bool repoint = !graphs || gr_dev_caps_get(s->dev).node_set_args;
    /* Shape policies update and auto may run a segment through the position's one exec, which
     * holds another binding's graph until an exec update applies this one's: a node patch there
     * would keep that binding's launch geometry, so a moved buffer means recording the segment
     * again and updating the exec (0.6-0.9 ms for a 140-kernel segment on the H100), on every
     * call whose caller allocates fresh inputs. Copying the buffer into the placeholder is one
     * copy node's worth (a few us for token ids); it is what those policies do. */
    if (graphs && (s->opt.shape_policy == GR_SHAPES_UPDATE || s->opt.shape_policy == GR_SHAPES_AUTO)) repoint = false;
    for (int i = 0; i < ni; i++) {
        p->input_in_place[i] = p->mem.values[p->g->inputs.data[i]].kind == GR_STORE_INPUT && repoint;
        p->input_host_read[i] = p->mem.values[p->g->inputs.data[i]].kind == GR_STORE_HOST;
    }
    for (int k = 0; k < p->steps.len; k++) {
        const gr_step *st = &p->steps.data[k];
        for (int a = 0; a < st->n_args; a++) {
            if (st->args[a].kind == GR_ARG_LITERAL) continue;
            int i = input_of(p, st->args[a].value);
            if (i < 0 || i >= ni) continue;
            if (st->args[a].kind == GR_ARG_HOST_SCALAR) p->input_host_read[i] = true;
            else if (st->kind == GR_STEP_LIBCALL && graphs) p->input_libcall[i] = true;
        }
    }
}

static gr_status prepare_device(gr_session_t s, gr_rt_plan *p) {
    gr_device *d = s->dev;
    gr_graph *g = p->g;
    if (s->max_plan && s->shared_arena) {
        if (adopt_max_offsets(s, p)) {
            p->arena = s->shared_arena;
            p->arena_shared = true;
        } else if (p->mem.arena_bytes <= s->shared_arena_bytes) {
            /* a different structure (a dim of 1 turns copies into views, ...): its own
             * layout, in the same memory; runs never overlap and a run's outputs are
             * stale once another runs, so one arena serves both */
            p->arena = s->shared_arena;
            p->arena_shared = true;
            p->arena_own_layout = true;
        }
    }
    if (!p->arena_shared && p->mem.arena_bytes) GR_TRY(gr_dev_alloc(d, GR_MEM_DEVICE, p->mem.arena_bytes, &p->arena));
    if (p->mem.const_bytes) GR_TRY(gr_dev_alloc(d, GR_MEM_DEVICE, p->mem.const_bytes, &p->consts));
    int ni = g->inputs.len;
    p->input_dev = gr_calloc((size_t)ni, sizeof(void *));
    p->input_bytes = gr_calloc((size_t)ni, sizeof(size_t));
    p->input_version = gr_calloc((size_t)ni, sizeof(uint64_t));
    p->input_in_place = gr_calloc((size_t)ni, sizeof(bool));
    p->input_host_read = gr_calloc((size_t)ni, sizeof(bool));
    p->input_libcall = gr_calloc((size_t)ni, sizeof(bool));
    p->input_pinned = gr_calloc((size_t)ni, sizeof(void *));
    p->input_borrowed = gr_calloc((size_t)ni, sizeof(bool));
    if (!p->input_dev || !p->input_bytes || !p->input_version || !p->input_in_place || !p->input_host_read ||
        !p->input_libcall || !p->input_pinned || !p->input_borrowed)
        return GR_ERR_NOMEM;
    mark_device_input_use(s, p);
    for (int i = 0; i < ni; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        p->input_bytes[i] = (size_t)gr_ir_value_numel(v) * gr_dtype_size(v->dtype);
        /* an input that may be read in place gets its placeholder when something needs it
         * (host data, a copy, zeros): a caller's buffer bound to it costs no second copy */
        if (p->input_in_place[i] && p->input_bytes[i]) continue;
        GR_TRY(gr_rt_input_placeholder(s, p, i));
    }
    /* the plan's own constants: one upload, then they never move; weights: the session's copies */
    p->weight_addr = gr_calloc((size_t)g->values.len + 1, sizeof(void *));
    if (!p->weight_addr) return GR_ERR_NOMEM;
    /* the constants go up in one copy through a host image of the region (a copy per constant was
     * 6 device calls per GPT-2 plan, each a synchronous round trip from pageable memory on CUDA) */
    char *image = p->mem.const_bytes ? gr_calloc(1, p->mem.const_bytes) : NULL;
    if (p->mem.const_bytes && !image) return GR_ERR_NOMEM;
    gr_status rc = GR_OK;
    for (int v = 0; v < g->values.len && rc == GR_OK; v++) {
        const gr_value_store *st = &p->mem.values[v];
        if (st->kind == GR_STORE_WEIGHT) rc = gr_rt_weight(s, g->values.data[v].data, &p->weight_addr[v]);
        else if (st->kind == GR_STORE_CONST && st->bytes) memcpy(image + st->offset, g->values.data[v].data, st->bytes);
    }
    if (rc == GR_OK && image) rc = gr_dev_memcpy(d, s->stream, p->consts, image, p->mem.const_bytes, GR_COPY_H2D);
    if (rc == GR_OK) rc = gr_dev_stream_sync(d, s->stream); /* the image is freed next */
    if (image) gr_free(image, p->mem.const_bytes);
    GR_TRY(rc);
    p->funcs = gr_calloc((size_t)p->steps.len, sizeof(gr_kfunc *));
    if (!p->funcs) return GR_ERR_NOMEM;
    /* shape policy generic: kernels read their slots from the plan's device table (generic.c) */
    size_t table_bytes = sizeof(bool) * (size_t)(p->steps.len ? p->steps.len : 1);
    bool *table = gr_calloc(1, table_bytes);
    if (!table) return GR_ERR_NOMEM;
    gr_status trc = gr_rt_generic_plan_tables(s, p, table);
    if (trc != GR_OK) {
        gr_free(table, table_bytes);
        return trc;
    }
    /* symbolic dims: shape-generic kernels, so a new binding's plan compiles nothing
     * (device.h, GR_KPREP_GENERIC); a static model keeps literal, faster kernels */
    unsigned kflags = (s->graph->syms.len > 0 ? GR_KPREP_GENERIC : 0) | GR_KPREP_BORROW /* steps outlive funcs */
                      | GR_KPREP_VERIFIED; /* checked just below, or after each pass that made it */
    /* the kernels the prepares below would compile, compiled ahead on several threads (CUDA:
     * cuda-kernel.c, kernels_warm); verified first where the passes did not */
    if (gr_dev_caps_get(d).kernels_warm) {
        int n = 0;
        const gr_kernel **ks = gr_malloc(sizeof *ks * (size_t)(p->steps.len ? p->steps.len : 1));
        unsigned *fl = gr_malloc(sizeof *fl * (size_t)(p->steps.len ? p->steps.len : 1));
        gr_status wrc = ks && fl ? GR_OK : GR_ERR_NOMEM;
        for (int i = 0; i < p->steps.len && wrc == GR_OK; i++) {
            const gr_step *st = &p->steps.data[i];
            if (st->kind != GR_STEP_KERNEL || (!GR_VERIFY_EVERY_KERNEL && gr_kernel_verify(st->kernel) != GR_OK)) continue;
            ks[n] = st->kernel;
            fl[n++] = kflags | (table[i] ? GR_KPREP_SLOT_TABLE : 0);
        }
        gr_error_clear();
        if (wrc == GR_OK) wrc = gr_dev_kernels_warm(d, ks, fl, n);
        gr_free(ks, sizeof *ks * (size_t)(p->steps.len ? p->steps.len : 1));
        gr_free(fl, sizeof *fl * (size_t)(p->steps.len ? p->steps.len : 1));
        if (wrc != GR_OK) {
            gr_free(table, table_bytes);
            return wrc;
        }
    }
    for (int i = 0; i < p->steps.len; i++) {
        gr_step *st = &p->steps.data[i];
        if (st->kind == GR_STEP_KERNEL) {
            /* what lowering and fusion made, checked once (passes.h GR_VERIFY_EVERY_KERNEL) */
            gr_status rc = GR_VERIFY_EVERY_KERNEL ? GR_OK : gr_kernel_verify(st->kernel);
            if (rc != GR_OK) rc = gr_error_prefix(rc == GR_ERR_NOMEM ? rc : GR_ERR_INTERNAL, "plan kernel '%s': ", st->kernel->name);
            if (rc == GR_OK) rc = gr_dev_kernel_prepare_flags(d, st->kernel, kflags | (table[i] ? GR_KPREP_SLOT_TABLE : 0), &p->funcs[i]);
            if (rc != GR_OK) {
                gr_free(table, table_bytes);
                return rc == GR_ERR_INTERNAL ? rc : gr_error_prefix(rc, "preparing kernel '%s'", st->kernel->name);
            }
        }
        if (st->kind == GR_STEP_KERNEL || st->kind == GR_STEP_LIBCALL) p->n_kernels++;
    }
    gr_free(table, table_bytes);
    return GR_OK;
}

/* Process-wide debug hook (tests). Set before sessions are used; the lock
 * keeps fn and user a matching pair for a plan built on another thread. */
static pthread_mutex_t step_hook_lock = PTHREAD_MUTEX_INITIALIZER;
static gr_rt_step_hook step_hook;
static void *step_hook_user;
void gr_rt_debug_set_step_hook(gr_rt_step_hook fn, void *user) {
    pthread_mutex_lock(&step_hook_lock);
    step_hook = fn;
    step_hook_user = user;
    pthread_mutex_unlock(&step_hook_lock);
}
static gr_rt_step_hook get_step_hook(void **user) {
    pthread_mutex_lock(&step_hook_lock);
    gr_rt_step_hook fn = step_hook;
    *user = step_hook_user;
    pthread_mutex_unlock(&step_hook_lock);
    return fn;
}

/* What the plan build watches the pipeline for: the test hook, which
 * rewrites the fused steps before memory planning, inside the one pipeline
 * (it lets tests insert host steps that no op lowers to yet), and the wall
 * time of each pass, which --verbose prints (bench/compile_time.py reads it). */
#define PLAN_MAX_PHASES 16
typedef struct {
    gr_rt_step_hook fn; /* taken once per plan */
    void *user;
    double t_last;
    int n;
    const char *name[PLAN_MAX_PHASES];
    double us[PLAN_MAX_PHASES];
} plan_observer;

static void phase_done(plan_observer *o, const char *name) {
    double now = gr_now_us();
    if (o->n < PLAN_MAX_PHASES) {
        o->name[o->n] = name;
        o->us[o->n++] = now - o->t_last;
    }
    o->t_last = now;
}

static gr_status after_pass(void *user, const char *pass, gr_compiled *c) {
    plan_observer *o = user;
    phase_done(o, strcmp(pass, "input") ? pass : "clone"); /* "input": the graph as cloned */
    if (!o->fn || strcmp(pass, "fuse")) return GR_OK;
    gr_status st = o->fn(o->user, c->g, &c->steps);
    o->t_last = gr_now_us(); /* the hook's time is nobody's phase */
    return st;
}

void gr_rt_plan_pipeline_opts(gr_session_t s, gr_pipeline_opts *po) {
    /* A symbolic graph's weight-only subgraphs were folded once at session creation; what folds
     * here depends on the binding. Folding costs about 12 ns per element and op on the host for
     * every new binding (simulator interpreter, measured 2026-11-23 on the 2-core dev machine):
     * the dynamic GPT-2 export's [seq, seq] masks took 0.5 of its 0.8 ms of folding at seq 64;
     * the cost grows with seq^2 (an extrapolation: about 30 ms at seq 512). So values growing faster than linearly with the
     * symbols stay kernels (fold_linear_only); vectors over one symbol still fold. */
    *po = (gr_pipeline_opts){.no_partition = s->opt.no_partition != 0, .fold_linear_only = s->graph->syms.len > 0,
                             .src_marked = true, .no_fuse_attention = s->opt.no_fuse_attention != 0,
                             .fuse_attention_f32 = s->opt.fuse_attention_f32 != 0,
                             .no_fuse_epilogue = s->opt.no_fuse_epilogue != 0,
                             /* generic: attention's activation products as kernels, whose sizes come from the
                              * slot table (in eager mode too, so an eager session runs the same kernels) */
                             .activation_matmul_kernels = s->generic_infra && s->graph->syms.len > 0};
}

static gr_status plan_build(gr_session_t s, const int64_t *sym_values, gr_rt_plan **out) {
    *out = NULL;
    double t0 = gr_now_us();
    gr_rt_plan *p = gr_calloc(1, sizeof *p);
    if (!p) return GR_ERR_NOMEM;
    gr_status st;
    int n_syms = s->graph->syms.len;
    p->n_syms = n_syms;
    p->serial = ++s->plan_serials;
    p->sym_values = gr_malloc(sizeof(int64_t) * (size_t)n_syms);
    if (!p->sym_values) {
        st = GR_ERR_NOMEM;
        goto fail;
    }
    /* no values: a graph whose inputs are concrete, compiled at creation; a symbol only
     * its attributes use has no value, and specialization names it */
    for (int k = 0; k < n_syms; k++) p->sym_values[k] = sym_values ? sym_values[k] : -1;
    plan_observer obs;
    memset(&obs, 0, sizeof obs);
    obs.fn = get_step_hook(&obs.user);
    obs.t_last = gr_now_us();
    gr_pipeline_opts po;
    gr_rt_plan_pipeline_opts(s, &po);
    po.after_pass = after_pass;
    po.user = &obs;
    po.scratch = &s->plan_scratch;
    gr_compiled c;
    /* a binding of a class with a template instantiates it (template.c); the test hook rewrites
     * fused steps, which only the pipeline makes */
    if ((st = gr_rt_tmpl_pipeline(s, p->sym_values, &po, obs.fn == NULL && sym_values != NULL, &c, &p->instantiated)) != GR_OK)
        goto fail;
    p->g = c.g;
    p->steps = c.steps;
    p->mem = c.mem;
    p->segs = c.segs;
    if ((st = gr_rt_ctrl_bind(s, p)) != GR_OK) goto fail; /* if / loop steps get their runner (control.c) */
    p->seg_state = gr_calloc((size_t)p->segs.len, sizeof(gr_rt_segment));
    if (!p->seg_state) {
        st = GR_ERR_NOMEM;
        goto fail;
    }
    obs.t_last = gr_now_us();
    if ((st = prepare_device(s, p)) != GR_OK) goto fail;
    gr_rt_pad_plan_built(s, p); /* shape policy pad: padded inputs are copied (shapes.c) */
    /* mode auto: segments decided by an earlier process skip their timed runs */
    if ((st = gr_rt_decisions_apply(s, p)) != GR_OK) goto fail;
    /* a binding run before (its plan dropped under graph_memory_mb) needs no warm-up run */
    for (int i = 0; i < s->warmed_bindings.len; i++)
        if (s->warmed_bindings.data[i] == gr_rt_binding_hash(p)) {
            for (int k = 0; k < p->segs.len; k++) p->seg_state[k].warmups = GR_WARMUP_RUNS;
            break;
        }
    phase_done(&obs, "prepare");
    p->compile_us = gr_now_us() - t0;
    if (s->opt.verbose)
        fprintf(stderr, "graft: %s plan: %d steps (%ld kernels), %d segments, arena %zu B, weights %zu B, %.1f ms\n",
                p->instantiated ? "instantiated" : "compiled", p->steps.len, p->n_kernels, p->segs.len, p->mem.arena_bytes, p->mem.const_bytes, p->compile_us / 1e3);
    if (s->opt.verbose) {
        fprintf(stderr, "graft: compile phases (ms):");
        for (int i = 0; i < obs.n; i++) fprintf(stderr, " %s %.1f", obs.name[i], obs.us[i] / 1e3);
        fprintf(stderr, "\n");
    }
    *out = p;
    return GR_OK;
fail:
    gr_rt_plan_destroy(s, p);
    return st;
}

/* The build's short-lived blocks are recycled within it (util/alloc.c, the block cache). */
gr_status gr_rt_plan_build(gr_session_t s, const int64_t *sym_values, gr_rt_plan **out) {
    gr_alloc_cache_begin();
    gr_status st = plan_build(s, sym_values, out);
    gr_alloc_cache_end();
    return st;
}

void gr_rt_plan_destroy(gr_session_t s, gr_rt_plan *p) {
    if (!p) return;
    gr_device *d = s->dev;
    if (p->seg_state) {
        for (int i = 0; i < p->segs.len; i++) gr_rt_segment_release(s, &p->seg_state[i]);
        gr_free(p->seg_state, (size_t)p->segs.len * sizeof(gr_rt_segment));
    }
    if (p->funcs) {
        for (int i = 0; i < p->steps.len; i++)
            gr_dev_kernel_release(d, p->funcs[i]);
        gr_free(p->funcs, (size_t)p->steps.len * sizeof(gr_kfunc *));
    }
    if (p->weight_addr) gr_free(p->weight_addr, ((size_t)p->g->values.len + 1) * sizeof(void *));
    /* allocated after p->g, per input of p->g */
    int ni = p->input_dev || p->input_bytes || p->input_version || p->input_in_place || p->input_host_read ||
                     p->input_libcall || p->input_pinned || p->input_borrowed
                 ? p->g->inputs.len
                 : 0;
    if (p->input_dev)
        for (int i = 0; i < ni; i++)
            if (!p->input_borrowed || !p->input_borrowed[i]) gr_dev_free(d, p->input_dev[i]);
    gr_free(p->input_borrowed, (size_t)ni * sizeof(bool));
    gr_rt_generic_plan_free(s, p);
    gr_free(p->input_dev, (size_t)ni * sizeof(void *));
    gr_free(p->input_bytes, (size_t)ni * sizeof(size_t));
    gr_free(p->input_version, (size_t)ni * sizeof(uint64_t));
    gr_free(p->input_in_place, (size_t)ni * sizeof(bool));
    gr_free(p->input_host_read, (size_t)ni * sizeof(bool));
    gr_free(p->input_libcall, (size_t)ni * sizeof(bool));
    gr_free(p->input_pinned, (size_t)ni * sizeof(void *));
    if (p->arena && !p->arena_shared) gr_dev_free(d, p->arena);
    if (p->consts) gr_dev_free(d, p->consts);
    gr_segment_list_free(&p->segs);
    gr_mem_plan_free(&p->mem);
    gr_rt_ctrl_free(p);
    gr_step_list_free(&p->steps);
    gr_ir_graph_destroy(p->g);
    gr_free(p->sym_values, sizeof(int64_t) * (size_t)p->n_syms);
    gr_free(p, sizeof *p);
}

gr_status gr_rt_max_plan_init(gr_session_t s) {
    const gr_graph *g = s->graph;
    int n = g->syms.len;
    if (!n) return GR_OK; /* nothing symbolic: the one plan is the largest */
    s->max_syms = gr_malloc(sizeof(int64_t) * (size_t)n);
    if (!s->max_syms) return GR_ERR_NOMEM;
    for (int k = 0; k < n; k++) {
        const gr_ir_symbol *sym = &g->syms.data[k];
        if (!sym->declared || sym->hi >= GR_DX_INF)
            return gr_error(GR_ERR_INVALID,
                            "%s needs an upper bound for every symbolic dim; '%s' has none (declare "
                            "its range: gr_graph_set_dim_range, --dim-range %s=LO:HI, or 'dim %s: [lo, hi]' in .gir)",
                            s->opt.arena_policy == GR_ARENA_MAX_SHAPE ? "arena policy 'max shape'" : "shape policy 'generic'",
                            sym->name, sym->name, sym->name);
        s->max_syms[k] = sym->hi;
    }
    gr_rt_plan *p;
    gr_status st = gr_rt_plan_build(s, s->max_syms, &p);
    if (st != GR_OK)
        return gr_error_prefix(st, "compiling the plan of the largest binding (%s)",
                               s->opt.arena_policy == GR_ARENA_MAX_SHAPE ? "arena policy 'max shape'" : "shape policy 'generic'");
    /* its arena becomes the shared one */
    s->shared_arena = p->arena;
    s->shared_arena_bytes = p->mem.arena_bytes;
    p->arena_shared = true;
    s->max_plan = p;
    p->next = s->plans;
    s->plans = p;
    return GR_OK;
}

/* ==== binding ======================================================================== */
void *gr_rt_input_addr(gr_session_t s, gr_rt_plan *p, int i) {
    if (s->inputs[i].dev_ptr && p->input_in_place[i]) return s->inputs[i].dev_ptr;
    return p->input_dev[i];
}

gr_status gr_rt_input_placeholder(gr_session_t s, gr_rt_plan *p, int i) {
    if (p->input_dev[i] || p->mem.values[p->g->inputs.data[i]].kind != GR_STORE_INPUT) return GR_OK; /* (host-only value) */
    gr_status st;
    if (gr_rt_generic_placeholder(s, p, i, &st)) return st; /* generic: the largest binding's placeholder */
    return gr_dev_alloc(s->dev, GR_MEM_DEVICE, p->input_bytes[i] ? p->input_bytes[i] : 1, &p->input_dev[i]);
}

void *gr_rt_value_addr(gr_session_t s, gr_rt_plan *p, int v) {
    const gr_value_store *st = &p->mem.values[v];
    int64_t elem_off = 0;
    int root = v;
    if (st->kind == GR_STORE_ALIAS) {
        root = st->alias_of;
        elem_off = st->alias_elem_offset;
        st = &p->mem.values[root];
    }
    char *base = NULL;
    switch (st->kind) {
    case GR_STORE_INPUT: base = gr_rt_input_addr(s, p, (int)st->offset); break;
    case GR_STORE_CONST: base = (char *)p->consts + st->offset; break;
    case GR_STORE_WEIGHT: base = p->weight_addr[root]; break;
    case GR_STORE_ARENA: base = (char *)p->arena + st->offset; break;
    case GR_STORE_HOST: base = s->inputs[st->offset].data; break;
    default: return NULL;
    }
    return base ? base + elem_off * (int64_t)gr_dtype_size(p->g->values.data[v].dtype) : NULL;
}

/* Host address of a host input (or a view of one): the caller's bound data. */
static const void *host_value_addr(gr_session_t s, gr_rt_plan *p, int v) {
    const gr_value_store *st = &p->mem.values[v];
    int64_t elem_off = 0;
    if (st->kind == GR_STORE_ALIAS) {
        elem_off = st->alias_elem_offset;
        v = st->alias_of;
        st = &p->mem.values[v];
    }
    if (p->g->values.data[v].kind != GR_VAL_INPUT || (st->kind != GR_STORE_HOST && st->kind != GR_STORE_INPUT)) return NULL;
    const char *base = s->inputs[st->offset].data;
    return base ? base + elem_off * (int64_t)gr_dtype_size(p->g->values.data[v].dtype) : NULL;
}

gr_status gr_rt_step_args(gr_session_t s, gr_rt_plan *p, int i, gr_karg *args) {
    const gr_step *st = &p->steps.data[i];
    for (int a = 0; a < st->n_args; a++) {
        const gr_step_arg *arg = &st->args[a];
        switch (arg->kind) {
        case GR_ARG_LITERAL: args[a] = arg->literal; break;
        case GR_ARG_VALUE: {
            char *base = gr_rt_value_addr(s, p, arg->value);
            if (!base)
                return gr_error(GR_ERR_INTERNAL, "step %d: value '%s' has no storage", i, p->g->values.data[arg->value].name);
            args[a].ptr = base + arg->elem_offset * (int64_t)gr_dtype_size(p->g->values.data[arg->value].dtype);
            break;
        }
        case GR_ARG_HOST_SCALAR: {
            const gr_ir_value *v = &p->g->values.data[arg->value];
            const void *data = host_value_addr(s, p, arg->value);
            if (!data) return gr_error(GR_ERR_INTERNAL, "step %d: host scalar '%s' has no storage", i, v->name);
            bool want_int = st->kind == GR_STEP_KERNEL && st->kernel->params[a].kind == GR_KP_SCALAR_I;
            if (want_int) args[a].i = gr_load_i64(data, v->dtype, 0);
            else args[a].f = gr_load_f64(data, v->dtype, 0);
            break;
        }
        }
    }
    return GR_OK;
}

gr_status gr_rt_step_launch(gr_session_t s, gr_rt_plan *p, int i) {
    gr_step *st = &p->steps.data[i];
    gr_karg args[GR_KMAX_PARAMS];
    memset(args, 0, sizeof args);
    switch (st->kind) {
    case GR_STEP_ALIAS: return GR_OK;
    case GR_STEP_KERNEL:
        GR_TRY(gr_rt_step_args(s, p, i, args));
        return gr_dev_kernel_launch(s->dev, s->stream, p->funcs[i], args, st->n_args);
    case GR_STEP_LIBCALL:
        GR_TRY(gr_rt_step_args(s, p, i, args));
        return gr_dev_libcall(s->dev, s->stream, &st->call, args, st->n_args);
    case GR_STEP_HOST: {
        char where[512] = "";
        if (st->node >= 0 && st->node < p->g->nodes.len) gr_ir_node_where(p->g, &p->g->nodes.data[st->node], where, sizeof where);
        if (!st->host_fn) return gr_error(GR_ERR_UNSUPPORTED, "%s: host step not executable: %s", where, st->reason ? st->reason : "?");
        GR_TRY(gr_rt_step_args(s, p, i, args));
        /* the host reads what the device wrote: drain the stream first (this
         * synchronization is why a host step can never be inside a graph) */
        GR_TRY(gr_dev_stream_sync(s->dev, s->stream));
        struct gr_step_host_ctx hc = {.dev = s->dev, .stream = s->stream, .n_args = st->n_args};
        for (int a = 0; a < st->n_args; a++) hc.addr[a] = args[a].ptr;
        gr_status rc = st->host_fn(st->host_user, &hc);
        if (rc != GR_OK) return gr_error_prefix(rc, "%s: host step", where[0] ? where : "plan");
        return GR_OK;
    }
    }
    return GR_ERR_INTERNAL;
}
