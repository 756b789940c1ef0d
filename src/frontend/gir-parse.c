/* frontend/gir-parse — reader of the .gir text format (docs/gir.md).
 *
 * Two phases: the lexer turns the whole text into a token array (names,
 * strings and numbers copied NUL-terminated into one buffer), then a
 * recursive-descent parser builds the graph with the ir.c builder. Newlines
 * end statements, except inside ( ) and [ ], where the lexer drops them so a
 * call or a data list may span lines; inside { } they are significant again.
 * Name lookups go through per-graph hash tables (ir.c's lookups are linear).
 */
#include "frontend/frontend.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Nesting of ( [ { together; bounds the parser's recursion on any input. */
#define GIR_MAX_NEST 64

enum {
    T_EOF, T_NEWLINE, T_NAME, T_STRING, T_NUMBER,
    T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK, T_LBRACE, T_RBRACE, T_COMMA, T_EQ, T_COLON, T_AT
};

typedef struct {
    int kind;
    int line, col;
    size_t text; /* offset in parser.strs of the NUL-terminated text (NAME, STRING, NUMBER) */
} gir_tok;

/* Open-addressing set of value (or node) indices keyed by their names. */
typedef struct {
    int *slots; /* index + 1; 0 = empty */
    size_t cap, count;
} name_table;

typedef struct scope scope;
struct scope {
    gr_graph *g;
    name_table values, nodes;
    scope *parent;
};

typedef struct {
    const char *origin, *base_dir;
    GR_VEC(gir_tok) toks;
    char *strs;
    size_t strs_len, strs_cap;
    int pos;
} parser;

/* ==== errors ======================================================================= */
static gr_status perr_at(const parser *p, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static gr_status perr_at(const parser *p, int line, int col, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gr_error(GR_ERR_PARSE, "%s:%d:%d: %s", p->origin, line, col, msg);
}
#define perr(p, tok, ...) perr_at((p), (tok)->line, (tok)->col, __VA_ARGS__)

/* ==== lexer ========================================================================= */
static gr_status strs_reserve(parser *p, size_t extra) {
    if (p->strs_len + extra <= p->strs_cap) return GR_OK;
    size_t ncap = p->strs_cap ? p->strs_cap : 1024;
    while (ncap < p->strs_len + extra) ncap *= 2;
    char *s = gr_realloc(p->strs, p->strs_cap, ncap);
    if (!s) return GR_ERR_NOMEM;
    p->strs = s;
    p->strs_cap = ncap;
    return GR_OK;
}

static gr_status push_tok(parser *p, int kind, int line, int col, const char *text, size_t n) {
    gir_tok t = {kind, line, col, 0};
    if (text) {
        GR_TRY(strs_reserve(p, n + 1));
        t.text = p->strs_len;
        memcpy(p->strs + p->strs_len, text, n);
        p->strs[p->strs_len + n] = 0;
        p->strs_len += n + 1;
    }
    return gr_vec_push(&p->toks, t);
}

static bool is_name_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_name_char(int c) {
    return is_name_start(c) || is_digit(c) || c == '.' || c == ':' || c == '/' || c == '-';
}
static int hex_val(int c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string; the decoded bytes go straight into strs. */
static gr_status lex_string(parser *p, const char *src, size_t len, size_t *pi, int line, int col, size_t line_start) {
    size_t i = *pi + 1;
    GR_TRY(strs_reserve(p, 1));
    gir_tok t = {T_STRING, line, col, p->strs_len};
    for (;;) {
        if (i >= len || src[i] == '\n') return perr_at(p, line, col, "unterminated string");
        unsigned char c = (unsigned char)src[i];
        if (c == '"') break;
        if (c == 0) return perr_at(p, line, (int)(i - line_start) + 1, "NUL byte in string");
        if (c == '\\') {
            int ecol = (int)(i - line_start) + 1;
            if (i + 1 >= len) return perr_at(p, line, col, "unterminated string");
            char e = src[i + 1];
            i += 2;
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'x': {
                int h1 = i < len ? hex_val((unsigned char)src[i]) : -1;
                int h2 = i + 1 < len ? hex_val((unsigned char)src[i + 1]) : -1;
                if (h1 < 0 || h2 < 0 || (h1 | h2) == 0)
                    return perr_at(p, line, ecol, "bad escape in string (\\x needs two hex digits, not 00)");
                c = (unsigned char)(h1 * 16 + h2);
                i += 2;
                break;
            }
            default: return perr_at(p, line, ecol, "bad escape '\\%c' in string", e >= 32 && e < 127 ? e : '?');
            }
        } else {
            i++;
        }
        GR_TRY(strs_reserve(p, 2));
        p->strs[p->strs_len++] = (char)c;
    }
    p->strs[p->strs_len++] = 0;
    *pi = i + 1;
    return gr_vec_push(&p->toks, t);
}

/* [+-]? (digits [. digits] | . digits) ([eE] [+-]? digits)? | [+-]? (inf|nan) */
static gr_status lex_number(parser *p, const char *src, size_t len, size_t *pi, int line, int col) {
    size_t s = *pi, i = *pi;
    bool ok = true;
    if (src[i] == '+' || src[i] == '-') i++;
    if (i + 3 <= len && (!memcmp(src + i, "inf", 3) || !memcmp(src + i, "nan", 3))) {
        i += 3;
    } else {
        size_t digits = 0;
        while (i < len && is_digit(src[i])) i++, digits++;
        if (i < len && src[i] == '.') {
            i++;
            while (i < len && is_digit(src[i])) i++, digits++;
        }
        if (!digits) ok = false;
        if (ok && i < len && (src[i] == 'e' || src[i] == 'E')) {
            i++;
            if (i < len && (src[i] == '+' || src[i] == '-')) i++;
            if (i >= len || !is_digit(src[i])) ok = false;
            while (i < len && is_digit(src[i])) i++;
        }
    }
    if (!ok || (i < len && is_name_char((unsigned char)src[i]))) {
        while (i < len && (is_name_char((unsigned char)src[i]) || src[i] == '+')) i++;
        int n = (int)GR_MIN(i - s, 64);
        return perr_at(p, line, col, "bad number '%.*s'", n, src + s);
    }
    *pi = i;
    return push_tok(p, T_NUMBER, line, col, src + s, i - s);
}

static gr_status lex(parser *p, const char *src, size_t len) {
    char stack[GIR_MAX_NEST];
    int sp = 0, line = 1;
    size_t i = 0, line_start = 0;
    if (len >= 3 && !memcmp(src, "\xEF\xBB\xBF", 3)) i = line_start = 3; /* UTF-8 byte order mark */
    while (i < len) {
        unsigned char c = (unsigned char)src[i];
        int col = (int)GR_MIN(i - line_start + 1, (size_t)1 << 30);
        if (c == '\n') {
            /* newlines matter at statement level only; consecutive ones collapse */
            bool significant = sp == 0 || stack[sp - 1] == '{';
            if (significant && p->toks.len && p->toks.data[p->toks.len - 1].kind != T_NEWLINE)
                GR_TRY(push_tok(p, T_NEWLINE, line, col, NULL, 0));
            line++;
            line_start = ++i;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            i++;
            continue;
        }
        if (c == '#') {
            while (i < len && src[i] != '\n') i++;
            continue;
        }
        if (c == '"') {
            GR_TRY(lex_string(p, src, len, &i, line, col, line_start));
            continue;
        }
        if (is_digit(c) || (c == '.' && i + 1 < len && is_digit(src[i + 1])) ||
            ((c == '+' || c == '-') && i + 1 < len &&
             (is_digit(src[i + 1]) || src[i + 1] == '.' || src[i + 1] == 'i' || src[i + 1] == 'n'))) {
            GR_TRY(lex_number(p, src, len, &i, line, col));
            continue;
        }
        if (is_name_start(c)) {
            size_t s = i;
            while (i < len && is_name_char((unsigned char)src[i])) i++;
            /* `x: f32[...]`: a bare name never ends with ':' */
            while (src[i - 1] == ':') i--;
            GR_TRY(push_tok(p, T_NAME, line, col, src + s, i - s));
            continue;
        }
        int kind;
        switch (c) {
        case '(': kind = T_LPAREN; break;
        case ')': kind = T_RPAREN; break;
        case '[': kind = T_LBRACK; break;
        case ']': kind = T_RBRACK; break;
        case '{': kind = T_LBRACE; break;
        case '}': kind = T_RBRACE; break;
        case ',': kind = T_COMMA; break;
        case '=': kind = T_EQ; break;
        case ':': kind = T_COLON; break;
        case '@': kind = T_AT; break;
        default:
            if (c == 0) return perr_at(p, line, col, "NUL byte in text");
            if (c > 32 && c < 127) return perr_at(p, line, col, "unexpected character '%c'", c);
            return perr_at(p, line, col, "unexpected byte 0x%02x", c);
        }
        if (c == '(' || c == '[' || c == '{') {
            if (sp == GIR_MAX_NEST) return perr_at(p, line, col, "brackets nested deeper than %d", GIR_MAX_NEST);
            stack[sp++] = (char)c;
        } else if ((c == ')' || c == ']' || c == '}') && sp > 0) {
            sp--; /* the parser reports a mismatch */
        }
        GR_TRY(push_tok(p, kind, line, col, NULL, 0));
        i++;
    }
    return push_tok(p, T_EOF, line, (int)GR_MIN(i - line_start + 1, (size_t)1 << 30), NULL, 0);
}

/* ==== token access ====================================================================== */
static gir_tok *peek(parser *p) { return &p->toks.data[p->pos]; }
static gir_tok *peek2(parser *p) { return &p->toks.data[p->pos + (p->toks.data[p->pos].kind != T_EOF)]; }
static gir_tok *next(parser *p) {
    gir_tok *t = &p->toks.data[p->pos];
    if (t->kind != T_EOF) p->pos++;
    return t;
}
static const char *txt(const parser *p, const gir_tok *t) { return p->strs + t->text; }
static bool is_kw(const parser *p, const gir_tok *t, const char *kw) { return t->kind == T_NAME && !strcmp(txt(p, t), kw); }
static bool is_namelike(const gir_tok *t) { return t->kind == T_NAME || t->kind == T_STRING; }

/* "'foo'", "end of line", ... for messages */
static const char *tok_desc(const parser *p, const gir_tok *t, char *buf, size_t n) {
    static const char *punct[] = {"end of file", "end of line", "", "", "", "'('", "')'", "'['", "']'",
                                  "'{'", "'}'", "','", "'='", "':'", "'@'"};
    if (t->kind == T_NAME || t->kind == T_NUMBER)
        snprintf(buf, n, "'%.60s'", txt(p, t));
    else if (t->kind == T_STRING)
        snprintf(buf, n, "string \"%.60s\"", txt(p, t));
    else
        snprintf(buf, n, "%s", punct[t->kind]);
    return buf;
}

static gr_status expect(parser *p, int kind, const char *what) {
    gir_tok *t = peek(p);
    if (t->kind != kind) {
        char b[128];
        return perr(p, t, "expected %s, got %s", what, tok_desc(p, t, b, sizeof b));
    }
    next(p);
    return GR_OK;
}

/* A statement ends at a newline, the end of the text or the '}' closing a subgraph. */
static gr_status end_statement(parser *p) {
    gir_tok *t = peek(p);
    if (t->kind == T_NEWLINE) {
        next(p);
        return GR_OK;
    }
    if (t->kind == T_EOF || t->kind == T_RBRACE) return GR_OK;
    char b[128];
    return perr(p, t, "expected end of line, got %s", tok_desc(p, t, b, sizeof b));
}

/* A name token (bare or quoted); empty names are refused (the builder would invent one). */
static gr_status take_name(parser *p, const char *what, gir_tok **out) {
    gir_tok *t = peek(p);
    char b[128];
    if (!is_namelike(t)) return perr(p, t, "expected %s, got %s", what, tok_desc(p, t, b, sizeof b));
    if (!*txt(p, t)) return perr(p, t, "empty name");
    *out = next(p);
    return GR_OK;
}

/* ==== numbers ============================================================================== */
static bool is_int_text(const char *s) {
    if (*s == '+' || *s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (!is_digit(*s)) return false;
    return true;
}

static gr_status tok_int(parser *p, const gir_tok *t, int64_t *out) {
    char b[128];
    if (t->kind != T_NUMBER || !is_int_text(txt(p, t)))
        return perr(p, t, "expected an integer, got %s", tok_desc(p, t, b, sizeof b));
    errno = 0;
    long long v = strtoll(txt(p, t), NULL, 10);
    if (errno == ERANGE) return perr(p, t, "bad number '%.60s' (out of range of i64)", txt(p, t));
    *out = v;
    return GR_OK;
}

/* NUMBER, or the bare names inf / nan */
static bool is_float_tok(const parser *p, const gir_tok *t) {
    return t->kind == T_NUMBER || is_kw(p, t, "inf") || is_kw(p, t, "nan");
}

static gr_status tok_double(parser *p, const gir_tok *t, double *out) {
    char b[128];
    if (!is_float_tok(p, t)) return perr(p, t, "expected a number, got %s", tok_desc(p, t, b, sizeof b));
    errno = 0;
    double v = strtod(txt(p, t), NULL);
    if (errno == ERANGE && isinf(v)) return perr(p, t, "bad number '%.60s' (out of range of f64)", txt(p, t));
    *out = v;
    return GR_OK;
}

/* One element of inline constant data, stored with the dtype's rounding. */
static gr_status parse_elem(parser *p, const gir_tok *t, gr_dtype dt, const char *cname, unsigned char *dst) {
    char b[128];
    if (dt == GR_BOOL) {
        const char *s = txt(p, t);
        bool is_bool = (t->kind == T_NAME && (!strcmp(s, "true") || !strcmp(s, "false"))) ||
                       (t->kind == T_NUMBER && (!strcmp(s, "0") || !strcmp(s, "1")));
        if (!is_bool) return perr(p, t, "constant '%s': expected true, false, 0 or 1, got %s", cname, tok_desc(p, t, b, sizeof b));
        *dst = (s[0] == 't' || s[0] == '1');
        return GR_OK;
    }
    if (gr_dtype_is_float(dt)) {
        if (!is_float_tok(p, t)) return perr(p, t, "constant '%s': expected a number, got %s", cname, tok_desc(p, t, b, sizeof b));
        errno = 0;
        if (dt == GR_F64) {
            double v = strtod(txt(p, t), NULL);
            if (errno == ERANGE && isinf(v)) return perr(p, t, "constant '%s': %.60s is out of range of f64", cname, txt(p, t));
            memcpy(dst, &v, sizeof v);
            return GR_OK;
        }
        /* strtof rounds once, straight to f32; f16/bf16 round again from there */
        float f = strtof(txt(p, t), NULL);
        if (errno == ERANGE && isinf(f)) return perr(p, t, "constant '%s': %.60s is out of range of f32", cname, txt(p, t));
        if (dt == GR_F32) {
            memcpy(dst, &f, sizeof f);
        } else {
            uint16_t h = dt == GR_F16 ? gr_f32_to_half(f) : gr_f32_to_bf16(f);
            memcpy(dst, &h, sizeof h);
        }
        return GR_OK;
    }
    if (t->kind != T_NUMBER || !is_int_text(txt(p, t)))
        return perr(p, t, "constant '%s': expected an integer for %s, got %s", cname, gr_dtype_name(dt), tok_desc(p, t, b, sizeof b));
    errno = 0;
    long long v = strtoll(txt(p, t), NULL, 10);
    long long lo = INT64_MIN, hi = INT64_MAX;
    if (dt == GR_I32) lo = INT32_MIN, hi = INT32_MAX;
    if (dt == GR_I8) lo = INT8_MIN, hi = INT8_MAX;
    if (dt == GR_U8) lo = 0, hi = UINT8_MAX;
    if (errno == ERANGE || v < lo || v > hi)
        return perr(p, t, "constant '%s': %.60s is out of range of %s", cname, txt(p, t), gr_dtype_name(dt));
    switch (dt) {
    case GR_I64: { int64_t x = v; memcpy(dst, &x, 8); break; }
    case GR_I32: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
    case GR_I8: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
    default: { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); break; }
    }
    return GR_OK;
}

/* ==== name tables =============================================================================== */
static const char *entry_name(const gr_graph *g, int idx, bool nodes) {
    return nodes ? g->nodes.data[idx].name : g->values.data[idx].name;
}

static int table_find(const name_table *t, const gr_graph *g, bool nodes, const char *name) {
    if (!t->cap) return -1;
    size_t mask = t->cap - 1;
    for (size_t h = gr_hash_bytes(name, strlen(name), 0) & mask;; h = (h + 1) & mask) {
        int e = t->slots[h];
        if (!e) return -1;
        if (!strcmp(entry_name(g, e - 1, nodes), name)) return e - 1;
    }
}

static void table_put(name_table *t, const gr_graph *g, bool nodes, int idx) {
    const char *name = entry_name(g, idx, nodes);
    size_t mask = t->cap - 1, h = gr_hash_bytes(name, strlen(name), 0) & mask;
    while (t->slots[h]) h = (h + 1) & mask;
    t->slots[h] = idx + 1;
    t->count++;
}

static gr_status table_add(name_table *t, const gr_graph *g, bool nodes, int idx) {
    if ((t->count + 1) * 2 > t->cap) {
        name_table bigger = {gr_calloc(t->cap ? t->cap * 2 : 64, sizeof(int)), t->cap ? t->cap * 2 : 64, 0};
        if (!bigger.slots) return GR_ERR_NOMEM;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slots[i]) table_put(&bigger, g, nodes, t->slots[i] - 1);
        gr_free(t->slots, t->cap * sizeof(int));
        *t = bigger;
    }
    table_put(t, g, nodes, idx);
    return GR_OK;
}

static void scope_free(scope *s) {
    gr_free(s->values.slots, s->values.cap * sizeof(int));
    gr_free(s->nodes.slots, s->nodes.cap * sizeof(int));
}

/* Value `name` as seen from scope s; -1 if undefined. A value of an enclosing
 * graph is captured: each graph between gets an input value of that name and
 * type that is not listed in its inputs (docs/gir.md, "Subgraphs"). */
static gr_status resolve(scope *s, const char *name, int *out) {
    *out = table_find(&s->values, s->g, false, name);
    if (*out >= 0 || !s->parent) return GR_OK;
    int outer;
    GR_TRY(resolve(s->parent, name, &outer));
    if (outer < 0) return GR_OK;
    gr_ir_value src = s->parent->g->values.data[outer];
    const gr_graph *pg = s->parent->g;
    int v;
    GR_TRY(gr_ir_add_value(s->g, name, GR_VAL_INPUT, &v));
    gr_ir_value *d = &s->g->values.data[v];
    d->dtype = src.dtype;
    d->ndim = src.ndim;
    d->placement = src.placement;
    d->typed = src.typed;
    d->line = src.line;
    d->col = src.col;
    for (int i = 0; i < src.ndim && i < GR_MAX_DIMS; i++) GR_TRY(gr_dx_import(s->g, pg, src.dims[i], &d->dims[i]));
    GR_TRY(table_add(&s->values, s->g, false, v));
    *out = v;
    return GR_OK;
}

/* A name may be defined once per graph (a subgraph may shadow an outer name). */
static gr_status check_new_value(parser *p, scope *s, const gir_tok *t) {
    int v = table_find(&s->values, s->g, false, txt(p, t));
    if (v < 0) return GR_OK;
    const gr_ir_value *old = &s->g->values.data[v];
    if (old->kind == GR_VAL_INPUT && old->line > 0 && old->producer < 0) {
        bool listed = false;
        for (int i = 0; i < s->g->inputs.len; i++) listed |= s->g->inputs.data[i] == v;
        if (!listed)
            return perr(p, t, "value '%s' is already used here as the enclosing graph's value defined at %s:%d:%d",
                        txt(p, t), p->origin, old->line, old->col);
    }
    if (old->line > 0)
        return perr(p, t, "value '%s' is already defined at %s:%d:%d", txt(p, t), p->origin, old->line, old->col);
    return perr(p, t, "value '%s' is already defined", txt(p, t));
}

/* Values and nodes are added with automatic names and renamed
 * (gr_ir_rename_*) once the parser's own tables have checked the names; the
 * automatic-name counter is restored so the graph looks as if named
 * directly. */

/* ==== types and constant data ===================================================================== */
/* A symbolic dim or integer from a name or string token (gr_dx_from_name). */
static gr_status sym_dim(parser *p, gr_graph *g, const gir_tok *t, gr_dim *out) {
    gr_status st = gr_dx_from_name(g, txt(p, t), out);
    if (st == GR_ERR_SHAPE) return gr_error_prefix(st, "%s:%d:%d", p->origin, t->line, t->col);
    return st;
}

typedef struct {
    gr_dtype dtype;
    int ndim;
    gr_dim dims[GR_MAX_DIMS];
    gr_placement placement;
    bool symbolic;
} gir_type;

/* dtype '[' dim, ... ']' ['@' host|device] */
static gr_status parse_type(parser *p, gr_graph *g, gir_type *ty) {
    char b[128];
    memset(ty, 0, sizeof *ty);
    gir_tok *dt = peek(p);
    if (dt->kind != T_NAME) return perr(p, dt, "expected a dtype, got %s", tok_desc(p, dt, b, sizeof b));
    if (gr_dtype_parse(txt(p, dt), &ty->dtype) != GR_OK)
        return perr(p, dt, "unknown dtype '%.60s' (expected f32 f16 bf16 f64 i64 i32 i8 u8 bool)", txt(p, dt));
    next(p);
    GR_TRY(expect(p, T_LBRACK, "'[' after the dtype"));
    if (peek(p)->kind == T_RBRACK) {
        next(p);
    } else {
        for (;;) {
            gir_tok *d = next(p);
            if (ty->ndim == GR_MAX_DIMS) return perr(p, d, "more than %d dims", GR_MAX_DIMS);
            gr_dim *dim = &ty->dims[ty->ndim++];
            if (d->kind == T_NUMBER) {
                GR_TRY(tok_int(p, d, &dim->size));
                if (dim->size < 0) return perr(p, d, "negative dim %lld", (long long)dim->size);
                dim->expr = GR_SYM_NONE;
            } else if (is_namelike(d) && *txt(p, d)) {
                /* a symbol, or an expression in a string: "seq + 1" */
                GR_TRY(sym_dim(p, g, d, dim));
                if (!gr_dx_is_sym(*dim) && dim->size < 0) return perr(p, d, "dim '%s' is negative", txt(p, d));
                ty->symbolic |= gr_dx_is_sym(*dim);
            } else {
                return perr(p, d, "expected a dim (integer or symbol), got %s", tok_desc(p, d, b, sizeof b));
            }
            gir_tok *sep = next(p);
            if (sep->kind == T_RBRACK) break;
            if (sep->kind != T_COMMA) return perr(p, sep, "expected ',' or ']' in shape, got %s", tok_desc(p, sep, b, sizeof b));
        }
    }
    if (!gr_ir_dims_fit(ty->ndim, ty->dims))
        return perr(p, dt, "shape holds more than %lld elements", (long long)GR_MAX_NUMEL);
    if (peek(p)->kind == T_AT) {
        next(p);
        gir_tok *pl = next(p);
        if (is_kw(p, pl, "host")) ty->placement = GR_PLACE_HOST;
        else if (is_kw(p, pl, "device")) ty->placement = GR_PLACE_DEVICE;
        else return perr(p, pl, "expected a placement (host or device), got %s", tok_desc(p, pl, b, sizeof b));
    }
    return GR_OK;
}

/* Inline data: a number, or a bracketed list whose inner brackets are ignored.
 * The buffer grows with the values actually written, so a huge declared shape
 * with little data cannot make us allocate much. */
static gr_status parse_inline(parser *p, const char *cname, gr_dtype dt, int64_t numel, void **out, size_t *out_n) {
    size_t es = gr_dtype_size(dt), total = (size_t)numel * es, cap = 0;
    unsigned char *buf = NULL;
    int64_t count = 0;
    gir_tok *start = peek(p), *last = start;
    gr_status st = GR_OK;
    char b[128];
    int depth = 0;
    bool want_item = true; /* after '[' or ',' */
    do {
        gir_tok *t = next(p);
        last = t;
        if (t->kind == T_LBRACK && want_item) {
            depth++;
            continue;
        }
        if (t->kind == T_RBRACK && depth > 0 && (!want_item || t[-1].kind == T_LBRACK)) {
            depth--;
            want_item = false;
            continue;
        }
        if (t->kind == T_COMMA && depth > 0 && !want_item) {
            want_item = true;
            continue;
        }
        if (!want_item || !(t->kind == T_NUMBER || t->kind == T_NAME)) {
            st = perr(p, t, "constant '%s': expected %s in data, got %s", cname, want_item ? "a value" : "',' or ']'",
                      tok_desc(p, t, b, sizeof b));
            goto fail;
        }
        if (count >= numel) {
            st = perr(p, t, "constant '%s': more values than its %lld elements", cname, (long long)numel);
            goto fail;
        }
        if ((size_t)(count + 1) * es > cap) {
            size_t ncap = GR_MIN(GR_MAX(cap * 2, (size_t)64), total);
            unsigned char *nb = gr_realloc(buf, cap, ncap);
            if (!nb) {
                st = GR_ERR_NOMEM;
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        if ((st = parse_elem(p, t, dt, cname, buf + (size_t)count * es)) != GR_OK) goto fail;
        count++;
        want_item = false;
    } while (depth > 0);
    if (count != numel) {
        st = perr(p, last, "constant '%s': %lld values for %lld elements", cname, (long long)count, (long long)numel);
        goto fail;
    }
    if (!buf && !(buf = gr_malloc(0))) return GR_ERR_NOMEM; /* 0 elements */
    *out = buf;
    *out_n = total;
    return GR_OK;
fail:
    gr_free(buf, cap);
    return st;
}

/* file("path" [, offset=N]): numel × dtype-size raw bytes, path relative to base_dir. */
static gr_status parse_file_ref(parser *p, const char *cname, size_t nbytes, void **out, size_t *out_n) {
    char b[128];
    gir_tok *ft = next(p);
    GR_TRY(expect(p, T_LPAREN, "'(' after 'file'"));
    gir_tok *pt = next(p);
    if (pt->kind != T_STRING || !*txt(p, pt))
        return perr(p, pt, "bad file(...) reference: expected a quoted path, got %s", tok_desc(p, pt, b, sizeof b));
    int64_t offset = 0;
    if (peek(p)->kind == T_COMMA) {
        next(p);
        gir_tok *k = next(p);
        if (!is_kw(p, k, "offset")) return perr(p, k, "bad file(...) reference: expected 'offset', got %s", tok_desc(p, k, b, sizeof b));
        GR_TRY(expect(p, T_EQ, "'=' after 'offset'"));
        gir_tok *o = next(p);
        GR_TRY(tok_int(p, o, &offset));
        if (offset < 0) return perr(p, o, "bad file(...) reference: negative offset");
    }
    GR_TRY(expect(p, T_RPAREN, "')' closing file(...)"));

    const char *rel = txt(p, pt);
    char *path = rel[0] == '/' || !p->base_dir || !*p->base_dir ? gr_strdup(rel) : gr_sprintf("%s/%s", p->base_dir, rel);
    if (!path) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    void *buf = NULL;
    int fd = -1;
    uint64_t size = 0;
    /* a regular file only (a FIFO or /dev/zero cannot block or feed the load), read within its measured size */
    if ((st = gr_open_regular(path, &fd, &size)) != GR_OK) {
        st = gr_error_prefix(st, "%s:%d:%d: constant '%s': side file", p->origin, ft->line, ft->col, cname);
        goto done;
    }
    if ((uint64_t)offset > size || nbytes > size - (uint64_t)offset) {
        st = gr_error(GR_ERR_IO, "%s:%d:%d: constant '%s': side file '%s' is too short (%llu bytes; need %zu at offset %lld)",
                      p->origin, ft->line, ft->col, cname, path, (unsigned long long)size, nbytes, (long long)offset);
        goto done;
    }
    if (!(buf = gr_malloc(nbytes))) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    if ((st = gr_read_at(fd, path, buf, nbytes, (uint64_t)offset)) != GR_OK) {
        st = gr_error_prefix(st, "%s:%d:%d: constant '%s'", p->origin, ft->line, ft->col, cname);
        gr_free(buf, nbytes);
        buf = NULL;
    }
done:
    if (fd >= 0) close(fd);
    gr_strfree(path);
    if (st == GR_OK) {
        *out = buf;
        *out_n = nbytes;
    }
    return st;
}

/* ==== statements ===================================================================================== */
static gr_status parse_body(parser *p, scope *s, bool in_subgraph);

static gr_status stmt_input(parser *p, scope *s) {
    next(p); /* input */
    gir_tok *nt;
    gir_type ty;
    GR_TRY(take_name(p, "a name after 'input'", &nt));
    GR_TRY(check_new_value(p, s, nt));
    GR_TRY(expect(p, T_COLON, "':' after the input name"));
    GR_TRY(parse_type(p, s->g, &ty));
    GR_TRY(end_statement(p));
    int v, auto_name = s->g->next_auto_name;
    GR_TRY(gr_ir_add_input(s->g, NULL, ty.dtype, ty.ndim, ty.dims, &v));
    s->g->next_auto_name = auto_name;
    gr_ir_value *val = &s->g->values.data[v];
    GR_TRY(gr_ir_rename_value(s->g, v, txt(p, nt)));
    val = &s->g->values.data[v];
    val->placement = ty.placement;
    val->line = nt->line;
    val->col = nt->col;
    return table_add(&s->values, s->g, false, v);
}

static gr_status stmt_const(parser *p, scope *s) {
    next(p); /* const */
    gir_tok *nt;
    gir_type ty;
    GR_TRY(take_name(p, "a name after 'const'", &nt));
    const char *name = txt(p, nt);
    GR_TRY(check_new_value(p, s, nt));
    GR_TRY(expect(p, T_COLON, "':' after the constant name"));
    gir_tok *tt = peek(p);
    GR_TRY(parse_type(p, s->g, &ty));
    if (ty.symbolic) return perr(p, tt, "constant '%s' needs a concrete shape", name);
    int64_t dims[GR_MAX_DIMS], numel = 1;
    size_t es = gr_dtype_size(ty.dtype);
    for (int i = 0; i < ty.ndim; i++) {
        dims[i] = ty.dims[i].size;
        if (dims[i] && numel > INT64_MAX / (int64_t)es / dims[i]) return perr(p, tt, "constant '%s' is too large", name);
        numel *= dims[i];
    }
    GR_TRY(expect(p, T_EQ, "'=' and the constant's data"));
    void *data = NULL;
    size_t nbytes = 0;
    if (is_kw(p, peek(p), "file"))
        GR_TRY(parse_file_ref(p, name, (size_t)numel * es, &data, &nbytes));
    else
        GR_TRY(parse_inline(p, name, ty.dtype, numel, &data, &nbytes));
    gr_status st = end_statement(p);
    if (st != GR_OK) {
        gr_free(data, nbytes);
        return st;
    }
    int v, auto_name = s->g->next_auto_name;
    GR_TRY(gr_ir_add_const_owned(s->g, NULL, ty.dtype, ty.ndim, dims, data, nbytes, &v));
    s->g->next_auto_name = auto_name;
    gr_ir_value *val = &s->g->values.data[v];
    GR_TRY(gr_ir_rename_value(s->g, v, name));
    val = &s->g->values.data[v];
    val->placement = ty.placement;
    val->line = nt->line;
    val->col = nt->col;
    return table_add(&s->values, s->g, false, v);
}

static gr_status stmt_output(parser *p, scope *s) {
    next(p); /* output */
    for (;;) {
        gir_tok *nt;
        int v;
        GR_TRY(take_name(p, "a value name after 'output'", &nt));
        GR_TRY(resolve(s, txt(p, nt), &v));
        if (v < 0) return perr(p, nt, "undefined value '%s'", txt(p, nt));
        GR_TRY(gr_ir_add_output(s->g, v));
        if (peek(p)->kind != T_COMMA) break;
        next(p);
    }
    return end_statement(p);
}

typedef struct {
    GR_VEC(int) in;
    GR_VEC(gir_tok *) outs;
    GR_VEC(gr_ir_attr) attrs;
    GR_VEC(gr_graph *) subs; /* subs.data[i]: graph of attrs.data[i], attached after the node exists */
} node_parts;

static void parts_free(node_parts *np) {
    for (int i = 0; i < np->attrs.len; i++) gr_ir_attr_free(&np->attrs.data[i]);
    for (int i = 0; i < np->subs.len; i++) gr_ir_graph_destroy(np->subs.data[i]);
    gr_vec_free(&np->in);
    gr_vec_free(&np->outs);
    gr_vec_free(&np->attrs);
    gr_vec_free(&np->subs);
}

static gr_status parse_subgraph(parser *p, scope *outer, gr_graph **out) {
    *out = NULL;
    gr_graph *sub;
    GR_TRY(gr_ir_graph_create(&sub));
    sub->parent = outer->g;
    scope sc = {.g = sub, .parent = outer};
    gr_status st = GR_OK;
    if (!(sub->origin = gr_strdup(p->origin))) st = GR_ERR_NOMEM;
    if (st == GR_OK) st = parse_body(p, &sc, true);
    if (st == GR_OK) st = expect(p, T_RBRACE, "'}' closing the subgraph");
    scope_free(&sc);
    if (st != GR_OK) {
        gr_ir_graph_destroy(sub);
        return st;
    }
    *out = sub;
    return GR_OK;
}

/* name=value inside a node's parentheses; the attribute name is already taken. */
static gr_status parse_attr(parser *p, scope *s, node_parts *np, const gir_tok *nt) {
    char b[128];
    for (int i = 0; i < np->attrs.len; i++)
        if (!strcmp(np->attrs.data[i].name, txt(p, nt))) return perr(p, nt, "attribute '%s' given twice", txt(p, nt));
    GR_TRY(gr_vec_reserve(&np->attrs, np->attrs.len + 1));
    GR_TRY(gr_vec_reserve(&np->subs, np->subs.len + 1));
    gr_ir_attr a;
    memset(&a, 0, sizeof a);
    gr_graph *sub = NULL;
    gr_status st = GR_OK;
    gir_tok *t = peek(p);
    if (t->kind == T_NUMBER && is_int_text(txt(p, t))) {
        a.kind = GR_IR_ATTR_INT;
        st = tok_int(p, next(p), &a.i);
    } else if (is_float_tok(p, t)) {
        a.kind = GR_IR_ATTR_FLOAT;
        st = tok_double(p, next(p), &a.f);
    } else if (t->kind == T_STRING) {
        a.kind = GR_IR_ATTR_STRING;
        if (!(a.s = gr_strdup(txt(p, next(p))))) st = GR_ERR_NOMEM;
    } else if (is_kw(p, t, "dim") && peek2(p)->kind == T_LPAREN) {
        /* a symbolic integer: dim(seq), dim("seq + 1") */
        next(p);
        next(p);
        gir_tok *e = next(p);
        gr_dim d;
        if (!is_namelike(e)) return perr(p, e, "attribute '%s': expected a symbol or a quoted expression in dim(), got %s", txt(p, nt), tok_desc(p, e, b, sizeof b));
        GR_TRY(sym_dim(p, s->g, e, &d));
        GR_TRY(expect(p, T_RPAREN, "')' closing dim("));
        a.kind = GR_IR_ATTR_INT;
        a.i = d.size;
        a.sym = gr_dx_is_sym(d);
        a.expr = d.expr;
    } else if (t->kind == T_LBRACK) {
        /* first pass: count and decide ints vs floats; second pass: convert */
        int start = ++p->pos, n = 0;
        bool any_float = false, any_sym = false;
        if (peek(p)->kind != T_RBRACK) {
            for (;;) {
                gir_tok *e = next(p);
                if (is_namelike(e) && *txt(p, e)) { /* a symbolic element: seq, "seq + 1" */
                    any_sym = true;
                    n++;
                    gir_tok *sep = next(p);
                    if (sep->kind == T_RBRACK) break;
                    if (sep->kind != T_COMMA) return perr(p, sep, "attribute '%s': expected ',' or ']', got %s", txt(p, nt), tok_desc(p, sep, b, sizeof b));
                    continue;
                }
                if (!is_float_tok(p, e)) return perr(p, e, "attribute '%s': expected a number in the list, got %s", txt(p, nt), tok_desc(p, e, b, sizeof b));
                any_float |= !is_int_text(txt(p, e));
                n++;
                gir_tok *sep = next(p);
                if (sep->kind == T_RBRACK) break;
                if (sep->kind != T_COMMA) return perr(p, sep, "attribute '%s': expected ',' or ']', got %s", txt(p, nt), tok_desc(p, sep, b, sizeof b));
            }
        } else {
            next(p);
        }
        int end = p->pos;
        if (any_float && any_sym) return perr(p, t, "attribute '%s': a list of floats cannot hold symbolic values", txt(p, nt));
        a.kind = any_float ? GR_IR_ATTR_FLOATS : GR_IR_ATTR_INTS;
        a.n = n;
        if (any_float) a.floats = gr_malloc((size_t)n * sizeof(double));
        else a.ints = gr_malloc((size_t)n * sizeof(int64_t));
        if (!a.floats && !a.ints) st = GR_ERR_NOMEM;
        if (st == GR_OK && any_sym && !(a.exprs = gr_malloc((size_t)n * sizeof(int32_t)))) st = GR_ERR_NOMEM;
        p->pos = start;
        for (int i = 0; i < n && st == GR_OK; i++, p->pos++) { /* skips the separator */
            gir_tok *e = next(p);
            if (any_sym) a.exprs[i] = GR_SYM_NONE;
            if (is_namelike(e)) {
                gr_dim d;
                st = sym_dim(p, s->g, e, &d);
                a.ints[i] = gr_dx_is_sym(d) ? -1 : d.size;
                a.exprs[i] = d.expr;
            } else {
                st = any_float ? tok_double(p, e, &a.floats[i]) : tok_int(p, e, &a.ints[i]);
            }
        }
        p->pos = end;
    } else if (t->kind == T_LBRACE) {
        next(p);
        a.kind = GR_IR_ATTR_GRAPH;
        st = parse_subgraph(p, s, &sub);
    } else {
        return perr(p, t, "attribute '%s': expected a value (number, string, list or {subgraph}), got %s", txt(p, nt),
                    tok_desc(p, t, b, sizeof b));
    }
    if (st == GR_OK && !(a.name = gr_strdup(txt(p, nt)))) st = GR_ERR_NOMEM;
    if (st != GR_OK) {
        gr_ir_attr_free(&a);
        gr_ir_graph_destroy(sub);
        return st;
    }
    np->attrs.data[np->attrs.len++] = a; /* capacity reserved above */
    np->subs.data[np->subs.len++] = sub;
    return GR_OK;
}

static void arity_text(int lo, int hi, char *buf, size_t n) {
    if (hi < 0) snprintf(buf, n, "at least %d", lo);
    else if (lo == hi) snprintf(buf, n, "%d", lo);
    else snprintf(buf, n, "%d to %d", lo, hi);
}

/* The outputs of one node read so far, by name (a node may have 10^5
 * outputs: a hash set, not a scan per output). */
typedef struct {
    int *slots; /* output index + 1, 0 = empty */
    size_t cap;
} out_set;

/* Adds output i of np; an error naming the earlier one if its name is taken. */
static gr_status out_set_add(parser *p, out_set *set, const node_parts *np, int i) {
    if (2 * (size_t)(i + 1) > set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 16;
        int *slots = gr_calloc(cap, sizeof(int));
        if (!slots) return GR_ERR_NOMEM;
        gr_free(set->slots, set->cap * sizeof(int));
        set->slots = slots;
        set->cap = cap;
        for (int j = 0; j < i; j++) { /* names are distinct so far */
            const char *name = txt(p, np->outs.data[j]);
            size_t h = gr_hash_bytes(name, strlen(name), 0) & (cap - 1);
            while (slots[h]) h = (h + 1) & (cap - 1);
            slots[h] = j + 1;
        }
    }
    const char *name = txt(p, np->outs.data[i]);
    for (size_t h = gr_hash_bytes(name, strlen(name), 0) & (set->cap - 1);; h = (h + 1) & (set->cap - 1)) {
        if (!set->slots[h]) {
            set->slots[h] = i + 1;
            return GR_OK;
        }
        const gir_tok *first = np->outs.data[set->slots[h] - 1];
        if (!strcmp(txt(p, first), name))
            return perr(p, np->outs.data[i], "value '%s' is already defined at %s:%d:%d", name, p->origin, first->line,
                        first->col);
    }
}

/* [node] out, ... = op(in, ..., attr=value, ...) */
static gr_status stmt_node_parts(parser *p, scope *s, node_parts *np, gir_tok **name_tok, gir_tok **op_tok) {
    char b[128];
    if (peek(p)->kind == T_LBRACK) {
        next(p);
        GR_TRY(take_name(p, "a node name after '['", name_tok));
        GR_TRY(expect(p, T_RBRACK, "']' after the node name"));
    }
    out_set outs = {NULL, 0};
    gr_status st = GR_OK;
    for (;;) {
        gir_tok *ot;
        if ((st = take_name(p, "an output name", &ot)) != GR_OK) break;
        if ((st = check_new_value(p, s, ot)) != GR_OK) break;
        if ((st = gr_vec_push(&np->outs, ot)) != GR_OK) break;
        if ((st = out_set_add(p, &outs, np, np->outs.len - 1)) != GR_OK) break;
        gir_tok *sep = next(p);
        if (sep->kind == T_EQ) break;
        if (sep->kind != T_COMMA) {
            st = perr(p, sep, "expected ',' or '=' after an output name, got %s", tok_desc(p, sep, b, sizeof b));
            break;
        }
    }
    gr_free(outs.slots, outs.cap * sizeof(int));
    GR_TRY(st);
    gir_tok *ot = *op_tok = next(p);
    if (ot->kind != T_NAME) return perr(p, ot, "expected an op name, got %s", tok_desc(p, ot, b, sizeof b));
    if (gr_op_from_name(txt(p, ot)) == GR_OP_COUNT) return perr(p, ot, "unknown op '%.60s'", txt(p, ot));
    GR_TRY(expect(p, T_LPAREN, "'(' after the op name"));
    if (peek(p)->kind == T_RPAREN) {
        next(p);
        return GR_OK;
    }
    for (;;) {
        gir_tok *t = peek(p);
        if (is_namelike(t) && peek2(p)->kind == T_EQ) {
            next(p);
            next(p);
            GR_TRY(parse_attr(p, s, np, t));
        } else if (np->attrs.len) {
            return perr(p, t, "expected an attribute (name=value) after attributes, got %s", tok_desc(p, t, b, sizeof b));
        } else if (is_kw(p, t, "_")) {
            next(p);
            GR_TRY(gr_vec_push(&np->in, -1));
        } else if (is_namelike(t)) {
            int v;
            GR_TRY(resolve(s, txt(p, t), &v));
            if (v < 0) return perr(p, t, "undefined value '%s'", txt(p, t));
            next(p);
            GR_TRY(gr_vec_push(&np->in, v));
        } else {
            return perr(p, t, "expected an input value, '_' or an attribute, got %s", tok_desc(p, t, b, sizeof b));
        }
        gir_tok *sep = next(p);
        if (sep->kind == T_RPAREN) return GR_OK;
        if (sep->kind != T_COMMA) return perr(p, sep, "expected ',' or ')', got %s", tok_desc(p, sep, b, sizeof b));
    }
}

static gr_status stmt_node(parser *p, scope *s) {
    node_parts np;
    memset(&np, 0, sizeof np);
    gir_tok *name_tok = NULL, *op_tok = NULL;
    gr_status st = stmt_node_parts(p, s, &np, &name_tok, &op_tok);
    if (st == GR_OK) st = end_statement(p);
    if (st != GR_OK) goto done;

    gr_op op = gr_op_from_name(txt(p, op_tok));
    const gr_op_info *info = gr_op_get(op);
    char want[48];
    if (np.in.len < info->min_in || (info->max_in >= 0 && np.in.len > info->max_in)) {
        arity_text(info->min_in, info->max_in, want, sizeof want);
        st = perr(p, op_tok, "op '%s' takes %s inputs, got %d", info->name, want, np.in.len);
        goto done;
    }
    if (np.outs.len < info->min_out || (info->max_out >= 0 && np.outs.len > info->max_out)) {
        arity_text(info->min_out, info->max_out, want, sizeof want);
        st = perr(p, op_tok, "op '%s' has %s outputs, got %d", info->name, want, np.outs.len);
        goto done;
    }
    /* default node name: its first output's */
    const gir_tok *nt = name_tok ? name_tok : np.outs.data[0];
    int clash = table_find(&s->nodes, s->g, true, txt(p, nt));
    if (clash >= 0) {
        const gr_ir_node *other = &s->g->nodes.data[clash];
        st = perr(p, nt, "node name '%s' is already used by the node at %s:%d:%d%s", txt(p, nt), p->origin, other->line,
                  other->col, name_tok ? "" : " (give this node a [name])");
        goto done;
    }
    int ni, auto_name = s->g->next_auto_name;
    st = gr_ir_add_node(s->g, op, NULL, np.in.len, np.in.data, np.outs.len, NULL, np.attrs.len, np.attrs.data, &ni);
    s->g->next_auto_name = auto_name;
    if (st != GR_OK) goto done;
    gr_ir_node *node = &s->g->nodes.data[ni];
    if ((st = gr_ir_rename_node(s->g, ni, txt(p, nt))) != GR_OK) goto done;
    for (int i = 0; i < np.outs.len && st == GR_OK; i++)
        st = gr_ir_rename_value(s->g, node->out[i], txt(p, np.outs.data[i]));
    if (st != GR_OK) goto done;
    node->line = op_tok->line;
    node->col = op_tok->col;
    /* the builder copied attributes without their graphs; hand ours over */
    for (int i = 0; i < np.subs.len; i++) {
        if (!np.subs.data[i]) continue;
        node->attrs[i].graph = np.subs.data[i];
        np.subs.data[i] = NULL;
    }
    for (int i = 0; i < np.outs.len; i++) {
        gr_ir_value *v = &s->g->values.data[node->out[i]];
        v->line = np.outs.data[i]->line;
        v->col = np.outs.data[i]->col;
        if ((st = table_add(&s->values, s->g, false, node->out[i])) != GR_OK) goto done;
    }
    st = table_add(&s->nodes, s->g, true, ni);
done:
    parts_free(&np);
    return st;
}

/* dim NAME: [lo, hi]  — the declared range of a symbolic dim */
static gr_status stmt_dim(parser *p, scope *s) {
    char b[128];
    gir_tok *kw = next(p), *name = next(p);
    GR_TRY(expect(p, T_COLON, "':' after the dim name"));
    GR_TRY(expect(p, T_LBRACK, "'[' opening the dim's range"));
    gir_tok *lo_t = next(p);
    int64_t lo, hi;
    if (lo_t->kind != T_NUMBER) return perr(p, lo_t, "expected the smallest value of dim '%s', got %s", txt(p, name), tok_desc(p, lo_t, b, sizeof b));
    GR_TRY(tok_int(p, lo_t, &lo));
    GR_TRY(expect(p, T_COMMA, "',' in the dim's range"));
    gir_tok *hi_t = next(p);
    if (hi_t->kind != T_NUMBER) return perr(p, hi_t, "expected the largest value of dim '%s', got %s", txt(p, name), tok_desc(p, hi_t, b, sizeof b));
    GR_TRY(tok_int(p, hi_t, &hi));
    GR_TRY(expect(p, T_RBRACK, "']' closing the dim's range"));
    if (s->parent) return perr(p, kw, "dim ranges are declared in the main graph, not in a subgraph");
    if (lo < 0 || hi < lo || hi > GR_DX_INF)
        return perr(p, lo_t, "range [%lld, %lld] of dim '%s' is empty or negative", (long long)lo, (long long)hi, txt(p, name));
    int32_t sym;
    if (gr_ir_find_sym(s->g, txt(p, name)) >= 0 && s->g->syms.data[gr_ir_find_sym(s->g, txt(p, name))].declared)
        return perr(p, name, "the range of dim '%s' is declared twice", txt(p, name));
    GR_TRY(gr_ir_sym(s->g, txt(p, name), &sym));
    GR_TRY(gr_dx_set_range(s->g, sym, lo, hi));
    return end_statement(p);
}

static gr_status parse_body(parser *p, scope *s, bool in_subgraph) {
    char b[128];
    for (;;) {
        gir_tok *t = peek(p);
        if (t->kind == T_NEWLINE) {
            next(p);
        } else if (t->kind == T_EOF) {
            if (in_subgraph) return perr(p, t, "expected '}' closing the subgraph, got end of file");
            return GR_OK;
        } else if (t->kind == T_RBRACE) {
            if (in_subgraph) return GR_OK;
            return perr(p, t, "unexpected '}'");
        } else if (is_kw(p, t, "graft")) {
            return perr(p, t, "the 'graft 1' header must be the first line");
        } else if (is_kw(p, t, "input")) {
            GR_TRY(stmt_input(p, s));
        } else if (is_kw(p, t, "const")) {
            GR_TRY(stmt_const(p, s));
        } else if (is_kw(p, t, "output")) {
            GR_TRY(stmt_output(p, s));
        } else if (is_kw(p, t, "dim") && is_namelike(peek2(p))) {
            GR_TRY(stmt_dim(p, s));
        } else if (is_namelike(t) || t->kind == T_LBRACK) {
            GR_TRY(stmt_node(p, s));
        } else {
            return perr(p, t, "expected a statement, got %s", tok_desc(p, t, b, sizeof b));
        }
    }
}

static gr_status parse_header(parser *p) {
    while (peek(p)->kind == T_NEWLINE) next(p);
    gir_tok *t = next(p);
    if (!is_kw(p, t, "graft")) return perr(p, t, "missing header 'graft 1'");
    gir_tok *v = next(p);
    int64_t version;
    if (v->kind != T_NUMBER || !is_int_text(txt(p, v))) return perr(p, v, "missing header 'graft 1': expected a version number");
    GR_TRY(tok_int(p, v, &version));
    if (version != 1) return perr(p, v, "unsupported .gir version %lld (this reader knows 1)", (long long)version);
    return end_statement(p);
}

/* ==== entry points ======================================================================================== */
static gr_status parse_text(const char *text, size_t len, const char *origin, const char *base_dir, gr_graph **out) {
    parser p;
    memset(&p, 0, sizeof p);
    p.origin = origin;
    p.base_dir = base_dir;
    scope sc;
    memset(&sc, 0, sizeof sc);
    gr_graph *g = NULL;
    gr_status st = lex(&p, text, len);
    if (st == GR_OK) st = gr_ir_graph_create(&g);
    if (st == GR_OK && !(g->origin = gr_strdup(origin))) st = GR_ERR_NOMEM;
    sc.g = g;
    if (st == GR_OK) st = parse_header(&p);
    if (st == GR_OK) st = parse_body(&p, &sc, false);
    scope_free(&sc);
    gr_vec_free(&p.toks);
    gr_free(p.strs, p.strs_cap);
    if (st != GR_OK) {
        gr_ir_graph_destroy(g);
        if (st == GR_ERR_NOMEM) gr_nomem();
        return st;
    }
    *out = g;
    return GR_OK;
}

gr_status gr_gir_parse(const char *text, const char *origin, const char *base_dir, gr_graph **out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_gir_parse: out is NULL");
    *out = NULL;
    if (!text) return gr_error(GR_ERR_INVALID, "gr_gir_parse: text is NULL");
    return parse_text(text, strlen(text), origin ? origin : "<gir>", base_dir, out);
}

gr_status gr_gir_load(const char *path, gr_graph **out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_gir_load: out is NULL");
    *out = NULL;
    if (!path) return gr_error(GR_ERR_INVALID, "gr_gir_load: path is NULL");
    /* gr_read_file would take a directory's bogus size for an allocation */
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return gr_error(GR_ERR_IO, "cannot read '%s': it is a directory", path);
    char *text;
    size_t n;
    GR_TRY(gr_read_file(path, &text, &n));
    const char *slash = strrchr(path, '/');
    char *dir = !slash ? gr_strdup(".") : slash == path ? gr_strdup("/") : gr_strndup(path, (size_t)(slash - path));
    gr_status st = dir ? parse_text(text, n, path, dir, out) : GR_ERR_NOMEM;
    gr_strfree(dir);
    gr_free(text, n + 1);
    return st;
}
