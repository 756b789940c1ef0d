/* ir/verify — structural checks of a graph (gr_ir_verify).
 *
 * Checks, in this order: every value's own fields (dtype, rank, dims, symbol
 * indices, constant data size, producer links), the input and output lists,
 * then every node (op, arity, input indices and definition order, optional
 * inputs, output links) and, recursively, every subgraph attribute.
 * Messages name the node with gr_ir_node_where, or the value and the graph's
 * origin when no node is involved.
 */
#include "ir/ir.h"
#include <stdio.h>
#include <string.h>

/* Inputs that may be left out (-1) per op: slot index, or -1 for none. */
static bool input_optional(gr_op op, int slot) {
    switch (op) {
    case GR_OP_LAYER_NORM: return slot == 2; /* bias */
    case GR_OP_MATMUL: return slot == 2 || slot == 3; /* bias, residual */
    default: return false;
    }
}

static const char *origin_of(const gr_graph *g) { return g && g->origin ? g->origin : "<api>"; }

/* A name visible in an enclosing graph (captures of a subgraph). */
static bool name_in_ancestors(const gr_graph *outer, const char *name) {
    for (const gr_graph *p = outer; p; p = p->parent)
        if (name && gr_ir_find_value(p, name) >= 0) return true;
    return false;
}

/* ==== values ======================================================================= */
static gr_status verify_value(const gr_graph *g, const gr_graph *outer, int vi, const bool *listed_input) {
    const gr_ir_value *v = &g->values.data[vi];
    const char *vname = v->name ? v->name : "?";
    if ((unsigned)v->kind > GR_VAL_NODE)
        return gr_error(GR_ERR_INVALID, "%s: value '%s' has bad kind %d", origin_of(g), vname, (int)v->kind);
    if ((unsigned)v->dtype >= GR_DTYPE_COUNT)
        return gr_error(GR_ERR_INVALID, "%s: value '%s' has bad dtype %d", origin_of(g), vname, (int)v->dtype);
    if (v->ndim < 0 || v->ndim > GR_MAX_DIMS)
        return gr_error(GR_ERR_INVALID, "%s: value '%s' has rank %d outside 0..%d", origin_of(g), vname, v->ndim,
                        GR_MAX_DIMS);
    if ((unsigned)v->placement > GR_PLACE_HOST)
        return gr_error(GR_ERR_INVALID, "%s: value '%s' has bad placement %d", origin_of(g), vname, (int)v->placement);
    if (v->typed) {
        for (int d = 0; d < v->ndim; d++) {
            const gr_dim *dim = &v->dims[d];
            if (dim->expr != GR_SYM_NONE) {
                if (dim->expr < 0 || dim->expr >= g->dx.len)
                    return gr_error(GR_ERR_INVALID, "%s: value '%s' dim %d refers to expression %d of %d", origin_of(g), vname,
                                    d, (int)dim->expr, g->dx.len);
            } else if (dim->size < 0) {
                return gr_error(GR_ERR_INVALID, "%s: value '%s' dim %d is negative (%lld) and not symbolic", origin_of(g),
                                vname, d, (long long)dim->size);
            }
        }
        if (!gr_ir_dims_fit(v->ndim, v->dims)) {
            char t[256];
            gr_ir_type_str(g, v, t, sizeof t);
            return gr_error(GR_ERR_SHAPE, "%s: value '%s' (%s) holds more than %lld elements", origin_of(g), vname, t,
                            (long long)GR_MAX_NUMEL);
        }
    }
    switch (v->kind) {
    case GR_VAL_INPUT:
        if (!listed_input[vi] && !name_in_ancestors(outer, v->name))
            return gr_error(GR_ERR_INVALID, "%s: value '%s' is an input but not listed among the graph inputs%s",
                            origin_of(g), vname, outer ? " nor defined in an enclosing graph" : "");
        if (!v->typed)
            if (listed_input[vi])
                return gr_error(GR_ERR_INVALID, "%s: input '%s' has no type", origin_of(g), vname);
        break;
    case GR_VAL_CONST: {
        if (!v->typed) return gr_error(GR_ERR_INVALID, "%s: constant '%s' has no type", origin_of(g), vname);
        int64_t numel = gr_ir_value_numel(v);
        if (numel < 0)
            return gr_error(GR_ERR_INVALID, "%s: constant '%s' has a symbolic shape", origin_of(g), vname);
        size_t want = (size_t)numel * gr_dtype_size(v->dtype);
        if (v->nbytes != want || (want && !v->data))
            return gr_error(GR_ERR_INVALID, "%s: constant '%s' holds %zu bytes of data, its type needs %zu", origin_of(g),
                            vname, v->data ? v->nbytes : (size_t)0, want);
        break;
    }
    case GR_VAL_NODE: break; /* links checked by verify_value_link, after the nodes */
    }
    return GR_OK;
}

/* A node value must be listed by its producer at its out_slot. Runs after the
 * node checks, which report the common inconsistencies from the node's side. */
static gr_status verify_value_link(const gr_graph *g, int vi) {
    const gr_ir_value *v = &g->values.data[vi];
    if (v->kind != GR_VAL_NODE) return GR_OK;
    const char *vname = v->name ? v->name : "?";
    if (v->producer < 0 || v->producer >= g->nodes.len)
        return gr_error(GR_ERR_INVALID, "%s: value '%s' has no producing node (producer %d of %d)", origin_of(g), vname,
                        v->producer, g->nodes.len);
    const gr_ir_node *p = &g->nodes.data[v->producer];
    if (v->out_slot == -1) return GR_OK; /* a temporary added by lowering, owned by its producer */
    if (v->out_slot < 0 || v->out_slot >= p->n_out || p->out[v->out_slot] != vi) {
        char where[512];
        gr_ir_node_where(g, p, where, sizeof where);
        return gr_error(GR_ERR_INVALID, "%s: value '%s' claims to be output %d of it, but is not", where, vname, v->out_slot);
    }
    return GR_OK;
}

/* ==== attributes =================================================================== */
static const char *const attr_kind_names[] = {"int", "float", "string", "ints", "floats", "graph"};

/* Does an attribute of kind `have` satisfy schema kind `want` (a word of the
 * schema string, want_len bytes)? The conversions are those of the
 * gr_ir_attr_* accessors. */
static bool attr_kind_ok(const gr_ir_attr *a, const char *want, size_t want_len) {
#define WANT(w) (want_len == sizeof(w) - 1 && !memcmp(want, w, want_len))
    switch (a->kind) {
    case GR_IR_ATTR_INT:
        return WANT("int") || WANT("float") || WANT("ints") || (WANT("dtype") && a->i >= 0 && a->i < GR_DTYPE_COUNT);
    case GR_IR_ATTR_FLOAT: return WANT("float") || WANT("floats");
    case GR_IR_ATTR_STRING: return WANT("string") || WANT("dtype");
    case GR_IR_ATTR_INTS: return WANT("ints");
    case GR_IR_ATTR_FLOATS: return WANT("floats");
    case GR_IR_ATTR_GRAPH: return WANT("graph");
    }
    return false;
#undef WANT
}

/* Finds `name` in schema (words "name:kind" separated by spaces); on success
 * *kind / *kind_len give its kind. */
static bool schema_find(const char *schema, const char *name, const char **kind, size_t *kind_len) {
    size_t name_len = strlen(name);
    for (const char *p = schema; *p;) {
        while (*p == ' ') p++;
        const char *colon = strchr(p, ':');
        if (!colon) break;
        const char *end = colon + strcspn(colon, " ");
        if ((size_t)(colon - p) == name_len && !memcmp(p, name, name_len)) {
            *kind = colon + 1;
            *kind_len = (size_t)(end - colon - 1);
            return true;
        }
        p = end;
    }
    return false;
}

gr_status gr_ir_check_attrs(const gr_graph *g, const gr_ir_node *n) {
    const gr_op_info *info = gr_op_get(n->op);
    if (!info) return gr_error(GR_ERR_INVALID, "%s: node '%s' has unknown op id %d", origin_of(g), n->name ? n->name : "?", (int)n->op);
    const char *schema = info->attrs ? info->attrs : "";
    for (int a = 0; a < n->n_attr; a++) {
        const gr_ir_attr *at = &n->attrs[a];
        const char *aname = at->name ? at->name : "";
        const char *kind = NULL;
        size_t kind_len = 0;
        char where[512];
        if (!schema_find(schema, aname, &kind, &kind_len)) {
            gr_ir_node_where(g, n, where, sizeof where);
            /* the list of valid names: the schema without its kinds */
            char valid[256];
            size_t pos = 0;
            valid[0] = 0;
            for (const char *p = schema; *p && pos + 1 < sizeof valid;) {
                while (*p == ' ') p++;
                size_t len = strcspn(p, ":");
                if (!len) break;
                pos += (size_t)snprintf(valid + pos, sizeof valid - pos, "%s%.*s", pos ? ", " : "", (int)len, p);
                p += len;
                p += strcspn(p, " ");
            }
            if (!*schema)
                return gr_error(GR_ERR_INVALID, "%s: unknown attribute '%s' (%s takes no attributes)", where, aname, info->name);
            return gr_error(GR_ERR_INVALID, "%s: unknown attribute '%s' (%s takes: %s)", where, aname, info->name, valid);
        }
        if ((unsigned)at->kind > GR_IR_ATTR_GRAPH || !attr_kind_ok(at, kind, kind_len)) {
            gr_ir_node_where(g, n, where, sizeof where);
            const char *have = (unsigned)at->kind <= GR_IR_ATTR_GRAPH ? attr_kind_names[at->kind] : "?";
            if (kind_len == 5 && !memcmp(kind, "dtype", 5))
                return gr_error(GR_ERR_INVALID, "%s: attribute '%s' must be a dtype name (\"f16\") or a dtype number, got %s%s",
                                where, aname, have, at->kind == GR_IR_ATTR_INT ? " out of range" : "");
            static const char *const phrases[][2] = {{"int", "an int"},       {"float", "a float"},
                                                     {"string", "a string"}, {"ints", "a list of ints"},
                                                     {"floats", "a list of floats"}, {"graph", "a graph"}};
            const char *want = NULL;
            for (int i = 0; i < GR_ARRAY_LEN(phrases) && !want; i++)
                if (strlen(phrases[i][0]) == kind_len && !memcmp(phrases[i][0], kind, kind_len)) want = phrases[i][1];
            return gr_error(GR_ERR_INVALID, "%s: attribute '%s' must be %s, got %s", where, aname, want ? want : "?", have);
        }
        for (int b = 0; b < a; b++)
            if (n->attrs[b].name && !strcmp(n->attrs[b].name, aname)) {
                gr_ir_node_where(g, n, where, sizeof where);
                return gr_error(GR_ERR_INVALID, "%s: attribute '%s' is given twice", where, aname);
            }
    }
    return GR_OK;
}

/* ==== nodes ======================================================================== */
static gr_status verify_graph(const gr_graph *g, const gr_graph *outer);

static gr_status verify_node(const gr_graph *g, int ni) {
    const gr_ir_node *n = &g->nodes.data[ni];
    char where[512];
    const gr_op_info *info = gr_op_get(n->op);
    if (!info) {
        return gr_error(GR_ERR_INVALID, "%s: node '%s' has unknown op id %d", origin_of(g), n->name ? n->name : "?",
                        (int)n->op);
    }
    gr_ir_node_where(g, n, where, sizeof where);
    if (n->n_in < 0 || n->n_out < 0 || n->n_attr < 0 || (n->n_in && !n->in) || (n->n_out && !n->out) ||
        (n->n_attr && !n->attrs))
        return gr_error(GR_ERR_INVALID, "%s: malformed input/output/attribute arrays", where);
    if (n->n_in < info->min_in || (info->max_in >= 0 && n->n_in > info->max_in)) {
        if (info->max_in < 0)
            return gr_error(GR_ERR_INVALID, "%s: takes at least %d inputs, got %d", where, info->min_in, n->n_in);
        if (info->min_in == info->max_in)
            return gr_error(GR_ERR_INVALID, "%s: takes %d inputs, got %d", where, info->min_in, n->n_in);
        return gr_error(GR_ERR_INVALID, "%s: takes %d to %d inputs, got %d", where, info->min_in, info->max_in, n->n_in);
    }
    if (n->n_out < info->min_out || (info->max_out >= 0 && n->n_out > info->max_out)) {
        if (info->max_out < 0)
            return gr_error(GR_ERR_INVALID, "%s: has at least %d outputs, got %d", where, info->min_out, n->n_out);
        if (info->min_out == info->max_out)
            return gr_error(GR_ERR_INVALID, "%s: has %d outputs, got %d", where, info->min_out, n->n_out);
        return gr_error(GR_ERR_INVALID, "%s: has %d to %d outputs, got %d", where, info->min_out, info->max_out, n->n_out);
    }
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v == -1) {
            if (!input_optional(n->op, i)) return gr_error(GR_ERR_INVALID, "%s: input %d is required but missing", where, i);
            continue;
        }
        if (v < 0 || v >= g->values.len)
            return gr_error(GR_ERR_INVALID, "%s: input %d refers to no value (%d of %d)", where, i, v, g->values.len);
        const gr_ir_value *val = &g->values.data[v];
        if (val->kind == GR_VAL_NODE && val->producer >= ni)
            return gr_error(GR_ERR_INVALID, "%s: input %d ('%s') is used before it is defined", where, i, val->name);
    }
    for (int i = 0; i < n->n_out; i++) {
        int v = n->out[i];
        if (v < 0 || v >= g->values.len)
            return gr_error(GR_ERR_INVALID, "%s: output %d refers to no value (%d of %d)", where, i, v, g->values.len);
        const gr_ir_value *val = &g->values.data[v];
        if (val->kind != GR_VAL_NODE || val->producer != ni || val->out_slot != i)
            return gr_error(GR_ERR_INVALID, "%s: output %d ('%s') is not recorded as produced here (kind %d, producer %d, slot %d)",
                            where, i, val->name, (int)val->kind, val->producer, val->out_slot);
    }
    for (int a = 0; a < n->n_attr; a++) {
        const gr_ir_attr *at = &n->attrs[a];
        if ((unsigned)at->kind > GR_IR_ATTR_GRAPH)
            return gr_error(GR_ERR_INVALID, "%s: attribute %d has bad kind %d", where, a, (int)at->kind);
        if ((at->kind == GR_IR_ATTR_INTS || at->kind == GR_IR_ATTR_FLOATS) && at->n < 0)
            return gr_error(GR_ERR_INVALID, "%s: attribute '%s' has negative length", where, at->name ? at->name : "?");
        bool bad_expr = at->sym && (at->kind == GR_IR_ATTR_INT || at->kind == GR_IR_ATTR_FLOAT) && (at->expr < 0 || at->expr >= g->dx.len);
        for (int k = 0; at->kind == GR_IR_ATTR_INTS && at->exprs && k < at->n; k++)
            bad_expr |= at->exprs[k] != GR_SYM_NONE && (at->exprs[k] < 0 || at->exprs[k] >= g->dx.len);
        if (bad_expr) return gr_error(GR_ERR_INVALID, "%s: attribute '%s' refers to a symbolic expression that does not exist", where,
                                      at->name ? at->name : "?");
    }
    GR_TRY(gr_ir_check_attrs(g, n));
    for (int a = 0; a < n->n_attr; a++) {
        const gr_ir_attr *at = &n->attrs[a];
        if (at->kind != GR_IR_ATTR_GRAPH) continue;
        if (!at->graph)
            return gr_error(GR_ERR_INVALID, "%s: graph attribute '%s' holds no graph", where, at->name ? at->name : "?");
        gr_status st = verify_graph(at->graph, at->graph->parent ? at->graph->parent : g);
        if (st != GR_OK)
            return gr_error_prefix(st, "%s: in subgraph '%s'", where, at->name ? at->name : "?");
    }
    return GR_OK;
}

/* ==== graph ======================================================================== */
/* The expression table: operands defined before use (no cycles), symbols that exist. */
static gr_status verify_exprs(const gr_graph *g) {
    for (int i = 0; i < g->dx.len; i++) {
        const gr_dexpr *e = &g->dx.data[i];
        bool ok;
        switch (e->op) {
        case GR_DX_SYM: ok = e->k >= 0 && e->k < g->syms.len; break;
        case GR_DX_CONST: ok = true; break;
        case GR_DX_ADD: case GR_DX_MUL: case GR_DX_DIV: case GR_DX_MOD: case GR_DX_MIN: case GR_DX_MAX: case GR_DX_EQ:
        case GR_DX_LT:
            ok = e->a >= 0 && e->a < i && e->b >= 0 && e->b < i;
            break;
        default: ok = false; break;
        }
        if (!ok) return gr_error(GR_ERR_INVALID, "%s: symbolic expression %d is malformed", origin_of(g), i);
    }
    return GR_OK;
}

static gr_status verify_graph(const gr_graph *g, const gr_graph *outer) {
    if (!g) return gr_error(GR_ERR_INVALID, "no graph");
    GR_TRY(verify_exprs(g));
    if (g->values.len < 0 || g->nodes.len < 0 || (g->values.len && !g->values.data) || (g->nodes.len && !g->nodes.data))
        return gr_error(GR_ERR_INVALID, "%s: malformed value or node arrays", origin_of(g));
    bool *listed = gr_calloc((size_t)(g->values.len ? g->values.len : 1), sizeof(bool));
    if (!listed) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    for (int i = 0; i < g->inputs.len && st == GR_OK; i++) {
        int v = g->inputs.data[i];
        if (v < 0 || v >= g->values.len)
            st = gr_error(GR_ERR_INVALID, "%s: graph input %d refers to no value (%d of %d)", origin_of(g), i, v,
                          g->values.len);
        else if (g->values.data[v].kind != GR_VAL_INPUT)
            st = gr_error(GR_ERR_INVALID, "%s: graph input %d ('%s') is not an input value", origin_of(g), i,
                          g->values.data[v].name);
        else if (listed[v])
            st = gr_error(GR_ERR_INVALID, "%s: graph input '%s' is listed twice", origin_of(g), g->values.data[v].name);
        else
            listed[v] = true;
    }
    for (int i = 0; i < g->values.len && st == GR_OK; i++) st = verify_value(g, outer, i, listed);
    gr_free(listed, (size_t)(g->values.len ? g->values.len : 1) * sizeof(bool));
    if (st != GR_OK) return st;
    for (int i = 0; i < g->outputs.len; i++) {
        int v = g->outputs.data[i];
        if (v < 0 || v >= g->values.len)
            return gr_error(GR_ERR_INVALID, "%s: graph output %d refers to no value (%d of %d)", origin_of(g), i, v,
                            g->values.len);
    }
    for (int i = 0; i < g->nodes.len; i++) GR_TRY(verify_node(g, i));
    for (int i = 0; i < g->values.len; i++) GR_TRY(verify_value_link(g, i));
    return GR_OK;
}

gr_status gr_ir_verify(const gr_graph *g) { return verify_graph(g, g ? g->parent : NULL); }
