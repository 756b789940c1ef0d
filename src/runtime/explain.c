/* runtime/explain — `graft explain`: the compiled plan segment by segment:
 * kernels, graph or eager and why, placeholders and bytes copied per replay. */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

static const char *seg_state_name(gr_seg_state s) {
    switch (s) {
    case GR_SEG_EAGER: return "not yet run in graph mode";
    case GR_SEG_WARMUP: return "warming up";
    case GR_SEG_CAPTURED: return "captured";
    case GR_SEG_FALLBACK: return "eager (fallback)";
    case GR_SEG_CHOSE_EAGER: return "eager (selected by timing)";
    }
    return "?";
}

/* where a mode-auto decision came from */
static const char *decision_source(const gr_rt_segment *st) {
    if (st->decision_loaded) return "decision loaded from the decisions file, measured by an earlier session";
    if (st->decision_kept) return "decision kept from this binding's earlier plan, dropped under the graph memory budget";
    return "measured now";
}

static void explain_step(gr_strbuf *sb, const gr_rt_plan *p, int i) {
    const gr_step *st = &p->steps.data[i];
    const char *node = st->node >= 0 && st->node < p->g->nodes.len ? p->g->nodes.data[st->node].name : "-";
    switch (st->kind) {
    case GR_STEP_KERNEL: {
        const gr_kernel *k = st->kernel;
        gr_sb_printf(sb, "    [%3d] kernel  %-28s points=%lld", i, k->name, (long long)gr_kernel_points(k));
        if (k->n_inner) gr_sb_printf(sb, " x inner=%lld", (long long)gr_kernel_inner_points(k));
        gr_sb_printf(sb, " stages=%d nodes=%d  (from %s)", k->n_stages, k->nodes.len, node);
        for (int a = 0; a < st->n_args; a++)
            if (st->args[a].kind == GR_ARG_HOST_SCALAR)
                gr_sb_printf(sb, "  host scalar '%s' baked into the node", p->g->values.data[st->args[a].value].name);
        gr_sb_puts(sb, "\n");
        break;
    }
    case GR_STEP_LIBCALL:
        if (st->call.kind == GR_LIB_ATTENTION) {
            char share[48] = "";
            if (st->call.mask_group)
                snprintf(share, sizeof share, st->call.mask_group_first ? " (mask classified for group %d)"
                                                                        : " (mask of group %d reused)",
                         (int)st->call.mask_group);
            gr_sb_printf(sb, "    [%3d] attn    %-28s batch=%lld heads=%lld/%lld seq=%lldx%lld head_dim=%lld %s%s%s%s%s  (from %s)\n",
                         i, st->call.name, (long long)st->call.batch, (long long)st->call.heads, (long long)st->call.kv_heads,
                         (long long)st->call.seq_q, (long long)st->call.seq_k, (long long)st->call.head_dim,
                         gr_dtype_name(st->call.dtype), st->call.causal ? " causal" : "", st->call.has_mask ? " +mask" : "",
                         share, st->call.lens_arg ? " lengths from the slot table" : "", node);
            break;
        }
        if (st->call.kind == GR_LIB_BEAM_STEP || st->call.kind == GR_LIB_BEAM_REORDER) {
            bool step = st->call.kind == GR_LIB_BEAM_STEP;
            gr_sb_printf(sb, "    [%3d] %-7s %-28s %lld rows x %lld x %lld %s  (from %s)\n", i, step ? "beam" : "reorder", st->call.name,
                         (long long)st->call.m, (long long)(step ? st->call.k : st->call.n), (long long)(step ? st->call.n : st->call.k),
                         gr_dtype_name(st->call.dtype), node);
            break;
        }
        if (st->call.kind == GR_LIB_SAMPLE) {
            gr_sb_printf(sb, "    [%3d] sample  %-28s %lld rows x %lld %s  (from %s)\n", i, st->call.name, (long long)st->call.m,
                         (long long)st->call.n, gr_dtype_name(st->call.dtype), node);
            break;
        }
        if (gr_lib_is_collective(st->call.kind)) {
            gr_sb_printf(sb, "    [%3d] %-7s %-28s %lld x %s over %lld ranks  (from %s)\n", i,
                         st->call.kind == GR_LIB_ALL_REDUCE ? "allred" : "gather", st->call.name, (long long)st->call.m,
                         gr_dtype_name(st->call.dtype), (long long)st->call.n, node);
            break;
        }
        gr_sb_printf(sb, "    [%3d] matmul  %-28s %lldx%lldx%lld batch=%lld %s%s%s%s%s  (from %s)\n", i, st->call.name,
                     (long long)st->call.m, (long long)st->call.n, (long long)st->call.k, (long long)st->call.batch,
                     gr_dtype_name(st->call.dtype), st->call.bias != GR_BIAS_NONE ? " +bias" : "",
                     st->call.residual ? " +residual" : "",
                     st->call.epilogue != GR_EPI_NONE ? " +" : "",
                     st->call.epilogue != GR_EPI_NONE ? gr_epilogue_name(st->call.epilogue) : "", node);
        break;
    case GR_STEP_ALIAS:
        gr_sb_printf(sb, "    [%3d] view    %-28s (no work)  (from %s)\n", i, p->g->values.data[st->out_value].name, node);
        break;
    case GR_STEP_HOST:
        gr_sb_printf(sb, "    [%3d] host    %s  (from %s)\n", i, st->reason ? st->reason : "", node);
        break;
    }
}

gr_status gr_session_explain(gr_session_t s, char **out_text) {
    if (!s || !out_text) return gr_error(GR_ERR_INVALID, "gr_session_explain: NULL argument");
    gr_rt_plan *p = s->current ? s->current : s->plans;
    if (!p && s->tp) { /* the splits are known before any binding */
        gr_strbuf sb;
        gr_sb_init(&sb);
        gr_sb_printf(&sb, "device: %s\n", gr_dev_name(s->dev));
        gr_rt_tp_explain(s, &sb);
        gr_sb_puts(&sb, "plan: none yet (symbolic dims: bind them, e.g. --dim NAME=VALUE, to compile one)\n");
        *out_text = gr_sb_take(&sb);
        return *out_text ? GR_OK : gr_nomem();
    }
    if (!p)
        return gr_error(GR_ERR_INVALID, "the graph has symbolic dims: bind inputs and run once before explain, so a shape is known");
    gr_strbuf sb;
    gr_sb_init(&sb);
    const char *mode = s->opt.mode == GR_MODE_EAGER ? "eager" : s->opt.mode == GR_MODE_GRAPH ? "graph" : "auto";
    gr_sb_printf(&sb, "device: %s\nmode: %s\n", gr_dev_name(s->dev), mode);
    if (s->tp) gr_rt_tp_explain(s, &sb);
    if (s->opt.precision != GR_PRECISION_MODEL) {
        const gr_precision_stats *ps = &s->precision;
        gr_sb_printf(&sb,
                     "precision: %s (converted at load: %d weights to %s, %zu bytes; %d nodes in %s, %d kept in f32; %d casts; "
                     "%d attentions fused first)\n",
                     gr_dtype_name(gr_rt_precision_dtype(s->opt.precision)), ps->weights_converted,
                     gr_dtype_name(gr_rt_precision_dtype(s->opt.precision)), ps->weight_bytes_saved,
                     ps->nodes_half, gr_dtype_name(gr_rt_precision_dtype(s->opt.precision)), ps->nodes_f32, ps->casts,
                     ps->attention_fused);
    }
    if (s->opt.mode != GR_MODE_EAGER) {
        if (s->autopol) {
            gr_sb_printf(&sb, "shape policy: auto (%sper segment exact, update or generic, chosen by measuring each at the "
                              "segment's first binding: %ld segments measured in this session with %ld measuring runs, %ld "
                              "decisions from the decisions file; generic %s%s)\n",
                         s->shape_policy_default ? "the default of graph mode for a model with symbolic dims (--shapes exact "
                                                   "etc. to choose another); "
                                                 : "",
                         s->autopol_measured, s->autopol_runs, s->autopol_loaded,
                         s->generic_infra ? "a candidate" : "not a candidate: ", s->generic_infra ? "" : gr_rt_autopol_generic_why(s));
            gr_rt_autopol_explain_session(s, &sb); /* autopol.c: calls per binding seen, re-decisions */
        }
        if (s->opt.shape_policy == GR_SHAPES_PAD || s->opt.shape_policy == GR_SHAPES_AUTO)
            gr_rt_pad_explain(s, &sb); /* shapes.c */
        else if (s->opt.shape_policy == GR_SHAPES_GENERIC)
            gr_sb_printf(&sb, "shape policy: generic (one graph per power-of-two bucket of the symbols, kernels reading their "
                              "slots from a device table: %ld segment runs through a bucket's plan, %ld of them graph replays, "
                              "%ld table refreshes, %zu bytes copied)\n",
                         s->generic_runs, s->generic_replays, s->table_refreshes, s->table_bytes);
        else if (s->opt.shape_policy == GR_SHAPES_UPDATE)
            gr_sb_printf(&sb, "shape policy: update (one exec per segment position, each binding's capture applied with an exec "
                              "update: %ld updates, %ld refused and instantiated instead)\n",
                         s->exec_updates, s->exec_updates_refused);
        else if (!s->autopol)
            gr_sb_printf(&sb, "shape policy: %s (one graph per binding of the symbolic dims%s)\n", gr_shape_policy_name(s->opt.shape_policy),
                         !s->shape_policy_default ? ""
                         : s->graph->syms.len    ? "; the default of mode auto"
                                                 : "; the default: the model has no symbolic dims");
        gr_sb_printf(&sb, "graph memory: %zu bytes held by %ld graphs (measured on the device: free memory before minus after "
                          "each capture), peak %zu, budget ",
                     s->graph_bytes, s->graphs_live, s->graph_bytes_peak);
        if (s->graph_budget) gr_sb_printf(&sb, "%zu bytes (least recently used bindings' graphs evicted)", s->graph_budget);
        else gr_sb_puts(&sb, "none (graph_memory_mb / --graph-memory-mb)");
        gr_sb_printf(&sb, "; %ld captures, %ld instantiations, %ld evictions (%ld plans dropped), %ld segments over budget\n",
                     s->total_captures, s->instantiations, s->evictions, s->plans_evicted, s->over_budget);
    }
    if (s->opt.mode == GR_MODE_AUTO || s->autopol) {
        const char *path = gr_rt_decisions_path(s), *note = gr_rt_decisions_note(s);
        if (path[0]) gr_sb_printf(&sb, "decisions file: %s (%s)\n", path, note[0] ? note : "ok");
        else gr_sb_printf(&sb, "decisions: %s\n", note);
        if (s->opt.mode == GR_MODE_AUTO)
            gr_sb_printf(&sb, "decisions: %ld measured in this session (%ld timed runs), %ld loaded from the file\n",
                         s->decisions_measured, s->timed_runs, s->decisions_loaded);
    }
    if (p->n_syms) {
        gr_sb_puts(&sb, "shape key:");
        for (int k = 0; k < p->n_syms; k++) gr_sb_printf(&sb, " %s=%lld", s->graph->syms.data[k].name, (long long)p->sym_values[k]);
        gr_sb_puts(&sb, "\n");
    }
    gr_sb_printf(&sb,
                 "plan: %d steps, %ld kernels, arena %zu bytes, weights %zu bytes (shared by every binding's plan, uploaded once) "
                 "+ %zu bytes folded for this binding, %s in %.1f ms\n",
                 p->steps.len, p->n_kernels, p->mem.arena_bytes, s->weight_bytes, p->mem.const_bytes,
                 p->instantiated ? "instantiated from a plan template" : "compiled", p->compile_us / 1e3);
    if (s->graph->syms.len) {
        if (s->opt.arena_policy == GR_ARENA_MAX_SHAPE && p->arena_own_layout) {
            gr_sb_printf(&sb,
                         "arena: policy max shape: this binding uses the shared arena of %zu bytes (planned for the largest "
                         "binding) with its own layout of %zu bytes, not the largest binding's addresses: %s\n",
                         s->shared_arena_bytes, p->mem.arena_bytes, p->arena_note);
        } else if (s->opt.arena_policy == GR_ARENA_MAX_SHAPE && p->arena_shared) {
            gr_sb_printf(&sb, "arena: policy max shape: one arena of %zu bytes planned for the largest binding (", s->shared_arena_bytes);
            for (int k = 0; k < s->graph->syms.len; k++)
                gr_sb_printf(&sb, "%s%s=%lld", k ? " " : "", s->graph->syms.data[k].name, (long long)s->max_syms[k]);
            gr_sb_puts(&sb, "), allocated once; this binding's values sit at the addresses that binding gives them, so every "
                            "binding shares them\n");
        } else if (s->opt.arena_policy == GR_ARENA_MAX_SHAPE) {
            gr_sb_printf(&sb, "arena: policy max shape, but this binding has its own arena of %zu bytes: %s\n", p->mem.arena_bytes,
                         p->arena_note[0] ? p->arena_note : "the largest binding's arena is empty");
        } else {
            gr_sb_printf(&sb, "arena: per binding: %zu bytes planned for this binding (policy max shape, --arena max with declared "
                              "ranges, plans one arena for the largest binding and shares its addresses)\n",
                         p->mem.arena_bytes);
        }
    }
    gr_rt_probe_explain(s, &sb);
    gr_rt_tmpl_explain(s, &sb);
    gr_rt_ctrl_explain(s, &sb);
    size_t placeholder_bytes = 0;
    gr_sb_puts(&sb, "inputs:\n");
    for (int i = 0; i < p->g->inputs.len; i++) {
        const gr_ir_value *v = &p->g->values.data[p->g->inputs.data[i]];
        char t[256];
        gr_ir_type_str(p->g, v, t, sizeof t);
        if (p->mem.values[p->g->inputs.data[i]].kind == GR_STORE_HOST) {
            gr_sb_printf(&sb, "  %-20s %-24s host value: read by value at launch, no copy\n", v->name, t);
        } else {
            if (v->placement == GR_PLACE_HOST) gr_sb_printf(&sb, "  %-20s %-24s host value read as a buffer: mirrored to the device\n", v->name, t);
            gr_sb_printf(&sb, "  %-20s %-24s placeholder of %zu bytes, copied in before a run/replay when set again\n", v->name, t,
                         p->input_bytes[i]);
            placeholder_bytes += p->input_bytes[i];
        }
    }
    gr_sb_printf(&sb, "bytes copied per replay: %zu (all inputs set again; an input not set again is not copied)\n", placeholder_bytes);
    for (int seg = 0; seg < p->segs.len; seg++) {
        const gr_segment *sg = &p->segs.data[seg];
        const gr_rt_segment *st = &p->seg_state[seg];
        int kernels = 0;
        for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++)
            kernels += p->steps.data[i].kind == GR_STEP_KERNEL || p->steps.data[i].kind == GR_STEP_LIBCALL;
        gr_sb_printf(&sb, "segment %d: steps %d..%d, %d kernels: ", seg, sg->first_step, sg->first_step + sg->n_steps - 1, kernels);
        if (!sg->graphable) gr_sb_printf(&sb, "NOT in a graph: %s\n", sg->break_reason ? sg->break_reason : "host work");
        else if (s->opt.mode == GR_MODE_EAGER) gr_sb_puts(&sb, "graphable (eager mode: not captured)\n");
        else if (st->state == GR_SEG_FALLBACK) gr_sb_printf(&sb, "NOT in a graph: %s\n", st->fallback_reason ? st->fallback_reason : "");
        else if (st->state == GR_SEG_CHOSE_EAGER)
            gr_sb_printf(&sb, "eager by choice: measured eager %.2f us <= graph %.2f us (mode auto, %s)\n",
                         GR_MIN(GR_MIN(st->eager_us[0], st->eager_us[1]), st->eager_us[2]),
                         GR_MIN(GR_MIN(st->graph_us[0], st->graph_us[1]), st->graph_us[2]), decision_source(st));
        else if (st->state == GR_SEG_CAPTURED && st->decided)
            gr_sb_printf(&sb, "in a graph (%d nodes, %zu bytes), selected by timing: graph %.2f us < eager %.2f us (mode auto, %s)\n",
                         st->n_nodes, st->graph_bytes, GR_MIN(GR_MIN(st->graph_us[0], st->graph_us[1]), st->graph_us[2]),
                         GR_MIN(GR_MIN(st->eager_us[0], st->eager_us[1]), st->eager_us[2]), decision_source(st));
        else if (st->decided && (st->state == GR_SEG_EAGER || st->state == GR_SEG_WARMUP))
            gr_sb_printf(&sb, "eager in its warm-up run, in a graph from the next, selected by timing: graph %.2f us < eager %.2f us "
                              "(mode auto, %s)\n",
                         GR_MIN(GR_MIN(st->graph_us[0], st->graph_us[1]), st->graph_us[2]),
                         GR_MIN(GR_MIN(st->eager_us[0], st->eager_us[1]), st->eager_us[2]), decision_source(st));
        else if (st->state == GR_SEG_CAPTURED)
            gr_sb_printf(&sb, "in a graph (captured, %d nodes, %zu bytes of graph memory)\n", st->n_nodes, st->graph_bytes);
        else gr_sb_printf(&sb, "in a graph (%s%s%d nodes)\n", seg_state_name(st->state), st->state == GR_SEG_CAPTURED ? ", " : ", ",
                          st->n_nodes);
        if (sg->graphable) gr_rt_update_explain(s, st, seg, &sb);
        if (sg->graphable) gr_rt_generic_explain(s, p, seg, &sb); /* generic.c */
        if (sg->graphable) gr_rt_autopol_explain(s, p, seg, &sb); /* autopol.c */
        if (sg->graphable && st->evictions)
            gr_sb_printf(&sb, "  its graph was evicted %ld times (graph memory budget) and captured again\n", st->evictions);
        if (sg->graphable && sg->break_reason) gr_sb_printf(&sb, "  starts %s\n", sg->break_reason);
        for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++) explain_step(&sb, p, i);
    }
    *out_text = gr_sb_take(&sb);
    return *out_text ? GR_OK : GR_ERR_NOMEM;
}

gr_status gr_graph_explain(gr_graph_t g, char **out_text) {
    if (!g || !out_text) return gr_error(GR_ERR_INVALID, "gr_graph_explain: NULL argument");
    *out_text = NULL;
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_sb_puts(&sb, "symbolic plan (no binding given: bind the dims, e.g. graft explain --dim NAME=VALUE, to compile and "
                    "explain one)\nsymbolic dims:\n");
    for (int k = 0; k < g->syms.len; k++) {
        const gr_ir_symbol *sym = &g->syms.data[k];
        if (sym->hi >= GR_DX_INF)
            gr_sb_printf(&sb, "  %-20s range %lld.. (%s)\n", sym->name, (long long)sym->lo,
                         sym->data_value >= 0 ? "data-dependent" : sym->declared ? "declared" : "default");
        else
            gr_sb_printf(&sb, "  %-20s range %lld..%lld (%s)\n", sym->name, (long long)sym->lo, (long long)sym->hi,
                         sym->data_value >= 0 ? "data-dependent" : sym->declared ? "declared" : "default");
        if (sym->data_value >= 0)
            gr_sb_printf(&sb, "    partition break: %s: output shape depends on tensor data; graft runs the graph up to its count, "
                              "reads the count on the host (one synchronisation per run) and plans the rest for it\n",
                         sym->origin ? sym->origin : sym->name);
    }
    if (!g->syms.len) gr_sb_puts(&sb, "  none: the graph has one shape\n");
    gr_sb_puts(&sb, "each binding: the dims evaluated, a plan compiled (weights shared, kernels generic: one compiled module "
                    "per kernel structure), memory planned per binding or once for the largest (--arena max)\n"
                    "graph (every value's shape as an expression; constants elided):\n");
    char *text = NULL;
    gr_status st = gr_gir_print(g, 16, GR_GIR_ELIDE, &text);
    if (st == GR_OK) gr_sb_puts(&sb, text);
    gr_strfree(text);
    if (st != GR_OK) {
        gr_sb_free(&sb);
        return st;
    }
    if (sb.failed) {
        gr_sb_free(&sb);
        return gr_nomem();
    }
    *out_text = gr_sb_take(&sb);
    return *out_text ? GR_OK : gr_nomem();
}
