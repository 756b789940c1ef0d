/* tests/test_interp — kernel IR building, verification and the reference interpreter,
 * plus the matmul reference, against hand-computed or naive C references. */
#include <math.h>
#ifdef __clang__
/* one rounding per operation, as specified (gcc does not contract in ISO C mode) */
#pragma STDC FP_CONTRACT OFF
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "codegen/kir.h"

#define OK(expr) CHECK_OK(expr)

static gr_kernel *new_kernel(const char *name, int n_outer, const int64_t *outer, int n_inner, const int64_t *inner) {
    gr_kernel *k = NULL;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    k->n_outer = n_outer;
    for (int d = 0; d < n_outer; d++) k->outer[d] = outer[d];
    k->n_inner = n_inner;
    for (int d = 0; d < n_inner; d++) k->inner[d] = inner[d];
    return k;
}

static void add_store(gr_kernel *k, int param, int value, const gr_kaccess *acc, bool over_inner) {
    gr_kstage s;
    memset(&s, 0, sizeof(s));
    s.kind = GR_KS_STORE;
    s.value = value;
    s.param = param;
    s.over_inner = over_inner;
    if (acc) s.access = *acc;
    else gr_kaccess_init(&s.access);
    k->params[param].written = true;
    CHECK_OK(gr_kernel_add_stage(k, &s));
}

static void add_reduce(gr_kernel *k, gr_kreduce fn, int value) {
    gr_kstage s;
    memset(&s, 0, sizeof(s));
    s.kind = GR_KS_REDUCE;
    s.reduce = fn;
    s.value = value;
    gr_kaccess_init(&s.access);
    CHECK_OK(gr_kernel_add_stage(k, &s));
}

static gr_kaccess acc2(int64_t off, int64_t s0, int64_t s1) {
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.offset = off;
    a.stride[0] = s0;
    a.stride[1] = s1;
    return a;
}

/* ---- check callback recording ranges ---- */
typedef struct {
    int calls;
    int64_t lo[8], hi[8];
    bool write[8];
    int fail_param;
} range_log;

static gr_status log_check(void *user, int param, const void *base, int64_t lo, int64_t hi, bool write) {
    range_log *r = user;
    if (param < 8) {
        r->lo[param] = lo;
        r->hi[param] = hi;
        r->write[param] = write;
    }
    r->calls++;
    if (param == r->fail_param) return gr_error(GR_ERR_HAZARD, "test: refused param %d", param);
    return GR_OK;
}

/* out[i,j] = a[i,j] + b[j] * s   (b broadcast along rows), f32 */
static void test_elementwise_broadcast(void) {
    int64_t outer[2] = {3, 5};
    gr_kernel *k = new_kernel("ew_bcast", 2, outer, 0, NULL);
    int pa, pb, ps, po, na, nb, ns, nm, nsum;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "a", &pa));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "b", &pb));
    OK(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F32, "s", &ps));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "out", &po));
    gr_kaccess aa = acc2(0, 5, 1), ab = acc2(0, 0, 1), ao = acc2(0, 5, 1);
    OK(gr_kx_load(k, pa, &aa, &na));
    OK(gr_kx_load(k, pb, &ab, &nb));
    OK(gr_kx_param(k, ps, &ns));
    OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, nb, ns, &nm));
    OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, na, nm, &nsum));
    add_store(k, po, nsum, &ao, false);
    OK(gr_kernel_verify(k));
    float a[15], b[5], out[15], ref[15];
    for (int i = 0; i < 15; i++) a[i] = 0.1f * (float)i - 0.7f;
    for (int j = 0; j < 5; j++) b[j] = 1.0f / (float)(j + 3);
    double s = 0.3; /* rounded to f32 as a f32 scalar */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) ref[i * 5 + j] = a[i * 5 + j] + b[j] * (float)s;
    gr_karg args[4];
    args[pa].ptr = a;
    args[pb].ptr = b;
    args[ps].f = s;
    args[po].ptr = out;
    range_log log = {.fail_param = -1};
    OK(gr_kernel_interpret(k, args, 4, log_check, &log));
    for (int i = 0; i < 15; i++) CHECK_MSG(out[i] == ref[i], "elem %d: %a want %a", i, out[i], ref[i]);
    CHECK(log.calls == 3);
    CHECK(log.lo[pa] == 0 && log.hi[pa] == 60 && !log.write[pa]);
    CHECK(log.lo[pb] == 0 && log.hi[pb] == 20);
    CHECK(log.lo[po] == 0 && log.hi[po] == 60 && log.write[po]);
    int64_t lo, hi;
    gr_kernel_param_range(k, pb, &lo, &hi);
    CHECK(lo == 0 && hi == 20);
    gr_kernel_param_range(k, ps, &lo, &hi);
    CHECK(lo == hi);
    /* a refusing check aborts the launch with its status, before anything runs */
    memset(out, 0, sizeof(out));
    log.fail_param = pb;
    CHECK_ERR(gr_kernel_interpret(k, args, 4, log_check, &log), GR_ERR_HAZARD, "refused param 1");
    CHECK(out[0] == 0.0f);
    /* too few args */
    CHECK_ERR(gr_kernel_interpret(k, args, 3, NULL, NULL), GR_ERR_INVALID, "ew_bcast");
    /* print and hash */
    gr_strbuf sb;
    gr_sb_init(&sb);
    OK(gr_kernel_print(k, &sb));
    char *text = gr_sb_take(&sb);
    CHECK(text && strstr(text, "kernel ew_bcast") && strstr(text, "load $1[0 + 1*o1]") && strstr(text, "add %0, %3"));
    gr_strfree(text);
    gr_kernel *c = NULL;
    OK(gr_kernel_clone(k, &c));
    CHECK(c && gr_kernel_hash(c) == gr_kernel_hash(k));
    snprintf(c->name, sizeof(c->name), "other_name");
    CHECK(gr_kernel_hash(c) == gr_kernel_hash(k));
    c->nodes.data[1].access.stride[1] = 2;
    CHECK(gr_kernel_hash(c) != gr_kernel_hash(k));
    c->nodes.data[1].access.stride[1] = 1;
    c->params[0].dtype = GR_F16;
    CHECK(gr_kernel_hash(c) != gr_kernel_hash(k));
    gr_kernel_destroy(c);
    gr_kernel_destroy(k);
}

/* transposed load out[i,j] = a[j,i] - a[2*i + 1 + 6*j'] style strided load, with a negative stride */
static void test_strided_loads(void) {
    int64_t outer[2] = {3, 4};
    gr_kernel *k = new_kernel("transpose", 2, outer, 0, NULL);
    int pa, po, n0, n1, n2;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "a", &pa));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "out", &po));
    gr_kaccess t = acc2(0, 1, 3);        /* a is 4x3: a[j][i] */
    gr_kaccess rev = acc2(11, -1, -3);   /* a reversed: a[11 - i - 3j] */
    OK(gr_kx_load(k, pa, &t, &n0));
    OK(gr_kx_load(k, pa, &rev, &n1));
    OK(gr_kx_binary(k, GR_KB_SUB, GR_F64, n0, n1, &n2));
    gr_kaccess ao = acc2(0, 4, 1);
    add_store(k, po, n2, &ao, false);
    double a[12], out[12];
    for (int i = 0; i < 12; i++) a[i] = i * i;
    gr_karg args[2] = {{.ptr = a}, {.ptr = out}};
    range_log log = {.fail_param = -1};
    OK(gr_kernel_interpret(k, args, 2, log_check, &log));
    bool ok = true;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) ok &= out[i * 4 + j] == a[j * 3 + i] - a[11 - i - 3 * j];
    CHECK(ok);
    CHECK(log.lo[pa] == 0 && log.hi[pa] == 96);
    gr_kernel_destroy(k);
}

/* out[i, j] = table[wrap(idx[i]), j] with negative indices; then an out-of-range index */
static void test_gather(void) {
    int64_t outer[2] = {4, 3};
    gr_kernel *k = new_kernel("gather_rows", 2, outer, 0, NULL);
    int pt, pi, po, nidx, nval;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "table", &pt));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "idx", &pi));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "out", &po));
    gr_kaccess ai = acc2(0, 1, 0);
    OK(gr_kx_load(k, pi, &ai, &nidx));
    gr_kaccess at = acc2(0, 0, 1);
    at.index = nidx;
    at.index_stride = 3;
    at.index_extent = 5;
    OK(gr_kx_load(k, pt, &at, &nval));
    gr_kaccess ao = acc2(0, 3, 1);
    add_store(k, po, nval, &ao, false);
    OK(gr_kernel_verify(k));
    float table[15], out[12];
    for (int i = 0; i < 15; i++) table[i] = (float)(100 + i);
    int64_t idx[4] = {0, -1, 2, -5};
    gr_karg args[3] = {{.ptr = table}, {.ptr = idx}, {.ptr = out}};
    range_log log = {.fail_param = -1};
    OK(gr_kernel_interpret(k, args, 3, log_check, &log));
    int64_t want_rows[4] = {0, 4, 2, 0};
    bool ok = true;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) ok &= out[i * 3 + j] == table[want_rows[i] * 3 + j];
    CHECK(ok);
    CHECK(log.lo[pt] == 0 && log.hi[pt] == 60);
    idx[2] = 5;
    CHECK_ERR(gr_kernel_interpret(k, args, 3, NULL, NULL), GR_ERR_INVALID, "gather_rows: gather index 5");
    idx[2] = -6;
    CHECK_ERR(gr_kernel_interpret(k, args, 3, NULL, NULL), GR_ERR_INVALID, "gather index -6");
    gr_kernel_destroy(k);
}

/* A scatter store (the KV-cache append): cache[b, pos, :] = new[b, :] for each of 2 rows, pos =
 * kv[0] - 1 read from a buffer; the rest of the cache untouched; the written range is the
 * index's whole extent; an out-of-range position is an error naming the access's origin node
 * (a negative one wraps, as a gather's); the verifier's rules for the index. */
static void test_scatter(void) {
    int64_t outer[2] = {2, 3};
    gr_kernel *k = new_kernel("append", 2, outer, 0, NULL);
    int pn, pk, pc, nv, nk, m1, pos;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "new", &pn));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "kv", &pk));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "cache", &pc));
    gr_kaccess an = acc2(0, 3, 1), ak = acc2(0, 0, 0);
    OK(gr_kx_load(k, pn, &an, &nv));
    OK(gr_kx_load(k, pk, &ak, &nk));
    OK(gr_kx_const_i(k, GR_I64, -1, &m1));
    OK(gr_kx_binary(k, GR_KB_ADD, GR_I64, nk, m1, &pos));
    gr_kaccess ac = acc2(0, 15, 1); /* cache [2, 5, 3] */
    ac.index = pos;
    ac.index_stride = 3;
    ac.index_extent = 5;
    ac.origin = 42;
    add_store(k, pc, nv, &ac, false);
    OK(gr_kernel_verify(k));
    CHECK(gr_kernel_scatters(k));
    gr_strbuf sb;
    gr_sb_init(&sb);
    OK(gr_kernel_print(k, &sb));
    CHECK_MSG(sb.data && strstr(sb.data, "store $2[0 + 15*o0 + 1*o1 + wrap(%3, 5)*3]"), "scatter store printed as:\n%s", sb.data ? sb.data : "");
    gr_sb_free(&sb);
    float nw[6] = {1, 2, 3, 4, 5, 6}, cache[30];
    for (int i = 0; i < 30; i++) cache[i] = (float)(-1 - i);
    int64_t kv[1] = {3};
    gr_karg args[3] = {{.ptr = nw}, {.ptr = kv}, {.ptr = cache}};
    range_log log = {.fail_param = -1};
    OK(gr_kernel_interpret(k, args, 3, log_check, &log));
    bool ok = true;
    for (int b = 0; b < 2; b++)
        for (int p = 0; p < 5; p++)
            for (int d = 0; d < 3; d++) {
                float want = p == 2 ? nw[b * 3 + d] : (float)(-1 - (b * 15 + p * 3 + d));
                ok &= cache[b * 15 + p * 3 + d] == want;
            }
    CHECK_MSG(ok, "the scatter wrote other positions than kv - 1");
    CHECK(log.write[pc] && log.lo[pc] == 0 && log.hi[pc] == 30 * 4);
    kv[0] = 0; /* position -1: the last one */
    OK(gr_kernel_interpret(k, args, 3, NULL, NULL));
    CHECK(cache[12] == 1 && cache[29] == 6);
    kv[0] = 6; /* position 5: past the cache */
    CHECK_ERR(gr_kernel_interpret(k, args, 3, NULL, NULL), GR_ERR_INVALID, "append: scatter index 5 out of range [-5, 5)");
    CHECK(gr_error_node() == 42);
    kv[0] = -5;
    CHECK_ERR(gr_kernel_interpret(k, args, 3, NULL, NULL), GR_ERR_INVALID, "scatter index -6");
    /* verify: the index must be an existing integer node, the extent positive, and without
     * over_inner it must not depend on an inner index */
    k->stages[0].access.index = k->nodes.len;
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "is not earlier");
    k->stages[0].access.index = -2;
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "bad index node");
    k->stages[0].access.index = nv; /* a float node */
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "not an integer");
    k->stages[0].access.index = pos;
    k->stages[0].access.index_extent = 0;
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "index_extent 0 must be positive");
    k->stages[0].access.index_extent = 5;
    OK(gr_kernel_verify(k));
    gr_kernel_destroy(k);
    int64_t inner[1] = {3};
    k = new_kernel("append_rows", 1, outer, 1, inner);
    int nr;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "cache", &pc));
    OK(gr_kx_index(k, GR_KIDX_INNER, &nr));
    OK(gr_kx_const_f(k, GR_F32, 1, &nv));
    gr_kaccess ar = acc2(0, 0, 0);
    ar.index = nr;
    ar.index_stride = 1;
    ar.index_extent = 3;
    add_store(k, pc, nv, &ar, false);
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "scatter index that depends on an inner loop index");
    k->stages[0].over_inner = true;
    OK(gr_kernel_verify(k));
    gr_kernel_destroy(k);
}

/* softmax over rows: max, sum of exp, then store — three stages, f32 */
static void test_softmax(void) {
    enum { R = 4, C = 300 }; /* C > lanes: the inner space spans several blocks */
    int64_t outer[1] = {R}, inner[1] = {C};
    gr_kernel *k = new_kernel("softmax", 1, outer, 1, inner);
    int px, po, nx, nmax, nsub, nexp, nsum, ndiv;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &px));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &po));
    gr_kaccess ax;
    gr_kaccess_init(&ax);
    ax.stride[0] = C;
    ax.inner_stride[0] = 1;
    OK(gr_kx_load(k, px, &ax, &nx));
    add_reduce(k, GR_KR_MAX, nx);
    OK(gr_kx_acc(k, 0, GR_F32, &nmax));
    OK(gr_kx_binary(k, GR_KB_SUB, GR_F32, nx, nmax, &nsub));
    OK(gr_kx_unary(k, GR_KU_EXP, GR_F32, nsub, &nexp));
    add_reduce(k, GR_KR_SUM, nexp);
    OK(gr_kx_acc(k, 1, GR_F32, &nsum));
    OK(gr_kx_binary(k, GR_KB_DIV, GR_F32, nexp, nsum, &ndiv));
    add_store(k, po, ndiv, &ax, true);
    OK(gr_kernel_verify(k));
    static float x[R * C], y[R * C], ref[R * C];
    for (int i = 0; i < R * C; i++) x[i] = sinf((float)i * 0.37f) * 5.0f;
    for (int r = 0; r < R; r++) {
        float m = -INFINITY, s = 0;
        for (int c = 0; c < C; c++) m = x[r * C + c] > m ? x[r * C + c] : m;
        for (int c = 0; c < C; c++) s += expf(x[r * C + c] - m);
        for (int c = 0; c < C; c++) ref[r * C + c] = expf(x[r * C + c] - m) / s;
    }
    gr_karg args[2] = {{.ptr = x}, {.ptr = y}};
    OK(gr_kernel_interpret(k, args, 2, NULL, NULL));
    CHECK(memcmp(y, ref, sizeof(y)) == 0);
    gr_kernel_destroy(k);
}

/* sums over 2 inner dims (i64 and f64), max with NaN, and zero-size extents */
static void test_reductions(void) {
    int64_t outer[1] = {2}, inner[2] = {3, 4};
    gr_kernel *k = new_kernel("sum2d", 1, outer, 2, inner);
    int pa, pf, po, pm, na, nf, n0, n1, n2;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I32, "a", &pa));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "f", &pf));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "sum_a", &po));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "max_f", &pm));
    gr_kaccess ain;
    gr_kaccess_init(&ain);
    ain.stride[0] = 1;        /* a is laid out [r0][r1][o] */
    ain.inner_stride[0] = 8;
    ain.inner_stride[1] = 2;
    OK(gr_kx_load(k, pa, &ain, &na));
    OK(gr_kx_cast(k, GR_I64, na, &n0));
    add_reduce(k, GR_KR_SUM, n0);
    OK(gr_kx_load(k, pf, &ain, &nf));
    add_reduce(k, GR_KR_MAX, nf);
    OK(gr_kx_acc(k, 0, GR_I64, &n1));
    OK(gr_kx_acc(k, 1, GR_F64, &n2));
    gr_kaccess ao = acc2(0, 1, 0);
    add_store(k, po, n1, &ao, false);
    add_store(k, pm, n2, &ao, false);
    OK(gr_kernel_verify(k));
    int32_t a[24];
    double f[24];
    for (int i = 0; i < 24; i++) {
        a[i] = (i * 7919) % 1000 - 500 + (i == 5 ? INT32_MAX - 1000 : 0);
        f[i] = (double)((i * 31) % 17);
    }
    f[3] = NAN; /* o = 1, r0 = 0, r1 = 1 */
    int64_t sum[2];
    double mx[2];
    gr_karg args[4] = {{.ptr = a}, {.ptr = f}, {.ptr = sum}, {.ptr = mx}};
    OK(gr_kernel_interpret(k, args, 4, NULL, NULL));
    for (int o = 0; o < 2; o++) {
        int64_t s = 0;
        double m = -INFINITY;
        bool nan = false;
        for (int r0 = 0; r0 < 3; r0++)
            for (int r1 = 0; r1 < 4; r1++) {
                int i = o + 8 * r0 + 2 * r1;
                s += a[i];
                if (isnan(f[i])) nan = true;
                else if (f[i] > m) m = f[i];
            }
        CHECK_MSG(sum[o] == s, "o=%d sum %lld want %lld", o, (long long)sum[o], (long long)s);
        if (nan) CHECK(isnan(mx[o]));
        else CHECK(mx[o] == m);
    }
    /* zero-size inner: the sum is its init, the max is -inf */
    k->inner[1] = 0;
    sum[0] = sum[1] = 77;
    OK(gr_kernel_interpret(k, args, 4, NULL, NULL));
    CHECK(sum[0] == 0 && sum[1] == 0 && isinf(mx[0]) && mx[0] < 0);
    /* zero-size outer: nothing is touched, no buffer is checked; NULL buffers are fine */
    k->inner[1] = 4;
    k->outer[0] = 0;
    sum[0] = 77;
    range_log log = {.fail_param = -1};
    gr_karg nulls[4] = {{.ptr = NULL}, {.ptr = NULL}, {.ptr = NULL}, {.ptr = NULL}};
    OK(gr_kernel_interpret(k, nulls, 4, log_check, &log));
    CHECK(log.calls == 0);
    OK(gr_kernel_interpret(k, args, 4, NULL, NULL));
    CHECK(sum[0] == 77);
    /* NULL buffer with a non-empty range is an error naming the kernel */
    k->outer[0] = 2;
    CHECK_ERR(gr_kernel_interpret(k, nulls, 4, NULL, NULL), GR_ERR_INVALID, "sum2d");
    gr_kernel_destroy(k);
}

/* loads every dtype, stores every dtype: f16/bf16 rounding, int wrap, bool */
static void test_dtypes(void) {
    /* store f64 values into each dtype through a cast-free store */
    const double vals[4] = {1.0 + 1.0 / 2048 + 1e-7, -3.7, 2147483653.0, 300.5};
    gr_dtype types[] = {GR_F32, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32, GR_I8, GR_U8, GR_BOOL};
    for (int t = 0; t < GR_ARRAY_LEN(types); t++) {
        int64_t outer[1] = {4};
        gr_kernel *k = new_kernel("store_dtype", 1, outer, 0, NULL);
        int pi, po, ni;
        OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "in", &pi));
        OK(gr_kernel_add_param(k, GR_KP_BUFFER, types[t], "out", &po));
        gr_kaccess a = acc2(0, 1, 0);
        OK(gr_kx_load(k, pi, &a, &ni));
        add_store(k, po, ni, &a, false);
        unsigned char out[48];
        memset(out, 0xAB, sizeof(out));
        gr_karg args[2] = {{.ptr = (void *)vals}, {.ptr = out}};
        OK(gr_kernel_interpret(k, args, 2, NULL, NULL));
        for (int i = 0; i < 4; i++) {
            double v = vals[i], got = gr_load_f64(out, types[t], i), want;
            switch (types[t]) {
            case GR_F32: want = (float)v; break;
            case GR_F16: want = gr_half_to_f32(gr_f32_to_half((float)v)); break;
            case GR_BF16: want = gr_bf16_to_f32(gr_f32_to_bf16((float)v)); break;
            case GR_F64: want = v; break;
            case GR_I64: want = (double)(int64_t)v; break;
            case GR_I32: want = (double)(int32_t)(uint32_t)(int64_t)v; break;
            case GR_I8: want = (double)(int8_t)(uint8_t)(int64_t)v; break;
            case GR_U8: want = (double)(uint8_t)(int64_t)v; break;
            default: want = v != 0; break;
            }
            CHECK_MSG(got == want, "dtype %s elem %d: got %.17g want %.17g", gr_dtype_name(types[t]), i, got, want);
        }
        CHECK(out[4 * gr_dtype_size(types[t])] == 0xAB); /* guard byte untouched */
        gr_kernel_destroy(k);
    }
    /* hand-checked values */
    {
        /* f16: 1 + 2^-11 + 1e-7 rounds up to 1 + 2^-10; i32 wrap of 2^31 + 5 */
        CHECK(gr_half_to_f32(gr_f32_to_half((float)vals[0])) == 1.0f + 1.0f / 1024);
        CHECK((int32_t)(uint32_t)(int64_t)vals[2] == -2147483643);
    }
    /* load every dtype and add in its own arithmetic, then store as f64 */
    for (int t = 0; t < GR_ARRAY_LEN(types); t++) {
        int64_t outer[1] = {3};
        gr_kernel *k = new_kernel("load_dtype", 1, outer, 0, NULL);
        int pi, po, ni, nc, ns;
        OK(gr_kernel_add_param(k, GR_KP_BUFFER, types[t], "in", &pi));
        OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "out", &po));
        gr_kaccess a = acc2(0, 1, 0);
        OK(gr_kx_load(k, pi, &a, &ni));
        OK(gr_kx_const_i(k, types[t], 1, &nc));
        OK(gr_kx_binary(k, GR_KB_ADD, types[t], ni, nc, &ns));
        add_store(k, po, ns, &a, false);
        unsigned char in[24];
        for (int i = 0; i < 3; i++) gr_store_f64(in, types[t], i, i == 0 ? 127.0 : i == 1 ? -1.0 : 2.5);
        double out[3];
        gr_karg args[2] = {{.ptr = in}, {.ptr = out}};
        OK(gr_kernel_interpret(k, args, 2, NULL, NULL));
        for (int i = 0; i < 3; i++) {
            double x = gr_load_f64(in, types[t], i);
            /* ints are computed in int64 and only wrapped on store (out is f64): 127 + 1 = 128 even for i8 */
            double want = types[t] == GR_BOOL ? (double)((x != 0) + 1) : x + 1;
            CHECK_MSG(out[i] == want, "load %s elem %d: got %g want %g", gr_dtype_name(types[t]), i, out[i], want);
        }
        gr_kernel_destroy(k);
    }
    /* cast to i8 wraps, cast to f16 rounds, int division truncates, f32 rounds each op */
    {
        int64_t outer[1] = {1};
        gr_kernel *k = new_kernel("casts", 1, outer, 0, NULL);
        int po, c200, c8, cneg7, c2, n1, n2, n3, n4, cf, n5, n6, n7;
        OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "out", &po));
        OK(gr_kx_const_i(k, GR_I32, 200, &c200));
        OK(gr_kx_cast(k, GR_I8, c200, &n1));          /* -56 */
        OK(gr_kx_const_i(k, GR_I32, -7, &cneg7));
        OK(gr_kx_const_i(k, GR_I32, 2, &c2));
        OK(gr_kx_binary(k, GR_KB_DIV, GR_I32, cneg7, c2, &n2)); /* -3 */
        OK(gr_kx_binary(k, GR_KB_MOD, GR_I32, cneg7, c2, &n3)); /* -1 */
        OK(gr_kx_const_f(k, GR_F32, 2049.0, &cf));
        OK(gr_kx_cast(k, GR_F16, cf, &n4));           /* 2048 (ties to even) */
        OK(gr_kx_const_f(k, GR_F64, 1e-8, &c8));
        OK(gr_kx_cast(k, GR_F32, c8, &n5));
        OK(gr_kx_const_f(k, GR_F32, 1.0, &n6));
        OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, n6, n5, &n7)); /* 1 + 1e-8 in f32 == 1 */
        gr_kaccess a[6];
        int vals_[6] = {n1, n2, n3, n4, n7, c200};
        for (int i = 0; i < 6; i++) {
            a[i] = acc2(i, 0, 0);
            add_store(k, po, vals_[i], &a[i], false);
        }
        double out[6];
        gr_karg args[1] = {{.ptr = out}};
        OK(gr_kernel_interpret(k, args, 1, NULL, NULL));
        CHECK(out[0] == -56 && out[1] == -3 && out[2] == -1 && out[3] == 2048 && out[4] == 1.0 && out[5] == 200);
        gr_kernel_destroy(k);
    }
}

static void test_random(void) {
    int64_t outer[1] = {64};
    gr_kernel *k = new_kernel("rng", 1, outer, 0, NULL);
    int po, pd, ni, nr, nr64;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "out", &po));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "out64", &pd));
    OK(gr_kx_index(k, 0, &ni));
    gr_kexpr e;
    memset(&e, 0, sizeof(e));
    e.op = GR_KX_RANDOM;
    e.dtype = GR_F32;
    e.a = ni;
    e.b = e.c = -1;
    e.i = 1;
    gr_kaccess_init(&e.access);
    OK(gr_kernel_add_expr(k, &e, &nr));
    e.dtype = GR_F64;
    OK(gr_kernel_add_expr(k, &e, &nr64));
    gr_kaccess a = acc2(0, 1, 0);
    add_store(k, po, nr, &a, false);
    add_store(k, pd, nr64, &a, false);
    float o1[64], o2[64];
    double d[64];
    gr_karg args[2] = {{.ptr = o1}, {.ptr = d}};
    OK(gr_kernel_interpret(k, args, 2, NULL, NULL));
    args[0].ptr = o2;
    OK(gr_kernel_interpret(k, args, 2, NULL, NULL));
    CHECK(memcmp(o1, o2, sizeof(o1)) == 0);
    /* splitmix64 seeded with 0: first output is 0xE220A8397B1DCDAF (seed 1, counter 0 gives
     * x = 0x9E3779B97F4A7C15, the generator's first state) */
    CHECK(d[0] == (double)(0xE220A8397B1DCDAFull >> 11) * 0x1p-53);
    CHECK(o1[0] == (float)(0xE220A8397B1DCDAFull >> 40) * 0x1p-24f);
    bool in_range = true, distinct = false;
    for (int i = 0; i < 64; i++) {
        in_range &= o1[i] >= 0 && o1[i] < 1 && d[i] >= 0 && d[i] < 1;
        if (i && o1[i] != o1[0]) distinct = true;
    }
    CHECK(in_range && distinct);
    gr_kernel_destroy(k);
}

static void test_verify_errors(void) {
    int64_t outer[1] = {4}, inner[1] = {3};
    gr_kernel *k = new_kernel("bad", 1, outer, 1, inner);
    int pb, ps, nr, n0, n1;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "b", &pb));
    OK(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F32, "s", &ps));
    OK(gr_kx_index(k, GR_KIDX_INNER, &nr));
    OK(gr_kx_cast(k, GR_F32, nr, &n0));
    OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, n0, n0, &n1));
    gr_kaccess a = acc2(0, 1, 0);
    add_store(k, pb, n1, &a, false); /* not over_inner but reads r0 */
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "depends on an inner loop index");
    CHECK_ERR(gr_kernel_interpret(k, NULL, 0, NULL, NULL), GR_ERR_INVALID, "bad");
    k->stages[0].over_inner = true;
    OK(gr_kernel_verify(k));
    k->stages[0].param = ps;
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "not a buffer");
    k->stages[0].param = pb;
    k->nodes.data[n1].b = n1; /* operand not earlier */
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "operand 1 refers to node 2");
    k->nodes.data[n1].b = n0;
    k->nodes.data[nr].which = GR_KIDX_INNER + 1; /* r1 does not exist */
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "loop index 17 does not exist");
    k->nodes.data[nr].which = 3;
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "loop index 3");
    k->nodes.data[nr].which = GR_KIDX_LINEAR;
    OK(gr_kernel_verify(k));
    int nl, na;
    OK(gr_kx_load(k, pb, &a, &nl));
    k->nodes.data[nl].param = ps; /* load from a scalar */
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "not a buffer");
    k->nodes.data[nl].param = pb;
    OK(gr_kx_acc(k, 0, GR_F32, &na)); /* stage 0 is a store */
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "not a reduce stage");
    gr_kernel_destroy(k);

    /* a reduce stage reading its own accumulator */
    k = new_kernel("self_acc", 1, outer, 1, inner);
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "b", &pb));
    int c1, nacc;
    OK(gr_kx_const_f(k, GR_F32, 1, &c1));
    add_reduce(k, GR_KR_SUM, c1);
    OK(gr_kx_acc(k, 0, GR_F32, &nacc));
    add_reduce(k, GR_KR_SUM, nacc);
    OK(gr_kernel_verify(k));
    k->stages[1].kind = GR_KS_REDUCE;
    k->nodes.data[nacc].which = 1;
    CHECK_ERR(gr_kernel_verify(k), GR_ERR_INVALID, "not earlier");
    gr_kernel_destroy(k);

    /* limits */
    OK(gr_kernel_create("many", &k));
    int p = 0;
    for (int i = 0; i < GR_KMAX_PARAMS; i++) OK(gr_kernel_add_param(k, GR_KP_SCALAR_I, GR_I64, "x", &p));
    CHECK_ERR(gr_kernel_add_param(k, GR_KP_SCALAR_I, GR_I64, "x", &p), GR_ERR_UNSUPPORTED, "many");
    gr_kernel_destroy(k);
}

/* indirect buffer param, SHAPE param bounding the launch, integer select and index math */
static void test_indirect_and_shape(void) {
    int64_t outer[2] = {100, 4};
    gr_kernel *k = new_kernel("indirect", 2, outer, 0, NULL);
    int pin, pout, pn, nl, nx, nlin, c3, nm, nz, ns;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER_INDIRECT, GR_I32, "in", &pin));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I32, "out", &pout));
    OK(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &pn));
    k->n_points_param = pn;
    gr_kaccess a = acc2(0, 4, 1);
    OK(gr_kx_load(k, pin, &a, &nx));
    OK(gr_kx_index(k, GR_KIDX_LINEAR, &nlin));
    OK(gr_kx_const_i(k, GR_I64, 3, &c3));
    OK(gr_kx_binary(k, GR_KB_MOD, GR_I64, nlin, c3, &nm));
    OK(gr_kx_const_i(k, GR_I64, 0, &nz));
    OK(gr_kx_binary(k, GR_KB_EQ, GR_BOOL, nm, nz, &nl));
    OK(gr_kx_select(k, GR_I32, nl, nx, nlin, &ns));
    add_store(k, pout, ns, &a, false);
    int32_t in[12], out[16];
    for (int i = 0; i < 12; i++) in[i] = 1000 + i;
    for (int i = 0; i < 16; i++) out[i] = -1;
    void *slot = in;
    gr_karg args[3] = {{.ptr = &slot}, {.ptr = out}, {.i = 12}};
    range_log log = {.fail_param = -1};
    OK(gr_kernel_interpret(k, args, 3, log_check, &log));
    bool ok = true;
    for (int i = 0; i < 12; i++) ok &= out[i] == (i % 3 == 0 ? 1000 + i : i);
    CHECK(ok && out[12] == -1);
    CHECK(log.calls == 3 && log.hi[pin] == 48); /* slot check, then the 12-element buffer */
    gr_kernel_destroy(k);
}

/* ---- libcall ---- */
static void naive_matmul(const gr_libcall *c, const float *A, const float *B, const float *bias, float *C) {
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++) {
                double acc = 0;
                for (int64_t p = 0; p < c->k; p++) {
                    double x = A[b * c->batch_stride_a + (c->trans_a ? p * c->lda + i : i * c->lda + p)];
                    double y = B[b * c->batch_stride_b + (c->trans_b ? j * c->ldb + p : p * c->ldb + j)];
                    acc += x * y;
                }
                acc *= c->alpha;
                if (c->bias == GR_BIAS_ROW) acc += bias[b * c->batch_stride_bias + j];
                if (c->bias == GR_BIAS_FULL) acc += bias[b * c->batch_stride_bias + i * c->ldc + j];
                if (c->epilogue == GR_EPI_RELU) acc = acc > 0 ? acc : 0;
                if (c->epilogue == GR_EPI_GELU) acc = 0.5 * acc * (1 + erf(acc / sqrt(2.0)));
                C[b * c->batch_stride_c + i * c->ldc + j] = (float)acc;
            }
}

static void test_libcall(void) {
    enum { M = 5, N = 7, K = 6, BATCH = 3 };
    static float A[BATCH * 64], B[BATCH * 64], bias[BATCH * 64], C1[BATCH * 64], C2[BATCH * 64];
    for (int i = 0; i < BATCH * 64; i++) {
        A[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
        B[i] = (float)((i * 11) % 19) / 5.0f - 1.7f;
        bias[i] = (float)(i % 13) - 6.0f;
    }
    int cases = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int bk = 0; bk < 3; bk++)
                for (int epi = 0; epi < 3; epi++) {
                    gr_libcall c;
                    memset(&c, 0, sizeof(c));
                    snprintf(c.name, sizeof(c.name), "mm");
                    c.kind = GR_LIB_MATMUL;
                    c.dtype = GR_F32;
                    c.m = M, c.n = N, c.k = K, c.batch = BATCH;
                    c.trans_a = ta, c.trans_b = tb;
                    c.lda = ta ? M + 1 : K + 2;
                    c.ldb = tb ? K : N;
                    c.ldc = N + 1;
                    c.batch_stride_a = 64;
                    c.batch_stride_b = bk == 1 ? 0 : 64; /* broadcast B */
                    c.batch_stride_c = 64;
                    c.alpha = bk == 2 ? 0.5 : 1.0;
                    c.bias = (gr_bias_kind)bk;
                    c.batch_stride_bias = bk == 1 ? 0 : 64;
                    c.epilogue = (gr_epilogue)epi;
                    memset(C1, 0, sizeof(C1));
                    memset(C2, 0, sizeof(C2));
                    gr_karg args[4] = {{.ptr = A}, {.ptr = B}, {.ptr = C1}, {.ptr = bias}};
                    OK(gr_libcall_reference(&c, args));
                    naive_matmul(&c, A, B, bias, C2);
                    CHECK_MSG(memcmp(C1, C2, sizeof(C1)) == 0, "ta %d tb %d bias %d epi %d", ta, tb, bk, epi);
                    cases++;
                }
    CHECK(cases == 36);
    /* f16: f32 accumulation, rounded on store */
    {
        uint16_t a[4], b[4], c16[4];
        float af[4] = {1, 2, 3, 4}, bf[4] = {0.5f, -1, 0.25f, 2};
        for (int i = 0; i < 4; i++) {
            a[i] = gr_f32_to_half(af[i]);
            b[i] = gr_f32_to_half(bf[i]);
        }
        gr_libcall c;
        memset(&c, 0, sizeof(c));
        c.dtype = GR_F16;
        c.m = c.n = c.k = 2;
        c.batch = 1;
        c.lda = c.ldb = c.ldc = 2;
        c.alpha = 1.0;
        gr_karg args[4] = {{.ptr = a}, {.ptr = b}, {.ptr = c16}, {.ptr = NULL}};
        OK(gr_libcall_reference(&c, args));
        /* [1 2;3 4] @ [0.5 -1; 0.25 2] = [1 3; 2.5 5] */
        CHECK(gr_half_to_f32(c16[0]) == 1.0f && gr_half_to_f32(c16[1]) == 3.0f && gr_half_to_f32(c16[2]) == 2.5f &&
              gr_half_to_f32(c16[3]) == 5.0f);
        c.lda = 1;
        CHECK_ERR(gr_libcall_reference(&c, args), GR_ERR_INVALID, "leading dimension");
        c.lda = 2;
        c.dtype = GR_I32;
        CHECK_ERR(gr_libcall_reference(&c, args), GR_ERR_UNSUPPORTED, "not supported");
    }
}

/* ~200-node DAG over 1M points: must be well under a second */
static void test_speed(void) {
    int64_t outer[1] = {1 << 20};
    gr_kernel *k = new_kernel("eos_like", 1, outer, 0, NULL);
    int pa, pb, po, na, nb;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "a", &pa));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "b", &pb));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "out", &po));
    gr_kaccess a = acc2(0, 1, 0);
    OK(gr_kx_load(k, pa, &a, &na));
    OK(gr_kx_load(k, pb, &a, &nb));
    int x = na, y = nb;
    for (int i = 0; i < 66; i++) {
        int t1, t2, t3;
        OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, x, y, &t1));
        OK(gr_kx_unary(k, i % 3 == 0 ? GR_KU_TANH : GR_KU_SIGMOID, GR_F32, t1, &t2));
        OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, t2, x, &t3));
        y = x;
        x = t3;
    }
    add_store(k, po, x, &a, false);
    float *A = malloc(sizeof(float) << 20), *B = malloc(sizeof(float) << 20), *O = malloc(sizeof(float) << 20);
    for (int i = 0; i < (1 << 20); i++) {
        A[i] = (float)(i % 1000) * 1e-3f;
        B[i] = 0.5f;
    }
    gr_karg args[3] = {{.ptr = A}, {.ptr = B}, {.ptr = O}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    OK(gr_kernel_interpret(k, args, 3, NULL, NULL));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    printf("interp: %d nodes x 1M points: %.1f ms\n", k->nodes.len, ms);
    /* spot check one element against straightforward C */
    int idx = 777;
    float xs = A[idx], ys = B[idx];
    for (int i = 0; i < 66; i++) {
        float t1f = xs * ys;
        float t2f = i % 3 == 0 ? tanhf(t1f) : 1.0f / (1.0f + expf(-t1f));
        float t3f = t2f + xs;
        ys = xs;
        xs = t3f;
    }
    CHECK(O[idx] == xs);
    free(A);
    free(B);
    free(O);
    gr_kernel_destroy(k);
}

/* allocation failures inside interpret / clone free everything */
static void test_alloc_failures(void) {
    long base = gr_debug_live_allocs();
    int64_t outer[1] = {10};
    gr_kernel *k = new_kernel("oom", 1, outer, 0, NULL);
    int po, n0;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "o", &po));
    OK(gr_kx_const_f(k, GR_F32, 2.5, &n0));
    gr_kaccess a = acc2(0, 1, 0);
    add_store(k, po, n0, &a, false);
    float o[10];
    gr_karg args[1] = {{.ptr = o}};
    int failures = 0;
    for (long n = 1; n < 50; n++) {
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_kernel_interpret(k, args, 1, NULL, NULL);
        gr_kernel *c = NULL;
        gr_status st2 = gr_kernel_clone(k, &c);
        gr_kernel_destroy(c);
        gr_debug_fail_alloc_after(0);
        if (st == GR_ERR_NOMEM || st2 == GR_ERR_NOMEM) failures++;
        else if (st == GR_OK && st2 == GR_OK) break;
    }
    CHECK(failures > 0);
    gr_kernel_destroy(k);
    CHECK(gr_debug_live_allocs() == base);
}

int main(void) {
    long live0 = gr_debug_live_allocs();
    test_elementwise_broadcast();
    test_strided_loads();
    test_gather();
    test_scatter();
    test_softmax();
    test_reductions();
    test_dtypes();
    test_random();
    test_verify_errors();
    test_indirect_and_shape();
    test_libcall();
    test_speed();
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == live0, "leaked %ld allocations", gr_debug_live_allocs() - live0);
    return check_summary("test_interp");
}
