/* tests/test_lower — lowering every op to kernels / library calls / views, and
 * fusion. Graphs are built with the ir.c builder and typed by hand (so these
 * tests do not depend on shape inference), lowered, and EXECUTED by a small
 * executor on host buffers (gr_kernel_interpret / gr_libcall_reference, with
 * every kernel's byte ranges checked against its buffers). Every element is
 * compared with a straightforward C reference of the op, written here. */
#include "check.h"
#include "passes/passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== graph building ===================================================================== */

#include "host_exec.h" /* MAXV, input_data, A_* attrs, set_type, t_input, t_const, the executor */

/* adds a node with n_out outputs, all typed (t, nd, dims[k]) */
static int t_node_multi(gr_graph *g, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, int n_out,
                        gr_dtype t, int nd, const int64_t (*dims)[GR_MAX_DIMS], int *outs) {
    int node = -1;
    CHECK_OK(gr_ir_add_node(g, op, NULL, n_in, in, n_out, NULL, n_attr, attrs, &node));
    if (node < 0) return -1;
    for (int k = 0; k < n_out; k++) {
        outs[k] = g->nodes.data[node].out[k];
        set_type(g, outs[k], t, nd, dims[k]);
    }
    return node;
}

static int t_node(gr_graph *g, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, gr_dtype t,
                  int nd, const int64_t *dims) {
    int64_t d[1][GR_MAX_DIMS];
    for (int i = 0; i < nd; i++) d[0][i] = dims[i];
    int out = -1;
    t_node_multi(g, op, n_in, in, n_attr, attrs, 1, t, nd, d, &out);
    return out;
}


static int count_kind(const gr_step_list *l, gr_step_kind k) {
    int n = 0;
    for (int i = 0; i < l->len; i++) n += l->data[i].kind == k;
    return n;
}

/* Lowers (and optionally fuses) g, runs it, and returns value v as doubles in out (malloc'd). */
static double *run_value(gr_graph *g, int v, bool fuse, int *n_kernels) {
    gr_step_list steps;
    gr_status st = gr_pass_lower(g, &steps);
    CHECK_OK(st);
    if (st != GR_OK) return NULL;
    if (fuse) CHECK_OK(gr_pass_fuse(g, &steps));
    for (int i = 0; i < steps.len; i++)
        if (steps.data[i].kind == GR_STEP_KERNEL) CHECK_OK(gr_kernel_verify(steps.data[i].kernel));
    if (n_kernels) *n_kernels = count_kind(&steps, GR_STEP_KERNEL) + count_kind(&steps, GR_STEP_LIBCALL);
    exec_t e;
    st = exec_run(&e, g, &steps);
    CHECK_OK(st);
    double *out = NULL;
    if (st == GR_OK) {
        const gr_ir_value *x = &g->values.data[v];
        int64_t n = gr_ir_value_numel(x);
        out = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t i = 0; i < n; i++) out[i] = gr_load_f64(e.buf[v], x->dtype, i);
    }
    exec_free(&e);
    gr_step_list_free(&steps);
    return out;
}

/* ==== comparison ============================================================================== */

static double tol_of(gr_dtype t) {
    switch (t) {
    case GR_F16: return 2e-3;
    case GR_BF16: return 1.6e-2;
    case GR_F32: return 2e-6;
    case GR_F64: return 1e-12;
    default: return 0;
    }
}

static double round_dtype(gr_dtype t, double v) {
    char b[8];
    gr_store_f64(b, t, 0, v);
    return gr_load_f64(b, t, 0);
}

static bool close_to(double got, double want, double tol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= tol * (1.0 + fabs(want));
}

/* compares n values; want is rounded to t first; reports the first mismatch */
static void compare(const char *what, const double *got, const double *want, int64_t n, gr_dtype t, double tol) {
    if (!got) {
        CHECK_MSG(false, "%s: no result", what);
        return;
    }
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!close_to(got[i], round_dtype(t, want[i]), tol)) bad = i;
    CHECK_MSG(bad < 0, "%s (%s): element %lld is %.9g, expected %.9g", what, gr_dtype_name(t), (long long)bad,
              bad >= 0 ? got[bad] : 0, bad >= 0 ? round_dtype(t, want[bad]) : 0);
}

/* ==== data and index helpers ==================================================================== */

static uint64_t rng_state = 12345;
static double frand(double lo, double hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1p-53;
}

/* buffer of n elements of t filled from doubles in [lo, hi) (ints: rounded) */
static void *make_data(gr_dtype t, int64_t n, double lo, double hi, double *vals) {
    void *b = malloc((size_t)(n ? n : 1) * gr_dtype_size(t));
    for (int64_t i = 0; i < n; i++) {
        double v = frand(lo, hi);
        if (!gr_dtype_is_float(t)) v = floor(v);
        if (t == GR_BOOL) v = v > 0;
        gr_store_f64(b, t, i, v);
        vals[i] = gr_load_f64(b, t, i);
    }
    return b;
}

static int64_t numel(int nd, const int64_t *d) { return gr_shape_numel(nd, d); }

static void unravel(int64_t i, int nd, const int64_t *d, int64_t *c) {
    for (int k = nd - 1; k >= 0; k--) {
        c[k] = d[k] ? i % d[k] : 0;
        i = d[k] ? i / d[k] : 0;
    }
}

/* linear index into a (right-aligned, broadcast) tensor of dims sd from output coords c */
static int64_t bindex(const int64_t *c, int nd, int snd, const int64_t *sd) {
    int64_t idx = 0;
    for (int k = 0; k < snd; k++) {
        int64_t ck = c[k + nd - snd];
        idx = idx * sd[k] + (sd[k] == 1 ? 0 : ck);
    }
    return idx;
}


/* ==== elementwise ================================================================================ */

static double ref_unary(gr_op op, double x) {
    switch (op) {
    case GR_OP_NEG: return -x;
    case GR_OP_ABS: return fabs(x);
    case GR_OP_EXP: return exp(x);
    case GR_OP_LOG: return log(x);
    case GR_OP_SQRT: return sqrt(x);
    case GR_OP_RSQRT: return 1.0 / sqrt(x);
    case GR_OP_RECIPROCAL: return 1.0 / x;
    case GR_OP_TANH: return tanh(x);
    case GR_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case GR_OP_ERF: return erf(x);
    case GR_OP_RELU: return x > 0 ? x : 0;
    case GR_OP_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case GR_OP_SELU: return 1.05070102214813232421875 * (x > 0 ? x : 1.67326319217681884765625 * (exp(x) - 1.0));
    case GR_OP_SILU: return x / (1.0 + exp(-x));
    case GR_OP_SIN: return sin(x);
    case GR_OP_COS: return cos(x);
    case GR_OP_ISNAN: return isnan(x) ? 1 : 0;
    case GR_OP_NOT: return x == 0;
    default: return NAN;
    }
}

static double ref_binary(gr_op op, double a, double b, bool is_int) {
    switch (op) {
    case GR_OP_ADD: return a + b;
    case GR_OP_SUB: return a - b;
    case GR_OP_MUL: return a * b;
    case GR_OP_DIV: return is_int ? (double)((int64_t)a / (int64_t)b) : a / b;
    case GR_OP_POW:
        if (is_int) {
            double r = 1;
            for (int i = 0; i < (int)b; i++) r *= a;
            return r;
        }
        return pow(a, b);
    case GR_OP_MIN: return (isnan(a) || isnan(b)) ? NAN : a < b ? a : b;
    case GR_OP_MAX: return (isnan(a) || isnan(b)) ? NAN : a > b ? a : b;
    case GR_OP_EQUAL: return a == b;
    case GR_OP_LESS: return a < b;
    case GR_OP_LESS_EQUAL: return a <= b;
    case GR_OP_GREATER: return a > b;
    case GR_OP_GREATER_EQUAL: return a >= b;
    case GR_OP_AND: return a != 0 && b != 0;
    case GR_OP_OR: return a != 0 || b != 0;
    default: return NAN;
    }
}

/* out = op(a, b) with a: ad, b: bd broadcast to od; checks every element */
static void check_binary(gr_op op, gr_dtype t, int na, const int64_t *ad, int nb, const int64_t *bd, int no,
                         const int64_t *od, double alo, double ahi, double blo, double bhi) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t n_a = numel(na, ad), n_b = numel(nb, bd), n_o = numel(no, od);
    double *av = malloc(sizeof(double) * (size_t)(n_a + 1)), *bv = malloc(sizeof(double) * (size_t)(n_b + 1));
    void *adata = make_data(t, n_a, alo, ahi, av), *bdata = make_data(t, n_b, blo, bhi, bv);
    int a = t_input(g, "a", t, na, ad, adata), b = t_input(g, "b", t, nb, bd, bdata);
    bool cmp = gr_op_get(op)->kind == GR_OPK_COMPARE;
    gr_dtype ot = cmp ? GR_BOOL : t;
    int y = t_node(g, op, 2, (int[]){a, b}, 0, NULL, ot, no, od);
    gr_ir_add_output(g, y);
    double *want = malloc(sizeof(double) * (size_t)(n_o + 1));
    int64_t c[GR_MAX_DIMS];
    for (int64_t i = 0; i < n_o; i++) {
        unravel(i, no, od, c);
        want[i] = ref_binary(op, av[bindex(c, no, na, ad)], bv[bindex(c, no, nb, bd)], !gr_dtype_is_float(t));
    }
    int nk = -1;
    double *got = run_value(g, y, false, &nk);
    char what[96];
    snprintf(what, sizeof what, "%s %s", gr_op_get(op)->name, gr_dtype_name(t));
    compare(what, got, want, n_o, ot, tol_of(ot));
    CHECK_MSG(nk == (n_o ? 1 : 0), "%s: %d kernels", what, nk);
    free(got), free(want), free(av), free(bv), free(adata), free(bdata);
    gr_ir_graph_destroy(g);
}

static void check_unary(gr_op op, gr_dtype t, int nd, const int64_t *d, double lo, double hi, int n_attr,
                        const gr_ir_attr *attrs, double (*ref)(double)) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t n = numel(nd, d);
    double *xv = malloc(sizeof(double) * (size_t)(n + 1));
    void *xd = make_data(t, n, lo, hi, xv);
    if (op == GR_OP_ISNAN && n > 2) gr_store_f64(xd, t, 1, NAN), xv[1] = NAN;
    int x = t_input(g, "x", t, nd, d, xd);
    gr_dtype ot = (op == GR_OP_ISNAN) ? GR_BOOL : t;
    int y = t_node(g, op, 1, &x, n_attr, attrs, ot, nd, d);
    gr_ir_add_output(g, y);
    double *want = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) want[i] = ref ? ref(xv[i]) : ref_unary(op, xv[i]);
    double *got = run_value(g, y, false, NULL);
    char what[96];
    snprintf(what, sizeof what, "%s", gr_op_get(op)->name);
    compare(what, got, want, n, ot, tol_of(ot) * 2);
    free(got), free(want), free(xv), free(xd);
    gr_ir_graph_destroy(g);
}

static double gelu_tanh_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double selu_custom_ref(double x) { return 2.0 * (x > 0 ? x : 0.5 * (exp(x) - 1.0)); }

static void test_elementwise(void) {
    static const gr_dtype all[] = {GR_F32, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32, GR_I8, GR_U8};
    static const gr_op arith[] = {GR_OP_ADD, GR_OP_SUB, GR_OP_MUL, GR_OP_DIV, GR_OP_POW, GR_OP_MIN, GR_OP_MAX};
    for (int ti = 0; ti < GR_ARRAY_LEN(all); ti++) {
        gr_dtype t = all[ti];
        bool fl = gr_dtype_is_float(t);
        for (int oi = 0; oi < GR_ARRAY_LEN(arith); oi++) {
            gr_op op = arith[oi];
            double alo = fl ? -3 : (t == GR_U8 ? 0 : -6), ahi = fl ? 3 : 7, blo = fl ? 0.5 : 1, bhi = fl ? 2 : 5;
            if (op == GR_OP_POW) alo = fl ? 0.5 : (t == GR_U8 ? 0 : -3), ahi = fl ? 2 : 4, blo = fl ? -2 : 0, bhi = fl ? 2 : 4;
            check_binary(op, t, 3, DIMS(2, 3, 4), 2, DIMS(3, 1), 3, DIMS(2, 3, 4), alo, ahi, blo, bhi);
        }
        for (gr_op op = GR_OP_EQUAL; op <= GR_OP_GREATER_EQUAL; op++)
            check_binary(op, t, 2, DIMS(1, 5), 2, DIMS(4, 1), 2, DIMS(4, 5), 0, 3, 0, 3);
    }
    /* broadcasting shapes: size-1 dims on both sides, scalars, rank-0, zero-size */
    check_binary(GR_OP_ADD, GR_F32, 3, DIMS(4, 1, 3), 2, DIMS(5, 1), 3, DIMS(4, 5, 3), -1, 1, -1, 1);
    check_binary(GR_OP_MUL, GR_F32, 0, DIMS(0), 2, DIMS(2, 3), 2, DIMS(2, 3), -1, 1, -1, 1);
    check_binary(GR_OP_SUB, GR_F32, 0, DIMS(0), 0, DIMS(0), 0, DIMS(0), -1, 1, -1, 1);
    check_binary(GR_OP_ADD, GR_F32, 2, DIMS(0, 3), 1, DIMS(3), 2, DIMS(0, 3), -1, 1, -1, 1);
    check_binary(GR_OP_ADD, GR_F32, 3, DIMS(2, 0, 1), 1, DIMS(4), 3, DIMS(2, 0, 4), -1, 1, -1, 1);
    check_binary(GR_OP_AND, GR_BOOL, 2, DIMS(2, 3), 1, DIMS(3), 2, DIMS(2, 3), -1, 1, -1, 1);
    check_binary(GR_OP_OR, GR_BOOL, 2, DIMS(2, 1), 2, DIMS(1, 3), 2, DIMS(2, 3), -1, 1, -1, 1);

    static const gr_dtype fls[] = {GR_F32, GR_F16, GR_BF16, GR_F64};
    for (int ti = 0; ti < 4; ti++)
        for (gr_op op = GR_OP_NEG; op <= GR_OP_ISNAN; op++) {
            bool pos = op == GR_OP_LOG || op == GR_OP_SQRT || op == GR_OP_RSQRT || op == GR_OP_RECIPROCAL;
            check_unary(op, fls[ti], 2, DIMS(3, 7), pos ? 0.1 : -3, 3, 0, NULL, NULL);
        }
    static const gr_dtype ints[] = {GR_I64, GR_I32, GR_I8};
    for (int ti = 0; ti < 3; ti++) {
        check_unary(GR_OP_NEG, ints[ti], 1, DIMS(9), -50, 50, 0, NULL, NULL);
        check_unary(GR_OP_ABS, ints[ti], 1, DIMS(9), -50, 50, 0, NULL, NULL);
        check_unary(GR_OP_RELU, ints[ti], 1, DIMS(9), -50, 50, 0, NULL, NULL);
    }
    check_unary(GR_OP_NOT, GR_BOOL, 2, DIMS(2, 5), -1, 1, 0, NULL, NULL);
    gr_ir_attr tanh_attr = A_STR("approximate", "tanh");
    check_unary(GR_OP_GELU, GR_F32, 1, DIMS(11), -4, 4, 1, &tanh_attr, gelu_tanh_ref);
    gr_ir_attr selu_attrs[2] = {A_FLOAT("alpha", 0.5), A_FLOAT("gamma", 2.0)};
    check_unary(GR_OP_SELU, GR_F32, 1, DIMS(11), -4, 4, 2, selu_attrs, selu_custom_ref);
    check_unary(GR_OP_EXP, GR_F32, 0, DIMS(0), -1, 1, 0, NULL, NULL);

    /* where with three-way broadcasting */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        double cv[8], av[12], bv[6];
        void *cd = make_data(GR_BOOL, 8, -1, 1, cv), *ad = make_data(GR_F32, 12, -5, 5, av), *bd = make_data(GR_F32, 6, -5, 5, bv);
        int c = t_input(g, "c", GR_BOOL, 3, DIMS(2, 1, 4), cd), a = t_input(g, "a", GR_F32, 2, DIMS(3, 4), ad);
        int b = t_input(g, "b", GR_F32, 3, DIMS(2, 3, 1), bd);
        int y = t_node(g, GR_OP_WHERE, 3, (int[]){c, a, b}, 0, NULL, GR_F32, 3, DIMS(2, 3, 4));
        double want[24];
        int64_t co[3];
        for (int i = 0; i < 24; i++) {
            unravel(i, 3, DIMS(2, 3, 4), co);
            want[i] = cv[bindex(co, 3, 3, DIMS(2, 1, 4))] ? av[bindex(co, 3, 2, DIMS(3, 4))] : bv[bindex(co, 3, 3, DIMS(2, 3, 1))];
        }
        double *got = run_value(g, y, false, NULL);
        compare("where", got, want, 24, GR_F32, 0);
        free(got), free(cd), free(ad), free(bd);
        gr_ir_graph_destroy(g);
    }
    /* cast between every pair of dtypes */
    static const gr_dtype every[] = {GR_F32, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32, GR_I8, GR_U8, GR_BOOL};
    for (int s = 0; s < GR_ARRAY_LEN(every); s++)
        for (int d = 0; d < GR_ARRAY_LEN(every); d++) {
            gr_graph *g;
            CHECK_OK(gr_ir_graph_create(&g));
            double xv[10];
            gr_dtype st = every[s], dt = every[d];
            void *xd = make_data(st, 10, st == GR_U8 ? 0 : -100, 100, xv);
            int x = t_input(g, "x", st, 1, DIMS(10), xd);
            int y = t_node(g, GR_OP_CAST, 1, &x, 1, (gr_ir_attr[]){A_STR("to", gr_dtype_name(dt))}, dt, 1, DIMS(10));
            double want[10];
            for (int i = 0; i < 10; i++) {
                double v = xv[i];
                if (dt == GR_BOOL) v = v != 0;
                else if (!gr_dtype_is_float(dt)) v = trunc(v);
                if (dt == GR_U8 || dt == GR_I8) v = round_dtype(dt, v);
                if ((dt == GR_F16 || dt == GR_BF16) && st == GR_F64) v = (float)v;
                want[i] = v;
            }
            double *got = run_value(g, y, false, NULL);
            char what[64];
            snprintf(what, sizeof what, "cast %s->%s", gr_dtype_name(st), gr_dtype_name(dt));
            compare(what, got, want, 10, dt, 0);
            free(got), free(xd);
            gr_ir_graph_destroy(g);
        }
}

/* A 1-element @host input becomes a host scalar param; 1-element constants become CONST nodes. */
static void test_host_scalar_and_consts(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    double xv[12];
    void *xd = make_data(GR_F32, 12, -3, 3, xv);
    float temp = 0.25f;
    int x = t_input(g, "x", GR_F32, 2, DIMS(3, 4), xd);
    int tv = t_input(g, "temperature", GR_F32, 0, DIMS(0), &temp);
    g->values.data[tv].placement = GR_PLACE_HOST;
    float two = 2.0f;
    int c = t_const(g, GR_F32, 1, DIMS(1), &two);
    int q = t_node(g, GR_OP_DIV, 2, (int[]){x, tv}, 0, NULL, GR_F32, 2, DIMS(3, 4));
    int y = t_node(g, GR_OP_ADD, 2, (int[]){q, c}, 0, NULL, GR_F32, 2, DIMS(3, 4));
    gr_ir_add_output(g, y);
    gr_step_list steps;
    CHECK_OK(gr_pass_lower(g, &steps));
    bool host_arg = false, const_buf = false;
    for (int i = 0; i < steps.len; i++)
        for (int a = 0; a < steps.data[i].n_args; a++) {
            const gr_step_arg *ar = &steps.data[i].args[a];
            if (ar->kind == GR_ARG_HOST_SCALAR && ar->value == tv &&
                steps.data[i].kernel->params[a].kind == GR_KP_SCALAR_F)
                host_arg = true;
            if (ar->kind == GR_ARG_VALUE && ar->value == c) const_buf = true;
        }
    CHECK(host_arg);
    CHECK(!const_buf);
    gr_step_list_free(&steps);
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = (double)(float)(xv[i] / 0.25) + 2.0;
    double *got = run_value(g, y, false, NULL);
    compare("host scalar", got, want, 12, GR_F32, tol_of(GR_F32));
    free(got);
    int nk = 0;
    got = run_value(g, y, true, &nk);
    compare("host scalar fused", got, want, 12, GR_F32, tol_of(GR_F32));
    CHECK(nk == 1);
    free(got), free(xd);
    gr_ir_graph_destroy(g);
}


/* pow with a literal exponent 2 or 3 lowers to multiplications (what PyTorch computes, and no
 * general powf in a shape-generic kernel); other exponents, and a computed one, stay pow */
static int count_pow(const gr_step_list *l) {
    int n = 0;
    for (int i = 0; i < l->len; i++)
        if (l->data[i].kind == GR_STEP_KERNEL)
            for (int j = 0; j < l->data[i].kernel->nodes.len; j++) {
                const gr_kexpr *e = &l->data[i].kernel->nodes.data[j];
                n += e->op == GR_KX_BINARY && e->fn == GR_KB_POW;
            }
    return n;
}

static void test_pow_literal(void) {
    const float exps[] = {2.0f, 3.0f, 2.5f, -1.0f};
    for (int pass = 0; pass < 5; pass++) {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        double xv[12], ev[12];
        void *xd = make_data(GR_F32, 12, -3, 3, xv);
        void *ed = make_data(GR_F32, 12, 1, 3, ev);
        int x = t_input(g, "x", GR_F32, 2, DIMS(3, 4), xd);
        /* pass 4: an int64 literal 3, as exporters write torch.pow(x, 3) */
        int64_t three = 3;
        int e = pass < 4 ? t_const(g, GR_F32, 0, DIMS(0), (void *)&exps[pass]) : t_const(g, GR_I64, 0, DIMS(0), &three);
        int y = t_node(g, GR_OP_POW, 2, (int[]){x, e}, 0, NULL, GR_F32, 2, DIMS(3, 4));
        /* a computed exponent (an input) always stays pow */
        int ein = t_input(g, "e", GR_F32, 2, DIMS(3, 4), ed);
        int z = t_node(g, GR_OP_POW, 2, (int[]){x, ein}, 0, NULL, GR_F32, 2, DIMS(3, 4));
        gr_ir_add_output(g, y);
        gr_ir_add_output(g, z);
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(g, &steps));
        double p = pass < 4 ? exps[pass] : 3.0;
        bool mul = p == 2.0 || p == 3.0;
        CHECK(count_pow(&steps) == (mul ? 1 : 2));
        gr_step_list_free(&steps);
        double want[12];
        for (int i = 0; i < 12; i++) {
            float xf = (float)xv[i];
            want[i] = p == 2.0 ? (double)(xf * xf) : p == 3.0 ? (double)(xf * xf * xf) : (double)powf(xf, (float)p);
        }
        double *got = run_value(g, y, false, NULL);
        if (got && mul)
            for (int i = 0; i < 12; i++) CHECK(got[i] == want[i]); /* bit for bit: the same multiplications */
        else compare("pow literal", got, want, 12, GR_F32, tol_of(GR_F32));
        free(got);
        for (int i = 0; i < 12; i++) want[i] = (double)powf((float)xv[i], (float)ev[i]);
        got = run_value(g, z, true, NULL);
        compare("pow computed exponent", got, want, 12, GR_F32, tol_of(GR_F32));
        free(got), free(xd), free(ed);
        gr_ir_graph_destroy(g);
    }
}

/* ==== reductions, softmax, layer_norm ========================================================== */

static void check_reduce(gr_op op, gr_dtype t, int nd, const int64_t *d, int n_axes, const int64_t *axes, int keep) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t n = numel(nd, d);
    double *xv = malloc(sizeof(double) * (size_t)(n + 1));
    void *xd = make_data(t, n, gr_dtype_is_float(t) ? -2 : -20, gr_dtype_is_float(t) ? 2 : 20, xv);
    int x = t_input(g, "x", t, nd, d, xd);
    bool red[GR_MAX_DIMS] = {false};
    for (int i = 0; i < n_axes; i++) red[axes[i] < 0 ? axes[i] + nd : axes[i]] = true;
    if (n_axes == 0)
        for (int i = 0; i < nd; i++) red[i] = true;
    int64_t od[GR_MAX_DIMS], kd[GR_MAX_DIMS];
    int no = 0;
    for (int i = 0; i < nd; i++) {
        kd[i] = red[i] ? 1 : d[i];
        if (keep || !red[i]) od[no++] = kd[i];
    }
    gr_ir_attr attrs[2] = {A_INTS("axes", axes, n_axes), A_INT("keepdims", keep)};
    int y = t_node(g, op, 1, &x, 2, attrs, t, no, od);
    int64_t m = numel(nd, kd);
    double *acc = malloc(sizeof(double) * (size_t)(m + 1)), *cnt = calloc((size_t)(m + 1), sizeof(double));
    for (int64_t i = 0; i < m; i++) acc[i] = op == GR_OP_REDUCE_MAX ? -INFINITY : op == GR_OP_REDUCE_MIN ? INFINITY : 0;
    int64_t c[GR_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, d, c);
        int64_t o = bindex(c, nd, nd, kd);
        double v = xv[i];
        if (op == GR_OP_REDUCE_MAX) acc[o] = v > acc[o] ? v : acc[o];
        else if (op == GR_OP_REDUCE_MIN) acc[o] = v < acc[o] ? v : acc[o];
        else acc[o] += v;
        cnt[o] += 1;
    }
    if (op == GR_OP_REDUCE_MEAN)
        for (int64_t i = 0; i < m; i++) acc[i] = gr_dtype_is_float(t) ? acc[i] / cnt[i] : trunc(acc[i] / cnt[i]);
    double *got = run_value(g, y, false, NULL);
    char what[96];
    snprintf(what, sizeof what, "%s axes %d keep %d", gr_op_get(op)->name, n_axes, keep);
    compare(what, got, acc, m, t, tol_of(t) * 8);
    free(got), free(acc), free(cnt), free(xv), free(xd);
    gr_ir_graph_destroy(g);
}

static void test_reductions(void) {
    static const gr_dtype ts[] = {GR_F32, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32};
    for (int ti = 0; ti < GR_ARRAY_LEN(ts); ti++)
        for (gr_op op = GR_OP_REDUCE_SUM; op <= GR_OP_REDUCE_MIN; op++) {
            check_reduce(op, ts[ti], 3, DIMS(3, 4, 5), 1, DIMS(1), 1);
            check_reduce(op, ts[ti], 3, DIMS(3, 4, 5), 2, DIMS(0, -1), 0);
            check_reduce(op, ts[ti], 3, DIMS(3, 4, 5), 0, DIMS(0), 0);
        }
    check_reduce(GR_OP_REDUCE_SUM, GR_F32, 4, DIMS(2, 3, 4, 5), 2, DIMS(-3, 3), 1);
    check_reduce(GR_OP_REDUCE_MEAN, GR_F32, 2, DIMS(0, 4), 1, DIMS(1), 1); /* zero outer points */
    check_reduce(GR_OP_REDUCE_SUM, GR_F32, 2, DIMS(3, 0), 1, DIMS(1), 0);  /* zero-size axis: 0 */
    check_reduce(GR_OP_REDUCE_MEAN, GR_F32, 2, DIMS(3, 0), 1, DIMS(1), 0); /* NaN */
    check_reduce(GR_OP_REDUCE_MAX, GR_F32, 2, DIMS(3, 0), 1, DIMS(-1), 1); /* -inf */
    check_reduce(GR_OP_REDUCE_MIN, GR_F32, 2, DIMS(3, 0), 1, DIMS(-1), 1); /* +inf */
    check_reduce(GR_OP_REDUCE_SUM, GR_F32, 0, DIMS(0), 0, DIMS(0), 1);     /* rank 0 */
}

/* arg_max / arg_min over a long axis (passes/lower-reduce.c splits axes of 4096 points or more
 * into chunks, then combines): the index of a straightforward scan (the first extreme; the
 * last with select_last_index; a NaN is the extreme), with many ties and NaNs placed in
 * given chunks, along the last axis and along a strided leading one. want_kernels: 2 split,
 * 1 not. */
static void check_arg_long(gr_op op, gr_dtype t, int64_t len, bool last, int axis, int nan_at, int want_kernels) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    const int64_t rows = 3;
    int64_t d[2] = {axis == 1 ? rows : len, axis == 1 ? len : rows}, n = rows * len;
    double *xv = malloc(sizeof(double) * (size_t)n);
    void *xd = make_data(t, n, -3, 3, xv);
    for (int64_t i = 0; i < n; i++) { /* few distinct values: ties inside and across chunks */
        double v = floor(xv[i] * 2) / 2;
        gr_store_f64(xd, t, i, v);
        xv[i] = gr_load_f64(xd, t, i);
    }
    for (int64_t r = 0; r < rows; r++) { /* row 0: the extremes at the row's two ends; row 1: NaNs */
        int64_t first = axis == 1 ? r * len : r, step = axis == 1 ? 1 : rows;
        if (r == 0) {
            gr_store_f64(xd, t, first, op == GR_OP_ARG_MAX ? 9 : -9);
            gr_store_f64(xd, t, first + (len - 1) * step, op == GR_OP_ARG_MAX ? 9 : -9);
        } else if (r == 1 && nan_at >= 0 && gr_dtype_is_float(t)) {
            gr_store_f64(xd, t, first + (int64_t)nan_at * step, NAN);
            gr_store_f64(xd, t, first + (len - 2) * step, NAN);
        }
        for (int64_t j = 0; j < len; j++) xv[first + j * step] = gr_load_f64(xd, t, first + j * step);
    }
    int x = t_input(g, "x", t, 2, d, xd);
    gr_ir_attr attrs[3] = {A_INT("axis", axis), A_INT("keepdims", 0), A_INT("select_last_index", last)};
    int y = t_node(g, op, 1, &x, 3, attrs, GR_I64, 1, DIMS(rows));
    CHECK_OK(gr_ir_add_output(g, y));
    double want[3];
    for (int64_t r = 0; r < rows; r++) {
        int64_t best = -1;
        for (int64_t j = 0; j < len; j++) {
            double v = xv[axis == 1 ? r * len + j : j * rows + r];
            double b = best < 0 ? 0 : xv[axis == 1 ? r * len + best : best * rows + r];
            bool better = best < 0 || (isnan(v) && !isnan(b)) ||
                          (!isnan(b) && (op == GR_OP_ARG_MAX ? v > b : v < b)) || (last && (v == b || (isnan(v) && isnan(b))));
            if (better) best = j;
        }
        want[r] = (double)best;
    }
    for (int fuse = 0; fuse < 2; fuse++) {
        int kernels = 0;
        double *got = run_value(g, y, fuse, &kernels);
        char what[96];
        snprintf(what, sizeof what, "%s len %lld axis %d last %d fuse %d", gr_op_get(op)->name, (long long)len, axis, last, fuse);
        compare(what, got, want, rows, GR_I64, 0);
        CHECK_MSG(kernels == want_kernels, "%s: %d kernels, expected %d", what, kernels, want_kernels);
        free(got);
    }
    free(xv), free(xd);
    gr_ir_graph_destroy(g);
}

static void test_arg_long(void) {
    for (int op = 0; op < 2; op++)
        for (int last = 0; last < 2; last++) {
            gr_op o = op ? GR_OP_ARG_MIN : GR_OP_ARG_MAX;
            check_arg_long(o, GR_F32, 50257, last, 1, 700, 2); /* GPT-2's vocabulary: 99 chunks, the last of 81 */
            check_arg_long(o, GR_BF16, 32000, last, 1, 31999 - 600, 2);
            check_arg_long(o, GR_F32, 4096, last, 0, 3, 2);    /* strided: the axis is the leading one */
            check_arg_long(o, GR_I32, 5000, last, 1, -1, 2);
            check_arg_long(o, GR_F64, 4095, last, 1, 10, 1);   /* below the split */
        }
}

static void check_softmax(gr_dtype t, int nd, const int64_t *d, int axis) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t n = numel(nd, d);
    double *xv = malloc(sizeof(double) * (size_t)(n + 1)), *want = malloc(sizeof(double) * (size_t)(n + 1));
    void *xd = make_data(t, n, -4, 4, xv);
    int x = t_input(g, "x", t, nd, d, xd);
    int y = t_node(g, GR_OP_SOFTMAX, 1, &x, 1, (gr_ir_attr[]){A_INT("axis", axis)}, t, nd, d);
    int a = axis < 0 ? axis + nd : axis;
    int64_t stride = 1, c[GR_MAX_DIMS];
    for (int k = a + 1; k < nd; k++) stride *= d[k];
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, d, c);
        int64_t base = i - c[a] * stride;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < d[a]; j++) mx = fmax(mx, xv[base + j * stride]);
        for (int64_t j = 0; j < d[a]; j++) sum += exp(xv[base + j * stride] - mx);
        want[i] = exp(xv[i] - mx) / sum;
    }
    double *got = run_value(g, y, false, NULL);
    compare("softmax", got, want, n, t, tol_of(t) * 4);
    free(got), free(want), free(xv), free(xd);
    gr_ir_graph_destroy(g);
}

static void check_layer_norm(gr_dtype t, int nd, const int64_t *d, int axis, int ns, const int64_t *sd, bool bias) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t n = numel(nd, d), m = numel(ns, sd);
    double *xv = malloc(sizeof(double) * (size_t)(n + 1)), *want = malloc(sizeof(double) * (size_t)(n + 1));
    double *sv = malloc(sizeof(double) * (size_t)(m + 1)), *bv = malloc(sizeof(double) * (size_t)(m + 1));
    void *xd = make_data(t, n, -3, 3, xv), *sdat = make_data(t, m, 0.5, 2, sv), *bd = make_data(t, m, -1, 1, bv);
    int x = t_input(g, "x", t, nd, d, xd), s = t_input(g, "s", t, ns, sd, sdat), b = t_input(g, "b", t, ns, sd, bd);
    int y = t_node(g, GR_OP_LAYER_NORM, bias ? 3 : 2, (int[]){x, s, b}, 2,
                   (gr_ir_attr[]){A_INT("axis", axis), A_FLOAT("epsilon", 1e-3)}, t, nd, d);
    int a = axis < 0 ? axis + nd : axis;
    int64_t inner = numel(nd - a, d + a), outer = n / (inner ? inner : 1), c[GR_MAX_DIMS];
    for (int64_t o = 0; o < outer; o++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < inner; j++) mean += xv[o * inner + j];
        mean /= (double)inner;
        for (int64_t j = 0; j < inner; j++) var += (xv[o * inner + j] - mean) * (xv[o * inner + j] - mean);
        var /= (double)inner;
        for (int64_t j = 0; j < inner; j++) {
            unravel(o * inner + j, nd, d, c);
            int64_t si = bindex(c, nd, ns, sd);
            want[o * inner + j] = (xv[o * inner + j] - mean) / sqrt(var + 1e-3) * sv[si] + (bias ? bv[si] : 0);
        }
    }
    double *got = run_value(g, y, false, NULL);
    compare("layer_norm", got, want, n, t, tol_of(t) * 8);
    free(got), free(want), free(xv), free(sv), free(bv), free(xd), free(sdat), free(bd);
    gr_ir_graph_destroy(g);
}

static void test_softmax_layernorm(void) {
    static const gr_dtype fls[] = {GR_F32, GR_F16, GR_BF16, GR_F64};
    for (int ti = 0; ti < 4; ti++) {
        check_softmax(fls[ti], 3, DIMS(2, 3, 5), -1);
        check_softmax(fls[ti], 3, DIMS(2, 3, 5), 1);
        check_layer_norm(fls[ti], 3, DIMS(2, 3, 8), -1, 1, DIMS(8), true);
        check_layer_norm(fls[ti], 3, DIMS(2, 3, 8), 1, 2, DIMS(3, 8), false);
    }
    check_softmax(GR_F32, 2, DIMS(4, 6), 0);
    check_softmax(GR_F32, 2, DIMS(0, 6), -1);
    check_layer_norm(GR_F32, 3, DIMS(2, 3, 8), -2, 2, DIMS(1, 8), true); /* scale broadcast over a dim */
}

/* ==== matmul ========================================================================================= */

static void check_matmul(gr_dtype t, int na, const int64_t *ad, int nb, const int64_t *bd, int ta, int tb, double alpha,
                         int nbias, const int64_t *biasd, int no, const int64_t *od, int want_temps) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t n_a = numel(na, ad), n_b = numel(nb, bd), n_o = numel(no, od), n_bias = nbias >= 0 ? numel(nbias, biasd) : 0;
    double *av = malloc(sizeof(double) * (size_t)(n_a + 1)), *bv = malloc(sizeof(double) * (size_t)(n_b + 1));
    double *cv = malloc(sizeof(double) * (size_t)(n_bias + 1)), *want = malloc(sizeof(double) * (size_t)(n_o + 1));
    bool fl = gr_dtype_is_float(t);
    void *adat = make_data(t, n_a, fl ? -1 : -5, fl ? 1 : 5, av), *bdat = make_data(t, n_b, fl ? -1 : -5, fl ? 1 : 5, bv);
    void *cdat = make_data(t, n_bias, -1, 1, cv);
    int a = t_input(g, "a", t, na, ad, adat), b = t_input(g, "b", t, nb, bd, bdat);
    int bias = nbias >= 0 ? t_input(g, "bias", t, nbias, biasd, cdat) : -1;
    gr_ir_attr attrs[3] = {A_INT("trans_a", ta), A_INT("trans_b", tb), A_FLOAT("alpha", alpha)};
    int nvals = g->values.len + 1;
    int y = t_node(g, GR_OP_MATMUL, bias >= 0 ? 3 : 2, (int[]){a, b, bias}, 3, attrs, t, no, od);
    /* reference: promote to [batch.., M, K] / [batch.., K, N] with broadcasting by coords */
    int64_t M = na == 1 ? 1 : ta ? ad[na - 1] : ad[na - 2], K = na == 1 ? ad[0] : ta ? ad[na - 2] : ad[na - 1];
    int64_t N = nb == 1 ? 1 : tb ? bd[nb - 2] : bd[nb - 1];
    int nbo = no - (na > 1) - (nb > 1);
    int64_t c[GR_MAX_DIMS + 2], full[GR_MAX_DIMS + 2];
    for (int k = 0; k < nbo; k++) full[k] = od[k];
    full[nbo] = M, full[nbo + 1] = N;
    for (int64_t i = 0; i < n_o; i++) {
        unravel(i, nbo + 2, full, c);
        int64_t m = c[nbo], nn = c[nbo + 1];
        int64_t ab = na > 2 ? bindex(c, nbo, na - 2, ad) : 0, bb = nb > 2 ? bindex(c, nbo, nb - 2, bd) : 0;
        double s = 0;
        for (int64_t k = 0; k < K; k++) {
            double x = na == 1 ? av[k] : av[ab * M * K + (ta ? k * M + m : m * K + k)];
            double w = nb == 1 ? bv[k] : bv[bb * K * N + (tb ? nn * K + k : k * N + nn)];
            s += x * w;
        }
        s *= alpha;
        if (bias >= 0) {
            int64_t oc[GR_MAX_DIMS];
            unravel(i, no, od, oc);
            s += cv[bindex(oc, no, nbias, biasd)];
        }
        want[i] = s;
    }
    int nk = 0;
    double *got = run_value(g, y, false, &nk);
    char what[96];
    snprintf(what, sizeof what, "matmul %s na %d nb %d ta %d tb %d bias %d", gr_dtype_name(t), na, nb, ta, tb, nbias);
    compare(what, got, want, n_o, t, fl ? tol_of(t) * 16 : 0);
    CHECK_MSG(g->values.len - nvals == want_temps, "%s: %d temporaries, expected %d", what, g->values.len - nvals, want_temps);
    free(got), free(want), free(av), free(bv), free(cv), free(adat), free(bdat), free(cdat);
    gr_ir_graph_destroy(g);
}

static void test_matmul(void) {
    static const gr_dtype fls[] = {GR_F32, GR_F16, GR_BF16, GR_F64};
    for (int ti = 0; ti < 4; ti++) {
        gr_dtype t = fls[ti];
        check_matmul(t, 2, DIMS(3, 4), 2, DIMS(4, 5), 0, 0, 1.0, -1, NULL, 2, DIMS(3, 5), 0);
        check_matmul(t, 2, DIMS(4, 3), 2, DIMS(5, 4), 1, 1, 0.5, 1, DIMS(5), 2, DIMS(3, 5), 0);
        check_matmul(t, 3, DIMS(2, 3, 4), 2, DIMS(4, 5), 0, 0, 1.0, 2, DIMS(3, 5), 3, DIMS(2, 3, 5), 1);
    }
    check_matmul(GR_F32, 1, DIMS(4), 2, DIMS(4, 5), 0, 0, 1.0, -1, NULL, 1, DIMS(5), 0);
    check_matmul(GR_F32, 2, DIMS(3, 4), 1, DIMS(4), 0, 0, 1.0, 1, DIMS(3), 1, DIMS(3), 0);
    check_matmul(GR_F32, 2, DIMS(3, 4), 1, DIMS(4), 0, 0, 1.0, 0, DIMS(0), 1, DIMS(3), 1);
    check_matmul(GR_F32, 1, DIMS(4), 1, DIMS(4), 0, 0, 2.0, -1, NULL, 0, DIMS(0), 0);
    check_matmul(GR_F32, 4, DIMS(2, 1, 3, 4), 4, DIMS(1, 3, 4, 5), 0, 1 - 1, 1.0, -1, NULL, 4, DIMS(2, 3, 3, 5), 2);
    check_matmul(GR_F32, 3, DIMS(2, 3, 4), 3, DIMS(2, 5, 4), 0, 1, 1.0, 3, DIMS(2, 1, 5), 3, DIMS(2, 3, 5), 1);
    check_matmul(GR_F32, 3, DIMS(1, 3, 4), 3, DIMS(6, 4, 5), 0, 0, 1.0, 1, DIMS(5), 3, DIMS(6, 3, 5), 0);
    check_matmul(GR_F32, 2, DIMS(3, 0), 2, DIMS(0, 5), 0, 0, 1.0, 1, DIMS(5), 2, DIMS(3, 5), 0); /* K = 0 */
    check_matmul(GR_F32, 2, DIMS(0, 4), 2, DIMS(4, 5), 0, 0, 1.0, -1, NULL, 2, DIMS(0, 5), 0);  /* M = 0 */
    check_matmul(GR_I32, 3, DIMS(2, 3, 4), 2, DIMS(4, 5), 0, 1 - 1, 1.0, 1, DIMS(5), 3, DIMS(2, 3, 5), 0);
    check_matmul(GR_I64, 2, DIMS(4, 3), 2, DIMS(5, 4), 1, 1, 1.0, -1, NULL, 2, DIMS(3, 5), 0);
}


/* ==== data movement =============================================================================== */

typedef struct {
    gr_graph *g;
    double *xv;
    void *xd;
    int x;
    int64_t n;
} src_t;

static src_t make_src(gr_dtype t, int nd, const int64_t *d) {
    src_t s;
    CHECK_OK(gr_ir_graph_create(&s.g));
    s.n = numel(nd, d);
    s.xv = malloc(sizeof(double) * (size_t)(s.n + 1));
    s.xd = make_data(t, s.n, -50, 50, s.xv);
    s.x = t_input(s.g, "x", t, nd, d, s.xd);
    return s;
}

static void finish_src(src_t *s, const char *what, int y, const double *want, gr_dtype t, int want_kernels) {
    int nk = -1;
    double *got = run_value(s->g, y, false, &nk);
    compare(what, got, want, gr_ir_value_numel(&s->g->values.data[y]), t, 0);
    if (want_kernels >= 0) CHECK_MSG(nk == want_kernels, "%s: %d kernels, expected %d", what, nk, want_kernels);
    free(got), free(s->xv), free(s->xd);
    gr_ir_graph_destroy(s->g);
}

static void check_transpose(gr_dtype t, int nd, const int64_t *d, const int64_t *perm) {
    src_t s = make_src(t, nd, d);
    int64_t od[GR_MAX_DIMS], c[GR_MAX_DIMS], ic[GR_MAX_DIMS];
    for (int k = 0; k < nd; k++) od[k] = d[perm ? perm[k] : nd - 1 - k];
    gr_ir_attr pa = A_INTS("perm", perm, nd);
    int y = t_node(s.g, GR_OP_TRANSPOSE, 1, &s.x, perm ? 1 : 0, &pa, t, nd, od);
    double *want = malloc(sizeof(double) * (size_t)(s.n + 1));
    for (int64_t i = 0; i < s.n; i++) {
        unravel(i, nd, od, c);
        for (int k = 0; k < nd; k++) ic[perm ? perm[k] : nd - 1 - k] = c[k];
        want[i] = s.xv[bindex(ic, nd, nd, d)];
    }
    finish_src(&s, "transpose", y, want, t, s.n ? 1 : 0);
    free(want);
}

static void check_slice(int nd, const int64_t *d, int ns, const int64_t *starts, const int64_t *ends,
                        const int64_t *axes, const int64_t *steps, const int64_t *od) {
    src_t s = make_src(GR_F32, nd, d);
    gr_ir_attr attrs[4] = {A_INTS("starts", starts, ns), A_INTS("ends", ends, ns), A_INTS("axes", axes, ns),
                           A_INTS("steps", steps, ns)};
    int y = t_node(s.g, GR_OP_SLICE, 1, &s.x, steps ? 4 : 3, attrs, GR_F32, nd, od);
    int64_t no = numel(nd, od), c[GR_MAX_DIMS];
    double *want = malloc(sizeof(double) * (size_t)(no + 1));
    int64_t st[GR_MAX_DIMS] = {0}, sp[GR_MAX_DIMS];
    for (int k = 0; k < nd; k++) sp[k] = 1;
    for (int i = 0; i < ns; i++) { /* the clamping rules of ONNX Slice, written out again */
        int a = (int)(axes[i] < 0 ? axes[i] + nd : axes[i]);
        int64_t step = steps ? steps[i] : 1, b = starts[i] < 0 ? starts[i] + d[a] : starts[i];
        if (step > 0) b = b < 0 ? 0 : b > d[a] ? d[a] : b;
        else b = b < 0 ? 0 : b > d[a] - 1 ? d[a] - 1 : b;
        st[a] = b, sp[a] = step;
    }
    for (int64_t i = 0; i < no; i++) {
        unravel(i, nd, od, c);
        for (int k = 0; k < nd; k++) c[k] = st[k] + c[k] * sp[k];
        want[i] = s.xv[bindex(c, nd, nd, d)];
    }
    finish_src(&s, "slice", y, want, GR_F32, no ? 1 : 0);
    free(want);
}

static void test_movement(void) {
    static const gr_dtype ts[] = {GR_F32, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32, GR_I8, GR_U8, GR_BOOL};
    for (int ti = 0; ti < GR_ARRAY_LEN(ts); ti++) check_transpose(ts[ti], 3, DIMS(2, 3, 4), DIMS(1, 2, 0));
    check_transpose(GR_F32, 4, DIMS(2, 3, 4, 5), NULL);
    check_transpose(GR_F32, 3, DIMS(2, 0, 4), DIMS(2, 0, 1));
    check_slice(2, DIMS(5, 6), 2, DIMS(1, -5), DIMS(4, 100), DIMS(0, 1), NULL, DIMS(3, 5));
    check_slice(2, DIMS(5, 6), 2, DIMS(-1, 5), DIMS(-100, 0), DIMS(0, -1), DIMS(-2, -2), DIMS(3, 3));
    check_slice(3, DIMS(4, 5, 6), 1, DIMS(0), DIMS(6), DIMS(-1), DIMS(4), DIMS(4, 5, 2));
    check_slice(2, DIMS(5, 6), 1, DIMS(4), DIMS(2), DIMS(1), DIMS(1), DIMS(5, 0));
    check_slice(2, DIMS(5, 6), 1, DIMS(INT64_MAX), DIMS(INT64_MIN), DIMS(0), DIMS(-1), DIMS(5, 6));

    /* expand: bidirectional broadcast */
    {
        src_t s = make_src(GR_I32, 2, DIMS(3, 1));
        int y = t_node(s.g, GR_OP_EXPAND, 1, &s.x, 1, (gr_ir_attr[]){A_INTS("shape", DIMS(2, 1, 4), 3)}, GR_I32, 3, DIMS(2, 3, 4));
        double want[24];
        int64_t c[3];
        for (int i = 0; i < 24; i++) unravel(i, 3, DIMS(2, 3, 4), c), want[i] = s.xv[c[1]];
        finish_src(&s, "expand", y, want, GR_I32, 1);
    }
    /* reshape / squeeze / unsqueeze / identity are views */
    {
        src_t s = make_src(GR_F32, 3, DIMS(2, 1, 6));
        int r = t_node(s.g, GR_OP_RESHAPE, 1, &s.x, 1, (gr_ir_attr[]){A_INTS("shape", DIMS(3, -1), 2)}, GR_F32, 2, DIMS(3, 4));
        int q = t_node(s.g, GR_OP_UNSQUEEZE, 1, &r, 1, (gr_ir_attr[]){A_INTS("axes", DIMS(0), 1)}, GR_F32, 3, DIMS(1, 3, 4));
        int sq = t_node(s.g, GR_OP_SQUEEZE, 1, &q, 0, NULL, GR_F32, 2, DIMS(3, 4));
        int id = t_node(s.g, GR_OP_IDENTITY, 1, &sq, 0, NULL, GR_F32, 2, DIMS(3, 4));
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(s.g, &steps));
        CHECK(steps.len == 4 && count_kind(&steps, GR_STEP_ALIAS) == 4);
        gr_step_list_free(&steps);
        finish_src(&s, "views", id, s.xv, GR_F32, 0);
    }
    /* concat along a middle axis, with a zero-size input and a negative axis */
    {
        src_t s = make_src(GR_F16, 3, DIMS(2, 3, 2));
        double bv[8];
        void *bd = make_data(GR_F16, 8, -5, 5, bv);
        int b2 = t_input(s.g, "b2", GR_F16, 3, DIMS(2, 2, 2), bd);
        int e = t_input(s.g, "e", GR_F16, 3, DIMS(2, 0, 2), NULL);
        int y = t_node(s.g, GR_OP_CONCAT, 3, (int[]){s.x, e, b2}, 1, (gr_ir_attr[]){A_INT("axis", -2)}, GR_F16, 3, DIMS(2, 5, 2));
        double want[20];
        int64_t c[3];
        for (int i = 0; i < 20; i++) {
            unravel(i, 3, DIMS(2, 5, 2), c);
            want[i] = c[1] < 3 ? s.xv[(c[0] * 3 + c[1]) * 2 + c[2]] : bv[(c[0] * 2 + c[1] - 3) * 2 + c[2]];
        }
        finish_src(&s, "concat", y, want, GR_F16, 2);
        free(bd);
    }
    /* split: a view on a leading boundary, copy kernels otherwise */
    for (int axis = 0; axis < 2; axis++) {
        src_t s = make_src(GR_F32, 2, DIMS(4, 6));
        int64_t od[2][GR_MAX_DIMS] = {{axis ? 4 : 1, axis ? 2 : 6}, {axis ? 4 : 3, axis ? 4 : 6}};
        int outs[2];
        t_node_multi(s.g, GR_OP_SPLIT, 1, &s.x, 2, (gr_ir_attr[]){A_INT("axis", axis), A_INTS("split", DIMS(axis ? 2 : 1, axis ? 4 : 3), 2)},
                     2, GR_F32, 2, od, outs);
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(s.g, &steps));
        CHECK(count_kind(&steps, axis ? GR_STEP_KERNEL : GR_STEP_ALIAS) == 2);
        gr_step_list_free(&steps);
        double want[24];
        int64_t c[2];
        for (int i = 0; i < numel(2, od[1]); i++) {
            unravel(i, 2, od[1], c);
            want[i] = axis ? s.xv[c[0] * 6 + 2 + c[1]] : s.xv[(1 + c[0]) * 6 + c[1]];
        }
        finish_src(&s, "split", outs[1], want, GR_F32, axis ? 2 : 0);
    }
    /* trilu, both triangles, k offsets, batched */
    for (int upper = 0; upper < 2; upper++)
        for (int k = -1; k <= 2; k += 3) {
            src_t s = make_src(GR_I64, 3, DIMS(2, 3, 4));
            int y = t_node(s.g, GR_OP_TRILU, 1, &s.x, 2, (gr_ir_attr[]){A_INT("upper", upper), A_INT("k", k)}, GR_I64, 3, DIMS(2, 3, 4));
            double want[24];
            int64_t c[3];
            for (int i = 0; i < 24; i++) {
                unravel(i, 3, DIMS(2, 3, 4), c);
                bool keep = upper ? c[2] - c[1] >= k : c[2] - c[1] <= k;
                want[i] = keep ? s.xv[i] : 0;
            }
            finish_src(&s, "trilu", y, want, GR_I64, 1);
        }
}

/* ==== gather / gather_elements ============================================================== */

static void check_gather(gr_dtype it, int nd, const int64_t *d, int ni, const int64_t *id, int axis) {
    src_t s = make_src(GR_F32, nd, d);
    int a = axis < 0 ? axis + nd : axis;
    int64_t nidx = numel(ni, id);
    void *idat = malloc((size_t)(nidx + 1) * 8);
    int64_t *iv = malloc(sizeof(int64_t) * (size_t)(nidx + 1));
    for (int64_t i = 0; i < nidx; i++) {
        iv[i] = (int64_t)floor(frand(-(double)d[a], (double)d[a])); /* negative indices too */
        gr_store_i64(idat, it, i, iv[i]);
    }
    int idx = t_input(s.g, "idx", it, ni, id, idat);
    int64_t od[GR_MAX_DIMS];
    int no = 0;
    for (int k = 0; k < a; k++) od[no++] = d[k];
    for (int k = 0; k < ni; k++) od[no++] = id[k];
    for (int k = a + 1; k < nd; k++) od[no++] = d[k];
    int y = t_node(s.g, GR_OP_GATHER, 2, (int[]){s.x, idx}, 1, (gr_ir_attr[]){A_INT("axis", axis)}, GR_F32, no, od);
    int64_t n_o = numel(no, od), c[GR_MAX_DIMS], dc[GR_MAX_DIMS];
    double *want = malloc(sizeof(double) * (size_t)(n_o + 1));
    for (int64_t i = 0; i < n_o; i++) {
        unravel(i, no, od, c);
        int64_t ii = 0;
        for (int k = 0; k < ni; k++) ii = ii * id[k] + c[a + k];
        for (int k = 0; k < nd; k++) dc[k] = k < a ? c[k] : k == a ? (iv[ii] < 0 ? iv[ii] + d[a] : iv[ii]) : c[k + ni - 1];
        want[i] = s.xv[bindex(dc, nd, nd, d)];
    }
    finish_src(&s, "gather", y, want, GR_F32, n_o ? 1 : 0);
    free(want), free(idat), free(iv);
}

/* cache_write(cache, new * 2, kv; axis, delta) of a cache [2, 3, 7, 4] along `axis`, not in place:
 * a copy of the cache, the producer of new and the scatter kernel over new's points (fusion
 * moves the producer into the scatter kernel's load: 2 kernels, the same values); kv = 0 with
 * delta -1 writes the last position (a negative position wraps); past the end is an error
 * naming the node. */
static void check_cache_write(int axis, int64_t new_len, int64_t kv_value, int64_t delta, const char *want_err) {
    int64_t d[4] = {2, 3, 7, 4}, nd_[4] = {2, 3, 7, 4};
    nd_[axis] = new_len;
    src_t s = make_src(GR_F32, 4, d);
    int64_t nn = numel(4, nd_);
    double *nvv = malloc(sizeof(double) * (size_t)nn);
    void *nvd = make_data(GR_F32, nn, -5, 5, nvv);
    int nw = t_input(s.g, "new", GR_F32, 4, nd_, nvd);
    int64_t kvv = kv_value;
    int kv = t_input(s.g, "kv", GR_I64, 1, DIMS(1), &kvv);
    int two = t_const(s.g, GR_F32, 0, NULL, (float[]){2});
    int nw2 = t_node(s.g, GR_OP_MUL, 2, (int[]){nw, two}, 0, NULL, GR_F32, 4, nd_);
    gr_ir_attr at[2] = {A_INT("axis", axis), A_INT("delta", delta)};
    int y = t_node(s.g, GR_OP_CACHE_WRITE, 3, (int[]){s.x, nw2, kv}, 2, at, GR_F32, 4, d);
    CHECK_OK(gr_ir_add_output(s.g, y));
    char what[96];
    snprintf(what, sizeof what, "cache_write axis %d new_len %lld kv %lld delta %lld", axis, (long long)new_len, (long long)kv_value,
             (long long)delta);
    if (want_err) {
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(s.g, &steps));
        exec_t e;
        CHECK_ERR(exec_run(&e, s.g, &steps), GR_ERR_INVALID, want_err);
        CHECK_MSG(gr_error_node() == s.g->values.data[y].producer, "%s: the error names node %d", what, gr_error_node());
        exec_free(&e);
        gr_step_list_free(&steps);
    } else {
        double *want = malloc(sizeof(double) * (size_t)s.n);
        int64_t c[GR_MAX_DIMS], pos0 = kv_value + delta;
        if (pos0 < 0) pos0 += d[axis];
        for (int64_t i = 0; i < s.n; i++) {
            unravel(i, 4, d, c);
            int64_t j = c[axis] - pos0;
            want[i] = s.xv[i];
            if (j >= 0 && j < new_len) {
                c[axis] = j;
                want[i] = 2 * nvv[bindex(c, 4, 4, nd_)];
            }
        }
        for (int fuse = 0; fuse < 2; fuse++) {
            int nk = -1;
            double *got = run_value(s.g, y, fuse, &nk);
            compare(what, got, want, s.n, GR_F32, 0);
            CHECK_MSG(nk == 3 - fuse, "%s (fuse %d): %d kernels, expected %d (copy, new, scatter)", what, fuse, nk, 3 - fuse);
            free(got);
        }
        free(want);
    }
    free(nvv), free(nvd), free(s.xv), free(s.xd);
    gr_ir_graph_destroy(s.g);
}

/* In place (the decode rewrite's form: y written into the cache input's placeholder), the lowering
 * writes only new's points (one scatter kernel, no copy), and a producer of new that reads the
 * cache is not fused into the scatter kernel (its threads would read positions others write). */
static void test_cache_write_in_place(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int64_t d[4] = {2, 3, 7, 4}, nd_[4] = {2, 3, 1, 4};
    float *xd = calloc(2 * 3 * 7 * 4, sizeof(float)), *nd = calloc(24, sizeof(float));
    int64_t kvv = 3;
    int x = t_input(g, "cache", GR_F32, 4, d, xd), nw = t_input(g, "new", GR_F32, 4, nd_, nd), kv = t_input(g, "kv", GR_I64, 1, DIMS(1), &kvv);
    int64_t starts[1] = {2}, ends[1] = {3}, axes[1] = {2};
    gr_ir_attr sa[3] = {A_INTS("starts", starts, 1), A_INTS("ends", ends, 1), A_INTS("axes", axes, 1)};
    for (int reads_cache = 0; reads_cache < 2; reads_cache++) {
        int src = reads_cache ? t_node(g, GR_OP_SLICE, 1, &x, 3, sa, GR_F32, 4, nd_) : nw;
        int nw2 = t_node(g, GR_OP_EXP, 1, &src, 0, NULL, GR_F32, 4, nd_);
        gr_ir_attr at[2] = {A_INT("axis", 2), A_INT("delta", -1)};
        int y = t_node(g, GR_OP_CACHE_WRITE, 3, (int[]){x, nw2, kv}, 2, at, GR_F32, 4, d);
        g->values.data[y].inplace_of = x + 1;
        CHECK_OK(gr_ir_add_output(g, y));
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(g, &steps));
        CHECK_OK(gr_pass_fuse(g, &steps));
        int kernels = 0, scatters = 0;
        for (int i = 0; i < steps.len; i++) {
            const gr_step *s = &steps.data[i];
            if (s->kind != GR_STEP_KERNEL || !s->kernel) continue;
            kernels++;
            if (!gr_kernel_scatters(s->kernel)) continue;
            scatters++;
            CHECK_MSG(gr_kernel_points(s->kernel) == 24, "in place: the scatter walks %lld points, new has 24",
                      (long long)gr_kernel_points(s->kernel));
            for (int a = 0; a < s->n_args; a++)
                CHECK_MSG(!(s->args[a].kind == GR_ARG_VALUE && s->args[a].value == x), "the scatter kernel reads the cache it writes");
        }
        /* this round's kernels: exp (+ the slice's copy when not a view) fused into the scatter, or not */
        CHECK_MSG(scatters == 1 + reads_cache, "in place: %d scatter kernels", scatters);
        CHECK_MSG(reads_cache ? kernels >= 3 : kernels == 1, "in place (producer reads the cache: %d): %d kernels", reads_cache, kernels);
        gr_step_list_free(&steps);
    }
    free(xd), free(nd);
    gr_ir_graph_destroy(g);
}

static void test_gather(void) {
    test_cache_write_in_place();
    check_cache_write(2, 1, 5, -1, NULL);
    check_cache_write(2, 1, 0, -1, NULL); /* position -1: the last */
    check_cache_write(2, 3, 2, 1, NULL);  /* three positions from 3 */
    check_cache_write(1, 1, 2, 0, NULL);
    check_cache_write(3, 2, 2, 0, NULL);
    check_cache_write(2, 1, 8, -1, "scatter index 7 out of range [-7, 7)");
    check_cache_write(2, 2, 6, 0, "scatter index 7 out of range");
    check_gather(GR_I64, 2, DIMS(5, 3), 1, DIMS(4), 0);
    check_gather(GR_I32, 3, DIMS(2, 5, 3), 2, DIMS(2, 3), 1);
    check_gather(GR_I64, 3, DIMS(2, 5, 3), 0, DIMS(0), -1);
    check_gather(GR_I32, 2, DIMS(5, 3), 2, DIMS(0, 2), 0);
    /* gather_elements along each axis */
    for (int axis = -2; axis < 2; axis++) {
        src_t s = make_src(GR_F32, 2, DIMS(3, 4));
        int a = axis < 0 ? axis + 2 : axis;
        int64_t id[2] = {a == 0 ? 5 : 3, a == 1 ? 6 : 4}, iv[30];
        int32_t idat[30];
        for (int i = 0; i < id[0] * id[1]; i++) iv[i] = (int64_t)floor(frand(-3, 3)), idat[i] = (int32_t)iv[i];
        int idx = t_input(s.g, "idx", GR_I32, 2, id, idat);
        int y = t_node(s.g, GR_OP_GATHER_ELEMENTS, 2, (int[]){s.x, idx}, 1, (gr_ir_attr[]){A_INT("axis", axis)}, GR_F32, 2, id);
        double want[30];
        for (int i = 0; i < id[0] * id[1]; i++) {
            int64_t r = i / id[1], c = i % id[1], j = iv[i] < 0 ? iv[i] + (a ? 4 : 3) : iv[i];
            want[i] = a == 0 ? s.xv[j * 4 + c] : s.xv[r * 4 + j];
        }
        finish_src(&s, "gather_elements", y, want, GR_F32, 1);
    }
    /* an out-of-range index is a run-time error of the interpreter, not a wild read */
    {
        src_t s = make_src(GR_F32, 1, DIMS(3));
        int64_t bad[1] = {3};
        int idx = t_input(s.g, "idx", GR_I64, 1, DIMS(1), bad);
        int y = t_node(s.g, GR_OP_GATHER, 2, (int[]){s.x, idx}, 0, NULL, GR_F32, 1, DIMS(1));
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(s.g, &steps));
        exec_t e;
        CHECK(exec_run(&e, s.g, &steps) == GR_ERR_INVALID);
        exec_free(&e);
        gr_step_list_free(&steps);
        (void)y;
        free(s.xv), free(s.xd);
        gr_ir_graph_destroy(s.g);
    }
}

/* ==== generators ============================================================================ */

static uint64_t splitmix_ref(uint64_t seed, uint64_t ctr) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + ctr;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void test_generators(void) {
    static const gr_dtype ts[] = {GR_F32, GR_F16, GR_F64, GR_I32, GR_I64, GR_U8, GR_BOOL};
    for (int ti = 0; ti < GR_ARRAY_LEN(ts); ti++) {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        gr_dtype t = ts[ti];
        int y = t_node(g, GR_OP_FILL, 0, NULL, 2, (gr_ir_attr[]){A_INTS("shape", DIMS(2, 3), 2), A_FLOAT("value", 3.75)}, t, 2, DIMS(2, 3));
        double want[6];
        for (int i = 0; i < 6; i++) want[i] = t == GR_BOOL ? 1 : gr_dtype_is_float(t) ? 3.75 : 3;
        double *got = run_value(g, y, false, NULL);
        compare("fill", got, want, 6, t, 0);
        free(got);
        /* range */
        bool fl = gr_dtype_is_float(t) && t != GR_F16;
        if (t != GR_BOOL && t != GR_U8) {
            double st = fl ? 1.5 : 10, de = fl ? -0.25 : -3, lim = fl ? -0.5 : -2;
            int64_t len = (int64_t)ceil((lim - st) / de);
            int r = t_node(g, GR_OP_RANGE, 0, NULL, 3, (gr_ir_attr[]){A_FLOAT("start", st), A_FLOAT("limit", lim), A_FLOAT("delta", de)}, t, 1, &len);
            double rw[16];
            for (int i = 0; i < len; i++) rw[i] = st + i * de;
            got = run_value(g, r, false, NULL);
            compare("range", got, rw, len, t, 0);
            free(got);
        }
        gr_ir_graph_destroy(g);
    }
    /* random: the documented formula, recomputed from the splitmix64 spec of kir.h */
    static const gr_dtype rts[] = {GR_F32, GR_F64, GR_F16};
    for (int ti = 0; ti < 3; ti++) {
        gr_dtype t = rts[ti];
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int u = t_node(g, GR_OP_RANDOM_UNIFORM, 0, NULL, 4, (gr_ir_attr[]){A_INTS("shape", DIMS(3, 5), 2), A_INT("seed", 7), A_FLOAT("low", -2), A_FLOAT("high", 3)}, t, 2, DIMS(3, 5));
        int nrm = t_node(g, GR_OP_RANDOM_NORMAL, 0, NULL, 4, (gr_ir_attr[]){A_INTS("shape", DIMS(3, 5), 2), A_INT("seed", 9), A_FLOAT("mean", 1), A_FLOAT("std", 2)}, t, 2, DIMS(3, 5));
        double wu[15], wn[15];
        for (int i = 0; i < 15; i++) {
            double uu = t == GR_F64 ? (double)(splitmix_ref(7, (uint64_t)i) >> 11) * 0x1p-53
                                    : (double)(splitmix_ref(7, (uint64_t)i) >> 40) * 0x1p-24;
            wu[i] = -2 + 5 * uu;
            double u1 = (double)(splitmix_ref(9, 2 * (uint64_t)i) >> 11) * 0x1p-53;
            double u2 = (double)(splitmix_ref(9, 2 * (uint64_t)i + 1) >> 11) * 0x1p-53;
            wn[i] = 1 + 2 * (sqrt(-2 * log(1 - u1)) * cos(2 * M_PI * u2));
        }
        double *got = run_value(g, u, false, NULL);
        compare("random_uniform", got, wu, 15, t, t == GR_F64 ? 1e-15 : 0);
        free(got);
        got = run_value(g, nrm, false, NULL);
        compare("random_normal", got, wn, 15, t, t == GR_F64 ? 1e-14 : 0);
        free(got);
        gr_ir_graph_destroy(g);
    }
}


/* ==== fusion ================================================================================= */

/* Runs g unfused and fused; value y must match exactly; returns kernel counts. */
static void check_fused(const char *what, gr_graph *g, int y, int want_unfused, int want_fused) {
    int nu = -1, nf = -1;
    double *a = run_value(g, y, false, &nu), *b = run_value(g, y, true, &nf);
    int64_t n = gr_ir_value_numel(&g->values.data[y]);
    if (a && b) {
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (memcmp(&a[i], &b[i], sizeof(double)) != 0) bad = i;
        CHECK_MSG(bad < 0, "%s: fused element %lld is %.17g, unfused %.17g", what, (long long)bad, bad >= 0 ? b[bad] : 0,
                  bad >= 0 ? a[bad] : 0);
    }
    CHECK_MSG(nu == want_unfused && nf == want_fused, "%s: %d kernels unfused (want %d), %d fused (want %d)", what, nu,
              want_unfused, nf, want_fused);
    free(a), free(b);
}

static int cst(gr_graph *g, float v) { return t_const(g, GR_F32, 0, DIMS(0), &v); }

static void test_fusion(void) {
    /* EOS-style: 24 rounds of y = (y*a + b)*y + x*c over one input */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        enum { N = 4096 };
        double xv[N];
        void *xd = make_data(GR_F32, N, -1, 1, xv);
        int x = t_input(g, "x", GR_F32, 1, DIMS(N), xd), y = x;
        float ref[N];
        for (int i = 0; i < N; i++) ref[i] = (float)xv[i];
        for (int r = 0; r < 24; r++) {
            float a = 0.5f + 0.01f * (float)r, b = 0.1f, c = 0.3f;
            int t1 = t_node(g, GR_OP_MUL, 2, (int[]){y, cst(g, a)}, 0, NULL, GR_F32, 1, DIMS(N));
            int t2 = t_node(g, GR_OP_ADD, 2, (int[]){t1, cst(g, b)}, 0, NULL, GR_F32, 1, DIMS(N));
            int t3 = t_node(g, GR_OP_MUL, 2, (int[]){t2, y}, 0, NULL, GR_F32, 1, DIMS(N));
            int t4 = t_node(g, GR_OP_MUL, 2, (int[]){x, cst(g, c)}, 0, NULL, GR_F32, 1, DIMS(N));
            y = t_node(g, GR_OP_ADD, 2, (int[]){t3, t4}, 0, NULL, GR_F32, 1, DIMS(N));
            for (int i = 0; i < N; i++) ref[i] = (ref[i] * a + b) * ref[i] + (float)xv[i] * c;
        }
        gr_ir_add_output(g, y);
        check_fused("eos chain", g, y, 24 * 5, 1);
        double want[N];
        for (int i = 0; i < N; i++) want[i] = ref[i];
        double *got = run_value(g, y, true, NULL);
        compare("eos chain value", got, want, N, GR_F32, 0);
        free(got), free(xd);
        gr_ir_graph_destroy(g);
    }
    /* bias add + selu */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        double xv[128], bv[16];
        void *xd = make_data(GR_F32, 128, -3, 3, xv), *bd = make_data(GR_F32, 16, -1, 1, bv);
        int x = t_input(g, "x", GR_F32, 2, DIMS(8, 16), xd), b = t_const(g, GR_F32, 1, DIMS(16), bd);
        int t = t_node(g, GR_OP_ADD, 2, (int[]){x, b}, 0, NULL, GR_F32, 2, DIMS(8, 16));
        int y = t_node(g, GR_OP_SELU, 1, &t, 0, NULL, GR_F32, 2, DIMS(8, 16));
        gr_ir_add_output(g, y);
        check_fused("bias+selu", g, y, 2, 1);
        free(xd), free(bd);
        gr_ir_graph_destroy(g);
    }
    /* elementwise producers into reduction, softmax, layer_norm and a transpose */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        double xv[60], rv[60];
        void *xd = make_data(GR_F16, 60, -2, 2, xv), *rd = make_data(GR_F16, 60, -2, 2, rv);
        uint16_t one[20];
        for (int i = 0; i < 20; i++) one[i] = gr_f32_to_half(1.0f + 0.1f * (float)i);
        int x = t_input(g, "x", GR_F16, 3, DIMS(3, 4, 5), xd), r = t_input(g, "r", GR_F16, 3, DIMS(3, 4, 5), rd);
        int sc = t_const(g, GR_F16, 2, DIMS(4, 5), one);
        int e = t_node(g, GR_OP_EXP, 1, &x, 0, NULL, GR_F16, 3, DIMS(3, 4, 5));
        int s1 = t_node(g, GR_OP_REDUCE_SUM, 1, &e, 2, (gr_ir_attr[]){A_INTS("axes", DIMS(0, 2), 2), A_INT("keepdims", 0)}, GR_F16, 1, DIMS(4));
        int m = t_node(g, GR_OP_MUL, 2, (int[]){x, r}, 0, NULL, GR_F16, 3, DIMS(3, 4, 5));
        int sm = t_node(g, GR_OP_SOFTMAX, 1, &m, 1, (gr_ir_attr[]){A_INT("axis", 1)}, GR_F16, 3, DIMS(3, 4, 5));
        int a = t_node(g, GR_OP_ADD, 2, (int[]){x, r}, 0, NULL, GR_F16, 3, DIMS(3, 4, 5));
        int ln = t_node(g, GR_OP_LAYER_NORM, 2, (int[]){a, sc}, 1, (gr_ir_attr[]){A_INT("axis", 1)}, GR_F16, 3, DIMS(3, 4, 5));
        int sb = t_node(g, GR_OP_SUB, 2, (int[]){x, r}, 0, NULL, GR_F16, 3, DIMS(3, 4, 5));
        int tr = t_node(g, GR_OP_TRANSPOSE, 1, &sb, 1, (gr_ir_attr[]){A_INTS("perm", DIMS(2, 0, 1), 3)}, GR_F16, 3, DIMS(5, 3, 4));
        int outs[4] = {s1, sm, ln, tr};
        for (int i = 0; i < 4; i++) gr_ir_add_output(g, outs[i]);
        const char *names[4] = {"exp->reduce_sum", "mul->softmax", "add->layer_norm", "sub->transpose"};
        for (int i = 0; i < 4; i++) check_fused(names[i], g, outs[i], 8, 4);
        free(xd), free(rd);
        gr_ir_graph_destroy(g);
    }
    /* narrow integers keep wrapping exactly as when the intermediate was stored */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        double xv[32];
        void *xd = make_data(GR_I8, 32, -100, 100, xv);
        int x = t_input(g, "x", GR_I8, 1, DIMS(32), xd);
        int t = t_node(g, GR_OP_MUL, 2, (int[]){x, x}, 0, NULL, GR_I8, 1, DIMS(32));
        int y = t_node(g, GR_OP_ADD, 2, (int[]){t, x}, 0, NULL, GR_I8, 1, DIMS(32));
        gr_ir_add_output(g, y);
        check_fused("i8 wrap", g, y, 2, 1);
        double want[32];
        for (int i = 0; i < 32; i++) want[i] = (double)(int8_t)(uint8_t)((int64_t)(int8_t)(uint8_t)(int64_t)(xv[i] * xv[i]) + (int64_t)xv[i]);
        double *got = run_value(g, y, true, NULL);
        compare("i8 wrap value", got, want, 32, GR_I8, 0);
        free(got), free(xd);
        gr_ir_graph_destroy(g);
    }
    /* no fusion: intermediate is a graph output / is read broadcast; two readers: recomputed */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        double xv[12], vv[4];
        void *xd = make_data(GR_F32, 12, -1, 1, xv), *vd = make_data(GR_F32, 4, -1, 1, vv);
        int x = t_input(g, "x", GR_F32, 2, DIMS(3, 4), xd), v = t_input(g, "v", GR_F32, 1, DIMS(4), vd);
        int t = t_node(g, GR_OP_EXP, 1, &x, 0, NULL, GR_F32, 2, DIMS(3, 4));
        int y = t_node(g, GR_OP_NEG, 1, &t, 0, NULL, GR_F32, 2, DIMS(3, 4));
        gr_ir_add_output(g, t);
        gr_ir_add_output(g, y);
        check_fused("output intermediate", g, y, 2, 2);
        int u = t_node(g, GR_OP_ABS, 1, &x, 0, NULL, GR_F32, 2, DIMS(3, 4));
        int y1 = t_node(g, GR_OP_SIN, 1, &u, 0, NULL, GR_F32, 2, DIMS(3, 4));
        int y2 = t_node(g, GR_OP_COS, 1, &u, 0, NULL, GR_F32, 2, DIMS(3, 4));
        gr_ir_add_output(g, y1);
        gr_ir_add_output(g, y2);
        /* u = abs(x) has two readers: cheap, so it is recomputed in both (fuse.c) */
        check_fused("two readers", g, y2, 5, 4);
        int w = t_node(g, GR_OP_EXP, 1, &v, 0, NULL, GR_F32, 1, DIMS(4));
        int z = t_node(g, GR_OP_ADD, 2, (int[]){x, w}, 0, NULL, GR_F32, 2, DIMS(3, 4));
        (void)z; /* same shape as x but w is read with a broadcast (stride 0) dim */
        int w2 = t_node(g, GR_OP_EXP, 1, &v, 0, NULL, GR_F32, 1, DIMS(4));
        int z2 = t_node(g, GR_OP_ADD, 2, (int[]){w2, x}, 0, NULL, GR_F32, 2, DIMS(3, 4));
        gr_ir_add_output(g, z2);
        /* w2 stays separate; w and z (no reader, not an output) are dead code */
        check_fused("broadcast read", g, z2, 9, 6);
        free(xd), free(vd);
        gr_ir_graph_destroy(g);
    }
}

/* ==== errors and allocation failures ============================================================= */

static void test_errors_and_oom(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    float one = 1;
    int c = t_input(g, "c", GR_BOOL, 0, DIMS(0), NULL);
    int x = t_const(g, GR_F32, 0, DIMS(0), &one);
    int node = -1;
    CHECK_OK(gr_ir_add_node(g, GR_OP_IF, "branchy", 2, (int[]){c, x}, 1, NULL, 0, NULL, &node));
    set_type(g, g->nodes.data[node].out[0], GR_F32, 0, DIMS(0));
    gr_step_list steps;
    CHECK_ERR(gr_pass_lower(g, &steps), GR_ERR_INVALID, "branchy"); /* an if without its subgraphs (passes/cond.c) */
    CHECK(steps.len == 0 && steps.data == NULL);
    gr_ir_graph_destroy(g);

    /* untyped value: a clear error naming the node */
    CHECK_OK(gr_ir_graph_create(&g));
    x = t_input(g, "x", GR_F32, 1, DIMS(4), NULL);
    CHECK_OK(gr_ir_add_node(g, GR_OP_EXP, "untyped", 1, &x, 1, NULL, 0, NULL, &node));
    CHECK_ERR(gr_pass_lower(g, &steps), GR_ERR_SHAPE, "untyped");
    gr_ir_graph_destroy(g);

    /* every allocation failure during lowering + fusion returns an error and leaks nothing */
    CHECK_OK(gr_ir_graph_create(&g));
    double xv[24];
    void *xd = make_data(GR_F32, 24, -1, 1, xv);
    x = t_input(g, "x", GR_F32, 2, DIMS(4, 6), xd);
    int a = t_node(g, GR_OP_EXP, 1, &x, 0, NULL, GR_F32, 2, DIMS(4, 6));
    int b = t_node(g, GR_OP_SOFTMAX, 1, &a, 0, NULL, GR_F32, 2, DIMS(4, 6));
    int m = t_node(g, GR_OP_MATMUL, 2, (int[]){b, x}, 1, (gr_ir_attr[]){A_INT("trans_b", 1)}, GR_F32, 2, DIMS(4, 4));
    int outs[2];
    int64_t sd[2][GR_MAX_DIMS] = {{2, 4}, {2, 4}};
    t_node_multi(g, GR_OP_SPLIT, 1, &m, 0, NULL, 2, GR_F32, 2, sd, outs);
    int tr = t_node(g, GR_OP_TRANSPOSE, 1, &outs[1], 0, NULL, GR_F32, 2, DIMS(4, 2));
    gr_ir_add_output(g, tr);
    int failures = 0, successes = 0;
    for (long n = 1; n < 200 && !successes; n++) {
        long live = gr_debug_live_allocs();
        gr_graph *cl;
        CHECK_OK(gr_ir_graph_clone(g, &cl));
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_pass_lower(cl, &steps);
        if (st == GR_OK) {
            st = gr_pass_fuse(cl, &steps);
            gr_step_list_free(&steps);
        }
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) successes++;
        else failures++;
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "allocation failure %ld gave %s", n, gr_status_name(st));
        /* lowering may add temporaries to the graph; the graph owns them */
        gr_ir_graph_destroy(cl);
        CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks %ld allocations", n,
                  gr_debug_live_allocs() - live);
    }
    gr_ir_graph_destroy(g);
    CHECK(successes == 1 && failures > 3);
    free(xd);
}

int main(void) {
    test_elementwise();
    test_host_scalar_and_consts();
    test_pow_literal();
    test_reductions();
    test_arg_long();
    test_softmax_layernorm();
    test_matmul();
    test_movement();
    test_gather();
    test_generators();
    test_fusion();
    test_errors_and_oom();
    return check_summary("test_lower");
}
