/* runtime/decisions — mode auto's per-segment choice (eager or graph), kept across processes
 * (issue 11 item 4, GraCE's selective graphs made persistent): a second process on the same
 * device, driver and model takes each segment's choice from the file and skips the timed
 * runs that made it.
 *
 * One file per (device name, which on CUDA carries the driver and CUDA versions; model hash):
 *   <cache_dir>/decisions/<16 hex digits of that key>.bin
 * framed by util/cache-file.h (magic, version, kind, key, length, checksum; written by
 * rename, so a reader never sees half a file). The payload, little-endian:
 *   u32 entry count, u32 policy entry count, then per entry 32 bytes:
 *   u64 binding hash (the symbols' values), u64 segment hash (its steps' kinds, kernel names
 *   and structures), u32 segment index, u32 1 = graph / 0 = eager, f32 eager µs, f32 graph µs;
 *   then per policy entry 64 bytes (shape policy auto's per-segment choice, autopol.c; one per
 *   segment index and structure, whatever the binding):
 *   u64 segment hash, u32 segment index, u32 policy (gr_shape_policy: exact, update or generic),
 *   u64 graph bytes, f32 replay µs x3, f32 setup µs x3, f32 per-call µs x3 (exact, update,
 *   generic; negative: not a candidate), f32 the calls per binding the policy was last chosen for
 *   (>= 1: the next process starts from it), u32 changes of the choice, u32 the call of the saving
 *   process when it last changed (0: never), u32 0; 80 bytes.
 * (Layout "DEC3"; a "DEC2" or "DEC1" file of an older graft is another layout: ignored with a warning.)
 * A file that fails its checks (truncated, corrupt, another key or layout) is ignored with a
 * warning and rewritten by the next decision; an entry whose segment hash differs from the
 * plan's (the compiler changed the segment) is stale: ignored with a warning, re-measured,
 * replaced. Two processes deciding at once: the last writer's table wins (a lost entry is
 * measured again by a later process, never wrong).
 */
#include "runtime/runtime-impl.h"
#include "util/cache-file.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DECISIONS_KIND 0x33434544u /* "DEC3": this payload layout */
#define ENTRY_BYTES 32u
#define POLICY_BYTES 80u
#define MAX_ENTRIES (1 << 20)

typedef struct {
    uint64_t binding;
    uint64_t seg_hash;
    uint32_t seg;
    uint32_t graph;
    float eager_us, graph_us;
    bool from_file; /* read from the file (else made by this session); not stored */
} decision;

struct gr_rt_decisions {
    char *path;        /* NULL: not persisted (note says why) */
    uint64_t key;
    GR_VEC(decision) entries;
    GR_VEC(gr_rt_ap_decision) policies; /* shape policy auto (autopol.c) */
    char note[768];    /* what happened to the file: for explain and verbose */
};

/* ==== hashing ======================================================================================= */
/* A multiply-xorshift mix per 8-byte word in four independent lanes (one lane's chain of dependent
 * multiplies bounds it by latency: about 0.4 s for a GPT-2's 0.5 GB of weights on the H100 host,
 * measured as shape policy auto's extra load time over exact, bench/load_time.py; four lanes let
 * the core overlap them), the lanes folded together, the tail bytes by FNV. */
static uint64_t mix(uint64_t h, uint64_t w) {
    h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 29);
}

static uint64_t hash_words(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    size_t words = n / 8, i = 0;
    uint64_t l[4] = {h, h ^ 0x243f6a8885a308d3ull, h ^ 0x13198a2e03707344ull, h ^ 0xa4093822299f31d0ull};
    for (; i + 4 <= words; i += 4)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + (i + (size_t)k) * 8, 8);
            l[k] = mix(l[k], w);
        }
    for (; i < words; i++) {
        uint64_t w;
        memcpy(&w, b + i * 8, 8);
        l[0] = mix(l[0], w);
    }
    h = mix(mix(mix(l[0], l[1]), l[2]), l[3]);
    return gr_hash_bytes(b + words * 8, n % 8, h);
}

/* The model: its structure as .gir text (constants over 16 elements elided) and the bytes of
 * every constant, so new weights in the same structure are another model. */
static gr_status model_hash(const gr_graph *g, uint64_t *out) {
    char *text = NULL;
    GR_TRY(gr_gir_print(g, 16, GR_GIR_ELIDE, &text));
    uint64_t h = gr_hash_bytes(text, strlen(text), 0x6772616674ull);
    gr_strfree(text);
    for (int v = 0; v < g->values.len; v++) {
        const gr_ir_value *val = &g->values.data[v];
        if (val->kind != GR_VAL_CONST || !val->data) continue;
        h = hash_words(val->data, val->nbytes, h ^ (uint64_t)v);
    }
    *out = h;
    return GR_OK;
}

uint64_t gr_rt_binding_hash(const gr_rt_plan *p) {
    return gr_hash_bytes(p->sym_values, sizeof(int64_t) * (size_t)p->n_syms, 0x62696e64ull);
}

/* Kept in the segment's state once computed (a plan's steps never change): hashing every kernel's
 * structure took 46 us per call for GPT-2's 238-step segment on the dev machine, and shape policy
 * auto looks its segments up by it on every run (and again in the queued-run check). */
uint64_t gr_rt_segment_hash(const gr_rt_plan *p, int seg) {
    gr_rt_segment *ss = p->seg_state ? &p->seg_state[seg] : NULL;
    if (ss && ss->hash_known) return ss->hash;
    const gr_segment *sg = &p->segs.data[seg];
    uint64_t h = gr_hash_bytes(&sg->n_steps, sizeof sg->n_steps, 0x736567ull);
    for (int i = sg->first_step; i < sg->first_step + sg->n_steps; i++) {
        const gr_step *st = &p->steps.data[i];
        uint32_t kind = (uint32_t)st->kind;
        h = gr_hash_bytes(&kind, sizeof kind, h);
        if (st->kind == GR_STEP_KERNEL) {
            uint64_t k = gr_kernel_structure_hash(st->kernel);
            h = gr_hash_bytes(&k, sizeof k, h);
            h = gr_hash_bytes(st->kernel->name, strlen(st->kernel->name), h);
        } else if (st->kind == GR_STEP_LIBCALL) {
            h = gr_hash_bytes(st->call.name, strlen(st->call.name), h);
        }
    }
    if (ss) ss->hash = h, ss->hash_known = true;
    return h;
}

/* ==== the file ====================================================================================== */
static void put_f32(unsigned char *p, float f) {
    uint32_t v;
    memcpy(&v, &f, 4);
    gr_le_put_u32(p, v);
}
static float get_f32(const unsigned char *p) {
    uint32_t v = gr_le_get_u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static void warn(gr_session_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(gr_session_t s, const char *fmt, ...) {
    struct gr_rt_decisions *d = s->decisions;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t used = strlen(d->note);
    snprintf(d->note + used, sizeof d->note - used, "%swarning: %s", used ? "; " : "", msg);
    if (s->opt.verbose) fprintf(stderr, "graft: warning: %s\n", msg);
}

/* Parses a payload into d->entries and d->policies; false (both empty) when it is malformed. */
static bool parse(struct gr_rt_decisions *d, const unsigned char *b, size_t n, gr_status *st, char *why, size_t why_n) {
    *st = GR_OK;
    if (n < 8) return snprintf(why, why_n, "payload of %zu bytes, shorter than its 8-byte count", n), false;
    uint32_t count = gr_le_get_u32(b), n_pol = gr_le_get_u32(b + 4);
    if (count > MAX_ENTRIES || n_pol > MAX_ENTRIES || n != 8 + (size_t)count * ENTRY_BYTES + (size_t)n_pol * POLICY_BYTES)
        return snprintf(why, why_n, "%u + %u entries do not match a payload of %zu bytes", count, n_pol, n), false;
    if ((*st = gr_vec_reserve(&d->entries, (int)count)) != GR_OK) return false;
    if ((*st = gr_vec_reserve(&d->policies, (int)n_pol)) != GR_OK) return false;
    for (uint32_t i = 0; i < count; i++) {
        const unsigned char *e = b + 8 + (size_t)i * ENTRY_BYTES;
        decision x = {.binding = gr_le_get_u64(e), .seg_hash = gr_le_get_u64(e + 8), .seg = gr_le_get_u32(e + 16), .graph = gr_le_get_u32(e + 20),
                      .eager_us = get_f32(e + 24), .graph_us = get_f32(e + 28), .from_file = true};
        if (x.graph > 1 || !(x.eager_us >= 0) || !(x.graph_us >= 0)) {
            d->entries.len = 0;
            return snprintf(why, why_n, "entry %u is malformed", i), false;
        }
        d->entries.data[d->entries.len++] = x;
    }
    const unsigned char *pol = b + 8 + (size_t)count * ENTRY_BYTES;
    for (uint32_t i = 0; i < n_pol; i++) {
        const unsigned char *e = pol + (size_t)i * POLICY_BYTES;
        gr_rt_ap_decision x = {.seg_hash = gr_le_get_u64(e), .seg = (int)gr_le_get_u32(e + 8), .policy = (int)gr_le_get_u32(e + 12),
                               .bytes = gr_le_get_u64(e + 16), .from_file = true};
        x.ratio = get_f32(e + 60);
        x.changes = gr_le_get_u32(e + 64);
        x.changed_at_call = gr_le_get_u32(e + 68);
        bool ok = gr_le_get_u32(e + 8) < (uint32_t)INT32_MAX && gr_le_get_u32(e + 72) == 0 && gr_le_get_u32(e + 76) == 0 &&
                  x.ratio >= 1.0f && x.ratio < 1e9f &&
                  (x.policy == GR_SHAPES_EXACT || x.policy == GR_SHAPES_UPDATE || x.policy == GR_SHAPES_GENERIC);
        for (int c = 0; c < GR_AP_N; c++) {
            x.replay_us[c] = get_f32(e + 24 + 4 * c);
            x.setup_us[c] = get_f32(e + 36 + 4 * c);
            x.per_call_us[c] = get_f32(e + 48 + 4 * c);
            /* a NaN or an infinity is no measurement */
            ok = ok && x.replay_us[c] == x.replay_us[c] && x.setup_us[c] == x.setup_us[c] && x.per_call_us[c] == x.per_call_us[c] &&
                 x.replay_us[c] < 1e30f && x.setup_us[c] < 1e30f && x.per_call_us[c] < 1e30f;
        }
        if (!ok) {
            d->entries.len = d->policies.len = 0;
            return snprintf(why, why_n, "shape policy entry %u is malformed", i), false;
        }
        d->policies.data[d->policies.len++] = x;
    }
    return true;
}

static gr_status write_file(gr_session_t s) {
    struct gr_rt_decisions *d = s->decisions;
    size_t n = 8 + (size_t)d->entries.len * ENTRY_BYTES + (size_t)d->policies.len * POLICY_BYTES;
    unsigned char *b = gr_calloc(n, 1);
    if (!b) return GR_ERR_NOMEM;
    gr_le_put_u32(b, (uint32_t)d->entries.len);
    gr_le_put_u32(b + 4, (uint32_t)d->policies.len);
    for (int i = 0; i < d->entries.len; i++) {
        const decision *x = &d->entries.data[i];
        unsigned char *e = b + 8 + (size_t)i * ENTRY_BYTES;
        gr_le_put_u64(e, x->binding);
        gr_le_put_u64(e + 8, x->seg_hash);
        gr_le_put_u32(e + 16, x->seg);
        gr_le_put_u32(e + 20, x->graph);
        put_f32(e + 24, x->eager_us);
        put_f32(e + 28, x->graph_us);
    }
    unsigned char *pol = b + 8 + (size_t)d->entries.len * ENTRY_BYTES;
    for (int i = 0; i < d->policies.len; i++) {
        const gr_rt_ap_decision *x = &d->policies.data[i];
        unsigned char *e = pol + (size_t)i * POLICY_BYTES;
        gr_le_put_u64(e, x->seg_hash);
        gr_le_put_u32(e + 8, (uint32_t)x->seg);
        gr_le_put_u32(e + 12, (uint32_t)x->policy);
        gr_le_put_u64(e + 16, x->bytes);
        for (int c = 0; c < GR_AP_N; c++) {
            put_f32(e + 24 + 4 * c, x->replay_us[c]);
            put_f32(e + 36 + 4 * c, x->setup_us[c]);
            put_f32(e + 48 + 4 * c, x->per_call_us[c]);
        }
        put_f32(e + 60, x->ratio);
        gr_le_put_u32(e + 64, x->changes);
        gr_le_put_u32(e + 68, x->changed_at_call);
    }
    gr_status st = gr_cache_file_write(d->path, DECISIONS_KIND, d->key, b, n);
    gr_free(b, n);
    if (st == GR_ERR_NOMEM) return st;
    if (st != GR_OK) {
        warn(s, "cannot save mode auto's decisions: %s", gr_last_error());
        gr_error_clear();
    }
    return GR_OK;
}

/* ==== API (runtime-impl.h) ========================================================================== */
static char *default_dir(void) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0]) return gr_sprintf("%s/graft", xdg);
    const char *home = getenv("HOME");
    if (home && home[0]) return gr_sprintf("%s/.cache/graft", home);
    return NULL;
}

gr_status gr_rt_decisions_open(gr_session_t s) {
    struct gr_rt_decisions *d = gr_calloc(1, sizeof *d);
    if (!d) return GR_ERR_NOMEM;
    s->decisions = d;
    if (s->opt.no_persist_decisions) {
        snprintf(d->note, sizeof d->note, "not persisted (no_persist_decisions)");
        return GR_OK;
    }
    char *dir = NULL;
    if (s->opt.cache_dir && s->opt.cache_dir[0]) dir = gr_strdup(s->opt.cache_dir);
    else if (s->dev->kind == GR_DEVICE_SIM) {
        /* simulated timings are the same every run, and tests must not share state through $HOME */
        snprintf(d->note, sizeof d->note, "not persisted: the simulator keeps decisions only in a cache_dir given explicitly");
        return GR_OK;
    } else {
        dir = default_dir();
        if (!dir) {
            snprintf(d->note, sizeof d->note, "not persisted: no cache_dir, $XDG_CACHE_HOME or $HOME");
            return GR_OK;
        }
    }
    if (!dir) return GR_ERR_NOMEM;
    uint64_t mh = 0;
    gr_status st = model_hash(s->graph, &mh);
    if (st != GR_OK) {
        gr_strfree(dir);
        return st;
    }
    const char *dev = gr_dev_name(s->dev);
    d->key = gr_hash_bytes(dev, strlen(dev), mh);
    d->path = gr_sprintf("%s/decisions/%016llx.bin", dir, (unsigned long long)d->key);
    gr_strfree(dir);
    if (!d->path) return GR_ERR_NOMEM;
    void *payload = NULL;
    size_t n = 0;
    st = gr_cache_file_read(d->path, DECISIONS_KIND, d->key, 8 + (size_t)MAX_ENTRIES * (ENTRY_BYTES + POLICY_BYTES), &payload, &n);
    if (st == GR_ERR_NOMEM) return st;
    if (st == GR_ERR_NOT_FOUND) {
        gr_error_clear();
        snprintf(d->note, sizeof d->note, "no decisions saved yet for this device and model");
        return GR_OK;
    }
    if (st != GR_OK) {
        warn(s, "ignoring the decisions file (segments are timed again): %s", gr_last_error());
        gr_error_clear();
        return GR_OK;
    }
    char why[160];
    bool ok = parse(d, payload, n, &st, why, sizeof why);
    gr_cache_file_free(payload, n);
    if (st != GR_OK) return st;
    if (!ok) warn(s, "ignoring the decisions file %s (segments are timed again): %s", d->path, why);
    else snprintf(d->note, sizeof d->note, "%d decisions and %d shape policy decisions read", d->entries.len, d->policies.len);
    return GR_OK;
}

void gr_rt_decisions_close(gr_session_t s) {
    struct gr_rt_decisions *d = s->decisions;
    if (!d) return;
    gr_strfree(d->path);
    gr_vec_free(&d->entries);
    gr_vec_free(&d->policies);
    gr_free(d, sizeof *d);
    s->decisions = NULL;
}

static int find(const struct gr_rt_decisions *d, uint64_t binding, int seg) {
    for (int i = 0; i < d->entries.len; i++)
        if (d->entries.data[i].binding == binding && d->entries.data[i].seg == (uint32_t)seg) return i;
    return -1;
}

gr_status gr_rt_decisions_apply(gr_session_t s, gr_rt_plan *p) {
    struct gr_rt_decisions *d = s->decisions;
    if (!d || !d->entries.len || s->opt.mode != GR_MODE_AUTO) return GR_OK;
    uint64_t b = gr_rt_binding_hash(p);
    for (int seg = 0; seg < p->segs.len; seg++) {
        if (!p->segs.data[seg].graphable) continue;
        int i = find(d, b, seg);
        if (i < 0) continue;
        const decision *x = &d->entries.data[i];
        if (x->seg_hash != gr_rt_segment_hash(p, seg)) {
            if (!x->from_file) continue; /* a binding's segments do not change within a session */
            warn(s, "decision for segment %d of this binding is stale (the segment changed since it was saved): timed again", seg);
            continue;
        }
        gr_rt_segment *st = &p->seg_state[seg];
        for (int k = 0; k < GR_SCG_SAMPLES; k++) st->eager_us[k] = x->eager_us, st->graph_us[k] = x->graph_us;
        st->n_eager_samples = st->n_graph_samples = GR_SCG_SAMPLES;
        st->decided = true;
        st->decision_loaded = x->from_file;
        st->decision_kept = !x->from_file;
        if (!x->graph) st->state = GR_SEG_CHOSE_EAGER;
        if (x->from_file) s->decisions_loaded++;
    }
    return GR_OK;
}

gr_status gr_rt_decisions_record(gr_session_t s, gr_rt_plan *p, int seg, bool graph, double eager_us, double graph_us) {
    struct gr_rt_decisions *d = s->decisions;
    if (!d) return GR_OK;
    decision x = {.binding = gr_rt_binding_hash(p), .seg_hash = gr_rt_segment_hash(p, seg), .seg = (uint32_t)seg, .graph = graph,
                  .eager_us = (float)eager_us, .graph_us = (float)graph_us};
    int i = find(d, x.binding, seg);
    if (i >= 0) d->entries.data[i] = x;
    else if (d->entries.len < MAX_ENTRIES) GR_TRY(gr_vec_push(&d->entries, x));
    else return GR_OK; /* full: this decision stays in its plan */
    return d->path ? write_file(s) : GR_OK;
}

const char *gr_rt_decisions_path(gr_session_t s) { return s->decisions && s->decisions->path ? s->decisions->path : ""; }
const char *gr_rt_decisions_note(gr_session_t s) { return s->decisions ? s->decisions->note : ""; }

/* ==== shape policy auto (autopol.c) ================================================================= */
const gr_rt_ap_decision *gr_rt_decisions_find_policy(gr_session_t s, int seg, uint64_t seg_hash) {
    struct gr_rt_decisions *d = s->decisions;
    for (int i = 0; d && i < d->policies.len; i++)
        if (d->policies.data[i].seg == seg && d->policies.data[i].seg_hash == seg_hash) return &d->policies.data[i];
    return NULL;
}

gr_status gr_rt_decisions_save(gr_session_t s) { return s->decisions && s->decisions->path ? write_file(s) : GR_OK; }

gr_status gr_rt_decisions_record_policy(gr_session_t s, const gr_rt_ap_decision *x, bool save) {
    struct gr_rt_decisions *d = s->decisions;
    if (!d) return GR_OK;
    gr_rt_ap_decision y = *x;
    y.from_file = false;
    int i = -1;
    for (int k = 0; k < d->policies.len && i < 0; k++)
        if (d->policies.data[k].seg == x->seg && d->policies.data[k].seg_hash == x->seg_hash) i = k;
    if (i >= 0) d->policies.data[i] = y;
    else if (d->policies.len < MAX_ENTRIES) GR_TRY(gr_vec_push(&d->policies, y));
    else return GR_OK;
    return save && d->path ? write_file(s) : GR_OK;
}
