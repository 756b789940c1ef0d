/* codegen/beam — one step of beam search for one batch row (kir.h, gr_beam_step_row).
 *
 * Hugging Face's generate(num_beams=k, do_sample=False, early_stopping=True) decision, once:
 * the host reference engine (runtime/generate.c) runs it per batch row, and a device beam-step
 * op is to run the same function in the simulator (as gr_sample_row is for sampling). All state
 * lives in flat caller-owned arrays (scores, sequences, hypotheses, done) so that a device
 * implementation can keep the same layout in device memory. The top 2k of k x vocab candidates
 * are kept in a bounded heap (O(k vocab log k), no sort of the row), then ordered by score
 * descending, lowest flat index (beam * vocab + token) on ties: torch.topk's order on the
 * flattened scores. */
#include "codegen/kir.h"
#include <math.h>
#include <string.h>

typedef struct {
    double p;   /* running score + log-probability (an f32 sum, held as double) */
    int64_t id; /* beam * vocab + token */
} beam_cand;

/* ---- the candidate heap ------------------------------------------------------------------- */
/* a ranks below b: lower score, or the same score and a higher flat index */
static bool worse(const beam_cand *a, const beam_cand *b) { return a->p < b->p || (a->p == b->p && a->id > b->id); }

/* a heap whose root is the worst kept candidate */
static void sift_down(beam_cand *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && worse(&h[l], &h[w])) w = l;
        if (r < n && worse(&h[r], &h[w])) w = r;
        if (w == i) return;
        beam_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void sift_up(beam_cand *h, int64_t i) {
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!worse(&h[i], &h[parent])) return;
        beam_cand t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

/* a float logit as f32 (f16/bf16/f32 exactly; callers check the dtype is a float one) */
static float logit_at(const void *x, gr_dtype t, int64_t i) { return (float)gr_load_f64(x, t, i); }

/* ---- state -------------------------------------------------------------------------------- */
static int64_t room(const gr_beam_params *p) { return p->stride > 0 ? p->stride : p->max_new; }

gr_status gr_beam_scratch_bytes(const gr_beam_params *p, size_t *bytes) {
    size_t k = (size_t)p->beams, n = (size_t)room(p), cand = 0, seqs = 0, scores = 0, total = 0;
    if (p->beams < 1 || p->max_new < 1 || p->vocab < 1 || room(p) < p->max_new || __builtin_mul_overflow(k, 2 * sizeof(beam_cand), &cand) ||
        __builtin_mul_overflow(k, n, &seqs) || __builtin_mul_overflow(seqs, sizeof(int64_t), &seqs) ||
        __builtin_mul_overflow(k, sizeof(float), &scores) || __builtin_add_overflow(cand, seqs, &total) ||
        __builtin_add_overflow(total, scores, &total))
        return gr_error(GR_ERR_INVALID, "beam search: %lld beams x %lld tokens (vocab %lld) is out of range", (long long)p->beams,
                        (long long)p->max_new, (long long)p->vocab);
    *bytes = total;
    return GR_OK;
}

void gr_beam_row_init(const gr_beam_params *p, const gr_beam_row *row) {
    /* beam 0 at 0 and the others at "minus infinity": the first step expands beam 0 only */
    for (int64_t i = 0; i < p->beams; i++) {
        row->score[i] = i == 0 ? 0.0f : GR_BEAM_EMPTY;
        row->hyp_score[i] = GR_BEAM_EMPTY;
        row->hyp_len[i] = 0;
    }
    *row->done = 0;
}

/* ---- one step ----------------------------------------------------------------------------- */
void gr_beam_step_row(const void *logits, gr_dtype dtype, const gr_beam_params *p, int64_t j, const gr_beam_row *row, int64_t *src,
                      int64_t *tok, void *scratch) {
    const int64_t K = p->beams, K2 = 2 * K, V = p->vocab, N = room(p);
    const bool last = j + 1 == p->max_new;
    beam_cand *cand = scratch;
    int64_t *new_seqs = (int64_t *)(cand + K2);
    float *new_score = (float *)(new_seqs + K * N);
    int64_t n_cand = 0;
    /* top 2k of scores + logprobs over k x vocab */
    for (int64_t i = 0; i < K; i++) {
        const char *x = (const char *)logits;
        size_t row_bytes = (size_t)V * gr_dtype_size(dtype);
        x += (size_t)i * row_bytes;
        double mx = logit_at(x, dtype, 0), sum = 0;
        for (int64_t v = 1; v < V; v++) {
            float xv = logit_at(x, dtype, v);
            mx = xv > mx ? xv : mx;
        }
        for (int64_t v = 0; v < V; v++) sum += exp((double)logit_at(x, dtype, v) - mx);
        double lse = mx + log(sum);
        for (int64_t v = 0; v < V; v++) {
            float lp = (float)((double)logit_at(x, dtype, v) - lse);
            beam_cand c = {(double)(row->score[i] + lp), i * V + v}; /* f32 sums, as torch */
            if (c.p != c.p) c.p = -INFINITY;                       /* NaN ranks lowest */
            if (n_cand < K2) {
                cand[n_cand] = c;
                sift_up(cand, n_cand++);
            } else if (worse(&cand[0], &c)) {
                cand[0] = c;
                sift_down(cand, K2, 0);
            }
        }
    }
    /* best first: pop the worst to the end */
    for (int64_t end = n_cand - 1; end > 0; end--) {
        beam_cand t = cand[0];
        cand[0] = cand[end];
        cand[end] = t;
        sift_down(cand, end, 0);
    }
    /* finished hypotheses: EOS (or every candidate at the last position) among the first k */
    for (int64_t ci = 0; ci < K && ci < n_cand && !*row->done; ci++) {
        int64_t beam = cand[ci].id / V, t = cand[ci].id % V;
        bool eos = p->eos_id >= 0 && t == p->eos_id;
        if (!eos && !last) continue;
        float fs = (float)(cand[ci].p / pow((double)(j + 1), p->length_penalty));
        /* the k best finished: replace the worst when better (existing ones win ties) */
        int64_t worst = 0;
        for (int64_t h = 1; h < K; h++)
            if (row->hyp_score[h] < row->hyp_score[worst]) worst = h;
        if (!(fs > row->hyp_score[worst])) continue;
        memcpy(row->hyp_tok + worst * N, row->seqs + beam * N, (size_t)j * sizeof(int64_t));
        row->hyp_tok[worst * N + j] = t;
        row->hyp_len[worst] = j + 1;
        row->hyp_score[worst] = fs;
    }
    if (!*row->done) {
        bool full = true;
        for (int64_t h = 0; h < K; h++) full &= row->hyp_score[h] > GR_BEAM_EMPTY;
        if (full) *row->done = 1;
    }
    /* the k best non-EOS continuations run on */
    int64_t n = 0;
    for (int64_t ci = 0; ci < n_cand && n < K; ci++) {
        int64_t beam = cand[ci].id / V, t = cand[ci].id % V;
        if (p->eos_id >= 0 && t == p->eos_id) continue;
        src[n] = beam;
        tok[n] = t;
        new_score[n] = (float)cand[ci].p;
        memcpy(new_seqs + n * N, row->seqs + beam * N, (size_t)j * sizeof(int64_t));
        new_seqs[n * N + j] = t;
        n++;
    }
    for (; n < K; n++) { /* fewer than k non-EOS candidates: dead beams continue beam 0 */
        src[n] = 0;
        tok[n] = p->pad_id >= 0 ? p->pad_id : 0;
        new_score[n] = GR_BEAM_EMPTY;
        memcpy(new_seqs + n * N, row->seqs, (size_t)j * sizeof(int64_t));
        new_seqs[n * N + j] = tok[n];
    }
    memcpy(row->score, new_score, (size_t)K * sizeof(float));
    for (int64_t i = 0; i < K; i++) memcpy(row->seqs + i * N, new_seqs + i * N, (size_t)(j + 1) * sizeof(int64_t));
}

/* ---- the result --------------------------------------------------------------------------- */
void gr_beam_row_result(const gr_beam_params *p, const gr_beam_row *row, int64_t steps, int64_t *out) {
    int64_t best = -1;
    for (int64_t h = 0; h < p->beams; h++)
        if (row->hyp_score[h] > GR_BEAM_EMPTY && (best < 0 || row->hyp_score[h] > row->hyp_score[best])) best = h;
    for (int64_t t = 0; t < p->max_new; t++) {
        int64_t v = p->pad_id;
        if (best >= 0 && t < row->hyp_len[best]) v = row->hyp_tok[best * room(p) + t];
        else if (best < 0 && t < steps) v = row->seqs[t];
        out[t] = v;
    }
}

/* ---- the beam state on a device ------------------------------------------------------------ */
gr_status gr_beam_state_layout(const gr_beam_params *p, gr_beam_layout *l) {
    size_t scratch = 0;
    GR_TRY(gr_beam_scratch_bytes(p, &scratch));
    int64_t K = p->beams, n = room(p), kn = 0, at = 0;
    if (__builtin_mul_overflow(K, n, &kn) || kn > ((int64_t)1 << 40))
        return gr_error(GR_ERR_INVALID, "beam search: %lld beams x %lld tokens is out of range", (long long)K, (long long)n);
    l->tok = at, at += K;
    l->src = at, at += K;
    l->done = at++;
    l->done_step = at++;
    l->score = at, at += K;
    l->hyp_score = at, at += K;
    l->hyp_len = at, at += K;
    l->seqs = at, at += kn;
    l->hyp_tok = at, at += kn;
    l->scratch = at, at += (int64_t)((scratch + 7) / 8);
    l->slots = at;
    return GR_OK;
}

gr_beam_row gr_beam_state_row(int64_t *s, const gr_beam_layout *l) {
    /* done: the slot's low byte (little-endian hosts and devices: the slot reads 0 or 1) */
    return (gr_beam_row){.score = (float *)(s + l->score), .seqs = s + l->seqs, .hyp_score = (float *)(s + l->hyp_score),
                         .hyp_len = s + l->hyp_len, .hyp_tok = s + l->hyp_tok, .done = (uint8_t *)(s + l->done)};
}

void gr_beam_state_init(const gr_beam_params *p, const gr_beam_layout *l, int64_t rows, int64_t *state) {
    memset(state, 0, (size_t)(rows * l->slots) * sizeof(int64_t));
    for (int64_t b = 0; b < rows; b++) {
        int64_t *s = state + b * l->slots;
        gr_beam_row row = gr_beam_state_row(s, l);
        gr_beam_row_init(p, &row);
        for (int64_t i = 0; i < p->beams; i++) s[l->src + i] = b * p->beams + i;
    }
}

/* params as the op reads them (GR_BEAM_NPARAMS) */
static gr_status op_params(const gr_libcall *c, const int64_t *params, gr_beam_params *p) {
    double lp;
    int64_t bits = params[3];
    memcpy(&lp, &bits, sizeof lp);
    *p = (gr_beam_params){.beams = c->k, .vocab = c->n, .max_new = params[4], .stride = c->lda, .eos_id = params[1],
                          .pad_id = params[2], .length_penalty = lp};
    if (p->max_new < 1 || p->max_new > p->stride || !isfinite(lp))
        return gr_error(GR_ERR_INVALID, "beam_step %s: max_new %lld (room %lld), length_penalty %g", c->name, (long long)p->max_new,
                        (long long)p->stride, lp);
    return GR_OK;
}

gr_status gr_libcall_beam_step_reference(const gr_libcall *c, const gr_karg *args) {
    if (c->dtype != GR_F32 && c->dtype != GR_F16 && c->dtype != GR_BF16 && c->dtype != GR_F64)
        return gr_error(GR_ERR_UNSUPPORTED, "beam_step %s: %s logits (floats only)", c->name, gr_dtype_name(c->dtype));
    if (c->m < 0 || c->n <= 0 || c->k < 1)
        return gr_error(GR_ERR_INVALID, "beam_step %s: %lld rows of %lld beams x %lld logits", c->name, (long long)c->m, (long long)c->k,
                        (long long)c->n);
    const int64_t *step = args[1].ptr, *in = args[3].ptr, *params = args[4].ptr;
    int64_t *out = args[2].ptr;
    if (!args[0].ptr || !step || !out || !in || !params) return gr_error(GR_ERR_INVALID, "beam_step %s: NULL operand", c->name);
    gr_beam_params p;
    gr_beam_layout l;
    GR_TRY(op_params(c, params, &p));
    GR_TRY(gr_beam_state_layout(&p, &l));
    if (out != in) memcpy(out, in, (size_t)(c->m * l.slots) * sizeof(int64_t));
    int64_t j = step[0] - params[0];
    if (j < 0 || j >= p.max_new) return GR_OK; /* a prompt step (or past the end): the state stays */
    size_t row_bytes = (size_t)(c->k * c->n) * gr_dtype_size(c->dtype);
    for (int64_t b = 0; b < c->m; b++) {
        int64_t *s = out + b * l.slots;
        gr_beam_row row = gr_beam_state_row(s, &l);
        bool was_done = *row.done != 0;
        gr_beam_step_row((const char *)args[0].ptr + (size_t)b * row_bytes, c->dtype, &p, j, &row, s + l.src, s + l.tok,
                         s + l.scratch);
        for (int64_t i = 0; i < p.beams; i++) s[l.src + i] += b * p.beams; /* the beam -> its cache row */
        if (!was_done && *row.done) s[l.done_step] = j + 1;
    }
    return GR_OK;
}

gr_status gr_libcall_beam_reorder_reference(const gr_libcall *c, const gr_karg *args) {
    if (c->m < 0 || c->n < 0 || c->k < 0 || c->lda < 0)
        return gr_error(GR_ERR_INVALID, "beam_reorder %s: [%lld, %lld, %lld, %lld]", c->name, (long long)c->m, (long long)c->n,
                        (long long)c->k, (long long)c->lda);
    const char *x = args[0].ptr;
    const int64_t *rows = args[1].ptr, *kv = args[3].ptr;
    char *y = args[2].ptr;
    if (!x || !rows || !y || !kv) return gr_error(GR_ERR_INVALID, "beam_reorder %s: NULL operand", c->name);
    int64_t valid = kv[0] + c->ldb;
    if (valid < 0) valid = 0;
    if (valid > c->k) valid = c->k;
    size_t es = gr_dtype_size(c->dtype), inner = (size_t)c->lda * es, block = (size_t)c->k * inner, row = (size_t)c->n * block;
    for (int64_t r = 0; r < c->m; r++) {
        if (rows[r] < 0 || rows[r] >= c->m)
            return gr_error(GR_ERR_INVALID, "beam_reorder %s: row %lld reads row %lld of %lld", c->name, (long long)r, (long long)rows[r],
                            (long long)c->m);
        for (int64_t a = 0; a < c->n; a++) {
            char *dst = y + (size_t)r * row + (size_t)a * block;
            memcpy(dst, x + (size_t)rows[r] * row + (size_t)a * block, (size_t)valid * inner);
            memset(dst + (size_t)valid * inner, 0, (size_t)(c->k - valid) * inner);
        }
    }
    return GR_OK;
}
