/* tests/test_decode — the KV-cache rewrite: one step shape for every position.
 *
 * The decoder step exports in tests/data/onnx/decode (tiny GPT-2 and Llama, Hugging
 * Face's greedy ids next to them) run through gr_decode_engine: the step rewritten so that
 * the cache is written in place at a device-held position and one plan (one graph) serves
 * every position. Checked, per model, in eager and graph mode:
 *   - the engine's logits at every prompt position against the per-length step model
 *     (the unrewritten export run on the whole prefix, past = 0): relative error <= 1e-4;
 *   - greedy generation (prompt token by token, then 12 new tokens) equals HF's ids;
 *   - one plan and at most one captured graph for all positions (graph mode);
 *   - bad specs (unknown state input, an output that is not a concat) are clear errors.
 * Runs on the simulator (CI); GRAFT_TEST_DEVICE=cuda runs it on the GPU. */
#include "check.h"
#include "npy.h"
#include "runtime/runtime-impl.h"
#include "codegen/kir.h"
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIR "tests/data/onnx/decode/"

static gr_device_kind test_device(void) {
    const char *d = getenv("GRAFT_TEST_DEVICE");
    return d && !strcmp(d, "cuda") ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
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

static int64_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Last-position logits of the unrewritten step on tokens[0..len) of each row (past = 0). */
static gr_status reference_logits(gr_session_t s, const char *const *past, int n_state, const int64_t *kv_shape,
                                  const int64_t *tokens, int64_t b, int64_t row_len, int64_t len, int64_t vocab, float *out) {
    int64_t *ids = calloc((size_t)(b * len), sizeof(int64_t)), *mask = calloc((size_t)(b * len), sizeof(int64_t));
    int64_t *pos = calloc((size_t)(b * len), sizeof(int64_t));
    float *logits = calloc((size_t)(b * len * vocab), sizeof(float));
    gr_status st = GR_ERR_NOMEM;
    if (!ids || !mask || !pos || !logits) goto out;
    for (int64_t r = 0; r < b; r++)
        for (int64_t j = 0; j < len; j++) ids[r * len + j] = tokens[r * row_len + j], mask[r * len + j] = 1, pos[r * len + j] = j;
    int64_t d2[2] = {b, len};
    if ((st = gr_session_set_input(s, "input_ids", GR_I64, 2, d2, ids, sizeof(int64_t) * (size_t)(b * len))) != GR_OK) goto out;
    if ((st = gr_session_set_input(s, "attention_mask", GR_I64, 2, d2, mask, sizeof(int64_t) * (size_t)(b * len))) != GR_OK) goto out;
    if ((st = gr_session_set_input(s, "position_ids", GR_I64, 2, d2, pos, sizeof(int64_t) * (size_t)(b * len))) != GR_OK) goto out;
    int64_t kd[4] = {b, kv_shape[1], 0, kv_shape[3]};
    for (int k = 0; k < n_state; k++)
        if ((st = gr_session_set_input(s, past[k], GR_F32, 4, kd, NULL, 0)) != GR_OK) goto out;
    if ((st = gr_session_run(s)) != GR_OK) goto out;
    gr_output o;
    if ((st = gr_session_output(s, 0, &o)) != GR_OK) goto out;
    if ((st = gr_session_output_read(s, o, logits, sizeof(float) * (size_t)(b * len * vocab))) != GR_OK) goto out;
    for (int64_t r = 0; r < b; r++) memcpy(out + r * vocab, logits + (r * len + len - 1) * vocab, sizeof(float) * (size_t)vocab);
out:
    free(ids), free(mask), free(pos), free(logits);
    return st;
}

/* The fixture NAME's step model (its past axis declared 0..256) and a session over it. */
static gr_session_t open_model(const char *name, gr_device_kind device, gr_mode mode, gr_graph_t *graph) {
    char path[512];
    snprintf(path, sizeof path, DIR "%s/model.onnx", name);
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    CHECK_OK(gr_graph_set_dim_range(g, "past", 0, 256));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = device;
    o.mode = mode;
    CHECK_OK(gr_session_create(g, &o, &s));
    *graph = g;
    return s;
}

static void run_model(const char *name, const char *const *past, const char *const *present, int n_state, int64_t kv_heads,
                      gr_mode mode) {
    char path[512], err[256];
    gr_graph_t g;
    gr_session_t s = open_model(name, test_device(), mode, &g);
    npy_array prompt, greedy;
    snprintf(path, sizeof path, DIR "%s/prompt.npy", name);
    CHECK_MSG(npy_read(path, &prompt, err) == 0, "%s", err);
    snprintf(path, sizeof path, DIR "%s/greedy.npy", name);
    CHECK_MSG(npy_read(path, &greedy, err) == 0, "%s", err);
    int64_t b = prompt.dims[0], P = prompt.dims[1], total = greedy.dims[1], max_len = 24;
    gr_decode_engine *e = NULL;
    /* the source session's weights on the device first (one run), then the engine */
    {
        const gr_ir_value *lv0 = &s->graph->values.data[s->graph->outputs.data[0]];
        int64_t v0 = lv0->dims[2].size, kv0[4] = {b, kv_heads, 0, 16};
        float *tmp = calloc((size_t)(b * v0), sizeof(float));
        CHECK_OK(reference_logits(s, past, n_state, kv0, (const int64_t *)prompt.data, b, P, 1, v0, tmp));
        free(tmp);
    }
    size_t dev0 = gr_dev_mem_in_use(s->dev);
    CHECK_OK(gr_decode_engine_create(s, n_state, past, present, NULL, b, max_len, &e));
    if (!e) goto done;
    /* the engine reads the source session's weights (same device): it uploads only the constants
     * the rewrite added, so the device grows by the cache buffers and activations, not the weights */
    {
        gr_session_t es = gr_decode_engine_session(e);
        size_t grown = gr_dev_mem_in_use(s->dev) - dev0;
        printf("%s %s: source weights %zu B, engine's own uploads %zu B, device +%zu B for the engine\n", name,
               mode == GR_MODE_GRAPH ? "graph" : "eager", s->weight_bytes, es->weight_bytes, grown);
        CHECK_MSG(es->dev == s->dev && es->weight_bytes * 20 < s->weight_bytes, "%s: the engine uploaded %zu B of weights (source %zu B)",
                  name, es->weight_bytes, s->weight_bytes);
        CHECK_MSG(grown < s->weight_bytes / 2, "%s: the engine took %zu B of device memory, the weights are %zu B", name, grown,
                  s->weight_bytes);
    }
    int64_t vocab = gr_decode_engine_vocab(e);
    float *logits = calloc((size_t)(b * vocab), sizeof(float)), *ref = calloc((size_t)(b * vocab), sizeof(float));
    int64_t *tokens = calloc((size_t)(b * total), sizeof(int64_t)), ids[8];
    for (int64_t r = 0; r < b; r++)
        for (int64_t j = 0; j < P; j++) tokens[r * total + j] = ((int64_t *)prompt.data)[r * P + j];
    int64_t kv_shape[4] = {b, kv_heads, 0, 16};
    double worst = 0;
    for (int64_t t = 0; t < total - 1; t++) {
        for (int64_t r = 0; r < b; r++) ids[r] = tokens[r * total + t];
        CHECK_OK(gr_decode_engine_step(e, ids, t + 1, logits));
        /* the rewritten step against the per-length one on the same prefix: every position in
         * eager mode (the cache append writes one position a step: every later reader must see
         * exactly what the per-length step's concat gives), the first ones in graph mode */
        if (t < P + 2 || mode == GR_MODE_EAGER) {
            CHECK_OK(reference_logits(s, past, n_state, kv_shape, tokens, b, total, t + 1, vocab, ref));
            double er = rel_err(logits, ref, (size_t)(b * vocab));
            if (er > worst) worst = er;
        }
        if (t + 1 >= P) {
            for (int64_t r = 0; r < b; r++) tokens[r * total + t + 1] = argmax(logits + r * vocab, vocab);
            int64_t dev[8];
            CHECK_OK(gr_decode_engine_step_greedy(e, ids, t + 1, dev)); /* the same step again: ids from the device */
            for (int64_t r = 0; r < b; r++)
                CHECK_MSG(dev[r] == tokens[r * total + t + 1], "%s: device argmax %lld, host %lld", name, (long long)dev[r],
                          (long long)tokens[r * total + t + 1]);
        }
    }
    CHECK_MSG(worst <= 1e-4, "%s: rewritten step vs per-length step: relative error %.3e", name, worst);
    int mism = 0;
    for (int64_t i = 0; i < b * total; i++) mism += tokens[i] != ((int64_t *)greedy.data)[i];
    CHECK_MSG(mism == 0, "%s (%s): %d of %lld greedy ids differ from Hugging Face's", name, mode == GR_MODE_GRAPH ? "graph" : "eager",
              mism, (long long)(b * total));
    gr_run_stats rs;
    CHECK_OK(gr_session_stats(gr_decode_engine_session(e), &rs));
    int plans = 0;
    for (const gr_rt_plan *p = gr_decode_engine_session(e)->plans; p; p = p->next) plans++;
    printf("%s %s: max rel err %.2e vs per-length, %d mismatches, %d plan(s), %ld capture(s)\n", name,
           mode == GR_MODE_GRAPH ? "graph" : "eager", worst, mism, plans, rs.captures);
    CHECK_MSG(plans == 1, "%s: %d plans for one step shape", name, plans);
    /* the cache append: one scatter kernel per state over the new entries [b, kv_heads, 1, 16],
     * not over the [b, kv_heads, max_len, 16] cache (and no whole-cache kernel writes a cache) */
    {
        const gr_rt_plan *p = gr_decode_engine_session(e)->plans;
        int appends = 0;
        for (int i = 0; p && i < p->steps.len; i++) {
            const gr_step *st = &p->steps.data[i];
            if (st->kind != GR_STEP_KERNEL || !st->kernel || !gr_kernel_scatters(st->kernel)) continue;
            appends++;
            CHECK_MSG(strstr(st->kernel->name, "cache_write") != NULL, "%s: scatter kernel %s is not a cache append", name, st->kernel->name);
            CHECK_MSG(gr_kernel_points(st->kernel) == b * kv_heads * 16 && gr_kernel_inner_points(st->kernel) == 1,
                      "%s: cache append %s walks %lld points, the new entries are %lld", name, st->kernel->name,
                      (long long)(gr_kernel_points(st->kernel) * gr_kernel_inner_points(st->kernel)), (long long)(b * kv_heads * 16));
        }
        CHECK_MSG(appends == n_state, "%s: %d cache-append kernels, want %d", name, appends, n_state);
        (void)max_len;
    }
    if (mode == GR_MODE_GRAPH) CHECK_MSG(rs.captures == 1, "%s: %ld graph captures, want 1", name, rs.captures);
    free(logits), free(ref), free(tokens);
    gr_decode_engine_destroy(e);
done:
    npy_free(&prompt), npy_free(&greedy);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* The device loop through the engine: after the prompt, gr_decode_engine_loop runs the remaining
 * steps with no host copy between them (tokens from the device ring equal HF's), and a second
 * sequence reuses the one WHILE graph (graph mode). With batch 1 and eos = row 0's token at step 4,
 * graph mode's WHILE stops on the device right after it (kv_len = P + 5 on the device, the ring's
 * later rows untouched), while eager mode runs every step (finished rows emit pad). */
static int64_t device_kv_len(gr_decode_engine *e) {
    gr_session_t es = gr_decode_engine_session(e);
    int i = -1;
    for (int k = 0; k < es->graph->inputs.len; k++)
        if (!strcmp(es->graph->values.data[es->graph->inputs.data[k]].name, "graft.kv_len")) i = k;
    int64_t kv = -1;
    if (i < 0 || !es->current) return -1;
    CHECK_OK(gr_dev_memcpy(es->dev, es->stream, &kv, gr_rt_input_addr(es, es->current, i), sizeof kv, GR_COPY_D2H));
    CHECK_OK(gr_dev_stream_sync(es->dev, es->stream));
    return kv;
}

/* After a reset, every cache buffer of the engine is zero on the device already (the steps of the
 * sequence before wrote into it; a reset zeroes it there, not at the next run's copy). */
static void check_cache_zero(gr_decode_engine *e, const char *const *past, int n_state, const char *what) {
    gr_session_t es = gr_decode_engine_session(e);
    for (int k = 0; k < n_state; k++) {
        int i = -1;
        for (int j = 0; j < es->graph->inputs.len; j++)
            if (!strcmp(es->graph->values.data[es->graph->inputs.data[j]].name, past[k])) i = j;
        CHECK_MSG(i >= 0 && es->current, "%s: state input '%s' not found", what, past[k]);
        if (i < 0 || !es->current) return;
        size_t n = es->current->input_bytes[i];
        unsigned char *h = malloc(n ? n : 1);
        CHECK_OK(gr_dev_memcpy(es->dev, es->stream, h, gr_rt_input_addr(es, es->current, i), n, GR_COPY_D2H));
        CHECK_OK(gr_dev_stream_sync(es->dev, es->stream));
        size_t nz = 0;
        for (size_t b = 0; b < n; b++) nz += h[b] != 0;
        CHECK_MSG(nz == 0, "%s: %zu nonzero bytes in cache '%s' after a reset", what, nz, past[k]);
        free(h);
    }
}

static void run_loop(const char *name, const char *const *past, const char *const *present, int n_state, gr_mode mode) {
    char path[512], err[256];
    gr_graph_t g;
    gr_session_t s = open_model(name, test_device(), mode, &g);
    npy_array prompt, greedy;
    snprintf(path, sizeof path, DIR "%s/prompt.npy", name);
    CHECK_MSG(npy_read(path, &prompt, err) == 0, "%s", err);
    snprintf(path, sizeof path, DIR "%s/greedy.npy", name);
    CHECK_MSG(npy_read(path, &greedy, err) == 0, "%s", err);
    const int64_t *pr = prompt.data, *gr = greedy.data;
    int64_t B = prompt.dims[0], P = prompt.dims[1], W = greedy.dims[1], N = W - P;
    const char *mname = mode == GR_MODE_GRAPH ? "graph" : "eager";
    for (int64_t b = B; b >= 1; b -= B - 1) {
        gr_decode_engine *e = NULL;
        CHECK_OK(gr_decode_engine_create(s, n_state, past, present, NULL, b, 24, &e));
        if (!e) break;
        CHECK_MSG(gr_decode_engine_loop_refused(e) == NULL, "%s: device loop refused: %s", name, gr_decode_engine_loop_refused(e));
        int64_t ids[8], tokens[24 * 8];
        for (int rep = 0; rep < 3; rep++) {
            /* rep 2 (batch 1 only): eos = row 0's token at step 4, its first occurrence */
            int64_t eos = rep == 2 ? gr[P + 4] : -1;
            if (rep == 2 && b != 1) break;
            CHECK_OK(gr_decode_engine_reset(e, eos, eos));
            if (rep > 0) check_cache_zero(e, past, n_state, name);
            for (int64_t t = 0; t < P; t++) {
                for (int64_t r = 0; r < b; r++) ids[r] = pr[r * P + t];
                CHECK_OK(gr_decode_engine_step(e, ids, t + 1, NULL));
            }
            CHECK_OK(gr_decode_engine_loop(e, P + 1, P + N - 1, P, tokens));
            int mism = 0;
            int64_t stop_at = rep == 2 ? 4 : N;
            for (int64_t j = 0; j < N; j++)
                for (int64_t r = 0; r < b; r++) {
                    int64_t want = j <= stop_at ? gr[r * W + P + j] : eos;
                    if (rep == 2 && mode == GR_MODE_GRAPH && j > stop_at) want = 0; /* never written: the WHILE ended */
                    mism += tokens[j * b + r] != want;
                }
            CHECK_MSG(mism == 0, "%s (%s, batch %lld, run %d): %d device-loop tokens differ from Hugging Face's", name, mname, (long long)b,
                      rep, mism);
            int64_t kv = device_kv_len(e), want_kv = rep == 2 && mode == GR_MODE_GRAPH ? P + stop_at + 1 : P + N;
            CHECK_MSG(kv == want_kv, "%s (%s, batch %lld, run %d): kv_len %lld on the device after the loop, want %lld", name, mname,
                      (long long)b, rep, (long long)kv, (long long)want_kv);
        }
        CHECK_MSG(gr_decode_engine_loop_captures(e) == (mode == GR_MODE_GRAPH ? 1 : 0), "%s (%s): %ld WHILE graphs captured", name,
                  mname, gr_decode_engine_loop_captures(e));
        /* bad ranges are errors, not reads past the ring */
        CHECK_ERR(gr_decode_engine_loop(e, P + 1, 24, P, tokens), GR_ERR_INVALID, "decode loop: steps");
        CHECK_ERR(gr_decode_engine_loop(e, P + 1, P + 2, P + 2, tokens), GR_ERR_INVALID, "decode loop: steps");
        gr_decode_engine_destroy(e);
    }
    npy_free(&prompt), npy_free(&greedy);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

/* The pass refuses a model in which a reader of an input it advances does not lead to the logits
 * (its in-place update could not be ordered after that reader). */
static void loop_refusals(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    gr_dim d1[1] = {gr_dx_const(1)}, d11[2] = {gr_dx_const(1), gr_dx_const(1)};
    int kv, ids, one, x, y, l;
    CHECK_OK(gr_ir_add_input(g, "graft.kv_len", GR_I64, 1, d1, &kv));
    CHECK_OK(gr_ir_add_input(g, "input_ids", GR_I64, 2, d11, &ids));
    int64_t dims1[1] = {1}, v1 = 1;
    CHECK_OK(gr_ir_add_const(g, NULL, GR_I64, 1, dims1, &v1, &one));
    int in[2] = {kv, one}, n;
    const char *names[1] = {"side"};
    CHECK_OK(gr_ir_add_node(g, GR_OP_ADD, "side_effect", 2, in, 1, names, 0, NULL, &n));
    y = g->nodes.data[n].out[0];
    gr_ir_attr a = {.name = "to", .kind = GR_IR_ATTR_STRING, .s = "f32"};
    CHECK_OK(gr_ir_add_node(g, GR_OP_CAST, "to_float", 1, &ids, 1, NULL, 1, &a, &n));
    x = g->nodes.data[n].out[0];
    int64_t shape[3] = {1, 1, 1};
    gr_ir_attr r = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = shape, .n = 3};
    const char *ln[1] = {"logits"};
    CHECK_OK(gr_ir_add_node(g, GR_OP_RESHAPE, "head", 1, &x, 1, ln, 1, &r, &n));
    l = g->nodes.data[n].out[0];
    CHECK_OK(gr_ir_add_output(g, l));
    CHECK_OK(gr_ir_add_output(g, y));
    CHECK_OK(gr_ir_infer_shapes(g));
    gr_decode_loop_spec ls = {.input_ids = "input_ids", .logits = "logits", .max_len = 4};
    CHECK_ERR(gr_pass_decode_device_loop(g, &ls), GR_ERR_UNSUPPORTED, "does not lead to the logits");
    CHECK_ERR(gr_pass_decode_device_loop(g, &ls), GR_ERR_UNSUPPORTED, "side_effect");
    ls.input_ids = "nope";
    CHECK_ERR(gr_pass_decode_device_loop(g, &ls), GR_ERR_INVALID, "no token-ids input 'nope'");
    gr_ir_graph_destroy(g);
    /* beam search: rows that are not a multiple of the beams; a cache the rewrite does not update in place */
    for (int c = 0; c < 2; c++) {
        gr_graph *h = NULL;
        CHECK_OK(gr_ir_graph_create(&h));
        if (!h) return;
        gr_dim d21[2] = {gr_dx_const(2), gr_dx_const(1)}, d2l[2] = {gr_dx_const(2), gr_dx_const(4)};
        int hk, hi, hp, hx, hl;
        CHECK_OK(gr_ir_add_input(h, "graft.kv_len", GR_I64, 1, d1, &hk));
        CHECK_OK(gr_ir_add_input(h, "input_ids", GR_I64, 2, d21, &hi));
        CHECK_OK(gr_ir_add_input(h, "past", GR_F32, 2, d2l, &hp));
        CHECK_OK(gr_ir_add_node(h, GR_OP_CAST, "to_float", 1, &hi, 1, NULL, 1, &a, &n));
        hx = h->nodes.data[n].out[0];
        int64_t s213[3] = {2, 1, 1};
        gr_ir_attr r3 = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = s213, .n = 3};
        CHECK_OK(gr_ir_add_node(h, GR_OP_RESHAPE, "head", 1, &hx, 1, ln, 1, &r3, &n));
        hl = h->nodes.data[n].out[0];
        CHECK_OK(gr_ir_add_output(h, hl));
        CHECK_OK(gr_ir_infer_shapes(h));
        const char *past[1] = {"past"};
        int axis[1] = {1};
        gr_decode_loop_spec bs = {.input_ids = "input_ids", .logits = "logits", .max_len = 4, .beams = c ? 2 : 3, .room = 4,
                                  .n_state = 1, .past = past, .axis = axis};
        if (c == 0) CHECK_ERR(gr_pass_decode_device_loop(h, &bs), GR_ERR_INVALID, "2 rows of 3 beams");
        else CHECK_ERR(gr_pass_decode_device_loop(h, &bs), GR_ERR_UNSUPPORTED, "the cache 'past' is not updated in place");
        gr_ir_graph_destroy(h);
    }
}

/* ==== sampling (the sample op, GR_LIB_SAMPLE; codegen/sample.c, device/cuda/cuda-sample.c) =========
 * (1) gr_sample_row against its definition written the slow way (a sort, thresholds by scanning
 * the sorted values), over ties, -inf, NaN and every kind of top-k / top-p / temperature; (2) the op
 * on the test's device against gr_sample_row on the same logits: a vocabulary of 8 with 4096 rows
 * (exact, and the frequencies against the kept probabilities), and GPT-2's 50257 (exact on the
 * simulator; on CUDA an expf ulp may move a boundary, so a rare flip is allowed and counted);
 * (3) sampled generation on the device loop: the same seed twice gives the same ids, another
 * seed others; on the simulator they equal the reference engine's. */
static uint64_t t_rng(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double t_normal(uint64_t *s) {
    double u = ((double)(t_rng(s) >> 11) + 0.5) * 0x1.0p-53, v = (double)(t_rng(s) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static float t_z(float x, float temp) {
    float z = x / temp + 0.0f;
    return z != z ? -INFINITY : z;
}

static uint64_t t_w(float z, float m) { return z == m ? (uint64_t)1 << 32 : (uint64_t)(expf(z - m) * 4294967296.0f); }

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* the definition (kir.h) by sorting; *kept_w (optional, [vocab]): each token's kept weight */
static int64_t slow_sample(const float *x, int64_t V, float temp, int64_t top_k, float top_p, uint64_t bits, uint64_t *kept_w) {
    float *z = malloc(sizeof(float) * (size_t)V), *sorted = malloc(sizeof(float) * (size_t)V);
    float m = -INFINITY;
    for (int64_t i = 0; i < V; i++) z[i] = sorted[i] = t_z(x[i], temp), m = z[i] > m ? z[i] : m;
    qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
    float lo = -INFINITY;
    if (top_k > 0 && top_k < V) lo = sorted[top_k - 1];
    if (top_p < 1.0f) {
        uint64_t total = 0;
        for (int64_t i = 0; i < V; i++) total += z[i] >= lo ? t_w(z[i], m) : 0;
        double target = (double)top_p * (double)total;
        for (int64_t j = 0; j < V; j++) { /* the largest value c with weight at or above it >= target */
            if (j > 0 && sorted[j] == sorted[j - 1]) continue;
            if (sorted[j] < lo) break;
            uint64_t at = 0;
            for (int64_t i = 0; i < V; i++) at += z[i] >= sorted[j] && z[i] >= lo ? t_w(z[i], m) : 0;
            if ((double)at >= target) {
                lo = sorted[j];
                break;
            }
        }
    }
    uint64_t T = 0;
    for (int64_t i = 0; i < V; i++) {
        uint64_t w = z[i] >= lo ? t_w(z[i], m) : 0;
        if (kept_w) kept_w[i] = w;
        T += w;
    }
    uint64_t target = (uint64_t)(((unsigned __int128)bits * T) >> 64), run = 0;
    int64_t tok = -1;
    for (int64_t i = 0; i < V && tok < 0; i++) {
        run += z[i] >= lo ? t_w(z[i], m) : 0;
        if (target < run) tok = i;
    }
    free(z);
    free(sorted);
    return tok;
}

static void test_sample_semantics(void) {
    uint64_t rs = 42;
    static const int64_t vocabs[] = {1, 2, 7, 100, 1000};
    static const float temps[] = {1.0f, 0.5f, 3.0f};
    static const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.1f, 1e-6f};
    int64_t cases = 0, bad = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        int64_t V = vocabs[vi];
        float *x = malloc(sizeof(float) * (size_t)V);
        for (int kind = 0; kind < 3; kind++) {
            /* 0: distinct values; 1: few values (ties, top-k and top-p cut inside them); 2: -inf and NaN too */
            for (int64_t i = 0; i < V; i++) {
                double n = t_normal(&rs) * 3;
                x[i] = kind == 1 ? (float)(floor(n) * 0.5) : (float)n;
                if (kind == 2 && i % 5 == 1) x[i] = -INFINITY;
                if (kind == 2 && i % 7 == 3) x[i] = NAN;
            }
            const int64_t top_ks[] = {0, 1, 3, V - 1, V, V + 5};
            for (size_t ki = 0; ki < 6; ki++)
                for (size_t pi = 0; pi < sizeof top_ps / sizeof top_ps[0]; pi++)
                    for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
                        for (int r = 0; r < 4; r++) {
                            uint64_t bits = r == 0 ? 0 : r == 1 ? ~(uint64_t)0 : t_rng(&rs);
                            gr_sample_params p = {.temperature = temps[ti], .top_k = top_ks[ki], .top_p = top_ps[pi]};
                            int64_t got = gr_sample_row(x, GR_F32, V, &p, bits);
                            int64_t want = slow_sample(x, V, temps[ti], top_ks[ki], top_ps[pi], bits, NULL);
                            cases++;
                            if (got != want && bad++ < 5)
                                CHECK_MSG(0, "sample: vocab %lld kind %d top_k %lld top_p %g temperature %g bits %llx: %lld, the "
                                          "definition says %lld", (long long)V, kind, (long long)top_ks[ki], (double)top_ps[pi],
                                          (double)temps[ti], (unsigned long long)bits, (long long)got, (long long)want);
                        }
        }
        free(x);
    }
    CHECK_MSG(bad == 0, "sample: %lld of %lld cases differ from the definition", (long long)bad, (long long)cases);
    /* hand-made: ties with the k-th stay; the top-p set keeps whole ties; all -inf is uniform */
    float t1[6] = {1, 3, 3, 2, 3, 0};
    gr_sample_params p1 = {.temperature = 1, .top_k = 1, .top_p = 1};
    int seen[6] = {0};
    for (uint64_t c = 0; c < 600; c++) seen[gr_sample_row(t1, GR_F32, 6, &p1, gr_sample_bits(7, c))]++;
    CHECK_MSG(seen[1] > 150 && seen[2] > 150 && seen[4] > 150 && seen[0] + seen[3] + seen[5] == 0,
              "sample: top_k 1 over three tied maxima drew %d %d %d %d %d %d", seen[0], seen[1], seen[2], seen[3], seen[4], seen[5]);
    float t2[3] = {-INFINITY, -INFINITY, -INFINITY};
    int s2[3] = {0};
    for (uint64_t c = 0; c < 300; c++) s2[gr_sample_row(t2, GR_F32, 3, &p1, gr_sample_bits(1, c))]++;
    CHECK_MSG(s2[0] > 60 && s2[1] > 60 && s2[2] > 60, "sample: all -inf drew %d %d %d", s2[0], s2[1], s2[2]);
    gr_sample_params p3 = {.temperature = 1, .top_k = 0, .top_p = 1e-6f};
    float t3[4] = {0.5f, 2.0f, 1.0f, 2.0f - 1e-6f};
    for (uint64_t c = 0; c < 50; c++) CHECK(gr_sample_row(t3, GR_F32, 4, &p3, gr_sample_bits(3, c)) == 1);
    /* f16 / bf16 / f64 logits read as f32 */
    uint16_t h[3] = {0x3c00, 0x4000, 0x3800}; /* 1, 2, 0.5 */
    gr_sample_params p4 = {.temperature = 1, .top_k = 1, .top_p = 1};
    CHECK(gr_sample_row(h, GR_F16, 3, &p4, 123) == 1);
    uint16_t hb[3] = {0x3f80, 0x3f00, 0x4000}; /* 1, 0.5, 2 */
    CHECK(gr_sample_row(hb, GR_BF16, 3, &p4, 123) == 2);
    double d[3] = {9, 1, 2};
    CHECK(gr_sample_row(d, GR_F64, 3, &p4, 123) == 0);
}

/* The op on the device: logits [rows, V], sampled `steps` times (step = 0..steps-1); tokens
 * [steps, rows]. */
static gr_status run_sample_op(gr_mode mode, const float *logits, int64_t rows, int64_t V, uint64_t seed, int64_t top_k, float temp,
                               float top_p, int64_t steps, int64_t *tokens) {
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    gr_value_t in[4], out;
    int64_t dl[2] = {rows, V}, d1[1] = {1}, d3[1] = {3}, d2[1] = {2};
    gr_status st = gr_graph_create(&g);
    if (st == GR_OK) st = gr_graph_add_input(g, "logits", GR_F32, 2, dl, NULL, &in[0]);
    if (st == GR_OK) st = gr_graph_add_input(g, "step", GR_I64, 1, d1, NULL, &in[1]);
    if (st == GR_OK) st = gr_graph_add_input(g, "ints", GR_I64, 1, d3, NULL, &in[2]);
    if (st == GR_OK) st = gr_graph_add_input(g, "floats", GR_F32, 1, d2, NULL, &in[3]);
    if (st == GR_OK) st = gr_graph_add_node(g, "sample", "draw", 4, in, 0, NULL, 1, &out);
    if (st == GR_OK) st = gr_graph_set_output(g, out, "tokens");
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    if (st == GR_OK) st = gr_session_create(g, &o, &s);
    int64_t ints[3] = {(int64_t)seed, 0, top_k};
    float fl[2] = {temp, top_p};
    if (st == GR_OK) st = gr_session_set_input(s, "logits", GR_F32, 2, dl, logits, sizeof(float) * (size_t)(rows * V));
    if (st == GR_OK) st = gr_session_set_input(s, "ints", GR_I64, 1, d3, ints, sizeof ints);
    if (st == GR_OK) st = gr_session_set_input(s, "floats", GR_F32, 1, d2, fl, sizeof fl);
    for (int64_t k = 0; k < steps && st == GR_OK; k++) {
        st = gr_session_set_input(s, "step", GR_I64, 1, d1, &k, sizeof k);
        if (st == GR_OK) st = gr_session_run(s);
        gr_output ot;
        if (st == GR_OK) st = gr_session_output(s, 0, &ot);
        if (st == GR_OK) st = gr_session_output_read(s, ot, tokens + k * rows, sizeof(int64_t) * (size_t)rows);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return st;
}

static void test_sample_op(gr_mode mode) {
    bool cuda = test_device() == GR_DEVICE_CUDA;
    const char *mname = mode == GR_MODE_GRAPH ? "graph" : "eager";
    /* a small vocabulary, many rows and steps: exact, and the frequencies */
    enum { V8 = 8, ROWS = 4096, STEPS = 8 };
    float x8[V8] = {1.0f, 2.5f, 0.2f, 3.0f, -1.0f, 2.9f, 0.7f, -4.0f};
    static const struct { int64_t k; float p, t; } cfg[] = {{0, 1.0f, 1.0f}, {5, 1.0f, 1.0f}, {0, 0.8f, 1.0f}, {4, 0.9f, 0.7f}};
    float *logits = malloc(sizeof(float) * ROWS * V8);
    int64_t *tok = malloc(sizeof(int64_t) * ROWS * STEPS);
    for (int64_t r = 0; r < ROWS; r++) memcpy(logits + r * V8, x8, sizeof x8);
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        CHECK_OK(run_sample_op(mode, logits, ROWS, V8, 11 + c, cfg[c].k, cfg[c].t, cfg[c].p, STEPS, tok));
        uint64_t w[V8], T = 0;
        slow_sample(x8, V8, cfg[c].t, cfg[c].k, cfg[c].p, 0, w);
        for (int i = 0; i < V8; i++) T += w[i];
        gr_sample_params sp = {.temperature = cfg[c].t, .top_k = cfg[c].k, .top_p = cfg[c].p};
        int64_t count[V8] = {0}, bad = 0, n = (int64_t)ROWS * STEPS;
        for (int64_t k = 0; k < STEPS; k++)
            for (int64_t r = 0; r < ROWS; r++) {
                int64_t t = tok[k * ROWS + r];
                bad += t != gr_sample_row(x8, GR_F32, V8, &sp, gr_sample_bits(11 + c, (uint64_t)(k * ROWS + r)));
                if (t >= 0 && t < V8) count[t]++;
            }
        CHECK_MSG(bad == 0, "sample op (%s, config %zu): %lld of %lld tokens differ from gr_sample_row", mname, c, (long long)bad,
                  (long long)n);
        for (int i = 0; i < V8; i++) {
            double p = (double)w[i] / (double)T, f = (double)count[i] / (double)n, sd = sqrt(p * (1 - p) / (double)n);
            CHECK_MSG(fabs(f - p) <= 5 * sd + 1e-12, "sample op (%s, config %zu): token %d drawn %.5f of the time, probability %.5f",
                      mname, c, i, f, p);
        }
    }
    free(logits);
    free(tok);
    /* GPT-2's vocabulary */
    enum { VG = 50257, RG = 4, SG = 4 };
    float *xg = malloc(sizeof(float) * RG * VG);
    int64_t tg[RG * SG];
    uint64_t rs = 5;
    for (int64_t i = 0; i < RG * VG; i++) xg[i] = (float)(t_normal(&rs) * 2.5);
    static const struct { int64_t k; float p, t; } cg[] = {{50, 0.9f, 1.0f}, {0, 1.0f, 1.0f}, {0, 0.5f, 0.7f}, {1, 1.0f, 1.0f}, {1000, 1.0f, 1.3f}};
    int64_t flips = 0, draws = 0;
    for (size_t c = 0; c < sizeof cg / sizeof cg[0]; c++) {
        CHECK_OK(run_sample_op(mode, xg, RG, VG, 99 + c, cg[c].k, cg[c].t, cg[c].p, SG, tg));
        gr_sample_params sp = {.temperature = cg[c].t, .top_k = cg[c].k, .top_p = cg[c].p};
        for (int64_t k = 0; k < SG; k++)
            for (int64_t r = 0; r < RG; r++, draws++)
                flips += tg[k * RG + r] != gr_sample_row(xg + r * VG, GR_F32, VG, &sp, gr_sample_bits(99 + c, (uint64_t)(k * RG + r)));
    }
    if (cuda) printf("test_decode: sample op at vocab %d (%s): %lld of %lld draws differ from the host's (expf ulps)\n", VG, mname,
                     (long long)flips, (long long)draws);
    CHECK_MSG(flips <= (cuda ? draws / 32 : 0), "sample op at vocab %d (%s): %lld of %lld draws differ from gr_sample_row", VG, mname,
              (long long)flips, (long long)draws);
    free(xg);
}

/* ---- the beam ops -------------------------------------------------------------------------
 * beam_step on the device, step by step, with its state fed back, against gr_beam_step_row run
 * on the host on the same state layout (codegen/kir.h): exact on the simulator (it runs the same
 * function); on CUDA the ids exactly and the scores to 1e-5 (the device's log-sum-exp may differ
 * in its last bits). Then beam_reorder against its definition. */
static gr_status run_beam_op(gr_mode mode, const float *logits, int64_t B, int64_t K, int64_t V, int64_t room, const int64_t *params,
                             int64_t steps, int64_t first_step, int64_t *state, int64_t slots) {
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    gr_value_t in[4], out;
    int64_t dl[2] = {B * K, V}, d1[1] = {1}, ds[2] = {B, slots}, dp[1] = {GR_BEAM_NPARAMS};
    gr_attr a[2] = {{.name = "beams", .kind = GR_ATTR_INT, .i = K}, {.name = "room", .kind = GR_ATTR_INT, .i = room}};
    gr_status st = gr_graph_create(&g);
    if (st == GR_OK) st = gr_graph_add_input(g, "logits", GR_F32, 2, dl, NULL, &in[0]);
    if (st == GR_OK) st = gr_graph_add_input(g, "step", GR_I64, 1, d1, NULL, &in[1]);
    if (st == GR_OK) st = gr_graph_add_input(g, "state", GR_I64, 2, ds, NULL, &in[2]);
    if (st == GR_OK) st = gr_graph_add_input(g, "params", GR_I64, 1, dp, NULL, &in[3]);
    if (st == GR_OK) st = gr_graph_add_node(g, "beam_step", "beam", 4, in, 2, a, 1, &out);
    if (st == GR_OK) st = gr_graph_set_output(g, out, "next");
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    if (st == GR_OK) st = gr_session_create(g, &o, &s);
    size_t sb = sizeof(int64_t) * (size_t)(B * slots);
    if (st == GR_OK) st = gr_session_set_input(s, "params", GR_I64, 1, dp, params, sizeof(int64_t) * GR_BEAM_NPARAMS);
    for (int64_t k = 0; k < steps && st == GR_OK; k++) {
        int64_t step = first_step + k;
        st = gr_session_set_input(s, "step", GR_I64, 1, d1, &step, sizeof step);
        if (st == GR_OK) st = gr_session_set_input(s, "logits", GR_F32, 2, dl, logits + k * B * K * V, sizeof(float) * (size_t)(B * K * V));
        if (st == GR_OK) st = gr_session_set_input(s, "state", GR_I64, 2, ds, state, sb);
        if (st == GR_OK) st = gr_session_run(s);
        gr_output ot;
        if (st == GR_OK) st = gr_session_output(s, 0, &ot);
        if (st == GR_OK) st = gr_session_output_read(s, ot, state, sb);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return st;
}

static void test_beam_op(gr_mode mode) {
    bool cuda = test_device() == GR_DEVICE_CUDA;
    const char *mname = mode == GR_MODE_GRAPH ? "graph" : "eager";
    static const struct {
        int64_t B, K, V, N, eos;
        double lp;
    } cfg[] = {{2, 4, 50257, 6, 17, 1.0}, {1, 2, 11, 5, 3, 1.0}, {3, 4, 9, 7, 2, 0.7}, {2, 16, 40, 4, -1, 1.0}, {1, 3, 5, 6, 0, 2.0}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        int64_t B = cfg[c].B, K = cfg[c].K, V = cfg[c].V, N = cfg[c].N, room = N + 3, first = 5;
        gr_beam_params p = {.beams = K, .vocab = V, .max_new = N, .stride = room, .eos_id = cfg[c].eos, .pad_id = 1, .length_penalty = cfg[c].lp};
        gr_beam_params lay = p;
        lay.max_new = room; /* the op's layout: the room's (as the lowering computes it) */
        gr_beam_layout l;
        CHECK_OK(gr_beam_state_layout(&lay, &l));
        int64_t steps = N + 2; /* one prompt step before (a no-op), one past the end (a no-op) */
        float *x = malloc(sizeof(float) * (size_t)(steps * B * K * V));
        int64_t *dev = malloc(sizeof(int64_t) * (size_t)(B * l.slots)), *host = malloc(sizeof(int64_t) * (size_t)(B * l.slots));
        size_t scratch_bytes = 0;
        CHECK_OK(gr_beam_scratch_bytes(&p, &scratch_bytes));
        void *scratch = malloc(scratch_bytes);
        uint64_t rs = 31 + c;
        for (int64_t i = 0; i < steps * B * K * V; i++) x[i] = (float)(t_normal(&rs) * 2.0);
        /* small vocabularies: eos often among the best, so hypotheses and dead beams happen */
        if (cfg[c].eos >= 0 && V < 100)
            for (int64_t r = 0; r < steps * B * K; r += 2) x[r * V + cfg[c].eos] += 2.5f;
        gr_beam_state_init(&lay, &l, B, dev);
        gr_beam_state_init(&lay, &l, B, host);
        int64_t bits;
        memcpy(&bits, &p.length_penalty, sizeof bits);
        int64_t params[GR_BEAM_NPARAMS] = {first, p.eos_id, p.pad_id, bits, N};
        CHECK_OK(run_beam_op(mode, x, B, K, V, room, params, steps, first - 1, dev, l.slots));
        for (int64_t k = 1; k <= N; k++) /* step first - 1 + k is new token j = k - 1 */
            for (int64_t b = 0; b < B; b++) {
                int64_t *st = host + b * l.slots;
                gr_beam_row row = gr_beam_state_row(st, &l);
                bool was = *row.done != 0;
                gr_beam_step_row(x + (k * B + b) * K * V, GR_F32, &p, k - 1, &row, st + l.src, st + l.tok, scratch);
                for (int64_t i = 0; i < K; i++) st[l.src + i] += b * K;
                if (!was && *row.done) st[l.done_step] = k;
            }
        int64_t bad_ids = 0, bad_scores = 0;
        for (int64_t b = 0; b < B; b++) {
            const int64_t *d = dev + b * l.slots, *h = host + b * l.slots;
            for (int64_t i = 0; i < l.scratch; i++) {
                bool score = (i >= l.score && i < l.score + K) || (i >= l.hyp_score && i < l.hyp_score + K);
                if (!score) {
                    bad_ids += d[i] != h[i];
                    continue;
                }
                if (!cuda) {
                    bad_scores += d[i] != h[i];
                    continue;
                }
                float fd[2], fh[2];
                memcpy(fd, &d[i], 8);
                memcpy(fh, &h[i], 8);
                for (int q = 0; q < 2; q++) bad_scores += !(fabsf(fd[q] - fh[q]) <= 1e-5f * fmaxf(1.0f, fabsf(fh[q])));
            }
        }
        CHECK_MSG(bad_ids == 0 && bad_scores == 0, "beam_step op (%s, config %zu: batch %lld, %lld beams, vocab %lld): %lld id slots and "
                  "%lld scores differ from gr_beam_step_row", mname, c, (long long)B, (long long)K, (long long)V, (long long)bad_ids,
                  (long long)bad_scores);
        free(x);
        free(dev);
        free(host);
        free(scratch);
    }
    /* beam_reorder: x [4, 2, 5, 3], rows {2, 0, 3, 2}, kv_len 4 - 1: the first 3 positions */
    enum { M = 4, A = 2, L = 5, E = 3 };
    float x[M * A * L * E], y[M * A * L * E];
    for (int i = 0; i < M * A * L * E; i++) x[i] = (float)i + 0.5f;
    int64_t rows[M] = {2, 0, 3, 2}, kv = 4, dx[4] = {M, A, L, E}, dr[1] = {M}, d1[1] = {1};
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    gr_value_t in[3], out;
    gr_attr at[2] = {{.name = "axis", .kind = GR_ATTR_INT, .i = 2}, {.name = "delta", .kind = GR_ATTR_INT, .i = -1}};
    CHECK_OK(gr_graph_create(&g));
    CHECK_OK(gr_graph_add_input(g, "x", GR_F32, 4, dx, NULL, &in[0]));
    CHECK_OK(gr_graph_add_input(g, "rows", GR_I64, 1, dr, NULL, &in[1]));
    CHECK_OK(gr_graph_add_input(g, "kv", GR_I64, 1, d1, NULL, &in[2]));
    CHECK_OK(gr_graph_add_node(g, "beam_reorder", "move", 3, in, 2, at, 1, &out));
    CHECK_OK(gr_graph_set_output(g, out, "y"));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    CHECK_OK(gr_session_create(g, &o, &s));
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 4, dx, x, sizeof x));
    CHECK_OK(gr_session_set_input(s, "rows", GR_I64, 1, dr, rows, sizeof rows));
    CHECK_OK(gr_session_set_input(s, "kv", GR_I64, 1, d1, &kv, sizeof kv));
    CHECK_OK(gr_session_run(s));
    gr_output ot;
    CHECK_OK(gr_session_output(s, 0, &ot));
    CHECK_OK(gr_session_output_read(s, ot, y, sizeof y));
    int bad = 0;
    for (int r = 0; r < M; r++)
        for (int a = 0; a < A; a++)
            for (int q = 0; q < L; q++)
                for (int e = 0; e < E; e++) {
                    float want = q < 3 ? x[((rows[r] * A + a) * L + q) * E + e] : 0.0f;
                    bad += y[((r * A + a) * L + q) * E + e] != want;
                }
    CHECK_MSG(bad == 0, "beam_reorder (%s): %d elements differ", mname, bad);
    /* a row out of range is an error naming the op (the simulator checks; a kernel cannot) */
    if (!cuda) {
        int64_t wild[M] = {0, 1, 7, 2};
        CHECK_OK(gr_session_set_input(s, "rows", GR_I64, 1, dr, wild, sizeof wild));
        CHECK_ERR(gr_session_run(s), GR_ERR_INVALID, "reads row 7 of 4");
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
    /* shape rules: a state whose rows do not match the logits' */
    CHECK_OK(gr_graph_create(&g));
    int64_t dl[2] = {6, 10}, ds[2] = {4, 100}, dp[1] = {GR_BEAM_NPARAMS};
    gr_value_t bi[4], bo;
    gr_attr ab[2] = {{.name = "beams", .kind = GR_ATTR_INT, .i = 2}, {.name = "room", .kind = GR_ATTR_INT, .i = 4}};
    CHECK_OK(gr_graph_add_input(g, "logits", GR_F32, 2, dl, NULL, &bi[0]));
    CHECK_OK(gr_graph_add_input(g, "step", GR_I64, 1, d1, NULL, &bi[1]));
    CHECK_OK(gr_graph_add_input(g, "state", GR_I64, 2, ds, NULL, &bi[2]));
    CHECK_OK(gr_graph_add_input(g, "params", GR_I64, 1, dp, NULL, &bi[3]));
    CHECK_ERR(gr_graph_add_node(g, "beam_step", "beam", 4, bi, 2, ab, 1, &bo), GR_ERR_SHAPE, "batch rows of 2 beams");
    gr_graph_destroy(g);
}

static void test_sample_generate(gr_mode mode) {
    gr_graph_t g;
    CHECK_OK(gr_graph_load(DIR "gpt2/model.onnx", &g));
    gr_session_options so;
    gr_session_options_init(&so);
    so.device = test_device();
    so.mode = mode;
    so.max_rerecords = 1000;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &so, &s));
    gr_graph_destroy(g);
    if (!s) return;
    int n = 0;
    CHECK_OK(gr_session_bind_state_auto(s, &n));
    int64_t prompt[2 * 4] = {5, 17, 42, 100, 3, 9, 200, 64}, N = 12, W = 4 + 12; /* the fixture has 211 ids */
    int64_t a[2 * 16], b[2 * 16], c[2 * 16], r[2 * 16];
    gr_generate_options o;
    gr_generate_options_init(&o);
    o.max_new_tokens = N;
    o.sample = 1;
    o.top_k = 50;
    o.top_p = 0.9;
    o.seed = 2024;
    o.engine = GR_ENGINE_REWRITTEN;
    gr_generate_stats st;
    CHECK_OK(gr_session_generate(s, &o, prompt, 2, 4, a, &st));
    CHECK_MSG(st.engine == GR_ENGINE_REWRITTEN && st.launches >= 1, "sampled generation: engine %d, %ld launches (the device loop "
              "expected)", st.engine, st.launches);
    CHECK_OK(gr_session_generate(s, &o, prompt, 2, 4, b, NULL));
    CHECK_MSG(!memcmp(a, b, sizeof a), "sampled generation (%s): seed 2024 twice gave different ids", mode ? "graph" : "eager");
    o.seed = 7;
    CHECK_OK(gr_session_generate(s, &o, prompt, 2, 4, c, NULL));
    CHECK_MSG(memcmp(a, c, sizeof a) != 0, "sampled generation: seeds 2024 and 7 gave the same ids");
    o.seed = 2024;
    o.engine = GR_ENGINE_REFERENCE;
    CHECK_OK(gr_session_generate(s, &o, prompt, 2, 4, r, NULL));
    int64_t diff = 0;
    for (int64_t i = 0; i < 2 * W; i++) diff += a[i] != r[i];
    if (test_device() == GR_DEVICE_CUDA)
        printf("test_decode: sampled generation on CUDA (%s): %lld of %lld ids differ from the reference engine's\n",
               mode ? "graph" : "eager", (long long)diff, (long long)(2 * W));
    else
        CHECK_MSG(diff == 0, "sampled generation: %lld ids differ between the device loop and the reference engine", (long long)diff);
    gr_session_destroy(s);
}

/* Beam search through the rewritten engine on the test's device (beam_step and beam_reorder in
 * the decode loop) against the reference engine and Hugging Face's beam-4 ids (beam4.npy of
 * each fixture): equal on the simulator; on CUDA the differing ids are printed (a tie broken
 * by a last-bit difference of a log-softmax changes a beam). */
static void test_beam_generate(const char *model, gr_mode mode) {
    char path[256];
    snprintf(path, sizeof path, DIR "%s/model.onnx", model);
    gr_graph_t g;
    CHECK_OK(gr_graph_load(path, &g));
    gr_session_options so;
    gr_session_options_init(&so);
    so.device = test_device();
    so.mode = mode;
    so.max_rerecords = 1000;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &so, &s));
    gr_graph_destroy(g);
    if (!s) return;
    int n = 0;
    CHECK_OK(gr_session_bind_state_auto(s, &n));
    npy_array prompt = {0}, hf = {0};
    char err[NPY_ERR_LEN];
    snprintf(path, sizeof path, DIR "%s/prompt.npy", model);
    CHECK(npy_read(path, &prompt, err) == 0);
    snprintf(path, sizeof path, DIR "%s/beam4.npy", model);
    CHECK(npy_read(path, &hf, err) == 0);
    if (prompt.data && hf.data) {
        int64_t B = prompt.dims[0], P = prompt.dims[1], W = hf.dims[1], N = W - P;
        int64_t *a = calloc((size_t)(B * W), 8), *r = calloc((size_t)(B * W), 8);
        gr_generate_options o;
        gr_generate_options_init(&o);
        o.max_new_tokens = N;
        o.beams = 4;
        o.engine = GR_ENGINE_REWRITTEN;
        gr_generate_stats st;
        CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, a, &st));
        CHECK(st.engine == GR_ENGINE_REWRITTEN && st.launches >= 1 && st.new_tokens == N);
        o.engine = GR_ENGINE_REFERENCE;
        CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, r, NULL));
        int64_t vs_ref = 0, vs_hf = 0;
        for (int64_t i = 0; i < B * W; i++) vs_ref += a[i] != r[i], vs_hf += a[i] != ((const int64_t *)hf.data)[i];
        if (test_device() == GR_DEVICE_CUDA)
            printf("test_decode: %s beam 4 on CUDA (%s): %lld of %lld ids differ from the reference engine's, %lld from Hugging Face's\n",
                   model, mode ? "graph" : "eager", (long long)vs_ref, (long long)(B * W), (long long)vs_hf);
        else
            CHECK_MSG(vs_ref == 0 && vs_hf == 0, "%s beam 4: %lld ids differ from the reference engine's, %lld from HF's", model,
                      (long long)vs_ref, (long long)vs_hf);
        free(a);
        free(r);
    }
    npy_free(&prompt);
    npy_free(&hf);
    gr_session_destroy(s);
}

/* Kernels of one decode step (issue 12: the step is launch-bound, ~2-3 us a kernel on the H100):
 * kernel and library-call steps of the engine's plan, on the simulator, for both fixtures at batch
 * 1 and 2, greedy and 4 beams. The bounds are the counts after the per-layer mask `where` became one
 * for every layer (passes/cse.c) and the K/V slices of GPT-2's fused projection went into the cache
 * append (no split copy kernels: the rewrite's one-shape step has no var dims, fuse.c looks
 * through views); before: GPT-2 41/43 greedy, 51 beam; Llama 55/57 greedy, 65 beam. A step that
 * needs more kernels again fails here. */
static int step_launches(const char *name, const char *const *past, const char *const *present, int64_t b, int64_t beams,
                         int *splits, int *mask_wheres) {
    gr_graph_t g;
    gr_session_t s = open_model(name, GR_DEVICE_SIM, GR_MODE_EAGER, &g);
    gr_decode_engine *e = NULL;
    int n = -1;
    *splits = *mask_wheres = 0;
    if (beams > 1) {
        CHECK_OK(gr_decode_engine_create_beam(s, 4, past, present, NULL, b * beams, 24, beams, &e));
        if (e) CHECK_OK(gr_decode_engine_set_beam(e, 1, -1, 0, 1.0, 8));
    } else {
        CHECK_OK(gr_decode_engine_create(s, 4, past, present, NULL, b, 24, &e));
    }
    int64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (e) CHECK_OK(gr_decode_engine_step(e, ids, 1, NULL));
    const gr_rt_plan *p = e ? gr_decode_engine_session(e)->plans : NULL;
    if (p) {
        n = 0;
        for (int i = 0; i < p->steps.len; i++) {
            const gr_step *st = &p->steps.data[i];
            if (st->kind != GR_STEP_KERNEL && st->kind != GR_STEP_LIBCALL) continue;
            n++;
            if (st->kind != GR_STEP_KERNEL || st->node < 0) continue;
            const gr_ir_node *nd = &p->g->nodes.data[st->node];
            *splits += nd->op == GR_OP_SPLIT;
            /* the model's additive mask: a where of two constants over [b, 1, 1, max_len] */
            if (nd->op == GR_OP_WHERE && nd->n_in == 3 && p->g->values.data[nd->in[1]].kind == GR_VAL_CONST &&
                p->g->values.data[nd->in[2]].kind == GR_VAL_CONST && p->g->values.data[nd->out[0]].ndim == 4)
                (*mask_wheres)++;
        }
    }
    gr_decode_engine_destroy(e);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return n;
}

static void test_step_kernels(const char *const *gp, const char *const *gq, const char *const *lp, const char *const *lq) {
    static const struct {
        const char *model;
        int64_t b, beams;
        int max;
    } cases[] = {
        {"gpt2", 1, 1, 33}, {"gpt2", 2, 1, 36}, {"gpt2", 1, 4, 44}, {"gpt2", 2, 4, 44},
        {"llama", 1, 1, 47}, {"llama", 2, 1, 51}, {"llama", 1, 4, 59}, {"llama", 2, 4, 59},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bool gpt = !strcmp(cases[c].model, "gpt2");
        int splits, wheres;
        int n = step_launches(cases[c].model, gpt ? gp : lp, gpt ? gq : lq, cases[c].b, cases[c].beams, &splits, &wheres);
        printf("decode step of %s, batch %lld, %lld beam(s): %d kernels and library calls (at most %d)\n", cases[c].model,
               (long long)cases[c].b, (long long)cases[c].beams, n, cases[c].max);
        CHECK_MSG(n > 0 && n <= cases[c].max, "%s batch %lld beams %lld: %d launches a step, at most %d before", cases[c].model,
                  (long long)cases[c].b, (long long)cases[c].beams, n, cases[c].max);
        CHECK_MSG(splits == 0, "%s batch %lld beams %lld: %d split copy kernels in the step", cases[c].model, (long long)cases[c].b,
                  (long long)cases[c].beams, splits);
        CHECK_MSG(wheres == 1, "%s batch %lld beams %lld: %d mask kernels in the step, want one for every layer", cases[c].model,
                  (long long)cases[c].b, (long long)cases[c].beams, wheres);
    }
}

int main(void) {
    const char *gp[] = {"past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key", "past_key_values.1.value"};
    const char *gq[] = {"present.0.key", "present.0.value", "present.1.key", "present.1.value"};
    const char *lp[] = {"past_k0", "past_v0", "past_k1", "past_v1"};
    const char *lq[] = {"present_k0", "present_v0", "present_k1", "present_v1"};
    for (int m = 0; m < 2; m++) {
        gr_mode mode = m ? GR_MODE_GRAPH : GR_MODE_EAGER;
        run_model("gpt2", gp, gq, 4, 4, mode);
        run_model("llama", lp, lq, 4, 2, mode);
        run_loop("gpt2", gp, gq, 4, mode);
        run_loop("llama", lp, lq, 4, mode);
    }
    loop_refusals();
    test_step_kernels(gp, gq, lp, lq);
    test_sample_semantics();
    for (int m = 0; m < 2; m++) {
        test_sample_op(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        test_sample_generate(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        test_beam_op(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        test_beam_generate("gpt2", m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        test_beam_generate("llama", m ? GR_MODE_GRAPH : GR_MODE_EAGER);
    }
    /* bad specs */
    gr_graph_t g;
    gr_session_t s = open_model("gpt2", GR_DEVICE_SIM, GR_MODE_EAGER, &g);
    gr_decode_engine *e = NULL;
    const char *bad_past[] = {"past_nope"}, *bad_pres[] = {"present.0.key"};
    CHECK_ERR(gr_decode_engine_create(s, 1, bad_past, bad_pres, NULL, 1, 16, &e), GR_ERR_INVALID, "no input 'past_nope'");
    const char *q1[] = {"logits", "present.0.value", "present.1.key", "present.1.value"};
    CHECK_ERR(gr_decode_engine_create(s, 4, gp, q1, NULL, 1, 16, &e), GR_ERR_UNSUPPORTED, "is not made by a two-input Concat");
    const char *q2[] = {"present.0.value", "present.0.key", "present.1.key", "present.1.value"};
    CHECK_ERR(gr_decode_engine_create(s, 4, gp, q2, NULL, 1, 16, &e), GR_ERR_UNSUPPORTED, "first operand is not the state input");
    CHECK_ERR(gr_decode_engine_create(s, 2, gp, gq, NULL, 1, 16, &e), GR_ERR_UNSUPPORTED, "is neither a cache state");
    CHECK(e == NULL);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return check_summary("test_decode");
}
