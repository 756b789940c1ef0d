/* tests/test_generate — decode loops over step exports with a KV cache (issue 12, reference path).
 *
 * Fixtures: tests/data/onnx/decode/{gpt2,llama} (make_decode_fixtures.py): one-step exports whose
 * cache grows by concatenation, with Hugging Face's greedy and beam-4 ids for a [2, 4] prompt.
 * Checked: state binding (automatic pairing, every bad binding's message), greedy equal to HF's
 * ids with the whole prompt and token by token, eager and graph mode; beam 4 equal to HF's;
 * sampling reproducible by seed, different across seeds, top_k = 1 equal to greedy; eos stopping;
 * streaming; no leaks. */
#include "check.h"
#include "npy.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const models[] = {"gpt2", "llama"};

static gr_graph_t load(const char *model) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/onnx/decode/%s/model.onnx", model);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    return g;
}

static gr_session_t open_session(const char *model, gr_mode mode, bool bind) {
    gr_graph_t g = load(model);
    if (!g) return NULL;
    gr_session_options so;
    gr_session_options_init(&so);
    so.device = GR_DEVICE_SIM;
    so.mode = mode;
    so.max_rerecords = 1000; /* graph mode: a graph for every binding (each step's past is one) */
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &so, &s));
    gr_graph_destroy(g);
    if (s && bind) {
        int n = 0;
        CHECK_OK(gr_session_bind_state_auto(s, &n));
        CHECK_MSG(n == 4, "%s: %d states bound automatically, 4 expected", model, n);
    }
    return s;
}

static bool read_npy(const char *model, const char *file, npy_array *a) {
    char path[256], err[NPY_ERR_LEN];
    snprintf(path, sizeof path, "tests/data/onnx/decode/%s/%s", model, file);
    int rc = npy_read(path, a, err);
    CHECK_MSG(rc == 0, "%s", err);
    return rc == 0 && a->dtype == GR_I64 && a->ndim == 2;
}

static int64_t mismatches(const int64_t *a, const int64_t *b, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += a[i] != b[i];
    return bad;
}

typedef struct {
    int64_t calls, last_step, tokens;
    int64_t seen[64];
} stream_log;

static void on_token(void *user, int64_t step, const int64_t *tokens, int64_t n) {
    stream_log *l = user;
    if (l->calls < 32 && n == 2) l->seen[2 * l->calls] = tokens[0], l->seen[2 * l->calls + 1] = tokens[1];
    l->calls++;
    l->last_step = step;
    l->tokens += n;
}

/* ==== (a) greedy = HF, whole prompt and token by token, eager and graph; (b) beam 4 = HF ======== */
static void test_reference_ids(const char *model) {
    npy_array prompt = {0}, greedy = {0}, beam = {0};
    if (!read_npy(model, "prompt.npy", &prompt) || !read_npy(model, "greedy.npy", &greedy) || !read_npy(model, "beam4.npy", &beam)) goto done;
    int64_t B = prompt.dims[0], P = prompt.dims[1], W = greedy.dims[1], N = W - P;
    int64_t *out = calloc((size_t)(B * W), sizeof(int64_t));
    static const gr_mode modes[] = {GR_MODE_EAGER, GR_MODE_GRAPH};
    for (int m = 0; m < 2; m++) {
        gr_session_t s = open_session(model, modes[m], true);
        if (!s) continue;
        for (int pm = GR_PROMPT_WHOLE; pm <= GR_PROMPT_TOKENS; pm++) {
            gr_generate_options o;
            gr_generate_options_init(&o);
            o.max_new_tokens = N;
            o.prompt_mode = pm;
            o.engine = GR_ENGINE_REFERENCE;
            stream_log log = {0};
            o.on_token = on_token;
            o.user = &log;
            gr_generate_stats st;
            memset(out, 0xff, (size_t)(B * W) * sizeof(int64_t));
            CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, out, &st));
            int64_t bad = mismatches(out, greedy.data, B * W);
            CHECK_MSG(bad == 0, "%s greedy (%s, prompt %s): %lld of %lld ids differ from Hugging Face's", model, m ? "graph" : "eager",
                      pm == GR_PROMPT_WHOLE ? "whole" : "tokens", (long long)bad, (long long)(B * W));
            CHECK(log.calls == N && log.last_step == N - 1 && log.tokens == N * B);
            CHECK(log.seen[0] == out[P] && log.seen[1] == out[W + P]);
            CHECK(st.new_tokens == N && st.prompt_steps == (pm == GR_PROMPT_WHOLE ? 1 : P) && st.decode_steps == N - 1);
            CHECK(st.plans >= 1 && st.ms_per_token > 0 && st.tokens_per_s > 0);
        }
        if (m == 0) {
            /* the session runs a second generation the same way (state buffers reused) */
            gr_generate_options o;
            gr_generate_options_init(&o);
            o.max_new_tokens = N;
            o.engine = GR_ENGINE_REFERENCE;
            CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, out, NULL));
            CHECK(mismatches(out, greedy.data, B * W) == 0);
        }
        if (m == 1) {
            gr_run_stats rs;
            CHECK_OK(gr_session_stats(s, &rs));
            CHECK_MSG(rs.captures >= N - 1, "%s graph mode: %ld captures (a graph per decode binding seen twice)", model, rs.captures);
        }
        /* the rewritten engine (auto picks it: greedy, checked against the per-length step once),
         * twice: the second generation reuses its plan and graph; then a longer cache than needed */
        for (int rep = 0; rep < 4; rep++) {
            gr_generate_options o;
            gr_generate_options_init(&o);
            o.max_new_tokens = N;
            o.engine = rep == 2 ? GR_ENGINE_REWRITTEN : GR_ENGINE_AUTO;
            if (rep == 3) o.prompt_mode = GR_PROMPT_TOKENS; /* the engine runs every prompt token itself */
            o.max_length = rep == 2 ? 64 : 0;
            stream_log log = {0};
            o.on_token = on_token;
            o.user = &log;
            gr_generate_stats st;
            memset(out, 0xff, (size_t)(B * W) * sizeof(int64_t));
            CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, out, &st));
            int64_t bad = mismatches(out, greedy.data, B * W);
            CHECK_MSG(bad == 0, "%s greedy, rewritten engine (%s, run %d): %lld of %lld ids differ from Hugging Face's", model,
                      m ? "graph" : "eager", rep, (long long)bad, (long long)(B * W));
            CHECK_MSG(st.engine == GR_ENGINE_REWRITTEN, "%s: engine %d ran, want the rewritten one", model, st.engine);
            /* graph mode: the step is captured at most once (the decode loop replays its own WHILE graph) */
            CHECK_MSG(m ? st.captures <= 1 : st.captures == 0, "%s (%s, run %d): %ld captures of the rewritten step (its own session)",
                      model, m ? "graph" : "eager", rep, st.captures);
            /* the prompt: the per-length step over all its tokens but the last, whose cache the engine
             * takes on the device, then one engine step (the fixtures take a sequence of ids) */
            CHECK_MSG(st.prompt_steps == (rep == 3 ? P : 2), "%s (%s, run %d): the prompt took %lld steps, want %lld", model,
                      m ? "graph" : "eager", rep, (long long)st.prompt_steps, (long long)(rep == 3 ? P : 2));
            CHECK(log.calls == N && st.new_tokens == N && st.decode_steps == N - 1 && st.ms_per_token > 0);
        }
        /* beam 4: the reference engine, the rewritten one (beam search on the device), and auto, which
         * picks the rewritten one */
        for (int e = 0; e < 3; e++) {
            static const int engines[3] = {GR_ENGINE_REFERENCE, GR_ENGINE_REWRITTEN, GR_ENGINE_AUTO};
            gr_generate_options o;
            gr_generate_options_init(&o);
            o.max_new_tokens = N;
            o.beams = 4;
            o.engine = engines[e];
            stream_log log = {0};
            o.on_token = on_token;
            o.user = &log;
            gr_generate_stats st;
            memset(out, 0xff, (size_t)(B * W) * sizeof(int64_t));
            CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, out, &st));
            int64_t bad = mismatches(out, beam.data, B * W);
            CHECK_MSG(bad == 0, "%s beam 4 (%s, engine %d): %lld of %lld ids differ from Hugging Face's", model, m ? "graph" : "eager",
                      engines[e], (long long)bad, (long long)(B * W));
            CHECK(log.calls == N && log.seen[2 * (N - 1)] == out[W - 1]);
            CHECK_MSG(st.engine == (e == 0 ? GR_ENGINE_REFERENCE : GR_ENGINE_REWRITTEN), "%s beam 4 (engine %d): engine %d ran", model,
                      engines[e], st.engine);
            CHECK(st.new_tokens == N);
            if (e > 0) CHECK_MSG(m ? st.captures <= 1 : st.captures == 0, "%s beam 4 (%s): %ld captures", model, m ? "graph" : "eager", st.captures);
        }
        gr_session_destroy(s);
    }
    free(out);
done:
    npy_free(&prompt);
    npy_free(&greedy);
    npy_free(&beam);
}

/* ==== (c) sampling, (d) eos ====================================================================== */
static void test_sampling_and_eos(const char *model) {
    npy_array prompt = {0}, greedy = {0};
    if (!read_npy(model, "prompt.npy", &prompt) || !read_npy(model, "greedy.npy", &greedy)) goto done;
    int64_t B = prompt.dims[0], P = prompt.dims[1], W = greedy.dims[1], N = W - P, n = B * W;
    gr_session_t s = open_session(model, GR_MODE_EAGER, true);
    if (!s) goto done;
    int64_t *a = calloc((size_t)n, 8), *b = calloc((size_t)n, 8), *c = calloc((size_t)n, 8);
    gr_generate_options o;
    gr_generate_options_init(&o);
    o.max_new_tokens = N;
    o.sample = 1;
    o.seed = 1234;
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, a, NULL));
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, b, NULL));
    CHECK_MSG(mismatches(a, b, n) == 0, "%s: sampling with one seed is not reproducible", model);
    o.seed = 99;
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, c, NULL));
    CHECK_MSG(mismatches(a, c, n) > 0, "%s: seeds 1234 and 99 sampled the same ids", model);
    /* random weights give flat distributions: samples are not the greedy ids */
    CHECK(mismatches(a, greedy.data, n) > 0);
    o.top_k = 1;
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, c, NULL));
    CHECK_MSG(mismatches(c, greedy.data, n) == 0, "%s: top_k = 1 differs from greedy", model);
    o.top_k = 0;
    o.top_p = 1e-6; /* only the most likely token reaches it */
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, c, NULL));
    CHECK_MSG(mismatches(c, greedy.data, n) == 0, "%s: top_p = 1e-6 differs from greedy", model);
    o.top_p = 0.9;
    o.temperature = 0.7;
    o.top_k = 20;
    o.prompt_mode = GR_PROMPT_TOKENS;
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, a, NULL));
    o.prompt_mode = GR_PROMPT_WHOLE;
    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, b, NULL));
    CHECK_MSG(mismatches(a, b, n) == 0, "%s: sampling differs between the prompt modes", model);

    /* eos: the token greedy emits for row 0 at step 3 (the first such step in row 0) */
    const int64_t *g = greedy.data;
    int64_t j = 3;
    int64_t eos = g[P + j];
    for (int64_t k = 0; k < j; k++)
        if (g[P + k] == eos) j = k;
    gr_generate_options e;
    gr_generate_options_init(&e);
    e.max_new_tokens = N;
    e.eos_id = eos;
    CHECK_OK(gr_session_generate(s, &e, prompt.data, B, P, a, NULL));
    for (int64_t r = 0; r < B; r++) {
        /* each row follows greedy up to its first eos, then repeats eos (pad = eos) */
        bool stopped = false;
        for (int64_t t = P; t < W; t++) {
            int64_t want = stopped ? eos : g[r * W + t];
            CHECK_MSG(a[r * W + t] == want, "%s eos %lld: row %lld position %lld is %lld, expected %lld", model, (long long)eos,
                      (long long)r, (long long)t, (long long)a[r * W + t], (long long)want);
            if (g[r * W + t] == eos) stopped = true;
        }
    }
    CHECK(a[P + j] == eos && a[W - 1] == eos);
    e.pad_id = 0;
    gr_generate_stats st;
    CHECK_OK(gr_session_generate(s, &e, prompt.data, B, P, b, &st));
    CHECK(b[P + j] == eos && (j + 1 >= N || b[P + j + 1] == 0));
    free(a);
    free(b);
    free(c);
    gr_session_destroy(s);
done:
    npy_free(&prompt);
    npy_free(&greedy);
}

/* ==== (f) the decode loop on the device ===========================================================
 * The rewritten engine picks greedy tokens and advances its inputs on the device and runs up to
 * steps_per_launch steps per launch (graph mode: one WHILE graph that stops once every row has
 * finished). Its ids, new_tokens and streamed tokens must equal the reference engine's bit for
 * bit: batch 2 and 1, with and without eos (one row finishing early; every row finishing early),
 * several launch sizes, eager and graph. */
static void test_device_loop(const char *model) {
    npy_array prompt = {0}, greedy = {0};
    if (!read_npy(model, "prompt.npy", &prompt) || !read_npy(model, "greedy.npy", &greedy)) goto done;
    int64_t B = prompt.dims[0], P = prompt.dims[1], W = greedy.dims[1], N = W - P;
    const int64_t *g = greedy.data;
    int64_t *want = calloc((size_t)(B * W), 8), *got = calloc((size_t)(B * W), 8);
    static const gr_mode modes[] = {GR_MODE_EAGER, GR_MODE_GRAPH};
    /* eos cases: none; row 0's token at step 2 (that row stops early); with batch 1, row 0's token
     * at step 4 (every row stops early: the loop ends before max_new_tokens) */
    const int64_t eos_cases[3] = {-1, g[P + 2], g[P + 4]};
    for (int m = 0; m < 2; m++) {
        gr_session_t ref = open_session(model, modes[m], true), s = open_session(model, modes[m], true);
        if (!ref || !s) {
            gr_session_destroy(ref);
            gr_session_destroy(s);
            continue;
        }
        for (int bi = 0; bi < 2; bi++) {
            int64_t b = bi ? 1 : B;
            for (int ec = 0; ec < 3; ec++) {
                if (ec == 2 && b != 1) continue;
                static const int64_t per_cases[] = {1, 5, 0, 64};
                for (size_t pc = 0; pc < sizeof per_cases / sizeof per_cases[0]; pc++) {
                    gr_generate_options o;
                    gr_generate_options_init(&o);
                    o.max_new_tokens = N;
                    o.eos_id = eos_cases[ec];
                    o.pad_id = ec == 1 ? 0 : -1;
                    o.engine = GR_ENGINE_REFERENCE;
                    stream_log lr = {0}, lg = {0};
                    o.on_token = on_token;
                    o.user = &lr;
                    gr_generate_stats sr, sg;
                    memset(want, 0xff, (size_t)(B * W) * 8);
                    memset(got, 0xee, (size_t)(B * W) * 8);
                    CHECK_OK(gr_session_generate(ref, &o, prompt.data, b, P, want, &sr));
                    o.engine = GR_ENGINE_REWRITTEN;
                    o.steps_per_launch = per_cases[pc];
                    o.user = &lg;
                    CHECK_OK(gr_session_generate(s, &o, prompt.data, b, P, got, &sg));
                    int64_t bad = mismatches(got, want, b * W);
                    CHECK_MSG(bad == 0, "%s device loop (%s, batch %lld, eos %lld, %lld per launch): %lld of %lld ids differ from the "
                              "reference engine's", model, m ? "graph" : "eager", (long long)b, (long long)o.eos_id,
                              (long long)o.steps_per_launch, (long long)bad, (long long)(b * W));
                    CHECK_MSG(sg.new_tokens == sr.new_tokens && lg.calls == lr.calls && lg.tokens == lr.tokens,
                              "%s device loop: %lld new tokens / %lld calls, reference %lld / %lld", model, (long long)sg.new_tokens,
                              (long long)lg.calls, (long long)sr.new_tokens, (long long)lr.calls);
                    CHECK(!memcmp(lg.seen, lr.seen, sizeof lg.seen));
                    int64_t per = o.steps_per_launch ? o.steps_per_launch : 16;
                    int64_t most = (N - 1 + per - 1) / per;
                    CHECK_MSG(sg.engine == GR_ENGINE_REWRITTEN && sg.launches >= 1 && sg.launches <= most,
                              "%s device loop: engine %d, %ld launches (at most %lld expected)", model, sg.engine, sg.launches,
                              (long long)most);
                    if (ec == 0) CHECK(sg.launches == most && sg.new_tokens == N);
                    if (ec == 2) CHECK_MSG(sg.new_tokens < N, "%s: eos %lld did not stop batch 1 early", model, (long long)o.eos_id);
                }
            }
        }
        gr_session_destroy(ref);
        gr_session_destroy(s);
    }
    free(want);
    free(got);
done:
    npy_free(&prompt);
    npy_free(&greedy);
}

/* ==== (g) sampling on the device ==================================================================
 * The rewritten engine's decode loop samples with the sample op (top-k / top-p thresholds, the
 * counter-based RNG) on the device; the reference engine samples on the host with the same
 * gr_sample_row. On the simulator they must agree token for token: batch 2 and 1, several seeds,
 * top-k only, top-p only, both with a temperature, with eos, 1 and 16 steps per launch, eager and
 * graph; and the rewritten engine must have run its device loop (launches), not the host path. */
static void test_device_sampling(const char *model) {
    npy_array prompt = {0}, greedy = {0};
    if (!read_npy(model, "prompt.npy", &prompt) || !read_npy(model, "greedy.npy", &greedy)) goto done;
    int64_t B = prompt.dims[0], P = prompt.dims[1], W = greedy.dims[1], N = W - P;
    int64_t *want = calloc((size_t)(B * W), 8), *got = calloc((size_t)(B * W), 8), *first = calloc((size_t)(B * W), 8);
    static const gr_mode modes[] = {GR_MODE_EAGER, GR_MODE_GRAPH};
    static const struct {
        int top_k;
        double top_p, temperature;
    } cfg[] = {{20, 1.0, 1.0}, {0, 0.8, 1.0}, {30, 0.9, 0.7}, {0, 1.0, 1.5}};
    static const uint64_t seeds[] = {1, 77, 123456789};
    for (int m = 0; m < 2; m++) {
        gr_session_t ref = open_session(model, modes[m], true), s = open_session(model, modes[m], true);
        if (!ref || !s) {
            gr_session_destroy(ref);
            gr_session_destroy(s);
            continue;
        }
        int64_t compared = 0, differ_seed = 0;
        for (int bi = 0; bi < 2; bi++) {
            int64_t b = bi ? 1 : B;
            for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
                for (size_t si = 0; si < sizeof seeds / sizeof seeds[0]; si++)
                    for (int pc = 0; pc < 2; pc++) {
                        gr_generate_options o;
                        gr_generate_options_init(&o);
                        o.max_new_tokens = N;
                        o.sample = 1;
                        o.top_k = cfg[c].top_k, o.top_p = cfg[c].top_p, o.temperature = cfg[c].temperature;
                        o.seed = seeds[si];
                        o.eos_id = -1;
                        o.engine = GR_ENGINE_REFERENCE;
                        bool eos = c == 3 && si > 0;
                        if (eos) {
                            /* eos: the token this run draws for row 0 at step 2 (with batch 1, generation then ends early) */
                            CHECK_OK(gr_session_generate(ref, &o, prompt.data, b, P, want, NULL));
                            o.eos_id = want[P + 2];
                        }
                        stream_log lr = {0}, lg = {0};
                        o.on_token = on_token;
                        o.user = &lr;
                        gr_generate_stats sr, sg;
                        memset(want, 0xff, (size_t)(B * W) * 8);
                        memset(got, 0xee, (size_t)(B * W) * 8);
                        CHECK_OK(gr_session_generate(ref, &o, prompt.data, b, P, want, &sr));
                        o.engine = GR_ENGINE_REWRITTEN;
                        o.steps_per_launch = pc ? 16 : 1;
                        o.user = &lg;
                        CHECK_OK(gr_session_generate(s, &o, prompt.data, b, P, got, &sg));
                        int64_t bad = mismatches(got, want, b * W);
                        CHECK_MSG(bad == 0, "%s device sampling (%s, batch %lld, top_k %d, top_p %g, temperature %g, seed %llu, eos "
                                  "%lld, %lld per launch): %lld of %lld ids differ from the reference engine's", model,
                                  m ? "graph" : "eager", (long long)b, o.top_k, o.top_p, o.temperature, (unsigned long long)o.seed,
                                  (long long)o.eos_id, (long long)o.steps_per_launch, (long long)bad, (long long)(b * W));
                        CHECK_MSG(sg.engine == GR_ENGINE_REWRITTEN && sg.launches >= 1 && sg.new_tokens == sr.new_tokens &&
                                  lg.calls == lr.calls && !memcmp(lg.seen, lr.seen, sizeof lg.seen),
                                  "%s device sampling: engine %d, %ld launches, %lld / %lld new tokens, %lld / %lld calls", model,
                                  sg.engine, sg.launches, (long long)sg.new_tokens, (long long)sr.new_tokens, (long long)lg.calls,
                                  (long long)lr.calls);
                        if (eos && b == 1)
                            CHECK_MSG(sg.new_tokens <= 3 && sg.new_tokens < N, "%s device sampling: eos %lld (drawn at step 2) left "
                                      "%lld new tokens", model, (long long)o.eos_id, (long long)sg.new_tokens);
                        if (si == 0 && pc == 0 && b == B) memcpy(first, got, (size_t)(B * W) * 8);
                        else if (b == B && o.eos_id < 0) differ_seed += mismatches(got, first, B * W) > 0;
                        compared++;
                    }
        }
        CHECK_MSG(compared == 48 && differ_seed > 0, "%s device sampling: %lld runs, %lld differ from the first seed's", model,
                  (long long)compared, (long long)differ_seed);
        gr_session_destroy(ref);
        gr_session_destroy(s);
    }
    free(want);
    free(got);
    free(first);
done:
    npy_free(&prompt);
    npy_free(&greedy);
}

/* ==== (e) bad bindings and bad calls ============================================================== */
static void test_errors(void) {
    gr_session_t s = open_session("gpt2", GR_MODE_EAGER, false);
    if (!s) return;
    int64_t prompt[4] = {5, 6, 7, 8}, out[8];
    gr_generate_options o;
    gr_generate_options_init(&o);
    o.max_new_tokens = 4;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "no KV-cache state");
    CHECK_ERR(gr_session_bind_state(s, "present.9.key", "past_key_values.0.key"), GR_ERR_INVALID, "output 'present.9.key'");
    CHECK_ERR(gr_session_bind_state(s, "present.0.key", "past.0.key"), GR_ERR_INVALID, "input 'past.0.key' (fed by output 'present.0.key') does not exist");
    CHECK_ERR(gr_session_bind_state(s, "nope", "nada"), GR_ERR_INVALID, "neither output 'nope' nor input 'nada'");
    /* dtype: logits f32 vs input_ids i64 */
    CHECK_ERR(gr_session_bind_state(s, "logits", "input_ids"), GR_ERR_INVALID, "dtypes differ");
    /* rank: logits [batch, seq, vocab] vs past [batch, 4, past, 16] */
    CHECK_ERR(gr_session_bind_state(s, "logits", "past_key_values.0.key"), GR_ERR_INVALID, "ranks differ");
    CHECK_OK(gr_session_bind_state(s, "present.0.key", "past_key_values.0.key"));
    CHECK_ERR(gr_session_bind_state(s, "present.1.key", "past_key_values.0.key"), GR_ERR_INVALID, "already bound");
    CHECK(gr_session_num_states(s) == 1);
    const char *on = NULL, *in = NULL;
    CHECK_OK(gr_session_state_info(s, 0, &on, &in));
    CHECK(on && in && !strcmp(on, "present.0.key") && !strcmp(in, "past_key_values.0.key"));
    CHECK_ERR(gr_session_state_info(s, 1, &on, &in), GR_ERR_INVALID, "out of range");
    /* generation with unbound cache inputs names them */
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "past_key_values.0.value");
    int n = 0;
    CHECK_OK(gr_session_bind_state_auto(s, &n));
    CHECK(n == 3 && gr_session_num_states(s) == 4);
    o.max_new_tokens = 0;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "max_new_tokens is 0");
    o.max_new_tokens = 4;
    o.beams = 2;
    o.sample = 1;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "with sampling");
    o.engine = GR_ENGINE_REWRITTEN;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "with sampling");
    o.engine = GR_ENGINE_AUTO;
    o.sample = 0;
    o.beams = 100000; /* more beams than tokens */
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "beams over a vocabulary of");
    /* more beams than the device kernels take: the rewritten engine says so, auto runs the reference */
    o.beams = 17; /* GR_BEAM_DEVICE_MAX_BEAMS + 1 */
    o.engine = GR_ENGINE_REWRITTEN;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_UNSUPPORTED, "at most 16 beams (17 asked)");
    o.engine = GR_ENGINE_AUTO;
    gr_generate_stats gs;
    CHECK_OK(gr_session_generate(s, &o, prompt, 1, 4, out, &gs));
    CHECK(gs.engine == GR_ENGINE_REFERENCE && gs.new_tokens == 4);
    o.beams = 1;
    o.sample = 1;
    o.temperature = 0;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "temperature");
    o.temperature = 1;
    o.top_p = 1.5;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "top_p");
    o.top_p = 1e-60; /* positive, but 0 as the f32 the sampler reads */
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "top_p 1e-60 must be in (0, 1] (and a positive f32)");
    o.top_p = 1;
    o.temperature = 1e-50;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "temperature 1e-50 must be > 0 (and a positive f32)");
    o.temperature = 1e300;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "temperature");
    o.temperature = 1;
    o.top_k = -2;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "top_k -2 must be >= 0");
    o.top_k = 0;
    o.sample = 0;
    prompt[2] = 211;
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "outside the vocabulary");
    prompt[2] = 7;
    o.logits = "present.0.key";
    CHECK_ERR(gr_session_generate(s, &o, prompt, 1, 4, out, NULL), GR_ERR_INVALID, "is the logits and a state");
    o.logits = NULL;
    /* after errors, the session still generates */
    CHECK_OK(gr_session_generate(s, &o, prompt, 1, 4, out, NULL));
    gr_session_destroy(s);

    /* a shape mismatch on a non-sequence axis: llama's present_k0 [batch, 2, total, 16] against a
     * hand-made graph is not possible here, so pair llama's key with its own value of another
     * layer (same shapes: allowed) and gpt2-style mismatch through dims: the past of llama has
     * 2 heads; bind present -> an input with a different head count does not exist in the
     * fixtures, so build one with the API */
    gr_graph_t g;
    CHECK_OK(gr_graph_create(&g));
    int64_t pd[3] = {-1, 4, -1}, qd[3] = {-1, 2, -1};
    const char *ps[3] = {"batch", NULL, "past"}, *qs[3] = {"batch", NULL, "past"};
    gr_value_t past, q, outv;
    CHECK_OK(gr_graph_add_input(g, "past_x", GR_F32, 3, pd, ps, &past));
    CHECK_OK(gr_graph_add_input(g, "past_y", GR_F32, 3, qd, qs, &q));
    CHECK_OK(gr_graph_add_node(g, "concat", "cat", 2, (gr_value_t[]){past, past}, 1,
                               (gr_attr[]){{.name = "axis", .kind = GR_ATTR_INT, .i = 2}}, 1, &outv));
    CHECK_OK(gr_graph_set_output(g, outv, "present_x"));
    gr_value_t y2;
    CHECK_OK(gr_graph_add_node(g, "neg", "n", 1, &q, 0, NULL, 1, &y2));
    CHECK_OK(gr_graph_set_output(g, y2, "present_z"));
    gr_session_options so;
    gr_session_options_init(&so);
    so.device = GR_DEVICE_SIM;
    gr_session_t s2 = NULL;
    CHECK_OK(gr_session_create(g, &so, &s2));
    if (s2) {
        CHECK_ERR(gr_session_bind_state(s2, "present_x", "past_y"), GR_ERR_INVALID, "dim 1 is 4 in the output but 2 in the input");
        CHECK_ERR(gr_session_bind_state(s2, "present_z", "past_x"), GR_ERR_INVALID, "dim 1 is 2 in the output but 4 in the input");
        CHECK_OK(gr_session_bind_state(s2, "present_x", "past_x"));
        gr_session_destroy(s2);
    }
    gr_graph_destroy(g);
}


/* ==== allocation failures: every one fails cleanly (GR_ERR_NOMEM), leaks nothing, and the session
 * generates afterwards ==================================================================================== */
static gr_session_t fresh_llama_mode(gr_mode mode) {
    gr_graph_t g = load("llama");
    gr_session_options so;
    gr_session_options_init(&so);
    so.device = GR_DEVICE_SIM;
    so.mode = mode;
    gr_session_t t = NULL;
    if (g) CHECK_OK(gr_session_create(g, &so, &t));
    gr_graph_destroy(g);
    return t;
}

static gr_session_t fresh_llama(void) { return fresh_llama_mode(GR_MODE_EAGER); }

static void test_alloc_failures(void) {
    enum { W = 2 + 5 };
    int64_t prompt[2] = {5, 6}, want[W], got[W];
    gr_generate_options o;
    gr_generate_options_init(&o);
    o.max_new_tokens = 5;
    o.beams = 2;
    /* the allocations binding and generating make in a fresh session */
    gr_session_t s = fresh_llama();
    if (!s) return;
    int bound = 0;
    gr_debug_fail_alloc_after(0);
    CHECK_OK(gr_session_bind_state_auto(s, &bound));
    CHECK_OK(gr_session_generate(s, &o, prompt, 1, 2, want, NULL));
    long total = gr_debug_fail_alloc_after(0);
    gr_session_destroy(s);
    int failures = 0;
    for (long n = 1; n <= total; n += n < 150 ? 1 : 89) {
        long live0 = gr_debug_live_allocs();
        gr_session_t t = fresh_llama();
        if (!t) break;
        gr_debug_fail_alloc_after(n);
        bound = 0;
        gr_status st = gr_session_bind_state_auto(t, &bound);
        if (st == GR_OK) st = gr_session_generate(t, &o, prompt, 1, 2, got, NULL);
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) {
            CHECK_MSG(!memcmp(got, want, sizeof want), "allocation %ld failing: wrong ids without an error", n);
        } else {
            failures++;
            CHECK_MSG(st == GR_ERR_NOMEM, "allocation %ld failing gave %s: %s", n, gr_status_name(st), gr_last_error());
            /* the session still works once memory is back */
            if (gr_session_num_states(t) < 4) CHECK_OK(gr_session_bind_state_auto(t, &bound));
            CHECK_OK(gr_session_generate(t, &o, prompt, 1, 2, got, NULL));
            CHECK(!memcmp(got, want, sizeof want));
        }
        gr_session_destroy(t);
        CHECK_MSG(gr_debug_live_allocs() == live0, "allocation %ld failing: %ld allocations leaked", n, gr_debug_live_allocs() - live0);
    }
    CHECK_MSG(total > 100 && failures > 50, "%ld allocations, %d injected failures reported", total, failures);
}

/* The rewritten engine's decode loop under allocation failures: engine creation (the rewrite, the
 * loop pass, the child session, its plan) and the loop's launches fail cleanly with GR_ERR_NOMEM,
 * leak nothing, and the session generates the right ids once memory is back. */
static void test_alloc_failures_loop(gr_mode mode, bool sample) {
    enum { W = 2 + 6 };
    int64_t prompt[2] = {5, 6}, want[W], got[W];
    gr_generate_options o;
    gr_generate_options_init(&o);
    o.max_new_tokens = 6;
    o.sample = sample, o.top_k = 40, o.top_p = 0.9, o.seed = 5;
    o.engine = GR_ENGINE_REWRITTEN;
    o.steps_per_launch = 2;
    gr_session_t s = fresh_llama_mode(mode);
    if (!s) return;
    int bound = 0;
    CHECK_OK(gr_session_bind_state_auto(s, &bound));
    gr_debug_fail_alloc_after(0);
    gr_generate_stats st0;
    CHECK_OK(gr_session_generate(s, &o, prompt, 1, 2, want, &st0));
    long total = gr_debug_fail_alloc_after(0);
    CHECK(st0.launches == 3);
    gr_session_destroy(s);
    int failures = 0;
    for (long n = 1; n <= total; n += n < 60 ? 1 : 97) {
        long live0 = gr_debug_live_allocs();
        gr_session_t t = fresh_llama_mode(mode);
        if (!t) break;
        CHECK_OK(gr_session_bind_state_auto(t, &bound));
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_session_generate(t, &o, prompt, 1, 2, got, NULL);
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) {
            CHECK_MSG(!memcmp(got, want, sizeof want), "allocation %ld failing: wrong ids without an error", n);
        } else {
            failures++;
            CHECK_MSG(st == GR_ERR_NOMEM, "allocation %ld failing gave %s: %s", n, gr_status_name(st), gr_last_error());
            memset(got, 0, sizeof got);
            CHECK_OK(gr_session_generate(t, &o, prompt, 1, 2, got, NULL));
            CHECK_MSG(!memcmp(got, want, sizeof want), "allocation %ld failing, then a generation: wrong ids", n);
        }
        gr_session_destroy(t);
        CHECK_MSG(gr_debug_live_allocs() == live0, "allocation %ld failing: %ld allocations leaked", n, gr_debug_live_allocs() - live0);
    }
    CHECK_MSG(total > 100 && failures > 50, "%ld allocations, %d injected failures reported", total, failures);
}

/* ==== beam search on the device = the reference engine, token for token ===========================
 * Batch 1 and 2, 2 and 4 beams, with no eos, with an eos that some hypotheses reach, and with one
 * that ends every row early (new_tokens < N: the loop stops on the device's done flags); eager and
 * graph mode; one step a launch and several (the done flags read at launch boundaries). The ids,
 * the number of new tokens and the streamed tokens must equal the reference engine's. */
typedef struct {
    int64_t calls;
    uint64_t sum; /* a hash of the streamed tokens */
} beam_log;

static void on_beam_token(void *user, int64_t step, const int64_t *tokens, int64_t n) {
    beam_log *l = user;
    l->calls++;
    for (int64_t i = 0; i < n; i++) l->sum = l->sum * 31 + (uint64_t)tokens[i] + (uint64_t)step;
}

static void test_device_beam(const char *model) {
    npy_array prompt = {0};
    if (!read_npy(model, "prompt.npy", &prompt)) goto done;
    int64_t P = prompt.dims[1], N = 12, W = P + N;
    int64_t *want = calloc((size_t)(2 * W), 8), *got = calloc((size_t)(2 * W), 8);
    int early = 0, cases = 0;
    for (int m = 0; m < 2; m++) {
        gr_session_t s = open_session(model, m ? GR_MODE_GRAPH : GR_MODE_EAGER, true);
        if (!s) continue;
        for (int64_t B = 1; B <= 2; B++) {
            for (int K = 2; K <= 4; K += 2) {
                /* eos: none, then tokens of the reference's own best sequence (reached by some beams) */
                int64_t eos_list[4] = {-1, -1, -1, -1};
                for (int q = 0; q < 4; q++) {
                    gr_generate_options o;
                    gr_generate_options_init(&o);
                    o.max_new_tokens = N;
                    o.beams = K;
                    o.eos_id = eos_list[q];
                    o.length_penalty = q == 3 ? 0.5 : 1.0;
                    o.engine = GR_ENGINE_REFERENCE;
                    beam_log lw = {0}, lg = {0};
                    o.on_token = on_beam_token;
                    o.user = &lw;
                    gr_generate_stats sw, sg;
                    CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, want, &sw));
                    if (q == 0) {
                        eos_list[1] = want[P + 1];
                        eos_list[2] = want[P + 3];
                        eos_list[3] = want[P + 0];
                    }
                    for (int per = 0; per <= 3; per += 3) {
                        o.engine = GR_ENGINE_REWRITTEN;
                        o.steps_per_launch = per;
                        o.user = &lg;
                        lg = (beam_log){0};
                        memset(got, 0xff, (size_t)(2 * W) * 8);
                        CHECK_OK(gr_session_generate(s, &o, prompt.data, B, P, got, &sg));
                        int64_t bad = mismatches(got, want, B * W);
                        CHECK_MSG(bad == 0 && sg.new_tokens == sw.new_tokens,
                                  "%s beams %d batch %lld eos %lld (%s, %lld a launch): %lld ids differ from the reference engine's, "
                                  "%lld new tokens against %lld",
                                  model, K, (long long)B, (long long)o.eos_id, m ? "graph" : "eager", (long long)per, (long long)bad,
                                  (long long)sg.new_tokens, (long long)sw.new_tokens);
                        CHECK_MSG(lg.calls == lw.calls && lg.sum == lw.sum, "%s beams %d: streamed tokens differ", model, K);
                        CHECK(sg.engine == GR_ENGINE_REWRITTEN && sg.launches >= 1);
                        cases++;
                        early += sg.new_tokens < N;
                    }
                }
            }
        }
        gr_session_destroy(s);
    }
    CHECK_MSG(cases == 64, "%s: %d beam cases ran", model, cases);
    CHECK_MSG(early > 0, "%s: no beam case stopped early on eos (the early stop is not tested)", model);
    free(want);
    free(got);
done:
    npy_free(&prompt);
}

int main(void) {
    long live0 = gr_debug_live_allocs();
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        test_reference_ids(models[i]);
        test_sampling_and_eos(models[i]);
        test_device_loop(models[i]);
        test_device_sampling(models[i]);
        test_device_beam(models[i]);
    }
    test_errors();
    test_alloc_failures();
    test_alloc_failures_loop(GR_MODE_EAGER, false);
    test_alloc_failures_loop(GR_MODE_GRAPH, false);
    test_alloc_failures_loop(GR_MODE_GRAPH, true);
    CHECK_MSG(gr_debug_live_allocs() == live0, "%ld allocations leaked", gr_debug_live_allocs() - live0);
    return check_summary("test_generate");
}
