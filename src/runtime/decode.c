/* runtime/decode — the rewritten decode engine: one plan, one CUDA graph, every position.
 *
 * Built from a session whose model is a decoder step with a KV cache (state pairs): the
 * step graph is rewritten by gr_pass_decode_rewrite for seq 1 at a batch and a maximum
 * length, and run by a session of its own. Its state inputs are the cache buffers (max_len
 * positions, zero at first); every step writes the new keys and values into them in place,
 * so nothing is copied between steps and the shapes and addresses never change: in graph
 * mode the step is captured once and replayed for every token. Per step the caller gives
 * the token ids and the number of valid positions after the step (kv_len); the engine sets
 * position_ids (kv_len - 1) and the attention mask (ones over the valid positions) itself.
 *
 * Why a second session: the rewritten step is a different graph (other shapes, an extra
 * input), and a session is what compiles, places and replays a graph. It borrows nothing
 * from the first at run time; the weights are uploaded again (a known cost: twice the
 * weight memory while both live).
 *
 * The engine is checked before it is trusted (gr_decode_engine_verify): the caller runs a
 * prompt through it and through the per-length step, and the last logits must agree. A
 * model that derives positions from the cache length (instead of position_ids or the mask)
 * fails that check, and the caller keeps the per-length path. */
#include "runtime-impl.h"
#include <math.h>
#include <string.h>
#include <stdio.h>

struct gr_decode_engine {
    struct gr_session *s;          /* runs the rewritten graph */
    int64_t batch, max_len;
    int n_state;
    int *state_in, *state_axis; /* per state pair: its input in the rewritten graph, its cache axis */
    bool states_bound;          /* the state inputs are bound (zeros); a reset zeroes them on the device */
    int64_t vocab;
    int logits_out;         /* output index of logits */
    int ids_out;            /* output index of graft.next_ids (greedy on the device) */
    char *ids_name, *pos_name, *mask_name; /* the model's inputs in these roles (NULL: absent) */
    bool has_pos, has_mask; /* the host sets them every step (no device loop) */
    int64_t *ids, *pos, *mask; /* host staging: [batch], [batch], [batch * max_len] */
    uint8_t *fin0;             /* [batch] zeros: no row finished */
    /* the device loop (gr_pass_decode_device_loop): NULL loop_refused = available */
    char *loop_refused;
    bool looped;            /* the graph has the loop's nodes (even where the loop is refused at run time) */
    int in_stop, in_tokens, cont_out;
    int64_t *h_tokens, *h_stop; /* host buffers (page-locked where the device has them) */
    size_t h_tokens_bytes;
    gr_dgraph *loop_graph;  /* the WHILE graph of one step, captured on first use (graph mode) */
    gr_dexec *loop_exec;
    const struct gr_rt_plan *loop_plan; /* the plan it was captured from */
    long loop_launches, loop_captures;
    char *while_refused;    /* why the WHILE graph could not be captured (then the steps are enqueued) */
    /* sampling (the loop's token is the sample op): graft.sample_ints / graft.sample_floats */
    bool sample;
    int64_t sample_ints[3]; /* seed, first kv_len, top_k */
    float sample_floats[2]; /* temperature, top_p */
    /* beam search (beams > 1): graft.beam's fresh value and graft.beam_params (set_beam) */
    int64_t beams;
    int in_beam;
    int64_t *beam_init;
    size_t beam_init_bytes;
    int64_t beam_params[GR_BEAM_NPARAMS];
};

/* ---- which input is which ----------------------------------------------------------------
 * Token ids, position ids and the attention mask are found by name, then by role: a name
 * containing "mask" is the mask, one containing "position" (or starting "pos") the positions,
 * one containing "ids", "token" or "input" the token ids; a single input left over is the
 * token ids. Every input must be a state or one of these. */
static bool name_has(const char *name, const char *part) {
    size_t n = strlen(part);
    for (const char *p = name; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && (p[i] | 0x20) == part[i]) i++;
        if (i == n) return true;
    }
    return false;
}

typedef struct {
    int ids, pos, mask; /* input indices in the source graph, -1: absent */
} step_roles;

static gr_status find_roles(const gr_graph *g, int n_state, const int *state_in, const char *const *names, step_roles *r) {
    int *role[3] = {&r->ids, &r->pos, &r->mask};
    static const char *const what[3] = {"token ids", "position ids", "attention mask"};
    r->ids = r->pos = r->mask = -1;
    for (int k = 0; k < 3; k++) {
        if (!names || !names[k]) continue;
        for (int i = 0; i < g->inputs.len; i++)
            if (!strcmp(g->values.data[g->inputs.data[i]].name, names[k])) *role[k] = i;
        if (*role[k] < 0) return gr_error(GR_ERR_INVALID, "decode engine: the model has no input '%s' (%s)", names[k], what[k]);
    }
    int left = -1, n_left = 0;
    for (int i = 0; i < g->inputs.len; i++) {
        bool taken = i == r->ids || i == r->pos || i == r->mask;
        for (int k = 0; k < n_state && !taken; k++) taken = state_in[k] == i;
        if (taken) continue;
        const char *nm = g->values.data[g->inputs.data[i]].name;
        if (r->mask < 0 && name_has(nm, "mask")) r->mask = i;
        else if (r->pos < 0 && (name_has(nm, "position") || ((nm[0] | 0x20) == 'p' && (nm[1] | 0x20) == 'o' && (nm[2] | 0x20) == 's')))
            r->pos = i;
        else if (r->ids < 0 && (name_has(nm, "ids") || name_has(nm, "token") || name_has(nm, "input"))) r->ids = i;
        else left = i, n_left++;
    }
    if (r->ids < 0 && n_left == 1) r->ids = left, n_left = 0;
    if (r->ids < 0) {
        gr_strbuf sb;
        gr_sb_init(&sb);
        for (int i = 0; i < g->inputs.len; i++) gr_sb_printf(&sb, "%s'%s'", i ? ", " : "", g->values.data[g->inputs.data[i]].name);
        gr_status st = gr_error(GR_ERR_UNSUPPORTED,
                                "decode engine: cannot tell which input holds the token ids (none is named like input_ids or "
                                "tokens, and more than one input is left besides the cache; inputs: %s): name it",
                                sb.data ? sb.data : "none");
        gr_sb_free(&sb);
        return st;
    }
    if (n_left > 0)
        return gr_error(GR_ERR_UNSUPPORTED,
                        "decode engine: input '%s' is neither a cache state nor input_ids, position_ids or attention_mask (by "
                        "name: ..ids/token/input, ..position, ..mask)",
                        g->values.data[g->inputs.data[left]].name);
    return GR_OK;
}

static gr_status bind_dims(const gr_graph *g, int in, const int64_t *dims, int64_t *sv, const char *what) {
    const gr_ir_value *v = &g->values.data[g->inputs.data[in]];
    for (int d = 0; d < v->ndim; d++) {
        if (!gr_dx_is_sym(v->dims[d])) continue;
        int32_t sym = gr_dx_as_symbol(g, v->dims[d]);
        if (sym < 0) continue;
        if (sv[sym] >= 0 && sv[sym] != dims[d])
            return gr_error(GR_ERR_UNSUPPORTED, "decode engine: symbol '%s' would be %lld from input '%s' but %lld elsewhere (%s)",
                            g->syms.data[sym].name, (long long)dims[d], v->name, (long long)sv[sym], what);
        sv[sym] = dims[d];
    }
    return GR_OK;
}

/* Symbol values of the step at cache length `past` (seq 1, batch b). */
static gr_status step_binding(const gr_graph *g, int n_state, const int *state_in, const int *state_axis, const step_roles *r,
                              int64_t b, int64_t past, int64_t *sv) {
    for (int i = 0; i < g->syms.len; i++) sv[i] = -1;
    for (int i = 0; i < g->inputs.len; i++) {
        const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
        int64_t dims[GR_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) dims[d] = v->dims[d].size;
        int st_idx = -1;
        for (int k = 0; k < n_state; k++)
            if (state_in[k] == i) st_idx = k;
        if (st_idx >= 0) {
            if (gr_dx_is_sym(v->dims[0])) dims[0] = b;
            dims[state_axis[st_idx]] = past;
        } else if (i == r->ids || i == r->pos) {
            if (v->ndim != 2)
                return gr_error(GR_ERR_UNSUPPORTED, "decode engine: %s input '%s' is not [batch, seq]", i == r->ids ? "token-ids" : "position",
                                v->name);
            dims[0] = b, dims[1] = 1;
        } else if (i == r->mask) {
            if (v->ndim != 2) return gr_error(GR_ERR_UNSUPPORTED, "decode engine: attention mask '%s' is not [batch, length]", v->name);
            dims[0] = b, dims[1] = past + 1;
        } else {
            return gr_error(GR_ERR_INTERNAL, "decode engine: input '%s' has no role", v->name);
        }
        for (int d = 0; d < v->ndim; d++)
            if (dims[d] < 0)
                return gr_error(GR_ERR_UNSUPPORTED, "decode engine: dim %d of input '%s' is not known", d, v->name);
        GR_TRY(bind_dims(g, i, dims, sv, "single-token step"));
    }
    for (int i = 0; i < g->syms.len; i++)
        if (sv[i] < 0)
            return gr_error(GR_ERR_UNSUPPORTED, "decode engine: symbol '%s' is not bound by the step's inputs", g->syms.data[i].name);
    return GR_OK;
}

static void loop_release(gr_decode_engine *e) {
    gr_device *d = e->s ? e->s->dev : NULL;
    if (!d) return;
    gr_dev_exec_destroy(d, e->loop_exec);
    gr_dev_graph_destroy(d, e->loop_graph);
    e->loop_exec = NULL, e->loop_graph = NULL, e->loop_plan = NULL;
}

void gr_decode_engine_destroy(gr_decode_engine *e) {
    if (!e) return;
    loop_release(e);
    if (e->s && e->s->dev) {
        if (e->h_tokens) gr_dev_free(e->s->dev, e->h_tokens);
        if (e->h_stop) gr_dev_free(e->s->dev, e->h_stop);
    }
    gr_session_destroy(e->s);
    gr_free(e->ids, sizeof(int64_t) * (size_t)e->batch);
    gr_free(e->pos, sizeof(int64_t) * (size_t)e->batch);
    gr_free(e->mask, sizeof(int64_t) * (size_t)(e->batch * e->max_len));
    gr_free(e->fin0, (size_t)e->batch);
    gr_free(e->beam_init, e->beam_init_bytes);
    gr_free(e->state_in, sizeof(int) * (size_t)e->n_state);
    gr_free(e->state_axis, sizeof(int) * (size_t)e->n_state);
    gr_strfree(e->ids_name);
    gr_strfree(e->pos_name);
    gr_strfree(e->mask_name);
    gr_strfree(e->loop_refused);
    gr_strfree(e->while_refused);
    gr_free(e, sizeof *e);
}

static char *dup_name(const gr_graph *g, int input) {
    return input >= 0 ? gr_strdup(g->values.data[g->inputs.data[input]].name) : NULL;
}

/* greedy on the device without the loop: graft.next_ids = argmax over the vocabulary, so a greedy
 * step reads back batch ids instead of batch x vocab logits */
static gr_status add_argmax(gr_graph *rw) {
    int lo = -1;
    for (int i = 0; i < rw->outputs.len; i++)
        if (!strcmp(rw->values.data[rw->outputs.data[i]].name, "logits")) lo = rw->outputs.data[i];
    if (lo < 0 || rw->values.data[lo].ndim != 3) return GR_OK;
    gr_ir_attr a[3];
    memset(a, 0, sizeof a);
    a[0] = (gr_ir_attr){.name = "axis", .kind = GR_IR_ATTR_INT, .i = 2};
    a[1] = (gr_ir_attr){.name = "keepdims", .kind = GR_IR_ATTR_INT, .i = 0};
    a[2] = (gr_ir_attr){.name = "select_last_index", .kind = GR_IR_ATTR_INT, .i = 0};
    const char *names[1] = {"graft.next_ids"};
    int n;
    GR_TRY(gr_ir_add_node(rw, GR_OP_ARG_MAX, "graft.greedy", 1, &lo, 1, names, 3, a, &n));
    GR_TRY(gr_ir_infer_node(rw, n));
    return gr_ir_add_output(rw, rw->nodes.data[n].out[0]);
}

static int output_index(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->outputs.len; i++)
        if (g->values.data[g->outputs.data[i]].name && !strcmp(g->values.data[g->outputs.data[i]].name, name)) return i;
    return -1;
}

static int input_index(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->inputs.len; i++)
        if (!strcmp(g->values.data[g->inputs.data[i]].name, name)) return i;
    return -1;
}

gr_status gr_decode_engine_create(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                  const char *const *io_names, int64_t batch, int64_t max_len, gr_decode_engine **out) {
    return gr_decode_engine_create_ex(src, n_state, past, present, io_names, batch, max_len, false, out);
}

static gr_status engine_create(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                               const char *const *io_names, int64_t batch, int64_t max_len, bool sample, int64_t beams,
                               gr_decode_engine **out);

gr_status gr_decode_engine_create_ex(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                     const char *const *io_names, int64_t batch, int64_t max_len, bool sample,
                                     gr_decode_engine **out) {
    return engine_create(src, n_state, past, present, io_names, batch, max_len, sample, 1, out);
}

gr_status gr_decode_engine_create_beam(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                       const char *const *io_names, int64_t batch_rows, int64_t max_len, int64_t beams,
                                       gr_decode_engine **out) {
    *out = NULL;
    if (beams < 2 || beams > GR_BEAM_DEVICE_MAX_BEAMS || batch_rows % beams != 0)
        return gr_error(GR_ERR_INVALID, "decode engine: %lld beams over %lld rows (2..%d beams, rows a multiple of them)", (long long)beams,
                        (long long)batch_rows, GR_BEAM_DEVICE_MAX_BEAMS);
    return engine_create(src, n_state, past, present, io_names, batch_rows, max_len, false, beams, out);
}

static gr_status engine_create(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                               const char *const *io_names, int64_t batch, int64_t max_len, bool sample, int64_t beams,
                               gr_decode_engine **out) {
    *out = NULL;
    const gr_graph *g = src->graph;
    if (n_state <= 0 || n_state > 4096) return gr_error(GR_ERR_INVALID, "decode engine: %d state pairs", n_state);
    if (batch < 1 || max_len < 2 || max_len > ((int64_t)1 << 24))
        return gr_error(GR_ERR_INVALID, "decode engine: batch %lld, max length %lld", (long long)batch, (long long)max_len);
    int *state_in = gr_calloc((size_t)n_state, sizeof(int)), *state_axis = gr_calloc((size_t)n_state, sizeof(int));
    size_t nsym = (size_t)(g->syms.len ? g->syms.len : 1);
    int64_t *sv_a = gr_malloc(sizeof(int64_t) * nsym), *sv_b = gr_malloc(sizeof(int64_t) * nsym);
    gr_graph *rw = NULL, *looped = NULL;
    gr_decode_engine *e = NULL;
    gr_status st = GR_OK;
    step_roles roles;
    if (!state_in || !state_axis || !sv_a || !sv_b) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    /* each state input: its cache axis is its one symbolic dim other than the batch (dim 0) */
    for (int k = 0; k < n_state; k++) {
        state_in[k] = input_index(g, past[k]);
        if (state_in[k] < 0) {
            st = gr_error(GR_ERR_INVALID, "decode engine: no input '%s'", past[k]);
            goto done;
        }
        const gr_ir_value *v = &g->values.data[g->inputs.data[state_in[k]]];
        state_axis[k] = -1;
        for (int d = 1; d < v->ndim; d++)
            if (gr_dx_is_sym(v->dims[d])) {
                if (state_axis[k] >= 0) {
                    st = gr_error(GR_ERR_UNSUPPORTED, "decode engine: state input '%s' has more than one symbolic dim besides the batch",
                                  past[k]);
                    goto done;
                }
                state_axis[k] = d;
            }
        if (state_axis[k] < 0) {
            st = gr_error(GR_ERR_UNSUPPORTED, "decode engine: state input '%s' has no symbolic cache axis", past[k]);
            goto done;
        }
    }
    if ((st = find_roles(g, n_state, state_in, io_names, &roles)) != GR_OK) goto done;
    if ((st = step_binding(g, n_state, state_in, state_axis, &roles, batch, max_len - 1, sv_a)) != GR_OK) goto done;
    if ((st = step_binding(g, n_state, state_in, state_axis, &roles, batch, max_len - 2, sv_b)) != GR_OK) goto done;
    gr_decode_spec spec = {.max_len = max_len, .sym_at_max = sv_a, .sym_at_max_minus1 = sv_b, .n_state = n_state,
                           .past = past, .present = present};
    if ((st = gr_pass_decode_rewrite(g, &spec, &rw)) != GR_OK) goto done;
    if (!(e = gr_calloc(1, sizeof *e))) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    e->batch = batch, e->max_len = max_len;
    e->sample = sample;
    e->beams = beams;
    e->sample_floats[0] = 1.0f, e->sample_floats[1] = 1.0f; /* temperature 1, no top-p, no top-k, seed 0 */
    e->ids_name = dup_name(g, roles.ids);
    e->pos_name = dup_name(g, roles.pos);
    e->mask_name = dup_name(g, roles.mask);
    if (!e->ids_name || (roles.pos >= 0 && !e->pos_name) || (roles.mask >= 0 && !e->mask_name)) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    /* the decode loop on the device, on a copy: a model it refuses keeps the host-driven step */
    if ((st = gr_ir_graph_clone_borrow(rw, &looped)) != GR_OK) goto done;
    {
        gr_decode_loop_spec ls = {.input_ids = e->ids_name, .position_ids = e->pos_name, .attention_mask = e->mask_name,
                                  .logits = "logits", .max_len = max_len, .sample = sample, .beams = beams, .room = max_len,
                                  .n_state = n_state, .past = past, .axis = state_axis};
        st = gr_pass_decode_device_loop(looped, &ls);
    }
    if (st == GR_OK) {
        /* looped borrows the constants rw made: both live until the session has its copy */
        gr_graph *t = rw;
        rw = looped;
        looped = t;
    } else if (st == GR_ERR_NOMEM) {
        goto done;
    } else if (beams > 1) {
        st = gr_error_prefix(st == GR_ERR_UNSUPPORTED ? st : GR_ERR_UNSUPPORTED, "decode engine: beam search needs the decode loop on the device");
        goto done;
    } else {
        e->loop_refused = gr_strdup(gr_last_error());
        if (src->opt.verbose) fprintf(stderr, "graft: note: the decode loop stays on the host: %s\n", gr_last_error());
        gr_error_clear();
        st = GR_OK;
        if (!e->loop_refused) {
            st = GR_ERR_NOMEM;
            goto done;
        }
        if ((st = add_argmax(rw)) != GR_OK) goto done;
    }
    gr_session_options o = src->opt;
    o.precision = GR_PRECISION_MODEL; /* the source graph is converted already */
    o.arena_policy = GR_ARENA_PER_SHAPE;
    /* the default policy gives the engine exact (one graph per length, as it was built for):
     * shape policy auto's measuring runs would replay the step on the caches it updates */
    if (src->shape_policy_default) o.shape_policy = GR_SHAPES_EXACT;
    if ((st = gr_rt_session_create_child(rw, &o, src, &e->s)) != GR_OK) goto done;
    const gr_graph *eg = e->s->graph;
    e->state_in = gr_calloc((size_t)n_state, sizeof(int));
    e->state_axis = gr_calloc((size_t)n_state, sizeof(int));
    if (!e->state_in || !e->state_axis) {
        gr_free(e->state_in, sizeof(int) * (size_t)n_state);
        gr_free(e->state_axis, sizeof(int) * (size_t)n_state);
        e->state_in = e->state_axis = NULL;
        st = GR_ERR_NOMEM;
        goto done;
    }
    e->n_state = n_state;
    for (int k = 0; k < n_state; k++) {
        e->state_in[k] = input_index(eg, past[k]);
        e->state_axis[k] = state_axis[k];
    }
    e->logits_out = output_index(eg, "logits");
    e->ids_out = output_index(eg, "graft.next_ids");
    if (e->logits_out < 0) {
        st = gr_error(GR_ERR_UNSUPPORTED, "decode engine: the model has no output named 'logits'");
        goto done;
    }
    const gr_ir_value *lv = &eg->values.data[eg->outputs.data[e->logits_out]];
    if (lv->dtype != GR_F32 || lv->ndim != 3) {
        st = gr_error(GR_ERR_UNSUPPORTED, "decode engine: logits are not f32 [batch, seq, vocab]");
        goto done;
    }
    e->vocab = lv->dims[2].size;
    e->has_pos = e->loop_refused && roles.pos >= 0; /* with the loop, the device derives them from kv_len */
    e->has_mask = e->loop_refused && roles.mask >= 0;
    e->looped = !e->loop_refused;
    if (e->looped) {
        e->in_stop = input_index(eg, "graft.stop");
        e->in_tokens = input_index(eg, "graft.tokens");
        e->cont_out = output_index(eg, "graft.cont");
        if (e->in_stop < 0 || e->in_tokens < 0 || e->cont_out < 0) {
            st = gr_error(GR_ERR_INTERNAL, "decode engine: the device loop's inputs are missing");
            goto done;
        }
        gr_mem_kind kind = gr_dev_caps_get(e->s->dev).pinned_memory ? GR_MEM_HOST_PINNED : GR_MEM_HOST;
        e->h_tokens_bytes = sizeof(int64_t) * (size_t)(batch * max_len);
        if ((st = gr_dev_alloc(e->s->dev, kind, e->h_tokens_bytes, (void **)&e->h_tokens)) != GR_OK) goto done;
        if ((st = gr_dev_alloc(e->s->dev, kind, sizeof(int64_t), (void **)&e->h_stop)) != GR_OK) goto done;
    }
    e->ids = gr_calloc((size_t)batch, sizeof(int64_t));
    e->pos = gr_calloc((size_t)batch, sizeof(int64_t));
    e->mask = gr_calloc((size_t)(batch * max_len), sizeof(int64_t));
    e->fin0 = gr_calloc((size_t)batch, 1);
    if (!e->ids || !e->pos || !e->mask || !e->fin0) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    if (beams > 1) {
        gr_beam_params bp = {.beams = beams, .vocab = e->vocab, .max_new = max_len, .stride = max_len};
        gr_beam_layout l;
        e->in_beam = input_index(eg, "graft.beam");
        if (e->in_beam < 0) {
            st = gr_error(GR_ERR_INTERNAL, "decode engine: the beam loop's state input is missing");
            goto done;
        }
        if ((st = gr_beam_state_layout(&bp, &l)) != GR_OK) goto done;
        e->beam_init_bytes = sizeof(int64_t) * (size_t)(batch / beams * l.slots);
        if (!(e->beam_init = gr_calloc(1, e->beam_init_bytes))) {
            e->beam_init_bytes = 0;
            st = GR_ERR_NOMEM;
            goto done;
        }
        gr_beam_state_init(&bp, &l, batch / beams, e->beam_init);
    }
    if ((st = gr_decode_engine_reset(e, -1, -1)) != GR_OK) goto done;
done:
    if (st != GR_OK) {
        gr_decode_engine_destroy(e);
        e = NULL;
    }
    gr_ir_graph_destroy(rw);
    gr_ir_graph_destroy(looped);
    gr_free(state_in, sizeof(int) * (size_t)n_state);
    gr_free(state_axis, sizeof(int) * (size_t)n_state);
    gr_free(sv_a, sizeof(int64_t) * nsym);
    gr_free(sv_b, sizeof(int64_t) * nsym);
    *out = e;
    return st;
}

/* A new sequence: every input zero (the cache buffers, the finished flags, the token ring),
 * then eos and pad. The cache buffers (most of the bytes: batch x heads x max_len x dim per
 * state) are bound from zeros once; later resets zero them on the device (their bound host
 * value stays zero: the steps write only the placeholders), not through the host again. */
gr_status gr_decode_engine_reset(gr_decode_engine *e, int64_t eos, int64_t pad) {
    const gr_graph *g = e->s->graph;
    for (int i = 0; i < g->inputs.len; i++) {
        const gr_ir_value *val = &g->values.data[g->inputs.data[i]];
        bool state = false;
        for (int k = 0; k < e->n_state && !state; k++) state = e->state_in[k] == i;
        if (state && e->states_bound) {
            gr_status zs = gr_rt_input_zero(e->s, i);
            if (zs == GR_OK) continue;
            if (zs != GR_ERR_UNSUPPORTED) return zs;
            gr_error_clear(); /* a placeholder of another layout: bound from zeros again below */
        }
        int64_t dims[GR_MAX_DIMS], n = 1;
        for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].size, n *= dims[d];
        size_t bytes = (size_t)n * gr_dtype_size(val->dtype);
        void *zero = gr_calloc(1, bytes ? bytes : 1);
        if (!zero) return GR_ERR_NOMEM;
        if (!strcmp(val->name, "graft.eos") || !strcmp(val->name, "graft.pad")) *(int64_t *)zero = !strcmp(val->name, "graft.eos") ? eos : pad;
        if (!strcmp(val->name, "graft.sample_ints") && bytes == sizeof e->sample_ints) memcpy(zero, e->sample_ints, bytes);
        if (!strcmp(val->name, "graft.sample_floats") && bytes == sizeof e->sample_floats) memcpy(zero, e->sample_floats, bytes);
        if (!strcmp(val->name, "graft.beam") && bytes == e->beam_init_bytes) memcpy(zero, e->beam_init, bytes);
        if (!strcmp(val->name, "graft.beam_params") && bytes == sizeof e->beam_params) memcpy(zero, e->beam_params, bytes);
        gr_status st = gr_session_set_input(e->s, val->name, val->dtype, val->ndim, dims, zero, bytes);
        gr_free(zero, bytes ? bytes : 1);
        GR_TRY(st);
    }
    e->states_bound = true;
    memset(e->mask, 0, sizeof(int64_t) * (size_t)(e->batch * e->max_len));
    return GR_OK;
}

gr_status gr_decode_engine_set_sampling(gr_decode_engine *e, uint64_t seed, int64_t first, int64_t top_k, float temperature,
                                        float top_p) {
    if (!(temperature > 0) || !(top_p > 0) || top_k < 0)
        return gr_error(GR_ERR_INVALID, "decode engine: sampling with temperature %g, top_k %lld, top_p %g", (double)temperature,
                        (long long)top_k, (double)top_p);
    e->sample_ints[0] = (int64_t)seed, e->sample_ints[1] = first, e->sample_ints[2] = top_k;
    e->sample_floats[0] = temperature, e->sample_floats[1] = top_p;
    if (!e->sample || e->loop_refused) return GR_OK; /* no sample op: the caller samples on the host */
    int64_t d3[1] = {3}, d2[1] = {2};
    GR_TRY(gr_session_set_input(e->s, "graft.sample_ints", GR_I64, 1, d3, e->sample_ints, sizeof e->sample_ints));
    return gr_session_set_input(e->s, "graft.sample_floats", GR_F32, 1, d2, e->sample_floats, sizeof e->sample_floats);
}

static gr_status set_ints(gr_decode_engine *e, const char *name, const int64_t *v, int64_t rows, int64_t cols) {
    const gr_ir_value *in = &e->s->graph->values.data[e->s->graph->inputs.data[input_index(e->s->graph, name)]];
    int64_t d[2] = {rows, cols}, n = rows * cols;
    if (in->dtype == GR_I64) return gr_session_set_input(e->s, name, GR_I64, 2, d, v, sizeof(int64_t) * (size_t)n);
    if (in->dtype != GR_I32) return gr_error(GR_ERR_UNSUPPORTED, "decode engine: input '%s' is %s (i64 or i32 expected)", name, gr_dtype_name(in->dtype));
    int32_t *tmp = gr_malloc(sizeof(int32_t) * (size_t)n);
    if (!tmp) return GR_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) tmp[i] = (int32_t)v[i];
    gr_status st = gr_session_set_input(e->s, name, GR_I32, 2, d, tmp, sizeof(int32_t) * (size_t)n);
    gr_free(tmp, sizeof(int32_t) * (size_t)n);
    return st;
}

gr_status gr_decode_engine_step(gr_decode_engine *e, const int64_t *ids, int64_t kv_len, float *logits) {
    if (kv_len < 1 || kv_len > e->max_len)
        return gr_error(GR_ERR_INVALID, "decode engine: position %lld is outside the cache (max length %lld)", (long long)kv_len,
                        (long long)e->max_len);
    int64_t b = e->batch;
    memcpy(e->ids, ids, sizeof(int64_t) * (size_t)b);
    GR_TRY(set_ints(e, e->ids_name, e->ids, b, 1));
    if (e->has_pos) {
        for (int64_t r = 0; r < b; r++) e->pos[r] = kv_len - 1;
        GR_TRY(set_ints(e, e->pos_name, e->pos, b, 1));
    }
    if (e->has_mask) {
        for (int64_t r = 0; r < b; r++)
            for (int64_t j = 0; j < e->max_len; j++) e->mask[r * e->max_len + j] = j < kv_len;
        GR_TRY(set_ints(e, e->mask_name, e->mask, b, e->max_len));
    }
    int64_t kd[1] = {1};
    GR_TRY(gr_session_set_input(e->s, "graft.kv_len", GR_I64, 1, kd, &kv_len, sizeof kv_len));
    if (e->looped && e->beams == 1) {
        /* a step the host drives (the prompt) finishes no row: the device's flags start from this
         * step's token (a prompt position's argmax may be eos) */
        int64_t fd[2] = {b, 1};
        GR_TRY(gr_session_set_input(e->s, "graft.finished", GR_BOOL, 2, fd, e->fin0, (size_t)b));
    }
    GR_TRY(gr_session_run(e->s));
    if (!logits) return GR_OK;
    gr_output o;
    GR_TRY(gr_session_output(e->s, e->logits_out, &o));
    return gr_session_output_read(e->s, o, logits, sizeof(float) * (size_t)(b * e->vocab));
}

gr_status gr_decode_engine_step_greedy(gr_decode_engine *e, const int64_t *ids, int64_t kv_len, int64_t *next) {
    GR_TRY(gr_decode_engine_step(e, ids, kv_len, NULL));
    gr_output o;
    GR_TRY(gr_session_output(e->s, e->ids_out, &o));
    gr_status st = gr_session_output_read(e->s, o, next, sizeof(int64_t) * (size_t)e->batch);
    return st;
}

/* ---- the decode loop on the device ----------------------------------------------------------
 * After a step, the device holds the next step's inputs (the token in input_ids, kv_len + 1, the
 * finished flags) and the token in row kv_len of graft.tokens. gr_decode_engine_loop runs the
 * steps kv_first..kv_stop back to back and copies rows first_row..kv_stop of the tokens to the
 * host: in graph mode, where the device has conditional nodes, one launch of a graph holding one
 * step in a WHILE node whose flag is graft.cont (so it ends early once every row has finished);
 * otherwise the steps are enqueued one after another without a host wait. Either way, one
 * host-device round trip per call. */
static const char *loop_unfit(const gr_session_t s, const gr_rt_plan *p) {
    for (int seg = 0; seg < p->segs.len; seg++)
        if (!p->segs.data[seg].graphable) return "a segment of the step cannot be captured";
    for (int i = 0; i < p->steps.len; i++) {
        const gr_step *st = &p->steps.data[i];
        if (st->kind == GR_STEP_HOST) return "the step has work on the host";
        for (int a = 0; a < st->n_args; a++)
            if (st->args[a].kind == GR_ARG_HOST_SCALAR) return "a kernel reads a value on the host at launch";
    }
    for (int i = 0; i < p->g->inputs.len; i++)
        if (p->input_in_place[i] && s->inputs[i].dev_bound) return "an input is read in place from a caller's buffer";
    return NULL;
}

static gr_status launch_steps(gr_session_t s, gr_rt_plan *p) {
    for (int i = 0; i < p->steps.len; i++) GR_TRY(gr_rt_step_launch(s, p, i));
    return GR_OK;
}

static gr_status loop_capture(gr_decode_engine *e, gr_rt_plan *p) {
    gr_session_t s = e->s;
    gr_device *d = s->dev;
    void *cont = gr_rt_value_addr(s, p, p->g->outputs.data[e->cont_out]);
    if (!cont) return gr_error(GR_ERR_INTERNAL, "decode loop: graft.cont has no storage");
    GR_TRY(gr_dev_capture_begin(d, s->stream));
    uint64_t h = 0;
    gr_status st = gr_dev_cond_create(d, s->stream, GR_COND_WHILE, 1, &h);
    bool in_body = false;
    if (st == GR_OK) in_body = (st = gr_dev_cond_body_begin(d, s->stream, h, 0)) == GR_OK;
    if (st == GR_OK) st = launch_steps(s, p);
    if (st == GR_OK) st = gr_dev_memcpy(d, s->stream, (void *)(uintptr_t)h, cont, sizeof(uint32_t), GR_COPY_D2D);
    if (in_body) {
        /* back to the outer capture even after a failure, so that capture_end ends it */
        gr_status be = gr_dev_cond_body_end(d, s->stream, h, 0);
        if (st == GR_OK) st = be;
    }
    gr_dgraph *graph = NULL;
    gr_status end = gr_dev_capture_end(d, s->stream, &graph);
    if (st == GR_OK) st = end;
    if (st == GR_OK) st = gr_dev_graph_instantiate(d, graph, &e->loop_exec);
    if (st != GR_OK) {
        gr_dev_graph_destroy(d, graph);
        e->loop_exec = NULL;
        return gr_error_prefix(st, "decode loop: capturing the step in a WHILE node");
    }
    e->loop_graph = graph;
    e->loop_plan = p;
    e->loop_captures++;
    return GR_OK;
}

gr_status gr_decode_engine_loop(gr_decode_engine *e, int64_t kv_first, int64_t kv_stop, int64_t first_row, int64_t *tokens) {
    if (e->loop_refused) return gr_error(GR_ERR_UNSUPPORTED, "decode loop: %s", e->loop_refused);
    if (first_row < 1 || first_row > kv_first || kv_first < 2 || kv_stop >= e->max_len || kv_stop < first_row)
        return gr_error(GR_ERR_INVALID, "decode loop: steps %lld..%lld, rows from %lld, with %lld cache positions", (long long)kv_first,
                        (long long)kv_stop, (long long)first_row, (long long)e->max_len);
    gr_session_t s = e->s;
    gr_device *d = s->dev;
    if (!s->current) return gr_error(GR_ERR_INVALID, "decode loop: run the prompt's steps first");
    GR_TRY(gr_session_wait(s));
    gr_rt_plan *p = s->current;
    const char *why = loop_unfit(s, p);
    if (why) {
        /* recorded: the caller drives the steps from the host from now on */
        e->loop_refused = gr_strdup(why);
        return gr_error(GR_ERR_UNSUPPORTED, "decode loop: %s", why);
    }
    if (kv_stop >= kv_first) {
        *e->h_stop = kv_stop;
        void *stop = gr_rt_input_addr(s, p, e->in_stop);
        GR_TRY(gr_dev_memcpy(d, s->stream, stop, e->h_stop, sizeof(int64_t), GR_COPY_H2D));
        gr_dev_caps caps = gr_dev_caps_get(d);
        bool use_while = s->opt.mode != GR_MODE_EAGER && caps.graphs && caps.conditional_nodes && !e->while_refused;
        if (use_while && e->loop_plan != p) {
            loop_release(e);
            gr_status cs = loop_capture(e, p);
            if (cs == GR_ERR_NOMEM) return cs;
            if (cs != GR_OK) {
                /* a driver that cannot hold this step in a conditional body: the steps are enqueued
                 * back to back instead (the same ids; no graph, no stop on the device) */
                e->while_refused = gr_strdup(gr_last_error());
                if (!e->while_refused) return GR_ERR_NOMEM;
                if (s->opt.verbose) fprintf(stderr, "graft: note: %s; the decode loop enqueues its steps instead\n", gr_last_error());
                gr_error_clear();
                use_while = false;
            }
        }
        if (use_while) {
            GR_TRY(gr_dev_graph_launch(d, e->loop_exec, s->stream));
        } else {
            /* no WHILE: every step runs; rows that finished emit pad */
            for (int64_t k = kv_first; k <= kv_stop; k++) GR_TRY(launch_steps(s, p));
        }
        e->loop_launches++;
    }
    const char *ring = gr_rt_input_addr(s, p, e->in_tokens);
    size_t row = sizeof(int64_t) * (size_t)e->batch, n = row * (size_t)(kv_stop - first_row + 1);
    GR_TRY(gr_dev_memcpy(d, s->stream, e->h_tokens, ring + row * (size_t)first_row, n, GR_COPY_D2H));
    GR_TRY(gr_dev_stream_sync(d, s->stream));
    memcpy(tokens, e->h_tokens, n);
    /* the session's outputs no longer describe its last run */
    s->has_run = false;
    return GR_OK;
}

/* ---- beam search ----------------------------------------------------------------------------- */
gr_status gr_decode_engine_set_beam(gr_decode_engine *e, int64_t first, int64_t eos, int64_t pad, double length_penalty,
                                    int64_t max_new) {
    if (e->beams < 2) return gr_error(GR_ERR_INVALID, "decode engine: not made for beam search");
    if (max_new < 1 || max_new > e->max_len || first < 1 || !isfinite(length_penalty))
        return gr_error(GR_ERR_INVALID, "decode engine: beam search of %lld new tokens after %lld (room %lld), length_penalty %g",
                        (long long)max_new, (long long)first, (long long)e->max_len, length_penalty);
    gr_beam_params bp = {.beams = e->beams, .vocab = e->vocab, .max_new = max_new, .stride = e->max_len, .eos_id = eos,
                         .pad_id = pad, .length_penalty = length_penalty};
    gr_beam_layout l;
    GR_TRY(gr_beam_state_layout(&bp, &l));
    int64_t rows = e->batch / e->beams;
    gr_beam_state_init(&bp, &l, rows, e->beam_init);
    int64_t bits;
    memcpy(&bits, &length_penalty, sizeof bits);
    int64_t params[GR_BEAM_NPARAMS] = {first, eos, pad, bits, max_new};
    memcpy(e->beam_params, params, sizeof params);
    int64_t sd[2] = {rows, l.slots}, pd[1] = {GR_BEAM_NPARAMS};
    GR_TRY(gr_session_set_input(e->s, "graft.beam", GR_I64, 2, sd, e->beam_init, e->beam_init_bytes));
    return gr_session_set_input(e->s, "graft.beam_params", GR_I64, 1, pd, e->beam_params, sizeof e->beam_params);
}

gr_status gr_decode_engine_read_beam(gr_decode_engine *e, int64_t *state, size_t bytes) {
    gr_session_t s = e->s;
    if (e->beams < 2 || !s->current) return gr_error(GR_ERR_INVALID, "decode engine: no beam state to read (run a step first)");
    if (bytes != e->beam_init_bytes)
        return gr_error(GR_ERR_INVALID, "decode engine: the beam state is %zu bytes, not %zu", e->beam_init_bytes, bytes);
    GR_TRY(gr_session_wait(s));
    const void *src = gr_rt_input_addr(s, s->current, e->in_beam);
    if (!src) return gr_error(GR_ERR_INTERNAL, "decode engine: the beam state has no storage");
    GR_TRY(gr_dev_memcpy(s->dev, s->stream, state, src, bytes, GR_COPY_D2H));
    return gr_dev_stream_sync(s->dev, s->stream);
}

int64_t gr_decode_engine_beam_room(const gr_decode_engine *e) { return e->max_len; }

const char *gr_decode_engine_loop_refused(const gr_decode_engine *e) { return e->loop_refused; }
long gr_decode_engine_loop_captures(const gr_decode_engine *e) { return e->loop_captures; }
int64_t gr_decode_engine_vocab(const gr_decode_engine *e) { return e->vocab; }

gr_status gr_decode_engine_load_prefix(gr_decode_engine *e, int k, const void *src, gr_dtype dtype, int ndim, const int64_t *dims,
                                       int64_t len) {
    if (k < 0 || k >= e->n_state) return gr_error(GR_ERR_INVALID, "decode engine: state %d of %d", k, e->n_state);
    const gr_graph *eg = e->s->graph;
    if (e->state_in[k] < 0) return gr_error(GR_ERR_UNSUPPORTED, "decode engine: state %d has no input in the rewritten step", k);
    const gr_ir_value *v = &eg->values.data[eg->inputs.data[e->state_in[k]]];
    int ax = e->state_axis[k];
    if (v->dtype != dtype || v->ndim != ndim || ax >= ndim || len < 0 || len > v->dims[ax].size || dims[ax] != len)
        return gr_error(GR_ERR_UNSUPPORTED, "decode engine: the prompt's cache for '%s' (%s, rank %d, %lld positions) does not fit its "
                                            "buffer (%s, rank %d, %lld positions)",
                        v->name, gr_dtype_name(dtype), ndim, (long long)(ax < ndim ? dims[ax] : -1), gr_dtype_name(v->dtype), v->ndim,
                        (long long)v->dims[ax].size);
    /* rows: every index of the axes before the cache axis; a row holds the cache axis and the ones after it */
    size_t inner = gr_dtype_size(dtype), rows = 1;
    for (int d = 0; d < ndim; d++) {
        if (d == ax) continue;
        if (dims[d] != v->dims[d].size)
            return gr_error(GR_ERR_UNSUPPORTED, "decode engine: the prompt's cache for '%s' has %lld on axis %d, the buffer %lld", v->name,
                            (long long)dims[d], d, (long long)v->dims[d].size);
        if (d < ax) rows *= (size_t)dims[d];
        else inner *= (size_t)dims[d];
    }
    size_t src_row = inner * (size_t)len, dst_row = inner * (size_t)v->dims[ax].size;
    if (!src_row || !rows) return GR_OK;
    return gr_rt_input_write_rows(e->s, e->state_in[k], src, src_row, dst_row, src_row, rows);
}
struct gr_session *gr_decode_engine_session(gr_decode_engine *e) { return e->s; }
