/* tests/test_plan_reuse — a new binding's plan equals a freshly built one.
 *
 * A session's plan builds reuse what earlier builds left (runtime/plan.c: the pipeline's
 * scratch step list, gr_pipeline_scratch). This test runs the dynamic-axis exports
 * (tests/data/onnx/dyn) over several bindings in one session, so every plan after the first
 * is built in reused memory, then builds each binding again with a fresh pipeline run (the
 * session's own pipeline options, no scratch) and compares everything a plan runs from:
 * every step (kind, node, arguments, output), every kernel (parameters, loop nest, nodes with
 * their constants and accesses, stages), every library call, every value's storage (kind,
 * offset, size, alias, live range), the arena and constant sizes, and the segments; and again
 * against a fresh run whose memory plan places values with the interval tree instead of the
 * list (memplan.c: the same offsets either way).
 * Runs on the simulator; GRAFT_TEST_DEVICE=cuda runs it on the GPU. */
#include "check.h"
#include "npy.h"
#include "dyn_fixtures.h"
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

static const char *const bindings[] = {"b1_s5", "b1_s17", "b1_s1", "b3_s7", "b1_s64", "b8_s3"};

static bool bits_eq(double a, double b) { return !memcmp(&a, &b, sizeof a); }

static bool access_eq(const gr_kaccess *a, const gr_kaccess *b) {
    return gr_kaccess_equal(a, b) && a->origin == b->origin;
}

static bool kernel_eq(const gr_kernel *a, const gr_kernel *b, char *why, size_t n) {
    if (strcmp(a->name, b->name)) return snprintf(why, n, "names %s / %s", a->name, b->name), false;
    if (a->n_params != b->n_params || a->n_outer != b->n_outer || a->n_inner != b->n_inner ||
        a->n_points_param != b->n_points_param || a->n_stages != b->n_stages || a->nodes.len != b->nodes.len ||
        a->source_node != b->source_node || a->var_outer != b->var_outer || a->var_inner != b->var_inner)
        return snprintf(why, n, "kernel %s: header differs", a->name), false;
    for (int p = 0; p < a->n_params; p++) {
        const gr_kparam *x = &a->params[p], *y = &b->params[p];
        if (x->kind != y->kind || x->dtype != y->dtype || x->written != y->written || strcmp(x->name, y->name))
            return snprintf(why, n, "kernel %s: param %d differs", a->name, p), false;
    }
    for (int d = 0; d < a->n_outer; d++)
        if (a->outer[d] != b->outer[d]) return snprintf(why, n, "kernel %s: outer[%d] differs", a->name, d), false;
    for (int d = 0; d < a->n_inner; d++)
        if (a->inner[d] != b->inner[d]) return snprintf(why, n, "kernel %s: inner[%d] differs", a->name, d), false;
    for (int i = 0; i < a->nodes.len; i++) {
        const gr_kexpr *x = &a->nodes.data[i], *y = &b->nodes.data[i];
        bool same = x->op == y->op && x->dtype == y->dtype && x->fn == y->fn && x->a == y->a && x->b == y->b &&
                    x->c == y->c && x->which == y->which && x->param == y->param && bits_eq(x->f, y->f) &&
                    x->i == y->i && (x->op != GR_KX_LOAD || access_eq(&x->access, &y->access));
        if (!same) return snprintf(why, n, "kernel %s: node %d differs", a->name, i), false;
    }
    for (int s = 0; s < a->n_stages; s++) {
        const gr_kstage *x = &a->stages[s], *y = &b->stages[s];
        bool same = x->kind == y->kind && x->value == y->value && x->reduce == y->reduce &&
                    x->over_inner == y->over_inner && x->param == y->param &&
                    (x->kind != GR_KS_STORE || access_eq(&x->access, &y->access));
        if (!same) return snprintf(why, n, "kernel %s: stage %d differs", a->name, s), false;
    }
    return true;
}

static bool libcall_eq(const gr_libcall *a, const gr_libcall *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->batch == b->batch && a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc && a->batch_stride_a == b->batch_stride_a &&
           a->batch_stride_b == b->batch_stride_b && a->batch_stride_c == b->batch_stride_c &&
           bits_eq(a->alpha, b->alpha) && a->bias == b->bias && a->batch_stride_bias == b->batch_stride_bias &&
           a->epilogue == b->epilogue && a->heads == b->heads && a->kv_heads == b->kv_heads && a->seq_q == b->seq_q &&
           a->seq_k == b->seq_k && a->head_dim == b->head_dim && a->head_dim_v == b->head_dim_v &&
           a->causal == b->causal && a->has_mask == b->has_mask && a->mask_dtype == b->mask_dtype &&
           !memcmp(a->mask_stride, b->mask_stride, sizeof a->mask_stride) &&
           !memcmp(a->q_stride, b->q_stride, sizeof a->q_stride) && !memcmp(a->k_stride, b->k_stride, sizeof a->k_stride) &&
           !memcmp(a->v_stride, b->v_stride, sizeof a->v_stride) && !memcmp(a->o_stride, b->o_stride, sizeof a->o_stride) &&
           !strcmp(a->name, b->name);
}

static bool arg_eq(const gr_step_arg *a, const gr_step_arg *b) {
    return a->kind == b->kind && a->value == b->value && a->elem_offset == b->elem_offset &&
           !memcmp(&a->literal, &b->literal, sizeof a->literal);
}

/* p (built in the session) against a fresh pipeline run for its binding; tree_only: the fresh
 * run places arena values with the interval tree (the session's plans, with few values, use the
 * list: memplan.c) */
static void compare_with_fresh(gr_session_t s, const gr_rt_plan *p, bool tree_only, const char *what) {
    gr_pipeline_opts po;
    gr_rt_plan_pipeline_opts(s, &po);
    CHECK(po.scratch == NULL && po.after_pass == NULL);
    gr_compiled c;
    gr_pass_plan_memory_debug_tree_only(tree_only);
    CHECK_OK(gr_pass_pipeline(s->graph, p->sym_values, &po, &c));
    gr_pass_plan_memory_debug_tree_only(false);
    char why[160] = "";
    bool same = c.steps.len == p->steps.len;
    if (!same) snprintf(why, sizeof why, "%d steps / %d fresh", p->steps.len, c.steps.len);
    for (int i = 0; same && i < c.steps.len; i++) {
        const gr_step *x = &p->steps.data[i], *y = &c.steps.data[i];
        same = x->kind == y->kind && x->node == y->node && x->n_args == y->n_args && x->out_value == y->out_value &&
               x->segment == y->segment && x->host_fn == y->host_fn;
        for (int a = 0; same && a < x->n_args; a++) same = arg_eq(&x->args[a], &y->args[a]);
        if (same && x->kind == GR_STEP_KERNEL) same = kernel_eq(x->kernel, y->kernel, why, sizeof why);
        if (same && x->kind == GR_STEP_LIBCALL) same = libcall_eq(&x->call, &y->call);
        if (!same && !why[0]) snprintf(why, sizeof why, "step %d differs", i);
    }
    if (same && (p->mem.n_values != c.mem.n_values || p->mem.arena_bytes != c.mem.arena_bytes ||
                 p->mem.const_bytes != c.mem.const_bytes))
        same = false, snprintf(why, sizeof why, "memory plan sizes differ");
    for (int v = 0; same && v < c.mem.n_values; v++) {
        const gr_value_store *x = &p->mem.values[v], *y = &c.mem.values[v];
        same = x->kind == y->kind && x->offset == y->offset && x->bytes == y->bytes && x->alias_of == y->alias_of &&
               x->alias_elem_offset == y->alias_elem_offset && x->first_step == y->first_step &&
               x->last_step == y->last_step;
        if (!same) snprintf(why, sizeof why, "storage of value %d differs", v);
    }
    if (same && p->segs.len != c.segs.len) same = false, snprintf(why, sizeof why, "segment counts differ");
    for (int i = 0; same && i < c.segs.len; i++) {
        same = p->segs.data[i].first_step == c.segs.data[i].first_step &&
               p->segs.data[i].n_steps == c.segs.data[i].n_steps && p->segs.data[i].graphable == c.segs.data[i].graphable;
        if (!same) snprintf(why, sizeof why, "segment %d differs", i);
    }
    CHECK_MSG(same, "%s: the session's plan differs from a fresh build: %s", what, why);
    gr_compiled_free(&c);
}

static void run_case(const char *c) {
    char path[512];
    snprintf(path, sizeof path, DYN "%s/model.onnx", c);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return;
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = test_device();
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    int n_in = gr_graph_num_inputs(g), n_plans = 0;
    for (int b = 0; s && b < (int)(sizeof bindings / sizeof bindings[0]); b++) {
        bool ok = true;
        for (int i = 0; i < n_in && ok; i++) {
            gr_value_info info;
            CHECK_OK(gr_graph_input_info(g, i, &info));
            snprintf(path, sizeof path, DYN "%s/%s/%s.npy", c, bindings[b], info.name);
            ok = set_input_file(s, info.name, path);
        }
        if (!ok) continue;
        CHECK_MSG(gr_session_run(s) == GR_OK, "%s %s: run: %s", c, bindings[b], gr_last_error());
        n_plans++;
    }
    int n = 0;
    for (const gr_rt_plan *p = s ? s->plans : NULL; p; p = p->next, n++) {
        char what[128];
        snprintf(what, sizeof what, "%s, plan %d", c, n);
        compare_with_fresh(s, p, false, what);
        snprintf(what, sizeof what, "%s, plan %d, fresh plan placed by the interval tree", c, n);
        compare_with_fresh(s, p, true, what);
    }
    CHECK_MSG(n == n_plans && n > 1, "%s: %d plans for %d bindings", c, n, n_plans);
    gr_session_destroy(s);
    gr_graph_destroy(g);
}

int main(void) {
    for (int i = 0; i < (int)(sizeof dyn_cases / sizeof dyn_cases[0]); i++) run_case(dyn_cases[i]);
    return check_summary("test_plan_reuse");
}
