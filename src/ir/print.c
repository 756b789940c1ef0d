/* ir/print — the IR's text form: writer of the .gir format (docs/gir.md; the
 * parser is frontend/gir-parse.c).
 *
 * The output is canonical: inputs, then constants, then nodes in graph
 * order, then outputs, so that parse(print(g)) prints identically. Floats are
 * printed with the fewest digits that read back to the same bits through the
 * parser's own conversion, which keeps weights exact and common values short.
 * The printer tolerates malformed graphs (it is a debugging aid): a dangling
 * index prints as "?" instead of failing.
 */
#include "ir/ir.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef struct {
    gr_strbuf sb;
    size_t inline_limit;
    const char *side_path, *side_base;
    FILE *side;
} printer;

/* ==== names and strings ============================================================== */
static const char *const keywords[] = {"graft", "input", "const", "output", "file", "_", "inf", "nan", "true", "false"};

static bool bare_name_ok(const char *s) {
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return false;
    size_t n = 0;
    for (const char *c = s; *c; c++, n++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '.' ||
                  *c == ':' || *c == '/' || *c == '-';
        if (!ok) return false;
    }
    if (s[n - 1] == ':') return false; /* the lexer would take it for the ':' before a type */
    for (int i = 0; i < GR_ARRAY_LEN(keywords); i++)
        if (!strcmp(s, keywords[i])) return false;
    return true;
}

/* Length of the valid UTF-8 sequence at c (0 if invalid): printed raw, the rest escaped. */
static int utf8_len(const unsigned char *c) {
    int n = *c >= 0xf0 && *c <= 0xf4 ? 4 : *c >= 0xe0 ? 3 : *c >= 0xc2 && *c < 0xe0 ? 2 : 0;
    if (*c >= 0xf5) n = 0;
    for (int i = 1; i < n; i++)
        if ((c[i] & 0xc0) != 0x80) return 0;
    return n;
}

static void put_quoted(gr_strbuf *sb, const char *s) {
    gr_sb_puts(sb, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c >= 0x80) {
            int n = utf8_len(c);
            if (n) gr_sb_printf(sb, "%.*s", n, (const char *)c), c += n - 1;
            else gr_sb_printf(sb, "\\x%02x", *c);
            continue;
        }
        switch (*c) {
        case '"': gr_sb_puts(sb, "\\\""); break;
        case '\\': gr_sb_puts(sb, "\\\\"); break;
        case '\n': gr_sb_puts(sb, "\\n"); break;
        case '\t': gr_sb_puts(sb, "\\t"); break;
        case '\r': gr_sb_puts(sb, "\\r"); break;
        default:
            if (*c < 0x20 || *c == 0x7f) gr_sb_printf(sb, "\\x%02x", *c);
            else gr_sb_printf(sb, "%c", *c);
        }
    }
    gr_sb_puts(sb, "\"");
}

static void put_name(gr_strbuf *sb, const char *s) {
    if (!s) gr_sb_puts(sb, "?");
    else if (bare_name_ok(s)) gr_sb_puts(sb, s);
    else put_quoted(sb, s);
}

static const char *value_name(const gr_graph *g, int v) {
    return v >= 0 && v < g->values.len && g->values.data[v].name ? g->values.data[v].name : NULL;
}

/* ==== numbers ============================================================================= */
static bool nonfinite(char *buf, size_t n, double v) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else if (isinf(v)) snprintf(buf, n, v < 0 ? "-inf" : "inf");
    else return false;
    return true;
}

/* Integral values print as integers ("65504", not "6.55e+04"): exact and readable. */
static bool integral(char *buf, size_t n, double v) {
    if (v != floor(v) || fabs(v) >= 9007199254740992.0 || (v == 0 && signbit(v))) return false;
    snprintf(buf, n, "%.0f", v);
    return true;
}

static void fmt_f64(char *buf, size_t n, double v) {
    if (nonfinite(buf, n, v) || integral(buf, n, v)) return;
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* f32, f16, bf16: shortest text that reads back through strtof (+ rounding) to the same bits */
static void fmt_small_float(char *buf, size_t n, const void *elem, gr_dtype dt) {
    uint32_t bits = 0;
    float f;
    if (dt == GR_F32) {
        memcpy(&f, elem, 4);
        memcpy(&bits, elem, 4);
    } else {
        uint16_t h;
        memcpy(&h, elem, 2);
        bits = h;
        f = dt == GR_F16 ? gr_half_to_f32(h) : gr_bf16_to_f32(h);
    }
    if (nonfinite(buf, n, f) || integral(buf, n, f)) return;
    for (int prec = dt == GR_F32 ? 6 : 3; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)f);
        float r = strtof(buf, NULL);
        uint32_t rb = 0;
        if (dt == GR_F32) memcpy(&rb, &r, 4);
        else rb = dt == GR_F16 ? gr_f32_to_half(r) : gr_f32_to_bf16(r);
        if (rb == bits) return;
    }
}

/* A float attribute must not look like an integer, or it would read back as one. */
static void fmt_attr_float(char *buf, size_t n, double v) {
    fmt_f64(buf, n, v);
    if (!strpbrk(buf, ".eEn")) {
        size_t len = strlen(buf);
        if (len + 3 <= n) memcpy(buf + len, ".0", 3);
    }
}

static void put_elem(gr_strbuf *sb, const unsigned char *data, gr_dtype dt, int64_t i) {
    char buf[64];
    const unsigned char *e = data + (size_t)i * gr_dtype_size(dt);
    switch (dt) {
    case GR_F32: case GR_F16: case GR_BF16: fmt_small_float(buf, sizeof buf, e, dt); break;
    case GR_F64: {
        double d;
        memcpy(&d, e, 8);
        fmt_f64(buf, sizeof buf, d);
        break;
    }
    case GR_BOOL: snprintf(buf, sizeof buf, "%s", *e ? "true" : "false"); break;
    default: snprintf(buf, sizeof buf, "%lld", (long long)gr_load_i64(data, dt, i)); break;
    }
    gr_sb_puts(sb, buf);
}

/* ==== types ================================================================================== */
/* A symbolic dim: a plain symbol by name, an expression as a quoted string ("seq + 1"). */
static void put_dim(gr_strbuf *sb, const gr_graph *g, gr_dim d) {
    int32_t sym = gr_dx_as_symbol(g, d);
    if (sym >= 0) {
        put_name(sb, g->syms.data[sym].name);
        return;
    }
    if (!gr_dx_is_sym(d)) {
        gr_sb_printf(sb, "%lld", (long long)d.size);
        return;
    }
    gr_strbuf e;
    gr_sb_init(&e);
    gr_dx_print(g, d, &e);
    put_quoted(sb, e.data ? e.data : "?");
    gr_sb_free(&e);
}

static void put_type(gr_strbuf *sb, const gr_graph *g, const gr_ir_value *v) {
    if (!v->typed) {
        gr_sb_puts(sb, "?");
        return;
    }
    gr_sb_printf(sb, "%s[", gr_dtype_name(v->dtype));
    for (int i = 0; i < v->ndim && i < GR_MAX_DIMS; i++) {
        if (i) gr_sb_puts(sb, ", ");
        gr_dim d = v->dims[i];
        if (gr_dx_is_sym(d) && d.expr < g->dx.len) put_dim(sb, g, d);
        else if (gr_dx_is_sym(d) || d.size < 0) gr_sb_puts(sb, "?");
        else gr_sb_printf(sb, "%lld", (long long)d.size);
    }
    gr_sb_puts(sb, "]");
    if (v->placement == GR_PLACE_HOST) gr_sb_puts(sb, " @host");
}

static void indent_to(gr_strbuf *sb, int indent) {
    for (int i = 0; i < indent; i++) gr_sb_puts(sb, " ");
}

/* ==== constants ================================================================================ */
static gr_status put_const(printer *pr, const gr_graph *g, const gr_ir_value *v, int indent) {
    gr_strbuf *sb = &pr->sb;
    int64_t numel = gr_ir_value_numel(v);
    size_t es = gr_dtype_size(v->dtype);
    if (numel < 0 || (size_t)numel * es != v->nbytes || (numel > 0 && !v->data))
        return gr_error(GR_ERR_INVALID, "constant '%s': %zu bytes of data do not match its type", v->name ? v->name : "?", v->nbytes);
    indent_to(sb, indent);
    gr_sb_puts(sb, "const ");
    put_name(sb, v->name);
    gr_sb_puts(sb, ": ");
    put_type(sb, g, v);
    gr_sb_puts(sb, " = ");
    if ((size_t)numel > pr->inline_limit && pr->side_path && !strcmp(pr->side_path, GR_GIR_ELIDE)) {
        gr_sb_printf(sb, "...  # %lld elements elided\n", (long long)numel);
        return GR_OK;
    }
    if ((size_t)numel > pr->inline_limit && pr->side_path) {
        if (!pr->side && !(pr->side = fopen(pr->side_path, "ab")))
            return gr_error(GR_ERR_IO, "constant '%s': cannot open side file '%s': %s", v->name, pr->side_path, strerror(errno));
        off_t offset = fseeko(pr->side, 0, SEEK_END) == 0 ? ftello(pr->side) : -1;
        if (offset < 0 || fwrite(v->data, 1, v->nbytes, pr->side) != v->nbytes)
            return gr_error(GR_ERR_IO, "constant '%s': cannot write side file '%s': %s", v->name, pr->side_path, strerror(errno));
        gr_sb_puts(sb, "file(");
        put_quoted(sb, pr->side_base);
        gr_sb_printf(sb, ", offset=%lld)\n", (long long)offset);
        return GR_OK;
    }
    gr_sb_puts(sb, "[");
    for (int64_t i = 0; i < numel && !sb->failed; i++) {
        if (i) gr_sb_puts(sb, ", ");
        put_elem(sb, v->data, v->dtype, i);
    }
    gr_sb_puts(sb, "]\n");
    return GR_OK;
}

/* ==== nodes and graphs =========================================================================== */
static gr_status put_body(printer *pr, const gr_graph *g, int indent);

static gr_status put_attr(printer *pr, const gr_graph *g, const gr_ir_attr *a, int indent) {
    gr_strbuf *sb = &pr->sb;
    char buf[64];
    put_name(sb, a->name ? a->name : "?");
    gr_sb_puts(sb, "=");
    if (a->sym && (a->kind == GR_IR_ATTR_INT || a->kind == GR_IR_ATTR_FLOAT)) { /* dim(seq), dim("seq + 1") */
        gr_sb_puts(sb, "dim(");
        put_dim(sb, g, (gr_dim){-1, a->expr});
        gr_sb_puts(sb, ")");
        return GR_OK;
    }
    switch (a->kind) {
    case GR_IR_ATTR_INT: gr_sb_printf(sb, "%lld", (long long)a->i); break;
    case GR_IR_ATTR_FLOAT:
        fmt_attr_float(buf, sizeof buf, a->f);
        gr_sb_puts(sb, buf);
        break;
    case GR_IR_ATTR_STRING: put_quoted(sb, a->s ? a->s : ""); break;
    case GR_IR_ATTR_INTS:
    case GR_IR_ATTR_FLOATS:
        gr_sb_puts(sb, "[");
        for (int i = 0; i < a->n; i++) {
            if (i) gr_sb_puts(sb, ", ");
            if (a->kind == GR_IR_ATTR_INTS) {
                if (a->exprs && a->exprs[i] != GR_SYM_NONE) put_dim(sb, g, (gr_dim){-1, a->exprs[i]});
                else gr_sb_printf(sb, "%lld", (long long)a->ints[i]);
            } else {
                fmt_attr_float(buf, sizeof buf, a->floats[i]);
                gr_sb_puts(sb, buf);
            }
        }
        gr_sb_puts(sb, "]");
        break;
    case GR_IR_ATTR_GRAPH:
        gr_sb_puts(sb, "{\n");
        if (a->graph) GR_TRY(put_body(pr, a->graph, indent + 2));
        indent_to(sb, indent);
        gr_sb_puts(sb, "}");
        break;
    default: gr_sb_puts(sb, "?"); break;
    }
    return GR_OK;
}

static gr_status put_node(printer *pr, const gr_graph *g, const gr_ir_node *n, int indent) {
    gr_strbuf *sb = &pr->sb;
    const gr_op_info *info = gr_op_get(n->op);
    indent_to(sb, indent);
    const char *first = n->n_out > 0 ? value_name(g, n->out[0]) : NULL;
    if (n->name && (!first || strcmp(n->name, first))) {
        gr_sb_puts(sb, "[");
        put_name(sb, n->name);
        gr_sb_puts(sb, "] ");
    }
    for (int i = 0; i < n->n_out; i++) {
        if (i) gr_sb_puts(sb, ", ");
        put_name(sb, value_name(g, n->out[i]));
    }
    gr_sb_printf(sb, " = %s(", info ? info->name : "?");
    for (int i = 0; i < n->n_in; i++) {
        if (i) gr_sb_puts(sb, ", ");
        if (n->in[i] < 0) gr_sb_puts(sb, "_");
        else put_name(sb, value_name(g, n->in[i]));
    }
    for (int i = 0; i < n->n_attr; i++) {
        if (i || n->n_in) gr_sb_puts(sb, ", ");
        GR_TRY(put_attr(pr, g, &n->attrs[i], indent));
    }
    gr_sb_puts(sb, ")");
    bool any_typed = false;
    for (int i = 0; i < n->n_out; i++)
        any_typed |= n->out[i] >= 0 && n->out[i] < g->values.len && g->values.data[n->out[i]].typed;
    if (any_typed) {
        gr_sb_puts(sb, "  # ");
        for (int i = 0; i < n->n_out; i++) {
            if (i) gr_sb_puts(sb, ", ");
            if (n->out[i] >= 0 && n->out[i] < g->values.len) put_type(sb, g, &g->values.data[n->out[i]]);
            else gr_sb_puts(sb, "?");
        }
    }
    gr_sb_puts(sb, "\n");
    return GR_OK;
}

static gr_status put_body(printer *pr, const gr_graph *g, int indent) {
    gr_strbuf *sb = &pr->sb;
    /* declared ranges of symbolic dims: dim seq: [1, 512] */
    for (int i = 0; i < g->syms.len; i++) {
        const gr_ir_symbol *sym = &g->syms.data[i];
        if (!sym->declared || g->parent) continue;
        indent_to(sb, indent);
        gr_sb_puts(sb, "dim ");
        put_name(sb, sym->name);
        gr_sb_printf(sb, ": [%lld, %lld]\n", (long long)sym->lo, (long long)sym->hi);
    }
    for (int i = 0; i < g->inputs.len; i++) {
        int v = g->inputs.data[i];
        indent_to(sb, indent);
        gr_sb_puts(sb, "input ");
        put_name(sb, value_name(g, v));
        gr_sb_puts(sb, ": ");
        if (v >= 0 && v < g->values.len) put_type(sb, g, &g->values.data[v]);
        else gr_sb_puts(sb, "?");
        gr_sb_puts(sb, "\n");
    }
    /* all constants before the nodes: passes append folded constants at the end */
    for (int i = 0; i < g->values.len; i++)
        if (g->values.data[i].kind == GR_VAL_CONST) GR_TRY(put_const(pr, g, &g->values.data[i], indent));
    for (int i = 0; i < g->nodes.len; i++) GR_TRY(put_node(pr, g, &g->nodes.data[i], indent));
    if (g->outputs.len) {
        indent_to(sb, indent);
        gr_sb_puts(sb, "output ");
        for (int i = 0; i < g->outputs.len; i++) {
            if (i) gr_sb_puts(sb, ", ");
            put_name(sb, value_name(g, g->outputs.data[i]));
        }
        gr_sb_puts(sb, "\n");
    }
    return GR_OK;
}

gr_status gr_gir_print(const gr_graph *g, size_t inline_limit, const char *side_path, char **out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_gir_print: out is NULL");
    *out = NULL;
    if (!g) return gr_error(GR_ERR_INVALID, "gr_gir_print: graph is NULL");
    printer pr;
    memset(&pr, 0, sizeof pr);
    gr_sb_init(&pr.sb);
    pr.inline_limit = inline_limit;
    pr.side_path = side_path && *side_path ? side_path : NULL;
    if (pr.side_path && strcmp(pr.side_path, GR_GIR_ELIDE)) {
        const char *slash = strrchr(pr.side_path, '/');
        pr.side_base = slash ? slash + 1 : pr.side_path;
        if (!*pr.side_base) return gr_error(GR_ERR_INVALID, "gr_gir_print: side path '%s' names a directory", side_path);
    }
    gr_sb_puts(&pr.sb, "graft 1\n");
    gr_status st = put_body(&pr, g, 0);
    if (pr.side && fclose(pr.side) != 0 && st == GR_OK)
        st = gr_error(GR_ERR_IO, "cannot write side file '%s': %s", pr.side_path, strerror(errno));
    if (st != GR_OK) {
        gr_sb_free(&pr.sb);
        return st;
    }
    char *text = gr_sb_take(&pr.sb);
    if (!text) return GR_ERR_NOMEM;
    *out = text;
    return GR_OK;
}
