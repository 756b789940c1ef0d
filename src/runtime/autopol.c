/* runtime/autopol — shape policy auto, measured per segment (issue 11 item 1).
 *
 * In graph mode, a symbolic model under policy auto chooses for each segment (a position and
 * the structure of its steps, gr_rt_segment_hash) one of:
 *   exact   its own graph per binding (instantiated; LRU under graph_memory_mb),
 *   update  one exec per position, a new binding's capture applied with an exec update,
 *   generic its bucket's graph (power of two of each symbol), slots from the device table;
 * by timing them at the first binding that runs the segment. What is measured there, on the
 * device clock (the simulator's modelled one, CUDA's events and wall clock):
 *   replay    a replay of the segment's own graph (exact, update) or of its bucket's graph with
 *             this binding's slots, the table copy included (generic: what every call of a binding
 *             other than the one the table holds pays);
 *   switch    update: one exec update (the shared exec holds another binding's parameters on
 *             nearly every call of a sweep), measured by applying the segment's own graph;
 *   setup     what a new binding costs: recording the stream plus instantiation (exact; generic
 *             once per bucket) or plus the exec update (update);
 *   bytes     the graph memory of the segment's own graph (free device memory before/after).
 * The rule: per call = replay + switch + setup x (graphs made per binding seen) / R, where a
 * policy makes a graph for every binding seen (exact, update) or for every bucket seen
 * (generic: buckets / bindings of the declared ranges), spread over the R calls each binding
 * gets. A policy whose graphs over the whole declared range (bindings, or buckets, x the
 * binding's graph bytes) exceed graph_memory_mb pays its setup on every call (LRU eviction
 * re-captures). The smallest per-call cost wins; on a tie, fewer graphs. Why this rule: it is
 * the cost of the calls seen so far per call, from numbers measured once.
 *
 * R, calls per binding, is observed (the adaptive rule): the session counts its calls and the
 * distinct bindings among them (after pad's rounding: what graphs are made for), and each
 * decision uses R = (W x R0 + calls) / (W + bindings): the observation with a prior R0 worth W
 * = AP_PRIOR_WEIGHT bindings, where R0 is the ratio the decisions file saved for the segment
 * (the last process's observation) or AP_PRIOR_RATIO (2: issue 11's sweep) when nothing was
 * saved. A fixed R was wrong both ways: a serving loop calls each length many times (setup
 * amortises away: exact's cheaper replay wins, measured on the H100 as 1.377 against generic's
 * 1.708 ms per call for GPT-2, where a fixed R = 2 chose generic at 2.286), a stream of new
 * lengths never repeats (R = 1: generic's fewer captures win). The decided segments are
 * re-chosen from the numbers already measured (no new measuring runs) at a run's start when the
 * calls reached twice those at the last revision or the observed ratio moved by a factor
 * AP_REVISE_STEP either way since it: both at most logarithmically often (the calls double, or
 * the ratio moves by a factor, which needs the calls or the bindings to grow by that factor), so
 * a million calls revise about 60 times, each O(segments) arithmetic. A choice that changes
 * gives back the graphs the old policy made for the segment that the new one does not run
 * (exact's own graphs under generic, except the buckets'; update's shared exec), after the
 * stream drains; the new policy captures as it runs, under graph_memory_mb's LRU as every
 * capture. The ratio is saved with the decision, so the next process starts from it. Distinct
 * bindings are remembered in a hash set of at most AP_SEEN_MAX; past it an unseen binding
 * counts as new (R then errs low, towards fewer graphs).
 *
 * Cost of measuring: at the segment's first binding, one warm-up and one capture (as any
 * graph-mode run), one timed replay, one exec update, and for generic the bucket's warm-up,
 * capture and one timed run: about three calls' worth, once per segment per process; the next
 * process reads the decisions (decisions.c) and measures nothing.
 *
 * Not candidates here: pad, which rounds the whole binding (every value crossing a segment
 * boundary changes its layout, so it cannot differ between segments): auto pads where
 * pass/pad.c proves it for a symbol, as before, and then chooses exact or update per segment
 * among the capture sizes; generic needs every symbol bounded and no symbol padded. Mode auto
 * (eager or graph per segment) keeps the unmeasured rule (shapes.c). */
#include "runtime/runtime-impl.h"
#include <stdio.h>
#include <string.h>

#define AP_PRIOR_RATIO 2.0  /* calls per binding before any is observed: the benchmark's sweep, each length twice */
#define AP_PRIOR_WEIGHT 4.0 /* the prior ratio counts as this many bindings observed */
#define AP_REVISE_STEP 1.25 /* a revision when the observed ratio moved by this factor (or the calls doubled) */
#define AP_SEEN_MAX (1 << 16) /* distinct bindings remembered (a set of 8-byte hashes: 512 KiB at most) */
#define AP_OPEN_RANGE 128.0 /* bindings assumed of a symbol without a declared maximum */

enum { AP_EXACT, AP_UPDATE, AP_GENERIC };
static const int ap_policy[GR_AP_N] = {GR_SHAPES_EXACT, GR_SHAPES_UPDATE, GR_SHAPES_GENERIC};

typedef struct {
    gr_rt_ap_decision x;
    bool persist;       /* measured (a fallback segment is not: nothing was measured) */
    long rep_serial;    /* the bucket plan whose graph was captured only to measure generic (0: none) */
    double prior;       /* R0: the decisions file's ratio, or AP_PRIOR_RATIO */
    long decided_call;  /* the calls seen when this session first decided it (-1: from the file) */
    int prev_policy;    /* the policy before its last change in this session (-1: none) */
    bool libcall;       /* the segment calls a library (score: update only where exact's graphs do not fit) */
    char why[512];      /* why a candidate was not measured or scored */
} ap_entry;

struct gr_rt_autopol {
    GR_VEC(ap_entry) e;
    double bindings, buckets; /* of the declared ranges */
    char no_generic[256];     /* why generic is no candidate where its kernels would differ (activation_product) */
    /* the adaptive rule: calls and distinct bindings seen (set: their hashes, open addressing, 0 = empty) */
    long calls, seen;
    uint64_t *set;
    int set_cap, set_len;
    long next_revision;    /* calls at which the next revision is due */
    double revised_ratio;  /* the observed ratio at the last revision */
    long revisions, switches;
};

/* ==== setup ========================================================================================= */
/* Whether generic's kernels would differ from exact's in their products: a float matmul of two
 * computed operands (attention's scores and values, unfused) takes its n or k from the slot table
 * under generic, so generic runs it as a generated kernel where exact calls cuBLASLt. On the H100
 * that made generic's replay of GPT-2 small fp32 0.61/1.28/1.52/2.32/2.78 ms at seq 1/33/64/100/128
 * against exact's 0.58/1.09/1.11/1.45/1.48 (bench/shapes/2026-11-24-h100-percall), and auto's exact
 * candidate ran the same generated kernels (the machinery is per session), so auto was slower
 * than exact whatever it chose; its one measurement, at the first binding (seq 1), saw no penalty.
 * So auto keeps exact's kernels there and chooses among exact and update; --shapes generic still
 * runs such products as kernels. The check lowers the largest binding once (no device work);
 * writes why, naming the first such node, into what (empty: none). */
static gr_status activation_product(gr_session_t s, char *what, size_t n) {
    const gr_graph *g = s->graph;
    int64_t *syms = gr_malloc(sizeof(int64_t) * (size_t)g->syms.len);
    if (!syms) return GR_ERR_NOMEM;
    for (int k = 0; k < g->syms.len; k++) syms[k] = g->syms.data[k].hi;
    s->generic_infra = true; /* the options generic's plans are built with */
    gr_pipeline_opts po;
    gr_rt_plan_pipeline_opts(s, &po);
    gr_compiled c;
    memset(&c, 0, sizeof c);
    gr_status st = gr_pass_pipeline_front(g, syms, &po, &c);
    if (st == GR_OK) st = gr_pass_pipeline_steps(&po, &c);
    gr_free(syms, sizeof(int64_t) * (size_t)g->syms.len);
    for (int i = 0; st == GR_OK && i < c.steps.len && !what[0]; i++) {
        const gr_step *sp = &c.steps.data[i];
        if (sp->kind != GR_STEP_KERNEL || sp->node < 0 || sp->node >= c.g->nodes.len) continue;
        const gr_ir_node *nd = &c.g->nodes.data[sp->node];
        if (nd->op != GR_OP_MATMUL || nd->n_out < 1 || nd->out[0] < 0 || !gr_dtype_is_float(c.g->values.data[nd->out[0]].dtype))
            continue;
        snprintf(what, n, "node '%.80s' multiplies two computed tensors, which generic would run as a generated kernel where exact "
                          "calls cuBLASLt",
                 nd->name ? nd->name : "?");
    }
    gr_compiled_free(&c);
    if (st != GR_OK) /* the largest binding does not compile: generic is no candidate, and its runs will say why */
        snprintf(what, n, "the largest binding does not compile: %.100s", gr_last_error()), gr_error_clear();
    return st == GR_ERR_NOMEM ? st : GR_OK;
}

static int64_t bucket_of(int64_t v, int64_t hi) {
    int64_t b = 1;
    while (b < v && b < hi) b *= 2;
    return b > hi ? hi : b;
}

gr_status gr_rt_autopol_init(gr_session_t s) {
    const gr_graph *g = s->graph;
    if (s->opt.shape_policy == GR_SHAPES_GENERIC) {
        s->generic_infra = true;
        return GR_OK;
    }
    if (s->opt.shape_policy != GR_SHAPES_AUTO || g->syms.len == 0 || s->opt.mode == GR_MODE_AUTO) return GR_OK;
    bool bounded = true;
    double bindings = 1, buckets = 1;
    for (int k = 0; k < g->syms.len; k++) {
        const gr_ir_symbol *sym = &g->syms.data[k];
        /* a data-dependent symbol's maximum bounds what the data can give (a NonZero's element
         * count): generic would plan the largest binding's arena for it, so it is no candidate */
        if (!sym->declared || sym->hi >= GR_DX_INF || sym->data_value >= 0) {
            bounded = false;
            bindings *= AP_OPEN_RANGE;
            buckets *= AP_OPEN_RANGE;
            continue;
        }
        int64_t lo = sym->lo < 1 ? 1 : sym->lo, n = 0;
        for (int64_t v = lo; v <= sym->hi; v = bucket_of(v, sym->hi) + 1) n++;
        bindings *= (double)(sym->hi - sym->lo + 1);
        buckets *= (double)(n + (sym->lo < 1)); /* a value below 1 is its own bucket */
    }
    /* generic's tables and shared placeholders: where every symbol is bounded and none padded (in
     * eager mode too, so an eager session runs the kernels graph mode does), and generic's kernels
     * are exact's: not where a product of two activations would become a generated kernel */
    s->generic_infra = bounded && !gr_rt_pad_any(s);
    char product[256] = "";
    if (s->generic_infra) {
        GR_TRY(activation_product(s, product, sizeof product));
        if (product[0]) s->generic_infra = false;
    }
    if (s->opt.mode != GR_MODE_GRAPH) return GR_OK;
    s->ap = gr_calloc(1, sizeof *s->ap);
    if (!s->ap) return GR_ERR_NOMEM;
    snprintf(s->ap->no_generic, sizeof s->ap->no_generic, "%s", product);
    s->ap->bindings = bindings;
    s->ap->buckets = s->generic_infra ? buckets : bindings;
    s->autopol = true;
    return GR_OK;
}

const char *gr_rt_autopol_generic_why(gr_session_t s) {
    if (s->generic_infra) return NULL;
    if (s->ap && s->ap->no_generic[0]) return s->ap->no_generic;
    return gr_rt_pad_any(s) ? "a symbol is padded" : "a symbol has no declared maximum or is data-dependent";
}

void gr_rt_autopol_free(gr_session_t s) {
    if (!s->ap) return;
    gr_vec_free(&s->ap->e);
    gr_free(s->ap->set, sizeof(uint64_t) * (size_t)s->ap->set_cap);
    gr_free(s->ap, sizeof *s->ap);
    s->ap = NULL;
    s->autopol = false;
}

/* ==== the table ===================================================================================== */
static ap_entry *find(gr_session_t s, int seg, uint64_t hash) {
    for (int i = 0; s->ap && i < s->ap->e.len; i++)
        if (s->ap->e.data[i].x.seg == seg && s->ap->e.data[i].x.seg_hash == hash) return &s->ap->e.data[i];
    return NULL;
}

int gr_rt_autopol_policy(gr_session_t s, const gr_rt_plan *p, int seg) {
    const ap_entry *e = s->autopol ? find(s, seg, gr_rt_segment_hash(p, seg)) : NULL;
    return e ? e->x.policy : -1;
}

static bool has_libcall(const gr_rt_plan *p, int seg) {
    const gr_segment *sg = &p->segs.data[seg];
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++)
        if (p->steps.data[i].kind == GR_STEP_LIBCALL) return true;
    return false;
}

/* The decision for segment seg of p: this session's, else the decisions file's (when it applies
 * to this session); NULL when it is to be measured. */
static gr_status lookup(gr_session_t s, const gr_rt_plan *p, int seg, ap_entry **out) {
    uint64_t hash = gr_rt_segment_hash(p, seg);
    *out = find(s, seg, hash);
    if (*out) return GR_OK;
    const gr_rt_ap_decision *f = gr_rt_decisions_find_policy(s, seg, hash);
    if (!f) return GR_OK;
    const char *bad = f->policy == GR_SHAPES_GENERIC && !s->generic_infra                     ? "generic is not on in this session"
                      : f->policy == GR_SHAPES_UPDATE && !gr_dev_caps_get(s->dev).exec_update ? "the device has no exec update"
                                                                                              : NULL;
    if (bad) {
        fprintf(stderr, "graft: warning: the saved shape policy of segment %d (%s) does not apply (%s): measured again\n", seg,
                gr_shape_policy_name(f->policy), bad);
        return GR_OK;
    }
    ap_entry e = {.x = *f, .persist = true, .prior = f->ratio, .decided_call = -1, .prev_policy = -1, .libcall = has_libcall(p, seg)};
    e.x.from_file = true;
    GR_TRY(gr_vec_push(&s->ap->e, e));
    s->autopol_loaded++;
    *out = &s->ap->e.data[s->ap->e.len - 1];
    return GR_OK;
}

/* ==== measuring ===================================================================================== */
/* Segment seg of p with its own plan (its table holding its own slots under generic). */
static gr_status run_own(gr_session_t s, gr_rt_plan *p, int seg) {
    if (s->generic_infra) return gr_rt_generic_run_segment(s, p, NULL, seg);
    return p->segs.data[seg].graphable ? gr_rt_segment_run_graph(s, p, seg) : gr_rt_segment_run_eager(s, p, seg);
}

/* A segment is run several times while measured, and a run may overwrite what it read (a value's
 * arena memory reused by a later step of the segment): the arena as the segment found it is kept
 * aside and put back before every run but the first. The arena is all a segment writes (inputs
 * are copied into placeholders, weights and tables are read only). */
typedef struct {
    void *arena, *saved;
    size_t bytes;
    int runs;
} arena_keep;

static gr_status keep_begin(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, arena_keep *k) {
    memset(k, 0, sizeof *k);
    k->arena = p->arena;
    /* a shared arena is the largest binding's, and every plan's values sit at its offsets */
    k->bytes = p->arena_shared ? s->shared_arena_bytes : p->mem.arena_bytes;
    if (rep && rep->arena == p->arena && rep->mem.arena_bytes > k->bytes) k->bytes = rep->mem.arena_bytes;
    if (!k->arena || !k->bytes) return GR_OK;
    GR_TRY(gr_dev_alloc(s->dev, GR_MEM_DEVICE, k->bytes, &k->saved));
    return gr_dev_memcpy(s->dev, s->stream, k->saved, k->arena, k->bytes, GR_COPY_D2D);
}

static gr_status keep_again(gr_session_t s, arena_keep *k) {
    if (k->runs++ && k->saved) return gr_dev_memcpy(s->dev, s->stream, k->arena, k->saved, k->bytes, GR_COPY_D2D);
    return GR_OK;
}

static void keep_end(gr_session_t s, arena_keep *k) {
    if (!k->saved) return;
    gr_dev_stream_sync(s->dev, s->stream); /* the copies are done before the memory goes */
    gr_dev_free(s->dev, k->saved);
    k->saved = NULL;
}

/* One run between two events on an idle stream (launch gaps count, as in mode auto's timing). */
static gr_status timed(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg, arena_keep *k, double *us) {
    gr_device *d = s->dev;
    GR_TRY(keep_again(s, k));
    if (!s->ev_seg_a) GR_TRY(gr_dev_event_create(d, &s->ev_seg_a));
    if (!s->ev_seg_b) GR_TRY(gr_dev_event_create(d, &s->ev_seg_b));
    GR_TRY(gr_dev_stream_sync(d, s->stream));
    s->autopol_runs++;
    GR_TRY(gr_dev_event_record(d, s->ev_seg_a, s->stream));
    GR_TRY(rep ? gr_rt_generic_run_segment(s, p, rep, seg) : run_own(s, p, seg));
    GR_TRY(gr_dev_event_record(d, s->ev_seg_b, s->stream));
    GR_TRY(gr_dev_stream_sync(d, s->stream));
    return gr_dev_event_elapsed_us(d, s->ev_seg_a, s->ev_seg_b, us);
}

static void add_why(ap_entry *e, const char *fmt, const char *what) {
    size_t used = strlen(e->why);
    snprintf(e->why + used, sizeof e->why - used, "%s", used ? "; " : "");
    used = strlen(e->why);
    snprintf(e->why + used, sizeof e->why - used, fmt, what);
}

/* Measures the candidates of segment seg of p (rep: its bucket's plan, NULL when p is one);
 * the segment's outputs for p's binding are computed by the runs it makes. */
static gr_status measure_kept(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg, arena_keep *k);
static gr_status measure(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg) {
    arena_keep k;
    gr_status st = keep_begin(s, p, rep, &k);
    if (st == GR_OK) st = measure_kept(s, p, rep, seg, &k);
    if (st != GR_OK) gr_dev_stream_sync(s->dev, s->stream);
    keep_end(s, &k);
    return st;
}

static gr_status measure_kept(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg, arena_keep *k) {
    gr_device *d = s->dev;
    gr_rt_segment *st = &p->seg_state[seg];
    ap_entry e;
    memset(&e, 0, sizeof e);
    e.x.seg = seg;
    e.x.seg_hash = gr_rt_segment_hash(p, seg);
    e.x.policy = -1;
    e.prior = AP_PRIOR_RATIO;
    e.prev_policy = -1;
    for (int c = 0; c < GR_AP_N; c++) e.x.replay_us[c] = e.x.setup_us[c] = e.x.per_call_us[c] = -1;
    /* exact: warm-up and capture of its own graph (an own exec while undecided: shapes.c) */
    bool ran = false;
    for (int i = 0; i < 3 && st->state != GR_SEG_CAPTURED && st->state != GR_SEG_FALLBACK; i++, ran = true) {
        s->autopol_runs++;
        GR_TRY(keep_again(s, k));
        GR_TRY(run_own(s, p, seg));
    }
    if (st->state != GR_SEG_CAPTURED) {
        /* no graph (capture failed, over the budget): the graph manager's choice stands */
        if (!ran) GR_TRY(run_own(s, p, seg));
        e.x.policy = GR_SHAPES_EXACT;
        add_why(&e, "not measured: %.200s", st->fallback_reason ? st->fallback_reason : "no graph");
        return gr_vec_push(&s->ap->e, e);
    }
    double replay;
    GR_TRY(timed(s, p, NULL, seg, k, &replay));
    e.x.replay_us[AP_EXACT] = (float)replay;
    e.x.setup_us[AP_EXACT] = (float)(st->record_clock_us + st->instantiate_clock_us);
    e.x.bytes = st->graph_bytes;
    /* update: the cost of one exec update, applying the segment's own graph to its exec */
    e.libcall = has_libcall(p, seg);
    if (e.libcall)
        add_why(&e, "update: %s", "scored only where exact's graphs do not fit graph_memory_mb (the segment calls a library, whose "
                                  "kernels an updated exec may replay slower)");
    if (!gr_dev_caps_get(d).exec_update) add_why(&e, "update: %s", "the device has no exec update");
    else if (!st->exec_shared) {
        double c0 = gr_dev_clock_us(d);
        gr_status rc = gr_dev_exec_update(d, st->exec, st->graph);
        double u = gr_dev_clock_us(d) - c0;
        if (rc == GR_ERR_NOMEM) return rc;
        if (rc != GR_OK) {
            add_why(&e, "update refused: %.160s", gr_last_error());
            gr_error_clear();
        } else {
            e.x.replay_us[AP_UPDATE] = (float)(replay + u);
            e.x.setup_us[AP_UPDATE] = (float)(st->record_clock_us + u);
        }
    }
    /* generic: the bucket's graph, this binding's slots copied into its table first */
    if (!s->generic_infra) add_why(&e, "generic: %.300s", gr_rt_autopol_generic_why(s));
    else if (!rep) {
        /* p is its own bucket: generic's graph is exact's; a replay for another binding of the
         * bucket copies that binding's slots first (timed), and computes the bucket's extents
         * (not measurable at this binding) */
        double g;
        GR_TRY(gr_rt_generic_dirty(p, seg));
        GR_TRY(timed(s, p, NULL, seg, k, &g));
        e.x.replay_us[AP_GENERIC] = (float)g;
        e.x.setup_us[AP_GENERIC] = e.x.setup_us[AP_EXACT];
    } else {
        bool ok = false;
        const char *why = NULL;
        GR_TRY(gr_rt_generic_verdict(s, p, rep, seg, &ok, &why));
        gr_rt_segment *rs = &rep->seg_state[seg];
        if (ok && rs->state != GR_SEG_CAPTURED) e.rep_serial = rep->serial;
        for (int i = 0; ok && i < 3 && rs->state != GR_SEG_CAPTURED && rs->state != GR_SEG_FALLBACK; i++) {
            s->autopol_runs++;
            GR_TRY(keep_again(s, k));
            GR_TRY(gr_rt_generic_run_segment(s, p, rep, seg));
        }
        if (!ok) add_why(&e, "generic refused: %.200s", why);
        else if (rs->state != GR_SEG_CAPTURED) add_why(&e, "generic: the bucket has no graph: %.180s", rs->fallback_reason ? rs->fallback_reason : "?");
        else {
            double g;
            GR_TRY(gr_rt_generic_dirty(rep, seg));
            GR_TRY(timed(s, p, rep, seg, k, &g));
            e.x.replay_us[AP_GENERIC] = (float)g;
            e.x.setup_us[AP_GENERIC] = (float)(rs->record_clock_us + rs->instantiate_clock_us);
        }
    }
    e.persist = true;
    return gr_vec_push(&s->ap->e, e);
}

/* ==== deciding ====================================================================================== */
/* R for entry e: the observed calls per binding with e's prior (the comment at the top) */
static double ratio_of(const struct gr_rt_autopol *ap, const ap_entry *e) {
    return (AP_PRIOR_WEIGHT * e->prior + (double)ap->calls) / (AP_PRIOR_WEIGHT + (double)ap->seen);
}

/* Update is scored only where exact's graphs do not fit graph_memory_mb when the segment calls a
 * library (cuBLASLt): an exec updated from another binding's capture replayed the library's
 * kernels 1.5-1.7x slower than that binding's own exec on the H100 (GPT-2 bf16, batch 8 seq 128
 * after batch 1 seq 128: 1.07 against 0.77 ms of GPU time, the same kernels by name;
 * bench/realsize/2026-11-24-h100-session9), which the measurement at the segment's first binding
 * (its own exec, one update of its own graph) cannot see; where memory is short, the shared exec
 * is still what bounds it. */
static void score(gr_session_t s, ap_entry *e, double binding_bytes, double ratio) {
    const struct gr_rt_autopol *ap = s->ap;
    gr_rt_ap_decision *x = &e->x;
    double graphs[GR_AP_N] = {ap->bindings, 1, ap->buckets};
    int best = -1;
    static const int order[GR_AP_N] = {AP_UPDATE, AP_GENERIC, AP_EXACT}; /* ties: fewer graphs */
    bool exact_fits = !s->graph_budget || graphs[AP_EXACT] * binding_bytes <= (double)s->graph_budget;
    for (int i = 0; i < GR_AP_N; i++) {
        int c = order[i];
        if (x->replay_us[c] < 0) continue;
        bool fits = !s->graph_budget || graphs[c] * binding_bytes <= (double)s->graph_budget;
        if (c == AP_UPDATE && e->libcall && exact_fits && x->replay_us[AP_EXACT] >= 0) {
            x->per_call_us[c] = -1;
            continue;
        }
        /* graphs made per call: one per binding (exact; update records one and applies it) or
         * per bucket (generic), over `ratio` calls each; every call when evicted */
        double per_call = c == AP_UPDATE ? 1.0 / ratio : fits ? graphs[c] / (ap->bindings * ratio) : 1.0;
        x->per_call_us[c] = (float)(x->replay_us[c] + x->setup_us[c] * per_call);
        if (best < 0 || x->per_call_us[c] < x->per_call_us[best]) best = c;
    }
    x->policy = best < 0 ? GR_SHAPES_EXACT : ap_policy[best];
    x->ratio = (float)ratio;
}

gr_status gr_rt_autopol_decide(gr_session_t s, gr_rt_plan *p) {
    if (!s->autopol) return GR_OK;
    bool pending = false;
    double binding_bytes = 0;
    for (int seg = 0; seg < p->segs.len; seg++) {
        ap_entry *e = p->segs.data[seg].graphable ? find(s, seg, gr_rt_segment_hash(p, seg)) : NULL;
        if (!e) continue;
        binding_bytes += (double)e->x.bytes;
        pending |= e->x.policy < 0;
    }
    for (int seg = 0; pending && seg < p->segs.len; seg++) {
        ap_entry *e = p->segs.data[seg].graphable ? find(s, seg, gr_rt_segment_hash(p, seg)) : NULL;
        if (!e || e->x.policy >= 0) continue;
        score(s, e, binding_bytes, ratio_of(s->ap, e));
        e->decided_call = s->ap->calls;
        s->autopol_measured++;
        if (s->opt.verbose)
            fprintf(stderr, "graft: shape policy auto: segment %d: %s (per call: exact %.2f, update %.2f, generic %.2f us)\n", seg,
                    gr_shape_policy_name(e->x.policy), e->x.per_call_us[AP_EXACT], e->x.per_call_us[AP_UPDATE],
                    e->x.per_call_us[AP_GENERIC]);
        gr_rt_ap_decision x = e->x;
        /* the graphs made only to measure go: p's own when it runs its bucket's (generic), the
         * bucket's when it does not; update: p's own exec becomes the position's shared one */
        if (x.policy == GR_SHAPES_GENERIC && !gr_rt_generic_is_bucket(s, p) && p->seg_state[seg].state == GR_SEG_CAPTURED)
            gr_rt_segment_recapture(s, p, seg);
        for (gr_rt_plan *q = s->plans; x.policy != GR_SHAPES_GENERIC && e->rep_serial && q; q = q->next)
            if (q->serial == e->rep_serial && q != p && seg < q->segs.len && q->seg_state[seg].state == GR_SEG_CAPTURED)
                gr_rt_segment_recapture(s, q, seg);
        if (x.policy == GR_SHAPES_UPDATE && p->seg_state[seg].state == GR_SEG_CAPTURED) GR_TRY(gr_rt_update_adopt(s, p, seg));
        if (e->persist) GR_TRY(gr_rt_decisions_record_policy(s, &x, true));
    }
    return GR_OK;
}

/* ==== the adaptive rule =============================================================================== */
/* Whether binding hash h was seen before; remembers it (a full or unallocatable set: false, it
 * counts as new). */
static bool seen_before(struct gr_rt_autopol *ap, uint64_t h) {
    h = h ? h : 1;
    if (2 * (ap->set_len + 1) > ap->set_cap && ap->set_cap < AP_SEEN_MAX) {
        int cap = ap->set_cap ? 2 * ap->set_cap : 64;
        uint64_t *grown = gr_calloc((size_t)cap, sizeof *grown);
        if (grown) {
            for (int i = 0; i < ap->set_cap; i++) {
                uint64_t k = ap->set[i];
                if (!k) continue;
                size_t j = (size_t)(k * 0x9e3779b97f4a7c15ull >> 20) & (size_t)(cap - 1);
                while (grown[j]) j = (j + 1) & (size_t)(cap - 1);
                grown[j] = k;
            }
            gr_free(ap->set, sizeof(uint64_t) * (size_t)ap->set_cap);
            ap->set = grown;
            ap->set_cap = cap;
        }
    }
    if (!ap->set_cap) return false;
    size_t j = (size_t)(h * 0x9e3779b97f4a7c15ull >> 20) & (size_t)(ap->set_cap - 1);
    while (ap->set[j]) {
        if (ap->set[j] == h) return true;
        j = (j + 1) & (size_t)(ap->set_cap - 1);
    }
    if (2 * (ap->set_len + 1) > ap->set_cap) return false; /* full: not remembered */
    ap->set[j] = h;
    ap->set_len++;
    return false;
}

void gr_rt_autopol_count(gr_session_t s, const gr_rt_plan *p) {
    if (!s->autopol) return;
    s->ap->calls++;
    if (!seen_before(s->ap, gr_rt_binding_hash(p))) s->ap->seen++;
}

/* Segment e's graphs that its new policy does not run go: exact keeps each binding's own exec,
 * update the position's shared one, generic the buckets' own; the new policy captures the rest
 * as it runs (under graph_memory_mb's LRU). Update's shared exec goes when nothing uses it. */
static gr_status switch_policy(gr_session_t s, const ap_entry *e, int old) {
    int now = e->x.policy, seg = e->x.seg;
    for (gr_rt_plan *q = s->plans; q; q = q->next) {
        if (seg >= q->segs.len || !q->segs.data[seg].graphable || !q->seg_state[seg].exec) continue;
        if (gr_rt_segment_hash(q, seg) != e->x.seg_hash) continue;
        bool shared = q->seg_state[seg].exec_shared;
        bool keep = now == GR_SHAPES_EXACT    ? !shared
                    : now == GR_SHAPES_UPDATE ? shared
                                              : !shared && gr_rt_generic_is_bucket(s, q);
        if (keep) continue;
        if (now == GR_SHAPES_UPDATE) GR_TRY(gr_rt_update_adopt(s, q, seg)); /* the first one's exec becomes the position's */
        else gr_rt_segment_recapture(s, q, seg);
    }
    if (old == GR_SHAPES_UPDATE) gr_rt_update_release(s, seg);
    return GR_OK;
}

gr_status gr_rt_autopol_revise(gr_session_t s) {
    if (!s->autopol || !s->ap->seen) return GR_OK;
    struct gr_rt_autopol *ap = s->ap;
    double observed = (double)ap->calls / (double)ap->seen;
    if (!ap->revised_ratio) ap->revised_ratio = 1, ap->next_revision = 2;
    if (ap->calls < ap->next_revision && observed < ap->revised_ratio * AP_REVISE_STEP && observed * AP_REVISE_STEP > ap->revised_ratio)
        return GR_OK;
    ap->next_revision = 2 * ap->calls;
    ap->revised_ratio = observed;
    ap->revisions++;
    /* a binding's graph bytes: per segment position, the largest measured there */
    double binding_bytes = 0;
    for (int i = 0; i < ap->e.len; i++) {
        const ap_entry *e = &ap->e.data[i];
        bool largest = true;
        for (int j = 0; j < ap->e.len && largest; j++)
            if (j != i && ap->e.data[j].x.seg == e->x.seg && (ap->e.data[j].x.bytes > e->x.bytes || (ap->e.data[j].x.bytes == e->x.bytes && j < i)))
                largest = false;
        if (largest) binding_bytes += (double)e->x.bytes;
    }
    bool drained = false, revised = false;
    for (int i = 0; i < ap->e.len; i++) {
        ap_entry *e = &ap->e.data[i];
        if (e->x.policy < 0 || !e->persist) continue; /* undecided, or nothing measured */
        int old = e->x.policy;
        score(s, e, binding_bytes, ratio_of(ap, e));
        revised = true;
        if (e->x.policy != old) {
            if (!drained) GR_TRY(gr_dev_stream_sync(s->dev, s->stream)); /* no graph goes while a launch may use it */
            drained = true;
            GR_TRY(switch_policy(s, e, old));
            e->prev_policy = old;
            e->x.changes++;
            e->x.changed_at_call = ap->calls > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)ap->calls;
            ap->switches++;
            if (s->opt.verbose)
                fprintf(stderr, "graft: shape policy auto: segment %d: %s -> %s at call %ld (%.2f calls per binding)\n", e->x.seg,
                        gr_shape_policy_name(old), gr_shape_policy_name(e->x.policy), ap->calls, e->x.ratio);
        }
        GR_TRY(gr_rt_decisions_record_policy(s, &e->x, false));
    }
    return revised ? gr_rt_decisions_save(s) : GR_OK;
}

/* ==== running ======================================================================================= */
gr_status gr_rt_autopol_run_segment(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg) {
    if (!p->segs.data[seg].graphable) return run_own(s, p, seg);
    ap_entry *e;
    GR_TRY(lookup(s, p, seg, &e));
    if (!e) return measure(s, p, rep, seg);
    if (e->x.policy == GR_SHAPES_GENERIC && rep) return gr_rt_generic_run_segment(s, p, rep, seg);
    return run_own(s, p, seg);
}

gr_status gr_rt_run_segment(gr_session_t s, gr_rt_plan *p, gr_rt_plan *rep, int seg) {
    if (s->opt.mode == GR_MODE_EAGER) return gr_rt_segment_run_eager(s, p, seg);
    if (s->autopol) return gr_rt_autopol_run_segment(s, p, rep, seg);
    if (s->opt.shape_policy == GR_SHAPES_GENERIC) return gr_rt_generic_run_segment(s, p, rep, seg);
    return p->segs.data[seg].graphable ? gr_rt_segment_run_graph(s, p, seg) : gr_rt_segment_run_eager(s, p, seg);
}

/* ==== explain ======================================================================================= */
void gr_rt_autopol_explain(gr_session_t s, const gr_rt_plan *p, int seg, gr_strbuf *sb) {
    if (!s->autopol) return;
    const ap_entry *e = find(s, seg, gr_rt_segment_hash(p, seg));
    if (!e) {
        gr_sb_puts(sb, "  shape policy auto: not measured yet\n");
        return;
    }
    if (e->x.policy < 0) {
        gr_sb_puts(sb, "  shape policy auto: measured, not decided yet\n");
        return;
    }
    gr_sb_printf(sb, "  shape policy auto: %s (%s); per call:", gr_shape_policy_name(e->x.policy),
                 e->x.from_file ? "from the decisions file" : e->persist ? "measured in this session" : "not measured");
    static const char *const names[GR_AP_N] = {"exact", "update", "generic"};
    for (int c = 0; c < GR_AP_N; c++) {
        if (e->x.per_call_us[c] < 0) gr_sb_printf(sb, " %s -", names[c]);
        else
            gr_sb_printf(sb, " %s %.2f us (replay %.2f, new graph %.2f)", names[c], e->x.per_call_us[c], e->x.replay_us[c],
                         e->x.setup_us[c]);
        gr_sb_puts(sb, c + 1 < GR_AP_N ? "," : "");
    }
    gr_sb_printf(sb, "; graph %llu bytes at the measured binding\n", (unsigned long long)e->x.bytes);
    if (!e->persist) { /* nothing measured: the graph manager's choice, never revised */
        if (e->why[0]) gr_sb_printf(sb, "    %s\n", e->why);
        return;
    }
    gr_sb_printf(sb, "    chosen for %.2f calls per binding (prior %.2f from %s, with this session's %ld calls over %ld bindings); ",
                 e->x.ratio, e->prior, e->decided_call < 0 ? "the decisions file" : "the default assumption", s->ap->calls, s->ap->seen);
    if (e->prev_policy >= 0)
        gr_sb_printf(sb, "last changed at call %u of this session (from %s; %u changes in all)\n", e->x.changed_at_call,
                     gr_shape_policy_name(e->prev_policy), e->x.changes);
    else if (e->x.changes)
        gr_sb_printf(sb, "last changed at call %u of the process that saved it (%u changes in all)\n", e->x.changed_at_call, e->x.changes);
    else if (e->decided_call >= 0) gr_sb_printf(sb, "never changed (decided at call %ld of this session)\n", e->decided_call + 1);
    else gr_sb_puts(sb, "never changed\n");
    if (e->why[0]) gr_sb_printf(sb, "    %s\n", e->why);
}

void gr_rt_autopol_explain_session(gr_session_t s, gr_strbuf *sb) {
    if (!s->autopol) return;
    const struct gr_rt_autopol *ap = s->ap;
    gr_sb_printf(sb, "  calls per binding seen: %.2f (%ld calls over %ld bindings); decisions revised %ld times from their "
                     "measured numbers (when the calls double or the ratio moves by %.2fx), %ld changes of policy\n",
                 ap->seen ? (double)ap->calls / (double)ap->seen : 0.0, ap->calls, ap->seen, ap->revisions, AP_REVISE_STEP, ap->switches);
}
