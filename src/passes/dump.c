/* passes/dump — `graft dump`: an observer of gr_pass_pipeline.
 *
 * The pipeline the session runs (pipeline.c) calls back after each pass; the
 * IR is printed with gr_gir_print after the graph passes, the step list
 * (kernels in kernel-IR form, library calls, views, host steps) after
 * lowering and after fusion, then the memory plan and the segments.
 */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

/* Constants longer than this are not printed, only their size: a dump shows
 * the program, and a model's weights would bury it. */
#define DUMP_INLINE_LIMIT 16
#define DUMP_SIDE_SINK GR_GIR_ELIDE

static gr_status put_ir(gr_strbuf *sb, const gr_graph *g, const char *pass) {
    char *text = NULL;
    GR_TRY(gr_gir_print(g, DUMP_INLINE_LIMIT, DUMP_SIDE_SINK, &text));
    gr_sb_printf(sb, "== after %s ==\n", pass);
    gr_sb_puts(sb, text);
    if (sb->len && sb->data[sb->len - 1] != '\n') gr_sb_puts(sb, "\n");
    gr_strfree(text);
    return GR_OK;
}

static const char *value_name(const gr_graph *g, int v) {
    return v >= 0 && v < g->values.len && g->values.data[v].name ? g->values.data[v].name : "?";
}

/* kind: the kernel param it binds (-1: a library-call operand) */
static void put_arg(gr_strbuf *sb, const gr_graph *g, const gr_step_arg *a, int kind) {
    switch (a->kind) {
    case GR_ARG_VALUE:
        gr_sb_printf(sb, "%%%s", value_name(g, a->value));
        if (a->elem_offset) gr_sb_printf(sb, "+%lld", (long long)a->elem_offset);
        break;
    case GR_ARG_LITERAL:
        if (kind == GR_KP_SHAPE || kind == GR_KP_SCALAR_I) gr_sb_printf(sb, "%lld", (long long)a->literal.i);
        else if (kind == GR_KP_SCALAR_F) gr_sb_printf(sb, "%g", a->literal.f);
        else if (!a->literal.ptr) gr_sb_puts(sb, "null");
        else gr_sb_printf(sb, "0x%llx", (unsigned long long)a->literal.bits);
        break;
    case GR_ARG_HOST_SCALAR: gr_sb_printf(sb, "host(%%%s)", value_name(g, a->value)); break;
    }
}

static const char *node_name(const gr_graph *g, int node) {
    return node >= 0 && node < g->nodes.len ? g->nodes.data[node].name : "-";
}

static gr_status put_steps(gr_strbuf *sb, const gr_graph *g, const gr_step_list *steps, const char *pass) {
    gr_sb_printf(sb, "== after %s: %d steps ==\n", pass, steps->len);
    for (int i = 0; i < steps->len; i++) {
        const gr_step *s = &steps->data[i];
        switch (s->kind) {
        case GR_STEP_KERNEL:
            gr_sb_printf(sb, "step %d: kernel %s (node %s) args(", i, s->kernel ? s->kernel->name : "?", node_name(g, s->node));
            for (int a = 0; a < s->n_args; a++) {
                if (a) gr_sb_puts(sb, ", ");
                put_arg(sb, g, &s->args[a], s->kernel && a < s->kernel->n_params ? (int)s->kernel->params[a].kind : -1);
            }
            gr_sb_puts(sb, ")\n");
            if (s->kernel) GR_TRY(gr_kernel_print(s->kernel, sb));
            break;
        case GR_STEP_LIBCALL: {
            const gr_libcall *c = &s->call;
            static const char *bias_names[] = {"none", "row", "full"};
            if (gr_lib_is_collective(c->kind))
                gr_sb_printf(sb, "step %d: libcall %s %s (node %s) %s count=%lld ranks=%lld\n", i,
                             c->kind == GR_LIB_ALL_REDUCE ? "all_reduce" : "all_gather", c->name, node_name(g, s->node),
                             gr_dtype_name(c->dtype), (long long)c->m, (long long)c->n);
            else if (c->kind == GR_LIB_BEAM_STEP || c->kind == GR_LIB_BEAM_REORDER)
                gr_sb_printf(sb, "step %d: libcall %s %s (node %s) %s m=%lld n=%lld k=%lld\n", i,
                             c->kind == GR_LIB_BEAM_STEP ? "beam_step" : "beam_reorder", c->name, node_name(g, s->node),
                             gr_dtype_name(c->dtype), (long long)c->m, (long long)c->n, (long long)c->k);
            else if (c->kind == GR_LIB_SAMPLE)
                gr_sb_printf(sb, "step %d: libcall sample %s (node %s) %s rows=%lld vocab=%lld\n", i, c->name, node_name(g, s->node),
                             gr_dtype_name(c->dtype), (long long)c->m, (long long)c->n);
            else if (c->kind == GR_LIB_ATTENTION)
                gr_sb_printf(sb,
                             "step %d: libcall attention %s (node %s) %s batch=%lld heads=%lld kv_heads=%lld seq_q=%lld "
                             "seq_k=%lld head_dim=%lld head_dim_v=%lld scale=%g causal=%d mask=%s strides=%lld/%lld/%lld/%lld "
                             "q=%lld/%lld/%lld k=%lld/%lld/%lld v=%lld/%lld/%lld o=%lld/%lld/%lld%s%.0d\n",
                             i, c->name, node_name(g, s->node), gr_dtype_name(c->dtype), (long long)c->batch,
                             (long long)c->heads, (long long)c->kv_heads, (long long)c->seq_q, (long long)c->seq_k,
                             (long long)c->head_dim, (long long)c->head_dim_v, c->alpha, c->causal,
                             c->has_mask ? gr_dtype_name(c->mask_dtype) : "none", (long long)c->mask_stride[0],
                             (long long)c->mask_stride[1], (long long)c->mask_stride[2], (long long)c->mask_stride[3],
                             (long long)c->q_stride[0], (long long)c->q_stride[1], (long long)c->q_stride[2],
                             (long long)c->k_stride[0], (long long)c->k_stride[1], (long long)c->k_stride[2],
                             (long long)c->v_stride[0], (long long)c->v_stride[1], (long long)c->v_stride[2],
                             (long long)c->o_stride[0], (long long)c->o_stride[1], (long long)c->o_stride[2],
                             !c->mask_group ? "" : c->mask_group_first ? " mask_group_first=" : " mask_group=",
                             (int)c->mask_group);
            else
            gr_sb_printf(sb,
                         "step %d: libcall matmul %s (node %s) %s m=%lld n=%lld k=%lld batch=%lld trans_a=%d trans_b=%d "
                         "lda=%lld ldb=%lld ldc=%lld strides=%lld/%lld/%lld alpha=%g bias=%s%s epilogue=%s\n",
                         i, c->name, node_name(g, s->node), gr_dtype_name(c->dtype), (long long)c->m, (long long)c->n,
                         (long long)c->k, (long long)c->batch, c->trans_a, c->trans_b, (long long)c->lda, (long long)c->ldb,
                         (long long)c->ldc, (long long)c->batch_stride_a, (long long)c->batch_stride_b,
                         (long long)c->batch_stride_c, c->alpha, (unsigned)c->bias < 3 ? bias_names[c->bias] : "?",
                         c->residual ? " residual" : "", gr_epilogue_name(c->epilogue));
            gr_sb_puts(sb, "  args(");
            for (int a = 0; a < s->n_args; a++) {
                if (a) gr_sb_puts(sb, ", ");
                put_arg(sb, g, &s->args[a], -1);
            }
            gr_sb_puts(sb, ")\n");
            break;
        }
        case GR_STEP_ALIAS:
            gr_sb_printf(sb, "step %d: alias %%%s = view of ", i, value_name(g, s->out_value));
            if (s->n_args > 0) put_arg(sb, g, &s->args[0], -1);
            gr_sb_printf(sb, " (node %s)\n", node_name(g, s->node));
            break;
        case GR_STEP_HOST:
            gr_sb_printf(sb, "step %d: host (node %s): %s\n", i, node_name(g, s->node), s->reason ? s->reason : "");
            break;
        }
    }
    return GR_OK;
}

/* Names of the symbolic dims the graph's inputs still have, comma-separated. */
static void unresolved_syms(const gr_graph *g, char *buf, size_t n, int *count) {
    bool seen[256] = {false};
    size_t pos = 0;
    buf[0] = 0;
    *count = 0;
    for (int i = 0; i < g->values.len; i++) {
        const gr_ir_value *v = &g->values.data[i];
        if (v->kind == GR_VAL_NODE || !v->typed) continue;
        for (int d = 0; d < v->ndim; d++) {
            bool used[256] = {false};
            if (g->syms.len <= 256) gr_dx_symbols_of(g, v->dims[d], used);
            for (int s = 0; s < g->syms.len && s < 256; s++) {
                if (!used[s] || seen[s]) continue;
                seen[s] = true;
                pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%s (of '%s')", *count ? ", " : "",
                                        g->syms.data[s].name, v->name);
                (*count)++;
            }
        }
    }
}

static const char *const store_names[] = {"none", "input", "const", "arena", "alias", "host", "weight (shared)"};
_Static_assert(sizeof store_names / sizeof store_names[0] == GR_STORE_COUNT, "a name per storage kind");

static void put_mem(gr_strbuf *sb, const gr_graph *g, const gr_mem_plan *m) {
    gr_sb_printf(sb, "== after plan_memory: arena %zu B, weights %zu B ==\n", m->arena_bytes, m->const_bytes);
    for (int v = 0; v < m->n_values && v < g->values.len; v++) {
        const gr_value_store *st = &m->values[v];
        if (st->kind == GR_STORE_NONE) continue;
        gr_sb_printf(sb, "%%%s: %s", value_name(g, v), (unsigned)st->kind < GR_STORE_COUNT ? store_names[st->kind] : "?");
        switch (st->kind) {
        case GR_STORE_ARENA:
            gr_sb_printf(sb, " [%zu, %zu) live steps %d..%d", st->offset, st->offset + st->bytes, st->first_step,
                         st->last_step);
            break;
        case GR_STORE_CONST: gr_sb_printf(sb, " [%zu, %zu)", st->offset, st->offset + st->bytes); break;
        case GR_STORE_INPUT: gr_sb_printf(sb, " #%zu, %zu B", st->offset, st->bytes); break;
        case GR_STORE_ALIAS:
            gr_sb_printf(sb, " of %%%s +%lld", value_name(g, st->alias_of), (long long)st->alias_elem_offset);
            break;
        default: break;
        }
        gr_sb_puts(sb, "\n");
    }
}

static void put_segments(gr_strbuf *sb, const gr_graph *g, const gr_segment_list *segs) {
    gr_sb_printf(sb, "== after partition: %d segment%s ==\n", segs->len, segs->len == 1 ? "" : "s");
    for (int i = 0; i < segs->len; i++) {
        const gr_segment *sg = &segs->data[i];
        gr_sb_printf(sb, "segment %d: steps %d..%d, %s", i, sg->first_step, sg->first_step + sg->n_steps - 1,
                     sg->graphable ? "graphable" : "not graphable");
        if (sg->break_reason)
            gr_sb_printf(sb, "; starts after a break at node %s: %s", node_name(g, sg->break_node), sg->break_reason);
        gr_sb_puts(sb, "\n");
    }
}

static gr_status observe(void *user, const char *pass, gr_compiled *c) {
    gr_strbuf *sb = user;
    if (!strcmp(pass, "lower") || !strcmp(pass, "fuse")) GR_TRY(put_steps(sb, c->g, &c->steps, pass));
    else if (!strcmp(pass, "plan_memory")) put_mem(sb, c->g, &c->mem);
    else if (!strcmp(pass, "partition")) put_segments(sb, c->g, &c->segs);
    else {
        if (!strcmp(pass, "input")) GR_TRY(gr_ir_verify(c->g));
        GR_TRY(put_ir(sb, c->g, pass));
    }
    return sb->failed ? gr_nomem() : GR_OK;
}

gr_status gr_pass_dump(const gr_graph *g, const int64_t *sym_values, bool no_partition, gr_strbuf *sb) {
    gr_pipeline_opts o = {.no_partition = no_partition};
    return gr_pass_dump_opts(g, sym_values, &o, sb);
}

gr_status gr_pass_dump_opts(const gr_graph *g, const int64_t *sym_values, const gr_pipeline_opts *opts, gr_strbuf *sb) {
    if (!sym_values) {
        char syms[1024];
        int n_syms;
        unresolved_syms(g, syms, sizeof syms, &n_syms);
        if (n_syms)
            return gr_error(GR_ERR_SHAPE, "dump: the graph has %d unresolved symbolic dim%s: %s; give them values first",
                            n_syms, n_syms > 1 ? "s" : "", syms);
    }
    /* as a session plans a binding (runtime/plan.c): what the dump shows is what runs */
    gr_pipeline_opts o = *opts;
    o.after_pass = observe;
    o.user = sb;
    o.fold_linear_only = g->syms.len > 0;
    o.src_marked = false;
    o.src_converted = false;
    gr_compiled c;
    GR_TRY(gr_pass_pipeline(g, sym_values, &o, &c));
    gr_compiled_free(&c);
    return sb->failed ? gr_nomem() : GR_OK;
}

gr_status gr_compiled_dump(const gr_compiled *c, gr_strbuf *sb) {
    GR_TRY(put_ir(sb, c->g, "fold_constants"));
    GR_TRY(put_steps(sb, c->g, &c->steps, "fuse"));
    put_mem(sb, c->g, &c->mem);
    put_segments(sb, c->g, &c->segs);
    return sb->failed ? gr_nomem() : GR_OK;
}
