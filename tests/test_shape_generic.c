/* tests/test_shape_generic — shape policy generic (issue 11): one graph per power-of-two bucket
 * of the symbols, generated kernels reading their slots from a device table.
 *  - small models over a shuffled sweep of lengths, each output bit-identical to an eager session's
 *    at the same length (same kernels): a row-wise model (a matmul over rows: proven, every
 *    non-bucket length replays its bucket's graph), a softmax over the symbolic axis (kernels
 *    only: the symbol anywhere is fine), a contraction over the symbol (a generated kernel), fused
 *    attention (f32 with and without a mask, bf16 2 x 64 heads with a mask: the call reads its
 *    lengths and strides from the table's length record), a library matmul with the symbol in n
 *    (refused: explain names the matmul; still right, as exact);
 *  - the length record itself on the simulator (its lengths are used; past the call's: an error);
 *  - the dynamic exports (tests/data/onnx/dyn: GPT-2, BERT, Llama) over a shuffled sweep of seq
 *    (batch 1 and 2) against eager, bit for bit, with attention unfused and fused (f32);
 *    explain says per segment why it is or is not generic;
 *  - allocation failures: an error, never a leak.
 * `test_shape_generic cuda` runs the small models on CUDA (within 1e-5: a matmul may pick another
 * algorithm for the bucket's row count); GRAFT_TEST_DEVICE=cuda the exports too. */
#include "check.h"
#include "shape_sweep.h"
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool on_cuda;

static bool same(const float *a, const float *b, size_t n) {
    if (!on_cuda) return !memcmp(a, b, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
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
    return o;
}

/* ==== small models ================================================================================= */
#define MAX_S 40
#define N 20
#define F 16

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

/* the symbol in a reduction and a broadcast: generated kernels only */
static const char *colwise_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "e = exp(x)\n"
    "p = softmax(e, axis=0)\n"
    "m = reduce_mean(x, axes=[0], keepdims=1)\n"
    "y = sub(p, m)\n"
    "output y\n";

/* fused attention (fuse_attention_f32): its lengths and strides change with the binding and come
 * from the table's length record (proven) */
static const char *attention_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[1, 1, S, 16]\n"
    "a = matmul(x, x, trans_b=1)\n"
    "c = fill(shape=[], value=0.25)\n"
    "s = mul(a, c)\n"
    "p = softmax(s, axis=3)\n"
    "o = matmul(p, x)\n"
    "y = tanh(o)\n"
    "output y\n";

/* the same with a computed [1, 1, S, S] mask: its strides change with the binding too */
static const char *masked_attention_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[1, 1, S, 16]\n"
    "t = tanh(x)\n"
    "mk = matmul(t, t, trans_b=1)\n"
    "a = matmul(x, x, trans_b=1)\n"
    "c = fill(shape=[], value=0.25)\n"
    "s = mul(a, c)\n"
    "u = add(s, mk)\n"
    "p = softmax(u, axis=3)\n"
    "o = matmul(p, x)\n"
    "y = tanh(o)\n"
    "output y\n";

/* bf16, 2 heads of 64 with a computed mask: the tensor-core kernel on CUDA, its mask classified
 * into a tile table sized for the bucket */
static const char *attention_d64_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[1, 2, S, 64]\n"
    "xb = cast(x, to=\"bf16\")\n"
    "t = tanh(xb)\n"
    "mk = matmul(t, t, trans_b=1)\n"
    "a = matmul(xb, xb, trans_b=1)\n"
    "c = fill(shape=[], value=0.125, dtype=\"bf16\")\n"
    "s = mul(a, c)\n"
    "u = add(s, mk)\n"
    "p = softmax(u, axis=3)\n"
    "o = matmul(p, xb)\n"
    "y = cast(o, to=\"f32\")\n"
    "output y\n";

/* a library matmul whose column count is the symbol (w @ x^T, w a constant): a captured call
 * cannot take n from the table: refused, run exact */
static const char *wide_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "w = random_normal(shape=[16, 16], seed=1, std=0.3)\n"
    "y = matmul(w, x, trans_b=1)\n"
    "output y\n";

/* a contraction over the symbol (two computed operands): lowered to a generated kernel under generic */
static const char *gram_gir =
    "graft 1\n"
    "dim S: [1, 40]\n"
    "input x: f32[S, 16]\n"
    "t = tanh(x)\n"
    "g = matmul(t, x, trans_a=1)\n"
    "y = matmul(x, g)\n"
    "output y\n";

#define MAX_ROW 128           /* elements per position of S, at most */
static bool four_d;           /* x is [1, heads4, S, dim4] (else [S, 16]) */
static int heads4 = 1, dim4 = F;
static size_t numel_at(int seq) { return (size_t)seq * (four_d ? (size_t)(heads4 * dim4) : F); }
static gr_status run_at(gr_session_t s, int seq, float *y) {
    static float x[MAX_S * MAX_ROW];
    sweep_fill(x, (int)numel_at(seq), 100u + (unsigned)seq);
    int64_t dims[4] = {seq, F}, dims4[4] = {1, heads4, seq, dim4};
    GR_TRY(gr_session_set_input(s, "x", GR_F32, four_d ? 4 : 2, four_d ? dims4 : dims, x, sizeof(float) * numel_at(seq)));
    GR_TRY(gr_session_run(s));
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    return gr_session_output_read(s, o, y, sizeof(float) * numel_at(seq));
}

static float ref_y[MAX_S + 1][MAX_S * MAX_ROW];

/* The shuffled sweep under generic against eager; mismatches returned, stats and explain out.
 * The eager session asks for generic too, so it lowers the same kernels (activation matmuls). */
static int small_sweep(const char *gir, gr_run_stats *st, char **explain, bool fuse_f32) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(gir, "generic.gir", NULL, &g));
    if (!g) return -1;
    gr_session_options o = opts(GR_MODE_EAGER, GR_SHAPES_GENERIC);
    o.fuse_attention_f32 = fuse_f32;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    for (int seq = 1; seq <= N && s; seq++) CHECK_OK(run_at(s, seq, ref_y[seq]));
    gr_session_destroy(s);
    s = NULL;
    o = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
    o.fuse_attention_f32 = fuse_f32;
    CHECK_OK(gr_session_create(g, &o, &s));
    int order[2 * N];
    int len = sweep_order(order, N, 0, 7), bad = 0;
    static float y[MAX_S * MAX_ROW];
    for (int i = 0; i < len && s; i++) {
        gr_status rc = run_at(s, order[i], y);
        CHECK_MSG(rc == GR_OK, "S=%d: %s", order[i], gr_last_error());
        if (rc == GR_OK && !same(y, ref_y[order[i]], numel_at(order[i]))) {
            if (!bad) fprintf(stderr, "first mismatch at S=%d (run %d)\n", order[i], i);
            bad++;
        }
    }
    memset(st, 0, sizeof *st);
    if (s) CHECK_OK(gr_session_stats(s, st));
    if (explain && s) CHECK_OK(gr_session_explain(s, explain));
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return bad;
}

static void test_small_models(void) {
    gr_run_stats st;
    char *text = NULL;
    /* row-wise: buckets 1, 2, 4, 8, 16, 32 (S 17..20 round up to 32): 6 captures for 20 lengths */
    int bad = small_sweep(rowwise_gir, &st, &text, false);
    CHECK_MSG(bad == 0, "row-wise: %d runs differ from eager", bad);
    CHECK_MSG(st.captures == 6, "row-wise: %ld captures (one per bucket expected)", st.captures);
    CHECK_MSG(st.generic_replays > 0 && st.generic_runs >= st.generic_replays, "row-wise: %ld generic runs, %ld replays",
              st.generic_runs, st.generic_replays);
    CHECK_MSG(st.table_refreshes > 0 && st.table_bytes >= (size_t)st.table_refreshes * 8, "row-wise: %ld refreshes, %zu bytes",
              st.table_refreshes, st.table_bytes);
    CHECK_MSG(text && strstr(text, "shape policy: generic") && strstr(text, "graph replays"), "explain: %s", text ? text : "");
    gr_free_string(text);
    text = NULL;
    bad = small_sweep(colwise_gir, &st, &text, false);
    CHECK_MSG(bad == 0, "softmax over the symbol: %d runs differ from eager", bad);
    CHECK_MSG(st.captures == 6 && st.generic_replays > 0, "softmax over S: %ld captures, %ld replays", st.captures, st.generic_replays);
    gr_free_string(text);
    text = NULL;
    bad = small_sweep(gram_gir, &st, &text, false);
    CHECK_MSG(bad == 0, "contraction over the symbol: %d runs differ from eager", bad);
    CHECK_MSG(st.captures == 6 && st.generic_replays > 0, "contraction: %ld captures, %ld replays", st.captures, st.generic_replays);
    gr_free_string(text);
    text = NULL;
    /* fused attention: one graph per bucket, the lengths from the table; bit for bit eager's */
    four_d = true;
    for (int m = 0; m < 3; m++) {
        if (m == 2) heads4 = 2, dim4 = 64;
        bad = small_sweep(m == 2 ? attention_d64_gir : m ? masked_attention_gir : attention_gir, &st, &text, true);
        heads4 = 1, dim4 = F;
        const char *what = m == 2 ? "bf16 masked attention, 2 heads of 64" : m ? "masked attention" : "fused attention";
        CHECK_MSG(bad == 0, "%s: %d runs differ from eager", what, bad);
        CHECK_MSG(st.captures == 6 && st.generic_replays > 0, "%s: %ld captures, %ld generic runs, %ld replays", what, st.captures,
                  st.generic_runs, st.generic_replays);
        /* the last run's binding (S = 18, not a bucket) ran as its bucket's graph, fused */
        CHECK_MSG(text && strstr(text, "shape key: S=18") && strstr(text, "] attn ") &&
                      strstr(text, "lengths from the slot table") && (!m || strstr(text, " +mask")) &&
                      strstr(text, "generic: runs as its bucket's graph") && !strstr(text, "not generic"),
                  "%s: explain: %s", what, text ? text : "");
        gr_free_string(text);
        text = NULL;
    }
    four_d = false;
    /* refused: explain names the matmul and why; still right, as exact */
    bad = small_sweep(wide_gir, &st, &text, false);
    CHECK_MSG(bad == 0, "symbol in a matmul's columns: %d runs differ from eager", bad);
    CHECK_MSG(st.generic_runs == 0 && st.captures > 6, "symbol in n: %ld generic runs, %ld captures", st.generic_runs, st.captures);
    CHECK_MSG(text && strstr(text, "not generic, own graph (exact): matmul") && strstr(text, "(node 'y')"), "explain: %s",
              text ? text : "");
    gr_free_string(text);
}

/* inputs bound from device buffers (a new buffer each run, as torch tensors are): copied into
 * the shared placeholder, so the bucket's graph serves them; equal to eager */
static void test_device_inputs(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(rowwise_gir, "row.gir", NULL, &g));
    if (!g) return;
    gr_session_options oe = opts(GR_MODE_EAGER, GR_SHAPES_EXACT), og = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
    gr_session_t e = NULL, s = NULL;
    CHECK_OK(gr_session_create(g, &oe, &e));
    CHECK_OK(gr_session_create(g, &og, &s));
    static const int lens[] = {5, 6, 5, 3, 7, 6, 8, 7, 5};
    int bad = 0;
    for (int i = 0; i < (int)(sizeof lens / sizeof lens[0]) && e && s; i++) {
        int n = lens[i];
        float x[8 * F], ye[8 * F], yg[8 * F];
        sweep_fill(x, n * F, 70u + (unsigned)i);
        int64_t dims[2] = {n, F};
        size_t bytes = sizeof(float) * (size_t)n * F;
        void *buf = NULL;
        CHECK_OK(gr_session_device_alloc(s, bytes, &buf));
        if (!buf) break;
        CHECK_OK(gr_session_device_upload(s, buf, x, bytes));
        CHECK_OK(gr_session_bind_input_device(s, "x", GR_F32, 2, dims, buf, bytes));
        CHECK_OK(gr_session_set_input(e, "x", GR_F32, 2, dims, x, bytes));
        CHECK_OK(gr_session_run(e));
        CHECK_OK(gr_session_run(s));
        gr_output oe_, og_;
        CHECK_OK(gr_session_output(e, 0, &oe_));
        CHECK_OK(gr_session_output(s, 0, &og_));
        CHECK_OK(gr_session_output_read(e, oe_, ye, bytes));
        CHECK_OK(gr_session_output_read(s, og_, yg, bytes));
        bad += !same(ye, yg, (size_t)n * F);
        gr_session_device_free(s, buf);
    }
    CHECK_MSG(bad == 0, "%d device-bound runs under generic differ from eager", bad);
    gr_run_stats st = {0};
    if (s) CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.generic_replays > 0 && st.inputs_in_place == 0, "replays %ld, in place %ld", st.generic_replays, st.inputs_in_place);
    gr_session_destroy(e);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* capture ahead of time under generic (after buckets served smaller bindings), then a shuffled
 * sweep that matches eager */
static void test_capture_range(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(rowwise_gir, "row.gir", NULL, &g));
    if (!g) return;
    gr_session_options o = opts(GR_MODE_EAGER, GR_SHAPES_GENERIC);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    for (int seq = 1; seq <= 12 && s; seq++) CHECK_OK(run_at(s, seq, ref_y[seq]));
    gr_session_destroy(s);
    s = NULL;
    o = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
    CHECK_OK(gr_session_create(g, &o, &s));
    static const int before[] = {5, 7, 3}; /* buckets 8 and 4 serve other bindings first */
    static float y[MAX_S * MAX_ROW];
    for (int i = 0; i < 3 && s; i++) CHECK_OK(run_at(s, before[i], y));
    if (s) CHECK_OK(gr_session_capture_range(s, "S", 1, 12, 0, NULL));
    int order[24], len = sweep_order(order, 12, 0, 3), bad = 0;
    for (int i = 0; i < len && s; i++) {
        CHECK_OK(run_at(s, order[i], y));
        bad += !same(y, ref_y[order[i]], numel_at(order[i]));
    }
    CHECK_MSG(bad == 0, "%d runs after capture_range under generic differ from eager", bad);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* an undeclared bound: refused at creation, naming the symbol */
static void test_needs_bound(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse("graft 1\ninput x: f32[S, 4]\ny = tanh(x)\noutput y\n", "open.gir", NULL, &g));
    gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
    gr_session_t s = NULL;
    gr_status rc = g ? gr_session_create(g, &o, &s) : GR_ERR_INVALID;
    CHECK_MSG(rc == GR_ERR_INVALID && strstr(gr_last_error(), "'S' has none"), "%d: %s", rc, gr_last_error());
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* ==== the dynamic exports ============================================================================ */
#ifdef GRAFT_TEST_ONNX
#define DYN "tests/data/onnx/dyn/"

/* Sets every input of the export at (batch, seq): token ids in [0, 50), masks of ones, positions
 * 0..seq-1, floats in [-1, 1). */
static gr_status set_inputs(gr_graph_t g, gr_session_t s, int64_t batch, int64_t seq, unsigned seed) {
    int n = gr_graph_num_inputs(g);
    for (int i = 0; i < n; i++) {
        gr_value_info info;
        GR_TRY(gr_graph_input_info(g, i, &info));
        int64_t dims[8];
        size_t count = 1;
        for (int d = 0; d < info.ndim && d < 8; d++) {
            /* the symbolic dims of the exports are batch then seq */
            dims[d] = info.dims[d] >= 0 ? info.dims[d] : (d == 0 ? batch : seq);
            count *= (size_t)dims[d];
        }
        size_t bytes = count * 8;
        void *data = malloc(bytes ? bytes : 1);
        if (!data) return GR_ERR_NOMEM;
        if (info.dtype == GR_I64) {
            int64_t *v = data;
            for (size_t k = 0; k < count; k++) {
                seed = seed * 1664525u + 1013904223u;
                if (strstr(info.name, "mask")) v[k] = 1;
                else if (strstr(info.name, "position")) v[k] = (int64_t)(k % (size_t)seq);
                else v[k] = (int64_t)((seed >> 8) % 50u);
            }
        } else {
            sweep_fill(data, (int)count, seed);
            bytes = count * 4;
        }
        gr_status st = gr_session_set_input(s, info.name, info.dtype, info.ndim, dims, data, info.dtype == GR_I64 ? count * 8 : bytes);
        free(data);
        GR_TRY(st);
    }
    return GR_OK;
}

static gr_status read_out(gr_session_t s, float **out, size_t *n) {
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    size_t bytes = gr_session_output_nbytes(s, o);
    *out = malloc(bytes ? bytes : 1);
    if (!*out) return GR_ERR_NOMEM;
    *n = bytes;
    return gr_session_output_read(s, o, *out, bytes);
}

#define DYN_MAX_SEQ 64
#define DYN_LENS 10

/* fused: fuse_attention_f32, the attention one library call reading its lengths from the table */
static void dyn_case(const char *c, bool fused) {
    char path[512];
    snprintf(path, sizeof path, DYN "%s/model.onnx", c);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return;
    CHECK_OK(gr_graph_set_dim_range(g, "batch", 1, 2));
    CHECK_OK(gr_graph_set_dim_range(g, "seq", 1, DYN_MAX_SEQ));
    /* the eager session asks for generic too: the same kernels (attention's products as kernels) */
    gr_session_options oe = opts(GR_MODE_EAGER, GR_SHAPES_GENERIC), og = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
    oe.fuse_attention_f32 = og.fuse_attention_f32 = fused;
    const char *dev = getenv("GRAFT_TEST_DEVICE");
    if (dev && !strcmp(dev, "cuda")) oe.device = og.device = GR_DEVICE_CUDA;
    gr_session_t se = NULL, sg = NULL;
    CHECK_OK(gr_session_create(g, &oe, &se));
    CHECK_OK(gr_session_create(g, &og, &sg));
    /* lengths spread over the range, each twice, shuffled; batch 1 and 2 */
    int lens[2 * DYN_LENS * 2][2], len = 0;
    static const int pick[DYN_LENS] = {1, 2, 3, 5, 8, 13, 21, 31, 47, 64};
    for (int r = 0; r < 2; r++)
        for (int b = 1; b <= 2; b++)
            for (int k = 0; k < DYN_LENS; k++) lens[len][0] = b, lens[len++][1] = pick[k];
    unsigned seed = 11;
    for (int i = len - 1; i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1));
        int t0 = lens[i][0], t1 = lens[i][1];
        lens[i][0] = lens[j][0], lens[i][1] = lens[j][1];
        lens[j][0] = t0, lens[j][1] = t1;
    }
    int bad = 0;
    for (int i = 0; i < len && se && sg; i++) {
        int64_t b = lens[i][0], q = lens[i][1];
        float *ye = NULL, *yg = NULL;
        size_t ne = 0, ng = 0;
        gr_status rc = set_inputs(g, se, b, q, 3u + (unsigned)(b * 100 + q));
        if (rc == GR_OK) rc = gr_session_run(se);
        if (rc == GR_OK) rc = read_out(se, &ye, &ne);
        CHECK_MSG(rc == GR_OK, "%s b%lld s%lld eager: %s", c, (long long)b, (long long)q, gr_last_error());
        if (rc == GR_OK) rc = set_inputs(g, sg, b, q, 3u + (unsigned)(b * 100 + q));
        if (rc == GR_OK) rc = gr_session_run(sg);
        if (rc == GR_OK) rc = read_out(sg, &yg, &ng);
        CHECK_MSG(rc == GR_OK, "%s b%lld s%lld generic: %s", c, (long long)b, (long long)q, gr_last_error());
        if (rc == GR_OK && (ne != ng || !same(ye, yg, ne / sizeof(float)))) {
            if (!bad) fprintf(stderr, "%s: first mismatch at batch %lld seq %lld (run %d)\n", c, (long long)b, (long long)q, i);
            bad++;
        }
        free(ye);
        free(yg);
    }
    CHECK_MSG(bad == 0, "%s: %d of %d generic runs differ from eager", c, bad, len);
    gr_run_stats st;
    memset(&st, 0, sizeof st);
    char *text = NULL;
    if (sg) CHECK_OK(gr_session_stats(sg, &st));
    if (sg) CHECK_OK(gr_session_explain(sg, &text));
    CHECK_MSG(text && strstr(text, "shape policy generic: "), "%s: explain has no generic line per segment", c);
    /* every export's attention runs as generated kernels: its segments replay their buckets' graphs */
    CHECK_MSG(st.generic_replays > 0, "%s: no replay of a bucket's graph", c);
    if (fused)
        CHECK_MSG(text && strstr(text, "lengths from the slot table") && !strstr(text, "(exact): attention"),
                  "%s fused: the attention is not generic: %s", c, text ? text : "");
    printf("%-14s %s generic: %d runs, %ld captures, %ld segment runs through a bucket (%ld replays), %ld table refreshes (%zu B)\n", c,
           fused ? "fused" : "unfused", len, st.captures, st.generic_runs, st.generic_replays, st.table_refreshes, st.table_bytes);
    if (text && getenv("GRAFT_TEST_VERBOSE")) printf("%s\n", text);
    gr_free_string(text);
    gr_session_destroy(se);
    gr_session_destroy(sg);
    gr_graph_destroy(g);
}

#endif /* GRAFT_TEST_ONNX */

/* ==== the length record ============================================================================== */
/* An attention with lens_arg on the simulator: the record's lengths and strides, not the call's
 * (which only bound them); a record past the call's lengths, or a call without it, is an error. */
static void test_length_record(void) {
    gr_device *d = NULL;
    gr_stream *st = NULL;
    CHECK_OK(gr_device_open(GR_DEVICE_SIM, NULL, 0, &d));
    if (!d) return;
    CHECK_OK(gr_dev_stream_create(d, &st));
    enum { S = 8, D = 4 };
    void *buf[5] = {0};
    for (int i = 0; i < 4; i++) CHECK_OK(gr_dev_alloc(d, GR_MEM_DEVICE, sizeof(float) * S * D, &buf[i]));
    CHECK_OK(gr_dev_alloc(d, GR_MEM_DEVICE, sizeof(int64_t) * GR_ATTN_LENS, &buf[4]));
    float host[3][S * D], want[S * D], got[S * D];
    for (int i = 0; i < 3; i++) sweep_fill(host[i], S * D, 40u + (unsigned)i);
    gr_libcall c;
    memset(&c, 0, sizeof c);
    c.kind = GR_LIB_ATTENTION, c.dtype = GR_F32, c.batch = 1, c.heads = c.kv_heads = 1, c.head_dim = c.head_dim_v = D;
    c.alpha = 0.5, c.causal = true;
    snprintf(c.name, sizeof c.name, "rec");
    c.seq_q = 5, c.seq_k = 6; /* the binding: dense strides of [1, 1, 5 or 6, 4] */
    gr_libcall_attention_dense(&c);
    int64_t rec[GR_ATTN_LENS];
    gr_libcall_attention_lens(&c, rec);
    gr_karg ref[6] = {{.ptr = host[0]}, {.ptr = host[1]}, {.ptr = want}, {.ptr = host[2]}, {.ptr = NULL}};
    memset(want, 0, sizeof want);
    CHECK_OK(gr_libcall_reference(&c, ref));
    c.seq_q = c.seq_k = S; /* the bucket's call */
    gr_libcall_attention_dense(&c);
    c.lens_arg = true;
    CHECK(gr_libcall_nargs(&c) == GR_LIB_ATTENTION_NARGS + 1);
    const int in[3] = {0, 1, 3};
    for (int i = 0; i < 3; i++) CHECK_OK(gr_dev_memcpy(d, st, buf[in[i]], host[i], sizeof(float) * S * D, GR_COPY_H2D));
    CHECK_OK(gr_dev_memset(d, st, buf[2], 0, sizeof(float) * S * D));
    CHECK_OK(gr_dev_memcpy(d, st, buf[4], rec, sizeof rec, GR_COPY_H2D));
    gr_karg args[6] = {{.ptr = buf[0]}, {.ptr = buf[1]}, {.ptr = buf[2]}, {.ptr = buf[3]}, {.ptr = NULL}, {.ptr = buf[4]}};
    CHECK_OK(gr_dev_libcall(d, st, &c, args, 6));
    CHECK_OK(gr_dev_memcpy(d, st, got, buf[2], sizeof got, GR_COPY_D2H));
    CHECK_OK(gr_dev_stream_sync(d, st));
    CHECK_MSG(same(got, want, S * D), "the record's lengths were not the ones used");
    CHECK_ERR(gr_dev_libcall(d, st, &c, args, 5), GR_ERR_INVALID, "arguments");
    rec[GR_ATTN_LENS_SK] = S + 1;
    CHECK_OK(gr_dev_memcpy(d, st, buf[4], rec, sizeof rec, GR_COPY_H2D));
    CHECK_ERR(gr_dev_libcall(d, st, &c, args, 6), GR_ERR_INVALID, "exceed the call's");
    for (int i = 0; i < 5; i++) gr_dev_free(d, buf[i]);
    gr_dev_stream_destroy(d, st);
    gr_device_destroy(d);
}

/* ==== allocation failures ============================================================================= */
static void test_alloc_failures(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(rowwise_gir, "generic.gir", NULL, &g));
    if (!g) return;
    long base = gr_debug_live_allocs();
    int failures_seen = 0;
    for (long n = 1; n < 20000; n++) {
        gr_debug_fail_alloc_after(n);
        gr_session_options o = opts(GR_MODE_GRAPH, GR_SHAPES_GENERIC);
        gr_session_t s = NULL;
        gr_status rc = gr_session_create(g, &o, &s);
        static float y[MAX_S * MAX_ROW];
        static const int seqs[] = {3, 4, 7, 3, 8, 5, 7};
        for (int i = 0; rc == GR_OK && i < 7; i++) rc = run_at(s, seqs[i], y);
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

int main(int argc, char **argv) {
    on_cuda = argc > 1 && !strcmp(argv[1], "cuda");
    test_small_models();
    test_needs_bound();
    test_device_inputs();
    test_capture_range();
    if (!on_cuda) test_length_record();
    if (!on_cuda) test_alloc_failures();
#ifdef GRAFT_TEST_ONNX
    static const char *const cases[] = {"gpt2_dynamo", "bert_dynamo", "llama_dynamo"};
    for (int i = 0; i < 6; i++) dyn_case(cases[i % 3], i >= 3);
#endif
    return check_summary("test_shape_generic");
}
