/* runtime/shapes — shape policies of graph mode beyond one graph per binding (issue 11).
 *
 * update: one instantiated exec per segment position serves every binding. A new binding's
 * segment is captured as usual (a host-side graph, cheap) and applied to the session's exec of
 * that position with an exec update (cudaGraphExecUpdate: ~0.45 us per node on the H100
 * against ~6 us per node for an instantiation, design §Deployment), so graph memory does not
 * grow with the number of bindings. Each binding keeps its captured graph; a replay of a
 * binding other than the one applied last updates the exec from its graph first. Where the
 * driver refuses the update (a different topology: a library call that picked another
 * algorithm with more nodes, a dim of 1 that turned a copy into a view), the binding gets its
 * own exec (an instantiation, as policy exact), and explain says why.
 *
 * A segment whose kernel nodes are patched before replays (host scalars, a caller's device
 * buffer read in place) is not patched in a shared exec: a node patch on CUDA takes the launch
 * geometry of the graph the exec was instantiated from, another binding's after an update.
 * When such an argument changed, the binding's segment is recorded again (host work only)
 * and the exec updated from it (graphs.c, refresh_shared). */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

typedef struct {
    gr_dexec *exec;          /* the position's exec, owned here */
    const gr_dgraph *applied; /* the graph whose parameters the exec holds now */
    size_t bytes;            /* its graph memory as measured at instantiation */
    long updates;            /* updates applied (capture or replay) */
    char refused[192];       /* the last refused update's reason ("" if none) */
} shared_exec;

struct gr_rt_shapes {
    shared_exec *slots;
    int n_slots;
    /* pad: per symbol of s->graph, whether it is padded (proven), why not, and the real values
     * of the current run's binding (before rounding up) */
    int n_syms;
    bool *pad_ok;
    char **pad_why;
    int64_t *real;
    int *hidden;         /* per symbol: the graph input holding its real value (masks), or -1 */
    long padded_runs;
    int masks;           /* masks inserted (softmax, max, sum or contraction operands) */
};

/* ==== update ======================================================================================= */
static gr_status shapes_of(gr_session_t s) {
    if (!s->shapes) {
        s->shapes = gr_calloc(1, sizeof *s->shapes);
        if (!s->shapes) return GR_ERR_NOMEM;
    }
    return GR_OK;
}

static gr_status slot_of(gr_session_t s, int seg, shared_exec **out) {
    GR_TRY(shapes_of(s));
    struct gr_rt_shapes *sh = s->shapes;
    if (seg >= sh->n_slots) {
        int n = seg + 1 > 2 * sh->n_slots ? seg + 1 : 2 * sh->n_slots;
        shared_exec *grown = gr_calloc((size_t)n, sizeof *grown);
        if (!grown) return GR_ERR_NOMEM;
        if (sh->n_slots) memcpy(grown, sh->slots, sizeof *grown * (size_t)sh->n_slots);
        gr_free(sh->slots, sizeof *sh->slots * (size_t)sh->n_slots);
        sh->slots = grown;
        sh->n_slots = n;
    }
    *out = &sh->slots[seg];
    return GR_OK;
}

static gr_status own_exec(gr_session_t s, gr_rt_segment *st) {
    GR_TRY(gr_dev_graph_instantiate(s->dev, st->graph, &st->exec));
    s->graphs_live++; /* counted from here: release uncounts it */
    s->instantiations++;
    return GR_OK;
}

gr_status gr_rt_update_instantiate(gr_session_t s, gr_rt_plan *p, int seg, size_t expect_bytes) {
    gr_rt_segment *st = &p->seg_state[seg];
    if (!gr_dev_caps_get(s->dev).exec_update) return own_exec(s, st);
    /* auto: one exec per binding (no switch cost) while the graphs' measured memory fits the
     * budget with room left for the shared exec; beyond it, the position's shared exec (no
     * memory per binding) */
    if (s->opt.shape_policy == GR_SHAPES_AUTO && !s->autopol && (!s->graph_budget || s->graph_bytes + 2 * expect_bytes <= s->graph_budget))
        return own_exec(s, st);
    /* auto measured per segment (autopol.c): the shared exec only where update was chosen; while
     * the segment is measured, its own (exact's graph, timed) */
    if (s->autopol && gr_rt_autopol_policy(s, p, seg) != GR_SHAPES_UPDATE) return own_exec(s, st);
    shared_exec *u;
    GR_TRY(slot_of(s, seg, &u));
    if (!u->exec) {
        GR_TRY(gr_dev_graph_instantiate(s->dev, st->graph, &u->exec));
        s->graphs_live++;
        s->instantiations++;
        u->applied = st->graph;
        st->exec = u->exec;
        st->exec_shared = true;
        return GR_OK;
    }
    gr_status rc = gr_dev_exec_update(s->dev, u->exec, st->graph);
    if (rc == GR_ERR_NOMEM) return rc;
    if (rc != GR_OK) {
        /* the exec keeps the parameters it had: nothing was applied */
        snprintf(u->refused, sizeof u->refused, "%s", gr_last_error());
        gr_error_clear();
        s->exec_updates_refused++;
        if (s->opt.verbose) fprintf(stderr, "graft: segment %d: exec update refused, instantiating: %s\n", seg, u->refused);
        return own_exec(s, st);
    }
    u->applied = st->graph;
    u->updates++;
    s->exec_updates++;
    st->exec = u->exec;
    st->exec_shared = true;
    return GR_OK;
}

gr_status gr_rt_update_apply(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    if (!st->exec_shared) return GR_OK;
    shared_exec *u = &s->shapes->slots[seg];
    if (!st->graph) return gr_error(GR_ERR_INTERNAL, "segment %d: no graph to apply (an earlier re-capture failed)", seg);
    if (u->applied == st->graph) return GR_OK;
    /* the same topology was accepted at this binding's capture: a refusal now is an error */
    GR_TRY(gr_dev_exec_update(s->dev, u->exec, st->graph));
    u->applied = st->graph;
    u->updates++;
    s->exec_updates++;
    return GR_OK;
}

bool gr_rt_update_holds(gr_session_t s, const gr_rt_plan *p, int seg) {
    const gr_rt_segment *st = &p->seg_state[seg];
    /* (a tracked argument may change at the replay: refresh_shared records again and updates) */
    return !st->exec_shared || (s->shapes && seg < s->shapes->n_slots && st->graph && s->shapes->slots[seg].applied == st->graph &&
                                st->n_scalar_nodes == 0);
}

gr_status gr_rt_update_adopt(gr_session_t s, gr_rt_plan *p, int seg) {
    gr_rt_segment *st = &p->seg_state[seg];
    if (!st->exec || st->exec_shared) return GR_OK;
    shared_exec *u;
    GR_TRY(slot_of(s, seg, &u));
    if (u->exec) { /* the position has one: this binding's graph is applied to it on its next replay */
        gr_rt_segment_recapture(s, p, seg);
        return GR_OK;
    }
    /* the exec and its measured memory become the position's (counted once, as before) */
    u->exec = st->exec;
    u->applied = st->graph;
    u->bytes = st->graph_bytes;
    st->exec_shared = true;
    return GR_OK;
}

void gr_rt_update_release(gr_session_t s, int seg) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || seg >= sh->n_slots || !sh->slots[seg].exec) return;
    for (const gr_rt_plan *q = s->plans; q; q = q->next)
        if (seg < q->segs.len && q->seg_state[seg].exec_shared) return;
    shared_exec *u = &sh->slots[seg];
    gr_dev_exec_destroy(s->dev, u->exec);
    s->graph_bytes -= GR_MIN(u->bytes, s->graph_bytes);
    s->graphs_live--;
    u->exec = NULL;
    u->applied = NULL;
    u->bytes = 0;
}

void gr_rt_update_add_bytes(gr_session_t s, int seg, size_t bytes) {
    if (s->shapes && seg < s->shapes->n_slots) s->shapes->slots[seg].bytes += bytes;
}

void gr_rt_update_forget(gr_session_t s, const gr_rt_segment *st) {
    if (!s->shapes || !st->graph) return;
    for (int k = 0; k < s->shapes->n_slots; k++)
        if (s->shapes->slots[k].applied == st->graph) s->shapes->slots[k].applied = NULL;
}

/* explain: what the update (or auto) policy did at segment position seg */
void gr_rt_update_explain(gr_session_t s, const gr_rt_segment *st, int seg, gr_strbuf *sb) {
    int policy = s->opt.shape_policy;
    if (policy != GR_SHAPES_UPDATE && policy != GR_SHAPES_AUTO) return;
    const shared_exec *u = s->shapes && seg < s->shapes->n_slots ? &s->shapes->slots[seg] : NULL;
    if (st->exec_shared && u)
        gr_sb_printf(sb, "  shape policy %s: the position's one exec (%zu bytes), %ld exec updates so far%s\n", gr_shape_policy_name(policy),
                     u->bytes, u->updates, u->applied == st->graph ? ", this binding's parameters applied" : "");
    else if (st->exec && u && u->refused[0])
        gr_sb_printf(sb, "  shape policy %s: own exec, the update was refused: %s\n", gr_shape_policy_name(policy), u->refused);
    else if (st->exec && policy == GR_SHAPES_AUTO && !s->autopol)
        gr_sb_puts(sb, "  shape policy auto: own exec (the graphs fit the graph memory budget)\n");
}

void gr_rt_shapes_free(gr_session_t s) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh) return;
    for (int k = 0; k < sh->n_slots; k++) {
        if (!sh->slots[k].exec || !s->dev) continue;
        gr_dev_exec_destroy(s->dev, sh->slots[k].exec);
        s->graph_bytes -= GR_MIN(sh->slots[k].bytes, s->graph_bytes);
        s->graphs_live--;
    }
    gr_free(sh->slots, sizeof *sh->slots * (size_t)sh->n_slots);
    for (int k = 0; sh->pad_why && k < sh->n_syms; k++) gr_strfree(sh->pad_why[k]);
    gr_free(sh->pad_why, sizeof(char *) * (size_t)sh->n_syms);
    gr_free(sh->pad_ok, sizeof(bool) * (size_t)sh->n_syms);
    gr_free(sh->real, sizeof(int64_t) * (size_t)sh->n_syms);
    gr_free(sh->hidden, sizeof(int) * (size_t)sh->n_syms);
    gr_free(sh, sizeof *sh);
    s->shapes = NULL;
}

/* ==== ahead-of-time capture (gr_session_capture_range) ================================================ */
/* generic's bucket of a symbol's value (generic.c: powers of two up to the declared maximum) */
static int64_t generic_bucket(int64_t v, int64_t hi) {
    if (v < 1) return v;
    int64_t b = 1;
    while (b < v && b < hi) b *= 2;
    return b > hi ? hi : b;
}

/* The plan whose graph runs segment k of p: rep's where the segment runs through its bucket's
 * (generic, or auto's generic segments), else p's. */
static gr_status runs_through(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int k, const gr_rt_plan **q) {
    *q = p;
    if (!rep || (s->opt.shape_policy != GR_SHAPES_GENERIC && gr_rt_autopol_policy(s, p, k) != GR_SHAPES_GENERIC)) return GR_OK;
    bool ok;
    const char *why;
    GR_TRY(gr_rt_generic_verdict(s, p, rep, k, &ok, &why));
    if (ok) *q = rep;
    return GR_OK;
}

static gr_status settled(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, bool *out) {
    *out = false;
    for (int k = 0; k < p->segs.len; k++) {
        if (!p->segs.data[k].graphable) continue;
        if (s->autopol && gr_rt_autopol_policy(s, p, k) < 0) return GR_OK; /* not measured yet */
        const gr_rt_plan *q;
        GR_TRY(runs_through(s, p, rep, k, &q));
        const gr_rt_segment *st = &q->seg_state[k];
        if (st->state == GR_SEG_FALLBACK || st->state == GR_SEG_CHOSE_EAGER) continue;
        if (st->state == GR_SEG_CAPTURED && (s->opt.mode != GR_MODE_AUTO || st->decided)) continue;
        return GR_OK;
    }
    *out = true;
    return GR_OK;
}

/* Warms up and captures every graphable segment of p (on zeroed placeholders), through rep's
 * graph where the segment runs through its bucket's (generic; auto's generic segments). */
static gr_status prepare_binding(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep) {
    gr_device *d = s->dev;
    GR_TRY(gr_rt_generic_own(s, p)); /* generic: a bucket's table may hold a smaller binding's slots */
    for (int i = 0; i < p->g->inputs.len; i++) {
        if (p->input_host_read[i] && !s->inputs[i].data)
            return gr_error(GR_ERR_INVALID, "capture range: host input '%s' is read on the host: set it before capturing ahead",
                            p->g->values.data[p->g->inputs.data[i]].name);
        if (p->mem.values[p->g->inputs.data[i]].kind != GR_STORE_INPUT || !p->input_bytes[i]) continue;
        GR_TRY(gr_rt_input_placeholder(s, p, i));
        /* zeros: valid indices for gathers (token ids), finite for every op */
        GR_TRY(gr_dev_memset(d, s->stream, p->input_dev[i], 0, p->input_bytes[i]));
        p->input_version[i] = 0; /* the next run copies its input */
        if (s->generic_input_owner) s->generic_input_owner[i] = 0; /* generic: a shared placeholder holds zeros now */
    }
    /* warm-up, capture (+ replay), and mode auto's timed runs */
    bool done = false;
    gr_status st = GR_OK;
    for (int round = 0; round < 3 + 2 * GR_SCG_SAMPLES && st == GR_OK && (st = settled(s, p, rep, &done)) == GR_OK && !done; round++) {
        for (int seg = 0; seg < p->segs.len && st == GR_OK; seg++) st = gr_rt_run_segment(s, p, rep, seg); /* autopol.c */
        if (st == GR_OK) st = gr_rt_autopol_decide(s, p);
    }
    if (st != GR_OK) {
        gr_dev_stream_sync(d, s->stream);
        return st;
    }
    return gr_dev_stream_sync(d, s->stream);
}

gr_status gr_session_capture_range(gr_session_t s, const char *dim, int64_t lo, int64_t hi, int progress, gr_capture_report *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!s || !dim) return gr_error(GR_ERR_INVALID, "gr_session_capture_range: NULL session or dim");
    if (s->opt.mode == GR_MODE_EAGER)
        return gr_error(GR_ERR_INVALID, "capture range: the session is in eager mode (graphs are captured in graph and auto modes)");
    if (s->pending) GR_TRY(gr_session_wait(s));
    GR_TRY(gr_rt_pad_prepare(s)); /* the masks' real-length inputs (pad) */
    const gr_graph *g = s->graph;
    int n = g->syms.len, k = -1;
    for (int j = 0; j < n && k < 0; j++)
        if (!strcmp(g->syms.data[j].name, dim)) k = j;
    if (k < 0) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        for (int j = 0; j < n; j++) gr_sb_printf(&sb, "%s'%s'", j ? ", " : "", g->syms.data[j].name);
        char shown[64];
        gr_escape_text(shown, sizeof shown, dim, false);
        gr_status st = gr_error(GR_ERR_NOT_FOUND, "capture range: no symbolic dim '%s' (the model's: %s)", shown,
                                sb.data ? sb.data : "none");
        gr_sb_free(&sb);
        return st;
    }
    const gr_ir_symbol *sym = &g->syms.data[k];
    if (lo > hi || lo < sym->lo || hi > sym->hi) {
        char range[64];
        if (sym->hi >= GR_DX_INF) snprintf(range, sizeof range, ">= %lld", (long long)sym->lo);
        else snprintf(range, sizeof range, "%lld..%lld", (long long)sym->lo, (long long)sym->hi);
        return gr_error(GR_ERR_SHAPE, "capture range: %s=%lld:%lld is not a range inside the dim's range (%s)", sym->name, (long long)lo,
                        (long long)hi, range);
    }
    int64_t *syms = gr_malloc(sizeof(int64_t) * (size_t)n);
    if (!syms) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    for (int j = 0; j < n && st == GR_OK; j++) {
        if (j == k) continue;
        if (s->current) syms[j] = s->current->sym_values[j];
        else if (g->syms.data[j].declared && g->syms.data[j].lo == g->syms.data[j].hi) syms[j] = g->syms.data[j].lo;
        else
            st = gr_error(GR_ERR_INVALID, "capture range over '%s': the model's dim '%s' has no value yet  (run once first, or declare its range as one value)", sym->name,
                          g->syms.data[j].name);
    }
    double t0 = gr_now_us(), capture_us = 0, compile_us = 0;
    long captures0 = s->total_captures, inst0 = s->instantiations, upd0 = s->exec_updates;
    double inst_us0 = s->instantiate_us;
    int done = 0;
    long total = (long)(hi - lo + 1), step = total / 10 > 0 ? total / 10 : 1;
    /* largest first: the first binding's graph and arena are the largest, the others fit in what it took */
    for (int64_t v = hi; v >= lo && st == GR_OK; v--) {
        syms[k] = v;
        gr_rt_pad_round(s, syms, false); /* the capture sizes (policies pad, auto) */
        /* generic: only the buckets' graphs are captured (a binding runs its bucket's); a binding
         * whose segment is refused captures its own on first use */
        if (s->opt.shape_policy == GR_SHAPES_GENERIC)
            for (int j = 0; j < n; j++) syms[j] = generic_bucket(syms[j], g->syms.data[j].hi);
        gr_rt_plan *p = NULL, *rep = NULL;
        bool known = false;
        for (gr_rt_plan *q = s->plans; q && !known; q = q->next) known = !memcmp(q->sym_values, syms, sizeof(int64_t) * (size_t)n);
        st = gr_rt_generic_select(s, syms, &p, &rep); /* auto's generic segments run through rep */
        if (st != GR_OK) break;
        if (!known) compile_us += p->compile_us;
        double c0 = p->capture_us + (rep ? rep->capture_us : 0);
        st = prepare_binding(s, p, rep);
        capture_us += p->capture_us + (rep ? rep->capture_us : 0) - c0;
        done++;
        if (progress && (done % step == 0 || v == lo))
            fprintf(stderr, "graft: capturing %s=%lld..%lld (largest first): %d/%ld bindings, %.2f s\n", sym->name, (long long)hi,
                    (long long)lo, done, total, (gr_now_us() - t0) / 1e6);
    }
    gr_free(syms, sizeof(int64_t) * (size_t)n);
    /* these runs' outputs are nobody's */
    s->generation++;
    s->has_run = false;
    if (st != GR_OK) return gr_error_prefix(st, "capture range %s=%lld:%lld", sym->name, (long long)lo, (long long)hi);
    if (out) {
        out->bindings = done;
        out->total_ms = (gr_now_us() - t0) / 1e3;
        out->compile_ms = compile_us / 1e3;
        out->capture_ms = capture_us / 1e3;
        out->captures = s->total_captures - captures0;
        out->instantiations = s->instantiations - inst0;
        out->exec_updates = s->exec_updates - upd0;
        out->instantiate_ms = (s->instantiate_us - inst_us0) / 1e3;
    }
    return GR_OK;
}

/* ==== pad ============================================================================================== */
/* Capture sizes (vLLM's list): 1, 2, 4, 8, then multiples of 8 up to 128 and of 16 beyond, the
 * symbol's declared maximum last. */
static int64_t capture_size(int64_t v, int64_t hi) {
    int64_t c = v <= 1 ? 1 : v <= 2 ? 2 : v <= 4 ? 4 : v <= 8 ? 8 : v <= 128 ? (v + 7) / 8 * 8 : (v + 15) / 16 * 16;
    return c > hi ? hi : c < v ? v : c;
}

/* ---- masks: where(position < real, x, fill) before a reduction or contraction over k ---- */
#define PAD_MAX_SITES 256

static gr_status add_node1(gr_graph *g, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, int *out_value) {
    int node;
    GR_TRY(gr_ir_add_node(g, op, NULL, n_in, in, 1, NULL, n_attr, attrs, &node));
    *out_value = g->nodes.data[node].out[0];
    return GR_OK;
}

/* Masks operand `site->slot` of node site->node along its padded axis: positions at or past the
 * real value of symbol k (graph input `len`) become site->fill. New nodes are appended; *known
 * gets the mask's fill. */
static gr_status insert_mask(gr_graph *g, int k, int len, const gr_pad_site *site, uint8_t **known, int *known_len) {
    int x = g->nodes.data[site->node].in[site->slot];
    /* copied: adding nodes moves the value table */
    gr_dtype dtype = g->values.data[x].dtype;
    int rank = g->values.data[x].ndim;
    if (dtype != GR_F32 && dtype != GR_F64)
        return gr_error(GR_ERR_UNSUPPORTED, "masking a %s operand is not supported (f32 and f64 are)", gr_dtype_name(dtype));
    gr_dim sym;
    GR_TRY(gr_dx_symbol(g, g->syms.data[k].name, &sym));
    gr_ir_attr range_attrs[4] = {
        {.name = "start", .kind = GR_IR_ATTR_FLOAT, .f = 0},
        {.name = "limit", .kind = GR_IR_ATTR_FLOAT, .sym = true, .expr = sym.expr},
        {.name = "delta", .kind = GR_IR_ATTR_FLOAT, .f = 1},
        {.name = "dtype", .kind = GR_IR_ATTR_INT, .i = GR_I64},
    };
    int iota, pos, mask, fill, masked;
    GR_TRY(add_node1(g, GR_OP_RANGE, 0, NULL, 4, range_attrs, &iota));
    pos = iota;
    if (rank > 1) {
        int64_t axes[GR_MAX_DIMS];
        int n = 0;
        for (int d = 0; d < rank; d++)
            if (d != site->axis) axes[n++] = d;
        gr_ir_attr un = {.name = "axes", .kind = GR_IR_ATTR_INTS, .ints = axes, .n = n};
        GR_TRY(add_node1(g, GR_OP_UNSQUEEZE, 1, &iota, 1, &un, &pos));
    }
    int less_in[2] = {pos, len};
    GR_TRY(add_node1(g, GR_OP_LESS, 2, less_in, 0, NULL, &mask));
    union {
        float f;
        double d;
    } c;
    bool inf = site->fill == GR_PAD_NEG_INF;
    if (dtype == GR_F32) c.f = inf ? -__builtin_inff() : 0.0f;
    else c.d = inf ? -__builtin_inf() : 0.0;
    GR_TRY(gr_ir_add_const(g, NULL, dtype, 0, NULL, &c, &fill));
    int where_in[3] = {mask, x, fill};
    GR_TRY(add_node1(g, GR_OP_WHERE, 3, where_in, 0, NULL, &masked));
    g->nodes.data[site->node].in[site->slot] = masked;
    if (g->values.len > *known_len) {
        uint8_t *grown = gr_realloc(*known, (size_t)*known_len, (size_t)g->values.len);
        if (!grown) return GR_ERR_NOMEM;
        memset(grown + *known_len, 0, (size_t)(g->values.len - *known_len));
        *known = grown;
        *known_len = g->values.len;
    }
    (*known)[masked] = (uint8_t)site->fill;
    return GR_OK;
}

/* Inserts the masks of sites[0..n) for symbol k (a hidden host input holds its real value),
 * puts each mask's nodes before its consumer, types them, and proves padding again with the
 * masks known. The graph keeps the masks whatever the proof says: with the real value equal
 * to the bound one (k not padded) they select everything. */
static gr_status mask_and_prove(gr_session_t s, int k, const gr_pad_site *sites, int n, bool *ok, char *why, size_t why_size) {
    gr_graph *g = s->graph;
    struct gr_rt_shapes *sh = s->shapes;
    int n_nodes0 = g->nodes.len, n_inputs0 = g->inputs.len;
    char name[128];
    snprintf(name, sizeof name, "__graft_valid_%.100s", g->syms.data[k].name);
    int len;
    GR_TRY(gr_ir_add_input(g, name, GR_I64, 0, NULL, &len));
    g->values.data[len].placement = GR_PLACE_HOST;
    sh->hidden[k] = g->inputs.len - 1;
    /* the session's table of bound inputs grows with the graph's */
    gr_rt_input *grown = gr_realloc(s->inputs, sizeof(gr_rt_input) * (size_t)n_inputs0, sizeof(gr_rt_input) * (size_t)g->inputs.len);
    if (!grown) {
        /* keep the table and the graph consistent for destruction: drop the input again */
        g->inputs.len = n_inputs0;
        sh->hidden[k] = -1;
        return GR_ERR_NOMEM;
    }
    memset(&grown[n_inputs0], 0, sizeof(gr_rt_input) * (size_t)(g->inputs.len - n_inputs0));
    s->inputs = grown;
    int known_len = g->values.len;
    uint8_t *known = gr_calloc((size_t)known_len, 1);
    int *consumer = NULL;
    gr_status st = known ? GR_OK : GR_ERR_NOMEM;
    for (int i = 0; i < n && st == GR_OK; i++) st = insert_mask(g, k, len, &sites[i], &known, &known_len);
    /* order: each mask's nodes right before their consumer */
    int total = g->nodes.len;
    int *order = st == GR_OK ? gr_malloc(sizeof(int) * (size_t)total) : NULL;
    consumer = st == GR_OK ? gr_malloc(sizeof(int) * (size_t)total) : NULL;
    if (st == GR_OK && (!order || !consumer)) st = GR_ERR_NOMEM;
    if (st == GR_OK) {
        /* nodes appended by insert_mask belong to sites in order, 4 or 5 nodes each */
        int next = n_nodes0;
        for (int i = 0; i < n; i++) {
            int per = g->values.data[g->nodes.data[sites[i].node].in[sites[i].slot]].producer - next + 1;
            for (int j = 0; j < per; j++) consumer[next + j] = sites[i].node;
            next += per;
        }
        int m = 0;
        for (int node = 0; node < n_nodes0; node++) {
            for (int j = n_nodes0; j < total; j++)
                if (consumer[j] == node) order[m++] = j;
            order[m++] = node;
        }
        st = m == total ? gr_ir_reorder_nodes(g, order) : gr_error(GR_ERR_INTERNAL, "pad masks: %d of %d nodes ordered", m, total);
    }
    if (st == GR_OK) st = gr_ir_infer_shapes(g);
    if (st == GR_OK) st = gr_pass_pad_proof(g, k, known, NULL, 0, NULL, ok, why, why_size);
    if (st == GR_OK && *ok) sh->masks += n;
    gr_free(order, sizeof(int) * (size_t)total);
    gr_free(consumer, sizeof(int) * (size_t)total);
    gr_free(known, (size_t)known_len);
    return st;
}

gr_status gr_rt_pad_init(gr_session_t s) {
    GR_TRY(shapes_of(s));
    struct gr_rt_shapes *sh = s->shapes;
    gr_graph *g = s->graph;
    int n = g->syms.len;
    sh->pad_ok = gr_calloc((size_t)(n ? n : 1), sizeof(bool));
    sh->pad_why = gr_calloc((size_t)(n ? n : 1), sizeof(char *));
    sh->real = gr_calloc((size_t)(n ? n : 1), sizeof(int64_t));
    sh->hidden = gr_calloc((size_t)(n ? n : 1), sizeof(int));
    if (!sh->pad_ok || !sh->pad_why || !sh->real || !sh->hidden) {
        gr_free(sh->pad_ok, sizeof(bool) * (size_t)(n ? n : 1));
        gr_free(sh->pad_why, sizeof(char *) * (size_t)(n ? n : 1));
        gr_free(sh->real, sizeof(int64_t) * (size_t)(n ? n : 1));
        gr_free(sh->hidden, sizeof(int) * (size_t)(n ? n : 1));
        sh->pad_ok = NULL, sh->pad_why = NULL, sh->real = NULL, sh->hidden = NULL;
        return GR_ERR_NOMEM;
    }
    sh->n_syms = n ? n : 1;
    for (int k = 0; k < n; k++) sh->hidden[k] = -1;
    gr_pad_site *sites = gr_malloc(sizeof(gr_pad_site) * PAD_MAX_SITES);
    if (!sites) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    for (int k = 0; k < n && st == GR_OK; k++) {
        const gr_ir_symbol *sym = &g->syms.data[k];
        char why[512] = "";
        int n_sites = 0;
        if (!sym->declared || sym->hi >= GR_DX_INF)
            snprintf(why, sizeof why, "'%s' has no declared upper bound to pad up to (declare its range: --dim-range %s=LO:HI)",
                     sym->name, sym->name);
        else st = gr_pass_pad_proof(g, k, NULL, sites, PAD_MAX_SITES, &n_sites, &sh->pad_ok[k], why, sizeof why);
        if (st == GR_OK && sh->pad_ok[k] && n_sites) {
            /* provable once masked: insert the masks and prove again */
            st = mask_and_prove(s, k, sites, n_sites, &sh->pad_ok[k], why, sizeof why);
            if (st == GR_ERR_UNSUPPORTED) { /* a dtype the masks do not cover: not padded */
                snprintf(why, sizeof why, "%s", gr_last_error());
                gr_error_clear();
                sh->pad_ok[k] = false;
                st = GR_OK;
            }
        }
        if (st != GR_OK) break;
        if (!sh->pad_ok[k] && !(sh->pad_why[k] = gr_strdup(why))) st = GR_ERR_NOMEM;
        if (st == GR_OK && s->opt.verbose)
            fprintf(stderr, "graft: shape policy pad: '%s' %s%s\n", sym->name, sh->pad_ok[k] ? "padded to capture sizes" : "not padded: ",
                    sh->pad_ok[k] ? "" : why);
    }
    gr_free(sites, sizeof(gr_pad_site) * PAD_MAX_SITES);
    return st;
}

/* Binds the hidden inputs that carry real values to the masks (before the inputs are resolved). */
gr_status gr_rt_pad_prepare(gr_session_t s) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || !sh->hidden) return GR_OK;
    for (int k = 0; k < s->graph->syms.len; k++) {
        int h = sh->hidden[k];
        if (h < 0 || s->inputs[h].data) continue;
        gr_rt_input *in = &s->inputs[h];
        gr_mem_kind kind = gr_dev_caps_get(s->dev).pinned_memory ? GR_MEM_HOST_PINNED : GR_MEM_HOST;
        GR_TRY(gr_dev_alloc(s->dev, kind, sizeof(int64_t), &in->data));
        memset(in->data, 0, sizeof(int64_t));
        in->set = true;
        in->dtype = GR_I64;
        in->ndim = 0;
        in->nbytes = in->cap = sizeof(int64_t);
        in->version = ++s->input_versions;
    }
    return GR_OK;
}

void gr_rt_pad_round(gr_session_t s, int64_t *syms, bool count) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || !sh->pad_ok) return;
    bool padded = false;
    for (int k = 0; k < s->graph->syms.len; k++) {
        sh->real[k] = syms[k];
        if (sh->pad_ok[k] && syms[k] >= 0) syms[k] = capture_size(syms[k], s->graph->syms.data[k].hi);
        padded |= syms[k] != sh->real[k];
        int h = sh->hidden[k];
        if (h >= 0 && s->inputs[h].data && *(int64_t *)s->inputs[h].data != sh->real[k]) {
            /* the masks' real length: read by value at launch (a host scalar: graph nodes patched) */
            *(int64_t *)s->inputs[h].data = sh->real[k];
            s->inputs[h].version = ++s->input_versions;
        }
    }
    if (count && padded) sh->padded_runs++;
}

/* gr_rt_pad_round without its effects, for the host's wait decision (session.c): rounds syms;
 * false when the masks' real-length scalar would change (a copy of the last value may still be
 * pending on the device, so the run must wait before it is written). */
bool gr_rt_pad_peek(gr_session_t s, int64_t *syms) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || !sh->pad_ok) return true;
    for (int k = 0; k < s->graph->syms.len; k++) {
        int64_t real = syms[k];
        if (sh->pad_ok[k] && syms[k] >= 0) syms[k] = capture_size(syms[k], s->graph->syms.data[k].hi);
        int h = sh->hidden[k];
        if (h >= 0 && (!s->inputs[h].data || *(int64_t *)s->inputs[h].data != real)) return false;
    }
    return true;
}

/* The padded axis of value v of s->graph in the current run: axis, real and padded extent;
 * -1 when v is not padded now. */
static int padded_axis(gr_session_t s, const gr_rt_plan *p, int v, int64_t *real, int64_t *padded) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || !sh->pad_ok) return -1;
    const gr_ir_value *val = &s->graph->values.data[v];
    for (int d = 0; d < val->ndim; d++) {
        int k = gr_dx_is_sym(val->dims[d]) ? gr_dx_as_symbol(s->graph, val->dims[d]) : -1;
        if (k < 0 || !sh->pad_ok[k] || sh->real[k] == p->sym_values[k]) continue;
        *real = sh->real[k];
        *padded = p->sym_values[k];
        return d;
    }
    return -1;
}

/* outer count and the bytes of one position along axis a of a value of plan p */
static void split_at(const gr_ir_value *v, int a, int64_t *outer, size_t *inner_bytes) {
    int64_t o = 1, in = 1;
    for (int d = 0; d < a; d++) o *= v->dims[d].size;
    for (int d = a + 1; d < v->ndim; d++) in *= v->dims[d].size;
    *outer = o;
    *inner_bytes = (size_t)in * gr_dtype_size(v->dtype);
}

void gr_rt_pad_plan_built(gr_session_t s, gr_rt_plan *p) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || !sh->pad_ok) return;
    /* a padded binding's placeholder is larger than the caller's buffer: always copied */
    for (int i = 0; i < s->graph->inputs.len; i++) {
        const gr_ir_value *val = &s->graph->values.data[s->graph->inputs.data[i]];
        for (int d = 0; d < val->ndim; d++) {
            int k = gr_dx_is_sym(val->dims[d]) ? gr_dx_as_symbol(s->graph, val->dims[d]) : -1;
            if (k >= 0 && sh->pad_ok[k]) p->input_in_place[i] = false;
        }
    }
}

gr_status gr_rt_pad_input(gr_session_t s, gr_rt_plan *p, int i, const void *src, gr_copy_kind kind, bool *done) {
    *done = false;
    int64_t real, padded;
    int a = padded_axis(s, p, s->graph->inputs.data[i], &real, &padded);
    if (a < 0) return GR_OK;
    int64_t outer;
    size_t inner;
    split_at(&p->g->values.data[p->g->inputs.data[i]], a, &outer, &inner);
    GR_TRY(gr_rt_input_placeholder(s, p, i));
    /* zeros past the real extent: what the proof (passes/pad.c) assumed of every input */
    GR_TRY(gr_dev_memset(s->dev, s->stream, p->input_dev[i], 0, p->input_bytes[i]));
    size_t r = (size_t)real * inner, c = (size_t)padded * inner;
    for (int64_t o = 0; o < outer && r; o++)
        GR_TRY(gr_dev_memcpy(s->dev, s->stream, (char *)p->input_dev[i] + (size_t)o * c, (const char *)src + (size_t)o * r, r, kind));
    s->stats.copies += outer;
    s->stats.bytes_copied += (size_t)outer * r;
    *done = true;
    return GR_OK;
}

bool gr_rt_pad_output(gr_session_t s, gr_rt_plan *p, int o, int64_t *dims, int *axis, int64_t *outer, size_t *inner_bytes,
                      int64_t *padded) {
    int64_t real;
    int a = padded_axis(s, p, s->graph->outputs.data[o], &real, padded);
    if (a < 0) return false;
    const gr_ir_value *v = &p->g->values.data[p->g->outputs.data[o]];
    for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d].size;
    dims[a] = real;
    *axis = a;
    split_at(v, a, outer, inner_bytes);
    return true;
}

bool gr_rt_pad_any(gr_session_t s) {
    struct gr_rt_shapes *sh = s->shapes;
    for (int k = 0; sh && sh->pad_ok && k < s->graph->syms.len; k++)
        if (sh->pad_ok[k]) return true;
    return false;
}

long gr_rt_pad_runs(gr_session_t s) { return s->shapes ? s->shapes->padded_runs : 0; }

void gr_rt_pad_explain(gr_session_t s, gr_strbuf *sb) {
    struct gr_rt_shapes *sh = s->shapes;
    if (!sh || !sh->pad_ok) return;
    if (s->autopol) gr_sb_puts(sb, "  pad, a whole binding's: ");
    gr_sb_printf(sb, "%s%s (bindings rounded up to capture sizes 1, 2, 4, 8, multiples of 8 to 128, of 16 beyond, "
                   "up to the declared maximum; inputs zero-filled, outputs cut back%s)\n",
                 s->autopol ? "" : "shape policy: ", s->autopol ? "where proven" : gr_shape_policy_name(s->opt.shape_policy),
                 s->opt.shape_policy == GR_SHAPES_AUTO && !s->autopol ? "; then one exec per binding within graph_memory_mb, beyond it exec updates"
                 : "");
    for (int k = 0; k < s->graph->syms.len; k++) {
        if (sh->pad_ok[k])
            gr_sb_printf(sb, "  '%s' padded: no reduction, contraction or gather crosses it unmasked (this run: %lld as %lld)\n",
                         s->graph->syms.data[k].name, (long long)sh->real[k],
                         (long long)(s->current ? s->current->sym_values[k] : sh->real[k]));
        else
            gr_sb_printf(sb, "  '%s' NOT padded (one graph per value, as policy exact): %s\n", s->graph->syms.data[k].name,
                         sh->pad_why[k] ? sh->pad_why[k] : "");
    }
    if (sh->masks) gr_sb_printf(sb, "  %d masks inserted (softmax, max or sum over a padded axis: its identity past the real length; "
                                   "an operand of a contraction over it: zeros)\n", sh->masks);
    gr_sb_printf(sb, "  %ld runs padded so far", sh->padded_runs);
    if (s->opt.shape_policy == GR_SHAPES_AUTO)
        gr_sb_printf(sb, "; %ld exec updates, %ld refused and instantiated instead", s->exec_updates, s->exec_updates_refused);
    gr_sb_puts(sb, "\n");
}
