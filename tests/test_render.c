/* test_render — kernels built by hand with the kir.h builder API, rendered to
 * CUDA C in literal and in shape-generic mode and compiled with NVRTC (loaded
 * with dlopen) for sm_90. Needs no GPU; skipped with a clear message where NVRTC
 * is not installed. Generic mode: one source per structure whatever the sizes,
 * different sources for different structures, the slot values round-trip. */
#include "check.h"
#include "codegen/kir.h"
#include "codegen/render-cuda.h"
#include "device/cuda/cuda-impl.h"
#include <stdlib.h>
#include <string.h>

static bool nvrtc_present;
static int compiled, compiled_generic;

#define OK_OR_FAIL(expr)                \
    do {                                \
        gr_status st_ = (expr);         \
        CHECK_OK(st_);                  \
        if (st_ != GR_OK) goto fail;    \
    } while (0)

static const gr_dtype all_dtypes[] = {GR_F32, GR_F16, GR_BF16, GR_F64, GR_I64, GR_I32, GR_I8, GR_U8, GR_BOOL};

/* Compiles src with NVRTC (when present); the entry point must be in the cubin's source. */
static void nvrtc_check(const char *src, const char *name, int arch, int *counter) {
    if (!nvrtc_present) return;
    void *cubin = NULL;
    size_t n = 0;
    gr_status st = gr_cuda_nvrtc_compile(src, name, arch, false, &cubin, &n);
    CHECK_MSG(st == GR_OK && n > 0, "compile %s: %s", name, gr_last_error());
    if (st != GR_OK && getenv("GRAFT_TEST_VERBOSE")) fprintf(stderr, "%s\n", src);
    if (cubin) gr_free(cubin, n);
    (*counter)++;
}

/* The generic rendering of k: every size from gr_dims (no size of k appears as a
 * literal), compiled too. */
static void render_generic(const gr_kernel *k, int arch) {
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_status st = gr_render_cuda_mode(k, GR_RENDER_GENERIC, &sb);
    CHECK_MSG(st == GR_OK, "generic render %s: %s", k->name, gr_last_error());
    if (st == GR_OK) {
        const char *dump = getenv("GRAFT_TEST_DUMP_GENERIC");
        if (dump && strstr(k->name, dump)) printf("%s\n", sb.data);
        char entry[64];
        gr_render_cuda_entry_name(k, GR_RENDER_GENERIC, entry, sizeof entry);
        CHECK_MSG(strstr(sb.data, entry) != NULL, "kernel %s: generic source lacks its entry %s", k->name, entry);
        CHECK_MSG(strstr(sb.data, k->name) == NULL, "kernel %s: generic source names the kernel", k->name);
        int n = gr_kernel_slot_count(k);
        char decl[64];
        snprintf(decl, sizeof decl, "struct gr_dims_t { long long v[%d]; };", n);
        CHECK_MSG(n > 0 && strstr(sb.data, decl) != NULL, "kernel %s: no slot struct of %d", k->name, n);
        /* no extent of k is a literal of the generic code (the prelude has its own numbers) */
        const char *body = strstr(sb.data, decl);
        for (int d = 0; body && d < k->n_outer; d++) {
            char lit[40];
            snprintf(lit, sizeof lit, "%lldLL", (long long)k->outer[d]);
            if (k->outer[d] > 1) CHECK_MSG(strstr(body, lit) == NULL, "kernel %s: extent %s in generic code", k->name, lit);
        }
        nvrtc_check(sb.data, k->name, arch, &compiled_generic);
    }
    gr_sb_free(&sb);
    /* the slot-table form (shape policy generic): the same code reading gr_dims through a pointer,
     * bounded by the point count after the slots, under its own entry name */
    gr_sb_init(&sb);
    st = gr_render_cuda_mode(k, GR_RENDER_GENERIC_TABLE, &sb);
    CHECK_MSG(st == GR_OK, "table render %s: %s", k->name, gr_last_error());
    if (st == GR_OK) {
        char entry[64], decl[96], bound[96];
        gr_render_cuda_entry_name(k, GR_RENDER_GENERIC_TABLE, entry, sizeof entry);
        int n = gr_kernel_slot_count(k);
        snprintf(decl, sizeof decl, "struct gr_dims_t { long long v[%d]; };", n + 1);
        snprintf(bound, sizeof bound, "const long long gr_n = gr_dims.v[%d];", n);
        CHECK_MSG(!strncmp(entry, "gr_t_", 5) && strstr(sb.data, entry), "kernel %s: table source lacks its entry %s", k->name, entry);
        CHECK_MSG(strstr(sb.data, decl) && strstr(sb.data, bound) && strstr(sb.data, "const gr_dims_t* __restrict__ gr_dimp") &&
                      strstr(sb.data, "const gr_dims_t& gr_dims = *gr_dimp;"),
                  "kernel %s: table form", k->name);
        CHECK_MSG(strstr(sb.data, k->name) == NULL, "kernel %s: table source names the kernel", k->name);
        nvrtc_check(sb.data, k->name, arch, &compiled_generic);
    }
    gr_sb_free(&sb);
}

/* Renders k, checks `needles` appear in the source, compiles for sm_<arch>; then the
 * same in generic mode. Destroys k. */
static void render_compile_arch(gr_kernel *k, const char *const *needles, int arch) {
    if (!k) return;
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_status st = gr_render_cuda(k, &sb);
    CHECK_MSG(st == GR_OK, "render %s: %s", k->name, gr_last_error());
    if (st == GR_OK) {
        const char *dump = getenv("GRAFT_TEST_DUMP");
        if (dump && strstr(k->name, dump)) printf("%s\n", sb.data);
        for (int i = 0; needles && needles[i]; i++)
            CHECK_MSG(strstr(sb.data, needles[i]) != NULL, "kernel %s: source lacks \"%s\"", k->name, needles[i]);
        nvrtc_check(sb.data, k->name, arch, &compiled);
    }
    gr_sb_free(&sb);
    render_generic(k, arch);
    gr_kernel_destroy(k);
}
static void render_compile(gr_kernel *k, const char *const *needles) { render_compile_arch(k, needles, 90); }

static void mark_written(gr_kernel *k, int p) { k->params[p].written = true; }

static gr_status store(gr_kernel *k, int param, int value, const gr_kaccess *acc, bool over_inner) {
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_STORE;
    s.value = value;
    s.param = param;
    s.over_inner = over_inner;
    s.access = *acc;
    mark_written(k, param);
    return gr_kernel_add_stage(k, &s);
}

static gr_status reduce(gr_kernel *k, gr_kreduce fn, int value) {
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_REDUCE;
    s.value = value;
    s.reduce = fn;
    s.param = -1;
    gr_kaccess_init(&s.access);
    return gr_kernel_add_stage(k, &s);
}

/* contiguous row-major access over the outer dims */
static void access_outer(const gr_kernel *k, gr_kaccess *a) {
    gr_kaccess_init(a);
    int64_t s = 1;
    for (int d = k->n_outer - 1; d >= 0; d--) {
        a->stride[d] = s;
        s *= k->outer[d];
    }
}

/* an elementwise kernel over [4, 256] with x, z inputs and y output of dtype t */
static gr_status ew_kernel(const char *name, gr_dtype in_t, gr_dtype out_t, gr_kernel **out, int *x, int *z,
                           int *y) {
    gr_kernel *k;
    GR_TRY(gr_kernel_create(name, &k));
    k->n_outer = 2;
    k->outer[0] = 4;
    k->outer[1] = 256;
    int n;
    gr_status st = GR_OK;
    if ((st = gr_kernel_add_param(k, GR_KP_BUFFER, in_t, "x", x)) != GR_OK ||
        (st = gr_kernel_add_param(k, GR_KP_BUFFER, in_t, "z", z)) != GR_OK ||
        (st = gr_kernel_add_param(k, GR_KP_BUFFER, out_t, "y", y)) != GR_OK ||
        (st = gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n)) != GR_OK) {
        gr_kernel_destroy(k);
        return st;
    }
    k->n_points_param = n;
    *out = k;
    return GR_OK;
}

/* ==== tests ============================================================================= */

static void test_unary_all(gr_dtype t) {
    char name[64];
    snprintf(name, sizeof name, "unary_all_%s", gr_dtype_name(t));
    gr_kernel *k = NULL;
    int x, z, y, lx, sum = -1, v;
    gr_kaccess a;
    OK_OR_FAIL(ew_kernel(name, t, t, &k, &x, &z, &y));
    access_outer(k, &a);
    OK_OR_FAIL(gr_kx_load(k, x, &a, &lx));
    for (int fn = 0; fn < GR_KU_COUNT; fn++) {
        bool pred = fn == GR_KU_ISNAN || fn == GR_KU_NOT;
        OK_OR_FAIL(gr_kx_unary(k, (gr_kunary)fn, pred ? GR_BOOL : t, lx, &v));
        if (pred) OK_OR_FAIL(gr_kx_cast(k, t, v, &v));
        if (sum < 0) sum = v;
        else OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, t, sum, v, &sum));
    }
    OK_OR_FAIL(store(k, y, sum, &a, false));
    {
        const char *needles[] = {"gr_gelu_tanh(", "gr_selu(", "gr_isnan(", "extern \"C\" __global__", NULL};
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

static void test_binary_all(gr_dtype t) {
    char name[64];
    snprintf(name, sizeof name, "binary_all_%s", gr_dtype_name(t));
    gr_kernel *k = NULL;
    int x, z, y, lx, lz, sum = -1, v;
    gr_kaccess a;
    OK_OR_FAIL(ew_kernel(name, t, t, &k, &x, &z, &y));
    access_outer(k, &a);
    OK_OR_FAIL(gr_kx_load(k, x, &a, &lx));
    OK_OR_FAIL(gr_kx_load(k, z, &a, &lz));
    for (int fn = 0; fn < GR_KB_COUNT; fn++) {
        bool pred = fn >= GR_KB_EQ && fn <= GR_KB_OR;
        OK_OR_FAIL(gr_kx_binary(k, (gr_kbinary)fn, pred ? GR_BOOL : t, lx, lz, &v));
        if (pred) OK_OR_FAIL(gr_kx_cast(k, t, v, &v));
        if (sum < 0) sum = v;
        else OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, t, sum, v, &sum));
    }
    OK_OR_FAIL(store(k, y, sum, &a, false));
    {
        /* every access is contiguous and unit-stride: the vectorized loop is there, 16 bytes
         * per access for 2-byte elements and narrower (8 points), 4 points otherwise */
        bool narrow = gr_dtype_size(t) <= 2;
        const char *needles[] = {narrow ? "gr_v8<" : "gr_v4<", "gr_aligned", "gr_pow(", "gr_mod(", NULL};
        CHECK(gr_render_cuda_is_vectorized(k));
        unsigned grid = 0, block = 0;
        gr_render_cuda_launch_dims(k, 100000, 1u << 30, &grid, &block);
        CHECK(block == 256 && grid == (unsigned)((100000 + 256 * (narrow ? 8 : 4) - 1) / (256 * (narrow ? 8 : 4))));
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* y(dst) = sum over every source dtype s of cast<dst>(x_s) */
static void test_casts(gr_dtype dst) {
    char name[64];
    snprintf(name, sizeof name, "cast_to_%s", gr_dtype_name(dst));
    gr_kernel *k = NULL;
    gr_kaccess a;
    int y, sum = -1, v;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 1;
    k->outer[0] = 1000; /* not a multiple of 4: the tail loop */
    access_outer(k, &a);
    for (int i = 0; i < GR_ARRAY_LEN(all_dtypes); i++) {
        int p;
        OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, all_dtypes[i], gr_dtype_name(all_dtypes[i]), &p));
        OK_OR_FAIL(gr_kx_load(k, p, &a, &v));
        OK_OR_FAIL(gr_kx_cast(k, dst, v, &v));
        if (sum < 0) sum = v;
        else OK_OR_FAIL(gr_kx_binary(k, GR_KB_MAX, dst, sum, v, &sum));
    }
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, dst, "y", &y));
    OK_OR_FAIL(store(k, y, sum, &a, false));
    {
        /* wide and narrow buffers in one kernel: 4 points per thread (16 bytes of the widest) */
        const char *needles[] = {"gr_v4<", NULL};
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* out[i, j] = table[wrap(idx[i]) * D + j] (embedding lookup), index of dtype it */
static void test_gather(gr_dtype it, gr_dtype t) {
    char name[64];
    snprintf(name, sizeof name, "gather_%s_%s", gr_dtype_name(it), gr_dtype_name(t));
    gr_kernel *k = NULL;
    int table, idx, out, li, lt;
    gr_kaccess a, ai, at;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 2;
    k->outer[0] = 7;
    k->outer[1] = 64;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "table", &table));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, it, "idx", &idx));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "out", &out));
    access_outer(k, &a);
    gr_kaccess_init(&ai);
    ai.stride[0] = 1;
    OK_OR_FAIL(gr_kx_load(k, idx, &ai, &li));
    gr_kaccess_init(&at);
    at.stride[1] = 1;
    at.index = li;
    at.index_stride = 64;
    at.index_extent = 1000;
    OK_OR_FAIL(gr_kx_load(k, table, &at, &lt));
    OK_OR_FAIL(store(k, out, lt, &a, false));
    {
        /* an out-of-range index is clamped into the table, never read out of bounds (kir.h) */
        const char *needles[] = {"gr_wrap(", "return i < 0 ? 0 : i >= n ? n - 1 : i;", NULL};
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* A scatter store (the KV-cache append, passes/lower-movement.c): cache[0, 0, kv - 1, d] =
 * new[0, 0, 0, d] over new's [1, 1, 1, 64] points. Its outer walk looks contiguous, but a
 * scatter is never vectorized (the vector store has no index term), and its position is
 * clamped like a gather's. */
static void test_scatter(gr_dtype t, bool lazy) {
    char name[64];
    snprintf(name, sizeof name, "cache_write_%s%s", gr_dtype_name(t), lazy ? "_lazy" : "");
    gr_kernel *k = NULL;
    int nw, kv, cache, ln, lk, m1, pos;
    gr_kaccess an, ak, ac;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 4;
    k->outer[0] = k->outer[1] = k->outer[2] = 1;
    k->outer[3] = 64;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "new", &nw));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "kv", &kv));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "cache", &cache));
    access_outer(k, &an);
    gr_kaccess_init(&ak);
    OK_OR_FAIL(gr_kx_load(k, nw, &an, &ln));
    OK_OR_FAIL(gr_kx_load(k, kv, &ak, &lk));
    OK_OR_FAIL(gr_kx_const_i(k, GR_I64, -1, &m1));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_I64, lk, m1, &pos));
    if (lazy) {
        /* a select whose one side alone reads the position in the value's cone: the index reads
         * it too, so it must be computed outside the side (render-cuda.c, emit_lazy's root2) */
        int o3, thirty, cond, pf, side, ct = gr_dtype_is_float(t) && t != GR_F64 ? GR_F32 : t;
        OK_OR_FAIL(gr_kx_index(k, 3, &o3));
        OK_OR_FAIL(gr_kx_const_i(k, GR_I64, 30, &thirty));
        OK_OR_FAIL(gr_kx_binary(k, GR_KB_GT, GR_BOOL, o3, thirty, &cond));
        OK_OR_FAIL(gr_kx_cast(k, (gr_dtype)ct, pos, &pf));
        OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, (gr_dtype)ct, ln, pf, &side));
        OK_OR_FAIL(gr_kx_select(k, (gr_dtype)ct, cond, side, ln, &ln));
    }
    access_outer(k, &ac);
    ac.stride[2] = 0;
    ac.index = pos;
    ac.index_stride = 64;
    ac.index_extent = 160;
    OK_OR_FAIL(store(k, cache, ln, &ac, false));
    OK_OR_FAIL(gr_kernel_verify(k));
    CHECK_MSG(!gr_render_cuda_is_vectorized(k), "%s: a scatter store was vectorized", name);
    {
        const char *needles[] = {" + gr_wrap(v3, 160LL) * 64LL)] = ", lazy ? "each side evaluated only when taken" : NULL, NULL};
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* y[o] = fold over r of x[o, r] (a row reduction), also with a transposed input */
static void test_reduce(gr_kreduce fn, gr_dtype t, bool transposed) {
    char name[64];
    snprintf(name, sizeof name, "reduce_%d_%s%s", (int)fn, gr_dtype_name(t), transposed ? "_t" : "");
    gr_kernel *k = NULL;
    int x, y, n, lx, acc;
    gr_kaccess ax, ay;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 1;
    k->outer[0] = 33;
    k->n_inner = 1;
    k->inner[0] = 1000;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n));
    k->n_points_param = n;
    gr_kaccess_init(&ax);
    ax.stride[0] = transposed ? 1 : 1000;
    ax.inner_stride[0] = transposed ? 33 : 1;
    OK_OR_FAIL(gr_kx_load(k, x, &ax, &lx));
    OK_OR_FAIL(reduce(k, fn, lx));
    OK_OR_FAIL(gr_kx_acc(k, 0, t, &acc));
    gr_kaccess_init(&ay);
    ay.stride[0] = 1;
    OK_OR_FAIL(store(k, y, acc, &ay, false));
    {
        const char *needles[] = {"__shfl_xor_sync", "gr_block_reduce(", NULL};
        CHECK(gr_render_cuda_is_block_kernel(k));
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* softmax over the last dim of [2, 3, 200] with a host scalar temperature:
 * m = max(x/T); s = sum(exp(x/T - m)); y = exp(x/T - m) / s */
static void test_softmax(gr_dtype t, bool indirect) {
    char name[64];
    snprintf(name, sizeof name, "softmax_%s%s", gr_dtype_name(t), indirect ? "_pi" : "");
    gr_kernel *k = NULL;
    int x, y, temp, lx, pt, xt, m, d, e, s, q;
    gr_kaccess ax;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 2;
    k->outer[0] = 2;
    k->outer[1] = 3;
    k->n_inner = 1;
    k->inner[0] = 200;
    gr_kparam_kind bk = indirect ? GR_KP_BUFFER_INDIRECT : GR_KP_BUFFER;
    OK_OR_FAIL(gr_kernel_add_param(k, bk, t, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, bk, t, "y", &y));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F64, "temperature", &temp));
    gr_kaccess_init(&ax);
    ax.stride[0] = 600;
    ax.stride[1] = 200;
    ax.inner_stride[0] = 1;
    OK_OR_FAIL(gr_kx_load(k, x, &ax, &lx));
    OK_OR_FAIL(gr_kx_param(k, temp, &pt));
    k->nodes.data[pt].dtype = GR_F32; /* value read as f32 */
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_DIV, GR_F32, lx, pt, &xt));
    OK_OR_FAIL(reduce(k, GR_KR_MAX, xt));
    OK_OR_FAIL(gr_kx_acc(k, 0, GR_F32, &m));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_SUB, GR_F32, xt, m, &d));
    OK_OR_FAIL(gr_kx_unary(k, GR_KU_EXP, GR_F32, d, &e));
    OK_OR_FAIL(reduce(k, GR_KR_SUM, e));
    OK_OR_FAIL(gr_kx_acc(k, 1, GR_F32, &s));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_DIV, GR_F32, e, s, &q));
    OK_OR_FAIL(store(k, y, q, &ax, true));
    {
        const char *needles_pi[] = {"const* __restrict__ p0_slot", "= *p0_slot;", "double p2", NULL};
        const char *needles[] = {"double p2", NULL};
        render_compile(k, indirect ? needles_pi : needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* arg_max / arg_min as passes/lower-reduce.c builds it, over the last dim of [3, 300]:
 * m = max x (min);  i = min (x == m || isnan(x) ? r : n)  (max ... : -1 for the last index) */
static void test_arg_reduce(gr_dtype t, bool is_max, bool last) {
    char name[64];
    snprintf(name, sizeof name, "arg_%s_%s%s", is_max ? "max" : "min", gr_dtype_name(t), last ? "_last" : "");
    gr_kernel *k = NULL;
    int x, y, n, lx, m, hit, nan, idx, miss, cand, res;
    gr_dtype ct = (t == GR_F16 || t == GR_BF16) ? GR_F32 : t;
    gr_kaccess ax, ay;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 1;
    k->outer[0] = 3;
    k->n_inner = 1;
    k->inner[0] = 300;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "y", &y));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n));
    k->n_points_param = n;
    gr_kaccess_init(&ax);
    ax.stride[0] = 300;
    ax.inner_stride[0] = 1;
    OK_OR_FAIL(gr_kx_load(k, x, &ax, &lx));
    if (ct != t) OK_OR_FAIL(gr_kx_cast(k, ct, lx, &lx));
    OK_OR_FAIL(reduce(k, is_max ? GR_KR_MAX : GR_KR_MIN, lx));
    OK_OR_FAIL(gr_kx_acc(k, 0, ct, &m));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_EQ, GR_BOOL, lx, m, &hit));
    if (gr_dtype_is_float(ct)) {
        OK_OR_FAIL(gr_kx_unary(k, GR_KU_ISNAN, GR_BOOL, lx, &nan));
        OK_OR_FAIL(gr_kx_binary(k, GR_KB_OR, GR_BOOL, hit, nan, &hit));
    }
    OK_OR_FAIL(gr_kx_index(k, GR_KIDX_INNER, &idx));
    OK_OR_FAIL(gr_kx_const_i(k, GR_I64, last ? -1 : 300, &miss));
    OK_OR_FAIL(gr_kx_select(k, GR_I64, hit, idx, miss, &cand));
    OK_OR_FAIL(reduce(k, last ? GR_KR_MAX : GR_KR_MIN, cand));
    OK_OR_FAIL(gr_kx_acc(k, 1, GR_I64, &res));
    gr_kaccess_init(&ay);
    ay.stride[0] = 1;
    OK_OR_FAIL(store(k, y, res, &ay, false));
    {
        const char *needles[] = {"gr_block_reduce(", NULL};
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* Layernorm-like: two inner dims, mean and mean-of-squares, a broadcast weight, rsqrt. */
static void test_layernorm(gr_dtype t) {
    char name[64];
    snprintf(name, sizeof name, "layernorm_%s", gr_dtype_name(t));
    gr_kernel *k = NULL;
    int x, w, y, lx, lw, sq, mean, msq, n_inv, mu, ex2, var, eps, ve, rs, c, cn, o;
    gr_kaccess ax, aw;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 1;
    k->outer[0] = 5;
    k->n_inner = 2;
    k->inner[0] = 12;
    k->inner[1] = 64;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "w", &w));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y));
    gr_kaccess_init(&ax);
    ax.stride[0] = 768;
    ax.inner_stride[0] = 64;
    ax.inner_stride[1] = 1;
    gr_kaccess_init(&aw);
    aw.inner_stride[0] = 64;
    aw.inner_stride[1] = 1;
    OK_OR_FAIL(gr_kx_load(k, x, &ax, &lx));
    OK_OR_FAIL(reduce(k, GR_KR_SUM, lx));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, lx, lx, &sq));
    OK_OR_FAIL(reduce(k, GR_KR_SUM, sq));
    OK_OR_FAIL(gr_kx_acc(k, 0, GR_F32, &mean));
    OK_OR_FAIL(gr_kx_acc(k, 1, GR_F32, &msq));
    OK_OR_FAIL(gr_kx_const_f(k, GR_F32, 1.0 / 768, &n_inv));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, mean, n_inv, &mu));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, msq, n_inv, &ex2));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_SUB, GR_F32, ex2, mu, &var)); /* not exact: fine for a compile test */
    OK_OR_FAIL(gr_kx_const_f(k, GR_F32, 1e-5, &eps));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_F32, var, eps, &ve));
    OK_OR_FAIL(gr_kx_unary(k, GR_KU_RSQRT, GR_F32, ve, &rs));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_SUB, GR_F32, lx, mu, &c));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, c, rs, &cn));
    OK_OR_FAIL(gr_kx_load(k, w, &aw, &lw));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, t, cn, lw, &o));
    OK_OR_FAIL(store(k, y, o, &ax, true));
    render_compile(k, NULL);
    return;
fail:
    gr_kernel_destroy(k);
}

/* The row cache of block kernels (issue 15): a load that two stages walking the row read,
 * independent of every accumulator, is read once into registers (gr_cN[]) and the stages use
 * it there; a load only the store reads, and one whose gather index comes from an accumulator,
 * stay in their stage. Nodes that are the same at every point of a row (the mean, the
 * normaliser) are computed once per stage, before its loop. Both forms compile. */
static void test_row_cache(void) {
    gr_kernel *k = NULL;
    int x, w, y, lx, lw, a0, ai, lg, sum, a1, m, o;
    gr_kaccess ax, aw, ag;
    OK_OR_FAIL(gr_kernel_create("row_cache", &k));
    k->n_outer = 1;
    k->outer[0] = 7;
    k->n_inner = 1;
    k->inner[0] = 300;
    k->var_inner = 1; /* a symbolic row length: every form is rendered (the block form's cache below) */
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "w", &w));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "y", &y));
    gr_kaccess_init(&ax);
    ax.stride[0] = 300;
    ax.inner_stride[0] = 1;
    OK_OR_FAIL(gr_kx_load(k, x, &ax, &lx));                /* node 0: cached */
    OK_OR_FAIL(reduce(k, GR_KR_SUM, lx));
    OK_OR_FAIL(gr_kx_acc(k, 0, GR_F32, &a0));
    OK_OR_FAIL(gr_kx_cast(k, GR_I64, a0, &ai));
    gr_kaccess_init(&ag);
    ag.inner_stride[0] = 1;
    ag.index = ai;
    ag.index_stride = 1;
    ag.index_extent = 7;
    OK_OR_FAIL(gr_kx_load(k, x, &ag, &lg));                /* accumulator-dependent: not cached */
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_F32, lx, lg, &sum));
    OK_OR_FAIL(reduce(k, GR_KR_MAX, sum));
    OK_OR_FAIL(gr_kx_acc(k, 1, GR_F32, &a1));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, a0, a1, &m));
    gr_kaccess_init(&aw);
    aw.inner_stride[0] = 1;
    OK_OR_FAIL(gr_kx_load(k, w, &aw, &lw));                /* read by the store only: not cached */
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, sum, lw, &o));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_SUB, GR_F32, o, m, &o));
    OK_OR_FAIL(store(k, y, o, &ax, true));
    for (int mode = 0; mode < 2; mode++) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        CHECK_OK(gr_render_cuda_mode(k, mode ? GR_RENDER_GENERIC : GR_RENDER_LITERAL, &sb));
        const char *src = sb.data ? sb.data : "";
        char want[32];
        snprintf(want, sizeof want, "float gr_c%d[4];", lx);
        CHECK_MSG(strstr(src, want) != NULL, "row cache: no \"%s\"", want);
        snprintf(want, sizeof want, "gr_c%d[", lg);
        CHECK_MSG(strstr(src, want) == NULL, "row cache: the gathered load is cached");
        snprintf(want, sizeof want, "gr_c%d[", lw);
        CHECK_MSG(strstr(src, want) == NULL, "row cache: the store's own load is cached");
        /* the uniform branch to the plain loops for rows longer than 4 points per thread */
        CHECK(strstr(src, "<= 4 * (long long)blockDim.x) {") != NULL);
        CHECK(strstr(src, "for (long long ri = threadIdx.x;") != NULL);
        /* stage 2 computes acc0 * acc1 before its loop */
        const char *st2 = strstr(src, "// stage 2");
        char mul[32];
        snprintf(mul, sizeof mul, "const float v%d = ", m);
        const char *at = st2 ? strstr(st2, mul) : NULL, *loop = st2 ? strstr(st2, "for (") : NULL;
        CHECK_MSG(at && loop && at < loop, "row cache: stage 2 does not hoist its row-invariant node");
        if (mode) nvrtc_check(src, k->name, 90, &compiled_generic);
        else nvrtc_check(src, k->name, 90, &compiled);
        gr_sb_free(&sb);
    }
    /* one walking stage: no cache */
    {
        gr_kernel *r = NULL;
        int rx, ry, rl, racc;
        gr_kaccess a, b;
        CHECK_OK(gr_kernel_create("no_row_cache", &r));
        if (!r) goto fail;
        r->n_outer = 1;
        r->outer[0] = 3;
        r->n_inner = 1;
        r->inner[0] = 100;
        if (gr_kernel_add_param(r, GR_KP_BUFFER, GR_F32, "x", &rx) == GR_OK &&
            gr_kernel_add_param(r, GR_KP_BUFFER, GR_F32, "y", &ry) == GR_OK) {
            gr_kaccess_init(&a);
            a.stride[0] = 100;
            a.inner_stride[0] = 1;
            gr_kaccess_init(&b);
            b.stride[0] = 1;
            CHECK_OK(gr_kx_load(r, rx, &a, &rl));
            CHECK_OK(reduce(r, GR_KR_SUM, rl));
            CHECK_OK(gr_kx_acc(r, 0, GR_F32, &racc));
            CHECK_OK(store(r, ry, racc, &b, false));
            gr_strbuf sb;
            gr_sb_init(&sb);
            CHECK_OK(gr_render_cuda(r, &sb));
            CHECK(sb.data && strstr(sb.data, "gr_c0[") == NULL && strstr(sb.data, "<= 4 * (long long)blockDim.x") == NULL);
            gr_sb_free(&sb);
        }
        gr_kernel_destroy(r);
    }
fail:
    gr_kernel_destroy(k);
}

/* A layer norm with its residual add, as GPT-2's: h = x + res (stored), mean and variance of
 * h, y = (h - mean) * rsqrt(var + eps) * g + b. The loads of x and res are row-cached.
 * gather 1: res's row through a gather index of one value along the row (an embedding's rows:
 * the vector fill, from the index's row); gather 2: res's points through an index that moves
 * along the row (no vector fill). */
static gr_kernel *layer_norm_kernel(const char *name, gr_dtype t, int64_t rows, int64_t cols, int gather) {
    gr_kernel *k = NULL;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = rows;
    k->n_inner = 1;
    k->inner[0] = cols;
    int x, r, g, b, h, y, lx, lr, hsum, a0, inv_n, mean, d, d2, a1, var, eps, ve, rs, nm, lg, lb, o1, o2, idx = -1;
    gr_kaccess a, ar, aw;
    gr_kaccess_init(&a);
    a.stride[0] = cols;
    a.inner_stride[0] = 1;
    gr_kaccess_init(&aw);
    aw.inner_stride[0] = 1;
    ar = a;
    bool ok = gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x) == GR_OK &&
              gr_kernel_add_param(k, GR_KP_BUFFER, t, "res", &r) == GR_OK &&
              gr_kernel_add_param(k, GR_KP_BUFFER, t, "g", &g) == GR_OK &&
              gr_kernel_add_param(k, GR_KP_BUFFER, t, "b", &b) == GR_OK &&
              gr_kernel_add_param(k, GR_KP_BUFFER, t, "h", &h) == GR_OK &&
              gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y) == GR_OK;
    if (ok && gather == 1) { /* res row (rows - 1 - o0): a gather by an outer index */
        int o0, last;
        ok = gr_kx_index(k, 0, &o0) == GR_OK && gr_kx_const_i(k, GR_I64, rows - 1, &last) == GR_OK &&
             gr_kx_binary(k, GR_KB_SUB, GR_I64, last, o0, &idx) == GR_OK;
        ar.stride[0] = 0;
        ar.index = idx;
        ar.index_stride = cols;
        ar.index_extent = rows;
    } else if (ok && gather == 2) { /* res point (o0, cols - 1 - r0): the index moves along the row */
        int r0, last;
        ok = gr_kx_index(k, GR_KIDX_INNER, &r0) == GR_OK && gr_kx_const_i(k, GR_I64, cols - 1, &last) == GR_OK &&
             gr_kx_binary(k, GR_KB_SUB, GR_I64, last, r0, &idx) == GR_OK;
        ar.inner_stride[0] = 0;
        ar.index = idx;
        ar.index_stride = 1;
        ar.index_extent = cols;
    }
    ok = ok && gr_kx_load(k, x, &a, &lx) == GR_OK && gr_kx_load(k, r, &ar, &lr) == GR_OK &&
         gr_kx_binary(k, GR_KB_ADD, GR_F32, lx, lr, &hsum) == GR_OK && reduce(k, GR_KR_SUM, hsum) == GR_OK &&
         gr_kx_acc(k, 0, GR_F32, &a0) == GR_OK && gr_kx_const_f(k, GR_F32, 1.0 / (double)cols, &inv_n) == GR_OK &&
         gr_kx_binary(k, GR_KB_MUL, GR_F32, a0, inv_n, &mean) == GR_OK &&
         gr_kx_binary(k, GR_KB_SUB, GR_F32, hsum, mean, &d) == GR_OK &&
         gr_kx_binary(k, GR_KB_MUL, GR_F32, d, d, &d2) == GR_OK && reduce(k, GR_KR_SUM, d2) == GR_OK &&
         gr_kx_acc(k, 1, GR_F32, &a1) == GR_OK && gr_kx_binary(k, GR_KB_MUL, GR_F32, a1, inv_n, &var) == GR_OK &&
         gr_kx_const_f(k, GR_F32, 1e-5, &eps) == GR_OK && gr_kx_binary(k, GR_KB_ADD, GR_F32, var, eps, &ve) == GR_OK &&
         gr_kx_unary(k, GR_KU_RSQRT, GR_F32, ve, &rs) == GR_OK && gr_kx_binary(k, GR_KB_MUL, GR_F32, d, rs, &nm) == GR_OK &&
         gr_kx_load(k, g, &aw, &lg) == GR_OK && gr_kx_load(k, b, &aw, &lb) == GR_OK &&
         gr_kx_binary(k, GR_KB_MUL, GR_F32, nm, lg, &o1) == GR_OK && gr_kx_binary(k, GR_KB_ADD, t, o1, lb, &o2) == GR_OK &&
         store(k, h, hsum, &a, true) == GR_OK && store(k, y, o2, &a, true) == GR_OK;
    if (!ok) {
        gr_kernel_destroy(k);
        return NULL;
    }
    return k;
}

/* The warp-row form of block kernels (issue 15): every block kernel carries it behind a run-time
 * branch on the row length; a layer norm's cached loads get the vector fill (16-byte gr_v8 for
 * 2-byte rows, gr_v4 for f32) with its run-time alignment check and the scalar fallback, also
 * for a row gathered by an index of one value along the row (its start computed first); a load
 * gathered point by point keeps the scalar fill only; the store stage reads g and b a chunk at a
 * time (vector loads behind their own alignment check); 2-byte rows are cached as bits, two points a
 * register; rows of whole vector chunks compare one point per chunk with the row's end (generic
 * code: a version per kind of row length). Compiles for f32/bf16/f16, literal, generic and
 * table-generic; the launch takes a warp per row up to 1024 points, a block per row beyond. */
static void test_warp_rows(void) {
    const gr_dtype types[3] = {GR_F32, GR_BF16, GR_F16};
    for (int ti = 0; ti < 3; ti++) {
        for (int gm = 0; gm < 3; gm++) {
            const bool gather = gm == 2, row_gather = gm == 1; /* gather: no vector fill */
            char name[64];
            snprintf(name, sizeof name, "ln_%s%s", gr_dtype_name(types[ti]), gm == 1 ? "_gather_row" : gm == 2 ? "_gather_point" : "");
            gr_kernel *k = layer_norm_kernel(name, types[ti], 4096, 768, gm);
            CHECK_MSG(k != NULL, "%s: build failed: %s", name, gr_last_error());
            if (!k) continue;
            /* literal, generic and generic with the slot table of a symbolic row length (var_inner:
             * every form and version), generic of a fixed one (its row class: one form, one version) */
            for (int mode = 0; mode < 4; mode++) {
                const bool fixed = mode == 0 || mode == 3;
                k->var_inner = fixed ? 0 : 1;
                gr_strbuf sb;
                gr_sb_init(&sb);
                CHECK_OK(gr_render_cuda_mode(k, mode == 2 ? GR_RENDER_GENERIC_TABLE : mode ? GR_RENDER_GENERIC : GR_RENDER_LITERAL,
                                             &sb));
                const char *src = sb.data ? sb.data : "";
                CHECK_MSG(strstr(src, fixed ? "{  // warp-row form (a fixed row length)" : "<= 1024) {  // warp-row form") != NULL,
                          "%s mode %d: no warp-row form", name, mode);
                CHECK(strstr(src, "gr_warp_reduce(gr_a, gr_fold_sum())") != NULL);
                /* x and res cached (nodes 0, 1; after the gather index's three nodes: 3, 4); 2-byte
                 * floats as their bits, two points a register, widened where read */
                const bool narrow = types[ti] != GR_F32;
                char c0[64], c1[64];
                snprintf(c0, sizeof c0, narrow ? "unsigned gr_c%d[16];" : "float gr_c%d[32];", gm ? 3 : 0);
                snprintf(c1, sizeof c1, narrow ? "unsigned gr_c%d[16];" : "float gr_c%d[32];", gm ? 4 : 1);
                CHECK_MSG(strstr(src, c0) != NULL && strstr(src, c1) != NULL, "%s mode %d: row cache", name, mode);
                if (narrow) {
                    CHECK(strstr(src, gm ? "gr_half(gr_c3[gr_j >> 1], gr_j)" : "gr_half(gr_c0[gr_j >> 1], gr_j)") != NULL);
                    CHECK(strstr(src, gm ? "gr_set_half(gr_c4[gr_j >> 1], gr_j, gr_u4);" : "gr_set_half(gr_c1[gr_j >> 1], gr_j, gr_u1);") != NULL);
                    CHECK(gather || strstr(src, gm ? "gr_c3[(gr_q * 8 + gr_e) >> 1] = (unsigned)gr_w3.v[gr_e] | (unsigned)gr_w3.v[gr_e + 1] << 16;"
                                                   : "gr_c0[(gr_q * 8 + gr_e) >> 1] = (unsigned)gr_w0.v[gr_e] | (unsigned)gr_w0.v[gr_e + 1] << 16;") != NULL);
                }
                if (row_gather) { /* the row's start: the index (node 2) taken once, before the bases */
                    const char *idx = strstr(src, "const long long v2 = ");
                    const char *base = strstr(src, "gr_b4 = ");
                    CHECK_MSG(idx && base && idx < base && strstr(base, "gr_wrap(v2") != NULL && strstr(base, "gr_wrap(v2") < strstr(base, ";"),
                              "%s mode %d: gathered row start", name, mode);
                }
                const char *vt = types[ti] == GR_F32 ? "reinterpret_cast<const gr_v4<float>*>(p0 + gr_b"
                                                     : "reinterpret_cast<const gr_v8<unsigned short>*>(p0 + gr_b";
                bool has_vec = strstr(src, vt) != NULL, has_check = strstr(src, "if (gr_al) {") != NULL;
                CHECK_MSG(gather ? (!has_vec && !has_check) : (has_vec && has_check), "%s mode %d: vector fill %d check %d",
                          name, mode, has_vec, has_check);
                /* the store of y reads g and b (params 2, 3; nodes 6 + ... : found by their vector loads)
                 * a chunk at a time, each behind its own alignment check, with a scalar fallback */
                const char *xv = types[ti] == GR_F32 ? "= *reinterpret_cast<const gr_v4<float>*>(p2 + gr_xb"
                                                     : "= *reinterpret_cast<const gr_v8<unsigned short>*>(p2 + gr_xb";
                const char *xv3 = types[ti] == GR_F32 ? "= *reinterpret_cast<const gr_v4<float>*>(p3 + gr_xb"
                                                      : "= *reinterpret_cast<const gr_v8<unsigned short>*>(p3 + gr_xb";
                bool has_xv = strstr(src, xv) != NULL && strstr(src, xv3) != NULL && strstr(src, "const bool gr_xa") != NULL &&
                              strstr(src, ".v[gr_e] = p2[gr_xb") != NULL && strstr(src, ".v[gr_e];\n") != NULL;
                CHECK_MSG(gather ? strstr(src, "gr_xb") == NULL : has_xv, "%s mode %d: store-stage vector loads %d", name, mode, has_xv);
                /* both row stores (h, y) take 16-byte vector stores behind their own run-time check */
                const char *vs = types[ti] == GR_F32 ? "*reinterpret_cast<gr_v4<float>*>(p5 + gr_bs + gr_r0) = gr_sv;"
                                                     : "*reinterpret_cast<gr_v8<unsigned short>*>(p5 + gr_bs + gr_r0) = gr_sv;";
                bool has_vs = strstr(src, vs) != NULL && strstr(src, "reinterpret_cast<gr_v") != NULL &&
                              strstr(src, "(p4 + gr_bs + gr_r0) = gr_sv;") != NULL;
                CHECK_MSG(gather ? strstr(src, "gr_sv") == NULL : has_vs, "%s mode %d: vector stores %d", name, mode, has_vs);
                /* rows of whole chunks (768 points: literal code has only these; generic code branches
                 * on the row length) compare a chunk's start with the row's end; other rows every
                 * point (gather: chunks of one point, always whole). Chunks are cut in slabs of 32,
                 * a warp's slabs gr_w, gr_w + gr_W, ... */
                bool whole = strstr(src, "const int ri = gr_r0 + gr_e;") != NULL &&
                             strstr(src, "if (gr_r0 >= gr_ne) break;") != NULL &&
                             strstr(src, gather ? "const int gr_r0 = (gr_q * 32 + gr_lane) * 1;"
                                                : (types[ti] == GR_F32 ? "const int gr_r0 = (gr_q * 32 + gr_lane) * 4;"
                                                                       : "const int gr_r0 = (gr_q * 32 + gr_lane) * 8;")) != NULL;
                bool version = strstr(src, types[ti] == GR_F32 ? "if (gr_ni % 4 == 0) {  // whole chunks"
                                                               : "if (gr_ni % 8 == 0) {  // whole chunks") != NULL;
                bool per_point = strstr(src, "if (ri >= gr_ne) break;") != NULL;
                CHECK_MSG(!fixed && !gather ? (whole && version && per_point) : (whole && !version && !per_point),
                          "%s mode %d: whole %d version %d per point %d", name, mode, whole, version, per_point);
                /* warps a row: blocks of up to 4 warps give a row as many as its slabs when the row
                 * is vectorized (else one); two copies, a warp a row (every slab in registers) and
                 * several (half the registers: slabs gr_w, gr_w + gr_W, ..., partials of each chunk
                 * folded in slab order through shared memory) */
                CHECK_MSG(strstr(src, gather ? "const int gr_W = 1;" : "const int gr_W = gr_nw <= 4 ? max(min(gr_ns, gr_nw), 1) : 1;") != NULL,
                          "%s mode %d: warps a row", name, mode);
                CHECK(strstr(src, "gr_a = gr_fold_sum()(gr_a, gr_p);") != NULL && strstr(src, "__syncwarp();") != NULL);
                bool multi = strstr(src, "} else {  // gr_W warps a row") != NULL &&
                             strstr(src, "gr_sw0[(gr_g * gr_ns + gr_w + gr_q * gr_W) * 32 + gr_lane] = gr_p;") != NULL &&
                             strstr(src, "gr_a = gr_fold_sum()(gr_a, gr_sw1[(gr_g * gr_ns + gr_t) * 32 + gr_lane]);") != NULL &&
                             strstr(src, "__shared__ float gr_sw0[512];") != NULL && strstr(src, "__syncthreads();") != NULL &&
                             strstr(src, types[ti] == GR_F32 ? "const int gr_r0 = ((gr_w + gr_q * gr_W) * 32 + gr_lane) * 4;"
                                                             : "const int gr_r0 = ((gr_w + gr_q * gr_W) * 32 + gr_lane) * 8;") != NULL &&
                             strstr(src, narrow ? (gm ? "unsigned gr_c3[8];" : "unsigned gr_c0[8];") : (gm ? "float gr_c3[16];" : "float gr_c0[16];")) != NULL;
                CHECK_MSG(gather ? strstr(src, "gr_W warps a row") == NULL : multi, "%s mode %d: several warps a row %d", name, mode, multi);
                /* the block form stays for long rows, where the row length is symbolic */
                CHECK_MSG((strstr(src, "gr_block_reduce(gr_a, gr_sh0, gr_fold_sum())") != NULL) == !fixed,
                          "%s mode %d: block form", name, mode);
                if (mode) nvrtc_check(src, k->name, 90, &compiled_generic);
                else nvrtc_check(src, k->name, 90, &compiled);
                gr_sb_free(&sb);
            }
            if (!gather) { /* literal rows of 702: not whole chunks, so no vector fill and every point compared */
                gr_kernel *k7 = layer_norm_kernel(name, types[ti], 64, 702, false);
                CHECK(k7 != NULL);
                gr_strbuf sb;
                gr_sb_init(&sb);
                if (k7) CHECK_OK(gr_render_cuda(k7, &sb));
                const char *src = sb.data ? sb.data : "";
                CHECK(strstr(src, "if (ri >= gr_ne) break;") != NULL && strstr(src, "if (gr_al) {") == NULL &&
                      strstr(src, "gr_sv") == NULL);
                if (k7) nvrtc_check(src, k7->name, 90, &compiled);
                gr_sb_free(&sb);
                gr_kernel_destroy(k7);
            }
            unsigned grid = 0, block = 0;
            /* rows of 768: few rows (at most max_grid / 4) three warps a row (a warp per 256
             * points), a row a block; many rows a warp a row, 8 rows a block. 4224: an H100's
             * max_grid (132 SMs x 32) */
            gr_render_cuda_launch_dims(k, 128, 4224, &grid, &block);
            CHECK_MSG(block == 96 && grid == 128, "%s: launch of 128 rows %u x %u", name, grid, block);
            gr_render_cuda_launch_dims(k, 1056, 4224, &grid, &block);
            CHECK_MSG(block == 96 && grid == 1056, "%s: launch of 1056 rows %u x %u", name, grid, block);
            gr_render_cuda_launch_dims(k, 1057, 4224, &grid, &block);
            CHECK_MSG(block == 256 && grid == 133, "%s: launch of 1057 rows %u x %u", name, grid, block);
            gr_render_cuda_launch_dims(k, 4096, 4224, &grid, &block);
            CHECK_MSG(block == 256 && grid == 512, "%s: launch %u x %u", name, grid, block);
            gr_render_cuda_launch_dims(k, 3, 4224, &grid, &block);
            CHECK_MSG(block == 96 && grid == 3, "%s: launch of 3 rows %u x %u", name, grid, block);
            gr_render_cuda_launch_dims(k, 4096, 100, &grid, &block);
            CHECK(block == 256 && grid == 100);
            /* rows of at most 256 points: a warp each, a row a block when few */
            k->inner[0] = 200;
            gr_render_cuda_launch_dims(k, 4096, 4224, &grid, &block);
            CHECK_MSG(block == 256 && grid == 512, "%s: short rows launch %u x %u", name, grid, block);
            gr_render_cuda_launch_dims(k, 1000, 4224, &grid, &block);
            CHECK_MSG(block == 32 && grid == 1000, "%s: few short rows launch %u x %u", name, grid, block);
            k->inner[0] = 1024; /* four warps */
            gr_render_cuda_launch_dims(k, 64, 4224, &grid, &block);
            CHECK_MSG(block == 128 && grid == 64, "%s: rows of 1024 launch %u x %u", name, grid, block);
            k->inner[0] = 1025; /* a block per row */
            gr_render_cuda_launch_dims(k, 4096, 1u << 30, &grid, &block);
            CHECK_MSG(block == 256 && grid == 4096, "%s: long rows launch %u x %u", name, grid, block);
            gr_kernel_destroy(k);
        }
    }
}

/* Dropout-like: RANDOM on the linear index, SELECT, INDEX nodes and a broadcast load. */
static void test_random(gr_dtype rt) {
    char name[64];
    snprintf(name, sizeof name, "dropout_%s", gr_dtype_name(rt));
    gr_kernel *k = NULL;
    int x, b, y, p, lx, lb, lin, rnd, pp, keep, zero, sel, o1, io, s;
    gr_kaccess a, ab;
    OK_OR_FAIL(gr_kernel_create(name, &k));
    k->n_outer = 3;
    k->outer[0] = 3;
    k->outer[1] = 5;
    k->outer[2] = 64;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "bias", &b));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F64, "p", &p));
    access_outer(k, &a);
    gr_kaccess_init(&ab);
    ab.stride[2] = 1; /* broadcast over dims 0 and 1 */
    OK_OR_FAIL(gr_kx_load(k, x, &a, &lx));
    OK_OR_FAIL(gr_kx_load(k, b, &ab, &lb));
    OK_OR_FAIL(gr_kx_index(k, GR_KIDX_LINEAR, &lin));
    gr_kexpr e;
    memset(&e, 0, sizeof e);
    e.op = GR_KX_RANDOM;
    e.dtype = rt;
    e.a = lin;
    e.b = e.c = -1;
    e.i = -1234567;
    e.param = -1;
    gr_kaccess_init(&e.access);
    OK_OR_FAIL(gr_kernel_add_expr(k, &e, &rnd));
    OK_OR_FAIL(gr_kx_param(k, p, &pp));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_GE, GR_BOOL, rnd, pp, &keep));
    OK_OR_FAIL(gr_kx_const_f(k, GR_F32, 0.0, &zero));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_F32, lx, lb, &s));
    OK_OR_FAIL(gr_kx_select(k, GR_F32, keep, s, zero, &sel));
    OK_OR_FAIL(gr_kx_index(k, 1, &io));
    OK_OR_FAIL(gr_kx_cast(k, GR_F32, io, &io));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_F32, sel, io, &o1));
    OK_OR_FAIL(store(k, y, o1, &a, false));
    {
        const char *needles[] = {rt == GR_F64 ? "gr_rand_f64(" : "gr_rand_f32(", "0x9E3779B97F4A7C15ULL", NULL};
        CHECK(gr_render_cuda_is_vectorized(k)); /* x and y vectorized, bias read per element */
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* y = x * scale with indirect (PI) buffers, f16 in, f32 out, int scalar, constants inf/nan */
static void test_indirect_mixed(void) {
    gr_kernel *k = NULL;
    int x, y, sc, si, lx, ps, pi, m, m2, inf, c, o;
    gr_kaccess a;
    OK_OR_FAIL(gr_kernel_create("indirect_mixed", &k));
    k->n_outer = 1;
    k->outer[0] = 4096;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER_INDIRECT, GR_F16, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER_INDIRECT, GR_F32, "y", &y));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F64, "scale", &sc));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_SCALAR_I, GR_I64, "shift", &si));
    access_outer(k, &a);
    OK_OR_FAIL(gr_kx_load(k, x, &a, &lx));
    OK_OR_FAIL(gr_kx_param(k, sc, &ps));
    OK_OR_FAIL(gr_kx_param(k, si, &pi));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MUL, GR_F32, lx, ps, &m));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_F32, m, pi, &m2));
    OK_OR_FAIL(gr_kx_const_f(k, GR_F32, 1.0 / 0.0, &inf));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MIN, GR_F32, m2, inf, &c));
    OK_OR_FAIL(gr_kx_const_i(k, GR_I64, INT64_MIN, &o));
    OK_OR_FAIL(gr_kx_cast(k, GR_F32, o, &o));
    OK_OR_FAIL(gr_kx_binary(k, GR_KB_MAX, GR_F32, c, o, &c));
    OK_OR_FAIL(store(k, y, c, &a, false));
    {
        const char *needles[] = {"gr_finf()", "(-9223372036854775807LL - 1)", "= *p1_slot;", NULL};
        render_compile(k, needles);
    }
    return;
fail:
    gr_kernel_destroy(k);
}

/* ==== generic mode: one source per structure ================================================ */

/* Kernel forms a lowering emits, each at a size s (s > 1) and with structure variants:
 *   0 bias:     y[i, j] = x[i, j] * 0.5 + bias[j]        outer [s, 3s]; variant 1: mul by bias
 *   1 mean:     y[i] = sum_j x[i, j] / (3s)               outer [s], inner [3s] (1/count is a constant)
 *   2 softmax:  y = softmax(x^T) over the inner dim      outer [2, s], inner [s + 5], transposed input
 *   3 gather:   y[i, j] = table[idx[i] * 16 + j]         table [s + 100, 16], idx [2s]
 *   4 mask:     y[i, j] = j <= i + 1 ? x[i, j] : -inf    outer [s, s] (INDEX, a trilu-like k)
 * variant 1 changes the structure: an op (0), the reduction (1), contiguity (2), the
 * index dtype (3), a dtype (4). */
static gr_kernel *family(int form, int64_t s, int variant) {
    gr_kernel *k = NULL;
    char name[64];
    snprintf(name, sizeof name, "fam%d_v%d_s%lld", form, variant, (long long)s);
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    gr_status st = GR_OK;
    int x = -1, y = -1, n = -1, b = -1, lx = -1, lb = -1, c = -1, v = -1, acc = -1, cnt = -1;
    gr_kaccess a, ab, ay;
    gr_kaccess_init(&a);
    gr_kaccess_init(&ab);
    gr_kaccess_init(&ay);
#define T(expr) \
    if (st == GR_OK) st = (expr)
    switch (form) {
    case 0:
        k->n_outer = 2, k->outer[0] = s, k->outer[1] = 3 * s;
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "bias", &b));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
        T(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n));
        k->n_points_param = n;
        access_outer(k, &a);
        ab.stride[1] = 1; /* broadcast over rows */
        T(gr_kx_load(k, x, &a, &lx));
        T(gr_kx_load(k, b, &ab, &lb));
        T(gr_kx_const_f(k, GR_F32, 0.5, &c));
        T(gr_kx_binary(k, GR_KB_MUL, GR_F32, lx, c, &v));
        T(gr_kx_binary(k, variant ? GR_KB_MUL : GR_KB_ADD, GR_F32, v, lb, &v));
        T(store(k, y, v, &a, false));
        break;
    case 1:
        k->n_outer = 1, k->outer[0] = s, k->n_inner = 1, k->inner[0] = 3 * s;
        k->var_inner = 1; /* a symbolic row length (a fixed one's class is structure) */
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
        a.stride[0] = 3 * s, a.inner_stride[0] = 1;
        ay.stride[0] = 1;
        T(gr_kx_load(k, x, &a, &lx));
        T(reduce(k, variant ? GR_KR_MAX : GR_KR_SUM, lx));
        T(gr_kx_acc(k, 0, GR_F32, &acc));
        T(gr_kx_const_f(k, GR_F32, (double)(3 * s), &cnt));
        T(gr_kx_binary(k, GR_KB_DIV, GR_F32, acc, cnt, &v));
        T(store(k, y, v, &ay, false));
        break;
    case 2: {
        k->n_outer = 2, k->outer[0] = 2, k->outer[1] = s, k->n_inner = 1, k->inner[0] = s + 5;
        k->var_inner = 1;
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
        /* x stored [2, s+5, s]: the row is strided (variant 1: stored [2, s, s+5], contiguous) */
        if (variant) a.stride[0] = s * (s + 5), a.stride[1] = s + 5, a.inner_stride[0] = 1;
        else a.stride[0] = s * (s + 5), a.stride[1] = 1, a.inner_stride[0] = s;
        ay.stride[0] = s * (s + 5), ay.stride[1] = s + 5, ay.inner_stride[0] = 1;
        int m = -1, d = -1, e = -1, sum = -1;
        T(gr_kx_load(k, x, &a, &lx));
        T(reduce(k, GR_KR_MAX, lx));
        T(gr_kx_acc(k, 0, GR_F32, &m));
        T(gr_kx_binary(k, GR_KB_SUB, GR_F32, lx, m, &d));
        T(gr_kx_unary(k, GR_KU_EXP, GR_F32, d, &e));
        T(reduce(k, GR_KR_SUM, e));
        T(gr_kx_acc(k, 1, GR_F32, &sum));
        T(gr_kx_binary(k, GR_KB_DIV, GR_F32, e, sum, &v));
        T(store(k, y, v, &ay, true));
        break;
    }
    case 3: {
        k->n_outer = 2, k->outer[0] = 2 * s, k->outer[1] = 16;
        int table = -1, idx = -1, li = -1;
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F16, "table", &table));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, variant ? GR_I32 : GR_I64, "idx", &idx));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F16, "out", &y));
        access_outer(k, &ay);
        gr_kaccess ai, at;
        gr_kaccess_init(&ai);
        ai.stride[0] = 1;
        ai.offset = s; /* a slice of the index buffer starting at s */
        T(gr_kx_load(k, idx, &ai, &li));
        gr_kaccess_init(&at);
        at.stride[1] = 1;
        at.index = li;
        at.index_stride = 16;
        at.index_extent = s + 100;
        T(gr_kx_load(k, table, &at, &v));
        T(store(k, y, v, &ay, false));
        break;
    }
    case 4: {
        k->n_outer = 2, k->outer[0] = s, k->outer[1] = s;
        gr_dtype t = variant ? GR_F16 : GR_F32;
        T(gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x));
        T(gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y));
        access_outer(k, &a);
        int r = -1, col = -1, diff = -1, ck = -1, keep = -1, ninf = -1;
        T(gr_kx_index(k, 0, &r));
        T(gr_kx_index(k, 1, &col));
        T(gr_kx_binary(k, GR_KB_SUB, GR_I64, col, r, &diff));
        T(gr_kx_const_i(k, GR_I64, 1, &ck));
        T(gr_kx_binary(k, GR_KB_LE, GR_BOOL, diff, ck, &keep));
        T(gr_kx_load(k, x, &a, &lx));
        T(gr_kx_const_f(k, t, -1.0 / 0.0, &ninf));
        T(gr_kx_select(k, t, keep, lx, ninf, &v));
        T(store(k, y, v, &a, false));
        break;
    }
    default: st = GR_ERR_INVALID;
    }
#undef T
    CHECK_OK(st);
    if (st != GR_OK) {
        gr_kernel_destroy(k);
        return NULL;
    }
    return k;
}
#define N_FORMS 5
#define STRUCTURE_HASH_PIN 0xfd2ff4aa0f3ccdacull /* N_FORMS kernels of family(form, 4, 0) */

static char *render_mode(const gr_kernel *k, gr_render_mode mode) {
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_status st = gr_render_cuda_mode(k, mode, &sb);
    CHECK_MSG(st == GR_OK, "render %s: %s", k->name, gr_last_error());
    if (st != GR_OK) {
        gr_sb_free(&sb);
        return NULL;
    }
    return gr_sb_take(&sb);
}

static bool same_str(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* The structure hash names generic modules and keys the CUDA disk cache: pinned, so an
 * optimisation of how it is computed cannot silently change every key. */
/* Every driver entry is resolved by the function its header type names: cuda.h maps
 * cuGraphInstantiate to cuGraphInstantiateWithFlags (3 arguments), while the driver's
 * "cuGraphInstantiate" is the 5-argument _v2 (a crash in gpucheck on the H100). */
static void test_driver_symbols(void) {
    static char syms[128][96];
    int n = gr_cuda_api_symbols(syms, 128);
    CHECK(n > 40 && n <= 128);
    bool flags = false, alloc = false;
    for (int i = 0; i < n && i < 128; i++) {
        CHECK(strcmp(syms[i], "cuGraphInstantiate") != 0);
        CHECK(strstr(syms[i], "_v") == NULL && strstr(syms[i], "_ptsz") == NULL);
        flags |= !strcmp(syms[i], "cuGraphInstantiateWithFlags");
        alloc |= !strcmp(syms[i], "cuMemAlloc");
    }
    CHECK(flags && alloc);
    char out[96];
    gr_cuda_proc_symbol("cuStreamGetCaptureInfo_v3", out, sizeof out);
    CHECK(!strcmp(out, "cuStreamGetCaptureInfo"));
    gr_cuda_proc_symbol("cuMemcpyHtoDAsync_v2_ptsz", out, sizeof out);
    CHECK(!strcmp(out, "cuMemcpyHtoDAsync"));
    gr_cuda_proc_symbol("cuGraphAddNode_v2", out, sizeof out);
    CHECK(!strcmp(out, "cuGraphAddNode"));
    gr_cuda_proc_symbol("cuLaunchKernelEx", out, sizeof out);
    CHECK(!strcmp(out, "cuLaunchKernelEx"));
    gr_cuda_proc_symbol("cuFoo_v", out, sizeof out); /* no digits: not a suffix */
    CHECK(!strcmp(out, "cuFoo_v"));
    gr_cuda_proc_symbol("cuMemAlloc_v2", out, 4);
    CHECK(!strcmp(out, "cuM"));
}

static void test_structure_hash_pinned(void) {
    uint64_t all = 0;
    for (int form = 0; form < N_FORMS; form++) {
        gr_kernel *k = family(form, 4, 0);
        if (!k) continue;
        all = all * 1099511628211ull + gr_kernel_structure_hash(k);
        gr_kernel_destroy(k);
    }
    if (getenv("GRAFT_PRINT_HASH")) printf("structure hashes: 0x%016llx\n", (unsigned long long)all);
    CHECK_MSG(all == STRUCTURE_HASH_PIN, "structure hashes 0x%016llx, pinned 0x%016llx", (unsigned long long)all,
              (unsigned long long)STRUCTURE_HASH_PIN);
}

static void test_generic_same_source(void) {
    for (int form = 0; form < N_FORMS; form++) {
        gr_kernel *k1 = family(form, 4, 0), *k2 = family(form, 37, 0), *kv = family(form, 4, 1);
        if (!k1 || !k2 || !kv) goto next;
        char *g1 = render_mode(k1, GR_RENDER_GENERIC), *g2 = render_mode(k2, GR_RENDER_GENERIC);
        char *gv = render_mode(kv, GR_RENDER_GENERIC);
        char *l1 = render_mode(k1, GR_RENDER_LITERAL), *l2 = render_mode(k2, GR_RENDER_LITERAL);
        /* two sizes, one structure: byte-identical generic source (literal sources differ) */
        CHECK_MSG(same_str(g1, g2), "form %d: generic sources differ between sizes 4 and 37", form);
        CHECK_MSG(l1 && l2 && !same_str(l1, l2), "form %d: literal sources should differ", form);
        CHECK(gr_kernel_structure_hash(k1) == gr_kernel_structure_hash(k2));
        CHECK(gr_kernel_hash(k1) != gr_kernel_hash(k2));
        bool eq = false;
        CHECK_OK(gr_kernel_structure_equal(k1, k2, &eq));
        CHECK(eq);
        /* another structure: another source */
        CHECK_MSG(gv && g1 && !same_str(g1, gv), "form %d: variant renders the same generic source", form);
        CHECK(gr_kernel_structure_hash(k1) != gr_kernel_structure_hash(kv));
        CHECK_OK(gr_kernel_structure_equal(k1, kv, &eq));
        CHECK(!eq);
        /* the kept form devices compare with: same hash as gr_kernel_structure_hash, equal for
         * equal structures only */
        gr_kstructure s1, s2, sv;
        CHECK_OK(gr_kstructure_of(k1, &s1));
        CHECK_OK(gr_kstructure_of(k2, &s2));
        CHECK_OK(gr_kstructure_of(kv, &sv));
        CHECK(s1.hash == gr_kernel_structure_hash(k1) && sv.hash == gr_kernel_structure_hash(kv));
        CHECK(s1.len > 0 && gr_kstructure_equal(&s1, &s2) && gr_kstructure_equal(&s2, &s1));
        CHECK(!gr_kstructure_equal(&s1, &sv));
        if (s1.len > 0) { /* same hash, one word differs: not equal (a collision never shares a template) */
            s2.words[s2.len - 1] ^= 1;
            CHECK(!gr_kstructure_equal(&s1, &s2));
        }
        gr_kstructure_free(&s1);
        gr_kstructure_free(&s2);
        gr_kstructure_free(&sv);
        CHECK(s1.words == NULL && s1.len == 0);
        /* slots: same count, different values, and they carry the sizes */
        gr_kslot_map m1, m2;
        if (gr_kslot_map_build(k1, &m1) == GR_OK) {
            if (gr_kslot_map_build(k2, &m2) == GR_OK) {
                CHECK(m1.n == m2.n && m1.n == gr_kernel_slot_count(k1));
                int64_t v1[64], v2[64];
                if (m1.n <= 64 && m2.n <= 64) {
                    gr_kernel_slot_values(k1, &m1, v1);
                    gr_kernel_slot_values(k2, &m2, v2);
                    CHECK_MSG(memcmp(v1, v2, sizeof(int64_t) * (size_t)m1.n) != 0, "form %d: same slot values", form);
                    /* applying k2's values to a copy of k1 gives k2 (gr_kernel_hash covers all of it) */
                    gr_kernel *c = NULL;
                    CHECK_OK(gr_kernel_clone(k1, &c));
                    if (c) {
                        gr_kernel_apply_slots(c, &m1, v2);
                        CHECK_OK(gr_kernel_verify(c));
                        CHECK_MSG(gr_kernel_hash(c) == gr_kernel_hash(k2), "form %d: apply_slots does not rebuild k2", form);
                        gr_kernel_destroy(c);
                    }
                }
                gr_kslot_map_free(&m2);
            }
            gr_kslot_map_free(&m1);
        }
        if (g1) nvrtc_check(g1, k1->name, 90, &compiled_generic);
        if (gv) nvrtc_check(gv, kv->name, 90, &compiled_generic);
        gr_strfree(g1), gr_strfree(g2), gr_strfree(gv), gr_strfree(l1), gr_strfree(l2);
    next:
        gr_kernel_destroy(k1), gr_kernel_destroy(k2), gr_kernel_destroy(kv);
    }
    /* the kernel name and parameter names are not structure: another name, same code */
    gr_kernel *a = family(0, 5, 0), *b = family(0, 6, 0);
    if (a && b) {
        snprintf(b->name, sizeof b->name, "other_name");
        snprintf(b->params[0].name, sizeof b->params[0].name, "renamed");
        char *ga = render_mode(a, GR_RENDER_GENERIC), *gb = render_mode(b, GR_RENDER_GENERIC);
        CHECK(same_str(ga, gb));
        gr_strfree(ga), gr_strfree(gb);
    }
    /* a dim of size 1 is a size, not structure (its extent is a slot like any other) */
    gr_kernel_destroy(a), gr_kernel_destroy(b);
    a = family(4, 2, 0), b = family(4, 3, 0);
    if (a && b) {
        a->outer[0] = 1; /* [1, 2] against [3, 3]: same code */
        char *ga = render_mode(a, GR_RENDER_GENERIC), *gb = render_mode(b, GR_RENDER_GENERIC);
        CHECK(same_str(ga, gb));
        gr_strfree(ga), gr_strfree(gb);
    }
    gr_kernel_destroy(a), gr_kernel_destroy(b);
}

/* A kernel with more slots than a generic kernel takes: refused with a clear error. */
static void test_generic_too_many_slots(void) {
    gr_kernel *k = NULL;
    int x, y, v = -1, l;
    gr_kaccess a;
    OK_OR_FAIL(gr_kernel_create("many_loads", &k));
    k->n_outer = 8;
    for (int d = 0; d < 8; d++) k->outer[d] = 2;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
    gr_kaccess_init(&a);
    for (int d = 0; d < 8; d++) a.stride[d] = 3 << d; /* not contiguous: every stride is a slot */
    for (int i = 0; i < 60; i++) {
        a.offset = i;
        OK_OR_FAIL(gr_kx_load(k, x, &a, &l));
        if (v < 0) v = l;
        else OK_OR_FAIL(gr_kx_binary(k, GR_KB_ADD, GR_F32, v, l, &v));
    }
    access_outer(k, &a);
    OK_OR_FAIL(store(k, y, v, &a, false));
    CHECK(gr_kernel_slot_count(k) > GR_KMAX_SLOTS);
    gr_strbuf sb;
    gr_sb_init(&sb);
    CHECK_ERR(gr_render_cuda_mode(k, GR_RENDER_GENERIC, &sb), GR_ERR_UNSUPPORTED, "many_loads");
    gr_sb_free(&sb);
fail:
    gr_kernel_destroy(k);
}

static void test_errors(void) {
    gr_kernel *k = NULL;
    int x, y, lx;
    gr_kaccess a;
    OK_OR_FAIL(gr_kernel_create("bad-name", &k));
    k->n_outer = 1;
    k->outer[0] = 8;
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x));
    OK_OR_FAIL(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
    access_outer(k, &a);
    OK_OR_FAIL(gr_kx_load(k, x, &a, &lx));
    OK_OR_FAIL(store(k, y, lx, &a, false));
    gr_strbuf sb;
    gr_sb_init(&sb);
    CHECK_ERR(gr_render_cuda(k, &sb), GR_ERR_INVALID, "not a C identifier");
    gr_sb_free(&sb);

    /* allocation failures while rendering, in either mode: error, no leak */
    snprintf(k->name, sizeof k->name, "alloc_fail");
    for (int mode = GR_RENDER_LITERAL; mode <= GR_RENDER_GENERIC; mode++) {
        long before = gr_debug_live_allocs();
        bool succeeded = false;
        for (long n = 1; n < 200 && !succeeded; n++) {
            gr_sb_init(&sb);
            gr_debug_fail_alloc_after(n);
            gr_status st = gr_render_cuda_mode(k, (gr_render_mode)mode, &sb);
            gr_debug_fail_alloc_after(0);
            CHECK(st == GR_OK || st == GR_ERR_NOMEM);
            succeeded = st == GR_OK;
            gr_sb_free(&sb);
            CHECK(gr_debug_live_allocs() == before);
        }
        CHECK(succeeded);
    }
    CHECK_ERR(gr_render_cuda_mode(k, (gr_render_mode)7, &sb), GR_ERR_INVALID, "bad render mode");

    if (nvrtc_present) {
        void *cubin = NULL;
        size_t n = 0;
        CHECK_ERR(gr_cuda_nvrtc_compile("extern \"C\" __global__ void broken_k() { undefined_thing(); }", "broken_k",
                                        90, false, &cubin, &n),
                  GR_ERR_DEVICE, "broken_k");
        CHECK(strstr(gr_last_error(), "undefined_thing") != NULL);
        CHECK(cubin == NULL);
    }
fail:
    gr_kernel_destroy(k);
}

/* The one error style of the CUDA backend: the call as written from the library
 * function on, the library's error name, and the status class. No GPU needed. */
static CUresult cuStandIn(CUresult r) { return r; } /* a driver call that returns r */
static gr_status cu_fails(CUresult r) {
    GR_CU_CHECK(cuStandIn(r));
    return GR_OK;
}

static void test_error_style(void) {
    CHECK(gr_cuda_status(CUDA_SUCCESS, "cuInit(0)") == GR_OK);
    CHECK_ERR(gr_cuda_status(CUDA_ERROR_OUT_OF_MEMORY, "CU(d)->cuMemAlloc(&p, bytes)"), GR_ERR_NOMEM,
              "out of device memory: cuMemAlloc(&p, bytes): ");
    CHECK_ERR(gr_cuda_status(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "c->cu->cuMemcpyHtoD(p, src, n)"), GR_ERR_HAZARD,
              "cuMemcpyHtoD(p, src, n): ");
    CHECK_ERR(gr_cuda_status(CUDA_ERROR_INVALID_VALUE, "cu->cuGraphLaunch(e->e, cs(s))"), GR_ERR_DEVICE, "cuGraphLaunch(e->e, cs(s)): ");
    CHECK(strncmp(gr_last_error(), "cuGraphLaunch", 13) == 0);
    /* the macro returns the status from the enclosing function */
    CHECK_ERR(cu_fails(CUDA_ERROR_LAUNCH_FAILED), GR_ERR_DEVICE, "cuStandIn(r): ");
    CHECK(cu_fails(CUDA_SUCCESS) == GR_OK);
    CHECK(gr_nvrtc_status(NVRTC_SUCCESS, "nvrtcVersion(&a, &b)") == GR_OK);
    CHECK_ERR(gr_nvrtc_status(NVRTC_ERROR_OUT_OF_MEMORY, "nv->nvrtcCompileProgram(prog, 3, opts)"), GR_ERR_NOMEM,
              "nvrtcCompileProgram(prog, 3, opts): ");
    CHECK_ERR(gr_nvrtc_status(NVRTC_ERROR_INVALID_INPUT, "nv->nvrtcCreateProgram(&p, src, n, 0, NULL, NULL)"), GR_ERR_DEVICE,
              "nvrtcCreateProgram(&p, src, n, 0, NULL, NULL): ");
    CHECK(gr_lt_status(CUBLAS_STATUS_SUCCESS, "lt->cublasLtCreate(&h)") == GR_OK);
    CHECK_ERR(gr_lt_status(CUBLAS_STATUS_ALLOC_FAILED, "lt->cublasLtCreate(&h)"), GR_ERR_NOMEM, "cuBLASLt: cublasLtCreate(&h): ");
    CHECK_ERR(gr_lt_status(CUBLAS_STATUS_NOT_SUPPORTED, "s->lt->cublasLtMatmul(h, d)"), GR_ERR_DEVICE, "cuBLASLt: cublasLtMatmul(h, d): ");
}

/* The fused attention kernels (cuda-attn.c): tensor-core mma.sync and generic, every
 * instantiation, for sm_90 and sm_80 (the oldest with bf16 mma). */
static void test_attention_source(void) {
    int compiled = 0;
    const char *src = gr_cuda_attention_source();
    CHECK(src && strstr(src, "attn_mma_bf16_d64") && strstr(src, "attn_gen_f32") && strstr(src, "mma.sync.aligned.m16n8k16"));
    nvrtc_check(src, "graft_attention", 90, &compiled);
    nvrtc_check(src, "graft_attention_sm80", 80, &compiled);
    if (nvrtc_present) CHECK(compiled == 2);
}

/* The sample kernel (cuda-sample.c), for sm_90 and sm_80. */
static void test_sample_source(void) {
    int compiled = 0;
    const char *src = gr_cuda_sample_source();
    CHECK(src && strstr(src, "graft_sample") && strstr(src, "__umul64hi"));
    nvrtc_check(src, "graft_sample", 90, &compiled);
    nvrtc_check(src, "graft_sample_sm80", 80, &compiled);
    if (nvrtc_present) CHECK(compiled == 2);
}

/* The beam kernels (cuda-beam.c), for sm_90 and sm_80. */
static void test_beam_source(void) {
    int compiled = 0;
    const char *src = gr_cuda_beam_source();
    CHECK(src && strstr(src, "graft_beam_step") && strstr(src, "graft_beam_reorder"));
    nvrtc_check(src, "graft_beam", 90, &compiled);
    nvrtc_check(src, "graft_beam_sm80", 80, &compiled);
    if (nvrtc_present) CHECK(compiled == 2);
}

int main(void) {
    test_error_style();
    const gr_nvrtc_api *nv = NULL;
    nvrtc_present = gr_cuda_load_nvrtc(&nv) == GR_OK;
    if (!nvrtc_present) printf("test_render: NVRTC compilation skipped: NVRTC not found (%s)\n", gr_last_error());
    else printf("test_render: NVRTC %d.%d\n", nv->major, nv->minor);
    for (int i = 0; i < GR_ARRAY_LEN(all_dtypes); i++) {
        test_unary_all(all_dtypes[i]);
        test_binary_all(all_dtypes[i]);
        test_casts(all_dtypes[i]);
    }
    test_gather(GR_I64, GR_F32);
    test_gather(GR_I32, GR_F16);
    test_scatter(GR_F32, false);
    test_scatter(GR_BF16, false);
    test_scatter(GR_F32, true);
    for (int fn = 0; fn < GR_KR_COUNT; fn++) {
        test_reduce((gr_kreduce)fn, GR_F32, false);
        test_reduce((gr_kreduce)fn, GR_I64, true);
    }
    test_reduce(GR_KR_SUM, GR_F16, true);
    test_reduce(GR_KR_MAX, GR_BF16, false);
    test_reduce(GR_KR_SUM, GR_F64, false);
    test_reduce(GR_KR_MAX, GR_BOOL, false);
    test_softmax(GR_F32, false);
    test_softmax(GR_F16, false);
    test_softmax(GR_BF16, true);
    test_layernorm(GR_F32);
    test_layernorm(GR_BF16);
    test_row_cache();
    test_warp_rows();
    test_arg_reduce(GR_F32, true, false);
    test_arg_reduce(GR_F16, false, true);
    test_arg_reduce(GR_BF16, true, true);
    test_arg_reduce(GR_F64, false, false);
    test_arg_reduce(GR_I32, true, false);
    test_arg_reduce(GR_U8, false, true);
    test_random(GR_F32);
    test_random(GR_F64);
    test_indirect_mixed();
    test_attention_source();
    test_sample_source();
    test_beam_source();
    test_structure_hash_pinned();
    test_driver_symbols();
    test_generic_same_source();
    test_generic_too_many_slots();
    test_errors();
    /* older architectures take the portable bf16 rounding path */
    if (nvrtc_present) {
        gr_kernel *k = NULL;
        int x, z, y, lx, v;
        gr_kaccess a;
        if (ew_kernel("bf16_sm75", GR_BF16, GR_BF16, &k, &x, &z, &y) == GR_OK) {
            access_outer(k, &a);
            if (gr_kx_load(k, x, &a, &lx) == GR_OK && gr_kx_unary(k, GR_KU_EXP, GR_BF16, lx, &v) == GR_OK &&
                store(k, y, v, &a, false) == GR_OK)
                render_compile_arch(k, NULL, 75);
            else
                gr_kernel_destroy(k);
        }
    }
    printf("test_render: %d kernels compiled with NVRTC (+ %d in generic mode)\n", compiled, compiled_generic);
    return check_summary("test_render");
}
