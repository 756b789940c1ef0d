/* tests/test_runtime — sessions through the public API on the simulator:
 * eager vs graph mode bit-identity, generation tags, bad inputs, the CUDA-graph
 * hazards of the seeds (stale scalar, freed host buffer, new input shape,
 * output read after the next run), re-record limit, allocation failures. */
#include "check.h"
#include "util/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gr_session_options sim_opts(gr_mode mode) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = mode;
    return o;
}

static void fill(float *x, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
    }
}

/* y = softmax((x @ w) / temperature) + b, with temperature a host scalar */
static const char *attn_gir =
    "graft 1\n"
    "input x: f32[4, 8]\n"
    "input temperature: f32[] @host\n"
    "w = random_normal(shape=[8, 8], seed=3, std=0.5)\n"
    "const b: f32[8] = [0, 1, 2, 3, 4, 5, 6, 7]\n"
    "h = matmul(x, w)\n"
    "s = div(h, temperature)\n"
    "p = softmax(s, axis=-1)\n"
    "y = add(p, b)\n"
    "output y\n";

static gr_status run_attn(gr_session_t s, const float *x, float temp, float *y) {
    int64_t xd[2] = {4, 8};
    GR_TRY(gr_session_set_input(s, "x", GR_F32, 2, xd, x, sizeof(float) * 32));
    GR_TRY(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &temp, sizeof temp));
    GR_TRY(gr_session_run(s));
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    return gr_session_output_read(s, o, y, sizeof(float) * 32);
}

static void test_eager_vs_graph_and_stale_scalar(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(attn_gir, "attn.gir", NULL, &g));
    if (!g) return;
    gr_session_options oe = sim_opts(GR_MODE_EAGER), og = sim_opts(GR_MODE_GRAPH);
    gr_session_t se = NULL, sg = NULL;
    CHECK_OK(gr_session_create(g, &oe, &se));
    CHECK_OK(gr_session_create(g, &og, &sg));
    gr_graph_destroy(g);
    if (!se || !sg) goto out;
    float x[32], ye[32], yg[32];
    fill(x, 32, 1);
    /* the temperature changes every run: a graph replay must never use a stale value */
    const float temps[] = {8.0f, 8.0f, 2.0f, 0.5f, 0.5f, 8.0f};
    for (int r = 0; r < GR_ARRAY_LEN(temps); r++) {
        CHECK_OK(run_attn(se, x, temps[r], ye));
        CHECK_OK(run_attn(sg, x, temps[r], yg));
        CHECK_MSG(!memcmp(ye, yg, sizeof ye), "run %d (temperature %g): graph mode differs from eager", r, temps[r]);
    }
    /* different temperatures give different outputs (the test can fail) */
    float y8[32], y05[32];
    CHECK_OK(run_attn(se, x, 8.0f, y8));
    CHECK_OK(run_attn(se, x, 0.5f, y05));
    CHECK(memcmp(y8, y05, sizeof y8) != 0);
    gr_run_stats st;
    CHECK_OK(gr_session_stats(sg, &st));
    CHECK(st.graph_launches == 1);
    CHECK(st.kernels_in_graphs == st.kernels);
    CHECK(st.captures == 1); /* patched, never re-captured */
out:
    gr_session_destroy(se);
    gr_session_destroy(sg);
}

static void test_generation_tags(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(attn_gir, "attn.gir", NULL, &g));
    if (!g) return;
    gr_session_options o = sim_opts(GR_MODE_GRAPH);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    float x[32], y[32];
    fill(x, 32, 2);
    gr_output o1, o2;
    CHECK_ERR(gr_session_output(s, 0, &o1), GR_ERR_STALE, "no successful run");
    CHECK_OK(run_attn(s, x, 1.0f, y));
    CHECK_OK(gr_session_output(s, 0, &o1));
    CHECK_OK(gr_session_output_read(s, o1, y, sizeof y));
    CHECK_OK(run_attn(s, x, 2.0f, y));
    CHECK_ERR(gr_session_output_read(s, o1, y, sizeof y), GR_ERR_STALE, "has run again");
    CHECK_OK(gr_session_output(s, 0, &o2));
    CHECK_OK(gr_session_output_read(s, o2, y, sizeof y));
    CHECK_ERR(gr_session_output_read(s, o2, y, 4), GR_ERR_INVALID, "needs 128 bytes");
    CHECK_ERR(gr_session_output(s, 3, &o2), GR_ERR_INVALID, "out of range");
    gr_session_destroy(s);
}

static void test_bad_inputs(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(attn_gir, "attn.gir", NULL, &g));
    if (!g) return;
    gr_session_options o = sim_opts(GR_MODE_EAGER);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    float x[40] = {0};
    int64_t good[2] = {4, 8}, bad[2] = {4, 9};
    CHECK_ERR(gr_session_set_input(s, "nope", GR_F32, 2, good, x, 128), GR_ERR_NOT_FOUND, "no input named 'nope'");
    CHECK_ERR(gr_session_set_input(s, "x", GR_F64, 2, good, x, 256), GR_ERR_SHAPE, "dtype f64 given");
    CHECK_ERR(gr_session_set_input(s, "x", GR_F32, 1, good, x, 128), GR_ERR_SHAPE, "rank 1 given");
    CHECK_ERR(gr_session_set_input(s, "x", GR_F32, 2, bad, x, 144), GR_ERR_SHAPE, "dim 1 is 9");
    CHECK_ERR(gr_session_set_input(s, "x", GR_F32, 2, good, x, 100), GR_ERR_SHAPE, "100 bytes given");
    CHECK_ERR(gr_session_run(s), GR_ERR_INVALID, "was not set");
    gr_session_destroy(s);
}

/* Inputs are copied at set_input: freeing or changing the caller's buffer
 * after a capture cannot reach the graph (no host pointer is baked in). */
static void test_freed_host_buffer(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(attn_gir, "attn.gir", NULL, &g));
    if (!g) return;
    gr_session_options og = sim_opts(GR_MODE_GRAPH), oe = sim_opts(GR_MODE_EAGER);
    gr_session_t sg = NULL, se = NULL;
    CHECK_OK(gr_session_create(g, &og, &sg));
    CHECK_OK(gr_session_create(g, &oe, &se));
    gr_graph_destroy(g);
    if (!sg || !se) goto out;
    float ye[32], yg[32];
    for (int r = 0; r < 4; r++) {
        float *x = malloc(sizeof(float) * 32);
        fill(x, 32, 10u + (unsigned)r);
        float xcopy[32];
        memcpy(xcopy, x, sizeof xcopy);
        int64_t xd[2] = {4, 8};
        float t = 3.0f;
        CHECK_OK(gr_session_set_input(sg, "x", GR_F32, 2, xd, x, sizeof(float) * 32));
        CHECK_OK(gr_session_set_input(sg, "temperature", GR_F32, 0, NULL, &t, sizeof t));
        memset(x, 0x7f, sizeof(float) * 32);
        free(x); /* the caller's buffer is gone before the run (and the replay) */
        CHECK_OK(gr_session_run(sg));
        gr_output o;
        CHECK_OK(gr_session_output(sg, 0, &o));
        CHECK_OK(gr_session_output_read(sg, o, yg, sizeof yg));
        CHECK_OK(run_attn(se, xcopy, t, ye));
        CHECK_MSG(!memcmp(ye, yg, sizeof ye), "run %d after freeing the caller's buffer", r);
    }
out:
    gr_session_destroy(sg);
    gr_session_destroy(se);
}

/* A symbolic batch dim: one plan (and one graph) per shape, cached; the
 * re-record limit turns later shapes eager with a warning, still correct. */
static const char *dyn_gir =
    "graft 1\n"
    "dim N: [0, 8]\n" /* 0 is outside a symbol's default range (>= 1): declared */
    "input x: f32[N, 16]\n"
    "w = random_uniform(shape=[16, 16], seed=5, low=-0.25, high=0.25)\n"
    "h = matmul(x, w)\n"
    "y = relu(h)\n"
    "z = reduce_sum(y, axes=[1], keepdims=0)\n"
    "output z\n";

static void test_new_shapes(int max_rerecords) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(dyn_gir, "dyn.gir", NULL, &g));
    if (!g) return;
    gr_session_options og = sim_opts(GR_MODE_GRAPH), oe = sim_opts(GR_MODE_EAGER);
    og.max_rerecords = max_rerecords;
    og.shape_policy = GR_SHAPES_EXACT; /* max_rerecords is exact's limit (the default, auto, measures instead) */
    gr_session_t sg = NULL, se = NULL;
    CHECK_OK(gr_session_create(g, &og, &sg));
    CHECK_OK(gr_session_create(g, &oe, &se));
    gr_graph_destroy(g);
    if (!sg || !se) goto out;
    const int sizes[] = {4, 4, 4, 8, 8, 1, 4, 8, 1, 0};
    for (int r = 0; r < GR_ARRAY_LEN(sizes); r++) {
        int n = sizes[r];
        float x[8 * 16], zg[8], ze[8];
        fill(x, n * 16, 77u + (unsigned)r);
        int64_t d[2] = {n, 16};
        CHECK_OK(gr_session_set_input(sg, "x", GR_F32, 2, d, x, sizeof(float) * (size_t)(n * 16)));
        CHECK_OK(gr_session_set_input(se, "x", GR_F32, 2, d, x, sizeof(float) * (size_t)(n * 16)));
        CHECK_OK(gr_session_run(sg));
        CHECK_OK(gr_session_run(se));
        gr_output og_, oe_;
        CHECK_OK(gr_session_output(sg, 0, &og_));
        CHECK_OK(gr_session_output(se, 0, &oe_));
        gr_value_info info;
        CHECK_OK(gr_session_output_info(sg, og_, &info));
        CHECK(info.ndim == 1 && info.dims[0] == n);
        CHECK_OK(gr_session_output_read(sg, og_, zg, sizeof zg));
        CHECK_OK(gr_session_output_read(se, oe_, ze, sizeof ze));
        CHECK_MSG(!memcmp(zg, ze, sizeof(float) * (size_t)n), "shape N=%d run %d: graph differs from eager", n, r);
    }
    gr_run_stats st;
    CHECK_OK(gr_session_stats(sg, &st));
    /* shapes 4, 8, 1 (0 has no work): one capture each unless limited */
    if (max_rerecords >= 3) CHECK_MSG(st.captures == 3, "captures %ld", st.captures);
    else CHECK_MSG(st.captures == max_rerecords, "captures %ld with limit %d", st.captures, max_rerecords);
out:
    gr_session_destroy(sg);
    gr_session_destroy(se);
}

/* The session reports the device kind it resolved to: what the CLI uses to label
 * simulated timings, instead of guessing from the device's name. */
static void test_device_kind(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(attn_gir, "attn.gir", NULL, &g));
    if (!g) return;
    CHECK(gr_session_device_kind(NULL) == GR_DEVICE_AUTO);
    gr_session_options o = sim_opts(GR_MODE_EAGER);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    CHECK(gr_session_device_kind(s) == GR_DEVICE_SIM);
    gr_session_destroy(s);
    /* auto resolves to a concrete kind: CUDA where a GPU is usable, else the simulator */
    o.device = GR_DEVICE_AUTO;
    s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_device_kind k = gr_session_device_kind(s);
    CHECK(k == GR_DEVICE_SIM || k == GR_DEVICE_CUDA);
    CHECK_MSG((k == GR_DEVICE_SIM) == !strcmp(gr_session_device_name(s), "sim"), "kind %d for device '%s'", (int)k,
              gr_session_device_name(s));
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* Per-kernel profile: each kernel replayed in a graph of its own between events. */
static void test_profile(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(attn_gir, "attn.gir", NULL, &g));
    if (!g) return;
    gr_session_options o = sim_opts(GR_MODE_GRAPH);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    char *text = NULL;
    double sum = -1;
    CHECK_ERR(gr_session_profile(s, &text, &sum), GR_ERR_INVALID, "run the session once first");
    float x[32], y[32];
    fill(x, 32, 7);
    CHECK_OK(run_attn(s, x, 2.0f, y));
    CHECK_OK(gr_session_profile(s, &text, &sum));
    CHECK_MSG(text && strstr(text, "(sim; each kernel replayed 10 times in a graph of its own)") && strstr(text, " us  "),
              "profile: %s", text ? text : "(none)");
    CHECK(sum > 0);
    gr_free_string(text);
    /* the profile leaves the outputs of the last run readable and unchanged */
    gr_output out;
    float y2[32];
    CHECK_OK(gr_session_output(s, 0, &out));
    CHECK_OK(gr_session_output_read(s, out, y2, sizeof y2));
    CHECK(!memcmp(y, y2, sizeof y));
    gr_session_destroy(s);
}

static void test_api_build_and_errors(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_create(&g));
    gr_value_t x, w, h, y;
    int64_t xd[2] = {2, 3}, wd[2] = {3, 2};
    float wdata[6] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(gr_graph_add_input(g, "x", GR_F32, 2, xd, NULL, &x));
    CHECK_OK(gr_graph_add_constant(g, "w", GR_F32, 2, wd, wdata, &w));
    gr_value_t in2[2] = {x, w};
    CHECK_OK(gr_graph_add_node(g, "matmul", "mm", 2, in2, 0, NULL, 1, &h));
    CHECK_ERR(gr_graph_add_node(g, "matmull", "bad", 2, in2, 0, NULL, 1, &y), GR_ERR_UNSUPPORTED, "unknown op 'matmull'");
    gr_value_t in_bad[2] = {x, x};
    CHECK_ERR(gr_graph_add_node(g, "matmul", "mm2", 2, in_bad, 0, NULL, 1, &y), GR_ERR_SHAPE, "mm2");
    gr_attr ax = {.name = "axis", .kind = GR_ATTR_INT, .i = -1};
    CHECK_OK(gr_graph_add_node(g, "softmax", NULL, 1, &h, 1, &ax, 1, &y));
    CHECK_OK(gr_graph_set_output(g, y, "probs"));
    gr_value_info info;
    CHECK_OK(gr_graph_output_info(g, 0, &info));
    CHECK(info.ndim == 2 && info.dims[0] == 2 && info.dims[1] == 2 && !strcmp(info.name, "probs"));
    gr_session_options o = sim_opts(GR_MODE_EAGER);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    if (s) {
        float xv[6] = {1, 0, 0, 0, 1, 1}, yv[4];
        CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, xd, xv, sizeof xv));
        CHECK_OK(gr_session_run(s));
        gr_output out;
        CHECK_OK(gr_session_output(s, 0, &out));
        CHECK_OK(gr_session_output_read(s, out, yv, sizeof yv));
        /* h = [[1,2],[8,10]] -> softmax rows */
        double r0 = 1.0 / (1.0 + exp(1.0)), r1 = 1.0 / (1.0 + exp(2.0));
        CHECK(fabs(yv[0] - r0) < 1e-6 && fabs(yv[1] - (1 - r0)) < 1e-6);
        CHECK(fabs(yv[2] - r1) < 1e-6 && fabs(yv[3] - (1 - r1)) < 1e-6);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* Every allocation failure returns an error and leaks nothing. */
static void test_alloc_failures(void) {
    long base = gr_debug_live_allocs();
    int failures_seen = 0;
    for (long n = 1; n < 5000; n++) {
        gr_debug_fail_alloc_after(n);
        gr_graph_t g = NULL;
        gr_session_t s = NULL;
        gr_status st = gr_graph_parse(attn_gir, "attn.gir", NULL, &g);
        if (st == GR_OK) {
            gr_session_options o = sim_opts(GR_MODE_GRAPH);
            st = gr_session_create(g, &o, &s);
            if (st == GR_OK) {
                float x[32], y[32];
                fill(x, 32, 3);
                st = run_attn(s, x, 1.0f, y);
                if (st == GR_OK) st = run_attn(s, x, 2.0f, y);
            }
        }
        gr_session_destroy(s);
        gr_graph_destroy(g);
        long made = gr_debug_fail_alloc_after(0);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
        if (st == GR_OK && made < n) break; /* ran to completion without hitting the failure */
        if (st != GR_OK) failures_seen++;
        if (st != GR_OK && st != GR_ERR_NOMEM) CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(st), gr_last_error());
    }
    CHECK(failures_seen > 10);
}

/* Host values read as buffers (not scalars) by a matmul and a gather are
 * mirrored to the device before the run: correct in both modes, no graph break. */
static const char *host_buf_gir =
    "graft 1\n"
    "input x: f32[3, 4]\n"
    "input w: f32[4, 2] @host\n"
    "input idx: i64[2] @host\n"
    "input s: f32[1] @host\n"
    "h = matmul(x, w)\n"
    "g = gather(h, idx, axis=0)\n"
    "y = mul(g, s)\n"
    "output y\n";

static void test_host_buffers(void) {
    float x[12], w[8], sc = 0.5f, yv[2][4];
    int64_t idx[2] = {2, -3};
    for (int i = 0; i < 12; i++) x[i] = (float)(i + 1);
    for (int i = 0; i < 8; i++) w[i] = (float)(i % 3) - 1.0f;
    for (int m = 0; m < 2; m++) {
        gr_graph_t g;
        CHECK_OK(gr_graph_parse(host_buf_gir, "hostbuf.gir", NULL, &g));
        if (!g) return;
        gr_session_options o = sim_opts(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        gr_graph_destroy(g);
        if (!s) return;
        int64_t xd[2] = {3, 4}, wd[2] = {4, 2}, id[1] = {2}, sd[1] = {1};
        for (int r = 0; r < 3; r++) {
            CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, xd, x, sizeof x));
            CHECK_OK(gr_session_set_input(s, "w", GR_F32, 2, wd, w, sizeof w));
            CHECK_OK(gr_session_set_input(s, "idx", GR_I64, 1, id, idx, sizeof idx));
            CHECK_OK(gr_session_set_input(s, "s", GR_F32, 1, sd, &sc, sizeof sc));
            CHECK_OK(gr_session_run(s));
            gr_output o1;
            CHECK_OK(gr_session_output(s, 0, &o1));
            CHECK_OK(gr_session_output_read(s, o1, yv[m], sizeof yv[m]));
        }
        gr_session_destroy(s);
        /* reference: rows 2 and 0 of x@w, times 0.5 */
        int rows[2] = {2, 0};
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++) {
                double acc = 0;
                for (int k = 0; k < 4; k++) acc += x[rows[r] * 4 + k] * w[k * 2 + c];
                CHECK_MSG(fabs(yv[m][r * 2 + c] - acc * 0.5) < 1e-5, "mode %d [%d,%d] = %g, want %g", m, r, c, yv[m][r * 2 + c], acc * 0.5);
            }
    }
    CHECK(!memcmp(yv[0], yv[1], sizeof yv[0]));
}

/* A data-dependent if stays on the device (predicated into where): both
 * conditions give the branch's result, graph mode equals eager, one segment. */
static const char *if_gir =
    "graft 1\n"
    "input x: f32[4]\n"
    "input flag: f32[]\n"
    "zero = fill(shape=[], value=0.0)\n"
    "c = greater(flag, zero)\n"
    "y = if(c, then_branch={\n"
    "  const two: f32[] = [2]\n"
    "  a = mul(x, two)\n"
    "  inner = if(c, then_branch={\n"
    "    r = relu(a)\n"
    "    output r\n"
    "  }, else_branch={\n"
    "    output a\n"
    "  })\n"
    "  output inner\n"
    "}, else_branch={\n"
    "  n = neg(x)\n"
    "  output n\n"
    "})\n"
    "z = add(y, x)\n"
    "output z\n";

static void test_predicated_if(void) {
    float x[4] = {1, -2, 3, -4};
    float want_pos[4] = {3, -2, 9, -4}, want_neg[4] = {0, 0, 0, 0};
    for (int m = 0; m < 2; m++) {
        gr_graph_t g;
        CHECK_OK(gr_graph_parse(if_gir, "if.gir", NULL, &g));
        if (!g) return;
        gr_session_options o = sim_opts(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        gr_graph_destroy(g);
        if (!s) return;
        int64_t xd[1] = {4};
        const float flags[] = {1, -1, 1, 1, -1, -1};
        for (int r = 0; r < GR_ARRAY_LEN(flags); r++) {
            float z[4];
            CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd, x, sizeof x));
            CHECK_OK(gr_session_set_input(s, "flag", GR_F32, 0, NULL, &flags[r], sizeof(float)));
            CHECK_OK(gr_session_run(s));
            gr_output o1;
            CHECK_OK(gr_session_output(s, 0, &o1));
            CHECK_OK(gr_session_output_read(s, o1, z, sizeof z));
            CHECK_MSG(!memcmp(z, flags[r] > 0 ? want_pos : want_neg, sizeof z), "mode %d run %d flag %g: %g %g %g %g", m, r, flags[r],
                      z[0], z[1], z[2], z[3]);
        }
        gr_run_stats st;
        CHECK_OK(gr_session_stats(s, &st));
        CHECK(st.segments == 1);
        if (m) CHECK(st.kernels_in_graphs == st.kernels && st.graph_launches == 1);
        gr_session_destroy(s);
    }
    /* branches of different shapes: a data-dependent output shape, refused with a message naming the node */
    const char *bad =
        "graft 1\ninput x: f32[4]\ninput c: bool[]\n"
        "y = if(c, then_branch={\n  output x\n}, else_branch={\n  h = slice(x, starts=[0], ends=[2])\n  output h\n})\n"
        "output y\n";
    gr_graph_t g = NULL;
    gr_status st = gr_graph_parse(bad, "bad_if.gir", NULL, &g);
    if (st == GR_OK) {
        gr_session_options o = sim_opts(GR_MODE_GRAPH);
        gr_session_t s = NULL;
        CHECK_ERR(gr_session_create(g, &o, &s), GR_ERR_UNSUPPORTED, "data-dependent output shape");
        CHECK(strstr(gr_last_error(), "node 'y' (if) at bad_if.gir:4:") != NULL);
        gr_session_destroy(s);
        gr_graph_destroy(g);
    } else {
        CHECK_MSG(0, "bad_if.gir did not parse: %s", gr_last_error());
    }
}

/* Mode auto (selective graphs): each segment is timed eager and as a graph,
 * then the faster stays. One small kernel: the graph launch costs more than
 * an eager launch, eager stays. Several kernels: the graph wins. Outputs are
 * the same bits as eager mode on every run, during and after the choice. */
static void test_auto_mode(void) {
    const char *one_kernel = "graft 1\ninput x: f32[64]\nc = fill(shape=[], value=2.0)\ny = mul(x, c)\noutput y\n";
    const char *models[2] = {one_kernel, attn_gir};
    for (int m = 0; m < 2; m++) {
        gr_graph_t g;
        CHECK_OK(gr_graph_parse(models[m], "auto.gir", NULL, &g));
        if (!g) return;
        gr_session_options oa = sim_opts(GR_MODE_AUTO), oe = sim_opts(GR_MODE_EAGER);
        gr_session_t sa = NULL, se = NULL;
        CHECK_OK(gr_session_create(g, &oa, &sa));
        CHECK_OK(gr_session_create(g, &oe, &se));
        gr_graph_destroy(g);
        if (!sa || !se) goto next;
        int64_t xd1[1] = {64}, xd2[2] = {4, 8};
        for (int r = 0; r < 10; r++) {
            float x[64], ya[64], ye[64], t = 1.0f + (float)r;
            fill(x, 64, 100u + (unsigned)r);
            for (int k = 0; k < 2; k++) {
                gr_session_t s = k ? se : sa;
                if (m == 0) {
                    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd1, x, sizeof(float) * 64));
                } else {
                    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, xd2, x, sizeof(float) * 32));
                    CHECK_OK(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &t, sizeof t));
                }
                CHECK_OK(gr_session_run(s));
                gr_output o;
                CHECK_OK(gr_session_output(s, 0, &o));
                CHECK_OK(gr_session_output_read(s, o, k ? ye : ya, gr_session_output_nbytes(s, o)));
            }
            CHECK_MSG(!memcmp(ya, ye, sizeof(float) * (m ? 32 : 64)), "model %d run %d: auto differs from eager", m, r);
        }
        gr_run_stats st;
        CHECK_OK(gr_session_stats(sa, &st));
        if (m == 0) CHECK_MSG(st.segments_in_graphs == 0 && st.graph_launches == 0, "one kernel: %d segments in graphs", st.segments_in_graphs);
        else CHECK_MSG(st.segments_in_graphs == 1 && st.kernels_in_graphs == st.kernels, "attention: %d segments in graphs", st.segments_in_graphs);
        char *text = NULL;
        CHECK_OK(gr_session_explain(sa, &text));
        CHECK(text && strstr(text, m == 0 ? "eager by choice: measured eager" : "selected by timing: graph"));
        gr_free_string(text);
    next:
        gr_session_destroy(sa);
        gr_session_destroy(se);
    }
}

/* Out of memory while compiling a new shape's plan (the simulator's device
 * memory comes from the host allocator, so failure injection reaches it):
 * the run fails with GR_ERR_NOMEM and the session stays usable for the
 * shapes it already had, with the same results. */
static void test_oom_leaves_session_usable(void) {
    gr_graph_t g;
    CHECK_OK(gr_graph_parse(dyn_gir, "dyn.gir", NULL, &g));
    if (!g) return;
    gr_session_options o = sim_opts(GR_MODE_GRAPH);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    float x4[4 * 16], x8[8 * 16], z_ref[8], z[8];
    fill(x4, 4 * 16, 5);
    fill(x8, 8 * 16, 6);
    int64_t d4[2] = {4, 16}, d8[2] = {8, 16};
    gr_output out;
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, d4, x4, sizeof x4));
    CHECK_OK(gr_session_run(s));
    CHECK_OK(gr_session_output(s, 0, &out));
    CHECK_OK(gr_session_output_read(s, out, z_ref, sizeof(float) * 4));
    int failures = 0;
    for (long n = 1; n < 2000; n++) {
        gr_status st = gr_session_set_input(s, "x", GR_F32, 2, d8, x8, sizeof x8);
        if (st != GR_OK) continue;
        gr_debug_fail_alloc_after(n);
        st = gr_session_run(s);
        if (st == GR_OK) st = gr_session_wait(s);
        long made = gr_debug_fail_alloc_after(0);
        if (st == GR_OK && made < n) break; /* the new plan compiled: done */
        if (st != GR_OK) {
            failures++;
            CHECK_MSG(st == GR_ERR_NOMEM, "failing allocation %ld gave %s: %s", n, gr_status_name(st), gr_last_error());
        }
        /* the known shape still runs, with the same bits */
        CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, d4, x4, sizeof x4));
        CHECK_OK(gr_session_run(s));
        CHECK_OK(gr_session_output(s, 0, &out));
        CHECK_OK(gr_session_output_read(s, out, z, sizeof(float) * 4));
        CHECK_MSG(!memcmp(z, z_ref, sizeof(float) * 4), "after failing allocation %ld the old shape gives other bits", n);
    }
    CHECK(failures > 5);
    gr_session_destroy(s);
}

/* gr_graph_dump_passes_dims: symbolic dims bound by name reach the specialize pass (graft dump --dim) */
static void test_dump_with_dims(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse("graft 1\ninput x: f32[N, 4]\ninput y: f32[N, M]\nz = add(x, y)\noutput z\n", "sym.gir", NULL, &g));
    if (!g) return;
    long live = gr_debug_live_allocs();
    char *text = (char *)&text;
    CHECK_ERR(gr_graph_dump_passes(g, &text), GR_ERR_SHAPE, "unresolved symbolic dims: N (of 'x'), M (of 'y')");
    CHECK(text == NULL);
    const char *names[] = {"N", "M", "N"};
    int64_t values[] = {3, 4, 3};
    CHECK_ERR(gr_graph_dump_passes_dims(g, 1, names, values, &text), GR_ERR_INVALID, "no value for symbolic dim 'M' (of value 'y')");
    CHECK_OK(gr_graph_dump_passes_dims(g, 3, names, values, &text));
    CHECK(text && strstr(text, "== after input ==\ngraft 1\ninput x: f32[N, 4]") &&
          strstr(text, "== after specialize ==\ngraft 1\ninput x: f32[3, 4]\ninput y: f32[3, 4]"));
    gr_free_string(text);
    text = NULL;
    const char *bad_names[] = {"K"};
    CHECK_ERR(gr_graph_dump_passes_dims(g, 1, bad_names, values, &text), GR_ERR_NOT_FOUND,
              "no symbolic dim named 'K' (symbolic dims: 'N', 'M')");
    int64_t conflict[] = {3, 4, 5};
    CHECK_ERR(gr_graph_dump_passes_dims(g, 3, names, conflict, &text), GR_ERR_INVALID, "'N' given twice with different values");
    int64_t negative[] = {-2};
    CHECK_ERR(gr_graph_dump_passes_dims(g, 1, names, negative, &text), GR_ERR_INVALID, "negative");
    CHECK_ERR(gr_graph_dump_passes_dims(g, 1, NULL, values, &text), GR_ERR_INVALID, "NULL");
    /* a value that makes the graph wrong is the graph's error, as in a session */
    int64_t mismatch[] = {3, 5};
    CHECK_ERR(gr_graph_dump_passes_dims(g, 2, names, mismatch, &text), GR_ERR_SHAPE, "add");
    CHECK(text == NULL && gr_debug_live_allocs() == live);
    /* allocation failures: an error, no leak */
    long k = 1;
    for (; k < 5000; k++) {
        gr_debug_fail_alloc_after(k);
        gr_status st = gr_graph_dump_passes_dims(g, 2, names, values, &text);
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) {
            gr_free_string(text);
            break;
        }
        CHECK_MSG(st == GR_ERR_NOMEM && text == NULL, "failing allocation %ld: %s", k, gr_last_error());
    }
    CHECK(k > 1 && k < 5000 && gr_debug_live_allocs() == live);
    gr_graph_destroy(g);
}

int main(void) {
    test_dump_with_dims();
    test_oom_leaves_session_usable();
    test_auto_mode();
    test_predicated_if();
    test_host_buffers();
    test_api_build_and_errors();
    test_device_kind();
    test_profile();
    test_eager_vs_graph_and_stale_scalar();
    test_generation_tags();
    test_bad_inputs();
    test_freed_host_buffer();
    test_new_shapes(8);
    test_new_shapes(2);
    test_alloc_failures();
    return check_summary("test_runtime");
}
