/* tools/generate — `graft generate`: a decode loop over a step model with a KV cache
 * (gr_session_generate), streaming token ids, writing tokens.npy and printing timing and
 * graph statistics. Uses only the public API (graft.h), npy.h and util.h's text escaping. */
#include "generate.h"
#include "graft.h"
#include "npy.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { GEN_EXIT_RUNTIME = 1, GEN_EXIT_USAGE = 2 };

const char graft_generate_usage[] =
    "usage: graft generate MODEL.onnx --prompt IDS.npy --max-new-tokens N [options]\n"
    "\n"
    "Runs a decoder exported as one step with a KV cache (input_ids, optional attention_mask\n"
    "and position_ids, past_* inputs, logits and present_* outputs) in a generation loop:\n"
    "the cache stays in device memory between steps. Prints the new token ids as they arrive\n"
    "(one line per position: 'step J: id per batch row'; with --beams they are known at the\n"
    "end), writes DIR/tokens.npy (int64 [batch, prompt + N], the prompt first) and prints\n"
    "the prompt time, ms per token, tokens/s and graph statistics.\n"
    "\n"
    "options:\n"
    "  --prompt FILE.npy      prompt ids, int64 [batch, prompt_len]\n"
    "  --max-new-tokens N     positions to generate (> 0)\n"
    "  --beams K              beam search of width K (Hugging Face's, do_sample=False,\n"
    "                         early stopping); default 1: greedy or sampling\n"
    "  --length-penalty F     beam search: finished scores are sum(logprob) / len ** F (1.0)\n"
    "  --eos ID               end-of-sequence id: a row that emits it emits --pad (default\n"
    "                         ID) from then on; the loop stops when every row has\n"
    "  --pad ID               the id after eos (default: the eos id)\n"
    "  --sample               sample instead of argmax: --temperature T (1.0), then\n"
    "                         --top-k K (0 = off), then --top-p P (1.0 = off), drawn with\n"
    "                         --seed S (0; graft's counter-based RNG: reproducible)\n"
    "  --engine auto|reference|rewritten  rewritten: the KV cache rewritten into max-length\n"
    "                         buffers written in place, one step shape and one graph for\n"
    "                         every position, tokens picked on the device (greedy,\n"
    "                         sampling, beam search up to 16 beams: caches reordered there);\n"
    "                         reference: one binding per position; auto (default): the\n"
    "                         rewritten one where the model allows it and it agrees with\n"
    "                         the reference on the prompt\n"
    "  --steps-per-launch K   rewritten engine: the step picks its token and advances\n"
    "                         its inputs on the device; up to K steps per launch (graph\n"
    "                         mode: one graph with a WHILE node stopping at eos, or when\n"
    "                         every beam search row is done), one copy per launch (16)\n"
    "  --prompt-mode auto|whole|tokens  the prompt as one step (whole; needs a symbolic\n"
    "                         seq), one step per token (tokens), or whole where the export\n"
    "                         allows (auto, default); both give the same ids\n"
    "  --profile              after generating, each kernel of one decode step timed on\n"
    "                         its own (as graft bench --profile), slowest first\n"
    "  --state PRESENT=PAST   bind output PRESENT to input PAST for the next step\n"
    "                         (repeatable); without it the usual names pair themselves\n"
    "                         (present.N.key -> past_key_values.N.key, present_kN ->\n"
    "                         past_kN, present.N -> past.N, ...: include/graft.h)\n"
    "  --max-length L         the longest sequence (prompt + new tokens): the range of the\n"
    "                         cache's sequence symbol becomes 0..L (with --arena max, one\n"
    "                         arena for the longest step); prompt + N above L is an error\n"
    "  --output-dir DIR       where tokens.npy goes (default out/, created if missing)\n"
    "  --quiet                no token lines\n"
    "  --device sim|cuda|auto, --mode eager|graph|auto, --arena per-shape|max,\n"
    "  --precision bf16|f16, --cache-dir DIR, --max-rerecords N, --verbose: as for graft run\n";

/* ==== messages ====================================================================================== */
static void gen_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void gen_errorf(const char *fmt, ...) {
    char raw[4096], esc[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    gr_escape_text(esc, sizeof esc, raw, true);
    fprintf(stderr, "graft: %s\n", esc);
}

static int gen_api_fail(gr_status st, const char *context) {
    const char *msg = gr_last_error();
    if (!msg || !*msg) msg = gr_status_name(st);
    if (context && !strstr(msg, context)) gen_errorf("%s: %s", context, msg);
    else gen_errorf("%s", msg);
    return GEN_EXIT_RUNTIME;
}

/* ==== options ======================================================================================= */
typedef struct {
    const char *model, *prompt, *out_dir, *cache_dir;
    int64_t max_new, beams, eos, pad, top_k, max_length, steps_per_launch;
    double top_p, temperature, length_penalty;
    uint64_t seed;
    bool sample, quiet, verbose, have_max_new, sampling_opt, profile;
    int device, mode, arena, precision, prompt_mode, max_rerecords, engine;
    const char **state; /* PRESENT=PAST */
    int n_state;
} gen_opts;

static bool parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static bool parse_f64(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static int parse(int argc, char **argv, gen_opts *o) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(graft_generate_usage, stdout);
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            if (o->model) {
                gen_errorf("generate: unexpected argument '%s' (one MODEL only; see graft generate --help)", a);
                return GEN_EXIT_USAGE;
            }
            o->model = a;
            continue;
        }
        /* flags without a value */
        if (!strcmp(a, "--sample")) {
            o->sample = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(a, "--profile")) {
            o->profile = true;
            continue;
        }
        if (!strcmp(a, "--verbose")) {
            o->verbose = true;
            continue;
        }
        static const char *const valued[] = {"--prompt", "--max-new-tokens", "--beams", "--eos", "--pad", "--top-k", "--top-p",
                                             "--temperature", "--seed", "--output-dir", "--device", "--mode", "--arena",
                                             "--precision", "--cache-dir", "--prompt-mode", "--state", "--max-length",
                                             "--length-penalty", "--max-rerecords", "--engine", "--steps-per-launch"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
        if (!known) {
            gen_errorf("generate: unknown option '%s' (see graft generate --help)", a);
            return GEN_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            gen_errorf("generate: %s needs a value", a);
            return GEN_EXIT_USAGE;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--output-dir")) o->out_dir = v;
        else if (!strcmp(a, "--cache-dir")) o->cache_dir = v;
        else if (!strcmp(a, "--max-new-tokens")) ok = parse_i64(v, &o->max_new), o->have_max_new = true;
        else if (!strcmp(a, "--beams")) ok = parse_i64(v, &o->beams) && o->beams >= 1 && o->beams <= 1024;
        else if (!strcmp(a, "--eos")) ok = parse_i64(v, &o->eos) && o->eos >= 0;
        else if (!strcmp(a, "--pad")) ok = parse_i64(v, &o->pad) && o->pad >= 0;
        else if (!strcmp(a, "--top-k")) ok = parse_i64(v, &o->top_k) && o->top_k >= 0 && o->top_k <= INT32_MAX, o->sampling_opt = true;
        else if (!strcmp(a, "--top-p")) ok = parse_f64(v, &o->top_p) && o->top_p > 0 && o->top_p <= 1, o->sampling_opt = true;
        else if (!strcmp(a, "--temperature")) ok = parse_f64(v, &o->temperature) && o->temperature > 0, o->sampling_opt = true;
        else if (!strcmp(a, "--length-penalty")) ok = parse_f64(v, &o->length_penalty);
        else if (!strcmp(a, "--max-length")) ok = parse_i64(v, &o->max_length) && o->max_length > 0;
        else if (!strcmp(a, "--steps-per-launch")) ok = parse_i64(v, &o->steps_per_launch) && o->steps_per_launch > 0;
        else if (!strcmp(a, "--max-rerecords")) {
            int64_t n;
            ok = parse_i64(v, &n) && n > 0 && n <= INT32_MAX;
            o->max_rerecords = ok ? (int)n : 0;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            ok = !errno && end != v && !*end && v[0] != '-';
            o->sampling_opt = true;
        } else if (!strcmp(a, "--state")) {
            ok = strchr(v, '=') && strchr(v, '=') != v && strchr(v, '=')[1];
            if (ok) o->state[o->n_state++] = v;
        } else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "sim")) o->device = GR_DEVICE_SIM;
            else if (!strcmp(v, "cuda")) o->device = GR_DEVICE_CUDA;
            else if (!strcmp(v, "auto")) o->device = GR_DEVICE_AUTO;
            else ok = false;
        } else if (!strcmp(a, "--mode")) {
            if (!strcmp(v, "eager")) o->mode = GR_MODE_EAGER;
            else if (!strcmp(v, "graph")) o->mode = GR_MODE_GRAPH;
            else if (!strcmp(v, "auto")) o->mode = GR_MODE_AUTO;
            else ok = false;
        } else if (!strcmp(a, "--arena")) {
            if (!strcmp(v, "per-shape")) o->arena = GR_ARENA_PER_SHAPE;
            else if (!strcmp(v, "max")) o->arena = GR_ARENA_MAX_SHAPE;
            else ok = false;
        } else if (!strcmp(a, "--engine")) {
            if (!strcmp(v, "auto")) o->engine = GR_ENGINE_AUTO;
            else if (!strcmp(v, "reference")) o->engine = GR_ENGINE_REFERENCE;
            else if (!strcmp(v, "rewritten")) o->engine = GR_ENGINE_REWRITTEN;
            else ok = false;
        } else if (!strcmp(a, "--prompt-mode")) {
            if (!strcmp(v, "auto")) o->prompt_mode = GR_PROMPT_AUTO;
            else if (!strcmp(v, "whole")) o->prompt_mode = GR_PROMPT_WHOLE;
            else if (!strcmp(v, "tokens")) o->prompt_mode = GR_PROMPT_TOKENS;
            else ok = false;
        } else if (!strcmp(a, "--precision")) {
            ok = gr_precision_parse(v, &o->precision) == GR_OK;
        }
        if (!ok) {
            static const char *const hints[][2] = {
                {"--max-new-tokens", "an integer"}, {"--beams", "an integer from 1 to 1024"}, {"--eos", "a token id >= 0"},
                {"--pad", "a token id >= 0"}, {"--top-k", "an integer >= 0"}, {"--top-p", "a number in (0, 1]"},
                {"--temperature", "a number > 0"}, {"--seed", "an integer >= 0"}, {"--device", "sim, cuda or auto"},
                {"--mode", "eager, graph or auto"}, {"--arena", "per-shape or max"}, {"--prompt-mode", "auto, whole or tokens"}, {"--engine", "auto, reference or rewritten"},
                {"--precision", "bf16 or f16"}, {"--state", "PRESENT=PAST"}, {"--max-length", "an integer > 0"},
                {"--steps-per-launch", "an integer > 0"},
                {"--length-penalty", "a finite number"}, {"--max-rerecords", "an integer > 0"}};
            const char *hint = "a valid value";
            for (size_t k = 0; k < sizeof hints / sizeof hints[0]; k++)
                if (!strcmp(a, hints[k][0])) hint = hints[k][1];
            gen_errorf("generate: %s: bad value '%s' (expected %s)", a, v, hint);
            return GEN_EXIT_USAGE;
        }
    }
    if (!o->model) {
        gen_errorf("generate: missing MODEL (usage: graft generate MODEL --prompt IDS.npy --max-new-tokens N; see --help)");
        return GEN_EXIT_USAGE;
    }
    if (!o->prompt) {
        gen_errorf("generate: --prompt IDS.npy is required (int64 [batch, prompt_len])");
        return GEN_EXIT_USAGE;
    }
    if (!o->have_max_new) {
        gen_errorf("generate: --max-new-tokens N is required");
        return GEN_EXIT_USAGE;
    }
    if (o->max_new <= 0) {
        gen_errorf("generate: --max-new-tokens must be > 0 (got %lld)", (long long)o->max_new);
        return GEN_EXIT_USAGE;
    }
    if (o->beams > 1 && o->sample) {
        gen_errorf("generate: --beams %lld with --sample: beam search is deterministic here (sampling beams is not supported)",
                   (long long)o->beams);
        return GEN_EXIT_USAGE;
    }
    if (o->sampling_opt && !o->sample) {
        gen_errorf("generate: --top-k, --top-p, --temperature and --seed apply to --sample only");
        return GEN_EXIT_USAGE;
    }
    return -1;
}

/* ==== run =========================================================================================== */
typedef struct {
    bool quiet;
} stream_ctx;

static void on_token(void *user, int64_t step, const int64_t *tokens, int64_t n) {
    stream_ctx *c = user;
    if (c->quiet) return;
    printf("step %lld:", (long long)step);
    for (int64_t i = 0; i < n; i++) printf(" %lld", (long long)tokens[i]);
    putchar('\n');
    fflush(stdout);
}

/* --max-length L: bounds for every symbolic dim, so that --arena max can plan one arena for the
 * longest step: the batch of input_ids gets 1..rows (batch x beams), its seq 1..prompt_len, a
 * plain symbol on an axis of a past* input 0..L (the prompt step has no past), any other symbol
 * without an upper bound 1..L (total = past + seq). */
static int declare_max_length(gr_graph_t g, int64_t L, int64_t rows, int64_t prompt_len) {
    const char *batch = NULL, *seq = NULL;
    for (int i = 0; i < gr_graph_num_inputs(g); i++) {
        gr_value_info vi;
        if (gr_graph_input_info(g, i, &vi) == GR_OK && !strcmp(vi.name, "input_ids") && vi.ndim == 2)
            batch = vi.sym_names[0], seq = vi.sym_names[1];
    }
    int declared = 0;
    for (int i = 0; i < gr_graph_num_inputs(g); i++) {
        gr_value_info vi;
        if (gr_graph_input_info(g, i, &vi) != GR_OK || !strstr(vi.name, "past")) continue;
        for (int d = 1; d < vi.ndim; d++) {
            const char *sym = vi.sym_names[d];
            if (!sym || (batch && !strcmp(sym, batch)) || strpbrk(sym, " +-*/(),")) continue;
            gr_status st = gr_graph_set_dim_range(g, sym, 0, L);
            if (st != GR_OK) return gen_api_fail(st, "--max-length");
            declared++;
        }
    }
    if (!declared) {
        gen_errorf("generate: --max-length: no input named past* with a symbolic sequence axis to bound");
        return GEN_EXIT_USAGE;
    }
    for (int k = 0; k < gr_graph_num_dims(g); k++) {
        gr_dim_info di;
        if (gr_graph_dim_info(g, k, &di) != GR_OK || di.hi != INT64_MAX) continue;
        int64_t lo = di.lo, hi = L;
        if (batch && !strcmp(di.name, batch)) hi = rows;
        else if (seq && !strcmp(di.name, seq)) hi = prompt_len;
        if (hi < lo) hi = lo;
        gr_status st = gr_graph_set_dim_range(g, di.name, lo, hi);
        if (st != GR_OK) return gen_api_fail(st, "--max-length");
    }
    return 0;
}

static int make_dir(const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        gen_errorf("generate: cannot create output directory '%s': %s", dir, strerror(errno));
        return GEN_EXIT_RUNTIME;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        gen_errorf("generate: output path '%s' is not a directory", dir);
        return GEN_EXIT_RUNTIME;
    }
    return 0;
}

static void print_bytes(const char *what, size_t b) {
    if (b >= (1u << 20)) printf("  %-22s %.2f MiB\n", what, (double)b / 1048576.0);
    else printf("  %-22s %.1f KiB\n", what, (double)b / 1024.0);
}

static int run_generate(const gen_opts *o) {
    char err[NPY_ERR_LEN];
    npy_array prompt = {0};
    if (npy_read(o->prompt, &prompt, err) != 0) {
        gen_errorf("%s", err);
        return GEN_EXIT_RUNTIME;
    }
    int code = 0;
    gr_graph_t g = NULL;
    gr_session_t s = NULL;
    int64_t *tokens = NULL;
    if (prompt.dtype != GR_I64 || prompt.ndim != 2 || prompt.dims[0] <= 0 || prompt.dims[1] <= 0) {
        char shape[128] = "";
        for (int d = 0; d < prompt.ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "", (long long)prompt.dims[d]);
        gen_errorf("%s: the prompt must be int64 [batch, prompt_len] with both > 0, got %s [%s]", o->prompt, gr_dtype_name(prompt.dtype),
                   shape);
        code = GEN_EXIT_RUNTIME;
        goto out;
    }
    int64_t B = prompt.dims[0], P = prompt.dims[1], W = P + o->max_new;
    if (o->max_length > 0 && W > o->max_length) {
        gen_errorf("generate: prompt %lld + %lld new tokens = %lld exceeds --max-length %lld", (long long)P, (long long)o->max_new,
                   (long long)W, (long long)o->max_length);
        code = GEN_EXIT_USAGE;
        goto out;
    }
    gr_status st = gr_graph_load(o->model, &g);
    if (st != GR_OK) {
        code = gen_api_fail(st, o->model);
        goto out;
    }
    if (o->max_length > 0 && (code = declare_max_length(g, o->max_length, B * o->beams, P)) != 0) goto out;
    gr_session_options so;
    gr_session_options_init(&so);
    if (o->device >= 0) so.device = (gr_device_kind)o->device;
    if (o->mode >= 0) so.mode = (gr_mode)o->mode;
    if (o->arena >= 0) so.arena_policy = o->arena;
    if (o->max_rerecords > 0) so.max_rerecords = o->max_rerecords;
    so.precision = o->precision;
    so.cache_dir = o->cache_dir;
    so.verbose = o->verbose;
    if ((st = gr_session_create(g, &so, &s)) != GR_OK) {
        code = gen_api_fail(st, o->model);
        goto out;
    }
    for (int k = 0; k < o->n_state; k++) {
        char pair[1024];
        snprintf(pair, sizeof pair, "%s", o->state[k]);
        char *eq = strchr(pair, '=');
        *eq = 0;
        if ((st = gr_session_bind_state(s, pair, eq + 1)) != GR_OK) {
            code = gen_api_fail(st, "--state");
            goto out;
        }
    }
    if (!o->n_state) {
        int n = 0;
        if ((st = gr_session_bind_state_auto(s, &n)) != GR_OK) {
            code = gen_api_fail(st, o->model);
            goto out;
        }
        if (n == 0) {
            gen_errorf("%s: no KV-cache state found: bind it with --state PRESENT=PAST (names tried: every output named "
                       "*present* against the input with 'present' replaced by 'past_key_values' or 'past')", o->model);
            code = GEN_EXIT_RUNTIME;
            goto out;
        }
    }
    fprintf(stderr, "graft: %s on %s, state:", o->model, gr_session_device_name(s));
    for (int k = 0; k < gr_session_num_states(s); k++) {
        const char *on, *in;
        if (gr_session_state_info(s, k, &on, &in) == GR_OK) {
            char a[256], b[256];
            gr_escape_text(a, sizeof a, on, false);
            gr_escape_text(b, sizeof b, in, false);
            fprintf(stderr, "%s %s -> %s", k ? "," : "", a, b);
        }
    }
    fputc('\n', stderr);
    tokens = calloc((size_t)(B * W), sizeof(int64_t));
    if (!tokens) {
        gen_errorf("generate: out of memory for %lld x %lld tokens", (long long)B, (long long)W);
        code = GEN_EXIT_RUNTIME;
        goto out;
    }
    gr_generate_options go;
    gr_generate_options_init(&go);
    go.max_new_tokens = o->max_new;
    go.beams = (int)o->beams;
    go.eos_id = o->eos;
    go.pad_id = o->pad;
    go.sample = o->sample;
    go.top_k = (int)o->top_k;
    go.top_p = o->top_p;
    go.temperature = o->temperature;
    go.seed = o->seed;
    go.length_penalty = o->length_penalty;
    go.prompt_mode = o->prompt_mode;
    go.engine = o->engine;
    go.max_length = o->max_length;
    go.steps_per_launch = o->steps_per_launch;
    stream_ctx sc = {.quiet = o->quiet};
    go.on_token = on_token;
    go.user = &sc;
    gr_generate_stats gs;
    if ((st = gr_session_generate(s, &go, prompt.data, B, P, tokens, &gs)) != GR_OK) {
        code = gen_api_fail(st, o->model);
        goto out;
    }
    if ((code = make_dir(o->out_dir)) != 0) goto out;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokens.npy", o->out_dir);
    int64_t dims[2] = {B, W};
    if (npy_write(path, GR_I64, 2, dims, tokens, (size_t)(B * W) * sizeof(int64_t), err) != 0) {
        gen_errorf("%s", err);
        code = GEN_EXIT_RUNTIME;
        goto out;
    }
    gr_run_stats rs;
    gr_kernel_stats ks;
    gr_session_stats(s, &rs);
    gr_session_kernel_stats(s, &ks);
    printf("generated %lld x %lld tokens (%s%s), prompt %lld tokens in %lld step%s\n", (long long)B, (long long)gs.new_tokens,
           o->beams > 1 ? "beam search" : o->sample ? "sampling" : "greedy", gs.new_tokens < o->max_new ? ", every row hit eos" : "",
           (long long)P, (long long)gs.prompt_steps, gs.prompt_steps == 1 ? "" : "s");
    printf("  %-22s %s\n", "engine",
           gs.engine == GR_ENGINE_REWRITTEN ? "rewritten (one step shape, cache in place)" : "reference (one binding per position)");
    if (gs.engine == GR_ENGINE_REWRITTEN) printf("  %-22s %ld\n", "rewritten-step graphs", gs.captures);
    if (gs.engine == GR_ENGINE_REWRITTEN)
        printf("  %-22s %ld%s\n", "device-loop launches", gs.launches, gs.launches ? "" : " (the host drove every step)");
    printf("  %-22s %.3f ms\n", "prompt", gs.prompt_us / 1e3);
    printf("  %-22s %.3f ms (%lld steps)\n", "ms per token", gs.ms_per_token, (long long)gs.decode_steps);
    printf("  %-22s %.1f (batch x new tokens / total time)\n", "tokens/s", gs.tokens_per_s);
    printf("  %-22s %ld\n", "plans (bindings)", gs.plans);
    printf("  %-22s %ld captured, %ld live, %ld instantiations, %ld evictions\n", "graphs", rs.captures, rs.graphs_live,
           rs.instantiations, rs.evictions);
    print_bytes("graph memory", rs.graph_bytes);
    print_bytes("graph memory, peak", rs.graph_bytes_peak);
    print_bytes("device memory", rs.device_bytes);
    printf("  %-22s %ld prepared, %ld compiled, %ld modules loaded\n", "kernels", ks.prepared, ks.compiled, ks.modules_loaded);
    printf("wrote %s (int64 [%lld, %lld])\n", path, (long long)B, (long long)W);
    if (o->profile) {
        char *text = NULL;
        double sum = 0;
        gr_status pst = gr_session_generate_profile(s, &text, &sum, NULL);
        if (pst != GR_OK) {
            gen_errorf("generate: --profile: %s", gr_last_error());
            code = GEN_EXIT_RUNTIME;
        } else {
            printf("profile of one decode step (%s engine):\n%s", gs.engine == GR_ENGINE_REWRITTEN ? "rewritten" : "reference", text);
        }
        gr_free_string(text);
    }
out:
    free(tokens);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    npy_free(&prompt);
    return code;
}

int graft_cmd_generate(int argc, char **argv) {
    gen_opts o = {.out_dir = "out", .eos = -1, .pad = -1, .beams = 1, .top_p = 1.0, .temperature = 1.0, .length_penalty = 1.0,
                  .device = -1, .mode = -1, .arena = -1};
    o.state = calloc((size_t)argc, sizeof *o.state);
    if (!o.state) {
        gen_errorf("out of memory");
        return GEN_EXIT_RUNTIME;
    }
    int code = parse(argc, argv, &o);
    if (code < 0) code = run_generate(&o);
    free(o.state);
    return code;
}
