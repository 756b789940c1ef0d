/* tests/test_plan_template — plans instantiated from a template (runtime/template.c) are the
 * pass pipeline's plans.
 *
 * For each dynamic-axis export (tests/data/onnx/dyn): one session runs the plan-golden
 * bindings and a seeded random sweep of bindings in random order (templates on), a second
 * session runs the same bindings with no_plan_templates; every output is compared bit for bit
 * between the two, and every plan of the first session is compared, as `graft dump` text
 * (final IR, steps with every kernel, memory plan, segments), with a fresh pipeline run for its
 * binding. GPT-2 must instantiate most of its sweep. Then: a binding whose dim becomes 1 (a
 * class of its own) falls back to the pipeline; explain says what happened; and every
 * allocation failure during a run that instantiates a plan is an error that leaks nothing.
 * Runs on the simulator. */
#include "check.h"
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DYN "tests/data/onnx/dyn/"

static const char *const cases[] = {"gpt2_dynamo", "bert_dynamo", "bert_torchscript", "llama_dynamo"};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t lo, int64_t hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

/* Generated inputs for binding (batch, seq) of g: integers in [0, 10), floats small. */
static gr_status set_inputs(gr_session_t s, gr_graph_t g, int64_t batch, int64_t seq) {
    const char *names[2] = {"batch", "seq"};
    int64_t vals[2] = {batch, seq};
    for (int i = 0; i < gr_graph_num_inputs(g); i++) {
        gr_value_info info;
        int64_t dims[GR_MAX_DIMS];
        GR_TRY(gr_graph_input_info(g, i, &info));
        GR_TRY(gr_graph_input_dims(g, i, 2, names, vals, dims));
        size_t n = 1;
        for (int d = 0; d < info.ndim; d++) n *= (size_t)dims[d];
        size_t es = gr_dtype_size(info.dtype), nbytes = n * es;
        unsigned char *buf = calloc(nbytes ? nbytes : 1, 1);
        if (!buf) return GR_ERR_NOMEM;
        for (size_t e = 0; e < n; e++) {
            int64_t v = (int64_t)((e * 7 + 3) % 10);
            if (info.dtype == GR_I64) ((int64_t *)buf)[e] = v;
            else if (info.dtype == GR_I32) ((int32_t *)buf)[e] = (int32_t)v;
            else if (info.dtype == GR_F32) ((float *)buf)[e] = (float)v / 10.0f;
            else if (info.dtype == GR_BOOL) buf[e] = 1;
        }
        gr_status st = gr_session_set_input(s, info.name, info.dtype, info.ndim, dims, buf, nbytes);
        free(buf);
        GR_TRY(st);
    }
    return GR_OK;
}

static gr_status run_binding(gr_session_t s, gr_graph_t g, int64_t batch, int64_t seq) {
    GR_TRY(set_inputs(s, g, batch, seq));
    GR_TRY(gr_session_run(s));
    return gr_session_wait(s);
}

/* every output of a and b bit for bit */
static void compare_outputs(gr_session_t a, gr_session_t b, gr_graph_t g, const char *what) {
    for (int i = 0; i < gr_graph_num_outputs(g); i++) {
        gr_output oa, ob;
        CHECK_OK(gr_session_output(a, i, &oa));
        CHECK_OK(gr_session_output(b, i, &ob));
        size_t na = gr_session_output_nbytes(a, oa), nb = gr_session_output_nbytes(b, ob);
        CHECK_MSG(na == nb, "%s: output %d: %zu / %zu bytes", what, i, na, nb);
        if (na != nb) continue;
        unsigned char *x = malloc(na ? na : 1), *y = malloc(nb ? nb : 1);
        CHECK_OK(gr_session_output_read(a, oa, x, na));
        CHECK_OK(gr_session_output_read(b, ob, y, nb));
        CHECK_MSG(!memcmp(x, y, na), "%s: output %d differs from the pipeline plan's", what, i);
        free(x);
        free(y);
    }
}

/* p's dump against a fresh pipeline run's for its binding */
static void compare_with_pipeline(gr_session_t s, const gr_rt_plan *p, const char *what) {
    gr_pipeline_opts po;
    gr_rt_plan_pipeline_opts(s, &po);
    gr_compiled fresh;
    CHECK_OK(gr_pass_pipeline(s->graph, p->sym_values, &po, &fresh));
    gr_compiled mine = {.g = p->g, .steps = p->steps, .mem = p->mem, .segs = p->segs};
    gr_strbuf a, b;
    gr_sb_init(&a);
    gr_sb_init(&b);
    CHECK_OK(gr_compiled_dump(&mine, &a));
    CHECK_OK(gr_compiled_dump(&fresh, &b));
    bool same = a.data && b.data && !strcmp(a.data, b.data);
    if (!same && a.data && b.data) {
        size_t i = 0, line = 1;
        while (a.data[i] && a.data[i] == b.data[i]) line += a.data[i++] == '\n';
        const char *la = a.data + i, *lb = b.data + i;
        while (la > a.data && la[-1] != '\n') la--, lb--;
        CHECK_MSG(false, "%s (%s): differs from the pipeline's plan at dump line %zu:\n  got  %.160s\n  want %.160s", what,
                  p->instantiated ? "instantiated" : "compiled", line, la, lb);
    } else CHECK_MSG(same, "%s: no dump", what);
    gr_sb_free(&a);
    gr_sb_free(&b);
    gr_compiled_free(&fresh);
}

static gr_session_t new_session(gr_graph_t g, bool templates) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.no_plan_templates = !templates;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    return s;
}

static void run_case(const char *c) {
    char path[512];
    snprintf(path, sizeof path, DYN "%s/model.onnx", c);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return;
    gr_session_t s = new_session(g, true), ref = new_session(g, false);
    if (!s || !ref) return;
    int64_t seq_hi = 40, batch_hi = 6;
    for (int k = 0; k < s->graph->syms.len; k++) {
        const gr_ir_symbol *sym = &s->graph->syms.data[k];
        if (!strcmp(sym->name, "seq") && sym->hi < seq_hi) seq_hi = sym->hi;
        if (!strcmp(sym->name, "batch") && sym->hi < batch_hi) batch_hi = sym->hi;
    }
    /* the plan-golden bindings, then a random sweep in random order */
    int64_t bind[64][2] = {{1, 1}, {1, 64}, {2, 7}, {8, 3}, {1, 17}, {3, 5}, {1, 9}};
    int n = 7;
    while (n < 40) bind[n][0] = rnd(1, batch_hi), bind[n][1] = rnd(1, seq_hi), n++;
    for (int i = 0; i < n; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s batch %lld seq %lld", c, (long long)bind[i][0], (long long)bind[i][1]);
        gr_status st = run_binding(s, g, bind[i][0], bind[i][1]);
        CHECK_MSG(st == GR_OK, "%s: %s", what, gr_last_error());
        if (st != GR_OK) continue;
        CHECK_OK(run_binding(ref, g, bind[i][0], bind[i][1]));
        compare_outputs(s, ref, g, what);
    }
    int plans = 0, inst = 0;
    for (const gr_rt_plan *p = s->plans; p; p = p->next, plans++) {
        char what[160];
        snprintf(what, sizeof what, "%s plan of batch %lld seq %lld", c, (long long)p->sym_values[0],
                 (long long)(p->n_syms > 1 ? p->sym_values[1] : -1));
        compare_with_pipeline(s, p, what);
        inst += p->instantiated;
    }
    gr_run_stats st;
    CHECK_OK(gr_session_stats(s, &st));
    CHECK_MSG(st.plans_instantiated == inst && st.plans_compiled + st.plans_instantiated == plans,
              "%s: stats say %ld compiled + %ld instantiated, %d plans (%d instantiated)", c, st.plans_compiled,
              st.plans_instantiated, plans, inst);
    printf("%s: %d plans, %d instantiated from a template\n", c, plans, inst);
    CHECK_MSG(inst > 0, "%s: no plan instantiated", c);
    if (!strcmp(c, "gpt2_dynamo")) {
        CHECK_MSG(inst >= plans / 3, "%s: only %d of %d plans instantiated", c, inst, plans);
        /* a dim becoming 1 is a class of its own: the pipeline, and the same plan */
        int64_t q = seq_hi - 1;
        CHECK_OK(run_binding(s, g, 5, 1));
        CHECK_MSG(s->current && !s->current->instantiated, "batch 5 seq 1 was instantiated");
        /* ... while a binding of the generic class is instantiated */
        CHECK_OK(run_binding(s, g, 5, q));
        CHECK_MSG(s->current && s->current->instantiated, "batch 5 seq %lld was not instantiated", (long long)q);
        if (s->current) compare_with_pipeline(s, s->current, "gpt2 batch 5, seq hi - 1");
        char *text = NULL;
        CHECK_OK(gr_session_explain(s, &text));
        CHECK_MSG(text && strstr(text, "plan templates: ") && strstr(text, "instantiated from a plan template"), "explain: %s",
                  text ? text : "(none)");
        gr_free_string(text);
    }
    gr_session_destroy(s);
    gr_session_destroy(ref);
    gr_graph_destroy(g);
}

/* every allocation failure in a run that instantiates a plan: an error, no leak */
static void test_alloc_failures(void) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(DYN "gpt2_dynamo/model.onnx", &g));
    if (!g) return;
    long base = gr_debug_live_allocs();
    int failures = 0;
    bool instantiated = false;
    for (long n = 1; n < 100000; n++) {
        gr_session_t s = new_session(g, true);
        if (!s) break;
        /* two bindings of a class build its template, the third instantiates it */
        CHECK_OK(run_binding(s, g, 1, 20));
        CHECK_OK(run_binding(s, g, 1, 22));
        CHECK_OK(set_inputs(s, g, 1, 27));
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_session_run(s);
        if (st == GR_OK) st = gr_session_wait(s);
        long made = gr_debug_fail_alloc_after(0);
        if (st == GR_OK) instantiated = s->current && s->current->instantiated;
        gr_session_destroy(s);
        CHECK_MSG(gr_debug_live_allocs() == base, "leak after failing allocation %ld: %ld live", n, gr_debug_live_allocs() - base);
        if (st != GR_OK) failures++;
        if (st != GR_OK && st != GR_ERR_NOMEM) CHECK_MSG(0, "allocation %ld failed with %s: %s", n, gr_status_name(st), gr_last_error());
        if (st == GR_OK && made < n) break;
    }
    CHECK_MSG(instantiated, "the run after the failures did not instantiate its plan");
    CHECK_MSG(failures > 20, "only %d failures injected", failures);
    gr_graph_destroy(g);
}

/* A kernel's shape-generic structure is the same at every binding whose dims are all >= 2:
 * after the first binding, a sweep through bindings where sizes coincide with each other and
 * with the model's constants (batch = seq, batch 7 after 8, dims equal to head counts, head
 * dims or vocab-derived numbers) loads no new structure (on CUDA: compiles no new module).
 * Before constants carried their origin (kir.c), CSE merged constants that were equal at one
 * binding only, and GPT-2's sweep from batch 8, seq 32 loaded 2 new structures at batch 7 and
 * 2 at batch = seq = 20. Dims of 1 are a class of their own (size-1 dims change a kernel's
 * addressing), so the sweep stays at >= 2. */
static void test_structure_stable(const char *c) {
    char path[512];
    snprintf(path, sizeof path, DYN "%s/model.onnx", c);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.mode = GR_MODE_GRAPH;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    if (!s) {
        gr_graph_destroy(g);
        return;
    }
    int64_t seq_hi = 40;
    for (int k = 0; k < s->graph->syms.len; k++)
        if (!strcmp(s->graph->syms.data[k].name, "seq") && s->graph->syms.data[k].hi > 0 && s->graph->syms.data[k].hi < seq_hi)
            seq_hi = s->graph->syms.data[k].hi;
    static const int64_t sweep[][2] = {{8, 32}, {7, 31}, {20, 20}, {4, 16}, {16, 4}, {2, 2}, {3, 17}, {12, 12},
                                       {6, 40}, {5, 9},   {64, 2},  {2, 64}, {9, 33}, {4, 4}, {16, 16}, {2, 30}};
    gr_kernel_stats first, now;
    int runs = 0;
    for (size_t i = 0; i < sizeof sweep / sizeof sweep[0]; i++) {
        int64_t b = sweep[i][0], q = sweep[i][1] > seq_hi ? seq_hi : sweep[i][1];
        gr_status st = run_binding(s, g, b, q);
        CHECK_MSG(st == GR_OK, "%s: batch %lld seq %lld: %s", c, (long long)b, (long long)q, gr_last_error());
        if (st != GR_OK) continue;
        CHECK_OK(gr_session_kernel_stats(s, runs++ ? &now : &first));
        if (runs > 1)
            CHECK_MSG(now.generic_new == first.generic_new, "%s: batch %lld seq %lld loaded %ld new kernel structure(s)", c,
                      (long long)b, (long long)q, now.generic_new - first.generic_new);
    }
    CHECK_MSG(runs == (int)(sizeof sweep / sizeof sweep[0]), "%s: %d of the sweep's bindings ran", c, runs);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

int main(void) {
    long live = gr_debug_live_allocs();
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) test_structure_stable(cases[i]);
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) run_case(cases[i]);
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == live, "%ld allocations leaked", gr_debug_live_allocs() - live);
    return check_summary("test_plan_template");
}
