/* Uses graft through libgraft.so and the public header alone, as a program
 * in another language would (the Python package loads the same library):
 * builds y = relu(x * w + b) with the builder API, runs it on the simulator
 * in eager and graph mode, and checks the outputs against a plain C loop and
 * each other (bit-identical). Error paths: a bad op name and a stale output. */
#include "graft.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (cond) passed++;                                \
        else {                                             \
            failed++;                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf(" (last error: %s)\n", gr_last_error()); \
        }                                                  \
    } while (0)

enum { N = 64 };

static int run_mode(gr_graph_t g, gr_mode mode, float *y) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = mode;
    gr_session_t s = NULL;
    if (gr_session_create(g, &o, &s) != GR_OK) return -1;
    CHECK(gr_session_device_name(s) != NULL, "device name");
    float x[N];
    int rc = 0;
    for (int it = 0; it < 4 && rc == 0; it++) { /* graph mode: warm-up, capture, replays */
        for (int i = 0; i < N; i++) x[i] = (float)(i - N / 2) * 0.25f + (float)it;
        int64_t dims[1] = {N};
        gr_output out;
        if (gr_session_set_input(s, "x", GR_F32, 1, dims, x, sizeof x) != GR_OK || gr_session_run(s) != GR_OK ||
            gr_session_output(s, 0, &out) != GR_OK || gr_session_output_read(s, out, y, sizeof(float) * N) != GR_OK)
            rc = -1;
        if (rc == 0 && it == 3) {
            for (int i = 0; i < N; i++) {
                float want = fmaxf(x[i] * 1.5f + 0.5f, 0.0f);
                if (fabsf(y[i] - want) > 1e-6f) {
                    CHECK(0, "mode %d: y[%d] = %g, want %g", (int)mode, i, y[i], want);
                    break;
                }
            }
        }
        if (rc == 0 && it == 3) {
            /* the handle of this run goes stale with the next run */
            CHECK(gr_session_run(s) == GR_OK, "rerun");
            float tmp[N];
            CHECK(gr_session_output_read(s, out, tmp, sizeof tmp) == GR_ERR_STALE, "stale output handle refused");
        }
    }
    gr_session_destroy(s);
    return rc;
}

int main(void) {
    gr_graph_t g = NULL;
    CHECK(gr_graph_create(&g) == GR_OK, "create");
    int64_t dims[1] = {N}, one[1] = {1};
    gr_value_t x, w, b, t[3];
    float wv = 1.5f, bv = 0.5f;
    CHECK(gr_graph_add_input(g, "x", GR_F32, 1, dims, NULL, &x) == GR_OK, "input");
    CHECK(gr_graph_add_constant(g, "w", GR_F32, 1, one, &wv, &w) == GR_OK, "w");
    CHECK(gr_graph_add_constant(g, "b", GR_F32, 1, one, &bv, &b) == GR_OK, "b");
    gr_value_t in0[2] = {x, w};
    CHECK(gr_graph_add_node(g, "mul", "scale", 2, in0, 0, NULL, 1, &t[0]) == GR_OK, "mul");
    gr_value_t in1[2] = {t[0], b};
    CHECK(gr_graph_add_node(g, "add", "shift", 2, in1, 0, NULL, 1, &t[1]) == GR_OK, "add");
    CHECK(gr_graph_add_node(g, "relu", "act", 1, &t[1], 0, NULL, 1, &t[2]) == GR_OK, "relu");
    CHECK(gr_graph_set_output(g, t[2], "y") == GR_OK, "output");
    CHECK(gr_graph_verify(g) == GR_OK, "verify");

    gr_value_t bad;
    CHECK(gr_graph_add_node(g, "no_such_op", "oops", 1, &x, 0, NULL, 1, &bad) != GR_OK &&
              strstr(gr_last_error(), "no_such_op") != NULL,
          "unknown op is a clear error");

    float ye[N], yg[N];
    CHECK(run_mode(g, GR_MODE_EAGER, ye) == 0, "eager run");
    CHECK(run_mode(g, GR_MODE_GRAPH, yg) == 0, "graph run");
    CHECK(memcmp(ye, yg, sizeof ye) == 0, "graph replay bit-identical to eager");
    gr_graph_destroy(g);
    CHECK(gr_debug_live_allocs() == 0, "no leaks: %ld live allocations", gr_debug_live_allocs());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
