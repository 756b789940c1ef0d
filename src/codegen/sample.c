/* codegen/sample — decode sampling: one token per row of logits (kir.h, gr_sample_row).
 *
 * The definition is made of thresholds on the value (never a sort) and integer weights, so
 * that a GPU block computes the same thing with a fixed number of passes over the row:
 * radix selection of a key 8 bits at a time finds the top-k threshold (counts) and the top-p
 * threshold (sums of weights), then one scan in token-id order draws. Integer weights make
 * every sum exact, so the order in which threads add them cannot change a bit of the result;
 * only expf may differ between the host's libm and the device (a token at a boundary may
 * then flip, never the procedure). The host engine's sampling, the simulator's GR_LIB_SAMPLE
 * and constant folding all run this file. */
#include "codegen/kir.h"
#include <math.h>
#include <string.h>
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- one row ------------------------------------------------------------------------------ */
/* a float logit as f32 (f16/bf16/f32 exactly; callers check the dtype is a float one) */
static float logit_at(const void *x, gr_dtype t, int64_t i) { return (float)gr_load_f64(x, t, i); }

static float z_at(const void *x, gr_dtype t, int64_t i, float temperature) {
    float z = logit_at(x, t, i) / temperature + 0.0f; /* -0 -> +0: keys and == agree on zeros */
    return z != z ? -INFINITY : z;
}

/* an unsigned key in the order of the floats (-inf lowest, +inf highest) */
static uint32_t key_of(float z) {
    uint32_t u;
    memcpy(&u, &z, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static uint64_t weight_of(float z, float m) {
    if (z == m) return (uint64_t)1 << 32;
    float w = expf(z - m); /* in [0, 1): z < m */
    return (uint64_t)(w * 4294967296.0f);
}

/* floor(a * b / 2^64) */
static uint64_t mulhi64(uint64_t a, uint64_t b) {
    uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

int64_t gr_sample_row(const void *x, gr_dtype t, int64_t vocab, const gr_sample_params *p, uint64_t bits) {
    if (vocab <= 0) return 0;
    const float temp = p->temperature;
    float m = -INFINITY;
    for (int64_t i = 0; i < vocab; i++) {
        float z = z_at(x, t, i, temp);
        if (z > m) m = z;
    }
    /* top-k: the k-th largest key, one byte at a time from the top */
    uint32_t lo = 0; /* kept: key >= lo */
    if (p->top_k > 0 && p->top_k < vocab) {
        uint32_t prefix = 0;
        int64_t need = p->top_k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            int64_t hist[256] = {0};
            uint32_t high = shift == 24 ? 0 : ~0u << (shift + 8);
            for (int64_t i = 0; i < vocab; i++) {
                uint32_t k = key_of(z_at(x, t, i, temp));
                if ((k & high) == prefix) hist[(k >> shift) & 255u]++;
            }
            for (int d = 255; d >= 0; d--) {
                if (hist[d] >= need || d == 0) {
                    prefix |= (uint32_t)d << shift;
                    break;
                }
                need -= hist[d];
            }
        }
        lo = prefix;
    }
    /* top-p: the largest key c whose kept weight at or above c reaches top_p of the kept total */
    if (p->top_p < 1.0f) {
        uint64_t total = 0;
        for (int64_t i = 0; i < vocab; i++) {
            float z = z_at(x, t, i, temp);
            if (key_of(z) >= lo) total += weight_of(z, m);
        }
        double target = (double)p->top_p * (double)total;
        uint32_t prefix = 0;
        uint64_t above = 0; /* kept weight of keys above the prefix's range */
        for (int shift = 24; shift >= 0; shift -= 8) {
            uint64_t hist[256] = {0};
            uint32_t high = shift == 24 ? 0 : ~0u << (shift + 8);
            for (int64_t i = 0; i < vocab; i++) {
                float z = z_at(x, t, i, temp);
                uint32_t k = key_of(z);
                if (k >= lo && (k & high) == prefix) hist[(k >> shift) & 255u] += weight_of(z, m);
            }
            for (int d = 255; d >= 0; d--) {
                if ((double)(above + hist[d]) >= target || d == 0) {
                    prefix |= (uint32_t)d << shift;
                    break;
                }
                above += hist[d];
            }
        }
        if (prefix > lo) lo = prefix;
    }
    /* the draw: in token-id order over the kept weights */
    uint64_t kept = 0;
    for (int64_t i = 0; i < vocab; i++) {
        float z = z_at(x, t, i, temp);
        if (key_of(z) >= lo) kept += weight_of(z, m);
    }
    uint64_t target = mulhi64(bits, kept), run = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < vocab; i++) {
        float z = z_at(x, t, i, temp);
        if (key_of(z) < lo) continue;
        uint64_t w = weight_of(z, m);
        if (!w) continue;
        run += w;
        last = i;
        if (target < run) return i;
    }
    return last; /* not reached: target < kept */
}

/* ---- the library call ------------------------------------------------------------------- */
gr_status gr_libcall_sample_reference(const gr_libcall *c, const gr_karg *args) {
    if (c->dtype != GR_F32 && c->dtype != GR_F16 && c->dtype != GR_BF16 && c->dtype != GR_F64)
        return gr_error(GR_ERR_UNSUPPORTED, "sample %s: %s logits (floats only)", c->name, gr_dtype_name(c->dtype));
    if (c->m < 0 || c->n <= 0) return gr_error(GR_ERR_INVALID, "sample %s: %lld rows of %lld logits", c->name, (long long)c->m, (long long)c->n);
    if (c->m == 0) return GR_OK;
    const int64_t *step = args[1].ptr, *ints = args[3].ptr;
    const float *floats = args[4].ptr;
    int64_t *out = args[2].ptr;
    if (!args[0].ptr || !step || !out || !ints || !floats) return gr_error(GR_ERR_INVALID, "sample %s: NULL operand", c->name);
    gr_sample_params p = {.temperature = floats[0], .top_k = ints[2], .top_p = floats[1]};
    if (!(p.temperature > 0) || !(p.top_p > 0) || p.top_k < 0)
        return gr_error(GR_ERR_INVALID, "sample %s: temperature %g, top_k %lld, top_p %g (> 0, >= 0, > 0)", c->name,
                        (double)p.temperature, (long long)p.top_k, (double)p.top_p);
    size_t row = (size_t)c->n * gr_dtype_size(c->dtype);
    uint64_t base = ((uint64_t)step[0] - (uint64_t)ints[1]) * (uint64_t)c->m;
    for (int64_t r = 0; r < c->m; r++)
        out[r] = gr_sample_row((const char *)args[0].ptr + (size_t)r * row, c->dtype, c->n, &p,
                               gr_sample_bits((uint64_t)ints[0], base + (uint64_t)r));
    return GR_OK;
}
