/* runtime/generate — decode loops over a step model with state: state bindings (present ->
 * past), the generation loop (greedy, sampling, beam search) and its reference engine.
 *
 * The reference engine runs the unrewritten step through the ordinary session: every step is a
 * binding of the symbolic dims (past grows), each present output is copied device-to-device into
 * a session-owned buffer bound as the next step's past (gr_session_bind_input_device: read in
 * place, so a captured graph of a binding replays with nothing repointed), and only the last
 * position's logits are copied to the host, where tokens are picked. The per-step work is behind
 * gen_run_step / gen_commit_state so that another engine (the rewritten cache with device-side
 * selection) can sit beside it. */
#include "runtime/runtime-impl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== state bindings ============================================================================ */
typedef struct {
    int out_index;  /* graph output */
    int in_index;   /* graph input */
    int grow_axis;  /* the axis that grows by the step's seq (-1: the state keeps its shape) */
    void *buf;      /* session-owned device buffer bound as the input */
    size_t buf_bytes;
} gen_state;

struct gr_rt_gen {
    gen_state *states;
    int n, cap;
    /* the rewritten engine (runtime/decode.c), kept for the next generation of the same batch */
    gr_decode_engine *eng;
    int64_t eng_batch, eng_max;
    bool eng_sample; /* its decode loop samples (else: argmax) */
    int64_t eng_beams; /* its decode loop's beams (1: none; the engine's rows are batch x beams) */
    int eng_verdict; /* 0: not checked against the per-length step yet; 1: agrees; -1: refused or disagrees */
    int last_engine; /* the engine of the last successful generation (gr_generate_engine; 0: none yet) */
};

void gr_rt_gen_free(gr_session_t s) {
    if (!s || !s->gen) return;
    struct gr_rt_gen *g = s->gen;
    gr_decode_engine_destroy(g->eng);
    for (int k = 0; k < g->n; k++)
        if (g->states[k].buf && s->dev) gr_dev_free(s->dev, g->states[k].buf);
    gr_free(g->states, (size_t)g->cap * sizeof(gen_state));
    gr_free(g, sizeof *g);
    s->gen = NULL;
}

static const gr_ir_value *graph_input(const gr_graph *g, int i) { return &g->values.data[g->inputs.data[i]]; }
static const gr_ir_value *graph_output(const gr_graph *g, int i) { return &g->values.data[g->outputs.data[i]]; }

static int find_input(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->inputs.len; i++)
        if (!strcmp(graph_input(g, i)->name, name)) return i;
    return -1;
}

static int find_output(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->outputs.len; i++)
        if (graph_output(g, i)->name && !strcmp(graph_output(g, i)->name, name)) return i;
    return -1;
}

static int state_of_input(const gr_session_t s, int in_index) {
    if (!s->gen) return -1;
    for (int k = 0; k < s->gen->n; k++)
        if (s->gen->states[k].in_index == in_index) return k;
    return -1;
}

/* The checks of a binding; on success *grow_axis is the growing axis (-1: none). */
static gr_status check_pair(gr_session_t s, int oi, int ii, const char *output, const char *input, int *grow_axis) {
    gr_graph *g = s->graph;
    const gr_ir_value *o = graph_output(g, oi), *in = graph_input(g, ii);
    char ot[256], it[256];
    gr_ir_type_str(g, o, ot, sizeof ot);
    gr_ir_type_str(g, in, it, sizeof it);
    if (state_of_input(s, ii) >= 0)
        return gr_error(GR_ERR_INVALID, "state: input '%s' is already bound (to output '%s'); cannot bind it to output '%s' too", input,
                        graph_output(g, s->gen->states[state_of_input(s, ii)].out_index)->name, output);
    if (o->dtype != in->dtype)
        return gr_error(GR_ERR_INVALID, "state: output '%s' (%s) cannot feed input '%s' (%s): dtypes differ", output, ot, input, it);
    if (o->ndim != in->ndim)
        return gr_error(GR_ERR_INVALID, "state: output '%s' (%s) cannot feed input '%s' (%s): ranks differ (%d, %d)", output, ot,
                        input, it, o->ndim, in->ndim);
    int grow = -1;
    for (int d = 0; d < o->ndim; d++) {
        if (gr_dx_equal(o->dims[d], in->dims[d])) continue;
        /* the growing axis: a plain symbol (past) in the input, another symbol or an
         * expression (past + seq, total) in the output */
        bool grows = gr_dx_as_symbol(g, in->dims[d]) >= 0 && gr_dx_is_sym(o->dims[d]);
        if (grows && grow < 0) {
            grow = d;
            continue;
        }
        char od[96], id[96];
        gr_dx_str(g, o->dims[d], od, sizeof od);
        gr_dx_str(g, in->dims[d], id, sizeof id);
        return gr_error(GR_ERR_INVALID,
                        "state: output '%s' (%s) cannot feed input '%s' (%s): dim %d is %s in the output but %s in the input "
                        "(only the sequence axis, a symbol such as 'past' in the input, may differ)",
                        output, ot, input, it, d, od, id);
    }
    *grow_axis = grow;
    return GR_OK;
}

static gr_status add_state(gr_session_t s, int oi, int ii, int grow) {
    if (!s->gen) {
        s->gen = gr_calloc(1, sizeof *s->gen);
        if (!s->gen) return GR_ERR_NOMEM;
    }
    struct gr_rt_gen *gg = s->gen;
    if (gg->n == gg->cap) {
        int cap = gg->cap ? gg->cap * 2 : 8;
        gen_state *p = gr_realloc(gg->states, (size_t)gg->cap * sizeof(gen_state), (size_t)cap * sizeof(gen_state));
        if (!p) return GR_ERR_NOMEM;
        gg->states = p;
        gg->cap = cap;
    }
    gg->states[gg->n++] = (gen_state){.out_index = oi, .in_index = ii, .grow_axis = grow};
    if (grow >= 0) {
        /* the prompt step runs with an empty past */
        int32_t sym = gr_dx_as_symbol(s->graph, graph_input(s->graph, ii)->dims[grow]);
        gr_ir_symbol *sy = &s->graph->syms.data[sym];
        if (sy->lo > 0) GR_TRY(gr_dx_set_range(s->graph, sym, 0, sy->hi));
    }
    return GR_OK;
}

gr_status gr_session_bind_state(gr_session_t s, const char *output, const char *input) {
    if (!s || !output || !input) return gr_error(GR_ERR_INVALID, "gr_session_bind_state: NULL argument");
    GR_RT_NO_TP(s, "gr_session_bind_state");
    int oi = find_output(s->graph, output), ii = find_input(s->graph, input);
    if (oi < 0 && ii < 0)
        return gr_error(GR_ERR_INVALID, "state: neither output '%s' nor input '%s' exists in the model", output, input);
    if (oi < 0) return gr_error(GR_ERR_INVALID, "state: output '%s' (to feed input '%s') does not exist in the model", output, input);
    if (ii < 0) return gr_error(GR_ERR_INVALID, "state: input '%s' (fed by output '%s') does not exist in the model", input, output);
    int grow;
    GR_TRY(check_pair(s, oi, ii, output, input, &grow));
    return add_state(s, oi, ii, grow);
}

/* name with the first "present" replaced by `by`, into buf; false when it does not fit or has none */
static bool replace_present(const char *name, const char *by, char *buf, size_t n) {
    const char *at = strstr(name, "present");
    if (!at) return false;
    int w = snprintf(buf, n, "%.*s%s%s", (int)(at - name), name, by, at + strlen("present"));
    return w > 0 && (size_t)w < n;
}

gr_status gr_session_bind_state_auto(gr_session_t s, int *n_bound) {
    if (n_bound) *n_bound = 0;
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_bind_state_auto: session is NULL");
    GR_RT_NO_TP(s, "gr_session_bind_state_auto");
    static const char *const replacements[] = {"past_key_values", "past"};
    int bound = 0;
    for (int oi = 0; oi < s->graph->outputs.len; oi++) {
        const char *name = graph_output(s->graph, oi)->name;
        if (!name) continue;
        for (size_t r = 0; r < sizeof replacements / sizeof replacements[0]; r++) {
            char cand[1024];
            if (!replace_present(name, replacements[r], cand, sizeof cand)) continue;
            int ii = find_input(s->graph, cand);
            if (ii < 0 || state_of_input(s, ii) >= 0) continue;
            int grow;
            GR_TRY(check_pair(s, oi, ii, name, cand, &grow));
            GR_TRY(add_state(s, oi, ii, grow));
            bound++;
            break;
        }
    }
    if (n_bound) *n_bound = bound;
    return GR_OK;
}

int gr_session_num_states(gr_session_t s) { return s && s->gen ? s->gen->n : 0; }

gr_status gr_session_state_info(gr_session_t s, int k, const char **output, const char **input) {
    if (!s) return gr_error(GR_ERR_INVALID, "gr_session_state_info: session is NULL");
    if (k < 0 || k >= gr_session_num_states(s))
        return gr_error(GR_ERR_INVALID, "gr_session_state_info: state %d out of range (%d bound)", k, gr_session_num_states(s));
    if (output) *output = graph_output(s->graph, s->gen->states[k].out_index)->name;
    if (input) *input = graph_input(s->graph, s->gen->states[k].in_index)->name;
    return GR_OK;
}

/* ==== options ===================================================================================== */
void gr_generate_options_init(gr_generate_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 16;
    o->eos_id = -1;
    o->pad_id = -1;
    o->beams = 1;
    o->length_penalty = 1.0;
    o->top_p = 1.0;
    o->temperature = 1.0;
    o->prompt_mode = GR_PROMPT_AUTO;
}

/* Sampling's parameters as the shared definition takes them (codegen/kir.h, gr_sample_row): the
 * host engines and the device's sample op round temperature and top_p to f32 alike. */
static gr_sample_params gen_sample_params(const gr_generate_options *o) {
    return (gr_sample_params){.temperature = (float)o->temperature, .top_k = o->top_k, .top_p = (float)o->top_p};
}

/* ==== the step engine (reference: the unrewritten step through the session) ===================== */
typedef struct {
    gr_session_t s;
    const gr_generate_options *o;
    int in_ids, in_mask, in_pos, out_logits;
    int64_t rows;       /* batch * beams */
    int64_t vocab;
    int64_t max_total;  /* prompt_len + max_new_tokens */
    float *logits;      /* [rows, vocab]: the last position's logits of the last step */
    size_t logits_bytes;
    int64_t *scratch;   /* [rows * max(max_total, ...)]: ids, mask, positions */
    size_t scratch_bytes;
    void *mask_buf;     /* attention_mask in its dtype, [rows, max_total] */
    size_t mask_bytes;
    void *row_tmp;      /* one row of logits in the output's dtype (f16/bf16 conversion) */
    size_t row_tmp_bytes;
    int64_t steps;
} gen_ctx;

/* fills n elements of an integer (or float) input with v[i] in dtype t */
static void store_ints(void *dst, gr_dtype t, const int64_t *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case GR_I64: ((int64_t *)dst)[i] = v[i]; break;
        case GR_I32: ((int32_t *)dst)[i] = (int32_t)v[i]; break;
        case GR_F32: ((float *)dst)[i] = (float)v[i]; break;
        case GR_F64: ((double *)dst)[i] = (double)v[i]; break;
        case GR_BOOL:
        case GR_U8: ((uint8_t *)dst)[i] = (uint8_t)(v[i] != 0); break;
        case GR_I8: ((int8_t *)dst)[i] = (int8_t)v[i]; break;
        default: break; /* refused in gen_check_io */
        }
    }
}

static gr_status set_int_input(gen_ctx *c, int index, const int64_t *v, int64_t rows, int64_t cols) {
    const gr_ir_value *in = graph_input(c->s->graph, index);
    size_t n = (size_t)(rows * cols) * gr_dtype_size(in->dtype);
    void *dst = c->mask_buf;
    if (in->dtype == GR_I64) dst = (void *)v;
    else store_ints(dst, in->dtype, v, rows * cols);
    int64_t dims[2] = {rows, cols};
    return gr_session_set_input(c->s, in->name, in->dtype, 2, dims, dst, n);
}

/* One step: ids [rows, seq] after `past` positions. Leaves the last position's logits in
 * c->logits and the presents in the session's outputs (gen_commit_state moves them). */
static gr_status gen_run_step(gen_ctx *c, const int64_t *ids, int64_t seq, int64_t past) {
    gr_session_t s = c->s;
    int64_t rows = c->rows, total = past + seq;
    GR_TRY(set_int_input(c, c->in_ids, ids, rows, seq));
    if (c->in_pos >= 0) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t t = 0; t < seq; t++) c->scratch[r * seq + t] = past + t;
        GR_TRY(set_int_input(c, c->in_pos, c->scratch, rows, seq));
    }
    if (c->in_mask >= 0) {
        for (int64_t i = 0; i < rows * total; i++) c->scratch[i] = 1;
        GR_TRY(set_int_input(c, c->in_mask, c->scratch, rows, total));
    }
    for (int k = 0; k < s->gen->n; k++) {
        const gen_state *st = &s->gen->states[k];
        const gr_ir_value *in = graph_input(s->graph, st->in_index);
        int64_t dims[GR_MAX_DIMS];
        if (past == 0 && st->grow_axis < 0)
            return gr_error(GR_ERR_INVALID, "state input '%s' keeps its shape: it needs an initial value, which generation "
                                            "cannot give (only growing caches start empty)", in->name);
        /* the present of the last step had these dims, with the growing axis at `past` */
        if (past > 0) {
            const gr_ir_value *ov = graph_output(s->current->g, st->out_index);
            for (int d = 0; d < in->ndim; d++) dims[d] = ov->dims[d].size;
        } else {
            for (int d = 0; d < in->ndim; d++) {
                if (d == st->grow_axis) continue;
                if (d == 0) dims[d] = rows;
                else if (!gr_dx_is_sym(in->dims[d])) dims[d] = in->dims[d].size;
                else
                    return gr_error(GR_ERR_UNSUPPORTED, "state input '%s': dim %d is symbolic (not the batch or the sequence axis): "
                                                        "its size for an empty cache is unknown", in->name, d);
            }
            dims[st->grow_axis] = 0;
        }
        int64_t numel = 1;
        if (!gr_shape_numel_checked(in->ndim, dims, &numel))
            return gr_error(GR_ERR_SHAPE, "state input '%s': the shape holds too many elements", in->name);
        size_t bytes = (size_t)numel * gr_dtype_size(in->dtype);
        if (bytes > st->buf_bytes) return gr_error(GR_ERR_INTERNAL, "state input '%s': buffer too small", in->name);
        GR_TRY(gr_session_bind_input_device(s, in->name, in->dtype, in->ndim, dims, bytes ? st->buf : NULL, bytes));
    }
    GR_TRY(gr_session_run(s));
    c->steps++;
    /* the last position's logits of each row, to the host */
    gr_output lo;
    GR_TRY(gr_session_output(s, c->out_logits, &lo));
    const gr_ir_value *lv = graph_output(s->current->g, c->out_logits);
    if (lv->ndim != 3 || lv->dims[0].size != rows || lv->dims[1].size != seq || lv->dims[2].size != c->vocab)
        return gr_error(GR_ERR_SHAPE, "logits '%s': expected [%lld, %lld, %lld] for this step", lv->name, (long long)rows,
                        (long long)seq, (long long)c->vocab);
    void *dev;
    GR_TRY(gr_session_output_device_ptr(s, lo, &dev));
    size_t esz = gr_dtype_size(lv->dtype);
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)dev + (size_t)((r * seq + seq - 1) * c->vocab) * esz;
        void *dst = lv->dtype == GR_F32 ? (void *)(c->logits + r * c->vocab) : (char *)c->row_tmp + (size_t)(r * c->vocab) * esz;
        GR_TRY(gr_dev_memcpy(s->dev, s->stream, dst, src, (size_t)c->vocab * esz, GR_COPY_D2H));
    }
    GR_TRY(gr_dev_stream_sync(s->dev, s->stream));
    if (lv->dtype != GR_F32)
        for (int64_t i = 0; i < rows * c->vocab; i++) c->logits[i] = (float)gr_load_f64(c->row_tmp, lv->dtype, i);
    return GR_OK;
}

/* Moves each present of the last step into its state buffer, on the device: row r of the
 * buffer gets row src_rows[r] of the present (beam reordering; NULL: row r). */
static gr_status gen_commit_state(gen_ctx *c, const int64_t *src_rows) {
    gr_session_t s = c->s;
    for (int k = 0; k < s->gen->n; k++) {
        gen_state *st = &s->gen->states[k];
        gr_output o;
        GR_TRY(gr_session_output(s, st->out_index, &o));
        size_t bytes = gr_session_output_nbytes(s, o);
        if (bytes > st->buf_bytes) return gr_error(GR_ERR_INTERNAL, "state '%s': buffer too small", graph_output(s->graph, st->out_index)->name);
        if (!bytes) continue;
        void *src;
        GR_TRY(gr_session_output_device_ptr(s, o, &src));
        if (!src_rows) {
            GR_TRY(gr_dev_memcpy(s->dev, s->stream, st->buf, src, bytes, GR_COPY_D2D));
            continue;
        }
        size_t row = bytes / (size_t)c->rows; /* batch is the outermost axis (gen_prepare checks) */
        for (int64_t r = 0; r < c->rows; r++)
            GR_TRY(gr_dev_memcpy(s->dev, s->stream, (char *)st->buf + (size_t)r * row, (const char *)src + (size_t)src_rows[r] * row, row,
                                 GR_COPY_D2D));
    }
    return GR_OK;
}

/* ==== setup ======================================================================================= */
static int io_index(const gr_graph *g, const char *name, const char *def, bool out) {
    return out ? find_output(g, name ? name : def) : find_input(g, name ? name : def);
}

static bool int_like(gr_dtype t) { return t == GR_I64 || t == GR_I32 || t == GR_I8 || t == GR_U8 || t == GR_BOOL || t == GR_F32 || t == GR_F64; }

static gr_status gen_prepare(gen_ctx *c, int64_t batch, int64_t prompt_len) {
    gr_session_t s = c->s;
    const gr_generate_options *o = c->o;
    gr_graph *g = s->graph;
    c->in_ids = io_index(g, o->input_ids, "input_ids", false);
    if (c->in_ids < 0) return gr_error(GR_ERR_INVALID, "generate: the model has no input '%s' (token ids)", o->input_ids ? o->input_ids : "input_ids");
    c->in_mask = io_index(g, o->attention_mask, "attention_mask", false);
    if (o->attention_mask && c->in_mask < 0) return gr_error(GR_ERR_INVALID, "generate: the model has no input '%s'", o->attention_mask);
    c->in_pos = io_index(g, o->position_ids, "position_ids", false);
    if (o->position_ids && c->in_pos < 0) return gr_error(GR_ERR_INVALID, "generate: the model has no input '%s'", o->position_ids);
    c->out_logits = o->logits ? find_output(g, o->logits) : find_output(g, "logits");
    if (o->logits && c->out_logits < 0) return gr_error(GR_ERR_INVALID, "generate: the model has no output '%s'", o->logits);
    if (c->out_logits < 0) {
        int found = -1, count = 0;
        for (int oi = 0; oi < g->outputs.len; oi++) {
            bool state = false;
            for (int k = 0; k < s->gen->n; k++) state |= s->gen->states[k].out_index == oi;
            if (!state) found = oi, count++;
        }
        if (count != 1)
            return gr_error(GR_ERR_INVALID, "generate: no output named 'logits' and %d outputs not bound as state: name the logits", count);
        c->out_logits = found;
    }
    /* every input is fed by the loop */
    for (int i = 0; i < g->inputs.len; i++) {
        if (i == c->in_ids || i == c->in_mask || i == c->in_pos) {
            if (state_of_input(s, i) >= 0)
                return gr_error(GR_ERR_INVALID, "generate: input '%s' is bound as state but the loop feeds it", graph_input(g, i)->name);
            const gr_ir_value *v = graph_input(g, i);
            if (v->ndim != 2 || !int_like(v->dtype))
                return gr_error(GR_ERR_INVALID, "generate: input '%s' must be a 2-D integer tensor [batch, seq] (is %s, rank %d)", v->name,
                                gr_dtype_name(v->dtype), v->ndim);
            continue;
        }
        if (state_of_input(s, i) < 0)
            return gr_error(GR_ERR_INVALID,
                            "generate: input '%s' is neither the token ids ('%s'), attention_mask, position_ids nor a bound state",
                            graph_input(g, i)->name, graph_input(g, c->in_ids)->name);
    }
    for (int k = 0; k < s->gen->n; k++)
        if (s->gen->states[k].out_index == c->out_logits)
            return gr_error(GR_ERR_INVALID, "generate: output '%s' is the logits and a state", graph_output(g, c->out_logits)->name);
    const gr_ir_value *lv = graph_output(g, c->out_logits);
    if (lv->ndim != 3 || gr_dx_is_sym(lv->dims[2]))
        return gr_error(GR_ERR_INVALID, "generate: logits '%s' must be [batch, seq, vocab] with a fixed vocab", lv->name);
    if (lv->dtype != GR_F32 && lv->dtype != GR_F16 && lv->dtype != GR_BF16 && lv->dtype != GR_F64)
        return gr_error(GR_ERR_INVALID, "generate: logits '%s' are %s: floats expected", lv->name, gr_dtype_name(lv->dtype));
    c->vocab = lv->dims[2].size;
    if (c->vocab <= 0) return gr_error(GR_ERR_INVALID, "generate: logits '%s' have no vocabulary", lv->name);
    const gr_ir_value *iv = graph_input(g, c->in_ids);
    if (!gr_dx_is_sym(iv->dims[1]) && o->prompt_mode == GR_PROMPT_WHOLE && iv->dims[1].size != prompt_len)
        return gr_error(GR_ERR_INVALID, "generate: prompt mode 'whole' needs a symbolic seq dim, but input '%s' has seq %lld", iv->name,
                        (long long)iv->dims[1].size);
    if (!gr_dx_is_sym(iv->dims[1]) && iv->dims[1].size != 1)
        return gr_error(GR_ERR_INVALID, "generate: input '%s' has a fixed seq of %lld: a decode step takes 1", iv->name,
                        (long long)iv->dims[1].size);
    c->rows = batch * (o->beams > 1 ? o->beams : 1);
    c->max_total = prompt_len + o->max_new_tokens;
    /* host scratch */
    int64_t n_scratch = c->rows * (c->max_total > prompt_len ? c->max_total : prompt_len);
    c->scratch_bytes = (size_t)n_scratch * sizeof(int64_t);
    c->mask_bytes = (size_t)n_scratch * 8;
    c->logits_bytes = (size_t)(c->rows * c->vocab) * sizeof(float);
    c->row_tmp_bytes = (size_t)(c->rows * c->vocab) * 8;
    c->scratch = gr_malloc(c->scratch_bytes);
    c->mask_buf = gr_malloc(c->mask_bytes);
    c->logits = gr_malloc(c->logits_bytes);
    c->row_tmp = gr_malloc(c->row_tmp_bytes);
    if (!c->scratch || !c->mask_buf || !c->logits || !c->row_tmp) return GR_ERR_NOMEM;
    /* state buffers for the longest cache; batch must be the outermost axis (rows are reordered as blocks) */
    for (int k = 0; k < s->gen->n; k++) {
        gen_state *st = &s->gen->states[k];
        const gr_ir_value *in = graph_input(g, st->in_index);
        if (in->ndim < 1 || !gr_dx_equal(in->dims[0], iv->dims[0]))
            return gr_error(GR_ERR_INVALID, "generate: state input '%s' must have the batch (dim 0 of '%s') as its first axis", in->name,
                            iv->name);
        if (st->grow_axis == 0) return gr_error(GR_ERR_INVALID, "generate: state input '%s' grows along its batch axis", in->name);
        int64_t numel = c->rows;
        for (int d = 1; d < in->ndim; d++) {
            int64_t n;
            if (d == st->grow_axis) n = c->max_total;
            else if (!gr_dx_is_sym(in->dims[d])) n = in->dims[d].size;
            else
                return gr_error(GR_ERR_UNSUPPORTED, "generate: state input '%s': dim %d is symbolic (neither batch nor the sequence axis)",
                                in->name, d);
            if (gr_mul_overflow(numel, n, &numel) || numel > GR_MAX_NUMEL)
                return gr_error(GR_ERR_SHAPE, "generate: state input '%s' of %lld positions is too large", in->name, (long long)c->max_total);
        }
        size_t bytes = (size_t)numel * gr_dtype_size(in->dtype);
        if (bytes > st->buf_bytes) {
            if (s->pending) GR_TRY(gr_session_wait(s));
            void *p = NULL;
            GR_TRY(gr_dev_alloc(s->dev, GR_MEM_DEVICE, bytes ? bytes : 1, &p));
            if (st->buf) gr_dev_free(s->dev, st->buf);
            st->buf = p;
            st->buf_bytes = bytes;
        }
    }
    return GR_OK;
}

static void gen_ctx_free(gen_ctx *c) {
    gr_free(c->scratch, c->scratch_bytes);
    gr_free(c->mask_buf, c->mask_bytes);
    gr_free(c->logits, c->logits_bytes);
    gr_free(c->row_tmp, c->row_tmp_bytes);
}

/* ==== token selection (host) ===================================================================== */
/* argmax, lowest index on ties (torch.argmax) */
static int64_t pick_greedy(const float *x, int64_t vocab) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

/* Row r's token at new-token index j: the one definition of sampling (codegen/sample.c), with the
 * RNG bits of (seed, j * batch + r); the device's sample op computes the same (ir/ops.c). */
static int64_t pick_sample(const float *x, int64_t vocab, const gr_generate_options *o, int64_t j, int64_t batch, int64_t r) {
    gr_sample_params p = gen_sample_params(o);
    return gr_sample_row(x, GR_F32, vocab, &p, gr_sample_bits(o->seed, (uint64_t)(j * batch + r)));
}

/* ==== the loops ================================================================================== */
typedef struct {
    gen_ctx *c;
    const int64_t *prompt;
    int64_t batch, prompt_len;
    int64_t *out;
    int64_t width; /* prompt_len + max_new_tokens */
    double t0, t_first, t_end;
} gen_run;

/* The prompt: one step of every prompt token, or one step per token. rows = batch * reps (each
 * prompt row repeated reps times, beams). Leaves the logits of the last prompt position. */
static gr_status gen_prompt(gen_run *R, int64_t reps) {
    gen_ctx *c = R->c;
    const gr_ir_value *iv = graph_input(c->s->graph, c->in_ids);
    bool whole = c->o->prompt_mode == GR_PROMPT_WHOLE || (c->o->prompt_mode == GR_PROMPT_AUTO && gr_dx_is_sym(iv->dims[1]));
    int64_t P = R->prompt_len, rows = c->rows;
    int64_t *ids = gr_malloc((size_t)(rows * P) * sizeof(int64_t));
    if (!ids) return GR_ERR_NOMEM;
    for (int64_t r = 0; r < rows; r++) memcpy(ids + r * P, R->prompt + (r / reps) * P, (size_t)P * sizeof(int64_t));
    gr_status st = GR_OK;
    if (whole) {
        st = gen_run_step(c, ids, P, 0);
    } else {
        int64_t *col = gr_malloc((size_t)rows * sizeof(int64_t));
        if (!col) st = GR_ERR_NOMEM;
        for (int64_t t = 0; t < P && st == GR_OK; t++) {
            for (int64_t r = 0; r < rows; r++) col[r] = ids[r * P + t];
            st = gen_run_step(c, col, 1, t);
            if (st == GR_OK && t + 1 < P) st = gen_commit_state(c, NULL);
        }
        gr_free(col, (size_t)rows * sizeof(int64_t));
    }
    gr_free(ids, (size_t)(rows * P) * sizeof(int64_t));
    return st;
}

static gr_status gen_greedy(gen_run *R, gr_generate_stats *stats) {
    gen_ctx *c = R->c;
    const gr_generate_options *o = c->o;
    gr_session_t s = c->s;
    int64_t B = R->batch, P = R->prompt_len, N = o->max_new_tokens, vocab = c->vocab;
    int64_t pad = o->pad_id >= 0 ? o->pad_id : o->eos_id;
    size_t tok_bytes = (size_t)B * sizeof(int64_t), fin_bytes = (size_t)B;
    int64_t *tok = gr_malloc(tok_bytes);
    uint8_t *finished = gr_calloc((size_t)B, 1);
    gr_status st = (!tok || !finished) ? GR_ERR_NOMEM : GR_OK;
    if (st == GR_OK) st = gen_prompt(R, 1);
    int64_t j = 0;
    for (; j < N && st == GR_OK; j++) {
        bool all = true;
        for (int64_t r = 0; r < B; r++) {
            const float *x = c->logits + r * vocab;
            int64_t t;
            if (finished[r]) t = pad;
            else if (o->sample) t = pick_sample(x, vocab, o, j, B, r);
            else t = pick_greedy(x, vocab);
            if (o->eos_id >= 0 && t == o->eos_id) finished[r] = 1;
            all &= finished[r] != 0;
            tok[r] = t;
            R->out[r * R->width + P + j] = t;
        }
        if (j == 0) R->t_first = gr_session_clock_us(s);
        if (o->on_token) o->on_token(o->user, j, tok, B);
        if (j + 1 == N || (o->eos_id >= 0 && all)) {
            j++;
            break;
        }
        st = gen_commit_state(c, NULL);
        if (st == GR_OK) st = gen_run_step(c, tok, 1, P + j);
    }
    if (st == GR_OK) {
        stats->new_tokens = j;
        for (int64_t r = 0; r < B; r++)
            for (int64_t k = j; k < N; k++) R->out[r * R->width + P + k] = pad;
    }
    gr_free(tok, tok_bytes);
    gr_free(finished, fin_bytes);
    return st;
}

/* ---- beam search: Hugging Face's do_sample=False algorithm (early_stopping=True) ----
 * The per-step decision is codegen/beam.c's gr_beam_step_row (kir.h says what it computes), run
 * per batch row over flat state arrays; this loop runs the model and moves the cache rows after
 * their beams (D2D). The loop stops at max_new_tokens or when every batch row is done. */
static gr_status gen_beam(gen_run *R, gr_generate_stats *stats) {
    gen_ctx *c = R->c;
    const gr_generate_options *o = c->o;
    gr_session_t s = c->s;
    int64_t B = R->batch, P = R->prompt_len, N = o->max_new_tokens, vocab = c->vocab, K = o->beams, rows = c->rows;
    gr_beam_params bp = {.beams = K, .vocab = vocab, .max_new = N, .eos_id = o->eos_id,
                         .pad_id = o->pad_id >= 0 ? o->pad_id : o->eos_id, .length_penalty = o->length_penalty};
    size_t scratch_bytes = 0;
    GR_TRY(gr_beam_scratch_bytes(&bp, &scratch_bytes));
    size_t score_bytes = (size_t)rows * sizeof(float), seq_bytes = (size_t)(rows * N) * sizeof(int64_t);
    size_t src_bytes = (size_t)rows * sizeof(int64_t), len_bytes = (size_t)rows * sizeof(int64_t), done_bytes = (size_t)B;
    float *score = gr_malloc(score_bytes), *hyp_score = gr_malloc(score_bytes);
    int64_t *seqs = gr_malloc(seq_bytes), *hyp_tok = gr_malloc(seq_bytes), *hyp_len = gr_malloc(len_bytes);
    int64_t *src = gr_malloc(src_bytes), *tok = gr_malloc(src_bytes), *res = gr_malloc((size_t)N * sizeof(int64_t));
    uint8_t *done = gr_calloc((size_t)B, 1);
    void *scratch = gr_malloc(scratch_bytes);
    gr_status st = GR_OK;
    if (!score || !hyp_score || !seqs || !hyp_tok || !hyp_len || !src || !tok || !res || !done || !scratch) st = GR_ERR_NOMEM;
#define ROW(b) ((gr_beam_row){score + (b) * K, seqs + (b) * K * N, hyp_score + (b) * K, hyp_len + (b) * K, hyp_tok + (b) * K * N, done + (b)})
    if (st == GR_OK) {
        for (int64_t b = 0; b < B; b++) gr_beam_row_init(&bp, &ROW(b));
        st = gen_prompt(R, K);
    }
    int64_t j = 0;
    for (; j < N && st == GR_OK; j++) {
        bool all = true;
        for (int64_t b = 0; b < B; b++) {
            gr_beam_step_row(c->logits + b * K * vocab, GR_F32, &bp, j, &ROW(b), src + b * K, tok + b * K, scratch);
            for (int64_t i = 0; i < K; i++) src[b * K + i] += b * K; /* the row's beam -> the cache row */
            all &= done[b] != 0;
        }
        if (j == 0) R->t_first = gr_session_clock_us(s);
        if (j + 1 == N || all) {
            j++;
            break;
        }
        st = gen_commit_state(c, src);
        if (st == GR_OK) st = gen_run_step(c, tok, 1, P + j);
    }
    if (st == GR_OK) {
        stats->new_tokens = j;
        for (int64_t b = 0; b < B; b++) {
            gr_beam_row_result(&bp, &ROW(b), j, res);
            memcpy(R->out + b * R->width + P, res, (size_t)N * sizeof(int64_t));
        }
        if (o->on_token) {
            for (int64_t t = 0; t < j && st == GR_OK; t++) {
                for (int64_t b = 0; b < B; b++) tok[b] = R->out[b * R->width + P + t];
                o->on_token(o->user, t, tok, B);
            }
        }
    }
#undef ROW
    gr_free(score, score_bytes);
    gr_free(hyp_score, score_bytes);
    gr_free(seqs, seq_bytes);
    gr_free(hyp_tok, seq_bytes);
    gr_free(hyp_len, len_bytes);
    gr_free(src, src_bytes);
    gr_free(tok, src_bytes);
    gr_free(res, (size_t)N * sizeof(int64_t));
    gr_free(done, done_bytes);
    gr_free(scratch, scratch_bytes);
    return st;
}

/* ==== entry ======================================================================================= */
static gr_status check_options(const gr_generate_options *o, int64_t batch, int64_t prompt_len, int64_t vocab_unknown) {
    (void)vocab_unknown;
    if (batch <= 0) return gr_error(GR_ERR_INVALID, "generate: batch is %lld (must be > 0)", (long long)batch);
    if (prompt_len <= 0) return gr_error(GR_ERR_INVALID, "generate: prompt length is %lld (must be > 0)", (long long)prompt_len);
    if (o->max_new_tokens <= 0)
        return gr_error(GR_ERR_INVALID, "generate: max_new_tokens is %lld (must be > 0)", (long long)o->max_new_tokens);
    if (o->beams < 1) return gr_error(GR_ERR_INVALID, "generate: beams is %d (must be >= 1)", o->beams);
    if (o->beams > 1 && o->sample) return gr_error(GR_ERR_INVALID, "generate: beam search (beams %d) with sampling is not supported", o->beams);
    if (o->engine < 0 || o->engine >= GR_ENGINE_COUNT) return gr_error(GR_ERR_INVALID, "generate: engine %d is not a gr_generate_engine", o->engine);
    if (o->max_length < 0) return gr_error(GR_ERR_INVALID, "generate: max_length %lld is negative", (long long)o->max_length);
    if (o->steps_per_launch < 0)
        return gr_error(GR_ERR_INVALID, "generate: steps_per_launch %lld is negative (0: the default)", (long long)o->steps_per_launch);
    if (o->prompt_mode < 0 || o->prompt_mode >= GR_PROMPT_COUNT)
        return gr_error(GR_ERR_INVALID, "generate: prompt_mode %d is not a gr_prompt_mode", o->prompt_mode);
    if (o->sample) {
        /* both are used as f32 (gr_sample_row): they must stay positive and finite there */
        if (!(o->temperature > 0) || !isfinite(o->temperature) || !((float)o->temperature > 0) || !isfinite((float)o->temperature))
            return gr_error(GR_ERR_INVALID, "generate: temperature %g must be > 0 (and a positive f32)", o->temperature);
        if (!(o->top_p > 0 && o->top_p <= 1) || !((float)o->top_p > 0))
            return gr_error(GR_ERR_INVALID, "generate: top_p %g must be in (0, 1] (and a positive f32)", o->top_p);
        if (o->top_k < 0) return gr_error(GR_ERR_INVALID, "generate: top_k %d must be >= 0 (0 = off)", o->top_k);
    }
    if (o->beams > 1 && !isfinite(o->length_penalty))
        return gr_error(GR_ERR_INVALID, "generate: length_penalty %g is not finite", o->length_penalty);
    int64_t total, rows;
    if (__builtin_add_overflow(prompt_len, o->max_new_tokens, &total) || gr_mul_overflow(batch, o->beams, &rows) ||
        gr_mul_overflow(rows, total, &total) || total > GR_MAX_NUMEL)
        return gr_error(GR_ERR_INVALID, "generate: batch %lld x (prompt %lld + %lld new tokens) x %d beams is too large", (long long)batch,
                        (long long)prompt_len, (long long)o->max_new_tokens, o->beams);
    return GR_OK;
}

/* ==== the rewritten engine ==========================================================================
 * Greedy and sampling through gr_decode_engine: the prompt token by token (the rewritten step is a
 * single-token step), then one replay per position. The first generation of a session also runs the
 * prompt through the per-length step and compares the last position's logits (relative error at most
 * 1e-3 in f32, 3e-2 under bf16/f16 precision): a model the rewrite would get wrong (positions derived
 * from the cache length) is caught there, and auto falls back to the reference. Returns
 * GR_ERR_UNSUPPORTED (with a message) when the engine cannot serve this call. */
static double rel_err_f32(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}

/* The prompt but its last token as one step of the per-length model (prompt mode whole or auto,
 * with a symbolic seq), its presents copied on the device into the engine's cache: the engine
 * then runs only the last prompt position instead of one step per prompt token. *first: the
 * positions loaded (0: none, the engine runs the whole prompt token by token, as it does where
 * the export takes one token per step or the shapes do not line up). */
static gr_status gen_fast_prefix(gen_run *R, gr_decode_engine *e, int64_t *first) {
    gen_ctx *c = R->c;
    gr_session_t s = c->s;
    *first = 0;
    int64_t K = c->o->beams, B = R->batch * K, P = R->prompt_len, L = P - 1; /* B: the engine's rows (each prompt row K times) */
    const gr_ir_value *iv = graph_input(s->graph, c->in_ids);
    bool whole = c->o->prompt_mode == GR_PROMPT_WHOLE || (c->o->prompt_mode == GR_PROMPT_AUTO && gr_dx_is_sym(iv->dims[1]));
    if (!whole || L < 1) return GR_OK;
    int64_t *ids = gr_malloc((size_t)(B * L) * sizeof(int64_t));
    if (!ids) return GR_ERR_NOMEM;
    for (int64_t r = 0; r < B; r++) memcpy(ids + r * L, R->prompt + (r / K) * P, (size_t)L * sizeof(int64_t));
    c->rows = B;
    gr_status st = gen_run_step(c, ids, L, 0);
    gr_free(ids, (size_t)(B * L) * sizeof(int64_t));
    for (int k = 0; k < s->gen->n && st == GR_OK; k++) {
        const gen_state *gs = &s->gen->states[k];
        gr_output o;
        void *src = NULL;
        st = gr_session_output(s, gs->out_index, &o);
        if (st == GR_OK) st = gr_session_output_device_ptr(s, o, &src);
        if (st != GR_OK) break;
        const gr_ir_value *ov = graph_output(s->current->g, gs->out_index);
        int64_t dims[GR_MAX_DIMS];
        for (int d = 0; d < ov->ndim; d++) dims[d] = ov->dims[d].size;
        st = gr_decode_engine_load_prefix(e, k, src, ov->dtype, ov->ndim, dims, L);
    }
    if (st == GR_ERR_UNSUPPORTED) { /* the engine's buffers are not the presents' layout: token by token */
        if (s->opt.verbose) fprintf(stderr, "graft: note: the prompt runs token by token: %s\n", gr_last_error());
        gr_error_clear();
        return gr_decode_engine_reset(e, c->o->eos_id, c->o->pad_id >= 0 ? c->o->pad_id : c->o->eos_id);
    }
    if (st == GR_OK) *first = L;
    return st;
}

/* Beam search's decode loop on the device (the prompt's last step ran the first beam step): launches
 * of up to steps_per_launch steps, the beam state read back after each (its done flags end the
 * loop early; a WHILE graph stops inside a launch too), then every batch row's best hypothesis,
 * as the reference engine (gen_beam) takes it. *steps: the new tokens. */
static gr_status gen_fast_beam(gen_run *R, gr_decode_engine *e, gr_generate_stats *stats, int64_t *steps) {
    gen_ctx *c = R->c;
    const gr_generate_options *o = c->o;
    int64_t B = R->batch, K = o->beams, P = R->prompt_len, N = o->max_new_tokens;
    gr_beam_params bp = {.beams = K, .vocab = c->vocab, .max_new = N, .stride = gr_decode_engine_beam_room(e), .eos_id = o->eos_id,
                         .pad_id = o->pad_id >= 0 ? o->pad_id : o->eos_id, .length_penalty = o->length_penalty};
    gr_beam_layout l;
    GR_TRY(gr_beam_state_layout(&bp, &l));
    int64_t per = o->steps_per_launch > 0 ? o->steps_per_launch : 16, last = P + N - 1;
    size_t state_bytes = (size_t)(B * l.slots) * sizeof(int64_t), tbytes = (size_t)(per * B * K) * sizeof(int64_t);
    int64_t *state = gr_malloc(state_bytes), *tk = gr_malloc(tbytes), *res = gr_malloc((size_t)N * sizeof(int64_t));
    gr_status st = !state || !tk || !res ? GR_ERR_NOMEM : GR_OK;
    bool all = false;
    if (st == GR_OK) st = gr_decode_engine_read_beam(e, state, state_bytes);
    for (int64_t kv_first = P + 1; st == GR_OK && kv_first <= last; kv_first += per) {
        all = true;
        for (int64_t b = 0; b < B; b++) all &= state[b * l.slots + l.done] != 0;
        if (all) break;
        int64_t kv_stop = kv_first + per - 1 < last ? kv_first + per - 1 : last;
        st = gr_decode_engine_loop(e, kv_first, kv_stop, kv_first, tk);
        if (st == GR_OK) stats->launches++, st = gr_decode_engine_read_beam(e, state, state_bytes);
    }
    /* new tokens: up to the step at which the last batch row became done, else all N (gen_beam's j) */
    all = st == GR_OK;
    int64_t n = 0;
    for (int64_t b = 0; b < B && st == GR_OK; b++) {
        all &= state[b * l.slots + l.done] != 0;
        if (state[b * l.slots + l.done_step] > n) n = state[b * l.slots + l.done_step];
    }
    if (!all || n < 1) n = N;
    for (int64_t b = 0; b < B && st == GR_OK; b++) {
        gr_beam_row row = gr_beam_state_row(state + b * l.slots, &l);
        gr_beam_row_result(&bp, &row, n, res);
        memcpy(R->out + b * R->width + P, res, (size_t)N * sizeof(int64_t));
    }
    if (st == GR_OK) {
        *steps = n;
        c->steps += n - 1;
        if (o->on_token) {
            for (int64_t t = 0; t < n; t++) {
                for (int64_t b = 0; b < B; b++) tk[b] = R->out[b * R->width + P + t];
                o->on_token(o->user, t, tk, B);
            }
        }
    }
    gr_free(state, state_bytes);
    gr_free(tk, tbytes);
    gr_free(res, (size_t)N * sizeof(int64_t));
    return st;
}

static gr_status gen_fast(gen_run *R, gr_generate_stats *stats) {
    gen_ctx *c = R->c;
    gr_session_t s = c->s;
    const gr_generate_options *o = c->o;
    struct gr_rt_gen *gg = s->gen;
    int64_t K = o->beams, B = R->batch * K, P = R->prompt_len, N = o->max_new_tokens, V = c->vocab; /* B: the engine's rows */
    int64_t need = P + N, max_len = o->max_length > need ? o->max_length : need;
    if (gg->eng_verdict < 0) return gr_error(GR_ERR_UNSUPPORTED, "generate: the rewritten engine was refused earlier in this session");
    if (K > GR_BEAM_DEVICE_MAX_BEAMS)
        return gr_error(GR_ERR_UNSUPPORTED, "generate: the rewritten engine runs beam search with at most %d beams (%lld asked)",
                        GR_BEAM_DEVICE_MAX_BEAMS, (long long)K);
    if (max_len < 2) max_len = 2;
    bool sample = o->sample != 0;
    if (!gg->eng || gg->eng_batch != B || gg->eng_max < need || gg->eng_sample != sample || gg->eng_beams != K) {
        gr_decode_engine_destroy(gg->eng);
        gg->eng = NULL;
        const char **past = gr_calloc((size_t)gg->n, sizeof(char *)), **pres = gr_calloc((size_t)gg->n, sizeof(char *));
        gr_status st = (!past || !pres) ? GR_ERR_NOMEM : GR_OK;
        for (int k = 0; st == GR_OK && k < gg->n; k++) {
            past[k] = graph_input(s->graph, gg->states[k].in_index)->name;
            pres[k] = graph_output(s->graph, gg->states[k].out_index)->name;
        }
        const char *io[3] = {o->input_ids, o->position_ids, o->attention_mask};
        if (st == GR_OK)
            st = K > 1 ? gr_decode_engine_create_beam(s, gg->n, past, pres, io, B, max_len, K, &gg->eng)
                       : gr_decode_engine_create_ex(s, gg->n, past, pres, io, B, max_len, sample, &gg->eng);
        gr_free(past, (size_t)gg->n * sizeof(char *));
        gr_free(pres, (size_t)gg->n * sizeof(char *));
        if (st != GR_OK) {
            /* a model beam search's loop refuses may still run greedy: only greedy's refusal is final */
            if (st == GR_ERR_UNSUPPORTED && K == 1) gg->eng_verdict = -1;
            return st;
        }
        gg->eng_batch = B, gg->eng_max = max_len, gg->eng_sample = sample, gg->eng_beams = K;
    }
    gr_decode_engine *e = gg->eng;
    gr_session_t es = gr_decode_engine_session(e);
    R->t0 = gr_session_clock_us(es); /* its own clock (simulated on sim) */
    if (gr_decode_engine_vocab(e) != V) return gr_error(GR_ERR_INTERNAL, "generate: the rewritten step's vocabulary differs");
    size_t lbytes = (size_t)(B * V) * sizeof(float), ibytes = (size_t)B * sizeof(int64_t);
    float *logits = gr_malloc(lbytes);
    int64_t *ids = gr_malloc(ibytes), *next = gr_malloc(ibytes);
    uint8_t *finished = gr_calloc((size_t)B, 1);
    gr_status st = (!logits || !ids || !next || !finished) ? GR_ERR_NOMEM : GR_OK;
    int64_t pad = o->pad_id >= 0 ? o->pad_id : o->eos_id;
    if (st == GR_OK && sample) {
        /* the device's counter is (kv_len - P) * B + r: the new-token index j at kv_len = P + j */
        gr_sample_params sp = gen_sample_params(o);
        st = gr_decode_engine_set_sampling(e, o->seed, P, sp.top_k, sp.temperature, sp.top_p);
    }
    if (st == GR_OK) st = gr_decode_engine_reset(e, o->eos_id, pad);
    if (st == GR_OK && K > 1) st = gr_decode_engine_set_beam(e, P, o->eos_id, pad, o->length_penalty, N);
    int64_t first = 0; /* prompt positions the engine's cache holds already */
    if (st == GR_OK) st = gen_fast_prefix(R, e, &first);
    for (int64_t t = first; t < P && st == GR_OK; t++) {
        for (int64_t r = 0; r < B; r++) ids[r] = R->prompt[(r / K) * P + t];
        st = gr_decode_engine_step(e, ids, t + 1, t + 1 == P ? logits : NULL);
    }
    if (st == GR_OK && gg->eng_verdict == 0) {
        /* the once-per-session check: the per-length step on the whole prompt */
        c->rows = B;
        st = gen_prompt(R, K);
        if (st == GR_OK) {
            double err = rel_err_f32(logits, c->logits, (size_t)(B * V));
            double tol = s->opt.precision == GR_PRECISION_MODEL ? 1e-3 : 3e-2;
            if (!(err <= tol)) {
                gg->eng_verdict = -1;
                st = gr_error(GR_ERR_UNSUPPORTED,
                              "generate: the rewritten step disagrees with the per-length step on the prompt (relative error "
                              "%.3g > %.3g): the model may derive positions from the cache length; using the reference engine",
                              err, tol);
            } else {
                gg->eng_verdict = 1;
            }
        }
    }
    int64_t j = 0;
    if (st == GR_OK && K > 1) {
        R->t_first = gr_session_clock_us(es);
        st = gen_fast_beam(R, e, stats, &j);
        goto finish;
    }
    if (st == GR_OK && !gr_decode_engine_loop_refused(e)) {
        /* the decode loop on the device: the prompt's last step left the first token in row P
         * of the device's token ring and the next step's inputs in place; each launch runs up to
         * `per` steps and copies their tokens once */
        int64_t per = o->steps_per_launch > 0 ? o->steps_per_launch : 16, last = P + N - 1;
        size_t tbytes = (size_t)((per + 1) * B) * sizeof(int64_t);
        int64_t *tk = gr_malloc(tbytes);
        if (!tk) st = GR_ERR_NOMEM;
        int64_t row = P;
        bool done = false;
        R->t_first = gr_session_clock_us(es); /* the first token came with the prompt's last step */
        while (st == GR_OK && !done) {
            int64_t kv_first = row == P ? P + 1 : row, kv_stop = kv_first + per - 1;
            if (kv_stop > last) kv_stop = last;
            if (row == P && kv_stop < P) kv_stop = P; /* one new token: the prompt's */
            st = gr_decode_engine_loop(e, kv_first, kv_stop, row, tk);
            if (st == GR_OK && kv_stop >= kv_first) stats->launches++;
            if (st == GR_ERR_UNSUPPORTED && j == 0 && row == P) {
                /* refused at its first launch (a step the WHILE graph cannot hold): the host drives */
                gr_error_clear();
                st = GR_OK;
                break;
            }
            for (int64_t q = row; q <= kv_stop && st == GR_OK && !done; q++, j++) {
                bool all = true;
                for (int64_t r = 0; r < B; r++) {
                    int64_t t = finished[r] ? pad : tk[(q - row) * B + r];
                    if (o->eos_id >= 0 && t == o->eos_id) finished[r] = 1;
                    all &= finished[r] != 0;
                    ids[r] = t;
                    R->out[r * R->width + P + j] = t;
                }
                if (o->on_token) o->on_token(o->user, j, ids, B);
                if (j + 1 == N || (o->eos_id >= 0 && all)) done = true;
                else if (j > 0) c->steps++;
            }
            row = kv_stop + 1;
        }
        gr_free(tk, tbytes);
        if (done) goto finish;
    }
    bool have_ids = false; /* next[] holds the device's greedy ids for position P + j */
    for (; j < N && st == GR_OK; j++) {
        bool all = true;
        for (int64_t r = 0; r < B; r++) {
            int64_t t;
            if (finished[r]) t = pad;
            else if (o->sample) t = pick_sample(logits + r * V, V, o, j, B, r);
            else t = have_ids ? next[r] : pick_greedy(logits + r * V, V);
            if (o->eos_id >= 0 && t == o->eos_id) finished[r] = 1;
            all &= finished[r] != 0;
            ids[r] = t;
            R->out[r * R->width + P + j] = t;
        }
        if (j == 0) R->t_first = gr_session_clock_us(es);
        if (o->on_token) o->on_token(o->user, j, ids, B);
        if (j + 1 == N || (o->eos_id >= 0 && all)) {
            j++;
            break;
        }
        if (o->sample) st = gr_decode_engine_step(e, ids, P + j + 1, logits);
        else st = gr_decode_engine_step_greedy(e, ids, P + j + 1, next), have_ids = true;
        c->steps++;
    }
finish:
    if (st == GR_OK) {
        stats->new_tokens = j;
        for (int64_t r = 0; r < B && K == 1; r++) /* (beam search's results are padded already) */
            for (int64_t k = j; k < N; k++) R->out[r * R->width + P + k] = pad;
        stats->engine = GR_ENGINE_REWRITTEN;
        gr_run_stats rs;
        if (gr_session_stats(gr_decode_engine_session(e), &rs) == GR_OK) stats->captures = rs.captures;
        stats->prompt_steps = first ? 2 : P; /* the per-length step over P - 1 tokens and the last one, or P */
        R->t_end = gr_session_clock_us(es);
    }
    gr_free(logits, lbytes);
    gr_free(ids, ibytes);
    gr_free(next, ibytes);
    gr_free(finished, (size_t)B);
    return st;
}

static long count_plans(gr_session_t s) {
    long n = 0;
    for (gr_rt_plan *p = s->plans; p; p = p->next) n++;
    return n;
}

gr_status gr_session_generate(gr_session_t s, const gr_generate_options *opt, const int64_t *prompt, int64_t batch, int64_t prompt_len,
                              int64_t *out_tokens, gr_generate_stats *stats) {
    gr_generate_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!s || !prompt || !out_tokens) return gr_error(GR_ERR_INVALID, "gr_session_generate: NULL argument");
    gr_generate_options defaults;
    if (!opt) {
        gr_generate_options_init(&defaults);
        opt = &defaults;
    }
    GR_TRY(check_options(opt, batch, prompt_len, 0));
    if (!s->gen || s->gen->n == 0)
        return gr_error(GR_ERR_INVALID, "generate: no KV-cache state bound: bind it with gr_session_bind_state(s, \"present...\", "
                                        "\"past...\") or gr_session_bind_state_auto");
    gen_ctx c = {.s = s, .o = opt, .in_mask = -1, .in_pos = -1};
    gen_run R = {.c = &c, .prompt = prompt, .batch = batch, .prompt_len = prompt_len, .out = out_tokens,
                 .width = prompt_len + opt->max_new_tokens};
    gr_status st = gen_prepare(&c, batch, prompt_len);
    if (st == GR_OK && opt->beams > c.vocab)
        st = gr_error(GR_ERR_INVALID, "generate: %d beams over a vocabulary of %lld tokens: at most one beam per token", opt->beams,
                      (long long)c.vocab);
    if (st == GR_OK) {
        for (int64_t b = 0; b < batch; b++) {
            for (int64_t t = 0; t < prompt_len; t++) {
                int64_t id = prompt[b * prompt_len + t];
                if (id < 0 || id >= c.vocab) {
                    st = gr_error(GR_ERR_INVALID, "generate: prompt token [%lld, %lld] = %lld is outside the vocabulary (0..%lld)",
                                  (long long)b, (long long)t, (long long)id, (long long)c.vocab - 1);
                    break;
                }
                out_tokens[b * R.width + t] = id;
            }
            if (st != GR_OK) break;
        }
    }
    if (st == GR_OK) {
        R.t0 = gr_session_clock_us(s);
        bool fast = false;
        if (opt->engine == GR_ENGINE_REWRITTEN || opt->engine == GR_ENGINE_AUTO) {
            int64_t steps0 = c.steps;
            st = gen_fast(&R, stats);
            fast = st == GR_OK;
            if (st == GR_ERR_UNSUPPORTED && opt->engine == GR_ENGINE_AUTO) {
                if (s->opt.verbose) fprintf(stderr, "graft: note: %s\n", gr_last_error());
                gr_error_clear();
                c.steps = steps0;
                c.rows = batch * opt->beams;
                R.t0 = gr_session_clock_us(s);
                st = GR_OK;
            }
        }
        if (st == GR_OK && !fast) {
            st = opt->beams > 1 ? gen_beam(&R, stats) : gen_greedy(&R, stats);
            stats->engine = GR_ENGINE_REFERENCE;
        }
        if (fast) {
            double t_end = R.t_end;
            stats->prompt_us = R.t_first - R.t0;
            stats->decode_us = t_end - R.t_first;
            stats->decode_steps = stats->new_tokens > 0 ? stats->new_tokens - 1 : 0;
            stats->ms_per_token = stats->decode_steps > 0 ? stats->decode_us / (double)stats->decode_steps / 1e3 : 0;
            double all_us = stats->prompt_us + stats->decode_us;
            stats->tokens_per_s = all_us > 0 ? (double)(batch * stats->new_tokens) / (all_us / 1e6) : 0;
            stats->plans = count_plans(s);
            s->gen->last_engine = GR_ENGINE_REWRITTEN;
            gen_ctx_free(&c);
            return GR_OK;
        }
    }
    if (st == GR_OK) {
        double t_end = gr_session_clock_us(s);
        stats->prompt_us = R.t_first - R.t0;
        stats->decode_us = t_end - R.t_first;
        const gr_ir_value *iv = graph_input(s->graph, c.in_ids);
        bool whole = opt->prompt_mode == GR_PROMPT_WHOLE || (opt->prompt_mode == GR_PROMPT_AUTO && gr_dx_is_sym(iv->dims[1]));
        stats->prompt_steps = whole ? 1 : prompt_len;
        stats->decode_steps = c.steps - stats->prompt_steps;
        stats->ms_per_token = stats->decode_steps > 0 ? stats->decode_us / (double)stats->decode_steps / 1e3 : 0;
        double all_us = stats->prompt_us + stats->decode_us;
        stats->tokens_per_s = all_us > 0 ? (double)(batch * stats->new_tokens) / (all_us / 1e6) : 0;
        stats->plans = count_plans(s);
        s->gen->last_engine = GR_ENGINE_REFERENCE;
    }
    gen_ctx_free(&c);
    return st;
}

/* The decode step of the last generation, profiled like gr_session_profile: the rewritten
 * engine's step (its session's plan: one position at the generation's batch and maximum length)
 * or, after the reference engine, the per-length step plan that ran last. Each kernel is run
 * again in isolation: the cache position the last step wrote is written again with the same
 * values, so the engine stays usable; the session's outputs no longer describe a run. */
gr_status gr_session_generate_profile(gr_session_t s, char **out_text, double *kernel_sum_us, gr_profile_classes *classes) {
    if (!s || !out_text) return gr_error(GR_ERR_INVALID, "gr_session_generate_profile: NULL argument");
    *out_text = NULL;
    if (!s->gen || !s->gen->last_engine) return gr_error(GR_ERR_INVALID, "gr_session_generate_profile: no generation has run on this session");
    if (s->gen->last_engine == GR_ENGINE_REWRITTEN) {
        if (!s->gen->eng) return gr_error(GR_ERR_INTERNAL, "gr_session_generate_profile: the rewritten engine is gone");
        gr_session_t es = gr_decode_engine_session(s->gen->eng);
        gr_status st = gr_session_profile_classes(es, out_text, kernel_sum_us, classes);
        es->has_run = false;
        return st;
    }
    gr_status st = gr_session_profile_classes(s, out_text, kernel_sum_us, classes);
    s->has_run = false;
    return st;
}
