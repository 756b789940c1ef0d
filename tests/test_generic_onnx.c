/* tests/test_generic_onnx — the dynamic-axis GPT-2 / BERT / Llama exports
 * (tests/data/onnx/dyn) through one session each: once a binding has run, a new
 * length prepares no kernel of a new structure, so it compiles and loads nothing
 * (test_dynamic checks the outputs against PyTorch).
 * Dims of 1: a symbolic dim that is 1 at a binding is lowered as if it were larger
 * (ir.h var_dims, kir.h var_outer), so seq 1 and batch 1 share the structures of
 * longer bindings. What is left: a layout class (contiguous or not) decided on
 * concrete strides can flip where a stride that is a product of symbols happens to
 * equal the row-major stride because a factor is 1; such a first binding of a size
 * class may add a few structures, bounded here to a quarter of the first binding's.
 * Runs on the simulator; GRAFT_TEST_DEVICE=cuda runs it on the GPU, where the NVRTC
 * compilations and module loads are counted too. */
#include "check.h"
#include "npy.h"
#include "dyn_fixtures.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>


/* in order; `fresh`: the first binding, or the first with a symbol at 1 or above 1 where
 * the earlier ones had it the other way (may add a few structures, see above) */
static const struct {
    const char *name;
    bool fresh;
} bindings[] = {{"b1_s5", true}, {"b1_s17", false}, {"b1_s64", false}, {"b1_s1", true},
                {"b3_s7", true}, {"b8_s3", false}};

static void run_case(const char *c, gr_mode mode) {
    char path[512];
    snprintf(path, sizeof path, DYN "%s/model.onnx", c);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int n_in = gr_graph_num_inputs(g);
    gr_kernel_stats before, now;
    long first_structures = 0;
    memset(&before, 0, sizeof before);
    for (int b = 0; s && b < (int)(sizeof bindings / sizeof bindings[0]); b++) {
        bool ok = true;
        for (int i = 0; i < n_in && ok; i++) {
            gr_value_info info;
            CHECK_OK(gr_graph_input_info(g, i, &info));
            snprintf(path, sizeof path, DYN "%s/%s/%s.npy", c, bindings[b].name, info.name);
            ok = set_input_file(s, info.name, path);
        }
        if (!ok) continue;
        CHECK_MSG(gr_session_run(s) == GR_OK, "%s %s: run: %s", c, bindings[b].name, gr_last_error());
        CHECK_OK(gr_session_kernel_stats(s, &now));
        CHECK_MSG(now.prepared > before.prepared, "%s %s: a new binding prepared no kernel", c, bindings[b].name);
        CHECK(now.generic_new + now.generic_reused + now.generic_fallbacks > before.generic_new + before.generic_reused);
        if (bindings[b].fresh && b > 0) {
            long added = now.generic_new - before.generic_new, first = first_structures;
            CHECK_MSG(added * 4 <= first, "%s %s: %ld new structures at a size-1 class change (first binding: %ld)", c,
                      bindings[b].name, added, first);
        }
        if (b == 0) first_structures = now.generic_new;
        if (!bindings[b].fresh) {
            CHECK_MSG(now.generic_new == before.generic_new && now.compiled == before.compiled &&
                          now.modules_loaded == before.modules_loaded,
                      "%s %s: %ld new structures, %ld compiled, %ld modules loaded", c, bindings[b].name,
                      now.generic_new - before.generic_new, now.compiled - before.compiled,
                      now.modules_loaded - before.modules_loaded);
        }
        if (mode == GR_MODE_EAGER)
            printf("%-16s %-6s prepared %3ld, structures %3ld (+%ld), shared %3ld, compiled %ld\n", c, bindings[b].name,
                   now.prepared, now.generic_new, now.generic_new - before.generic_new, now.generic_reused, now.compiled);
        before = now;
    }
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

int main(void) {
    for (int i = 0; i < (int)(sizeof dyn_cases / sizeof dyn_cases[0]); i++) {
        run_case(dyn_cases[i], GR_MODE_EAGER);
        run_case(dyn_cases[i], GR_MODE_GRAPH);
    }
    return check_summary("test_generic_onnx");
}
