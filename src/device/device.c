/* device — opening a backend and the NULL-safe wrappers over its vtable. */
#include "device/device.h"
#include <stdio.h>

gr_status gr_device_open(gr_device_kind kind, const char *cache_dir, int verbose, gr_device **out) {
    *out = NULL;
    switch (kind) {
    case GR_DEVICE_SIM: return gr_device_sim_create(out);
    case GR_DEVICE_CUDA: return gr_device_cuda_create(cache_dir, out);
    case GR_DEVICE_AUTO: {
        gr_status st = gr_device_cuda_create(cache_dir, out);
        if (st == GR_OK) return GR_OK;
        if (st == GR_ERR_NOMEM) return st;
        /* always said: a user asking for the best device must know it is the simulator */
        (void)verbose;
        fprintf(stderr, "graft: note: no usable CUDA device (%s); running on the simulator\n", gr_last_error());
        gr_error_clear();
        return gr_device_sim_create(out);
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

static const char *dev_name(gr_device *d) {
    return d->iface->name ? d->iface->name(d->ctx) : "device";
}

#define GR_DEV_REQUIRE(d, entry)                                                                \
    do {                                                                                        \
        if (!(d) || !(d)->iface)                                                                \
            return gr_error(GR_ERR_INVALID, "%s: no device", #entry);                           \
        if (!(d)->iface->entry)                                                                 \
            return gr_error(GR_ERR_UNSUPPORTED, "device %s does not support %s", dev_name(d), #entry); \
    } while (0)

gr_status gr_dev_alloc(gr_device *d, gr_mem_kind kind, size_t bytes, void **out) {
    *out = NULL;
    GR_DEV_REQUIRE(d, alloc);
    return d->iface->alloc(d->ctx, kind, bytes, out);
}

void gr_dev_free(gr_device *d, void *p) {
    if (!d || !d->iface || !d->iface->free || !p) return;
    d->iface->free(d->ctx, p);
}

gr_status gr_dev_memcpy(gr_device *d, gr_stream *s, void *dst, const void *src, size_t bytes, gr_copy_kind kind) {
    GR_DEV_REQUIRE(d, memcpy_async);
    return d->iface->memcpy_async(d->ctx, s, dst, src, bytes, kind);
}

gr_status gr_dev_launch(gr_device *d, gr_stream *s, gr_kfunc *f, const gr_karg *args, int n_args) {
    GR_DEV_REQUIRE(d, kernel_launch);
    return d->iface->kernel_launch(d->ctx, s, f, args, n_args);
}

gr_status gr_dev_libcall(gr_device *d, gr_stream *s, const gr_libcall *c, const gr_karg *args, int n_args) {
    GR_DEV_REQUIRE(d, libcall);
    return d->iface->libcall(d->ctx, s, c, args, n_args);
}

gr_status gr_dev_sync(gr_device *d, gr_stream *s) {
    GR_DEV_REQUIRE(d, stream_sync);
    return d->iface->stream_sync(d->ctx, s);
}
