/* Zero-copy device I/O on the simulator (include/graft.h, "zero-copy device I/O"):
 * inputs bound to a caller's device buffer are read in place (graph nodes repointed when
 * the address moves, nothing copied or updated when it does not), copied into the
 * placeholder where a library call reads them inside a graph, mirrored to the host where a
 * step reads them there; output device addresses follow the generation rule; caller
 * streams are refused on the simulator; a freed or foreign buffer is a hazard, not a read. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

/* kernels only: x is read in place in every mode */
static const char *ew_gir =
    "graft 1\n"
    "input x: f32[4, 8]\n"
    "input temperature: f32[] @host\n"
    "const b: f32[8] = [0, 1, 2, 3, 4, 5, 6, 7]\n"
    "s = div(x, temperature)\n"
    "e = exp(s)\n"
    "y = add(e, b)\n"
    "output y\n";

/* no host scalar: the kernels reading x are re-checked only because x may move */
static const char *plain_gir =
    "graft 1\n"
    "input x: f32[4, 8]\n"
    "input temperature: f32[]\n"
    "const b: f32[8] = [0, 1, 2, 3, 4, 5, 6, 7]\n"
    "e = exp(x)\n"
    "y = add(e, b)\n"
    "z = mul(y, temperature)\n"
    "output z\n";

/* a matmul (library call) reads x: in graph mode it is copied into its placeholder */
static const char *mm_gir =
    "graft 1\n"
    "input x: f32[4, 8]\n"
    "input temperature: f32[] @host\n"
    "w = random_normal(shape=[8, 8], seed=3, std=0.5)\n"
    "h = matmul(x, w)\n"
    "s = div(h, temperature)\n"
    "y = softmax(s, axis=-1)\n"
    "output y\n";

static const char *dyn_gir =
    "graft 1\n"
    "input x: f32[N, 8]\n"
    "y = mul(x, x)\n"
    "z = reduce_sum(y, axes=[1], keepdims=0)\n"
    "output z\n";

static const int64_t xd[2] = {4, 8};

static void fill(float *x, int n, float k) {
    for (int i = 0; i < n; i++) x[i] = k * (float)((i * 7) % 13 - 6) / 8.0f;
}

static gr_session_t open_session(const char *gir, gr_mode mode) {
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    CHECK_OK(gr_graph_parse(gir, "devio.gir", NULL, &g));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = mode;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    return s;
}

/* the same model with host inputs: the reference */
static void reference(const char *gir, const float *x, float temp, float *y) {
    gr_session_t s = open_session(gir, GR_MODE_EAGER);
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, xd, x, sizeof(float) * 32));
    CHECK_OK(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &temp, sizeof temp));
    CHECK_OK(gr_session_run(s));
    gr_output o;
    CHECK_OK(gr_session_output(s, 0, &o));
    CHECK_OK(gr_session_output_read(s, o, y, sizeof(float) * 32));
    gr_session_destroy(s);
}

/* binds x to dev, sets temperature, runs, reads y; returns the run's stats */
static gr_run_stats run_bound(gr_session_t s, void *dev, float temp, float *y) {
    gr_run_stats st;
    memset(&st, 0, sizeof st);
    CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, xd, dev, sizeof(float) * 32));
    CHECK_OK(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &temp, sizeof temp));
    CHECK_OK(gr_session_run(s));
    CHECK_OK(gr_session_stats(s, &st));
    gr_output o;
    CHECK_OK(gr_session_output(s, 0, &o));
    CHECK_OK(gr_session_output_read(s, o, y, sizeof(float) * 32));
    return st;
}

/* In place: the address the graph was captured with costs nothing; a new one repoints
 * the nodes that read it, and the results follow the buffer. */
static void test_in_place(const char *gir, gr_mode mode) {
    long live0 = gr_debug_live_allocs();
    gr_session_t s = open_session(gir, mode);
    /* a temperature set from host memory into a device placeholder is copied every run */
    size_t temp_bytes = strstr(gir, "@host") ? 0 : sizeof(float);
    float xa[32], xb[32], ya[32], yb[32], y[32];
    fill(xa, 32, 1.0f);
    fill(xb, 32, -0.5f);
    reference(gir, xa, 2.0f, ya);
    reference(gir, xb, 2.0f, yb);
    void *a = NULL, *b = NULL;
    CHECK_OK(gr_session_device_alloc(s, sizeof xa, &a));
    CHECK_OK(gr_session_device_alloc(s, sizeof xb, &b));
    CHECK_OK(gr_session_device_upload(s, a, xa, sizeof xa));
    CHECK_OK(gr_session_device_upload(s, b, xb, sizeof xb));
    gr_run_stats st;
    for (int r = 0; r < 3; r++) { /* graph mode: warm-up, capture + replay, replay */
        st = run_bound(s, a, 2.0f, y);
        CHECK_MSG(!memcmp(y, ya, sizeof y), "mode %d run %d: output differs from the host-bound run", mode, r);
        CHECK(st.bytes_copied == temp_bytes);
        CHECK(st.inputs_in_place == 1);
    }
    CHECK(st.nodes_updated == 0);
    if (mode == GR_MODE_GRAPH) CHECK(st.graph_launches == 1);
    st = run_bound(s, b, 2.0f, y); /* moved: repointed, not copied */
    CHECK(!memcmp(y, yb, sizeof y));
    CHECK(st.bytes_copied == temp_bytes);
    if (mode == GR_MODE_GRAPH) CHECK_MSG(st.nodes_updated >= 1, "%ld nodes updated", st.nodes_updated);
    if (mode == GR_MODE_EAGER) CHECK(st.nodes_updated == 0);
    st = run_bound(s, b, 2.0f, y); /* same address again: nothing to do */
    CHECK(!memcmp(y, yb, sizeof y));
    CHECK(st.nodes_updated == 0 && st.bytes_copied == temp_bytes);
    st = run_bound(s, a, 2.0f, y); /* back */
    CHECK(!memcmp(y, ya, sizeof y));
    /* host data again: the placeholder, bit-identical */
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, xd, xb, sizeof xb));
    CHECK_OK(gr_session_run(s));
    gr_output o;
    CHECK_OK(gr_session_output(s, 0, &o));
    CHECK_OK(gr_session_output_read(s, o, y, sizeof y));
    CHECK(!memcmp(y, yb, sizeof y));
    CHECK_OK(gr_session_stats(s, &st));
    CHECK(st.bytes_copied == sizeof xb && st.inputs_in_place == 0); /* temperature not set again */
    gr_session_device_free(s, a);
    gr_session_device_free(s, b);
    gr_session_destroy(s);
    CHECK(gr_debug_live_allocs() == live0);
}

/* A matmul reads x inside a captured segment: its node cannot be repointed. The first
 * address is pinned and read in place; once the buffer moves, it is copied device-to-device
 * into the placeholder each time it is bound (the graph reading it captured again). */
static void test_copied_for_libcall(void) {
    gr_session_t s = open_session(mm_gir, GR_MODE_GRAPH);
    float xa[32], xb[32], ya[32], yb[32], y[32];
    fill(xa, 32, 1.0f);
    fill(xb, 32, 0.25f);
    reference(mm_gir, xa, 1.5f, ya);
    reference(mm_gir, xb, 1.5f, yb);
    void *a = NULL, *b = NULL;
    CHECK_OK(gr_session_device_alloc(s, sizeof xa, &a));
    CHECK_OK(gr_session_device_alloc(s, sizeof xb, &b));
    CHECK_OK(gr_session_device_upload(s, a, xa, sizeof xa));
    CHECK_OK(gr_session_device_upload(s, b, xb, sizeof xb));
    for (int r = 0; r < 4; r++) {
        gr_run_stats st = run_bound(s, r % 2 ? b : a, 1.5f, y);
        CHECK_MSG(!memcmp(y, r % 2 ? yb : ya, sizeof y), "run %d: output differs from the host-bound run", r);
        size_t want_copied = r ? sizeof xa : 0;
        CHECK_MSG(st.bytes_copied == want_copied && st.inputs_in_place == (r ? 0 : 1), "run %d: %zu bytes copied, %ld in place", r,
                  st.bytes_copied, st.inputs_in_place);
    }
    gr_session_device_free(s, a);
    gr_session_device_free(s, b);
    gr_session_destroy(s);
}

/* a weight read by a library call, as torch.compile's parameters are */
static const char *weight_gir =
    "graft 1\n"
    "input x: f32[4, 8]\n"
    "input w: f32[8, 256]\n"
    "h = matmul(x, w)\n"
    "y = tanh(h)\n"
    "output y\n";

enum { W_ELEMS = 8 * 256, Y_ELEMS = 4 * 256 };
static const int64_t wd[2] = {8, 256};

/* runs weight_gir with x from host memory and w bound to dev (or from host memory when dev
 * is NULL); returns the run's stats */
static gr_run_stats run_weight(gr_session_t s, const float *x, void *dev, const float *w, float *y) {
    gr_run_stats st;
    memset(&st, 0, sizeof st);
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, xd, x, sizeof(float) * 32));
    if (dev) CHECK_OK(gr_session_bind_input_device(s, "w", GR_F32, 2, wd, dev, sizeof(float) * W_ELEMS));
    else CHECK_OK(gr_session_set_input(s, "w", GR_F32, 2, wd, w, sizeof(float) * W_ELEMS));
    CHECK_OK(gr_session_run(s));
    CHECK_OK(gr_session_stats(s, &st));
    gr_output o;
    CHECK_OK(gr_session_output(s, 0, &o));
    CHECK_OK(gr_session_output_read(s, o, y, sizeof(float) * Y_ELEMS));
    return st;
}

/* A weight bound once and read by a library call inside captured graphs (graph and auto
 * modes) stays in place: through warm-up, capture and replays nothing of it is copied and
 * graft holds no placeholder for it (the session's device memory is the host-set session's,
 * where the placeholder stands in for the caller's buffer). A weight that moves afterwards
 * is copied into its placeholder, the graph captured again, the results right. */
static void test_libcall_weight_in_place(gr_mode mode) {
    long live0 = gr_debug_live_allocs();
    static float x[32], w[W_ELEMS], w2[W_ELEMS], want[Y_ELEMS], want2[Y_ELEMS], y[Y_ELEMS];
    fill(x, 32, 1.0f);
    fill(w, W_ELEMS, 0.5f);
    fill(w2, W_ELEMS, -0.25f);
    gr_session_t ref = open_session(weight_gir, mode);
    gr_run_stats host_st = run_weight(ref, x, NULL, w, want);
    for (int r = 0; r < 3; r++) host_st = run_weight(ref, x, NULL, w, want);
    run_weight(ref, x, NULL, w2, want2);
    gr_session_destroy(ref);

    gr_session_t s = open_session(weight_gir, mode);
    void *dw = NULL, *dw2 = NULL;
    CHECK_OK(gr_session_device_alloc(s, sizeof w, &dw));
    CHECK_OK(gr_session_device_upload(s, dw, w, sizeof w));
    gr_run_stats st;
    for (int r = 0; r < 4; r++) { /* warm-up, capture + replay, replays */
        st = run_weight(s, x, dw, NULL, y);
        CHECK_MSG(!memcmp(y, want, sizeof y), "mode %d run %d: output differs from the host-set run", mode, r);
        CHECK_MSG(st.bytes_copied == sizeof x && st.inputs_in_place == 1, "mode %d run %d: %zu bytes copied, %ld in place",
                  mode, r, st.bytes_copied, st.inputs_in_place);
    }
    if (mode == GR_MODE_GRAPH) CHECK_MSG(st.graph_launches == 1, "%ld graph launches", st.graph_launches);
    CHECK_MSG(st.device_bytes < host_st.device_bytes + sizeof w, "mode %d: %zu device bytes bound, %zu host-set", mode,
              st.device_bytes, host_st.device_bytes);
    /* moved: copied into the placeholder, captured again; then stable there */
    CHECK_OK(gr_session_device_alloc(s, sizeof w2, &dw2));
    CHECK_OK(gr_session_device_upload(s, dw2, w2, sizeof w2));
    st = run_weight(s, x, dw2, NULL, y);
    CHECK(!memcmp(y, want2, sizeof y));
    bool graphs = mode != GR_MODE_EAGER; /* eager: nothing captured, the new buffer is read in place */
    CHECK_MSG(st.bytes_copied == sizeof x + (graphs ? sizeof w2 : 0) && st.inputs_in_place == (graphs ? 0 : 1),
              "mode %d moved: %zu bytes copied, %ld in place", mode, st.bytes_copied, st.inputs_in_place);
    gr_session_device_free(s, dw); /* (graphs: the placeholder holds w2 now) the old buffer is not read again */
    for (int r = 0; r < 3; r++) {
        st = run_weight(s, x, dw2, NULL, y);
        CHECK_MSG(!memcmp(y, want2, sizeof y), "mode %d run %d after the move: output differs", mode, r);
    }
    if (mode == GR_MODE_GRAPH) CHECK(st.graph_launches == 1);
    /* host data after all that: the placeholder, right */
    st = run_weight(s, x, NULL, w, y);
    CHECK(!memcmp(y, want, sizeof y));
    gr_session_device_free(s, dw2);
    gr_session_destroy(s);
    CHECK(gr_debug_live_allocs() == live0);
}

/* A host-read input (a scalar read by value) bound to device memory is copied to the host. */
static void test_host_read_input(gr_mode mode) {
    gr_session_t s = open_session(ew_gir, mode);
    float x[32], want[32], y[32], temp = 3.0f;
    fill(x, 32, 1.0f);
    reference(ew_gir, x, temp, want);
    void *dx = NULL, *dt = NULL;
    CHECK_OK(gr_session_device_alloc(s, sizeof x, &dx));
    CHECK_OK(gr_session_device_alloc(s, sizeof temp, &dt));
    CHECK_OK(gr_session_device_upload(s, dx, x, sizeof x));
    for (int r = 0; r < 3; r++) {
        CHECK_OK(gr_session_device_upload(s, dt, &temp, sizeof temp));
        CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, xd, dx, sizeof x));
        CHECK_OK(gr_session_bind_input_device(s, "temperature", GR_F32, 0, NULL, dt, sizeof temp));
        CHECK_OK(gr_session_run(s));
        gr_output o;
        CHECK_OK(gr_session_output(s, 0, &o));
        CHECK_OK(gr_session_output_read(s, o, y, sizeof y));
        CHECK(!memcmp(y, want, sizeof y));
        gr_run_stats st;
        CHECK_OK(gr_session_stats(s, &st));
        CHECK(st.bytes_copied == sizeof temp);
    }
    /* the scalar changes in device memory and is bound again: the run sees it */
    float temp2 = 0.5f;
    reference(ew_gir, x, temp2, want);
    CHECK_OK(gr_session_device_upload(s, dt, &temp2, sizeof temp2));
    CHECK_OK(gr_session_bind_input_device(s, "temperature", GR_F32, 0, NULL, dt, sizeof temp2));
    CHECK_OK(gr_session_run(s));
    gr_output o;
    CHECK_OK(gr_session_output(s, 0, &o));
    CHECK_OK(gr_session_output_read(s, o, y, sizeof y));
    CHECK(!memcmp(y, want, sizeof y));
    gr_session_device_free(s, dx);
    gr_session_device_free(s, dt);
    gr_session_destroy(s);
}

/* Output device addresses: the run's values, until the next run; an old handle is stale. */
static void test_output_device_ptr(void) {
    gr_session_t s = open_session(ew_gir, GR_MODE_GRAPH);
    float x[32], y[32], via_ptr[32];
    fill(x, 32, 1.0f);
    void *dx = NULL;
    CHECK_OK(gr_session_device_alloc(s, sizeof x, &dx));
    CHECK_OK(gr_session_device_upload(s, dx, x, sizeof x));
    run_bound(s, dx, 2.0f, y);
    gr_output o;
    CHECK_OK(gr_session_output(s, 0, &o));
    void *py = NULL;
    CHECK_OK(gr_session_output_device_ptr(s, o, &py));
    CHECK(py != NULL);
    CHECK_OK(gr_session_device_download(s, via_ptr, py, sizeof via_ptr));
    CHECK(!memcmp(via_ptr, y, sizeof y));
    run_bound(s, dx, 4.0f, y);
    void *again = NULL;
    CHECK_ERR(gr_session_output_device_ptr(s, o, &again), GR_ERR_STALE, "has run again");
    CHECK(again == NULL);
    CHECK_ERR(gr_session_output_device_ptr(s, o, NULL), GR_ERR_INVALID, "NULL");
    gr_session_device_free(s, dx);
    gr_session_destroy(s);
}

/* Bad bindings are refused with the input's name; freed and foreign buffers are hazards. */
static void test_errors(void) {
    gr_session_t s = open_session(ew_gir, GR_MODE_GRAPH);
    float x[32], y[32];
    fill(x, 32, 1.0f);
    void *dx = NULL;
    CHECK_OK(gr_session_device_alloc(s, sizeof x, &dx));
    CHECK_OK(gr_session_device_upload(s, dx, x, sizeof x));
    int64_t bad[2] = {4, 7};
    CHECK_ERR(gr_session_bind_input_device(s, "x", GR_F32, 2, bad, dx, sizeof(float) * 28), GR_ERR_SHAPE, "input 'x': dim 1 is 7");
    CHECK_ERR(gr_session_bind_input_device(s, "x", GR_I32, 2, xd, dx, sizeof x), GR_ERR_SHAPE, "dtype i32 given");
    CHECK_ERR(gr_session_bind_input_device(s, "x", GR_F32, 2, xd, dx, sizeof x - 4), GR_ERR_SHAPE, "bytes given");
    CHECK_ERR(gr_session_bind_input_device(s, "x", GR_F32, 2, xd, NULL, sizeof x), GR_ERR_INVALID, "input 'x': data is NULL");
    CHECK_ERR(gr_session_bind_input_device(s, "nope", GR_F32, 2, xd, dx, sizeof x), GR_ERR_NOT_FOUND, "no input named 'nope'");
    /* caller streams: only NULL on the simulator */
    CHECK_ERR(gr_session_run_on_stream(s, (void *)1), GR_ERR_UNSUPPORTED, "pass NULL");
    CHECK_ERR(gr_session_order_stream(s, (void *)1), GR_ERR_UNSUPPORTED, "pass NULL");
    CHECK_OK(gr_session_order_stream(s, NULL));
    CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, xd, dx, sizeof x));
    float temp = 2.0f;
    CHECK_OK(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &temp, sizeof temp));
    CHECK_OK(gr_session_run_on_stream(s, NULL));
    CHECK_OK(gr_session_run(s)); /* captured with dx now */
    /* the buffer freed while still bound: the replay must not read it */
    gr_session_device_free(s, dx);
    CHECK_ERR(gr_session_run(s), GR_ERR_HAZARD, "use-after-free");
    /* host memory is not device memory */
    float *host = malloc(sizeof x);
    memcpy(host, x, sizeof x);
    CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, xd, host, sizeof x));
    CHECK_ERR(gr_session_run(s), GR_ERR_HAZARD, "not memory allocated by the device");
    free(host);
    (void)y;
    gr_session_destroy(s);
}

/* Symbolic dims bound by the device buffer's shape, several lengths in one session. */
static void test_dynamic(void) {
    gr_session_t s = open_session(dyn_gir, GR_MODE_GRAPH);
    for (int r = 0; r < 6; r++) {
        int64_t n = 1 + (r * 3) % 5, dims[2] = {n, 8};
        float x[40], z[5];
        fill(x, (int)(n * 8), 1.0f + (float)r);
        void *dx = NULL;
        CHECK_OK(gr_session_device_alloc(s, sizeof(float) * (size_t)n * 8, &dx));
        CHECK_OK(gr_session_device_upload(s, dx, x, sizeof(float) * (size_t)n * 8));
        CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, dims, dx, sizeof(float) * (size_t)n * 8));
        CHECK_OK(gr_session_run(s));
        gr_output o;
        CHECK_OK(gr_session_output(s, 0, &o));
        CHECK_OK(gr_session_output_read(s, o, z, sizeof(float) * (size_t)n));
        for (int i = 0; i < n; i++) {
            double want = 0;
            for (int j = 0; j < 8; j++) want += (double)x[i * 8 + j] * x[i * 8 + j];
            CHECK_MSG(z[i] > want * (1 - 1e-5) - 1e-6 && z[i] < want * (1 + 1e-5) + 1e-6, "n=%lld row %d: %g != %g", (long long)n, i,
                      z[i], want);
        }
        gr_session_device_free(s, dx); /* before the next bind: the next run binds another buffer */
    }
    gr_session_destroy(s);
}

/* gr_session_run_device: binds, runs and hands out the outputs' addresses in one call; runs
 * back to back without a wait in between give each its own values, an old handle is stale;
 * a static graph-mode model queues behind the pending run once captured, other modes wait. */
static void test_run_device(gr_mode mode) {
    long live0 = gr_debug_live_allocs();
    gr_session_t s = open_session(plain_gir, mode);
    float xa[32], xb[32], ya[32], yb[32], y[32];
    fill(xa, 32, 1.0f);
    fill(xb, 32, -0.5f);
    reference(plain_gir, xa, 2.0f, ya);
    reference(plain_gir, xb, 3.0f, yb);
    void *a = NULL, *b = NULL, *ta = NULL, *tb = NULL;
    float two = 2.0f, three = 3.0f;
    CHECK_OK(gr_session_device_alloc(s, sizeof xa, &a));
    CHECK_OK(gr_session_device_alloc(s, sizeof xb, &b));
    CHECK_OK(gr_session_device_alloc(s, sizeof two, &ta));
    CHECK_OK(gr_session_device_alloc(s, sizeof three, &tb));
    CHECK_OK(gr_session_device_upload(s, a, xa, sizeof xa));
    CHECK_OK(gr_session_device_upload(s, b, xb, sizeof xb));
    CHECK_OK(gr_session_device_upload(s, ta, &two, sizeof two));
    CHECK_OK(gr_session_device_upload(s, tb, &three, sizeof three));
    gr_device_input in_a[2] = {{"x", GR_F32, 2, xd, a, sizeof xa}, {"temperature", GR_F32, 0, NULL, ta, sizeof two}};
    gr_device_input in_b[2] = {{"x", GR_F32, 2, xd, b, sizeof xb}, {"temperature", GR_F32, 0, NULL, tb, sizeof three}};
    for (int r = 0; r < 6; r++) { /* warm-up, capture, replays (auto: timed, then decided) */
        gr_output oa, ob;
        void *pa = NULL, *pb = NULL;
        CHECK_OK(gr_session_run_device(s, NULL, 2, in_a, 1, &oa, &pa));
        CHECK_OK(gr_session_run_device(s, NULL, 2, in_b, 1, &ob, &pb));
        CHECK(pa != NULL && pb != NULL && ob.generation == oa.generation + 1 && ob.index == 0);
        CHECK_OK(gr_session_device_download(s, y, pb, sizeof y));
        CHECK_MSG(!memcmp(y, yb, sizeof y), "mode %d run %d: the second run's output differs", mode, r);
        CHECK_ERR(gr_session_output_read(s, oa, y, sizeof y), GR_ERR_STALE, "has run again");
        CHECK_OK(gr_session_output_read(s, ob, y, sizeof y));
        CHECK(!memcmp(y, yb, sizeof y));
        /* one input re-bound, the other kept from the last call */
        CHECK_OK(gr_session_run_device(s, NULL, 1, in_a, 1, NULL, &pa));
        CHECK_OK(gr_session_run_device(s, NULL, 1, &in_a[1], 0, NULL, NULL));
        CHECK_OK(gr_session_wait(s));
        CHECK_OK(gr_session_device_download(s, y, pa, sizeof y)); /* the same arena: the last run's values */
        CHECK_MSG(!memcmp(y, ya, sizeof y), "mode %d run %d: output differs after re-binding", mode, r);
    }
    gr_run_stats st;
    CHECK_OK(gr_session_stats(s, &st));
    if (mode == GR_MODE_EAGER) CHECK(st.graph_launches == 0);
    if (mode == GR_MODE_GRAPH) CHECK(st.graph_launches >= 1); /* (auto: whichever measured faster) */
    /* errors name what is wrong; a failed bind runs nothing */
    gr_device_input bad[2] = {{"x", GR_F32, 2, xd, a, sizeof xa}, {"nope", GR_F32, 0, NULL, ta, sizeof two}};
    gr_output o;
    CHECK_ERR(gr_session_run_device(NULL, NULL, 0, NULL, 0, NULL, NULL), GR_ERR_INVALID, "session is NULL");
    CHECK_ERR(gr_session_run_device(s, NULL, -1, in_a, 0, NULL, NULL), GR_ERR_INVALID, "-1 inputs");
    CHECK_ERR(gr_session_run_device(s, NULL, 1, NULL, 0, NULL, NULL), GR_ERR_INVALID, "no array");
    CHECK_ERR(gr_session_run_device(s, NULL, 2, in_a, 2, &o, NULL), GR_ERR_INVALID, "2 outputs asked for, the graph has 1");
    CHECK_ERR(gr_session_run_device(s, NULL, 2, bad, 1, &o, NULL), GR_ERR_NOT_FOUND, "no input named 'nope'");
    gr_device_input wrong = {"x", GR_I32, 2, xd, a, sizeof xa};
    CHECK_ERR(gr_session_run_device(s, NULL, 1, &wrong, 1, &o, NULL), GR_ERR_SHAPE, "dtype i32 given");
    CHECK_ERR(gr_session_run_device(s, (void *)1, 2, in_a, 1, &o, NULL), GR_ERR_UNSUPPORTED, "pass NULL");
    CHECK_OK(gr_session_run_device(s, NULL, 2, in_a, 1, &o, NULL));
    CHECK_OK(gr_session_output_read(s, o, y, sizeof y));
    CHECK(!memcmp(y, ya, sizeof y));
    gr_session_device_free(s, a);
    gr_session_device_free(s, b);
    gr_session_device_free(s, ta);
    gr_session_device_free(s, tb);
    gr_session_destroy(s);
    CHECK(gr_debug_live_allocs() == live0);
}

/* z[i] = sum_j x[i, j]^2 (dyn_gir) for n rows */
static void check_sq(const float *x, const float *z, int64_t n, const char *what, int r) {
    for (int i = 0; i < n; i++) {
        double want = 0;
        for (int j = 0; j < 8; j++) want += (double)x[i * 8 + j] * x[i * 8 + j];
        CHECK_MSG(z[i] > want * (1 - 1e-5) - 1e-6 && z[i] < want * (1 + 1e-5) + 1e-6, "%s run %d n=%lld row %d: %g != %g", what, r,
                  (long long)n, i, z[i], want);
    }
}

/* dyn_gir with N declared 1..8, in graph mode under a shape policy */
static gr_session_t open_dyn(gr_shape_policy policy, bool arena_max) {
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    CHECK_OK(gr_graph_parse(dyn_gir, "devio.gir", NULL, &g));
    CHECK_OK(gr_graph_set_dim_range(g, "N", 1, 8));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = GR_MODE_GRAPH;
    o.shape_policy = policy;
    if (arena_max) o.arena_policy = GR_ARENA_MAX_SHAPE;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    return s;
}

/* Symbolic dims through gr_session_run_device: each run waits for the last (several plans). */
static void test_run_device_dynamic(void) {
    gr_session_t s = open_session(dyn_gir, GR_MODE_GRAPH);
    float x[40], z[5];
    void *dx[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) CHECK_OK(gr_session_device_alloc(s, sizeof x, &dx[k]));
    for (int r = 0; r < 6; r++) {
        int64_t n = 1 + (r * 3) % 5, dims[2] = {n, 8};
        fill(x, (int)(n * 8), 1.0f + (float)r);
        CHECK_OK(gr_session_device_upload(s, dx[r % 2], x, sizeof(float) * (size_t)n * 8));
        gr_device_input in = {"x", GR_F32, 2, dims, dx[r % 2], sizeof(float) * (size_t)n * 8};
        gr_output o;
        void *pz = NULL;
        CHECK_OK(gr_session_run_device(s, NULL, 1, &in, 1, &o, &pz));
        CHECK_OK(gr_session_device_download(s, z, pz, sizeof(float) * (size_t)n));
        check_sq(x, z, n, "run_device", r);
    }
    for (int k = 0; k < 2; k++) gr_session_device_free(s, dx[k]);
    gr_session_destroy(s);
}

/* Shape policies update and auto with a caller that allocates a fresh input buffer for every
 * call at one shape (a serving loop, PyTorch's allocator): the buffer is copied into the
 * placeholder, so nothing is recorded again and no exec is updated after the first calls (a
 * repointed kernel in the position's shared exec would need a new recording and an exec update
 * per call: 0.6-0.9 ms for a 140-kernel segment on the H100). Exact keeps reading it in place. */
static void test_fresh_buffers(gr_shape_policy policy) {
    gr_session_t s = open_dyn(policy, false);
    if (!s) return;
    enum { CALLS = 12, WARM = 6 };
    void *dx[CALLS];
    gr_run_stats at_warm = {0}, end = {0};
    int64_t n = 5, dims[2] = {n, 8};
    for (int r = 0; r < CALLS; r++) {
        float x[40], z[5];
        fill(x, (int)(n * 8), 1.0f + (float)r);
        CHECK_OK(gr_session_device_alloc(s, sizeof x, &dx[r])); /* a new address every call */
        CHECK_OK(gr_session_device_upload(s, dx[r], x, sizeof x));
        gr_device_input in = {"x", GR_F32, 2, dims, dx[r], sizeof x};
        gr_output out;
        void *pz = NULL;
        CHECK_OK(gr_session_run_device(s, NULL, 1, &in, 1, &out, &pz));
        CHECK_OK(gr_session_device_download(s, z, pz, sizeof z));
        check_sq(x, z, n, gr_shape_policy_name(policy), r);
        if (r == WARM - 1) CHECK_OK(gr_session_stats(s, &at_warm));
    }
    CHECK_OK(gr_session_stats(s, &end));
    CHECK_MSG(end.captures == at_warm.captures && end.exec_updates == at_warm.exec_updates && end.captures > 0,
              "%s: %ld captures and %ld exec updates after warm-up, %ld and %ld after %d more calls with fresh buffers",
              gr_shape_policy_name(policy), at_warm.captures, at_warm.exec_updates, end.captures, end.exec_updates, CALLS - WARM);
    CHECK_MSG(end.bytes_copied >= sizeof(float) * 40, "%s: the fresh buffer was not copied in (%zu bytes copied per run)",
              gr_shape_policy_name(policy), end.bytes_copied);
    for (int r = 0; r < CALLS; r++) gr_session_device_free(s, dx[r]);
    gr_session_destroy(s);
}

/* Symbolic dims in graph mode's steady state: a run whose plans are built and whose segments
 * replay execs they have queues behind the pending run (no wait on the host), at one binding and
 * alternating between captured ones (exact, generic; update applies an exec update per switch and
 * waits); a new binding waits (its plan is built, its graphs captured). Every output is checked. */
/* runs at ns[r % 3] for r < runs, inputs uploaded first (an upload waits for the pending run);
 * with read_each every output is read (which waits too), else only the last. Returns the
 * runs' waits on the host. */
static long queued_runs(gr_session_t s, void **dx, const int64_t *ns, int runs, bool read_each, const char *what) {
    enum { MAXR = 12 };
    float x[MAXR][64], z[8];
    CHECK(runs <= MAXR);
    for (int r = 0; r < runs; r++) {
        fill(x[r], (int)(ns[r % 3] * 8), 0.5f + (float)r);
        CHECK_OK(gr_session_device_upload(s, dx[r], x[r], sizeof(float) * (size_t)ns[r % 3] * 8));
    }
    gr_run_stats st0, st1;
    CHECK_OK(gr_session_stats(s, &st0));
    for (int r = 0; r < runs; r++) {
        int64_t n = ns[r % 3], dims[2] = {n, 8};
        gr_device_input in = {"x", GR_F32, 2, dims, dx[r], sizeof(float) * (size_t)n * 8};
        gr_output o;
        void *pz = NULL;
        CHECK_OK(gr_session_run_device(s, NULL, 1, &in, 1, &o, &pz));
        if (read_each || r == runs - 1) {
            CHECK_OK(gr_session_output_read(s, o, z, sizeof(float) * (size_t)n));
            check_sq(x[r], z, n, what, r);
        }
    }
    CHECK_OK(gr_session_stats(s, &st1));
    return st1.waits_on_host - st0.waits_on_host;
}

static void test_queue_dynamic(gr_shape_policy policy) {
    long live0 = gr_debug_live_allocs();
    gr_session_t s = open_dyn(policy, true);
    if (!s) return;
    const char *name = gr_shape_policy_name(policy);
    void *dx[12];
    for (int r = 0; r < 12; r++) CHECK_OK(gr_session_device_alloc(s, sizeof(float) * 64, &dx[r]));
    static const int64_t three[3] = {3, 5, 8}, same[3] = {5, 5, 5}, fresh[3] = {5, 2, 2};
    queued_runs(s, dx, three, 12, true, name); /* warm-up, captures, auto's measuring and revisions */
    long w = queued_runs(s, dx, same, 6, false, name);
    CHECK_MSG(w == 0, "%s: %ld waits on the host in 6 runs at one captured binding", name, w);
    w = queued_runs(s, dx, three, 9, false, name);
    if (policy == GR_SHAPES_EXACT || policy == GR_SHAPES_GENERIC)
        CHECK_MSG(w == 0, "%s: %ld waits on the host in 9 runs alternating over 3 captured bindings", name, w);
    if (policy == GR_SHAPES_UPDATE) CHECK_MSG(w > 0, "update: the shared exec was updated under a pending run (%ld waits)", w);
    w = queued_runs(s, dx, fresh, 2, false, name);
    CHECK_MSG(w == 1, "%s: a new binding ran without waiting for the pending run (%ld waits)", name, w);
    queued_runs(s, dx, three, 6, true, name); /* and back: every output right */
    for (int r = 0; r < 12; r++) gr_session_device_free(s, dx[r]);
    gr_session_destroy(s);
    CHECK(gr_debug_live_allocs() == live0);
}

int main(void) {
    for (int m = 0; m < 2; m++) {
        const char *gir = m ? plain_gir : ew_gir;
        test_in_place(gir, GR_MODE_EAGER);
        test_in_place(gir, GR_MODE_GRAPH);
        test_in_place(gir, GR_MODE_AUTO);
    }
    test_copied_for_libcall();
    test_libcall_weight_in_place(GR_MODE_GRAPH);
    test_libcall_weight_in_place(GR_MODE_AUTO);
    test_libcall_weight_in_place(GR_MODE_EAGER);
    test_host_read_input(GR_MODE_EAGER);
    test_host_read_input(GR_MODE_GRAPH);
    test_output_device_ptr();
    test_errors();
    test_dynamic();
    test_run_device(GR_MODE_EAGER);
    test_run_device(GR_MODE_GRAPH);
    test_run_device(GR_MODE_AUTO);
    test_run_device_dynamic();
    test_fresh_buffers(GR_SHAPES_UPDATE);
    test_fresh_buffers(GR_SHAPES_AUTO);
    test_queue_dynamic(GR_SHAPES_EXACT);
    test_queue_dynamic(GR_SHAPES_GENERIC);
    test_queue_dynamic(GR_SHAPES_UPDATE);
    test_queue_dynamic(GR_SHAPES_AUTO);
    return check_summary("test_devio");
}
