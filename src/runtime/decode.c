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

struct gr_decode_engine {
    struct gr_session *s;          /* runs the rewritten graph */
    int64_t batch, max_len;
    int64_t vocab;
    int logits_out;         /* output index of logits */
    int ids_out;            /* output index of graft.next_ids (greedy on the device) */
    bool has_pos, has_mask;
    int64_t *ids, *pos, *mask; /* host staging: [batch], [batch], [batch * max_len] */
    int64_t mask_len;       /* positions set to 1 in mask so far */
};

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
static gr_status step_binding(const gr_graph *g, int n_state, const int *state_in, const int *state_axis, int64_t b,
                              int64_t past, int64_t *sv) {
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
        } else if (!strcmp(v->name, "input_ids") || !strcmp(v->name, "position_ids")) {
            if (v->ndim != 2) return gr_error(GR_ERR_UNSUPPORTED, "decode engine: input '%s' is not [batch, seq]", v->name);
            dims[0] = b, dims[1] = 1;
        } else if (!strcmp(v->name, "attention_mask")) {
            if (v->ndim != 2) return gr_error(GR_ERR_UNSUPPORTED, "decode engine: input 'attention_mask' is not [batch, length]");
            dims[0] = b, dims[1] = past + 1;
        } else {
            return gr_error(GR_ERR_UNSUPPORTED,
                            "decode engine: input '%s' is neither a cache state nor input_ids, position_ids or attention_mask",
                            v->name);
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

void gr_decode_engine_destroy(gr_decode_engine *e) {
    if (!e) return;
    gr_session_destroy(e->s);
    gr_free(e->ids, sizeof(int64_t) * (size_t)e->batch);
    gr_free(e->pos, sizeof(int64_t) * (size_t)e->batch);
    gr_free(e->mask, sizeof(int64_t) * (size_t)(e->batch * e->max_len));
    gr_free(e, sizeof *e);
}

gr_status gr_decode_engine_create(struct gr_session *src, int n_state, const char *const *past, const char *const *present,
                                  int64_t batch, int64_t max_len, gr_decode_engine **out) {
    *out = NULL;
    const gr_graph *g = src->graph;
    if (n_state <= 0 || n_state > 4096) return gr_error(GR_ERR_INVALID, "decode engine: %d state pairs", n_state);
    if (batch < 1 || max_len < 2 || max_len > ((int64_t)1 << 24))
        return gr_error(GR_ERR_INVALID, "decode engine: batch %lld, max length %lld", (long long)batch, (long long)max_len);
    int *state_in = gr_calloc((size_t)n_state, sizeof(int)), *state_axis = gr_calloc((size_t)n_state, sizeof(int));
    size_t nsym = (size_t)(g->syms.len ? g->syms.len : 1);
    int64_t *sv_a = gr_malloc(sizeof(int64_t) * nsym), *sv_b = gr_malloc(sizeof(int64_t) * nsym);
    gr_graph *rw = NULL;
    gr_decode_engine *e = NULL;
    gr_status st = GR_OK;
    if (!state_in || !state_axis || !sv_a || !sv_b) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    /* each state input: its cache axis is its one symbolic dim other than the batch (dim 0) */
    for (int k = 0; k < n_state; k++) {
        state_in[k] = -1;
        for (int i = 0; i < g->inputs.len; i++)
            if (!strcmp(g->values.data[g->inputs.data[i]].name, past[k])) state_in[k] = i;
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
    if ((st = step_binding(g, n_state, state_in, state_axis, batch, max_len - 1, sv_a)) != GR_OK) goto done;
    if ((st = step_binding(g, n_state, state_in, state_axis, batch, max_len - 2, sv_b)) != GR_OK) goto done;
    gr_decode_spec spec = {.max_len = max_len, .sym_at_max = sv_a, .sym_at_max_minus1 = sv_b, .n_state = n_state,
                           .past = past, .present = present};
    if ((st = gr_pass_decode_rewrite(g, &spec, &rw)) != GR_OK) goto done;
    /* greedy on the device: graft.next_ids = argmax over the vocabulary of the step's logits, so a
     * greedy step reads back batch ids instead of batch x vocab logits */
    {
        int lo = -1;
        for (int i = 0; i < rw->outputs.len; i++)
            if (!strcmp(rw->values.data[rw->outputs.data[i]].name, "logits")) lo = rw->outputs.data[i];
        if (lo >= 0 && rw->values.data[lo].ndim == 3) {
            gr_ir_attr a[3];
            memset(a, 0, sizeof a);
            a[0] = (gr_ir_attr){.name = "axis", .kind = GR_IR_ATTR_INT, .i = 2};
            a[1] = (gr_ir_attr){.name = "keepdims", .kind = GR_IR_ATTR_INT, .i = 0};
            a[2] = (gr_ir_attr){.name = "select_last_index", .kind = GR_IR_ATTR_INT, .i = 0};
            const char *names[1] = {"graft.next_ids"};
            int n;
            if ((st = gr_ir_add_node(rw, GR_OP_ARG_MAX, "graft.greedy", 1, &lo, 1, names, 3, a, &n)) != GR_OK) goto done;
            if ((st = gr_ir_infer_node(rw, n)) != GR_OK) goto done;
            if ((st = gr_ir_add_output(rw, rw->nodes.data[n].out[0])) != GR_OK) goto done;
        }
    }
    if (!(e = gr_calloc(1, sizeof *e))) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    e->batch = batch, e->max_len = max_len;
    gr_session_options o = src->opt;
    o.precision = GR_PRECISION_MODEL; /* the source graph is converted already */
    o.arena_policy = GR_ARENA_PER_SHAPE;
    if ((st = gr_session_create(rw, &o, &e->s)) != GR_OK) goto done;
    e->logits_out = e->ids_out = -1;
    for (int i = 0; i < rw->outputs.len; i++) {
        if (!strcmp(rw->values.data[rw->outputs.data[i]].name, "logits")) e->logits_out = i;
        if (!strcmp(rw->values.data[rw->outputs.data[i]].name, "graft.next_ids")) e->ids_out = i;
    }
    if (e->logits_out < 0) {
        st = gr_error(GR_ERR_UNSUPPORTED, "decode engine: the model has no output named 'logits'");
        goto done;
    }
    const gr_ir_value *lv = &rw->values.data[rw->outputs.data[e->logits_out]];
    if (lv->dtype != GR_F32 || lv->ndim != 3) {
        st = gr_error(GR_ERR_UNSUPPORTED, "decode engine: logits are not f32 [batch, seq, vocab]");
        goto done;
    }
    e->vocab = lv->dims[2].size;
    e->has_pos = gr_ir_find_value(rw, "position_ids") >= 0 && rw->values.data[gr_ir_find_value(rw, "position_ids")].kind == GR_VAL_INPUT;
    e->has_mask =
        gr_ir_find_value(rw, "attention_mask") >= 0 && rw->values.data[gr_ir_find_value(rw, "attention_mask")].kind == GR_VAL_INPUT;
    e->ids = gr_calloc((size_t)batch, sizeof(int64_t));
    e->pos = gr_calloc((size_t)batch, sizeof(int64_t));
    e->mask = gr_calloc((size_t)(batch * max_len), sizeof(int64_t));
    if (!e->ids || !e->pos || !e->mask) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    if ((st = gr_decode_engine_reset(e)) != GR_OK) goto done;
done:
    if (st != GR_OK) {
        gr_decode_engine_destroy(e);
        e = NULL;
    }
    gr_ir_graph_destroy(rw);
    gr_free(state_in, sizeof(int) * (size_t)n_state);
    gr_free(state_axis, sizeof(int) * (size_t)n_state);
    gr_free(sv_a, sizeof(int64_t) * nsym);
    gr_free(sv_b, sizeof(int64_t) * nsym);
    *out = e;
    return st;
}

/* Zeroes every cache buffer (a new sequence). */
gr_status gr_decode_engine_reset(gr_decode_engine *e) {
    const gr_graph *g = e->s->graph;
    for (int i = 0; i < g->inputs.len; i++) {
        int v = g->inputs.data[i];
        const gr_ir_value *val = &g->values.data[v];
        bool state = false;
        for (int u = 0; u < g->values.len; u++)
            if (g->values.data[u].inplace_of == v + 1) state = true;
        if (!state) continue;
        int64_t dims[GR_MAX_DIMS], n = 1;
        for (int d = 0; d < val->ndim; d++) dims[d] = val->dims[d].size, n *= dims[d];
        size_t bytes = (size_t)n * gr_dtype_size(val->dtype);
        void *zero = gr_calloc(1, bytes ? bytes : 1);
        if (!zero) return GR_ERR_NOMEM;
        gr_status st = gr_session_set_input(e->s, val->name, val->dtype, val->ndim, dims, zero, bytes);
        gr_free(zero, bytes ? bytes : 1);
        GR_TRY(st);
    }
    memset(e->mask, 0, sizeof(int64_t) * (size_t)(e->batch * e->max_len));
    e->mask_len = 0;
    return GR_OK;
}

gr_status gr_decode_engine_step(gr_decode_engine *e, const int64_t *ids, int64_t kv_len, float *logits) {
    if (kv_len < 1 || kv_len > e->max_len)
        return gr_error(GR_ERR_INVALID, "decode engine: position %lld is outside the cache (max length %lld)", (long long)kv_len,
                        (long long)e->max_len);
    int64_t b = e->batch, one[2] = {b, 1};
    memcpy(e->ids, ids, sizeof(int64_t) * (size_t)b);
    GR_TRY(gr_session_set_input(e->s, "input_ids", GR_I64, 2, one, e->ids, sizeof(int64_t) * (size_t)b));
    if (e->has_pos) {
        for (int64_t r = 0; r < b; r++) e->pos[r] = kv_len - 1;
        GR_TRY(gr_session_set_input(e->s, "position_ids", GR_I64, 2, one, e->pos, sizeof(int64_t) * (size_t)b));
    }
    if (e->has_mask) {
        for (int64_t r = 0; r < b; r++)
            for (int64_t j = 0; j < e->max_len; j++) e->mask[r * e->max_len + j] = j < kv_len;
        int64_t md[2] = {b, e->max_len};
        GR_TRY(gr_session_set_input(e->s, "attention_mask", GR_I64, 2, md, e->mask, sizeof(int64_t) * (size_t)(b * e->max_len)));
    }
    int64_t kd[1] = {1};
    GR_TRY(gr_session_set_input(e->s, "graft.kv_len", GR_I64, 1, kd, &kv_len, sizeof kv_len));
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
    return gr_session_output_read(e->s, o, next, sizeof(int64_t) * (size_t)e->batch);
}

int64_t gr_decode_engine_vocab(const gr_decode_engine *e) { return e->vocab; }
struct gr_session *gr_decode_engine_session(gr_decode_engine *e) { return e->s; }
