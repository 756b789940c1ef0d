/* util/dtype — dtype names and sizes, half floats, typed element access. */
#include "util/util.h"
#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    const char *aliases[4];
} dtypes[GR_DTYPE_COUNT] = {
    [GR_F32] = {"f32", 4, {"float32", "float", NULL}},
    [GR_F16] = {"f16", 2, {"float16", "half", NULL}},
    [GR_BF16] = {"bf16", 2, {"bfloat16", NULL}},
    [GR_F64] = {"f64", 8, {"float64", "double", NULL}},
    [GR_I64] = {"i64", 8, {"int64", NULL}},
    [GR_I32] = {"i32", 4, {"int32", NULL}},
    [GR_I8] = {"i8", 1, {"int8", NULL}},
    [GR_U8] = {"u8", 1, {"uint8", NULL}},
    [GR_BOOL] = {"bool", 1, {"b8", NULL}},
};

const char *gr_dtype_name(gr_dtype t) { return (unsigned)t < GR_DTYPE_COUNT ? dtypes[t].name : "?"; }
size_t gr_dtype_size(gr_dtype t) { return (unsigned)t < GR_DTYPE_COUNT ? dtypes[t].size : 0; }

gr_status gr_dtype_parse(const char *name, gr_dtype *out) {
    for (int t = 0; t < GR_DTYPE_COUNT; t++) {
        if (!strcmp(name, dtypes[t].name)) return *out = (gr_dtype)t, GR_OK;
        for (int a = 0; dtypes[t].aliases[a]; a++)
            if (!strcmp(name, dtypes[t].aliases[a])) return *out = (gr_dtype)t, GR_OK;
    }
    return gr_error(GR_ERR_INVALID, "unknown dtype '%s' (expected f32 f16 bf16 f64 i64 i32 i8 u8 bool)", name);
}

bool gr_dtype_is_float(gr_dtype t) { return t == GR_F32 || t == GR_F16 || t == GR_BF16 || t == GR_F64; }
bool gr_dtype_is_int(gr_dtype t) { return t == GR_I64 || t == GR_I32 || t == GR_I8 || t == GR_U8; }

/* ---- half and bfloat16 ------------------------------------------------------------ */
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float gr_half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return u2f(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (mant << 13));
    return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t gr_f32_to_half(float f) {
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t absu = u & 0x7fffffffu;
    if (absu >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (absu > 0x7f800000u ? 0x200 : 0);
    if (absu >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (absu < 0x38800000u) { /* below smallest normal half: subnormal or zero */
        float a = u2f(absu);
        /* subnormal half step is 2^-24; rint rounds half to even in default mode */
        float q = a * 16777216.0f;
        uint32_t m = (uint32_t)rintf(q);
        return sign | (uint16_t)m;
    }
    /* normal: round mantissa from 23 to 10 bits, nearest even */
    uint32_t rounded = absu + 0xfffu + ((absu >> 13) & 1u);
    rounded -= (112u << 23);
    return sign | (uint16_t)(rounded >> 13);
}

float gr_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t gr_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- typed element access ------------------------------------------------------------ */
double gr_load_f64(const void *buf, gr_dtype t, int64_t i) {
    switch (t) {
    case GR_F32: return ((const float *)buf)[i];
    case GR_F16: return gr_half_to_f32(((const uint16_t *)buf)[i]);
    case GR_BF16: return gr_bf16_to_f32(((const uint16_t *)buf)[i]);
    case GR_F64: return ((const double *)buf)[i];
    case GR_I64: return (double)((const int64_t *)buf)[i];
    case GR_I32: return ((const int32_t *)buf)[i];
    case GR_I8: return ((const int8_t *)buf)[i];
    case GR_U8: return ((const uint8_t *)buf)[i];
    case GR_BOOL: return ((const uint8_t *)buf)[i] != 0;
    default: return 0;
    }
}

int64_t gr_load_i64(const void *buf, gr_dtype t, int64_t i) {
    switch (t) {
    case GR_I64: return ((const int64_t *)buf)[i];
    case GR_I32: return ((const int32_t *)buf)[i];
    case GR_I8: return ((const int8_t *)buf)[i];
    case GR_U8: return ((const uint8_t *)buf)[i];
    case GR_BOOL: return ((const uint8_t *)buf)[i] != 0;
    default: {
        double v = gr_load_f64(buf, t, i);
        if (isnan(v)) return 0;
        if (v >= 9.2233720368547758e18) return INT64_MAX;
        if (v <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void gr_store_f64(void *buf, gr_dtype t, int64_t i, double v) {
    switch (t) {
    case GR_F32: ((float *)buf)[i] = (float)v; break;
    case GR_F16: ((uint16_t *)buf)[i] = gr_f32_to_half((float)v); break;
    case GR_BF16: ((uint16_t *)buf)[i] = gr_f32_to_bf16((float)v); break;
    case GR_F64: ((double *)buf)[i] = v; break;
    case GR_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    default: {
        int64_t x = isnan(v) ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
        gr_store_i64(buf, t, i, x);
    }
    }
}

void gr_store_i64(void *buf, gr_dtype t, int64_t i, int64_t v) {
    switch (t) {
    case GR_I64: ((int64_t *)buf)[i] = v; break;
    case GR_I32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)v; break;
    case GR_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)v; break;
    case GR_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case GR_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    default: gr_store_f64(buf, t, i, (double)v); break;
    }
}
