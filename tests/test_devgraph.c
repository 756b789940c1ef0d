/* tests/test_devgraph — CUDA-graph features through the gr_dev_* façade on any
 * backend: conditional IF / IF_ELSE / WHILE nodes, device-updatable kernel
 * nodes patched by a prelude kernel, exec kernel-node argument updates and
 * exec update; the same with shape-generic kernels (GR_KPREP_GENERIC), and
 * generic kernels of one structure sharing a module, captured side by side. Data moves only through copies, so the same test runs on the
 * simulator (ctest) and on CUDA (`test_devgraph cuda`, in scripts/gpu-check.sh). */
#include "check.h"
#include "device/device.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gr_device *D;
static gr_stream *S;

#define OK(expr) CHECK_OK(expr)

/* dst[0] = src[0] + add, or (src[0] > add) when compare; i32 */
static gr_kfunc *i32_kernel(const char *name, int64_t add, bool compare) {
    gr_kernel *k = NULL;
    gr_kfunc *f = NULL;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    int ps, pd, nl, nc, nr;
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I32, "src", &ps));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I32, "dst", &pd));
    OK(gr_kx_load(k, ps, &acc, &nl));
    OK(gr_kx_const_i(k, GR_I32, add, &nc));
    if (compare) {
        int nb;
        OK(gr_kx_binary(k, GR_KB_GT, GR_BOOL, nl, nc, &nb));
        OK(gr_kx_cast(k, GR_I32, nb, &nr));
    } else {
        OK(gr_kx_binary(k, GR_KB_ADD, GR_I32, nl, nc, &nr));
    }
    gr_kstage s = {.kind = GR_KS_STORE, .value = nr, .param = pd, .access = acc};
    k->params[pd].written = true;
    OK(gr_kernel_add_stage(k, &s));
    OK(gr_dev_kernel_prepare(D, k, &f));
    gr_kernel_destroy(k);
    return f;
}

/* out[i] = x[i] * a + b over n f32; flags: GR_KPREP_* */
static gr_kfunc *axpb_kernel(int64_t n, unsigned flags) {
    gr_kernel *k = NULL;
    gr_kfunc *f = NULL;
    if (gr_kernel_create("axpb", &k) != GR_OK) return NULL;
    k->n_outer = 1;
    k->outer[0] = n;
    int px, pa, pb, po, nx, na, nb, nm, ns;
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    acc.stride[0] = 1;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &px));
    OK(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F32, "a", &pa));
    OK(gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F32, "b", &pb));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "out", &po));
    OK(gr_kx_load(k, px, &acc, &nx));
    OK(gr_kx_param(k, pa, &na));
    OK(gr_kx_param(k, pb, &nb));
    OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, nx, na, &nm));
    OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, nm, nb, &ns));
    gr_kstage s = {.kind = GR_KS_STORE, .value = ns, .param = po, .access = acc};
    k->params[po].written = true;
    OK(gr_kernel_add_stage(k, &s));
    OK(gr_dev_kernel_prepare_flags(D, k, flags, &f));
    gr_kernel_destroy(k);
    return f;
}

static void put_i32(void *dev, int32_t v) {
    OK(gr_dev_memcpy(D, S, dev, &v, 4, GR_COPY_H2D));
    OK(gr_dev_stream_sync(D, S));
}
static int32_t get_i32(const void *dev) {
    int32_t v = -12345;
    OK(gr_dev_memcpy(D, S, &v, dev, 4, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    return v;
}

static void test_conditionals(void) {
    char *mem = NULL;
    OK(gr_dev_alloc(D, GR_MEM_DEVICE, 256, (void **)&mem));
    if (!mem) return;
    void *fv = mem, *hits = mem + 4, *cnt = mem + 8, *hits_else = mem + 12;
    gr_kfunc *fcopy = i32_kernel("copy_flag", 0, false), *finc = i32_kernel("inc", 1, false);
    gr_kfunc *fdec = i32_kernel("dec", -1, false), *fgt = i32_kernel("more_left", 1, true);
    gr_dgraph *g = NULL;
    gr_dexec *x = NULL;
    uint64_t h = 0;
    /* IF: flag = fv; if (flag) hits++ */
    OK(gr_dev_capture_begin(D, S));
    OK(gr_dev_cond_create(D, S, GR_COND_IF, 0, &h));
    gr_karg set[2] = {{.ptr = fv}, {.ptr = (void *)(uintptr_t)h}}, inc[2] = {{.ptr = hits}, {.ptr = hits}};
    OK(gr_dev_kernel_launch(D, S, fcopy, set, 2));
    OK(gr_dev_cond_body_begin(D, S, h, 0));
    OK(gr_dev_kernel_launch(D, S, finc, inc, 2));
    OK(gr_dev_cond_body_end(D, S, h, 0));
    OK(gr_dev_capture_end(D, S, &g));
    OK(gr_dev_graph_instantiate(D, g, &x));
    put_i32(hits, 0);
    const int32_t flags[] = {0, 1, 7, 0, 1};
    int want = 0;
    for (int i = 0; i < GR_ARRAY_LEN(flags); i++) {
        put_i32(fv, flags[i]);
        OK(gr_dev_graph_launch(D, x, S));
        want += flags[i] != 0;
        int got = get_i32(hits);
        CHECK_MSG(got == want, "IF flag %d: hits %d, want %d", flags[i], got, want);
    }
    gr_dev_exec_destroy(D, x);
    gr_dev_graph_destroy(D, g);

    /* IF_ELSE: then hits++, else hits_else += 2 */
    OK(gr_dev_capture_begin(D, S));
    OK(gr_dev_cond_create(D, S, GR_COND_IF_ELSE, 0, &h));
    set[1].ptr = (void *)(uintptr_t)h;
    gr_karg inc_else[2] = {{.ptr = hits_else}, {.ptr = hits_else}};
    OK(gr_dev_kernel_launch(D, S, fcopy, set, 2));
    OK(gr_dev_cond_body_begin(D, S, h, 0));
    OK(gr_dev_kernel_launch(D, S, finc, inc, 2));
    OK(gr_dev_cond_body_end(D, S, h, 0));
    OK(gr_dev_cond_body_begin(D, S, h, 1));
    OK(gr_dev_kernel_launch(D, S, finc, inc_else, 2));
    OK(gr_dev_kernel_launch(D, S, finc, inc_else, 2));
    OK(gr_dev_cond_body_end(D, S, h, 1));
    OK(gr_dev_capture_end(D, S, &g));
    OK(gr_dev_graph_instantiate(D, g, &x));
    put_i32(hits, 0);
    put_i32(hits_else, 0);
    put_i32(fv, 0);
    OK(gr_dev_graph_launch(D, x, S));
    CHECK_MSG(get_i32(hits) == 0 && get_i32(hits_else) == 2, "IF_ELSE(0): %d %d", get_i32(hits), get_i32(hits_else));
    put_i32(fv, 1);
    OK(gr_dev_graph_launch(D, x, S));
    CHECK_MSG(get_i32(hits) == 1 && get_i32(hits_else) == 2, "IF_ELSE(1): %d %d", get_i32(hits), get_i32(hits_else));
    gr_dev_exec_destroy(D, x);
    gr_dev_graph_destroy(D, g);

    /* WHILE (default 1): body { flag = cnt > 1; hits++; cnt-- } runs cnt times */
    OK(gr_dev_capture_begin(D, S));
    OK(gr_dev_cond_create(D, S, GR_COND_WHILE, 1, &h));
    gr_karg gt[2] = {{.ptr = cnt}, {.ptr = (void *)(uintptr_t)h}}, dec[2] = {{.ptr = cnt}, {.ptr = cnt}};
    OK(gr_dev_cond_body_begin(D, S, h, 0));
    OK(gr_dev_kernel_launch(D, S, fgt, gt, 2));
    OK(gr_dev_kernel_launch(D, S, finc, inc, 2));
    OK(gr_dev_kernel_launch(D, S, fdec, dec, 2));
    OK(gr_dev_cond_body_end(D, S, h, 0));
    OK(gr_dev_capture_end(D, S, &g));
    OK(gr_dev_graph_instantiate(D, g, &x));
    put_i32(hits, 0);
    put_i32(cnt, 3);
    OK(gr_dev_graph_launch(D, x, S));
    CHECK_MSG(get_i32(hits) == 3 && get_i32(cnt) == 0, "WHILE(3): hits %d cnt %d", get_i32(hits), get_i32(cnt));
    put_i32(cnt, 5);
    OK(gr_dev_graph_launch(D, x, S));
    CHECK_MSG(get_i32(hits) == 8 && get_i32(cnt) == 0, "WHILE(5): hits %d cnt %d", get_i32(hits), get_i32(cnt));
    gr_dev_exec_destroy(D, x);
    gr_dev_graph_destroy(D, g);
    gr_dev_kernel_release(D, fcopy);
    gr_dev_kernel_release(D, finc);
    gr_dev_kernel_release(D, fdec);
    gr_dev_kernel_release(D, fgt);
    gr_dev_free(D, mem);
}

/* CUDA contracts x*a+b into one fused multiply-add (NVRTC's default), the
 * simulator rounds twice: equal within an ulp or two, not bit for bit */
static bool near(float got, float want) { return fabsf(got - want) <= 1e-6f * fabsf(want) + 1e-7f; }

/* updatable node patched by a prelude kernel; set_args; exec_update */
static void test_updates(unsigned flags) {
    enum { N = 1000 };
    float *xs = malloc(sizeof(float) * N), *out = malloc(sizeof(float) * N);
    char *mem = NULL;
    OK(gr_dev_alloc(D, GR_MEM_DEVICE, sizeof(float) * N * 2 + 64, (void **)&mem));
    if (!xs || !out || !mem) goto done;
    float *dx = (float *)mem, *dy = (float *)mem + N;
    double *value = (double *)((float *)mem + 2 * N);
    for (int i = 0; i < N; i++) xs[i] = (float)i * 0.01f - 3.0f;
    OK(gr_dev_memcpy(D, S, dx, xs, sizeof(float) * N, GR_COPY_H2D));
    gr_kfunc *f = axpb_kernel(N, flags);
    gr_karg a[4] = {{.ptr = dx}, {.f = 2.0}, {.f = 1.0}, {.ptr = dy}};
    gr_dgraph *g = NULL;
    gr_dexec *x = NULL;
    uint64_t h = 0;
    OK(gr_dev_capture_begin(D, S));
    OK(gr_dev_kernel_launch(D, S, f, a, 4));
    OK(gr_dev_capture_mark_updatable(D, S, &h));
    OK(gr_dev_capture_end(D, S, &g));
    OK(gr_dev_graph_instantiate(D, g, &x));
    OK(gr_dev_graph_launch(D, x, S));
    OK(gr_dev_memcpy(D, S, out, dy, sizeof(float) * N, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK(near(out[7], xs[7] * 2.0f + 1.0f));
    /* prelude kernel writes arg slot 1 ("a") of the updatable node from device memory */
    gr_kernel *k = NULL;
    OK(gr_kernel_create("prelude", &k));
    int ps, pd, nv;
    gr_kaccess src, dst;
    gr_kaccess_init(&src);
    gr_kaccess_init(&dst);
    dst.offset = 1;
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "value", &ps));
    OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F64, "slots", &pd));
    OK(gr_kx_load(k, ps, &src, &nv));
    gr_kstage st = {.kind = GR_KS_STORE, .value = nv, .param = pd, .access = dst};
    k->params[pd].written = true;
    OK(gr_kernel_add_stage(k, &st));
    gr_kfunc *pf = NULL;
    OK(gr_dev_kernel_prepare(D, k, &pf));
    gr_kernel_destroy(k);
    double five = 5.0;
    OK(gr_dev_memcpy(D, S, value, &five, 8, GR_COPY_H2D));
    gr_karg pa[2] = {{.ptr = value}, {.ptr = (void *)(uintptr_t)h}};
    OK(gr_dev_kernel_launch(D, S, pf, pa, 2));
    OK(gr_dev_graph_launch(D, x, S));
    OK(gr_dev_memcpy(D, S, out, dy, sizeof(float) * N, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK_MSG(near(out[7], xs[7] * 5.0f + 1.0f), "updatable node: %g, want %g", out[7], xs[7] * 5.0f + 1.0f);
    /* exec kernel-node argument update: b = -4 */
    gr_karg b[4] = {{.ptr = dx}, {.f = 5.0}, {.f = -4.0}, {.ptr = dy}};
    int kernel_node = -1;
    for (int n = 0; n < gr_dev_graph_num_nodes(D, g); n++) {
        gr_gnode_info info;
        OK(gr_dev_graph_node_info(D, g, n, &info));
        if (info.kind == GR_GNODE_KERNEL && info.func == f) kernel_node = n;
    }
    CHECK(kernel_node >= 0);
    OK(gr_dev_exec_kernel_node_set_args(D, x, kernel_node, b, 4));
    OK(gr_dev_graph_launch(D, x, S));
    OK(gr_dev_memcpy(D, S, out, dy, sizeof(float) * N, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK_MSG(near(out[9], xs[9] * 5.0f - 4.0f), "set_args: %g, want %g", out[9], xs[9] * 5.0f - 4.0f);
    gr_dev_kernel_release(D, pf);
    gr_dev_exec_destroy(D, x);
    gr_dev_graph_destroy(D, g);
    gr_dev_kernel_release(D, f);
done:
    if (mem) gr_dev_free(D, mem);
    free(xs);
    free(out);
}

/* Generic kernels of one structure at three sizes share one module (CUDA: one
 * CUfunction); each keeps its own sizes through eager launches, a capture holding all
 * three, node listing (each node names its own kfunc), argument patching and replay. */
static void test_generic_shared(void) {
    enum { NA = 1000, NB = 3001, NC = 64 };
    gr_dev_kstats k0, k1;
    gr_dev_kernel_stats(D, &k0);
    gr_kfunc *fa = axpb_kernel(NA, GR_KPREP_GENERIC), *fb = axpb_kernel(NB, GR_KPREP_GENERIC);
    gr_kfunc *fc = axpb_kernel(NC, GR_KPREP_GENERIC);
    gr_dev_kernel_stats(D, &k1);
    CHECK_MSG(k1.generic_new - k0.generic_new == 1 && k1.generic_reused - k0.generic_reused == 2,
              "3 kernels of one structure: %ld new, %ld reused", k1.generic_new - k0.generic_new,
              k1.generic_reused - k0.generic_reused);
    CHECK(k1.module_loads - k0.module_loads <= 1);
    CHECK(k1.compiles - k0.compiles <= 1); /* 0 on sim and when the disk cache has it */
    float *xs = malloc(sizeof(float) * NB), *out = malloc(sizeof(float) * NB);
    char *mem = NULL;
    OK(gr_dev_alloc(D, GR_MEM_DEVICE, sizeof(float) * NB * 4, (void **)&mem));
    gr_dgraph *g = NULL;
    gr_dexec *x = NULL;
    if (!fa || !fb || !fc || !xs || !out || !mem) goto done;
    float *dx = (float *)mem, *da = dx + NB, *db = da + NB, *dc = db + NB;
    for (int i = 0; i < NB; i++) xs[i] = (float)(i % 97) * 0.25f - 7.0f;
    OK(gr_dev_memcpy(D, S, dx, xs, sizeof(float) * NB, GR_COPY_H2D));
    OK(gr_dev_memset(D, S, da, 0, sizeof(float) * NB * 3));
    gr_karg aa[4] = {{.ptr = dx}, {.f = 2.0}, {.f = 1.0}, {.ptr = da}};
    gr_karg ab[4] = {{.ptr = dx}, {.f = 3.0}, {.f = 0.5}, {.ptr = db}};
    gr_karg ac[4] = {{.ptr = dx}, {.f = -1.0}, {.f = 0.0}, {.ptr = dc}};
    /* eager: each writes exactly its own n elements */
    OK(gr_dev_kernel_launch(D, S, fa, aa, 4));
    OK(gr_dev_kernel_launch(D, S, fb, ab, 4));
    OK(gr_dev_memcpy(D, S, out, db, sizeof(float) * NB, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK_MSG(near(out[NB - 1], xs[NB - 1] * 3.0f + 0.5f), "eager b[last] %g", out[NB - 1]);
    OK(gr_dev_memcpy(D, S, out, da, sizeof(float) * NB, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK_MSG(near(out[NA - 1], xs[NA - 1] * 2.0f + 1.0f) && out[NA] == 0.0f, "eager a: [%d] %g, [%d] %g", NA - 1,
              out[NA - 1], NA, out[NA]);
    /* captured side by side */
    OK(gr_dev_memset(D, S, da, 0, sizeof(float) * NB * 3));
    OK(gr_dev_capture_begin(D, S));
    OK(gr_dev_kernel_launch(D, S, fa, aa, 4));
    OK(gr_dev_kernel_launch(D, S, fb, ab, 4));
    OK(gr_dev_kernel_launch(D, S, fc, ac, 4));
    OK(gr_dev_capture_end(D, S, &g));
    if (!g) goto done;
    gr_kfunc *want[3] = {fa, fb, fc};
    int node_of[3] = {-1, -1, -1}, kernels = 0;
    for (int n = 0; n < gr_dev_graph_num_nodes(D, g); n++) {
        gr_gnode_info info;
        OK(gr_dev_graph_node_info(D, g, n, &info));
        if (info.kind != GR_GNODE_KERNEL) continue;
        CHECK(info.n_args == 4);
        for (int j = 0; j < 3; j++)
            if (info.func == want[j]) node_of[j] = n;
        kernels++;
    }
    CHECK_MSG(kernels == 3 && node_of[0] >= 0 && node_of[1] >= 0 && node_of[2] >= 0 && node_of[0] != node_of[1] &&
                  node_of[1] != node_of[2],
              "nodes: %d kernels, a %d b %d c %d", kernels, node_of[0], node_of[1], node_of[2]);
    OK(gr_dev_graph_instantiate(D, g, &x));
    if (!x) goto done;
    OK(gr_dev_graph_launch(D, x, S));
    OK(gr_dev_memcpy(D, S, out, db, sizeof(float) * NB, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK_MSG(near(out[NB - 1], xs[NB - 1] * 3.0f + 0.5f), "replay b[last] %g", out[NB - 1]);
    OK(gr_dev_memcpy(D, S, out, dc, sizeof(float) * NB, GR_COPY_D2H));
    OK(gr_dev_stream_sync(D, S));
    CHECK_MSG(near(out[NC - 1], -xs[NC - 1]) && out[NC] == 0.0f, "replay c: [%d] %g [%d] %g", NC - 1, out[NC - 1], NC,
              out[NC]);
    /* patch b's node (new scale, and c's output buffer): b keeps its 3001 elements */
    if (node_of[1] >= 0) {
        OK(gr_dev_memset(D, S, dc, 0, sizeof(float) * NB));
        gr_karg nb[4] = {{.ptr = dx}, {.f = -2.0}, {.f = 4.0}, {.ptr = dc}};
        OK(gr_dev_exec_kernel_node_set_args(D, x, node_of[1], nb, 4));
        OK(gr_dev_graph_launch(D, x, S));
        OK(gr_dev_memcpy(D, S, out, dc, sizeof(float) * NB, GR_COPY_D2H));
        OK(gr_dev_stream_sync(D, S));
        /* the patched b (3001 elements), then c (its first 64), wrote dc in capture order */
        CHECK_MSG(near(out[NB - 1], xs[NB - 1] * -2.0f + 4.0f), "patched b[last] %g", out[NB - 1]);
        CHECK_MSG(near(out[NC + 5], xs[NC + 5] * -2.0f + 4.0f), "patched b[%d] %g", NC + 5, out[NC + 5]);
        CHECK_MSG(near(out[NC - 1], -xs[NC - 1]), "c after patched b: [%d] %g", NC - 1, out[NC - 1]);
    }
done:
    if (x) gr_dev_exec_destroy(D, x);
    if (g) gr_dev_graph_destroy(D, g);
    gr_dev_kernel_release(D, fa);
    gr_dev_kernel_release(D, fb);
    gr_dev_kernel_release(D, fc);
    gr_dev_kernel_stats(D, &k1);
    CHECK_MSG(k1.live_modules == k0.live_modules, "%ld generic modules left (before %ld)", k1.live_modules, k0.live_modules);
    if (mem) gr_dev_free(D, mem);
    free(xs);
    free(out);
}

int main(int argc, char **argv) {
    gr_device_kind kind = argc > 1 && !strcmp(argv[1], "cuda") ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
    gr_status st = gr_device_open(kind, NULL, 0, &D);
    if (st != GR_OK) {
        fprintf(stderr, "test_devgraph: cannot open device: %s\n", gr_last_error());
        return 1;
    }
    printf("test_devgraph on %s\n", gr_dev_name(D));
    OK(gr_dev_stream_create(D, &S));
    test_conditionals();
    test_updates(0);
    test_updates(GR_KPREP_GENERIC);
    test_generic_shared();
    gr_dev_stream_destroy(D, S);
    gr_device_destroy(D);
    return check_summary("test_devgraph");
}
