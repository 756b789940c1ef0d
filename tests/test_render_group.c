/* test_render_group — the row-group loop of vectorized elementwise kernels (render-cuda.c,
 * issue 15: RoPE's fused kernel was bound by per-point 64-bit index division).
 *
 * The rendered CUDA source (literal and generic) is compiled for the host with a C++ compiler,
 * behind a small shim standing in for CUDA's built-ins, and run thread by thread over its
 * launch grid; every buffer it writes must be bit-identical to the reference interpreter's
 * (gr_kernel_interpret, the simulator's semantics). Covered: the group form with vector row
 * loads (RoPE's q and cos/sin), its scalar fill (a misaligned base, a stride of 2 along the
 * rows), kernels that must not take it (a last extent not a multiple of the width: the old
 * loop and its scalar tail), the 32-bit limit (lowered through GR_IDX32_MAX on the host: the
 * old 64-bit loop runs instead), grid-stride groups (a grid smaller than the work), f32
 * (4-wide) and bf16 (8-wide), and the Llama export's RoPE kernels at batch 8, seq 512. The
 * sources are also compiled with NVRTC for sm_90 where NVRTC is present. Skipped with a
 * message where no host C++ compiler is found. */
#include "check.h"
#include "codegen/kir.h"
#include "codegen/render-cuda.h"
#include "device/cuda/cuda-impl.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <unistd.h>

static bool nvrtc_present, cxx_present;
static char tmpdir[256];
static int ran_host, ran_group, compiled_nvrtc;

/* ==== the host shim ======================================================================= */

/* What the generated source needs of CUDA, on the host: elementwise kernels only (no shared
 * memory or warp collectives run). asm() is dropped: the f16 conversions it implements are not
 * used by these tests, and bf16 rounding takes the prelude's portable path (no __CUDA_ARCH__). */
static const char host_shim[] =
    "#include <math.h>\n#include <string.h>\n#include <algorithm>\n"
    "struct gr_host_dim3 { unsigned x, y, z; };\n"
    "static gr_host_dim3 blockIdx, threadIdx, blockDim, gridDim;\n"
    "#define __global__\n#define __device__\n#define __forceinline__ inline\n#define __launch_bounds__(n)\n"
    "#define __shared__ static\n#define asm(...) ((void)0)\n"
    "static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n"
    "static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static inline double __longlong_as_double(long long u) { double f; memcpy(&f, &u, 8); return f; }\n"
    "static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }\n"
    "static inline double rsqrt(double x) { return 1.0 / sqrt(x); }\n"
    "template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; }\n"
    "template <typename T> T __shfl_sync(unsigned, T v, int) { return v; }\n"
    "static inline void __syncthreads() {}\nstatic inline void __syncwarp() {}\n"
    "using std::min; using std::max;\n"
    "union gr_host_arg { void *ptr; double f; long long i; };\n";

static const char *storage_of(gr_dtype t) {
    switch (t) {
    case GR_F32: return "float";
    case GR_F16:
    case GR_BF16: return "unsigned short";
    case GR_F64: return "double";
    case GR_I64: return "long long";
    case GR_I32: return "int";
    case GR_I8: return "signed char";
    default: return "unsigned char";
    }
}

/* Appends the kernel part of a rendered source (after the prelude) inside namespace gr_vN, and
 * a launcher gr_host_N(args, dims, grid, block) that runs every thread in turn. */
static void append_variant(gr_strbuf *tu, const gr_kernel *k, gr_render_mode mode, const char *src, int n) {
    const char *body = strstr(src, "struct gr_dims_t");
    if (!body) body = strstr(src, "extern \"C\" __global__");
    char entry[64];
    gr_render_cuda_entry_name(k, mode, entry, sizeof entry);
    gr_sb_printf(tu, "namespace gr_v%d {\n%s\n", n, body ? body : "");
    gr_sb_printf(tu, "extern \"C\" void gr_host_%d(const gr_host_arg *a, const long long *dims, unsigned grid, unsigned block) {\n", n);
    bool slots = mode != GR_RENDER_LITERAL && gr_kernel_slot_count(k) > 0;
    if (slots) gr_sb_puts(tu, "  gr_dims_t d; memcpy(d.v, dims, sizeof d.v);\n");
    else gr_sb_puts(tu, "  (void)dims;\n");
    gr_sb_puts(tu, "  gridDim.x = grid; blockDim.x = block; gridDim.y = gridDim.z = blockDim.y = blockDim.z = 1;\n");
    gr_sb_puts(tu, "  for (unsigned b = 0; b < grid; b++) for (unsigned t = 0; t < block; t++) {\n");
    gr_sb_printf(tu, "    blockIdx.x = b; threadIdx.x = t;\n    %s(", entry);
    for (int p = 0; p < k->n_params; p++) {
        const gr_kparam *pp = &k->params[p];
        if (p) gr_sb_puts(tu, ", ");
        if (pp->kind == GR_KP_BUFFER) gr_sb_printf(tu, "(%s*)a[%d].ptr", storage_of(pp->dtype), p);
        else if (pp->kind == GR_KP_BUFFER_INDIRECT) gr_sb_printf(tu, "(%s* const*)a[%d].ptr", storage_of(pp->dtype), p);
        else if (pp->kind == GR_KP_SCALAR_F) gr_sb_printf(tu, "a[%d].f", p);
        else gr_sb_printf(tu, "a[%d].i", p);
    }
    if (slots) gr_sb_printf(tu, "%sd", k->n_params ? ", " : "");
    gr_sb_puts(tu, ");\n  }\n}\n}\n");
}

typedef void (*host_launch_fn)(const gr_karg *a, const long long *dims, unsigned grid, unsigned block);

/* Compiles tu into a shared object (GR_IDX32_MAX = idx32_max when > 0) and opens it. */
static void *compile_host(const gr_strbuf *tu, long long idx32_max) {
    static int serial;
    char cpp[320], so[320], cmd[1024];
    snprintf(cpp, sizeof cpp, "%s/k%d.cpp", tmpdir, serial);
    snprintf(so, sizeof so, "%s/k%d.so", tmpdir, serial);
    serial++;
    FILE *f = fopen(cpp, "w");
    if (!f) return NULL;
    if (idx32_max > 0) fprintf(f, "#define GR_IDX32_MAX %lldLL\n", idx32_max);
    fputs(tu->data, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O1 -fPIC -shared -w -o %s %s 2>&1", so, cpp);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "host compile of %s failed (%d)", cpp, rc);
    if (rc != 0) return NULL;
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(h != NULL, "dlopen %s: %s", so, dlerror());
    unlink(cpp);
    unlink(so);
    return h;
}

/* ==== running a kernel both ways ============================================================== */

typedef struct {
    const char *needle;   /* must appear in the generic source ("" none); NULL: must not be a group kernel */
    bool literal_group;   /* the literal source takes the group form */
    unsigned max_grid;    /* cap on the grid (grid-stride loops), 0: none */
    long long idx32_max;  /* > 0: GR_IDX32_MAX on the host */
} run_opts;

static uint64_t rng = 0x9e3779b9;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1p-53;
}

/* Buffers sized by the kernel's ranges, floats in [-2, 2); runs the interpreter and both
 * renderings (literal, generic) on the host; every written buffer bit-identical. */
static void run_both(const gr_kernel *k, const run_opts *o) {
    gr_strbuf src[2], tu;
    gr_sb_init(&tu);
    gr_sb_puts(&tu, host_shim);
    const gr_render_mode modes[2] = {GR_RENDER_LITERAL, GR_RENDER_GENERIC};
    for (int m = 0; m < 2; m++) {
        gr_sb_init(&src[m]);
        CHECK_OK(gr_render_cuda_mode(k, modes[m], &src[m]));
        if (!src[m].data) continue;
        const char *dump = getenv("GRAFT_TEST_DUMP");
        if (dump && strstr(k->name, dump)) printf("==== %s (%s)\n%s\n", k->name, m ? "generic" : "literal", src[m].data);
        bool group = strstr(src[m].data, "row groups of") != NULL;
        if (m == 0) CHECK_MSG(group == o->literal_group, "%s: literal group form %d, expected %d", k->name, group, o->literal_group);
        if (m == 1 && o->needle) CHECK_MSG(strstr(src[m].data, o->needle) != NULL, "%s: generic source lacks \"%s\"", k->name, o->needle);
        if (m == 1 && !o->needle) CHECK_MSG(!group, "%s: generic source takes the group form", k->name);
        if (m == 0) {
            const char *end = strstr(src[0].data, "struct gr_dims_t");
            if (!end) end = strstr(src[0].data, "extern \"C\" __global__");
            gr_sb_printf(&tu, "%.*s\n", (int)(end ? end - src[0].data : 0), src[0].data); /* the prelude, once */
        }
        append_variant(&tu, k, modes[m], src[m].data, m);
        if (nvrtc_present) {
            void *cubin = NULL;
            size_t n = 0;
            gr_status st = gr_cuda_nvrtc_compile(src[m].data, k->name, 90, false, &cubin, &n);
            CHECK_MSG(st == GR_OK, "NVRTC %s: %s", k->name, gr_last_error());
            if (cubin) gr_free(cubin, n);
            compiled_nvrtc++;
        }
    }
    if (!cxx_present) goto out;
    void *h = compile_host(&tu, o->idx32_max);
    if (!h) goto out;
    /* inputs */
    int np = k->n_params;
    void *ref[GR_KMAX_PARAMS] = {0}, *dev[GR_KMAX_PARAMS] = {0}, *init[GR_KMAX_PARAMS] = {0};
    size_t bytes[GR_KMAX_PARAMS] = {0};
    gr_karg args[GR_KMAX_PARAMS];
    memset(args, 0, sizeof args);
    int64_t points = gr_kernel_points(k);
    for (int p = 0; p < np; p++) {
        const gr_kparam *pp = &k->params[p];
        if (pp->kind == GR_KP_SHAPE) {
            args[p].i = points;
            continue;
        }
        if (pp->kind != GR_KP_BUFFER) continue;
        int64_t lo, hi;
        gr_kernel_param_range(k, p, &lo, &hi);
        bytes[p] = (size_t)(hi > 0 ? hi : 1) + 64;
        init[p] = malloc(bytes[p]);
        size_t es = gr_dtype_size(pp->dtype);
        for (size_t e = 0; e < bytes[p] / es; e++) {
            double v = 4 * urand() - 2;
            if (gr_dtype_is_float(pp->dtype)) gr_store_f64(init[p], pp->dtype, (int64_t)e, v);
            else gr_store_i64(init[p], pp->dtype, (int64_t)e, 0);
        }
    }
    for (int mm = 0; mm < 3; mm++) { /* 0: interpreter, 1: literal, 2: generic */
        void **bufs = mm == 0 ? ref : dev;
        for (int p = 0; p < np; p++) {
            if (!init[p]) continue;
            /* 16-byte aligned copies: the vector paths depend on the buffers' alignment */
            bufs[p] = aligned_alloc(64, (bytes[p] + 63) / 64 * 64);
            memcpy(bufs[p], init[p], bytes[p]);
            args[p].ptr = bufs[p];
        }
        if (mm == 0) {
            CHECK_OK(gr_kernel_interpret(k, args, np, NULL, NULL));
            continue;
        }
        gr_render_mode mode = modes[mm - 1];
        unsigned grid, block;
        gr_render_cuda_launch_dims(k, points, o->max_grid ? o->max_grid : 1u << 30, &grid, &block);
        char sym[32];
        snprintf(sym, sizeof sym, "gr_host_%d", mm - 1);
        host_launch_fn fn;
        *(void **)&fn = dlsym(h, sym);
        CHECK_MSG(fn != NULL, "%s: no %s", k->name, sym);
        gr_kslot_map map;
        memset(&map, 0, sizeof map);
        int64_t *vals = NULL;
        if (mode == GR_RENDER_GENERIC && gr_kernel_slot_count(k) > 0) {
            CHECK_OK(gr_kslot_map_build(k, &map));
            vals = calloc((size_t)map.n + 1, sizeof *vals);
            gr_kernel_slot_values(k, &map, vals);
        }
        if (fn) fn(args, (const long long *)vals, grid, block);
        ran_host++;
        for (int p = 0; p < np; p++) {
            if (!init[p] || !k->params[p].written) continue;
            CHECK_MSG(memcmp(dev[p], ref[p], bytes[p]) == 0, "%s (%s, grid %u): buffer p%d differs from the interpreter's", k->name,
                      mm == 1 ? "literal" : "generic", grid, p);
        }
        free(vals);
        gr_kslot_map_free(&map);
        for (int p = 0; p < np; p++) free(dev[p]), dev[p] = NULL;
    }
    if (o->needle && o->needle[0]) ran_group++;
    for (int p = 0; p < np; p++) free(ref[p]), free(init[p]);
    dlclose(h);
out:
    gr_sb_free(&src[0]);
    gr_sb_free(&src[1]);
    gr_sb_free(&tu);
}

/* ==== kernels ================================================================================= */

static void kstore(gr_kernel *k, int param, int value, const gr_kaccess *a) {
    gr_kstage s;
    memset(&s, 0, sizeof s);
    s.kind = GR_KS_STORE;
    s.value = value;
    s.param = param;
    s.access = *a;
    k->params[param].written = true;
    CHECK_OK(gr_kernel_add_stage(k, &s));
}

/* RoPE as fuse-move.c leaves it: out[b,h,s,d] = x[b,s,h,d] * cos[s,d] + rotate_half(x)[...] *
 * sin[s,d], rotate_half by two clamped gathers and a select. x read at x_off with stride
 * x_step along d (1: RoPE's). cos/sin of dtype ct. */
static gr_kernel *rope_kernel(const char *name, gr_dtype t, gr_dtype ct, int64_t B, int64_t H, int64_t S, int64_t D,
                              int64_t x_off, int64_t x_step) {
    gr_kernel *k;
    if (gr_kernel_create(name, &k) != GR_OK) return NULL;
    const int64_t h = D / 2;
    k->n_outer = 4;
    k->outer[0] = B, k->outer[1] = H, k->outer[2] = S, k->outer[3] = D;
    int n, x, c, sn, out, lx, lc, ls, i3, cst, lo, hi, xl, xh, ng, cond, rot, m1, m2, sum, xf, cf, sf, rf, y;
    CHECK_OK(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n));
    k->n_points_param = n;
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, t, "out", &out));
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, ct, "cos", &c));
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, ct, "sin", &sn));
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, t, "x", &x));
    gr_kaccess ax, acs, ao;
    gr_kaccess_init(&ax);
    ax.offset = x_off;
    ax.stride[0] = S * H * D * x_step, ax.stride[1] = D * x_step, ax.stride[2] = H * D * x_step, ax.stride[3] = x_step;
    gr_kaccess_init(&acs);
    acs.stride[2] = D, acs.stride[3] = 1;
    gr_kaccess_init(&ao);
    ao.stride[0] = H * S * D, ao.stride[1] = S * D, ao.stride[2] = D, ao.stride[3] = 1;
    CHECK_OK(gr_kx_load(k, x, &ax, &lx));
    CHECK_OK(gr_kx_cast(k, GR_F32, lx, &xf));
    CHECK_OK(gr_kx_load(k, c, &acs, &lc));
    CHECK_OK(gr_kx_cast(k, GR_F32, lc, &cf));
    CHECK_OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, xf, cf, &m1));
    CHECK_OK(gr_kx_index(k, 3, &i3));
    CHECK_OK(gr_kx_const_i(k, GR_I64, h, &cst));
    CHECK_OK(gr_kx_binary(k, GR_KB_SUB, GR_I64, i3, cst, &lo));
    CHECK_OK(gr_kx_const_i(k, GR_I64, 0, &cst));
    CHECK_OK(gr_kx_binary(k, GR_KB_MAX, GR_I64, lo, cst, &lo)); /* d - h, clamped into the first half */
    gr_kaccess g = ax;
    g.stride[3] = 0, g.index = lo, g.index_stride = x_step, g.index_extent = h;
    CHECK_OK(gr_kx_load(k, x, &g, &xl));
    CHECK_OK(gr_kx_const_i(k, GR_I64, h - 1, &cst));
    CHECK_OK(gr_kx_binary(k, GR_KB_MIN, GR_I64, i3, cst, &hi)); /* d, clamped into the first half, read at + h */
    g.index = hi, g.offset = x_off + h * x_step;
    CHECK_OK(gr_kx_load(k, x, &g, &xh));
    CHECK_OK(gr_kx_unary(k, GR_KU_NEG, t, xh, &ng));
    CHECK_OK(gr_kx_const_i(k, GR_I64, h, &cst));
    CHECK_OK(gr_kx_binary(k, GR_KB_LT, GR_BOOL, i3, cst, &cond));
    CHECK_OK(gr_kx_select(k, t, cond, ng, xl, &rot));
    CHECK_OK(gr_kx_cast(k, GR_F32, rot, &rf));
    CHECK_OK(gr_kx_load(k, sn, &acs, &ls));
    CHECK_OK(gr_kx_cast(k, GR_F32, ls, &sf));
    CHECK_OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, rf, sf, &m2));
    CHECK_OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, m1, m2, &sum));
    CHECK_OK(gr_kx_cast(k, t, sum, &y));
    kstore(k, out, y, &ao);
    CHECK_OK(gr_kernel_verify(k));
    return k;
}

static void test_rope_shapes(void) {
    const char *group = "row groups of";
    struct {
        const char *name;
        gr_dtype t, ct;
        int64_t B, H, S, D, off, step;
        run_opts o;
    } cases[] = {
        /* Llama's head dim: vector row loads of x and cos/sin, 8 points a group */
        {"rope_bf16_d64", GR_BF16, GR_F32, 2, 4, 33, 64, 0, 1, {"a gather along the row", true, 0, 0}},
        /* x one element off 16-byte alignment: the group's scalar fill */
        {"rope_bf16_misaligned", GR_BF16, GR_F32, 2, 3, 17, 64, 1, 1, {group, true, 0, 0}},
        /* x strided along d: literal takes no vector row load; generic checks the stride at launch */
        {"rope_bf16_stride2", GR_BF16, GR_BF16, 1, 2, 9, 32, 0, 2, {group, true, 0, 0}},
        /* head dim 24 (a multiple of 8, strides 24 and 72): still groups */
        {"rope_bf16_d24", GR_BF16, GR_F32, 1, 3, 11, 24, 0, 1, {group, true, 0, 0}},
        /* head dim 20: no group fits a row; literal renders none, generic takes the old loop at
         * launch, and 1 * 3 * 33 * 20 = 1980 points leave a scalar tail of 4 */
        {"rope_bf16_d20", GR_BF16, GR_F32, 1, 3, 33, 20, 0, 1, {group, false, 0, 0}},
        /* f32: 4 points a group */
        {"rope_f32_d64", GR_F32, GR_F32, 2, 2, 17, 64, 0, 1, {group, true, 0, 0}},
        /* a grid of 3 blocks: every thread walks several groups */
        {"rope_bf16_grid3", GR_BF16, GR_F32, 2, 4, 40, 64, 0, 1, {group, true, 3, 0}},
        /* the 32-bit limit lowered below the point count on the host: the old 64-bit loop runs */
        {"rope_bf16_idx64", GR_BF16, GR_F32, 2, 4, 33, 64, 0, 1, {group, true, 0, 1000}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gr_kernel *k = rope_kernel(cases[i].name, cases[i].t, cases[i].ct, cases[i].B, cases[i].H, cases[i].S, cases[i].D,
                                   cases[i].off, cases[i].step);
        if (!k) continue;
        run_both(k, &cases[i].o);
        gr_kernel_destroy(k);
    }
}

/* The literal render decides from the extents: a last extent smaller than the width or not a
 * multiple of it, or an extent past 32 bits, renders no group form; a point count past 32 bits
 * keeps the run-time test (the group loop is dead code there). */
static void test_literal_limits(void) {
    struct {
        int64_t outer[3];
        bool group;
    } cases[] = {
        {{4, 3, 64}, true},
        {{4, 3, 4}, false},                 /* last extent below the width */
        {{4, 3, 12}, false},                /* not a multiple of 8 */
        {{2, (int64_t)1 << 32, 8}, false},  /* an extent past 32 bits */
        {{(int64_t)1 << 20, 1 << 13, 64}, true}, /* 2^39 points: rendered, refused at launch */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gr_kernel *k;
        if (gr_kernel_create("limits", &k) != GR_OK) return;
        k->n_outer = 3;
        memcpy(k->outer, cases[i].outer, sizeof cases[i].outer);
        int x, y, lx, n;
        CHECK_OK(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &n));
        k->n_points_param = n;
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "x", &x));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "y", &y));
        gr_kaccess ax, ay;
        gr_kaccess_init(&ax); /* x transposed in its first two dims */
        ax.stride[0] = cases[i].outer[2], ax.stride[1] = cases[i].outer[0] * cases[i].outer[2], ax.stride[2] = 1;
        gr_kaccess_init(&ay);
        ay.stride[0] = cases[i].outer[1] * cases[i].outer[2], ay.stride[1] = cases[i].outer[2], ay.stride[2] = 1;
        CHECK_OK(gr_kx_load(k, x, &ax, &lx));
        kstore(k, y, lx, &ay);
        gr_strbuf sb;
        gr_sb_init(&sb);
        CHECK_OK(gr_render_cuda(k, &sb));
        bool group = sb.data && strstr(sb.data, "row groups of");
        CHECK_MSG(group == cases[i].group, "outer [%lld, %lld, %lld]: group form %d, expected %d", (long long)cases[i].outer[0],
                  (long long)cases[i].outer[1], (long long)cases[i].outer[2], group, cases[i].group);
        if (group) CHECK(strstr(sb.data, "gr_n <= GR_IDX32_MAX") != NULL);
        gr_sb_free(&sb);
        /* generic: always rendered, with the extents' 32-bit checks at launch */
        gr_sb_init(&sb);
        CHECK_OK(gr_render_cuda_mode(k, GR_RENDER_GENERIC, &sb));
        CHECK(sb.data && strstr(sb.data, "row groups of") && strstr(sb.data, "< (unsigned long long)GR_IDX32_MAX"));
        gr_sb_free(&sb);
        gr_kernel_destroy(k);
    }
    /* contiguous kernels (SiLU * up) keep the plain vector loop: nothing to decompose */
    gr_kernel *k;
    if (gr_kernel_create("contig", &k) != GR_OK) return;
    k->n_outer = 2, k->outer[0] = 16, k->outer[1] = 64;
    int x, y, lx;
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "x", &x));
    CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_BF16, "y", &y));
    gr_kaccess a;
    gr_kaccess_init(&a);
    a.stride[0] = 64, a.stride[1] = 1;
    CHECK_OK(gr_kx_load(k, x, &a, &lx));
    kstore(k, y, lx, &a);
    run_both(k, &(run_opts){NULL, false, 0, 0});
    gr_kernel_destroy(k);
}

/* Selects evaluated on the taken side: nested selects, an operand also read outside the select
 * (it must stay outside), a side shared by both operands of an inner select, a condition that
 * reads a load, over a transposed walk (the group form) and a contiguous one (the plain loop).
 * y = select(x1 > 0, select(x2 < x3, exp(x2), x3 * x1), x2 + sqrt(|x3|)) + x3 */
static void test_lazy_select(void) {
    for (int transposed = 0; transposed < 2; transposed++) {
        gr_kernel *k;
        if (gr_kernel_create(transposed ? "lazy_select_t" : "lazy_select", &k) != GR_OK) return;
        k->n_outer = 2, k->outer[0] = 24, k->outer[1] = 40;
        int x1, x2, x3, y, l1, l2, l3, zero, c1, c2, ex, m, inner, ab, sq, add, outer, out;
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x1", &x1));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x2", &x2));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "x3", &x3));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &y));
        gr_kaccess a, at;
        gr_kaccess_init(&a);
        a.stride[0] = 40, a.stride[1] = 1;
        gr_kaccess_init(&at); /* x1 read transposed: the group form */
        at.stride[0] = 1, at.stride[1] = 24;
        CHECK_OK(gr_kx_load(k, x1, transposed ? &at : &a, &l1));
        CHECK_OK(gr_kx_load(k, x2, &a, &l2));
        CHECK_OK(gr_kx_load(k, x3, &a, &l3));
        CHECK_OK(gr_kx_const_f(k, GR_F32, 0, &zero));
        CHECK_OK(gr_kx_binary(k, GR_KB_GT, GR_BOOL, l1, zero, &c1));
        CHECK_OK(gr_kx_binary(k, GR_KB_LT, GR_BOOL, l2, l3, &c2));
        CHECK_OK(gr_kx_unary(k, GR_KU_EXP, GR_F32, l2, &ex));
        CHECK_OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, l3, l1, &m));
        CHECK_OK(gr_kx_select(k, GR_F32, c2, ex, m, &inner));
        CHECK_OK(gr_kx_unary(k, GR_KU_ABS, GR_F32, l3, &ab));
        CHECK_OK(gr_kx_unary(k, GR_KU_SQRT, GR_F32, ab, &sq));
        CHECK_OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, l2, sq, &add));
        CHECK_OK(gr_kx_select(k, GR_F32, c1, inner, add, &outer));
        CHECK_OK(gr_kx_binary(k, GR_KB_ADD, GR_F32, outer, l3, &out));
        kstore(k, y, out, &a);
        gr_strbuf sb;
        gr_sb_init(&sb);
        CHECK_OK(gr_render_cuda(k, &sb));
        /* both selects lazy in every loop (group, vector, tail); exp only inside a side; the loads
         * all outside (each has another user) */
        int lazy = 0;
        for (const char *p = sb.data; p && (p = strstr(p, "evaluated only when taken")); p++) lazy++;
        const char *sel = sb.data ? strstr(sb.data, "evaluated only when taken") : NULL;
        const char *ld = sb.data ? strstr(sb.data, "gr_exp(v") : NULL; /* the node, not the prelude */
        CHECK_MSG(lazy == 2 * (transposed ? 3 : 2) && sel && ld && ld > sel, "%s: %d lazy selects", k->name, lazy);
        gr_sb_free(&sb);
        run_both(k, &(run_opts){transposed ? "row groups of 4 points" : NULL, transposed != 0, 0, 0});
        gr_kernel_destroy(k);
    }
}

/* Gathers along the row (render-cuda.c, emit_group_gather): y[r, w] = x[r, wrap(f(w))] over
 * rows of E = W + 8 elements, f(w) = w + c or min(w + c, 40). Where the group's indices are
 * adjacent, in range and aligned the group reads one vector; otherwise (c = 5: misaligned;
 * c = -3 over rows of 75: the first group's indices -3..4 wrap to 72, 73, 74, 0.., and the
 * vector at index -3, i.e. at row 0's 72, would be aligned and read row 1; the clamp at 40:
 * constant past it) its points load one at a time. c = -8: a whole group wraps (to 64..71),
 * the vector where the rendered wrap puts it. Every case bit-identical to the interpreter both
 * ways. */
static void test_row_gathers(void) {
    struct {
        gr_dtype t;
        int64_t c;
        bool clamp;
        int64_t pad; /* E = W + pad */
    } cases[] = {{GR_BF16, 0, false, 8}, {GR_BF16, 8, false, 8}, {GR_BF16, 5, false, 8}, {GR_BF16, -8, false, 8},
                 {GR_BF16, -3, false, 11}, {GR_BF16, 0, true, 8}, {GR_F32, 4, false, 8}, {GR_F32, -4, false, 8},
                 {GR_F32, -1, false, 5}, {GR_F32, 3, true, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t R = 3, W = 64, E = W + cases[i].pad;
        char name[48];
        snprintf(name, sizeof name, "row_gather_%s_%s%lld%s", cases[i].t == GR_F32 ? "f32" : "bf16", cases[i].c < 0 ? "m" : "",
                 (long long)(cases[i].c < 0 ? -cases[i].c : cases[i].c), cases[i].clamp ? "_clamp" : "");
        gr_kernel *k;
        if (gr_kernel_create(name, &k) != GR_OK) return;
        k->n_outer = 2, k->outer[0] = R, k->outer[1] = W;
        int x, y, iw, cst, idx, lx;
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, cases[i].t, "x", &x));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, cases[i].t, "y", &y));
        CHECK_OK(gr_kx_index(k, 1, &iw));
        CHECK_OK(gr_kx_const_i(k, GR_I64, cases[i].c, &cst));
        CHECK_OK(gr_kx_binary(k, GR_KB_ADD, GR_I64, iw, cst, &idx));
        if (cases[i].clamp) {
            CHECK_OK(gr_kx_const_i(k, GR_I64, 40, &cst));
            CHECK_OK(gr_kx_binary(k, GR_KB_MIN, GR_I64, idx, cst, &idx));
        }
        gr_kaccess g, a;
        gr_kaccess_init(&g);
        g.stride[0] = E, g.index = idx, g.index_stride = 1, g.index_extent = E;
        CHECK_OK(gr_kx_load(k, x, &g, &lx));
        gr_kaccess_init(&a);
        a.stride[0] = W, a.stride[1] = 1;
        kstore(k, y, lx, &a);
        CHECK_OK(gr_kernel_verify(k));
        gr_strbuf sb;
        gr_sb_init(&sb);
        CHECK_OK(gr_render_cuda(k, &sb));
        CHECK_MSG(sb.data && strstr(sb.data, "a gather along the row"), "%s: no vector gather in the literal source", name);
        gr_sb_free(&sb);
        run_both(k, &(run_opts){"a gather along the row", true, 0, 0});
        gr_kernel_destroy(k);
    }
}

/* Every allocation failure while rendering (the lazy selects' tables among them): GR_ERR_NOMEM,
 * nothing leaked. */
static void test_render_nomem(void) {
    gr_kernel *k = rope_kernel("rope_nomem", GR_BF16, GR_F32, 2, 4, 33, 64, 0, 1);
    if (!k) return;
    for (int mode = 0; mode < 2; mode++) {
        int failures = 0, successes = 0;
        for (long n = 1; n < 10000 && !successes; n++) {
            long live = gr_debug_live_allocs();
            gr_strbuf sb;
            gr_sb_init(&sb);
            gr_debug_fail_alloc_after(n);
            gr_status st = gr_render_cuda_mode(k, mode ? GR_RENDER_GENERIC : GR_RENDER_LITERAL, &sb);
            gr_debug_fail_alloc_after(0);
            gr_sb_free(&sb);
            successes += st == GR_OK;
            failures += st != GR_OK;
            CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "allocation failure %ld gave %s", n, gr_status_name(st));
            CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks", n);
        }
        CHECK_MSG(successes == 1 && failures >= 2, "mode %d: %d successes, %d failures", mode, successes, failures);
    }
    gr_kernel_destroy(k);
}

/* ==== the Llama export's RoPE kernels ============================================================ */
static void test_llama(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_onnx_load("tests/data/onnx/dyn/llama_dynamo/model.onnx", &g));
    if (!g) return;
    int64_t syms[8];
    for (int s = 0; s < g->syms.len && s < 8; s++) syms[s] = !strcmp(g->syms.data[s].name, "batch") ? 8 : 512;
    gr_pipeline_opts po = {.no_partition = true, .fold_linear_only = true, .convert_precision = true, .precision = GR_BF16};
    gr_compiled c;
    gr_status st = gr_pass_pipeline(g, syms, &po, &c);
    CHECK_OK(st);
    if (st == GR_OK) {
        int groups = 0;
        for (int i = 0; i < c.steps.len; i++) {
            const gr_step *s = &c.steps.data[i];
            if (s->kind != GR_STEP_KERNEL || gr_render_cuda_is_block_kernel(s->kernel)) continue;
            const gr_kernel *k = s->kernel;
            /* RoPE's kernels: a select over clamped gathers of the bf16 q or k */
            bool rope = k->n_outer == 4 && strstr(k->name, "_cast");
            bool int_loads = false;
            for (int p = 0; p < k->n_params; p++) int_loads |= k->params[p].kind == GR_KP_BUFFER && !gr_dtype_is_float(k->params[p].dtype);
            if (!rope || int_loads) continue;
            groups++;
            run_both(k, &(run_opts){"row groups of 8 points", true, 0, 0});
            gr_strbuf sb;
            gr_sb_init(&sb);
            CHECK_OK(gr_render_cuda_mode(k, GR_RENDER_GENERIC, &sb));
            CHECK_MSG(sb.data && strstr(sb.data, "evaluated only when taken"), "%s: rotate_half's select not lazy", k->name);
            gr_sb_free(&sb);
        }
        printf("test_render_group: llama b8 s512 bf16: %d RoPE kernels run\n", groups);
        CHECK_MSG(groups >= 4, "llama: %d RoPE kernels (expected q and k of two layers)", groups);
        gr_compiled_free(&c);
    }
    gr_ir_graph_destroy(g);
}

int main(void) {
    const gr_nvrtc_api *nv = NULL;
    nvrtc_present = gr_cuda_load_nvrtc(&nv) == GR_OK;
    if (!nvrtc_present) printf("test_render_group: NVRTC compilation skipped: NVRTC not found (%s)\n", gr_last_error());
    cxx_present = system("c++ --version > /dev/null 2>&1") == 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/graft-group-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (cxx_present && !mkdtemp(tmpdir)) cxx_present = false;
    if (!cxx_present) printf("test_render_group: host runs skipped: no C++ compiler (c++) or temporary directory\n");
    test_literal_limits();
    test_rope_shapes();
    test_lazy_select();
    test_row_gathers();
    test_render_nomem();
    test_llama();
    if (cxx_present) rmdir(tmpdir);
    printf("test_render_group: %d host runs (%d kernels of the group form), %d NVRTC compiles\n", ran_host, ran_group,
           compiled_nvrtc);
    return check_summary("test_render_group");
}
