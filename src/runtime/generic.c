/* runtime/generic — shape policy generic (issue 11): one captured graph serves a bucket of
 * bindings of the symbolic dims.
 *
 * Buckets: each symbol's value rounded up to a power of two, capped at its declared maximum
 * (seq 1..128: 1, 2, 4, ..., 128; eight graphs per segment for the whole range). The bucket's
 * binding has an ordinary plan (the "bucket plan"); every plan of the session sits at the largest
 * binding's arena offsets (arena max, plan.c adopt_max_offsets) and shares its input
 * placeholders, so two plans of one bucket pass the same buffer addresses to their steps.
 *
 * Kernels: every plan's kernel steps read their slots (extents, strides, offsets, constants)
 * from the plan's device table (GR_KPREP_SLOT_TABLE, one literal argument more per step).
 * A binding b run through its bucket plan R: the slot values of b's plan are copied into R's
 * table (one host-to-device copy per segment, only when R's table holds another binding's),
 * then R's segment runs through the graph manager (warm-up, capture, replay). Grids are R's:
 * generated kernels are grid-stride loops bounded by the slots, so they cover b's points and
 * stop there.
 *
 * Proof, per segment (cached per plan): the two plans have the same steps (kinds, kernel
 * structures), so the same values live at the same times at the same offsets; in the segment,
 * every step's launch arguments are equal (buffer addresses, scalars) except the slot table,
 * and a library call differs at most in a matmul's row count m (rows are independent: R's
 * extra rows read and write only R-sized regions of values live then, never b's rows) or in a
 * fused attention's lengths and strides, no larger than R's: the attention reads them from its
 * length record in the table (kir.h lens_arg), its grid and mask tile table are R's, the blocks
 * past b's query rows exit at once, and a mask group reuses a tile table for b only where it
 * does for R. Anything else (an attention that differs otherwise, a contraction, a batch
 * stride or leading dim that changes, an argument into the plan's own folded constants, a
 * kernel without a table) refuses the segment, naming the step and node: b runs it with its
 * own plan and graph (exact). */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

typedef struct gr_rt_gplan {
    int n_segs;
    long rep_serial;   /* the bucket plan the verdicts were made against (0: none yet) */
    signed char *ok;   /* per segment: 1 proven, 0 refused, -1 not decided */
    char **why;        /* per segment: the refusal */
    long *holder;      /* per segment: serial of the plan whose slots this plan's table holds there */
    long const_holder; /* serial of the plan whose folded constants this plan's constant memory holds */
} gr_rt_gplan;

static bool generic_on(gr_session_t s) {
    return s->generic_infra && s->opt.mode != GR_MODE_EAGER && s->graph->syms.len > 0;
}

/* ==== tables ======================================================================================= */
/* A fused attention whose lengths the table holds (kir.h lens_arg): one that takes the record. */
static bool attention_step(const gr_step *st) {
    return st->kind == GR_STEP_LIBCALL && st->call.kind == GR_LIB_ATTENTION &&
           st->n_args == gr_libcall_nargs(&st->call);
}

/* Table entries of step st: a kernel's slots and point count, an attention's length record. */
static int step_slots(const gr_step *st) {
    return st->kind == GR_STEP_KERNEL ? gr_kernel_slot_count(st->kernel) + 1 : GR_ATTN_LENS;
}

gr_status gr_rt_generic_plan_tables(gr_session_t s, gr_rt_plan *p, bool *table) {
    if (!generic_on(s)) return GR_OK;
    /* a caller's device buffer is copied into the (shared) placeholder, never read in place: the
     * bucket's graph reads the placeholder's address whichever binding's buffer was bound */
    for (int i = 0; i < p->g->inputs.len; i++) p->input_in_place[i] = false;
    if (!p->steps.len) return GR_OK;
    p->slot_off = gr_malloc(sizeof(int) * (size_t)p->steps.len);
    if (!p->slot_off) return GR_ERR_NOMEM;
    size_t total = 0;
    for (int i = 0; i < p->steps.len; i++) {
        const gr_step *st = &p->steps.data[i];
        p->slot_off[i] = -1;
        /* a kernel using every argument keeps its by-value slots (refused for generic) */
        bool kernel = st->kind == GR_STEP_KERNEL && st->n_args < GR_KMAX_PARAMS && st->n_args == st->kernel->n_params;
        if (!kernel && !attention_step(st)) continue;
        if (total > (size_t)1 << 28) return gr_error(GR_ERR_INVALID, "generic: slot table too large");
        p->slot_off[i] = (int)total;
        /* the slots, then the point count (device.h GR_KPREP_SLOT_TABLE); an attention's record */
        total += (size_t)step_slots(st);
    }
    if (!total) return GR_OK;
    size_t bytes = total * sizeof(int64_t); /* total <= 2^28 + GR_KMAX_SLOTS-ish: no overflow */
    p->slot_host = gr_calloc(total, sizeof(int64_t));
    if (!p->slot_host) return GR_ERR_NOMEM;
    p->slot_count = total;
    GR_TRY(gr_dev_alloc(s->dev, GR_MEM_DEVICE, bytes, &p->slot_table));
    for (int i = 0; i < p->steps.len; i++) {
        if (p->slot_off[i] < 0) continue;
        gr_step *st = &p->steps.data[i];
        if (st->kind == GR_STEP_LIBCALL) { /* the attention reads its lengths from the record */
            gr_libcall_attention_lens(&st->call, p->slot_host + p->slot_off[i]);
            if (!st->call.lens_arg) {
                gr_step_arg *a = &st->args[st->n_args++];
                memset(a, 0, sizeof *a);
                a->kind = GR_ARG_LITERAL;
                st->call.lens_arg = true;
            }
            st->args[st->n_args - 1].literal.ptr = (char *)p->slot_table + sizeof(int64_t) * (size_t)p->slot_off[i];
            continue;
        }
        gr_kslot_map m;
        GR_TRY(gr_kslot_map_build(st->kernel, &m));
        gr_kernel_slot_values(st->kernel, &m, p->slot_host + p->slot_off[i]);
        int npp = st->kernel->n_points_param;
        p->slot_host[p->slot_off[i] + m.n] = npp >= 0 ? st->args[npp].literal.i : gr_kernel_points(st->kernel);
        gr_kslot_map_free(&m);
        if (npp >= 0 && st->args[npp].kind != GR_ARG_LITERAL)
            return gr_error(GR_ERR_INTERNAL, "kernel '%s': its point count is not a literal argument", st->kernel->name);
        gr_step_arg *a = &st->args[st->n_args++];
        memset(a, 0, sizeof *a);
        a->kind = GR_ARG_LITERAL;
        a->literal.ptr = (char *)p->slot_table + sizeof(int64_t) * (size_t)p->slot_off[i];
        table[i] = true;
    }
    GR_TRY(gr_dev_memcpy(s->dev, s->stream, p->slot_table, p->slot_host, bytes, GR_COPY_H2D));
    return gr_dev_stream_sync(s->dev, s->stream); /* slot_host may be rewritten by nobody, but a pageable copy must finish */
}

static void gplan_free(gr_rt_gplan *gp) {
    if (!gp) return;
    for (int k = 0; k < gp->n_segs; k++) gr_strfree(gp->why[k]);
    gr_free(gp->why, sizeof(char *) * (size_t)gp->n_segs);
    gr_free(gp->ok, (size_t)gp->n_segs);
    gr_free(gp->holder, sizeof(long) * (size_t)gp->n_segs);
    gr_free(gp, sizeof *gp);
}

void gr_rt_generic_plan_free(gr_session_t s, gr_rt_plan *p) {
    if (p->slot_table) gr_dev_free(s->dev, p->slot_table);
    if (p->slot_host) gr_free(p->slot_host, sizeof(int64_t) * p->slot_count);
    if (p->slot_off) gr_free(p->slot_off, sizeof(int) * (size_t)p->steps.len);
    gplan_free(p->gp);
    p->slot_table = NULL, p->slot_host = NULL, p->slot_off = NULL, p->gp = NULL;
}

static gr_status gplan_of(gr_rt_plan *p, gr_rt_gplan **out) {
    if (!p->gp) {
        gr_rt_gplan *gp = gr_calloc(1, sizeof *gp);
        if (!gp) return GR_ERR_NOMEM;
        int n = p->segs.len ? p->segs.len : 1;
        gp->n_segs = p->segs.len;
        gp->ok = gr_malloc((size_t)n);
        gp->why = gr_calloc((size_t)n, sizeof(char *));
        gp->holder = gr_malloc(sizeof(long) * (size_t)n);
        if (!gp->ok || !gp->why || !gp->holder) {
            gr_free(gp->ok, (size_t)n), gr_free(gp->why, sizeof(char *) * (size_t)n), gr_free(gp->holder, sizeof(long) * (size_t)n);
            gr_free(gp, sizeof *gp);
            return GR_ERR_NOMEM;
        }
        for (int k = 0; k < p->segs.len; k++) gp->ok[k] = -1, gp->holder[k] = p->serial; /* the table holds its own */
        gp->const_holder = p->serial;
        p->gp = gp;
    }
    *out = p->gp;
    return GR_OK;
}

/* ==== placeholders ================================================================================= */
bool gr_rt_generic_placeholder(gr_session_t s, gr_rt_plan *p, int i, gr_status *st) {
    *st = GR_OK;
    gr_rt_plan *m = s->max_plan;
    if (!generic_on(s) || !m || m == p || !p->input_borrowed) return false;
    if (i >= m->g->inputs.len || p->input_bytes[i] > m->input_bytes[i] ||
        m->mem.values[m->g->inputs.data[i]].kind != GR_STORE_INPUT)
        return false;
    if ((*st = gr_rt_input_placeholder(s, m, i)) != GR_OK) return true;
    p->input_dev[i] = m->input_dev[i];
    p->input_borrowed[i] = true;
    return true;
}

/* The input placeholder p's input i writes: the largest binding's when shared. */
static bool shares_placeholder(gr_session_t s, const gr_rt_plan *p, int i) {
    return s->max_plan && (p == s->max_plan || (p->input_borrowed && p->input_borrowed[i]));
}

void gr_rt_generic_inputs(gr_session_t s, gr_rt_plan *p) {
    if (!generic_on(s) || !s->generic_input_owner) return;
    for (int i = 0; i < p->g->inputs.len; i++) {
        if (!shares_placeholder(s, p, i)) continue;
        /* another plan copied its input there since this plan did: copy again */
        if (s->generic_input_owner[i] != p->serial) p->input_version[i] = 0;
        s->generic_input_owner[i] = p->serial;
    }
}

/* ==== buckets ====================================================================================== */
bool gr_rt_generic_is_bucket(gr_session_t s, const gr_rt_plan *p) {
    if (!generic_on(s)) return false;
    for (int k = 0; k < p->n_syms; k++) {
        int64_t v = p->sym_values[k], hi = s->graph->syms.data[k].hi;
        int64_t b = 1;
        while (b < v && b < hi) b *= 2;
        if (b > hi) b = hi;
        if (v != b && v >= 1) return false;
    }
    return true;
}

gr_status gr_rt_generic_select(gr_session_t s, const int64_t *syms, gr_rt_plan **pp, gr_rt_plan **rep) {
    *rep = NULL;
    if (!generic_on(s)) return gr_rt_plan_for(s, syms, pp);
    int ni = s->graph->inputs.len;
    if (!s->generic_input_owner) {
        s->generic_input_owner = gr_calloc((size_t)(ni ? ni : 1), sizeof(long));
        if (!s->generic_input_owner) return GR_ERR_NOMEM;
    }
    int n = s->graph->syms.len;
    int64_t *bucket = gr_malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!bucket) return GR_ERR_NOMEM;
    bool same = true;
    for (int k = 0; k < n; k++) {
        int64_t v = syms[k], hi = s->graph->syms.data[k].hi;
        int64_t b = 1;
        while (b < v && b < hi) b *= 2;
        if (b > hi) b = hi;
        bucket[k] = v < 1 ? v : b;
        same = same && bucket[k] == v;
    }
    gr_rt_plan *r = NULL;
    gr_status st = same ? GR_OK : gr_rt_plan_for(s, bucket, &r);
    gr_free(bucket, sizeof(int64_t) * (size_t)(n ? n : 1));
    GR_TRY(st);
    /* the binding's plan (built now if new) at its bucket's arena offsets; most recent */
    s->layout_plan = r;
    st = gr_rt_plan_for(s, syms, pp);
    s->layout_plan = NULL;
    GR_TRY(st);
    /* the bucket's steps read its placeholders: the shared ones, allocated on first use */
    for (int i = 0; r && i < ni; i++)
        if (r->mem.values[r->g->inputs.data[i]].kind == GR_STORE_INPUT && r->input_bytes[i]) GR_TRY(gr_rt_input_placeholder(s, r, i));
    *rep = r;
    return GR_OK;
}

/* The plans a run at `syms` would take (the binding's and its bucket's), found without building,
 * evicting or reordering anything (the host's wait decision, session.c): false when one is not
 * built yet. */
bool gr_rt_generic_peek(gr_session_t s, const int64_t *syms, gr_rt_plan **pp, gr_rt_plan **rep) {
    *pp = *rep = NULL;
    int n = s->graph->syms.len;
    if (generic_on(s)) {
        int64_t *bucket = gr_malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        if (!bucket) return false;
        bool same = true;
        for (int k = 0; k < n; k++) {
            int64_t v = syms[k], hi = s->graph->syms.data[k].hi, b = 1;
            while (b < v && b < hi) b *= 2;
            if (b > hi) b = hi;
            bucket[k] = v < 1 ? v : b;
            same = same && bucket[k] == v;
        }
        if (!same) *rep = gr_rt_plan_find(s, bucket);
        gr_free(bucket, sizeof(int64_t) * (size_t)(n ? n : 1));
        if (!same && !*rep) return false;
    }
    return (*pp = gr_rt_plan_find(s, syms)) != NULL;
}

/* Which plan's graph runs segment seg of p (rep: its bucket's plan): rep where the segment was
 * proven generic against rep, p where it was refused or p is its own bucket; NULL while not
 * decided yet. */
gr_rt_plan *gr_rt_generic_runner(const gr_rt_plan *p, gr_rt_plan *rep, int seg) {
    if (!rep) return (gr_rt_plan *)p;
    const gr_rt_gplan *gp = p->gp;
    if (!gp || gp->rep_serial != rep->serial || seg >= gp->n_segs || gp->ok[seg] < 0) return NULL;
    return gp->ok[seg] ? rep : (gr_rt_plan *)p;
}

/* ==== the proof ==================================================================================== */
static const char *node_name(const gr_rt_plan *p, const gr_step *st) {
    return st->node >= 0 && st->node < p->g->nodes.len && p->g->nodes.data[st->node].name ? p->g->nodes.data[st->node].name : "?";
}

/* A matmul equal but for its row count (field by field: struct padding is not compared). */
static bool same_call_but_rows(const gr_libcall *a, const gr_libcall *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->n == b->n && a->k == b->k && a->batch == b->batch &&
           a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc &&
           a->alpha == b->alpha && a->bias == b->bias && a->epilogue == b->epilogue && a->residual == b->residual &&
           /* batch strides are read only with more than one batch */
           (a->batch == 1 || (a->batch_stride_a == b->batch_stride_a && a->batch_stride_b == b->batch_stride_b &&
                              a->batch_stride_c == b->batch_stride_c && a->batch_stride_bias == b->batch_stride_bias));
}

/* An attention equal but for its lengths and strides (the record the table holds), each length
 * no larger than the bucket's (its grid and mask table are sized for the bucket's). */
static bool same_attention_but_lengths(const gr_libcall *a, const gr_libcall *b) {
    if (!a->lens_arg || !b->lens_arg || a->seq_q > b->seq_q || a->seq_k > b->seq_k) return false;
    int64_t ra[GR_ATTN_LENS], rb[GR_ATTN_LENS];
    gr_libcall_attention_lens(a, ra);
    gr_libcall_attention_lens(b, rb);
    /* the tiled kernels are chosen on the bucket's strides (each a multiple of 16 bytes: 8
     * half or 4 f32 elements, cuda-attn.c): this binding's must pass that test too */
    int64_t sa = 0, sb = 0;
    const int64_t q = b->dtype == GR_F32 ? 3 : 7;
    for (int d = GR_ATTN_LENS_Q; d < GR_ATTN_LENS_MASK; d++) sa |= ra[d], sb |= rb[d];
    if ((sb & q) == 0 && (sa & q) != 0) return false;
    /* a broadcast mask dim stays broadcast: the mask table's planes are the bucket's; and no
     * stride is negative (a device checks the call's strides, not the record's) */
    for (int d = GR_ATTN_LENS_Q; d < GR_ATTN_LENS; d++)
        if (ra[d] < 0 || (d >= GR_ATTN_LENS_MASK && (ra[d] == 0) != (rb[d] == 0))) return false;
    gr_libcall x, y; /* memcpy: the padding compares equal as it did in the originals */
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    gr_libcall_attention_use_lens(&x, rb);
    gr_libcall_attention_use_lens(&y, rb);
    return !memcmp(&x, &y, sizeof x);
}

/* Same mask geometry (what a mask group's later call reuses the first call's table for). */
static bool same_mask_geometry(const gr_libcall *a, const gr_libcall *b) {
    return a->seq_q == b->seq_q && a->seq_k == b->seq_k && !memcmp(a->mask_stride, b->mask_stride, sizeof a->mask_stride);
}

/* A mask group's later call at step i reuses its first call's tile table when the bucket's
 * geometries match (decided when the bucket's graph is captured): the binding's must match too. */
static bool group_reuse_holds(const gr_rt_plan *p, const gr_rt_plan *r, int first_step, int i) {
    const gr_libcall *a = &p->steps.data[i].call;
    if (!a->mask_group || a->mask_group_first) return true;
    for (int j = i - 1; j >= first_step; j--) {
        const gr_step *f = &p->steps.data[j];
        if (f->kind != GR_STEP_LIBCALL || f->call.kind != GR_LIB_ATTENTION || f->call.mask_group != a->mask_group ||
            !f->call.mask_group_first)
            continue;
        return !same_mask_geometry(&r->steps.data[i].call, &r->steps.data[j].call) || same_mask_geometry(a, &f->call);
    }
    return true;
}

/* Root value of v (through a view) and the view's element offset. */
static int root_of(const gr_rt_plan *p, int v, int64_t *elem_off) {
    const gr_value_store *st = &p->mem.values[v];
    *elem_off = 0;
    if (st->kind != GR_STORE_ALIAS) return v;
    *elem_off = st->alias_elem_offset;
    return st->alias_of;
}

/* Both arguments read the same folded constant at the same element: the bucket's copy is
 * given this binding's bytes before the run (load_consts), so the addresses may differ. */
static bool same_const(const gr_rt_plan *p, const gr_rt_plan *r, const gr_step_arg *a, const gr_step_arg *b) {
    if (a->kind != GR_ARG_VALUE || b->kind != GR_ARG_VALUE || a->value != b->value || a->elem_offset != b->elem_offset) return false;
    int64_t oa, ob;
    int ra = root_of(p, a->value, &oa), rb = root_of(r, b->value, &ob);
    return ra == rb && oa == ob && p->mem.values[ra].kind == GR_STORE_CONST && r->mem.values[rb].kind == GR_STORE_CONST &&
           p->mem.values[ra].bytes <= r->mem.values[rb].bytes && p->g->values.data[ra].dtype == r->g->values.data[rb].dtype;
}

/* Why segment seg of p cannot run through r's (NULL: it can), in why (n bytes). */
static gr_status refuse_reason(gr_session_t s, gr_rt_plan *p, gr_rt_plan *r, int seg, char *why, size_t n) {
    why[0] = 0;
    if (!p->arena_shared || !r->arena_shared || p->arena != r->arena) {
        snprintf(why, n, "its arena is not its bucket's (%.120s)", p->arena_note[0] ? p->arena_note : r->arena_note);
        return GR_OK;
    }
    if (p->steps.len != r->steps.len || p->segs.len != r->segs.len) {
        snprintf(why, n, "the plan has %d steps in %d segments, the bucket's %d in %d", p->steps.len, p->segs.len, r->steps.len,
                 r->segs.len);
        return GR_OK;
    }
    for (int i = 0; i < p->steps.len; i++) {
        const gr_step *a = &p->steps.data[i], *b = &r->steps.data[i];
        bool eq = a->kind == b->kind && a->n_args == b->n_args;
        if (eq && a->kind == GR_STEP_KERNEL) GR_TRY(gr_kernel_structure_equal(a->kernel, b->kernel, &eq));
        if (!eq) {
            snprintf(why, n, "step %d (node '%.60s') differs from the bucket's (another kind or kernel structure)", i, node_name(p, a));
            return GR_OK;
        }
    }
    /* the same values live at the same times, each no larger here than in the bucket: a region the
     * bucket's steps write (its extra matmul rows included) holds nothing else this plan keeps live */
    if (p->mem.n_values != r->mem.n_values) {
        snprintf(why, n, "the plan has %d values, the bucket's %d", p->mem.n_values, r->mem.n_values);
        return GR_OK;
    }
    for (int v = 0; v < p->mem.n_values; v++) {
        const gr_value_store *a = &p->mem.values[v], *b = &r->mem.values[v];
        if (a->kind != b->kind || a->bytes > b->bytes ||
            (a->kind == GR_STORE_ARENA && (a->offset != b->offset || a->first_step != b->first_step || a->last_step != b->last_step))) {
            snprintf(why, n, "value '%.60s' is stored otherwise than in the bucket's plan", p->g->values.data[v].name);
            return GR_OK;
        }
    }
    const gr_segment *sa = &p->segs.data[seg], *sb = &r->segs.data[seg];
    if (sa->first_step != sb->first_step || sa->n_steps != sb->n_steps || sa->graphable != sb->graphable) {
        snprintf(why, n, "the segment's steps differ from the bucket's");
        return GR_OK;
    }
    for (int i = sa->first_step; i < sa->first_step + sa->n_steps; i++) {
        const gr_step *a = &p->steps.data[i], *b = &r->steps.data[i];
        if (a->kind == GR_STEP_ALIAS) continue;
        if (a->kind != GR_STEP_KERNEL && a->kind != GR_STEP_LIBCALL) {
            snprintf(why, n, "step %d (node '%.60s') is host work", i, node_name(p, a));
            return GR_OK;
        }
        int compared = a->n_args;
        if (a->kind == GR_STEP_KERNEL) {
            if (!p->slot_off || p->slot_off[i] < 0 || !r->slot_off || r->slot_off[i] < 0) {
                snprintf(why, n, "kernel '%.60s' (node '%.60s') uses all %d arguments: its slots cannot come from a table",
                         a->kernel->name, node_name(p, a), GR_KMAX_PARAMS);
                return GR_OK;
            }
            if (p->slot_off[i] != r->slot_off[i]) {
                snprintf(why, n, "kernel '%.60s': slot table layout differs", a->kernel->name);
                return GR_OK;
            }
            compared--; /* the table argument: the one allowed to differ, with the point count (read from the table) */
        } else if (a->call.kind == GR_LIB_ATTENTION && a->call.lens_arg) {
            if (!b->call.lens_arg || !p->slot_off || !r->slot_off || p->slot_off[i] != r->slot_off[i]) {
                snprintf(why, n, "attention '%.60s': length record layout differs", a->call.name);
                return GR_OK;
            }
            compared--; /* the record argument: its lengths are this binding's, in the bucket's table */
        }
        if (a->kind == GR_STEP_KERNEL) {
            /* its structure was compared above, its slots are read from the table */
        } else if (a->call.kind == GR_LIB_ATTENTION) {
            if ((memcmp(&a->call, &b->call, sizeof a->call) && !same_attention_but_lengths(&a->call, &b->call)) ||
                !group_reuse_holds(p, r, sa->first_step, i)) {
                snprintf(why, n, "attention '%.60s' (node '%.60s') changes with the binding in more than its lengths and strides "
                                 "(%lld x %lld here, %lld x %lld in the bucket)",
                         a->call.name, node_name(p, a), (long long)a->call.seq_q, (long long)a->call.seq_k,
                         (long long)b->call.seq_q, (long long)b->call.seq_k);
                return GR_OK;
            }
        } else if (a->call.kind != GR_LIB_MATMUL && memcmp(&a->call, &b->call, sizeof a->call)) {
            snprintf(why, n, "library call '%.60s' (node '%.60s') changes with the binding", a->call.name, node_name(p, a));
            return GR_OK;
        } else if (a->call.kind == GR_LIB_MATMUL && (!same_call_but_rows(&a->call, &b->call) || a->call.m > b->call.m)) {
            snprintf(why, n, "matmul '%.60s' (node '%.60s'): the symbol is in more than its rows (n, k, a leading dim or a batch "
                             "stride changes: m %lld n %lld k %lld batch %lld here, m %lld n %lld k %lld batch %lld in the bucket)",
                     a->call.name, node_name(p, a), (long long)a->call.m, (long long)a->call.n, (long long)a->call.k,
                     (long long)a->call.batch, (long long)b->call.m, (long long)b->call.n, (long long)b->call.k,
                     (long long)b->call.batch);
            return GR_OK;
        }
        gr_karg x[GR_KMAX_PARAMS], y[GR_KMAX_PARAMS];
        memset(x, 0, sizeof x), memset(y, 0, sizeof y);
        GR_TRY(gr_rt_step_args(s, p, i, x));
        GR_TRY(gr_rt_step_args(s, r, i, y));
        int points_arg = a->kind == GR_STEP_KERNEL ? a->kernel->n_points_param : -1;
        /* R's point count sizes the grid: never smaller than this binding's */
        if (points_arg >= 0 && x[points_arg].i > y[points_arg].i) {
            snprintf(why, n, "kernel '%.60s' (node '%.60s') has more points here than in the bucket", a->kernel->name, node_name(p, a));
            return GR_OK;
        }
        for (int k = 0; k < compared; k++)
            if (k != points_arg && x[k].bits != y[k].bits && !same_const(p, r, &a->args[k], &b->args[k])) {
                const gr_step_arg *sa_ = &a->args[k];
                const char *what = sa_->kind == GR_ARG_VALUE ? p->g->values.data[sa_->value].name : "a literal";
                snprintf(why, n, "step %d (node '%.60s'): argument %d ('%.60s') differs from the bucket's (%s)", i, node_name(p, a), k,
                         what ? what : "?",
                         sa_->kind == GR_ARG_VALUE && p->mem.values[sa_->value].kind == GR_STORE_CONST
                             ? "a constant folded for this binding"
                             : "an address or value that depends on the binding");
                return GR_OK;
            }
    }
    return GR_OK;
}

static gr_status verdict(gr_session_t s, gr_rt_plan *p, gr_rt_plan *r, int seg, bool *ok) {
    gr_rt_gplan *gp;
    GR_TRY(gplan_of(p, &gp));
    if (gp->rep_serial != r->serial) {
        for (int k = 0; k < gp->n_segs; k++) {
            gp->ok[k] = -1;
            gr_strfree(gp->why[k]);
            gp->why[k] = NULL;
        }
        gp->rep_serial = r->serial;
    }
    if (gp->ok[seg] < 0) {
        char why[512];
        GR_TRY(refuse_reason(s, p, r, seg, why, sizeof why));
        gp->ok[seg] = why[0] == 0;
        if (why[0]) {
            gp->why[seg] = gr_strdup(why);
            if (!gp->why[seg]) return GR_ERR_NOMEM;
            if (s->opt.verbose) fprintf(stderr, "graft: generic: segment %d runs with its own plan: %s\n", seg, why);
        }
    }
    *ok = gp->ok[seg] == 1;
    return GR_OK;
}

gr_status gr_rt_generic_verdict(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg, bool *ok, const char **why) {
    *ok = false;
    *why = NULL;
    GR_TRY(verdict(s, p, rep, seg, ok));
    if (!*ok) *why = p->gp && p->gp->why[seg] ? p->gp->why[seg] : "?";
    return GR_OK;
}

gr_status gr_rt_generic_dirty(gr_rt_plan *rep, int seg) {
    gr_rt_gplan *gp;
    GR_TRY(gplan_of(rep, &gp));
    gp->holder[seg] = 0; /* no plan's serial */
    return GR_OK;
}

/* ==== running ====================================================================================== */
/* Makes q's table hold src's slots over segment seg's kernels (one copy, when it holds another's). */
static gr_status load_slots(gr_session_t s, gr_rt_plan *q, gr_rt_plan *src, int seg) {
    if (!q->slot_table) return GR_OK;
    gr_rt_gplan *gp;
    GR_TRY(gplan_of(q, &gp));
    if (gp->holder[seg] == src->serial) return GR_OK;
    const gr_segment *sg = &q->segs.data[seg];
    int lo = -1, hi = -1;
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++) {
        if (q->slot_off[i] < 0) continue;
        if (lo < 0) lo = q->slot_off[i];
        hi = q->slot_off[i] + step_slots(&q->steps.data[i]);
    }
    if (lo >= 0) {
        size_t bytes = sizeof(int64_t) * (size_t)(hi - lo);
        GR_TRY(gr_dev_memcpy(s->dev, s->stream, (int64_t *)q->slot_table + lo, src->slot_host + lo, bytes, GR_COPY_H2D));
        s->table_refreshes++;
        s->table_bytes += bytes;
    }
    gp->holder[seg] = src->serial;
    return GR_OK;
}

/* Makes q's folded constants hold src's (the same values, each no larger: checked by the proof),
 * copied from src's host data; q's own are copied back before q runs itself. */
static gr_status load_consts(gr_session_t s, gr_rt_plan *q, gr_rt_plan *src) {
    gr_rt_gplan *gp;
    GR_TRY(gplan_of(q, &gp));
    if (gp->const_holder == src->serial) return GR_OK;
    for (int v = 0; v < q->mem.n_values; v++) {
        const gr_value_store *st = &q->mem.values[v];
        if (st->kind != GR_STORE_CONST || !st->bytes || v >= src->mem.n_values) continue;
        const gr_value_store *from = &src->mem.values[v];
        if (from->kind != GR_STORE_CONST || from->bytes > st->bytes || !src->g->values.data[v].data)
            return gr_error(GR_ERR_INTERNAL, "generic: constant '%s' cannot be refreshed", q->g->values.data[v].name);
        if (!from->bytes) continue;
        GR_TRY(gr_dev_memcpy(s->dev, s->stream, (char *)q->consts + st->offset, src->g->values.data[v].data, from->bytes, GR_COPY_H2D));
        s->table_refreshes++;
        s->table_bytes += from->bytes;
    }
    gp->const_holder = src->serial;
    return GR_OK;
}

gr_status gr_rt_generic_own(gr_session_t s, gr_rt_plan *p) {
    if (!generic_on(s)) return GR_OK;
    for (int seg = 0; seg < p->segs.len; seg++) GR_TRY(load_slots(s, p, p, seg));
    return p->consts ? load_consts(s, p, p) : GR_OK;
}

gr_status gr_rt_generic_run_segment(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg) {
    if (!p->segs.data[seg].graphable || s->opt.mode == GR_MODE_EAGER) {
        GR_TRY(load_slots(s, p, p, seg)); /* its own slots: p may be a bucket whose table served another */
        if (p->consts) GR_TRY(load_consts(s, p, p));
        return gr_rt_segment_run_eager(s, p, seg);
    }
    bool ok = false;
    if (rep) GR_TRY(verdict(s, p, rep, seg, &ok));
    gr_rt_plan *q = ok ? rep : p;
    GR_TRY(load_slots(s, q, p, seg));
    if (q->consts) GR_TRY(load_consts(s, q, p));
    if (q != p) {
        s->generic_runs++;
        s->generic_replays += q->seg_state[seg].state == GR_SEG_CAPTURED;
    }
    return gr_rt_segment_run_graph(s, q, seg);
}

/* ==== explain ====================================================================================== */
void gr_rt_generic_explain(gr_session_t s, const gr_rt_plan *p, int seg, gr_strbuf *sb) {
    if (!generic_on(s)) return;
    if (gr_rt_generic_is_bucket(s, p)) {
        gr_sb_puts(sb, "  shape policy generic: this binding is a bucket: its graph serves the bindings of its bucket\n");
        return;
    }
    const gr_rt_gplan *gp = p->gp;
    if (!gp || seg >= gp->n_segs || gp->ok[seg] < 0) gr_sb_puts(sb, "  shape policy generic: not run through its bucket yet\n");
    else if (gp->ok[seg]) gr_sb_puts(sb, "  shape policy generic: generic: runs as its bucket's graph, slots from the device table\n");
    else gr_sb_printf(sb, "  shape policy generic: not generic, own graph (exact): %s\n", gp->why[seg] ? gp->why[seg] : "?");
}
