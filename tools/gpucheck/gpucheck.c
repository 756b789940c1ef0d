/* gpucheck — run on a GPU machine: every kernel and matmul on the CUDA backend and
 * on the simulator with the same random inputs, normalized error per kernel against
 * a per-op tolerance, a capture/replay bit-identity check, and micro-timings. Every
 * kernel is checked twice: literal code, and shape-generic code (GR_KPREP_GENERIC,
 * "<name>/generic": sizes passed at launch), against the simulator prepared the
 * same way; then kernels of one structure at several sizes share one module.
 * Exits non-zero on any mismatch. Usage: gpucheck [-v] [filter-substring] */
#include "codegen/kir.h"
#include "device/device.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail, verbose;
static const char *filter;

#define DIE_IF(st, what)                                                                        \
    do {                                                                                        \
        if ((st) != GR_OK) {                                                                    \
            printf("FAIL %-34s %s: %s\n", name, what, gr_last_error());                         \
            n_fail++;                                                                           \
            goto done;                                                                          \
        }                                                                                       \
    } while (0)

/* ==== random data ============================================================================ */

static uint64_t rng = 0x1234567;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
    gr_dtype t;
    int64_t n;
    double lo, hi; /* value range */
} buf_spec;

/* An attention mask [.., rows, cols] instead of random values, for the one buf_spec `spec`
 * points at (make_host): 1 causal: 0 where key j <= row i + cols - rows, else lo (the dead
 * value); 2 as 1 with rows 0..2 entirely dead (their softmax runs over dead values); 3 as 1
 * with the last third of the keys dead too (padding); 4 as 1, plus, by mask plane p (the
 * [rows, cols] matrices in order), rows 0..2 dead where p % 3 == 1 and the last third of the
 * keys dead where p % 3 == 2 (per-head masks: a plane read for another shows). */
static struct {
    const buf_spec *spec;
    int pattern;
    int64_t rows, cols;
} mask_pattern;

static void *make_host(const buf_spec *b) {
    size_t bytes = (size_t)b->n * gr_dtype_size(b->t);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return NULL;
    for (int64_t i = 0; i < b->n; i++) {
        double v = b->lo + (b->hi - b->lo) * urand();
        if (b == mask_pattern.spec) {
            int64_t cols = mask_pattern.cols, rows = mask_pattern.rows, j = i % cols, r = i / cols % rows;
            int64_t plane = i / cols / rows;
            bool dead = j > r + cols - rows || (mask_pattern.pattern == 2 && r < 3) ||
                        (mask_pattern.pattern == 3 && j >= cols - cols / 3) ||
                        (mask_pattern.pattern == 4 && plane % 3 == 1 && r < 3) ||
                        (mask_pattern.pattern == 4 && plane % 3 == 2 && j >= cols - cols / 3);
            v = dead ? b->lo : 0.0;
        }
        if (gr_dtype_is_float(b->t)) gr_store_f64(p, b->t, i, v);
        else if (b->t == GR_BOOL) gr_store_i64(p, b->t, i, v > 0.5 * (b->lo + b->hi));
        else gr_store_i64(p, b->t, i, (int64_t)floor(v));
    }
    return p;
}

/* ==== running one kernel on one device ===================================================== */

typedef struct {
    gr_device *dev;
    gr_stream *s;
} devctx;

/* Runs k (or the matmul `call` when k is NULL) with host inputs copied to fresh device
 * buffers; copies every buffer back into outs[i] (malloc'ed). SCALAR/SHAPE args from `scalars`. */
static gr_status run_on(devctx *d, const gr_kernel *k, const gr_libcall *call, int nbuf, const buf_spec *specs,
                        void *const *host, const gr_karg *scalars, int n_args, void **outs, double *launch_us,
                        unsigned flags) {
    void *dbuf[GR_KMAX_PARAMS] = {0};
    void *slots[GR_KMAX_PARAMS] = {0};
    gr_kfunc *f = NULL;
    gr_status st = GR_OK;
    gr_karg args[GR_KMAX_PARAMS];
    memcpy(args, scalars, sizeof(gr_karg) * (size_t)n_args);
    for (int i = 0; i < nbuf && st == GR_OK; i++) {
        size_t bytes = (size_t)specs[i].n * gr_dtype_size(specs[i].t);
        st = gr_dev_alloc(d->dev, GR_MEM_DEVICE, bytes ? bytes : 1, &dbuf[i]);
        if (st == GR_OK && bytes) st = gr_dev_memcpy(d->dev, d->s, dbuf[i], host[i], bytes, GR_COPY_H2D);
        if (st == GR_OK) args[i].ptr = dbuf[i];
        if (st == GR_OK && k && k->params[i].kind == GR_KP_BUFFER_INDIRECT) {
            st = gr_dev_alloc(d->dev, GR_MEM_DEVICE, sizeof(void *), &slots[i]);
            if (st == GR_OK) st = gr_dev_memcpy(d->dev, d->s, slots[i], &dbuf[i], sizeof(void *), GR_COPY_H2D);
            if (st == GR_OK) st = gr_dev_stream_sync(d->dev, d->s);
            args[i].ptr = slots[i];
        }
    }
    if (st == GR_OK && k) st = gr_dev_kernel_prepare_flags(d->dev, k, flags, &f);
    if (st == GR_OK) st = gr_dev_stream_sync(d->dev, d->s);
    double t0 = gr_now_us();
    if (st == GR_OK) st = k ? gr_dev_kernel_launch(d->dev, d->s, f, args, n_args) : gr_dev_libcall(d->dev, d->s, call, args, n_args);
    if (st == GR_OK) st = gr_dev_stream_sync(d->dev, d->s);
    if (launch_us) *launch_us = gr_now_us() - t0;
    for (int i = 0; i < nbuf && st == GR_OK; i++) {
        size_t bytes = (size_t)specs[i].n * gr_dtype_size(specs[i].t);
        outs[i] = malloc(bytes ? bytes : 1);
        if (bytes) st = gr_dev_memcpy(d->dev, d->s, outs[i], dbuf[i], bytes, GR_COPY_D2H);
    }
    if (st == GR_OK) st = gr_dev_stream_sync(d->dev, d->s);
    if (f) gr_dev_kernel_release(d->dev, f);
    for (int i = 0; i < nbuf; i++) {
        gr_dev_free(d->dev, dbuf[i]);
        gr_dev_free(d->dev, slots[i]);
    }
    return st;
}

static double rel_err(const void *out, const void *ref, gr_dtype t, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = gr_load_f64(out, t, i), b = gr_load_f64(ref, t, i);
        if (isnan(a) && isnan(b)) continue;
        if (isinf(a) && a == b) continue;
        num += (a - b) * (a - b);
        den += b * b;
    }
    if (isnan(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Runs on both devices (kernels prepared with `flags`) and compares the written buffers. */
static void compare_flags(devctx *cu, devctx *sim, const char *name, const gr_kernel *k, const gr_libcall *call, int nbuf,
                          const buf_spec *specs, const gr_karg *scalars, int n_args, const bool *written, double tol,
                          unsigned flags) {
    void *host[GR_KMAX_PARAMS] = {0}, *oc[GR_KMAX_PARAMS] = {0}, *os[GR_KMAX_PARAMS] = {0};
    for (int i = 0; i < nbuf; i++) host[i] = make_host(&specs[i]);
    gr_status st = run_on(cu, k, call, nbuf, specs, host, scalars, n_args, oc, NULL, flags);
    DIE_IF(st, "cuda");
    st = run_on(sim, k, call, nbuf, specs, host, scalars, n_args, os, NULL, flags);
    DIE_IF(st, "sim");
    double worst = 0;
    for (int i = 0; i < nbuf; i++) {
        if (!written[i]) continue;
        double e = rel_err(oc[i], os[i], specs[i].t, specs[i].n);
        if (!(e <= worst)) worst = e;
    }
    bool ok = worst <= tol;
    printf("%s %-34s err %.3e  tol %.0e\n", ok ? "PASS" : "FAIL", name, worst, tol);
    if (ok) n_pass++;
    else n_fail++;
done:
    for (int i = 0; i < nbuf; i++) {
        free(host[i]);
        free(oc[i]);
        free(os[i]);
    }
}

/* Literal code, then (kernels) generic code. */
static void compare(devctx *cu, devctx *sim, const char *name, const gr_kernel *k, const gr_libcall *call, int nbuf,
                    const buf_spec *specs, const gr_karg *scalars, int n_args, const bool *written, double tol) {
    if (filter && !strstr(name, filter)) return;
    compare_flags(cu, sim, name, k, call, nbuf, specs, scalars, n_args, written, tol, 0);
    if (!k) return;
    char gname[128];
    snprintf(gname, sizeof gname, "%s/generic", name);
    compare_flags(cu, sim, gname, k, call, nbuf, specs, scalars, n_args, written, tol, GR_KPREP_GENERIC);
}

/* ==== kernels ================================================================================= */

static void kstore(gr_kernel *k, int param, int value, const gr_kaccess *a, bool over_inner) {
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_STORE;
    s.value = value;
    s.param = param;
    s.over_inner = over_inner;
    s.access = *a;
    k->params[param].written = true;
    gr_kernel_add_stage(k, &s);
}

static void kreduce(gr_kernel *k, gr_kreduce fn, int value) {
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_REDUCE;
    s.value = value;
    s.reduce = fn;
    s.param = -1;
    gr_kaccess_init(&s.access);
    gr_kernel_add_stage(k, &s);
}

#define unary_names gr_kunary_names
static const char *const binary_names[] = {"add", "sub", "mul", "div", "pow", "min", "max", "eq",
                                                      "lt", "le", "gt", "ge", "and", "or", "mod"};
_Static_assert(sizeof binary_names / sizeof binary_names[0] == GR_KB_COUNT, "a name per binary function");

static double dtype_tol(gr_dtype t, bool transcendental) {
    if (t == GR_F16) return 1e-3;
    if (t == GR_BF16) return 1e-2;
    if (t == GR_F32) return transcendental ? 1e-5 : 1e-6;
    if (t == GR_F64) return transcendental ? 1e-12 : 1e-15;
    return 0;
}

static void check_elementwise(devctx *cu, devctx *sim, gr_dtype t, bool binary, int fn) {
    char name[96];
    const int64_t N = 100003; /* odd: exercises the vector tail */
    snprintf(name, sizeof name, "%s_%s_%s", binary ? "binary" : "unary", binary ? binary_names[fn] : unary_names[fn],
             gr_dtype_name(t));
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    for (char *p = k->name; *p; p++)
        if (*p == '-') *p = '_';
    k->n_outer = 1;
    k->outer[0] = N;
    int x, z, y, n, lx, lz, v;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 1;
    bool pred = binary ? (fn >= GR_KB_EQ && fn <= GR_KB_OR) : (fn == GR_KU_ISNAN || fn == GR_KU_NOT);
    gr_dtype ot = pred ? GR_BOOL : t;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "z", &z);
    gr_kernel_add_param(k, GR_KP_BUFFER, ot, "y", &y);
    gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n);
    k->n_points_param = n;
    gr_kx_load(k, x, &a, &lx);
    gr_kx_load(k, z, &a, &lz);
    if (binary) gr_kx_binary(k, (gr_kbinary)fn, ot, lx, lz, &v);
    else gr_kx_unary(k, (gr_kunary)fn, ot, lx, &v);
    kstore(k, y, v, &a, false);
    bool positive = !binary && (fn == GR_KU_LOG || fn == GR_KU_SQRT || fn == GR_KU_RSQRT || fn == GR_KU_RECIP);
    positive = positive || (binary && fn == GR_KB_POW);
    bool is_int = !gr_dtype_is_float(t);
    buf_spec specs[3] = {{t, N, positive ? 0.1 : -3, 3}, {t, N, binary && (fn == GR_KB_DIV || fn == GR_KB_MOD) ? 0.5 : -3, 3}, {ot, N, 0, 0}};
    if (is_int) {
        specs[0].lo = positive ? 1 : -50, specs[0].hi = 50;
        specs[1].lo = binary && (fn == GR_KB_DIV || fn == GR_KB_MOD || fn == GR_KB_POW) ? 1 : -50;
        specs[1].hi = binary && fn == GR_KB_POW ? 4 : 50;
    }
    if (binary && fn == GR_KB_POW && !is_int) specs[1].lo = -2, specs[1].hi = 2;
    gr_karg sc[4];
    memset(sc, 0, sizeof sc);
    sc[3].i = N;
    bool written[3] = {false, false, true};
    bool trans = binary ? fn == GR_KB_POW || fn == GR_KB_MOD || fn == GR_KB_DIV
                        : !(fn == GR_KU_NEG || fn == GR_KU_ABS || fn == GR_KU_RELU || fn == GR_KU_FLOOR ||
                            fn == GR_KU_CEIL || fn == GR_KU_ISNAN || fn == GR_KU_NOT);
    compare(cu, sim, name, k, NULL, 3, specs, sc, 4, written, pred ? 0 : dtype_tol(t, trans));
    gr_kernel_destroy(k);
}

/* softmax over rows of [rows, cols] (3 stages), dtype t */
static gr_kernel *softmax_kernel(const char *name, gr_dtype t, int64_t rows, int64_t cols) {
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = rows;
    k->n_inner = 1;
    k->inner[0] = cols;
    int x, y, lx, m, d, e, s, q;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = cols;
    a.inner_stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y);
    gr_kx_load(k, x, &a, &lx);
    kreduce(k, GR_KR_MAX, lx);
    gr_kx_acc(k, 0, GR_F32, &m);
    gr_kx_binary(k, GR_KB_SUB, GR_F32, lx, m, &d);
    gr_kx_unary(k, GR_KU_EXP, GR_F32, d, &e);
    kreduce(k, GR_KR_SUM, e);
    gr_kx_acc(k, 1, GR_F32, &s);
    gr_kx_binary(k, GR_KB_DIV, t, e, s, &q);
    kstore(k, y, q, &a, true);
    return k;
}

static void check_softmax(devctx *cu, devctx *sim, gr_dtype t, int64_t rows, int64_t cols) {
    char name[96];
    snprintf(name, sizeof name, "softmax_%s_%lldx%lld", gr_dtype_name(t), (long long)rows, (long long)cols);
    gr_kernel *k = softmax_kernel(name, t, rows, cols);
    if (!k) return;
    buf_spec specs[2] = {{t, rows * cols, -4, 4}, {t, rows * cols, 0, 0}};
    gr_karg sc[2];
    memset(sc, 0, sizeof sc);
    bool written[2] = {false, true};
    compare(cu, sim, name, k, NULL, 2, specs, sc, 2, written, t == GR_F32 ? 1e-5 : dtype_tol(t, true));
    gr_kernel_destroy(k);
}

/* A layer norm with its residual add, as GPT-2's: h = x + res (stored), mean and variance of
 * h over the row, y = (h - mean) * rsqrt(var + eps) * g + b. x and res are row-cached (two
 * stages read them). gather 1: res row (rows - 1 - o) through a gather index of one value along
 * the row (an embedding's rows, fused: the vector fill, the row's start from the index); gather
 * 2: res point (row o, point cols - 1 - r) through an index that moves along the row (the scalar
 * fill of the warp-row form). offset: x read and h written from element `offset` on (x and h
 * hold rows * cols + offset elements): rows off 16-byte alignment, so the warp-row form takes its
 * scalar fill and stores for rows of whole chunks. gb_offset: g and b read from element
 * `gb_offset` on (the store's vector loads of them take their scalar fallback). */
static gr_kernel *layer_norm_kernel(const char *name, gr_dtype t, int64_t rows, int64_t cols, int gather, int64_t offset,
                                    int64_t gb_offset) {
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = rows;
    k->n_inner = 1;
    k->inner[0] = cols;
    int x, r, g, b, h, y, lx, lr, hs, a0, inv_n, mean, d, d2, a1, var, eps, ve, rs, nm, lg, lb, o1, o2;
    gr_kaccess a, ar, aw;
    gr_kaccess_init(&a);
    a.stride[0] = cols;
    a.inner_stride[0] = 1;
    gr_kaccess_init(&aw);
    aw.inner_stride[0] = 1;
    ar = a;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "res", &r);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "g", &g);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "b", &b);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "h", &h);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y);
    if (gather == 1) {
        int o0, last, idx;
        gr_kx_index(k, 0, &o0);
        gr_kx_const_i(k, GR_I64, rows - 1, &last);
        gr_kx_binary(k, GR_KB_SUB, GR_I64, last, o0, &idx);
        ar.stride[0] = 0;
        ar.index = idx;
        ar.index_stride = cols;
        ar.index_extent = rows;
    } else if (gather == 2) {
        int r0, last, idx;
        gr_kx_index(k, GR_KIDX_INNER, &r0);
        gr_kx_const_i(k, GR_I64, cols - 1, &last);
        gr_kx_binary(k, GR_KB_SUB, GR_I64, last, r0, &idx);
        ar.inner_stride[0] = 0;
        ar.index = idx;
        ar.index_stride = 1;
        ar.index_extent = cols;
    }
    aw.offset = gb_offset;
    gr_kaccess ax = a;
    ax.offset = offset;
    gr_kx_load(k, x, &ax, &lx);
    gr_kx_load(k, r, &ar, &lr);
    gr_kx_binary(k, GR_KB_ADD, t, lx, lr, &hs); /* rounded to t, as the model's residual stream */
    kreduce(k, GR_KR_SUM, hs);
    gr_kx_acc(k, 0, GR_F32, &a0);
    gr_kx_const_f(k, GR_F32, 1.0 / (double)cols, &inv_n);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, a0, inv_n, &mean);
    gr_kx_binary(k, GR_KB_SUB, GR_F32, hs, mean, &d);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, d, d, &d2);
    kreduce(k, GR_KR_SUM, d2);
    gr_kx_acc(k, 1, GR_F32, &a1);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, a1, inv_n, &var);
    gr_kx_const_f(k, GR_F32, 1e-5, &eps);
    gr_kx_binary(k, GR_KB_ADD, GR_F32, var, eps, &ve);
    gr_kx_unary(k, GR_KU_RSQRT, GR_F32, ve, &rs);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, d, rs, &nm);
    gr_kx_load(k, g, &aw, &lg);
    gr_kx_load(k, b, &aw, &lb);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, nm, lg, &o1);
    gr_kx_binary(k, GR_KB_ADD, t, o1, lb, &o2);
    kstore(k, h, hs, &ax, true);
    kstore(k, y, o2, &a, true);
    if (gr_kernel_verify(k) != GR_OK) {
        printf("FAIL %-34s kernel: %s\n", name, gr_last_error());
        n_fail++;
        gr_kernel_destroy(k);
        return NULL;
    }
    return k;
}

static void check_layer_norm(devctx *cu, devctx *sim, gr_dtype t, int64_t rows, int64_t cols, int gather, int64_t offset,
                             int64_t gb_offset) {
    char name[96];
    snprintf(name, sizeof name, "layer_norm_%s_%lldx%lld%s%s%s", gr_dtype_name(t), (long long)rows, (long long)cols,
             gather == 1 ? "_gather_row" : gather == 2 ? "_gather_point" : "", offset ? "_offset" : "",
             gb_offset ? "_gb_offset" : "");
    if (filter && !strstr(name, filter)) return;
    gr_kernel *k = layer_norm_kernel(name, t, rows, cols, gather, offset, gb_offset);
    if (!k) return;
    buf_spec specs[6] = {{t, rows * cols + offset, -3, 3}, {t, rows * cols, -1, 1}, {t, cols + gb_offset, 0.5, 1.5},
                         {t, cols + gb_offset, -0.5, 0.5}, {t, rows * cols + offset, 0, 0}, {t, rows * cols, 0, 0}};
    gr_karg sc[6];
    memset(sc, 0, sizeof sc);
    bool written[6] = {false, false, false, false, true, true};
    compare(cu, sim, name, k, NULL, 6, specs, sc, 6, written, t == GR_F32 ? 1e-5 : dtype_tol(t, true));
    gr_kernel_destroy(k);
}

/* The warp-row form takes any grid and any block of whole warps (up to 256 threads) with the
 * same bits: a row's warps, the rows a block and the turns of the grid differ, the order of
 * every reduction does not (render-cuda.c, open_warp_walk). Each kernel runs with the launch
 * dims' choice, then on devices created with the test hook GRAFT_CUDA_WARP_ROW_LAUNCH (other
 * blocks, grids that leave blocks several turns and warps without a row), literal and generic,
 * and every written buffer must match the first run to the bit. */
static void check_warp_row_launches(devctx *cu) {
    static const char *const launches[] = {"32x1", "64x3", "96x5", "128x7", "160x2", "224x3", "256x1", "256x9"};
    const char *name = "warp_row_launches";
    if (filter && !strstr(name, filter)) return;
    struct {
        const char *label;
        gr_kernel *k;
        int nbuf;
        buf_spec specs[6];
        bool written[6];
    } cases[6];
    memset(cases, 0, sizeof cases);
    int nc = 0;
    const int64_t R = 37;
    const struct { gr_dtype t; int64_t cols; int gather; } lns[] = {
        {GR_BF16, 768, 0}, {GR_F32, 768, 0}, {GR_BF16, 700, 1}, {GR_BF16, 768, 2}};
    for (int i = 0; i < 4; i++) {
        gr_dtype t = lns[i].t;
        int64_t C = lns[i].cols;
        cases[nc].label = i == 0 ? "ln_bf16_768" : i == 1 ? "ln_f32_768" : i == 2 ? "ln_bf16_700_gather_row" : "ln_bf16_768_gather_point";
        cases[nc].k = layer_norm_kernel(cases[nc].label, t, R, C, lns[i].gather, 0, 0);
        cases[nc].nbuf = 6;
        const buf_spec sp[6] = {{t, R * C, -3, 3}, {t, R * C, -1, 1}, {t, C, 0.5, 1.5}, {t, C, -0.5, 0.5}, {t, R * C, 0, 0}, {t, R * C, 0, 0}};
        memcpy(cases[nc].specs, sp, sizeof sp);
        cases[nc].written[4] = cases[nc].written[5] = true;
        nc++;
    }
    const struct { gr_dtype t; int64_t cols; } sms[] = {{GR_F32, 1000}, {GR_F16, 31}};
    for (int i = 0; i < 2; i++) {
        cases[nc].label = i == 0 ? "softmax_f32_1000" : "softmax_f16_31";
        cases[nc].k = softmax_kernel(cases[nc].label, sms[i].t, R, sms[i].cols);
        cases[nc].nbuf = 2;
        const buf_spec sp[2] = {{sms[i].t, R * sms[i].cols, -4, 4}, {sms[i].t, R * sms[i].cols, 0, 0}};
        memcpy(cases[nc].specs, sp, sizeof sp);
        cases[nc].written[1] = true;
        nc++;
    }
    gr_karg sc[6];
    memset(sc, 0, sizeof sc);
    void *host[6][6] = {{0}}, *ref[6][2][6] = {{{0}}};
    for (int c = 0; c < nc; c++)
        for (int b = 0; b < cases[c].nbuf; b++) host[c][b] = make_host(&cases[c].specs[b]);
    for (int c = 0; c < nc; c++)
        for (int mode = 0; mode < 2; mode++) {
            if (!cases[c].k) continue;
            gr_status st = run_on(cu, cases[c].k, NULL, cases[c].nbuf, cases[c].specs, host[c], sc, cases[c].nbuf, ref[c][mode],
                                  NULL, mode ? GR_KPREP_GENERIC : 0);
            DIE_IF(st, "default launch");
        }
    for (size_t l = 0; l < sizeof launches / sizeof launches[0]; l++) {
        setenv("GRAFT_CUDA_WARP_ROW_LAUNCH", launches[l], 1);
        devctx d = {0};
        gr_status st = gr_device_cuda_create(NULL, &d.dev);
        unsetenv("GRAFT_CUDA_WARP_ROW_LAUNCH");
        if (st == GR_OK) st = gr_dev_stream_create(d.dev, &d.s);
        if (st != GR_OK) {
            printf("FAIL %-34s device with launch %s: %s\n", name, launches[l], gr_last_error());
            n_fail++;
            if (d.dev) gr_device_destroy(d.dev);
            continue;
        }
        for (int c = 0; c < nc; c++)
            for (int mode = 0; mode < 2; mode++) {
                if (!cases[c].k) continue;
                void *out[6] = {0};
                st = run_on(&d, cases[c].k, NULL, cases[c].nbuf, cases[c].specs, host[c], sc, cases[c].nbuf, out, NULL,
                            mode ? GR_KPREP_GENERIC : 0);
                bool same = st == GR_OK;
                for (int b = 0; b < cases[c].nbuf && same; b++)
                    if (cases[c].written[b])
                        same = memcmp(out[b], ref[c][mode][b], (size_t)cases[c].specs[b].n * gr_dtype_size(cases[c].specs[b].t)) == 0;
                printf("%s warp_row %-24s %-8s launch %-6s %s\n", same ? "PASS" : "FAIL", cases[c].label,
                       mode ? "generic" : "literal", launches[l], st == GR_OK ? (same ? "same bits" : "bits differ") : gr_last_error());
                if (same) n_pass++;
                else n_fail++;
                for (int b = 0; b < 6; b++) free(out[b]);
            }
        gr_dev_stream_destroy(d.dev, d.s);
        gr_device_destroy(d.dev);
    }
done:
    for (int c = 0; c < nc; c++) {
        for (int b = 0; b < 6; b++) {
            free(host[c][b]);
            free(ref[c][0][b]);
            free(ref[c][1][b]);
        }
        gr_kernel_destroy(cases[c].k);
    }
}

static void check_reduce(devctx *cu, devctx *sim, gr_kreduce fn, gr_dtype t, bool transposed) {
    static const char *const rn[] = {"sum", "max", "min", "prod"};
    char name[96];
    snprintf(name, sizeof name, "reduce_%s_%s%s", rn[fn], gr_dtype_name(t), transposed ? "_t" : "");
    const int64_t R = 37, C = fn == GR_KR_PROD ? 20 : 3000;
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    k->n_outer = 1;
    k->outer[0] = R;
    k->n_inner = 1;
    k->inner[0] = C;
    int x, y, lx, acc;
    gr_kaccess ax, ay;
    gr_kaccess_init(&ax);
    ax.stride[0] = transposed ? 1 : C;
    ax.inner_stride[0] = transposed ? R : 1;
    gr_kaccess_init(&ay);
    ay.stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y);
    gr_kx_load(k, x, &ax, &lx);
    kreduce(k, fn, lx);
    gr_kx_acc(k, 0, t, &acc);
    kstore(k, y, acc, &ay, false);
    double lo = fn == GR_KR_PROD ? 0.8 : -3, hi = fn == GR_KR_PROD ? 1.2 : 3;
    if (!gr_dtype_is_float(t)) lo = fn == GR_KR_PROD ? 1 : -100, hi = fn == GR_KR_PROD ? 3 : 100;
    buf_spec specs[2] = {{t, R * C, lo, hi}, {t, R, 0, 0}};
    gr_karg sc[2];
    memset(sc, 0, sizeof sc);
    bool written[2] = {false, true};
    double tol = t == GR_F32 ? 1e-5 : dtype_tol(t, true);
    compare(cu, sim, name, k, NULL, 2, specs, sc, 2, written, tol);
    gr_kernel_destroy(k);
}

/* embedding gather with negative indices (wrap), i64 or i32 indices */
static void check_gather(devctx *cu, devctx *sim, gr_dtype it, gr_dtype t) {
    char name[96];
    snprintf(name, sizeof name, "gather_%s_%s", gr_dtype_name(it), gr_dtype_name(t));
    const int64_t V = 1000, D = 96, B = 257;
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    k->n_outer = 2;
    k->outer[0] = B;
    k->outer[1] = D;
    int table, idx, out, li, lt;
    gr_kaccess a, ai, at;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "table", &table);
    gr_kernel_add_param(k, GR_KP_BUFFER, it, "idx", &idx);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "out", &out);
    gr_kaccess_init(&a);
    a.stride[0] = D;
    a.stride[1] = 1;
    gr_kaccess_init(&ai);
    ai.stride[0] = 1;
    gr_kx_load(k, idx, &ai, &li);
    gr_kaccess_init(&at);
    at.stride[1] = 1;
    at.index = li;
    at.index_stride = D;
    at.index_extent = V;
    gr_kx_load(k, table, &at, &lt);
    kstore(k, out, lt, &a, false);
    buf_spec specs[3] = {{t, V * D, -1, 1}, {it, B, -(double)V, (double)V}, {t, B * D, 0, 0}};
    gr_karg sc[3];
    memset(sc, 0, sizeof sc);
    bool written[3] = {false, false, true};
    compare(cu, sim, name, k, NULL, 3, specs, sc, 3, written, 0);
    gr_kernel_destroy(k);
}

/* The KV-cache append as passes/lower-movement.c lowers cache_write (the decode rewrite's, in
 * place): cache[b, h, kv - 1, d] = new[b, h, 0, d] over new's [B, H, 1, D] points, a scatter
 * store. The whole cache buffer is compared: positions other than kv - 1 keep their (random,
 * identical) contents on both devices. kv: a fixed position (kv_lo) or the last one through
 * wrapping (kv 0: position -1). */
static void check_cache_write(devctx *cu, devctx *sim, gr_dtype t, int64_t B, int64_t H, int64_t M, int64_t D, int64_t kv) {
    char name[96];
    snprintf(name, sizeof name, "cache_write_%s_b%lld_kv%lld", gr_dtype_name(t), (long long)B, (long long)kv);
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    k->n_outer = 4;
    k->outer[0] = B, k->outer[1] = H, k->outer[2] = 1, k->outer[3] = D;
    int nw, kvp, cache, ln, lk, m1, pos;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "new", &nw);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "kv", &kvp);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "cache", &cache);
    gr_kaccess an, ak, ac;
    gr_kaccess_init(&an);
    an.stride[0] = H * D, an.stride[1] = D, an.stride[3] = 1;
    gr_kaccess_init(&ak);
    gr_kx_load(k, nw, &an, &ln);
    gr_kx_load(k, kvp, &ak, &lk);
    gr_kx_const_i(k, GR_I64, -1, &m1);
    gr_kx_binary(k, GR_KB_ADD, GR_I64, lk, m1, &pos);
    gr_kaccess_init(&ac);
    ac.stride[0] = H * M * D, ac.stride[1] = M * D, ac.stride[3] = 1;
    ac.index = pos, ac.index_stride = D, ac.index_extent = M;
    kstore(k, cache, ln, &ac, false);
    buf_spec specs[3] = {{t, B * H * D, -1, 1}, {GR_I64, 1, (double)kv, (double)kv + 0.5}, {t, B * H * M * D, -1, 1}};
    gr_karg sc[3];
    memset(sc, 0, sizeof sc);
    bool written[3] = {false, false, true};
    compare(cu, sim, name, k, NULL, 3, specs, sc, 3, written, 0);
    gr_kernel_destroy(k);
}

/* arg_max / arg_min over a long axis as passes/lower-reduce.c lowers it (axes of 4096+ points):
 * kernel 1 over [rows, chunks] x [512] (each chunk's extreme cm and its first / last index ci,
 * the points past the row reading its last element through a clamped gather and never a hit),
 * kernel 2 over [rows] x [chunks] (the row's index from the chunks'). Both are compared with
 * the simulator (indices exactly; bf16 rows have many ties), kernel 2 on random partials with
 * ties too. */
#define ARG_CHUNK 512
static gr_kernel *arg_stage_kernel(const char *name, gr_dtype t, int64_t rows, int64_t len, bool is_max, bool last, bool combine) {
    gr_dtype ct = (t == GR_F16 || t == GR_BF16) ? GR_F32 : t;
    int64_t chunks = (len + ARG_CHUNK - 1) / ARG_CHUNK;
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    int px, pm, pi, py, xl, il = -1, m, hit, nan, miss, cand, res, g, r, base, cc, posn, lastc, idx, nc, valid = -1;
    gr_kaccess a;
    gr_kaccess_init(&a);
    if (!combine) {
        k->n_outer = 2, k->outer[0] = rows, k->outer[1] = chunks;
        k->n_inner = 1, k->inner[0] = ARG_CHUNK;
        gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &px);
        gr_kernel_add_param(k, GR_KP_BUFFER, ct, "cm", &pm);
        gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "ci", &pi);
        gr_kx_index(k, 1, &g);
        gr_kx_index(k, GR_KIDX_INNER, &r);
        gr_kx_const_i(k, GR_I64, ARG_CHUNK, &cc);
        gr_kx_binary(k, GR_KB_MUL, GR_I64, g, cc, &base);
        gr_kx_binary(k, GR_KB_ADD, GR_I64, base, r, &posn);
        gr_kx_const_i(k, GR_I64, len - 1, &lastc);
        gr_kx_binary(k, GR_KB_MIN, GR_I64, posn, lastc, &idx);
        gr_kx_const_i(k, GR_I64, len, &nc);
        gr_kx_binary(k, GR_KB_LT, GR_BOOL, posn, nc, &valid);
        a.stride[0] = len, a.index = idx, a.index_stride = 1, a.index_extent = len;
        gr_kx_load(k, px, &a, &xl);
        if (ct != t) gr_kx_cast(k, ct, xl, &xl);
    } else {
        k->n_outer = 1, k->outer[0] = rows;
        k->n_inner = 1, k->inner[0] = chunks;
        gr_kernel_add_param(k, GR_KP_BUFFER, ct, "cm", &pm);
        gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "ci", &pi);
        gr_kernel_add_param(k, GR_KP_BUFFER, GR_I64, "y", &py);
        a.stride[0] = chunks, a.inner_stride[0] = 1;
        gr_kx_load(k, pm, &a, &xl);
        gr_kx_load(k, pi, &a, &il);
        posn = il;
    }
    kreduce(k, is_max ? GR_KR_MAX : GR_KR_MIN, xl);
    gr_kx_acc(k, 0, ct, &m);
    gr_kx_binary(k, GR_KB_EQ, GR_BOOL, xl, m, &hit);
    if (gr_dtype_is_float(ct)) {
        gr_kx_unary(k, GR_KU_ISNAN, GR_BOOL, xl, &nan);
        gr_kx_binary(k, GR_KB_OR, GR_BOOL, hit, nan, &hit);
    }
    if (valid >= 0) gr_kx_binary(k, GR_KB_AND, GR_BOOL, hit, valid, &hit);
    gr_kx_const_i(k, GR_I64, last ? -1 : len, &miss);
    gr_kx_select(k, GR_I64, hit, posn, miss, &cand);
    kreduce(k, last ? GR_KR_MAX : GR_KR_MIN, cand);
    gr_kx_acc(k, 1, GR_I64, &res);
    gr_kaccess o;
    gr_kaccess_init(&o);
    if (!combine) {
        o.stride[0] = chunks, o.stride[1] = 1;
        kstore(k, pm, m, &o, false);
        kstore(k, pi, res, &o, false);
    } else {
        o.stride[0] = 1;
        kstore(k, py, res, &o, false);
    }
    if (gr_kernel_verify(k) != GR_OK) {
        printf("FAIL %-34s verify: %s\n", name, gr_last_error());
        n_fail++;
        gr_kernel_destroy(k);
        return NULL;
    }
    return k;
}

static void check_arg_split(devctx *cu, devctx *sim, gr_dtype t, int64_t rows, int64_t len, bool is_max, bool last) {
    char name[96];
    gr_dtype ct = (t == GR_F16 || t == GR_BF16) ? GR_F32 : t;
    int64_t chunks = (len + ARG_CHUNK - 1) / ARG_CHUNK;
    for (int combine = 0; combine < 2; combine++) {
        snprintf(name, sizeof name, "arg_%s%s_%s_%lldx%lld_%s", is_max ? "max" : "min", last ? "_last" : "", gr_dtype_name(t),
                 (long long)rows, (long long)len, combine ? "combine" : "chunks");
        gr_kernel *k = arg_stage_kernel(name, t, rows, len, is_max, last, combine);
        if (!k) return;
        buf_spec s1[3] = {{t, rows * len, -4, 4}, {ct, rows * chunks, 0, 0}, {GR_I64, rows * chunks, 0, 0}};
        /* partials with ties: maxima among few values, indices anywhere in the row */
        buf_spec s2[3] = {{ct, rows * chunks, 0, 4}, {GR_I64, rows * chunks, 0, (double)len}, {GR_I64, rows, 0, 0}};
        if (combine && gr_dtype_is_float(ct)) s2[0].lo = 0, s2[0].hi = 4;
        gr_karg sc[3];
        memset(sc, 0, sizeof sc);
        bool w1[3] = {false, true, true}, w2[3] = {false, false, true};
        compare(cu, sim, name, k, NULL, 3, combine ? s2 : s1, sc, 3, combine ? w2 : w1, 0);
        gr_kernel_destroy(k);
    }
}

typedef gr_status (*launch_fn)(devctx *d, void *user);
static double time_us(devctx *d, launch_fn fn, void *user); /* below, with the other timings */

typedef struct {
    gr_kfunc *f[2];
    gr_karg args[2][3];
    int n;
} arg_bench;

static gr_status run_arg(devctx *d, void *user) {
    arg_bench *b = user;
    for (int i = 0; i < b->n; i++) GR_TRY(gr_dev_kernel_launch(d->dev, d->s, b->f[i], b->args[i], 3));
    return GR_OK;
}

/* The greedy token of a decode step: arg_max over GPT-2's vocabulary (rows 1 and 8, f32), the
 * one-block-per-row kernel the lowering made before (the two stages over the whole row, as
 * tests/test_render.c builds it) against the two split kernels. */
static void time_arg_max(devctx *cu, int64_t rows, int64_t len) {
    const char *name = "arg_max_timing";
    if (filter && !strstr(name, filter)) return;
    int64_t chunks = (len + ARG_CHUNK - 1) / ARG_CHUNK;
    void *x = NULL, *cm = NULL, *ci = NULL, *y = NULL;
    arg_bench one, split;
    memset(&one, 0, sizeof one);
    memset(&split, 0, sizeof split);
    gr_kernel *k1 = arg_stage_kernel("argt_chunks", GR_F32, rows, len, true, false, false);
    gr_kernel *k2 = arg_stage_kernel("argt_combine", GR_F32, rows, len, true, false, true);
    /* the one-block form: kernel 2's structure over the row itself (x as "cm", indices r) */
    gr_kernel *k0 = NULL;
    if (gr_kernel_create("argt_oneblock", &k0) == GR_OK) {
        int px, py, xl, m, hit, nan, idx, miss, cand, res;
        k0->n_outer = 1, k0->outer[0] = rows, k0->n_inner = 1, k0->inner[0] = len;
        gr_kernel_add_param(k0, GR_KP_BUFFER, GR_F32, "x", &px);
        gr_kernel_add_param(k0, GR_KP_BUFFER, GR_I64, "y", &py);
        gr_kaccess a, o;
        gr_kaccess_init(&a);
        a.stride[0] = len, a.inner_stride[0] = 1;
        gr_kx_load(k0, px, &a, &xl);
        kreduce(k0, GR_KR_MAX, xl);
        gr_kx_acc(k0, 0, GR_F32, &m);
        gr_kx_binary(k0, GR_KB_EQ, GR_BOOL, xl, m, &hit);
        gr_kx_unary(k0, GR_KU_ISNAN, GR_BOOL, xl, &nan);
        gr_kx_binary(k0, GR_KB_OR, GR_BOOL, hit, nan, &hit);
        gr_kx_index(k0, GR_KIDX_INNER, &idx);
        gr_kx_const_i(k0, GR_I64, len, &miss);
        gr_kx_select(k0, GR_I64, hit, idx, miss, &cand);
        kreduce(k0, GR_KR_MIN, cand);
        gr_kx_acc(k0, 1, GR_I64, &res);
        gr_kaccess_init(&o);
        o.stride[0] = 1;
        kstore(k0, py, res, &o, false);
    }
    if (!k0 || !k1 || !k2) goto done;
    DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, (size_t)(rows * len) * 4, &x), "alloc");
    DIE_IF(gr_dev_memset(cu->dev, cu->s, x, 0, (size_t)(rows * len) * 4), "memset");
    DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, (size_t)(rows * chunks) * 4, &cm), "alloc");
    DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, (size_t)(rows * chunks) * 8, &ci), "alloc");
    DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, (size_t)rows * 8, &y), "alloc");
    DIE_IF(gr_dev_kernel_prepare_flags(cu->dev, k0, 0, &one.f[0]), "prepare");
    one.n = 1;
    one.args[0][0].ptr = x, one.args[0][1].ptr = y;
    DIE_IF(gr_dev_kernel_prepare_flags(cu->dev, k1, 0, &split.f[0]), "prepare");
    DIE_IF(gr_dev_kernel_prepare_flags(cu->dev, k2, 0, &split.f[1]), "prepare");
    split.n = 2;
    split.args[0][0].ptr = x, split.args[0][1].ptr = cm, split.args[0][2].ptr = ci;
    split.args[1][0].ptr = cm, split.args[1][1].ptr = ci, split.args[1][2].ptr = y;
    double t_one = time_us(cu, run_arg, &one), t_split = time_us(cu, run_arg, &split);
    printf("TIME arg_max_f32_%lldx%lld  one block per row %8.2f us  split (2 kernels) %8.2f us  %.1fx\n", (long long)rows,
           (long long)len, t_one, t_split, t_one / t_split);
done:
    for (int i = 0; i < 2; i++) {
        if (one.f[i]) gr_dev_kernel_release(cu->dev, one.f[i]);
        if (split.f[i]) gr_dev_kernel_release(cu->dev, split.f[i]);
    }
    gr_dev_free(cu->dev, x);
    gr_dev_free(cu->dev, cm);
    gr_dev_free(cu->dev, ci);
    gr_dev_free(cu->dev, y);
    gr_kernel_destroy(k0);
    gr_kernel_destroy(k1);
    gr_kernel_destroy(k2);
}

/* The kernel passes/fuse-move.c makes of Llama's RoPE (q projection [B, S, H, D] transposed,
 * rotate_half as a select over two clamped gathers of it, times cos / sin): out[b, h, s, d] =
 * x[b, s, h, d] * cos[s, d] + (d < D/2 ? -x[b, s, h, d + D/2] : x[b, s, h, d - D/2]) * sin[s, d]. */
static void check_rope(devctx *cu, devctx *sim, gr_dtype t) {
    char name[96];
    snprintf(name, sizeof name, "rope_fused_%s", gr_dtype_name(t));
    const int64_t B = 2, H = 4, S = 33, D = 64, h = D / 2;
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    k->n_outer = 4;
    k->outer[0] = B, k->outer[1] = H, k->outer[2] = S, k->outer[3] = D;
    int x, c, sn, out, lx, lc, ls, i3, cst, lo, hi, xl, xh, ng, cond, rot, m1, m2, sum;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "cos", &c);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "sin", &sn);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "out", &out);
    gr_kaccess ax, acs, ao;
    gr_kaccess_init(&ax); /* x[b, s, h, d] walked as [b, h, s, d] */
    ax.stride[0] = S * H * D, ax.stride[1] = D, ax.stride[2] = H * D, ax.stride[3] = 1;
    gr_kaccess_init(&acs);
    acs.stride[2] = D, acs.stride[3] = 1;
    gr_kaccess_init(&ao);
    ao.stride[0] = H * S * D, ao.stride[1] = S * D, ao.stride[2] = D, ao.stride[3] = 1;
    gr_kx_load(k, x, &ax, &lx);
    gr_kx_load(k, c, &acs, &lc);
    gr_kx_binary(k, GR_KB_MUL, t, lx, lc, &m1);
    gr_kx_index(k, 3, &i3);
    gr_kx_const_i(k, GR_I64, h, &cst);
    gr_kx_binary(k, GR_KB_SUB, GR_I64, i3, cst, &lo);
    gr_kx_const_i(k, GR_I64, 0, &cst);
    gr_kx_binary(k, GR_KB_MAX, GR_I64, lo, cst, &lo); /* d - h, clamped into the first half */
    gr_kaccess g = ax;
    g.stride[3] = 0, g.index = lo, g.index_stride = 1, g.index_extent = h;
    gr_kx_load(k, x, &g, &xl);
    gr_kx_const_i(k, GR_I64, h - 1, &cst);
    gr_kx_binary(k, GR_KB_MIN, GR_I64, i3, cst, &hi); /* d, clamped into the first half, read at + h */
    g.index = hi, g.offset = h;
    gr_kx_load(k, x, &g, &xh);
    gr_kx_unary(k, GR_KU_NEG, t, xh, &ng);
    gr_kx_const_i(k, GR_I64, h, &cst);
    gr_kx_binary(k, GR_KB_LT, GR_BOOL, i3, cst, &cond);
    gr_kx_select(k, t, cond, ng, xl, &rot);
    gr_kx_load(k, sn, &acs, &ls);
    gr_kx_binary(k, GR_KB_MUL, t, rot, ls, &m2);
    gr_kx_binary(k, GR_KB_ADD, t, m1, m2, &sum);
    kstore(k, out, sum, &ao, false);
    buf_spec specs[4] = {{t, B * S * H * D, -2, 2}, {t, S * D, -1, 1}, {t, S * D, -1, 1}, {t, B * H * S * D, 0, 0}};
    gr_karg sc[4];
    memset(sc, 0, sizeof sc);
    bool written[4] = {false, false, false, true};
    compare(cu, sim, name, k, NULL, 4, specs, sc, 4, written, dtype_tol(t, false));
    gr_kernel_destroy(k);
}

/* RoPE as the Llama export's bf16 plan has it after fuse-move.c (render-cuda.c's row-group
 * loop, issue 15): out[b,h,s,d] = bf16(f32(x[b,s,h,d]) * cos[s,d] + f32(rotate_half(x)) *
 * sin[s,d]), cos/sin f32, rotate_half by two clamped gathers and a select; x read from element
 * x_off of its buffer (1: off the vector alignment). */
static gr_kernel *rope_plan_kernel(const char *name, int64_t B, int64_t H, int64_t S, int64_t D, int64_t x_off) {
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    const gr_dtype t = GR_BF16;
    const int64_t h = D / 2;
    k->n_outer = 4;
    k->outer[0] = B, k->outer[1] = H, k->outer[2] = S, k->outer[3] = D;
    int x, c, sn, out, lx, lc, ls, i3, cst, lo, hi, xl, xh, ng, cond, rot, m1, m2, sum, xf, rf, y;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "cos", &c);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "sin", &sn);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "out", &out);
    gr_kaccess ax, acs, ao;
    gr_kaccess_init(&ax);
    ax.offset = x_off;
    ax.stride[0] = S * H * D, ax.stride[1] = D, ax.stride[2] = H * D, ax.stride[3] = 1;
    gr_kaccess_init(&acs);
    acs.stride[2] = D, acs.stride[3] = 1;
    gr_kaccess_init(&ao);
    ao.stride[0] = H * S * D, ao.stride[1] = S * D, ao.stride[2] = D, ao.stride[3] = 1;
    gr_kx_load(k, x, &ax, &lx);
    gr_kx_cast(k, GR_F32, lx, &xf);
    gr_kx_load(k, c, &acs, &lc);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, xf, lc, &m1);
    gr_kx_index(k, 3, &i3);
    gr_kx_const_i(k, GR_I64, h, &cst);
    gr_kx_binary(k, GR_KB_SUB, GR_I64, i3, cst, &lo);
    gr_kx_const_i(k, GR_I64, 0, &cst);
    gr_kx_binary(k, GR_KB_MAX, GR_I64, lo, cst, &lo);
    gr_kaccess g = ax;
    g.stride[3] = 0, g.index = lo, g.index_stride = 1, g.index_extent = h;
    gr_kx_load(k, x, &g, &xl);
    gr_kx_const_i(k, GR_I64, h - 1, &cst);
    gr_kx_binary(k, GR_KB_MIN, GR_I64, i3, cst, &hi);
    g.index = hi, g.offset = x_off + h;
    gr_kx_load(k, x, &g, &xh);
    gr_kx_unary(k, GR_KU_NEG, t, xh, &ng);
    gr_kx_const_i(k, GR_I64, h, &cst);
    gr_kx_binary(k, GR_KB_LT, GR_BOOL, i3, cst, &cond);
    gr_kx_select(k, t, cond, ng, xl, &rot);
    gr_kx_cast(k, GR_F32, rot, &rf);
    gr_kx_load(k, sn, &acs, &ls);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, rf, ls, &m2);
    gr_kx_binary(k, GR_KB_ADD, GR_F32, m1, m2, &sum);
    gr_kx_cast(k, t, sum, &y);
    kstore(k, out, y, &ao, false);
    return k;
}

/* The row-group loop against the simulator: head dims whose rows hold whole groups (64, 24: one
 * vector per row load), a misaligned x (the group's scalar fill), head dim 20 (no groups: the
 * old loop and its scalar tail). bf16's tolerance: NVRTC contracts x * cos + r * sin into an FMA. */
static void check_rope_plan(devctx *cu, devctx *sim, int64_t B, int64_t H, int64_t S, int64_t D, int64_t x_off) {
    char name[96];
    snprintf(name, sizeof name, "rope_plan_%lldx%lldx%lldx%lld%s", (long long)B, (long long)H, (long long)S, (long long)D,
             x_off ? "_misaligned" : "");
    gr_kernel *k = rope_plan_kernel(name, B, H, S, D, x_off);
    if (!k) return;
    buf_spec specs[4] = {{GR_BF16, B * S * H * D + x_off, -2, 2}, {GR_F32, S * D, -1, 1}, {GR_F32, S * D, -1, 1},
                         {GR_BF16, B * H * S * D, 0, 0}};
    gr_karg sc[4];
    memset(sc, 0, sizeof sc);
    bool written[4] = {false, false, false, true};
    compare(cu, sim, name, k, NULL, 4, specs, sc, 4, written, dtype_tol(GR_BF16, false));
    gr_kernel_destroy(k);
}

static void check_random(devctx *cu, devctx *sim, gr_dtype rt) {
    char name[96];
    snprintf(name, sizeof name, "random_%s", gr_dtype_name(rt));
    const int64_t N = 1 << 16;
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    k->n_outer = 1;
    k->outer[0] = N;
    int y, lin, r;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER, rt, "y", &y);
    gr_kx_index(k, GR_KIDX_LINEAR, &lin);
    gr_kexpr e;
    memset(&e, 0, sizeof e);
    e.op = GR_KX_RANDOM;
    e.dtype = rt;
    e.a = lin;
    e.b = e.c = -1;
    e.param = -1;
    e.i = 42;
    gr_kaccess_init(&e.access);
    gr_kernel_add_expr(k, &e, &r);
    kstore(k, y, r, &a, false);
    buf_spec specs[1] = {{rt, N, 0, 0}};
    gr_karg sc[1];
    memset(sc, 0, sizeof sc);
    bool written[1] = {true};
    compare(cu, sim, name, k, NULL, 1, specs, sc, 1, written, 0);
    gr_kernel_destroy(k);
}

/* scaled softmax with indirect (PI) buffers and a host scalar */
static void check_indirect(devctx *cu, devctx *sim) {
    const char *name = "indirect_scale_f32";
    const int64_t N = 4096;
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return;
    k->n_outer = 1;
    k->outer[0] = N;
    int x, y, sc_p, lx, ps, m;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER_INDIRECT, GR_F32, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER_INDIRECT, GR_F32, "y", &y);
    gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F64, "scale", &sc_p);
    gr_kx_load(k, x, &a, &lx);
    gr_kx_param(k, sc_p, &ps);
    gr_kx_binary(k, GR_KB_MUL, GR_F32, lx, ps, &m);
    kstore(k, y, m, &a, false);
    buf_spec specs[2] = {{GR_F32, N, -1, 1}, {GR_F32, N, 0, 0}};
    gr_karg sc[3];
    memset(sc, 0, sizeof sc);
    sc[2].f = 0.3;
    bool written[2] = {false, true};
    compare(cu, sim, name, k, NULL, 2, specs, sc, 3, written, 1e-6);
    gr_kernel_destroy(k);
}

/* res: a residual in C's layout (kir.h: cuBLASLt's C with beta = 1) */
static void check_matmul_res(devctx *cu, devctx *sim, gr_dtype t, int64_t m, int64_t n, int64_t kk, int64_t batch, bool ta,
                             bool tb, gr_bias_kind bias, gr_epilogue epi, bool res) {
    gr_libcall c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "mm_%s_%lldx%lldx%lld_b%lld%s%s%s%s%s%s", gr_dtype_name(t), (long long)m, (long long)n,
             (long long)kk, (long long)batch, ta ? "_ta" : "", tb ? "_tb" : "",
             bias == GR_BIAS_ROW ? "_brow" : bias == GR_BIAS_FULL ? "_bfull" : "",
             epi == GR_EPI_NONE ? "" : "_", epi == GR_EPI_NONE ? "" : gr_epilogue_name(epi), res ? "_residual" : "");
    c.residual = res;
    c.kind = GR_LIB_MATMUL;
    c.dtype = t;
    c.m = m;
    c.n = n;
    c.k = kk;
    c.batch = batch;
    c.trans_a = ta;
    c.trans_b = tb;
    c.lda = ta ? m : kk;
    c.ldb = tb ? kk : n;
    c.ldc = n;
    c.batch_stride_a = m * kk;
    c.batch_stride_b = kk * n;
    c.batch_stride_c = m * n;
    c.alpha = 1.0;
    c.bias = bias;
    c.batch_stride_bias = bias == GR_BIAS_ROW ? n : m * n;
    c.epilogue = epi;
    int64_t nbias = bias == GR_BIAS_NONE ? 1 : c.batch_stride_bias * batch;
    buf_spec specs[5] = {{t, batch * m * kk, -1, 1}, {t, batch * kk * n, -1, 1}, {t, batch * m * n, 0, 0}, {t, nbias, -1, 1},
                         {t, batch * m * n, -1, 1}};
    gr_karg sc[5];
    memset(sc, 0, sizeof sc);
    bool written[5] = {false, false, true, false, false};
    double tol = t == GR_F32 ? 1e-5 : t == GR_F16 ? 1e-3 : 1e-2;
    /* cuBLASLt's GELU epilogue against libcall.c's tanh in f64: its tanh need not be libm's
     * (a faster approximation in f32), measured here */
    if (epi == GR_EPI_GELU_TANH && t == GR_F32) tol = 1e-3;
    /* every matmul call has its five args (kir.h), the bias and residual ones read only as set */
    compare(cu, sim, c.name, NULL, &c, 5, specs, sc, 5, written, tol);
}

static void check_matmul(devctx *cu, devctx *sim, gr_dtype t, int64_t m, int64_t n, int64_t kk, int64_t batch, bool ta,
                         bool tb, gr_bias_kind bias, gr_epilogue epi) {
    check_matmul_res(cu, sim, t, m, n, kk, batch, ta, tb, bias, epi, false);
}

/* ==== fused attention ========================================================================= */

/* mask: 0 none, 1 padding [B,1,1,Sk] (f32), 2 full [B,1,Sq,Sk] (the inputs' dtype); 3.. full
 * [B,1,Sq,Sk] f32 with dead tiles the kernel skips (buf_spec patterns): 3 causal with -FLT_MAX
 * (Hugging Face's finfo.min), 4 causal with -inf, 5 -FLT_MAX with dead rows, 6 -inf causal and
 * padding; 7 = 5 in the inputs' dtype; 8 per-head [B,H,Sq,Sk] f32 -FLT_MAX, its planes
 * different (pattern 4); 9 the same over [1,H,Sq,Sk] (broadcast over the batch) */
static gr_libcall attention_call(gr_dtype t, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D,
                                 bool causal, int mask) {
    gr_libcall c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "attn_%s_b%lld_h%lld/%lld_q%lld_k%lld_d%lld%s%s", gr_dtype_name(t), (long long)B,
             (long long)H, (long long)Hkv, (long long)Sq, (long long)Sk, (long long)D, causal ? "_causal" : "",
             mask == 1 ? "_padmask" : mask == 2 ? "_fullmask" : mask >= 3 ? "_deadtiles" : "");
    if (mask >= 3) snprintf(c.name + strlen(c.name), sizeof c.name - strlen(c.name), "%d", mask);
    c.kind = GR_LIB_ATTENTION;
    c.dtype = t;
    c.batch = B;
    c.heads = H;
    c.kv_heads = Hkv;
    c.seq_q = Sq;
    c.seq_k = Sk;
    c.head_dim = D;
    c.head_dim_v = D;
    c.alpha = 1.0 / sqrt((double)D);
    c.causal = causal;
    c.has_mask = mask != 0;
    c.mask_dtype = mask == 1 || (mask >= 3 && mask <= 6) || mask >= 8 ? GR_F32 : t;
    if (mask == 1) c.mask_stride[0] = Sk, c.mask_stride[3] = 1;
    if (mask >= 2) c.mask_stride[0] = Sq * Sk, c.mask_stride[2] = Sk, c.mask_stride[3] = 1;
    if (mask == 8) c.mask_stride[0] = H * Sq * Sk, c.mask_stride[1] = Sq * Sk;
    if (mask == 9) c.mask_stride[0] = 0, c.mask_stride[1] = Sq * Sk;
    gr_libcall_attention_dense(&c);
    return c;
}

/* key_len >= 0: the call reads the number of visible keys from device memory (kir.h
 * key_len_arg), here key_len (which may exceed Sk: clamped) */
static void check_attention_kl(devctx *cu, devctx *sim, gr_dtype t, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk,
                               int64_t D, bool causal, int mask, int64_t key_len) {
    gr_libcall c = attention_call(t, B, H, Hkv, Sq, Sk, D, causal, mask);
    if (key_len >= 0) {
        c.key_len_arg = true;
        snprintf(c.name + strlen(c.name), sizeof c.name - strlen(c.name), "_klen%lld", (long long)key_len);
    }
    int64_t nmask = mask == 1 ? B * Sk : mask == 8 ? B * H * Sq * Sk : mask == 9 ? H * Sq * Sk : mask >= 2 ? B * Sq * Sk : 1;
    buf_spec specs[6] = {{t, B * H * Sq * D, -1, 1},  {t, B * Hkv * Sk * D, -1, 1}, {t, B * H * Sq * D, 0, 0},
                         {t, B * Hkv * Sk * D, -1, 1}, {c.mask_dtype, nmask, -4, 0}, {GR_I64, 1, (double)key_len, (double)key_len}};
    if (mask >= 3) {
        static const int pattern[10] = {0, 0, 0, 1, 1, 2, 3, 2, 4, 4};
        specs[4].lo = mask == 4 || mask == 6 ? -INFINITY : t == GR_F16 && mask == 7 ? -65504.0 : -3.4028234663852886e38;
        specs[4].hi = specs[4].lo;
        mask_pattern.spec = &specs[4], mask_pattern.pattern = pattern[mask], mask_pattern.rows = Sq, mask_pattern.cols = Sk;
    }
    gr_karg sc[6];
    memset(sc, 0, sizeof sc);
    bool written[6] = {false, false, true, false, false, false};
    /* f32: exact FMA and expf against the double reference; f16/bf16: P is rounded to the
     * inputs' type before P V (as FlashAttention does), and so is the output */
    double tol = t == GR_F32 ? 2e-5 : t == GR_F16 ? 3e-3 : 2e-2;
    int n = key_len >= 0 ? 6 : 5;
    compare(cu, sim, c.name, NULL, &c, n, specs, sc, n, written, tol);
    mask_pattern.spec = NULL;
}

static void check_attention(devctx *cu, devctx *sim, gr_dtype t, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk,
                            int64_t D, bool causal, int mask) {
    check_attention_kl(cu, sim, t, B, H, Hkv, Sq, Sk, D, causal, mask, -1);
}

/* The mask tile table (cuda-attn.c) under capture: a masked attention captured while the
 * context's table is large enough (the graph uses the table), one captured while it is too
 * small (no allocation in a capture: that graph runs without skipping), then an eager call
 * that grows the table (the first graph's buffer must stay alive), then both graphs replayed
 * against eager runs of the same calls. bf16, f32 masks with dead tiles; the large call is a
 * padding mask [B,1,1,S] over B = 128 (a table of 1.2 MB, more than the 1 MiB first taken). */
static void check_attention_capture(devctx *cu) {
    const char *name = "attn_capture_mask_table";
    if (filter && !strstr(name, filter)) return;
    gr_device *dev = cu->dev;
    gr_libcall small = attention_call(GR_BF16, 2, 4, 4, 200, 200, 64, false, 8);
    gr_libcall big = attention_call(GR_BF16, 128, 1, 1, 2048, 2048, 64, false, 1);
    gr_libcall *calls[2] = {&small, &big};
    void *buf[2][5] = {{NULL}};
    void *host[2][5] = {{NULL}}, *eager[2] = {NULL}, *replay[2] = {NULL};
    size_t bytes[2][5];
    gr_dgraph *g[2] = {NULL};
    gr_dexec *e[2] = {NULL};
    gr_status st = GR_OK;
    for (int c = 0; c < 2; c++) {
        const gr_libcall *k = calls[c];
        int64_t nq = k->batch * k->heads * k->seq_q * k->head_dim, nkv = k->batch * k->kv_heads * k->seq_k * k->head_dim;
        int64_t nm = c == 0 ? k->batch * k->heads * k->seq_q * k->seq_k : k->batch * k->seq_k;
        buf_spec specs[5] = {{GR_BF16, nq, -1, 1}, {GR_BF16, nkv, -1, 1}, {GR_BF16, nq, 0, 0}, {GR_BF16, nkv, -1, 1},
                             {GR_F32, nm, -3.4028234663852886e38, -3.4028234663852886e38}};
        /* small: per-head planes (pattern 4); big: a padding mask, the last third of the keys dead
         * (pattern 3 over a single row) */
        mask_pattern.spec = &specs[4], mask_pattern.pattern = c == 0 ? 4 : 3;
        mask_pattern.rows = c == 0 ? k->seq_q : 1, mask_pattern.cols = k->seq_k;
        for (int i = 0; i < 5; i++) {
            bytes[c][i] = (size_t)specs[i].n * gr_dtype_size(specs[i].t);
            host[c][i] = make_host(&specs[i]);
            if (!host[c][i]) st = GR_ERR_NOMEM;
            if (st == GR_OK) st = gr_dev_alloc(dev, GR_MEM_DEVICE, bytes[c][i], &buf[c][i]);
            if (st == GR_OK) st = gr_dev_memcpy(dev, cu->s, buf[c][i], host[c][i], bytes[c][i], GR_COPY_H2D);
        }
        mask_pattern.spec = NULL;
        eager[c] = malloc(bytes[c][2]);
        replay[c] = malloc(bytes[c][2]);
        if (!eager[c] || !replay[c]) st = GR_ERR_NOMEM;
    }
    DIE_IF(st, "setup");
    gr_karg a[2][5];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 5; i++) a[c][i] = (gr_karg){.ptr = buf[c][i]};
    DIE_IF(gr_dev_libcall(dev, cu->s, &small, a[0], 5), "eager small");
    DIE_IF(gr_dev_memcpy(dev, cu->s, eager[0], buf[0][2], bytes[0][2], GR_COPY_D2H), "d2h");
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    for (int c = 0; c < 2; c++) {
        DIE_IF(gr_dev_capture_begin(dev, cu->s), "capture_begin");
        st = gr_dev_libcall(dev, cu->s, calls[c], a[c], 5);
        gr_status st2 = gr_dev_capture_end(dev, cu->s, &g[c]);
        DIE_IF(st, "captured attention");
        DIE_IF(st2, "capture_end");
        DIE_IF(gr_dev_graph_instantiate(dev, g[c], &e[c]), "instantiate");
    }
    DIE_IF(gr_dev_libcall(dev, cu->s, &big, a[1], 5), "eager big (grows the table)");
    DIE_IF(gr_dev_memcpy(dev, cu->s, eager[1], buf[1][2], bytes[1][2], GR_COPY_D2H), "d2h");
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    for (int c = 0; c < 2; c++) {
        DIE_IF(gr_dev_memset(dev, cu->s, buf[c][2], 0, bytes[c][2]), "clear output");
        DIE_IF(gr_dev_graph_launch(dev, e[c], cu->s), "graph launch");
        DIE_IF(gr_dev_memcpy(dev, cu->s, replay[c], buf[c][2], bytes[c][2], GR_COPY_D2H), "d2h");
        DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    }
    for (int c = 0; c < 2; c++) {
        /* small: the same kernels on the same table contents, bit for bit; big: skipping
         * against no skipping, equal as numbers (a skipped tile adds exactly 0) */
        size_t n = bytes[c][2] / 2;
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double x = gr_load_f64(eager[c], GR_BF16, (int64_t)i), y = gr_load_f64(replay[c], GR_BF16, (int64_t)i);
            double d = fabs(x - y);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        }
        bool ok = c == 0 ? !memcmp(eager[c], replay[c], bytes[c][2]) : worst == 0;
        printf("%s %-34s %s: replay vs eager max |diff| %g%s\n", ok ? "PASS" : "FAIL", name, c ? "big (no table in capture)" : "small",
               worst, c == 0 ? (ok ? ", bits equal" : ", bits differ") : "");
        ok ? n_pass++ : n_fail++;
    }
done:
    for (int c = 0; c < 2; c++) {
        if (e[c]) gr_dev_exec_destroy(dev, e[c]);
        if (g[c]) gr_dev_graph_destroy(dev, g[c]);
        for (int i = 0; i < 5; i++) {
            if (buf[c][i]) gr_dev_free(dev, buf[c][i]);
            free(host[c][i]);
        }
        free(eager[c]);
        free(replay[c]);
    }
}

/* Mask groups (gr_libcall.mask_group, passes/share.c): a group's first call classifies the
 * mask into the group's table and a later call of the group reads it without classifying.
 * Against lone calls, bit for bit: the first call; a later call on the same mask (reused,
 * counted); a later call on another mask of the same geometry (not reused: classified
 * again); and a graph holding the first call and a reusing one, replayed after an eager first
 * call of the same group classified the other mask into the group's table. */
static void check_attention_share(devctx *cu) {
    const char *name = "attn_share_mask_group";
    if (filter && !strstr(name, filter)) return;
    gr_device *dev = cu->dev;
    gr_libcall call = attention_call(GR_BF16, 2, 4, 4, 200, 200, 64, false, 8);
    int64_t nq = call.batch * call.heads * call.seq_q * call.head_dim, nm = call.batch * call.heads * call.seq_q * call.seq_k;
    buf_spec specs[6] = {{GR_BF16, nq, -1, 1}, {GR_BF16, nq, -1, 1}, {GR_BF16, nq, 0, 0}, {GR_BF16, nq, -1, 1},
                         {GR_F32, nm, -3.4028234663852886e38, -3.4028234663852886e38},
                         {GR_F32, nm, -INFINITY, -INFINITY}};
    void *buf[6] = {NULL}, *host[6] = {NULL};
    size_t bytes[6];
    size_t ob = (size_t)nq * 2;
    unsigned char *ref[2] = {malloc(ob), malloc(ob)}, *got = malloc(ob);
    gr_dgraph *g = NULL;
    gr_dexec *e = NULL;
    gr_status st = ref[0] && ref[1] && got ? GR_OK : GR_ERR_NOMEM;
    for (int i = 0; i < 6 && st == GR_OK; i++) {
        mask_pattern.spec = i >= 4 ? &specs[i] : NULL;
        mask_pattern.pattern = i == 4 ? 4 : 2, mask_pattern.rows = call.seq_q, mask_pattern.cols = call.seq_k;
        bytes[i] = (size_t)specs[i].n * gr_dtype_size(specs[i].t);
        host[i] = make_host(&specs[i]);
        if (!host[i]) st = GR_ERR_NOMEM;
        if (st == GR_OK) st = gr_dev_alloc(dev, GR_MEM_DEVICE, bytes[i], &buf[i]);
        if (st == GR_OK) st = gr_dev_memcpy(dev, cu->s, buf[i], host[i], bytes[i], GR_COPY_H2D);
    }
    mask_pattern.spec = NULL;
    DIE_IF(st, "setup");
    gr_karg a[2][5]; /* on the first mask, on the second */
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i < 4; i++) a[m][i] = (gr_karg){.ptr = buf[i]};
        a[m][4] = (gr_karg){.ptr = buf[4 + m]};
    }
    gr_libcall lone = call, first = call, later = call;
    first.mask_group = later.mask_group = 1;
    first.mask_group_first = true;
    /* one call, then its output into `into` */
#define SHARE_RUN(c, args, into)                                                                    \
    do {                                                                                            \
        DIE_IF(gr_dev_memset(dev, cu->s, buf[2], 0, ob), "clear output");                          \
        DIE_IF(gr_dev_libcall(dev, cu->s, &(c), (args), 5), "attention");                          \
        DIE_IF(gr_dev_memcpy(dev, cu->s, (into), buf[2], ob, GR_COPY_D2H), "d2h");                  \
        DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");                                             \
    } while (0)
    SHARE_RUN(lone, a[0], ref[0]);
    SHARE_RUN(lone, a[1], ref[1]);
    gr_dev_kstats k0, k1;
    gr_dev_kernel_stats(dev, &k0);
    struct {
        const char *what;
        gr_libcall *c;
        int mask;
    } seq[3] = {{"first call", &first, 0}, {"later call, same mask (reused)", &later, 0},
                {"later call, other mask (classified again)", &later, 1}};
    for (int i = 0; i < 3; i++) {
        SHARE_RUN(*seq[i].c, a[seq[i].mask], got);
        bool ok = !memcmp(got, ref[seq[i].mask], ob);
        printf("%s %-34s %s: %s\n", ok ? "PASS" : "FAIL", name, seq[i].what, ok ? "bits equal to a lone call" : "bits differ");
        ok ? n_pass++ : n_fail++;
    }
    gr_dev_kernel_stats(dev, &k1);
    bool counted = k1.mask_tables_reused - k0.mask_tables_reused == 1;
    printf("%s %-34s reuses counted: %ld (expected 1)\n", counted ? "PASS" : "FAIL", name,
           k1.mask_tables_reused - k0.mask_tables_reused);
    counted ? n_pass++ : n_fail++;
    /* captured: the first call on mask 0, then a reusing call; the graph's later call must read
     * what its own first call wrote, whatever eager calls of the group did in between */
    DIE_IF(gr_dev_capture_begin(dev, cu->s), "capture_begin");
    st = gr_dev_libcall(dev, cu->s, &first, a[0], 5);
    if (st == GR_OK) st = gr_dev_libcall(dev, cu->s, &later, a[0], 5);
    gr_status st2 = gr_dev_capture_end(dev, cu->s, &g);
    DIE_IF(st, "captured attention");
    DIE_IF(st2, "capture_end");
    DIE_IF(gr_dev_graph_instantiate(dev, g, &e), "instantiate");
    SHARE_RUN(first, a[1], got); /* the group's table now holds mask 1's classes */
    DIE_IF(gr_dev_memset(dev, cu->s, buf[2], 0, ob), "clear output");
    DIE_IF(gr_dev_graph_launch(dev, e, cu->s), "graph launch");
    DIE_IF(gr_dev_memcpy(dev, cu->s, got, buf[2], ob, GR_COPY_D2H), "d2h");
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    bool ok = !memcmp(got, ref[0], ob);
    printf("%s %-34s graph (first + reusing call) replayed after an eager first call on another mask: %s\n",
           ok ? "PASS" : "FAIL", name, ok ? "bits equal to a lone call" : "bits differ");
    ok ? n_pass++ : n_fail++;
#undef SHARE_RUN
done:
    if (e) gr_dev_exec_destroy(dev, e);
    if (g) gr_dev_graph_destroy(dev, g);
    for (int i = 0; i < 6; i++) {
        if (buf[i]) gr_dev_free(dev, buf[i]);
        free(host[i]);
    }
    free(ref[0]);
    free(ref[1]);
    free(got);
}

/* Time of `fn` per call: events around 20 launches after 3 warm-ups. */
typedef gr_status (*launch_fn)(devctx *d, void *user);
static double time_us(devctx *d, launch_fn fn, void *user) {
    gr_event *e0 = NULL, *e1 = NULL;
    double us = -1;
    if (gr_dev_event_create(d->dev, &e0) != GR_OK || gr_dev_event_create(d->dev, &e1) != GR_OK) goto done;
    for (int i = 0; i < 3; i++)
        if (fn(d, user) != GR_OK) goto done;
    if (gr_dev_event_record(d->dev, e0, d->s) != GR_OK) goto done;
    for (int i = 0; i < 20; i++)
        if (fn(d, user) != GR_OK) goto done;
    if (gr_dev_event_record(d->dev, e1, d->s) != GR_OK || gr_dev_stream_sync(d->dev, d->s) != GR_OK) goto done;
    if (gr_dev_event_elapsed_us(d->dev, e0, e1, &us) == GR_OK) us /= 20;
done:
    if (us < 0) printf("timing failed: %s\n", gr_last_error());
    if (e0) gr_dev_event_destroy(d->dev, e0);
    if (e1) gr_dev_event_destroy(d->dev, e1);
    return us;
}

/* ==== matmul + bias + tanh-GELU: the epilogue against the unfused kernels ======================
 * What passes/epilogue.c changes on the GPU: the unfused plan runs cuBLASLt with its bias
 * epilogue into C, then an elementwise tanh-GELU kernel over C (in f32, rounded to C's dtype);
 * the fused plan is one cuBLASLt call with GELU_BIAS. Both on the GPU, compared (normalized L2)
 * and timed at GPT-2's c_fc size (batch 8 x seq 512 rows, 768 -> 3072). */
typedef struct {
    gr_libcall fused, plain;
    gr_kfunc *gelu;
    int64_t points;
    void *a, *b, *bias, *c_fused, *c_pre, *c_unfused;
} gelu_bench;

static gr_status gelu_run_fused(devctx *d, void *user) {
    gelu_bench *b = user;
    gr_karg a[4] = {{.ptr = b->a}, {.ptr = b->b}, {.ptr = b->c_fused}, {.ptr = b->bias}};
    return gr_dev_libcall(d->dev, d->s, &b->fused, a, 4);
}

static gr_status gelu_run_matmul(devctx *d, void *user) {
    gelu_bench *b = user;
    gr_karg a[4] = {{.ptr = b->a}, {.ptr = b->b}, {.ptr = b->c_pre}, {.ptr = b->bias}};
    return gr_dev_libcall(d->dev, d->s, &b->plain, a, 4);
}

static gr_status gelu_run_kernel(devctx *d, void *user) {
    gelu_bench *b = user;
    gr_karg g[3] = {{.ptr = b->c_pre}, {.ptr = b->c_unfused}, {.i = b->points}};
    return gr_dev_kernel_launch(d->dev, d->s, b->gelu, g, 3);
}

static gr_status gelu_run_unfused(devctx *d, void *user) {
    GR_TRY(gelu_run_matmul(d, user));
    return gelu_run_kernel(d, user);
}

/* y = gelu_tanh(x) over n points, in f32 (as lowering computes a half gelu op) */
static gr_kernel *gelu_tanh_kernel(gr_dtype t, int64_t n) {
    gr_kernel *k;
    if (gr_kernel_create("check_gelu_tanh", &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = n;
    int x, y, np, lx, v;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, t, "y", &y);
    gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &np);
    k->n_points_param = np;
    gr_kx_load(k, x, &a, &lx);
    if (t != GR_F32) gr_kx_cast(k, GR_F32, lx, &lx);
    gr_kx_unary(k, GR_KU_GELU_TANH, GR_F32, lx, &v);
    if (t != GR_F32) gr_kx_cast(k, t, v, &v);
    kstore(k, y, v, &a, false);
    return k;
}

static void check_gelu_epilogue(devctx *cu, gr_dtype t, int64_t M, int64_t N, int64_t K, bool timed) {
    char name[96];
    snprintf(name, sizeof name, "gelu_epilogue_%s_%lldx%lldx%lld", gr_dtype_name(t), (long long)M, (long long)K, (long long)N);
    if (filter && !strstr(name, filter)) return;
    gelu_bench b;
    memset(&b, 0, sizeof b);
    gr_libcall c;
    memset(&c, 0, sizeof c);
    c.kind = GR_LIB_MATMUL;
    c.dtype = t;
    c.m = M, c.n = N, c.k = K, c.batch = 1;
    c.lda = K, c.ldb = N, c.ldc = N;
    c.batch_stride_a = M * K, c.batch_stride_b = K * N, c.batch_stride_c = M * N;
    c.alpha = 1.0;
    c.bias = GR_BIAS_ROW;
    b.plain = c;
    snprintf(b.plain.name, sizeof b.plain.name, "c_fc_bias");
    c.epilogue = GR_EPI_GELU_TANH;
    b.fused = c;
    snprintf(b.fused.name, sizeof b.fused.name, "c_fc_bias_gelu_tanh");
    b.points = M * N;
    /* GPT-2's scales: activations ~N(0,1)-like, weights ~0.02 * sqrt(3) uniform, so the
     * pre-activation spans GELU's curved part around 0 */
    buf_spec specs[3] = {{t, M * K, -2, 2}, {t, K * N, -0.06, 0.06}, {t, N, -0.5, 0.5}};
    void *host[3] = {0}, *out_f = NULL, *out_u = NULL;
    gr_kernel *k = gelu_tanh_kernel(t, M * N);
    size_t es = gr_dtype_size(t), cb = (size_t)(M * N) * es;
    gr_status st = k ? GR_OK : GR_ERR_NOMEM;
    for (int i = 0; i < 3 && st == GR_OK; i++) st = (host[i] = make_host(&specs[i])) ? GR_OK : GR_ERR_NOMEM;
    void **dev[3] = {&b.a, &b.b, &b.bias};
    for (int i = 0; i < 3 && st == GR_OK; i++) {
        size_t bytes = (size_t)specs[i].n * es;
        st = gr_dev_alloc(cu->dev, GR_MEM_DEVICE, bytes, dev[i]);
        if (st == GR_OK) st = gr_dev_memcpy(cu->dev, cu->s, *dev[i], host[i], bytes, GR_COPY_H2D);
    }
    void **outs[3] = {&b.c_fused, &b.c_pre, &b.c_unfused};
    for (int i = 0; i < 3 && st == GR_OK; i++) st = gr_dev_alloc(cu->dev, GR_MEM_DEVICE, cb, outs[i]);
    if (st == GR_OK) st = gr_dev_kernel_prepare_flags(cu->dev, k, 0, &b.gelu);
    if (st == GR_OK) st = gelu_run_fused(cu, &b);
    if (st == GR_OK) st = gelu_run_unfused(cu, &b);
    out_f = malloc(cb), out_u = malloc(cb);
    if (st == GR_OK && (!out_f || !out_u)) st = GR_ERR_NOMEM;
    if (st == GR_OK) st = gr_dev_memcpy(cu->dev, cu->s, out_f, b.c_fused, cb, GR_COPY_D2H);
    if (st == GR_OK) st = gr_dev_memcpy(cu->dev, cu->s, out_u, b.c_unfused, cb, GR_COPY_D2H);
    if (st == GR_OK) st = gr_dev_stream_sync(cu->dev, cu->s);
    DIE_IF(st, "setup or run");
    {
        /* unfused rounds the pre-activation to t before the GELU; fused does not */
        double e = rel_err(out_f, out_u, t, M * N), tol = t == GR_F32 ? 1e-3 : t == GR_F16 ? 2e-3 : 1e-2;
        bool ok = e <= tol;
        printf("%s %-34s fused vs unfused on the GPU: err %.3e  tol %.0e\n", ok ? "PASS" : "FAIL", name, e, tol);
        ok ? n_pass++ : n_fail++;
    }
    if (timed) {
        double fused = time_us(cu, gelu_run_fused, &b), unfused = time_us(cu, gelu_run_unfused, &b);
        double mm = time_us(cu, gelu_run_matmul, &b), gk = time_us(cu, gelu_run_kernel, &b);
        double flops = 2.0 * (double)M * (double)N * (double)K;
        printf("TIME matmul_bias_gelu_tanh %s %lldx%lld @ %lldx%lld: fused %.1f us (%.0f TFLOP/s), unfused %.1f us "
               "(matmul+bias %.1f us + gelu kernel %.1f us), speedup %.2fx\n",
               gr_dtype_name(t), (long long)M, (long long)K, (long long)K, (long long)N, fused, flops / fused * 1e-6,
               unfused, mm, gk, unfused / fused);
    }
done:
    if (b.gelu) gr_dev_kernel_release(cu->dev, b.gelu);
    for (int i = 0; i < 3; i++) {
        if (*dev[i]) gr_dev_free(cu->dev, *dev[i]);
        if (*outs[i]) gr_dev_free(cu->dev, *outs[i]);
        free(host[i]);
    }
    free(out_f);
    free(out_u);
    if (k) gr_kernel_destroy(k);
}

typedef struct {
    gr_libcall attn, qk, pv;
    gr_kfunc *softmax;
    void *q, *k, *v, *o, *s, *p, *mask;
} attn_bench;

static gr_status run_fused(devctx *d, void *user) {
    attn_bench *b = user;
    gr_karg a[5] = {{.ptr = b->q}, {.ptr = b->k}, {.ptr = b->o}, {.ptr = b->v}, {.ptr = b->mask}};
    return gr_dev_libcall(d->dev, d->s, &b->attn, a, 5);
}

static gr_status run_unfused(devctx *d, void *user) {
    attn_bench *b = user;
    gr_karg a[4] = {{.ptr = b->q}, {.ptr = b->k}, {.ptr = b->s}, {.ptr = NULL}};
    GR_TRY(gr_dev_libcall(d->dev, d->s, &b->qk, a, 4));
    gr_karg sm[2] = {{.ptr = b->s}, {.ptr = b->p}};
    GR_TRY(gr_dev_kernel_launch(d->dev, d->s, b->softmax, sm, 2));
    gr_karg c[4] = {{.ptr = b->p}, {.ptr = b->v}, {.ptr = b->o}, {.ptr = NULL}};
    return gr_dev_libcall(d->dev, d->s, &b->pv, c, 4);
}

typedef struct {
    gr_kfunc *f;
    gr_karg args[6];
    int n_args;
} row_bench;

static gr_status run_rows(devctx *d, void *user) {
    row_bench *b = user;
    return gr_dev_kernel_launch(d->dev, d->s, b->f, b->args, b->n_args);
}

/* Row kernels of the warp-row form (render-cuda.c), literal and shape-generic code of one kernel
 * side by side (generic: sizes from the slots at launch, as models with symbolic dims run):
 * GPT-2's layer norm with its residual add at b8 s512 (4096 rows of 768), and the unfused
 * attention softmax of b8 h12 s512 (49152 rows of 512), bf16. Bandwidth counts the compulsory
 * traffic (layer norm: x, res read, h, y written; softmax: x read, y written; g, b negligible). */
static void time_rows(devctx *cu, bool softmax) {
    const char *name = softmax ? "softmax_rows_timing" : "layer_norm_timing";
    if (filter && !strstr(name, filter)) return;
    const int64_t rows = softmax ? 8 * 12 * 512 : 4096, cols = softmax ? 512 : 768;
    gr_kernel *k = softmax ? softmax_kernel("sm_time", GR_BF16, rows, cols)
                           : layer_norm_kernel("ln_time", GR_BF16, rows, cols, 0, 0, 0);
    if (!k) return;
    row_bench b;
    memset(&b, 0, sizeof b);
    b.n_args = softmax ? 2 : 6;
    void *buf[6] = {0};
    const int64_t n[6] = {rows * cols, rows * cols, cols, cols, rows * cols, rows * cols};
    const int64_t *nb = softmax ? (const int64_t[]){rows * cols, rows * cols} : n;
    for (int i = 0; i < b.n_args; i++) {
        DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, (size_t)nb[i] * 2, &buf[i]), "alloc");
        DIE_IF(gr_dev_memset(cu->dev, cu->s, buf[i], 0, (size_t)nb[i] * 2), "memset");
        b.args[i].ptr = buf[i];
    }
    double us[2] = {-1, -1};
    for (int mode = 0; mode < 2; mode++) {
        DIE_IF(gr_dev_kernel_prepare_flags(cu->dev, k, mode ? GR_KPREP_GENERIC : 0, &b.f), "prepare");
        us[mode] = time_us(cu, run_rows, &b);
        gr_dev_kernel_release(cu->dev, b.f);
        b.f = NULL;
    }
    const double bytes = (softmax ? 2.0 : 4.0) * 2.0 * (double)(rows * cols);
    printf("TIME %s_bf16_%lldx%lld  literal %8.2f us %7.1f GB/s  generic %8.2f us %7.1f GB/s  generic/literal %.2f\n",
           softmax ? "softmax_rows" : "layer_norm_residual", (long long)rows, (long long)cols, us[0], bytes / us[0] / 1e3,
           us[1], bytes / us[1] / 1e3, us[1] / us[0]);
done:
    for (int i = 0; i < 6; i++) gr_dev_free(cu->dev, buf[i]);
    gr_kernel_destroy(k);
}

/* The fused call against what the unfused path launches for it: Q K^T (cuBLASLt, scale
 * as alpha), a softmax kernel over the materialised scores, P V (cuBLASLt). */
static void time_attention(devctx *cu, gr_dtype t, int64_t B, int64_t H, int64_t S, int64_t D, bool causal, int mask) {
    if (filter && !strstr("attn_timing", filter)) return;
    attn_bench b;
    memset(&b, 0, sizeof b);
    b.attn = attention_call(t, B, H, H, S, S, D, causal, mask);
    gr_libcall mm;
    memset(&mm, 0, sizeof mm);
    mm.kind = GR_LIB_MATMUL;
    mm.dtype = t;
    mm.batch = B * H;
    mm.m = S, mm.n = S, mm.k = D, mm.trans_b = true, mm.lda = D, mm.ldb = D, mm.ldc = S;
    mm.batch_stride_a = S * D, mm.batch_stride_b = S * D, mm.batch_stride_c = S * S, mm.alpha = b.attn.alpha;
    snprintf(mm.name, sizeof mm.name, "qk");
    b.qk = mm;
    mm.n = D, mm.k = S, mm.trans_b = false, mm.lda = S, mm.ldb = D, mm.ldc = D;
    mm.batch_stride_a = S * S, mm.batch_stride_b = S * D, mm.batch_stride_c = S * D, mm.alpha = 1.0;
    snprintf(mm.name, sizeof mm.name, "pv");
    b.pv = mm;
    size_t es = gr_dtype_size(t), nqkv = (size_t)(B * H * S * D) * es, ns = (size_t)(B * H * S * S) * es;
    gr_kernel *k = softmax_kernel("timing_softmax", t, B * H * S, S);
    buf_spec spec = {t, B * H * S * D, -1, 1};
    void *host = make_host(&spec);
    gr_status st = k && host ? GR_OK : GR_ERR_NOMEM;
    void **bufs[6] = {&b.q, &b.k, &b.v, &b.o, &b.s, &b.p};
    for (int i = 0; i < 6 && st == GR_OK; i++) st = gr_dev_alloc(cu->dev, GR_MEM_DEVICE, i < 4 ? nqkv : ns, bufs[i]);
    for (int i = 0; i < 3 && st == GR_OK; i++) st = gr_dev_memcpy(cu->dev, cu->s, *bufs[i], host, nqkv, GR_COPY_H2D);
    void *mhost = NULL;
    size_t nm = (size_t)(B * S * S) * sizeof(float);
    if (st == GR_OK && mask) { /* the f32 causal mask of a Hugging Face export: 0 or finfo.min */
        buf_spec ms = {GR_F32, B * S * S, -3.4028234663852886e38, -3.4028234663852886e38};
        mask_pattern.spec = &ms, mask_pattern.pattern = 1, mask_pattern.rows = S, mask_pattern.cols = S;
        mhost = make_host(&ms);
        mask_pattern.spec = NULL;
        st = mhost ? gr_dev_alloc(cu->dev, GR_MEM_DEVICE, nm, &b.mask) : GR_ERR_NOMEM;
        if (st == GR_OK) st = gr_dev_memcpy(cu->dev, cu->s, b.mask, mhost, nm, GR_COPY_H2D);
    }
    if (st == GR_OK) st = gr_dev_kernel_prepare_flags(cu->dev, k, 0, &b.softmax);
    if (st == GR_OK) st = gr_dev_stream_sync(cu->dev, cu->s);
    if (st == GR_OK) {
        double fused = time_us(cu, run_fused, &b), unfused = time_us(cu, run_unfused, &b);
        double flops = 4.0 * (double)(B * H) * (double)S * (double)S * (double)D;
        /* FLOPs of the full score matrix, causal or not (the unfused path computes all of it) */
        printf("TIME attention %s b%lld h%lld s%lld d%lld%s: fused %.1f us (%.0f TFLOP/s), unfused %.1f us, speedup %.2fx\n",
               gr_dtype_name(t), (long long)B, (long long)H, (long long)S, (long long)D,
               causal ? " causal" : mask ? " f32 causal mask" : "", fused, flops / fused * 1e-6, unfused, unfused / fused);
    } else {
        printf("TIME attention %s: setup failed: %s\n", gr_dtype_name(t), gr_last_error());
    }
    free(mhost);
    if (b.mask) gr_dev_free(cu->dev, b.mask);
    if (b.softmax) gr_dev_kernel_release(cu->dev, b.softmax);
    for (int i = 0; i < 6; i++)
        if (*bufs[i]) gr_dev_free(cu->dev, *bufs[i]);
    if (k) gr_kernel_destroy(k);
    free(host);
}

/* Generic kernels of one structure at several sizes, all alive at once: one module
 * (a second module load or compile would be a miss), each result against the simulator. */
/* The Llama-style model's RoPE kernels at b8 s512 (q: 12 heads, k: 4 heads, head dim 64) and
 * its SiLU * up kernel ([4096, 2048] bf16, contiguous: the plain vector loop, a bandwidth
 * reference), literal and generic code (the exports run generic code). Bandwidth counts the
 * compulsory traffic: RoPE x read and out written (cos/sin: 256 KB, cached), SiLU two reads
 * and a write. Before the row-group loop: q 33.6 us, k 13.1 us (generic, in the model). */
static void time_rope(devctx *cu, int64_t H) {
    const char *name = "rope_timing";
    if (filter && !strstr(name, filter)) return;
    const int64_t B = 8, S = 512, D = 64, n = B * H * S * D;
    gr_kernel *k = rope_plan_kernel("rope_time", B, H, S, D, 0);
    if (!k) return;
    row_bench b;
    memset(&b, 0, sizeof b);
    b.n_args = 4;
    void *buf[4] = {0};
    const size_t bytes[4] = {(size_t)n * 2, (size_t)(S * D) * 4, (size_t)(S * D) * 4, (size_t)n * 2};
    for (int i = 0; i < 4; i++) {
        DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, bytes[i], &buf[i]), "alloc");
        DIE_IF(gr_dev_memset(cu->dev, cu->s, buf[i], 0, bytes[i]), "memset");
        b.args[i].ptr = buf[i];
    }
    double us[2] = {-1, -1};
    for (int mode = 0; mode < 2; mode++) {
        DIE_IF(gr_dev_kernel_prepare_flags(cu->dev, k, mode ? GR_KPREP_GENERIC : 0, &b.f), "prepare");
        us[mode] = time_us(cu, run_rows, &b);
        gr_dev_kernel_release(cu->dev, b.f);
        b.f = NULL;
    }
    const double traffic = 4.0 * (double)n;
    printf("TIME rope_bf16_8x%lldx512x64   literal %8.2f us %7.1f GB/s  generic %8.2f us %7.1f GB/s\n", (long long)H, us[0],
           traffic / us[0] / 1e3, us[1], traffic / us[1] / 1e3);
done:
    for (int i = 0; i < 4; i++) gr_dev_free(cu->dev, buf[i]);
    gr_kernel_destroy(k);
}

static void time_silu_mul(devctx *cu) {
    const char *name = "silu_mul_timing";
    if (filter && !strstr(name, filter)) return;
    const int64_t rows = 4096, cols = 2048, n = rows * cols;
    gr_kernel *k;
    if (gr_kernel_create("silu_mul_time", &k) != GR_OK) return;
    k->n_outer = 2, k->outer[0] = rows, k->outer[1] = cols;
    int g, u, y, lg, lu, sg, c1, m1, c2, m2;
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "gate", &g);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "up", &u);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "y", &y);
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = cols, a.stride[1] = 1;
    gr_kx_load(k, g, &a, &lg); /* as the Llama plan's k128_mul: bf16(gate * bf16(sigmoid(gate))) * up */
    gr_kx_unary(k, GR_KU_SIGMOID, GR_BF16, lg, &sg);
    gr_kx_cast(k, GR_BF16, sg, &c1);
    gr_kx_binary(k, GR_KB_MUL, GR_BF16, lg, c1, &m1);
    gr_kx_cast(k, GR_BF16, m1, &c2);
    gr_kx_load(k, u, &a, &lu);
    gr_kx_binary(k, GR_KB_MUL, GR_BF16, c2, lu, &m2);
    kstore(k, y, m2, &a, false);
    row_bench b;
    memset(&b, 0, sizeof b);
    b.n_args = 3;
    void *buf[3] = {0};
    for (int i = 0; i < 3; i++) {
        DIE_IF(gr_dev_alloc(cu->dev, GR_MEM_DEVICE, (size_t)n * 2, &buf[i]), "alloc");
        DIE_IF(gr_dev_memset(cu->dev, cu->s, buf[i], 0, (size_t)n * 2), "memset");
        b.args[i].ptr = buf[i];
    }
    double us[2] = {-1, -1};
    for (int mode = 0; mode < 2; mode++) {
        DIE_IF(gr_dev_kernel_prepare_flags(cu->dev, k, mode ? GR_KPREP_GENERIC : 0, &b.f), "prepare");
        us[mode] = time_us(cu, run_rows, &b);
        gr_dev_kernel_release(cu->dev, b.f);
        b.f = NULL;
    }
    const double traffic = 6.0 * (double)n;
    printf("TIME silu_mul_bf16_4096x2048   literal %8.2f us %7.1f GB/s  generic %8.2f us %7.1f GB/s\n", us[0],
           traffic / us[0] / 1e3, us[1], traffic / us[1] / 1e3);
done:
    for (int i = 0; i < 3; i++) gr_dev_free(cu->dev, buf[i]);
    gr_kernel_destroy(k);
}

static void check_generic_shared(devctx *cu, devctx *sim) {
    const char *name = "generic_shared_softmax";
    if (filter && !strstr(name, filter)) return;
    enum { NK = 4 };
    const int64_t rows[NK] = {64, 3, 17, 200}, cols[NK] = {1000, 31, 500, 77};
    gr_kernel *k[NK] = {0};
    gr_kfunc *f[NK] = {0};
    gr_dev_kstats k0, k1;
    gr_dev_kernel_stats(cu->dev, &k0);
    gr_status st = GR_OK;
    for (int i = 0; i < NK && st == GR_OK; i++) {
        k[i] = softmax_kernel("softmax_shared", GR_F32, rows[i], cols[i]);
        /* a symbolic row length (a model's softmax over seq): one structure at every length (a fixed
         * length's row class is structure: kir.h, gr_kernel_row_class) */
        if (k[i]) k[i]->var_inner = 1;
        st = k[i] ? gr_dev_kernel_prepare_flags(cu->dev, k[i], GR_KPREP_GENERIC, &f[i]) : GR_ERR_NOMEM;
    }
    DIE_IF(st, "prepare");
    gr_dev_kernel_stats(cu->dev, &k1);
    long loads = k1.module_loads - k0.module_loads, compiles = k1.compiles - k0.compiles;
    bool one = k1.generic_new - k0.generic_new <= 1 && k1.generic_reused - k0.generic_reused >= NK - 1 && loads <= 1 && compiles <= 1;
    printf("%s %-34s %d sizes: %ld module load(s), %ld compile(s), %ld reused\n", one ? "PASS" : "FAIL", name, NK, loads,
           compiles, k1.generic_reused - k0.generic_reused);
    one ? n_pass++ : n_fail++;
    for (int i = 0; i < NK; i++) {
        char sub[96];
        snprintf(sub, sizeof sub, "%s_%lldx%lld", name, (long long)rows[i], (long long)cols[i]);
        buf_spec specs[2] = {{GR_F32, rows[i] * cols[i], -4, 4}, {GR_F32, rows[i] * cols[i], 0, 0}};
        gr_karg sc[2];
        memset(sc, 0, sizeof sc);
        bool written[2] = {false, true};
        /* each run prepares its kernel again: it finds the live module */
        compare_flags(cu, sim, sub, k[i], NULL, 2, specs, sc, 2, written, 1e-5, GR_KPREP_GENERIC);
    }
    gr_dev_kernel_stats(cu->dev, &k1);
    bool still = k1.module_loads - k0.module_loads <= 1;
    printf("%s %-34s module loads after %d more prepares: %ld\n", still ? "PASS" : "FAIL", name, NK,
           k1.module_loads - k0.module_loads);
    still ? n_pass++ : n_fail++;
done:
    for (int i = 0; i < NK; i++) {
        if (f[i]) gr_dev_kernel_release(cu->dev, f[i]);
        gr_kernel_destroy(k[i]);
    }
}

/* ==== capture / replay and timings ============================================================== */

static gr_kernel *make_add(const char *name, int64_t n) {
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = n;
    int x, z, y, np, lx, lz, v;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "z", &z);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y);
    gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &np);
    k->n_points_param = np;
    gr_kx_load(k, x, &a, &lx);
    gr_kx_load(k, z, &a, &lz);
    gr_kx_binary(k, GR_KB_ADD, GR_F32, lx, lz, &v);
    kstore(k, y, v, &a, false);
    return k;
}

/* y = (((x * c0 + c1) * c2 + c3) ...) over n, n_consts constants */
static gr_kernel *make_chain(const char *name, int64_t n, int n_consts) {
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = n;
    int x, y, np, v, c;
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 1;
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x);
    gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y);
    gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &np);
    k->n_points_param = np;
    gr_kx_load(k, x, &a, &v);
    for (int i = 0; i < n_consts; i++) {
        gr_kx_const_f(k, GR_F32, i % 2 ? 0.01 * i : 1.0 - 0.001 * i, &c);
        gr_kx_binary(k, i % 2 ? GR_KB_ADD : GR_KB_MUL, GR_F32, v, c, &v);
    }
    kstore(k, y, v, &a, false);
    return k;
}

/* Eager launch cost of one kernel prepared literally and generically (tiny launches,
 * launch + sync amortized): what the slot struct adds to a launch. */
static void time_launch_modes(devctx *cu, const char *label, gr_kernel *k, void *x, void *y) {
    gr_device *dev = cu->dev;
    const int R = 5000;
    for (int mode = 0; mode < 2; mode++) {
        gr_kfunc *f = NULL;
        if (gr_dev_kernel_prepare_flags(dev, k, mode ? GR_KPREP_GENERIC : 0, &f) != GR_OK) {
            printf("FAIL %-34s prepare: %s\n", label, gr_last_error());
            n_fail++;
            return;
        }
        gr_karg args[3] = {{.ptr = x}, {.ptr = y}, {.i = 1}};
        for (int i = 0; i < 100; i++) gr_dev_kernel_launch(dev, cu->s, f, args, 3);
        gr_dev_stream_sync(dev, cu->s);
        double t0 = gr_now_us();
        for (int i = 0; i < R; i++) gr_dev_kernel_launch(dev, cu->s, f, args, 3);
        gr_dev_stream_sync(dev, cu->s);
        printf("TIME eager_launch_%s_%-8s %8.2f us  (%d slot bytes)\n", label, mode ? "generic" : "literal",
               (gr_now_us() - t0) / R, mode ? 8 * gr_kernel_slot_count(k) : 0);
        gr_dev_kernel_release(dev, f);
    }
}

static void capture_and_time(devctx *cu) {
    const char *name = "capture_replay";
    gr_device *dev = cu->dev;
    const int64_t N = 1 << 20, BIG = 64ll << 20;
    gr_kernel *k = make_add("graft_add", N), *kbig = make_add("graft_add_big", BIG);
    gr_kfunc *f = NULL, *fbig = NULL;
    void *x = NULL, *z = NULL, *y = NULL, *y2 = NULL;
    gr_dgraph *g = NULL, *g100 = NULL;
    gr_dexec *e = NULL, *e100 = NULL;
    gr_event *ev0 = NULL, *ev1 = NULL;
    float *hx = malloc((size_t)N * 4), *h1 = malloc((size_t)N * 4), *h2 = malloc((size_t)N * 4);
    gr_status st = (k && kbig && hx && h1 && h2) ? GR_OK : GR_ERR_NOMEM;
    DIE_IF(st, "setup");
    for (int64_t i = 0; i < N; i++) hx[i] = (float)(urand() * 2 - 1);
    DIE_IF(gr_dev_kernel_prepare(dev, k, &f), "prepare");
    DIE_IF(gr_dev_kernel_prepare(dev, kbig, &fbig), "prepare big");
    DIE_IF(gr_dev_alloc(dev, GR_MEM_DEVICE, (size_t)BIG * 4, &x), "alloc");
    DIE_IF(gr_dev_alloc(dev, GR_MEM_DEVICE, (size_t)BIG * 4, &z), "alloc");
    DIE_IF(gr_dev_alloc(dev, GR_MEM_DEVICE, (size_t)BIG * 4, &y), "alloc");
    DIE_IF(gr_dev_alloc(dev, GR_MEM_DEVICE, (size_t)N * 4, &y2), "alloc");
    DIE_IF(gr_dev_memcpy(dev, cu->s, x, hx, (size_t)N * 4, GR_COPY_H2D), "h2d");
    DIE_IF(gr_dev_memcpy(dev, cu->s, z, hx, (size_t)N * 4, GR_COPY_H2D), "h2d");
    gr_karg args[4] = {{.ptr = x}, {.ptr = z}, {.ptr = y}, {.i = N}};
    /* eager */
    DIE_IF(gr_dev_kernel_launch(dev, cu->s, f, args, 4), "eager launch");
    DIE_IF(gr_dev_memcpy(dev, cu->s, h1, y, (size_t)N * 4, GR_COPY_D2H), "d2h");
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    /* captured, replayed into another output through exec_kernel_node_set_args */
    DIE_IF(gr_dev_capture_begin(dev, cu->s), "capture_begin");
    DIE_IF(gr_dev_kernel_launch(dev, cu->s, f, args, 4), "captured launch");
    DIE_IF(gr_dev_capture_end(dev, cu->s, &g), "capture_end");
    DIE_IF(gr_dev_graph_instantiate(dev, g, &e), "instantiate");
    gr_karg args2[4] = {{.ptr = x}, {.ptr = z}, {.ptr = y2}, {.i = N}};
    DIE_IF(gr_dev_exec_kernel_node_set_args(dev, e, 0, args2, 4), "set args");
    DIE_IF(gr_dev_graph_launch(dev, e, cu->s), "graph launch");
    DIE_IF(gr_dev_memcpy(dev, cu->s, h2, y2, (size_t)N * 4, GR_COPY_D2H), "d2h");
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    bool same = !memcmp(h1, h2, (size_t)N * 4);
    printf("%s %-34s replay %s eager bits (%d graph nodes)\n", same ? "PASS" : "FAIL", name, same ? "==" : "!=",
           gr_dev_graph_num_nodes(dev, g));
    same ? n_pass++ : n_fail++;

    /* eager launch overhead (tiny kernel, launch + sync amortized) */
    gr_karg tiny[4] = {{.ptr = x}, {.ptr = z}, {.ptr = y}, {.i = 1}};
    const int R = 5000;
    double t0 = gr_now_us();
    for (int i = 0; i < R; i++) gr_dev_kernel_launch(dev, cu->s, f, tiny, 4);
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    printf("TIME eager_launch_per_kernel           %8.2f us\n", (gr_now_us() - t0) / R);
    {
        gr_kernel *c2 = make_chain("graft_chain2", N, 2), *c40 = make_chain("graft_chain40", N, 40);
        if (c2 && c40) {
            time_launch_modes(cu, "chain2", c2, x, y);
            time_launch_modes(cu, "chain40", c40, x, y);
        }
        gr_kernel_destroy(c2);
        gr_kernel_destroy(c40);
    }
    /* graph replay per node: 100 tiny kernels */
    DIE_IF(gr_dev_capture_begin(dev, cu->s), "capture_begin");
    for (int i = 0; i < 100; i++) gr_dev_kernel_launch(dev, cu->s, f, tiny, 4);
    DIE_IF(gr_dev_capture_end(dev, cu->s, &g100), "capture_end");
    DIE_IF(gr_dev_graph_instantiate(dev, g100, &e100), "instantiate");
    DIE_IF(gr_dev_graph_upload(dev, e100, cu->s), "upload");
    DIE_IF(gr_dev_graph_launch(dev, e100, cu->s), "warm");
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    t0 = gr_now_us();
    for (int i = 0; i < 200; i++) gr_dev_graph_launch(dev, e100, cu->s);
    DIE_IF(gr_dev_stream_sync(dev, cu->s), "sync");
    printf("TIME graph_replay_per_node             %8.2f us\n", (gr_now_us() - t0) / (200.0 * 100));
    /* bandwidth: 64M-element f32 add vs a D2D copy of the same bytes */
    DIE_IF(gr_dev_event_create(dev, &ev0), "event");
    DIE_IF(gr_dev_event_create(dev, &ev1), "event");
    gr_karg bargs[4] = {{.ptr = x}, {.ptr = z}, {.ptr = y}, {.i = BIG}};
    DIE_IF(gr_dev_kernel_launch(dev, cu->s, fbig, bargs, 4), "big launch");
    DIE_IF(gr_dev_event_record(dev, ev0, cu->s), "record");
    for (int i = 0; i < 10; i++) gr_dev_kernel_launch(dev, cu->s, fbig, bargs, 4);
    DIE_IF(gr_dev_event_record(dev, ev1, cu->s), "record");
    double us = 0;
    DIE_IF(gr_dev_event_elapsed_us(dev, ev0, ev1, &us), "elapsed");
    double add_gbs = 3.0 * 4.0 * (double)BIG / (us / 10) / 1e3;
    DIE_IF(gr_dev_event_record(dev, ev0, cu->s), "record");
    for (int i = 0; i < 10; i++) gr_dev_memcpy(dev, cu->s, y, x, (size_t)BIG * 4, GR_COPY_D2D);
    DIE_IF(gr_dev_event_record(dev, ev1, cu->s), "record");
    double us_copy = 0;
    DIE_IF(gr_dev_event_elapsed_us(dev, ev0, ev1, &us_copy), "elapsed");
    double copy_gbs = 2.0 * 4.0 * (double)BIG / (us_copy / 10) / 1e3;
    printf("TIME add_f32_64M                       %8.1f us  %7.1f GB/s (read 2 + write 1)\n", us / 10, add_gbs);
    printf("TIME memcpy_d2d_256MB                  %8.1f us  %7.1f GB/s (read 1 + write 1)\n", us_copy / 10, copy_gbs);
done:
    if (ev0) gr_dev_event_destroy(dev, ev0);
    if (ev1) gr_dev_event_destroy(dev, ev1);
    if (e) gr_dev_exec_destroy(dev, e);
    if (e100) gr_dev_exec_destroy(dev, e100);
    if (g) gr_dev_graph_destroy(dev, g);
    if (g100) gr_dev_graph_destroy(dev, g100);
    gr_dev_free(dev, x);
    gr_dev_free(dev, z);
    gr_dev_free(dev, y);
    gr_dev_free(dev, y2);
    if (f) gr_dev_kernel_release(dev, f);
    if (fbig) gr_dev_kernel_release(dev, fbig);
    gr_kernel_destroy(k);
    gr_kernel_destroy(kbig);
    free(hx);
    free(h1);
    free(h2);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) verbose = 1;
        else filter = argv[i];
    }
    devctx cu = {0}, sim = {0};
    if (gr_device_cuda_create(NULL, &cu.dev) != GR_OK) {
        printf("gpucheck: no CUDA device: %s\n", gr_last_error());
        return 2;
    }
    if (gr_device_sim_create(&sim.dev) != GR_OK) {
        printf("gpucheck: simulator: %s\n", gr_last_error());
        return 2;
    }
    printf("gpucheck on %s\n", gr_dev_name(cu.dev));
    if (gr_dev_stream_create(cu.dev, &cu.s) != GR_OK ||
        gr_dev_stream_create(sim.dev, &sim.s) != GR_OK) {
        printf("gpucheck: stream_create: %s\n", gr_last_error());
        return 2;
    }
    const gr_dtype fdt[] = {GR_F32, GR_F16, GR_BF16};
    for (int d = 0; d < 3; d++) {
        for (int fn = 0; fn < GR_KU_COUNT; fn++) check_elementwise(&cu, &sim, fdt[d], false, fn);
        for (int fn = 0; fn < GR_KB_COUNT; fn++) check_elementwise(&cu, &sim, fdt[d], true, fn);
    }
    const gr_dtype odt[] = {GR_F64, GR_I64, GR_I32, GR_I8, GR_U8};
    for (int d = 0; d < 5; d++) {
        check_elementwise(&cu, &sim, odt[d], true, GR_KB_ADD);
        check_elementwise(&cu, &sim, odt[d], true, GR_KB_MUL);
        check_elementwise(&cu, &sim, odt[d], true, GR_KB_DIV);
        check_elementwise(&cu, &sim, odt[d], true, GR_KB_MOD);
        check_elementwise(&cu, &sim, odt[d], true, GR_KB_LT);
        check_elementwise(&cu, &sim, odt[d], false, GR_KU_NEG);
        check_elementwise(&cu, &sim, odt[d], false, GR_KU_ABS);
    }
    for (int fn = 0; fn < GR_KR_COUNT; fn++) {
        check_reduce(&cu, &sim, (gr_kreduce)fn, GR_F32, false);
        check_reduce(&cu, &sim, (gr_kreduce)fn, GR_F32, true);
        check_reduce(&cu, &sim, (gr_kreduce)fn, GR_I64, false);
    }
    check_reduce(&cu, &sim, GR_KR_SUM, GR_F16, false);
    check_reduce(&cu, &sim, GR_KR_SUM, GR_BF16, true);
    for (int d = 0; d < 3; d++) {
        check_softmax(&cu, &sim, fdt[d], 64, 1000);
        check_softmax(&cu, &sim, fdt[d], 3, 31);
    }
    /* block kernels' row cache (render-cuda.c): GPT-2's rows of 768 at b8 s512 (cached), and
     * rows longer than 4 points per thread (the plain loops) */
    check_softmax(&cu, &sim, GR_BF16, 4096, 768);
    check_softmax(&cu, &sim, GR_F32, 5, 3000);
    /* the warp-row form (rows of <= 1024 points, a warp each): rows of 768 (vector fill, and
     * vector loads of g and b in the store), a residual gathered by rows (vector fill from the
     * index's row) or by points (scalar fill), and odd lengths (partial vectors, misaligned rows:
     * the scalar fill; 1025 and 3000: the block form) with row counts that leave blocks part-full */
    check_warp_row_launches(&cu);
    check_layer_norm(&cu, &sim, GR_BF16, 4096, 768, 0, 0, 0);
    check_layer_norm(&cu, &sim, GR_F32, 64, 768, 0, 0, 0);
    check_layer_norm(&cu, &sim, GR_BF16, 64, 768, 1, 0, 0);
    check_layer_norm(&cu, &sim, GR_F32, 64, 768, 1, 0, 0);
    check_layer_norm(&cu, &sim, GR_BF16, 64, 768, 2, 0, 0);
    check_layer_norm(&cu, &sim, GR_BF16, 37, 700, 1, 0, 0);
    /* rows of whole chunks off 16-byte alignment: the scalar fill and stores of that version;
     * g and b off alignment: the store's scalar loads of them */
    check_layer_norm(&cu, &sim, GR_BF16, 64, 768, 0, 1, 0);
    check_layer_norm(&cu, &sim, GR_F32, 64, 768, 0, 1, 0);
    check_layer_norm(&cu, &sim, GR_BF16, 64, 768, 0, 0, 1);
    check_layer_norm(&cu, &sim, GR_F32, 64, 768, 1, 0, 3);
    check_softmax(&cu, &sim, GR_F32, 64, 768);
    {
        const int64_t odd[] = {1, 31, 33, 700, 1025, 3000};
        for (int i = 0; i < 6; i++) {
            check_layer_norm(&cu, &sim, GR_BF16, 37, odd[i], 0, 0, 0);
            check_layer_norm(&cu, &sim, GR_F32, 37, odd[i], 0, 0, 0);
            check_softmax(&cu, &sim, GR_BF16, 37, odd[i]);
            check_softmax(&cu, &sim, GR_F32, 37, odd[i]);
        }
    }
    check_gather(&cu, &sim, GR_I64, GR_F32);
    check_gather(&cu, &sim, GR_I32, GR_F16);
    /* issue 12: the KV-cache append (a scatter store) and arg_max / arg_min over long rows */
    check_cache_write(&cu, &sim, GR_F32, 1, 12, 160, 64, 33);
    check_cache_write(&cu, &sim, GR_BF16, 8, 12, 160, 64, 160);
    check_cache_write(&cu, &sim, GR_F32, 2, 4, 24, 16, 0);
    for (int last = 0; last < 2; last++) {
        check_arg_split(&cu, &sim, GR_F32, 1, 50257, true, last);
        check_arg_split(&cu, &sim, GR_F32, 8, 50257, true, last);
        check_arg_split(&cu, &sim, GR_BF16, 1, 32000, true, last);
        check_arg_split(&cu, &sim, GR_BF16, 3, 5003, false, last);
    }
    time_arg_max(&cu, 1, 50257);
    time_arg_max(&cu, 8, 50257);
    check_rope(&cu, &sim, GR_BF16);
    check_rope(&cu, &sim, GR_F32);
    check_rope_plan(&cu, &sim, 2, 4, 33, 64, 0);
    check_rope_plan(&cu, &sim, 2, 4, 33, 64, 1);
    check_rope_plan(&cu, &sim, 1, 3, 11, 24, 0);
    check_rope_plan(&cu, &sim, 1, 3, 33, 20, 0);
    check_random(&cu, &sim, GR_F32);
    check_random(&cu, &sim, GR_F64);
    check_indirect(&cu, &sim);
    for (int d = 0; d < 3; d++) {
        check_matmul(&cu, &sim, fdt[d], 64, 48, 80, 1, false, false, GR_BIAS_NONE, GR_EPI_NONE);
        check_matmul(&cu, &sim, fdt[d], 33, 65, 17, 1, true, false, GR_BIAS_NONE, GR_EPI_NONE);
        check_matmul(&cu, &sim, fdt[d], 40, 24, 56, 1, false, true, GR_BIAS_NONE, GR_EPI_NONE);
        check_matmul(&cu, &sim, fdt[d], 16, 32, 64, 4, true, true, GR_BIAS_NONE, GR_EPI_NONE);
        check_matmul(&cu, &sim, fdt[d], 128, 256, 64, 1, false, false, GR_BIAS_ROW, GR_EPI_NONE);
        check_matmul(&cu, &sim, fdt[d], 128, 256, 64, 3, false, false, GR_BIAS_ROW, GR_EPI_RELU);
        check_matmul(&cu, &sim, fdt[d], 64, 128, 32, 1, false, true, GR_BIAS_ROW, GR_EPI_GELU);
        check_matmul(&cu, &sim, fdt[d], 64, 96, 32, 2, false, false, GR_BIAS_FULL, GR_EPI_NONE);
        /* epilogues of passes/epilogue.c: cuBLASLt's GELU(_BIAS) and RELU, batched row bias */
        check_matmul(&cu, &sim, fdt[d], 128, 256, 64, 1, false, false, GR_BIAS_ROW, GR_EPI_GELU_TANH);
        check_matmul(&cu, &sim, fdt[d], 64, 96, 32, 3, false, true, GR_BIAS_ROW, GR_EPI_GELU_TANH);
        check_matmul(&cu, &sim, fdt[d], 33, 65, 17, 1, true, false, GR_BIAS_NONE, GR_EPI_GELU_TANH);
        check_matmul(&cu, &sim, fdt[d], 64, 96, 32, 2, false, false, GR_BIAS_FULL, GR_EPI_GELU_TANH);
        check_matmul(&cu, &sim, fdt[d], 40, 24, 56, 1, false, true, GR_BIAS_NONE, GR_EPI_RELU);
        /* residuals of gr_pass_fuse_residual: alone, beside a row bias, batched, an activation after */
        check_matmul_res(&cu, &sim, fdt[d], 128, 256, 64, 1, false, false, GR_BIAS_NONE, GR_EPI_NONE, true);
        check_matmul_res(&cu, &sim, fdt[d], 128, 96, 64, 1, false, false, GR_BIAS_ROW, GR_EPI_NONE, true);
        check_matmul_res(&cu, &sim, fdt[d], 33, 65, 17, 3, false, true, GR_BIAS_ROW, GR_EPI_NONE, true);
        check_matmul_res(&cu, &sim, fdt[d], 16, 32, 64, 4, true, true, GR_BIAS_NONE, GR_EPI_NONE, true);
        check_matmul_res(&cu, &sim, fdt[d], 64, 96, 32, 2, false, false, GR_BIAS_ROW, GR_EPI_RELU, true);
        check_matmul_res(&cu, &sim, fdt[d], 64, 96, 32, 1, false, false, GR_BIAS_ROW, GR_EPI_GELU_TANH, true);
    }
    check_matmul(&cu, &sim, GR_F64, 32, 48, 16, 2, false, false, GR_BIAS_NONE, GR_EPI_GELU_TANH); /* rendered kernel */
    /* GPT-2 small's c_fc at batch 8, seq 512: checked and timed, fused vs unfused */
    check_gelu_epilogue(&cu, GR_F32, 4096, 3072, 768, true);
    check_gelu_epilogue(&cu, GR_BF16, 4096, 3072, 768, true);
    check_gelu_epilogue(&cu, GR_F16, 512, 3072, 768, false);
    /* fused attention: the seq lengths, batches, masks and heads of issue 15 */
    const gr_dtype adt[] = {GR_BF16, GR_F32, GR_F16};
    const int64_t seqs[] = {1, 17, 128, 512};
    for (int d = 0; d < 3; d++)
        for (int si = 0; si < 4; si++)
            for (int bi = 0; bi < 2; bi++) {
                int64_t B = bi ? 8 : 1, S = seqs[si];
                if (adt[d] != GR_BF16 && (B == 8 || S == 512)) continue; /* f32/f16: the small ones (sim time) */
                if (S == 512 && B == 8) continue;
                check_attention(&cu, &sim, adt[d], B, 12, 12, S, S, 64, true, 0);
                check_attention(&cu, &sim, adt[d], B, 12, 12, S, S, 64, false, 1);
            }
    for (int d = 0; d < 3; d++) {
        check_attention(&cu, &sim, adt[d], 2, 12, 12, 77, 77, 64, true, 2);     /* full mask and causal */
        check_attention(&cu, &sim, adt[d], 2, 8, 2, 100, 100, 128, true, 0);   /* GQA, head_dim 128 */
        check_attention(&cu, &sim, adt[d], 1, 4, 4, 1, 300, 64, true, 1);      /* one query, long keys */
        check_attention(&cu, &sim, adt[d], 2, 4, 2, 33, 45, 80, false, 1);     /* other head dim: generic */
        check_attention(&cu, &sim, adt[d], 1, 2, 1, 50, 20, 64, true, 0);      /* seq_q > seq_k: empty rows */
        /* masks with dead tiles (skipped), dead rows (nothing skipped), -inf and finfo.min */
        for (int mk = 3; mk <= 7; mk++) {
            check_attention(&cu, &sim, adt[d], 2, 4, 4, 200, 200, 64, false, mk);
            check_attention(&cu, &sim, adt[d], 1, 4, 2, 130, 300, 128, false, mk);
            check_attention(&cu, &sim, adt[d], 2, 4, 4, 77, 77, 64, false, mk); /* seq_k % 4: scalar scan */
        }
        check_attention(&cu, &sim, adt[d], 2, 4, 4, 200, 200, 64, true, 3);    /* both causal rules */
        check_attention(&cu, &sim, adt[d], 2, 4, 4, 200, 200, 64, false, 8);   /* per-head mask planes */
        check_attention(&cu, &sim, adt[d], 2, 4, 2, 130, 300, 128, true, 9);   /* per head, batch broadcast */
        /* decode (seq_q <= 8: keys split over blocks, then merged) and the key length read on the device */
        check_attention_kl(&cu, &sim, adt[d], 8, 12, 12, 1, 160, 64, false, 1, 37);
        check_attention_kl(&cu, &sim, adt[d], 1, 12, 4, 1, 160, 64, false, 0, 160);
        check_attention_kl(&cu, &sim, adt[d], 2, 8, 2, 1, 2048, 128, false, 0, 1999); /* GQA, long: many splits */
        check_attention_kl(&cu, &sim, adt[d], 1, 4, 4, 4, 300, 64, true, 0, 250);     /* 4 rows, causal and a length */
        check_attention_kl(&cu, &sim, adt[d], 2, 4, 4, 1, 40, 64, false, 1, 0);       /* no key visible: 0 */
        check_attention_kl(&cu, &sim, adt[d], 2, 4, 4, 1, 40, 80, false, 1, 999);     /* past the cache: clamped */
        check_attention_kl(&cu, &sim, adt[d], 2, 4, 4, 77, 200, 64, false, 1, 150);   /* prefill kernels with a length */
        check_attention_kl(&cu, &sim, adt[d], 1, 2, 2, 8, 8, 64, true, 0, -1);        /* 8 rows: still the decode kernel */
    }
    /* f32 grids of 132 blocks or more take attn_simt's 64-row blocks (fewer: 16-row blocks, which
     * the smaller checks above exercise): masks, causal, dead tiles and grouped heads there too */
    check_attention(&cu, &sim, GR_F32, 8, 12, 12, 100, 100, 64, true, 0);
    check_attention(&cu, &sim, GR_F32, 8, 12, 12, 100, 100, 64, false, 1);
    check_attention(&cu, &sim, GR_F32, 8, 12, 12, 100, 100, 64, false, 3);
    check_attention(&cu, &sim, GR_F32, 8, 12, 4, 77, 77, 64, true, 2);
    check_attention(&cu, &sim, GR_F32, 8, 12, 12, 130, 130, 64, false, 8);
    check_attention_capture(&cu);
    check_attention_share(&cu);
    time_attention(&cu, GR_BF16, 8, 12, 512, 64, false, 0);
    time_attention(&cu, GR_BF16, 8, 12, 512, 64, true, 0);
    time_attention(&cu, GR_BF16, 8, 12, 512, 64, false, 3);
    time_attention(&cu, GR_BF16, 1, 12, 128, 64, false, 3);
    time_attention(&cu, GR_F16, 8, 12, 512, 64, false, 0);
    time_attention(&cu, GR_F32, 8, 12, 512, 64, false, 0);
    time_attention(&cu, GR_F32, 8, 12, 512, 64, true, 0);
    time_attention(&cu, GR_F32, 8, 12, 512, 64, false, 3);
    time_attention(&cu, GR_F32, 1, 12, 128, 64, false, 3);
    time_attention(&cu, GR_F32, 1, 12, 64, 64, false, 3);
    time_attention(&cu, GR_F32, 8, 12, 512, 128, false, 0);
    time_attention(&cu, GR_BF16, 8, 12, 2048, 64, false, 0);
    time_attention(&cu, GR_BF16, 8, 12, 2048, 64, true, 0);
    time_attention(&cu, GR_BF16, 8, 12, 512, 128, false, 0);
    time_rows(&cu, false);
    time_rows(&cu, true);
    time_rope(&cu, 12); /* the Llama-style model's q */
    time_rope(&cu, 4);  /* its k */
    time_silu_mul(&cu);
    check_generic_shared(&cu, &sim);
    if (!filter || strstr("capture_replay", filter)) capture_and_time(&cu);
    printf("gpucheck: %d passed, %d failed\n", n_pass, n_fail);
    gr_dev_stream_destroy(cu.dev, cu.s);
    gr_dev_stream_destroy(sim.dev, sim.s);
    gr_device_destroy(cu.dev);
    gr_device_destroy(sim.dev);
    return n_fail ? 1 : 0;
}
