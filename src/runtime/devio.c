/* runtime/devio — zero-copy device I/O around a session: device memory for callers
 * (what the simulator needs to be testable: its pointers are its own), and runs
 * ordered on a caller's stream. Binding inputs and output addresses are in session.c. */
#include "runtime/runtime-impl.h"
#include <string.h>

/* ==== device memory ================================================================================ */
gr_status gr_session_device_alloc(gr_session_t s, size_t nbytes, void **out) {
    if (out) *out = NULL;
    if (!s || !out) return gr_error(GR_ERR_INVALID, "gr_session_device_alloc: NULL argument");
    return gr_dev_alloc(s->dev, GR_MEM_DEVICE, nbytes ? nbytes : 1, out);
}

void gr_session_device_free(gr_session_t s, void *ptr) {
    if (!s || !ptr) return;
    /* the last run may still read it (a bound input) */
    if (s->pending) gr_session_wait(s);
    gr_dev_free(s->dev, ptr);
}

static gr_status copy_sync(gr_session_t s, void *dst, const void *src, size_t nbytes, gr_copy_kind kind, const char *what) {
    if (!s) return gr_error(GR_ERR_INVALID, "%s: session is NULL", what);
    if (!nbytes) return GR_OK;
    if (!dst || !src) return gr_error(GR_ERR_INVALID, "%s: NULL buffer", what);
    /* after the pending run: a download of an output sees its values */
    if (s->pending) GR_TRY(gr_session_wait(s));
    GR_TRY(gr_dev_memcpy(s->dev, s->stream, dst, src, nbytes, kind));
    return gr_dev_stream_sync(s->dev, s->stream);
}

gr_status gr_session_device_upload(gr_session_t s, void *dev_dst, const void *host_src, size_t nbytes) {
    return copy_sync(s, dev_dst, host_src, nbytes, GR_COPY_H2D, "gr_session_device_upload");
}

gr_status gr_session_device_download(gr_session_t s, void *host_dst, const void *dev_src, size_t nbytes) {
    return copy_sync(s, host_dst, dev_src, nbytes, GR_COPY_D2H, "gr_session_device_download");
}

/* ==== caller streams =================================================================================
 * graft's work stays on the session's own stream (captures there never touch the caller's
 * stream, which may be the legacy default stream where capture is illegal); events join the
 * two streams on the device, so neither side waits on the host. */
static gr_status caller_stream(gr_session_t s, void *handle, const char *what) {
    gr_device *d = s->dev;
    if (!gr_dev_caps_get(d).external_streams)
        return gr_error(GR_ERR_UNSUPPORTED,
                        "%s: device '%s' has no caller streams (the simulator runs each session on its own stream): pass NULL",
                        what, gr_dev_name(d));
    if (!s->ext_stream || s->ext_handle != handle) {
        gr_dev_stream_destroy(d, s->ext_stream);
        s->ext_stream = NULL;
        GR_TRY(gr_dev_stream_wrap(d, handle, &s->ext_stream));
        s->ext_handle = handle;
    }
    if (!s->ev_order) GR_TRY(gr_dev_event_create(d, &s->ev_order));
    if (!s->ev_done) GR_TRY(gr_dev_event_create(d, &s->ev_done));
    return GR_OK;
}

gr_status gr_session_order_stream(gr_session_t s, void *stream) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_order_stream: session is NULL");
    if (!stream) return GR_OK;
    GR_TRY(caller_stream(s, stream, "gr_session_order_stream"));
    GR_TRY(gr_dev_event_record(s->dev, s->ev_done, s->stream));
    return gr_dev_stream_wait_event(s->dev, s->ext_stream, s->ev_done);
}

gr_status gr_session_run_on_stream(gr_session_t s, void *stream) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_run_on_stream: session is NULL");
    if (stream) GR_RT_NO_TP(s, "gr_session_run_on_stream");
    if (!stream) return gr_session_run(s);
    GR_TRY(caller_stream(s, stream, "gr_session_run_on_stream"));
    /* the run starts after what the caller enqueued (its inputs) ... */
    GR_TRY(gr_dev_event_record(s->dev, s->ev_order, s->ext_stream));
    GR_TRY(gr_dev_stream_wait_event(s->dev, s->stream, s->ev_order));
    GR_TRY(gr_session_run(s));
    /* ... and the caller's later work after the run (its reads of the outputs) */
    return gr_session_order_stream(s, stream);
}

/* ==== the serving call ================================================================================ */
gr_status gr_session_run_device(gr_session_t s, void *stream, int n_inputs, const gr_device_input *inputs, int n_outputs,
                                gr_output *outs, void **out_ptrs) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_run_device: session is NULL");
    GR_RT_NO_TP(s, "gr_session_run_device");
    if (n_inputs < 0 || (n_inputs && !inputs))
        return gr_error(GR_ERR_INVALID, "gr_session_run_device: %d inputs%s", n_inputs, n_inputs > 0 ? " and no array" : "");
    if (n_outputs < 0 || n_outputs > s->graph->outputs.len)
        return gr_error(GR_ERR_INVALID, "gr_session_run_device: %d outputs asked for, the graph has %d", n_outputs,
                        s->graph->outputs.len);
    if (stream) GR_TRY(caller_stream(s, stream, "gr_session_run_device"));
    for (int i = 0; i < n_inputs; i++) {
        const gr_device_input *in = &inputs[i];
        GR_TRY(gr_rt_bind_device(s, in->name, in->dtype, in->ndim, in->dims, in->data, in->nbytes, false));
    }
    if (stream) { /* as gr_session_run_on_stream: after the caller's work, before its later work */
        GR_TRY(gr_dev_event_record(s->dev, s->ev_order, s->ext_stream));
        GR_TRY(gr_dev_stream_wait_event(s->dev, s->stream, s->ev_order));
    }
    GR_TRY(gr_rt_run_queued(s, true));
    if (stream) GR_TRY(gr_session_order_stream(s, stream));
    for (int i = 0; i < n_outputs; i++) {
        gr_output o = {.generation = s->generation, .index = i};
        if (outs) outs[i] = o;
        if (out_ptrs) GR_TRY(gr_rt_output_device_ptr(s, o, &out_ptrs[i]));
    }
    return GR_OK;
}
