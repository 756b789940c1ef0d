/* tests/test_compile_scale — the data structures that keep compile time
 * near-linear in graph size give exactly the results of the simple
 * algorithms they replaced:
 *   - fusion into kernels grown in place (fuse-grow.c) builds, step for step
 *     and node for node, the kernels that copying the consumer at every
 *     fusion builds (random graphs with chains, diamonds, broadcasts,
 *     reductions, recomputation, param overflow and movement kernels:
 *     rotate_half, reversed slices, transposes), and survives running
 *     out of memory at every allocation;
 *   - the memory plan's lowest-fit search over a segment tree of intervals
 *     places every value where the old scan over all placed values did
 *     (random step lists, checked against that scan kept here as the
 *     reference), and no two values live at the same step overlap (also on a
 *     large plan with 20000 values live at the end);
 *   - the name indexes of values and nodes stay right through renames,
 *     removals and arrays changed behind their back;
 *   - the .gir parser takes a node with many outputs and still names a
 *     repeated one.
 * Timings are for bench/compile_time.py; nothing here measures time. */
#include "check.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_exec.h"

static uint64_t rng = 0x1234567;
static uint32_t rnd(uint32_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng >> 33) % n);
}

/* ==== random graphs for fusion ======================================================================== */

typedef struct {
    gr_graph *g;
    int vals[4096];   /* values usable as operands */
    int shape[4096];  /* 0: [4,8]  1: [8] (row)  2: [4,1] (column) */
    int n;
    void *data[64];
    int n_data;
    int idx; /* i64[8] input in [0, 8): gather indices along axis 1 */
} rgraph;

static const int64_t *shape_dims(int s, int *nd) {
    static const int64_t a[] = {4, 8}, b[] = {8}, c[] = {4, 1};
    *nd = s == 1 ? 1 : 2;
    return s == 0 ? a : s == 1 ? b : c;
}

static void rg_add(rgraph *r, int v, int s) {
    if (v < 0 || r->n >= 4096) return;
    r->vals[r->n] = v;
    r->shape[r->n++] = s;
}

static int rg_node(rgraph *r, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs) {
    int node = -1;
    CHECK_OK(gr_ir_add_node(r->g, op, NULL, n_in, in, 1, NULL, n_attr, attrs, &node));
    return node < 0 ? -1 : r->g->nodes.data[node].out[0];
}

/* An operand: mostly a recent value (chains, diamonds, several readers), sometimes any. */
static int pick(const rgraph *r, int *shape, bool full_only) {
    for (int tries = 0; tries < 64; tries++) {
        int i = rnd(4) ? r->n - 1 - (int)rnd((uint32_t)(r->n < 6 ? r->n : 6)) : (int)rnd((uint32_t)r->n);
        if (full_only && r->shape[i] != 0) continue;
        *shape = r->shape[i];
        return r->vals[i];
    }
    *shape = 0;
    return r->vals[0];
}

/* n random ops over inputs x [4,8], row [8], col [4,1]; distinct scalar
 * constants (n_consts of them) make some kernels run out of params. */
static gr_graph *random_graph(rgraph *r, int n_ops, int n_consts) {
    memset(r, 0, sizeof *r);
    CHECK_OK(gr_ir_graph_create(&r->g));
    gr_graph *g = r->g;
    for (int s = 0; s < 3; s++) {
        int nd;
        const int64_t *d = shape_dims(s, &nd);
        int64_t n = 1;
        for (int i = 0; i < nd; i++) n *= d[i];
        float *buf = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) buf[i] = (float)((int)rnd(2001) - 1000) / 500.0f;
        r->data[r->n_data++] = buf;
        rg_add(r, t_input(g, s == 0 ? "x" : s == 1 ? "row" : "col", GR_F32, nd, d, buf), s);
    }
    {
        int64_t *idx = malloc(sizeof(int64_t) * 8);
        for (int i = 0; i < 8; i++) idx[i] = (int64_t)rnd(8);
        r->data[r->n_data++] = idx;
        r->idx = t_input(g, "idx", GR_I64, 1, DIMS(8), idx);
    }
    int consts[64];
    for (int i = 0; i < n_consts && i < 64; i++) {
        float v = 0.25f + 0.125f * (float)i;
        consts[i] = t_const(g, GR_F32, 0, DIMS(0), &v);
    }
    static const gr_op unary[] = {GR_OP_TANH, GR_OP_NEG, GR_OP_ABS, GR_OP_EXP, GR_OP_SIGMOID, GR_OP_RELU, GR_OP_SIN};
    static const gr_op binary[] = {GR_OP_ADD, GR_OP_MUL, GR_OP_SUB, GR_OP_MAX, GR_OP_MIN};
    for (int k = 0; k < n_ops; k++) {
        int sa, sb, a = pick(r, &sa, false), b, y = -1, ys = sa;
        switch (rnd(11)) {
        case 0: case 1: case 2:
            y = rg_node(r, unary[rnd(sizeof unary / sizeof unary[0])], 1, &a, 0, NULL);
            break;
        case 3:
            if (n_consts) {
                b = consts[rnd((uint32_t)n_consts)];
                y = rg_node(r, binary[rnd(2)], 2, (int[]){a, b}, 0, NULL);
                break;
            }
            /* fall through */
        case 4: case 5: case 6:
            b = pick(r, &sb, false);
            y = rg_node(r, binary[rnd(sizeof binary / sizeof binary[0])], 2, (int[]){a, b}, 0, NULL);
            ys = sa == 0 || sb == 0 || sa != sb ? 0 : sa;
            break;
        case 7: { /* where(a > b, a, b) */
            b = pick(r, &sb, false);
            int c = rg_node(r, GR_OP_GREATER, 2, (int[]){a, b}, 0, NULL);
            y = rg_node(r, GR_OP_WHERE, 3, (int[]){c, a, b}, 0, NULL);
            ys = sa == 0 || sb == 0 || sa != sb ? 0 : sa;
            break;
        }
        case 8: { /* a reduction, a softmax or a gather of a full value */
            a = pick(r, &sa, true);
            if (rnd(3) == 0) {
                gr_ir_attr at[] = {A_INT("axis", 1)};
                y = rg_node(r, GR_OP_GATHER, 2, (int[]){a, r->idx}, 1, at);
                ys = 0;
            } else if (rnd(2)) {
                int64_t axes[] = {1};
                gr_ir_attr at[] = {A_INTS("axes", axes, 1), A_INT("keepdims", 1)};
                y = rg_node(r, rnd(2) ? GR_OP_REDUCE_SUM : GR_OP_REDUCE_MAX, 1, &a, 2, at);
                ys = 2;
            } else {
                gr_ir_attr at[] = {A_INT("axis", -1)};
                y = rg_node(r, GR_OP_SOFTMAX, 1, &a, 1, at);
                ys = 0;
            }
            break;
        }
        case 9: { /* movement kernels (fuse-move.c): rotate_half, a reversed slice, a transpose and back */
            a = pick(r, &sa, true);
            int64_t s0[] = {0}, s4[] = {4}, e4[] = {4}, e8[] = {8}, ax1[] = {1}, rev_s[] = {-1}, rev_e[] = {-100}, m1[] = {-1};
            switch (rnd(3)) {
            case 0: {
                gr_ir_attr lo[] = {A_INTS("starts", s0, 1), A_INTS("ends", e4, 1), A_INTS("axes", ax1, 1)};
                gr_ir_attr hi[] = {A_INTS("starts", s4, 1), A_INTS("ends", e8, 1), A_INTS("axes", ax1, 1)};
                int x1 = rg_node(r, GR_OP_SLICE, 1, &a, 3, lo), x2 = rg_node(r, GR_OP_SLICE, 1, &a, 3, hi);
                int n2 = rg_node(r, GR_OP_NEG, 1, &x2, 0, NULL);
                gr_ir_attr at[] = {A_INT("axis", 1)};
                y = rg_node(r, GR_OP_CONCAT, 2, rnd(2) ? (int[]){n2, x1} : (int[]){x1, n2}, 1, at);
                break;
            }
            case 1: {
                gr_ir_attr at[] = {A_INTS("starts", rev_s, 1), A_INTS("ends", rev_e, 1), A_INTS("axes", ax1, 1),
                                   A_INTS("steps", m1, 1)};
                y = rg_node(r, GR_OP_SLICE, 1, &a, 4, at);
                break;
            }
            default: {
                int t = rg_node(r, GR_OP_TRANSPOSE, 1, &a, 0, NULL);
                y = rg_node(r, GR_OP_TRANSPOSE, 1, &t, 0, NULL);
                break;
            }
            }
            ys = 0;
            break;
        }
        default: { /* a round trip through f16: the substitute is cast */
            gr_ir_attr to16[] = {A_STR("to", "f16")}, to32[] = {A_STR("to", "f32")};
            int h = rg_node(r, GR_OP_CAST, 1, &a, 1, to16);
            y = rg_node(r, GR_OP_CAST, 1, &h, 1, to32);
            break;
        }
        }
        rg_add(r, y, ys);
    }
    CHECK_OK(gr_ir_add_output(g, r->vals[r->n - 1]));
    for (int i = 0; i < 1 + (int)rnd(3); i++) { /* a few more outputs, so some values must stay */
        int s, v = pick(r, &s, false);
        if (g->values.data[v].kind == GR_VAL_NODE) CHECK_OK(gr_ir_add_output(g, v));
    }
    CHECK_OK(gr_ir_infer_shapes(g));
    return g;
}

static void rg_free(rgraph *r) {
    gr_ir_graph_destroy(r->g);
    for (int i = 0; i < r->n_data; i++) free(r->data[i]);
}

/* A step list as text: kinds, bindings and every kernel in full. */
static char *steps_text(const gr_step_list *l) {
    gr_strbuf sb;
    gr_sb_init(&sb);
    for (int i = 0; i < l->len; i++) {
        const gr_step *s = &l->data[i];
        gr_sb_printf(&sb, "step %d kind %d node %d out %d args", i, (int)s->kind, s->node, s->out_value);
        for (int a = 0; a < s->n_args; a++)
            gr_sb_printf(&sb, " (%d %d %lld %llx)", (int)s->args[a].kind, s->args[a].value, (long long)s->args[a].elem_offset,
                         (unsigned long long)s->args[a].literal.bits);
        gr_sb_puts(&sb, "\n");
        if (s->kind == GR_STEP_KERNEL) {
            gr_kernel_print(s->kernel, &sb);
            gr_sb_printf(&sb, "source %d origins", s->kernel->source_node);
            for (int n = 0; n < s->kernel->nodes.len; n++)
                if (s->kernel->nodes.data[n].op == GR_KX_LOAD) gr_sb_printf(&sb, " %d", s->kernel->nodes.data[n].access.origin);
            gr_sb_puts(&sb, "\n");
        }
    }
    char *t = gr_strdup(sb.data ? sb.data : "");
    gr_sb_free(&sb);
    return t;
}

static char *fused_text(gr_graph *g, bool copy_always, gr_step_list *keep) {
    gr_step_list steps;
    CHECK_OK(gr_pass_lower(g, &steps));
    gr_pass_fuse_debug_copy_always(copy_always);
    CHECK_OK(gr_pass_fuse(g, &steps));
    gr_pass_fuse_debug_copy_always(false);
    for (int i = 0; i < steps.len; i++)
        if (steps.data[i].kind == GR_STEP_KERNEL) CHECK_OK(gr_kernel_verify(steps.data[i].kernel));
    char *t = steps_text(&steps);
    if (keep) *keep = steps;
    else gr_step_list_free(&steps);
    return t;
}

/* Raw bytes of every output after running a step list. */
static char *outputs_of(gr_graph *g, const gr_step_list *steps, size_t *len) {
    exec_t e;
    CHECK_OK(exec_run(&e, g, steps));
    size_t total = 0;
    for (int o = 0; o < g->outputs.len; o++) total += e.cap[g->outputs.data[o]];
    char *out = malloc(total + 1), *p = out;
    for (int o = 0; o < g->outputs.len; o++) {
        int v = g->outputs.data[o];
        memcpy(p, e.buf[v], e.cap[v]);
        p += e.cap[v];
    }
    exec_free(&e);
    *len = total;
    return out;
}

static void check_grow_matches_copy(const char *what, gr_graph *g) {
    gr_step_list grown, plain;
    char *a = fused_text(g, false, &grown), *b = fused_text(g, true, NULL);
    CHECK_MSG(a && b && !strcmp(a, b), "%s: growing fusion differs from copying fusion:\n--- grown\n%s--- copied\n%s", what,
              a ? a : "", b ? b : "");
    /* and the fused plan computes what the unfused one does, bit for bit */
    CHECK_OK(gr_pass_lower(g, &plain));
    size_t na, nb;
    char *ra = outputs_of(g, &grown, &na), *rb = outputs_of(g, &plain, &nb);
    CHECK_MSG(na == nb && !memcmp(ra, rb, na), "%s: fused and unfused outputs differ", what);
    free(ra), free(rb);
    gr_step_list_free(&grown);
    gr_step_list_free(&plain);
    gr_strfree(a);
    gr_strfree(b);
}

static void test_fusion_random(void) {
    char what[64];
    for (int t = 0; t < 300; t++) {
        rgraph r;
        int n_ops = 4 + (int)rnd(t < 250 ? 60 : 400), n_consts = t % 3 == 0 ? 40 : (int)rnd(4);
        random_graph(&r, n_ops, n_consts);
        snprintf(what, sizeof what, "random graph %d (%d ops, %d constants)", t, n_ops, n_consts);
        check_grow_matches_copy(what, r.g);
        rg_free(&r);
    }
}

/* Long chains: one kernel grown over thousands of fusions (labels relabelled
 * many times), with a second reader every few ops (recomputation). */
static void test_fusion_long(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    float xs[32];
    for (int i = 0; i < 32; i++) xs[i] = (float)i / 16.0f - 1.0f;
    int x = t_input(g, "x", GR_F32, 1, DIMS(32), xs), v = x, prev = x;
    float half = 0.5f;
    int c = t_const(g, GR_F32, 0, DIMS(0), &half);
    for (int i = 0; i < 3000; i++) {
        int node = -1, in[2] = {v, i % 7 == 0 ? prev : (i % 2 ? c : x)};
        gr_op op = i % 3 == 0 ? GR_OP_TANH : i % 3 == 1 ? GR_OP_ADD : GR_OP_MUL;
        CHECK_OK(gr_ir_add_node(g, op, NULL, op == GR_OP_TANH ? 1 : 2, in, 1, NULL, 0, NULL, &node));
        prev = v;
        v = g->nodes.data[node].out[0];
    }
    CHECK_OK(gr_ir_add_output(g, v));
    CHECK_OK(gr_ir_infer_shapes(g));
    check_grow_matches_copy("3000-op chain", g);
    gr_step_list steps;
    char *t = fused_text(g, false, &steps);
    int kernels = 0;
    for (int i = 0; i < steps.len; i++) kernels += steps.data[i].kind == GR_STEP_KERNEL;
    CHECK_MSG(kernels == 1, "3000-op chain: %d kernels after fusion, want 1", kernels);
    gr_step_list_free(&steps);
    gr_strfree(t);
    gr_ir_graph_destroy(g);
}

/* Out of memory at every allocation of a growing fusion: an error or
 * success, a list that verifies and computes the same outputs, no leaks. */
static void test_fusion_oom(void) {
    rgraph r;
    random_graph(&r, 40, 2);
    gr_graph *g = r.g;
    gr_step_list plain;
    CHECK_OK(gr_pass_lower(g, &plain));
    size_t nw;
    char *want = outputs_of(g, &plain, &nw);
    gr_step_list_free(&plain);
    int failures = 0, successes = 0;
    for (long n = 1; n < 20000 && !successes; n++) {
        long live = gr_debug_live_allocs();
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(g, &steps));
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_pass_fuse(g, &steps);
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) successes++;
        else failures++;
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "allocation failure %ld gave %s", n, gr_status_name(st));
        for (int i = 0; i < steps.len; i++)
            if (steps.data[i].kind == GR_STEP_KERNEL) CHECK_OK(gr_kernel_verify(steps.data[i].kernel));
        size_t ng;
        char *got = outputs_of(g, &steps, &ng);
        CHECK_MSG(ng == nw && !memcmp(got, want, nw), "allocation failure %ld: outputs differ", n);
        free(got);
        gr_step_list_free(&steps);
        CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks %ld allocations", n,
                  gr_debug_live_allocs() - live);
    }
    CHECK_MSG(successes == 1 && failures >= 10, "%d successes, %d failures", successes, failures);
    free(want);
    rg_free(&r);
}

/* ==== memory plan ======================================================================================= */

#define ALIGN 256
static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

typedef struct {
    int value;
    size_t bytes;
} sized;

static int by_size(const void *a, const void *b) {
    const sized *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->value - y->value;
}

/* The placement the planner used before (a scan of every placed value for
 * every candidate offset), on the plan's own live ranges: the reference. */
static size_t reference_offsets(const gr_mem_plan *p, size_t *offsets) {
    int n = 0;
    sized *order = malloc(sizeof(sized) * (size_t)(p->n_values + 1));
    int *placed = malloc(sizeof(int) * (size_t)(p->n_values + 1));
    for (int v = 0; v < p->n_values; v++)
        if (p->values[v].kind == GR_STORE_ARENA) order[n++] = (sized){v, p->values[v].bytes};
    qsort(order, (size_t)n, sizeof *order, by_size);
    size_t arena = 0;
    int n_placed = 0;
    for (int i = 0; i < n; i++) {
        const gr_value_store *st = &p->values[order[i].value];
        size_t need = align_up(st->bytes ? st->bytes : 1), best = SIZE_MAX;
        for (int c = -1; c < n_placed; c++) {
            size_t cand = 0;
            if (c >= 0) {
                const gr_value_store *o = &p->values[placed[c]];
                if (o->last_step < st->first_step || o->first_step > st->last_step) continue;
                cand = offsets[placed[c]] + align_up(o->bytes ? o->bytes : 1);
            }
            bool clash = false;
            for (int j = 0; j < n_placed && !clash; j++) {
                const gr_value_store *o = &p->values[placed[j]];
                if (o->last_step < st->first_step || o->first_step > st->last_step) continue;
                size_t oend = offsets[placed[j]] + align_up(o->bytes ? o->bytes : 1);
                if (cand < oend && offsets[placed[j]] < cand + need) clash = true;
            }
            if (!clash && cand < best) best = cand;
        }
        offsets[order[i].value] = best;
        if (best + need > arena) arena = best + need;
        placed[n_placed++] = order[i].value;
    }
    free(order);
    free(placed);
    return arena;
}

static const gr_mem_plan *sort_plan;
static int by_offset(const void *a, const void *b) {
    size_t x = sort_plan->values[*(const int *)a].offset, y = sort_plan->values[*(const int *)b].offset;
    return x < y ? -1 : x > y;
}

/* No two arena values live at a common step share a byte: sorted by offset,
 * each value is compared with the ones starting inside it. */
static bool plan_valid(const gr_mem_plan *p, char *why, size_t why_n) {
    int n = 0;
    int *ids = malloc(sizeof(int) * (size_t)(p->n_values + 1));
    for (int v = 0; v < p->n_values; v++)
        if (p->values[v].kind == GR_STORE_ARENA) ids[n++] = v;
    sort_plan = p;
    qsort(ids, (size_t)n, sizeof(int), by_offset);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        const gr_value_store *x = &p->values[ids[i]];
        size_t end = x->offset + align_up(x->bytes ? x->bytes : 1);
        if (end > p->arena_bytes) {
            snprintf(why, why_n, "value %d ends past the arena", ids[i]);
            ok = false;
        }
        for (int j = i + 1; j < n && ok && p->values[ids[j]].offset < end; j++) {
            const gr_value_store *y = &p->values[ids[j]];
            if (x->first_step <= y->last_step && y->first_step <= x->last_step) {
                snprintf(why, why_n, "values %d and %d overlap in memory and time", ids[i], ids[j]);
                ok = false;
            }
        }
    }
    free(ids);
    return ok;
}

/* A random program of host steps (each reads a few earlier values and
 * writes one new one), views, and outputs; sizes from 1 to 64 KiB. */
static void random_plan_case(int n_steps, int n_outputs, bool check_reference, const char *what) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int x = t_input(g, "x", GR_F32, 1, DIMS(16), NULL);
    int *made = malloc(sizeof(int) * (size_t)(n_steps + 1)), n_made = 0;
    gr_step_list steps = {0};
    for (int i = 0; i < n_steps; i++) {
        int v;
        CHECK_OK(gr_ir_add_value(g, NULL, GR_VAL_NODE, &v));
        int64_t elems = rnd(4) ? 1 + rnd(64) : 1 + rnd(16384);
        set_type(g, v, GR_F32, 1, &elems);
        gr_step s;
        memset(&s, 0, sizeof s);
        s.node = -1;
        if (n_made && rnd(8) == 0) { /* a view of an earlier value */
            int src = made[n_made - 1 - (int)rnd((uint32_t)(n_made < 4 ? n_made : 4))];
            s.kind = GR_STEP_ALIAS;
            s.n_args = 1;
            s.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = src};
            g->values.data[v].dims[0].size = g->values.data[src].dims[0].size;
            s.out_value = v;
        } else {
            s.kind = GR_STEP_HOST;
            int reads = (int)rnd(4);
            for (int r = 0; r < reads; r++) {
                int src = n_made && rnd(5) ? made[n_made - 1 - (int)rnd((uint32_t)(n_made < 8 ? n_made : 8))]
                          : n_made ? made[rnd((uint32_t)n_made)] : x;
                s.args[s.n_args++] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = src};
            }
            s.args[s.n_args++] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = v};
            s.out_value = v;
        }
        CHECK_OK(gr_vec_push(&steps, s));
        made[n_made++] = v;
    }
    for (int o = 0; o < n_outputs && n_made; o++) CHECK_OK(gr_ir_add_output(g, made[n_made - 1 - (int)rnd((uint32_t)n_made)]));
    gr_mem_plan p;
    CHECK_OK(gr_pass_plan_memory(g, &steps, &p));
    char why[128] = "";
    CHECK_MSG(plan_valid(&p, why, sizeof why), "%s: invalid plan: %s", what, why);
    if (check_reference) {
        size_t *ref = calloc((size_t)p.n_values + 1, sizeof(size_t));
        size_t arena = reference_offsets(&p, ref);
        int differ = 0;
        for (int v = 0; v < p.n_values; v++)
            if (p.values[v].kind == GR_STORE_ARENA && p.values[v].offset != ref[v]) differ++;
        CHECK_MSG(differ == 0 && arena == p.arena_bytes, "%s: %d offsets differ from the reference; arena %zu, reference %zu",
                  what, differ, p.arena_bytes, arena);
        free(ref);
    }
    gr_mem_plan_free(&p);
    gr_step_list_free(&steps);
    free(made);
    gr_ir_graph_destroy(g);
}

static void test_memplan(void) {
    char what[80];
    /* plans of few arena values are placed with a list, larger ones with the interval tree:
     * both against the reference, and the tree on small plans too */
    for (int tree_only = 0; tree_only < 2; tree_only++) {
        gr_pass_plan_memory_debug_tree_only(tree_only);
        for (int t = 0; t < 200; t++) {
            int n = 1 + (int)rnd(t < 150 ? 40 : 300);
            snprintf(what, sizeof what, "random plan %d (%d steps%s)", t, n, tree_only ? ", tree only" : "");
            random_plan_case(n, (int)rnd((uint32_t)(n / 2 + 2)), true, what);
        }
    }
    gr_pass_plan_memory_debug_tree_only(false);
    /* many values live at the end (the shape that made the old search cubic) */
    random_plan_case(600, 500, true, "600 steps, 500 outputs");
    random_plan_case(20000, 20000, false, "20000 steps, 20000 outputs");
}

/* Out of memory in the planner: an error, no leak. */
static void test_memplan_oom(void) {
    for (long n = 1; n < 200; n++) {
        long live = gr_debug_live_allocs();
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 1, DIMS(16), NULL), prev = x;
        gr_step_list steps = {0};
        for (int i = 0; i < 40; i++) {
            int v;
            CHECK_OK(gr_ir_add_value(g, NULL, GR_VAL_NODE, &v));
            set_type(g, v, GR_F32, 1, DIMS(64));
            gr_step s;
            memset(&s, 0, sizeof s);
            s.kind = GR_STEP_HOST;
            s.node = -1;
            s.n_args = 2;
            s.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = prev};
            s.args[1] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = v};
            s.out_value = v;
            CHECK_OK(gr_vec_push(&steps, s));
            CHECK_OK(gr_ir_add_output(g, v));
            prev = v;
        }
        gr_mem_plan p;
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_pass_plan_memory(g, &steps, &p);
        gr_debug_fail_alloc_after(0);
        CHECK(st == GR_OK || st == GR_ERR_NOMEM);
        if (st == GR_OK) gr_mem_plan_free(&p);
        gr_step_list_free(&steps);
        gr_ir_graph_destroy(g);
        CHECK_MSG(gr_debug_live_allocs() == live, "planner, allocation failure %ld leaks", n);
        if (st == GR_OK) break;
    }
}

/* ==== name indexes ==================================================================================== */

static void test_names(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int v[3000];
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "v%d", i);
        CHECK_OK(gr_ir_add_value(g, name, GR_VAL_INPUT, &v[i]));
    }
    CHECK(gr_ir_find_value(g, "v0") == v[0] && gr_ir_find_value(g, "v2999") == v[2999]);
    CHECK(gr_ir_find_value(g, "v3000") == -1);
    CHECK_ERR(gr_ir_add_value(g, "v17", GR_VAL_INPUT, &v[0]), GR_ERR_INVALID, "defined twice");
    /* renamed through the builder */
    CHECK_OK(gr_ir_rename_value(g, v[5], "five"));
    CHECK(gr_ir_find_value(g, "five") == v[5] && gr_ir_find_value(g, "v5") == -1);
    /* truncated behind the index's back (as passes drop temporaries), then refilled */
    for (int i = 2990; i < 3000; i++) gr_strfree(g->values.data[i].name);
    g->values.len = 2990;
    CHECK(gr_ir_find_value(g, "v2995") == -1);
    int w;
    CHECK_OK(gr_ir_add_value(g, "v2995", GR_VAL_INPUT, &w));
    CHECK(w == 2990 && gr_ir_find_value(g, "v2995") == 2990);
    for (int k = 0; k < 5; k++) { /* the last value replaced, again and again */
        gr_strfree(g->values.data[g->values.len - 1].name);
        g->values.len--;
        CHECK_OK(gr_ir_add_value(g, NULL, GR_VAL_INPUT, &w));
        CHECK(w == 2990);
    }
    CHECK(gr_ir_find_value(g, "v2995") == -1 && gr_ir_find_value(g, g->values.data[2990].name) == 2990);
    /* renamed behind its back: found again once the stale entry is met */
    gr_strfree(g->values.data[7].name);
    g->values.data[7].name = gr_strdup("seven");
    CHECK(gr_ir_find_value(g, "v7") == -1);
    CHECK(gr_ir_find_value(g, "seven") == 7);
    /* nodes: unique names, found after removal of the last */
    int a = gr_ir_find_value(g, "v1"), node;
    CHECK_OK(gr_ir_add_node(g, GR_OP_NEG, "n1", 1, &a, 1, NULL, 0, NULL, &node));
    CHECK_ERR(gr_ir_add_node(g, GR_OP_NEG, "n1", 1, &a, 1, NULL, 0, NULL, &node), GR_ERR_INVALID, "used twice");
    CHECK(gr_ir_find_node(g, "n1") == node);
    gr_ir_remove_last_node(g);
    CHECK(gr_ir_find_node(g, "n1") == -1);
    CHECK_OK(gr_ir_add_node(g, GR_OP_NEG, "n1", 1, &a, 1, NULL, 0, NULL, &node));
    CHECK_OK(gr_ir_rename_node(g, node, "m1"));
    CHECK(gr_ir_find_node(g, "m1") == node && gr_ir_find_node(g, "n1") == -1);
    /* a clone has its own index */
    gr_graph *c;
    CHECK_OK(gr_ir_graph_clone(g, &c));
    CHECK(gr_ir_find_value(c, "five") == v[5] && gr_ir_find_node(c, "m1") == node);
    gr_ir_graph_destroy(c);
    gr_ir_graph_destroy(g);
}

/* ==== the parser on wide nodes ============================================================================ */

static void test_wide_node(void) {
    int n = 20000;
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_sb_printf(&sb, "graft 1\ninput x: f32[%d]\n", n);
    for (int i = 0; i < n; i++) gr_sb_printf(&sb, "%ss%d", i ? ", " : "", i);
    gr_sb_puts(&sb, " = split(x, axis=0)\ny = concat(");
    for (int i = 0; i < n; i++) gr_sb_printf(&sb, "%ss%d", i ? ", " : "", n - 1 - i);
    gr_sb_puts(&sb, ", axis=0)\noutput y\n");
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_parse(sb.data, "wide.gir", NULL, &g));
    if (g) {
        CHECK(g->nodes.len == 2 && g->nodes.data[0].n_out == n && g->nodes.data[1].n_in == n);
        CHECK(gr_ir_find_value(g, "s12345") == g->nodes.data[0].out[12345]);
        CHECK(g->nodes.data[1].in[0] == g->nodes.data[0].out[n - 1]);
        gr_ir_graph_destroy(g);
    }
    gr_sb_free(&sb);
    /* a repeated output, far apart, is named with both places */
    gr_sb_init(&sb);
    gr_sb_puts(&sb, "graft 1\ninput x: f32[3000]\n");
    for (int i = 0; i < 3000; i++) gr_sb_printf(&sb, "%ss%d", i ? ", " : "", i == 2999 ? 7 : i);
    gr_sb_puts(&sb, " = split(x, axis=0)\noutput s0\n");
    g = NULL;
    CHECK_ERR(gr_gir_parse(sb.data, "dup.gir", NULL, &g), GR_ERR_PARSE, "value 's7' is already defined at dup.gir:3:");
    gr_sb_free(&sb);
}

int main(void) {
    test_fusion_random();
    test_fusion_long();
    test_fusion_oom();
    test_memplan();
    test_memplan_oom();
    test_names();
    test_wide_node();
    return check_summary("test_compile_scale");
}
