/* tests/test_correct — hostile inputs that once crashed graft or gave a
 * silently wrong result (issue 17): `if` predication of long and nested
 * branches (a use-after-free), gathers in an untaken branch, size limits on
 * every path into shape inference, extreme slice bounds, attributes outside
 * an op's schema, @host constants, gathers from an empty axis and
 * conditions of more than one element.
 *
 * Expected values are written out by hand or computed here from plain C
 * loops over the inputs; numpy / onnx.reference comparisons over grids of
 * values live in tests/py/test_correct.py. Run under ASan this is the
 * regression test of the use-after-free. */
#include "check.h"
#include "ir/ir.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gr_session_options sim_opts(gr_mode mode) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = mode;
    return o;
}

/* Parses text; NULL (with a CHECK failure) when it does not parse. */
static gr_graph_t parse(const char *text, const char *origin) {
    gr_graph_t g = NULL;
    gr_status st = gr_graph_parse(text, origin, NULL, &g);
    CHECK_MSG(st == GR_OK, "%s does not parse: %s", origin, gr_last_error());
    return st == GR_OK ? g : NULL;
}

/* Status of parse + session creation (the graph is consumed); the message stays in gr_last_error. */
static gr_status compile(const char *text, const char *origin) {
    gr_graph_t g = NULL;
    gr_status st = gr_graph_parse(text, origin, NULL, &g);
    if (st != GR_OK) return st;
    gr_session_options o = sim_opts(GR_MODE_EAGER);
    gr_session_t s = NULL;
    st = gr_session_create(g, &o, &s);
    gr_session_destroy(s);
    gr_graph_destroy(g);
    return st;
}

/* ==== 1. if predication: long branches, nested ifs, captures past levels ==================== */

/* then: 60 adds of one, gather; else: if(d) {20 subs, gather} else {if(e) {20 muls by two,
 * gather} else {gather of x}}. The inner branches read x, one, two and i from the root
 * graph, skipping the levels in between. */
static char *nested_gir(void) {
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_sb_puts(&sb, "graft 1\ninput x: f32[4]\ninput i: i64[3]\ninput c: bool[]\ninput d: bool[1]\ninput e: bool[1,1]\n"
                    "const one: f32[] = [1]\nconst two: f32[] = [2]\n"
                    "y = if(c, then_branch={\n  a0 = add(x, one)\n");
    for (int k = 1; k < 60; k++) gr_sb_printf(&sb, "  a%d = add(a%d, one)\n", k, k - 1);
    gr_sb_puts(&sb, "  ga = gather(a59, i)\n  output ga\n}, else_branch={\n  z = if(d, then_branch={\n    b0 = sub(x, one)\n");
    for (int k = 1; k < 20; k++) gr_sb_printf(&sb, "    b%d = sub(b%d, one)\n", k, k - 1);
    gr_sb_puts(&sb, "    gb = gather(b19, i)\n    output gb\n  }, else_branch={\n    w = if(e, then_branch={\n      m0 = mul(x, two)\n");
    for (int k = 1; k < 20; k++) gr_sb_printf(&sb, "      m%d = mul(m%d, two)\n", k, k - 1);
    gr_sb_puts(&sb, "      gm = gather(m19, i)\n      output gm\n    }, else_branch={\n      gx = gather(x, i)\n      output gx\n"
                    "    })\n    output w\n  })\n  output z\n})\noutput y\n");
    return gr_sb_take(&sb);
}

static void test_nested_long_branches(void) {
    char *text = nested_gir();
    CHECK(text != NULL);
    if (!text) return;
    const float x[4] = {0.5f, -1.25f, 3.0f, -7.0f};
    const int64_t idx[3] = {3, -4, 1}; /* -4 wraps to 0 */
    for (int m = 0; m < 2; m++) {
        gr_graph_t g = parse(text, "nested.gir");
        if (!g) break;
        gr_session_options o = sim_opts(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        gr_graph_destroy(g);
        if (!s) break;
        for (int combo = 0; combo < 8; combo++) {
            bool c = combo & 1, d = combo & 2, e = combo & 4;
            int64_t xd[1] = {4}, id[1] = {3}, dd[1] = {1}, ed[2] = {1, 1};
            CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd, x, sizeof x));
            CHECK_OK(gr_session_set_input(s, "i", GR_I64, 1, id, idx, sizeof idx));
            CHECK_OK(gr_session_set_input(s, "c", GR_BOOL, 0, NULL, &c, 1));
            CHECK_OK(gr_session_set_input(s, "d", GR_BOOL, 1, dd, &d, 1));
            CHECK_OK(gr_session_set_input(s, "e", GR_BOOL, 2, ed, &e, 1));
            CHECK_OK(gr_session_run(s));
            gr_output out;
            float y[3] = {0};
            CHECK_OK(gr_session_output(s, 0, &out));
            gr_value_info info;
            CHECK_OK(gr_session_output_info(s, out, &info));
            CHECK(info.ndim == 1 && info.dims[0] == 3); /* a bool[1,1] condition does not broadcast the result */
            CHECK_OK(gr_session_output_read(s, out, y, sizeof y));
            for (int k = 0; k < 3; k++) {
                float v = x[idx[k] < 0 ? idx[k] + 4 : idx[k]];
                if (c) v += 60.0f;
                else if (d) v -= 20.0f;
                else if (e) v *= 1048576.0f; /* 2^20: exact */
                CHECK_MSG(y[k] == v, "mode %d combo %d y[%d] = %g, expected %g", m, combo, k, y[k], v);
            }
        }
        gr_run_stats st;
        CHECK_OK(gr_session_stats(s, &st));
        CHECK(st.segments == 1); /* predicated: no graph break */
        gr_session_destroy(s);
    }
    gr_strfree(text);
}

/* The pass alone, on the IR, many times over: the if node must not be read
 * through a stale pointer while the node array grows (ASan reports it). */
static void test_predicate_pass_direct(void) {
    char *text = nested_gir();
    if (!text) return;
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_parse(text, "nested.gir", NULL, &g));
    gr_strfree(text);
    if (!g) return;
    CHECK_OK(gr_ir_infer_shapes(g));
    CHECK_OK(gr_pass_predicate_if(g));
    int ifs = 0, guards = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        ifs += g->nodes.data[i].op == GR_OP_IF;
        guards += strstr(g->nodes.data[i].name, ".guard") != NULL;
    }
    CHECK(ifs == 0);
    /* each gather is guarded once per `if` it sits in: w guards gm and gx (2); z guards gb and, again,
     * gm and gx (3, plus w's 2 inlined); y guards ga, gb, gm and gx (4, plus z's 5 inlined) */
    CHECK_MSG(guards == 9, "%d guards", guards);
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);
}

/* Every allocation of the predication pass fails in turn: out-of-memory or
 * success, never a crash, and nothing leaks (the undo path drops every node
 * and value the failed inlining appended). */
static void test_predicate_alloc_failures(void) {
    char *text = nested_gir();
    if (!text) return;
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_parse(text, "nested.gir", NULL, &g));
    gr_strfree(text);
    if (!g) return;
    CHECK_OK(gr_ir_infer_shapes(g));
    long base = gr_debug_live_allocs();
    int failures = 0, done = 0;
    for (long n = 1; n < 20000 && !done; n++) {
        gr_graph *copy = NULL;
        gr_status st = gr_ir_graph_clone(g, &copy); /* before failures start: the pass alone is under test */
        gr_debug_fail_alloc_after(n);
        if (st == GR_OK) st = gr_pass_predicate_if(copy);
        long made = gr_debug_fail_alloc_after(0);
        if (st == GR_OK) CHECK_OK(gr_ir_verify(copy));
        gr_ir_graph_destroy(copy);
        if (st != GR_OK && st != GR_ERR_NOMEM) {
            CHECK_MSG(0, "n=%ld: unexpected %s: %s", n, gr_status_name(st), gr_last_error());
            break;
        }
        failures += st == GR_ERR_NOMEM;
        CHECK_MSG(gr_debug_live_allocs() == base, "n=%ld: %ld live allocations, expected %ld", n, gr_debug_live_allocs(), base);
        if (st == GR_OK && made < n) done = 1;
    }
    CHECK(done);
    CHECK(failures > 100);
    gr_ir_graph_destroy(g);
}

/* ==== 4. an untaken branch's gather cannot fail the run ======================================== */
static const char *oob_gir =
    "graft 1\n"
    "input x: f32[4]\n"
    "input i: i64[2]\n"
    "input c: bool[]\n"
    "y = if(c, then_branch={\n"
    "  g = gather(x, i)\n"
    "  r = relu(g)\n"
    "  output r\n"
    "}, else_branch={\n"
    "  h = slice(x, starts=[1], ends=[3])\n"
    "  output h\n"
    "})\n"
    "output y\n";

static void test_untaken_branch_gather(void) {
    const float x[4] = {1, -2, 3, -4};
    for (int m = 0; m < 2; m++) {
        gr_graph_t g = parse(oob_gir, "oob.gir");
        if (!g) return;
        gr_session_options o = sim_opts(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        gr_graph_destroy(g);
        if (!s) return;
        int64_t xd[1] = {4}, id[1] = {2};
        /* runs 0-2: index 9 out of range, else taken: fine; run 3: then taken with a bad index: an
         * error naming the gather inside the if; run 4: then taken with good indices */
        const int64_t bad[2] = {9, -1}, good[2] = {2, -1};
        const bool conds[5] = {false, false, false, true, true};
        for (int r = 0; r < 5; r++) {
            CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd, x, sizeof x));
            CHECK_OK(gr_session_set_input(s, "i", GR_I64, 1, id, r == 4 ? good : bad, sizeof bad));
            CHECK_OK(gr_session_set_input(s, "c", GR_BOOL, 0, NULL, &conds[r], 1));
            gr_status st = gr_session_run(s);
            if (r == 3) {
                CHECK_MSG(st == GR_ERR_INVALID, "mode %d: taken branch with index 9 gave %s", m, gr_status_name(st));
                CHECK_MSG(strstr(gr_last_error(), "node 'y.then.g' (gather) at oob.gir:6:") &&
                              strstr(gr_last_error(), "index 9 out of range"),
                          "mode %d: %s", m, gr_last_error());
                continue;
            }
            CHECK_MSG(st == GR_OK, "mode %d run %d: %s", m, r, gr_last_error());
            gr_output out;
            float y[2] = {0};
            CHECK_OK(gr_session_output(s, 0, &out));
            CHECK_OK(gr_session_output_read(s, out, y, sizeof y));
            if (r == 4) CHECK_MSG(y[0] == 3 && y[1] == 0, "mode %d: %g %g", m, y[0], y[1]); /* relu(x[2]), relu(x[3]) */
            else CHECK_MSG(y[0] == -2 && y[1] == 3, "mode %d run %d: %g %g", m, r, y[0], y[1]);
        }
        gr_session_destroy(s);
    }
}

/* A gather fused into its reader's kernel still names itself (eager and graph). */
static void test_gather_error_names_node(void) {
    const char *text = "graft 1\ninput x: f32[4]\ninput i: i64[2]\n[pick] a = gather(x, i)\nb = relu(a)\noutput b\n";
    for (int m = 0; m < 2; m++) {
        gr_graph_t g = parse(text, "pick.gir");
        if (!g) return;
        gr_session_options o = sim_opts(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        gr_graph_destroy(g);
        if (!s) return;
        const float x[4] = {1, 2, 3, 4};
        const int64_t i[2] = {0, 4};
        int64_t xd[1] = {4}, id[1] = {2};
        CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd, x, sizeof x));
        CHECK_OK(gr_session_set_input(s, "i", GR_I64, 1, id, i, sizeof i));
        /* graph mode: the first runs are eager warm-ups, then capture and replay: every one fails */
        for (int r = 0; r < 3; r++) {
            CHECK_ERR(gr_session_run(s), GR_ERR_INVALID, "node 'pick' (gather) at pick.gir:4:");
            CHECK_MSG(strstr(gr_last_error(), "index 4 out of range [-4, 4)") != NULL, "%s", gr_last_error());
        }
        gr_session_destroy(s);
    }
}

/* ==== 2. sizes ======================================================================================= */
static void test_numel_checked(void) {
    int64_t n = -1;
    const int64_t ok[3] = {1 << 20, 1 << 20, 0};
    CHECK(gr_shape_numel_checked(3, ok, &n) && n == 0);
    const int64_t big[2] = {(int64_t)1 << 20, ((int64_t)1 << 20) + 1};
    CHECK(!gr_shape_numel_checked(2, big, &n));
    const int64_t at[2] = {(int64_t)1 << 20, (int64_t)1 << 20};
    CHECK(gr_shape_numel_checked(2, at, &n) && n == GR_MAX_NUMEL);
    const int64_t wrap[3] = {(int64_t)1 << 62, 4, 0}; /* empty, but a partial product would overflow */
    CHECK(!gr_shape_numel_checked(3, wrap, &n));
    const int64_t neg[1] = {-1};
    CHECK(!gr_shape_numel_checked(1, neg, &n));
    CHECK(gr_shape_numel_checked(0, NULL, &n) && n == 1);
    int64_t r;
    CHECK(gr_mul_overflow(INT64_MAX, 2, &r));
    CHECK(!gr_mul_overflow(3, 5, &r) && r == 15);
    CHECK(gr_add_overflow(INT64_MAX, 1, &r));
}

static void test_size_limits(void) {
    /* every way of making a tensor too large: the probe's examples and growth through movement ops */
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"graft 1\ny = fill(shape=[4611686018427387904], value=1.0)\noutput y\n", "node 'y' (fill)"},
        {"graft 1\ny = random_normal(shape=[1099511627776, 2])\noutput y\n", "node 'y' (random_normal)"},
        {"graft 1\ninput x: f32[4]\ny = reshape(x, shape=[4611686018427387905, 4])\noutput y\n", "node 'y' (reshape)"},
        {"graft 1\ninput x: f32[4]\ny = reshape(x, shape=[-1, 4611686018427387905, 4])\noutput y\n", "node 'y' (reshape)"},
        {"graft 1\ninput x: f32[1,1]\ny = expand(x, shape=[4294967296, 4294967297])\noutput y\n", "node 'y' (expand)"},
        {"graft 1\ninput x: f32[1048576,1]\ny = expand(x, shape=[1048577])\noutput y\n", "node 'y' (expand)"},
        {"graft 1\ny = range(start=0.0, limit=1e15)\noutput y\n", "node 'y' (range)"},
        {"graft 1\ninput x: f32[1048576,1]\na = expand(x, shape=[1048576, 1048576])\n"
         "y = concat(a, a, axis=0)\noutput y\n", "node 'y' (concat)"},
        {"graft 1\ninput x: f32[1048576,1,1]\na = expand(x, shape=[1048576, 1048576, 1])\n"
         "y = unsqueeze(a, axes=[0])\nz = expand(y, shape=[2, 1, 1, 1])\noutput z\n", "node 'z' (expand)"},
        {"graft 1\ninput x: f32[4]\ny = concat(x, x, x, axis=0)\n"
         "z = slice(y, starts=[0], ends=[9223372036854775807], steps=[1])\noutput z\n", NULL},
        {"graft 1\ninput x: f32[4294967296, 4294967297]\noutput x\n", "shape holds more than"},
        {"graft 1\ninput x: f32[0, 4611686018427387904, 4]\noutput x\n", "shape holds more than"},
        {"graft 1\nconst k: f32[4294967296, 4294967296] = [1]\noutput k\n", "shape holds more than"},
    };
    for (int i = 0; i < GR_ARRAY_LEN(cases); i++) {
        char origin[32];
        snprintf(origin, sizeof origin, "size%d.gir", i);
        gr_status st = compile(cases[i].text, origin);
        if (!cases[i].needle) {
            CHECK_MSG(st == GR_OK, "case %d: %s", i, gr_last_error());
            continue;
        }
        CHECK_MSG(st == GR_ERR_SHAPE || st == GR_ERR_PARSE, "case %d: %s: %s", i, gr_status_name(st), gr_last_error());
        CHECK_MSG(strstr(gr_last_error(), cases[i].needle) != NULL && strstr(gr_last_error(), "1099511627776") != NULL,
                  "case %d: %s", i, gr_last_error());
    }

    /* the C API: inputs, constants, nodes */
    gr_graph_t g;
    CHECK_OK(gr_graph_create(&g));
    gr_value_t v, x;
    const int64_t huge[2] = {(int64_t)1 << 32, ((int64_t)1 << 32) + 1};
    CHECK_ERR(gr_graph_add_input(g, "big", GR_F32, 2, huge, NULL, &v), GR_ERR_SHAPE, "more than 1099511627776");
    CHECK_ERR(gr_graph_add_constant(g, "k", GR_F32, 2, huge, NULL, &v), GR_ERR_SHAPE, "more than 1099511627776");
    const int64_t wrap0[3] = {(int64_t)1 << 62, 4, 0};
    CHECK_ERR(gr_graph_add_constant(g, "k0", GR_F32, 3, wrap0, NULL, &v), GR_ERR_SHAPE, "more than 1099511627776");
    const int64_t four[1] = {4};
    CHECK_OK(gr_graph_add_input(g, "x", GR_F32, 1, four, NULL, &x));
    const int64_t shape[2] = {((int64_t)1 << 62) + 1, 4};
    gr_attr a = {.name = "shape", .kind = GR_ATTR_INTS, .ints = shape, .n = 2};
    CHECK_ERR(gr_graph_add_node(g, "reshape", "r", 1, &x, 1, &a, 1, &v), GR_ERR_SHAPE, "node 'r' (reshape)");
    gr_graph_destroy(g);

    /* a bound input whose element count wraps around to the size of the data given */
    const char *sym = "graft 1\ninput x: f32[N, M]\ny = relu(x)\noutput y\n";
    gr_graph_t gs = parse(sym, "sym.gir");
    if (gs) {
        gr_session_options o = sim_opts(GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(gs, &o, &s));
        gr_graph_destroy(gs);
        if (s) {
            const int64_t dims[2] = {(int64_t)1 << 32, (int64_t)1 << 32}; /* 2^64 elements: 0 after wrapping */
            float dummy = 0;
            CHECK_ERR(gr_session_set_input(s, "x", GR_F32, 2, dims, &dummy, 0), GR_ERR_SHAPE, "more than 1099511627776");
            gr_session_destroy(s);
        }
    }

    /* a lowering temporary larger than any value of the graph: matmul's operand
     * broadcast to the batch of the output (2^40 elements, at the limit) */
    const char *mm = "graft 1\ninput a: f32[1048576,1,1,2]\ninput b: f32[1,1048576,2,1]\ny = matmul(a, b)\noutput y\n";
    CHECK_ERR(compile(mm, "mm.gir"), GR_ERR_SHAPE, "intermediate of more than 1099511627776 elements");
    CHECK(strstr(gr_last_error(), "node 'y' (matmul)") != NULL);
}

/* ==== 3. slice bounds ==================================================================================== */
static void test_slice_axis(void) {
    static const struct {
        int64_t dim, start, end, step, first, count;
    } cases[] = {
        {5, 0, INT64_MAX, INT64_MAX, 0, 1},         /* the probe: one element, not zero */
        {5, 0, 5, INT64_MAX, 0, 1},
        {5, 4, INT64_MIN, INT64_MIN, 4, 1},
        {5, INT64_MAX, INT64_MIN, INT64_MIN, 4, 1},
        {5, -1, INT64_MIN, -1, 4, 5},
        {5, INT64_MIN, INT64_MAX, 1, 0, 5},
        {5, INT64_MIN, INT64_MAX, 2, 0, 3},
        {5, INT64_MAX, INT64_MIN, -2, 4, 3},
        {5, INT64_MIN, INT64_MIN, -1, 0, 0},         /* numpy: start below -dim clamps to -1 for a negative step */
        {5, -100, -100, -1, 0, 0},
        {5, 3, 3, 1, 0, 0},
        {5, 3, 1, -1, 3, 2},
        {5, 6, 0, -3, 4, 2},                         /* 4, 1 */
        {0, 0, INT64_MAX, 1, 0, 0},
        {0, INT64_MAX, INT64_MIN, -1, 0, 0},
        {1, 0, 1, INT64_MIN, 0, 0},
        {1, 0, -2, INT64_MIN, 0, 1},
        {INT64_MAX, 0, INT64_MAX, 1, 0, INT64_MAX},  /* no overflow even for the largest dim */
        {INT64_MAX, INT64_MAX, INT64_MIN, -1, INT64_MAX - 1, INT64_MAX},
    };
    for (int i = 0; i < GR_ARRAY_LEN(cases); i++) {
        int64_t first = -7, count = -7;
        CHECK(gr_ir_slice_axis(cases[i].dim, cases[i].start, cases[i].end, cases[i].step, &first, &count));
        CHECK_MSG(count == cases[i].count && (count == 0 || first == cases[i].first),
                  "case %d: first %lld count %lld, expected %lld %lld", i, (long long)first, (long long)count,
                  (long long)cases[i].first, (long long)cases[i].count);
    }
    int64_t f, n;
    CHECK(!gr_ir_slice_axis(5, 0, 5, 0, &f, &n));

    /* through a session: slices with extreme steps pick the right elements */
    const char *text = "graft 1\ninput x: f32[5]\n"
                       "a = slice(x, starts=[0], ends=[9223372036854775807], steps=[9223372036854775807])\n"
                       "b = slice(x, starts=[-1], ends=[-9223372036854775808], steps=[-9223372036854775808])\n"
                       "c = slice(x, starts=[9223372036854775807], ends=[-9223372036854775808], steps=[-2])\n"
                       "output a, b, c\n";
    gr_graph_t g = parse(text, "slice.gir");
    if (!g) return;
    gr_session_options o = sim_opts(GR_MODE_EAGER);
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    gr_graph_destroy(g);
    if (!s) return;
    const float x[5] = {10, 11, 12, 13, 14};
    int64_t xd[1] = {5};
    CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd, x, sizeof x));
    CHECK_OK(gr_session_run(s));
    const float want_a[1] = {10}, want_b[1] = {14}, want_c[3] = {14, 12, 10};
    const float *want[3] = {want_a, want_b, want_c};
    const size_t nbytes[3] = {sizeof want_a, sizeof want_b, sizeof want_c};
    for (int k = 0; k < 3; k++) {
        gr_output out;
        float y[3] = {0};
        CHECK_OK(gr_session_output(s, k, &out));
        CHECK(gr_session_output_nbytes(s, out) == nbytes[k]);
        CHECK_OK(gr_session_output_read(s, out, y, nbytes[k]));
        CHECK_MSG(!memcmp(y, want[k], nbytes[k]), "output %d: %g %g %g", k, y[0], y[1], y[2]);
    }
    gr_session_destroy(s);
}

/* ==== 7. attribute schema ======================================================================================= */
static void test_attr_schema(void) {
    /* the probe's misspellings: refused, naming the node and the valid names */
    CHECK_ERR(compile("graft 1\ninput x: f32[2,3]\ny = reduce_sum(x, axis=[1])\noutput y\n", "a.gir"), GR_ERR_INVALID,
              "node 'y' (reduce_sum) at a.gir:3:5: unknown attribute 'axis' (reduce_sum takes: axes, keepdims)");
    CHECK_ERR(compile("graft 1\ninput x: f32[2,3]\ny = reduce_mean(x, axes=[1], keepdim=0)\noutput y\n", "b.gir"),
              GR_ERR_INVALID, "unknown attribute 'keepdim' (reduce_mean takes: axes, keepdims)");
    CHECK_ERR(compile("graft 1\ninput x: f32[2,3]\ny = relu(x, alpha=0.5)\noutput y\n", "c.gir"), GR_ERR_INVALID,
              "unknown attribute 'alpha' (relu takes no attributes)");
    CHECK_ERR(compile("graft 1\ninput x: f32[2,3]\ny = softmax(x, axes=[0])\noutput y\n", "d.gir"), GR_ERR_INVALID,
              "unknown attribute 'axes' (softmax takes: axis)");
    /* kinds */
    CHECK_ERR(compile("graft 1\ninput x: f32[2,3]\ny = reduce_sum(x, axes=\"1\")\noutput y\n", "e.gir"), GR_ERR_INVALID,
              "attribute 'axes' must be a list of ints, got string");
    CHECK_ERR(compile("graft 1\ninput x: f32[2,3]\ny = softmax(x, axis=1.5)\noutput y\n", "f.gir"), GR_ERR_INVALID,
              "attribute 'axis' must be an int, got float");
    CHECK_ERR(compile("graft 1\ny = fill(shape=[2], dtype=99)\noutput y\n", "g.gir"), GR_ERR_INVALID,
              "attribute 'dtype' must be a dtype name");
    /* accepted conversions: an int where a float or a list of ints is wanted, a dtype by number */
    CHECK_OK(compile("graft 1\ninput x: f32[2,3]\nconst s: f32[3] = [1, 2, 3]\ny = reduce_sum(x, axes=1, keepdims=0)\n"
                     "z = layer_norm(x, s, epsilon=1)\n"
                     "w = fill(shape=[2], value=3, dtype=4)\noutput y, z, w\n",
                     "ok.gir"));

    /* the C builder API refuses at once, and the verifier on a graph built around it */
    gr_graph_t g;
    CHECK_OK(gr_graph_create(&g));
    const int64_t dims[2] = {2, 3};
    gr_value_t x, y;
    CHECK_OK(gr_graph_add_input(g, "x", GR_F32, 2, dims, NULL, &x));
    gr_attr bad = {.name = "keepdim", .kind = GR_ATTR_INT, .i = 0};
    CHECK_ERR(gr_graph_add_node(g, "reduce_max", "m", 1, &x, 1, &bad, 1, &y), GR_ERR_INVALID,
              "node 'm' (reduce_max): unknown attribute 'keepdim'");
    gr_graph_destroy(g);

    /* every op refuses a name outside its schema; every schema is well formed */
    for (int op = 0; op < GR_OP_COUNT; op++) {
        const gr_op_info *info = gr_op_get((gr_op)op);
        CHECK(info && info->attrs);
        if (!info || !info->attrs) continue;
        for (const char *p = info->attrs; *p;) {
            while (*p == ' ') p++;
            const char *colon = strchr(p, ':');
            size_t kind_len = colon ? strcspn(colon + 1, " ") : 0;
            bool known = false;
            static const char *const kinds[] = {"int", "float", "string", "ints", "floats", "graph", "dtype"};
            for (int k = 0; colon && k < GR_ARRAY_LEN(kinds); k++)
                known |= strlen(kinds[k]) == kind_len && !memcmp(colon + 1, kinds[k], kind_len);
            CHECK_MSG(colon && colon > p && known, "op %s: bad schema '%s'", info->name, info->attrs);
            if (!colon) break;
            p = colon + 1 + kind_len;
        }
        gr_ir_node n;
        memset(&n, 0, sizeof n);
        gr_ir_attr at = {.name = (char *)"bogus", .kind = GR_IR_ATTR_INT};
        n.name = (char *)"n";
        n.op = (gr_op)op;
        n.n_attr = 1;
        n.attrs = &at;
        CHECK_ERR(gr_ir_check_attrs(NULL, &n), GR_ERR_INVALID, "unknown attribute 'bogus'");
    }
}

/* ==== 10. @host constants, empty-axis gathers, conditions of several elements ============================ */
static void test_small_cases(void) {
    /* @host constants: a constant's value is compiled in, whatever its placement */
    const char *text = "graft 1\ninput x: f32[3]\nconst t: f32[] @host = [2]\nconst v: f32[3] @host = [1, 2, 3]\n"
                       "y = mul(x, t)\nz = add(y, v)\noutput z\n";
    for (int m = 0; m < 2; m++) {
        gr_graph_t g = parse(text, "hostc.gir");
        if (!g) return;
        gr_session_options o = sim_opts(m ? GR_MODE_GRAPH : GR_MODE_EAGER);
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        gr_graph_destroy(g);
        if (!s) return;
        const float x[3] = {1, -1, 0.5f};
        int64_t xd[1] = {3};
        for (int r = 0; r < 3; r++) {
            CHECK_OK(gr_session_set_input(s, "x", GR_F32, 1, xd, x, sizeof x));
            CHECK_OK(gr_session_run(s));
            gr_output out;
            float z[3];
            CHECK_OK(gr_session_output(s, 0, &out));
            CHECK_OK(gr_session_output_read(s, out, z, sizeof z));
            CHECK_MSG(z[0] == 3 && z[1] == 0 && z[2] == 4, "mode %d: %g %g %g", m, z[0], z[1], z[2]);
        }
        gr_session_destroy(s);
    }
    /* gathers from an empty axis: a non-empty index is a compile-time error naming the node */
    CHECK_ERR(compile("graft 1\ninput x: f32[0,3]\nconst i: i64[2] = [0, 1]\ny = gather(x, i, axis=0)\noutput y\n", "gz.gir"),
              GR_ERR_SHAPE, "node 'y' (gather) at gz.gir:4:5: cannot gather i64[2] from axis 0 of f32[0,3]: the axis is empty");
    CHECK_ERR(compile("graft 1\ninput x: f32[2,0]\ninput i: i64[2,1]\ny = gather_elements(x, i, axis=1)\noutput y\n", "ge.gir"),
              GR_ERR_SHAPE, "node 'y' (gather_elements)");
    CHECK_OK(compile("graft 1\ninput x: f32[0,3]\ninput i: i64[0]\ny = gather(x, i, axis=0)\noutput y\n", "g0.gir"));
    /* an if condition must hold one element */
    CHECK_ERR(compile("graft 1\ninput x: f32[4]\ninput c: bool[3]\ny = if(c, then_branch={\n a = relu(x)\n output a\n},"
                      " else_branch={\n output x\n})\noutput y\n",
                      "ifc.gir"),
              GR_ERR_SHAPE, "node 'y' (if) at ifc.gir:4:5: the condition must hold exactly one element, got bool[3]");
}

int main(void) {
    test_nested_long_branches();
    test_predicate_pass_direct();
    test_predicate_alloc_failures();
    test_untaken_branch_gather();
    test_gather_error_names_node();
    test_numel_checked();
    test_size_limits();
    test_slice_axis();
    test_attr_schema();
    test_small_cases();
    return check_summary("test_correct");
}
