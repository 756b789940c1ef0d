/* tests/test_cnn_session — examples/cnn.onnx (symbolic batch N) through one session at
 * N = 4, 2, 1, 3, eager and graph mode: every image's logits equal those of the same image
 * run alone (N = 1) to float tolerance, graph mode is bit-identical to eager mode, and once
 * N = 4 has run, N = 2 and N = 3 prepare no kernel of a new structure (the conv, pool, pad
 * and resize kernels are shape-generic over the batch; N = 1 may add a few, as
 * test_generic_onnx explains). Simulator by default; GRAFT_TEST_DEVICE=cuda runs it on the
 * GPU (scripts/gpu-check.sh's examples run compares CUDA with the simulator). */
#include "check.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "examples/cnn.onnx"
#define C 3
#define HW 32
#define CLASSES 10
#define MAXN 4
#define IMG (C * HW * HW)

static gr_device_kind test_device(void) {
    const char *d = getenv("GRAFT_TEST_DEVICE");
    return d && !strcmp(d, "cuda") ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
}

static float images[MAXN * IMG];

/* runs images[first .. first + n) and reads the logits into out */
static bool run(gr_session_t s, int first, int n, float *out) {
    int64_t dims[4] = {n, C, HW, HW};
    gr_status st = gr_session_set_input(s, "x", GR_F32, 4, dims, images + (size_t)first * IMG, (size_t)n * IMG * sizeof(float));
    CHECK_MSG(st == GR_OK, "set_input N=%d: %s", n, gr_last_error());
    if (st == GR_OK) st = gr_session_run(s);
    CHECK_MSG(st == GR_OK, "run N=%d: %s", n, gr_last_error());
    gr_output o;
    if (st == GR_OK) st = gr_session_output(s, 0, &o);
    if (st == GR_OK) st = gr_session_output_read(s, o, out, (size_t)n * CLASSES * sizeof(float));
    CHECK_MSG(st == GR_OK, "output N=%d: %s", n, gr_last_error());
    return st == GR_OK;
}

static void run_mode(gr_mode mode, float *out4) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(MODEL, &g));
    if (!g) return;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    float alone[MAXN][CLASSES], batch[MAXN * CLASSES];
    for (int i = 0; i < MAXN; i++) /* each image alone first, twice in graph mode (warm-up, then replay) */
        for (int r = 0; r < (mode == GR_MODE_GRAPH ? 2 : 1); r++) run(s, i, 1, alone[i]);
    gr_kernel_stats before, now;
    static const int sizes[] = {4, 2, 3};
    for (int k = 0; k < 3; k++) {
        int n = sizes[k];
        CHECK_OK(gr_session_kernel_stats(s, &before));
        for (int r = 0; r < (mode == GR_MODE_GRAPH ? 2 : 1); r++)
            if (!run(s, 0, n, batch)) goto done;
        CHECK_OK(gr_session_kernel_stats(s, &now));
        if (k > 0)
            CHECK_MSG(now.generic_new == before.generic_new && now.compiled == before.compiled,
                      "N=%d after N=4: %ld new kernel structures, %ld compiled", n, now.generic_new - before.generic_new,
                      now.compiled - before.compiled);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < CLASSES; j++) {
                float a = batch[i * CLASSES + j], b = alone[i][j];
                CHECK_MSG(fabsf(a - b) <= 1e-4f + 1e-4f * fabsf(b), "N=%d image %d logit %d: %g batched, %g alone", n, i, j, a, b);
            }
        if (k == 0) memcpy(out4, batch, sizeof(float) * 4 * CLASSES);
    }
done:
    gr_session_destroy(s);
}

int main(void) {
    srand(1);
    for (int i = 0; i < MAXN * IMG; i++) images[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    long base = gr_debug_live_allocs();
    float eager[4 * CLASSES], graph[4 * CLASSES];
    run_mode(GR_MODE_EAGER, eager);
    run_mode(GR_MODE_GRAPH, graph);
    CHECK_MSG(memcmp(eager, graph, sizeof eager) == 0, "graph mode logits differ from eager mode's");
    CHECK_MSG(gr_debug_live_allocs() == base, "%ld allocations leaked", gr_debug_live_allocs() - base);
    return check_summary("test_cnn_session");
}
