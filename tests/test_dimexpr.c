/* tests/test_dimexpr — symbolic dims as expressions (src/ir/dimexpr.c):
 * canonical forms (equal expressions have equal ids whatever the order they
 * were built in), simplification with ranges, evaluation with checked
 * arithmetic, parsing and printing (and print -> parse -> print is stable),
 * copying between graphs, allocation failures. */
#include "check.h"
#include "ir/ir.h"
#include <string.h>

static gr_graph *G;

static gr_dim P(const char *text) {
    gr_dim d = gr_dx_const(-999);
    gr_status st = gr_dx_parse(G, text, &d);
    CHECK_MSG(st == GR_OK, "parse '%s': %s", text, gr_status_name(st));
    return d;
}

static void expect_str(int line, gr_dim d, const char *want) {
    char buf[256];
    gr_dx_str(G, d, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, want), "line %d: got '%s', want '%s'", line, buf, want);
}
#define STR(d, want) expect_str(__LINE__, d, want)

static int64_t eval(gr_dim d, const int64_t *v) {
    int64_t out = -12345;
    CHECK_OK(gr_dx_eval(G, d, v, &out));
    return out;
}

static void test_canonical(void) {
    /* the same polynomial built in different orders is one expression */
    CHECK(gr_dx_equal(P("2*(s + 1)"), P("2*s + 2")));
    CHECK(gr_dx_equal(P("b*s*64"), P("64*s*b")));
    CHECK(gr_dx_equal(P("(b + s)*(b - s)"), P("b*b - s*s")));
    CHECK(gr_dx_equal(P("s + 1 - 1"), P("s")));
    CHECK(gr_dx_equal(P("max(a, b)"), P("max(b, a)")));
    CHECK(gr_dx_equal(P("min(s, 4) + 0"), P("Min(4, s)")));
    CHECK(!gr_dx_equal(P("s + 1"), P("s + 2")));
    CHECK(!gr_dx_equal(P("s//2"), P("s % 2")));
    /* constants fold to concrete dims */
    gr_dim c = P("3*4 + 2");
    CHECK(!gr_dx_is_sym(c) && c.size == 14);
    c = P("s - s");
    CHECK(!gr_dx_is_sym(c) && c.size == 0);
    STR(P("s*2 + 1"), "2*s + 1");
    STR(P("seq - 1"), "seq - 1");
    STR(P("b*s"), "b*s");
    STR(P("s*b"), "b*s");
    STR(P("FloorDiv(s, 2)"), "s//2");
    STR(P("Mod(s, 3)"), "s % 3");
}

static void test_simplify(void) {
    /* floor division and modulo by constants that divide the non-constant part */
    CHECK(gr_dx_equal(P("(2*s + 3)//2"), P("s + 1")));
    CHECK(gr_dx_equal(P("(4*s)//4"), P("s")));
    gr_dim m = P("(6*s + 4) % 3");
    CHECK(!gr_dx_is_sym(m) && m.size == 1);
    /* exact division by a monomial: a reshape's -1 */
    gr_dim q = P("(b*s*64)//(b*s*4)");
    CHECK(!gr_dx_is_sym(q) && q.size == 16);
    CHECK(gr_dx_equal(P("(b*s*64)//(s*4)"), P("16*b")));
    /* min/max decided by the sign of the difference (symbols >= 1 by default) */
    CHECK(gr_dx_equal(P("min(s, s + 1)"), P("s")));
    CHECK(gr_dx_equal(P("max(s - 1, 0)"), P("s - 1")));
    CHECK(gr_dx_equal(P("max(s, 1)"), P("s")));
    CHECK(gr_dx_equal(P("max(x, min(x, y))"), P("x")));
    gr_dim e = P("eq(s, 0)");
    CHECK(!gr_dx_is_sym(e) && e.size == 0);
    e = P("lt(s, s + 1)");
    CHECK(!gr_dx_is_sym(e) && e.size == 1);
    CHECK(gr_dx_is_sym(P("eq(s, 1)"))); /* s may be 1: undecided */
    /* declared ranges narrow it */
    gr_dim seq = P("seq");
    CHECK(gr_dx_is_sym(P("min(seq, 1024)")));
    CHECK_OK(gr_dx_set_range(G, gr_dx_as_symbol(G, seq), 1, 512));
    CHECK(gr_dx_equal(P("min(seq, 1024)"), seq));
    CHECK(gr_dx_equal(P("seq % 1000"), seq));
    int64_t lo, hi;
    gr_dx_bounds(G, P("2*seq + 3"), &lo, &hi);
    CHECK(lo == 5 && hi == 1027);
    CHECK_ERR(gr_dx_set_range(G, gr_dx_as_symbol(G, seq), 5, 4), GR_ERR_INVALID, "empty or negative");
}

static void test_eval(void) {
    gr_dim e = P("(a + 2)*b - a//3 + max(a, b) % 5 + lt(a, b)*(a - b)");
    int32_t ia = gr_ir_find_sym(G, "a"), ib = gr_ir_find_sym(G, "b");
    CHECK(ia >= 0 && ib >= 0);
    int64_t v[64];
    for (int k = 0; k < 64; k++) v[k] = -1;
    for (int64_t a = 1; a < 9; a++)
        for (int64_t b = 1; b < 9; b++) {
            v[ia] = a, v[ib] = b;
            int64_t want = (a + 2) * b - a / 3 + (a > b ? a : b) % 5 + (a < b) * (a - b);
            CHECK_MSG(eval(e, v) == want, "a=%lld b=%lld", (long long)a, (long long)b);
        }
    /* floor semantics below zero */
    v[ia] = 1;
    CHECK(eval(P("(a - 4)//3"), v) == -1 && eval(P("(a - 4) % 3"), v) == 0);
    /* overflow of a huge product is an error, not a wrapped size */
    int32_t iy = gr_ir_find_sym(G, "y");
    gr_dim big = P("y*y*y");
    v[iy] = (int64_t)1 << 30;
    int64_t out;
    CHECK_ERR(gr_dx_eval(G, big, v, &out), GR_ERR_SHAPE, "overflows int64");
    CHECK_ERR(gr_dx_binary(G, GR_DX_MUL, gr_dx_const(INT64_MAX / 2), gr_dx_const(3), &big), GR_ERR_SHAPE, "overflows");
    CHECK_ERR(gr_dx_binary(G, GR_DX_DIV, P("s"), gr_dx_const(0), &big), GR_ERR_SHAPE, "divides by zero");
    /* a symbol without a value */
    int64_t none[64];
    for (int k = 0; k < 64; k++) none[k] = -1;
    CHECK_ERR(gr_dx_eval(G, P("a + 1"), none, &out), GR_ERR_SHAPE, "'a' has no value");
}

static void test_parse_print(void) {
    gr_dim d;
    CHECK(gr_dx_parse(G, "a b", &d) == GR_ERR_PARSE);
    CHECK(gr_dx_parse(G, "3 +", &d) == GR_ERR_PARSE);
    CHECK(gr_dx_parse(G, "foo(1)", &d) == GR_ERR_PARSE);
    CHECK(gr_dx_parse(G, "99999999999999999999", &d) == GR_ERR_PARSE);
    int n_syms = G->syms.len;
    CHECK(gr_dx_parse(G, "newsym +", &d) == GR_ERR_PARSE);
    CHECK_MSG(G->syms.len == n_syms, "a failed parse left a symbol behind");
    /* a name that is not an expression is one symbol */
    CHECK_OK(gr_dx_from_name(G, "sequence length", &d));
    CHECK(gr_dx_as_symbol(G, d) >= 0 && !strcmp(gr_dx_text(G, d), "sequence length"));
    CHECK_OK(gr_dx_from_name(G, "s0 + 1", &d));
    CHECK(gr_dx_as_symbol(G, d) < 0 && !strcmp(gr_dx_text(G, d), "s0 + 1"));
    /* print -> parse -> print is stable, in a fresh graph too (other ids) */
    const char *texts[] = {"2*b*s + s - 7", "max(a, b)//2", "min(seq, 3) % 4 + lt(a, 2)*b", "(a - b)*(a + b) - 1", "eq(a, b)*x + 3",
                           "-s + 10", "CeilDiv(s, 4)", "a % 7 - 2*(b % 7) + c % 5", "x - 3*(y//2)", "x - y % 4"};
    gr_graph *h = NULL;
    CHECK_OK(gr_ir_graph_create(&h));
    for (int i = 0; h && i < (int)(sizeof texts / sizeof texts[0]); i++) {
        char p1[256], p2[256], p3[256];
        gr_dim x = P(texts[i]);
        gr_dx_str(G, x, p1, sizeof p1);
        gr_dim y = P(p1);
        gr_dx_str(G, y, p2, sizeof p2);
        CHECK_MSG(gr_dx_equal(x, y) && !strcmp(p1, p2), "'%s' -> '%s' -> '%s'", texts[i], p1, p2);
        gr_dim z;
        CHECK_OK(gr_dx_parse(h, p1, &z));
        gr_dx_str(h, z, p3, sizeof p3);
        CHECK_MSG(!strcmp(p1, p3), "in another graph: '%s' -> '%s'", p1, p3);
        /* copied into another graph: the same text */
        gr_dim w;
        CHECK_OK(gr_dx_import(h, G, x, &w));
        gr_dx_str(h, w, p3, sizeof p3);
        CHECK_MSG(!strcmp(p1, p3), "imported: '%s' -> '%s'", p1, p3);
    }
    gr_ir_graph_destroy(h);
}

/* every allocation failing in turn: a status, no leak */
static void test_alloc_failures(void) {
    long base = gr_debug_live_allocs();
    int failures = 0;
    for (long n = 1; n < 400; n++) {
        gr_graph *g = NULL;
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_ir_graph_create(&g);
        gr_dim d = gr_dx_const(0);
        if (st == GR_OK) st = gr_dx_parse(g, "max(a*b + c, d)//2 + min(e, f) % 3", &d);
        if (st == GR_OK) st = gr_dx_binary(g, GR_DX_MUL, d, d, &d);
        gr_debug_fail_alloc_after(0);
        if (st != GR_OK) {
            CHECK_MSG(st == GR_ERR_NOMEM || st == GR_ERR_PARSE, "n=%ld: %s", n, gr_status_name(st));
            failures++;
        }
        gr_ir_graph_destroy(g);
        if (st == GR_OK) break;
    }
    CHECK(failures > 5);
    CHECK_MSG(gr_debug_live_allocs() == base, "%ld allocations leaked", gr_debug_live_allocs() - base);
}

int main(void) {
    long live = gr_debug_live_allocs();
    CHECK_OK(gr_ir_graph_create(&G));
    if (!G) return check_summary("test_dimexpr");
    test_canonical();
    test_simplify();
    test_eval();
    test_parse_print();
    gr_ir_graph_destroy(G);
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == live, "%ld allocations leaked", gr_debug_live_allocs() - live);
    return check_summary("test_dimexpr");
}
