/* tests/test_fold — constant folding: const arithmetic chains, generators
 * (random bits against an independent implementation of the kir.h generator,
 * reproducibility, statistics), folded views, what must not be folded, and
 * allocation-failure injection. Expected values are computed by hand or by
 * the straightforward C loops below, never by graft's interpreter. */
#include "check.h"
#include "passes/passes.h"
#include <math.h>
#include <string.h>

#define AI(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INT, .i = (v)})
#define AF(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_FLOAT, .f = (v)})
#define AS(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_STRING, .s = (char *)(v)})
#define AIS(nm, ...)                                                                                              \
    ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INTS, .ints = (int64_t[]){__VA_ARGS__},             \
                  .n = GR_ARRAY_LEN(((int64_t[]){__VA_ARGS__}))})

static int node1(gr_graph *g, gr_op op, const char *name, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs) {
    int n = -1;
    gr_status st = gr_ir_add_node(g, op, name, n_in, in, 1, (const char *const[]){name}, n_attr, attrs, &n);
    if (st != GR_OK) {
        fprintf(stderr, "add %s: %s\n", name, gr_last_error());
        return -1;
    }
    return g->nodes.data[n].out[0];
}

static const gr_ir_value *val(const gr_graph *g, const char *name) {
    int v = gr_ir_find_value(g, name);
    return v >= 0 ? &g->values.data[v] : NULL;
}

/* ==== const arithmetic ==================================================================== */
static void test_chain(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    float ad[6] = {1, 2, 3, 4, 5, 6}, bd[3] = {10, 20, 30};
    int a, b, x;
    CHECK_OK(gr_ir_add_const(g, "a", GR_F32, 2, (int64_t[]){2, 3}, ad, &a));
    CHECK_OK(gr_ir_add_const(g, "b", GR_F32, 1, (int64_t[]){3}, bd, &b));
    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 2, (gr_dim[]){{2, GR_SYM_NONE}, {3, GR_SYM_NONE}}, &x));
    int c = node1(g, GR_OP_ADD, "c", 2, (int[]){a, b}, 0, NULL);
    int d = node1(g, GR_OP_MUL, "d", 2, (int[]){c, c}, 0, NULL);
    int e = node1(g, GR_OP_NEG, "e", 1, (int[]){d}, 0, NULL);
    int f = node1(g, GR_OP_ADD, "f", 2, (int[]){e, x}, 0, NULL);       /* reads an input: stays */
    int s = node1(g, GR_OP_REDUCE_SUM, "s", 1, (int[]){e}, 1, (gr_ir_attr[]){AI("keepdims", 0)});
    gr_ir_add_output(g, f);
    gr_ir_add_output(g, s);
    CHECK_OK(gr_ir_infer_shapes(g));
    CHECK_OK(gr_pass_fold_constants(g));
    CHECK(g->nodes.len == 1);
    CHECK(g->nodes.len >= 1 && !strcmp(g->nodes.data[0].name, "f"));
    const gr_ir_value *ev = val(g, "e"), *fv = val(g, "f"), *sv = val(g, "s");
    CHECK(ev && ev->kind == GR_VAL_CONST && ev->producer == -1 && ev->nbytes == 6 * sizeof(float));
    double total = 0;
    for (int i = 0; ev && ev->data && i < 6; i++) {
        float want = -((ad[i] + bd[i % 3]) * (ad[i] + bd[i % 3]));
        total += want;
        CHECK_MSG(((float *)ev->data)[i] == want, "e[%d] = %g, want %g", i, ((float *)ev->data)[i], want);
    }
    CHECK(fv && fv->kind == GR_VAL_NODE && fv->producer == 0 && fv->out_slot == 0);
    CHECK(sv && sv->kind == GR_VAL_CONST && sv->ndim == 0 && sv->nbytes == sizeof(float));
    if (sv && sv->data) CHECK_MSG(fabs(((float *)sv->data)[0] - total) < 1e-3, "sum %g want %g", ((float *)sv->data)[0], total);
    CHECK(g->outputs.len == 2 && g->outputs.data[1] == s); /* a folded graph output stays an output */
    CHECK_OK(gr_ir_verify(g));
    (void)d;
    gr_ir_graph_destroy(g);
}

/* matmul (library call), transpose, reshape (a view), slice, integer range, cast */
static void test_ops(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    float m1[4] = {1, 2, 3, 4}, m2[4] = {5, 6, 7, 8};
    float t6[6] = {1, 2, 3, 4, 5, 6};
    int a, b, t;
    CHECK_OK(gr_ir_add_const(g, "m1", GR_F32, 2, (int64_t[]){2, 2}, m1, &a));
    CHECK_OK(gr_ir_add_const(g, "m2", GR_F32, 2, (int64_t[]){2, 2}, m2, &b));
    CHECK_OK(gr_ir_add_const(g, "t6", GR_F32, 2, (int64_t[]){2, 3}, t6, &t));
    node1(g, GR_OP_MATMUL, "mm", 2, (int[]){a, b}, 0, NULL);
    node1(g, GR_OP_TRANSPOSE, "tr", 1, (int[]){t}, 0, NULL);
    int rs = node1(g, GR_OP_RESHAPE, "rs", 1, (int[]){t}, 1, (gr_ir_attr[]){AIS("shape", 3, -1)});
    node1(g, GR_OP_RESHAPE, "rs2", 1, (int[]){rs}, 1, (gr_ir_attr[]){AIS("shape", 6)});
    node1(g, GR_OP_SLICE, "sl", 1, (int[]){t}, 3,
          (gr_ir_attr[]){AIS("starts", -1), AIS("ends", INT64_MIN), AIS("steps", -2)});
    int r = node1(g, GR_OP_RANGE, "rg", 0, NULL, 4, (gr_ir_attr[]){AF("start", 10), AF("limit", 0), AF("delta", -3), AS("dtype", "i64")});
    node1(g, GR_OP_CAST, "ca", 1, (int[]){r}, 1, (gr_ir_attr[]){AS("to", "f32")});
    node1(g, GR_OP_FILL, "fi", 0, NULL, 3, (gr_ir_attr[]){AIS("shape", 2, 2), AF("value", 2.5), AS("dtype", "f16")});
    CHECK_OK(gr_ir_infer_shapes(g));
    CHECK_OK(gr_pass_fold_constants(g));
    CHECK(g->nodes.len == 0);
    const gr_ir_value *v;
    /* [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]] */
    float mm[4] = {19, 22, 43, 50};
    CHECK((v = val(g, "mm")) && v->kind == GR_VAL_CONST && v->nbytes == sizeof mm && !memcmp(v->data, mm, sizeof mm));
    float tr[6] = {1, 4, 2, 5, 3, 6};
    CHECK((v = val(g, "tr")) && v->kind == GR_VAL_CONST && v->nbytes == sizeof tr && !memcmp(v->data, tr, sizeof tr));
    CHECK((v = val(g, "rs")) && v->kind == GR_VAL_CONST && v->ndim == 2 && v->dims[0].size == 3 && v->dims[1].size == 2 &&
          v->nbytes == sizeof t6 && !memcmp(v->data, t6, sizeof t6));
    CHECK((v = val(g, "rs2")) && v->kind == GR_VAL_CONST && v->ndim == 1 && !memcmp(v->data, t6, sizeof t6));
    /* t6[::-2] on axis 0 of [2,3]: row 1 only */
    CHECK((v = val(g, "sl")) && v->kind == GR_VAL_CONST && v->nbytes == 3 * sizeof(float) && !memcmp(v->data, t6 + 3, 12));
    int64_t rg[4] = {10, 7, 4, 1};
    CHECK((v = val(g, "rg")) && v->kind == GR_VAL_CONST && v->nbytes == sizeof rg && !memcmp(v->data, rg, sizeof rg));
    float ca[4] = {10, 7, 4, 1};
    CHECK((v = val(g, "ca")) && v->kind == GR_VAL_CONST && v->nbytes == sizeof ca && !memcmp(v->data, ca, sizeof ca));
    CHECK((v = val(g, "fi")) && v->kind == GR_VAL_CONST && v->dtype == GR_F16 && v->nbytes == 8);
    for (int i = 0; v && v->data && i < 4; i++) CHECK(gr_half_to_f32(((uint16_t *)v->data)[i]) == 2.5f);
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);
}

/* ==== generators ============================================================================= */
/* The generator of kir.h, written out independently. */
static uint64_t mix(int64_t seed, uint64_t counter) {
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull + counter;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}
static double u_f32(int64_t seed, uint64_t n) { return (double)(mix(seed, n) >> 40) * (1.0 / 16777216.0); }
static double u_f64(int64_t seed, uint64_t n) { return (double)(mix(seed, n) >> 11) * (1.0 / 9007199254740992.0); }

static gr_graph *random_graph(gr_op op, int64_t seed, int64_t n, const char *dtype) {
    gr_graph *g = NULL;
    gr_ir_graph_create(&g);
    if (op == GR_OP_RANDOM_NORMAL)
        node1(g, op, "r", 0, NULL, 5, (gr_ir_attr[]){AIS("shape", n), AI("seed", seed), AS("dtype", dtype), AF("mean", 0), AF("std", 1)});
    else
        node1(g, op, "r", 0, NULL, 5, (gr_ir_attr[]){AIS("shape", n), AI("seed", seed), AS("dtype", dtype), AF("low", -2), AF("high", 3)});
    gr_ir_add_output(g, g->values.len - 1);
    return g;
}

static void test_random(void) {
    const int64_t N = 100000;
    gr_graph *g1 = random_graph(GR_OP_RANDOM_NORMAL, 42, N, "f32"), *g2 = random_graph(GR_OP_RANDOM_NORMAL, 42, N, "f32"),
             *g3 = random_graph(GR_OP_RANDOM_NORMAL, 43, N, "f32");
    CHECK_OK(gr_ir_infer_shapes(g1));
    CHECK_OK(gr_pass_fold_constants(g1));
    CHECK_OK(gr_ir_infer_shapes(g2));
    CHECK_OK(gr_pass_fold_constants(g2));
    CHECK_OK(gr_ir_infer_shapes(g3));
    CHECK_OK(gr_pass_fold_constants(g3));
    const gr_ir_value *r1 = val(g1, "r"), *r2 = val(g2, "r"), *r3 = val(g3, "r");
    CHECK(r1 && r1->kind == GR_VAL_CONST && r1->nbytes == (size_t)N * 4);
    CHECK(r2 && r2->kind == GR_VAL_CONST && r3 && r3->kind == GR_VAL_CONST);
    if (r1 && r2 && r3 && r1->data && r2->data && r3->data && r1->nbytes == (size_t)N * 4) {
        CHECK(!memcmp(r1->data, r2->data, r1->nbytes)); /* same seed, same bits */
        CHECK(memcmp(r1->data, r3->data, r1->nbytes) != 0);
        const float *x = r1->data;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < N; i++) sum += x[i];
        double mean = sum / (double)N;
        for (int64_t i = 0; i < N; i++) sq += (x[i] - mean) * (x[i] - mean);
        double sd = sqrt(sq / (double)N);
        CHECK_MSG(fabs(mean) < 0.02, "mean %g", mean); /* 6 sigma for 1e5 samples is ~0.019 */
        CHECK_MSG(fabs(sd - 1) < 0.02, "std %g", sd);
        /* the first values against Box-Muller on the independent generator */
        for (int i = 0; i < 8; i++) {
            double z = sqrt(-2 * log(1 - u_f64(42, 2 * (uint64_t)i))) * cos(2 * 3.14159265358979323846 * u_f64(42, 2 * (uint64_t)i + 1));
            CHECK_MSG(fabs(x[i] - z) < 1e-5 * (1 + fabs(z)), "normal[%d] = %.7g, want %.7g", i, x[i], z);
        }
    }
    gr_ir_graph_destroy(g1);
    gr_ir_graph_destroy(g2);
    gr_ir_graph_destroy(g3);

    /* uniform in [-2, 3): y = low + (high - low) * u */
    gr_graph *g = random_graph(GR_OP_RANDOM_UNIFORM, 7, 1000, "f32");
    CHECK_OK(gr_ir_infer_shapes(g));
    CHECK_OK(gr_pass_fold_constants(g));
    const gr_ir_value *r = val(g, "r");
    CHECK(r && r->kind == GR_VAL_CONST && r->nbytes == 4000);
    if (r && r->data && r->nbytes == 4000) {
        const float *x = r->data;
        int bad = 0;
        for (int i = 0; i < 1000; i++) {
            float want = (float)(-2.0 + 5.0 * u_f32(7, (uint64_t)i));
            if (x[i] != want || x[i] < -2 || x[i] >= 3) bad++;
        }
        CHECK_MSG(bad == 0, "%d uniform values differ from the reference", bad);
    }
    gr_ir_graph_destroy(g);
    g = random_graph(GR_OP_RANDOM_UNIFORM, 7, 16, "f64");
    CHECK_OK(gr_ir_infer_shapes(g));
    CHECK_OK(gr_pass_fold_constants(g));
    r = val(g, "r");
    CHECK(r && r->kind == GR_VAL_CONST && r->nbytes == 16 * 8);
    for (int i = 0; r && r->data && i < 16; i++) CHECK(((double *)r->data)[i] == -2.0 + 5.0 * u_f64(7, (uint64_t)i));
    gr_ir_graph_destroy(g);
}

/* ==== what stays ================================================================================ */
static void test_not_folded(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int x, c;
    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 1, (gr_dim[]){{4, GR_SYM_NONE}}, &x));
    uint8_t t = 1;
    CHECK_OK(gr_ir_add_const(g, "c", GR_BOOL, 0, NULL, &t, &c));
    node1(g, GR_OP_EXP, "ex", 1, (int[]){x}, 0, NULL);
    /* larger than 64M elements: left for run time (never allocated here) */
    node1(g, GR_OP_FILL, "big", 0, NULL, 1, (gr_ir_attr[]){AIS("shape", 8192, 8193)});
    /* an untyped output (inference not run on it) is left alone too */
    CHECK_OK(gr_ir_infer_node(g, 0));
    CHECK_OK(gr_ir_infer_node(g, 1));
    node1(g, GR_OP_NEG, "ng", 1, (int[]){c}, 0, NULL); /* bool neg: never inferred */
    CHECK_OK(gr_pass_fold_constants(g));
    CHECK(g->nodes.len == 3);
    CHECK(val(g, "big")->kind == GR_VAL_NODE && val(g, "ex")->kind == GR_VAL_NODE);
    gr_ir_graph_destroy(g);
}

/* ==== graft dump ================================================================================== */
static void test_dump(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    float w[4] = {1, 2, 3, 4};
    int x, wc;
    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 2, (gr_dim[]){{2, GR_SYM_NONE}, {2, GR_SYM_NONE}}, &x));
    CHECK_OK(gr_ir_add_const(g, "w", GR_F32, 2, (int64_t[]){2, 2}, w, &wc));
    int c = node1(g, GR_OP_ADD, "c", 2, (int[]){wc, wc}, 0, NULL);
    int y = node1(g, GR_OP_MATMUL, "y", 2, (int[]){x, c}, 0, NULL);
    int z = node1(g, GR_OP_RELU, "z", 1, (int[]){y}, 0, NULL);
    gr_ir_add_output(g, z);
    gr_strbuf sb;
    gr_sb_init(&sb);
    CHECK_OK(gr_pass_dump(g, NULL, false, &sb));
    char *text = gr_sb_take(&sb);
    CHECK(text != NULL);
    /* dump observes the session's pipeline: the same memory plan and segments */
    gr_compiled comp;
    CHECK_OK(gr_pass_pipeline(g, NULL, NULL, &comp));
    char arena_line[128], seg_line[128];
    snprintf(arena_line, sizeof arena_line, "== after plan_memory: arena %zu B, weights %zu B ==", comp.mem.arena_bytes,
             comp.mem.const_bytes);
    snprintf(seg_line, sizeof seg_line, "== after partition: %d segment%s ==", comp.segs.len, comp.segs.len == 1 ? "" : "s");
    if (text) {
        CHECK_MSG(strstr(text, arena_line) != NULL, "dump lacks \"%s\"", arena_line);
        CHECK_MSG(strstr(text, seg_line) != NULL, "dump lacks \"%s\"", seg_line);
    }
    gr_compiled_free(&comp);
    if (text) {
        const char *heads[] = {"== after input ==",          "== after specialize ==", "== after predicate_if ==",
                               "== after fold_constants ==", "== after lower: ",       "== after fuse: ",
                               "== after plan_memory: ",     "== after partition: "};
        const char *prev = text;
        for (int i = 0; i < 8; i++) {
            const char *at = strstr(prev, heads[i]);
            CHECK_MSG(at != NULL, "dump lacks \"%s\" in order", heads[i]);
            if (at) prev = at;
        }
        const char *fold = strstr(text, "== after fold_constants ==");
        const char *lower = strstr(text, "== after lower: ");
        CHECK(strstr(text, "libcall matmul") != NULL);
        CHECK(strstr(text, "relu") != NULL);
        /* before folding the add node is there, after it "c" is a constant [2,4,6,8] */
        CHECK(fold && lower && strstr(fold, "2, 4, 6, 8") && strstr(fold, "2, 4, 6, 8") < lower);
        gr_strfree(text);
    }
    /* the original graph is untouched */
    CHECK(g->nodes.len == 3 && g->values.data[c].kind == GR_VAL_NODE);
    gr_ir_graph_destroy(g);

    CHECK_OK(gr_ir_graph_create(&g));
    gr_dim n_dim = gr_dx_const(0);
    CHECK_OK(gr_dx_symbol(g, "N", &n_dim));

    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 2, (gr_dim[]){n_dim, {2, GR_SYM_NONE}}, &x));
    z = node1(g, GR_OP_RELU, "z", 1, (int[]){x}, 0, NULL);
    gr_ir_add_output(g, z);
    gr_sb_init(&sb);
    CHECK_ERR(gr_pass_dump(g, NULL, false, &sb), GR_ERR_SHAPE, "1 unresolved symbolic dim: N (of 'x')");
    gr_sb_free(&sb);
    /* bound, it compiles for that shape: x is [3,2] */
    gr_sb_init(&sb);
    int64_t n_is_3 = 3;
    CHECK_OK(gr_pass_dump(g, &n_is_3, false, &sb));
    CHECK(!sb.failed && sb.data && strstr(sb.data, "input x: f32[3, 2]") != NULL);
    gr_sb_free(&sb);
    gr_ir_graph_destroy(g);
}

/* ==== allocation failures ========================================================================= */
static void test_alloc_failures(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    float m[4] = {1, 2, 3, 4};
    int a, x;
    CHECK_OK(gr_ir_add_const(g, "m", GR_F32, 2, (int64_t[]){2, 2}, m, &a));
    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 2, (gr_dim[]){{2, GR_SYM_NONE}, {2, GR_SYM_NONE}}, &x));
    int mm = node1(g, GR_OP_MATMUL, "mm", 2, (int[]){a, a}, 0, NULL);
    int sm = node1(g, GR_OP_SOFTMAX, "sm", 1, (int[]){mm}, 0, NULL);
    int tr = node1(g, GR_OP_TRANSPOSE, "tr", 1, (int[]){sm}, 0, NULL);
    int rs = node1(g, GR_OP_RESHAPE, "rs", 1, (int[]){tr}, 1, (gr_ir_attr[]){AIS("shape", 4)});
    node1(g, GR_OP_RANDOM_NORMAL, "rn", 0, NULL, 1, (gr_ir_attr[]){AIS("shape", 4)});
    int o = node1(g, GR_OP_ADD, "o", 2, (int[]){x, tr}, 0, NULL);
    gr_ir_add_output(g, o);
    gr_ir_add_output(g, rs);
    CHECK_OK(gr_ir_infer_shapes(g));
    long base = gr_debug_live_allocs();
    int failures = 0, done = 0;
    for (long n = 1; n < 20000 && !done; n++) {
        gr_graph *copy = NULL;
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_ir_graph_clone(g, &copy);
        if (st == GR_OK) st = gr_pass_fold_constants(copy);
        if (st == GR_OK) {
            CHECK(copy->nodes.len == 1);
            st = gr_ir_verify(copy);
        }
        gr_ir_graph_destroy(copy);
        long made = gr_debug_fail_alloc_after(0);
        if (st != GR_OK && st != GR_ERR_NOMEM) {
            CHECK_MSG(0, "n=%ld: %s: %s", n, gr_status_name(st), gr_last_error());
            break;
        }
        if (st == GR_ERR_NOMEM) failures++;
        CHECK_MSG(gr_debug_live_allocs() == base, "n=%ld: %ld live allocations, expected %ld", n, gr_debug_live_allocs(), base);
        if (st == GR_OK && made < n) done = 1;
    }
    CHECK(done);
    CHECK(failures > 10);
    gr_ir_graph_destroy(g);
}

int main(void) {
    test_chain();
    test_ops();
    test_random();
    test_not_folded();
    test_dump();
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == 0, "%ld allocations leaked", gr_debug_live_allocs());
    return check_summary("test_fold");
}
