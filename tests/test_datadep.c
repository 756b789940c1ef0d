/* tests/test_datadep — data-dependent output shapes through one session
 * (tests/data/onnx/data_dependent.onnx, made by make_fixtures.py): NonZero feeding a
 * Gather, Range over a limit computed from data, Loop with a run-time trip count. Each
 * run's counts are computed by the probe (runtime/probe.c) and its plan chosen per
 * count: values that repeat an earlier count reuse its plan (no new compile), zero
 * counts give empty outputs, a trip count past the limit is a clear error and the
 * session goes on working; eager and graph mode; and allocation failure at every
 * step of load, create and two runs returns an error and leaks nothing. */
#include "check.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "tests/data/onnx/data_dependent.onnx"
#define TRY(expr)                           \
    do {                                    \
        gr_status try_st_ = (expr);         \
        if (try_st_ != GR_OK) return try_st_; \
    } while (0)

static gr_device_kind test_device(void) {
    const char *d = getenv("GRAFT_TEST_DEVICE");
    return d && !strcmp(d, "cuda") ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
}

typedef struct {
    float x[6];
    int64_t m;
} feed;

static gr_status run(gr_session_t s, const feed *f) {
    int64_t dx = 6;
    TRY(gr_session_set_input(s, "x", GR_F32, 1, &dx, f->x, sizeof f->x));
    TRY(gr_session_set_input(s, "M", GR_I64, 0, NULL, &f->m, sizeof f->m));
    return gr_session_run(s);
}

/* output i's element count (its dims) and contents, at most cap bytes */
static gr_status read_out(gr_session_t s, int i, int64_t *numel, void *dst, size_t cap) {
    gr_output o;
    gr_value_info info;
    TRY(gr_session_output(s, i, &o));
    TRY(gr_session_output_info(s, o, &info));
    *numel = 1;
    for (int d = 0; d < info.ndim; d++) *numel *= info.dims[d];
    size_t n = gr_session_output_nbytes(s, o);
    if (n > cap) return GR_ERR_SHAPE;
    return n ? gr_session_output_read(s, o, dst, n) : GR_OK;
}

/* the expected results, computed here */
static void check_run(gr_session_t s, const feed *f) {
    float g[6];
    int64_t r[6], scans[300], acc, n;
    CHECK_OK(read_out(s, 0, &n, g, sizeof g));
    int k = 0;
    for (int i = 0; i < 6; i++)
        if (f->x[i] != 0) {
            CHECK_MSG(k < n && g[k] == f->x[i], "gather[%d]", k);
            k++;
        }
    CHECK_MSG(n == k, "x[x != 0] has %lld elements, want %d", (long long)n, k);
    CHECK_OK(read_out(s, 1, &n, r, sizeof r));
    int pos = 0;
    for (int i = 0; i < 6; i++) pos += f->x[i] > 0;
    CHECK_MSG(n == pos, "range length %lld, want %d", (long long)n, pos);
    for (int i = 0; i < n && i < pos; i++) CHECK(r[i] == i);
    int64_t trip = f->m > 0 ? f->m : 0;
    CHECK_OK(read_out(s, 2, &n, &acc, sizeof acc));
    CHECK_MSG(n == 1 && acc == trip * (trip - 1) / 2, "loop sum %lld for M=%lld", (long long)acc, (long long)f->m);
    CHECK_OK(read_out(s, 3, &n, scans, sizeof scans));
    CHECK_MSG(n == trip, "scan output of %lld for M=%lld", (long long)n, (long long)f->m);
    for (int i = 0; i < n && i < trip; i++) CHECK(scans[i] == 2 * i);
}

static const feed feeds[] = {
    {{0, 1.5f, 0, -2, 3, 0}, 4},
    {{0, 0, 0, 0, 0, 0}, 0},     /* every count zero: empty outputs */
    {{1, 2, 3, 4, 5, 6}, 2},
    {{0, 7, 0, -2, 1, 0}, 4},    /* the counts of the first run again: its plan */
    {{-1, 0, 0, 0, 0, 0}, -3},   /* a negative M runs no iteration */
};

static void run_mode(gr_mode mode) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(MODEL, &g));
    if (!g) return;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    /* compile_us is the current plan's: equal only when a run reuses an earlier run's plan */
    double compiled[sizeof feeds / sizeof feeds[0]];
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < sizeof feeds / sizeof feeds[0]; i++) {
            gr_status st = run(s, &feeds[i]);
            CHECK_MSG(st == GR_OK, "run %zu: %s", i, gr_last_error());
            if (st != GR_OK) continue;
            check_run(s, &feeds[i]);
            gr_run_stats stats;
            CHECK_OK(gr_session_stats(s, &stats));
            if (rep == 0) compiled[i] = stats.compile_us;
            else CHECK_MSG(stats.compile_us == compiled[i], "run %zu: the same counts got another plan", i);
            if (rep == 0 && i == 3) CHECK_MSG(stats.compile_us == compiled[0], "the counts of run 0 got another plan");
            if (rep == 0 && i == 2) CHECK_MSG(stats.compile_us != compiled[0], "other counts reused a plan");
        }
    /* 1000 iterations: past the 256 a Loop may unroll, refused naming the node */
    feed big = {{1, 0, 0, 0, 0, 0}, 1000};
    gr_status st = run(s, &big);
    CHECK(st == GR_ERR_SHAPE);
    CHECK_MSG(strstr(gr_last_error(), "Loop 'lp'") && strstr(gr_last_error(), "0..256"), "%s", gr_last_error());
    CHECK_OK(run(s, &feeds[0])); /* and the session still works */
    check_run(s, &feeds[0]);
    char *text = NULL;
    CHECK_OK(gr_session_explain(s, &text));
    CHECK(text && strstr(text, "partition break: NonZero 'nz'") && strstr(text, "partition break: Range 'rg'") &&
          strstr(text, "partition break: Loop 'lp'"));
    /* graph mode's default policy, auto: a data-dependent count's maximum is no range to plan the
     * largest binding for, so generic is no candidate (its arena would be planned for every element) */
    gr_run_stats stats;
    CHECK_OK(gr_session_stats(s, &stats));
    if (mode == GR_MODE_GRAPH)
        CHECK_MSG(gr_session_shape_policy(s, NULL) == GR_SHAPES_AUTO && text &&
                      strstr(text, "generic not a candidate: a symbol has no declared maximum or is data-dependent") &&
                      stats.device_bytes < ((size_t)64 << 20),
                  "graph mode's default: %s, %zu device bytes:\n%s", gr_shape_policy_name(gr_session_shape_policy(s, NULL)),
                  stats.device_bytes, text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);
}

/* every allocation failure: an error, no leak */
static void test_alloc_failures(void) {
    long base = gr_debug_live_allocs();
    int failures = 0;
    for (long n = 1; n < 20000; n++) {
        gr_debug_fail_alloc_after(n);
        gr_graph_t g = NULL;
        gr_session_t s = NULL;
        gr_status st = gr_graph_load(MODEL, &g);
        if (st == GR_OK) {
            gr_session_options o;
            gr_session_options_init(&o);
            o.device = GR_DEVICE_SIM;
            o.mode = GR_MODE_GRAPH;
            st = gr_session_create(g, &o, &s);
        }
        if (st == GR_OK) st = run(s, &feeds[0]);
        if (st == GR_OK) st = gr_session_wait(s);
        if (st == GR_OK) st = run(s, &feeds[2]);
        if (st == GR_OK) st = gr_session_wait(s);
        gr_session_destroy(s);
        gr_graph_destroy(g);
        long made = gr_debug_fail_alloc_after(0);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
        if (st == GR_OK && made < n) break;
        if (st != GR_OK) failures++;
        if (st != GR_OK && st != GR_ERR_NOMEM) CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(st), gr_last_error());
    }
    CHECK(failures > 100);
}

int main(void) {
    long base = gr_debug_live_allocs();
    run_mode(GR_MODE_EAGER);
    run_mode(GR_MODE_GRAPH);
    if (test_device() == GR_DEVICE_SIM) test_alloc_failures();
    CHECK(gr_debug_live_allocs() == base);
    return check_summary("test_datadep");
}
