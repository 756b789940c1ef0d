/* tests/test_cse — common subexpressions of the graph (passes/cse.c, issue 12).
 *
 * 1. What is merged: a per-layer mask where(mask, 0, -inf) written twice with constants of
 *    their own holding the same numbers (the exporters' pattern), whole chains (a merge makes
 *    the next nodes equal), attributes given in another order, a node whose twin is a graph
 *    output (the later twin reads the first one).
 * 2. What must not be merged: other attributes (cast to another dtype, other axes), equal
 *    bytes of another dtype or shape, large constants of equal content (compared by identity),
 *    ops with effects or state (random_normal, cache_write, sample), an output written in
 *    place into an input, a graph output or a data-dependent symbol's count (kept as the node
 *    computing it), a graph with control flow.
 * 3. The pipeline with and without the pass: the same outputs bit for bit (host executor),
 *    fewer kernels with it, and `graft dump` names the pass ("cse") only when it merged.
 */
#include "check.h"
#include "frontend/frontend.h"
#include "host_exec.h"
#include "passes/passes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gr_graph *parse(const char *text) {
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_parse(text, "<test>", NULL, &g));
    return g;
}

static int node_of(const gr_graph *g, const char *name) {
    int n = gr_ir_find_node(g, name);
    CHECK_MSG(n >= 0, "no node %s", name);
    return n;
}

/* the value that input `slot` of node `reader` reads, by name */
static const char *reads(const gr_graph *g, const char *reader, int slot) {
    int n = node_of(g, reader);
    if (n < 0 || slot >= g->nodes.data[n].n_in || g->nodes.data[n].in[slot] < 0) return "?";
    return g->values.data[g->nodes.data[n].in[slot]].name;
}

static int cse(gr_graph *g) {
    int merged = -1;
    CHECK_OK(gr_pass_cse(g, &merged));
    CHECK_OK(gr_ir_verify(g));
    return merged;
}

/* ---- 1. merged ------------------------------------------------------------------------------------ */
static const char *const LAYERS =
    "graft 1\n"
    "input mask: bool[2, 1, 1, 8]\n"
    "input x1: f32[2, 4, 1, 8]\n"
    "input x2: f32[2, 4, 1, 8]\n"
    "const z1: f32[] = [0.0]\n"
    "const n1: f32[] = [-inf]\n"
    "const z2: f32[] = [0.0]\n"
    "const n2: f32[] = [-inf]\n"
    "[w1] m1 = where(mask, z1, n1)\n"
    "[a1] s1 = add(x1, m1)\n"
    "[sm1] y1 = softmax(s1, axis=-1)\n"
    "[w2] m2 = where(mask, z2, n2)\n"
    "[a2] s2 = add(x2, m2)\n"
    "[sm2] y2 = softmax(s2, axis=-1)\n"
    "output y1, y2\n";

static void test_merged(void) {
    gr_graph *g = parse(LAYERS);
    if (!g) return;
    CHECK(cse(g) == 1);
    CHECK_MSG(!strcmp(reads(g, "a2", 1), "m1"), "layer 2 reads %s, not layer 1's mask", reads(g, "a2", 1));
    CHECK(!strcmp(reads(g, "a1", 1), "m1"));
    CHECK(!strcmp(reads(g, "w2", 1), "z2")); /* the merged node itself is left as it was, unread */
    CHECK(cse(g) == 0);                      /* nothing left to merge: a second run changes nothing */
    gr_ir_graph_destroy(g);

    /* a chain: positions, the compare with the length, the where per layer (the decode rewrite's
     * masks) merge node after node; attributes in another order are the same attributes */
    g = parse("graft 1\n"
              "input L: i64[1]\n"
              "input x: f32[2, 8]\n"
              "input y: f32[2, 8]\n"
              "const ninf: f32[] = [-inf]\n"
              "[r1] p1 = range(start=0, limit=8, delta=1, dtype=\"i64\")\n"
              "[l1] c1 = less(p1, L)\n"
              "[w1] u1 = where(c1, x, ninf)\n"
              "[r2] p2 = range(dtype=\"i64\", delta=1, limit=8, start=0)\n"
              "[l2] c2 = less(p2, L)\n"
              "[w2] u2 = where(c2, x, ninf)\n"
              "[r3] p3 = range(start=0, limit=8, delta=1, dtype=\"i64\")\n"
              "[l3] c3 = less(p3, L)\n"
              "[w3] u3 = where(c3, y, ninf)\n"
              "[o] out = add(u1, u2)\n"
              "[o3] out3 = add(u3, u2)\n"
              "output out, out3\n");
    if (!g) return;
    CHECK(cse(g) == 5); /* r2, l2, w2 (same x), r3, l3; w3 reads y */
    CHECK(!strcmp(reads(g, "o", 1), "u1"));
    CHECK(!strcmp(reads(g, "w3", 0), "c1"));
    CHECK(!strcmp(reads(g, "o3", 1), "u1"));
    gr_ir_graph_destroy(g);

    /* a graph output stays where it is computed; a later twin reads the first node */
    g = parse("graft 1\n"
              "input x: f32[4]\n"
              "[e1] a = exp(x)\n"
              "[e2] b = exp(x)\n"
              "[e3] c = exp(x)\n"
              "[s] d = add(b, c)\n"
              "output a, b, d\n");
    if (!g) return;
    CHECK(cse(g) == 1); /* e3 into e1; e2 computes the output b */
    CHECK(!strcmp(reads(g, "s", 0), "b"));
    CHECK(!strcmp(reads(g, "s", 1), "a"));
    gr_ir_graph_destroy(g);
}

/* ---- 2. not merged ------------------------------------------------------------------------------ */
static void expect_none(const char *what, const char *text) {
    gr_graph *g = parse(text);
    if (!g) return;
    int m = cse(g);
    CHECK_MSG(m == 0, "%s: %d nodes merged, want none", what, m);
    gr_ir_graph_destroy(g);
}

static void test_not_merged(void) {
    expect_none("cast to other dtypes", "graft 1\ninput x: f32[4]\n[c1] a = cast(x, to=\"f16\")\n[c2] b = cast(x, to=\"bf16\")\n"
                                        "output a, b\n");
    expect_none("other axes", "graft 1\ninput x: f32[4, 4]\n[r1] a = reduce_sum(x, axes=[0], keepdims=1)\n"
                              "[r2] b = reduce_sum(x, axes=[1], keepdims=1)\n[s] c = add(a, b)\noutput c\n");
    expect_none("an attribute given to one only",
                "graft 1\ninput x: f32[4, 4]\n[r1] a = reduce_sum(x, axes=[0])\n"
                "[r2] b = reduce_sum(x, axes=[0], keepdims=0)\n[s] c = add(a, b)\noutput c\n");
    expect_none("equal bytes, other dtypes",
                "graft 1\ninput x: i32[4]\nconst a: i32[] = [0]\nconst b: f32[] = [0.0]\ninput c: bool[4]\n"
                "[w1] p = where(c, a, x)\n[k] xf = cast(x, to=\"f32\")\n[w2] q = where(c, b, xf)\n"
                "[k2] qi = cast(q, to=\"i32\")\n[s] r = add(p, qi)\noutput r\n");
    expect_none("equal numbers, other shapes",
                "graft 1\ninput x: f32[4]\nconst a: f32[] = [2.0]\nconst b: f32[1] = [2.0]\n"
                "[m1] p = mul(x, a)\n[m2] q = mul(x, b)\n[s] r = add(p, q)\noutput r\n");
    {   /* a large constant is compared by identity (no weight is hashed) */
        char text[16384];
        int n = snprintf(text, sizeof text, "graft 1\ninput x: f32[128]\n");
        for (int c = 0; c < 2; c++) {
            n += snprintf(text + n, sizeof text - (size_t)n, "const w%d: f32[128] = [", c);
            for (int i = 0; i < 128; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%s%d.0", i ? ", " : "", i);
            n += snprintf(text + n, sizeof text - (size_t)n, "]\n");
        }
        snprintf(text + n, sizeof text - (size_t)n, "[m1] p = mul(x, w0)\n[m2] q = mul(x, w1)\n[s] r = add(p, q)\noutput r\n");
        expect_none("512-byte constants of equal content", text);
    }
    expect_none("random draws", "graft 1\n[r1] a = random_normal(shape=[4], seed=1)\n[r2] b = random_normal(shape=[4], seed=1)\n"
                                "[s] c = add(a, b)\noutput c\n");
    expect_none("cache appends", "graft 1\ninput k: f32[1, 2, 8, 4]\ninput n: f32[1, 2, 1, 4]\ninput L: i64[1]\n"
                                 "[c1] a = cache_write(k, n, L, axis=2, delta=-1)\n[c2] b = cache_write(k, n, L, axis=2, delta=-1)\n"
                                 "[s] c = add(a, b)\noutput c\n");
    expect_none("samples", "graft 1\ninput l: f32[2, 8]\ninput t: i64[1]\ninput i: i64[3]\ninput f: f32[2]\n"
                           "[s1] a = sample(l, t, i, f)\n[s2] b = sample(l, t, i, f)\n[s] c = add(a, b)\noutput c\n");
    expect_none("graph outputs", "graft 1\ninput x: f32[4]\n[e1] a = exp(x)\n[e2] b = exp(x)\noutput a, b\n");
    expect_none("control flow", "graft 1\ninput x: f32[4]\ninput c: bool[]\n[e1] a = exp(x)\n[e2] b = exp(x)\n"
                                "[i] y = if(c, then_branch={\n  t = neg(a)\n  output t\n}, else_branch={\n  f = neg(b)\n  output f\n})\n"
                                "output y\n");
    {   /* a data-dependent symbol's count: the session reads that value before each run */
        gr_graph *g = parse("graft 1\ninput x: i64[1]\n[a1] y = abs(x)\n[a2] z = abs(x)\n[s] w = add(y, z)\noutput w\n");
        if (g) {
            gr_dim d;
            CHECK_OK(gr_ir_data_symbol(g, "count", gr_ir_find_value(g, "z"), 16, "test", &d));
            CHECK_MSG(cse(g) == 0, "a data-dependent symbol's count merged away");
            CHECK(!strcmp(reads(g, "s", 1), "z"));
            gr_ir_graph_destroy(g);
        }
    }
    {   /* an output written in place into an input (the decode rewrite's cache, gr_ir_value.inplace_of) */
        gr_graph *g = parse("graft 1\ninput k: f32[4]\ninput x: f32[4]\n[a1] y = add(k, x)\n[a2] z = add(k, x)\n"
                            "[s] w = mul(y, z)\noutput w, y\n");
        if (g) {
            int z = gr_ir_find_value(g, "z"), k = gr_ir_find_value(g, "k");
            g->values.data[z].inplace_of = k + 1;
            CHECK_MSG(cse(g) == 0, "an in-place output merged");
            CHECK(!strcmp(reads(g, "s", 1), "z"));
            gr_ir_graph_destroy(g);
        }
    }
}

/* every allocation failure: GR_ERR_NOMEM, the graph unchanged, nothing leaked */
static void test_oom(void) {
    int failures = 0, successes = 0;
    for (long n = 1; n < 100 && !successes; n++) {
        gr_graph *g = parse(LAYERS);
        if (!g) return;
        (void)reads(g, "a2", 1); /* the graph's name index, built on the first lookup, before counting */
        (void)gr_ir_find_value(g, "m1");
        long live = gr_debug_live_allocs();
        int merged = -1;
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_pass_cse(g, &merged);
        gr_debug_fail_alloc_after(0);
        successes += st == GR_OK;
        failures += st != GR_OK;
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "allocation failure %ld gave %s", n, gr_status_name(st));
        CHECK_MSG(!strcmp(reads(g, "a2", 1), st == GR_OK ? "m1" : "m2"), "allocation failure %ld: a2 reads %s", n, reads(g, "a2", 1));
        CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks %ld allocations", n, gr_debug_live_allocs() - live);
        gr_ir_graph_destroy(g);
    }
    CHECK_MSG(successes == 1 && failures >= 3, "%d successes, %d failures", successes, failures);
}

/* ---- 3. the pipeline with and without ----------------------------------------------------------- */
static int launches(const gr_step_list *s) {
    int n = 0;
    for (int i = 0; i < s->len; i++) n += s->data[i].kind == GR_STEP_KERNEL || s->data[i].kind == GR_STEP_LIBCALL;
    return n;
}

static gr_status count_cse(void *user, const char *pass, gr_compiled *state) {
    (void)state;
    if (!strcmp(pass, "cse")) (*(int *)user)++;
    return GR_OK;
}

static void test_pipeline(void) {
    float out[2][2][64];
    int kernels[2] = {0, 0};
    bool mask[16];
    float x1[64], x2[64];
    for (int i = 0; i < 16; i++) mask[i] = (i * 7) % 3 != 0;
    for (int i = 0; i < 64; i++) x1[i] = (float)((i * 37) % 11) * 0.25f - 1.0f, x2[i] = (float)((i * 13) % 7) * 0.5f - 1.5f;
    for (int with = 0; with < 2; with++) {
        gr_graph *g = parse(LAYERS);
        if (!g) return;
        int seen = 0;
        gr_pipeline_opts o = {.no_cse = !with, .after_pass = count_cse, .user = &seen};
        gr_compiled c;
        CHECK_OK(gr_pass_pipeline(g, NULL, &o, &c));
        CHECK_MSG(seen == with, "the cse pass reported %d times (with = %d)", seen, with);
        kernels[with] = launches(&c.steps);
        const void *in[8] = {NULL};
        in[gr_ir_find_value(c.g, "mask")] = mask;
        in[gr_ir_find_value(c.g, "x1")] = x1;
        in[gr_ir_find_value(c.g, "x2")] = x2;
        exec_t e;
        CHECK_OK(exec_run_with(&e, c.g, &c.steps, in, 8));
        for (int k = 0; k < 2; k++) {
            int v = gr_ir_find_value(c.g, k ? "y2" : "y1");
            memcpy(out[with][k], e.buf[v], sizeof out[with][k]);
        }
        exec_free(&e);
        gr_compiled_free(&c);
        gr_ir_graph_destroy(g);
    }
    CHECK_MSG(memcmp(out[0], out[1], sizeof out[0]) == 0, "outputs differ with and without cse");
    CHECK_MSG(kernels[1] <= kernels[0], "%d kernels with cse, %d without", kernels[1], kernels[0]);
    printf("two-layer mask model: %d launches without cse, %d with\n", kernels[0], kernels[1]);
}

int main(void) {
    (void)set_type, (void)t_input, (void)t_const, (void)input_data; /* host_exec.h's builders: unused here */
    test_merged();
    test_not_merged();
    test_oom();
    test_pipeline();
    return check_summary("test_cse");
}
