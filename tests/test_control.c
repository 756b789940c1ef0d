/* tests/test_control — control flow kept as control flow (passes/cond.c, runtime/control.c) on
 * the simulator: while-loops (the body computes its condition) and If nodes too large to
 * predicate, each through one session in eager and in graph mode, over inputs that take
 * different paths (different iteration counts, both branches) in the same session: graph
 * mode keeps them on the device (a WHILE / IF_ELSE conditional node captured once) and its
 * results equal eager mode's bit for bit, and the host's. Also: swapped loop-carried values
 * (staged copies), the iteration cap (an error, never a hang), a loop nested in an if
 * (host-driven), hostile nesting (a clear error), and allocation failure at every step of
 * create + run (an error, no leak). */
#include "check.h"
#include "runtime/runtime-impl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GRAFT_TEST_DEVICE=cuda: the same checks on CUDA (scripts/control-gpu-check.sh) */
static gr_device_kind test_device(void) {
    const char *d = getenv("GRAFT_TEST_DEVICE");
    return d && !strcmp(d, "cuda") ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
}

static gr_session_t open_gir(const char *text, gr_mode mode) {
    gr_graph_t g = NULL;
    gr_status st = gr_graph_parse(text, "control.gir", NULL, &g);
    CHECK_MSG(st == GR_OK, "parse: %s", gr_last_error());
    if (st != GR_OK) return NULL;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    o.mode = mode;
    gr_session_t s = NULL;
    st = gr_session_create(g, &o, &s);
    CHECK_MSG(st == GR_OK, "create: %s", gr_last_error());
    gr_graph_destroy(g);
    return s;
}

static gr_status read_f32(gr_session_t s, int i, float *dst, size_t n) {
    gr_output o;
    gr_status st = gr_session_output(s, i, &o);
    if (st != GR_OK) return st;
    if (gr_session_output_nbytes(s, o) != n * sizeof(float)) return GR_ERR_SHAPE;
    return gr_session_output_read(s, o, dst, n * sizeof(float));
}

static bool explain_has(gr_session_t s, const char *what) {
    char *text = NULL;
    if (gr_session_explain(s, &text) != GR_OK || !text) return false;
    bool has = strstr(text, what) != NULL;
    if (!has) fprintf(stderr, "explain lacks \"%s\":\n%s\n", what, text);
    gr_free_string(text);
    return has;
}

/* ---- a while-loop: v <- v * k + x until sum(v) >= lim, at most m iterations ------------------ */
static const char *WHILE_GIR = "graft 1\n"
                               "input x: f32[4]\n"
                               "input lim: f32[]\n"
                               "input m: i64[]\n"
                               "const k: f32[] = [1.5]\n"
                               "const go: bool[] = [1]\n"
                               "vf = loop(m, go, x, body={\n"
                               "  input i: i64[]\n"
                               "  input c: bool[]\n"
                               "  input v: f32[4]\n"
                               "  w = mul(v, k)\n"
                               "  w2 = add(w, x)\n"
                               "  s = reduce_sum(w2, axes=[0], keepdims=0)\n"
                               "  more = less(s, lim)\n"
                               "  output more, w2\n"
                               "})\n"
                               "y = mul(vf, vf)\n"
                               "output vf, y\n";

static void host_while(const float *x, float lim, int64_t m, float *v) {
    memcpy(v, x, 4 * sizeof(float));
    for (int64_t t = 0; t < m; t++) {
        float s = 0;
        for (int j = 0; j < 4; j++) v[j] = v[j] * 1.5f + x[j];
        for (int j = 0; j < 4; j++) s += v[j];
        if (!(s < lim)) break;
    }
}

static void run_while(gr_session_t s, const float *x, float lim, int64_t m, float *vf, float *y) {
    int64_t d4 = 4;
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, &d4, x, 4 * sizeof(float)));
    CHECK_OK(gr_session_set_input(s, "lim", GR_F32, 0, NULL, &lim, sizeof lim));
    CHECK_OK(gr_session_set_input(s, "m", GR_I64, 0, NULL, &m, sizeof m));
    gr_status st = gr_session_run(s);
    CHECK_MSG(st == GR_OK, "run: %s", gr_last_error());
    CHECK_OK(read_f32(s, 0, vf, 4));
    CHECK_OK(read_f32(s, 1, y, 4));
}

static void test_while_loop(void) {
    gr_session_t e = open_gir(WHILE_GIR, GR_MODE_EAGER), g = open_gir(WHILE_GIR, GR_MODE_GRAPH);
    if (!e || !g) goto done;
    const float x[4] = {0.5f, 0.25f, 1.0f, 0.125f};
    const struct { float lim; int64_t m; } cases[] = {{10, 100}, {0, 100}, {1000, 3}, {1e6f, 50}, {10, 0}, {50, -2}, {10, 100}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float ve[4], ye[4], vg[4], yg[4], vh[4];
        run_while(e, x, cases[k].lim, cases[k].m, ve, ye);
        run_while(g, x, cases[k].lim, cases[k].m, vg, yg);
        host_while(x, cases[k].lim, cases[k].m, vh);
        CHECK_MSG(!memcmp(ve, vg, sizeof ve) && !memcmp(ye, yg, sizeof ye), "case %zu: graph and eager differ", k);
        for (int j = 0; j < 4; j++) CHECK_MSG(fabsf(ve[j] - vh[j]) <= 1e-5f * fabsf(vh[j]) + 1e-6f, "case %zu [%d]: %g, host %g", k, j, ve[j], vh[j]);
    }
    CHECK(explain_has(g, "one device WHILE conditional node (1 captures"));
    CHECK(explain_has(e, "loop 'vf': a while-loop"));
    CHECK(explain_has(e, "host-driven: eager mode"));
done:
    gr_session_destroy(e);
    gr_session_destroy(g);
}

/* ---- swapped carried values (Fibonacci): a' = b, b' = a + b; outputs read other state buffers -- */
static const char *FIB_GIR = "graft 1\n"
                             "input a0: f32[2]\n"
                             "input b0: f32[2]\n"
                             "input lim: f32[]\n"
                             "const m: i64[] = [1000]\n"
                             "const go: bool[] = [1]\n"
                             "af, bf = loop(m, go, a0, b0, body={\n"
                             "  input i: i64[]\n"
                             "  input c: bool[]\n"
                             "  input a: f32[2]\n"
                             "  input b: f32[2]\n"
                             "  nb = add(a, b)\n"
                             "  s = reduce_max(nb, axes=[0], keepdims=0)\n"
                             "  more = less(s, lim)\n"
                             "  output more, b, nb\n"
                             "})\n"
                             "output af, bf\n";

static void test_swapped_state(void) {
    for (int mode = 0; mode < 2; mode++) {
        gr_session_t s = open_gir(FIB_GIR, mode ? GR_MODE_GRAPH : GR_MODE_EAGER);
        if (!s) continue;
        for (float lim = 10; lim <= 1000; lim *= 10) {
            const float a0[2] = {0, 1}, b0[2] = {1, 2};
            int64_t d2 = 2;
            CHECK_OK(gr_session_set_input(s, "a0", GR_F32, 1, &d2, a0, sizeof a0));
            CHECK_OK(gr_session_set_input(s, "b0", GR_F32, 1, &d2, b0, sizeof b0));
            CHECK_OK(gr_session_set_input(s, "lim", GR_F32, 0, NULL, &lim, sizeof lim));
            CHECK_OK(gr_session_run(s));
            float af[2], bf[2], a[2] = {0, 1}, b[2] = {1, 2};
            CHECK_OK(read_f32(s, 0, af, 2));
            CHECK_OK(read_f32(s, 1, bf, 2));
            for (;;) {
                float nb[2] = {a[0] + b[0], a[1] + b[1]};
                memcpy(a, b, sizeof a);
                memcpy(b, nb, sizeof b);
                if (!(fmaxf(nb[0], nb[1]) < lim)) break;
            }
            CHECK_MSG(!memcmp(af, a, sizeof a) && !memcmp(bf, b, sizeof b), "mode %d lim %g: (%g %g) (%g %g), want (%g %g) (%g %g)", mode,
                      lim, af[0], af[1], bf[0], bf[1], a[0], a[1], b[0], b[1]);
        }
        gr_session_destroy(s);
    }
}

/* ---- the iteration cap: a loop that never ends is an error, the session goes on working ---- */
static const char *FOREVER_GIR = "graft 1\n"
                                 "input x: f32[2]\n"
                                 "input stop: f32[]\n"
                                 "const m: i64[] = [4611686018427387904]\n"
                                 "const go: bool[] = [1]\n"
                                 "vf = loop(m, go, x, body={\n"
                                 "  input i: i64[]\n"
                                 "  input c: bool[]\n"
                                 "  input v: f32[2]\n"
                                 "  w = add(v, stop)\n"
                                 "  s = reduce_sum(w, axes=[0], keepdims=0)\n"
                                 "  more = less(s, stop)\n"
                                 "  output more, w\n"
                                 "})\n"
                                 "output vf\n";

static void test_iteration_cap(void) {
    gr_rt_debug_set_loop_cap(50);
    for (int mode = 0; mode < 2; mode++) {
        gr_session_t s = open_gir(FOREVER_GIR, mode ? GR_MODE_GRAPH : GR_MODE_EAGER);
        if (!s) continue;
        const float x[2] = {0, 0};
        int64_t d2 = 2;
        float stop = 0; /* sum stays 0: 0 < 0 is false, one iteration */
        CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, &d2, x, sizeof x));
        CHECK_OK(gr_session_set_input(s, "stop", GR_F32, 0, NULL, &stop, sizeof stop));
        CHECK_OK(gr_session_run(s));
        stop = -1; /* sum falls forever: -2 < -1, -4 < -1, ... never stops */
        CHECK_OK(gr_session_set_input(s, "stop", GR_F32, 0, NULL, &stop, sizeof stop));
        gr_status st = gr_session_run(s);
        if (st == GR_OK) st = gr_session_wait(s);
        CHECK_MSG(st == GR_ERR_UNSUPPORTED && strstr(gr_last_error(), "node 'vf' (loop)") && strstr(gr_last_error(), "stops a while-loop at 50"),
                  "mode %d: %d %s", mode, (int)st, gr_last_error());
        stop = 0;
        CHECK_OK(gr_session_set_input(s, "stop", GR_F32, 0, NULL, &stop, sizeof stop));
        CHECK_OK(gr_session_run(s));
        float v[2];
        CHECK_OK(read_f32(s, 0, v, 2));
        CHECK(v[0] == 0 && v[1] == 0);
        gr_session_destroy(s);
    }
    gr_rt_debug_set_loop_cap(0);
}

/* ---- If with branches too large to predicate: one IF_ELSE node takes both paths -------------- */
#define BIG 600000
static const char *IF_GIR = "graft 1\n"
                            "input x: f32[600000]\n"
                            "input c: bool[]\n"
                            "const two: f32[] = [2]\n"
                            "const one: f32[] = [1]\n"
                            "y = if(c, then_branch={\n"
                            "  t = mul(x, two)\n"
                            "  output t\n"
                            "}, else_branch={\n"
                            "  e = sub(x, one)\n"
                            "  output e\n"
                            "})\n"
                            "z = add(y, x)\n"
                            "output z\n";

static void test_if_conditional(void) {
    float *x = malloc(BIG * sizeof(float)), *ze = malloc(BIG * sizeof(float)), *zg = malloc(BIG * sizeof(float));
    gr_session_t e = open_gir(IF_GIR, GR_MODE_EAGER), g = open_gir(IF_GIR, GR_MODE_GRAPH);
    if (!x || !ze || !zg || !e || !g) goto done;
    for (int i = 0; i < BIG; i++) x[i] = (float)(i % 97) * 0.25f - 3;
    int64_t dn = BIG;
    const unsigned char conds[] = {1, 0, 0, 1, 0};
    for (size_t k = 0; k < sizeof conds; k++) {
        gr_session_t ss[2] = {e, g};
        float *outs[2] = {ze, zg};
        for (int m = 0; m < 2; m++) {
            CHECK_OK(gr_session_set_input(ss[m], "x", GR_F32, 1, &dn, x, BIG * sizeof(float)));
            CHECK_OK(gr_session_set_input(ss[m], "c", GR_BOOL, 0, NULL, &conds[k], 1));
            CHECK_OK(gr_session_run(ss[m]));
            CHECK_OK(read_f32(ss[m], 0, outs[m], BIG));
        }
        CHECK_MSG(!memcmp(ze, zg, BIG * sizeof(float)), "cond %d: graph and eager differ", conds[k]);
        int bad = 0;
        for (int i = 0; i < BIG; i++) bad += ze[i] != (conds[k] ? x[i] * 2 + x[i] : (x[i] - 1) + x[i]);
        CHECK_MSG(bad == 0, "cond %d: %d wrong elements", conds[k], bad);
    }
    CHECK(explain_has(g, "if 'y': conditional execution (the branches write 1200000 elements"));
    CHECK(explain_has(g, "one device IF_ELSE conditional node (1 captures, 5 launches)"));
done:
    gr_session_destroy(e);
    gr_session_destroy(g);
    free(x);
    free(ze);
    free(zg);
}

/* ---- hostile nesting: ifs nested past the parser's bound are a clear error ------------------- */
static void test_deep_nesting(void) {
    size_t cap = 64 * 1024, at = 0;
    char *text = malloc(cap);
    if (!text) return;
    at += (size_t)snprintf(text + at, cap - at, "graft 1\ninput x: f32[1]\ninput c: bool[]\n");
    int depth = 40;
    for (int d = 0; d < depth; d++) at += (size_t)snprintf(text + at, cap - at, "y%d = if(c, then_branch={\n", d);
    at += (size_t)snprintf(text + at, cap - at, "z = identity(x)\noutput z\n");
    for (int d = depth - 1; d >= 0; d--)
        at += (size_t)snprintf(text + at, cap - at, "output y%d\n}, else_branch={\noutput x\n})\n", d);
    snprintf(text + at, cap - at, "output y0\n");
    gr_graph_t g = NULL;
    gr_status st = gr_graph_parse(text, "deep.gir", NULL, &g);
    CHECK_MSG(st != GR_OK && strstr(gr_last_error(), "nested deeper than"), "%d %s", (int)st, gr_last_error());
    gr_graph_destroy(g);
    free(text);
}

/* ---- allocation failure at every step of create + two runs (both paths) ---------------------- */
static void test_alloc_failures(void) {
    long base = gr_debug_live_allocs();
    int failures = 0;
    for (long n = 1; n < 50000; n++) {
        gr_debug_fail_alloc_after(n);
        gr_graph_t g = NULL;
        gr_session_t s = NULL;
        gr_status st = gr_graph_parse(WHILE_GIR, "w.gir", NULL, &g);
        gr_session_options o;
        gr_session_options_init(&o);
        o.device = GR_DEVICE_SIM;
        o.mode = GR_MODE_GRAPH;
        if (st == GR_OK) st = gr_session_create(g, &o, &s);
        const float x[4] = {0.5f, 0.25f, 1.0f, 0.125f};
        int64_t d4 = 4;
        for (int r = 0; r < 2 && st == GR_OK; r++) {
            float lim = r ? 1000.0f : 5.0f;
            int64_t m = 10;
            st = gr_session_set_input(s, "x", GR_F32, 1, &d4, x, sizeof x);
            if (st == GR_OK) st = gr_session_set_input(s, "lim", GR_F32, 0, NULL, &lim, sizeof lim);
            if (st == GR_OK) st = gr_session_set_input(s, "m", GR_I64, 0, NULL, &m, sizeof m);
            if (st == GR_OK) st = gr_session_run(s);
            if (st == GR_OK) st = gr_session_wait(s);
        }
        gr_session_destroy(s);
        gr_graph_destroy(g);
        long made = gr_debug_fail_alloc_after(0);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
        if (st == GR_OK && made < n) break;
        if (st != GR_OK) failures++;
        if (st != GR_OK && st != GR_ERR_NOMEM) CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(st), gr_last_error());
    }
    CHECK(failures > 100);
}

int main(void) {
    test_while_loop();
    test_swapped_state();
    test_iteration_cap();
    test_if_conditional();
    test_deep_nesting();
    test_alloc_failures();
    return check_summary("test_control");
}
