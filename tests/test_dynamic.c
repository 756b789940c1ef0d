/* tests/test_dynamic — one session serves every length of a dynamic-axis export.
 *
 * The fixtures in tests/data/onnx/dyn/ are GPT-2, BERT and Llama-style models
 * exported by PyTorch with batch and seq as dynamic axes, with PyTorch's
 * output at six bindings (tests/py/make_dynamic_fixtures.py). Here each model
 * is loaded once and one session runs all bindings in turn (then an earlier
 * one again: its plan is reused), in eager and graph mode, with the arena
 * planned per binding and once for the largest binding; every output is
 * compared with PyTorch's (||out - ref|| / ||ref|| <= 1e-4). Then bad
 * bindings: a dim outside its declared range, two inputs disagreeing on a
 * symbol. The time to prepare a new binding is printed, never asserted.
 * Runs on the simulator (CI); GRAFT_TEST_DEVICE=cuda runs it on the GPU.
 */
#include "check.h"
#include "npy.h"
#include "dyn_fixtures.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>


static const struct {
    const char *name;
    int64_t batch, seq;
} bindings[] = {{"b1_s1", 1, 1}, {"b1_s5", 1, 5}, {"b1_s17", 1, 17}, {"b1_s64", 1, 64}, {"b3_s7", 3, 7}, {"b8_s3", 8, 3}, {"b1_s5", 1, 5}};

static double rel_err(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}

/* Runs every binding through one session; returns the number compared. */
static int run_case(const char *c, gr_mode mode, int arena) {
    char path[512];
    snprintf(path, sizeof path, DYN "%s/model.onnx", c);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return 0;
    CHECK_MSG(gr_graph_num_dims(g) == 2, "%s: %d symbolic dims", c, gr_graph_num_dims(g));
    /* the exporter's ranges (torch.export: batch <= 8, seq <= 64); 0 stays outside */
    CHECK_OK(gr_graph_set_dim_range(g, "batch", 1, 8));
    CHECK_OK(gr_graph_set_dim_range(g, "seq", 1, 64));
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    o.arena_policy = arena;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int n_in = gr_graph_num_inputs(g);
    const char *in_names[4] = {0};
    gr_value_info info;
    for (int i = 0; i < n_in && i < 4; i++)
        if (gr_graph_input_info(g, i, &info) == GR_OK) in_names[i] = info.name;
    int compared = 0;
    for (int b = 0; s && b < (int)(sizeof bindings / sizeof bindings[0]); b++) {
        bool ok = true;
        for (int i = 0; i < n_in && i < 4 && ok; i++) {
            snprintf(path, sizeof path, DYN "%s/%s/%s.npy", c, bindings[b].name, in_names[i]);
            ok = set_input_file(s, in_names[i], path);
        }
        if (!ok) continue;
        double t0 = gr_session_clock_us(s);
        gr_status st = gr_session_run(s);
        CHECK_MSG(st == GR_OK, "%s %s: run: %s", c, bindings[b].name, gr_last_error());
        if (st != GR_OK) continue;
        gr_output out;
        CHECK_OK(gr_session_output(s, 0, &out));
        size_t nbytes = gr_session_output_nbytes(s, out);
        float *got = malloc(nbytes ? nbytes : 1);
        CHECK_OK(gr_session_output_read(s, out, got, nbytes));
        gr_run_stats rs;
        CHECK_OK(gr_session_stats(s, &rs));
        npy_array ref;
        char err[NPY_ERR_LEN];
        snprintf(path, sizeof path, DYN "%s/%s/last_hidden_state.npy", c, bindings[b].name);
        if (npy_read(path, &ref, err) == 0) {
            gr_value_info oi;
            CHECK_OK(gr_session_output_info(s, out, &oi));
            CHECK_MSG(oi.ndim == 3 && oi.dims[0] == bindings[b].batch && oi.dims[1] == bindings[b].seq && oi.dims[2] == 64,
                      "%s %s: output shape", c, bindings[b].name);
            if (ref.nbytes == nbytes) {
                double e = rel_err(got, ref.data, nbytes / sizeof(float));
                CHECK_MSG(e <= 1e-4, "%s %s (%s, arena %s): relative error %.3e", c, bindings[b].name,
                          mode == GR_MODE_GRAPH ? "graph" : "eager", arena ? "max" : "per-shape", e);
                compared++;
            } else {
                CHECK_MSG(false, "%s %s: %zu output bytes, PyTorch's has %zu", c, bindings[b].name, nbytes, ref.nbytes);
            }
            npy_free(&ref);
        } else {
            CHECK_MSG(false, "%s", err);
        }
        if (b == 3 && mode == GR_MODE_EAGER)
            printf("%-18s %-7s arena %-9s: binding %s: plan compiled in %.2f ms (host), run %.1f us\n", c, "eager",
                   arena ? "max" : "per-shape", bindings[b].name, rs.compile_us / 1e3, gr_session_clock_us(s) - t0);
        free(got);
    }
    if (s && arena == GR_ARENA_MAX_SHAPE) {
        char *text = NULL;
        CHECK_OK(gr_session_explain(s, &text));
        /* b1_s5 again: batch 1 may have a structure of its own; the last batch > 1 binding shares addresses */
        CHECK_MSG(text && strstr(text, "arena: policy max shape"), "%s: explain: %s", c, text ? text : "");
        gr_free_string(text);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return compared;
}

/* With --arena max, the bindings with batch > 1 share the largest binding's addresses. */
static void test_max_arena_addresses(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(DYN "gpt2_dynamo/model.onnx", &g));
    if (!g) return;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.arena_policy = GR_ARENA_MAX_SHAPE;
    gr_session_t s = NULL;
    /* without declared upper bounds the policy cannot size the arena */
    CHECK_ERR(gr_session_create(g, &o, &s), GR_ERR_INVALID, "needs an upper bound for every symbolic dim");
    CHECK_OK(gr_graph_set_dim_range(g, "batch", 1, 8));
    CHECK_OK(gr_graph_set_dim_range(g, "seq", 1, 64));
    CHECK_OK(gr_session_create(g, &o, &s));
    const char *names[] = {"b3_s7", "b8_s3"};
    for (int k = 0; s && k < 2; k++) {
        char path[256];
        snprintf(path, sizeof path, DYN "gpt2_dynamo/%s/input_ids.npy", names[k]);
        if (!set_input_file(s, "input_ids", path)) continue;
        CHECK_OK(gr_session_run(s));
        char *text = NULL;
        CHECK_OK(gr_session_explain(s, &text));
        CHECK_MSG(text && strstr(text, "sit at the addresses that binding gives them"), "%s: %s", names[k], text ? text : "");
        gr_free_string(text);
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

static void test_bad_bindings(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(DYN "bert_dynamo/model.onnx", &g));
    if (!g) return;
    CHECK_OK(gr_graph_set_dim_range(g, "seq", 1, 64));
    CHECK_ERR(gr_graph_set_dim_range(g, "sequence", 1, 64), GR_ERR_NOT_FOUND, "symbolic dims: 'batch', 'seq'");
    CHECK_ERR(gr_graph_set_dim_range(g, "seq", 9, 3), GR_ERR_INVALID, "empty or negative");
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    if (s) {
        int64_t ids[2 * 65] = {0}, mask[2 * 65];
        for (int i = 0; i < 2 * 65; i++) mask[i] = 1;
        /* two inputs disagreeing on seq */
        int64_t d5[2] = {2, 5}, d6[2] = {2, 6};
        CHECK_OK(gr_session_set_input(s, "input_ids", GR_I64, 2, d5, ids, sizeof(int64_t) * 10));
        CHECK_OK(gr_session_set_input(s, "attention_mask", GR_I64, 2, d6, mask, sizeof(int64_t) * 12));
        CHECK_ERR(gr_session_run(s), GR_ERR_SHAPE, "symbolic dim 'seq' is 5 in input 'input_ids' but 6 in input 'attention_mask'");
        /* a length past the declared range */
        int64_t d65[2] = {2, 65};
        CHECK_OK(gr_session_set_input(s, "input_ids", GR_I64, 2, d65, ids, sizeof ids));
        CHECK_OK(gr_session_set_input(s, "attention_mask", GR_I64, 2, d65, mask, sizeof mask));
        CHECK_ERR(gr_session_run(s), GR_ERR_SHAPE, "symbolic dim 'seq' is 65 (from input 'input_ids'), outside its declared range (in 1..64)");
        /* the session still serves a good binding afterwards */
        CHECK_OK(gr_session_set_input(s, "input_ids", GR_I64, 2, d5, ids, sizeof(int64_t) * 10));
        CHECK_OK(gr_session_set_input(s, "attention_mask", GR_I64, 2, d5, mask, sizeof(int64_t) * 10));
        CHECK_OK(gr_session_run(s));
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

int main(void) {
    long live = gr_debug_live_allocs();
    int compared = 0;
    for (int c = 0; c < (int)(sizeof dyn_cases / sizeof dyn_cases[0]); c++)
        for (int mode = 0; mode < 2; mode++)
            for (int arena = 0; arena < 2; arena++)
                compared += run_case(dyn_cases[c], mode ? GR_MODE_GRAPH : GR_MODE_EAGER, arena ? GR_ARENA_MAX_SHAPE : GR_ARENA_PER_SHAPE);
    printf("compared %d outputs with PyTorch's\n", compared);
    CHECK(compared == 4 * 4 * 7);
    test_max_arena_addresses();
    test_bad_bindings();
    CHECK_MSG(gr_debug_live_allocs() == live, "%ld allocations leaked", gr_debug_live_allocs() - live);
    return check_summary("test_dynamic");
}
