/* device — opening a backend, and the façade: the only code outside the
 * backends that reads the vtable (see device.h). */
#include "device/device.h"
#include <stdio.h>
#include <string.h>

/* ==== opening ================================================================================ */

static gr_status check_kind(gr_status st, gr_device **out) {
    /* the kind is what the CLI and gr_session_device_kind report: a backend must set it */
    if (st == GR_OK && (*out)->kind != GR_DEVICE_SIM && (*out)->kind != GR_DEVICE_CUDA) {
        gr_status bad = gr_error(GR_ERR_INTERNAL, "device '%s' did not record its kind (%d)", gr_dev_name(*out), (int)(*out)->kind);
        gr_device_destroy(*out);
        *out = NULL;
        return bad;
    }
    return st;
}

gr_status gr_device_open(gr_device_kind kind, const char *cache_dir, int verbose, gr_device **out) {
    *out = NULL;
    switch (kind) {
    case GR_DEVICE_SIM: return check_kind(gr_device_sim_create(out), out);
    case GR_DEVICE_CUDA: return check_kind(gr_device_cuda_create(cache_dir, out), out);
    case GR_DEVICE_AUTO: {
        gr_status st = gr_device_cuda_create(cache_dir, out);
        if (st == GR_OK) return check_kind(st, out);
        if (st == GR_ERR_NOMEM) return st;
        /* always said: a user asking for the best device must know it is the simulator */
        (void)verbose;
        fprintf(stderr, "graft: note: no usable CUDA device (%s); running on the simulator\n", gr_last_error());
        gr_error_clear();
        return check_kind(gr_device_sim_create(out), out);
    }
    }
    return gr_error(GR_ERR_INVALID, "unknown device kind %d", (int)kind);
}

void gr_device_destroy(gr_device *d) {
    if (!d) return;
    /* backends gr_malloc the gr_device separately from their context (see device.h) */
    if (d->iface && d->iface->destroy) d->iface->destroy(d->ctx);
    gr_free(d, sizeof(*d));
}

/* ==== capabilities =========================================================================== */

gr_dev_caps gr_dev_caps_get(const gr_device *d) {
    gr_dev_caps c;
    memset(&c, 0, sizeof c);
    if (!d || !d->iface) return c;
    const struct gr_device_i *i = d->iface;
    c.collectives = i->comm_init && i->comm_enter && i->comm_leave;
    c.events = i->event_create && i->event_destroy && i->event_record && i->event_elapsed_us;
    c.graphs = i->capture_begin && i->capture_end && i->graph_instantiate && i->graph_launch && i->graph_destroy &&
               i->exec_destroy;
    c.graph_nodes = c.graphs && i->graph_num_nodes && i->graph_node_info;
    c.node_set_args = c.graphs && i->exec_kernel_node_set_args;
    c.exec_update = c.graphs && i->exec_update;
    c.updatable_nodes = c.graphs && i->capture_mark_updatable;
    c.conditional_nodes = c.graphs && i->cond_create && i->cond_body_begin && i->cond_body_end;
    c.external_streams = c.events && i->stream_wrap && i->stream_wait_event;
    c.pinned_memory = gr_dev_has_mem_kind(d, GR_MEM_HOST_PINNED);
    c.mem_info = i->mem_info != NULL;
    c.kernels_warm = i->kernels_warm != NULL;
    return c;
}

/* ==== wrappers ================================================================================ */

/* A new vtable entry needs its wrapper below (and a capability if optional): this
 * trips when the struct grows. */
_Static_assert(sizeof(struct gr_device_i) == 45 * sizeof(void (*)(void)),
               "struct gr_device_i changed: add the gr_dev_* wrapper for the new entry");

const char *gr_dev_name(const gr_device *d) {
    if (!d || !d->iface) return "?";
    return d->iface->name ? d->iface->name(d->ctx) : "device";
}

#define GR_DEV_REQUIRE(d, entry)                                                                     \
    do {                                                                                             \
        if (!(d) || !(d)->iface) return gr_error(GR_ERR_INVALID, "%s: no device", #entry);           \
        if (!(d)->iface->entry)                                                                      \
            return gr_error(GR_ERR_UNSUPPORTED, "device %s does not support %s", gr_dev_name(d), #entry); \
    } while (0)

/* for the void entries: nothing to release, or nothing to release it with */
#define GR_DEV_HAS(d, entry) ((d) && (d)->iface && (d)->iface->entry)

/* ---- memory ---- */
gr_status gr_dev_alloc(gr_device *d, gr_mem_kind kind, size_t bytes, void **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, alloc);
    return d->iface->alloc(d->ctx, kind, bytes, out);
}

void gr_dev_free(gr_device *d, void *p) {
    if (p && GR_DEV_HAS(d, free)) d->iface->free(d->ctx, p);
}

bool gr_dev_has_mem_kind(const gr_device *d, gr_mem_kind kind) {
    if (!d || !d->iface || !d->iface->alloc) return false;
    if (!d->iface->has_mem_kind) return kind == GR_MEM_DEVICE;
    return d->iface->has_mem_kind(d->ctx, kind);
}

size_t gr_dev_mem_in_use(const gr_device *d) { return GR_DEV_HAS(d, mem_in_use) ? d->iface->mem_in_use(d->ctx) : 0; }

gr_status gr_dev_comm_init(gr_device *const *devs, int n) {
    if (n < 1 || !devs || !devs[0]) return gr_error(GR_ERR_INVALID, "gr_dev_comm_init: no devices");
    GR_DEV_REQUIRE(devs[0], comm_init);
    void *ctxs[GR_DEV_MAX_RANKS];
    if (n > GR_DEV_MAX_RANKS) return gr_error(GR_ERR_INVALID, "gr_dev_comm_init: %d devices, at most %d", n, GR_DEV_MAX_RANKS);
    for (int i = 0; i < n; i++) {
        if (!devs[i] || devs[i]->iface != devs[0]->iface)
            return gr_error(GR_ERR_INVALID, "gr_dev_comm_init: device %d is not of the backend of device 0", i);
        ctxs[i] = devs[i]->ctx;
    }
    return devs[0]->iface->comm_init(ctxs, n, NULL, 0, n);
}

gr_status gr_dev_comm_enter(gr_device *d) {
    if (!d || !d->iface || !d->iface->comm_enter) return GR_OK;
    return d->iface->comm_enter(d->ctx);
}

gr_status gr_dev_thread_bind(gr_device *d) {
    if (!d || !d->iface || !d->iface->thread_bind) return GR_OK;
    return d->iface->thread_bind(d->ctx);
}

void gr_dev_comm_leave(gr_device *d) {
    if (d && d->iface && d->iface->comm_leave) d->iface->comm_leave(d->ctx);
}

gr_status gr_dev_mem_info(gr_device *d, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    GR_DEV_REQUIRE(d, mem_info);
    return d->iface->mem_info(d->ctx, free_bytes, total_bytes);
}

/* ---- streams and events ---- */
gr_status gr_dev_stream_create(gr_device *d, gr_stream **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, stream_create);
    return d->iface->stream_create(d->ctx, out);
}

void gr_dev_stream_destroy(gr_device *d, gr_stream *s) {
    if (s && GR_DEV_HAS(d, stream_destroy)) d->iface->stream_destroy(d->ctx, s);
}

gr_status gr_dev_stream_sync(gr_device *d, gr_stream *s) {
    GR_DEV_REQUIRE(d, stream_sync);
    return d->iface->stream_sync(d->ctx, s);
}

gr_status gr_dev_event_create(gr_device *d, gr_event **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, event_create);
    return d->iface->event_create(d->ctx, out);
}

gr_status gr_dev_stream_wrap(gr_device *d, void *handle, gr_stream **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, stream_wrap);
    return d->iface->stream_wrap(d->ctx, handle, out);
}

gr_status gr_dev_stream_wait_event(gr_device *d, gr_stream *s, gr_event *e) {
    GR_DEV_REQUIRE(d, stream_wait_event);
    return d->iface->stream_wait_event(d->ctx, s, e);
}

void gr_dev_event_destroy(gr_device *d, gr_event *e) {
    if (e && GR_DEV_HAS(d, event_destroy)) d->iface->event_destroy(d->ctx, e);
}

gr_status gr_dev_event_record(gr_device *d, gr_event *e, gr_stream *s) {
    GR_DEV_REQUIRE(d, event_record);
    return d->iface->event_record(d->ctx, e, s);
}

gr_status gr_dev_event_elapsed_us(gr_device *d, gr_event *start, gr_event *end, double *out) {
    *out = 0;
    GR_DEV_REQUIRE(d, event_elapsed_us);
    return d->iface->event_elapsed_us(d->ctx, start, end, out);
}

/* ---- work ---- */
gr_status gr_dev_memcpy(gr_device *d, gr_stream *s, void *dst, const void *src, size_t bytes, gr_copy_kind kind) {
    GR_DEV_REQUIRE(d, memcpy_async);
    return d->iface->memcpy_async(d->ctx, s, dst, src, bytes, kind);
}

gr_status gr_dev_memcpy2d(gr_device *d, gr_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t height, gr_copy_kind kind) {
    if (!width || !height) return GR_OK;
    if (dpitch < width || spitch < width)
        return gr_error(GR_ERR_INVALID, "memcpy2d: row of %zu bytes, pitches %zu (dst) and %zu (src)", width, dpitch, spitch);
    if (height == 1 || (dpitch == width && spitch == width)) {
        size_t n;
        if (__builtin_mul_overflow(width, height, &n)) return gr_error(GR_ERR_INVALID, "memcpy2d: %zu rows of %zu bytes overflow", height, width);
        return gr_dev_memcpy(d, s, dst, src, n, kind);
    }
    if (GR_DEV_HAS(d, memcpy2d_async)) return d->iface->memcpy2d_async(d->ctx, s, dst, dpitch, src, spitch, width, height, kind);
    for (size_t r = 0; r < height; r++)
        GR_TRY(gr_dev_memcpy(d, s, (char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind));
    return GR_OK;
}

gr_status gr_dev_memset(gr_device *d, gr_stream *s, void *dst, int value, size_t bytes) {
    GR_DEV_REQUIRE(d, memset_async);
    return d->iface->memset_async(d->ctx, s, dst, value, bytes);
}

gr_status gr_dev_kernel_prepare_flags(gr_device *d, const gr_kernel *k, unsigned flags, gr_kfunc **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, kernel_prepare);
    if (flags & ~(GR_KPREP_GENERIC | GR_KPREP_BORROW | GR_KPREP_VERIFIED | GR_KPREP_SLOT_TABLE)) return gr_error(GR_ERR_INVALID, "kernel_prepare: unknown flags 0x%x", flags);
    return d->iface->kernel_prepare(d->ctx, k, flags, out);
}

gr_status gr_dev_kernels_warm(gr_device *d, const gr_kernel *const *ks, const unsigned *flags, int n) {
    if (!d || !d->iface->kernels_warm || n < 2) return GR_OK;
    gr_status st = d->iface->kernels_warm(d->ctx, ks, flags, n);
    if (st == GR_ERR_NOMEM) return st;
    gr_error_clear();
    return GR_OK;
}

gr_status gr_dev_kernel_prepare(gr_device *d, const gr_kernel *k, gr_kfunc **out) {
    return gr_dev_kernel_prepare_flags(d, k, 0, out);
}

void gr_dev_kernel_release(gr_device *d, gr_kfunc *f) {
    if (f && GR_DEV_HAS(d, kernel_release)) d->iface->kernel_release(d->ctx, f);
}

gr_status gr_dev_kernel_launch(gr_device *d, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args) {
    GR_DEV_REQUIRE(d, kernel_launch);
    return d->iface->kernel_launch(d->ctx, s, f, args, n_args);
}

gr_status gr_dev_libcall(gr_device *d, gr_stream *s, const gr_libcall *c, const gr_karg *args, int n_args) {
    GR_DEV_REQUIRE(d, libcall);
    return d->iface->libcall(d->ctx, s, c, args, n_args);
}

/* ---- CUDA graphs ---- */
gr_status gr_dev_capture_begin(gr_device *d, gr_stream *s) {
    GR_DEV_REQUIRE(d, capture_begin);
    return d->iface->capture_begin(d->ctx, s);
}

gr_status gr_dev_capture_end(gr_device *d, gr_stream *s, gr_dgraph **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, capture_end);
    return d->iface->capture_end(d->ctx, s, out);
}

void gr_dev_graph_destroy(gr_device *d, gr_dgraph *g) {
    if (g && GR_DEV_HAS(d, graph_destroy)) d->iface->graph_destroy(d->ctx, g);
}

gr_status gr_dev_graph_instantiate(gr_device *d, gr_dgraph *g, gr_dexec **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, graph_instantiate);
    return d->iface->graph_instantiate(d->ctx, g, out);
}

void gr_dev_exec_destroy(gr_device *d, gr_dexec *e) {
    if (e && GR_DEV_HAS(d, exec_destroy)) d->iface->exec_destroy(d->ctx, e);
}

gr_status gr_dev_graph_upload(gr_device *d, gr_dexec *e, gr_stream *s) {
    if (!d || !d->iface) return gr_error(GR_ERR_INVALID, "graph_upload: no device");
    /* optional: without it the first launch uploads the graph */
    return d->iface->graph_upload ? d->iface->graph_upload(d->ctx, e, s) : GR_OK;
}

gr_status gr_dev_graph_launch(gr_device *d, gr_dexec *e, gr_stream *s) {
    GR_DEV_REQUIRE(d, graph_launch);
    return d->iface->graph_launch(d->ctx, e, s);
}

int gr_dev_graph_num_nodes(gr_device *d, gr_dgraph *g) {
    return GR_DEV_HAS(d, graph_num_nodes) ? d->iface->graph_num_nodes(d->ctx, g) : 0;
}

gr_status gr_dev_graph_node_info(gr_device *d, gr_dgraph *g, int node, gr_gnode_info *out) {
    memset(out, 0, sizeof *out);
    GR_DEV_REQUIRE(d, graph_node_info);
    return d->iface->graph_node_info(d->ctx, g, node, out);
}

gr_status gr_dev_exec_kernel_node_set_args(gr_device *d, gr_dexec *e, int node, const gr_karg *args, int n_args) {
    GR_DEV_REQUIRE(d, exec_kernel_node_set_args);
    return d->iface->exec_kernel_node_set_args(d->ctx, e, node, args, n_args);
}

gr_status gr_dev_exec_update(gr_device *d, gr_dexec *e, gr_dgraph *g) {
    GR_DEV_REQUIRE(d, exec_update);
    return d->iface->exec_update(d->ctx, e, g);
}

gr_status gr_dev_capture_mark_updatable(gr_device *d, gr_stream *s, uint64_t *out_handle) {
    *out_handle = 0;
    GR_DEV_REQUIRE(d, capture_mark_updatable);
    return d->iface->capture_mark_updatable(d->ctx, s, out_handle);
}

gr_status gr_dev_cond_create(gr_device *d, gr_stream *s, gr_cond_kind kind, unsigned default_value, uint64_t *out_handle) {
    *out_handle = 0;
    GR_DEV_REQUIRE(d, cond_create);
    return d->iface->cond_create(d->ctx, s, kind, default_value, out_handle);
}

gr_status gr_dev_cond_body_begin(gr_device *d, gr_stream *s, uint64_t handle, int branch) {
    GR_DEV_REQUIRE(d, cond_body_begin);
    return d->iface->cond_body_begin(d->ctx, s, handle, branch);
}

gr_status gr_dev_cond_body_end(gr_device *d, gr_stream *s, uint64_t handle, int branch) {
    GR_DEV_REQUIRE(d, cond_body_end);
    return d->iface->cond_body_end(d->ctx, s, handle, branch);
}

/* ---- time ---- */
double gr_dev_clock_us(const gr_device *d) { return GR_DEV_HAS(d, clock_us) ? d->iface->clock_us(d->ctx) : gr_now_us(); }

/* ---- counters ---- */
void gr_dev_kernel_stats(const gr_device *d, gr_dev_kstats *out) {
    memset(out, 0, sizeof *out);
    if (GR_DEV_HAS(d, kernel_stats)) d->iface->kernel_stats(d->ctx, out);
}
