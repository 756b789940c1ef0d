/* tests/test_shape_auto — shape policy auto measured per segment (issue 11 item 1), on the
 * simulator (its modelled times):
 *  - a model split into two graphable segments by a host step: the first's matmul is over rows
 *    (generic proves it), the second's has the symbol in n (generic refuses it); auto measures
 *    each segment once, picks a policy per segment (not the same for both), and a shuffled sweep
 *    of lengths equals an eager session's bit for bit; explain shows each choice and its numbers;
 *  - the decisions persist: a second session on the same cache_dir measures nothing (no measuring
 *    runs), takes both from the file, gets the same results, and explain says so; a corrupt file
 *    is ignored with a warning and the segments are measured again;
 *  - a model where padding would change results (a mean over the symbol) never gets pad;
 *  - capture ahead of time: under generic only the buckets' graphs are captured (not one per
 *    length); under auto a generic segment's buckets and an update segment's lengths, and the
 *    sweep after it captures nothing;
 *  - allocation failures on auto's paths: an error, never a leak. */
#include "check.h"
#include "shape_sweep.h"
#include "runtime/runtime-impl.h"
#include "util/cache-file.h"
#include <sys/stat.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_S 40
#define N 24

/* two segments once split: h = x w^T (S in the rows: generic proves it), then y = w g^T (S in n:
 * generic refuses it) and a mean over S (padding would change it: pad refused). S's range is wide
 * (nine buckets for 256 bindings), so generic's captures amortise: the simulator's costs make it
 * the first segment's choice (its replay is about update's replay plus its exec update). */
static const char *split_gir =
    "graft 1\n"
    "dim S: [1, 256]\n"
    "input x: f32[S, 16]\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "h = matmul(x, w, trans_b=1)\n"
    "g = gelu(h)\n"
    "y = matmul(w, g, trans_b=1)\n"
    "m = reduce_mean(y, axes=[1], keepdims=1)\n"
    "z = sub(y, m)\n"
    "output z\n";

/* a mean over the symbolic axis: padding would change every result */
static const char *mean_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "e = exp(x)\n"
    "m = reduce_mean(e, axes=[0], keepdims=1)\n"
    "y = sub(e, m)\n"
    "output y\n";

/* a row-wise model: the generic test's, one segment */
static const char *rowwise_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "h = matmul(x, w, trans_b=1)\n"
    "g = gelu(h)\n"
    "y = tanh(g)\n"
    "output y\n";

static char cache_dir[256];

static gr_session_options opts(gr_mode mode, int policy) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = mode;
    o.shape_policy = policy;
    o.max_rerecords = 1000;
    return o;
}

/* ---- the split: a no-op host step after the gelu's kernel (the first kernel writing a value) ---- */
static gr_status split_after_gelu(void *user, gr_graph *g, gr_step_list *steps) {
    (void)user;
    int x = gr_ir_find_value(g, "x");
    int at = -1, value = -1;
    for (int i = 0; i < steps->len && at < 0; i++) {
        const gr_step *s = &steps->data[i];
        if (s->kind != GR_STEP_KERNEL) continue;
        for (int k = 0; k < s->n_args && at < 0; k++)
            if (s->args[k].kind == GR_ARG_VALUE && s->args[k].value != x && g->values.data[s->args[k].value].kind != GR_VAL_CONST &&
                s->kernel->params[k].written)
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

/* One run at S = seq; y gets the output's floats (out_n of them). */
/* ---- runs ---- */
static gr_status run_at(gr_session_t s, int seq, float *y, size_t *out_n) {
    static float x[256 * 16]; /* S's range: 1..256 */
    sweep_fill(x, seq * 16, 100u + (unsigned)seq);
    int64_t dims[2] = {seq, 16};
    GR_TRY(gr_session_set_input(s, "x", GR_F32, 2, dims, x, sizeof(float) * (size_t)seq * 16));
    GR_TRY(gr_session_run(s));
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    *out_n = (size_t)seq * 16;
    return gr_session_output_read(s, o, y, sizeof(float) * *out_n);
}

static float ref_y[MAX_S + 1][MAX_S * 16];

/* eager references with the kernels auto's graph mode compiles (generic's, where it is on) */
static void make_references(gr_graph_t g, int n, int policy) {
    gr_session_options o = opts(GR_MODE_EAGER, policy);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    size_t m;
    for (int seq = 1; seq <= n && s; seq++) CHECK_OK(run_at(s, seq, ref_y[seq], &m));
    gr_session_destroy(s);
}

/* A shuffled sweep in session s; returns the runs that differ from ref_y. */
static int sweep(gr_session_t s, unsigned seed) {
    int order[2 * MAX_S], len = sweep_order(order, N, 0, seed), bad = 0;
    static float y[MAX_S * 16];
    for (int i = 0; i < len && s; i++) {
        size_t m = 0;
        CHECK_OK(run_at(s, order[i], y, &m));
        bool differs = memcmp(y, ref_y[order[i]], sizeof(float) * m) != 0;
        if (differs && getenv("GRAFT_TEST_VERBOSE"))
            for (size_t k = 0; k < m; k++)
                if (y[k] != ref_y[order[i]][k]) {
                    fprintf(stderr, "run %d (S=%d) differs from eager at %zu of %zu: %g, not %g\n", i, order[i], k, m, y[k], ref_y[order[i]][k]);
                    break;
                }
        bad += differs;
    }
    return bad;
}

static char *explain_of(gr_session_t s) {
    char *text = NULL;
    if (s) CHECK_OK(gr_session_explain(s, &text));
    return text;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text ? strstr(text, what) : NULL; p; p = strstr(p + 1, what)) n++;
    return n;
}

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

/* ==== per segment, persisted ============================================================================ */
static gr_session_t auto_session(gr_graph_t g) {
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
    o.cache_dir = cache_dir;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    return s;
}

static void test_per_segment(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(split_gir, "split.gir", NULL, &g));
    if (!g) return;
    gr_rt_debug_set_step_hook(split_after_gelu, NULL);
    make_references(g, N, GR_SHAPES_AUTO);

    /* first process: measures each segment once */
    gr_session_t s = auto_session(g);
    int bad = sweep(s, 7);
    CHECK_MSG(bad == 0, "%d runs under auto differ from eager", bad);
    gr_run_stats st = {0};
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.shape_decisions_measured >= 2 && st.shape_decisions_loaded == 0 && st.shape_measure_runs > 0,
              "measured %ld, loaded %ld, measuring runs %ld", st.shape_decisions_measured, st.shape_decisions_loaded,
              st.shape_measure_runs);
    /* cheap: a few runs per segment measured (warm-up, capture, timed replays, the bucket's) */
    CHECK_MSG(st.shape_measure_runs <= 8 * st.shape_decisions_measured, "%ld measuring runs for %ld segments", st.shape_measure_runs,
              st.shape_decisions_measured);
    char *text = explain_of(s);
    if (getenv("GRAFT_TEST_VERBOSE")) fprintf(stderr, "%s", text ? text : "");
    CHECK_MSG(text && count(text, "shape policy auto: ") >= 2 && count(text, "(measured in this session)") >= 2,
              "explain:\n%s", text ? text : "");
    /* the second segment's matmul has S in n: generic is no candidate there, and explain says why */
    CHECK_MSG(text && strstr(text, "generic refused: ") && strstr(text, "shape policy auto: generic"), "explain:\n%s", text ? text : "");
    bool other = text && (strstr(text, "shape policy auto: update") || strstr(text, "shape policy auto: exact"));
    CHECK_MSG(other, "one policy for every segment:\n%s", text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);

    /* second process: both decisions from the file, no measuring runs */
    s = auto_session(g);
    bad = sweep(s, 11);
    CHECK_MSG(bad == 0, "%d runs with loaded decisions differ from eager", bad);
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.shape_decisions_measured == 0 && st.shape_decisions_loaded >= 2 && st.shape_measure_runs == 0,
              "second session: measured %ld, loaded %ld, measuring runs %ld", st.shape_decisions_measured, st.shape_decisions_loaded,
              st.shape_measure_runs);
    text = explain_of(s);
    CHECK_MSG(text && count(text, "(from the decisions file)") >= 2 && strstr(text, "shape policy decisions read"), "explain:\n%s",
              text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);

    /* a corrupt file: ignored with a warning, measured again, still right */
    char path[600];
    CHECK(decisions_file(path, sizeof path));
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 40, SEEK_SET);
        unsigned char junk[16];
        memset(junk, 0xa5, sizeof junk);
        fwrite(junk, 1, sizeof junk, f);
        fclose(f);
    }
    s = auto_session(g);
    bad = sweep(s, 13);
    CHECK_MSG(bad == 0, "%d runs after a corrupt decisions file differ from eager", bad);
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.shape_decisions_measured >= 2 && st.shape_decisions_loaded == 0, "after corruption: measured %ld, loaded %ld",
              st.shape_decisions_measured, st.shape_decisions_loaded);
    text = explain_of(s);
    CHECK_MSG(text && strstr(text, "warning: ignoring the decisions file"), "explain:\n%s", text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);
    gr_rt_debug_set_step_hook(NULL, NULL);
    gr_graph_destroy(g);
}

/* ==== pad never where unsafe ============================================================================ */
static void test_no_unsafe_pad(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(mean_gir, "mean.gir", NULL, &g));
    if (!g) return;
    make_references(g, N, GR_SHAPES_AUTO);
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int bad = sweep(s, 17);
    CHECK_MSG(bad == 0, "%d runs under auto differ from eager", bad);
    gr_run_stats st = {0};
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.padded_runs == 0 && st.shape_decisions_measured >= 1, "padded %ld, measured %ld", st.padded_runs, st.shape_decisions_measured);
    char *text = explain_of(s);
    CHECK_MSG(text && strstr(text, "'S' NOT padded") && strstr(text, "shape policy auto: "), "explain:\n%s", text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* ==== capture ahead of time ============================================================================= */
static void test_capture_range(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(rowwise_gir, "row.gir", NULL, &g));
    if (!g) return;
    /* generic: the buckets of 1..24 are 1, 2, 4, 8, 16, 32: one capture each, not 24 */
    make_references(g, N, GR_SHAPES_GENERIC);
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_capture_report r = {0};
    if (s) CHECK_OK(gr_session_capture_range(s, "S", 1, N, 0, &r));
    gr_run_stats st = {0};
    CHECK_MSG(r.captures == 6 && r.bindings == N, "capture range under generic: %ld captures for %d bindings", r.captures, r.bindings);
    int bad = sweep(s, 19);
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(bad == 0 && st.captures == 6, "after capture ahead: %d wrong, %ld captures", bad, st.captures);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    /* auto on the split model: the generic segment captures its buckets' graphs (and the measured
     * binding's own, given back), the update segment one graph per length; the sweep after it
     * captures nothing */
    CHECK_OK(gr_graph_parse(split_gir, "split.gir", NULL, &g));
    if (!g) return;
    gr_rt_debug_set_step_hook(split_after_gelu, NULL);
    make_references(g, N, GR_SHAPES_AUTO);
    o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
    s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    if (s) CHECK_OK(gr_session_capture_range(s, "S", 1, N, 0, &r));
    long before = r.captures;
    bad = sweep(s, 23);
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(bad == 0 && st.captures == before, "auto after capture ahead: %d wrong, %ld captures then %ld", bad, before, st.captures);
    char *text = explain_of(s);
    /* fewer than one per length and segment (2 N): the generic segment's are its buckets' */
    CHECK_MSG(text && strstr(text, "shape policy auto: generic") && r.captures < 2 * N && r.captures >= N, "auto captured %ld:\n%s",
              r.captures, text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);
    gr_rt_debug_set_step_hook(NULL, NULL);
    gr_graph_destroy(g);
}

/* ==== the adaptive rule: the default policy, re-chosen as calls per binding grow ========================== */
#define WIDE 200 /* lengths of the never-repeating stream */
/* calls per length of the repeating sweep: on the simulator's costs (exact: replay 8.2 us, a new graph
 * 41.5 us; generic: replay 9.2 us, nine graphs for 256 lengths) exact wins past about 41 calls per binding */
#define PASSES 64

/* A session of graph mode with nothing asked about shapes: the default (auto on this symbolic model). */
static gr_session_t default_session(gr_graph_t g, double graph_memory_mb, bool persist) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = GR_MODE_GRAPH;
    o.graph_memory_mb = graph_memory_mb;
    if (persist) o.cache_dir = cache_dir;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int by_default = 0;
    CHECK_MSG(s && gr_session_shape_policy(s, &by_default) == GR_SHAPES_AUTO && by_default, "the default policy is %s",
              gr_shape_policy_name(gr_session_shape_policy(s, NULL)));
    return s;
}

/* segment seg's policy in s's current plan (-1: undecided) */
static int policy_of(gr_session_t s, int seg) { return s && s->current ? gr_rt_autopol_policy(s, s->current, seg) : -2; }

/* Runs seq in s and in the eager reference session e (the same kernels: policy auto in eager mode);
 * returns whether they differ. */
static bool differs_from_eager(gr_session_t s, gr_session_t e, int seq) {
    static float y[WIDE * 16], r[WIDE * 16];
    size_t m = 0, n = 0;
    CHECK_OK(run_at(s, seq, y, &m));
    CHECK_OK(run_at(e, seq, r, &n));
    return m != n || memcmp(y, r, sizeof(float) * m) != 0;
}

static gr_session_t eager_reference(gr_graph_t g) {
    gr_session_options o = opts(GR_MODE_EAGER, GR_SHAPES_AUTO);
    gr_session_t e = NULL;
    CHECK_OK(gr_session_create(g, &o, &e));
    return e;
}

/* Every length of 1..N called `passes` times (each pass shuffled): generic first (two calls per
 * binding assumed, nine buckets for 256 lengths), exact or update once the observed calls per
 * binding make their captures cheap; every result eager's. Returns the session (destroyed by the caller). */
static gr_session_t repeat_sweep(gr_graph_t g, gr_session_t e, int passes, double graph_memory_mb, bool persist, int *first_policy) {
    gr_session_t s = default_session(g, graph_memory_mb, persist);
    int bad = 0;
    *first_policy = -1;
    for (int pass = 0; pass < passes && s; pass++) {
        int order[2 * MAX_S];
        sweep_order(order, N, 0, 31u + (unsigned)pass);
        for (int i = 0; i < N; i++) { /* the first half of sweep_order's two rounds: each length once */
            bad += differs_from_eager(s, e, order[i]);
            if (pass == 0 && i == 0) *first_policy = policy_of(s, 0);
        }
    }
    CHECK_MSG(bad == 0, "%d of %d runs of the repeating sweep differ from eager", bad, passes * N);
    return s;
}

static void test_adaptive(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(split_gir, "split.gir", NULL, &g));
    if (!g) return;
    gr_rt_debug_set_step_hook(split_after_gelu, NULL);
    gr_session_t e = eager_reference(g);

    /* repeats: generic at the first binding, then exact or update */
    int first = -1;
    gr_session_t s = repeat_sweep(g, e, PASSES, 0, true, &first);
    int last = policy_of(s, 0);
    char *text = explain_of(s);
    if (getenv("GRAFT_TEST_VERBOSE")) fprintf(stderr, "%s", text ? text : "");
    CHECK_MSG(first == GR_SHAPES_GENERIC && (last == GR_SHAPES_EXACT || last == GR_SHAPES_UPDATE),
              "segment 0: %s at the first binding, %s after %d calls per binding:\n%s", gr_shape_policy_name(first),
              gr_shape_policy_name(last), PASSES, text ? text : "");
    CHECK_MSG(text && strstr(text, "shape policy: auto (the default of graph mode for a model with symbolic dims") &&
                  strstr(text, "calls per binding seen: 64.00 (1536 calls over 24 bindings)") && strstr(text, "last changed at call "),
              "explain:\n%s", text ? text : "");
    gr_run_stats st = {0};
    if (s) CHECK_OK(gr_session_stats(s, &st));
    long measure_runs = st.shape_measure_runs;
    CHECK_MSG(st.shape_decisions_measured >= 2 && st.shape_decisions_measured <= 4, "measured %ld segments (re-deciding measures nothing)", st.shape_decisions_measured);
    gr_free_string(text);
    gr_session_destroy(s);

    /* the next process starts from the saved ratio: the loaded decision is the last one, nothing
     * measured, and explain shows the prior read from the file */
    s = default_session(g, 0, true);
    int bad = s ? differs_from_eager(s, e, 1) : 0;
    text = explain_of(s);
    const char *prior = text ? strstr(text, "chosen for ") : NULL;
    double saved = 0;
    const char *at = prior ? strstr(prior, "(prior ") : NULL;
    if (at) saved = strtod(at + 7, NULL);
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(policy_of(s, 0) == last && st.shape_measure_runs == 0 && st.shape_decisions_loaded >= 2 && saved > 40 &&
                  strstr(text, "from the decisions file, with this session's"),
              "reloaded: segment 0 %s, %ld measuring runs (first process %ld), prior %.2f:\n%s", gr_shape_policy_name(policy_of(s, 0)),
              st.shape_measure_runs, measure_runs, saved, text ? text : "");
    gr_free_string(text);
    /* this process sees each length once: the ratio comes down from the saved one, results stay eager's */
    for (int seq = 2; seq <= N && s; seq++) bad += differs_from_eager(s, e, seq);
    CHECK_MSG(bad == 0, "%d runs with the reloaded ratio differ from eager", bad);
    gr_session_destroy(s);

    /* a decisions file of the previous layout (DEC2): ignored with a warning, measured again */
    char path[600];
    CHECK(decisions_file(path, sizeof path));
    const char *base = strrchr(path, '/');
    uint64_t key = base ? strtoull(base + 1, NULL, 16) : 0;
    unsigned char old_payload[8] = {0};
    CHECK_OK(gr_cache_file_write(path, 0x32434544u /* "DEC2" */, key, old_payload, sizeof old_payload));
    s = default_session(g, 0, true);
    for (int seq = 1; seq <= 4 && s; seq++) CHECK(!differs_from_eager(s, e, seq));
    if (s) CHECK_OK(gr_session_stats(s, &st));
    text = explain_of(s);
    CHECK_MSG(st.shape_decisions_loaded == 0 && st.shape_decisions_measured >= 2 && text && strstr(text, "warning: ignoring the decisions file"),
              "an old file: loaded %ld, measured %ld:\n%s", st.shape_decisions_loaded, st.shape_decisions_measured, text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);

    /* under a graph memory budget: the switch gives the old policy's graphs back and the budget holds */
    double budget_mb = 1; /* the whole range's exact graphs fit (256 x 2 x 1120 bytes): exact is a candidate */
    s = repeat_sweep(g, e, PASSES, budget_mb, false, &first);
    if (s) CHECK_OK(gr_session_stats(s, &st));
    text = explain_of(s);
    CHECK_MSG(st.graph_bytes <= st.graph_budget_bytes && st.graph_bytes_peak <= st.graph_budget_bytes && st.graph_budget_bytes > 0 &&
                  policy_of(s, 0) != GR_SHAPES_GENERIC && first == GR_SHAPES_GENERIC,
              "budget %zu: %zu bytes held, peak %zu; segment 0 %s then %s:\n%s", st.graph_budget_bytes, st.graph_bytes, st.graph_bytes_peak,
              gr_shape_policy_name(first), gr_shape_policy_name(policy_of(s, 0)), text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);

    /* no repeats: a stream of new lengths keeps generic (its few captures win at one call each) */
    s = default_session(g, 0, false);
    int order[2 * WIDE];
    sweep_order(order, WIDE, 0, 41);
    bad = 0;
    for (int i = 0, k = 0; i < 2 * WIDE && s; i++) {
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = order[j] == order[i];
        if (dup) continue; /* each length once */
        bad += differs_from_eager(s, e, order[i]);
        if (k++ == 0) first = policy_of(s, 0);
    }
    text = explain_of(s);
    CHECK_MSG(bad == 0 && first == GR_SHAPES_GENERIC && policy_of(s, 0) == GR_SHAPES_GENERIC && text &&
                  strstr(text, "calls per binding seen: 1.00 (200 calls over 200 bindings)") && strstr(text, "never changed"),
              "never-repeating: %d wrong, segment 0 %s then %s:\n%s", bad, gr_shape_policy_name(first), gr_shape_policy_name(policy_of(s, 0)),
              text ? text : "");
    gr_free_string(text);
    gr_session_destroy(s);

    gr_session_destroy(e);
    gr_rt_debug_set_step_hook(NULL, NULL);
    gr_graph_destroy(g);
}

/* ==== allocation failures ============================================================================== */
static void test_alloc_failures(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(split_gir, "split.gir", NULL, &g));
    if (!g) return;
    gr_rt_debug_set_step_hook(split_after_gelu, NULL);
    long base = gr_debug_live_allocs();
    int failures_seen = 0;
    for (long n = 1; n < 20000; n++) {
        gr_debug_fail_alloc_after(n);
        gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_AUTO);
        o.no_persist_decisions = 1;
        gr_session_t s = NULL;
        gr_status rc = gr_session_create(g, &o, &s);
        static float y[MAX_S * 16];
        size_t m;
        static const int lens[] = {5, 3, 8, 5};
        for (int i = 0; i < 4 && rc == GR_OK; i++) rc = run_at(s, lens[i], y, &m);
        if (rc == GR_OK) rc = gr_session_capture_range(s, "S", 6, 7, 0, NULL);
        char *text = NULL;
        if (rc == GR_OK) rc = gr_session_explain(s, &text);
        gr_free_string(text);
        gr_session_destroy(s);
        long made = gr_debug_fail_alloc_after(0);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
        if (rc == GR_OK && made < n) break;
        if (rc != GR_OK) failures_seen++;
        if (rc != GR_OK && rc != GR_ERR_NOMEM) CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(rc), gr_last_error());
    }
    CHECK(failures_seen > 50);
    gr_rt_debug_set_step_hook(NULL, NULL);
    gr_graph_destroy(g);
}

static void remove_tree(void) {
    char path[600];
    while (decisions_file(path, sizeof path)) unlink(path);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/decisions", cache_dir);
    rmdir(dir);
    rmdir(cache_dir);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_dir, sizeof cache_dir, "%s/graft-test-shape-auto-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(cache_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_per_segment();
    test_no_unsafe_pad();
    test_capture_range();
    remove_tree();
    if (mkdir(cache_dir, 0700) != 0) perror("mkdir");
    test_adaptive();
    test_alloc_failures();
    remove_tree();
    return check_summary("test_shape_auto");
}
