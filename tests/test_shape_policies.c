/* tests/test_shape_policies — graph mode's shape policies beyond exact (issue 11), on the
 * simulator:
 *  - update: a shuffled sweep of bindings, every output bit-identical to an eager session's
 *    at the same binding (same kernels); one exec per segment position (instantiations do
 *    not grow with the bindings, exec updates do), less graph memory than exact; a segment
 *    whose kernel node reads a host scalar that changed is recorded again and the shared exec
 *    updated from it (never patched with another binding's geometry); a binding whose
 *    segment has another topology (a host step splits it) has its update refused and gets
 *    its own exec, still right, and explain says why;
 *  - capture ahead of time (gr_session_capture_range), largest first, under exact and update:
 *    the sweep that follows captures nothing and matches eager; its errors;
 *  - pad: a shuffled sweep of row-wise models (the padded axis outermost or not, a contraction
 *    over zero-filled inputs) equal to eager with one capture per capture size, outputs cut to
 *    the real shape; softmax or a reduction over the axis, a contraction over a computed
 *    operand, an unbounded dim: refused, exact instead, explain names the node;
 *  - auto (measured per segment: tests/test_shape_auto.c): never over the budget, no evictions
 *    (the graphs made only to measure are given back); a row-wise model padded;
 *  - allocation failures on these paths: an error, never a leak.
 * `test_shape_policies cuda` runs it on CUDA (real cuGraphExecUpdate; graph memory measured with
 * cuMemGetInfo, printed where its granularity makes the simulator's comparisons vacuous). */
#include "check.h"
#include "shape_sweep.h"
#include "runtime/runtime-impl.h"
#include <stdlib.h>
#include <string.h>

/* no host scalar: every segment can share its position's exec */
static const char *model_gir =
    "graft 1\n"
    "dim S: [1, 64]\n"
    "input x: f32[S, 16]\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "b = random_uniform(shape=[16], seed=2, low=-0.1, high=0.1)\n"
    "h = matmul(x, w, b, trans_b=1)\n"
    "att = matmul(h, x, trans_b=1)\n"
    "p = softmax(att, axis=1)\n"
    "o = matmul(p, h)\n"
    "g = gelu(o)\n"
    "m = reduce_mean(g, axes=[0], keepdims=1)\n"
    "y = sub(g, m)\n"
    "output y\n";

/* a host scalar baked into a kernel node */
static const char *scalar_gir =
    "graft 1\n"
    "dim S: [1, 64]\n"
    "input x: f32[S, 16]\n"
    "input t: f32[] @host\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "h = matmul(x, w, trans_b=1)\n"
    "h2 = div(h, t)\n"
    "y = tanh(h2)\n"
    "output y\n";

#define MAX_S 64
#define N 12

static bool on_cuda; /* `test_shape_policies cuda` (scripts/shapes-gpu-check.sh) */

/* Padded runs against eager: bit for bit on the simulator (the same kernels, row by row); on
 * CUDA a library matmul may pick another algorithm for the padded row count, so within 1e-5. */
static bool pad_same(const float *a, const float *b, size_t bytes) {
    if (!on_cuda) return !memcmp(a, b, bytes);
    for (size_t i = 0; i < bytes / sizeof(float); i++) {
        float d = a[i] - b[i], m = a[i] < 0 ? -a[i] : a[i];
        if (!(d <= 1e-5f * (m > 1 ? m : 1) && -d <= 1e-5f * (m > 1 ? m : 1))) return false;
    }
    return true;
}

static gr_session_options opts(gr_mode mode, int policy) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = on_cuda ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
    o.mode = mode;
    o.shape_policy = policy;
    o.max_rerecords = 1000;
    return o;
}

static float temp_of(int seq) { return 0.5f + (float)(seq % 5) * 0.25f; }

/* One run at S = seq; y gets S*16 floats. */
static gr_status run_at(gr_session_t s, int seq, float *y, bool scalar) {
    float x[MAX_S * 16];
    sweep_fill(x, seq * 16, 100u + (unsigned)seq);
    int64_t dims[2] = {seq, 16};
    GR_TRY(gr_session_set_input(s, "x", GR_F32, 2, dims, x, sizeof(float) * (size_t)seq * 16));
    if (scalar) {
        float t = temp_of(seq);
        GR_TRY(gr_session_set_input(s, "t", GR_F32, 0, NULL, &t, sizeof t));
    }
    GR_TRY(gr_session_run(s));
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    return gr_session_output_read(s, o, y, sizeof(float) * (size_t)seq * 16);
}

static float ref_y[MAX_S + 1][MAX_S * 16];

static void make_references_as(gr_graph_t g, int n, bool scalar, int policy) {
    gr_session_options o = opts(GR_MODE_EAGER, policy);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    for (int seq = 1; seq <= n && s; seq++) CHECK_OK(run_at(s, seq, ref_y[seq], scalar));
    gr_session_destroy(s);
}

static void make_references(gr_graph_t g, int n, bool scalar) { make_references_as(g, n, scalar, GR_SHAPES_EXACT); }

/* Runs the shuffled sweep under `policy`; returns the mismatches against ref_y. */
static int sweep(gr_graph_t g, int policy, bool scalar, gr_run_stats *st, char **explain) {
    gr_session_options o = opts(GR_MODE_GRAPH, policy);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int order[2 * MAX_S];
    int len = sweep_order(order, N, 0, 5);
    int mismatches = 0;
    float y[MAX_S * 16];
    for (int i = 0; i < len && s; i++) {
        CHECK_OK(run_at(s, order[i], y, scalar));
        mismatches += memcmp(y, ref_y[order[i]], sizeof(float) * (size_t)order[i] * 16) != 0;
    }
    memset(st, 0, sizeof *st);
    if (s) CHECK_OK(gr_session_stats(s, st));
    if (explain && s) CHECK_OK(gr_session_explain(s, explain));
    gr_session_destroy(s);
    return mismatches;
}

/* ==== update ======================================================================================== */
static void test_update_sweep(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(model_gir, "update.gir", NULL, &g));
    if (!g) return;
    make_references(g, N, false);
    gr_run_stats ex, up;
    char *text = NULL;
    CHECK_MSG(sweep(g, GR_SHAPES_EXACT, false, &ex, NULL) == 0, "exact differs from eager");
    int bad = sweep(g, GR_SHAPES_UPDATE, false, &up, &text);
    CHECK_MSG(bad == 0, "%d runs under policy update differ from eager", bad);
    /* exact: one exec per binding and segment; update: one per position, the rest updates */
    CHECK_MSG(ex.instantiations >= N && ex.exec_updates == 0, "exact: %ld instantiations", ex.instantiations);
    CHECK_MSG(up.instantiations <= up.segments + up.exec_updates_refused, "update: %ld instantiations, %d segments, %ld refused",
              up.instantiations, up.segments, up.exec_updates_refused);
    /* on CUDA a library call may choose another algorithm (other nodes) for some row counts: refused there */
    CHECK_MSG(up.exec_updates + (on_cuda ? up.exec_updates_refused : 0) >= N - 1, "update: %ld exec updates, %ld refused",
              up.exec_updates, up.exec_updates_refused);
    if (on_cuda) printf("update sweep on CUDA: %ld exec updates, %ld refused, %ld instantiations\n", up.exec_updates,
                        up.exec_updates_refused, up.instantiations);
    CHECK(up.captures >= N && up.segments_in_graphs == up.segments);
    if (on_cuda) printf("graph memory after the sweep (cuMemGetInfo): update %zu bytes, exact %zu bytes\n", up.graph_bytes, ex.graph_bytes);
    else CHECK_MSG(up.graph_bytes > 0 && up.graph_bytes * 4 < ex.graph_bytes, "graph memory: update %zu, exact %zu", up.graph_bytes,
                   ex.graph_bytes);
    CHECK(up.graphs_live < ex.graphs_live);
    CHECK(text && strstr(text, "shape policy: update (one exec per segment position") && strstr(text, "exec updates so far"));
    gr_free_string(text);
    gr_graph_destroy(g);
}

static void test_update_scalar_recorded_again(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(scalar_gir, "scalar.gir", NULL, &g));
    if (!g) return;
    make_references(g, N, true);
    gr_run_stats up;
    char *text = NULL;
    int bad = sweep(g, GR_SHAPES_UPDATE, true, &up, &text);
    CHECK_MSG(bad == 0, "%d runs with a host scalar under policy update differ from eager", bad);
    /* the temperature changes with the binding: re-recorded, never patched into the shared exec */
    CHECK_MSG(up.exec_updates + (on_cuda ? up.exec_updates_refused : 0) >= N - 1 &&
                  up.instantiations <= up.segments + up.exec_updates_refused,
              "updates %ld instantiations %ld", up.exec_updates, up.instantiations);
    CHECK(text && strstr(text, "exec updates so far"));
    gr_free_string(text);
    /* the same binding, the scalar changed: recorded again, the result eager's at the new value */
    gr_session_options oe = opts(GR_MODE_EAGER, GR_SHAPES_EXACT), ou = opts(GR_MODE_GRAPH, GR_SHAPES_UPDATE);
    gr_session_t e = NULL, u = NULL;
    CHECK_OK(gr_session_create(g, &oe, &e));
    CHECK_OK(gr_session_create(g, &ou, &u));
    float x[5 * 16], ye[5 * 16], yu[5 * 16];
    sweep_fill(x, 5 * 16, 3);
    int64_t dims[2] = {5, 16};
    gr_run_stats st0 = {0}, st1 = {0};
    static const float temps[] = {1, 1, 1, 2, 2, 0.5f, 1};
    for (int r = 0; r < (int)(sizeof temps / sizeof temps[0]) && e && u; r++) {
        gr_session_t both[2] = {e, u};
        float *ys[2] = {ye, yu};
        for (int k = 0; k < 2; k++) {
            CHECK_OK(gr_session_set_input(both[k], "x", GR_F32, 2, dims, x, sizeof x));
            CHECK_OK(gr_session_set_input(both[k], "t", GR_F32, 0, NULL, &temps[r], sizeof(float)));
            CHECK_OK(gr_session_run(both[k]));
            gr_output o;
            CHECK_OK(gr_session_output(both[k], 0, &o));
            CHECK_OK(gr_session_output_read(both[k], o, ys[k], sizeof ye));
        }
        CHECK_MSG(!memcmp(ye, yu, sizeof ye), "run %d (t = %g) differs from eager", r, temps[r]);
        if (r == 2) CHECK_OK(gr_session_stats(u, &st0));
    }
    if (u) CHECK_OK(gr_session_stats(u, &st1));
    CHECK_MSG(st1.captures == st0.captures + 3 && st1.exec_updates >= st0.exec_updates + 3 && st1.instantiations == st0.instantiations,
              "captures %ld -> %ld, updates %ld -> %ld", st0.captures, st1.captures, st0.exec_updates, st1.exec_updates);
    gr_session_destroy(e);
    gr_session_destroy(u);
    gr_graph_destroy(g);
}

/* A no-op host step after the first kernel, only in the plan of S = 3: its segment 0 has
 * fewer nodes than the other bindings', so the update is refused there. */

static gr_status split_at_three(void *user, gr_graph *g, gr_step_list *steps) {
    (void)user;
    int x = gr_ir_find_value(g, "x");
    if (x < 0 || g->values.data[x].dims[0].size != 3) return GR_OK;
    int at = -1, value = -1;
    for (int i = 0; i < steps->len && at < 0; i++) {
        const gr_step *s = &steps->data[i];
        if (s->kind != GR_STEP_KERNEL && s->kind != GR_STEP_LIBCALL) continue;
        for (int k = 0; k < s->n_args && at < 0; k++)
            if (s->args[k].kind == GR_ARG_VALUE && s->args[k].value != x && g->values.data[s->args[k].value].kind != GR_VAL_CONST &&
                s->kind == GR_STEP_KERNEL && s->kernel->params[k].written)
                at = i + 1, value = s->args[k].value;
    }
    if (at < 0) return gr_error(GR_ERR_INTERNAL, "test: no kernel writes a value");
    gr_step h;
    memset(&h, 0, sizeof h);
    h.kind = GR_STEP_HOST;
    h.n_args = 1;
    h.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = value};
    h.out_value = value;
    h.node = g->values.data[value].producer;
    h.host_fn = sweep_noop_host;
    GR_TRY(gr_vec_push(steps, h));
    for (int i = steps->len - 1; i > at; i--) {
        gr_step t = steps->data[i];
        steps->data[i] = steps->data[i - 1];
        steps->data[i - 1] = t;
    }
    return GR_OK;
}

static void test_update_refused(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(model_gir, "update.gir", NULL, &g));
    if (!g) return;
    make_references(g, N, false);
    gr_rt_debug_set_step_hook(split_at_three, NULL);
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_UPDATE);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float y[MAX_S * 16];
    static const int order[] = {5, 3, 7, 3, 5, 3, 2, 7, 3};
    for (int i = 0; i < (int)(sizeof order / sizeof order[0]) && s; i++) {
        for (int r = 0; r < 2; r++) { /* warm-up, capture */
            CHECK_OK(run_at(s, order[i], y, false));
            CHECK_MSG(!memcmp(y, ref_y[order[i]], sizeof(float) * (size_t)order[i] * 16), "S=%d differs from eager", order[i]);
        }
    }
    gr_run_stats st = {0};
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG((on_cuda ? st.exec_updates_refused >= 1 : st.exec_updates_refused == 1) && st.exec_updates >= 2, "refused %ld, updates %ld",
              st.exec_updates_refused, st.exec_updates);
    char *text = NULL;
    if (s) CHECK_OK(gr_session_explain(s, &text)); /* the last run was S = 3 */
    CHECK(text && strstr(text, "own exec, the update was refused: ") && strstr(text, "topology"));
    gr_free_string(text);
    gr_session_destroy(s);
    gr_rt_debug_set_step_hook(NULL, NULL);
    gr_graph_destroy(g);
}

/* ==== capture ahead of time ============================================================================ */
static void test_capture_range(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(model_gir, "update.gir", NULL, &g));
    if (!g) return;
    make_references(g, N, false);
    for (int policy = 0; policy < 2; policy++) {
        gr_session_options o = opts(GR_MODE_GRAPH, policy ? GR_SHAPES_UPDATE : GR_SHAPES_EXACT);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        if (!s) continue;
        gr_capture_report r;
        CHECK_OK(gr_session_capture_range(s, "S", 1, N, 0, &r));
        CHECK_MSG(r.bindings == N && r.captures >= N && r.total_ms >= r.capture_ms && r.capture_ms >= r.instantiate_ms &&
                      r.instantiate_ms > 0,
                  "bindings %d captures %ld",
                  r.bindings, r.captures);
        if (policy)
            CHECK_MSG((on_cuda || r.instantiations < N) && r.exec_updates + (on_cuda ? r.instantiations : 0) >= N - 1,
                      "update: %ld inst, %ld updates", r.instantiations, r.exec_updates);
        else CHECK(r.instantiations >= N && r.exec_updates == 0);
        /* nothing readable from the capture runs */
        gr_output out;
        CHECK_ERR(gr_session_output(s, 0, &out), GR_ERR_STALE, "no successful run");
        gr_run_stats st0, st1;
        CHECK_OK(gr_session_stats(s, &st0));
        int order[2 * MAX_S];
        int len = sweep_order(order, N, 0, 9), bad = 0;
        float y[MAX_S * 16];
        for (int i = 0; i < len; i++) {
            CHECK_OK(run_at(s, order[i], y, false));
            bad += memcmp(y, ref_y[order[i]], sizeof(float) * (size_t)order[i] * 16) != 0;
        }
        CHECK_MSG(bad == 0, "%d runs after capture ahead differ from eager", bad);
        CHECK_OK(gr_session_stats(s, &st1));
        /* every binding was ready: no capture, compile or warm-up during the sweep */
        CHECK_MSG(st1.captures == st0.captures && st1.instantiations == st0.instantiations, "captures %ld -> %ld", st0.captures,
                  st1.captures);
        CHECK(st1.segments_in_graphs == st1.segments);
        /* errors */
        CHECK_ERR(gr_session_capture_range(s, "T", 1, 2, 0, NULL), GR_ERR_NOT_FOUND, "no symbolic dim 'T' (the model's: 'S')");
        CHECK_ERR(gr_session_capture_range(s, "S", 1, 65, 0, NULL), GR_ERR_SHAPE, "S=1:65 is not a range inside the dim's range (1..64)");
        CHECK_ERR(gr_session_capture_range(s, "S", 5, 4, 0, NULL), GR_ERR_SHAPE, "S=5:4");
        CHECK_ERR(gr_session_capture_range(s, NULL, 5, 4, 0, NULL), GR_ERR_INVALID, "NULL session or dim");
        gr_session_destroy(s);
    }
    gr_session_options o = opts(GR_MODE_EAGER, GR_SHAPES_EXACT);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    CHECK_ERR(gr_session_capture_range(s, "S", 1, 2, 0, NULL), GR_ERR_INVALID, "eager mode");
    gr_session_destroy(s);
    /* a host input must be set first */
    gr_graph_t gs = NULL;
    CHECK_OK(gr_graph_parse(scalar_gir, "scalar.gir", NULL, &gs));
    o = opts(GR_MODE_GRAPH, GR_SHAPES_EXACT);
    CHECK_OK(gr_session_create(gs, &o, &s));
    CHECK_ERR(gr_session_capture_range(s, "S", 1, 2, 0, NULL), GR_ERR_INVALID, "host input 't' is read on the host");
    float t = 2;
    CHECK_OK(gr_session_set_input(s, "t", GR_F32, 0, NULL, &t, sizeof t));
    CHECK_OK(gr_session_capture_range(s, "S", 1, 3, 0, NULL));
    gr_session_destroy(s);
    gr_graph_destroy(gs);
    gr_graph_destroy(g);
}

/* ==== pad ============================================================================================= */
/* row-wise: every op keeps rows apart (the matmul contracts over the 16 features) */
static const char *rowwise_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "b = random_uniform(shape=[16], seed=2, low=-0.1, high=0.1)\n"
    "h = matmul(x, w, b, trans_b=1)\n"
    "g = gelu(h)\n"
    "p = softmax(g, axis=1)\n"
    "m = reduce_mean(g, axes=[1], keepdims=1)\n"
    "y = sub(p, m)\n"
    "output y\n";

/* the padded axis is not the outermost: outputs are cut row block by row block */
static const char *inner_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[2, S, 8]\n"
    "w = random_normal(shape=[8, 8], seed=3, std=0.3)\n"
    "h = matmul(x, w)\n"
    "y = tanh(h)\n"
    "output y\n";

/* contraction over S: allowed on zero-filled inputs, refused on a computed operand */
static const char *gram_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "y = matmul(x, x, trans_a=1)\n"
    "output y\n";
static const char *gram_computed_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "t = exp(x)\n"
    "y = matmul(t, x, trans_a=1)\n"
    "output y\n";

/* attention over S, no other reduction over it: padded with masks */
static const char *attention_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "h = matmul(x, w, trans_b=1)\n"
    "g = gelu(h)\n"
    "a = matmul(g, x, trans_b=1)\n"
    "p = softmax(a, axis=1)\n"
    "o = matmul(p, g)\n"
    "y = tanh(o)\n"
    "output y\n";

/* Runs `gir` at S = 1..n shuffled (twice each) eager and under policy pad; compares each
 * output, counts the mismatches. inner: x is [2, S, 8]. */
static int pad_sweep(const char *gir, int n, int rows_of_out, bool inner, gr_run_stats *st, char **explain) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(gir, "pad.gir", NULL, &g));
    if (!g) return -1;
    gr_session_options oe = opts(GR_MODE_EAGER, GR_SHAPES_EXACT), op = opts(GR_MODE_GRAPH, GR_SHAPES_PAD);
    gr_session_t e = NULL, s = NULL;
    CHECK_OK(gr_session_create(g, &oe, &e));
    CHECK_OK(gr_session_create(g, &op, &s));
    int order[2 * MAX_S];
    int len = sweep_order(order, n, 0, 13), bad = 0;
    static float x[2 * MAX_S * 16], ye[2 * MAX_S * 16], yp[2 * MAX_S * 16 + 1];
    for (int i = 0; i < len && e && s; i++) {
        int seq = order[i];
        int64_t dims[3] = {inner ? 2 : seq, inner ? seq : 16, 8};
        int ndim = inner ? 3 : 2;
        size_t nx = inner ? (size_t)2 * seq * 8 : (size_t)seq * 16;
        sweep_fill(x, (int)nx, 40u + (unsigned)seq);
        gr_session_t both[2] = {e, s};
        float *ys[2] = {ye, yp};
        size_t ny = 0;
        for (int k = 0; k < 2; k++) {
            CHECK_OK(gr_session_set_input(both[k], "x", GR_F32, ndim, dims, x, sizeof(float) * nx));
            CHECK_OK(gr_session_run(both[k]));
            gr_output o;
            CHECK_OK(gr_session_output(both[k], 0, &o));
            gr_value_info info;
            CHECK_OK(gr_session_output_info(both[k], o, &info));
            ny = gr_session_output_nbytes(both[k], o);
            /* the real shape, never the padded one */
            CHECK_MSG(rows_of_out < 0 || info.dims[rows_of_out] == seq, "output dim %d is %lld at S = %d", rows_of_out,
                      (long long)info.dims[rows_of_out], seq);
            yp[ny / sizeof(float)] = 12345.0f; /* a guard after the real part */
            CHECK_OK(gr_session_output_read(both[k], o, ys[k], ny));
            if (k == 1) CHECK(yp[ny / sizeof(float)] == 12345.0f);
        }
        bad += !pad_same(ye, yp, ny);
    }
    memset(st, 0, sizeof *st);
    if (s) CHECK_OK(gr_session_stats(s, st));
    if (s && explain) CHECK_OK(gr_session_explain(s, explain));
    gr_session_destroy(e);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return bad;
}

static void test_pad(void) {
    gr_run_stats st;
    char *text = NULL;
    /* 1..12 rounds to 1, 2, 4, 8, 16: five bindings, five captures */
    int bad = pad_sweep(rowwise_gir, N, 0, false, &st, &text);
    CHECK_MSG(bad == 0, "%d padded runs differ from eager", bad);
    CHECK_MSG(st.captures == 5 && st.padded_runs > 0 && st.segments_in_graphs == st.segments, "captures %ld, padded runs %ld",
              st.captures, st.padded_runs);
    CHECK(text && strstr(text, "shape policy: pad") && strstr(text, "'S' padded: no reduction"));
    gr_free_string(text);
    text = NULL;
    bad = pad_sweep(inner_gir, N, 1, true, &st, NULL);
    CHECK_MSG(bad == 0 && st.captures == 5 && st.padded_runs > 0, "inner axis: %d differ, %ld captures", bad, st.captures);
    bad = pad_sweep(gram_gir, N, -1, false, &st, &text);
    CHECK_MSG(bad == 0 && st.captures == 5 && st.padded_runs > 0, "contraction over zero-filled: %d differ, %ld captures", bad,
              st.captures);
    gr_free_string(text);
    text = NULL;
    /* refused: softmax and a reduction over S (padding would change the real rows): exact instead */
    gr_graph_t g = NULL;
    bad = pad_sweep(model_gir, N, 0, false, &st, &text);
    CHECK_MSG(bad == 0 && st.padded_runs == 0 && st.captures == N, "refused: %d differ, %ld padded, %ld captures", bad,
              st.padded_runs, st.captures);
    CHECK(text && strstr(text, "'S' NOT padded (one graph per value, as policy exact): node 'm' (reduce_mean)") &&
          strstr(text, "reduces over the padded axis 0"));
    gr_free_string(text);
    text = NULL;
    /* a contraction over S with a computed operand: the operand masked with zeros */
    bad = pad_sweep(gram_computed_gir, N, -1, false, &st, &text);
    CHECK_MSG(bad == 0 && st.padded_runs > 0 && st.captures == 5, "masked contraction: %d differ, %ld padded", bad, st.padded_runs);
    CHECK(text && strstr(text, "'S' padded") && strstr(text, "1 masks inserted"));
    gr_free_string(text);
    text = NULL;
    /* attention over S: the scores masked with -inf before the softmax, the values with zeros
     * before the contraction over the keys */
    bad = pad_sweep(attention_gir, N, 0, false, &st, &text);
    CHECK_MSG(bad == 0 && st.padded_runs > 0 && st.captures == 5, "masked attention: %d differ, %ld padded, %ld captures", bad,
              st.padded_runs, st.captures);
    CHECK(text && strstr(text, "'S' padded") && strstr(text, "2 masks inserted"));
    gr_free_string(text);
    text = NULL;
    /* the mask's length input is the session's own */
    CHECK_OK(gr_graph_parse(attention_gir, "att.gir", NULL, &g));
    gr_session_options po = opts(GR_MODE_GRAPH, GR_SHAPES_PAD);
    gr_session_t ps = NULL;
    CHECK_OK(gr_session_create(g, &po, &ps));
    int64_t one = 1;
    CHECK_ERR(gr_session_set_input(ps, "__graft_valid_S", GR_I64, 0, NULL, &one, sizeof one), GR_ERR_NOT_FOUND, "(inputs: 'x')");
    /* captured ahead (the capture sizes), then every length right with no capture more */
    gr_capture_report cr = {0};
    CHECK_OK(gr_session_capture_range(ps, "S", 1, N, 0, &cr));
    CHECK_MSG(cr.captures == 5, "capture ahead under pad with masks: %ld captures", cr.captures);
    {
        gr_session_options eo = opts(GR_MODE_EAGER, GR_SHAPES_EXACT);
        gr_session_t es = NULL;
        CHECK_OK(gr_session_create(g, &eo, &es));
        int wrong = 0;
        for (int seq = N; seq >= 1 && es; seq--) {
            float xx[N * 16], y1[N * 16], y2[N * 16];
            sweep_fill(xx, seq * 16, 90u + (unsigned)seq);
            int64_t d2[2] = {seq, 16};
            gr_session_t both[2] = {es, ps};
            float *ys[2] = {y1, y2};
            for (int k2 = 0; k2 < 2; k2++) {
                CHECK_OK(gr_session_set_input(both[k2], "x", GR_F32, 2, d2, xx, sizeof(float) * (size_t)seq * 16));
                CHECK_OK(gr_session_run(both[k2]));
                gr_output oo;
                CHECK_OK(gr_session_output(both[k2], 0, &oo));
                CHECK_OK(gr_session_output_read(both[k2], oo, ys[k2], sizeof(float) * (size_t)seq * 16));
            }
            wrong += !pad_same(y1, y2, sizeof(float) * (size_t)seq * 16);
        }
        gr_run_stats pst = {0};
        CHECK_OK(gr_session_stats(ps, &pst));
        CHECK_MSG(wrong == 0 && pst.captures == 5, "after capture ahead: %d differ, %ld captures", wrong, pst.captures);
        gr_session_destroy(es);
    }
    gr_session_destroy(ps);
    gr_graph_destroy(g);
    g = NULL;
    /* a value computed from S itself (dim(S) in an attribute): padding would change it */
    static const char *scalar_of_s =
        "graft 1\n"
        "dim S: [1, 40]\n"
        "input x: f32[S, 16]\n"
        "c = fill(shape=[], value=dim(S), dtype=\"f32\")\n"
        "y = div(x, c)\n"
        "output y\n";
    bad = pad_sweep(scalar_of_s, 6, 0, false, &st, &text);
    CHECK_MSG(bad == 0 && st.padded_runs == 0, "dim(S) in an attribute: %d differ, %ld padded", bad, st.padded_runs);
    CHECK(text && strstr(text, "node 'c' (fill)") && strstr(text, "an attribute is computed from 'S'"));
    gr_free_string(text);
    text = NULL;
    /* no declared bound: nothing to pad up to */
    static const char *unbounded = "graft 1\ninput x: f32[S, 4]\ny = tanh(x)\noutput y\n";
    CHECK_OK(gr_graph_parse(unbounded, "u.gir", NULL, &g));
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_PAD);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float x[12] = {0}, y[12];
    int64_t dims[2] = {3, 4};
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 2, dims, x, sizeof x));
    CHECK_OK(gr_session_run(s));
    gr_output out;
    CHECK_OK(gr_session_output(s, 0, &out));
    CHECK_OK(gr_session_output_read(s, out, y, sizeof y));
    CHECK_OK(gr_session_explain(s, &text));
    CHECK(text && strstr(text, "'S' has no declared upper bound to pad up to"));
    gr_free_string(text);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* A padded output along an inner axis has no contiguous device address; along the outermost
 * axis its address is the real part's. */
static void test_pad_device_ptr(void) {
    for (int inner = 0; inner < 2; inner++) {
        gr_graph_t g = NULL;
        CHECK_OK(gr_graph_parse(inner ? inner_gir : rowwise_gir, "pad.gir", NULL, &g));
        gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_PAD);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        float x[2 * 5 * 16] = {0};
        int64_t dims[3] = {inner ? 2 : 5, inner ? 5 : 16, 8};
        CHECK_OK(gr_session_set_input(s, "x", GR_F32, inner ? 3 : 2, dims, x, inner ? sizeof(float) * 80 : sizeof(float) * 80));
        CHECK_OK(gr_session_run(s));
        gr_output out;
        CHECK_OK(gr_session_output(s, 0, &out));
        void *ptr = NULL;
        if (inner) CHECK_ERR(gr_session_output_device_ptr(s, out, &ptr), GR_ERR_UNSUPPORTED, "which is not its outermost");
        else CHECK_OK(gr_session_output_device_ptr(s, out, &ptr));
        CHECK(inner ? ptr == NULL : ptr != NULL);
        gr_session_destroy(s);
        gr_graph_destroy(g);
    }
}

/* A caller's device buffer bound to a padded input: copied zero-filled into the placeholder
 * (never read in place: the buffer holds the real rows only); rebinding a new length works. */
static void test_pad_device_input(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(rowwise_gir, "row.gir", NULL, &g));
    if (!g) return;
    gr_session_options oe = opts(GR_MODE_EAGER, GR_SHAPES_EXACT), op = opts(GR_MODE_GRAPH, GR_SHAPES_PAD);
    gr_session_t e = NULL, s = NULL;
    CHECK_OK(gr_session_create(g, &oe, &e));
    CHECK_OK(gr_session_create(g, &op, &s));
    static const int lens[] = {5, 6, 5, 3, 7, 6};
    for (int i = 0; i < (int)(sizeof lens / sizeof lens[0]) && e && s; i++) {
        int n = lens[i];
        float x[7 * 16], ye[7 * 16], yp[7 * 16];
        sweep_fill(x, n * 16, 70u + (unsigned)i);
        int64_t dims[2] = {n, 16};
        size_t bytes = sizeof(float) * (size_t)n * 16;
        void *buf = NULL;
        CHECK_OK(gr_session_device_alloc(s, bytes, &buf));
        if (!buf) break;
        CHECK_OK(gr_session_device_upload(s, buf, x, bytes));
        CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, dims, buf, bytes));
        CHECK_OK(gr_session_set_input(e, "x", GR_F32, 2, dims, x, bytes));
        CHECK_OK(gr_session_run(e));
        CHECK_OK(gr_session_run(s));
        gr_output oe_, op_;
        CHECK_OK(gr_session_output(e, 0, &oe_));
        CHECK_OK(gr_session_output(s, 0, &op_));
        CHECK_OK(gr_session_output_read(e, oe_, ye, bytes));
        CHECK_OK(gr_session_output_read(s, op_, yp, bytes));
        CHECK_MSG(pad_same(ye, yp, bytes), "device input of length %d under pad differs from eager", n);
        gr_session_device_free(s, buf); /* the run is over (output read) */
    }
    gr_run_stats st = {0};
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.padded_runs >= 5 && st.inputs_in_place == 0, "padded %ld, in place %ld", st.padded_runs, st.inputs_in_place);
    gr_session_destroy(e);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* ==== auto ============================================================================================ */
static void test_auto(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(model_gir, "update.gir", NULL, &g));
    if (!g) return;
    /* auto keeps exact's kernels here: generic would run the attention products (att, o) as
     * generated kernels, slower than the library's (autopol.c, activation_product); so auto's
     * eager runs equal exact's bit for bit */
    static float exact_y[MAX_S + 1][MAX_S * 16];
    make_references(g, N, false);
    memcpy(exact_y, ref_y, sizeof exact_y);
    make_references_as(g, N, false, GR_SHAPES_AUTO);
    CHECK_MSG(!memcmp(exact_y, ref_y, sizeof exact_y), "auto's eager kernels differ from exact's");
    /* one binding's graph memory, measured */
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_EXACT);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float y[MAX_S * 16];
    for (int r = 0; r < 2 && s; r++) CHECK_OK(run_at(s, N, y, false));
    gr_run_stats one = {0};
    if (s) CHECK_OK(gr_session_stats(s, &one));
    gr_session_destroy(s);
    if (on_cuda && one.graph_bytes == 0) {
        printf("the driver took no measurable memory for one binding's graphs: the auto budget case is skipped\n");
        gr_graph_destroy(g);
        return;
    }
    CHECK(one.graph_bytes > 0);
    /* room for four bindings' graphs: auto measures, picks update here, nothing evicted */
    o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
    o.graph_memory_mb = (double)(4 * one.graph_bytes + one.graph_bytes / 2) / 1048576.0;
    CHECK_OK(gr_session_create(g, &o, &s));
    int order[2 * MAX_S];
    int len = sweep_order(order, N, 0, 21), bad = 0, over = 0;
    gr_run_stats st = {0};
    for (int i = 0; i < len && s; i++) {
        CHECK_OK(run_at(s, order[i], y, false));
        bad += memcmp(y, ref_y[order[i]], sizeof(float) * (size_t)order[i] * 16) != 0;
        CHECK_OK(gr_session_stats(s, &st));
        over += st.graph_bytes > st.graph_budget_bytes;
    }
    CHECK_MSG(bad == 0, "%d runs under policy auto differ from eager", bad);
    CHECK_MSG(over == 0 && st.evictions == 0, "over budget after %d runs, %ld evictions", over, st.evictions);
    CHECK_MSG(st.instantiations >= 2 && (on_cuda || st.instantiations <= 5) && st.exec_updates + (on_cuda ? st.exec_updates_refused : 0) > 0 &&
                  st.padded_runs == 0,
              "auto: %ld instantiations, %ld updates, %ld padded", st.instantiations, st.exec_updates, st.padded_runs);
    char *text = NULL;
    if (s) CHECK_OK(gr_session_explain(s, &text));
    CHECK_MSG(text && strstr(text, "shape policy: auto") && strstr(text, "'S' NOT padded") &&
                  strstr(text, "generic not a candidate: node 'att' multiplies two computed tensors"),
              "explain: %.2000s", text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);
    /* no budget: the segments calling a library (the matmuls) keep their own execs; an updated
     * exec may replay the library's kernels slower (autopol.c, score) */
    o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
    s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    bad = 0;
    for (int i = 0; i < len && s; i++) {
        CHECK_OK(run_at(s, order[i], y, false));
        bad += memcmp(y, ref_y[order[i]], sizeof(float) * (size_t)order[i] * 16) != 0;
    }
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(bad == 0 && st.exec_updates == 0, "auto without a budget: %d runs differ, %ld exec updates", bad, st.exec_updates);
    text = NULL;
    if (s) CHECK_OK(gr_session_explain(s, &text));
    CHECK_MSG(text && strstr(text, "update: scored only where exact's graphs do not fit"), "explain: %.2000s", text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    /* a row-wise model is padded */
    gr_graph_t gr = NULL;
    CHECK_OK(gr_graph_parse(rowwise_gir, "row.gir", NULL, &gr));
    o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
    CHECK_OK(gr_session_create(gr, &o, &s));
    gr_capture_report r = {0};
    CHECK_OK(gr_session_capture_range(s, "S", 1, N, 0, &r)); /* the capture sizes only: 1, 2, 4, 8, 16 */
    CHECK_MSG(r.captures == 5 && r.bindings == N, "capture range under auto: %ld captures", r.captures);
    gr_session_destroy(s);
    gr_graph_destroy(gr);
}

/* ==== allocation failures ============================================================================= */
static void test_alloc_failures(void) {
    for (int which = 0; which < 2; which++) {
        /* update on the model whose axis cannot be padded; pad (with masks) on attention */
        gr_graph_t g = NULL;
        CHECK_OK(gr_graph_parse(which ? attention_gir : model_gir, "alloc.gir", NULL, &g));
        if (!g) return;
        long base = gr_debug_live_allocs();
        int failures_seen = 0;
        for (long n = 1; n < 20000; n++) {
            gr_debug_fail_alloc_after(n);
            gr_session_options o = opts(GR_MODE_GRAPH, which ? GR_SHAPES_PAD : GR_SHAPES_UPDATE);
            gr_session_t s = NULL;
            gr_status rc = gr_session_create(g, &o, &s);
            float y[MAX_S * 16];
            for (int r = 0; r < 2 && rc == GR_OK; r++)
                for (int seq = 4; seq <= 6 && rc == GR_OK; seq++) rc = run_at(s, seq, y, false);
            if (rc == GR_OK) rc = gr_session_capture_range(s, "S", 7, 9, 0, NULL);
            char *text = NULL;
            if (rc == GR_OK) rc = gr_session_explain(s, &text);
            gr_free_string(text);
            gr_session_destroy(s);
            long made = gr_debug_fail_alloc_after(0);
            CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
            if (rc == GR_OK && made < n) break;
            if (rc != GR_OK) failures_seen++;
            if (rc != GR_OK && rc != GR_ERR_NOMEM)
                CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(rc), gr_last_error());
        }
        CHECK(failures_seen > 50);
        gr_graph_destroy(g);
    }
}

int main(int argc, char **argv) {
    on_cuda = argc > 1 && !strcmp(argv[1], "cuda");
    if (on_cuda) { /* no GPU: one clear failure, not fifty */
        gr_graph_t g = NULL;
        gr_session_t s = NULL;
        gr_session_options o = opts(GR_MODE_EAGER, GR_SHAPES_EXACT);
        gr_status st = gr_graph_parse(model_gir, "update.gir", NULL, &g);
        if (st == GR_OK) st = gr_session_create(g, &o, &s);
        gr_session_destroy(s);
        gr_graph_destroy(g);
        if (st != GR_OK) {
            fprintf(stderr, "test_shape_policies cuda: no CUDA session: %s\n", gr_last_error());
            return 1;
        }
    }
    test_update_sweep();
    test_update_scalar_recorded_again();
    test_update_refused();
    test_capture_range();
    test_pad();
    test_pad_device_ptr();
    test_pad_device_input();
    test_auto();
    if (!on_cuda) test_alloc_failures(); /* the allocation hook counts host allocations: simulator only */
    return check_summary("test_shape_policies");
}
