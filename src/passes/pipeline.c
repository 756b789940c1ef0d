/* passes/pipeline — the one place the pass order is written.
 *
 * The session (runtime/plan.c) compiles every shape key through
 * gr_pass_pipeline and `graft dump` observes the very same run through the
 * after_pass callback, so what dump shows is what a session executes.
 */
#include "passes/passes.h"
#include <string.h>

void gr_compiled_free(gr_compiled *c) {
    if (!c) return;
    gr_segment_list_free(&c->segs);
    gr_mem_plan_free(&c->mem);
    gr_step_list_free(&c->steps);
    gr_ir_graph_destroy(c->g);
    memset(c, 0, sizeof *c);
}

void gr_pipeline_scratch_free(gr_pipeline_scratch *s) {
    if (!s) return;
    gr_step_list_free(&s->steps); /* holds no kernel between runs: only the buffer goes */
}

/* fold_linear_only: marks nodes whose first output's element count has degree >= 2 in the symbols,
 * or degree 1 with more than FOLD_MAX_PER_SYM elements per unit of the symbol (the count with
 * every symbol at 1). Why the second rule: GPT-2's position-embedding rows [1, seq, hidden] are a
 * gather of a weight by a folded Range; folding them costs host time in every new binding's plan
 * (~12 ns per element in the interpreter: ~5 ms at hidden 768 and seq 512), while leaving them a
 * kernel costs one launch per run (41 -> 42 kernels for the tiny export, hidden 64, where folding
 * them was 11% of a new plan's host instructions). Position ids, lengths, masks of a few columns
 * (up to 16 elements per unit) still fold. */
#define FOLD_MAX_PER_SYM 16
gr_status gr_pass_mark_superlinear(gr_graph *g) {
    size_t ones_bytes = sizeof(int64_t) * (size_t)(g->syms.len > 0 ? g->syms.len : 1);
    int64_t *ones = gr_malloc(ones_bytes);
    if (!ones) return GR_ERR_NOMEM;
    for (int k = 0; k < g->syms.len; k++) ones[k] = 1;
    for (int i = 0; i < g->nodes.len; i++) {
        gr_ir_node *n = &g->nodes.data[i];
        if (n->n_out < 1 || n->out[0] < 0) continue;
        const gr_ir_value *v = &g->values.data[n->out[0]];
        if (!v->typed) continue;
        gr_dim numel = gr_dx_const(1);
        bool ok = true;
        for (int d = 0; d < v->ndim && ok; d++) {
            gr_status st = gr_dx_binary(g, GR_DX_MUL, numel, v->dims[d], &numel);
            if (st == GR_ERR_NOMEM) return gr_free(ones, ones_bytes), st;
            if (st != GR_OK) gr_error_clear(), ok = false;
        }
        int deg = ok ? gr_dx_degree(g, numel) : -1;
        int64_t per_unit = 0;
        if (deg == 1) {
            gr_status st = gr_dx_eval(g, numel, ones, &per_unit);
            if (st == GR_ERR_NOMEM) return gr_free(ones, ones_bytes), st;
            if (st != GR_OK) gr_error_clear(), per_unit = INT64_MAX;
        }
        if (deg < 0 || deg >= 2 || (deg == 1 && per_unit > FOLD_MAX_PER_SYM)) n->no_fold = true;
    }
    gr_free(ones, ones_bytes);
    return GR_OK;
}

static gr_status after(const gr_pipeline_opts *o, const char *pass, gr_compiled *c) {
    return o && o->after_pass ? o->after_pass(o->user, pass, c) : GR_OK;
}

/* ==== the pipeline in three parts ================================================================
 * front (clone .. fold_constants: the graph for the binding), middle (lower, fuse: the steps) and
 * finish (plan_memory, partition, the kept copy of the steps). gr_pass_pipeline runs the three;
 * a session's template (runtime/template.c) runs front and finish around steps it instantiates. */
gr_status gr_pass_pipeline_front(const gr_graph *src, const int64_t *sym_values, const gr_pipeline_opts *opts,
                                 gr_compiled *c) {
    memset(c, 0, sizeof *c);
    gr_status st = gr_ir_graph_clone_borrow(src, &c->g); /* weights are shared, not copied */
    if (st == GR_OK) st = after(opts, "input", c);
    if (st == GR_OK && opts && opts->convert_precision && !opts->src_converted) {
        st = gr_pass_precision(c->g, opts->precision, !opts->no_fuse_attention, NULL);
        if (st == GR_OK) st = after(opts, "precision", c);
    }
    /* before specialization: the match sees the symbolic shapes, so every binding gets the same op */
    if (st == GR_OK && !(opts && opts->no_fuse_attention)) {
        int n_fused = 0;
        st = gr_pass_fuse_attention(c->g, opts && opts->fuse_attention_f32, &n_fused);
        if (st == GR_OK && n_fused) st = after(opts, "fuse_attention", c);
    }
    /* after attention (its matmuls are not epilogue targets), before specialization (as it) */
    if (st == GR_OK && !(opts && opts->no_fuse_epilogue)) {
        int n_fused = 0;
        st = gr_pass_fuse_epilogue(c->g, &n_fused);
        if (st == GR_OK && n_fused) st = after(opts, "fuse_epilogue", c);
        n_fused = 0;
        if (st == GR_OK) st = gr_pass_fuse_residual(c->g, &n_fused);
        if (st == GR_OK && n_fused) st = after(opts, "fuse_residual", c);
    }
    /* after the matchers above (a value they fuse must keep its one reader), before specialization
     * (merges decided on the symbolic graph: alike for every binding) */
    if (st == GR_OK && !(opts && opts->no_cse)) {
        int n_merged = 0;
        st = gr_pass_cse(c->g, &n_merged);
        if (st == GR_OK && n_merged) st = after(opts, "cse", c);
    }
    if (st == GR_OK && opts && opts->fold_linear_only && !opts->src_marked) st = gr_pass_mark_superlinear(c->g);
    if (st == GR_OK) st = gr_ir_specialize(c->g, sym_values);
    if (st == GR_OK) st = after(opts, "specialize", c);
    if (st == GR_OK) st = gr_pass_unroll_loops(c->g); /* loops over a data-dependent trip count (unroll.c) */
    if (st == GR_OK) st = gr_pass_predicate_if(c->g);
    if (st == GR_OK) st = after(opts, "predicate_if", c);
    if (st == GR_OK) st = gr_pass_fold_constants(c->g);
    if (st == GR_OK) st = after(opts, "fold_constants", c);
    if (st != GR_OK) gr_compiled_free(c);
    return st;
}

gr_status gr_pass_pipeline_steps(const gr_pipeline_opts *opts, gr_compiled *c) {
    gr_status st;
    /* a symbolic model's constants keep their origin through fusion (kir.c: the structure of a
     * kernel must not depend on which of its constants are equal at this binding) */
    gr_kx_const_origins(c->g->syms.len > 0);
    if (opts && opts->scratch) { /* lowering and fusion work in the scratch's buffer */
        c->steps = opts->scratch->steps;
        memset(&opts->scratch->steps, 0, sizeof opts->scratch->steps);
        st = gr_pass_lower_opts(c->g, &c->steps, opts->activation_matmul_kernels);
    } else {
        memset(&c->steps, 0, sizeof c->steps);
        st = gr_pass_lower_opts(c->g, &c->steps, opts && opts->activation_matmul_kernels);
    }
    if (st == GR_OK) st = after(opts, "lower", c);
    if (st == GR_OK) st = gr_pass_fuse(c->g, &c->steps);
    gr_kx_const_origins(false);
    if (st == GR_OK) st = after(opts, "fuse", c);
    return st;
}

gr_status gr_pass_pipeline_finish(const gr_pipeline_opts *opts, gr_compiled *c) {
    gr_status st = gr_pass_plan_memory(c->g, &c->steps, &c->mem);
    if (st == GR_OK) st = after(opts, "plan_memory", c);
    if (st == GR_OK)
        st = opts && opts->no_partition ? gr_pass_partition_none(&c->steps, &c->segs) : gr_pass_partition(c->g, &c->steps, &c->segs);
    if (st == GR_OK) st = after(opts, "partition", c);
    int n_reusing = 0;
    if (st == GR_OK) st = gr_pass_share_attention_masks(&c->steps, &n_reusing);
    return st;
}

gr_status gr_pass_pipeline(const gr_graph *src, const int64_t *sym_values, const gr_pipeline_opts *opts,
                           gr_compiled *out) {
    memset(out, 0, sizeof *out);
    gr_compiled c;
    gr_status st = gr_pass_pipeline_front(src, sym_values, opts, &c);
    if (st != GR_OK) return st;
    st = gr_pass_pipeline_steps(opts, &c);
    if (st == GR_OK) st = gr_pass_pipeline_finish(opts, &c);
    if (st != GR_OK) {
        gr_compiled_free(&c);
        return st;
    }
    /* a plan is kept per binding: the room fusion freed (a step is ~1 KB) goes back to malloc,
     * where the next binding's plan finds it instead of fresh pages; with a scratch, the plan
     * gets an exact copy and the working buffer (grown past malloc's mmap threshold by the
     * lowering of a model of ~100 nodes, so fresh pages for every plan) waits for the next run */
    if (opts && opts->scratch) {
        gr_step *kept = NULL;
        if (c.steps.len > 0) {
            kept = gr_malloc(sizeof(gr_step) * (size_t)c.steps.len);
            if (!kept) {
                gr_compiled_free(&c);
                return gr_nomem();
            }
            memcpy(kept, c.steps.data, sizeof(gr_step) * (size_t)c.steps.len);
        }
        opts->scratch->steps.data = c.steps.data;
        opts->scratch->steps.cap = c.steps.cap;
        opts->scratch->steps.len = 0;
        c.steps.data = kept;
        c.steps.cap = c.steps.len;
    } else gr_vec_shrink(&c.steps);
    for (int i = 0; i < c.steps.len; i++)
        if (c.steps.data[i].kind == GR_STEP_KERNEL && c.steps.data[i].kernel) gr_vec_shrink(&c.steps.data[i].kernel->nodes);
    *out = c;
    return GR_OK;
}
