/* device/sim — the CPU simulator backend: memory table, streams, events, eager work and
 * the cost model. Graph capture and replay live in sim_graph.c.
 *
 * Work runs at submission (the CPU is the device); what is simulated is time (a host
 * clock and a per-stream device clock) and the CUDA rules that graft must respect. */
#include "device/sim/sim-impl.h"
#include <stdio.h>
#include <string.h>

/* ==== cost model ===================================================================== */

const gr_sim_costs gr_sim_cost = {
    .launch_host_us = 4.1,
    .libcall_host_us = 13.0,
    .kernel_min_us = 2.0,
    .mem_bytes_per_us = 3.0e6,
    .flops_per_us = 50.0e6,
    .mm_flops_per_us = 400.0e6,
    .mm_f32_flops_per_us = 12.3e6,
    .copy_host_us = 1.0,
    .d2d_base_us = 5.58,
    .d2d_us_per_byte = 1.81e-7,
    .d2d_big_bytes_per_us = 1.49e6,
    .h2d_base_us = 6.86,
    .h2d_bytes_per_us = 2.5e4,
    .capture_per_node_us = 1.75,
    .instantiate_per_node_us = 5.83,
    .upload_base_us = 24.0,
    .upload_per_node_us = 1.17,
    .graph_submit_us = 2.2,
    .graph_latency_us = 6.2,
    .graph_node_us = 1.0,
    .cond_node_us = 0.5,
    .set_args_us = 1.15,
    .exec_update_per_node_us = 0.45,
};

/* device time of a kernel without launch overhead */
double gr_sim_kernel_time(const gr_kfunc *f) {
    double t_mem = f->bytes / gr_sim_cost.mem_bytes_per_us;
    double t_flop = f->flops / gr_sim_cost.flops_per_us;
    return GR_MAX(t_mem, t_flop);
}

double gr_sim_libcall_time(const gr_libcall *c) {
    if (gr_lib_is_collective(c->kind)) return gr_sim_collective_time(c);
    double es = (double)gr_dtype_size(c->dtype);
    if (c->kind == GR_LIB_SAMPLE) {
        /* one block per row reading its logits once from memory and about 11 more times from
         * cache (codegen/sample.c's passes): bounded by the first read, plus the block's
         * passes at a fraction of the memory rate (one SM per row) */
        double row = es * (double)c->n;
        return (double)c->m * row / gr_sim_cost.mem_bytes_per_us + 11.0 * row / (gr_sim_cost.mem_bytes_per_us / 16.0);
    }
    if (c->kind == GR_LIB_BEAM_STEP) {
        /* one block per batch row: its k x vocab logits once from memory, then twice more from
         * cache (log-sum-exp and the candidates) at a fraction of the memory rate (one SM a
         * row), as the sample op */
        double row = es * (double)c->k * (double)c->n;
        return (double)c->m * row / gr_sim_cost.mem_bytes_per_us + 2.0 * row / (gr_sim_cost.mem_bytes_per_us / 16.0);
    }
    if (c->kind == GR_LIB_BEAM_REORDER) /* a copy: read and write the cache once */
        return 2.0 * es * (double)c->m * (double)c->n * (double)c->k * (double)c->lda / gr_sim_cost.mem_bytes_per_us;
    if (c->kind == GR_LIB_ATTENTION) {
        /* fused: q, k, v and out move once; two products of seq_q x seq_k x head_dim each */
        double rows = (double)c->batch * (double)c->heads, kv = (double)c->batch * (double)c->kv_heads;
        double bytes = es * (rows * (double)(c->seq_q * c->head_dim + c->seq_q * c->head_dim_v) +
                             kv * (double)(c->seq_k * (c->head_dim + c->head_dim_v)));
        double flops = 2.0 * rows * (double)c->seq_q * (double)c->seq_k * (double)(c->head_dim + c->head_dim_v);
        double rate = c->dtype == GR_F32 || c->dtype == GR_F64 ? gr_sim_cost.mm_f32_flops_per_us : gr_sim_cost.mm_flops_per_us;
        return GR_MAX(bytes / gr_sim_cost.mem_bytes_per_us, flops / rate);
    }
    double bytes = (double)c->batch * es * (double)(c->m * c->k + c->k * c->n + c->m * c->n);
    double flops = 2.0 * (double)c->batch * (double)c->m * (double)c->n * (double)c->k;
    double rate = c->dtype == GR_F32 || c->dtype == GR_F64 ? gr_sim_cost.mm_f32_flops_per_us : gr_sim_cost.mm_flops_per_us;
    return GR_MAX(bytes / gr_sim_cost.mem_bytes_per_us, flops / rate);
}

/* total time of a copy submitted on an idle stream and synchronized */
double gr_sim_copy_time(size_t bytes, gr_copy_kind kind) {
    double b = (double)bytes;
    if (kind == GR_COPY_D2D)
        return GR_MAX(gr_sim_cost.d2d_base_us + b * gr_sim_cost.d2d_us_per_byte, b / gr_sim_cost.d2d_big_bytes_per_us);
    return gr_sim_cost.h2d_base_us + b / gr_sim_cost.h2d_bytes_per_us;
}

/* eager work: host pays host_us; the stream runs it for device_us once the host has submitted it */
static void advance(gr_sim_ctx *c, gr_stream *s, double host_us, double device_us) {
    c->host_us += host_us;
    double start = GR_MAX(c->host_us, s->free_us);
    s->free_us = start + device_us;
}

/* ==== memory table ===================================================================== */

static const char *kind_name(gr_mem_kind k) {
    return k == GR_MEM_DEVICE ? "device" : k == GR_MEM_HOST_PINNED ? "pinned host" : "pageable host";
}

typedef enum { LOOK_LIVE = 0, LOOK_FREED, LOOK_OOB, LOOK_UNKNOWN } look_result;

/* Finds the allocation holding [p, p+n). Live entries win over dead ones (malloc may
 * reuse a freed address). */
static look_result lookup(gr_sim_ctx *c, const char *p, size_t n, const gr_sim_alloc **hit) {
    const gr_sim_alloc *dead = NULL, *partial = NULL;
    for (int i = c->allocs.len - 1; i >= 0; i--) {
        const gr_sim_alloc *a = &c->allocs.data[i];
        if (p < a->base || p >= a->base + (a->size ? a->size : 1)) continue;
        if (a->alive) {
            if ((size_t)(p - a->base) + n <= a->size) {
                *hit = a;
                return LOOK_LIVE;
            }
            partial = a;
        } else if (!dead) {
            dead = a;
        }
    }
    if (partial) {
        *hit = partial;
        return LOOK_OOB;
    }
    if (dead) {
        *hit = dead;
        return LOOK_FREED;
    }
    *hit = NULL;
    return LOOK_UNKNOWN;
}

static gr_status add_alloc(gr_sim_ctx *c, gr_mem_kind kind, size_t bytes, bool internal, void **out) {
    *out = NULL;
    size_t n = bytes ? bytes : 1;
    GR_TRY(gr_vec_reserve(&c->allocs, c->allocs.len + 1));
    char *p = gr_calloc(1, n); /* zeroed: a new block reads as zeros, deterministically */
    if (!p) return gr_error(GR_ERR_NOMEM, "sim: out of memory allocating %zu bytes of %s memory", bytes, kind_name(kind));
    /* a new block may reuse the address of dead entries: forget them (bounded table) */
    int w = 0;
    for (int i = 0; i < c->allocs.len; i++) {
        gr_sim_alloc *a = &c->allocs.data[i];
        bool overlap = !a->alive && a->base < p + n && p < a->base + (a->size ? a->size : 1);
        if (!overlap) c->allocs.data[w++] = *a;
    }
    c->allocs.len = w;
    gr_sim_alloc rec = {.base = p, .size = bytes, .kind = kind, .alive = true, .internal = internal};
    c->allocs.data[c->allocs.len++] = rec;
    if (kind == GR_MEM_DEVICE && !internal) c->device_bytes += bytes;
    *out = p;
    return GR_OK;
}

gr_status gr_sim_alloc_internal(gr_sim_ctx *c, size_t bytes, void **out) {
    return add_alloc(c, GR_MEM_DEVICE, bytes, true, out);
}

void gr_sim_invalidate(gr_stream *s, const char *fmt, ...) {
    if (s->invalid) return; /* keep the first cause */
    s->invalid = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->invalid_msg, sizeof(s->invalid_msg), fmt, ap);
    va_end(ap);
}

static gr_status sim_alloc(void *ctx, gr_mem_kind kind, size_t bytes, void **out) {
    gr_sim_ctx *c = ctx;
    *out = NULL;
    if ((int)kind < 0 || kind > GR_MEM_HOST) return gr_error(GR_ERR_INVALID, "sim: alloc: bad memory kind %d", (int)kind);
    for (int i = 0; i < c->streams.len; i++) {
        gr_stream *s = c->streams.data[i];
        if (s->capturing) {
            gr_sim_invalidate(s, "alloc of %zu bytes of %s memory during capture", bytes, kind_name(kind));
            return gr_error(GR_ERR_HAZARD, "sim: alloc of %zu bytes of %s memory during stream capture (capture invalidated)",
                            bytes, kind_name(kind));
        }
    }
    return add_alloc(c, kind, bytes, false, out);
}

#define GR_SIM_QUARANTINE_BYTES ((size_t)256 << 20)

/* Really frees the oldest quarantined blocks until at most `keep` bytes stay
 * held; their dead entries go too (the address may now be reused by anyone). */
static void release_quarantine(gr_sim_ctx *c, size_t keep) {
    int w = 0;
    for (int i = 0; i < c->allocs.len; i++) {
        gr_sim_alloc *a = &c->allocs.data[i];
        if (a->held && c->quarantine_bytes > keep) {
            size_t n = a->size ? a->size : 1;
            gr_free(a->base, n);
            c->quarantine_bytes -= n;
            continue; /* drop the entry */
        }
        c->allocs.data[w++] = *a;
    }
    c->allocs.len = w;
}

static void sim_free(void *ctx, void *ptr) {
    gr_sim_ctx *c = ctx;
    if (!ptr) return;
    for (int i = c->allocs.len - 1; i >= 0; i--) {
        gr_sim_alloc *a = &c->allocs.data[i];
        if (a->alive && a->base == ptr && !a->internal) {
            for (int j = 0; j < c->streams.len; j++)
                if (c->streams.data[j]->capturing)
                    gr_sim_invalidate(c->streams.data[j], "free of %p during capture", ptr);
            a->alive = false;
            if (a->kind == GR_MEM_DEVICE) c->device_bytes -= a->size;
            /* Quarantine, as ASan does: the memory stays ours for a while, so
             * libc cannot hand the address to a host buffer that we would then
             * mistake for a use-after-free. Oldest blocks go back first. */
            a->held = true;
            c->quarantine_bytes += a->size ? a->size : 1;
            release_quarantine(c, GR_SIM_QUARANTINE_BYTES);
            return;
        }
    }
    /* not ours or freed twice: nothing to do (free has no status); note it for debugging */
    gr_error(GR_ERR_HAZARD, "sim: free of %p, which is not a live allocation", ptr);
}

static size_t sim_mem_in_use(void *ctx) { return ((gr_sim_ctx *)ctx)->device_bytes; }

static gr_status sim_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
    const gr_sim_ctx *c = ctx;
    size_t used = c->device_bytes + c->graph_bytes;
    *total_bytes = GR_SIM_TOTAL_BYTES;
    *free_bytes = used < GR_SIM_TOTAL_BYTES ? GR_SIM_TOTAL_BYTES - used : 0;
    return GR_OK;
}

/* Range check for device-side accesses (kernels, libcalls, device ends of copies). */
static gr_status check_device_range(gr_sim_ctx *c, const char *p, size_t n, bool write, const char *what,
                                    const char *operand) {
    const gr_sim_alloc *a;
    look_result r = lookup(c, p, n, &a);
    switch (r) {
    case LOOK_LIVE:
        if (a->kind == GR_MEM_HOST)
            return gr_error(GR_ERR_HAZARD, "%s: %s %p is pageable host memory, which the device cannot %s", what,
                            operand, (const void *)p, write ? "write" : "read");
        return GR_OK;
    case LOOK_FREED:
        return gr_error(GR_ERR_HAZARD, "%s: use-after-free: %s %p lies in freed %s allocation %p (%zu bytes)", what,
                        operand, (const void *)p, kind_name(a->kind), (void *)a->base, a->size);
    case LOOK_OOB:
        return gr_error(GR_ERR_HAZARD, "%s: out of bounds: %s [%p, +%zu) exceeds %s allocation %p of %zu bytes", what,
                        operand, (const void *)p, n, kind_name(a->kind), (void *)a->base, a->size);
    default:
        return gr_error(GR_ERR_HAZARD, "%s: %s %p is not memory allocated by the device", what, operand,
                        (const void *)p);
    }
}

/* ==== kernels ============================================================================ */

typedef struct {
    gr_sim_ctx *c;
    const gr_kernel *k;
    const char *what;
} kcheck_user;

static gr_status kcheck(void *user, int param, const void *base, int64_t lo, int64_t hi, bool write) {
    kcheck_user *u = user;
    char operand[64];
    snprintf(operand, sizeof(operand), "parameter %s", u->k->params[param].name);
    /* lo may be negative (negative strides reach below base) */
    return check_device_range(u->c, (const char *)base + lo, (size_t)(hi - lo), write, u->what, operand);
}

gr_status gr_sim_run_kernel(gr_sim_ctx *c, const gr_kfunc *f, const gr_karg *args, int n_args, const char *what) {
    if (f->table_map) {
        /* GR_KPREP_SLOT_TABLE: the slots the table holds now (as a CUDA node reads them at replay) */
        if (n_args < f->k->n_params + 1) return gr_error(GR_ERR_INVALID, "%s: no slot table argument", what);
        const gr_kslot_map *m = f->table_map;
        size_t bytes = sizeof(int64_t) * (size_t)(m->n + 1);
        const char *table = args[f->k->n_params].ptr;
        GR_TRY(check_device_range(c, table, bytes, false, what, "slot table"));
        int64_t vals[GR_KMAX_SLOTS + 1];
        int64_t *v = m->n <= GR_KMAX_SLOTS ? vals : gr_malloc(bytes);
        if (!v) return GR_ERR_NOMEM;
        memcpy(v, table, bytes);
        /* the template's code with the table's slots, as the CUDA module runs them */
        gr_kernel *run = NULL;
        gr_status st = gr_kernel_clone(f->tmpl->k, &run);
        if (st == GR_OK) gr_kernel_apply_slots(run, m, v);
        int64_t points = v[m->n];
        if (v != vals) gr_free(v, bytes);
        if (st != GR_OK) return st;
        memcpy(run->name, f->k->name, sizeof run->name);
        run->source_node = f->k->source_node;
        gr_karg own[GR_KMAX_PARAMS];
        n_args = f->k->n_params;
        memcpy(own, args, sizeof(gr_karg) * (size_t)n_args);
        if (run->n_points_param >= 0) own[run->n_points_param].i = points; /* the bound the code reads */
        kcheck_user u = {c, run, what};
        st = gr_kernel_interpret(run, own, n_args, kcheck, &u);
        gr_kernel_destroy(run);
        return st;
    }
    kcheck_user u = {c, f->k, what};
    return gr_kernel_interpret(f->k, args, n_args, kcheck, &u);
}

/* The live template of k's structure, made from k when there is none; refs counted. */
static gr_status template_get(gr_sim_ctx *c, const gr_kernel *k, gr_sim_template **out, bool *made) {
    *out = NULL;
    *made = false;
    gr_kstructure ks;
    GR_TRY(gr_kstructure_of(k, &ks));
    for (int i = 0; i < c->templates.len; i++) {
        gr_sim_template *t = c->templates.data[i];
        if (!gr_kstructure_equal(&t->structure, &ks)) continue;
        gr_kstructure_free(&ks);
        t->refs++;
        *out = t;
        return GR_OK;
    }
    gr_status st = gr_vec_reserve(&c->templates, c->templates.len + 1);
    gr_sim_template *t = st == GR_OK ? gr_calloc(1, sizeof(*t)) : NULL;
    if (st == GR_OK && !t) st = GR_ERR_NOMEM;
    if (st == GR_OK) st = gr_kernel_clone(k, &t->k);
    if (st != GR_OK) {
        if (t) gr_free(t, sizeof(*t));
        gr_kstructure_free(&ks);
        return st;
    }
    t->structure = ks; /* the template owns it now */
    t->refs = 1;
    c->templates.data[c->templates.len++] = t;
    *out = t;
    *made = true;
    return GR_OK;
}

static void template_put(gr_sim_ctx *c, gr_sim_template *t) {
    if (!t || --t->refs > 0) return;
    for (int i = 0; i < c->templates.len; i++)
        if (c->templates.data[i] == t) {
            c->templates.data[i] = c->templates.data[--c->templates.len];
            break;
        }
    gr_kernel_destroy(t->k);
    gr_kstructure_free(&t->structure);
    gr_free(t, sizeof(*t));
}

static gr_status sim_kernel_prepare(void *ctx, const gr_kernel *k, unsigned flags, gr_kfunc **out) {
    gr_sim_ctx *c = ctx;
    *out = NULL;
    if (!(flags & GR_KPREP_VERIFIED)) GR_TRY(gr_kernel_verify(k));
    bool table = (flags & GR_KPREP_SLOT_TABLE) != 0;
    bool generic = (flags & GR_KPREP_GENERIC) != 0 || table;
    bool fallback = generic && !table && gr_kernel_slot_count(k) > GR_KMAX_SLOTS; /* as the CUDA backend does */
    if (fallback) generic = false;
    gr_kfunc *f = gr_calloc(1, sizeof(*f));
    if (!f) return GR_ERR_NOMEM;
    bool made = false;
    gr_status st = generic ? template_get(c, k, &f->tmpl, &made) : GR_OK;
    if (st == GR_OK && table) {
        f->table_map = gr_calloc(1, sizeof *f->table_map);
        st = f->table_map ? gr_kslot_map_build(k, f->table_map) : GR_ERR_NOMEM;
    }
    /* template_get compared the structures (or cloned k itself) */
    if (st == GR_OK) st = generic ? gr_kernel_instantiate_same(f->tmpl->k, k, &f->k) : gr_kernel_clone(k, &f->k);
    if (st != GR_OK) {
        if (f->table_map) {
            gr_kslot_map_free(f->table_map);
            gr_free(f->table_map, sizeof *f->table_map);
        }
        template_put(c, f->tmpl);
        gr_free(f, sizeof(*f));
        return st;
    }
    double bytes = 0;
    for (int p = 0; p < k->n_params; p++) {
        int64_t lo, hi;
        if (k->params[p].kind != GR_KP_BUFFER && k->params[p].kind != GR_KP_BUFFER_INDIRECT) continue;
        gr_kernel_param_range(k, p, &lo, &hi);
        bytes += (double)(hi - lo);
    }
    f->bytes = bytes;
    f->flops = (double)gr_kernel_points(k) * (double)gr_kernel_inner_points(k) * (double)GR_MAX(1, k->nodes.len);
    c->kstats.prepared++;
    c->kstats.generic_fallbacks += fallback;
    if (generic) {
        c->kstats.generic_new += made;
        c->kstats.generic_reused += !made;
    }
    c->kstats.module_loads += !generic || made;
    *out = f;
    return GR_OK;
}

static void sim_kernel_release(void *ctx, gr_kfunc *f) {
    if (!f) return;
    gr_kernel_destroy(f->k);
    if (f->table_map) {
        gr_kslot_map_free(f->table_map);
        gr_free(f->table_map, sizeof *f->table_map);
    }
    template_put(ctx, f->tmpl);
    gr_free(f, sizeof(*f));
}

static void sim_kernel_stats(void *ctx, gr_dev_kstats *out) {
    gr_sim_ctx *c = ctx;
    *out = c->kstats;
    out->live_modules = c->templates.len;
}

static gr_status stream_usable(gr_stream *s, const char *what) {
    if (!s) return gr_error(GR_ERR_INVALID, "sim: %s: NULL stream", what);
    if (s->capturing && s->invalid)
        return gr_error(GR_ERR_HAZARD, "sim: %s on a stream whose capture was invalidated (%s)", what, s->invalid_msg);
    return GR_OK;
}

static gr_status sim_kernel_launch(void *ctx, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args) {
    gr_sim_ctx *c = ctx;
    char what[96];
    snprintf(what, sizeof(what), "kernel %s", f ? f->k->name : "?");
    GR_TRY(stream_usable(s, what));
    if (!f) return gr_error(GR_ERR_INVALID, "sim: launch of a NULL kernel");
    if (n_args < f->k->n_params)
        return gr_error(GR_ERR_INVALID, "kernel %s: %d launch arguments for %d parameters", f->k->name, n_args,
                        f->k->n_params);
    if (s->capturing) return gr_sim_capture_kernel(c, s, f, args, n_args);
    GR_TRY(gr_sim_run_kernel(c, f, args, n_args, what));
    advance(c, s, gr_sim_cost.launch_host_us, GR_MAX(gr_sim_cost.kernel_min_us, gr_sim_kernel_time(f)));
    return GR_OK;
}

/* ==== library calls ========================================================================= */

static void mat_range(int64_t batch, int64_t bstride, int64_t rows, int64_t cols, int64_t ld, int64_t *lo, int64_t *hi) {
    /* elements [lo, hi) */
    int64_t l = 0, h = (rows - 1) * ld + cols;
    if (batch > 1) {
        if (bstride > 0) h += (batch - 1) * bstride;
        else l += (batch - 1) * bstride;
    }
    *lo = l;
    *hi = h;
}

/* Elements an attention operand spans from its (already offset) pointer: the last element of
 * [n0, n1, n2, dim] read through strides (batch, head, seq; dim contiguous), plus one. */
static int64_t attn_extent(int64_t n0, int64_t n1, int64_t n2, int64_t dim, const int64_t *stride) {
    if (n0 <= 0 || n1 <= 0 || n2 <= 0 || dim <= 0) return 0;
    return (n0 - 1) * stride[0] + (n1 - 1) * stride[1] + (n2 - 1) * stride[2] + dim;
}

/* The bytes an attention call touches through each operand, checked like a kernel's. */
static gr_status check_attention(gr_sim_ctx *c, const gr_libcall *call, const gr_karg *args, const char *what) {
    if (call->batch <= 0 || call->seq_q <= 0 || call->heads <= 0) return GR_OK;
    for (int d = 0; d < 3; d++)
        if (call->q_stride[d] < 0 || call->k_stride[d] < 0 || call->v_stride[d] < 0 || call->o_stride[d] < 0)
            return gr_error(GR_ERR_INVALID, "%s: negative attention stride", what);
    int64_t es = (int64_t)gr_dtype_size(call->dtype);
    int64_t nq = attn_extent(call->batch, call->heads, call->seq_q, call->head_dim, call->q_stride);
    int64_t no = attn_extent(call->batch, call->heads, call->seq_q, call->head_dim_v, call->o_stride);
    int64_t nk = attn_extent(call->batch, call->kv_heads, call->seq_k, call->head_dim, call->k_stride);
    int64_t nv = attn_extent(call->batch, call->kv_heads, call->seq_k, call->head_dim_v, call->v_stride);
    if (nq > 0) GR_TRY(check_device_range(c, args[0].ptr, (size_t)(nq * es), false, what, "Q"));
    if (no > 0) GR_TRY(check_device_range(c, args[2].ptr, (size_t)(no * es), true, what, "O"));
    if (nk > 0) GR_TRY(check_device_range(c, args[1].ptr, (size_t)(nk * es), false, what, "K"));
    if (nv > 0) GR_TRY(check_device_range(c, args[3].ptr, (size_t)(nv * es), false, what, "V"));
    if (call->has_mask && call->seq_k > 0) {
        int64_t full[4] = {call->batch, call->heads, call->seq_q, call->seq_k}, hi = 0;
        for (int d = 0; d < 4; d++) hi += (full[d] - 1) * call->mask_stride[d];
        int64_t ms = (int64_t)gr_dtype_size(call->mask_dtype);
        GR_TRY(check_device_range(c, args[4].ptr, (size_t)((hi + 1) * ms), false, what, "mask"));
    }
    if (call->key_len_arg)
        GR_TRY(check_device_range(c, args[GR_LIB_ATTENTION_KEY_LEN].ptr, sizeof(int64_t), false, what, "key length"));
    return GR_OK;
}

gr_status gr_sim_run_libcall(gr_sim_ctx *c, const gr_libcall *call, const gr_karg *args, const char *what) {
    if (gr_lib_is_collective(call->kind)) {
        size_t bytes = (size_t)call->m * gr_dtype_size(call->dtype);
        size_t out_bytes = call->kind == GR_LIB_ALL_GATHER ? bytes * (size_t)(call->n > 0 ? call->n : 1) : bytes;
        GR_TRY(check_device_range(c, args[0].ptr, bytes, false, what, "input"));
        GR_TRY(check_device_range(c, args[2].ptr, out_bytes, true, what, "output"));
        return gr_sim_comm_run(c, call, args);
    }
    if (call->kind == GR_LIB_ATTENTION && call->lens_arg) {
        /* generic: the lengths the record holds now (a graph replay reads the table as it is
         * then), within the call's, as a device's grid is sized for the call's */
        const void *rec = args[gr_libcall_attention_lens_index(call)].ptr;
        GR_TRY(check_device_range(c, rec, sizeof(int64_t) * GR_ATTN_LENS, false, what, "length record"));
        gr_libcall real = *call;
        gr_libcall_attention_use_lens(&real, (const int64_t *)rec);
        if (real.seq_q > call->seq_q || real.seq_k > call->seq_k)
            return gr_error(GR_ERR_INVALID, "%s: lengths %lld x %lld exceed the call's %lld x %lld", what, (long long)real.seq_q,
                            (long long)real.seq_k, (long long)call->seq_q, (long long)call->seq_k);
        GR_TRY(check_attention(c, &real, args, what));
        return gr_libcall_reference(&real, args);
    }
    if (call->kind == GR_LIB_ATTENTION) {
        GR_TRY(check_attention(c, call, args, what));
        return gr_libcall_reference(call, args);
    }
    if (call->kind == GR_LIB_SAMPLE) {
        if (call->m > 0 && call->n > 0) {
            size_t logits = (size_t)call->m * (size_t)call->n * gr_dtype_size(call->dtype);
            GR_TRY(check_device_range(c, args[0].ptr, logits, false, what, "logits"));
            GR_TRY(check_device_range(c, args[1].ptr, sizeof(int64_t), false, what, "step"));
            GR_TRY(check_device_range(c, args[2].ptr, (size_t)call->m * sizeof(int64_t), true, what, "tokens"));
            GR_TRY(check_device_range(c, args[3].ptr, 3 * sizeof(int64_t), false, what, "ints"));
            GR_TRY(check_device_range(c, args[4].ptr, 2 * sizeof(float), false, what, "floats"));
        }
        return gr_libcall_reference(call, args);
    }
    if (call->kind == GR_LIB_BEAM_STEP) {
        gr_beam_params p = {.beams = call->k, .vocab = call->n, .max_new = call->lda, .stride = call->lda};
        gr_beam_layout l;
        GR_TRY(gr_beam_state_layout(&p, &l));
        if (call->m > 0) {
            size_t logits = (size_t)(call->m * call->k * call->n) * gr_dtype_size(call->dtype), state = (size_t)(call->m * l.slots) * 8;
            GR_TRY(check_device_range(c, args[0].ptr, logits, false, what, "logits"));
            GR_TRY(check_device_range(c, args[1].ptr, sizeof(int64_t), false, what, "step"));
            GR_TRY(check_device_range(c, args[2].ptr, state, true, what, "state"));
            GR_TRY(check_device_range(c, args[3].ptr, state, false, what, "state in"));
            GR_TRY(check_device_range(c, args[4].ptr, GR_BEAM_NPARAMS * sizeof(int64_t), false, what, "params"));
        }
        return gr_libcall_reference(call, args);
    }
    if (call->kind == GR_LIB_BEAM_REORDER) {
        if (call->m > 0) {
            size_t bytes = (size_t)(call->m * call->n * call->k * call->lda) * gr_dtype_size(call->dtype);
            GR_TRY(check_device_range(c, args[0].ptr, bytes, false, what, "cache"));
            GR_TRY(check_device_range(c, args[1].ptr, (size_t)call->m * sizeof(int64_t), false, what, "rows"));
            GR_TRY(check_device_range(c, args[2].ptr, bytes, true, what, "reordered cache"));
            GR_TRY(check_device_range(c, args[3].ptr, sizeof(int64_t), false, what, "kv_len"));
        }
        return gr_libcall_reference(call, args);
    }
    if (call->m > 0 && call->n > 0 && call->batch > 0) {
        int64_t es = (int64_t)gr_dtype_size(call->dtype), lo, hi;
        if (call->k > 0) {
            mat_range(call->batch, call->batch_stride_a, call->trans_a ? call->k : call->m,
                      call->trans_a ? call->m : call->k, call->lda, &lo, &hi);
            GR_TRY(check_device_range(c, (const char *)args[0].ptr + lo * es, (size_t)((hi - lo) * es), false, what, "A"));
            mat_range(call->batch, call->batch_stride_b, call->trans_b ? call->n : call->k,
                      call->trans_b ? call->k : call->n, call->ldb, &lo, &hi);
            GR_TRY(check_device_range(c, (const char *)args[1].ptr + lo * es, (size_t)((hi - lo) * es), false, what, "B"));
        }
        mat_range(call->batch, call->batch_stride_c, call->m, call->n, call->ldc, &lo, &hi);
        GR_TRY(check_device_range(c, (const char *)args[2].ptr + lo * es, (size_t)((hi - lo) * es), true, what, "C"));
        if (call->bias == GR_BIAS_ROW) {
            mat_range(call->batch, call->batch_stride_bias, 1, call->n, call->n, &lo, &hi);
            GR_TRY(check_device_range(c, (const char *)args[3].ptr + lo * es, (size_t)((hi - lo) * es), false, what, "bias"));
        } else if (call->bias == GR_BIAS_FULL) {
            mat_range(call->batch, call->batch_stride_bias, call->m, call->n, call->ldc, &lo, &hi);
            GR_TRY(check_device_range(c, (const char *)args[3].ptr + lo * es, (size_t)((hi - lo) * es), false, what, "bias"));
        }
        if (call->residual) {
            mat_range(call->batch, call->batch_stride_c, call->m, call->n, call->ldc, &lo, &hi);
            GR_TRY(check_device_range(c, (const char *)args[4].ptr + lo * es, (size_t)((hi - lo) * es), false, what, "residual"));
        }
    }
    return gr_libcall_reference(call, args);
}

static gr_status sim_libcall(void *ctx, gr_stream *s, const gr_libcall *call, const gr_karg *args, int n_args) {
    gr_sim_ctx *c = ctx;
    char what[96];
    snprintf(what, sizeof(what), "libcall %s", call->name);
    GR_TRY(stream_usable(s, what));
    if (n_args < gr_libcall_nargs(call))
        return gr_error(GR_ERR_INVALID, "libcall %s: %d arguments, need %d", call->name, n_args, gr_libcall_nargs(call));
    if (s->capturing) return gr_sim_capture_libcall(c, s, call, args);
    if (gr_lib_is_collective(call->kind)) {
        /* the stream waits in it for the other ranks (sim-comm.c) */
        c->host_us += gr_sim_cost.libcall_host_us;
        c->coll_arrive_us = GR_MAX(c->host_us, s->free_us);
        GR_TRY(gr_sim_run_libcall(c, call, args, what));
        s->free_us = c->coll_done_us;
        return GR_OK;
    }
    GR_TRY(gr_sim_run_libcall(c, call, args, what));
    advance(c, s, gr_sim_cost.libcall_host_us, GR_MAX(gr_sim_cost.kernel_min_us, gr_sim_libcall_time(call)));
    return GR_OK;
}

/* ==== copies ================================================================================= */

/* A host end of a copy may be any host memory; unknown host memory counts as pageable. */
static gr_status check_host_end(gr_sim_ctx *c, const char *p, size_t n, bool capturing, const char *what,
                                const char *operand, bool *pageable) {
    const gr_sim_alloc *a;
    look_result r = lookup(c, p, n, &a);
    *pageable = false;
    switch (r) {
    case LOOK_LIVE: *pageable = a->kind == GR_MEM_HOST; return GR_OK;
    case LOOK_FREED:
        return gr_error(GR_ERR_HAZARD, "%s: use-after-free: %s %p lies in freed %s allocation %p (%zu bytes)", what,
                        operand, (const void *)p, kind_name(a->kind), (void *)a->base, a->size);
    case LOOK_OOB:
        return gr_error(GR_ERR_HAZARD, "%s: out of bounds: %s [%p, +%zu) exceeds %s allocation %p of %zu bytes", what,
                        operand, (const void *)p, n, kind_name(a->kind), (void *)a->base, a->size);
    default: *pageable = true; return GR_OK;
    }
}

static gr_status check_copy(gr_sim_ctx *c, void *dst, const void *src, size_t bytes, gr_copy_kind kind,
                            const char *what, bool *pageable) {
    bool pd = false, ps = false;
    *pageable = false;
    if (bytes == 0) return GR_OK;
    if (!dst || !src) return gr_error(GR_ERR_INVALID, "%s: NULL pointer", what);
    bool dst_host = kind == GR_COPY_D2H || kind == GR_COPY_H2H;
    bool src_host = kind == GR_COPY_H2D || kind == GR_COPY_H2H;
    if (src_host) GR_TRY(check_host_end(c, src, bytes, false, what, "source", &ps));
    else GR_TRY(check_device_range(c, src, bytes, false, what, "source"));
    if (dst_host) GR_TRY(check_host_end(c, dst, bytes, false, what, "destination", &pd));
    else GR_TRY(check_device_range(c, dst, bytes, true, what, "destination"));
    *pageable = pd || ps;
    return GR_OK;
}

gr_status gr_sim_run_copy(gr_sim_ctx *c, void *dst, const void *src, size_t bytes, gr_copy_kind kind, bool capturing,
                          const char *what) {
    bool pageable;
    GR_TRY(check_copy(c, dst, src, bytes, kind, what, &pageable));
    if (bytes) memmove(dst, src, bytes);
    return GR_OK;
}

gr_status gr_sim_run_memset(gr_sim_ctx *c, void *dst, int value, size_t bytes, const char *what) {
    if (bytes == 0) return GR_OK;
    GR_TRY(check_device_range(c, dst, bytes, true, what, "destination"));
    memset(dst, value, bytes);
    return GR_OK;
}

static const char *copy_kind_name(gr_copy_kind k) {
    return k == GR_COPY_H2D ? "H2D" : k == GR_COPY_D2H ? "D2H" : k == GR_COPY_D2D ? "D2D" : "H2H";
}

static gr_status sim_memcpy_async(void *ctx, gr_stream *s, void *dst, const void *src, size_t bytes, gr_copy_kind kind) {
    gr_sim_ctx *c = ctx;
    char what[96];
    snprintf(what, sizeof(what), "%s copy of %zu bytes", copy_kind_name(kind), bytes);
    GR_TRY(stream_usable(s, what));
    if ((int)kind < 0 || kind > GR_COPY_H2H) return gr_error(GR_ERR_INVALID, "sim: bad copy kind %d", (int)kind);
    if (s->capturing) {
        bool pageable;
        gr_status st = check_copy(c, dst, src, bytes, kind, what, &pageable);
        if (st != GR_OK) return st;
        if (pageable) {
            gr_sim_invalidate(s, "%s from/to pageable host memory during capture", what);
            return gr_error(GR_ERR_HAZARD, "sim: %s: pageable host memory during stream capture (capture invalidated)",
                            what);
        }
        return gr_sim_capture_copy(c, s, dst, src, bytes, kind, 0, false);
    }
    GR_TRY(gr_sim_run_copy(c, dst, src, bytes, kind, false, what));
    double total = gr_sim_copy_time(bytes, kind);
    advance(c, s, gr_sim_cost.copy_host_us, GR_MAX(0.0, total - gr_sim_cost.copy_host_us));
    return GR_OK;
}

static gr_status sim_memset_async(void *ctx, gr_stream *s, void *dst, int value, size_t bytes) {
    gr_sim_ctx *c = ctx;
    char what[96];
    snprintf(what, sizeof(what), "memset of %zu bytes", bytes);
    GR_TRY(stream_usable(s, what));
    if (s->capturing) {
        if (bytes) GR_TRY(check_device_range(c, dst, bytes, true, what, "destination"));
        return gr_sim_capture_copy(c, s, dst, NULL, bytes, GR_COPY_D2D, value, true);
    }
    GR_TRY(gr_sim_run_memset(c, dst, value, bytes, what));
    advance(c, s, gr_sim_cost.copy_host_us,
            GR_MAX(gr_sim_cost.kernel_min_us, (double)bytes / gr_sim_cost.mem_bytes_per_us));
    return GR_OK;
}

/* ==== streams and events ===================================================================== */

static gr_status sim_stream_create(void *ctx, gr_stream **out) {
    gr_sim_ctx *c = ctx;
    *out = NULL;
    gr_stream *s = gr_calloc(1, sizeof(*s));
    if (!s) return GR_ERR_NOMEM;
    if (gr_vec_push(&c->streams, s) != GR_OK) {
        gr_free(s, sizeof(*s));
        return GR_ERR_NOMEM;
    }
    s->free_us = c->host_us;
    *out = s;
    return GR_OK;
}

static void stream_free(gr_stream *s) {
    if (s->graph) {
        gr_sim_body_free(&s->graph->root);
        gr_free(s->graph, sizeof(*s->graph));
    }
    gr_free(s, sizeof(*s));
}

static void sim_stream_destroy(void *ctx, gr_stream *s) {
    gr_sim_ctx *c = ctx;
    if (!s) return;
    for (int i = 0; i < c->streams.len; i++) {
        if (c->streams.data[i] == s) {
            c->streams.data[i] = c->streams.data[--c->streams.len];
            break;
        }
    }
    stream_free(s);
}

static gr_status sim_stream_sync(void *ctx, gr_stream *s) {
    gr_sim_ctx *c = ctx;
    if (!s) return gr_error(GR_ERR_INVALID, "sim: sync of a NULL stream");
    if (s->capturing) {
        gr_sim_invalidate(s, "stream synchronize during capture");
        return gr_error(GR_ERR_HAZARD, "sim: stream synchronize during stream capture (capture invalidated)");
    }
    c->host_us = GR_MAX(c->host_us, s->free_us);
    return GR_OK;
}

static gr_status sim_event_create(void *ctx, gr_event **out) {
    *out = gr_calloc(1, sizeof(gr_event));
    return *out ? GR_OK : GR_ERR_NOMEM;
}

static void sim_event_destroy(void *ctx, gr_event *e) { gr_free(e, sizeof(*e)); }

static gr_status sim_event_record(void *ctx, gr_event *e, gr_stream *s) {
    gr_sim_ctx *c = ctx;
    if (!s || !e) return gr_error(GR_ERR_INVALID, "sim: event record: NULL stream or event");
    if (s->capturing) return GR_OK; /* an event node; no timing inside graphs */
    e->t = GR_MAX(c->host_us, s->free_us);
    e->recorded = true;
    return GR_OK;
}

static gr_status sim_event_elapsed(void *ctx, gr_event *start, gr_event *end, double *out) {
    *out = 0;
    if (!start || !end || !start->recorded || !end->recorded)
        return gr_error(GR_ERR_INVALID, "sim: elapsed time of an event that was not recorded");
    *out = end->t - start->t;
    return GR_OK;
}

static double sim_clock_us(void *ctx) { return ((gr_sim_ctx *)ctx)->host_us; }

static const char *sim_name(void *ctx) { return "sim"; }

/* ==== creation ================================================================================ */

static void sim_destroy(void *ctx) {
    gr_sim_ctx *c = ctx;
    if (!c) return;
    for (int i = 0; i < c->streams.len; i++) stream_free(c->streams.data[i]);
    gr_vec_free(&c->streams);
    for (int i = 0; i < c->allocs.len; i++) {
        gr_sim_alloc *a = &c->allocs.data[i];
        if (a->alive || a->held) gr_free(a->base, a->size ? a->size : 1);
    }
    gr_vec_free(&c->allocs);
    gr_vec_free(&c->conds);
    /* left only when kernels were never released: freed with the device */
    for (int i = 0; i < c->templates.len; i++) {
        gr_kernel_destroy(c->templates.data[i]->k);
        gr_kstructure_free(&c->templates.data[i]->structure);
        gr_free(c->templates.data[i], sizeof(gr_sim_template));
    }
    gr_vec_free(&c->templates);
    gr_sim_comm_release(c);
    gr_free(c, sizeof(*c));
}

/* every kind: the simulator's memory is host memory tagged with its kind */
static bool sim_has_mem_kind(void *ctx, gr_mem_kind kind) {
    (void)ctx;
    return kind == GR_MEM_DEVICE || kind == GR_MEM_HOST_PINNED || kind == GR_MEM_HOST;
}

static const struct gr_device_i sim_iface = {
    .name = sim_name,
    .destroy = sim_destroy,
    .alloc = sim_alloc,
    .free = sim_free,
    .has_mem_kind = sim_has_mem_kind,
    .mem_in_use = sim_mem_in_use,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_sync = sim_stream_sync,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_elapsed_us = sim_event_elapsed,
    .memcpy_async = sim_memcpy_async,
    .memset_async = sim_memset_async,
    .kernel_prepare = sim_kernel_prepare,
    .kernel_release = sim_kernel_release,
    .kernel_launch = sim_kernel_launch,
    .libcall = sim_libcall,
    .capture_begin = gr_sim_capture_begin,
    .capture_end = gr_sim_capture_end,
    .graph_destroy = gr_sim_graph_destroy,
    .graph_instantiate = gr_sim_graph_instantiate,
    .exec_destroy = gr_sim_exec_destroy,
    .graph_upload = gr_sim_graph_upload,
    .graph_launch = gr_sim_graph_launch,
    .graph_num_nodes = gr_sim_graph_num_nodes,
    .graph_node_info = gr_sim_graph_node_info,
    .exec_kernel_node_set_args = gr_sim_exec_set_args,
    .exec_update = gr_sim_exec_update,
    .capture_mark_updatable = gr_sim_mark_updatable,
    .cond_create = gr_sim_cond_create,
    .cond_body_begin = gr_sim_cond_body_begin,
    .cond_body_end = gr_sim_cond_body_end,
    .clock_us = sim_clock_us,
    .kernel_stats = sim_kernel_stats,
    .mem_info = sim_mem_info,
    .comm_init = gr_sim_comm_init,
    .comm_enter = gr_sim_comm_enter,
    .comm_leave = gr_sim_comm_leave,
};

gr_status gr_device_sim_create(gr_device **out) {
    *out = NULL;
    gr_sim_ctx *c = gr_calloc(1, sizeof(*c));
    if (!c) return GR_ERR_NOMEM;
    gr_device *d = gr_calloc(1, sizeof(*d));
    if (!d) {
        gr_free(c, sizeof(*c));
        return GR_ERR_NOMEM;
    }
    d->iface = &sim_iface;
    d->ctx = c;
    d->kind = GR_DEVICE_SIM;
    *out = d;
    return GR_OK;
}
