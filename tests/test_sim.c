/* tests/test_sim — the simulator device: memory rules, async copies, simulated clock,
 * capture / replay semantics (by-value args, hazards), exec updates, device-updatable
 * nodes, conditional nodes, and allocation failures without leaks. */
#include <math.h>
#include <string.h>
#include "check.h"
#include "device/device.h"
#include "device/sim/sim-impl.h"

#define OK(expr) CHECK_OK(expr)
#define NEAR(a, b) (fabs((a) - (b)) < 1e-6)

/* ---- kernels used by the tests (one outer dim of n points, f32) ---- */

/* out[i] = x[i] * a + b   (a, b scalars) */
static gr_status make_axpb(int64_t n, gr_kernel **out) {
    gr_kernel *k;
    GR_TRY(gr_kernel_create("axpb", &k));
    k->n_outer = 1;
    k->outer[0] = n;
    int px, pa, pb, po, nx, na, nb, nm, ns;
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    acc.stride[0] = 1;
    gr_status st = GR_OK;
    if ((st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x", &px)) ||
        (st = gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F32, "a", &pa)) ||
        (st = gr_kernel_add_param(k, GR_KP_SCALAR_F, GR_F32, "b", &pb)) ||
        (st = gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "out", &po)) || (st = gr_kx_load(k, px, &acc, &nx)) ||
        (st = gr_kx_param(k, pa, &na)) || (st = gr_kx_param(k, pb, &nb)) ||
        (st = gr_kx_binary(k, GR_KB_MUL, GR_F32, nx, na, &nm)) || (st = gr_kx_binary(k, GR_KB_ADD, GR_F32, nm, nb, &ns))) {
        gr_kernel_destroy(k);
        return st;
    }
    gr_kstage s = {.kind = GR_KS_STORE, .value = ns, .param = po, .access = acc};
    k->params[po].written = true;
    st = gr_kernel_add_stage(k, &s);
    if (st != GR_OK) {
        gr_kernel_destroy(k);
        return st;
    }
    *out = k;
    return GR_OK;
}

/* single-point kernel: dst[off] = src[0] (+ add), i32; used for flags and counters */
static gr_kernel *make_i32_kernel(const char *name, int64_t add, gr_kbinary cmp_fn, bool compare) {
    gr_kernel *k = NULL;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    int ps, pd, nl, nc, nr;
    gr_kaccess acc;
    gr_kaccess_init(&acc);
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I32, "src", &ps));
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_I32, "dst", &pd));
    CHECK_OK(gr_kx_load(k, ps, &acc, &nl));
    CHECK_OK(gr_kx_const_i(k, GR_I32, add, &nc));
    if (compare) CHECK_OK(gr_kx_binary(k, cmp_fn, GR_BOOL, nl, nc, &nr));
    else CHECK_OK(gr_kx_binary(k, GR_KB_ADD, GR_I32, nl, nc, &nr));
    gr_kstage s = {.kind = GR_KS_STORE, .value = nr, .param = pd, .access = acc};
    k->params[pd].written = true;
    CHECK_OK(gr_kernel_add_stage(k, &s));
    return k;
}

typedef struct {
    gr_device *d;
    gr_stream *s;
} env;

static void env_open(env *e) {
    CHECK_OK(gr_device_open(GR_DEVICE_SIM, NULL, 0, &e->d));
    CHECK_OK(gr_dev_stream_create(e->d, &e->s));
}

static void env_close(env *e) {
    gr_dev_stream_destroy(e->d, e->s);
    gr_device_destroy(e->d);
}

static void test_open_and_memory(void) {
    gr_device *d = NULL;
    OK(gr_device_open(GR_DEVICE_AUTO, NULL, 0, &d)); /* no GPU here: falls back to the simulator */
    CHECK(d && strcmp(gr_dev_name(d), "sim") == 0);
    gr_device_destroy(d);
    env e;
    env_open(&e);
    void *dev, *pinned, *host;
    OK(gr_dev_alloc(e.d, GR_MEM_DEVICE, 1000, &dev));
    OK(gr_dev_alloc(e.d, GR_MEM_HOST_PINNED, 64, &pinned));
    OK(gr_dev_alloc(e.d, GR_MEM_HOST, 64, &host));
    CHECK(gr_dev_mem_in_use(e.d) == 1000);
    /* copies: H2D from pageable host (legal eagerly), D2D, D2H into pinned */
    float src[16], back[16];
    for (int i = 0; i < 16; i++) src[i] = (float)i * 1.5f;
    OK(gr_dev_memcpy(e.d, e.s, dev, src, sizeof(src), GR_COPY_H2D));
    OK(gr_dev_memcpy(e.d, e.s, (char *)dev + 512, dev, sizeof(src), GR_COPY_D2D));
    OK(gr_dev_memcpy(e.d, e.s, pinned, (char *)dev + 512, sizeof(src), GR_COPY_D2H));
    OK(gr_dev_memcpy(e.d, e.s, back, pinned, sizeof(src), GR_COPY_H2H));
    OK(gr_dev_stream_sync(e.d, e.s));
    CHECK(memcmp(src, back, sizeof(src)) == 0);
    OK(gr_dev_memset(e.d, e.s, dev, 0, 1000));
    CHECK(((float *)dev)[1] == 0.0f);
    /* out of bounds and use-after-free on the device side */
    CHECK_ERR(gr_dev_memcpy(e.d, e.s, (char *)dev + 990, src, 16, GR_COPY_H2D), GR_ERR_HAZARD, "out of bounds");
    gr_dev_free(e.d, dev);
    CHECK(gr_dev_mem_in_use(e.d) == 0);
    CHECK_ERR(gr_dev_memcpy(e.d, e.s, dev, src, 16, GR_COPY_H2D), GR_ERR_HAZARD, "use-after-free");
    CHECK_ERR(gr_dev_memcpy(e.d, e.s, src, src + 4, 16, GR_COPY_D2D), GR_ERR_HAZARD, "not memory allocated by the device");
    /* a kernel reading pageable host memory is refused */
    gr_kernel *k;
    OK(make_axpb(4, &k));
    gr_kfunc *f;
    OK(gr_dev_kernel_prepare(e.d, k, &f));
    gr_kernel_destroy(k);
    gr_karg args[4] = {{.ptr = host}, {.f = 2}, {.f = 1}, {.ptr = pinned}};
    CHECK_ERR(gr_dev_kernel_launch(e.d, e.s, f, args, 4), GR_ERR_HAZARD, "pageable host memory");
    args[0].ptr = pinned;
    OK(gr_dev_kernel_launch(e.d, e.s, f, args, 4)); /* pinned host memory is device-accessible */
    args[3].ptr = (char *)pinned + 56;        /* 16 bytes at +56 overrun 64 */
    CHECK_ERR(gr_dev_kernel_launch(e.d, e.s, f, args, 4), GR_ERR_HAZARD, "kernel axpb: out of bounds: parameter out");
    gr_dev_kernel_release(e.d, f);
    gr_dev_free(e.d, pinned);
    gr_dev_free(e.d, host);
    env_close(&e);
}

/* The façade over a backend that fills no vtable entry: every wrapper of a
 * required entry says which entry is missing, the documented defaults hold, the
 * release wrappers do nothing, and no capability is claimed. The fake device's
 * vtable is built here on purpose: no backend has NULL entries to test with. */
static void test_facade_empty_backend(void) {
    struct gr_device_i empty = {0};
    gr_device fake = {.iface = &empty, .ctx = NULL, .kind = GR_DEVICE_SIM};
    gr_device *d = &fake;
    int dummy;
    void *p = &dummy;
    gr_stream *s = (gr_stream *)p;
    gr_event *ev = (gr_event *)p;
    gr_kfunc *f = (gr_kfunc *)p;
    gr_dgraph *g = (gr_dgraph *)p;
    gr_dexec *x = (gr_dexec *)p;
    gr_karg args[1] = {{.i = 0}};
    gr_libcall call;
    memset(&call, 0, sizeof call);
    gr_gnode_info info;
    uint64_t h = 1;
    double us = 1;
    void *out = p;
#define UNSUP(expr, entry) CHECK_ERR(expr, GR_ERR_UNSUPPORTED, "device device does not support " entry)
    UNSUP(gr_dev_alloc(d, GR_MEM_DEVICE, 8, &out), "alloc");
    CHECK(out == NULL);
    UNSUP(gr_dev_stream_create(d, &s), "stream_create");
    CHECK(s == NULL);
    UNSUP(gr_dev_stream_sync(d, NULL), "stream_sync");
    UNSUP(gr_dev_event_create(d, &ev), "event_create");
    CHECK(ev == NULL);
    UNSUP(gr_dev_event_record(d, (gr_event *)p, NULL), "event_record");
    UNSUP(gr_dev_event_elapsed_us(d, (gr_event *)p, (gr_event *)p, &us), "event_elapsed_us");
    CHECK(us == 0);
    UNSUP(gr_dev_memcpy(d, NULL, p, p, 1, GR_COPY_H2H), "memcpy_async");
    UNSUP(gr_dev_memset(d, NULL, p, 0, 1), "memset_async");
    UNSUP(gr_dev_kernel_prepare(d, NULL, &f), "kernel_prepare");
    CHECK(f == NULL);
    UNSUP(gr_dev_kernel_launch(d, NULL, (gr_kfunc *)p, args, 1), "kernel_launch");
    UNSUP(gr_dev_libcall(d, NULL, &call, args, 1), "libcall");
    UNSUP(gr_dev_capture_begin(d, NULL), "capture_begin");
    UNSUP(gr_dev_capture_end(d, NULL, &g), "capture_end");
    CHECK(g == NULL);
    UNSUP(gr_dev_graph_instantiate(d, (gr_dgraph *)p, &x), "graph_instantiate");
    CHECK(x == NULL);
    UNSUP(gr_dev_graph_launch(d, (gr_dexec *)p, NULL), "graph_launch");
    UNSUP(gr_dev_graph_node_info(d, (gr_dgraph *)p, 0, &info), "graph_node_info");
    UNSUP(gr_dev_exec_kernel_node_set_args(d, (gr_dexec *)p, 0, args, 1), "exec_kernel_node_set_args");
    UNSUP(gr_dev_exec_update(d, (gr_dexec *)p, (gr_dgraph *)p), "exec_update");
    UNSUP(gr_dev_capture_mark_updatable(d, NULL, &h), "capture_mark_updatable");
    CHECK(h == 0);
    UNSUP(gr_dev_cond_create(d, NULL, GR_COND_IF, 0, &h), "cond_create");
    UNSUP(gr_dev_cond_body_begin(d, NULL, 1, 0), "cond_body_begin");
    UNSUP(gr_dev_cond_body_end(d, NULL, 1, 0), "cond_body_end");
#undef UNSUP
    /* documented defaults */
    CHECK(strcmp(gr_dev_name(d), "device") == 0);
    CHECK(gr_dev_mem_in_use(d) == 0);
    CHECK(gr_dev_graph_num_nodes(d, (gr_dgraph *)p) == 0);
    OK(gr_dev_graph_upload(d, (gr_dexec *)p, NULL));
    double t0 = gr_dev_clock_us(d), t1 = gr_dev_clock_us(d);
    CHECK(t0 > 0 && t1 >= t0); /* the host's wall clock */
    /* release entries: nothing to call, nothing happens */
    gr_dev_free(d, p);
    gr_dev_stream_destroy(d, (gr_stream *)p);
    gr_dev_event_destroy(d, (gr_event *)p);
    gr_dev_kernel_release(d, (gr_kfunc *)p);
    gr_dev_graph_destroy(d, (gr_dgraph *)p);
    gr_dev_exec_destroy(d, (gr_dexec *)p);
    gr_dev_caps none = gr_dev_caps_get(d);
    CHECK(!none.events && !none.graphs && !none.graph_nodes && !none.node_set_args && !none.exec_update &&
          !none.updatable_nodes && !none.conditional_nodes && !none.pinned_memory);
    /* no device at all */
    CHECK_ERR(gr_dev_stream_sync(NULL, NULL), GR_ERR_INVALID, "stream_sync: no device");
    CHECK(strcmp(gr_dev_name(NULL), "?") == 0);
    none = gr_dev_caps_get(NULL);
    CHECK(!none.events && !none.graphs);
    /* one missing entry takes its capability away, and only that one */
    gr_device *sim;
    OK(gr_device_open(GR_DEVICE_SIM, NULL, 0, &sim));
    gr_dev_caps all = gr_dev_caps_get(sim);
    CHECK(all.events && all.graphs && all.graph_nodes && all.node_set_args && all.exec_update && all.updatable_nodes &&
          all.conditional_nodes && all.pinned_memory);
    CHECK(gr_dev_has_mem_kind(sim, GR_MEM_HOST) && gr_dev_has_mem_kind(sim, GR_MEM_DEVICE));
    CHECK(sim->kind == GR_DEVICE_SIM);
    gr_device view = *sim; /* a device over a copy of sim's vtable, some entries removed */
    struct gr_device_i partial = *view.iface;
    partial.cond_body_end = NULL;
    partial.event_elapsed_us = NULL;
    gr_device sim2 = {.iface = &partial, .ctx = sim->ctx, .kind = GR_DEVICE_SIM};
    gr_dev_caps some = gr_dev_caps_get(&sim2);
    CHECK(!some.conditional_nodes && !some.events);
    CHECK(some.graphs && some.graph_nodes && some.node_set_args && some.exec_update && some.updatable_nodes);
    partial.has_mem_kind = NULL; /* no memory kinds declared: device memory only */
    some = gr_dev_caps_get(&sim2);
    CHECK(!some.pinned_memory && gr_dev_has_mem_kind(&sim2, GR_MEM_DEVICE) && !gr_dev_has_mem_kind(&sim2, GR_MEM_HOST));
    partial.capture_end = NULL; /* no graphs: no graph feature either */
    some = gr_dev_caps_get(&sim2);
    CHECK(!some.graphs && !some.graph_nodes && !some.node_set_args && !some.exec_update && !some.updatable_nodes);
    gr_device_destroy(sim);
}

static void test_clock(void) {
    env e;
    env_open(&e);
    const gr_sim_costs *C = &gr_sim_cost;
    void *dev, *pinned;
    OK(gr_dev_alloc(e.d, GR_MEM_DEVICE, 1 << 20, &dev));
    OK(gr_dev_alloc(e.d, GR_MEM_HOST_PINNED, 16, &pinned));
    double t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_memcpy(e.d, e.s, dev, pinned, 8, GR_COPY_H2D));
    CHECK(NEAR(gr_dev_clock_us(e.d) - t0, C->copy_host_us)); /* async: the host only pays the submit */
    OK(gr_dev_stream_sync(e.d, e.s));
    CHECK_MSG(NEAR(gr_dev_clock_us(e.d) - t0, 6.86 + 8 / 2.5e4), "h2d 8B roundtrip %.3f", gr_dev_clock_us(e.d) - t0);
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_memcpy(e.d, e.s, (char *)dev + 4096, dev, 4096, GR_COPY_D2D));
    OK(gr_dev_stream_sync(e.d, e.s));
    CHECK_MSG(fabs(gr_dev_clock_us(e.d) - t0 - 5.6) < 0.05, "d2d 4KB %.3f", gr_dev_clock_us(e.d) - t0);
    /* 10 tiny eager kernels: host-bound at 4.1 µs each; the last one ends 2 µs later */
    gr_kernel *k;
    OK(make_axpb(16, &k));
    gr_kfunc *f;
    OK(gr_dev_kernel_prepare(e.d, k, &f));
    gr_kernel_destroy(k);
    gr_karg args[4] = {{.ptr = dev}, {.f = 2}, {.f = 1}, {.ptr = (char *)dev + 64}};
    gr_event *ev0, *ev1;
    OK(gr_dev_event_create(e.d, &ev0));
    OK(gr_dev_event_create(e.d, &ev1));
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_event_record(e.d, ev0, e.s));
    for (int i = 0; i < 10; i++) OK(gr_dev_kernel_launch(e.d, e.s, f, args, 4));
    CHECK(NEAR(gr_dev_clock_us(e.d) - t0, 10 * C->launch_host_us));
    OK(gr_dev_event_record(e.d, ev1, e.s));
    OK(gr_dev_stream_sync(e.d, e.s));
    CHECK(NEAR(gr_dev_clock_us(e.d) - t0, 10 * C->launch_host_us + C->kernel_min_us));
    double el;
    OK(gr_dev_event_elapsed_us(e.d, ev0, ev1, &el));
    CHECK(NEAR(el, 10 * C->launch_host_us + C->kernel_min_us));
    /* a big kernel is bandwidth-bound: 2 x 1 MB moved (read x, write out) at 3 TB/s */
    gr_dev_kernel_release(e.d, f);
    OK(make_axpb(1 << 17, &k));
    OK(gr_dev_kernel_prepare(e.d, k, &f));
    gr_kernel_destroy(k);
    args[3].ptr = (char *)dev + (1 << 19);
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_kernel_launch(e.d, e.s, f, args, 4));
    OK(gr_dev_stream_sync(e.d, e.s));
    double want = C->launch_host_us + GR_MAX(C->kernel_min_us, GR_MAX(2.0 * (1 << 19) / C->mem_bytes_per_us,
                                                                       (double)(1 << 17) * 5 / C->flops_per_us));
    CHECK_MSG(NEAR(gr_dev_clock_us(e.d) - t0, want), "big kernel %.3f want %.3f", gr_dev_clock_us(e.d) - t0, want);
    /* 1-node graph: launch + sync ≈ 7.2 µs (anchor graph1_launch_sync_min) */
    args[3].ptr = (char *)dev + 64;
    gr_dev_kernel_release(e.d, f);
    OK(make_axpb(16, &k));
    OK(gr_dev_kernel_prepare(e.d, k, &f));
    gr_kernel_destroy(k);
    gr_dgraph *g;
    gr_dexec *x;
    OK(gr_dev_capture_begin(e.d, e.s));
    OK(gr_dev_kernel_launch(e.d, e.s, f, args, 4));
    OK(gr_dev_capture_end(e.d, e.s, &g));
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_graph_instantiate(e.d, g, &x));
    CHECK(NEAR(gr_dev_clock_us(e.d) - t0, C->instantiate_per_node_us));
    OK(gr_dev_graph_upload(e.d, x, e.s));
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK(NEAR(gr_dev_clock_us(e.d) - t0, C->graph_submit_us));
    OK(gr_dev_stream_sync(e.d, e.s));
    double g1 = gr_dev_clock_us(e.d) - t0;
    CHECK_MSG(fabs(g1 - 7.2) < 0.05, "graph1 launch+sync %.3f", g1);
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_exec_kernel_node_set_args(e.d, x, 0, args, 4));
    CHECK(NEAR(gr_dev_clock_us(e.d) - t0, 1.15));
    gr_dev_exec_destroy(e.d, x);
    gr_dev_graph_destroy(e.d, g);
    gr_dev_event_destroy(e.d, ev0);
    gr_dev_event_destroy(e.d, ev1);
    gr_dev_kernel_release(e.d, f);
    gr_dev_free(e.d, dev);
    gr_dev_free(e.d, pinned);
    env_close(&e);
}

/* 3-kernel chain: y = 2x + 1; z = y * s; w = z + 0.25 (s is the host scalar) */
typedef struct {
    env e;
    gr_kfunc *f;
    float *x, *y, *z, *w;
    gr_karg a1[4], a2[4], a3[4];
} chain;

static void chain_open(chain *c, int n) {
    env_open(&c->e);
    gr_kernel *k;
    OK(make_axpb(n, &k));
    OK(gr_dev_kernel_prepare(c->e.d, k, &c->f));
    gr_kernel_destroy(k);
    void *p;
    OK(gr_dev_alloc(c->e.d, GR_MEM_DEVICE, (size_t)n * 16, &p));
    c->x = p;
    c->y = c->x + n;
    c->z = c->y + n;
    c->w = c->z + n;
    for (int i = 0; i < n; i++) c->x[i] = (float)i * 0.1f - 3.0f;
    gr_karg a1[4] = {{.ptr = c->x}, {.f = 2.0}, {.f = 1.0}, {.ptr = c->y}};
    gr_karg a2[4] = {{.ptr = c->y}, {.f = 0.7}, {.f = 0.0}, {.ptr = c->z}};
    gr_karg a3[4] = {{.ptr = c->z}, {.f = 1.0}, {.f = 0.25}, {.ptr = c->w}};
    memcpy(c->a1, a1, sizeof(a1));
    memcpy(c->a2, a2, sizeof(a2));
    memcpy(c->a3, a3, sizeof(a3));
}

static gr_status chain_run(chain *c) {
    GR_TRY(gr_dev_kernel_launch(c->e.d, c->e.s, c->f, c->a1, 4));
    GR_TRY(gr_dev_kernel_launch(c->e.d, c->e.s, c->f, c->a2, 4));
    return gr_dev_kernel_launch(c->e.d, c->e.s, c->f, c->a3, 4);
}

static void chain_close(chain *c) {
    gr_dev_kernel_release(c->e.d, c->f);
    gr_dev_free(c->e.d, c->x);
    env_close(&c->e);
}

static void test_capture_replay(void) {
    enum { N = 1000 };
    chain c;
    chain_open(&c, N);
    static float eager[N], ref[N];
    OK(chain_run(&c));
    OK(gr_dev_stream_sync(c.e.d, c.e.s));
    memcpy(eager, c.w, sizeof(eager));
    for (int i = 0; i < N; i++) ref[i] = ((c.x[i] * 2.0f + 1.0f) * 0.7f + 0.0f) * 1.0f + 0.25f;
    CHECK(memcmp(eager, ref, sizeof(ref)) == 0);
    memset(c.w, 0, sizeof(float) * N);
    gr_dgraph *g;
    gr_dexec *x;
    OK(gr_dev_capture_begin(c.e.d, c.e.s));
    OK(chain_run(&c));
    CHECK(c.w[5] == 0.0f); /* captured, not run */
    OK(gr_dev_capture_end(c.e.d, c.e.s, &g));
    CHECK(gr_dev_graph_num_nodes(c.e.d, g) == 3);
    gr_gnode_info info;
    OK(gr_dev_graph_node_info(c.e.d, g, 2, &info));
    CHECK(info.kind == GR_GNODE_KERNEL && info.func == c.f && info.n_args == 4);
    CHECK_ERR(gr_dev_graph_node_info(c.e.d, g, 3, &info), GR_ERR_INVALID, "no node 3");
    OK(gr_dev_graph_instantiate(c.e.d, g, &x));
    OK(gr_dev_graph_launch(c.e.d, x, c.e.s));
    OK(gr_dev_stream_sync(c.e.d, c.e.s));
    CHECK(memcmp(c.w, eager, sizeof(eager)) == 0);
    /* the host changes the scalar: the replay still uses the captured 0.7 (stale) */
    c.a2[1].f = 3.0;
    OK(gr_dev_graph_launch(c.e.d, x, c.e.s));
    CHECK(memcmp(c.w, eager, sizeof(eager)) == 0);
    /* set_args on node 1 fixes it */
    OK(gr_dev_exec_kernel_node_set_args(c.e.d, x, 1, c.a2, 4));
    OK(gr_dev_graph_launch(c.e.d, x, c.e.s));
    CHECK(c.w[10] == ((c.x[10] * 2.0f + 1.0f) * 3.0f) * 1.0f + 0.25f);
    CHECK_ERR(gr_dev_exec_kernel_node_set_args(c.e.d, x, 1, c.a2, 3), GR_ERR_INVALID, "has 4 args");
    CHECK_ERR(gr_dev_exec_kernel_node_set_args(c.e.d, x, 7, c.a2, 4), GR_ERR_INVALID, "no node 7");
    /* exec_update from a graph with the same topology but another output buffer */
    float *w2 = c.x + 3 * N; /* reuse w's storage through a second chain graph writing y twice */
    (void)w2;
    gr_dgraph *g2;
    c.a2[1].f = -1.0;
    OK(gr_dev_capture_begin(c.e.d, c.e.s));
    OK(chain_run(&c));
    OK(gr_dev_capture_end(c.e.d, c.e.s, &g2));
    OK(gr_dev_exec_update(c.e.d, x, g2));
    OK(gr_dev_graph_launch(c.e.d, x, c.e.s));
    CHECK(c.w[10] == ((c.x[10] * 2.0f + 1.0f) * -1.0f) * 1.0f + 0.25f);
    /* a different topology is refused */
    gr_dgraph *g3;
    OK(gr_dev_capture_begin(c.e.d, c.e.s));
    OK(gr_dev_kernel_launch(c.e.d, c.e.s, c.f, c.a1, 4));
    OK(gr_dev_capture_end(c.e.d, c.e.s, &g3));
    CHECK_ERR(gr_dev_exec_update(c.e.d, x, g3), GR_ERR_INVALID, "topology");
    gr_dev_graph_destroy(c.e.d, g3);
    gr_dev_graph_destroy(c.e.d, g2);
    gr_dev_exec_destroy(c.e.d, x);
    gr_dev_graph_destroy(c.e.d, g);
    chain_close(&c);
}

static void test_capture_hazards(void) {
    env e;
    env_open(&e);
    void *dev, *pinned, *host;
    OK(gr_dev_alloc(e.d, GR_MEM_DEVICE, 256, &dev));
    OK(gr_dev_alloc(e.d, GR_MEM_HOST_PINNED, 64, &pinned));
    OK(gr_dev_alloc(e.d, GR_MEM_HOST, 64, &host));
    gr_dgraph *g = NULL;
    gr_dexec *x = NULL;
    /* a captured copy from pinned memory, replayed after the pinned buffer was freed */
    memset(pinned, 7, 64);
    OK(gr_dev_capture_begin(e.d, e.s));
    OK(gr_dev_memcpy(e.d, e.s, dev, pinned, 64, GR_COPY_H2D));
    OK(gr_dev_capture_end(e.d, e.s, &g));
    OK(gr_dev_graph_instantiate(e.d, g, &x));
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK(((unsigned char *)dev)[63] == 7);
    gr_dev_free(e.d, pinned);
    CHECK_ERR(gr_dev_graph_launch(e.d, x, e.s), GR_ERR_HAZARD, "graph node 0 (copy of 64 bytes): use-after-free");
    gr_dev_exec_destroy(e.d, x);
    gr_dev_graph_destroy(e.d, g);
    /* synchronize during capture */
    OK(gr_dev_capture_begin(e.d, e.s));
    CHECK_ERR(gr_dev_stream_sync(e.d, e.s), GR_ERR_HAZARD, "synchronize during stream capture");
    CHECK_ERR(gr_dev_memcpy(e.d, e.s, dev, (char *)dev + 128, 8, GR_COPY_D2D), GR_ERR_HAZARD, "invalidated");
    CHECK_ERR(gr_dev_capture_end(e.d, e.s, &g), GR_ERR_HAZARD, "stream synchronize during capture");
    CHECK(g == NULL);
    /* allocation during capture */
    void *p = NULL;
    OK(gr_dev_capture_begin(e.d, e.s));
    CHECK_ERR(gr_dev_alloc(e.d, GR_MEM_DEVICE, 32, &p), GR_ERR_HAZARD, "during stream capture");
    CHECK(p == NULL);
    CHECK_ERR(gr_dev_capture_end(e.d, e.s, &g), GR_ERR_HAZARD, "alloc of 32 bytes of device memory during capture");
    /* copy from pageable host memory (allocated as pageable, or any user pointer) */
    OK(gr_dev_capture_begin(e.d, e.s));
    CHECK_ERR(gr_dev_memcpy(e.d, e.s, dev, host, 16, GR_COPY_H2D), GR_ERR_HAZARD, "pageable");
    CHECK_ERR(gr_dev_capture_end(e.d, e.s, &g), GR_ERR_HAZARD, "pageable host memory during capture");
    char stack[16] = {0};
    OK(gr_dev_capture_begin(e.d, e.s));
    CHECK_ERR(gr_dev_memcpy(e.d, e.s, dev, stack, 16, GR_COPY_H2D), GR_ERR_HAZARD, "pageable");
    CHECK_ERR(gr_dev_capture_end(e.d, e.s, &g), GR_ERR_HAZARD, "H2D copy of 16 bytes");
    /* after a failed capture the stream works eagerly again */
    OK(gr_dev_memcpy(e.d, e.s, dev, stack, 16, GR_COPY_H2D));
    OK(gr_dev_stream_sync(e.d, e.s));
    CHECK_ERR(gr_dev_capture_end(e.d, e.s, &g), GR_ERR_INVALID, "not capturing");
    gr_dev_free(e.d, dev);
    gr_dev_free(e.d, host);
    env_close(&e);
}

/* the scale of an updatable node is patched by a "prelude" (a kernel, then a device copy) */
static void test_updatable(void) {
    enum { N = 64 };
    chain c;
    chain_open(&c, N);
    gr_dgraph *g;
    gr_dexec *x;
    uint64_t h = 0;
    OK(gr_dev_capture_begin(c.e.d, c.e.s));
    OK(gr_dev_kernel_launch(c.e.d, c.e.s, c.f, c.a1, 4));
    OK(gr_dev_kernel_launch(c.e.d, c.e.s, c.f, c.a2, 4));
    OK(gr_dev_capture_mark_updatable(c.e.d, c.e.s, &h));
    OK(gr_dev_kernel_launch(c.e.d, c.e.s, c.f, c.a3, 4));
    OK(gr_dev_capture_end(c.e.d, c.e.s, &g));
    CHECK(h != 0);
    OK(gr_dev_graph_instantiate(c.e.d, g, &x));
    /* prelude kernel: slot[1] (arg "a" of the node, an f64 in a gr_karg) = value[0] */
    gr_kernel *k;
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
    OK(gr_kernel_add_stage(k, &st));
    gr_kfunc *pf;
    OK(gr_dev_kernel_prepare(c.e.d, k, &pf));
    gr_kernel_destroy(k);
    void *value;
    OK(gr_dev_alloc(c.e.d, GR_MEM_DEVICE, 8, &value));
    *(double *)value = 5.0;
    gr_karg pa[2] = {{.ptr = value}, {.ptr = (void *)(uintptr_t)h}};
    OK(gr_dev_kernel_launch(c.e.d, c.e.s, pf, pa, 2));
    OK(gr_dev_graph_launch(c.e.d, x, c.e.s));
    CHECK(c.w[3] == (c.x[3] * 2.0f + 1.0f) * 5.0f + 0.25f);
    /* or a device copy into the slot from pinned memory */
    void *pinned;
    OK(gr_dev_alloc(c.e.d, GR_MEM_HOST_PINNED, 8, &pinned));
    *(double *)pinned = -2.0;
    OK(gr_dev_memcpy(c.e.d, c.e.s, (char *)(uintptr_t)h + 8, pinned, 8, GR_COPY_H2D));
    OK(gr_dev_graph_launch(c.e.d, x, c.e.s));
    CHECK(c.w[3] == (c.x[3] * 2.0f + 1.0f) * -2.0f + 0.25f);
    /* a non-kernel last node cannot be marked */
    OK(gr_dev_capture_begin(c.e.d, c.e.s));
    CHECK_ERR(gr_dev_capture_mark_updatable(c.e.d, c.e.s, &h), GR_ERR_INVALID, "not a kernel");
    gr_dgraph *g2;
    OK(gr_dev_capture_end(c.e.d, c.e.s, &g2));
    CHECK(gr_dev_graph_num_nodes(c.e.d, g2) == 0);
    gr_dev_graph_destroy(c.e.d, g2);
    gr_dev_kernel_release(c.e.d, pf);
    gr_dev_free(c.e.d, value);
    gr_dev_free(c.e.d, pinned);
    gr_dev_exec_destroy(c.e.d, x);
    gr_dev_graph_destroy(c.e.d, g);
    chain_close(&c);
}

static void test_conditionals(void) {
    env e;
    env_open(&e);
    int32_t *mem;
    void *p;
    OK(gr_dev_alloc(e.d, GR_MEM_DEVICE, 64, &p));
    mem = p;
    int32_t *fv = mem, *hits = mem + 1, *cnt = mem + 2, *hits_else = mem + 3;
    gr_kernel *kcopy = make_i32_kernel("set_flag", 0, GR_KB_ADD, false);      /* dst = src */
    gr_kernel *kinc = make_i32_kernel("inc", 1, GR_KB_ADD, false);            /* dst = src + 1 */
    gr_kernel *kdec = make_i32_kernel("dec", -1, GR_KB_ADD, false);           /* dst = src - 1 */
    gr_kernel *kgt = make_i32_kernel("more_left", 1, GR_KB_GT, true);         /* dst = src > 1 */
    gr_kfunc *fcopy, *finc, *fdec, *fgt;
    OK(gr_dev_kernel_prepare(e.d, kcopy, &fcopy));
    OK(gr_dev_kernel_prepare(e.d, kinc, &finc));
    OK(gr_dev_kernel_prepare(e.d, kdec, &fdec));
    OK(gr_dev_kernel_prepare(e.d, kgt, &fgt));
    gr_kernel_destroy(kcopy);
    gr_kernel_destroy(kinc);
    gr_kernel_destroy(kdec);
    gr_kernel_destroy(kgt);

    /* IF: flag = fv; if (flag) hits++ */
    gr_dgraph *g;
    gr_dexec *x;
    uint64_t h;
    OK(gr_dev_capture_begin(e.d, e.s));
    OK(gr_dev_cond_create(e.d, e.s, GR_COND_IF, 0, &h));
    void *flag = (void *)(uintptr_t)h;
    gr_karg set[2] = {{.ptr = fv}, {.ptr = flag}}, inc[2] = {{.ptr = hits}, {.ptr = hits}};
    OK(gr_dev_kernel_launch(e.d, e.s, fcopy, set, 2));
    OK(gr_dev_cond_body_begin(e.d, e.s, h, 0));
    OK(gr_dev_kernel_launch(e.d, e.s, finc, inc, 2));
    OK(gr_dev_cond_body_end(e.d, e.s, h, 0));
    OK(gr_dev_capture_end(e.d, e.s, &g));
    CHECK(gr_dev_graph_num_nodes(e.d, g) == 3);
    gr_gnode_info info;
    OK(gr_dev_graph_node_info(e.d, g, 1, &info));
    CHECK(info.kind == GR_GNODE_CONDITIONAL);
    OK(gr_dev_graph_instantiate(e.d, g, &x));
    *fv = 0;
    *hits = 0;
    double t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_graph_launch(e.d, x, e.s));
    OK(gr_dev_stream_sync(e.d, e.s));
    double skipped = gr_dev_clock_us(e.d) - t0;
    CHECK(*hits == 0);
    *fv = 1;
    t0 = gr_dev_clock_us(e.d);
    OK(gr_dev_graph_launch(e.d, x, e.s));
    OK(gr_dev_stream_sync(e.d, e.s));
    double taken = gr_dev_clock_us(e.d) - t0;
    CHECK(*hits == 1 && taken > skipped);
    *fv = 7;
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK(*hits == 2);
    gr_dev_exec_destroy(e.d, x);
    gr_dev_graph_destroy(e.d, g);

    /* IF_ELSE: then hits++, else hits_else++ */
    OK(gr_dev_capture_begin(e.d, e.s));
    OK(gr_dev_cond_create(e.d, e.s, GR_COND_IF_ELSE, 0, &h));
    set[1].ptr = (void *)(uintptr_t)h;
    gr_karg inc_else[2] = {{.ptr = hits_else}, {.ptr = hits_else}};
    OK(gr_dev_kernel_launch(e.d, e.s, fcopy, set, 2));
    OK(gr_dev_cond_body_begin(e.d, e.s, h, 0));
    OK(gr_dev_kernel_launch(e.d, e.s, finc, inc, 2));
    OK(gr_dev_cond_body_end(e.d, e.s, h, 0));
    OK(gr_dev_cond_body_begin(e.d, e.s, h, 1));
    OK(gr_dev_kernel_launch(e.d, e.s, finc, inc_else, 2));
    OK(gr_dev_kernel_launch(e.d, e.s, finc, inc_else, 2));
    OK(gr_dev_cond_body_end(e.d, e.s, h, 1));
    OK(gr_dev_capture_end(e.d, e.s, &g));
    CHECK(gr_dev_graph_num_nodes(e.d, g) == 5);
    OK(gr_dev_graph_instantiate(e.d, g, &x));
    *hits = *hits_else = 0;
    *fv = 0;
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK(*hits == 0 && *hits_else == 2);
    *fv = 1;
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK(*hits == 1 && *hits_else == 2);
    /* set_args reaches a node inside a body (pre-order numbering: 3 = first else node) */
    gr_karg redirect[2] = {{.ptr = hits}, {.ptr = hits}};
    OK(gr_dev_exec_kernel_node_set_args(e.d, x, 3, redirect, 2));
    *fv = 0;
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK(*hits == 2 && *hits_else == 3);
    gr_dev_exec_destroy(e.d, x);
    gr_dev_graph_destroy(e.d, g);

    /* WHILE (default 1): body { flag = cnt > 1; hits++; cnt-- } runs cnt times */
    OK(gr_dev_capture_begin(e.d, e.s));
    OK(gr_dev_cond_create(e.d, e.s, GR_COND_WHILE, 1, &h));
    gr_karg gt[2] = {{.ptr = cnt}, {.ptr = (void *)(uintptr_t)h}}, dec[2] = {{.ptr = cnt}, {.ptr = cnt}};
    OK(gr_dev_cond_body_begin(e.d, e.s, h, 0));
    OK(gr_dev_kernel_launch(e.d, e.s, fgt, gt, 2));
    OK(gr_dev_kernel_launch(e.d, e.s, finc, inc, 2));
    OK(gr_dev_kernel_launch(e.d, e.s, fdec, dec, 2));
    CHECK_ERR(gr_dev_cond_body_end(e.d, e.s, h, 1), GR_ERR_INVALID, "does not match");
    OK(gr_dev_cond_body_end(e.d, e.s, h, 0));
    OK(gr_dev_capture_end(e.d, e.s, &g));
    OK(gr_dev_graph_instantiate(e.d, g, &x));
    *hits = 0;
    *cnt = 3;
    OK(gr_dev_graph_launch(e.d, x, e.s));
    CHECK_MSG(*hits == 3 && *cnt == 0, "while: hits %d cnt %d", *hits, *cnt);
    *cnt = 5;
    OK(gr_dev_graph_launch(e.d, x, e.s)); /* the flag is reset to its default at each launch */
    CHECK(*hits == 8 && *cnt == 0);
    gr_dev_exec_destroy(e.d, x);
    gr_dev_graph_destroy(e.d, g);

    /* misuse */
    CHECK_ERR(gr_dev_cond_create(e.d, e.s, GR_COND_IF, 0, &h), GR_ERR_INVALID, "outside a capture");
    OK(gr_dev_capture_begin(e.d, e.s));
    OK(gr_dev_cond_create(e.d, e.s, GR_COND_IF, 0, &h));
    CHECK_ERR(gr_dev_cond_body_begin(e.d, e.s, h, 1), GR_ERR_INVALID, "branch 1 does not exist");
    OK(gr_dev_cond_body_begin(e.d, e.s, h, 0));
    CHECK_ERR(gr_dev_capture_end(e.d, e.s, &g), GR_ERR_INVALID, "inside a conditional body");

    gr_dev_kernel_release(e.d, fcopy);
    gr_dev_kernel_release(e.d, finc);
    gr_dev_kernel_release(e.d, fdec);
    gr_dev_kernel_release(e.d, fgt);
    gr_dev_free(e.d, p);
    env_close(&e);
}

/* device creation + a capture, with the Nth allocation failing: errors, never leaks */
static gr_status alloc_scenario(void) {
    gr_device *d = NULL;
    gr_stream *s = NULL;
    gr_kernel *k = NULL;
    gr_kfunc *f = NULL;
    gr_dgraph *g = NULL;
    gr_dexec *x = NULL;
    void *buf = NULL;
    uint64_t h;
    gr_status st;
    if ((st = gr_device_open(GR_DEVICE_SIM, NULL, 0, &d))) goto out;
    if ((st = gr_dev_stream_create(d, &s))) goto out;
    if ((st = gr_dev_alloc(d, GR_MEM_DEVICE, 256, &buf))) goto out;
    if ((st = make_axpb(16, &k))) goto out;
    if ((st = gr_dev_kernel_prepare(d, k, &f))) goto out;
    gr_karg args[4] = {{.ptr = buf}, {.f = 2}, {.f = 1}, {.ptr = (char *)buf + 64}};
    if ((st = gr_dev_kernel_launch(d, s, f, args, 4))) goto out;
    if ((st = gr_dev_capture_begin(d, s))) goto out;
    st = gr_dev_kernel_launch(d, s, f, args, 4);
    if (!st) st = gr_dev_capture_mark_updatable(d, s, &h);
    if (!st) st = gr_dev_cond_create(d, s, GR_COND_IF, 1, &h);
    if (!st) st = gr_dev_cond_body_begin(d, s, h, 0);
    if (!st) st = gr_dev_kernel_launch(d, s, f, args, 4);
    if (!st) st = gr_dev_cond_body_end(d, s, h, 0);
    {
        gr_status st2 = gr_dev_capture_end(d, s, &g);
        if (!st) st = st2;
    }
    if (st) goto out;
    if ((st = gr_dev_graph_instantiate(d, g, &x))) goto out;
    if ((st = gr_dev_graph_launch(d, x, s))) goto out;
    st = gr_dev_stream_sync(d, s);
out:
    if (d) {
        if (x) gr_dev_exec_destroy(d, x);
        if (g) gr_dev_graph_destroy(d, g);
        if (f) gr_dev_kernel_release(d, f);
        if (buf) gr_dev_free(d, buf);
        if (s) gr_dev_stream_destroy(d, s);
        gr_device_destroy(d);
    }
    gr_kernel_destroy(k);
    return st;
}

static void test_alloc_failures(void) {
    long base = gr_debug_live_allocs();
    int failures = 0, n;
    for (n = 1; n < 500; n++) {
        gr_debug_fail_alloc_after(n);
        gr_status st = alloc_scenario();
        gr_debug_fail_alloc_after(0);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %d", n);
        if (st == GR_OK) break;
        CHECK_MSG(st == GR_ERR_NOMEM, "allocation %d: %s", n, gr_last_error());
        failures++;
    }
    CHECK(failures > 5 && n < 500);
}

int main(void) {
    long live0 = gr_debug_live_allocs();
    test_open_and_memory();
    test_facade_empty_backend();
    test_clock();
    test_capture_replay();
    test_capture_hazards();
    test_updatable();
    test_conditionals();
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == live0, "leaked %ld allocations", gr_debug_live_allocs() - live0);
    return check_summary("test_sim");
}
