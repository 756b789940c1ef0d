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

static void run_model(const char *name, const char *const *past, const char *const *present, int n_state, int64_t kv_heads,
                      gr_mode mode) {
    char path[512], err[256];
    snprintf(path, sizeof path, DIR "%s/model.onnx", name);
    gr_graph_t g;
    CHECK_OK(gr_graph_load(path, &g));
    CHECK_OK(gr_graph_set_dim_range(g, "past", 0, 256));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    gr_session_t s;
    CHECK_OK(gr_session_create(g, &o, &s));
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
        if (t < P + 2) { /* the rewritten step against the per-length one on the same prefix */
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
    snprintf(path, sizeof path, DIR "%s/model.onnx", name);
    gr_graph_t g;
    CHECK_OK(gr_graph_load(path, &g));
    CHECK_OK(gr_graph_set_dim_range(g, "past", 0, 256));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    gr_session_t s;
    CHECK_OK(gr_session_create(g, &o, &s));
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
    /* bad specs */
    gr_graph_t g;
    CHECK_OK(gr_graph_load(DIR "gpt2/model.onnx", &g));
    CHECK_OK(gr_graph_set_dim_range(g, "past", 0, 256));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    gr_session_t s;
    CHECK_OK(gr_session_create(g, &o, &s));
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
