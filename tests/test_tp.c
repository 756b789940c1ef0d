/* tests/test_tp — tensor parallelism on the simulator: every sharding rule gives the unsplit
 * results.
 *
 * Each model runs in a session of tp = N (N simulated devices, reference collectives, one
 * host thread per rank) and in a plain session; the outputs must agree within 1e-5 relative
 * error (the sums of a row-parallel matmul add in another order), in eager and graph mode,
 * over two runs with different inputs (the second replays the captured graphs, whose
 * collectives must interleave across the ranks). The rules each model exercises:
 *   mlp      column + row (bias after the all_reduce)              N = 2, 3, 4
 *   attn     q/k/v columns, heads through reshape/transpose/softmax/mask, row   N = 2, 3
 *   gqa_lm   vocabulary-split embedding, fused q/k/v with a split, grouped-query heads in a
 *            fused attention op, row, tied LM head (column + all_gather)  N = 3
 *   gather   a split value meets a layer norm over its split axis and a graph output
 *            (all_gather fallback)                                 N = 2, 4
 * and the dynamic-axis exports (GPT-2 fused c_attn, BERT from two exporters, Llama with
 * separate q/k/v/o, gate/up/down and grouped-query heads) at two bindings, also against
 * PyTorch's outputs. Then: per-rank weight bytes about 1/N of the split weights; errors that
 * name the node (heads, vocabulary or columns not divisible, a weight cut two ways); the
 * simulator's collectives (reference sums, a rank that never arrives fails instead of hanging,
 * ranks that disagree, the ranks' clocks joined at the collective); what a tp session refuses;
 * allocation failures while a tp session is created and run return errors and leak nothing. */
#include "check.h"
#include "npy.h"
#include "dyn_fixtures.h"
#include "device/device.h"
#include "runtime/runtime-impl.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const mlp_gir =
    "graft 1\n"
    "input x: f32[2, 6, 12]\n"
    "w1 = random_normal(shape=[12, 24], seed=1, std=0.3)\n"
    "b1 = random_uniform(shape=[24], seed=2, low=-0.1, high=0.1)\n"
    "h = matmul(x, w1, b1)\n"
    "a = gelu(h)\n"
    "w2 = random_normal(shape=[24, 12], seed=3, std=0.3)\n"
    "b2 = random_uniform(shape=[12], seed=4, low=-0.1, high=0.1)\n"
    "y = matmul(a, w2, b2)\n"
    "output y\n";

/* unfused attention, 6 heads of 4, symbolic sequence, additive mask */
static const char *const attn_gir =
    "graft 1\n"
    "input x: f32[2, seq, 24]\n"
    "input mask: f32[2, 1, seq, seq]\n"
    "wq = random_normal(shape=[24, 24], seed=11, std=0.2)\n"
    "bq = random_uniform(shape=[24], seed=12, low=-0.1, high=0.1)\n"
    "wk = random_normal(shape=[24, 24], seed=13, std=0.2)\n"
    "wv = random_normal(shape=[24, 24], seed=14, std=0.2)\n"
    "wo = random_normal(shape=[24, 24], seed=15, std=0.2)\n"
    "bo = random_uniform(shape=[24], seed=16, low=-0.1, high=0.1)\n"
    "g = random_uniform(shape=[24], seed=17, low=0.5, high=1.5)\n"
    "bb = random_uniform(shape=[24], seed=18, low=-0.1, high=0.1)\n"
    "scale = fill(shape=[], value=0.5, dtype=\"f32\")\n"
    "q = matmul(x, wq, bq, trans_b=1)\n"
    "q4 = reshape(q, shape=[2, -1, 6, 4])\n"
    "qt = transpose(q4, perm=[0, 2, 1, 3])\n"
    "k = matmul(x, wk, trans_b=1)\n"
    "k4 = reshape(k, shape=[2, -1, 6, 4])\n"
    "kt = transpose(k4, perm=[0, 2, 3, 1])\n"
    "v = matmul(x, wv)\n"
    "v4 = reshape(v, shape=[2, -1, 6, 4])\n"
    "vt = transpose(v4, perm=[0, 2, 1, 3])\n"
    "s = matmul(qt, kt)\n"
    "s2 = mul(s, scale)\n"
    "s3 = add(s2, mask)\n"
    "p = softmax(s3, axis=-1)\n"
    "o = matmul(p, vt)\n"
    "ot = transpose(o, perm=[0, 2, 1, 3])\n"
    "o2 = reshape(ot, shape=[2, -1, 24])\n"
    "y1 = matmul(o2, wo, bo, trans_b=1)\n"
    "r = add(y1, x)\n"
    "y = layer_norm(r, g, bb, axis=-1, epsilon=1e-5)\n"
    "output y\n";

/* embedding (vocabulary 384), fused q/k/v split in parts, 6 query heads over 3 K/V heads in a
 * fused attention op, output projection, tied LM head */
static const char *const gqa_lm_gir =
    "graft 1\n"
    "input ids: i64[2, seq]\n"
    "emb = random_normal(shape=[384, 24], seed=21, std=0.5)\n"
    "h = gather(emb, ids, axis=0)\n"
    "w = random_normal(shape=[24, 48], seed=22, std=0.2)\n"
    "qkv = matmul(h, w)\n"
    "q, k, v = split(qkv, axis=-1, split=[24, 12, 12])\n"
    "q4 = reshape(q, shape=[2, -1, 6, 4])\n"
    "qt = transpose(q4, perm=[0, 2, 1, 3])\n"
    "k4 = reshape(k, shape=[2, -1, 3, 4])\n"
    "kt = transpose(k4, perm=[0, 2, 1, 3])\n"
    "v4 = reshape(v, shape=[2, -1, 3, 4])\n"
    "vt = transpose(v4, perm=[0, 2, 1, 3])\n"
    "o = attention(qt, kt, vt, scale=0.5, causal=1)\n"
    "ot = transpose(o, perm=[0, 2, 1, 3])\n"
    "o2 = reshape(ot, shape=[2, -1, 24])\n"
    "wo = random_normal(shape=[24, 24], seed=23, std=0.2)\n"
    "y = matmul(o2, wo)\n"
    "r = add(y, h)\n"
    "g = fill(shape=[24], value=1.0, dtype=\"f32\")\n"
    "b = fill(shape=[24], value=0.0, dtype=\"f32\")\n"
    "ln = layer_norm(r, g, b, axis=-1, epsilon=1e-5)\n"
    "logits = matmul(ln, emb, trans_b=1)\n"
    "output logits\n";

/* a column split whose output meets a layer norm over the split axis and a graph output */
static const char *const gather_gir =
    "graft 1\n"
    "input x: f32[2, 5, 12]\n"
    "w = random_normal(shape=[12, 16], seed=31, std=0.3)\n"
    "h = matmul(x, w)\n"
    "g = fill(shape=[16], value=1.0, dtype=\"f32\")\n"
    "b = fill(shape=[16], value=0.0, dtype=\"f32\")\n"
    "n = layer_norm(h, g, b, axis=-1, epsilon=1e-5)\n"
    "output n\n"
    "output h\n";

/* ==== helpers ================================================================================= */
static uint64_t rng_state = 12345;
static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* inputs for a binding: floats in [-1, 1), masks 0 / -1e4 (causal), ids over the whole vocabulary */
typedef struct {
    int n;
    const char *name[4];
    gr_dtype dtype[4];
    int ndim[4];
    int64_t dims[4][GR_MAX_DIMS];
    void *data[4];
    size_t nbytes[4];
} inputs_t;

static void inputs_free(inputs_t *in) {
    for (int i = 0; i < in->n; i++) free(in->data[i]);
    memset(in, 0, sizeof *in);
}

static void make_inputs(gr_graph_t g, int64_t seq, int64_t vocab, inputs_t *in) {
    memset(in, 0, sizeof *in);
    in->n = gr_graph_num_inputs(g);
    const char *names[1] = {"seq"};
    int64_t vals[1] = {seq};
    int n_names = gr_graph_num_dims(g) > 0 ? 1 : 0;
    for (int i = 0; i < in->n; i++) {
        gr_value_info info;
        CHECK_OK(gr_graph_input_info(g, i, &info));
        in->name[i] = info.name;
        in->dtype[i] = info.dtype;
        in->ndim[i] = info.ndim;
        CHECK_OK(gr_graph_input_dims(g, i, n_names, names, vals, in->dims[i]));
        int64_t numel = 1;
        for (int d = 0; d < info.ndim; d++) numel *= in->dims[i][d];
        if (info.dtype == GR_I64) {
            int64_t *p = malloc(sizeof(int64_t) * (size_t)numel);
            for (int64_t e = 0; e < numel; e++) p[e] = (int64_t)(urand() * (double)vocab) % vocab;
            in->data[i] = p, in->nbytes[i] = sizeof(int64_t) * (size_t)numel;
        } else {
            float *p = malloc(sizeof(float) * (size_t)numel);
            bool mask = strstr(info.name, "mask") != NULL;
            for (int64_t e = 0; e < numel; e++) {
                if (mask) {
                    int64_t col = e % seq, row = (e / seq) % seq;
                    p[e] = col <= row ? 0.0f : -1e4f;
                } else {
                    p[e] = (float)(urand() * 2 - 1);
                }
            }
            in->data[i] = p, in->nbytes[i] = sizeof(float) * (size_t)numel;
        }
    }
}

static gr_status set_inputs(gr_session_t s, const inputs_t *in) {
    for (int i = 0; i < in->n; i++) {
        gr_status st = gr_session_set_input(s, in->name[i], in->dtype[i], in->ndim[i], in->dims[i], in->data[i], in->nbytes[i]);
        if (st != GR_OK) return st;
    }
    return GR_OK;
}

static float *read_output(gr_session_t s, int i, size_t *n) {
    gr_output o;
    *n = 0;
    if (gr_session_output(s, i, &o) != GR_OK) return NULL;
    size_t bytes = gr_session_output_nbytes(s, o);
    float *p = malloc(bytes ? bytes : 1);
    if (gr_session_output_read(s, o, p, bytes) != GR_OK) {
        free(p);
        return NULL;
    }
    *n = bytes / sizeof(float);
    return p;
}

static double rel_err(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}

static gr_status make_session(gr_graph_t g, int tp, gr_mode mode, gr_session_t *s) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = mode;
    o.tp = tp;
    return gr_session_create(g, &o, s);
}

/* tp session vs plain session: two bindings (when symbolic) with fresh inputs each run */
static void compare(const char *label, gr_graph_t g, int tp, gr_mode mode, int64_t vocab, const int64_t *seqs, int n_seqs) {
    gr_session_t ref = NULL, par = NULL;
    CHECK_OK(make_session(g, 1, mode, &ref));
    gr_status st = make_session(g, tp, mode, &par);
    CHECK_MSG(st == GR_OK, "%s tp=%d: %s", label, tp, gr_last_error());
    if (!ref || !par) goto out;
    CHECK(gr_rt_tp_ranks(par) == tp);
    for (int run = 0; run < n_seqs; run++) {
        inputs_t in;
        make_inputs(g, seqs[run], vocab, &in);
        CHECK_OK(set_inputs(ref, &in));
        CHECK_OK(set_inputs(par, &in));
        CHECK_OK(gr_session_run(ref));
        st = gr_session_run(par);
        CHECK_MSG(st == GR_OK, "%s tp=%d run %d: %s", label, tp, run, gr_last_error());
        for (int o = 0; o < gr_graph_num_outputs(g); o++) {
            size_t na, nb;
            float *a = read_output(ref, o, &na), *b = read_output(par, o, &nb);
            CHECK_MSG(a && b && na == nb && na > 0, "%s tp=%d: output %d missing or of another size (%zu, %zu)", label, tp, o, na, nb);
            if (a && b && na == nb) {
                double e = rel_err(b, a, na);
                CHECK_MSG(e <= 1e-5, "%s tp=%d %s run %d output %d: relative error %.3g", label, tp,
                          mode == GR_MODE_GRAPH ? "graph" : "eager", run, o, e);
            }
            free(a);
            free(b);
        }
        inputs_free(&in);
    }
    if (mode == GR_MODE_GRAPH) {
        gr_run_stats rs;
        CHECK_OK(gr_session_stats(par, &rs));
        CHECK_MSG(rs.graph_launches > 0 && rs.segments_in_graphs > 0, "%s tp=%d: rank 0 replayed no graph", label, tp);
    }
out:
    gr_session_destroy(ref);
    gr_session_destroy(par);
}

static gr_graph_t parse(const char *text, const char *origin) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(text, origin, ".", &g));
    return g;
}

/* ==== the rules on small models ================================================================ */
static void test_rules(void) {
    /* graph mode: a binding's first run warms up, the second captures and replays */
    static const int64_t seqs[] = {3, 5, 5};
    struct {
        const char *name, *text;
        int ranks[3];
        int64_t vocab;
    } models[] = {
        {"mlp", mlp_gir, {2, 3, 4}, 0},
        {"attn", attn_gir, {2, 3, 0}, 0},
        {"gqa_lm", gqa_lm_gir, {3, 0, 0}, 384},
        {"gather", gather_gir, {2, 4, 0}, 0},
    };
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        gr_graph_t g = parse(models[m].text, models[m].name);
        if (!g) continue;
        for (int k = 0; k < 3 && models[m].ranks[k]; k++)
            for (int mode = 0; mode < 2; mode++)
                compare(models[m].name, g, models[m].ranks[k], mode ? GR_MODE_GRAPH : GR_MODE_EAGER, models[m].vocab, seqs, 3);
        gr_graph_destroy(g);
    }
}

/* explain names each kind of split and the collectives */
static void test_explain(void) {
    gr_graph_t g = parse(gqa_lm_gir, "gqa_lm");
    gr_session_t s = NULL;
    if (g) CHECK_OK(make_session(g, 3, GR_MODE_GRAPH, &s));
    char *text = NULL;
    if (s) CHECK_OK(gr_session_explain(s, &text)); /* before any binding: the splits only */
    if (text) {
        const char *want[] = {"vocab    node 'h' (gather): table 'emb' 384 rows -> 128 per rank",
                              "column   node 'qkv' (matmul): weight 'w' [24, 48] -> 16 columns per rank (3 parts, each divided)",
                              "parts    node 'q' (split)", "heads    node 'k4' (reshape): axis 2 of 3 -> 1 per rank",
                              "heads    node 'o' (attention): 6 heads -> 2 per rank", "row      node 'y' (matmul)",
                              "column   node 'logits'", "gather   'logits' split on axis 2, all_gather for the graph output",
                              "per run: 2 all_reduce, 1 all_gather", "weights per rank"};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK_MSG(strstr(text, want[i]), "explain lacks '%s':\n%s", want[i], text);
        gr_free_string(text);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* ==== the exports ================================================================================ */
static gr_status set_fixture_inputs(gr_session_t s, gr_graph_t g, const char *c, const char *binding) {
    for (int i = 0; i < gr_graph_num_inputs(g); i++) {
        gr_value_info info;
        GR_TRY(gr_graph_input_info(g, i, &info));
        char path[512];
        snprintf(path, sizeof path, DYN "%s/%s/%s.npy", c, binding, info.name);
        if (!set_input_file(s, info.name, path)) return GR_ERR_INVALID;
    }
    return GR_OK;
}

static void test_exports(void) {
    static const struct {
        const char *name;
        int ranks[2];
    } cases[] = {{"gpt2_dynamo", {2, 4}}, {"bert_dynamo", {2, 4}}, {"bert_torchscript", {2, 0}}, {"llama_dynamo", {2, 0}}};
    static const char *const bindings[] = {"b3_s7", "b1_s17"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, DYN "%s/model.onnx", cases[c].name);
        gr_graph_t g = NULL;
        CHECK_OK(gr_graph_load(path, &g));
        if (!g) continue;
        for (int k = 0; k < 2 && cases[c].ranks[k]; k++)
            for (int mode = 0; mode < 2; mode++) {
                int tp = cases[c].ranks[k];
                gr_session_t s = NULL;
                gr_status st = make_session(g, tp, mode ? GR_MODE_GRAPH : GR_MODE_EAGER, &s);
                CHECK_MSG(st == GR_OK, "%s tp=%d: %s", cases[c].name, tp, gr_last_error());
                if (!s) continue;
                for (int b = 0; b < 2; b++) {
                    CHECK_OK(set_fixture_inputs(s, g, cases[c].name, bindings[b]));
                    st = gr_session_run(s);
                    CHECK_MSG(st == GR_OK, "%s tp=%d %s: %s", cases[c].name, tp, bindings[b], gr_last_error());
                    if (st != GR_OK) continue;
                    for (int o = 0; o < gr_graph_num_outputs(g); o++) {
                        gr_value_info info;
                        CHECK_OK(gr_graph_output_info(g, o, &info));
                        snprintf(path, sizeof path, DYN "%s/%s/%s.npy", cases[c].name, bindings[b], info.name);
                        npy_array ref;
                        char err[NPY_ERR_LEN];
                        if (npy_read(path, &ref, err)) continue; /* an output the fixture does not keep */
                        size_t n;
                        float *got = read_output(s, o, &n);
                        CHECK_MSG(got && n * sizeof(float) == ref.nbytes, "%s: output '%s' size", cases[c].name, info.name);
                        if (got && n * sizeof(float) == ref.nbytes) {
                            double e = rel_err(got, ref.data, n);
                            CHECK_MSG(e <= 1e-4, "%s tp=%d %s %s: '%s' relative error %.3g against PyTorch", cases[c].name, tp,
                                      mode ? "graph" : "eager", bindings[b], info.name, e);
                        }
                        free(got);
                        npy_free(&ref);
                    }
                }
                /* each rank holds about 1/N of the split weights (small replicated ones aside) */
                gr_run_stats one, rank;
                gr_session_t plain = NULL;
                CHECK_OK(make_session(g, 1, GR_MODE_EAGER, &plain));
                if (plain && set_fixture_inputs(plain, g, cases[c].name, bindings[0]) == GR_OK && gr_session_run(plain) == GR_OK) {
                    CHECK_OK(gr_session_stats(plain, &one));
                    for (int r = 0; r < tp; r++) {
                        CHECK_OK(gr_session_stats(gr_rt_tp_rank(s, r), &rank));
                        double share = (double)rank.weight_bytes / (double)one.weight_bytes;
                        CHECK_MSG(share < 1.0 / tp + 0.1 && share > 0.5 / tp, "%s tp=%d rank %d holds %.3f of the weights",
                                  cases[c].name, tp, r, share);
                    }
                }
                gr_session_destroy(plain);
                gr_session_destroy(s);
            }
        gr_graph_destroy(g);
    }
}

/* ==== errors ===================================================================================== */
static void expect_error(gr_graph_t g, int tp, const char *const *want, int n_want) {
    gr_session_t s = NULL;
    gr_status st = make_session(g, tp, GR_MODE_EAGER, &s);
    CHECK_MSG(st == GR_ERR_UNSUPPORTED, "tp=%d: %s, expected GR_ERR_UNSUPPORTED", tp, gr_status_name(st));
    for (int i = 0; i < n_want; i++) CHECK_MSG(strstr(gr_last_error(), want[i]), "message lacks '%s': %s", want[i], gr_last_error());
    gr_session_destroy(s);
}

static void test_errors(void) {
    gr_graph_t g = parse(attn_gir, "attn");
    const char *heads[] = {"cannot split node 'q4'", "heads or columns not divisible by 4"};
    if (g) expect_error(g, 4, heads, 2);
    const char *cols[] = {"cannot split node 'q'", "24 output columns, not divisible by 5 ranks"};
    if (g) expect_error(g, 5, cols, 2);
    gr_graph_destroy(g);
    g = parse(gqa_lm_gir, "gqa_lm");
    const char *vocab[] = {"cannot split node", "'emb' has 384 rows, not divisible by 5 ranks"};
    if (g) expect_error(g, 5, vocab, 2);
    const char *kv[] = {"cannot split node 'k4'"};
    if (g) expect_error(g, 2, kv, 1);
    gr_graph_destroy(g);
    gr_graph_t l = NULL;
    CHECK_OK(gr_graph_load(DYN "llama_dynamo/model.onnx", &l));
    const char *gqa[] = {"cannot split node 'node_view_1'"}; /* 2 K/V heads over 4 ranks */
    if (l) expect_error(l, 4, gqa, 1);
    gr_graph_destroy(l);
    gr_graph_load(DYN "gpt2_dynamo/model.onnx", &l);
    const char *fused[] = {"cannot split node 'node_embedding'", "1000 rows, not divisible by 3 ranks"};
    if (l) expect_error(l, 3, fused, 2);
    gr_graph_destroy(l);

    /* one weight used as a column split and then as a row split: two different slices */
    g = parse("graft 1\ninput x: f32[2, 3, 8]\nw = random_normal(shape=[8, 8], seed=5)\nh = matmul(x, w)\n"
              "a = gelu(h)\ny = matmul(a, w)\noutput y\n", "twice");
    const char *twice[] = {"constant 'w' would be split two ways"};
    if (g) expect_error(g, 2, twice, 1);
    gr_graph_destroy(g);

    /* what a tp session refuses: one-device APIs */
    g = parse(mlp_gir, "mlp");
    gr_session_t s = NULL;
    if (g) CHECK_OK(make_session(g, 2, GR_MODE_EAGER, &s));
    if (s) {
        inputs_t in;
        make_inputs(g, 1, 0, &in);
        CHECK_OK(set_inputs(s, &in));
        CHECK_OK(gr_session_run(s));
        char *text = NULL;
        double sum;
        CHECK(gr_session_profile(s, &text, &sum) == GR_ERR_UNSUPPORTED);
        CHECK(strstr(gr_last_error(), "tensor parallelism"));
        CHECK(gr_session_bind_state(s, "y", "x") == GR_ERR_UNSUPPORTED);
        CHECK(gr_session_bind_input_device(s, "x", GR_F32, in.ndim[0], in.dims[0], NULL, in.nbytes[0]) == GR_ERR_UNSUPPORTED);
        inputs_free(&in);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* ==== the simulator's collectives ================================================================ */
typedef struct {
    gr_device *dev;
    bool call;          /* make the collective, or finish without it */
    int64_t count;
    size_t busy_bytes;  /* a memset of this many bytes before the collective (device time) */
    gr_status st;
    char msg[512];
    float out[4];
    double clock_us;    /* the device's clock after the collective and a synchronize */
} peer_t;

static void *peer_main(void *arg) {
    peer_t *p = arg;
    p->st = gr_dev_comm_enter(p->dev);
    if (p->st == GR_OK && p->call) {
        gr_stream *s = NULL;
        void *in = NULL, *out = NULL;
        p->st = gr_dev_stream_create(p->dev, &s);
        if (p->st == GR_OK) p->st = gr_dev_alloc(p->dev, GR_MEM_DEVICE, 16, &in);
        if (p->st == GR_OK) p->st = gr_dev_alloc(p->dev, GR_MEM_DEVICE, 16, &out);
        float v[4] = {1, 2, 3, 4};
        if (p->st == GR_OK) p->st = gr_dev_memcpy(p->dev, s, in, v, 16, GR_COPY_H2D);
        void *busy = NULL;
        if (p->st == GR_OK && p->busy_bytes) p->st = gr_dev_alloc(p->dev, GR_MEM_DEVICE, p->busy_bytes, &busy);
        if (p->st == GR_OK && busy) p->st = gr_dev_memset(p->dev, s, busy, 0, p->busy_bytes);
        gr_libcall c;
        memset(&c, 0, sizeof c);
        c.kind = GR_LIB_ALL_REDUCE;
        c.dtype = GR_F32;
        c.m = p->count;
        c.n = 2;
        snprintf(c.name, sizeof c.name, "test_all_reduce");
        gr_karg args[4] = {{.ptr = in}, {.ptr = NULL}, {.ptr = out}, {.ptr = NULL}};
        if (p->st == GR_OK) p->st = gr_dev_libcall(p->dev, s, &c, args, 4);
        if (p->st == GR_OK) p->st = gr_dev_memcpy(p->dev, s, p->out, out, 16, GR_COPY_D2H);
        if (p->st == GR_OK) p->st = gr_dev_stream_sync(p->dev, s);
        p->clock_us = gr_dev_clock_us(p->dev);
        if (p->st != GR_OK) snprintf(p->msg, sizeof p->msg, "%s", gr_last_error());
        gr_dev_free(p->dev, busy);
        gr_dev_free(p->dev, in);
        gr_dev_free(p->dev, out);
        gr_dev_stream_destroy(p->dev, s);
    }
    gr_dev_comm_leave(p->dev);
    return NULL;
}

static void run_peers(peer_t *p) {
    gr_device *devs[2] = {NULL, NULL};
    CHECK_OK(gr_device_sim_create(&devs[0]));
    CHECK_OK(gr_device_sim_create(&devs[1]));
    CHECK_OK(gr_dev_comm_init(devs, 2));
    CHECK(gr_dev_caps_get(devs[0]).collectives);
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        p[r].dev = devs[r];
        pthread_create(&t[r], NULL, peer_main, &p[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    gr_device_destroy(devs[0]);
    gr_device_destroy(devs[1]);
}

static void test_sim_collectives(void) {
    peer_t ok[2] = {{.call = true, .count = 4}, {.call = true, .count = 4}};
    run_peers(ok);
    CHECK_MSG(ok[0].st == GR_OK && ok[1].st == GR_OK, "%s / %s", ok[0].msg, ok[1].msg);
    CHECK(ok[0].out[3] == 8.0f && ok[1].out[0] == 2.0f);
    /* simulated time joins at the collective: rank 0 waits for rank 1's 64 MB memset (22 us of
     * device time, more than the host overhead of the calls) */
    peer_t late[2] = {{.call = true, .count = 4}, {.call = true, .count = 4, .busy_bytes = 64u << 20}};
    run_peers(late);
    CHECK_MSG(late[0].st == GR_OK && late[1].st == GR_OK, "%s / %s", late[0].msg, late[1].msg);
    CHECK_MSG(fabs(late[0].clock_us - late[1].clock_us) < 1.0 && late[0].clock_us > ok[0].clock_us + 10.0,
              "clocks after the collective: rank 0 %.2f us, rank 1 %.2f us (no wait: %.2f us)", late[0].clock_us,
              late[1].clock_us, ok[0].clock_us);
    /* rank 1 never reaches the collective: rank 0 gets an error, not a hang */
    peer_t missing[2] = {{.call = true, .count = 4}, {.call = false}};
    run_peers(missing);
    CHECK(missing[0].st == GR_ERR_DEVICE && strstr(missing[0].msg, "rank(s) 1 stopped without reaching it"));
    /* the ranks disagree on the size */
    peer_t differ[2] = {{.call = true, .count = 4}, {.call = true, .count = 3}};
    run_peers(differ);
    CHECK(differ[0].st != GR_OK && differ[1].st != GR_OK);
    CHECK(strstr(differ[0].msg, "collective #1") || strstr(differ[1].msg, "collective #1"));
    /* a collective on a device that joined nothing */
    gr_device *d = NULL;
    CHECK_OK(gr_device_sim_create(&d));
    peer_t alone = {.dev = d, .call = true, .count = 4};
    peer_main(&alone);
    CHECK(alone.st == GR_ERR_UNSUPPORTED && strstr(alone.msg, "without a communicator"));
    gr_device_destroy(d);
}

/* ==== allocation failures ========================================================================= */
static void test_oom(void) {
    gr_graph_t g = parse(mlp_gir, "mlp");
    if (!g) return;
    inputs_t in;
    make_inputs(g, 1, 0, &in);
    gr_debug_fail_alloc_after(0);
    gr_session_t s = NULL;
    CHECK_OK(make_session(g, 2, GR_MODE_GRAPH, &s));
    if (s) CHECK_OK(set_inputs(s, &in));
    if (s) CHECK_OK(gr_session_run(s));
    long total = gr_debug_fail_alloc_after(0);
    gr_session_destroy(s);
    int failures = 0;
    for (long n = 1; n <= total; n += n < 400 ? 1 : 5) {
        long live = gr_debug_live_allocs();
        s = NULL;
        gr_debug_fail_alloc_after(n);
        gr_status st = make_session(g, 2, GR_MODE_GRAPH, &s);
        if (st == GR_OK) st = set_inputs(s, &in);
        if (st == GR_OK) st = gr_session_run(s);
        if (st == GR_OK) st = gr_session_wait(s);
        gr_debug_fail_alloc_after(0);
        if (st != GR_OK) failures++;
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM || st == GR_ERR_DEVICE, "allocation failure %ld gave %s: %s", n,
                  gr_status_name(st), gr_last_error());
        gr_session_destroy(s);
        CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks %ld allocations", n, gr_debug_live_allocs() - live);
    }
    CHECK_MSG(total > 100 && failures > 50, "%ld allocations, %d failures", total, failures);
    inputs_free(&in);
    gr_graph_destroy(g);
}

int main(void) {
    (void)test_device; /* sim only: N devices need NCCL on the GPU machine (scripts/tp-gpu-check.sh) */
    test_sim_collectives();
    test_rules();
    test_explain();
    test_errors();
    test_exports();
    test_oom();
    return check_summary("test_tp");
}
