/* tests/test_shapes — graph mode over many shapes (issue 11) on the simulator:
 *  - shape policies: names, parsing, the reserved policies refused by name, bad options;
 *  - exact: a sweep of bindings in random order, graph mode, every output bit-identical
 *    to an eager session's at the same binding (host scalar changed between runs too);
 *  - graph memory: measured on the device (the simulator's exec-graph bytes), a budget
 *    that holds after every run while least recently used bindings are evicted and
 *    re-captured, results still bit-identical; a budget smaller than one graph: eager
 *    with the reason in explain, never an over-budget cache;
 *  - mode auto's decisions persisted: a second session loads them and times nothing,
 *    explain says where each came from; a corrupt, truncated or stale file is ignored
 *    with a warning and rewritten; no_persist_decisions writes nothing;
 *  - allocation failures on these paths: an error, never a leak.
 * `test_shapes cuda` (scripts/gpu-check.sh) runs the session parts on CUDA, where graph
 * memory is measured with cuMemGetInfo: the budget checks and the over-budget case use the
 * sizes measured there (a driver that takes no memory for a small graph makes them vacuous,
 * and the test prints what it measured); the allocation-failure and simulator-only parts
 * are skipped. Graph outputs are compared with eager bit for bit there too (same kernels). */
#include "check.h"
#include "shape_sweep.h"
#include "device/device.h"
#include "util/cache-file.h"
#include "util/util.h"
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* y = g - mean(g), g = gelu(softmax((h x^T) / t) h), h = x w^T + b: matmuls (library calls),
 * a host scalar baked into a kernel node, reductions over the symbolic dim. */
static const char *model_gir =
    "graft 1\n"
    "dim S: [1, 64]\n"
    "input x: f32[S, 16]\n"
    "input temperature: f32[] @host\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "b = random_uniform(shape=[16], seed=2, low=-0.1, high=0.1)\n"
    "h = matmul(x, w, b, trans_b=1)\n"
    "att = matmul(h, x, trans_b=1)\n"
    "att2 = div(att, temperature)\n"
    "p = softmax(att2, axis=1)\n"
    "o = matmul(p, h)\n"
    "g = gelu(o)\n"
    "m = reduce_mean(g, axes=[0], keepdims=1)\n"
    "y = sub(g, m)\n"
    "output y\n";

#define MAX_S 64

static bool on_cuda; /* `test_shapes cuda` */

static gr_session_options opts(gr_mode mode) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = on_cuda ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
    o.mode = mode;
    o.shape_policy = GR_SHAPES_EXACT; /* this file's policy (graph mode's default is auto: test_shape_auto) */
    return o;
}

static gr_graph_t parse_model(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(model_gir, "shapes.gir", NULL, &g));
    return g;
}

/* One run at S = seq with inputs from `seed`; y gets S*16 floats. */
static gr_status run_at(gr_session_t s, int seq, unsigned seed, float temp, float *y) {
    float x[MAX_S * 16];
    sweep_fill(x, seq * 16, seed);
    int64_t dims[2] = {seq, 16};
    GR_TRY(gr_session_set_input(s, "x", GR_F32, 2, dims, x, sizeof(float) * (size_t)seq * 16));
    GR_TRY(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &temp, sizeof temp));
    GR_TRY(gr_session_run(s));
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    return gr_session_output_read(s, o, y, sizeof(float) * (size_t)seq * 16);
}

/* ==== policies and options ======================================================================= */
static void test_policy_options(void) {
    CHECK(!strcmp(gr_shape_policy_name(GR_SHAPES_EXACT), "exact"));
    CHECK(!strcmp(gr_shape_policy_name(GR_SHAPES_UPDATE), "update"));
    CHECK(!strcmp(gr_shape_policy_name(99), "?"));
    CHECK(!strcmp(gr_shape_policy_name(-1), "?"));
    int p = -1;
    CHECK_OK(gr_shape_policy_parse("generic", &p));
    CHECK(p == GR_SHAPES_GENERIC);
    CHECK_ERR(gr_shape_policy_parse("bucket", &p), GR_ERR_INVALID, "unknown shape policy 'bucket'");
    CHECK_ERR(gr_shape_policy_parse(NULL, &p), GR_ERR_INVALID, "unknown shape policy");
    gr_session_options o;
    gr_session_options_init(&o);
    CHECK(o.shape_policy == GR_SHAPES_DEFAULT && o.graph_memory_mb == 0 && o.no_persist_decisions == 0);
    CHECK(!strcmp(gr_shape_policy_name(GR_SHAPES_DEFAULT), "default") && gr_session_shape_policy(NULL, NULL) == -1);

    gr_graph_t g = parse_model();
    gr_session_t s = NULL;
    /* the default resolves at creation: auto in graph mode for a symbolic model, exact in eager and
     * auto modes; a policy asked for is kept */
    static const struct { gr_mode mode; int asked, want, by_default; } resolved[] = {
        {GR_MODE_GRAPH, GR_SHAPES_DEFAULT, GR_SHAPES_AUTO, 1}, {GR_MODE_EAGER, GR_SHAPES_DEFAULT, GR_SHAPES_EXACT, 1},
        {GR_MODE_AUTO, GR_SHAPES_DEFAULT, GR_SHAPES_EXACT, 1}, {GR_MODE_GRAPH, GR_SHAPES_EXACT, GR_SHAPES_EXACT, 0},
        {GR_MODE_GRAPH, GR_SHAPES_UPDATE, GR_SHAPES_UPDATE, 0}, {GR_MODE_AUTO, GR_SHAPES_AUTO, GR_SHAPES_AUTO, 0},
    };
    for (int i = 0; i < GR_ARRAY_LEN(resolved); i++) {
        gr_session_options_init(&o);
        o.device = on_cuda ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
        o.mode = resolved[i].mode;
        o.shape_policy = resolved[i].asked;
        CHECK_OK(gr_session_create(g, &o, &s));
        int by_default = -1, got = gr_session_shape_policy(s, &by_default);
        CHECK_MSG(got == resolved[i].want && by_default == resolved[i].by_default, "case %d: policy %s (default %d)", i,
                  gr_shape_policy_name(got), by_default);
        gr_session_destroy(s);
        s = NULL;
    }
    /* a static model: exact in graph mode too (one binding) */
    gr_graph_t fixed = NULL;
    CHECK_OK(gr_graph_parse("graft 1\ninput x: f32[4, 16]\ny = tanh(x)\noutput y\n", "static.gir", NULL, &fixed));
    gr_session_options_init(&o);
    o.device = on_cuda ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
    o.mode = GR_MODE_GRAPH;
    if (fixed) CHECK_OK(gr_session_create(fixed, &o, &s));
    int fixed_default = 0;
    CHECK_MSG(s && gr_session_shape_policy(s, &fixed_default) == GR_SHAPES_EXACT && fixed_default == 1, "static model: %s",
              gr_shape_policy_name(gr_session_shape_policy(s, NULL)));
    gr_session_destroy(s);
    s = NULL;
    gr_graph_destroy(fixed);
    /* every policy is implemented now: generic (tests/test_shape_generic.c) creates a session */
    o = opts(GR_MODE_GRAPH);
    CHECK_OK(gr_shape_policy_parse("generic", &o.shape_policy));
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_session_destroy(s);
    s = NULL;
    o = opts(GR_MODE_GRAPH);
    o.shape_policy = GR_SHAPES_COUNT;
    CHECK_ERR(gr_session_create(g, &o, &s), GR_ERR_INVALID, "is not a gr_shape_policy");
    o = opts(GR_MODE_GRAPH);
    o.graph_memory_mb = -1;
    CHECK_ERR(gr_session_create(g, &o, &s), GR_ERR_INVALID, "graph_memory_mb -1 is not a size");
    o.graph_memory_mb = NAN;
    CHECK_ERR(gr_session_create(g, &o, &s), GR_ERR_INVALID, "graph_memory_mb nan");
    gr_graph_destroy(g);
}

/* ==== the device façade: free/total memory ========================================================== */
/* The simulator's free memory drops by each allocation and by each exec graph's bytes,
 * and comes back when they are freed: what the graph manager's measurement relies on. */
static void test_mem_info(void) {
    gr_device *d = NULL;
    CHECK_OK(gr_device_sim_create(&d));
    if (!d) return;
    CHECK(gr_dev_caps_get(d).mem_info);
    size_t f0, t0, f1, t1;
    CHECK_OK(gr_dev_mem_info(d, &f0, &t0));
    CHECK(t0 == (size_t)80 << 30 && f0 <= t0);
    void *p = NULL;
    CHECK_OK(gr_dev_alloc(d, GR_MEM_DEVICE, 4096, &p));
    CHECK_OK(gr_dev_mem_info(d, &f1, &t1));
    CHECK(t1 == t0 && f0 - f1 == 4096);
    gr_stream *st = NULL;
    CHECK_OK(gr_dev_stream_create(d, &st));
    gr_dgraph *g = NULL;
    gr_dexec *e = NULL;
    CHECK_OK(gr_dev_capture_begin(d, st));
    CHECK_OK(gr_dev_memset(d, st, p, 0, 4096));
    CHECK_OK(gr_dev_memset(d, st, p, 1, 2048));
    CHECK_OK(gr_dev_capture_end(d, st, &g));
    size_t f2, f3, f4;
    CHECK_OK(gr_dev_mem_info(d, &f2, &t1));
    CHECK(f2 == f1); /* a captured graph is host-side until instantiated */
    if (g) CHECK_OK(gr_dev_graph_instantiate(d, g, &e));
    CHECK_OK(gr_dev_mem_info(d, &f3, &t1));
    CHECK(f3 < f2 && f2 - f3 < 4096); /* two node records */
    gr_dev_exec_destroy(d, e);
    CHECK_OK(gr_dev_mem_info(d, &f4, &t1));
    CHECK(f4 == f2);
    gr_dev_graph_destroy(d, g);
    gr_dev_free(d, p);
    CHECK_OK(gr_dev_mem_info(d, &f4, &t1));
    CHECK(f4 == f0);
    gr_dev_stream_destroy(d, st);
    gr_device_destroy(d);
}

/* ==== exact: bit-identical to eager over a shuffled sweep ============================================= */
/* eager reference outputs, per length */
static float ref_y[MAX_S + 1][MAX_S * 16];
static float ref_temp(int seq) { return 0.5f + (float)(seq % 5) * 0.25f; }

static void make_references(gr_graph_t g, int n) {
    gr_session_options o = opts(GR_MODE_EAGER);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    for (int seq = 1; seq <= n && s; seq++) CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), ref_y[seq]));
    gr_session_destroy(s);
}

static bool same_as_eager(int seq, const float *y) {
    return !memcmp(y, ref_y[seq], sizeof(float) * (size_t)seq * 16);
}

static size_t unbudgeted_device_bytes; /* device memory held after the sweep without a budget */

static void test_exact_sweep(gr_graph_t g, int n) {
    gr_session_options o = opts(GR_MODE_GRAPH);
    o.max_rerecords = 1000; /* one graph per binding, all kept */
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int order[3 * MAX_S];
    int len = sweep_order(order, n, 3, 7);
    int mismatches = 0;
    float y[MAX_S * 16];
    gr_run_stats st;
    for (int i = 0; i < len && s; i++) {
        int seq = order[i];
        CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
        mismatches += !same_as_eager(seq, y);
        /* the host scalar changes: the replay must patch it, and the result is eager's for that temperature */
        CHECK_OK(gr_session_stats(s, &st));
    }
    CHECK_MSG(mismatches == 0, "%d of %d runs differ from eager", mismatches, len);
    CHECK_OK(gr_session_stats(s, &st));
    CHECK(st.segments_in_graphs == st.segments && st.graph_launches > 0);
    CHECK_MSG(st.instantiations == n && st.graphs_live == n && st.evictions == 0, "instantiations %ld live %ld evictions %ld",
              st.instantiations, st.graphs_live, st.evictions);
    CHECK(st.graph_bytes > 0 && st.graph_bytes == st.graph_bytes_peak && st.graph_budget_bytes == 0);
    CHECK(st.plans_evicted == 0);
    unbudgeted_device_bytes = st.device_bytes;
    gr_session_destroy(s);
}

/* ==== graph memory budget ============================================================================== */
/* The graph memory of one binding's graphs (measured by a session without budget). */
static size_t graph_bytes_of(gr_graph_t g, int seq) {
    gr_session_options o = opts(GR_MODE_GRAPH);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float y[MAX_S * 16];
    gr_run_stats st = {0};
    for (int r = 0; r < 3 && s; r++) CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
    if (s) CHECK_OK(gr_session_stats(s, &st));
    gr_session_destroy(s);
    return st.graph_bytes;
}

static void test_budget(gr_graph_t g, int n) {
    size_t one = graph_bytes_of(g, n); /* the largest binding's graphs */
    if (on_cuda) printf("graph memory of one binding's graphs, measured with cuMemGetInfo: %zu bytes\n", one);
    if (on_cuda && one == 0) one = (size_t)1 << 20; /* nothing measured: the invariants still hold */
    CHECK(one > 0);
    /* room for about three bindings' graphs */
    gr_session_options o = opts(GR_MODE_GRAPH);
    o.graph_memory_mb = (double)(3 * one + one / 2) / 1048576.0;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int order[3 * MAX_S];
    int len = sweep_order(order, n, 3, 11);
    int mismatches = 0, over = 0;
    float y[MAX_S * 16];
    gr_run_stats st = {0};
    for (int i = 0; i < len && s; i++) {
        int seq = order[i];
        CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
        mismatches += !same_as_eager(seq, y);
        CHECK_OK(gr_session_stats(s, &st));
        over += st.graph_bytes > st.graph_budget_bytes || st.graph_bytes_peak > st.graph_budget_bytes;
    }
    CHECK_MSG(mismatches == 0, "%d of %d runs differ from eager under the budget", mismatches, len);
    CHECK_MSG(over == 0, "graph memory exceeded the budget after %d runs", over);
    CHECK(st.graph_budget_bytes == (size_t)(o.graph_memory_mb * 1048576.0));
    if (on_cuda) printf("budget %zu bytes: %ld instantiations, %ld evictions, %ld graphs held, peak %zu bytes\n",
                        st.graph_budget_bytes, st.instantiations, st.evictions, st.graphs_live, st.graph_bytes_peak);
    if (!on_cuda) { /* on CUDA graph sizes vary with the driver's pools: the budget is what is checked there */
        CHECK_MSG(st.evictions > 0 && st.instantiations > n, "evictions %ld instantiations %ld", st.evictions, st.instantiations);
        CHECK(st.graphs_live >= 1 && st.graphs_live <= 4);
        /* bindings whose graphs went lost their plans (arenas, placeholders) too */
        CHECK_MSG(st.plans_evicted > 0 && st.device_bytes < unbudgeted_device_bytes, "plans dropped %ld, device bytes %zu vs %zu",
                  st.plans_evicted, st.device_bytes, unbudgeted_device_bytes);
    }
    CHECK(st.over_budget == 0);
    /* no re-record limit under a budget: the last run (a revisited binding) replays a graph */
    CHECK(st.segments_in_graphs == st.segments);
    /* the device's own count agrees: destroying the session gives every graph byte back */
    char *text = NULL;
    CHECK_OK(gr_session_explain(s, &text));
    CHECK(text && strstr(text, "graph memory: ") && strstr(text, "evictions"));
    gr_free_string(text);
    /* a binding evicted earlier comes back: captured again, right results */
    long inst = st.instantiations;
    for (int seq = 1; seq <= n && s; seq++) {
        CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
        CHECK(same_as_eager(seq, y));
    }
    CHECK_OK(gr_session_stats(s, &st));
    CHECK(st.graph_bytes <= st.graph_budget_bytes && st.graph_bytes_peak <= st.graph_budget_bytes);
    if (!on_cuda) CHECK(st.instantiations > inst);
    gr_session_destroy(s);
}

/* A budget smaller than one binding's graph: nothing kept, every run eager and right. */
static void test_budget_too_small(gr_graph_t g) {
    if (on_cuda && graph_bytes_of(g, 4) < 2) {
        printf("the driver took no measurable memory for a graph: the budget-below-one-graph case is skipped\n");
        return;
    }
    gr_session_options o = opts(GR_MODE_GRAPH);
    o.graph_memory_mb = 1e-6; /* 1 byte */
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float y[MAX_S * 16];
    gr_run_stats st = {0};
    for (int seq = 3; seq <= 5 && s; seq++)
        for (int r = 0; r < 3; r++) {
            CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
            CHECK(same_as_eager(seq, y));
            CHECK_OK(gr_session_stats(s, &st));
            CHECK(st.graph_bytes == 0 && st.graphs_live == 0 && st.graph_bytes_peak == 0);
        }
    CHECK(st.over_budget == 3 && st.segments_in_graphs == 0 && st.kernels_in_graphs == 0);
    char *text = NULL;
    CHECK_OK(gr_session_explain(s, &text));
    CHECK(text && strstr(text, "more than the whole graph memory budget of 1 bytes"));
    gr_free_string(text);
    gr_session_destroy(s);
}

/* Mode auto under a budget: a binding whose plan was dropped comes back with its decision
 * (kept in memory, nothing persisted here) and without a warm-up: no timed run again. */
static void test_auto_budget(gr_graph_t g) {
    size_t one = graph_bytes_of(g, 6);
    if (on_cuda && one == 0) return; /* nothing measured: nothing evicted */
    gr_session_options o = opts(GR_MODE_AUTO);
    o.no_persist_decisions = 1;
    o.graph_memory_mb = (double)(one + one / 2) / 1048576.0;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float y[MAX_S * 16];
    gr_run_stats st = {0};
    for (int seq = 4; seq <= 6 && s; seq++)
        for (int r = 0; r < 8; r++) {
            CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
            CHECK(same_as_eager(seq, y));
        }
    if (s) CHECK_OK(gr_session_stats(s, &st));
    long timed = st.timed_runs, decided = st.decisions_measured;
    CHECK(decided == 3 * st.segments);
    for (int cycle = 0; cycle < 3 && s; cycle++)
        for (int seq = 4; seq <= 6; seq++)
            for (int r = 0; r < 2; r++) {
                CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
                CHECK(same_as_eager(seq, y));
                CHECK_OK(gr_session_stats(s, &st));
                CHECK(st.graph_bytes <= st.graph_budget_bytes);
                /* no warm-up after a re-plan: the binding's first run replays its new graph */
                if (!on_cuda && st.plans_evicted > 0) CHECK(st.segments_in_graphs == st.segments);
            }
    CHECK_MSG(st.timed_runs == timed && st.decisions_measured == decided && st.decisions_loaded == 0,
              "timed %ld -> %ld, measured %ld -> %ld", timed, st.timed_runs, decided, st.decisions_measured);
    if (!on_cuda) {
        CHECK(st.plans_evicted > 0);
        char *text = NULL;
        if (s) CHECK_OK(gr_session_explain(s, &text));
        CHECK(text && strstr(text, "decision kept from this binding's earlier plan"));
        gr_free_string(text);
    }
    gr_session_destroy(s);
}

/* ==== persisted decisions ================================================================================ */
static char cache_dir[256];

/* The one decisions file under cache_dir (path into out); false if none. */
static bool decisions_file(char *out, size_t n) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/decisions", cache_dir);
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".bin") && !found) {
            snprintf(out, n, "%s/%s", dir, e->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

static void remove_decisions(void) {
    char path[600];
    while (decisions_file(path, sizeof path)) unlink(path);
}

/* Runs lengths 4 and 9, each `runs` times, in a mode-auto session on cache_dir. */
static gr_session_t auto_session(gr_graph_t g, int runs, gr_run_stats *st, int no_persist) {
    gr_session_options o = opts(GR_MODE_AUTO);
    o.cache_dir = cache_dir;
    o.no_persist_decisions = no_persist;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    float y[MAX_S * 16];
    for (int r = 0; r < runs && s; r++)
        for (int seq = 4; seq <= 9; seq += 5) {
            CHECK_OK(run_at(s, seq, 100u + (unsigned)seq, ref_temp(seq), y));
            CHECK(same_as_eager(seq, y));
        }
    if (s) CHECK_OK(gr_session_stats(s, st));
    return s;
}

static char *explain_of(gr_session_t s) {
    char *text = NULL;
    if (s) CHECK_OK(gr_session_explain(s, &text));
    return text;
}

static void test_decisions(gr_graph_t g) {
    remove_decisions();
    gr_run_stats st;
    /* first session: measures (enough runs for every segment to decide), saves */
    gr_session_t s = auto_session(g, 8, &st, 0);
    CHECK_MSG(st.decisions_measured == 2 * st.segments && st.timed_runs > 0 && st.decisions_loaded == 0,
              "measured %ld (segments %d), timed %ld, loaded %ld", st.decisions_measured, st.segments, st.timed_runs,
              st.decisions_loaded);
    char *first = explain_of(s);
    CHECK(first && strstr(first, "measured now"));
    gr_session_destroy(s);
    char path[600];
    CHECK(decisions_file(path, sizeof path));

    /* second session: loads, times nothing, same choices */
    s = auto_session(g, 3, &st, 0);
    CHECK_MSG(st.timed_runs == 0 && st.decisions_measured == 0 && st.decisions_loaded == 2 * st.segments,
              "timed %ld measured %ld loaded %ld", st.timed_runs, st.decisions_measured, st.decisions_loaded);
    char *second = explain_of(s);
    CHECK(second && strstr(second, "decision loaded from the decisions file") && !strstr(second, "measured now"));
    CHECK(second && strstr(second, "decisions read"));
    /* the same choice as measured: graph in both or eager in both (the last binding explained: 9) */
    CHECK(first && second && (strstr(first, "in a graph") != NULL) == (strstr(second, "in a graph") != NULL));
    /* a binding not in the file is measured */
    float y[MAX_S * 16];
    for (int r = 0; r < 8 && s; r++) CHECK_OK(run_at(s, 13, 113u, ref_temp(13), y));
    CHECK(same_as_eager(13, y));
    CHECK_OK(gr_session_stats(s, &st));
    CHECK(st.timed_runs > 0 && st.decisions_measured == st.segments);
    gr_strfree(first);
    gr_strfree(second);
    gr_session_destroy(s);

    /* corrupt: one payload byte flipped (the checksum catches it) */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, GR_CACHE_FILE_HEADER_BYTES + 9, SEEK_SET);
        int c = fgetc(f);
        fseek(f, GR_CACHE_FILE_HEADER_BYTES + 9, SEEK_SET);
        fputc(c ^ 0x5a, f);
        fclose(f);
    }
    s = auto_session(g, 8, &st, 0);
    CHECK_MSG(st.decisions_loaded == 0 && st.timed_runs > 0 && st.decisions_measured == 2 * st.segments,
              "corrupt file: loaded %ld timed %ld", st.decisions_loaded, st.timed_runs);
    char *text = explain_of(s);
    CHECK(text && strstr(text, "warning: ignoring the decisions file") && strstr(text, "checksum"));
    gr_strfree(text);
    gr_session_destroy(s);
    /* ... and rewritten by the decisions made since: loads again */
    s = auto_session(g, 1, &st, 0);
    CHECK(st.decisions_loaded == 2 * st.segments && st.timed_runs == 0);
    gr_session_destroy(s);

    /* truncated */
    CHECK(truncate(path, GR_CACHE_FILE_HEADER_BYTES + 5) == 0);
    s = auto_session(g, 1, &st, 0);
    CHECK(st.decisions_loaded == 0 && st.timed_runs > 0);
    text = explain_of(s);
    CHECK(text && strstr(text, "warning: ignoring the decisions file"));
    gr_strfree(text);
    gr_session_destroy(s);
    CHECK(truncate(path, 3) == 0); /* shorter than the header */
    s = auto_session(g, 1, &st, 0);
    CHECK(st.decisions_loaded == 0);
    gr_session_destroy(s);

    /* stale: entries whose segment hash no longer matches the plan's (a well-formed file) */
    remove_decisions();
    s = auto_session(g, 8, &st, 0);
    gr_session_destroy(s);
    CHECK(decisions_file(path, sizeof path));
    unsigned char header[GR_CACHE_FILE_HEADER_BYTES];
    f = fopen(path, "rb");
    CHECK(f && fread(header, 1, sizeof header, f) == sizeof header);
    if (f) fclose(f);
    uint64_t key = 0;
    for (int i = 0; i < 8; i++) key |= (uint64_t)header[16 + i] << (8 * i);
    void *payload = NULL;
    size_t n = 0;
    CHECK_OK(gr_cache_file_read(path, 0x33434544u /* "DEC3" */, key, 1 << 20, &payload, &n));
    if (payload) {
        for (size_t e = 8; e + 32 <= n; e += 32) ((unsigned char *)payload)[e + 8] ^= 0xff; /* segment hash */
        CHECK_OK(gr_cache_file_write(path, 0x33434544u, key, payload, n));
        gr_cache_file_free(payload, n);
    }
    s = auto_session(g, 8, &st, 0);
    CHECK(st.decisions_loaded == 0 && st.decisions_measured == 2 * st.segments);
    text = explain_of(s);
    CHECK(text && strstr(text, "is stale"));
    gr_strfree(text);
    gr_session_destroy(s);

    /* another model (other weights, same structure): another file, nothing loaded */
    char *other = gr_strdup(model_gir);
    char *seed = other ? strstr(other, "seed=1,") : NULL;
    if (seed) seed[5] = '5';
    gr_graph_t g2 = NULL;
    if (other) CHECK_OK(gr_graph_parse(other, "shapes2.gir", NULL, &g2));
    gr_strfree(other);
    gr_session_options o = opts(GR_MODE_AUTO);
    o.cache_dir = cache_dir;
    gr_session_t s2 = NULL;
    if (g2) CHECK_OK(gr_session_create(g2, &o, &s2));
    float x[16 * 4];
    sweep_fill(x, 64, 1);
    int64_t dims[2] = {4, 16};
    float temp = 1;
    if (s2) {
        CHECK_OK(gr_session_set_input(s2, "x", GR_F32, 2, dims, x, sizeof x));
        CHECK_OK(gr_session_set_input(s2, "temperature", GR_F32, 0, NULL, &temp, sizeof temp));
        CHECK_OK(gr_session_run(s2));
        CHECK_OK(gr_session_stats(s2, &st));
        CHECK(st.decisions_loaded == 0 && st.timed_runs > 0);
    }
    gr_session_destroy(s2);
    gr_graph_destroy(g2);

    /* no_persist_decisions: nothing read, nothing written */
    remove_decisions();
    s = auto_session(g, 8, &st, 1);
    CHECK(st.decisions_measured == 2 * st.segments);
    text = explain_of(s);
    CHECK(text && strstr(text, "not persisted (no_persist_decisions)"));
    gr_strfree(text);
    gr_session_destroy(s);
    CHECK(!decisions_file(path, sizeof path));

    /* the simulator without a cache_dir persists nothing (and says so) */
    if (on_cuda) return; /* CUDA would write into ~/.cache */
    o = opts(GR_MODE_AUTO);
    s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    if (s) {
        float yy[MAX_S * 16];
        CHECK_OK(run_at(s, 4, 104u, ref_temp(4), yy));
        text = explain_of(s);
        CHECK(text && strstr(text, "the simulator keeps decisions only in a cache_dir given explicitly"));
        gr_strfree(text);
    }
    gr_session_destroy(s);
}

/* ==== allocation failures ================================================================================ */
static void test_alloc_failures(gr_graph_t g) {
    /* a decisions file to read, and a budget that evicts */
    remove_decisions();
    gr_run_stats st;
    gr_session_t s = auto_session(g, 8, &st, 0);
    gr_session_destroy(s);
    size_t one = graph_bytes_of(g, 6);
    long base = gr_debug_live_allocs();
    int failures_seen = 0;
    for (long n = 1; n < 20000; n++) {
        gr_debug_fail_alloc_after(n);
        gr_status rc = GR_OK;
        for (int mode = 0; mode < 2 && rc == GR_OK; mode++) {
            gr_session_options o = opts(mode ? GR_MODE_GRAPH : GR_MODE_AUTO);
            o.cache_dir = cache_dir;
            if (mode) o.graph_memory_mb = (double)(one + one / 2) / 1048576.0;
            gr_session_t ss = NULL;
            rc = gr_session_create(g, &o, &ss);
            float y[MAX_S * 16];
            for (int r = 0; r < 3 && rc == GR_OK; r++)
                for (int seq = 4; seq <= 6 && rc == GR_OK; seq++) rc = run_at(ss, seq, 100u + (unsigned)seq, ref_temp(seq), y);
            gr_session_destroy(ss);
        }
        long made = gr_debug_fail_alloc_after(0);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
        if (rc == GR_OK && made < n) break;
        if (rc != GR_OK) failures_seen++;
        if (rc != GR_OK && rc != GR_ERR_NOMEM) CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(rc), gr_last_error());
    }
    CHECK(failures_seen > 50);
}

int main(int argc, char **argv) {
    on_cuda = argc > 1 && !strcmp(argv[1], "cuda");
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_dir, sizeof cache_dir, "%s/graft-test-shapes-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(cache_dir)) {
        perror("mkdtemp");
        return 1;
    }
    gr_graph_t g = parse_model();
    if (on_cuda && g) { /* no GPU: one clear failure, not fifty */
        gr_session_options o = opts(GR_MODE_EAGER);
        gr_session_t s = NULL;
        gr_status st = gr_session_create(g, &o, &s);
        gr_session_destroy(s);
        if (st != GR_OK) {
            fprintf(stderr, "test_shapes cuda: no CUDA session: %s\n", gr_last_error());
            gr_graph_destroy(g);
            rmdir(cache_dir);
            return 1;
        }
    }
    test_policy_options();
    if (!on_cuda) test_mem_info();
    if (g) {
        enum { N = 12 };
        make_references(g, 16); /* the sweeps use 1..N, test_decisions 13 too */
        test_exact_sweep(g, N);
        test_budget(g, N);
        test_budget_too_small(g);
        test_auto_budget(g);
        test_decisions(g);
        if (!on_cuda) test_alloc_failures(g);
    }
    gr_graph_destroy(g);
    remove_decisions();
    char dir[300];
    snprintf(dir, sizeof dir, "%s/decisions", cache_dir);
    rmdir(dir);
    rmdir(cache_dir);
    return check_summary(on_cuda ? "test_shapes (cuda)" : "test_shapes");
}
