/* tests/test_shape — shape/dtype inference for every op, specialization, the
 * IR verifier, and allocation-failure injection over the passes.
 *
 * Expected shapes are written out by hand from numpy / ONNX rules (the
 * comment at each case names the rule); the inference code is never used to
 * compute an expectation. */
#include "check.h"
#include "passes/passes.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ==== helpers ========================================================================== */
static gr_graph *G; /* the graph the helpers add to */

/* Adds an input whose dims are written "2,N,0" ("" = 0-d); names are symbols. */
static int inp(gr_dtype t, const char *spec) {
    gr_dim dims[GR_MAX_DIMS];
    int nd = 0;
    const char *p = spec;
    while (*p) {
        char tok[32];
        int len = 0;
        while (*p && *p != ',' && len < 31) tok[len++] = *p++;
        tok[len] = 0;
        if (*p == ',') p++;
        if (tok[0] >= '0' && tok[0] <= '9') dims[nd++] = (gr_dim){strtoll(tok, NULL, 10), GR_SYM_NONE};
        else if (gr_dx_symbol(G, tok, &dims[nd]) == GR_OK) nd++;
    }
    int v = -1;
    gr_status st = gr_ir_add_input(G, NULL, t, nd, dims, &v);
    if (st != GR_OK) fprintf(stderr, "inp: %s\n", gr_last_error());
    return v;
}

#define INS(...) GR_ARRAY_LEN(((int[]){__VA_ARGS__})), ((int[]){__VA_ARGS__})
#define ATTRS(...) GR_ARRAY_LEN(((gr_ir_attr[]){__VA_ARGS__})), ((gr_ir_attr[]){__VA_ARGS__})
#define NOATTR 0, NULL
#define AI(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INT, .i = (v)})
#define AF(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_FLOAT, .f = (v)})
#define AS(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_STRING, .s = (char *)(v)})
#define AIS(nm, ...)                                                                                              \
    ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INTS, .ints = (int64_t[]){__VA_ARGS__},             \
                  .n = GR_ARRAY_LEN(((int64_t[]){__VA_ARGS__}))})
#define AIS0(nm) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INTS, .ints = NULL, .n = 0})

/* Adds a node with n_out outputs and infers it; returns the node index (-1 if it could not be added). */
static int add(gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, int n_out, gr_status *st) {
    int node = -1;
    gr_status s = gr_ir_add_node(G, op, NULL, n_in, in, n_out, NULL, n_attr, attrs, &node);
    if (s != GR_OK) {
        fprintf(stderr, "add_node: %s\n", gr_last_error());
        *st = s;
        return -1;
    }
    *st = gr_ir_infer_node(G, node);
    return node;
}

static void type_of(int v, char *buf) { gr_ir_type_str(G, &G->values.data[v], buf, 256); }

static void expect_out_(int line, int node, int slot, gr_status st, const char *want) {
    if (st != GR_OK || node < 0) {
        check_failed_++;
        fprintf(stderr, "test_shape.c:%d: expected %s, got %s: %s\n", line, want, gr_status_name(st), gr_last_error());
        return;
    }
    char got[256];
    type_of(G->nodes.data[node].out[slot], got);
    if (!strcmp(got, want)) check_passed_++;
    else {
        check_failed_++;
        fprintf(stderr, "test_shape.c:%d: expected %s, got %s\n", line, want, got);
    }
}

/* T(want, op, INS(...), ATTRS(...)|NOATTR): one-output op typed as `want` ("?" = untyped) */
#define T(want, op, ...)                                  \
    do {                                                  \
        gr_status st_;                                    \
        int nd_ = add(op, __VA_ARGS__, 1, &st_);          \
        expect_out_(__LINE__, nd_, 0, st_, want);         \
    } while (0)

static void expect_err_(int line, gr_status st, gr_status want, const char *needle) {
    if (st == want && strstr(gr_last_error(), needle)) check_passed_++;
    else {
        check_failed_++;
        fprintf(stderr, "test_shape.c:%d: expected %s containing \"%s\", got %s: %s\n", line, gr_status_name(want), needle,
                gr_status_name(st), gr_last_error());
    }
}

/* E(status, needle, op, INS(...), ATTRS(...)|NOATTR): inference fails with status and message */
#define E(want, needle, op, ...)                          \
    do {                                                  \
        gr_status st_;                                    \
        add(op, __VA_ARGS__, 1, &st_);                    \
        expect_err_(__LINE__, st_, want, needle);         \
    } while (0)

static void fresh(void) {
    gr_ir_graph_destroy(G);
    gr_ir_graph_create(&G);
}

/* ==== elementwise ============================================================================ */
static void test_elementwise(void) {
    fresh();
    int a23 = inp(GR_F32, "2,3"), a3 = inp(GR_F32, "3"), a413 = inp(GR_F32, "4,1,3"), a51 = inp(GR_F32, "5,1");
    int a03 = inp(GR_F32, "0,3"), a13 = inp(GR_F32, "1,3"), a0 = inp(GR_F32, "0"), a1 = inp(GR_F32, "1"),
        a2 = inp(GR_F32, "2"), s0 = inp(GR_F32, ""), a22 = inp(GR_F32, "2,2"), a43 = inp(GR_F32, "4,3");
    int n3 = inp(GR_F32, "N,3"), n1 = inp(GR_F32, "N,1"), m3 = inp(GR_F32, "M,3"), n = inp(GR_F32, "N"),
        c4 = inp(GR_F32, "4"), i2 = inp(GR_I64, "2"), i3 = inp(GR_I32, "3"), i1 = inp(GR_I32, "1");
    /* numpy broadcasting: align right, 1 stretches */
    T("f32[2,3]", GR_OP_ADD, INS(a23, a3), NOATTR);
    T("f32[2,3]", GR_OP_SUB, INS(a3, a23), NOATTR);
    T("f32[4,5,3]", GR_OP_MUL, INS(a413, a51), NOATTR);
    T("f32[0,3]", GR_OP_ADD, INS(a03, a13), NOATTR); /* 0 against 1 gives 0 */
    T("f32[0,3]", GR_OP_ADD, INS(a03, a3), NOATTR);
    T("f32[0]", GR_OP_DIV, INS(a0, a1), NOATTR);
    T("f32[2,2]", GR_OP_POW, INS(s0, a22), NOATTR); /* 0-d broadcasts to anything */
    T("f32[]", GR_OP_MAX, INS(s0, s0), NOATTR);
    E(GR_ERR_SHAPE, "shapes do not broadcast: f32[0] and f32[2]", GR_OP_ADD, INS(a0, a2), NOATTR);
    E(GR_ERR_SHAPE, "shapes do not broadcast: f32[2,3] and f32[4,3]", GR_OP_MIN, INS(a23, a43), NOATTR);
    /* symbolic dims */
    T("f32[N,3]", GR_OP_ADD, INS(n3, a13), NOATTR);
    T("f32[N,3]", GR_OP_ADD, INS(n3, n1), NOATTR);
    T("f32[N,3]", GR_OP_ADD, INS(n3, a3), NOATTR);
    T("f32[max(M, N),3]", GR_OP_ADD, INS(n3, m3), NOATTR); /* N vs M: max(N, M), checked once specialized */
    T("f32[4]", GR_OP_ADD, INS(n, c4), NOATTR);  /* N vs 4: 4 (N must be 1 or 4: checked once specialized) */
    T("f32[N]", GR_OP_ADD, INS(n, a1), NOATTR);
    E(GR_ERR_SHAPE, "shapes do not broadcast: f32[2,3] and f32[4,3]", GR_OP_ADD, INS(a23, a43), NOATTR);
    /* dtypes */
    E(GR_ERR_SHAPE, "dtypes differ: f32[2] and i64[2]", GR_OP_ADD, INS(a2, i2), NOATTR);
    T("bool[2,3]", GR_OP_EQUAL, INS(a23, a3), NOATTR);
    T("bool[3]", GR_OP_LESS, INS(i3, i1), NOATTR);
    T("bool[N,3]", GR_OP_GREATER_EQUAL, INS(n3, a3), NOATTR);
    E(GR_ERR_SHAPE, "dtypes differ", GR_OP_LESS_EQUAL, INS(i3, a3), NOATTR);
    int b3 = inp(GR_BOOL, "3"), b21 = inp(GR_BOOL, "2,1");
    T("bool[2,3]", GR_OP_AND, INS(b21, b3), NOATTR);
    T("bool[3]", GR_OP_OR, INS(b3, b3), NOATTR);
    E(GR_ERR_SHAPE, "input 1 must be bool, got f32[3]", GR_OP_AND, INS(b3, a3), NOATTR);
    T("bool[2,1]", GR_OP_NOT, INS(b21), NOATTR);
    E(GR_ERR_SHAPE, "must be bool", GR_OP_NOT, INS(a3), NOATTR);
    /* unary */
    int h2 = inp(GR_F16, "2");
    T("bool[2]", GR_OP_ISNAN, INS(h2), NOATTR);
    E(GR_ERR_SHAPE, "float dtype", GR_OP_ISNAN, INS(i3), NOATTR);
    T("f16[2]", GR_OP_EXP, INS(h2), NOATTR);
    T("f32[N,3]", GR_OP_TANH, INS(n3), NOATTR);
    E(GR_ERR_SHAPE, "input 0 must be a float dtype, got i32[3]", GR_OP_SQRT, INS(i3), NOATTR);
    T("i64[2]", GR_OP_NEG, INS(i2), NOATTR);
    T("i32[3]", GR_OP_RELU, INS(i3), NOATTR);
    T("i32[3]", GR_OP_ABS, INS(i3), NOATTR);
    E(GR_ERR_SHAPE, "numeric", GR_OP_NEG, INS(b3), NOATTR);
    T("i32[3]", GR_OP_IDENTITY, INS(i3), NOATTR);
    T("f32[2]", GR_OP_GELU, INS(a2), ATTRS(AS("approximate", "tanh")));
    E(GR_ERR_INVALID, "approximate", GR_OP_GELU, INS(a2), ATTRS(AS("approximate", "fast")));
    /* cast */
    T("f16[N,3]", GR_OP_CAST, INS(n3), ATTRS(AS("to", "f16")));
    T("bool[2]", GR_OP_CAST, INS(i2), ATTRS(AS("to", "bool")));
    T("i64[3]", GR_OP_CAST, INS(i3), ATTRS(AI("to", GR_I64)));
    E(GR_ERR_INVALID, "attribute 'to' is required", GR_OP_CAST, INS(i3), NOATTR);
    E(GR_ERR_INVALID, "unknown dtype 'f33'", GR_OP_CAST, INS(i3), ATTRS(AS("to", "f33")));
    /* where: three-way broadcast */
    int cn1 = inp(GR_BOOL, "N,1"), a14 = inp(GR_F32, "1,4"), a311 = inp(GR_F32, "3,1,1"), h14 = inp(GR_F16, "1,4");
    T("f32[N,4]", GR_OP_WHERE, INS(cn1, a14, a14), NOATTR);
    T("f32[3,N,4]", GR_OP_WHERE, INS(cn1, a14, a311), NOATTR);
    E(GR_ERR_SHAPE, "input 0 must be bool", GR_OP_WHERE, INS(a14, a14, a14), NOATTR);
    E(GR_ERR_SHAPE, "dtypes differ: f32[1,4] and f16[1,4]", GR_OP_WHERE, INS(cn1, a14, h14), NOATTR);
    E(GR_ERR_SHAPE, "do not broadcast", GR_OP_WHERE, INS(b3, a14, a14), NOATTR);
    /* an untyped input leaves the output untyped without error */
    int q;
    {
        gr_status st;
        int nd = add(GR_OP_ADD, INS(n3, m3), NOATTR, 1, &st);
        q = G->nodes.data[nd].out[0];
    }
    T("f32[max(M, N),3]", GR_OP_EXP, INS(q), NOATTR);
    T("f32[max(M, N),3]", GR_OP_ADD, INS(q, a3), NOATTR);
}

/* ==== reductions, softmax, layer_norm ===================================================== */
static void test_reduce(void) {
    fresh();
    int x = inp(GR_F32, "2,3,4"), s = inp(GR_F32, "N,T,8"), i = inp(GR_I32, "5");
    T("f32[2,1,4]", GR_OP_REDUCE_SUM, INS(x), ATTRS(AIS("axes", 1)));
    T("f32[2,4]", GR_OP_REDUCE_SUM, INS(x), ATTRS(AIS("axes", 1), AI("keepdims", 0)));
    T("f32[3]", GR_OP_REDUCE_MAX, INS(x), ATTRS(AIS("axes", -1, 0), AI("keepdims", 0)));
    T("f32[]", GR_OP_REDUCE_MEAN, INS(x), ATTRS(AI("keepdims", 0)));
    T("f32[1,1,1]", GR_OP_REDUCE_MIN, INS(x), NOATTR);
    T("f32[1,1,1]", GR_OP_REDUCE_SUM, INS(x), ATTRS(AIS0("axes"))); /* empty = all */
    T("f32[N,8]", GR_OP_REDUCE_SUM, INS(s), ATTRS(AIS("axes", 1), AI("keepdims", 0)));
    T("f32[N,T,1]", GR_OP_REDUCE_MEAN, INS(s), ATTRS(AIS("axes", -1)));
    T("i32[1]", GR_OP_REDUCE_SUM, INS(i), NOATTR);
    E(GR_ERR_SHAPE, "axis 3 is out of range for rank 3", GR_OP_REDUCE_SUM, INS(x), ATTRS(AIS("axes", 3)));
    E(GR_ERR_SHAPE, "axis -4 is out of range", GR_OP_REDUCE_SUM, INS(x), ATTRS(AIS("axes", -4)));
    E(GR_ERR_INVALID, "listed twice", GR_OP_REDUCE_SUM, INS(x), ATTRS(AIS("axes", 1, -2)));
    E(GR_ERR_INVALID, "attribute 'keepdims' must be an int", GR_OP_REDUCE_SUM, INS(x), ATTRS(AS("keepdims", "yes")));

    T("f32[N,T,8]", GR_OP_SOFTMAX, INS(s), NOATTR);
    T("f32[2,3,4]", GR_OP_SOFTMAX, INS(x), ATTRS(AI("axis", 0)));
    E(GR_ERR_SHAPE, "axis 3 is out of range", GR_OP_SOFTMAX, INS(x), ATTRS(AI("axis", 3)));
    E(GR_ERR_SHAPE, "float dtype", GR_OP_SOFTMAX, INS(i), NOATTR);

    int sc8 = inp(GR_F32, "8"), sc7 = inp(GR_F32, "7"), sc48 = inp(GR_F32, "3,4"), h8 = inp(GR_F16, "8"), sc1 = inp(GR_F32, "1");
    T("f32[N,T,8]", GR_OP_LAYER_NORM, INS(s, sc8, sc8), NOATTR);
    T("f32[N,T,8]", GR_OP_LAYER_NORM, INS(s, sc8, -1), ATTRS(AF("epsilon", 1e-6)));
    T("f32[N,T,8]", GR_OP_LAYER_NORM, INS(s, sc8), NOATTR);
    T("f32[N,T,8]", GR_OP_LAYER_NORM, INS(s, sc1), NOATTR); /* scale broadcasts */
    T("f32[2,3,4]", GR_OP_LAYER_NORM, INS(x, sc48), ATTRS(AI("axis", -2)));
    E(GR_ERR_SHAPE, "scale f32[7] does not broadcast to the normalized dims of f32[N,T,8]", GR_OP_LAYER_NORM, INS(s, sc7),
      NOATTR);
    E(GR_ERR_SHAPE, "has more dims than the normalized dims", GR_OP_LAYER_NORM, INS(x, sc48), NOATTR);
    E(GR_ERR_SHAPE, "bias f32[7]", GR_OP_LAYER_NORM, INS(s, sc8, sc7), NOATTR);
    E(GR_ERR_SHAPE, "dtypes differ", GR_OP_LAYER_NORM, INS(s, h8), NOATTR);
    E(GR_ERR_SHAPE, "axis 3 is out of range", GR_OP_LAYER_NORM, INS(s, sc8), ATTRS(AI("axis", 3)));
}

/* ==== matmul ========================================================================================= */
static void test_matmul(void) {
    fresh();
    G->origin = gr_strdup("mlp.gir");
    int a = inp(GR_F32, "256,512"), w = inp(GR_F32, "512,128"), wt = inp(GR_F32, "128,512"), at = inp(GR_F32, "512,256");
    T("f32[256,128]", GR_OP_MATMUL, INS(a, w), NOATTR);
    T("f32[256,128]", GR_OP_MATMUL, INS(a, wt), ATTRS(AI("trans_b", 1)));
    T("f32[256,128]", GR_OP_MATMUL, INS(at, w), ATTRS(AI("trans_a", 1)));
    T("f32[512,512]", GR_OP_MATMUL, INS(a, at), ATTRS(AI("trans_a", 1), AI("trans_b", 1))); /* [512,256] @ [256,512] */
    /* the exact message from the design note, with the source location */
    {
        int node = -1;
        CHECK_OK(gr_ir_add_node(G, GR_OP_MATMUL, "h", 2, (int[]){a, a}, 1, NULL, 0, NULL, &node));
        G->nodes.data[node].line = 4;
        G->nodes.data[node].col = 1;
        gr_status st = gr_ir_infer_node(G, node);
        CHECK(st == GR_ERR_SHAPE);
        CHECK_MSG(!strcmp(gr_last_error(), "node 'h' (matmul) at mlp.gir:4:1: inner dims differ: f32[256,512] @ f32[256,512]"),
                  "got: %s", gr_last_error());
    }
    E(GR_ERR_SHAPE, "inner dims differ: f32[256,512] @ f32[512,128] (trans_a=0, trans_b=1)", GR_OP_MATMUL, INS(a, w),
      ATTRS(AI("trans_b", 1)));
    /* numpy 1-D rules */
    int v3 = inp(GR_F32, "3"), m34 = inp(GR_F32, "3,4"), m23 = inp(GR_F32, "2,3"), bv = inp(GR_F32, "7,3");
    T("f32[4]", GR_OP_MATMUL, INS(v3, m34), NOATTR);
    T("f32[2]", GR_OP_MATMUL, INS(m23, v3), NOATTR);
    T("f32[]", GR_OP_MATMUL, INS(v3, v3), NOATTR);
    T("f32[7,2]", GR_OP_MATMUL, INS(bv, m23), ATTRS(AI("trans_b", 1)));
    /* batch broadcasting: [2,1] x [5] -> [2,5] */
    int b1 = inp(GR_F32, "2,1,3,4"), b2 = inp(GR_F32, "5,4,6"), b3 = inp(GR_F32, "2,3,4"), b4 = inp(GR_F32, "3,4,5");
    T("f32[2,5,3,6]", GR_OP_MATMUL, INS(b1, b2), NOATTR);
    T("f32[2,4]", GR_OP_MATMUL, INS(b3, v3), ATTRS(AI("trans_a", 1))); /* [2,4,3] @ [3] -> [2,4] */
    E(GR_ERR_SHAPE, "batch dims do not broadcast: f32[2,3,4] @ f32[3,4,5]", GR_OP_MATMUL, INS(b3, b4), NOATTR);
    /* symbolic */
    int s1 = inp(GR_F32, "N,T,64"), w64 = inp(GR_F32, "64,32"), sk = inp(GR_F32, "4,K"), ks = inp(GR_F32, "K,2"),
        ms = inp(GR_F32, "M,2");
    T("f32[N,T,32]", GR_OP_MATMUL, INS(s1, w64), NOATTR);
    T("f32[4,2]", GR_OP_MATMUL, INS(sk, ks), NOATTR);
    T("f32[4,2]", GR_OP_MATMUL, INS(sk, ms), NOATTR);
    /* bias */
    int r128 = inp(GR_F32, "128"), r256 = inp(GR_F32, "256"), h = inp(GR_F16, "512,128");
    T("f32[256,128]", GR_OP_MATMUL, INS(a, w, r128), NOATTR);
    T("f32[256,128]", GR_OP_MATMUL, INS(a, w, -1), ATTRS(AF("alpha", 0.5)));
    E(GR_ERR_SHAPE, "bias f32[256] does not broadcast to the result [256,128]", GR_OP_MATMUL, INS(a, w, r256), NOATTR);
    E(GR_ERR_SHAPE, "dtypes differ: f32[256,512] @ f16[512,128]", GR_OP_MATMUL, INS(a, h), NOATTR);
    int sc = inp(GR_F32, "");
    E(GR_ERR_SHAPE, "rank >= 1", GR_OP_MATMUL, INS(sc, w), NOATTR);
}

/* ==== data movement ===================================================================================== */
static void test_movement(void) {
    fresh();
    int x = inp(GR_F32, "2,3,4"), s = inp(GR_F32, "N,4,8"), nm = inp(GR_F32, "N,M"), z = inp(GR_F32, "0,3"),
        nz = inp(GR_F32, "N,0");
    /* reshape */
    T("f32[6,4]", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", 6, -1)));
    T("f32[24]", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", -1)));
    T("f32[4,6]", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", 4, 6)));
    T("f32[2,1,12]", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", 2, 1, -1)));
    E(GR_ERR_SHAPE, "cannot reshape f32[2,3,4] (24 elements) to [5,5] (25 elements)", GR_OP_RESHAPE, INS(x),
      ATTRS(AIS("shape", 5, 5)));
    E(GR_ERR_SHAPE, "cannot reshape f32[2,3,4] (24 elements) to [5,-1]", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", 5, -1)));
    E(GR_ERR_INVALID, "more than one -1", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", -1, -1)));
    E(GR_ERR_INVALID, "negative dim", GR_OP_RESHAPE, INS(x), ATTRS(AIS("shape", -2, 12)));
    E(GR_ERR_INVALID, "attribute 'shape' is required", GR_OP_RESHAPE, INS(x), NOATTR);
    T("f32[N,32]", GR_OP_RESHAPE, INS(s), ATTRS(AIS("shape", -1, 32)));
    T("f32[2*N,16]", GR_OP_RESHAPE, INS(s), ATTRS(AIS("shape", -1, 16))); /* 2N: not expressible */
    T("f32[M*N]", GR_OP_RESHAPE, INS(nm), ATTRS(AIS("shape", -1)));
    T("f32[2,16]", GR_OP_RESHAPE, INS(s), ATTRS(AIS("shape", 2, 16))); /* trusted until specialized */
    T("f32[3,0]", GR_OP_RESHAPE, INS(z), ATTRS(AIS("shape", 3, 0)));
    T("f32[0,5]", GR_OP_RESHAPE, INS(nz), ATTRS(AIS("shape", -1, 5)));
    E(GR_ERR_SHAPE, "cannot infer the -1", GR_OP_RESHAPE, INS(z), ATTRS(AIS("shape", -1, 0)));
    /* transpose */
    T("f32[4,3,2]", GR_OP_TRANSPOSE, INS(x), NOATTR);
    T("f32[3,2,4]", GR_OP_TRANSPOSE, INS(x), ATTRS(AIS("perm", 1, 0, 2)));
    T("f32[M,N]", GR_OP_TRANSPOSE, INS(nm), NOATTR);
    E(GR_ERR_INVALID, "perm [0,0,1] is not a permutation", GR_OP_TRANSPOSE, INS(x), ATTRS(AIS("perm", 0, 0, 1)));
    E(GR_ERR_INVALID, "not a permutation", GR_OP_TRANSPOSE, INS(x), ATTRS(AIS("perm", 0, 1, 3)));
    E(GR_ERR_SHAPE, "perm [1,0] has 2 entries for f32[2,3,4] of rank 3", GR_OP_TRANSPOSE, INS(x), ATTRS(AIS("perm", 1, 0)));
    /* expand (bidirectional broadcast) */
    int c31 = inp(GR_F32, "3,1"), c3 = inp(GR_F32, "3"), n1 = inp(GR_F32, "N,1"), n = inp(GR_F32, "N");
    T("f32[2,3,4]", GR_OP_EXPAND, INS(c31), ATTRS(AIS("shape", 2, 1, 4)));
    T("f32[2,3]", GR_OP_EXPAND, INS(c3), ATTRS(AIS("shape", 2, 1)));
    T("f32[3,1]", GR_OP_EXPAND, INS(c31), ATTRS(AIS("shape", 1)));
    E(GR_ERR_SHAPE, "cannot expand f32[3] to [4]", GR_OP_EXPAND, INS(c3), ATTRS(AIS("shape", 4)));
    T("f32[N,5]", GR_OP_EXPAND, INS(n1), ATTRS(AIS("shape", 1, 5)));
    T("f32[5]", GR_OP_EXPAND, INS(n), ATTRS(AIS("shape", 5)));
    E(GR_ERR_INVALID, "negative dim", GR_OP_EXPAND, INS(c3), ATTRS(AIS("shape", -1, 3)));
    /* squeeze / unsqueeze */
    int q = inp(GR_F32, "1,3,1");
    T("f32[3]", GR_OP_SQUEEZE, INS(q), NOATTR);
    T("f32[3,1]", GR_OP_SQUEEZE, INS(q), ATTRS(AIS("axes", 0)));
    T("f32[1,3]", GR_OP_SQUEEZE, INS(q), ATTRS(AIS("axes", -1)));
    E(GR_ERR_SHAPE, "cannot squeeze axis 1 of f32[1,3,1]: its size is 3, not 1", GR_OP_SQUEEZE, INS(q), ATTRS(AIS("axes", 1)));
    E(GR_ERR_SHAPE, "out of range", GR_OP_SQUEEZE, INS(q), ATTRS(AIS("axes", 3)));
    T("?", GR_OP_SQUEEZE, INS(n1), NOATTR);
    T("f32[N]", GR_OP_SQUEEZE, INS(n1), ATTRS(AIS("axes", 1)));
    int m34 = inp(GR_F32, "3,4"), r7 = inp(GR_F32, "1,1,1,1,1,1,1");
    T("f32[1,3,4]", GR_OP_UNSQUEEZE, INS(m34), ATTRS(AIS("axes", 0)));
    T("f32[3,4,1]", GR_OP_UNSQUEEZE, INS(m34), ATTRS(AIS("axes", -1)));
    T("f32[3,1,4,1]", GR_OP_UNSQUEEZE, INS(m34), ATTRS(AIS("axes", 1, 3)));
    T("f32[1,N,1]", GR_OP_UNSQUEEZE, INS(n), ATTRS(AIS("axes", 0, 2)));
    E(GR_ERR_SHAPE, "axis 3 is out of range for rank 3", GR_OP_UNSQUEEZE, INS(m34), ATTRS(AIS("axes", 3)));
    E(GR_ERR_SHAPE, "exceeds 8 dims", GR_OP_UNSQUEEZE, INS(r7), ATTRS(AIS("axes", 0, 1)));
    E(GR_ERR_INVALID, "listed twice", GR_OP_UNSQUEEZE, INS(m34), ATTRS(AIS("axes", 1, -3)));
    E(GR_ERR_INVALID, "'axes' is required", GR_OP_UNSQUEEZE, INS(m34), NOATTR);
}

static void test_slice(void) {
    fresh();
    int x = inp(GR_F32, "10,8"), s = inp(GR_F32, "N,8");
    const int64_t BIG = INT64_MAX, SMALL = INT64_MIN;
    /* lengths computed by hand from python slicing: len(range(10)[a:b:c]) */
    T("f32[5,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 2), AIS("ends", 7)));        /* [2:7] */
    T("f32[3,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", -3), AIS("ends", BIG)));     /* [-3:] */
    T("f32[4,4]", GR_OP_SLICE, INS(x),
      ATTRS(AIS("starts", 0, 1), AIS("ends", 10, 8), AIS("axes", 0, 1), AIS("steps", 3, 2))); /* [0:10:3], [1:8:2] */
    T("f32[10,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", -1), AIS("ends", SMALL), AIS("steps", -1))); /* [::-1] */
    T("f32[4,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", -1), AIS("ends", SMALL), AIS("steps", -3))); /* [::-3] */
    T("f32[3,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 8), AIS("ends", 2), AIS("steps", -2)));   /* [8:2:-2] */
    T("f32[10,4]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 100), AIS("ends", 3), AIS("axes", -1), AIS("steps", -1))); /* [100:3:-1] of 8 */
    T("f32[0,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 20), AIS("ends", 30)));      /* clamped, empty */
    T("f32[0,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 5), AIS("ends", 2)));        /* empty */
    T("f32[10,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", -100), AIS("ends", 100)));  /* clamped */
    T("f32[1,8]", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 3), AIS("ends", 0), AIS("steps", -BIG))); /* [3:0:-huge] */
    E(GR_ERR_INVALID, "step of axis 0 is 0", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 0), AIS("ends", 1), AIS("steps", 0)));
    E(GR_ERR_INVALID, "differ in length", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 0, 1), AIS("ends", 1)));
    E(GR_ERR_SHAPE, "axis 2 is out of range", GR_OP_SLICE, INS(x), ATTRS(AIS("starts", 0), AIS("ends", 1), AIS("axes", 2)));
    E(GR_ERR_INVALID, "sliced twice", GR_OP_SLICE, INS(x),
      ATTRS(AIS("starts", 0, 0), AIS("ends", 1, 1), AIS("axes", 0, -2)));
    E(GR_ERR_INVALID, "'starts' is required", GR_OP_SLICE, INS(x), ATTRS(AIS("ends", 1)));
    T("f32[N,8]", GR_OP_SLICE, INS(s), ATTRS(AIS("starts", 0), AIS("ends", BIG)));
    T("f32[N,8]", GR_OP_SLICE, INS(s), ATTRS(AIS("starts", -1), AIS("ends", SMALL), AIS("steps", -1)));
    T("f32[N - 1,8]", GR_OP_SLICE, INS(s), ATTRS(AIS("starts", 1), AIS("ends", BIG)));
    T("f32[N,2]", GR_OP_SLICE, INS(s), ATTRS(AIS("starts", 2), AIS("ends", 4), AIS("axes", 1)));
}

static void test_concat_split_gather(void) {
    fresh();
    int a = inp(GR_F32, "2,3"), b = inp(GR_F32, "4,3"), c = inp(GR_F32, "2,5"), h = inp(GR_F16, "2,3"), r1 = inp(GR_F32, "3");
    int n3 = inp(GR_F32, "N,3"), z3 = inp(GR_F32, "0,3"), n4 = inp(GR_F32, "N,4");
    T("f32[6,3]", GR_OP_CONCAT, INS(a, b), ATTRS(AI("axis", 0)));
    T("f32[8,3]", GR_OP_CONCAT, INS(a, b, a), ATTRS(AI("axis", 0)));
    T("f32[2,8]", GR_OP_CONCAT, INS(a, c), ATTRS(AI("axis", -1)));
    T("f32[2,3]", GR_OP_CONCAT, INS(a), ATTRS(AI("axis", 1)));
    E(GR_ERR_SHAPE, "dim 1 differs: f32[2,3] and f32[2,5] (input 1), concatenating on axis 0", GR_OP_CONCAT, INS(a, c),
      ATTRS(AI("axis", 0)));
    E(GR_ERR_SHAPE, "dtypes differ: f32[2,3] and f16[2,3]", GR_OP_CONCAT, INS(a, h), ATTRS(AI("axis", 0)));
    E(GR_ERR_SHAPE, "ranks differ", GR_OP_CONCAT, INS(a, r1), ATTRS(AI("axis", 0)));
    E(GR_ERR_SHAPE, "axis 2 is out of range", GR_OP_CONCAT, INS(a, a), ATTRS(AI("axis", 2)));
    T("f32[N,3]", GR_OP_CONCAT, INS(n3, z3), ATTRS(AI("axis", 0)));
    T("f32[N + 2,3]", GR_OP_CONCAT, INS(n3, a), ATTRS(AI("axis", 0)));
    T("f32[N,7]", GR_OP_CONCAT, INS(n3, n4), ATTRS(AI("axis", 1)));
    T("f32[2,6]", GR_OP_CONCAT, INS(n3, a), ATTRS(AI("axis", 1)));

    /* split */
    int x = inp(GR_F32, "6,4"), y = inp(GR_F32, "7,4");
    gr_status st;
    int nd = add(GR_OP_SPLIT, INS(x), NOATTR, 3, &st);
    for (int i = 0; i < 3; i++) expect_out_(__LINE__, nd, i, st, "f32[2,4]");
    nd = add(GR_OP_SPLIT, INS(x), ATTRS(AIS("split", 1, 5)), 2, &st);
    expect_out_(__LINE__, nd, 0, st, "f32[1,4]");
    expect_out_(__LINE__, nd, 1, st, "f32[5,4]");
    nd = add(GR_OP_SPLIT, INS(x), ATTRS(AI("axis", -1), AIS("split", 1, 0, 3)), 3, &st);
    expect_out_(__LINE__, nd, 0, st, "f32[6,1]");
    expect_out_(__LINE__, nd, 1, st, "f32[6,0]");
    expect_out_(__LINE__, nd, 2, st, "f32[6,3]");
    add(GR_OP_SPLIT, INS(x), ATTRS(AIS("split", 1, 4)), 2, &st);
    expect_err_(__LINE__, st, GR_ERR_SHAPE, "split sizes [1,4] sum to 5, but axis 0 of f32[6,4] has 6");
    add(GR_OP_SPLIT, INS(y), NOATTR, 2, &st);
    expect_err_(__LINE__, st, GR_ERR_SHAPE, "axis 0 of f32[7,4] (7) does not split into 2 equal parts");
    add(GR_OP_SPLIT, INS(x), ATTRS(AIS("split", 6)), 2, &st);
    expect_err_(__LINE__, st, GR_ERR_INVALID, "has 1 sizes for 2 outputs");
    nd = add(GR_OP_SPLIT, INS(n4), ATTRS(AI("axis", 1), AIS("split", 2, 2)), 2, &st);
    expect_out_(__LINE__, nd, 1, st, "f32[N,2]");
    nd = add(GR_OP_SPLIT, INS(n4), NOATTR, 2, &st);
    expect_out_(__LINE__, nd, 0, st, "f32[N//2,4]");

    /* gather [np.take]: data.shape[:axis] + indices.shape + data.shape[axis+1:] */
    int d = inp(GR_F32, "5,4,3"), i26 = inp(GR_I64, "2,6"), i0 = inp(GR_I32, ""), fi = inp(GR_F32, "2"), in = inp(GR_I64, "N");
    T("f32[5,2,6,3]", GR_OP_GATHER, INS(d, i26), ATTRS(AI("axis", 1)));
    T("f32[4,3]", GR_OP_GATHER, INS(d, i0), NOATTR);
    T("f32[5,4,N]", GR_OP_GATHER, INS(d, in), ATTRS(AI("axis", -1)));
    E(GR_ERR_SHAPE, "indices must be i32 or i64, got f32[2]", GR_OP_GATHER, INS(d, fi), NOATTR);
    E(GR_ERR_SHAPE, "axis 3 is out of range", GR_OP_GATHER, INS(d, i26), ATTRS(AI("axis", 3)));
    /* gather_elements [np.take_along_axis]: shape of indices */
    int m = inp(GR_F32, "3,4"), i32 = inp(GR_I64, "3,2");
    T("f32[3,2]", GR_OP_GATHER_ELEMENTS, INS(m, i32), ATTRS(AI("axis", 1)));
    E(GR_ERR_SHAPE, "differ in rank", GR_OP_GATHER_ELEMENTS, INS(m, in), NOATTR);
    E(GR_ERR_SHAPE, "i32 or i64", GR_OP_GATHER_ELEMENTS, INS(m, m), NOATTR);
    /* trilu */
    int t = inp(GR_F32, "N,4,4");
    T("f32[N,4,4]", GR_OP_TRILU, INS(t), ATTRS(AI("upper", 0), AI("k", -1)));
    E(GR_ERR_SHAPE, "rank >= 2", GR_OP_TRILU, INS(r1), NOATTR);
}

static void test_generators(void) {
    fresh();
    T("i32[2,3]", GR_OP_FILL, 0, NULL, ATTRS(AIS("shape", 2, 3), AF("value", 7), AS("dtype", "i32")));
    T("f32[]", GR_OP_FILL, 0, NULL, ATTRS(AIS0("shape")));
    E(GR_ERR_INVALID, "'shape' is required", GR_OP_FILL, 0, NULL, ATTRS(AF("value", 1)));
    E(GR_ERR_INVALID, "negative dim", GR_OP_FILL, 0, NULL, ATTRS(AIS("shape", 2, -3)));
    /* np.arange lengths */
    T("f32[4]", GR_OP_RANGE, 0, NULL, ATTRS(AF("start", 0), AF("limit", 10), AF("delta", 3)));    /* 0 3 6 9 */
    T("f32[4]", GR_OP_RANGE, 0, NULL, ATTRS(AF("start", 10), AF("limit", 0), AF("delta", -3)));   /* 10 7 4 1 */
    T("i64[5]", GR_OP_RANGE, 0, NULL, ATTRS(AI("limit", 5), AS("dtype", "i64")));                 /* 0..4 */
    T("f32[0]", GR_OP_RANGE, 0, NULL, ATTRS(AF("start", 5), AF("limit", 0)));
    T("f32[3]", GR_OP_RANGE, 0, NULL, ATTRS(AF("start", 0), AF("limit", 1), AF("delta", 0.4)));   /* 0 .4 .8 */
    E(GR_ERR_INVALID, "not a finite sequence", GR_OP_RANGE, 0, NULL, ATTRS(AF("limit", 3), AF("delta", 0)));
    E(GR_ERR_INVALID, "'limit' is required", GR_OP_RANGE, 0, NULL, ATTRS(AF("start", 3)));
    T("f16[100]", GR_OP_RANDOM_NORMAL, 0, NULL, ATTRS(AIS("shape", 100), AS("dtype", "f16"), AI("seed", 3)));
    T("f32[2,2]", GR_OP_RANDOM_UNIFORM, 0, NULL, ATTRS(AIS("shape", 2, 2), AF("low", -1), AF("high", 1)));
    E(GR_ERR_INVALID, "must be a float dtype, got i32", GR_OP_RANDOM_UNIFORM, 0, NULL,
      ATTRS(AIS("shape", 2), AS("dtype", "i32")));
    E(GR_ERR_INVALID, "unknown dtype 'f33'", GR_OP_RANDOM_NORMAL, 0, NULL, ATTRS(AIS("shape", 2), AS("dtype", "f33")));
}

/* ==== control flow and specialization ============================================================= */
/* A branch graph whose one output is op(captured outer value `name`). */
static gr_graph *branch(gr_graph *outer, const char *name, gr_op op) {
    gr_graph *b = NULL;
    gr_ir_graph_create(&b);
    b->parent = outer;
    int cap = -1, node = -1;
    gr_ir_add_value(b, name, GR_VAL_INPUT, &cap);
    gr_ir_add_node(b, op, NULL, 1, &cap, 1, NULL, 0, NULL, &node);
    gr_ir_add_output(b, b->nodes.data[node].out[0]);
    return b;
}

static int add_if(gr_graph *g, int cond, gr_graph *then_g, gr_graph *else_g, int *node) {
    gr_ir_attr at[2] = {{.name = "then_branch", .kind = GR_IR_ATTR_GRAPH, .graph = then_g},
                        {.name = "else_branch", .kind = GR_IR_ATTR_GRAPH, .graph = else_g}};
    gr_status st = gr_ir_add_node(g, GR_OP_IF, NULL, 1, &cond, 1, NULL, 2, at, node);
    gr_ir_graph_destroy(then_g);
    gr_ir_graph_destroy(else_g);
    return st;
}

static void test_control_and_specialize(void) {
    fresh();
    int x = inp(GR_F32, "N,4"), c = inp(GR_BOOL, ""), w = inp(GR_F32, "4,8");
    int node;
    CHECK_OK(add_if(G, c, branch(G, "%0", GR_OP_NEG), branch(G, "%0", GR_OP_EXP), &node));
    CHECK_OK(gr_ir_infer_node(G, node));
    char t[256];
    type_of(G->nodes.data[node].out[0], t);
    CHECK_MSG(!strcmp(t, "f32[N,4]"), "if output: %s", t);
    CHECK_OK(gr_ir_verify(G));
    /* branches that disagree: untyped output */
    CHECK_OK(add_if(G, c, branch(G, "%0", GR_OP_NEG), branch(G, "%2", GR_OP_NEG), &node));
    CHECK_OK(gr_ir_infer_node(G, node));
    type_of(G->nodes.data[node].out[0], t);
    CHECK_MSG(!strcmp(t, "?"), "if output: %s", t);
    (void)x;

    /* specialize: [N,T,4] @ [4,8] -> reshape [-1,8] is [N*T, 8] until N and T are bound */
    fresh();
    int s = inp(GR_F32, "N,T,4");
    w = inp(GR_F32, "4,8");
    gr_status st;
    int mm = add(GR_OP_MATMUL, INS(s, w), NOATTR, 1, &st);
    int rs = add(GR_OP_RESHAPE, INS(G->nodes.data[mm].out[0]), ATTRS(AIS("shape", -1, 8)), 1, &st);
    int sm = add(GR_OP_SOFTMAX, INS(G->nodes.data[rs].out[0]), NOATTR, 1, &st);
    expect_out_(__LINE__, mm, 0, GR_OK, "f32[N,T,8]");
    expect_out_(__LINE__, rs, 0, GR_OK, "f32[N*T,8]");
    expect_out_(__LINE__, sm, 0, GR_OK, "f32[N*T,8]");
    gr_graph *copy = NULL;
    CHECK_OK(gr_ir_graph_clone(G, &copy));
    int64_t vals[2] = {2, 3}; /* N = 2, T = 3 (symbols in order of creation) */
    CHECK_OK(gr_ir_specialize(G, vals));
    expect_out_(__LINE__, mm, 0, GR_OK, "f32[2,3,8]");
    expect_out_(__LINE__, rs, 0, GR_OK, "f32[6,8]");
    expect_out_(__LINE__, sm, 0, GR_OK, "f32[6,8]");
    type_of(s, t);
    CHECK_MSG(!strcmp(t, "f32[2,3,4]"), "input after specialize: %s", t);
    int64_t missing[2] = {2, -1};
    CHECK_ERR(gr_ir_specialize(copy, missing), GR_ERR_INVALID, "no value for symbolic dim 'T'");
    gr_ir_graph_destroy(copy);

    /* N vs 3 is 3 (checked once specialized); N = 3 works, N = 2 is a broadcast error */
    for (int pass = 0; pass < 2; pass++) {
        fresh();
        s = inp(GR_F32, "N,4");
        int b = inp(GR_F32, "3,4");
        int add_node = add(GR_OP_ADD, INS(s, b), NOATTR, 1, &st);
        expect_out_(__LINE__, add_node, 0, st, "f32[3,4]");
        if (pass == 0) {
            CHECK_OK(gr_ir_specialize(G, (int64_t[]){3}));
            expect_out_(__LINE__, add_node, 0, GR_OK, "f32[3,4]");
        } else {
            CHECK_ERR(gr_ir_specialize(G, (int64_t[]){2}), GR_ERR_SHAPE, "shapes do not broadcast: f32[2,4] and f32[3,4]");
        }
    }
}

/* ==== verifier ======================================================================================= */
/* x:f32[2,3] -> a = neg(x) -> b = add(a, x) ; const k:f32[3]; output b */
static gr_graph *good_graph(int *nodes_out) {
    gr_graph *g = NULL;
    gr_ir_graph_create(&g);
    g->origin = gr_strdup("v.gir");
    gr_dim d[2] = {{2, GR_SYM_NONE}, {3, GR_SYM_NONE}};
    int x, k, n0, n1;
    gr_ir_add_input(g, "x", GR_F32, 2, d, &x);
    float kd[3] = {1, 2, 3};
    gr_ir_add_const(g, "k", GR_F32, 1, (int64_t[]){3}, kd, &k);
    gr_ir_add_node(g, GR_OP_NEG, "a", 1, &x, 1, (const char *const[]){"av"}, 0, NULL, &n0);
    g->nodes.data[n0].line = 2;
    g->nodes.data[n0].col = 1;
    int in1[2] = {g->nodes.data[n0].out[0], k};
    gr_ir_add_node(g, GR_OP_ADD, "b", 2, in1, 1, (const char *const[]){"bv"}, 0, NULL, &n1);
    g->nodes.data[n1].line = 3;
    g->nodes.data[n1].col = 5;
    gr_ir_add_output(g, g->nodes.data[n1].out[0]);
    if (nodes_out) nodes_out[0] = n0, nodes_out[1] = n1;
    return g;
}

#define VERR(mutation, needle)                                                \
    do {                                                                      \
        int nd[2];                                                            \
        gr_graph *g = good_graph(nd);                                         \
        (void)nd;                                                             \
        mutation;                                                             \
        CHECK_ERR(gr_ir_verify(g), GR_ERR_INVALID, needle);                   \
        gr_ir_graph_destroy(g);                                               \
    } while (0)
/* the same for a field that also sizes an allocation: put back before destroying */
#define VERR_FIELD(field, bad, needle)                                        \
    do {                                                                      \
        int nd[2];                                                            \
        gr_graph *g = good_graph(nd);                                         \
        __typeof__(field) good_ = field;                                      \
        field = bad;                                                          \
        CHECK_ERR(gr_ir_verify(g), GR_ERR_INVALID, needle);                   \
        field = good_;                                                        \
        gr_ir_graph_destroy(g);                                               \
    } while (0)

static void test_verify(void) {
    {
        gr_graph *g = good_graph(NULL);
        CHECK_OK(gr_ir_verify(g));
        CHECK_OK(gr_ir_infer_shapes(g));
        CHECK_OK(gr_ir_verify(g));
        gr_ir_graph_destroy(g);
    }
    /* index ranges */
    VERR(g->nodes.data[nd[1]].in[1] = 99, "node 'b' (add) at v.gir:3:5: input 1 refers to no value (99 of 4)");
    VERR(g->nodes.data[nd[1]].out[0] = 42, "node 'b' (add) at v.gir:3:5: output 0 refers to no value");
    VERR(g->outputs.data[0] = 7, "graph output 0 refers to no value (7 of 4)");
    VERR(g->inputs.data[0] = -3, "graph input 0 refers to no value");
    /* arity */
    VERR_FIELD(g->nodes.data[nd[1]].n_in, 1, "node 'b' (add) at v.gir:3:5: takes 2 inputs, got 1");
    VERR_FIELD(g->nodes.data[nd[0]].n_out, 0, "node 'a' (neg) at v.gir:2:1: has 1 outputs, got 0");
    VERR_FIELD(g->nodes.data[nd[0]].n_in, 2, "node 'a' (neg) at v.gir:2:1: takes 1 inputs, got 2");
    VERR(g->nodes.data[nd[0]].op = (gr_op)999, "unknown op id 999");
    /* definition order: a reads b's output (defined later), b reads its own */
    VERR(g->nodes.data[nd[0]].in[0] = g->nodes.data[nd[1]].out[0], "node 'a' (neg) at v.gir:2:1: input 0 ('bv') is used before it is defined");
    VERR(g->nodes.data[nd[1]].in[0] = g->nodes.data[nd[1]].out[0], "node 'b' (add) at v.gir:3:5: input 0 ('bv') is used before");
    /* optional inputs only where the op has them */
    VERR(g->nodes.data[nd[1]].in[1] = -1, "node 'b' (add) at v.gir:3:5: input 1 is required but missing");
    {
        gr_graph *g = good_graph(NULL);
        int x = gr_ir_find_value(g, "x"), k = gr_ir_find_value(g, "k"), n;
        CHECK_OK(gr_ir_add_node(g, GR_OP_LAYER_NORM, "ln", 3, (int[]){x, k, -1}, 1, NULL, 0, NULL, &n));
        CHECK_OK(gr_ir_add_node(g, GR_OP_MATMUL, "mm", 3, (int[]){x, x, -1}, 1, NULL, 0, NULL, &n));
        CHECK_OK(gr_ir_verify(g));
        g->nodes.data[n].in[1] = -1;
        CHECK_ERR(gr_ir_verify(g), GR_ERR_INVALID, "node 'mm' (matmul): input 1 is required but missing");
        gr_ir_graph_destroy(g);
    }
    /* producer / out_slot consistency */
    VERR(g->values.data[g->nodes.data[nd[0]].out[0]].out_slot = 1,
         "node 'a' (neg) at v.gir:2:1: output 0 ('av') is not recorded as produced here (kind 2, producer 0, slot 1)");
    VERR(g->values.data[g->nodes.data[nd[0]].out[0]].producer = nd[1], "node 'a' (neg) at v.gir:2:1: output 0 ('av') is not recorded");
    VERR(g->nodes.data[nd[1]].out[0] = g->nodes.data[nd[0]].out[0], "node 'b' (add) at v.gir:3:5: output 0 ('av') is not recorded");
    VERR((void)gr_ir_add_value(g, "orphan", GR_VAL_NODE, &(int){0}), "v.gir: value 'orphan' has no producing node (producer -1 of 2)");
    {
        int nd[2];
        gr_graph *g = good_graph(nd);
        int orphan = -1;
        gr_ir_add_value(g, "orphan", GR_VAL_NODE, &orphan);
        g->values.data[orphan].producer = nd[0];
        CHECK_ERR(gr_ir_verify(g), GR_ERR_INVALID, "node 'a' (neg) at v.gir:2:1: value 'orphan' claims to be output 0 of it");
        gr_ir_graph_destroy(g);
    }
    /* inputs */
    VERR(g->inputs.data[0] = gr_ir_find_value(g, "k"), "graph input 0 ('k') is not an input value");
    VERR((void)gr_vec_push(&g->inputs, 0), "graph input 'x' is listed twice");
    VERR(g->values.data[gr_ir_find_value(g, "av")].kind = GR_VAL_INPUT,
         "value 'av' is an input but not listed among the graph inputs");
    /* constants */
    VERR_FIELD(g->values.data[gr_ir_find_value(g, "k")].nbytes, 8, "constant 'k' holds 8 bytes of data, its type needs 12");
    VERR(g->values.data[gr_ir_find_value(g, "k")].dims[0].size = 4, "constant 'k' holds 12 bytes of data, its type needs 16");
    /* dtypes, ranks, symbols */
    VERR(g->values.data[gr_ir_find_value(g, "x")].dtype = (gr_dtype)77, "value 'x' has bad dtype 77");
    VERR(g->values.data[gr_ir_find_value(g, "x")].ndim = 9, "value 'x' has rank 9 outside 0..8");
    VERR(g->values.data[gr_ir_find_value(g, "x")].dims[1] = ((gr_dim){-1, 3}), "value 'x' dim 1 refers to expression 3 of 0");
    VERR(g->values.data[gr_ir_find_value(g, "x")].dims[1] = ((gr_dim){-5, GR_SYM_NONE}), "dim 1 is negative (-5)");
    /* subgraphs: a capture of an outer value is fine; an unknown capture or a broken node is reported */
    {
        gr_graph *g = good_graph(NULL);
        int c, n;
        gr_ir_add_input(g, "c", GR_BOOL, 0, NULL, &c);
        CHECK_OK(add_if(g, c, branch(g, "x", GR_OP_NEG), branch(g, "av", GR_OP_EXP), &n));
        CHECK_OK(gr_ir_verify(g));
        CHECK_OK(gr_ir_infer_shapes(g));
        char t[256];
        gr_ir_type_str(g, &g->values.data[g->nodes.data[n].out[0]], t, sizeof t);
        CHECK_MSG(!strcmp(t, "f32[2,3]"), "if: %s", t);
        CHECK_OK(add_if(g, c, branch(g, "x", GR_OP_NEG), branch(g, "nowhere", GR_OP_EXP), &n));
        CHECK_ERR(gr_ir_verify(g), GR_ERR_INVALID, "in subgraph 'else_branch': <api>: value 'nowhere' is an input but not listed");
        gr_ir_graph_destroy(g);
    }
    {
        gr_graph *g = good_graph(NULL);
        int c, n;
        gr_ir_add_input(g, "c", GR_BOOL, 0, NULL, &c);
        CHECK_OK(add_if(g, c, branch(g, "x", GR_OP_NEG), branch(g, "x", GR_OP_EXP), &n));
        gr_graph *sub = g->nodes.data[n].attrs[0].graph;
        sub->nodes.data[0].n_in = 0;
        CHECK_ERR(gr_ir_verify(g), GR_ERR_INVALID, "(if): in subgraph 'then_branch': node 'neg_0' (neg): takes 1 inputs, got 0");
        sub->nodes.data[0].n_in = 1; /* it sizes the node's input array */
        gr_ir_graph_destroy(g);
    }
}

/* ==== allocation failures ==================================================================================== */
static void test_alloc_failures(void) {
    fresh();
    int s = inp(GR_F32, "N,T,4"), w = inp(GR_F32, "4,8"), c = inp(GR_BOOL, "");
    gr_status st;
    int mm = add(GR_OP_MATMUL, INS(s, w), NOATTR, 1, &st);
    add(GR_OP_RESHAPE, INS(G->nodes.data[mm].out[0]), ATTRS(AIS("shape", -1, 8)), 1, &st);
    int node;
    CHECK_OK(add_if(G, c, branch(G, G->values.data[G->nodes.data[mm].out[0]].name, GR_OP_NEG),
                    branch(G, G->values.data[G->nodes.data[mm].out[0]].name, GR_OP_EXP), &node));
    long base = gr_debug_live_allocs();
    int failures = 0, done = 0;
    for (long n = 1; n < 5000 && !done; n++) {
        gr_graph *copy = NULL;
        gr_debug_fail_alloc_after(n);
        st = gr_ir_graph_clone(G, &copy);
        if (st == GR_OK) st = gr_ir_infer_shapes(copy);
        if (st == GR_OK) st = gr_ir_verify(copy);
        if (st == GR_OK) st = gr_ir_specialize(copy, (int64_t[]){2, 5});
        if (st == GR_OK) {
            char t[256];
            int last = copy->nodes.data[copy->nodes.len - 1].out[0];
            gr_ir_type_str(copy, &copy->values.data[last], t, sizeof t);
            CHECK_MSG(!strcmp(t, "f32[2,5,8]"), "if after specialize: %s", t);
        }
        gr_ir_graph_destroy(copy);
        long made = gr_debug_fail_alloc_after(0);
        if (st != GR_OK && st != GR_ERR_NOMEM) {
            CHECK_MSG(0, "n=%ld: unexpected %s: %s", n, gr_status_name(st), gr_last_error());
            break;
        }
        if (st == GR_ERR_NOMEM) failures++;
        CHECK_MSG(gr_debug_live_allocs() == base, "n=%ld: %ld live allocations, expected %ld", n, gr_debug_live_allocs(), base);
        if (st == GR_OK && made < n) done = 1;
    }
    CHECK(done);
    CHECK(failures > 5);
}

int main(void) {
    test_elementwise();
    test_reduce();
    test_matmul();
    test_movement();
    test_slice();
    test_concat_split_gather();
    test_generators();
    test_control_and_specialize();
    test_verify();
    test_alloc_failures();
    gr_ir_graph_destroy(G);
    G = NULL;
    CHECK_MSG(gr_debug_live_allocs() == 0, "%ld allocations leaked", gr_debug_live_allocs());
    return check_summary("test_shape");
}
