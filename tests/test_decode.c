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
    CHECK_OK(gr_decode_engine_create(s, n_state, past, present, NULL, b, max_len, &e));
    if (!e) goto done;
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

int main(void) {
    const char *gp[] = {"past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key", "past_key_values.1.value"};
    const char *gq[] = {"present.0.key", "present.0.value", "present.1.key", "present.1.value"};
    const char *lp[] = {"past_k0", "past_v0", "past_k1", "past_v1"};
    const char *lq[] = {"present_k0", "present_v0", "present_k1", "present_v1"};
    for (int m = 0; m < 2; m++) {
        gr_mode mode = m ? GR_MODE_GRAPH : GR_MODE_EAGER;
        run_model("gpt2", gp, gq, 4, 4, mode);
        run_model("llama", lp, lq, 4, 2, mode);
    }
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
