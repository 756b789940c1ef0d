/* tests/test_precision — the precision pass (passes/precision.c) on the IR.
 *
 * 1. The dynamic exports (GPT-2, BERT, Llama; symbolic batch and seq) converted to bf16
 *    and f16: attention fused first, matmuls and attention half, layer_norm / softmax /
 *    reduce_* / pow / cos / sin f32, the rotary positions' matmul f32, inputs and outputs
 *    with their declared dtypes and names, dims still symbolic, and every binding still
 *    specializes.
 * 2. Rules on small graphs: weak constants, a constant that does not fit f16, host
 *    scalars, an output listed twice; bad target dtypes and control flow refused; a
 *    session with an invalid precision refused.
 * 3. Every allocation failure returns GR_ERR_NOMEM and leaks nothing.
 */
#include "check.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gr_dtype out_dtype(const gr_graph *g, const gr_ir_node *n) { return g->values.data[n->out[0]].dtype; }

static const gr_ir_node *node_named(const gr_graph *g, const char *name) {
    int i = gr_ir_find_node(g, name);
    return i >= 0 ? &g->nodes.data[i] : NULL;
}

/* Nodes that reach an output (the nodes an attention replaced stay in the graph, unread). */
static void live_nodes(const gr_graph *g, bool *live) {
    bool *vl = calloc((size_t)g->values.len, 1);
    for (int k = 0; k < g->outputs.len; k++) vl[g->outputs.data[k]] = true;
    for (int i = g->nodes.len - 1; i >= 0; i--) {
        const gr_ir_node *n = &g->nodes.data[i];
        live[i] = false;
        for (int o = 0; o < n->n_out; o++) live[i] = live[i] || (n->out[o] >= 0 && vl[n->out[o]]);
        if (live[i])
            for (int s = 0; s < n->n_in; s++)
                if (n->in[s] >= 0) vl[n->in[s]] = true;
    }
    free(vl);
}

/* ==== 1. the exports ============================================================================ */
static void check_export(const char *name, gr_dtype half) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/onnx/dyn/%s/model.onnx", name);
    gr_graph *g = NULL;
    CHECK_OK(gr_onnx_load(path, &g));
    if (!g) return;
    int n_in = g->inputs.len, n_out = g->outputs.len;
    gr_dtype in_t[8], out_t[8];
    char out_name[8][64];
    for (int i = 0; i < n_in && i < 8; i++) in_t[i] = g->values.data[g->inputs.data[i]].dtype;
    for (int i = 0; i < n_out && i < 8; i++) {
        out_t[i] = g->values.data[g->outputs.data[i]].dtype;
        snprintf(out_name[i], sizeof out_name[i], "%s", g->values.data[g->outputs.data[i]].name);
    }
    gr_precision_stats ps;
    CHECK_OK(gr_pass_precision(g, half, true, &ps));
    CHECK_OK(gr_ir_verify(g));
    CHECK_MSG(ps.attention_fused == 2, "%s: %d attentions fused", name, ps.attention_fused);
    CHECK(ps.weights_converted > 0 && ps.casts > 0 && ps.nodes_half > 0 && ps.nodes_f32 > 0);
    /* inputs and outputs keep dtypes, names and symbolic dims */
    CHECK(g->inputs.len == n_in && g->outputs.len == n_out);
    for (int i = 0; i < n_in && i < 8; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        CHECK(v->dtype == in_t[i] && gr_dx_is_sym(v->dims[0]) && gr_dx_is_sym(v->dims[1]));
    }
    for (int i = 0; i < n_out && i < 8; i++) {
        const gr_ir_value *v = &g->values.data[g->outputs.data[i]];
        CHECK_MSG(v->dtype == out_t[i] && !strcmp(v->name, out_name[i]), "%s: output %d is %s %s", name, i, v->name,
                  gr_dtype_name(v->dtype));
        CHECK(gr_dx_is_sym(v->dims[0]) && gr_dx_is_sym(v->dims[1]));
    }
    /* the op classes, on the nodes that run */
    bool *live = calloc((size_t)g->nodes.len, 1);
    live_nodes(g, live);
    int n_matmul_half = 0, n_attention = 0, n_sensitive = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        if (!live[i] || n->n_out < 1 || !gr_dtype_is_float(out_dtype(g, n))) continue;
        gr_dtype t = out_dtype(g, n);
        switch (n->op) {
        case GR_OP_ATTENTION:
            CHECK(t == half);
            n_attention++;
            break;
        case GR_OP_MATMUL:
            /* half, except the rotary positions' matmul (Llama): integer-valued input */
            if (t == half) n_matmul_half++;
            else CHECK_MSG(!strcmp(name, "llama_dynamo"), "%s: matmul '%s' is %s", name, n->name, gr_dtype_name(t));
            break;
        case GR_OP_LAYER_NORM:
        case GR_OP_SOFTMAX:
        case GR_OP_REDUCE_SUM:
        case GR_OP_REDUCE_MEAN:
        case GR_OP_POW:
        case GR_OP_COS:
        case GR_OP_SIN:
        case GR_OP_ERF:
        case GR_OP_EXP:
        case GR_OP_SQRT:
        case GR_OP_RSQRT:
            CHECK_MSG(t == GR_F32, "%s: %s '%s' is %s", name, gr_op_get(n->op)->name, n->name, gr_dtype_name(t));
            n_sensitive++;
            break;
        default: break;
        }
    }
    free(live);
    CHECK_MSG(n_attention == 2 && n_matmul_half >= 8 && n_sensitive >= 4, "%s: %d attentions, %d half matmuls, %d f32 ops", name,
              n_attention, n_matmul_half, n_sensitive);
    if (!strcmp(name, "llama_dynamo")) {
        /* the rotary angles: positions (a cast from int64) times inv_freq stay f32 */
        const gr_ir_node *rope = node_named(g, "node_matmul");
        CHECK(rope && out_dtype(g, rope) == GR_F32);
    }
    /* every binding still compiles: specialize two of them */
    for (int b = 0; b < 2; b++) {
        gr_graph *c = NULL;
        CHECK_OK(gr_ir_graph_clone(g, &c));
        int64_t syms[8];
        for (int k = 0; k < c->syms.len && k < 8; k++) syms[k] = b ? 7 : 1;
        CHECK_OK(gr_ir_specialize(c, syms));
        gr_ir_graph_destroy(c);
    }
    gr_ir_graph_destroy(g);
}

/* ==== 2. rules on small graphs =================================================================== */
static gr_graph *parse(const char *text) {
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_parse(text, "<test>", NULL, &g));
    if (g) CHECK_OK(gr_ir_infer_shapes(g));
    return g;
}

static gr_dtype dtype_of(const gr_graph *g, const char *value) {
    int v = gr_ir_find_value(g, value);
    CHECK_MSG(v >= 0, "no value '%s'", value);
    return v >= 0 ? g->values.data[v].dtype : GR_DTYPE_COUNT;
}

static void test_rules(void) {
    /* weak constants follow the half activation; f32 activations promote; host scalars are f32 */
    const char *text = "graft 1\n"
                       "input x: f32[4, 8]\n"
                       "input t: f32[] @host\n"
                       "input z: f32[4, 8]\n"
                       "const w: f32[8, 8] = [" /* filled below */;
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "%s", text);
    for (int i = 0; i < 64; i++) n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%d.5", i ? ", " : "", i % 7 - 3);
    snprintf(buf + n, sizeof buf - (size_t)n,
             "]\n"
             "const c: f32[] = [0.5]\n"
             "const big: f32[] = [-3.0e38]\n"
             "h = matmul(x, w)\n"
             "a = add(h, c)\n"        /* half: c is weak */
             "b = add(h, z)\n"        /* f32: z is an f32 activation */
             "d = div(h, t)\n"        /* f32: t is a host f32 input */
             "e = add(h, big)\n"      /* bf16: -3e38 fits; f16: does not, so f32 */
             "s = softmax(a, axis=-1)\n"
             "output a, b, d, e, s, a\n");
    for (int pass = 0; pass < 2; pass++) {
        gr_dtype half = pass ? GR_F16 : GR_BF16;
        gr_graph *g = parse(buf);
        if (!g) return;
        gr_precision_stats ps;
        CHECK_OK(gr_pass_convert_precision(g, half, &ps));
        CHECK_OK(gr_ir_verify(g));
        CHECK(dtype_of(g, "h") == half);
        char a_half[16];
        snprintf(a_half, sizeof a_half, "a.%s", gr_dtype_name(half));
        CHECK(dtype_of(g, a_half) == half);
        CHECK(dtype_of(g, "b") == GR_F32 && dtype_of(g, "d") == GR_F32 && dtype_of(g, "s") == GR_F32);
        char e_half[16];
        snprintf(e_half, sizeof e_half, "e.%s", gr_dtype_name(half));
        if (half == GR_BF16) CHECK(dtype_of(g, e_half) == GR_BF16);
        else CHECK(gr_ir_find_value(g, e_half) < 0 && dtype_of(g, "e") == GR_F32);
        /* outputs: f32 under their names; `a` listed twice is one cast */
        CHECK(g->outputs.len == 6 && g->outputs.data[0] == g->outputs.data[5]);
        for (int k = 0; k < g->outputs.len; k++) CHECK(g->values.data[g->outputs.data[k]].dtype == GR_F32);
        CHECK(!strcmp(g->values.data[g->outputs.data[0]].name, "a"));
        /* w got one half copy, c one too; big only for bf16 */
        CHECK_MSG(ps.weights_converted == (half == GR_BF16 ? 3 : 2), "%d weights converted", ps.weights_converted);
        CHECK(gr_ir_find_value(g, half == GR_BF16 ? "w.bf16" : "w.f16") >= 0);
        gr_ir_graph_destroy(g);
    }

    /* integer-valued data never feeds a half matmul */
    gr_graph *g = parse("graft 1\ninput p: i64[1, 4]\nconst f: f32[2, 1] = [0.5, 0.25]\n"
                        "pf = cast(p, to=\"f32\")\nang = matmul(f, pf)\nc = cos(ang)\noutput c\n");
    if (g) {
        CHECK_OK(gr_pass_convert_precision(g, GR_BF16, NULL));
        CHECK(dtype_of(g, "ang") == GR_F32 && dtype_of(g, "c") == GR_F32);
        gr_ir_graph_destroy(g);
    }

    /* refused: a target that is not half; control flow (naming the node) */
    g = parse("graft 1\ninput x: f32[4]\ny = neg(x)\noutput y\n");
    if (g) {
        CHECK_ERR(gr_pass_convert_precision(g, GR_I8, NULL), GR_ERR_INVALID, "must be bf16 or f16, not i8");
        CHECK_ERR(gr_pass_convert_precision(g, GR_F32, NULL), GR_ERR_INVALID, "must be bf16 or f16, not f32");
        gr_ir_graph_destroy(g);
    }
    g = parse("graft 1\ninput c: bool[]\ninput x: f32[4]\n"
              "y = if(c, then_branch={ t = neg(x)\n output t }, else_branch={ e = abs(x)\n output e })\noutput y\n");
    if (g) {
        CHECK_ERR(gr_pass_convert_precision(g, GR_BF16, NULL), GR_ERR_UNSUPPORTED, "(if)");
        CHECK_ERR(gr_pass_convert_precision(g, GR_BF16, NULL), GR_ERR_UNSUPPORTED, "control flow");
        gr_ir_graph_destroy(g);
    }

    /* the session option */
    g = parse("graft 1\ninput x: f32[4]\ny = neg(x)\noutput y\n");
    if (g) {
        gr_session_options o;
        gr_session_options_init(&o);
        o.device = GR_DEVICE_SIM;
        o.precision = 7;
        gr_session_t s = NULL;
        CHECK_ERR(gr_session_create(g, &o, &s), GR_ERR_INVALID, "precision 7 is not a gr_precision");
        CHECK(s == NULL);
        int p = -1;
        CHECK_ERR(gr_precision_parse("int8", &p), GR_ERR_INVALID, "unknown precision 'int8' (expected bf16 or f16)");
        CHECK_OK(gr_precision_parse("f16", &p));
        CHECK(p == GR_PRECISION_F16);
        gr_ir_graph_destroy(g);
    }
}

/* ==== 3. allocation failures ========================================================================= */
static void test_oom(void) {
    gr_graph *src = NULL;
    CHECK_OK(gr_onnx_load("tests/data/onnx/dyn/gpt2_dynamo/model.onnx", &src));
    if (!src) return;
    /* a clean run: how many allocations, and the result every surviving run must match */
    gr_graph *g = NULL;
    CHECK_OK(gr_ir_graph_clone(src, &g));
    gr_debug_fail_alloc_after(0);
    gr_precision_stats want;
    CHECK_OK(gr_pass_precision(g, GR_BF16, true, &want));
    long total = gr_debug_fail_alloc_after(0);
    int want_nodes = g ? g->nodes.len : 0;
    gr_ir_graph_destroy(g);
    int failures = 0, successes = 0;
    /* every allocation of the first 300, then every 7th (the pass makes thousands) */
    for (long n = 1; n <= total; n += n < 300 ? 1 : 7) {
        long live = gr_debug_live_allocs();
        g = NULL;
        CHECK_OK(gr_ir_graph_clone(src, &g));
        gr_debug_fail_alloc_after(n);
        gr_precision_stats ps;
        gr_status st = gr_pass_precision(g, GR_BF16, true, &ps);
        gr_debug_fail_alloc_after(0);
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "allocation failure %ld gave %s", n, gr_status_name(st));
        if (st == GR_OK) {
            /* a failure a cache absorbed (the name index falls back to a scan): same result */
            successes++;
            CHECK_OK(gr_ir_verify(g));
            CHECK_MSG(ps.attention_fused == want.attention_fused && ps.casts == want.casts && g->nodes.len == want_nodes,
                      "allocation failure %ld changed the result", n);
        } else {
            failures++;
        }
        gr_ir_graph_destroy(g);
        CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks %ld allocations", n, gr_debug_live_allocs() - live);
    }
    CHECK_MSG(total > 100 && failures > 100, "%ld allocations, %d failures, %d absorbed", total, failures, successes);
    gr_ir_graph_destroy(src);
}

int main(void) {
    check_export("gpt2_dynamo", GR_BF16);
    check_export("bert_dynamo", GR_BF16);
    check_export("bert_torchscript", GR_F16);
    check_export("llama_dynamo", GR_BF16);
    test_rules();
    test_oom();
    return check_summary("test_precision");
}
