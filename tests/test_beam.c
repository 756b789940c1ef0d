/* tests/test_beam.c — beam search's shared per-step decision (codegen/beam.c, gr_beam_step_row)
 * against its definition (codegen/kir.h) written the slow way: every one of the k x vocab
 * candidates scored and fully sorted (qsort), hypotheses kept by a scan. Random logits drawn from
 * a few values make ties common, so the tie order (lowest flat index first) is exercised; the
 * edge cases (fewer candidates than 2k, every candidate EOS, NaN logits, f16 logits) by hand. */
#include "check.h"
#include "codegen/kir.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { KMAX = 6, VMAX = 40, NMAX = 7 };

typedef struct {
    float score[KMAX], hyp_score[KMAX];
    int64_t seqs[KMAX * NMAX], hyp_tok[KMAX * NMAX], hyp_len[KMAX];
    uint8_t done;
} state;

static gr_beam_row row_of(state *s) { return (gr_beam_row){s->score, s->seqs, s->hyp_score, s->hyp_len, s->hyp_tok, &s->done}; }

typedef struct {
    double p;
    int64_t id;
} cand;

static int by_rank(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* the definition, slowly: everything scored, sorted, then the kir.h rules */
static void slow_step(const float *x, const gr_beam_params *p, int64_t j, state *s, int64_t *src, int64_t *tok) {
    int64_t K = p->beams, V = p->vocab, N = p->max_new;
    cand all[KMAX * VMAX];
    for (int64_t i = 0; i < K; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, x[i * V + v]);
        for (int64_t v = 0; v < V; v++) sum += exp((double)x[i * V + v] - mx);
        double lse = mx + log(sum);
        for (int64_t v = 0; v < V; v++) {
            float c = s->score[i] + (float)((double)x[i * V + v] - lse);
            all[i * V + v] = (cand){isnan(c) ? -INFINITY : (double)c, i * V + v};
        }
    }
    qsort(all, (size_t)(K * V), sizeof(cand), by_rank);
    int64_t n_top = 2 * K < K * V ? 2 * K : K * V;
    for (int64_t ci = 0; ci < K && ci < n_top && !s->done; ci++) {
        int64_t beam = all[ci].id / V, t = all[ci].id % V;
        if (!(p->eos_id >= 0 && t == p->eos_id) && j + 1 != N) continue;
        float fs = (float)(all[ci].p / pow((double)(j + 1), p->length_penalty));
        int64_t worst = 0;
        for (int64_t h = 1; h < K; h++)
            if (s->hyp_score[h] < s->hyp_score[worst]) worst = h;
        if (fs > s->hyp_score[worst]) {
            memcpy(s->hyp_tok + worst * N, s->seqs + beam * N, (size_t)j * sizeof(int64_t));
            s->hyp_tok[worst * N + j] = t;
            s->hyp_len[worst] = j + 1;
            s->hyp_score[worst] = fs;
        }
    }
    int64_t full = 1;
    for (int64_t h = 0; h < K; h++) full &= s->hyp_score[h] > GR_BEAM_EMPTY;
    if (full) s->done = 1;
    state old = *s;
    int64_t n = 0;
    for (int64_t ci = 0; ci < n_top && n < K; ci++) {
        int64_t beam = all[ci].id / V, t = all[ci].id % V;
        if (p->eos_id >= 0 && t == p->eos_id) continue;
        src[n] = beam, tok[n] = t, s->score[n] = (float)all[ci].p;
        memcpy(s->seqs + n * N, old.seqs + beam * N, (size_t)j * sizeof(int64_t));
        s->seqs[n * N + j] = t;
        n++;
    }
    for (; n < K; n++) {
        src[n] = 0, tok[n] = p->pad_id >= 0 ? p->pad_id : 0, s->score[n] = GR_BEAM_EMPTY;
        memcpy(s->seqs + n * N, old.seqs, (size_t)j * sizeof(int64_t));
        s->seqs[n * N + j] = tok[n];
    }
}

static bool same_state(const state *a, const state *b, const gr_beam_params *p, int64_t upto) {
    int64_t K = p->beams, N = p->max_new;
    if (a->done != b->done || memcmp(a->score, b->score, (size_t)K * sizeof(float)) ||
        memcmp(a->hyp_score, b->hyp_score, (size_t)K * sizeof(float)) || memcmp(a->hyp_len, b->hyp_len, (size_t)K * sizeof(int64_t)))
        return false;
    for (int64_t i = 0; i < K; i++) {
        if (memcmp(a->seqs + i * N, b->seqs + i * N, (size_t)upto * sizeof(int64_t))) return false;
        if (memcmp(a->hyp_tok + i * N, b->hyp_tok + i * N, (size_t)a->hyp_len[i] * sizeof(int64_t))) return false;
    }
    return true;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* random runs of N steps against the slow definition */
static void test_against_definition(void) {
    int runs = 0, bad = 0, finished_rows = 0, dead = 0;
    for (int trial = 0; trial < 400; trial++) {
        gr_beam_params p = {.beams = 1 + (int64_t)(next_u64() % KMAX), .vocab = 1 + (int64_t)(next_u64() % VMAX),
                            .max_new = 1 + (int64_t)(next_u64() % NMAX), .eos_id = (int64_t)(next_u64() % 3) - 1,
                            .pad_id = (int64_t)(next_u64() % 3) - 1, .length_penalty = trial % 3 == 0 ? 1.0 : (trial % 3 == 1 ? 0.0 : -0.5)};
        if (p.eos_id >= p.vocab) p.eos_id = -1;
        size_t scratch_bytes = 0;
        CHECK_OK(gr_beam_scratch_bytes(&p, &scratch_bytes));
        void *scratch = malloc(scratch_bytes);
        state fast, slow;
        memset(&fast, 0x5a, sizeof fast);
        gr_beam_row r = row_of(&fast);
        gr_beam_row_init(&p, &r);
        slow = fast;
        int levels = 1 + (int)(next_u64() % 4); /* few distinct logits: ties everywhere */
        for (int64_t j = 0; j < p.max_new; j++) {
            float x[KMAX * VMAX];
            for (int64_t i = 0; i < p.beams * p.vocab; i++) x[i] = (float)(next_u64() % (uint64_t)levels) * 0.75f;
            int64_t src_f[KMAX], tok_f[KMAX], src_s[KMAX], tok_s[KMAX];
            gr_beam_step_row(x, GR_F32, &p, j, &r, src_f, tok_f, scratch);
            slow_step(x, &p, j, &slow, src_s, tok_s);
            runs++;
            bool ok = !memcmp(src_f, src_s, (size_t)p.beams * sizeof(int64_t)) && !memcmp(tok_f, tok_s, (size_t)p.beams * sizeof(int64_t)) &&
                      same_state(&fast, &slow, &p, j + 1);
            if (!ok && bad++ < 5)
                fprintf(stderr, "trial %d step %lld (k %lld vocab %lld eos %lld): the step differs from its definition\n", trial, (long long)j,
                        (long long)p.beams, (long long)p.vocab, (long long)p.eos_id);
            for (int64_t i = 0; i < p.beams; i++) dead += fast.score[i] == GR_BEAM_EMPTY && j > 0;
            if (fast.done) break;
        }
        finished_rows += fast.done;
        int64_t out[NMAX];
        gr_beam_row_result(&p, &r, p.max_new, out);
        /* at the last step every top candidate became a hypothesis: the best one is the result */
        int64_t best = 0;
        for (int64_t h = 1; h < p.beams; h++)
            if (fast.hyp_score[h] > fast.hyp_score[best]) best = h;
        CHECK(fast.hyp_score[best] > GR_BEAM_EMPTY);
        for (int64_t t = 0; t < p.max_new; t++) CHECK(out[t] == (t < fast.hyp_len[best] ? fast.hyp_tok[best * p.max_new + t] : p.pad_id));
        free(scratch);
    }
    CHECK_MSG(bad == 0, "%d of %d steps differ from the definition", bad, runs);
    /* the draws reach the cases that matter */
    CHECK_MSG(finished_rows > 20 && dead > 10, "%d rows finished early, %d dead beams", finished_rows, dead);
}

static void test_edges(void) {
    /* equal logits: beam 0 alone expands (the others start empty), tokens in id order */
    gr_beam_params p = {.beams = 3, .vocab = 5, .max_new = 4, .eos_id = -1, .pad_id = -1, .length_penalty = 1.0};
    size_t bytes = 0;
    CHECK_OK(gr_beam_scratch_bytes(&p, &bytes));
    void *scratch = malloc(bytes);
    state s;
    gr_beam_row r = row_of(&s);
    gr_beam_row_init(&p, &r);
    float x[3 * 5] = {0};
    int64_t src[KMAX], tok[KMAX];
    gr_beam_step_row(x, GR_F32, &p, 0, &r, src, tok, scratch);
    CHECK(src[0] == 0 && src[1] == 0 && src[2] == 0 && tok[0] == 0 && tok[1] == 1 && tok[2] == 2);
    CHECK(fabsf(s.score[0] - -logf(5)) < 1e-6f && s.score[0] == s.score[2]);
    /* the next step, equal scores and logits: ties go to the lower flat index, beam 0 first */
    gr_beam_step_row(x, GR_F32, &p, 1, &r, src, tok, scratch);
    CHECK(src[0] == 0 && src[1] == 0 && src[2] == 0 && tok[0] == 0 && tok[1] == 1 && tok[2] == 2);
    CHECK(s.seqs[1 * 4 + 0] == 0 && s.seqs[1 * 4 + 1] == 1 && !s.done);
    /* f16 logits: token 3 of beam 1 is best, then tokens 3 of beams 0, 2 */
    uint16_t h[3 * 5];
    for (int i = 0; i < 15; i++) h[i] = 0x0000;   /* 0.0 */
    h[1 * 5 + 3] = 0x4400, h[0 * 5 + 3] = 0x4000; /* 4.0, 2.0 */
    h[2 * 5 + 3] = 0x4000;
    gr_beam_step_row(h, GR_F16, &p, 2, &r, src, tok, scratch);
    CHECK(src[0] == 1 && tok[0] == 3 && src[1] == 0 && tok[1] == 3 && src[2] == 2 && tok[2] == 3);
    CHECK(s.seqs[0 * 4 + 2] == 3 && s.seqs[0 * 4 + 1] == 1); /* beam 0 now continues old beam 1 (0, 1) */
    free(scratch);

    /* one token, and it is EOS: fewer than 2k candidates, every one an EOS, all beams dead */
    gr_beam_params q = {.beams = 2, .vocab = 1, .max_new = 3, .eos_id = 0, .pad_id = 7, .length_penalty = 1.0};
    CHECK_OK(gr_beam_scratch_bytes(&q, &bytes));
    scratch = malloc(bytes);
    r = row_of(&s);
    gr_beam_row_init(&q, &r);
    float y[2] = {1.f, 1.f};
    gr_beam_step_row(y, GR_F32, &q, 0, &r, src, tok, scratch);
    CHECK(!s.done && tok[0] == 7 && tok[1] == 7 && src[0] == 0 && src[1] == 0);
    CHECK(s.hyp_score[1] == GR_BEAM_EMPTY); /* beam 1's EOS scores "minus infinity": not kept */
    CHECK(s.score[0] == GR_BEAM_EMPTY && s.score[1] == GR_BEAM_EMPTY);
    CHECK(s.hyp_len[0] == 1 && s.hyp_tok[0] == 0 && s.hyp_score[0] == 0.f); /* log 1 = 0 */
    int64_t out[3];
    gr_beam_row_result(&q, &r, 1, out);
    CHECK(out[0] == 0 && out[1] == 7 && out[2] == 7);
    /* NaN logits rank lowest (as -inf): the row still picks, in id order */
    gr_beam_params n = {.beams = 2, .vocab = 3, .max_new = 2, .eos_id = -1, .pad_id = 0, .length_penalty = 1.0};
    CHECK_OK(gr_beam_scratch_bytes(&n, &bytes));
    free(scratch);
    scratch = malloc(bytes);
    r = row_of(&s);
    gr_beam_row_init(&n, &r);
    float z[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    gr_beam_step_row(z, GR_F32, &n, 0, &r, src, tok, scratch);
    CHECK(src[0] == 0 && tok[0] == 0 && src[1] == 0 && tok[1] == 1);
    free(scratch);
    /* out-of-range sizes are refused */
    gr_beam_params big = {.beams = INT64_MAX / 2, .vocab = 3, .max_new = INT64_MAX / 2, .eos_id = -1, .pad_id = 0, .length_penalty = 1.0};
    CHECK_ERR(gr_beam_scratch_bytes(&big, &bytes), GR_ERR_INVALID, "out of range");
    big.beams = 0;
    CHECK_ERR(gr_beam_scratch_bytes(&big, &bytes), GR_ERR_INVALID, "0 beams");
}

int main(void) {
    test_against_definition();
    test_edges();
    return check_summary("test_beam");
}
