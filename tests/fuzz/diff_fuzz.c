/* libFuzzer target: eager mode against graph mode on the simulator.
 *
 * The input is .gir text, optionally followed by a NUL byte and data bytes
 * that choose the symbolic dims and the input values (without them, a hash of
 * the text does). A graph that parses is run twice, with different input
 * values, in a session of each mode through the public API (graft.h): every
 * call must return the same status in both, and every output must have the
 * same type and the same bits; no call may fail with GR_ERR_INTERNAL, or
 * without a message, or with raw control bytes in it. A violation calls
 * abort(), which libFuzzer reports. Graph mode captures on the first run and
 * replays on the second, so both capture and replay are compared with eager
 * execution.
 *
 * Work per input is bounded so the fuzzer does not time out: at most
 * DIFF_MAX_NODES nodes (subgraphs included), and at most DIFF_MAX_ELEMS
 * elements summed over every value of the graph once its symbolic dims are
 * bound (inputs, constants, intermediates and outputs alike). */
#include "graft.h"
#include "fuzz-common.h"
#include "ir/ir.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DIFF_MAX_NODES 200
#define DIFF_MAX_ELEMS 100000
#define DIFF_RUNS 2
#define FUZZ_BASE_DIR "/nonexistent-graft-fuzz-dir"

/* ==== deterministic input data ========================================================= */
typedef struct {
    const uint8_t *bytes;
    size_t n, pos;
    uint64_t state; /* when the bytes run out: a generator seeded from everything */
} source;

static unsigned next_byte(source *src) {
    if (src->pos < src->n) return src->bytes[src->pos++];
    src->state = src->state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(src->state >> 56);
}

static const double float_values[16] = {0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 3.0, 0.001, 100.0, -7.75, 0.25, 1e30, -0.0, 1e-30, 1.0 / 0.0, 0.0 / 0.0};
static const int64_t int_values[8] = {0, 1, 2, -1, 3, -2, 4, 1};

static void fill_value(source *src, gr_dtype t, void *buf, int64_t numel) {
    for (int64_t i = 0; i < numel; i++) {
        unsigned b = next_byte(src);
        if (t == GR_BOOL) ((uint8_t *)buf)[i] = b & 1;
        else if (gr_dtype_is_float(t)) gr_store_f64(buf, t, i, float_values[b & 15]);
        else gr_store_i64(buf, t, i, int_values[b & 7]);
    }
}

/* ==== bounding the work ================================================================ */
static int count_nodes(const gr_graph *g) {
    int n = g->nodes.len;
    for (int i = 0; i < g->nodes.len; i++)
        for (int a = 0; a < g->nodes.data[i].n_attr; a++)
            if (g->nodes.data[i].attrs[a].graph) n += count_nodes(g->nodes.data[i].attrs[a].graph);
    return n;
}

/* Adds the elements of every typed value (subgraphs included) to *total,
 * saturating; false once the total passes the cap. */
static bool elems_within(const gr_graph *g, int64_t *total) {
    for (int v = 0; v < g->values.len; v++) {
        const gr_ir_value *val = &g->values.data[v];
        if (!val->typed) continue;
        int64_t numel = 1;
        for (int d = 0; d < val->ndim; d++) {
            int64_t size = val->dims[d].size;
            if (size < 0 || __builtin_mul_overflow(numel, size, &numel)) return false;
        }
        if (numel > DIFF_MAX_ELEMS) return false;
        *total += numel;
        if (*total > DIFF_MAX_ELEMS) return false;
    }
    for (int i = 0; i < g->nodes.len; i++)
        for (int a = 0; a < g->nodes.data[i].n_attr; a++)
            if (g->nodes.data[i].attrs[a].graph && !elems_within(g->nodes.data[i].attrs[a].graph, total)) return false;
    return true;
}

/* The graph specialized to sym_values, for counting. A graph that does not
 * specialize is not refused: both sessions fail on it the same way, early. */
static bool small_enough(const gr_graph *g, const int64_t *sym_values) {
    if (count_nodes(g) > DIFF_MAX_NODES) return false;
    gr_graph *c = NULL;
    if (gr_ir_graph_clone(g, &c) != GR_OK) return false;
    bool ok = true;
    if (gr_ir_specialize(c, sym_values) == GR_OK) {
        int64_t total = 0;
        ok = elems_within(c, &total);
    }
    gr_ir_graph_destroy(c);
    return ok;
}

/* ==== one session's transcript ========================================================== */
/* Everything observable about a session's runs, in call order: each call's
 * status, each output's type and bytes. Compared byte for byte; `where`
 * records what each stretch of bytes came from, for the report. */
typedef struct {
    uint8_t *bytes;
    size_t len, cap;
    char where[64][96];
    size_t where_at[64];
    int n_where;
    char first_error[512];
} transcript;

static void put(transcript *t, const void *p, size_t n) {
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->len + n) cap *= 2;
        uint8_t *b = realloc(t->bytes, cap);
        if (!b) abort();
        t->bytes = b;
        t->cap = cap;
    }
    if (n) memcpy(t->bytes + t->len, p, n);
    t->len += n;
}

static void mark(transcript *t, const char *what) {
    if (t->n_where >= 64) return;
    snprintf(t->where[t->n_where], sizeof t->where[0], "%s", what);
    t->where_at[t->n_where++] = t->len;
}

static bool put_status(transcript *t, const char *what, gr_status st) {
    mark(t, what);
    int32_t s = st;
    put(t, &s, sizeof s);
    if (st != GR_OK && !t->first_error[0]) snprintf(t->first_error, sizeof t->first_error, "%s: %s", what, gr_last_error());
    if (st == GR_ERR_INTERNAL || (st != GR_OK && (!*gr_last_error() || !fuzz_message_escaped(gr_last_error())))) {
        /* bad input deserves a clear error; GR_ERR_INTERNAL means graft broke its own rules */
        fprintf(stderr, "diff_fuzz: %s returned %s: '%s'\n", what, gr_status_name(st), gr_last_error());
        abort();
    }
    return st == GR_OK;
}

typedef struct {
    const gr_graph *g;
    const int64_t *sym_values;
    void *in_data[64];
    size_t in_bytes[64];
    int64_t in_dims[64][GR_MAX_DIMS];
} run_inputs;

static void session_transcript(gr_graph_t g, gr_mode mode, const run_inputs *runs, transcript *t) {
    gr_session_options opt;
    gr_session_options_init(&opt);
    opt.device = GR_DEVICE_SIM;
    opt.mode = mode;
    gr_session_t s = NULL;
    if (!put_status(t, "gr_session_create", gr_session_create(g, &opt, &s))) return;
    int n_in = gr_graph_num_inputs(g), n_out = gr_graph_num_outputs(g);
    for (int r = 0; r < DIFF_RUNS; r++) {
        char what[96];
        for (int i = 0; i < n_in; i++) {
            gr_value_info info;
            if (gr_graph_input_info(g, i, &info) != GR_OK) abort();
            snprintf(what, sizeof what, "run %d: gr_session_set_input %d", r, i);
            put_status(t, what,
                       gr_session_set_input(s, info.name, info.dtype, info.ndim, runs[r].in_dims[i], runs[r].in_data[i], runs[r].in_bytes[i]));
        }
        snprintf(what, sizeof what, "run %d: gr_session_run", r);
        if (!put_status(t, what, gr_session_run(s))) continue;
        snprintf(what, sizeof what, "run %d: gr_session_wait", r);
        if (!put_status(t, what, gr_session_wait(s))) continue;
        for (int o = 0; o < n_out; o++) {
            gr_output out;
            snprintf(what, sizeof what, "run %d: output %d", r, o);
            if (!put_status(t, what, gr_session_output(s, o, &out))) continue;
            gr_value_info info;
            if (!put_status(t, what, gr_session_output_info(s, out, &info))) continue;
            put(t, &info.dtype, sizeof info.dtype);
            put(t, &info.ndim, sizeof info.ndim);
            put(t, info.dims, sizeof info.dims[0] * (size_t)info.ndim);
            size_t nbytes = gr_session_output_nbytes(s, out);
            void *buf = malloc(nbytes ? nbytes : 1);
            if (!buf) abort();
            snprintf(what, sizeof what, "run %d: output %d data (%zu bytes)", r, o, nbytes);
            if (put_status(t, what, gr_session_output_read(s, out, buf, nbytes))) put(t, buf, nbytes);
            free(buf);
        }
    }
    gr_session_destroy(s);
}

static const char *where_of(const transcript *t, size_t at) {
    const char *w = "?";
    for (int i = 0; i < t->n_where && t->where_at[i] <= at; i++) w = t->where[i];
    return w;
}

static void compare(const transcript *eager, const transcript *graph, const char *text) {
    if (eager->len == graph->len && !memcmp(eager->bytes, graph->bytes, eager->len)) return;
    size_t at = 0;
    while (at < eager->len && at < graph->len && eager->bytes[at] == graph->bytes[at]) at++;
    fprintf(stderr, "diff_fuzz: eager and graph mode differ at byte %zu of their transcripts\n", at);
    fprintf(stderr, "  eager: %s (%zu bytes; first error: %s)\n", where_of(eager, at), eager->len, eager->first_error);
    fprintf(stderr, "  graph: %s (%zu bytes; first error: %s)\n", where_of(graph, at), graph->len, graph->first_error);
    fprintf(stderr, "---- graph ----\n%s\n", text);
    abort();
}

/* ==== the target ======================================================================== */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 16)) return 0;
    size_t text_len = strnlen((const char *)data, size);
    char *text = malloc(text_len + 1);
    if (!text) return 0;
    memcpy(text, data, text_len);
    text[text_len] = 0;
    source src = {data + text_len, size - text_len, 0, gr_hash_bytes(data, size, 0x9e3779b97f4a7c15ull)};
    if (src.n) src.pos = 1; /* the NUL */

    long live = gr_debug_live_allocs();
    gr_graph_t g = NULL;
    if (gr_graph_parse(text, "fuzz.gir", FUZZ_BASE_DIR, &g) != GR_OK) {
        if (getenv("DIFF_FUZZ_VERBOSE")) fprintf(stderr, "diff_fuzz: does not load: %s\n", gr_last_error());
        free(text);
        return 0; /* the parser's own target checks its errors */
    }
    int n_in = gr_graph_num_inputs(g);
    int64_t sym_values[64];
    run_inputs runs[DIFF_RUNS];
    memset(runs, 0, sizeof runs);
    bool go = n_in <= 64 && g->syms.len <= 64;
    for (int k = 0; go && k < g->syms.len; k++) sym_values[k] = 1 + next_byte(&src) % 4;
    go = go && small_enough(g, sym_values);
    for (int r = 0; go && r < DIFF_RUNS; r++) {
        int64_t total = 0;
        for (int i = 0; i < n_in; i++) {
            gr_value_info info;
            if (gr_graph_input_info(g, i, &info) != GR_OK) abort();
            int64_t numel = 1;
            for (int d = 0; d < info.ndim; d++) {
                int64_t dim = info.dims[d];
                if (dim < 0) {
                    /* the dim's expression for this binding (1 if it does not evaluate) */
                    if (gr_dx_eval(g, g->values.data[g->inputs.data[i]].dims[d], sym_values, &dim) != GR_OK || dim < 0) dim = 1;
                }
                runs[r].in_dims[i][d] = dim;
                /* checked here too: a graph that does not specialize was not counted */
                if (__builtin_mul_overflow(numel, dim, &numel) || numel > DIFF_MAX_ELEMS) go = false;
            }
            total += numel;
            if (!go || total > DIFF_MAX_ELEMS) {
                go = false;
                break;
            }
            runs[r].in_bytes[i] = (size_t)numel * gr_dtype_size(info.dtype);
            runs[r].in_data[i] = malloc(runs[r].in_bytes[i] ? runs[r].in_bytes[i] : 1);
            if (!runs[r].in_data[i]) abort();
            fill_value(&src, info.dtype, runs[r].in_data[i], numel);
        }
    }
    if (!go && getenv("DIFF_FUZZ_VERBOSE")) fprintf(stderr, "diff_fuzz: too large to run\n");
    if (go) {
        transcript eager = {0}, graph = {0};
        session_transcript(g, GR_MODE_EAGER, runs, &eager);
        session_transcript(g, GR_MODE_GRAPH, runs, &graph);
        compare(&eager, &graph, text);
        if (getenv("DIFF_FUZZ_VERBOSE"))
            fprintf(stderr, "diff_fuzz: same %zu-byte transcripts; first error: %s\n", eager.len,
                    eager.first_error[0] ? eager.first_error : "none");
        free(eager.bytes);
        free(graph.bytes);
    }
    for (int r = 0; r < DIFF_RUNS; r++)
        for (int i = 0; i < 64; i++) free(runs[r].in_data[i]);
    gr_graph_destroy(g);
    if (gr_debug_live_allocs() != live) {
        fprintf(stderr, "diff_fuzz: graft allocations leaked\n---- graph ----\n%s\n", text);
        abort();
    }
    free(text);
    return 0;
}
