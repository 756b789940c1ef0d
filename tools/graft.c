/* tools/graft — the `graft` command line: run, bench, dump, explain.
 *
 * Uses only the public API (graft.h) plus util.h's dtype helpers for loading
 * and storing elements of any dtype. Exit codes: 0 success, 1 runtime failure
 * (bad model, bad data, device error), 2 usage error (bad arguments).
 * Every error is one line `graft: <message>` on stderr. */
#include "generate.h"
#include "graft.h"
#include "npy.h"
#include "util/util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define GRAFT_CLI_VERSION "0.1.0"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* ==== messages ======================================================================= */
/* Everything graft prints goes through gr_escape_text: names come from the model, and a model
 * must not be able to send escape sequences to the terminal. Messages may span lines (a
 * compiler log, a dump); a name never does, so show() also escapes '\n' and '\t' in names. */
static void put_escaped(FILE *f, const char *text, bool multiline) {
    char buf[4096];
    if (!text) text = "";
    size_t need = gr_escape_text(buf, sizeof buf, text, multiline);
    char *big = need < sizeof buf ? NULL : malloc(need + 1);
    if (big) gr_escape_text(big, need + 1, text, multiline);
    fputs(big ? big : buf, f); /* cut short only when out of memory */
    free(big);
}

static void print_text(const char *text);

static void vmessage(const char *prefix, const char *fmt, va_list ap) {
    char raw[8192];
    vsnprintf(raw, sizeof raw, fmt, ap);
    fputs(prefix, stderr);
    put_escaped(stderr, raw, true);
    fputc('\n', stderr);
}

static void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void errorf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("graft: ", fmt, ap);
    va_end(ap);
}

static void notef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool quiet_notes; /* set while bench prepares extra bindings */
static void notef(const char *fmt, ...) {
    if (quiet_notes) return;
    va_list ap;
    va_start(ap, fmt);
    vmessage("graft: note: ", fmt, ap);
    va_end(ap);
}

/* A name (from the model or argv; len bytes, or all of it when len is SIZE_MAX) escaped for one
 * line of a message, cut with "..." past ~500 bytes. Returns one of 8 rotating buffers, so a
 * message may show up to 8 names. */
static const char *show_n(const char *name, size_t len) {
    static char ring[8][512], raw[2048];
    static int next;
    char *buf = ring[next++ % 8];
    if (!name) name = "";
    size_t n = len == SIZE_MAX ? strlen(name) : strnlen(name, len);
    bool cut = n >= sizeof raw;
    if (cut) n = sizeof raw - 1;
    memcpy(raw, name, n);
    raw[n] = 0;
    if (gr_escape_text(buf, sizeof ring[0] - 3, raw, false) >= sizeof ring[0] - 3 || cut) strcat(buf, "...");
    return buf;
}
static const char *show(const char *name) { return show_n(name, SIZE_MAX); }

/* Reports a failed API call with the library's message (escaped there already). */
static int api_fail(gr_status st, const char *context) {
    const char *msg = gr_last_error();
    if (!msg || !*msg) msg = gr_status_name(st);
    char ctx[1024];
    if (context) gr_escape_text(ctx, sizeof ctx, context, true);
    /* the library's messages usually name the file already */
    if (context && !strstr(msg, ctx)) errorf("%s: %s", ctx, msg);
    else errorf("%s", msg);
    return EXIT_RUNTIME;
}

/* Writes s as a JSON string: quotes, backslashes and control characters (C0, DEL, C1) escaped;
 * a byte that is not UTF-8 becomes U+FFFD, so the file stays valid JSON whatever a path holds. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const char *c = s ? s : ""; *c;) {
        unsigned char u = (unsigned char)*c;
        int n = gr_utf8_seq_len(c);
        if (n == 0) {
            fputs("\\ufffd", f);
            c++;
        } else if (n == 2 && u == 0xc2 && (unsigned char)c[1] < 0xa0) {
            fprintf(f, "\\u%04x", (unsigned char)c[1]);
            c += 2;
        } else if (n > 1) {
            fwrite(c, 1, (size_t)n, f);
            c += n;
        } else {
            switch (u) {
            case '"': fputs("\\\"", f); break;
            case '\\': fputs("\\\\", f); break;
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            default:
                if (u < 0x20 || u == 0x7f) fprintf(f, "\\u%04x", u);
                else fputc(u, f);
            }
            c++;
        }
    }
    fputc('"', f);
}

/* ==== help ============================================================================= */
static const char usage_main[] =
    "usage: graft <command> [options]\n"
    "\n"
    "commands:\n"
    "  run      run a model once and write its outputs as .npy files\n"
    "  bench    run a model repeatedly and print timing and launch statistics\n"
    "  dump     print the IR after each compiler pass\n"
    "  explain  print the compiled plan (segments, graph breaks and their causes)\n"
    "  generate run a decoder step model with a KV cache in a generation loop (greedy,\n"
    "           sampling, beam search) and write the token ids\n"
    "\n"
    "  graft <command> --help   options of one command\n"
    "  graft --version          print the version\n"
    "\n"
    "MODEL is a .gir (graft text IR) or .onnx file.\n"
    "exit status: 0 ok, 1 runtime failure (model, data, device), 2 usage error.\n";

static const char usage_inputs[] =
    "  --input NAME=FILE.npy  bind input NAME from a .npy file (repeatable); dtype and\n"
    "                         shape come from the file header and bind symbolic dims;\n"
    "                         a bf16 input also accepts an f32 file (rounded to bf16)\n"
    "  --dim NAME=VALUE       bind the symbolic dim NAME (repeatable)\n"
    "  --dim-range NAME=LO:HI declare the range of symbolic dim NAME (default 1:, i.e.\n"
    "                         >= 1); a binding outside it is an error (repeatable)\n"
    "  --arena per-shape|max  activation memory of a model with symbolic dims: an arena\n"
    "                         per binding (default), or one planned for the largest\n"
    "                         binding of the declared ranges, shared by all bindings\n"
    "  --seed N               seed of generated inputs (default 0); inputs not given are\n"
    "                         generated: floats uniform in [-1,1), integers in [0,10),\n"
    "                         bools 0/1, and a note names each one on stderr\n"
    "  --device sim|cuda|auto device (default: the library's, auto = cuda when\n"
    "                         available, else sim)\n"
    "  --mode eager|graph|auto  deployment mode (default: the library's; auto =\n"
    "                         each segment timed eager and as a graph in its first\n"
    "                         runs, the faster kept)\n"
    "  --shapes exact|pad|generic|update|auto  graph mode over many shapes: how the\n"
    "                         bindings of symbolic dims share CUDA graphs (default:\n"
    "                         auto in graph mode for a model with symbolic dims,\n"
    "                         exact otherwise; exact: one graph per binding; update:\n"
    "                         one exec per segment, each binding's capture applied\n"
    "                         to it with cudaGraphExecUpdate; pad: rounded up to\n"
    "                         capture sizes where proven row-independent (explain\n"
    "                         says why not); auto (graph mode): pad where proven,\n"
    "                         then per segment exact, update or generic, measured\n"
    "                         once and re-chosen as the calls per binding grow;\n"
    "                         generic: one graph per power-of-two bucket, kernels\n"
    "                         reading their dims from a device table, where proven\n"
    "                         (explain says why not))\n"
    "  --capture-range NAME=LO:HI  graph mode: capture every binding of dim NAME in\n"
    "                         LO..HI ahead of time, largest first, with a progress\n"
    "                         line and the time it took (default: lazily, on first use)\n"
    "  --graph-memory-mb N    graph mode: device memory all bindings' graphs may hold\n"
    "                         (MiB, fractions allowed; default no limit); the least\n"
    "                         recently used bindings' graphs are evicted, re-captured\n"
    "                         when their binding comes back\n"
    "  --cache-dir DIR        graft's cache directory: kernel cache (CUDA) and mode\n"
    "                         auto's saved decisions (default $XDG_CACHE_HOME/graft or\n"
    "                         ~/.cache/graft; the simulator saves decisions only here)\n"
    "  --verbose              progress and notes from the runtime on stderr\n"
    "  --no-plan-templates    every new binding runs the whole pass pipeline (no plan\n"
    "                         instantiated from a template of its class of bindings)\n"
    "  --no-fuse-attention    leave attention unfused (matmul, softmax, matmul: the\n"
    "                         reference path) instead of one fused attention kernel\n"
    "  --fuse-attention-f32   fuse f32 attention of any head dim (default: f16/bf16, and\n"
    "                         f32 of head dims 64 and 128; the generic f32 kernel of\n"
    "                         other head dims is slower than unfused)\n"
    "  --no-fuse-epilogue     leave the GELU (tanh) or ReLU after a matmul unfused (an\n"
    "                         elementwise kernel: the reference path) instead of the\n"
    "                         matmul's cuBLASLt epilogue\n"
    "  --precision bf16|f16   run an f32 model in half precision: weights converted once\n"
    "                         at load, matmuls and attention in bf16/f16 (f32 accumulation),\n"
    "                         softmax, norms, reductions, exp/log/pow/erf in f32; inputs and\n"
    "                         outputs keep their dtypes (docs/precision.md)\n"
    "  --tp N                 tensor parallelism: the model split over N devices (GPUs 0..N-1\n"
    "                         with NCCL, or N simulated devices); explain lists each split\n"
    "                         and each collective\n";

static const char usage_run[] =
    "usage: graft run MODEL [options]\n"
    "\n"
    "Runs MODEL once, writes each output as DIR/<name>.npy (characters outside\n"
    "[A-Za-z0-9_.-] in a name become '_'; bf16 outputs are written as f32) and\n"
    "prints one line per output: name, dtype, shape, min/max/mean, an FNV-1a\n"
    "checksum of the output's bytes and the file it went to. Names that map to\n"
    "the same file (also ignoring case) get a suffix _2, _3, ... in order, with a note.\n"
    "\n"
    "options:\n"
    "  --output-dir DIR       where outputs go (default: out/, created if missing)\n"
    "  --save-inputs DIR      also write the inputs used (given or generated) as DIR/<name>.npy\n"
    "                         (named as outputs are; in the output dir, outputs come second)\n";

static const char usage_bench[] =
    "usage: graft bench MODEL [options]\n"
    "\n"
    "Runs MODEL --warmup times, then --iters times, and prints the time per\n"
    "iteration from the runtime's statistics (simulated clock on the sim device,\n"
    "wall clock on CUDA), kernels per run, kernels in graphs, copies and bytes\n"
    "copied per run, arena and weight bytes and segments, and the time to load\n"
    "and to compile the model (--verbose: each compile phase, on stderr).\n"
    "\n"
    "options:\n"
    "  --iters N              timed iterations per repeat (default 10, N > 0)\n"
    "  --warmup N             untimed iterations first (default 2, N >= 0)\n"
    "  --repeats N            timed repeats; the median is reported (default 1)\n"
    "  --json FILE            also write the results as JSON to FILE\n"
    "  --profile              also time every kernel with device events (one eager run)\n"
    "                         and sum the time per kernel class (matmul, attention,\n"
    "                         elementwise, norm/reduction, copy/movement, other)\n"
    "\n"
    "Runs are enqueued back to back and waited for once per repeat, as framework\n"
    "benchmarks do; inputs are set once, so their placeholders are not refilled.\n";

static const char usage_dump[] =
    "usage: graft dump MODEL [--dim NAME=VALUE ...]\n"
    "\n"
    "Prints the IR of MODEL after each compiler pass. A model with symbolic dims\n"
    "needs a value for each (the specialize pass substitutes them).\n"
    "\n"
    "options:\n"
    "  --dim NAME=VALUE       bind the symbolic dim NAME (repeatable)\n"
    "  --dim-range NAME=LO:HI declare the range of symbolic dim NAME (repeatable)\n"
    "  --no-fuse-attention    leave attention unfused (no attention pass)\n"
    "  --fuse-attention-f32   fuse f32 attention of any head dim (default: f16/bf16, f32 d64/d128)\n"
    "  --no-fuse-epilogue     leave activations after matmuls unfused (no epilogue pass)\n"
    "  --precision bf16|f16   convert an f32 model first (the \"precision\" pass)\n";

static const char usage_explain[] =
    "usage: graft explain MODEL [options]\n"
    "\n"
    "Compiles MODEL for a device, binds its inputs (from files or generated) and\n"
    "runs it once, then prints the plan: segments, deployment mode of each, and\n"
    "every graph break with its cause and source node. For a model with symbolic\n"
    "dims, --input or --dim pick the binding whose plan is explained; without\n"
    "them explain prints the symbolic plan: the dims, their ranges and every\n"
    "value's shape as expressions.\n"
    "\n"
    "options:\n";

/* ==== options =============================================================================== */
typedef struct {
    const char *name; /* points into argv */
    size_t name_len;
    const char *value;
} kv_arg;

enum { OPT_INPUTS = 1, OPT_OUTDIR = 2, OPT_BENCH = 4, OPT_DIM = 8 };

typedef struct {
    const char *cmd;
    const char *model;
    kv_arg *inputs;
    int n_inputs;
    kv_arg *dims;
    int n_dims;
    kv_arg *ranges; /* --dim-range NAME=LO:HI */
    int n_ranges;
    const char *out_dir;
    int device; /* gr_device_kind, or -1: the library's default */
    int mode;   /* gr_mode, or -1: the library's default */
    int arena;  /* GR_ARENA_*, or -1: the library's default */
    int shapes; /* gr_shape_policy, or -1: the library's default */
    double graph_memory_mb; /* 0: no limit */
    kv_arg capture;         /* --capture-range NAME=LO:HI (name NULL: none) */
    int64_t capture_lo, capture_hi;
    const char *cache_dir;
    uint64_t seed;
    long iters, warmup, repeats;
    const char *json_path;
    bool profile;
    const char *save_inputs;
    bool verbose;
    bool no_fuse_attention;
    bool no_fuse_epilogue;
    bool no_plan_templates;
    bool fuse_attention_f32;
    int precision; /* gr_precision */
    int tp;        /* --tp N: ranks of tensor parallelism (0: none) */
} cli_opts;

static bool parse_long(const char *s, long *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = (long)v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return false;
    *out = (uint64_t)v;
    return true;
}

/* Splits NAME=VALUE at the first '='. */
/* "LO:HI" (HI empty = unbounded) */
static bool parse_range(const char *s, int64_t *lo, int64_t *hi) {
    const char *colon = strchr(s, ':');
    if (!colon) return false;
    char buf[64];
    size_t n = (size_t)(colon - s);
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    long l, h;
    if (!parse_long(buf, &l) || l < 0) return false;
    if (!colon[1]) h = LONG_MAX;
    else if (!parse_long(colon + 1, &h) || h < l) return false;
    *lo = l;
    *hi = h == LONG_MAX ? INT64_MAX : h;
    return true;
}

static int parse_kv(const char *opt, const char *arg, kv_arg *out) {
    const char *eq = strchr(arg, '=');
    if (!eq) {
        errorf("%s expects NAME=%s, got '%s' (no '=')", opt,
               !strcmp(opt, "--dim") ? "VALUE" : !strcmp(opt, "--dim-range") ? "LO:HI" : "FILE.npy", arg);
        return EXIT_USAGE;
    }
    if (eq == arg) {
        errorf("%s expects NAME=..., got '%s' (empty name)", opt, show(arg));
        return EXIT_USAGE;
    }
    if (!eq[1]) {
        errorf("%s expects NAME=..., got '%s' (empty value)", opt, arg);
        return EXIT_USAGE;
    }
    out->name = arg;
    out->name_len = (size_t)(eq - arg);
    out->value = eq + 1;
    return 0;
}

static void print_usage(FILE *f, const char *cmd) {
    if (!cmd) {
        fputs(usage_main, f);
    } else if (!strcmp(cmd, "run")) {
        fputs(usage_run, f);
        fputs(usage_inputs, f);
    } else if (!strcmp(cmd, "bench")) {
        fputs(usage_bench, f);
        fputs(usage_inputs, f);
    } else if (!strcmp(cmd, "dump")) {
        fputs(usage_dump, f);
    } else if (!strcmp(cmd, "explain")) {
        fputs(usage_explain, f);
        fputs(usage_inputs, f);
    }
}

/* Returns -1 when parsing succeeded, else the exit code (0 for --help). */
static int parse_args(int argc, char **argv, int allowed, cli_opts *o) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout, o->cmd);
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            if (o->model) {
                errorf("%s: unexpected argument '%s' (MODEL is already '%s')", o->cmd, a, o->model);
                return EXIT_USAGE;
            }
            o->model = a;
            continue;
        }
        /* --opt=value or --opt value */
        char optname[64];
        const char *value = NULL;
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof optname) len = sizeof optname - 1;
        memcpy(optname, a, len);
        optname[len] = 0;
        if (eq) value = eq + 1;

        bool takes_value = true;
        int need = 0;
        if (!strcmp(optname, "--input") || !strcmp(optname, "--device") || !strcmp(optname, "--mode") ||
            !strcmp(optname, "--arena") || !strcmp(optname, "--shapes") || !strcmp(optname, "--graph-memory-mb") ||
            !strcmp(optname, "--capture-range") ||
            !strcmp(optname, "--cache-dir") || !strcmp(optname, "--tp") ||
            !strcmp(optname, "--seed"))
            need = OPT_INPUTS;
        else if (!strcmp(optname, "--dim") || !strcmp(optname, "--dim-range") || !strcmp(optname, "--precision"))
            need = OPT_DIM;
        else if (!strcmp(optname, "--output-dir"))
            need = OPT_OUTDIR;
        else if (!strcmp(optname, "--iters") || !strcmp(optname, "--warmup") || !strcmp(optname, "--repeats") ||
                 !strcmp(optname, "--json"))
            need = OPT_BENCH;
        else if (!strcmp(optname, "--save-inputs"))
            need = OPT_OUTDIR;
        else if (!strcmp(optname, "--profile"))
            need = OPT_BENCH, takes_value = false;
        else if (!strcmp(optname, "--verbose"))
            need = OPT_INPUTS, takes_value = false;
        else if (!strcmp(optname, "--no-plan-templates"))
            need = OPT_INPUTS, takes_value = false;
        else if (!strcmp(optname, "--no-fuse-attention") || !strcmp(optname, "--fuse-attention-f32") ||
                 !strcmp(optname, "--no-fuse-epilogue"))
            need = OPT_DIM, takes_value = false;
        else {
            errorf("%s: unknown option '%s' (see graft %s --help)", o->cmd, optname, o->cmd);
            return EXIT_USAGE;
        }
        if (!(allowed & need)) {
            errorf("%s: option '%s' does not apply to this command (see graft %s --help)", o->cmd, optname, o->cmd);
            return EXIT_USAGE;
        }
        if (!takes_value) {
            if (eq) {
                errorf("%s: option '%s' takes no value", o->cmd, optname);
                return EXIT_USAGE;
            }
            if (!strcmp(optname, "--profile")) o->profile = true;
            else if (!strcmp(optname, "--no-fuse-attention")) o->no_fuse_attention = true;
            else if (!strcmp(optname, "--no-fuse-epilogue")) o->no_fuse_epilogue = true;
            else if (!strcmp(optname, "--fuse-attention-f32")) o->fuse_attention_f32 = true;
            else if (!strcmp(optname, "--no-plan-templates")) o->no_plan_templates = true;
            else o->verbose = true;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                errorf("%s: option '%s' needs a value", o->cmd, optname);
                return EXIT_USAGE;
            }
            value = argv[++i];
        }
        if (!strcmp(optname, "--input")) {
            if (parse_kv(optname, value, &o->inputs[o->n_inputs])) return EXIT_USAGE;
            o->n_inputs++;
        } else if (!strcmp(optname, "--dim")) {
            if (parse_kv(optname, value, &o->dims[o->n_dims])) return EXIT_USAGE;
            long v;
            if (!parse_long(o->dims[o->n_dims].value, &v) || v < 0) {
                errorf("--dim %s: the value must be a non-negative integer", value);
                return EXIT_USAGE;
            }
            o->n_dims++;
        } else if (!strcmp(optname, "--precision")) {
            if (gr_precision_parse(value, &o->precision) != GR_OK) {
                errorf("--precision: unknown precision '%s' (expected bf16 or f16)", show(value));
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--capture-range")) {
            if (parse_kv(optname, value, &o->capture)) return EXIT_USAGE;
            if (!parse_range(o->capture.value, &o->capture_lo, &o->capture_hi) || o->capture_hi >= INT64_MAX / 2) {
                errorf("--capture-range %s: expected NAME=LO:HI with integers 0 <= LO <= HI", show(value));
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--dim-range")) {
            if (parse_kv(optname, value, &o->ranges[o->n_ranges])) return EXIT_USAGE;
            int64_t lo, hi;
            if (!parse_range(o->ranges[o->n_ranges].value, &lo, &hi)) {
                errorf("--dim-range %s: expected NAME=LO:HI with integers 0 <= LO <= HI (HI may be empty: unbounded)", value);
                return EXIT_USAGE;
            }
            o->n_ranges++;
        } else if (!strcmp(optname, "--device")) {
            if (!strcmp(value, "sim")) o->device = GR_DEVICE_SIM;
            else if (!strcmp(value, "cuda")) o->device = GR_DEVICE_CUDA;
            else if (!strcmp(value, "auto")) o->device = GR_DEVICE_AUTO;
            else {
                errorf("--device: unknown device '%s' (expected sim, cuda or auto)", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--mode")) {
            if (!strcmp(value, "eager")) o->mode = GR_MODE_EAGER;
            else if (!strcmp(value, "graph")) o->mode = GR_MODE_GRAPH;
            else if (!strcmp(value, "auto")) o->mode = GR_MODE_AUTO;
            else {
                errorf("--mode: unknown mode '%s' (expected eager, graph or auto)", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--arena")) {
            if (!strcmp(value, "per-shape")) o->arena = GR_ARENA_PER_SHAPE;
            else if (!strcmp(value, "max")) o->arena = GR_ARENA_MAX_SHAPE;
            else {
                errorf("--arena: unknown policy '%s' (expected per-shape or max)", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--shapes")) {
            if (gr_shape_policy_parse(value, &o->shapes) != GR_OK) {
                errorf("--shapes: unknown policy '%s' (expected exact, pad, generic, update, auto or default)", show(value));
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--tp")) {
            long v;
            if (!parse_long(value, &v) || v < 1 || v > 64) {
                errorf("--tp: '%s' is not a number of ranks from 1 to 64", show(value));
                return EXIT_USAGE;
            }
            o->tp = (int)v;
        } else if (!strcmp(optname, "--graph-memory-mb")) {
            char *end = NULL;
            errno = 0;
            double mb = strtod(value, &end);
            /* !(mb > 0) also refuses NaN */
            if (!*value || *end || errno || !(mb > 0) || mb > 1e9) {
                errorf("--graph-memory-mb: '%s' is not a positive size in MiB", show(value));
                return EXIT_USAGE;
            }
            o->graph_memory_mb = mb;
        } else if (!strcmp(optname, "--cache-dir")) {
            if (!*value) {
                errorf("--cache-dir: empty directory name");
                return EXIT_USAGE;
            }
            o->cache_dir = value;
        } else if (!strcmp(optname, "--seed")) {
            if (!parse_u64(value, &o->seed)) {
                errorf("--seed: '%s' is not a non-negative integer", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--output-dir")) {
            if (!*value) {
                errorf("--output-dir: empty directory name");
                return EXIT_USAGE;
            }
            o->out_dir = value;
        } else if (!strcmp(optname, "--iters")) {
            if (!parse_long(value, &o->iters) || o->iters <= 0 || o->iters > 100000000) {
                errorf("--iters: '%s' is not a positive integer", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--warmup")) {
            if (!parse_long(value, &o->warmup) || o->warmup < 0 || o->warmup > 100000000) {
                errorf("--warmup: '%s' is not a non-negative integer", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--repeats")) {
            if (!parse_long(value, &o->repeats) || o->repeats <= 0 || o->repeats > 1000) {
                errorf("--repeats: '%s' is not an integer in 1..1000", value);
                return EXIT_USAGE;
            }
        } else if (!strcmp(optname, "--json")) {
            if (!*value) {
                errorf("--json: empty file name");
                return EXIT_USAGE;
            }
            o->json_path = value;
        } else if (!strcmp(optname, "--save-inputs")) {
            if (!*value) {
                errorf("--save-inputs: empty directory name");
                return EXIT_USAGE;
            }
            o->save_inputs = value;
        }
    }
    if (!o->model) {
        errorf("%s: missing MODEL (usage: graft %s MODEL [options]; see graft %s --help)", o->cmd, o->cmd, o->cmd);
        return EXIT_USAGE;
    }
    return -1;
}

/* ==== inputs ================================================================================ */
typedef struct {
    const char *name;
    int64_t value;
    const char *source; /* "--dim" or the input name that bound it */
} sym_binding;

typedef struct {
    gr_value_info info;
    int64_t dims[GR_MAX_DIMS]; /* concrete shape to bind */
    gr_dtype dtype;            /* dtype of data (the input's) */
    void *data;
    size_t nbytes;
    const char *file; /* NULL when generated */
    bool resolved;
} bound_input;

typedef struct {
    int n;
    bound_input *in;
    sym_binding *syms;
    int n_syms;
    gr_graph_t g;
} input_set;

/* Is text the name of one of the graph's symbols (else an expression such as "seq + 1")? */
static bool is_symbol(gr_graph_t g, const char *text) {
    for (int k = 0; k < gr_graph_num_dims(g); k++) {
        gr_dim_info di;
        if (gr_graph_dim_info(g, k, &di) == GR_OK && !strcmp(di.name, text)) return true;
    }
    return false;
}

static void input_set_free(input_set *s) {
    if (s->in)
        for (int i = 0; i < s->n; i++) free(s->in[i].data);
    free(s->in);
    free(s->syms);
    memset(s, 0, sizeof *s);
}

static void shape_str(char *buf, size_t n, gr_dtype t, int ndim, const int64_t *dims, const char *const *syms) {
    size_t pos = (size_t)snprintf(buf, n, "%s[", gr_dtype_name(t));
    for (int i = 0; i < ndim && pos < n; i++) {
        if (syms && syms[i]) pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", i ? "," : "", show(syms[i]));
        else pos += (size_t)snprintf(buf + pos, n - pos, "%s%lld", i ? "," : "", (long long)dims[i]);
    }
    if (pos < n) snprintf(buf + pos, n - pos, "]");
}

static sym_binding *find_sym(input_set *s, const char *name) {
    for (int i = 0; i < s->n_syms; i++)
        if (!strcmp(s->syms[i].name, name)) return &s->syms[i];
    return NULL;
}

static bool name_eq(const kv_arg *kv, const char *name) {
    return strlen(name) == kv->name_len && !strncmp(kv->name, name, kv->name_len);
}

/* splitmix64 */
static uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t shape_bytes(gr_dtype t, int ndim, const int64_t *dims, bool *overflow) {
    size_t n = gr_dtype_size(t);
    *overflow = false;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)dims[i];
        if (d && n > SIZE_MAX / d) {
            *overflow = true;
            return 0;
        }
        n *= (size_t)d;
    }
    return n;
}

/* Checks a .npy array against the graph input and binds its symbolic dims. */
static int bind_file(input_set *s, bound_input *b, const char *path, int *exit_code) {
    char err[NPY_ERR_LEN];
    npy_array a;
    if (npy_read(path, &a, err)) {
        errorf("input '%s': %s", show(b->info.name), err);
        return *exit_code = EXIT_RUNTIME, -1;
    }
    char want[256], got[256];
    shape_str(want, sizeof want, b->info.dtype, b->info.ndim, b->info.dims, b->info.sym_names);
    shape_str(got, sizeof got, a.dtype, a.ndim, a.dims, NULL);
    bool bf16_from_f32 = b->info.dtype == GR_BF16 && a.dtype == GR_F32;
    if (a.dtype != b->info.dtype && !bf16_from_f32) {
        errorf("input '%s': %s has dtype %s, the model expects %s (%s)", show(b->info.name), path, gr_dtype_name(a.dtype),
               gr_dtype_name(b->info.dtype), want);
        npy_free(&a);
        return *exit_code = EXIT_RUNTIME, -1;
    }
    if (a.ndim != b->info.ndim) {
        errorf("input '%s': %s has shape %s (rank %d), the model expects %s (rank %d)", show(b->info.name), path, got,
               a.ndim, want, b->info.ndim);
        npy_free(&a);
        return *exit_code = EXIT_RUNTIME, -1;
    }
    for (int d = 0; d < a.ndim; d++) {
        const char *sym = b->info.sym_names[d];
        if (!sym) {
            if (b->info.dims[d] >= 0 && b->info.dims[d] != a.dims[d]) {
                errorf("input '%s': %s has shape %s, the model expects %s (dim %d is %lld, expected %lld)",
                       b->info.name, path, got, want, d, (long long)a.dims[d], (long long)b->info.dims[d]);
                npy_free(&a);
                return *exit_code = EXIT_RUNTIME, -1;
            }
        } else if (is_symbol(s->g, sym)) {
            sym_binding *sb = find_sym(s, sym);
            if (sb && sb->value != a.dims[d]) {
                errorf("input '%s': %s has shape %s, but symbolic dim '%s' is already %lld (from %s)", show(b->info.name),
                       path, got, show(sym), (long long)sb->value, show(sb->source));
                npy_free(&a);
                return *exit_code = EXIT_RUNTIME, -1;
            }
            if (!sb) s->syms[s->n_syms++] = (sym_binding){sym, a.dims[d], b->info.name};
        }
        b->dims[d] = a.dims[d];
    }
    b->dtype = b->info.dtype;
    if (bf16_from_f32) {
        size_t numel = a.nbytes / 4;
        uint16_t *bf = numel ? malloc(numel * 2) : NULL;
        if (numel && !bf) {
            npy_free(&a);
            errorf("out of memory");
            return *exit_code = EXIT_RUNTIME, -1;
        }
        for (size_t i = 0; i < numel; i++) bf[i] = gr_f32_to_bf16(((const float *)a.data)[i]);
        npy_free(&a);
        b->data = bf;
        b->nbytes = numel * 2;
    } else {
        b->data = a.data;
        b->nbytes = a.nbytes;
        a.data = NULL;
    }
    b->file = path;
    b->resolved = true;
    return 0;
}

static int generate_input(input_set *s, bound_input *b, int index, uint64_t *rng, uint64_t seed, int *exit_code) {
    /* symbolic dims: plain symbols and expressions ("past + seq") evaluated over the bindings */
    const char *names[GR_MAX_DIMS * 64 + 1];
    int64_t values[GR_MAX_DIMS * 64 + 1];
    int nb = 0;
    for (int k = 0; k < s->n_syms && nb < GR_MAX_DIMS * 64; k++) names[nb] = s->syms[k].name, values[nb++] = s->syms[k].value;
    gr_status st = gr_graph_input_dims(s->g, index, nb, names, values, b->dims);
    if (st == GR_ERR_NOT_FOUND) {
        const char *msg = gr_last_error(), *q = strstr(msg, "symbolic dim '");
        char sym[128] = "?";
        if (q) {
            q += strlen("symbolic dim '");
            size_t n = 0;
            while (q[n] && q[n] != '\'' && n + 1 < sizeof sym) n++;
            memcpy(sym, q, n);
            sym[n] = 0;
        }
        errorf("input '%s' has symbolic dim '%s' that nothing binds: pass --input %s=FILE.npy or --dim %s=VALUE",
               show(b->info.name), show(sym), show(b->info.name), show(sym));
        return *exit_code = EXIT_USAGE, -1;
    }
    if (st != GR_OK) {
        errorf("input '%s': %s", show(b->info.name), gr_last_error());
        return *exit_code = EXIT_RUNTIME, -1;
    }
    bool overflow;
    size_t nbytes = shape_bytes(b->info.dtype, b->info.ndim, b->dims, &overflow);
    if (overflow || nbytes > ((size_t)1 << 40)) {
        errorf("input '%s': the shape is too large to generate", show(b->info.name));
        return *exit_code = EXIT_RUNTIME, -1;
    }
    b->dtype = b->info.dtype;
    b->nbytes = nbytes;
    b->data = nbytes ? malloc(nbytes) : NULL;
    if (nbytes && !b->data) {
        errorf("input '%s': out of memory (%zu bytes)", show(b->info.name), nbytes);
        return *exit_code = EXIT_RUNTIME, -1;
    }
    size_t numel = nbytes / gr_dtype_size(b->dtype);
    const char *what;
    if (gr_dtype_is_float(b->dtype)) {
        /* k * 2^-(bits-1) - 1 with as many bits as the dtype holds, so that
         * rounding to f16/bf16 cannot reach 1.0 */
        int bits = b->dtype == GR_F16 ? 11 : b->dtype == GR_BF16 ? 8 : b->dtype == GR_F32 ? 24 : 53;
        for (size_t i = 0; i < numel; i++)
            gr_store_f64(b->data, b->dtype, (int64_t)i,
                         ldexp((double)(rng_next(rng) >> (64 - bits)), 1 - bits) - 1.0);
        what = "uniform in [-1,1)";
    } else if (b->dtype == GR_BOOL) {
        for (size_t i = 0; i < numel; i++) ((uint8_t *)b->data)[i] = (uint8_t)(rng_next(rng) >> 63);
        what = "random 0/1";
    } else {
        for (size_t i = 0; i < numel; i++) gr_store_i64(b->data, b->dtype, (int64_t)i, (int64_t)(rng_next(rng) % 10));
        what = "integers in [0,10)";
    }
    b->resolved = true;
    char shape[256];
    shape_str(shape, sizeof shape, b->dtype, b->info.ndim, b->dims, NULL);
    notef("input '%s' not given; generated %s %s (seed %llu)", show(b->info.name), shape, what, (unsigned long long)seed);
    return 0;
}

/* Resolves every graph input from --input files, --dim and generated data.
 * Returns 0 or an exit code. */
static int resolve_inputs(gr_graph_t g, const cli_opts *o, input_set *s) {
    memset(s, 0, sizeof *s);
    int n = gr_graph_num_inputs(g);
    if (n < 0) n = 0;
    s->n = n;
    s->g = g;
    s->in = calloc((size_t)(n ? n : 1), sizeof *s->in);
    s->syms = calloc((size_t)n * GR_MAX_DIMS + (size_t)o->n_dims + 1, sizeof *s->syms);
    if (!s->in || !s->syms) {
        errorf("out of memory");
        return EXIT_RUNTIME;
    }
    for (int i = 0; i < n; i++) {
        gr_status st = gr_graph_input_info(g, i, &s->in[i].info);
        if (st != GR_OK) return api_fail(st, o->model);
    }
    /* --input names must exist and appear once */
    for (int k = 0; k < o->n_inputs; k++) {
        int found = -1;
        for (int i = 0; i < n; i++)
            if (name_eq(&o->inputs[k], s->in[i].info.name)) found = i;
        if (found < 0) {
            char names[1024] = "";
            size_t pos = 0;
            for (int i = 0; i < n && pos < sizeof names; i++)
                pos += (size_t)snprintf(names + pos, sizeof names - pos, "%s'%s'", i ? ", " : "", show(s->in[i].info.name));
            errorf("--input: the model has no input named '%s' (inputs: %s)", show_n(o->inputs[k].name, o->inputs[k].name_len),
                   n ? names : "none");
            return EXIT_USAGE;
        }
        for (int j = 0; j < k; j++)
            if (o->inputs[j].name_len == o->inputs[k].name_len &&
                !strncmp(o->inputs[j].name, o->inputs[k].name, o->inputs[k].name_len)) {
                errorf("--input: input '%s' given twice", show_n(o->inputs[k].name, o->inputs[k].name_len));
                return EXIT_USAGE;
            }
    }
    /* --dim names must be symbolic dims of the model */
    for (int k = 0; k < o->n_dims; k++) {
        const char *known = NULL;
        for (int j = 0; j < gr_graph_num_dims(g) && !known; j++) {
            gr_dim_info di;
            if (gr_graph_dim_info(g, j, &di) == GR_OK && name_eq(&o->dims[k], di.name)) known = di.name;
        }
        if (!known) {
            errorf("--dim: the model has no symbolic dim named '%s'", show_n(o->dims[k].name, o->dims[k].name_len));
            return EXIT_USAGE;
        }
        sym_binding *sb = find_sym(s, known);
        long v = 0;
        if (!parse_long(o->dims[k].value, &v) || v < 0) {
            errorf("--dim: '%s' is not a non-negative integer", o->dims[k].value);
            return EXIT_USAGE;
        }
        if (sb && sb->value != v) {
            errorf("--dim: '%s' given twice with different values", show(known));
            return EXIT_USAGE;
        }
        if (!sb) s->syms[s->n_syms++] = (sym_binding){known, v, "--dim"};
    }
    int code = 0;
    for (int k = 0; k < o->n_inputs; k++)
        for (int i = 0; i < n; i++)
            if (name_eq(&o->inputs[k], s->in[i].info.name))
                if (bind_file(s, &s->in[i], o->inputs[k].value, &code)) return code;
    uint64_t rng = o->seed;
    for (int i = 0; i < n; i++)
        if (!s->in[i].resolved && generate_input(s, &s->in[i], i, &rng, o->seed, &code)) return code;
    return 0;
}

static int set_inputs(gr_session_t sess, input_set *s) {
    for (int i = 0; i < s->n; i++) {
        bound_input *b = &s->in[i];
        if (!b->resolved) continue;
        gr_status st = gr_session_set_input(sess, b->info.name, b->dtype, b->info.ndim, b->dims, b->data, b->nbytes);
        if (st != GR_OK) {
            char ctx[512];
            snprintf(ctx, sizeof ctx, "input '%s'%s%s", show(b->info.name), b->file ? " from " : "", b->file ? b->file : "");
            return api_fail(st, ctx);
        }
    }
    return 0;
}

/* ==== common: load, session ============================================================== */
static int load_graph(const char *path, gr_graph_t *g) {
    *g = NULL;
    struct stat st_buf;
    if (stat(path, &st_buf) != 0) {
        errorf("cannot open model '%s': %s", path, strerror(errno));
        return EXIT_RUNTIME;
    }
    if (S_ISDIR(st_buf.st_mode)) {
        errorf("model '%s' is a directory, expected a .gir or .onnx file", path);
        return EXIT_RUNTIME;
    }
    gr_status st = gr_graph_load(path, g);
    if (st != GR_OK) {
        *g = NULL;
        return api_fail(st, path);
    }
    return 0;
}

static gr_capture_report capture_report; /* --capture-range: what the warm-up ahead took (bench --json) */

static int create_session(gr_graph_t g, const cli_opts *o, gr_session_t *sess) {
    gr_session_options so;
    gr_session_options_init(&so);
    if (o->device >= 0) so.device = (gr_device_kind)o->device;
    if (o->mode >= 0) so.mode = (gr_mode)o->mode;
    if (o->arena >= 0) so.arena_policy = o->arena;
    if (o->shapes >= 0) so.shape_policy = o->shapes;
    so.graph_memory_mb = o->graph_memory_mb;
    if (o->cache_dir) so.cache_dir = o->cache_dir;
    so.verbose = o->verbose;
    so.no_fuse_attention = o->no_fuse_attention;
    so.no_fuse_epilogue = o->no_fuse_epilogue;
    so.no_plan_templates = o->no_plan_templates;
    so.fuse_attention_f32 = o->fuse_attention_f32;
    so.precision = o->precision;
    so.tp = o->tp;
    gr_status st = gr_session_create(g, &so, sess);
    if (st != GR_OK) {
        *sess = NULL;
        return api_fail(st, o->model);
    }
    if (o->capture.name) {
        char name[256];
        size_t n = o->capture.name_len < sizeof name - 1 ? o->capture.name_len : sizeof name - 1;
        memcpy(name, o->capture.name, n);
        name[n] = 0;
        st = gr_session_capture_range(*sess, name, o->capture_lo, o->capture_hi, 1, &capture_report);
        if (st != GR_OK) return api_fail(st, "--capture-range");
        fprintf(stderr, "graft: captured %d bindings ahead in %.1f ms (compile %.1f ms, capture + instantiation %.1f ms of which "
                        "instantiation or exec update %.1f ms; %ld captures, %ld instantiations, %ld exec updates)\n",
                capture_report.bindings, capture_report.total_ms, capture_report.compile_ms, capture_report.capture_ms,
                capture_report.instantiate_ms,
                capture_report.captures, capture_report.instantiations, capture_report.exec_updates);
    }
    return 0;
}

/* ==== run ================================================================================== */
/* ---- file names: one file per name, never two names on one file ---- */
#define FILE_BASE_MAX 224 /* the sanitised name is cut at 200 bytes; a suffix _N fits after it */

typedef struct {
    char base[FILE_BASE_MAX]; /* file name without ".npy" */
    const char *kind;         /* "input" or "output" */
    int index;
    const char *name; /* the model's name (alive as long as the graph and session) */
} file_slot;

/* The files given out in one directory. */
typedef struct {
    file_slot *slots;
    int n, cap;
} file_names;

static void file_names_free(file_names *fn) {
    free(fn->slots);
    memset(fn, 0, sizeof *fn);
}

/* Characters outside [A-Za-z0-9_.-] become '_': no '/' survives, so no name (not "../../x"
 * either) leads outside the directory. */
static void sanitize_name(const char *name, char *out, size_t n) {
    size_t j = 0;
    for (size_t i = 0; name[i] && j + 1 < n; i++) {
        char c = name[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '.' || c == '-';
        out[j++] = ok ? c : '_';
    }
    out[j] = 0;
}

static const file_slot *file_taken(const file_names *fn, const char *base) {
    for (int i = 0; i < fn->n; i++)
        if (!strcasecmp(fn->slots[i].base, base)) return &fn->slots[i]; /* case-insensitive file systems */
    return NULL;
}

/* Picks the file <base>.npy for the name of input/output `index`: the sanitised name ("<kind>_<index>"
 * when nothing is left), or, when another name already has that file in this directory, the first
 * free <base>_2, <base>_3, ... with a note naming both. Deterministic: it depends on the order
 * only. Returns the base, or NULL when out of memory. */
static const char *pick_file(file_names *fn, const char *kind, int index, const char *name) {
    if (fn->n == fn->cap) {
        int cap = fn->cap ? fn->cap * 2 : 16;
        file_slot *ns = realloc(fn->slots, sizeof *ns * (size_t)cap);
        if (!ns) return NULL;
        fn->slots = ns;
        fn->cap = cap;
    }
    file_slot *slot = &fn->slots[fn->n];
    char want[208]; /* 200 bytes of name, or "output_<index>" */
    sanitize_name(name ? name : "", want, 201);
    if (!want[0]) snprintf(want, sizeof want, "%s_%d", kind, index);
    const file_slot *owner = file_taken(fn, want);
    snprintf(slot->base, sizeof slot->base, "%s", want);
    for (int k = 2; file_taken(fn, slot->base); k++) /* ends: at most n bases are taken */
        snprintf(slot->base, sizeof slot->base, "%s_%d", want, k);
    if (owner)
        notef("%s %d '%s' is written to %s.npy: %s.npy already holds %s %d '%s'", kind, index, show(name), slot->base, want,
              owner->kind, owner->index, show(owner->name));
    slot->kind = kind;
    slot->index = index;
    slot->name = name;
    fn->n++;
    return slot->base;
}

static bool same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static char *join_path(const char *dir, const char *base) {
    size_t n = strlen(dir) + strlen(base) + 6;
    char *path = malloc(n);
    if (path) snprintf(path, n, "%s/%s.npy", dir, base);
    return path;
}

/* mkdir -p */
static int make_dirs(const char *path) {
    size_t len = strlen(path);
    char *p = malloc(len + 1);
    if (!p) {
        errorf("out of memory");
        return EXIT_RUNTIME;
    }
    memcpy(p, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char saved = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            errorf("cannot create directory '%s': %s", p, strerror(errno));
            free(p);
            return EXIT_RUNTIME;
        }
        p[i] = saved;
    }
    struct stat sb;
    int ok = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    free(p);
    if (!ok) {
        errorf("'%s' is not a directory", path);
        return EXIT_RUNTIME;
    }
    return 0;
}

static void summarize(const char *name, const gr_value_info *info, const void *data, size_t nbytes, bool bf16_as_f32,
                      const char *file) {
    size_t esize = gr_dtype_size(info->dtype);
    size_t numel = esize ? nbytes / esize : 0;
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    size_t nan_count = 0, finite = 0;
    for (size_t i = 0; i < numel; i++) {
        double v = gr_load_f64(data, info->dtype, (int64_t)i);
        if (isnan(v)) {
            nan_count++;
            continue;
        }
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
        finite++;
    }
    char shape[256];
    shape_str(shape, sizeof shape, info->dtype, info->ndim, info->dims, NULL);
    put_escaped(stdout, name, false);
    printf("  %s", shape);
    if (finite) printf("  min=%.6g max=%.6g mean=%.6g", mn, mx, sum / (double)finite);
    else if (!numel) printf("  (empty)");
    if (nan_count) printf("  nan=%zu", nan_count);
    printf("  checksum=%016llx", (unsigned long long)gr_hash_bytes(data, nbytes, 0));
    if (bf16_as_f32) printf("  (bf16 written as f32)");
    printf("  -> %s.npy\n", file);
}

/* input_files: the files --save-inputs wrote; outputs continue that list when both go to one directory. */
static int write_outputs(gr_session_t sess, const cli_opts *o, int n_out, file_names *input_files) {
    int code = make_dirs(o->out_dir);
    if (code) return code;
    file_names own = {0};
    file_names *files = o->save_inputs && same_dir(o->save_inputs, o->out_dir) ? input_files : &own;
    for (int i = 0; i < n_out && !code; i++) {
        gr_output out;
        gr_value_info info;
        gr_status st = gr_session_output(sess, i, &out);
        if (st == GR_OK) st = gr_session_output_info(sess, out, &info);
        if (st != GR_OK) {
            code = api_fail(st, "reading outputs");
            break;
        }
        size_t nbytes = gr_session_output_nbytes(sess, out);
        void *data = nbytes ? malloc(nbytes) : NULL;
        if (nbytes && !data) {
            errorf("output '%s': out of memory (%zu bytes)", show(info.name), nbytes);
            code = EXIT_RUNTIME;
            break;
        }
        st = gr_session_output_read(sess, out, data, nbytes);
        if (st != GR_OK) {
            free(data);
            char ctx[600];
            snprintf(ctx, sizeof ctx, "output '%s'", show(info.name));
            code = api_fail(st, ctx);
            break;
        }
        const char *base = pick_file(files, "output", i, info.name);
        char *path = base ? join_path(o->out_dir, base) : NULL;
        void *to_write = data;
        float *f32 = NULL;
        bool bf16 = info.dtype == GR_BF16;
        size_t numel = nbytes / gr_dtype_size(info.dtype);
        if (bf16 && numel) {
            f32 = malloc(numel * sizeof(float));
            if (f32)
                for (size_t k = 0; k < numel; k++) f32[k] = gr_bf16_to_f32(((const uint16_t *)data)[k]);
            to_write = f32;
        }
        if (!path || (bf16 && numel && !f32)) {
            errorf("out of memory");
            code = EXIT_RUNTIME;
        } else {
            char err[NPY_ERR_LEN];
            if (npy_write(path, bf16 ? GR_F32 : info.dtype, info.ndim, info.dims, to_write,
                          bf16 ? numel * sizeof(float) : nbytes, err)) {
                errorf("output '%s': %s", show(info.name), err);
                code = EXIT_RUNTIME;
            } else {
                summarize(info.name, &info, data, nbytes, bf16, base);
            }
        }
        free(path);
        free(f32);
        free(data);
    }
    file_names_free(&own);
    return code;
}

static int save_inputs(const input_set *in, const char *dir, file_names *files) {
    int code = make_dirs(dir);
    for (int i = 0; i < in->n && !code; i++) {
        const bound_input *b = &in->in[i];
        if (!b->resolved) continue;
        if (b->dtype == GR_BF16) {
            errorf("--save-inputs: input '%s' is bf16, which .npy cannot hold", show(b->info.name));
            return EXIT_RUNTIME;
        }
        const char *base = pick_file(files, "input", i, b->info.name);
        char *path = base ? join_path(dir, base) : NULL;
        if (!path) {
            errorf("out of memory");
            return EXIT_RUNTIME;
        }
        char err[NPY_ERR_LEN];
        if (npy_write(path, b->dtype, b->info.ndim, b->dims, b->data, b->nbytes, err)) {
            errorf("--save-inputs: input '%s': %s", show(b->info.name), err);
            code = EXIT_RUNTIME;
        }
        free(path);
    }
    return code;
}

/* load_graph, then the --dim-range declarations */
static int load_graph_opts(const cli_opts *o, gr_graph_t *g) {
    int code = load_graph(o->model, g);
    for (int k = 0; k < o->n_ranges && !code; k++) {
        char name[256];
        size_t n = o->ranges[k].name_len < sizeof name - 1 ? o->ranges[k].name_len : sizeof name - 1;
        memcpy(name, o->ranges[k].name, n);
        name[n] = 0;
        int64_t lo = 0, hi = 0;
        parse_range(o->ranges[k].value, &lo, &hi); /* checked by parse_args */
        gr_status st = gr_graph_set_dim_range(*g, name, lo, hi);
        if (st == GR_ERR_NOT_FOUND) code = (errorf("--dim-range: %s", gr_last_error()), EXIT_USAGE);
        else if (st != GR_OK) code = api_fail(st, o->model);
    }
    return code;
}

/* load the model, bind inputs (files or generated), create the session, set them */
static int open_session(const cli_opts *o, gr_graph_t *g, gr_session_t *sess, input_set *in) {
    int code = load_graph_opts(o, g);
    if (!code) code = resolve_inputs(*g, o, in);
    if (!code) code = create_session(*g, o, sess);
    if (!code) code = set_inputs(*sess, in);
    return code;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* bench on a symbolic model whose dims all come from --dim: the host time to prepare the plan
 * of a new binding, the one cost a new length pays. BENCH_NEW_BINDINGS bindings not seen before:
 * each --dim value v becomes v - k (or v + k where that would fall below the dim's declared
 * minimum), k = 1..N; a dim of 1 stays 1, because leaving 1 may add kernel structures once
 * (design §3a: a stride equal to the row-major one only because a factor is 1), which is a
 * compile, not what a new length costs. Inputs are generated. Reports the median (what a new
 * length costs), the mean and the max of the plan builds, and the NVRTC compiles they caused;
 * *n = 0 when not applicable. */
#define BENCH_NEW_BINDINGS 20
typedef struct {
    double median_ms, mean_ms, max_ms;
    int n;
    long compiled;
    long plans_compiled, plans_instantiated; /* of the n bindings: by the pass pipeline / from a plan template */
    double inst_median_ms, comp_median_ms;    /* median of each kind (0: none) */
} new_binding_cost;

static double median_of(double *v, int n) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bench_new_bindings(gr_graph_t g, gr_session_t sess, const cli_opts *o, new_binding_cost *c) {
    memset(c, 0, sizeof *c);
    if (gr_graph_num_dims(g) == 0 || o->n_inputs > 0 || o->n_dims == 0) return 0;
    kv_arg *dims = calloc((size_t)o->n_dims, sizeof *dims);
    char (*vals)[32] = calloc((size_t)o->n_dims, sizeof *vals);
    double ms[BENCH_NEW_BINDINGS], inst_ms[BENCH_NEW_BINDINGS], comp_ms[BENCH_NEW_BINDINGS];
    int n_inst = 0, n_comp = 0;
    if (!dims || !vals) {
        free(dims), free(vals);
        return 0;
    }
    gr_kernel_stats before;
    memset(&before, 0, sizeof before);
    gr_session_kernel_stats(sess, &before);
    gr_run_stats st0;
    memset(&st0, 0, sizeof st0);
    gr_session_stats(sess, &st0);
    gr_run_stats st;
    memset(&st, 0, sizeof st);
    quiet_notes = true;
    for (int k = 1; k <= BENCH_NEW_BINDINGS; k++) {
        cli_opts o2 = *o;
        for (int d = 0; d < o->n_dims; d++) {
            long v = 0;
            parse_long(o->dims[d].value, &v);
            /* smaller first (a model's tables end somewhere), within the dim's range */
            int64_t lo = 1;
            for (int j = 0; j < gr_graph_num_dims(g); j++) {
                gr_dim_info di;
                if (gr_graph_dim_info(g, j, &di) == GR_OK && name_eq(&o->dims[d], di.name)) lo = di.lo;
            }
            long nv = v == 1 ? 1 : v - k >= lo ? v - k : v + k;
            snprintf(vals[d], sizeof vals[d], "%ld", nv);
            dims[d] = o->dims[d];
            dims[d].value = vals[d];
        }
        o2.dims = dims;
        input_set in2;
        int code = resolve_inputs(g, &o2, &in2);
        if (!code) code = set_inputs(sess, &in2);
        gr_status rs = code ? GR_ERR_INVALID : gr_session_run(sess);
        if (rs == GR_OK) rs = gr_session_stats(sess, &st);
        input_set_free(&in2);
        if (rs != GR_OK) { /* e.g. past a declared range: stop there */
            quiet_notes = false;
            notef("bench: new binding +%d not measured: %s", k, gr_last_error());
            break;
        }
        ms[c->n++] = st.compile_us / 1e3;
        /* which kind this binding's plan was: the instantiated count moved or not */
        if (st.plans_instantiated > st0.plans_instantiated + n_inst) inst_ms[n_inst++] = st.compile_us / 1e3;
        else comp_ms[n_comp++] = st.compile_us / 1e3;
    }
    quiet_notes = false;
    gr_kernel_stats after;
    memset(&after, 0, sizeof after);
    gr_session_kernel_stats(sess, &after);
    c->compiled = after.compiled - before.compiled;
    c->plans_compiled = st.plans_compiled - st0.plans_compiled;
    c->plans_instantiated = st.plans_instantiated - st0.plans_instantiated;
    c->inst_median_ms = median_of(inst_ms, n_inst);
    c->comp_median_ms = median_of(comp_ms, n_comp);
    if (c->n) {
        double total = 0;
        for (int i = 0; i < c->n; i++) total += ms[i], c->max_ms = ms[i] > c->max_ms ? ms[i] : c->max_ms;
        c->mean_ms = total / c->n;
        qsort(ms, (size_t)c->n, sizeof *ms, cmp_double);
        c->median_ms = c->n % 2 ? ms[c->n / 2] : (ms[c->n / 2 - 1] + ms[c->n / 2]) / 2;
    }
    free(dims);
    free(vals);
    return 0;
}

static int cmd_run(const cli_opts *o) {
    gr_graph_t g = NULL;
    gr_session_t sess = NULL;
    input_set in = {0};
    file_names input_files = {0};
    int code = open_session(o, &g, &sess, &in);
    if (!code && o->save_inputs) code = save_inputs(&in, o->save_inputs, &input_files);
    if (!code) {
        gr_status st = gr_session_run(sess);
        if (st != GR_OK) code = api_fail(st, o->model);
    }
    if (!code) code = write_outputs(sess, o, gr_graph_num_outputs(g), &input_files);
    file_names_free(&input_files);
    if (sess) gr_session_destroy(sess);
    if (g) gr_graph_destroy(g);
    input_set_free(&in);
    return code;
}

/* ==== bench ================================================================================= */
static void print_bytes(const char *label, size_t n) {
    if (n >= (1u << 20)) printf("%-20s %zu (%.2f MiB)\n", label, n, (double)n / (1 << 20));
    else if (n >= 1024) printf("%-20s %zu (%.1f KiB)\n", label, n, (double)n / 1024);
    else printf("%-20s %zu\n", label, n);
}


static int cmd_bench(const cli_opts *o) {
    gr_graph_t g = NULL;
    gr_session_t sess = NULL;
    input_set in = {0};
    double *samples = calloc((size_t)o->repeats, sizeof(double));
    double *walls = calloc((size_t)o->repeats, sizeof(double));
    int code = samples && walls ? 0 : (errorf("out of memory"), EXIT_RUNTIME);
    double l0 = gr_now_us();
    if (!code) code = load_graph_opts(o, &g);
    double load_us = gr_now_us() - l0;
    if (!code) code = resolve_inputs(g, o, &in);
    double c0 = gr_now_us();
    if (!code) code = create_session(g, o, &sess);
    double create_us = gr_now_us() - c0;
    if (!code) code = set_inputs(sess, &in);
    gr_run_stats stats, first;
    memset(&stats, 0, sizeof stats);
    memset(&first, 0, sizeof first);
    /* the first run fills the placeholders: its copies are what a replay with new inputs costs */
    for (long it = 0; !code && it < o->warmup; it++) {
        gr_status st = gr_session_run(sess);
        if (st == GR_OK) st = gr_session_stats(sess, it == 0 ? &first : &stats);
        if (st != GR_OK) code = api_fail(st, o->model);
    }
    for (long r = 0; !code && r < o->repeats; r++) {
        double w0 = gr_now_us(), t0 = gr_session_clock_us(sess);
        for (long it = 0; !code && it < o->iters; it++) {
            gr_status st = gr_session_run(sess);
            if (st != GR_OK) code = api_fail(st, o->model);
        }
        if (code) break;
        gr_status st = gr_session_wait(sess);
        if (st == GR_OK) st = gr_session_stats(sess, &stats);
        if (st != GR_OK) {
            code = api_fail(st, o->model);
            break;
        }
        samples[r] = (gr_session_clock_us(sess) - t0) / (double)o->iters;
        walls[r] = (gr_now_us() - w0) / (double)o->iters;
        if (o->warmup == 0 && r == 0) first = stats;
    }
    if (!code) {
        bool sim = gr_session_device_kind(sess) == GR_DEVICE_SIM;
        const char *mode = o->mode == GR_MODE_EAGER ? "eager"
                           : o->mode == GR_MODE_GRAPH ? "graph"
                           : o->mode == GR_MODE_AUTO  ? "auto"
                                                      : "eager (default)";
        double kernel_sum_us = -1;
        gr_profile_classes classes;
        memset(&classes, 0, sizeof classes);
        double *sorted = malloc(sizeof(double) * (size_t)o->repeats);
        if (sorted) {
            memcpy(sorted, samples, sizeof(double) * (size_t)o->repeats);
            qsort(sorted, (size_t)o->repeats, sizeof(double), cmp_double);
        }
        double median = sorted ? sorted[o->repeats / 2] : samples[0];
        double tmin = sorted ? sorted[0] : samples[0], tmax = sorted ? sorted[o->repeats - 1] : samples[0];
        free(sorted);
        printf("model                %s\n", show(o->model));
        printf("device               %s\n", show(gr_session_device_name(sess)));
        printf("mode                 %s\n", mode);
        printf("iterations           %ld x %ld repeats (warmup %ld)\n", o->iters, o->repeats, o->warmup);
        printf("time/iter            %.3f us (%s; median of repeats, min %.3f, max %.3f)\n", median,
               sim ? "simulated clock" : "wall clock, runs pipelined", tmin, tmax);
        printf("gpu time/iter        %.3f us (%s, last run)\n", stats.gpu_time_us, sim ? "simulated" : "device events");
        if (sim) printf("host wall/iter       %.3f us (host time of the simulator, not a GPU estimate)\n", walls[0]);
        printf("kernels/iter         %ld\n", stats.kernels);
        printf("kernels in graphs    %ld\n", stats.kernels_in_graphs);
        printf("graph launches/iter  %ld\n", stats.graph_launches);
        printf("copies/iter          %ld (first run: %ld)\n", stats.copies, first.copies);
        print_bytes("bytes copied/iter", stats.bytes_copied);
        print_bytes("bytes copied, 1st", first.bytes_copied);
        print_bytes("arena bytes", stats.arena_bytes);
        print_bytes("weight bytes", stats.weight_bytes);
        print_bytes("device bytes", stats.device_bytes);
        printf("segments             %d (%d in graphs)\n", stats.segments, stats.segments_in_graphs);
        printf("captures             %ld (%ld instantiations, %ld evictions, %ld graphs held, %ld plans dropped)\n",
               stats.captures, stats.instantiations, stats.evictions, stats.graphs_live, stats.plans_evicted);
        if (stats.exec_updates || stats.exec_updates_refused)
            printf("exec updates         %ld (%ld refused: instantiated instead)\n", stats.exec_updates, stats.exec_updates_refused);
        if (stats.generic_runs || stats.table_refreshes)
            printf("generic              %ld segment runs through a bucket's graph (%ld replays), %ld table refreshes, %zu bytes copied\n",
                   stats.generic_runs, stats.generic_replays, stats.table_refreshes, stats.table_bytes);
        print_bytes("graph memory", stats.graph_bytes);
        print_bytes("graph memory, peak", stats.graph_bytes_peak);
        if (stats.graph_budget_bytes) print_bytes("graph memory budget", stats.graph_budget_bytes);
        if (stats.over_budget) printf("over budget          %ld segments run eagerly: their graph alone exceeds the budget\n", stats.over_budget);
        if (o->mode == GR_MODE_AUTO)
            printf("auto decisions       %ld measured (%ld timed runs), %ld loaded from the decisions file\n",
                   stats.decisions_measured, stats.timed_runs, stats.decisions_loaded);
        if (stats.shape_decisions_measured || stats.shape_decisions_loaded)
            printf("shape policy auto    %ld segments measured (%ld measuring runs), %ld from the decisions file\n",
                   stats.shape_decisions_measured, stats.shape_measure_runs, stats.shape_decisions_loaded);
        printf("load                 %.1f ms (parse or import)\n", load_us / 1e3);
        printf("compile              %.1f ms (session create %.1f ms), capture %.1f ms\n", stats.compile_us / 1e3, create_us / 1e3,
               stats.capture_us / 1e3);
        /* a symbolic model's kernels are shape-generic: another length in another run
         * finds them in the kernel cache (0 compiled) or, in one session, loaded */
        gr_kernel_stats ks;
        memset(&ks, 0, sizeof ks);
        if (gr_session_kernel_stats(sess, &ks) == GR_OK) {
            printf("kernels prepared     %ld (%ld compiled by NVRTC, %ld from the kernel cache, %ld modules loaded)\n", ks.prepared,
                   ks.compiled, ks.disk_cache_hits, ks.modules_loaded);
            if (ks.generic_new + ks.generic_reused > 0)
                printf("shape-generic        %ld kernels, %ld structures (%ld shared a loaded module, %ld too large: literal)\n",
                       ks.generic_new + ks.generic_reused, ks.generic_new, ks.generic_reused, ks.generic_fallbacks);
        }
        if (o->profile) {
            char *text = NULL;
            gr_status pst = gr_session_profile_classes(sess, &text, &kernel_sum_us, &classes);
            if (pst != GR_OK) code = api_fail(pst, "--profile");
            else printf("kernel time sum      %.3f us\n", kernel_sum_us), print_text(text);
            gr_free_string(text);
        }
        /* the cost of a new length: measured after the timed runs and the profile (the current plan changes) */
        new_binding_cost nb;
        bench_new_bindings(g, sess, o, &nb);
        if (nb.n)
            printf("new binding          %.3f ms host time to prepare a new binding's plan (median of %d; mean %.3f, max "
                   "%.3f; each --dim value but a 1 moved by 1..%d; %ld kernels compiled by NVRTC)\n"
                   "new binding plans    %ld instantiated from a plan template (median %.3f ms), %ld compiled by the pass "
                   "pipeline (median %.3f ms)\n",
                   nb.median_ms, nb.n, nb.mean_ms, nb.max_ms, nb.n, nb.compiled, nb.plans_instantiated, nb.inst_median_ms,
                   nb.plans_compiled, nb.comp_median_ms);
        if (o->json_path) {
            FILE *f = fopen(o->json_path, "w");
            if (!f) {
                errorf("--json: cannot write '%s': %s", o->json_path, strerror(errno));
                code = EXIT_RUNTIME;
            } else {
                fputs("{\n  \"model\": ", f);
                json_string(f, o->model);
                fputs(",\n  \"device\": ", f);
                json_string(f, gr_session_device_name(sess));
                fprintf(f, ",\n  \"sim\": %s,\n  \"mode\": ", sim ? "true" : "false");
                json_string(f, mode);
                fputs(",\n", f);
                fprintf(f, "  \"iters\": %ld,\n  \"repeats\": %ld,\n  \"warmup\": %ld,\n", o->iters, o->repeats, o->warmup);
                fprintf(f, "  \"ms_per_iter\": %.6f,\n  \"ms_samples\": [", median / 1e3);
                for (long r = 0; r < o->repeats; r++) fprintf(f, "%s%.6f", r ? ", " : "", samples[r] / 1e3);
                fprintf(f, "],\n  \"gpu_ms_per_iter\": %.6f,\n", stats.gpu_time_us / 1e3);
                fprintf(f, "  \"kernels_per_iter\": %ld,\n  \"kernels_in_graphs\": %ld,\n  \"graph_launches\": %ld,\n", stats.kernels,
                        stats.kernels_in_graphs, stats.graph_launches);
                fprintf(f, "  \"copies_per_iter\": %ld,\n  \"bytes_copied_per_iter\": %zu,\n  \"bytes_copied_first_run\": %zu,\n",
                        stats.copies, stats.bytes_copied, first.bytes_copied);
                fprintf(f, "  \"arena_bytes\": %zu,\n  \"weight_bytes\": %zu,\n  \"device_bytes\": %zu,\n", stats.arena_bytes,
                        stats.weight_bytes, stats.device_bytes);
                fprintf(f, "  \"segments\": %d,\n  \"segments_in_graphs\": %d,\n  \"captures\": %ld,\n", stats.segments,
                        stats.segments_in_graphs, stats.captures);
                if (kernel_sum_us >= 0) {
                    fprintf(f, "  \"kernel_sum_ms\": %.6f,\n", kernel_sum_us / 1e3);
                    /* slowest first, as the table prints them */
                    int order[GR_KCLASS_COUNT];
                    for (int c = 0; c < GR_KCLASS_COUNT; c++) order[c] = c;
                    for (int i = 1; i < GR_KCLASS_COUNT; i++)
                        for (int j = i; j > 0 && classes.us[order[j]] > classes.us[order[j - 1]]; j--) {
                            int t = order[j];
                            order[j] = order[j - 1];
                            order[j - 1] = t;
                        }
                    fputs("  \"kernel_classes\": [", f);
                    for (int i = 0; i < GR_KCLASS_COUNT; i++) {
                        int c = order[i];
                        fputs(i ? ",\n    {\"class\": " : "\n    {\"class\": ", f);
                        json_string(f, gr_kernel_class_name(c));
                        fprintf(f, ", \"ms\": %.6f, \"share\": %.6f, \"kernels\": %d}", classes.us[c] / 1e3,
                                kernel_sum_us > 0 ? classes.us[c] / kernel_sum_us : 0.0, classes.kernels[c]);
                    }
                    fputs("\n  ],\n", f);
                }
                fputs("  \"shape_policy\": ", f);
                int by_default = 0;
                json_string(f, gr_shape_policy_name(gr_session_shape_policy(sess, &by_default)));
                fprintf(f, ",\n  \"shape_policy_default\": %s", by_default ? "true" : "false");
                fprintf(f, ",\n  \"graph_bytes\": %zu,\n  \"graph_bytes_peak\": %zu,\n  \"graph_budget_bytes\": %zu,\n",
                        stats.graph_bytes, stats.graph_bytes_peak, stats.graph_budget_bytes);
                fprintf(f, "  \"instantiations\": %ld,\n  \"evictions\": %ld,\n  \"graphs_live\": %ld,\n  \"over_budget\": %ld,\n",
                        stats.instantiations, stats.evictions, stats.graphs_live, stats.over_budget);
                if (o->capture.name)
                    fprintf(f, "  \"capture_range_bindings\": %d,\n  \"capture_range_ms\": %.3f,\n  \"capture_range_capture_ms\": %.3f,\n"
                               "  \"capture_range_instantiate_ms\": %.3f,\n",
                            capture_report.bindings, capture_report.total_ms, capture_report.capture_ms, capture_report.instantiate_ms);
                fprintf(f, "  \"plans_evicted\": %ld,\n  \"exec_updates\": %ld,\n  \"exec_updates_refused\": %ld,\n",
                        stats.plans_evicted, stats.exec_updates, stats.exec_updates_refused);
                fprintf(f, "  \"generic_runs\": %ld,\n  \"generic_replays\": %ld,\n  \"table_refreshes\": %ld,\n  \"table_bytes\": %zu,\n",
                        stats.generic_runs, stats.generic_replays, stats.table_refreshes, stats.table_bytes);
                fprintf(f, "  \"timed_runs\": %ld,\n  \"decisions_measured\": %ld,\n  \"decisions_loaded\": %ld,\n",
                        stats.timed_runs, stats.decisions_measured, stats.decisions_loaded);
                fprintf(f, "  \"shape_decisions_measured\": %ld,\n  \"shape_decisions_loaded\": %ld,\n  \"shape_measure_runs\": %ld,\n",
                        stats.shape_decisions_measured, stats.shape_decisions_loaded, stats.shape_measure_runs);
                if (kernel_sum_us >= 0) fprintf(f, "  \"kernel_sum_ms\": %.6f,\n", kernel_sum_us / 1e3);
                fprintf(f, "  \"kernels_prepared\": %ld,\n  \"kernels_compiled\": %ld,\n  \"kernel_cache_hits\": %ld,\n", ks.prepared,
                        ks.compiled, ks.disk_cache_hits);
                fprintf(f, "  \"modules_loaded\": %ld,\n  \"generic_structures\": %ld,\n  \"generic_reused\": %ld,\n", ks.modules_loaded,
                        ks.generic_new, ks.generic_reused);
                fprintf(f, "  \"load_ms\": %.3f,\n", load_us / 1e3);
                if (nb.n)
                    fprintf(f,
                            "  \"new_binding_ms\": %.4f,\n  \"new_binding_mean_ms\": %.4f,\n  \"new_binding_max_ms\": %.4f,\n"
                            "  \"new_bindings\": %d,\n  \"new_binding_nvrtc_compiles\": %ld,\n"
                            "  \"new_binding_plans_instantiated\": %ld,\n  \"new_binding_plans_compiled\": %ld,\n"
                            "  \"new_binding_instantiated_ms\": %.4f,\n  \"new_binding_compiled_ms\": %.4f,\n",
                            nb.median_ms, nb.mean_ms, nb.max_ms, nb.n, nb.compiled, nb.plans_instantiated, nb.plans_compiled,
                            nb.inst_median_ms, nb.comp_median_ms);
                fprintf(f, "  \"compile_ms\": %.3f,\n  \"session_create_ms\": %.3f,\n  \"capture_ms\": %.3f\n}\n", stats.compile_us / 1e3,
                        create_us / 1e3, stats.capture_us / 1e3);
                if (fclose(f) != 0) {
                    errorf("--json: cannot write '%s'", o->json_path);
                    code = EXIT_RUNTIME;
                }
            }
        }
    }
    free(samples);
    free(walls);
    if (sess) gr_session_destroy(sess);
    if (g) gr_graph_destroy(g);
    input_set_free(&in);
    return code;
}

/* ==== dump, explain ============================================================================ */
/* dump and explain text holds the model's names: escaped like every message */
static void print_text(const char *text) {
    if (!text || !*text) return;
    put_escaped(stdout, text, true);
    if (text[strlen(text) - 1] != '\n') fputc('\n', stdout);
}

static int cmd_dump(const cli_opts *o) {
    gr_graph_t g = NULL;
    int n = o->n_dims;
    char **names = calloc((size_t)(n ? n : 1), sizeof *names);
    int64_t *values = calloc((size_t)(n ? n : 1), sizeof *values);
    int code = names && values ? 0 : (errorf("out of memory"), EXIT_RUNTIME);
    for (int k = 0; k < n && !code; k++) {
        long v = 0;
        parse_long(o->dims[k].value, &v); /* checked by parse_args */
        values[k] = v;
        if (!(names[k] = malloc(o->dims[k].name_len + 1))) code = (errorf("out of memory"), EXIT_RUNTIME);
        else memcpy(names[k], o->dims[k].name, o->dims[k].name_len), names[k][o->dims[k].name_len] = 0;
        for (int j = 0; j < k && !code; j++)
            if (!strcmp(names[j], names[k]) && values[j] != values[k])
                code = (errorf("--dim: '%s' given twice with different values", show(names[k])), EXIT_USAGE);
    }
    if (!code) code = load_graph_opts(o, &g);
    /* as for run: every --dim names a symbolic dim of the model, and every symbol an input
     * needs has a value (the message says how to give one) */
    for (int k = 0; k < n && !code; k++)
        if (!is_symbol(g, names[k])) code = (errorf("--dim: the model has no symbolic dim named '%s'", show(names[k])), EXIT_USAGE);
    for (int i = 0; !code && i < gr_graph_num_inputs(g); i++) {
        gr_value_info info;
        int64_t dims[GR_MAX_DIMS];
        if (gr_graph_input_info(g, i, &info) != GR_OK) continue; /* the dump reports it */
        gr_status st = gr_graph_input_dims(g, i, n, (const char *const *)names, values, dims);
        if (st == GR_ERR_NOT_FOUND) {
            const char *msg = gr_last_error(), *q = strstr(msg, "symbolic dim '");
            char sym[128] = "?";
            if (q) {
                q += strlen("symbolic dim '");
                size_t len = 0;
                while (q[len] && q[len] != '\'' && len + 1 < sizeof sym) len++;
                memcpy(sym, q, len);
                sym[len] = 0;
            }
            code = (errorf("input '%s' has symbolic dim '%s' that nothing binds: pass --dim %s=VALUE", show(info.name), show(sym),
                           show(sym)),
                    EXIT_USAGE);
        }
    }
    if (!code) {
        char *text = NULL;
        gr_session_options so;
        gr_session_options_init(&so);
        so.no_fuse_attention = o->no_fuse_attention;
        so.no_fuse_epilogue = o->no_fuse_epilogue;
        so.fuse_attention_f32 = o->fuse_attention_f32;
        so.precision = o->precision;
        gr_status st = gr_graph_dump_passes_with(g, n, (const char *const *)names, values, &so, &text);
        if (st == GR_ERR_NOT_FOUND) code = (errorf("--dim: %s", gr_last_error()), EXIT_USAGE);
        else if (st != GR_OK) code = api_fail(st, o->model);
        else print_text(text);
        if (text) gr_free_string(text);
    }
    for (int k = 0; names && k < n; k++) free(names[k]);
    free(names);
    free(values);
    if (g) gr_graph_destroy(g);
    return code;
}

/* explain without a binding: the symbolic plan (dims, ranges, every shape as an expression) */
static int explain_symbolic(const cli_opts *o, gr_graph_t g) {
    char *text = NULL;
    gr_status st = gr_graph_explain(g, &text);
    if (st != GR_OK) return api_fail(st, o->model);
    print_text(text);
    gr_free_string(text);
    return 0;
}

static int cmd_explain(const cli_opts *o) {
    gr_graph_t g = NULL;
    gr_session_t sess = NULL;
    input_set in = {0};
    if (o->n_dims == 0 && o->n_inputs == 0) {
        int code = load_graph_opts(o, &g);
        if (!code && gr_graph_num_dims(g) > 0 && o->tp > 1) {
            /* the splits need no binding: the session's explain lists them */
            code = create_session(g, o, &sess);
            char *text = NULL;
            gr_status st = code ? GR_OK : gr_session_explain(sess, &text);
            if (!code && st != GR_OK) code = api_fail(st, o->model);
            else if (!code) print_text(text);
            if (text) gr_free_string(text);
            if (sess) gr_session_destroy(sess);
            gr_graph_destroy(g);
            return code;
        }
        if (!code && gr_graph_num_dims(g) > 0) {
            code = explain_symbolic(o, g);
            gr_graph_destroy(g);
            return code;
        }
        if (g) gr_graph_destroy(g);
        g = NULL;
        if (code) return code;
    }
    int code = open_session(o, &g, &sess, &in);
    if (!code) {
        gr_status st = gr_session_run(sess);
        if (st != GR_OK) code = api_fail(st, o->model);
    }
    if (!code) {
        char *text = NULL;
        gr_status st = gr_session_explain(sess, &text);
        if (st != GR_OK) code = api_fail(st, o->model);
        else print_text(text);
        if (text) gr_free_string(text);
    }
    if (sess) gr_session_destroy(sess);
    if (g) gr_graph_destroy(g);
    input_set_free(&in);
    return code;
}

/* ==== main ===================================================================================== */
int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (argc > 2 && strcmp(cmd, "help") == 0) {
            const char *c = argv[2];
            if (!strcmp(c, "generate")) {
                fputs(graft_generate_usage, stdout);
                return 0;
            }
            if (strcmp(c, "run") && strcmp(c, "bench") && strcmp(c, "dump") && strcmp(c, "explain")) {
                errorf("help: unknown command '%s' (commands: run, bench, dump, explain, generate)", c);
                return EXIT_USAGE;
            }
            print_usage(stdout, c);
            return 0;
        }
        fputs(usage_main, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("graft %s\n", GRAFT_CLI_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "generate")) return graft_cmd_generate(argc, argv);
    int allowed;
    int (*fn)(const cli_opts *);
    if (!strcmp(cmd, "run")) allowed = OPT_INPUTS | OPT_DIM | OPT_OUTDIR, fn = cmd_run;
    else if (!strcmp(cmd, "bench")) allowed = OPT_INPUTS | OPT_DIM | OPT_BENCH, fn = cmd_bench;
    else if (!strcmp(cmd, "dump")) allowed = OPT_DIM, fn = cmd_dump;
    else if (!strcmp(cmd, "explain")) allowed = OPT_INPUTS | OPT_DIM, fn = cmd_explain;
    else {
        if (cmd[0] == '-') errorf("unknown option '%s' (see graft --help)", cmd);
        else errorf("unknown command '%s' (commands: run, bench, dump, explain, generate; see graft --help)", cmd);
        return EXIT_USAGE;
    }
    cli_opts o = {.cmd = cmd, .out_dir = "out", .device = -1, .mode = -1, .arena = -1, .shapes = -1, .iters = 10, .warmup = 2, .repeats = 1};
    o.inputs = calloc((size_t)argc, sizeof *o.inputs);
    o.dims = calloc((size_t)argc, sizeof *o.dims);
    o.ranges = calloc((size_t)argc, sizeof *o.ranges);
    int code;
    if (!o.inputs || !o.dims || !o.ranges) {
        errorf("out of memory");
        code = EXIT_RUNTIME;
    } else {
        code = parse_args(argc, argv, allowed, &o);
        if (code < 0) code = fn(&o);
    }
    free(o.inputs);
    free(o.dims);
    free(o.ranges);
    return code;
}
