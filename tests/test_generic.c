/* tests/test_generic — shape-generic kernels (kir.h "shape-generic form",
 * GR_KPREP_GENERIC) on the simulator, no GPU needed:
 *  - a symbolic model lowered at two bindings renders byte-identical generic CUDA
 *    source kernel by kernel (the literal sources differ);
 *  - a session on that model: a second and third binding prepare no kernel of a new
 *    structure and load no module, and every output equals, bit for bit, that of the
 *    same model written with static dims (literal kernels), eager and graph mode;
 *  - the simulator's generic kernels run a template with another kernel's slots:
 *    results equal the literal kernel's; counters; release; allocation failures.
 * `test_generic cuda` (scripts/gpu-check.sh) runs the session part on CUDA, where
 * graph mode also patches the temperature into captured generic kernel nodes;
 * outputs there are compared with the static model within 1e-5 (bits may differ:
 * the two are compiled separately). */
#include "check.h"
#include "codegen/render-cuda.h"
#include "device/device.h"
#include "passes/passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== the model ============================================================================== */

/* Embedding gather, bias matmul, attention with a host-scalar temperature, a causal
 * trilu, softmax, gelu, layer norm, a mean over the sequence (1/S is a constant of the
 * kernel), a transpose and a max: every kernel form the lowering emits. "{S}" is the
 * sequence length: a symbol, or a number for the static twin. */
static const char *model_tmpl =
    "graft 1\n"
    "input x: f32[{S}, 32]\n"
    "input ids: i64[{S}]\n"
    "input temperature: f32[] @host\n"
    "emb = random_normal(shape=[50, 32], seed=1, std=0.5)\n"
    "e = gather(emb, ids, axis=0)\n"
    "h = add(x, e)\n"
    "w = random_normal(shape=[32, 32], seed=2, std=0.2)\n"
    "b = random_uniform(shape=[32], seed=3, low=-0.1, high=0.1)\n"
    "q = matmul(h, w, b, trans_b=1)\n"
    "att = matmul(q, h, trans_b=1)\n"
    "att2 = div(att, temperature)\n"
    "tri = trilu(att2, upper=0, k=0)\n"
    "p = softmax(tri, axis=1)\n"
    "o = matmul(p, h)\n"
    "g = gelu(o)\n"
    "s = random_uniform(shape=[32], seed=4, low=0.5, high=1.5)\n"
    "ln = layer_norm(g, s, _, axis=1, epsilon=1e-5)\n"
    "m = reduce_mean(ln, axes=[0], keepdims=1)\n"
    "y = sub(ln, m)\n"
    "t = transpose(y, perm=[1, 0])\n"
    "r = reduce_max(t, axes=[1], keepdims=0)\n"
    "output y, r\n";

/* The model with {S} replaced by `s` (gr_strfree). */
static char *model_text(const char *s) {
    gr_strbuf sb;
    gr_sb_init(&sb);
    for (const char *p = model_tmpl; *p;) {
        if (!strncmp(p, "{S}", 3)) {
            gr_sb_puts(&sb, s);
            p += 3;
        } else {
            char one[2] = {*p++, 0};
            gr_sb_puts(&sb, one);
        }
    }
    return gr_sb_take(&sb);
}

static gr_graph_t parse_model(const char *s) {
    char *text = model_text(s);
    gr_graph_t g = NULL;
    if (text) CHECK_OK(gr_graph_parse(text, "generic-model.gir", NULL, &g));
    gr_strfree(text);
    return g;
}

static void fill(float *x, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
    }
}

/* ==== lowering at two bindings: one generic source per kernel ================================ */

static void test_lowered_sources(void) {
    gr_graph_t g = parse_model("S");
    if (!g) return;
    int64_t s1 = 5, s2 = 11;
    gr_compiled c1, c2;
    memset(&c1, 0, sizeof c1);
    memset(&c2, 0, sizeof c2);
    CHECK_OK(gr_pass_pipeline(g, &s1, NULL, &c1));
    CHECK_OK(gr_pass_pipeline(g, &s2, NULL, &c2));
    CHECK_MSG(c1.steps.len == c2.steps.len, "%d steps at S=5, %d at S=11", c1.steps.len, c2.steps.len);
    int kernels = 0, literal_differ = 0;
    for (int i = 0; i < c1.steps.len && i < c2.steps.len; i++) {
        const gr_step *a = &c1.steps.data[i], *b = &c2.steps.data[i];
        CHECK(a->kind == b->kind);
        if (a->kind != GR_STEP_KERNEL || b->kind != GR_STEP_KERNEL) continue;
        kernels++;
        gr_strbuf ga, gb, la, lb;
        gr_sb_init(&ga), gr_sb_init(&gb), gr_sb_init(&la), gr_sb_init(&lb);
        CHECK_OK(gr_render_cuda_mode(a->kernel, GR_RENDER_GENERIC, &ga));
        CHECK_OK(gr_render_cuda_mode(b->kernel, GR_RENDER_GENERIC, &gb));
        CHECK_OK(gr_render_cuda(a->kernel, &la));
        CHECK_OK(gr_render_cuda(b->kernel, &lb));
        CHECK_MSG(ga.data && gb.data && !strcmp(ga.data, gb.data), "kernel %s: generic source differs between S=5 and S=11",
                  a->kernel->name);
        CHECK(gr_kernel_structure_hash(a->kernel) == gr_kernel_structure_hash(b->kernel));
        if (la.data && lb.data && strcmp(la.data, lb.data)) literal_differ++;
        gr_sb_free(&ga), gr_sb_free(&gb), gr_sb_free(&la), gr_sb_free(&lb);
    }
    CHECK_MSG(kernels >= 6, "only %d kernel steps", kernels);
    /* the test has teeth: most literal kernels do change with S */
    CHECK_MSG(literal_differ >= kernels / 2, "%d of %d literal kernels differ", literal_differ, kernels);
    gr_compiled_free(&c1);
    gr_compiled_free(&c2);
    gr_graph_destroy(g);
}

/* ==== sessions: a new binding compiles nothing, outputs equal the static model's ============== */

typedef struct {
    float *y, *r;
} outputs;

static gr_status run_model(gr_session_t s, int64_t S, unsigned seed, float temp, outputs *out) {
    float *x = malloc(sizeof(float) * (size_t)S * 32);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)S);
    out->y = malloc(sizeof(float) * (size_t)S * 32);
    out->r = malloc(sizeof(float) * 32);
    gr_status st = x && ids && out->y && out->r ? GR_OK : GR_ERR_NOMEM;
    if (st == GR_OK) {
        fill(x, (int)S * 32, seed);
        for (int64_t i = 0; i < S; i++) ids[i] = (int64_t)((seed + 7 * (unsigned)i) % 50);
        int64_t xd[2] = {S, 32}, id[1] = {S};
        st = gr_session_set_input(s, "x", GR_F32, 2, xd, x, sizeof(float) * (size_t)S * 32);
        if (st == GR_OK) st = gr_session_set_input(s, "ids", GR_I64, 1, id, ids, sizeof(int64_t) * (size_t)S);
        if (st == GR_OK) st = gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &temp, sizeof temp);
        if (st == GR_OK) st = gr_session_run(s);
        gr_output o;
        if (st == GR_OK) st = gr_session_output(s, 0, &o);
        if (st == GR_OK) st = gr_session_output_read(s, o, out->y, sizeof(float) * (size_t)S * 32);
        if (st == GR_OK) st = gr_session_output(s, 1, &o);
        if (st == GR_OK) st = gr_session_output_read(s, o, out->r, sizeof(float) * 32);
    }
    free(x);
    free(ids);
    return st;
}

static void outputs_free(outputs *o) {
    free(o->y);
    free(o->r);
    o->y = o->r = NULL;
}

static gr_device_kind device = GR_DEVICE_SIM;

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* sim: bit for bit; CUDA: within 1e-5 */
static bool same_outputs(const float *a, const float *b, size_t n) {
    if (!memcmp(a, b, sizeof(float) * n)) return true;
    return device != GR_DEVICE_SIM && rel_err(a, b, n) <= 1e-5;
}

static void test_sessions(gr_mode mode) {
    gr_graph_t gs = parse_model("S");
    if (!gs) return;
    gr_session_options opt;
    gr_session_options_init(&opt);
    opt.device = device;
    opt.mode = mode;
    gr_session_t sym = NULL;
    CHECK_OK(gr_session_create(gs, &opt, &sym));
    gr_graph_destroy(gs);
    if (!sym) return;
    const int64_t lengths[] = {5, 9, 13, 9};
    gr_kernel_stats first, now;
    memset(&first, 0, sizeof first);
    for (int li = 0; li < GR_ARRAY_LEN(lengths); li++) {
        int64_t S = lengths[li];
        char num[24];
        snprintf(num, sizeof num, "%lld", (long long)S);
        gr_graph_t gl = parse_model(num);
        gr_session_t lit = NULL;
        if (gl) CHECK_OK(gr_session_create(gl, &opt, &lit));
        gr_graph_destroy(gl);
        if (!lit) break;
        /* two runs each (graph mode: warm-up, then capture and replay), new data each time */
        for (int rep = 0; rep < 2; rep++) {
            outputs a = {0}, b = {0};
            unsigned seed = (unsigned)(S * 10 + rep);
            float temp = rep ? 0.5f : 2.0f;
            CHECK_OK(run_model(sym, S, seed, temp, &a));
            CHECK_OK(run_model(lit, S, seed, temp, &b));
            if (a.y && b.y && a.r && b.r) {
                CHECK_MSG(same_outputs(a.y, b.y, (size_t)S * 32), "S=%lld run %d: y differs from the static model (%.3g)",
                          (long long)S, rep, rel_err(a.y, b.y, (size_t)S * 32));
                CHECK_MSG(same_outputs(a.r, b.r, 32), "S=%lld run %d: r differs from the static model (%.3g)", (long long)S, rep,
                          rel_err(a.r, b.r, 32));
                if (device != GR_DEVICE_SIM && rep == 1)
                    printf("test_generic: S=%lld: generic vs literal outputs %s\n", (long long)S,
                           !memcmp(a.y, b.y, sizeof(float) * (size_t)S * 32) && !memcmp(a.r, b.r, sizeof(float) * 32)
                               ? "bit-identical"
                               : "within 1e-5");
                CHECK(isfinite(a.y[0]) && a.y[0] != 0.0f);
            }
            outputs_free(&a);
            outputs_free(&b);
        }
        gr_kernel_stats ks;
        CHECK_OK(gr_session_kernel_stats(lit, &ks));
        /* a static model's kernels are literal, one module each (on CUDA a matmul's GELU
         * epilogue is generic whatever the model: allow it) */
        long epilogues = device == GR_DEVICE_SIM ? 0 : ks.generic_new + ks.generic_reused;
        CHECK_MSG(epilogues <= 1 && ks.generic_new + ks.generic_reused == epilogues && ks.prepared > 0 &&
                      ks.modules_loaded == ks.prepared - ks.generic_reused,
                  "static model: %ld generic, %ld prepared, %ld modules", ks.generic_new + ks.generic_reused, ks.prepared,
                  ks.modules_loaded);
        gr_session_destroy(lit);
        CHECK_OK(gr_session_kernel_stats(sym, &now));
        CHECK(now.generic_fallbacks == 0);
        if (device == GR_DEVICE_SIM) CHECK(now.compiled == 0);
        if (li == 0) {
            first = now;
            CHECK_MSG(now.generic_new > 0 && now.prepared == now.generic_new + now.generic_reused,
                      "first binding: %ld new, %ld reused, %ld prepared", now.generic_new, now.generic_reused, now.prepared);
            CHECK(now.modules_loaded == now.generic_new);
            if (device != GR_DEVICE_SIM) CHECK(now.compiled + now.disk_cache_hits == now.generic_new);
            printf("test_generic: %s: S=5 prepared %ld kernels, %ld structures\n", mode == GR_MODE_GRAPH ? "graph" : "eager",
                   now.prepared, now.generic_new);
        } else {
            /* a new length compiled and loaded nothing */
            CHECK_MSG(now.generic_new == first.generic_new, "S=%lld: %ld new structures (first binding %ld)", (long long)S,
                      now.generic_new, first.generic_new);
            CHECK(now.modules_loaded == first.modules_loaded);
            CHECK_MSG(now.compiled == first.compiled && now.disk_cache_hits == first.disk_cache_hits,
                      "S=%lld: %ld compiled, %ld cache hits (first binding %ld, %ld)", (long long)S, now.compiled,
                      now.disk_cache_hits, first.compiled, first.disk_cache_hits);
            CHECK_MSG(now.prepared == first.prepared * (li < 3 ? li + 1 : 3), "S=%lld: %ld prepared", (long long)S, now.prepared);
        }
    }
    gr_session_destroy(sym);
}

/* ==== device level: templates, counters, release, failures ================================== */

/* y[i, j] = (x[i, j] * 0.5 + bias[j]) / s over [s, 2s + 1] (broadcast, a size-derived
 * constant), op changes the structure */
static gr_kernel *bias_kernel(int64_t s, gr_kbinary op) {
    gr_kernel *k = NULL;
    if (gr_kernel_create("bias_kernel", &k) != GR_OK) return NULL;
    k->n_outer = 2, k->outer[0] = s, k->outer[1] = 2 * s + 1;
    int x = -1, b = -1, y = -1, n = -1, lx = -1, lb = -1, c = -1, d = -1, v = -1;
    gr_kaccess a, ab;
    gr_kaccess_init(&a), gr_kaccess_init(&ab);
    a.stride[0] = 2 * s + 1, a.stride[1] = 1;
    ab.stride[1] = 1;
    gr_status st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x);
    if (st == GR_OK) st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "bias", &b);
    if (st == GR_OK) st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y);
    if (st == GR_OK) st = gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n);
    if (st == GR_OK) k->n_points_param = n, k->params[y].written = true;
    if (st == GR_OK) st = gr_kx_load(k, x, &a, &lx);
    if (st == GR_OK) st = gr_kx_load(k, b, &ab, &lb);
    if (st == GR_OK) st = gr_kx_const_f(k, GR_F32, 0.5, &c);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_MUL, GR_F32, lx, c, &v);
    if (st == GR_OK) st = gr_kx_binary(k, op, GR_F32, v, lb, &v);
    if (st == GR_OK) st = gr_kx_const_f(k, GR_F32, (double)s, &d);
    if (st == GR_OK) st = gr_kx_binary(k, GR_KB_DIV, GR_F32, v, d, &v);
    gr_kstage sg = {.kind = GR_KS_STORE, .value = v, .param = y, .access = a};
    if (st == GR_OK) st = gr_kernel_add_stage(k, &sg);
    CHECK_OK(st);
    if (st != GR_OK) gr_kernel_destroy(k), k = NULL;
    return k;
}

/* Runs k on the simulator through kfunc f; returns y (malloc'ed). */
static float *run_bias(gr_device *d, gr_stream *s, gr_kfunc *f, int64_t S) {
    int64_t n = S * (2 * S + 1);
    float *x = NULL, *bias = NULL, *y = malloc(sizeof(float) * (size_t)n);
    float *hx = malloc(sizeof(float) * (size_t)n), *hb = malloc(sizeof(float) * (size_t)(2 * S + 1));
    gr_status st = y && hx && hb ? GR_OK : GR_ERR_NOMEM;
    if (st == GR_OK) fill(hx, (int)n, 3), fill(hb, (int)(2 * S + 1), 4);
    if (st == GR_OK) st = gr_dev_alloc(d, GR_MEM_DEVICE, sizeof(float) * (size_t)n, (void **)&x);
    if (st == GR_OK) st = gr_dev_alloc(d, GR_MEM_DEVICE, sizeof(float) * (size_t)(2 * S + 1), (void **)&bias);
    float *dy = NULL;
    if (st == GR_OK) st = gr_dev_alloc(d, GR_MEM_DEVICE, sizeof(float) * (size_t)n, (void **)&dy);
    if (st == GR_OK) st = gr_dev_memcpy(d, s, x, hx, sizeof(float) * (size_t)n, GR_COPY_H2D);
    if (st == GR_OK) st = gr_dev_memcpy(d, s, bias, hb, sizeof(float) * (size_t)(2 * S + 1), GR_COPY_H2D);
    gr_karg args[4] = {{.ptr = x}, {.ptr = bias}, {.ptr = dy}, {.i = n}};
    if (st == GR_OK) st = gr_dev_kernel_launch(d, s, f, args, 4);
    if (st == GR_OK) st = gr_dev_memcpy(d, s, y, dy, sizeof(float) * (size_t)n, GR_COPY_D2H);
    if (st == GR_OK) st = gr_dev_stream_sync(d, s);
    CHECK_OK(st);
    gr_dev_free(d, x), gr_dev_free(d, bias), gr_dev_free(d, dy);
    free(hx), free(hb);
    if (st != GR_OK) free(y), y = NULL;
    return y;
}

/* y[i] = sum_j x[i, j] over [r, c]: the store does not walk the inner space */
static gr_kernel *rowsum_kernel(int64_t r, int64_t c) {
    gr_kernel *k = NULL;
    if (gr_kernel_create("rowsum", &k) != GR_OK) return NULL;
    k->n_outer = 1, k->outer[0] = r, k->n_inner = 1, k->inner[0] = c;
    int x = -1, y = -1, lx = -1, acc = -1;
    gr_kaccess a, ay;
    gr_kaccess_init(&a), gr_kaccess_init(&ay);
    a.stride[0] = c, a.inner_stride[0] = 1, ay.stride[0] = 1;
    gr_status st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &x);
    if (st == GR_OK) st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y);
    if (st == GR_OK) k->params[y].written = true, st = gr_kx_load(k, x, &a, &lx);
    gr_kstage red = {.kind = GR_KS_REDUCE, .value = lx, .reduce = GR_KR_SUM, .param = -1};
    gr_kaccess_init(&red.access);
    if (st == GR_OK) st = gr_kernel_add_stage(k, &red);
    if (st == GR_OK) st = gr_kx_acc(k, 0, GR_F32, &acc);
    gr_kstage sg = {.kind = GR_KS_STORE, .value = acc, .param = y, .access = ay};
    if (st == GR_OK) st = gr_kernel_add_stage(k, &sg);
    CHECK_OK(st);
    if (st != GR_OK) gr_kernel_destroy(k), k = NULL;
    return k;
}

/* Rows of one element (a sequence of length 1): the inner walk is trivially contiguous
 * and the kernel runs from a template made at another such binding. */
static void test_unit_rows(gr_device *d, gr_stream *s) {
    gr_kernel *k3 = rowsum_kernel(3, 1), *k5 = rowsum_kernel(5, 1);
    gr_kfunc *f3 = NULL, *f5 = NULL, *l5 = NULL;
    void *x = NULL, *y = NULL;
    float hx[5] = {1.5f, -2, 3.25f, 4, -5}, yg[5] = {0}, yl[5] = {0};
    if (!k3 || !k5) goto out;
    CHECK_OK(gr_dev_kernel_prepare_flags(d, k3, GR_KPREP_GENERIC, &f3));
    CHECK_OK(gr_dev_kernel_prepare_flags(d, k5, GR_KPREP_GENERIC, &f5));
    CHECK_OK(gr_dev_kernel_prepare(d, k5, &l5));
    CHECK_OK(gr_dev_alloc(d, GR_MEM_DEVICE, sizeof hx, &x));
    CHECK_OK(gr_dev_alloc(d, GR_MEM_DEVICE, sizeof hx, &y));
    if (!f5 || !l5 || !x || !y) goto out;
    CHECK_OK(gr_dev_memcpy(d, s, x, hx, sizeof hx, GR_COPY_H2D));
    gr_karg args[2] = {{.ptr = x}, {.ptr = y}};
    CHECK_OK(gr_dev_kernel_launch(d, s, f5, args, 2));
    CHECK_OK(gr_dev_memcpy(d, s, yg, y, sizeof yg, GR_COPY_D2H));
    CHECK_OK(gr_dev_kernel_launch(d, s, l5, args, 2));
    CHECK_OK(gr_dev_memcpy(d, s, yl, y, sizeof yl, GR_COPY_D2H));
    CHECK_OK(gr_dev_stream_sync(d, s));
    CHECK(!memcmp(yg, yl, sizeof yg) && yg[4] == -5.0f);
out:
    gr_dev_kernel_release(d, f3), gr_dev_kernel_release(d, f5), gr_dev_kernel_release(d, l5);
    gr_dev_free(d, x), gr_dev_free(d, y);
    gr_kernel_destroy(k3), gr_kernel_destroy(k5);
}

static void test_device(void) {
    gr_device *d = NULL;
    gr_stream *s = NULL;
    CHECK_OK(gr_device_sim_create(&d));
    if (!d) return;
    CHECK_OK(gr_dev_stream_create(d, &s));
    gr_kernel *k4 = bias_kernel(4, GR_KB_ADD), *k9 = bias_kernel(9, GR_KB_ADD), *kmul = bias_kernel(9, GR_KB_MUL);
    gr_kernel *ksub = bias_kernel(5, GR_KB_SUB);
    gr_kfunc *f4 = NULL, *f9 = NULL, *fmul = NULL, *l9 = NULL;
    gr_dev_kstats ks;
    if (!k4 || !k9 || !kmul || !ksub || !s) goto out;
    CHECK_OK(gr_dev_kernel_prepare_flags(d, k4, GR_KPREP_GENERIC, &f4));
    CHECK_OK(gr_dev_kernel_prepare_flags(d, k9, GR_KPREP_GENERIC, &f9));
    CHECK_OK(gr_dev_kernel_prepare_flags(d, kmul, GR_KPREP_GENERIC, &fmul));
    CHECK_OK(gr_dev_kernel_prepare(d, k9, &l9));
    gr_dev_kernel_stats(d, &ks);
    CHECK_MSG(ks.prepared == 4 && ks.generic_new == 2 && ks.generic_reused == 1 && ks.module_loads == 3 && ks.live_modules == 2 &&
                  ks.compiles == 0,
              "prepared %ld new %ld reused %ld loads %ld live %ld", ks.prepared, ks.generic_new, ks.generic_reused,
              ks.module_loads, ks.live_modules);
    gr_kfunc *refused = NULL;
    CHECK_ERR(gr_dev_kernel_prepare_flags(d, k9, 0x10, &refused), GR_ERR_INVALID, "unknown flags");
    CHECK(refused == NULL);
    CHECK(f9 && l9);
    if (!f9 || !l9) goto out;
    /* f9 runs the template made from k4 with k9's sizes: the literal kernel's bits */
    float *yg = run_bias(d, s, f9, 9), *yl = run_bias(d, s, l9, 9);
    if (yg && yl) CHECK_MSG(!memcmp(yg, yl, sizeof(float) * 9 * 19), "generic result differs from literal");
    free(yg), free(yl);
    /* release: the template goes with its last kernel */
    gr_dev_kernel_release(d, f4), f4 = NULL;
    gr_dev_kernel_stats(d, &ks);
    CHECK(ks.live_modules == 2);
    gr_dev_kernel_release(d, f9), f9 = NULL;
    gr_dev_kernel_stats(d, &ks);
    CHECK(ks.live_modules == 1);
    /* a new structure again after the last one went */
    CHECK_OK(gr_dev_kernel_prepare_flags(d, k4, GR_KPREP_GENERIC, &f4));
    gr_dev_kernel_stats(d, &ks);
    CHECK(ks.generic_new == 3 && ks.live_modules == 2);
    /* allocation failures while preparing generically, a new structure and a shared
     * one: an error, nothing left behind */
    for (int shared = 0; shared < 2; shared++) {
        gr_kernel *kf = shared ? k9 : ksub;
        long before = gr_debug_live_allocs();
        bool ok = false;
        for (long n = 1; n < 200 && !ok; n++) {
            gr_kfunc *f = NULL;
            gr_debug_fail_alloc_after(n);
            gr_status st = gr_dev_kernel_prepare_flags(d, kf, GR_KPREP_GENERIC, &f);
            gr_debug_fail_alloc_after(0);
            CHECK(st == GR_OK || st == GR_ERR_NOMEM);
            ok = st == GR_OK;
            gr_dev_kernel_release(d, f);
            CHECK(gr_debug_live_allocs() == before);
        }
        CHECK(ok);
    }
    /* instantiating from a template of another structure is refused */
    gr_kernel *bad = NULL;
    CHECK_ERR(gr_kernel_instantiate(k4, kmul, &bad), GR_ERR_INVALID, "structure differs");
    CHECK(bad == NULL);
    test_unit_rows(d, s);
out:
    gr_dev_kernel_release(d, f4), gr_dev_kernel_release(d, f9), gr_dev_kernel_release(d, fmul), gr_dev_kernel_release(d, l9);
    gr_dev_kernel_stats(d, &ks);
    CHECK_MSG(ks.live_modules == 0, "%ld templates left", ks.live_modules);
    gr_kernel_destroy(k4), gr_kernel_destroy(k9), gr_kernel_destroy(kmul), gr_kernel_destroy(ksub);
    gr_dev_stream_destroy(d, s);
    gr_device_destroy(d);
}

/* ==== fold_linear_only ============================================================================
 * A binding's plan folds what depends only on the symbols if its size is linear in them (a
 * position vector) and leaves [seq, seq] masks to kernels (folding them costs host time
 * growing with seq^2 per binding). The session marks its graph once (gr_pass_mark_superlinear)
 * and each plan's clone must keep the marks: checked both ways. */
static void check_fold_marks(const gr_graph *src, bool linear_only, bool src_marked, bool expect_mask_kept) {
    gr_pipeline_opts po = {.fold_linear_only = linear_only, .src_marked = src_marked};
    gr_compiled c;
    CHECK_OK(gr_pass_pipeline(src, (const int64_t[]){6}, &po, &c));
    if (!c.g) return;
    int mask = gr_ir_find_value(c.g, "mask"), pos = gr_ir_find_value(c.g, "pos");
    int wide = gr_ir_find_value(c.g, "wide"), narrow = gr_ir_find_value(c.g, "narrow");
    CHECK(mask >= 0 && pos >= 0 && wide >= 0 && narrow >= 0);
    if (mask >= 0 && pos >= 0 && wide >= 0 && narrow >= 0) {
        CHECK_MSG((c.g->values.data[mask].kind != GR_VAL_CONST) == expect_mask_kept, "the [seq, seq] mask %s",
                  expect_mask_kept ? "was folded" : "was not folded");
        CHECK_MSG(c.g->values.data[pos].kind == GR_VAL_CONST, "the [seq] positions were not folded");
        /* rows gathered from a table: 300 elements per position is over the 256 that still fold */
        CHECK_MSG((c.g->values.data[wide].kind != GR_VAL_CONST) == expect_mask_kept, "the [seq, 300] rows %s",
                  expect_mask_kept ? "were folded" : "were not folded");
        CHECK_MSG(c.g->values.data[narrow].kind == GR_VAL_CONST, "the [seq, 8] rows were not folded");
    }
    gr_compiled_free(&c);
}

static void test_fold_linear_only(void) {
    const char *text = "graft 1\n"
                       "input x: f32[seq, seq]\n"
                       "ones = fill(shape=[seq, seq], value=1.0)\n"
                       "mask = trilu(ones, upper=0, k=0)\n"
                       "r = range(start=0.0, limit=dim(seq))\n"
                       "pos = add(r, r)\n"
                       "y = add(x, mask)\n"
                       "z = add(y, pos)\n"
                       "idx = cast(r, to=\"i64\")\n"
                       "wtab = fill(shape=[10, 300], value=0.5)\n"
                       "wide = gather(wtab, idx, axis=0)\n"
                       "ntab = fill(shape=[10, 8], value=0.25)\n"
                       "narrow = gather(ntab, idx, axis=0)\n"
                       "output z\n"
                       "output wide\n"
                       "output narrow\n";
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(text, "fold-marks.gir", NULL, &g));
    if (!g) return;
    gr_graph *src = (gr_graph *)g;
    check_fold_marks(src, true, false, true);   /* the pipeline marks its clone */
    check_fold_marks(src, false, false, false); /* no marks: everything folds */
    CHECK_OK(gr_pass_mark_superlinear(src));
    check_fold_marks(src, true, true, true);    /* marked once on the source, kept by the clone */
    gr_graph_destroy(g);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "cuda")) {
        device = GR_DEVICE_CUDA;
        test_sessions(GR_MODE_EAGER);
        test_sessions(GR_MODE_GRAPH);
        return check_summary("test_generic (cuda)");
    }
    test_lowered_sources();
    test_fold_linear_only();
    test_sessions(GR_MODE_EAGER);
    test_sessions(GR_MODE_GRAPH);
    test_device();
    return check_summary("test_generic");
}
