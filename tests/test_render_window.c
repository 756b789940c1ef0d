/* test_render_window — the kernels the convolution family lowers to (conv direct and
 * im2col, conv_transpose, max/avg pool, pad in every mode, resize nearest/linear), rendered
 * to CUDA C in literal and shape-generic mode and compiled with NVRTC for sm_90 (no GPU
 * needed; compilation is skipped with a message where NVRTC is missing). Also the window
 * shape rules on symbolic dims: the output dims are expressions that evaluate, per binding,
 * to the sizes the concrete rule gives, and bad attributes are errors naming the node. */
#include "check.h"
#include "codegen/render-cuda.h"
#include "device/cuda/cuda-impl.h"
#include "passes/passes.h"
#include <string.h>

#include "host_exec.h"

static bool nvrtc_present;
static int n_compiled;

static void compile(const char *src, const char *entry) {
    if (!nvrtc_present) return;
    void *cubin = NULL;
    size_t n = 0;
    gr_status st = gr_cuda_nvrtc_compile(src, entry, 90, false, &cubin, &n);
    CHECK_MSG(st == GR_OK && n > 0, "compile %s: %s", entry, gr_last_error());
    if (cubin) gr_free(cubin, n);
    n_compiled++;
}

/* Infers, lowers and fuses g; renders and compiles every kernel both ways. Returns the
 * number of kernel steps (libcalls counted in *n_lib). */
static int render_graph(gr_graph *g, const char *what, int *n_lib) {
    gr_status st = gr_ir_infer_shapes(g);
    CHECK_MSG(st == GR_OK, "%s: infer: %s", what, gr_last_error());
    if (st != GR_OK) return -1;
    gr_step_list steps;
    st = gr_pass_lower(g, &steps);
    CHECK_MSG(st == GR_OK, "%s: lower: %s", what, gr_last_error());
    if (st != GR_OK) return -1;
    CHECK_OK(gr_pass_fuse(g, &steps));
    int n_k = 0;
    if (n_lib) *n_lib = 0;
    for (int i = 0; i < steps.len; i++) {
        if (steps.data[i].kind == GR_STEP_LIBCALL && n_lib) (*n_lib)++;
        if (steps.data[i].kind != GR_STEP_KERNEL) continue;
        const gr_kernel *k = steps.data[i].kernel;
        n_k++;
        for (int mode = 0; mode < 2; mode++) {
            gr_strbuf sb;
            gr_sb_init(&sb);
            st = gr_render_cuda_mode(k, mode ? GR_RENDER_GENERIC : GR_RENDER_LITERAL, &sb);
            CHECK_MSG(st == GR_OK, "%s: render %s: %s", what, k->name, gr_last_error());
            char entry[64];
            gr_render_cuda_entry_name(k, mode ? GR_RENDER_GENERIC : GR_RENDER_LITERAL, entry, sizeof entry);
            if (st == GR_OK) compile(sb.data, entry);
            gr_sb_free(&sb);
        }
    }
    gr_step_list_free(&steps);
    return n_k;
}

static int node1(gr_graph *g, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs) {
    int node = -1;
    CHECK_OK(gr_ir_add_node(g, op, NULL, n_in, in, 1, NULL, n_attr, attrs, &node));
    return node >= 0 ? g->nodes.data[node].out[0] : -1;
}

static float zeros[4096];

static void test_conv(gr_dtype t) {
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    int x = t_input(g, "x", t, 4, DIMS(2, 16, 9, 8), NULL);
    int w = t_const(g, t, 4, DIMS(8, 16, 3, 3), zeros);
    int wd = t_const(g, t, 4, DIMS(16, 1, 3, 3), zeros);
    int wt = t_const(g, t, 4, DIMS(16, 2, 3, 2), zeros);
    int b = t_const(g, t, 1, DIMS(8), zeros);
    int64_t pads[4] = {1, 0, 2, 1}, strides[2] = {2, 1}, dil[2] = {1, 2}, opad[2] = {1, 0};
    gr_ir_attr ca[3] = {A_INTS("pads", pads, 4), A_INTS("strides", strides, 2), A_INTS("dilations", dil, 2)};
    int y1 = node1(g, GR_OP_CONV, 3, (int[]){x, w, b}, 3, ca); /* im2col + matmul + bias */
    gr_ir_attr da[3] = {A_INT("group", 16), A_INTS("pads", pads, 4), A_STR("auto_pad", "SAME_LOWER")};
    int y2 = node1(g, GR_OP_CONV, 2, (int[]){x, wd}, 3, da); /* depthwise, direct */
    gr_ir_attr ta[4] = {A_INT("group", 2), A_INTS("strides", strides, 2), A_INTS("pads", pads, 4), A_INTS("output_padding", opad, 2)};
    int y3 = node1(g, GR_OP_CONV_TRANSPOSE, 2, (int[]){x, wt}, 4, ta);
    CHECK_OK(gr_ir_add_output(g, y1));
    CHECK_OK(gr_ir_add_output(g, y2));
    CHECK_OK(gr_ir_add_output(g, y3));
    int n_lib;
    int n_k = render_graph(g, "conv", &n_lib);
    CHECK_MSG(n_k == 4 && n_lib == 1, "conv: %d kernels (im2col, bias, depthwise, transpose) and %d matmuls", n_k, n_lib);
    gr_ir_graph_destroy(g);
}

static void test_pools(gr_dtype t) {
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    int x = t_input(g, "x", t, 5, DIMS(1, 3, 6, 7, 5), NULL);
    int64_t ks[3] = {2, 3, 2}, st[3] = {2, 2, 1}, pads[6] = {0, 1, 1, 1, 1, 0};
    gr_ir_attr pa[5] = {A_INTS("kernel_shape", ks, 3), A_INTS("strides", st, 3), A_INTS("pads", pads, 6), A_INT("ceil_mode", 1),
                        A_INT("count_include_pad", 1)};
    CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_MAX_POOL, 1, &x, 4, pa)));
    CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_AVG_POOL, 1, &x, 5, pa)));
    pa[4] = A_INT("count_include_pad", 0);
    CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_AVG_POOL, 1, &x, 5, pa)));
    /* 18 taps: the reduction form (12 above: unrolled) */
    int64_t big[3] = {3, 3, 2};
    pa[0] = A_INTS("kernel_shape", big, 3);
    CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_MAX_POOL, 1, &x, 4, pa)));
    CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_AVG_POOL, 1, &x, 5, pa)));
    CHECK(render_graph(g, "pools", NULL) == 5);
    gr_ir_graph_destroy(g);
}

static void test_pad_resize(gr_dtype t) {
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    int x = t_input(g, "x", t, 4, DIMS(2, 3, 5, 6), NULL);
    int64_t pads[8] = {0, 1, 2, -1, 0, 0, 3, 2};
    static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
    for (int m = 0; m < 4; m++) {
        gr_ir_attr a[3] = {A_INTS("pads", pads, 8), A_STR("mode", modes[m]), A_FLOAT("value", 0.5)};
        CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_PAD, 1, &x, 3, a)));
    }
    int64_t sizes[4] = {2, 3, 10, 3};
    static const char *const rmodes[][2] = {{"nearest", "asymmetric"}, {"nearest", "half_pixel"}, {"linear", "align_corners"},
                                            {"linear", "pytorch_half_pixel"}};
    for (int m = 0; m < 4; m++) {
        gr_ir_attr a[4] = {A_INTS("sizes", sizes, 4), A_STR("mode", rmodes[m][0]), A_STR("coord", rmodes[m][1]),
                           A_STR("nearest_mode", m ? "round_prefer_floor" : "floor")};
        CHECK_OK(gr_ir_add_output(g, node1(g, GR_OP_RESIZE, 1, &x, 4, a)));
    }
    CHECK(render_graph(g, "pad/resize", NULL) == 8);
    gr_ir_graph_destroy(g);
}

/* conv + ceil-mode pool on [N, 3, H, W]: expression dims that evaluate to the concrete rule's sizes */
static void test_symbolic_shapes(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    gr_dim d[4];
    CHECK_OK(gr_dx_symbol(g, "N", &d[0]));
    d[1] = gr_dx_const(3);
    CHECK_OK(gr_dx_symbol(g, "H", &d[2]));
    CHECK_OK(gr_dx_symbol(g, "W", &d[3]));
    int x = -1;
    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 4, d, &x));
    int w = t_const(g, GR_F32, 4, DIMS(4, 3, 3, 2), zeros);
    int64_t pads[4] = {1, 0, 2, 1}, strides[2] = {2, 3}, dil[2] = {1, 2}, ks[2] = {3, 2}, ps[2] = {2, 2};
    gr_ir_attr ca[3] = {A_INTS("pads", pads, 4), A_INTS("strides", strides, 2), A_INTS("dilations", dil, 2)};
    int c = node1(g, GR_OP_CONV, 2, (int[]){x, w}, 3, ca);
    gr_ir_attr pa[3] = {A_INTS("kernel_shape", ks, 2), A_INTS("strides", ps, 2), A_INT("ceil_mode", 1)};
    int p = node1(g, GR_OP_MAX_POOL, 1, &c, 3, pa);
    gr_ir_attr sa[2] = {A_INTS("kernel_shape", ks, 2), A_STR("auto_pad", "SAME_UPPER")};
    int s = node1(g, GR_OP_AVG_POOL, 1, &p, 2, sa);
    CHECK_OK(gr_ir_infer_shapes(g));
    for (int h = 1; h < 40; h += 3)
        for (int wd = 3; wd < 30; wd += 5) {
            int64_t syms[3] = {2, h, wd}, got[3][2];
            const int vals[3] = {c, p, s};
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 2; k++) {
                    got[i][k] = -1;
                    CHECK_OK(gr_dx_eval(g, g->values.data[vals[i]].dims[2 + k], syms, &got[i][k]));
                }
            int64_t ch = (h + 3 - 3) / 2 + 1, cw = (wd + 1 - 3) / 3 + 1;     /* conv: (in + pads - eff)//s + 1 */
            if (ch < 1 || cw < 1) continue;                                 /* the concrete rule refuses these */
            int64_t qh = (ch - 3 + 1) / 2, qw = (cw - 2 + 1) / 2;           /* ceil((in - k)/s) */
            int64_t ph = qh + (qh * 2 < ch), pw = qw + (qw * 2 < cw);       /* minus one when the last window starts past in */
            CHECK_MSG(got[0][0] == ch && got[0][1] == cw, "conv H=%d W=%d: %lld x %lld, expected %lld x %lld", h, wd,
                      (long long)got[0][0], (long long)got[0][1], (long long)ch, (long long)cw);
            if (ch >= 3 && cw >= 2)
                CHECK_MSG(got[1][0] == ph && got[1][1] == pw, "pool H=%d W=%d: %lld x %lld, expected %lld x %lld", h, wd,
                          (long long)got[1][0], (long long)got[1][1], (long long)ph, (long long)pw);
            CHECK(got[2][0] == got[1][0] && got[2][1] == got[1][1]); /* SAME, stride 1 */
        }
    CHECK(gr_dx_is_sym(g->values.data[s].dims[0]));
    gr_ir_graph_destroy(g);
}

static void test_shape_errors(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    int x = t_input(g, "x", GR_F32, 4, DIMS(1, 4, 8, 8), NULL);
    int w = t_const(g, GR_F32, 4, DIMS(6, 3, 3, 3), zeros);
    CHECK_OK(gr_ir_add_node(g, GR_OP_CONV, "bad_conv", 2, (int[]){x, w}, 1, NULL, 0, NULL, NULL));
    CHECK_ERR(gr_ir_infer_shapes(g), GR_ERR_SHAPE, "node 'bad_conv' (conv)");
    CHECK(strstr(gr_last_error(), "x has 4 channels but the weight expects 3 x group 1") != NULL);
    gr_ir_graph_destroy(g);

    CHECK_OK(gr_ir_graph_create(&g));
    if (!g) return;
    x = t_input(g, "x", GR_F32, 4, DIMS(1, 4, 8, 8), NULL);
    int64_t ks[2] = {3, 3}, st[2] = {0, 1};
    gr_ir_attr a[2] = {A_INTS("kernel_shape", ks, 2), A_INTS("strides", st, 2)};
    CHECK_OK(gr_ir_add_node(g, GR_OP_MAX_POOL, "bad_pool", 1, &x, 1, NULL, 2, a, NULL));
    CHECK_ERR(gr_ir_infer_shapes(g), GR_ERR_INVALID, "node 'bad_pool' (max_pool)");
    CHECK(strstr(gr_last_error(), "'strides'[0] = 0 is out of range") != NULL);
    gr_ir_graph_destroy(g);
}

int main(void) {
    const gr_nvrtc_api *nv = NULL;
    nvrtc_present = gr_cuda_load_nvrtc(&nv) == GR_OK;
    if (!nvrtc_present) printf("test_render_window: NVRTC compilation skipped: NVRTC not found (%s)\n", gr_last_error());
    long base = gr_debug_live_allocs();
    test_conv(GR_F32);
    test_conv(GR_F16);
    test_pools(GR_F32);
    test_pools(GR_BF16);
    test_pad_resize(GR_F32);
    test_pad_resize(GR_F16);
    test_symbolic_shapes();
    test_shape_errors();
    CHECK_MSG(gr_debug_live_allocs() == base, "%ld allocations leaked", gr_debug_live_allocs() - base);
    printf("test_render_window: %d sources compiled with NVRTC\n", n_compiled);
    return check_summary("test_render_window");
}
