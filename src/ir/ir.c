/* ir/ir — graph construction, attributes, cloning, type strings. */
#include "ir/ir.h"
#include <stdio.h>
#include <string.h>

static void index_free(gr_name_index *x);
static void index_appended(const gr_graph *g, gr_name_index *x, bool nodes);

/* ==== graph lifetime ============================================================== */
gr_status gr_ir_graph_create(gr_graph **out) {
    *out = NULL;
    gr_graph *g = gr_calloc(1, sizeof *g);
    if (!g) return GR_ERR_NOMEM;
    *out = g;
    return GR_OK;
}

void gr_ir_attr_free(gr_ir_attr *a) {
    if (!a->in_slab) {
        gr_strfree(a->name);
        gr_free(a->ints, (size_t)a->n * sizeof(int64_t));
        gr_free(a->floats, (size_t)a->n * sizeof(double));
        gr_free(a->exprs, (size_t)a->n * sizeof(int32_t));
    }
    gr_strfree(a->s);
    if (a->graph) gr_ir_graph_destroy(a->graph);
    memset(a, 0, sizeof *a);
}

void gr_ir_value_name_free(gr_ir_value *v) {
    if (!v->name_borrowed) gr_strfree(v->name);
    v->name = NULL;
    v->name_borrowed = false;
}

void gr_ir_node_name_free(gr_ir_node *n) {
    if (!n->name_borrowed) gr_strfree(n->name);
    n->name = NULL;
    n->name_borrowed = false;
}

void gr_ir_attr_drop_exprs(gr_ir_attr *a) {
    if (!a->in_slab) gr_free(a->exprs, (size_t)a->n * sizeof(int32_t));
    a->exprs = NULL;
}

void gr_ir_node_free_inputs(gr_ir_node *n) {
    if (!(n->slab & GR_NODE_SLAB_IN)) gr_free(n->in, (size_t)n->n_in * sizeof(int));
    n->slab &= (uint8_t)~GR_NODE_SLAB_IN;
    n->in = NULL;
    n->n_in = 0;
}

void gr_ir_node_release(gr_ir_node *n) {
    gr_ir_node_name_free(n);
    gr_ir_node_free_inputs(n);
    if (!(n->slab & GR_NODE_SLAB_OUT)) gr_free(n->out, (size_t)n->n_out * sizeof(int));
    for (int i = 0; n->attrs && i < n->n_attr; i++) gr_ir_attr_free(&n->attrs[i]);
    if (!(n->slab & GR_NODE_SLAB_ATTRS)) gr_free(n->attrs, (size_t)n->n_attr * sizeof(gr_ir_attr));
    n->out = NULL;
    n->attrs = NULL;
    n->n_out = n->n_attr = 0;
    n->slab = 0;
}

static void node_free(gr_ir_node *n) { gr_ir_node_release(n); }

void gr_ir_graph_destroy(gr_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->values.len; i++) {
        gr_ir_value_name_free(&g->values.data[i]);
        if (!g->values.data[i].borrowed) gr_free(g->values.data[i].data, g->values.data[i].nbytes);
    }
    for (int i = 0; i < g->nodes.len; i++) node_free(&g->nodes.data[i]);
    for (int i = 0; i < g->syms.len; i++) gr_strfree(g->syms.data[i].name), gr_strfree(g->syms.data[i].origin);
    gr_vec_free(&g->values);
    gr_vec_free(&g->nodes);
    gr_vec_free(&g->inputs);
    gr_vec_free(&g->outputs);
    gr_vec_free(&g->syms);
    gr_vec_free(&g->dx);
    gr_free(g->dx_slots, g->dx_cap * sizeof(int32_t));
    for (int i = 0; i < g->dx_text_cap; i++) gr_strfree(g->dx_text[i]);
    gr_free(g->dx_text, sizeof(char *) * (size_t)g->dx_text_cap);
    gr_strfree(g->origin);
    index_free(&g->value_index);
    index_free(&g->node_index);
    gr_free(g->slab, g->slab_bytes);
    gr_free(g, sizeof *g);
}

/* ==== attributes ==================================================================== */
gr_status gr_ir_attr_copy(gr_ir_attr *dst, const gr_ir_attr *src) {
    memset(dst, 0, sizeof *dst);
    dst->kind = src->kind;
    dst->i = src->i;
    dst->f = src->f;
    dst->n = src->n;
    dst->sym = src->sym;
    dst->expr = src->expr;
    if (!(dst->name = gr_strdup(src->name ? src->name : ""))) goto nomem;
    if (src->s && !(dst->s = gr_strdup(src->s))) goto nomem;
    if (src->kind == GR_IR_ATTR_INTS) {
        if (!(dst->ints = gr_malloc((size_t)src->n * sizeof(int64_t)))) goto nomem;
        if (src->n) memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
        if (src->exprs) {
            if (!(dst->exprs = gr_malloc((size_t)src->n * sizeof(int32_t)))) goto nomem;
            memcpy(dst->exprs, src->exprs, (size_t)src->n * sizeof(int32_t));
        }
    }
    if (src->kind == GR_IR_ATTR_FLOATS) {
        if (!(dst->floats = gr_malloc((size_t)src->n * sizeof(double)))) goto nomem;
        if (src->n) memcpy(dst->floats, src->floats, (size_t)src->n * sizeof(double));
    }
    if (src->graph && gr_ir_graph_clone(src->graph, &dst->graph) != GR_OK) goto nomem;
    return GR_OK;
nomem:
    gr_ir_attr_free(dst);
    return gr_nomem();
}

const gr_ir_attr *gr_ir_attr_find(const gr_ir_node *n, const char *name) {
    for (int i = 0; i < n->n_attr; i++)
        if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}

static const char *attr_kind_name(gr_ir_attr_kind k) {
    static const char *names[] = {"int", "float", "string", "ints", "floats", "graph"};
    return (unsigned)k < 6 ? names[k] : "?";
}

static gr_status attr_kind_error(const gr_graph *g, const gr_ir_node *n, const gr_ir_attr *a, const char *want) {
    char where[512];
    gr_ir_node_where(g, n, where, sizeof where);
    return gr_error(GR_ERR_INVALID, "%s: attribute '%s' must be %s, got %s", where, a->name, want, attr_kind_name(a->kind));
}

gr_status gr_ir_attr_int(const gr_graph *g, const gr_ir_node *n, const char *name, int64_t def, int64_t *out) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    if (!a) return *out = def, GR_OK;
    if (a->kind == GR_IR_ATTR_INT) return *out = a->i, GR_OK;
    return attr_kind_error(g, n, a, "an int");
}

gr_status gr_ir_attr_float(const gr_graph *g, const gr_ir_node *n, const char *name, double def, double *out) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    if (!a) return *out = def, GR_OK;
    if (a->kind == GR_IR_ATTR_FLOAT) return *out = a->f, GR_OK;
    if (a->kind == GR_IR_ATTR_INT) return *out = (double)a->i, GR_OK;
    return attr_kind_error(g, n, a, "a float");
}

gr_status gr_ir_attr_string(const gr_graph *g, const gr_ir_node *n, const char *name, const char *def, const char **out) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    if (!a) return *out = def, GR_OK;
    if (a->kind == GR_IR_ATTR_STRING) return *out = a->s, GR_OK;
    return attr_kind_error(g, n, a, "a string");
}

gr_status gr_ir_attr_ints(const gr_graph *g, const gr_ir_node *n, const char *name, const int64_t **out, int *n_out) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    *out = NULL;
    *n_out = -1;
    if (!a) return GR_OK;
    if (a->kind == GR_IR_ATTR_INTS) return *out = a->ints, *n_out = a->n, GR_OK;
    if (a->kind == GR_IR_ATTR_INT) return *out = &a->i, *n_out = 1, GR_OK;
    return attr_kind_error(g, n, a, "a list of ints");
}

gr_status gr_ir_attr_floats(const gr_graph *g, const gr_ir_node *n, const char *name, const double **out, int *n_out) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    *out = NULL;
    *n_out = -1;
    if (!a) return GR_OK;
    if (a->kind == GR_IR_ATTR_FLOATS) return *out = a->floats, *n_out = a->n, GR_OK;
    if (a->kind == GR_IR_ATTR_FLOAT) return *out = &a->f, *n_out = 1, GR_OK;
    return attr_kind_error(g, n, a, "a list of floats");
}

gr_status gr_ir_attr_sints(const gr_graph *g, const gr_ir_node *n, const char *name, gr_dim *out, int max, int *n_out) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    *n_out = -1;
    if (!a) return GR_OK;
    if (a->kind == GR_IR_ATTR_INT) {
        if (max < 1) return attr_kind_error(g, n, a, "a shorter list");
        out[0] = a->sym ? (gr_dim){-1, a->expr} : gr_dx_const(a->i);
        *n_out = 1;
        return GR_OK;
    }
    if (a->kind != GR_IR_ATTR_INTS) return attr_kind_error(g, n, a, "a list of ints");
    if (a->n > max) {
        char where[512];
        gr_ir_node_where(g, n, where, sizeof where);
        return gr_error(GR_ERR_INVALID, "%s: attribute '%s' has %d entries, at most %d allowed", where, name, a->n, max);
    }
    for (int i = 0; i < a->n; i++)
        out[i] = a->exprs && a->exprs[i] != GR_SYM_NONE ? (gr_dim){-1, a->exprs[i]} : gr_dx_const(a->ints[i]);
    *n_out = a->n;
    return GR_OK;
}

gr_status gr_ir_attr_sint(const gr_graph *g, const gr_ir_node *n, const char *name, gr_dim def, gr_dim *out, bool *present) {
    const gr_ir_attr *a = gr_ir_attr_find(n, name);
    if (present) *present = a != NULL;
    if (!a) return *out = def, GR_OK;
    if (a->sym && (a->kind == GR_IR_ATTR_INT || a->kind == GR_IR_ATTR_FLOAT)) return *out = (gr_dim){-1, a->expr}, GR_OK;
    if (a->kind == GR_IR_ATTR_INT) return *out = gr_dx_const(a->i), GR_OK;
    if (a->kind == GR_IR_ATTR_FLOAT) {
        if (!(a->f >= -9.2e18 && a->f <= 9.2e18) || a->f != (double)(int64_t)a->f) return attr_kind_error(g, n, a, "an integer");
        return *out = gr_dx_const((int64_t)a->f), GR_OK;
    }
    return attr_kind_error(g, n, a, "an int");
}

gr_status gr_ir_attr_make_sints(gr_ir_attr *a, const char *name, const gr_dim *vals, int n) {
    memset(a, 0, sizeof *a);
    a->kind = GR_IR_ATTR_INTS;
    a->n = n;
    bool any = false;
    for (int i = 0; i < n; i++) any |= gr_dx_is_sym(vals[i]);
    if (!(a->name = gr_strdup(name)) || !(a->ints = gr_malloc((size_t)n * sizeof(int64_t))) ||
        (any && !(a->exprs = gr_malloc((size_t)n * sizeof(int32_t))))) {
        gr_ir_attr_free(a);
        return gr_nomem();
    }
    for (int i = 0; i < n; i++) {
        a->ints[i] = gr_dx_is_sym(vals[i]) ? -1 : vals[i].size;
        if (any) a->exprs[i] = vals[i].expr;
    }
    return GR_OK;
}

bool gr_ir_node_has_sym_attr(const gr_ir_node *n) {
    for (int i = 0; i < n->n_attr; i++) {
        const gr_ir_attr *a = &n->attrs[i];
        if (a->sym && (a->kind == GR_IR_ATTR_INT || a->kind == GR_IR_ATTR_FLOAT)) return true;
        if (a->kind == GR_IR_ATTR_INTS && a->exprs)
            for (int k = 0; k < a->n; k++)
                if (a->exprs[k] != GR_SYM_NONE) return true;
    }
    return false;
}

/* ==== name indexes ==================================================================
 * The tables live in the graph but are a cache: const lookups may build or
 * rebuild them (hence the casts), and a lookup that meets an entry which
 * no longer matches its array (a pass truncated or moved the array) rebuilds
 * the table rather than trust it. Failure to allocate a table falls back to a
 * linear scan. */
static uint32_t name_hash(const char *s) { return (uint32_t)gr_hash_bytes(s, strlen(s), 0x5bd1e995u); }

static void index_free(gr_name_index *x) {
    gr_free(x->slots, x->cap * sizeof(int));
    gr_free(x->hashes, x->cap * sizeof(uint32_t));
    memset(x, 0, sizeof *x);
}

static const char *entry_name(const gr_graph *g, bool nodes, int i) {
    return nodes ? g->nodes.data[i].name : g->values.data[i].name;
}

static int array_len(const gr_graph *g, bool nodes) { return nodes ? g->nodes.len : g->values.len; }

/* Puts index i under its name, the later index winning a tie (lookups
 * return the last value of a name, as the linear scan did). */
static void index_put(const gr_graph *g, gr_name_index *x, bool nodes, int i) {
    const char *name = entry_name(g, nodes, i);
    if (!name) return;
    uint32_t h = name_hash(name);
    size_t mask = x->cap - 1;
    for (size_t s = h & mask;; s = (s + 1) & mask) {
        int e = x->slots[s] - 1;
        if (e < 0) {
            x->slots[s] = i + 1;
            x->hashes[s] = h;
            x->count++;
            return;
        }
        if (x->hashes[s] == h && e < array_len(g, nodes) && entry_name(g, nodes, e) &&
            !strcmp(entry_name(g, nodes, e), name)) {
            if (i > e) x->slots[s] = i + 1;
            return;
        }
    }
}

static bool index_build(const gr_graph *g, gr_name_index *x, bool nodes) {
    int n = array_len(g, nodes);
    size_t cap = 64;
    while (cap < 2 * (size_t)n + 2) cap *= 2;
    int *slots = gr_calloc(cap, sizeof(int));
    uint32_t *hashes = gr_malloc(cap * sizeof(uint32_t));
    if (!slots || !hashes) {
        gr_free(slots, cap * sizeof(int));
        gr_free(hashes, cap * sizeof(uint32_t));
        return false;
    }
    index_free(x);
    x->slots = slots;
    x->hashes = hashes;
    x->cap = cap;
    for (int i = 0; i < n; i++) index_put(g, x, nodes, i);
    x->len = n;
    return true;
}

/* Records the entry just appended at index len - 1 (builder only). */
static void index_appended(const gr_graph *g, gr_name_index *x, bool nodes) {
    int n = array_len(g, nodes);
    if (!x->cap || x->len < 0) return;
    if (x->len != n - 1 || 2 * ((size_t)x->count + 1) > x->cap) { /* changed behind our back, or full */
        x->len = -1;
        return;
    }
    index_put(g, x, nodes, n - 1);
    x->len = n;
}

/* Entry i was renamed (builder only). */
static void index_renamed(const gr_graph *g, gr_name_index *x, bool nodes, int i) {
    if (!x->cap || x->len != array_len(g, nodes) || 2 * ((size_t)x->count + 1) > x->cap) {
        x->len = -1;
        return;
    }
    index_put(g, x, nodes, i);
}

static int index_find(const gr_graph *cg, bool nodes, const char *name) {
    gr_graph *g = (gr_graph *)cg; /* the index is a cache */
    gr_name_index *x = nodes ? &g->node_index : &g->value_index;
    int n = array_len(g, nodes);
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((!x->cap || x->len != n) && !index_build(g, x, nodes)) {
            for (int i = n - 1; i >= 0; i--)
                if (entry_name(g, nodes, i) && !strcmp(entry_name(g, nodes, i), name)) return i;
            return -1;
        }
        uint32_t h = name_hash(name);
        size_t mask = x->cap - 1;
        bool stale = false;
        for (size_t s = h & mask;; s = (s + 1) & mask) {
            int e = x->slots[s] - 1;
            if (e < 0) break;
            if (x->hashes[s] != h) continue;
            if (e >= n || !entry_name(g, nodes, e) || name_hash(entry_name(g, nodes, e)) != h) {
                stale = true; /* renamed or removed behind our back */
                break;
            }
            if (!strcmp(entry_name(g, nodes, e), name)) return e;
        }
        if (!stale) return -1;
        x->len = -1;
    }
    return -1;
}

int gr_ir_find_value(const gr_graph *g, const char *name) { return name ? index_find(g, false, name) : -1; }
int gr_ir_find_node(const gr_graph *g, const char *name) { return name ? index_find(g, true, name) : -1; }

gr_status gr_ir_rename_value(gr_graph *g, int v, const char *name) {
    char *copy = gr_strdup(name);
    if (!copy) return gr_nomem();
    gr_ir_value_name_free(&g->values.data[v]);
    g->values.data[v].name = copy;
    index_renamed(g, &g->value_index, false, v);
    return GR_OK;
}

gr_status gr_ir_rename_node(gr_graph *g, int n, const char *name) {
    char *copy = gr_strdup(name);
    if (!copy) return gr_nomem();
    gr_ir_node_name_free(&g->nodes.data[n]);
    g->nodes.data[n].name = copy;
    index_renamed(g, &g->node_index, true, n);
    return GR_OK;
}

/* ==== values ============================================================================ */


gr_status gr_ir_add_value(gr_graph *g, const char *name, gr_value_kind kind, int *out) {
    gr_ir_value v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    v.producer = -1;
    if (name && *name) {
        if (gr_ir_find_value(g, name) >= 0) return gr_error(GR_ERR_INVALID, "value '%s' is defined twice", name);
        v.name = gr_strdup(name);
    } else {
        v.name = gr_sprintf("%%%d", g->next_auto_name++);
    }
    if (!v.name) return GR_ERR_NOMEM;
    if (gr_vec_push(&g->values, v) != GR_OK) {
        gr_strfree(v.name);
        return GR_ERR_NOMEM;
    }
    index_appended(g, &g->value_index, false);
    *out = g->values.len - 1;
    return GR_OK;
}

gr_status gr_ir_add_input(gr_graph *g, const char *name, gr_dtype t, int ndim, const gr_dim *dims, int *out) {
    if ((unsigned)t >= GR_DTYPE_COUNT) return gr_error(GR_ERR_INVALID, "input '%s': bad dtype %d", name ? name : "?", (int)t);
    if (ndim < 0 || ndim > GR_MAX_DIMS)
        return gr_error(GR_ERR_INVALID, "input '%s': rank %d outside 0..%d", name ? name : "?", ndim, GR_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (dims[i].expr == GR_SYM_NONE && dims[i].size < 0)
            return gr_error(GR_ERR_SHAPE, "input '%s': dim %d is negative (%lld)", name ? name : "?", i, (long long)dims[i].size);
    if (!gr_ir_dims_fit(ndim, dims))
        return gr_error(GR_ERR_SHAPE, "input '%s': the shape holds more than %lld elements", name ? name : "?",
                        (long long)GR_MAX_NUMEL);
    int v;
    GR_TRY(gr_ir_add_value(g, name, GR_VAL_INPUT, &v));
    if (gr_vec_push(&g->inputs, v) != GR_OK) {
        gr_strfree(g->values.data[v].name);
        g->values.len--;
        return GR_ERR_NOMEM;
    }
    gr_ir_value *val = &g->values.data[v];
    val->dtype = t;
    val->ndim = ndim;
    for (int i = 0; i < ndim; i++) val->dims[i] = dims[i];
    val->typed = true;
    *out = v;
    return GR_OK;
}

gr_status gr_ir_add_const_owned(gr_graph *g, const char *name, gr_dtype t, int ndim, const int64_t *dims,
                                void *data, size_t nbytes, int *out) {
    if ((unsigned)t >= GR_DTYPE_COUNT || ndim < 0 || ndim > GR_MAX_DIMS) {
        gr_free(data, nbytes);
        return gr_error(GR_ERR_INVALID, "constant '%s': bad dtype or rank", name ? name : "?");
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) {
            gr_free(data, nbytes);
            return gr_error(GR_ERR_SHAPE, "constant '%s': dim %d is negative (%lld)", name ? name : "?", i, (long long)dims[i]);
        }
    }
    if (!gr_shape_numel_checked(ndim, dims, &numel)) {
        gr_free(data, nbytes);
        return gr_error(GR_ERR_SHAPE, "constant '%s': the shape holds more than %lld elements", name ? name : "?",
                        (long long)GR_MAX_NUMEL);
    }
    if ((size_t)numel * gr_dtype_size(t) != nbytes) {
        gr_free(data, nbytes);
        return gr_error(GR_ERR_SHAPE, "constant '%s': %zu bytes of data for %lld elements of %s", name ? name : "?", nbytes,
                        (long long)numel, gr_dtype_name(t));
    }
    int v;
    gr_status st = gr_ir_add_value(g, name, GR_VAL_CONST, &v);
    if (st != GR_OK) {
        gr_free(data, nbytes);
        return st;
    }
    gr_ir_value *val = &g->values.data[v];
    val->dtype = t;
    val->ndim = ndim;
    for (int i = 0; i < ndim; i++) val->dims[i] = (gr_dim){dims[i], GR_SYM_NONE};
    val->typed = true;
    val->data = data;
    val->nbytes = nbytes;
    *out = v;
    return GR_OK;
}

gr_status gr_ir_add_const(gr_graph *g, const char *name, gr_dtype t, int ndim, const int64_t *dims, const void *data, int *out) {
    int64_t numel = 0;
    if ((unsigned)t >= GR_DTYPE_COUNT || ndim < 0 || ndim > GR_MAX_DIMS)
        return gr_error(GR_ERR_INVALID, "constant '%s': bad dtype or rank", name ? name : "?");
    if (!gr_shape_numel_checked(ndim, dims, &numel))
        return gr_error(GR_ERR_SHAPE, "constant '%s': a dim is negative or the shape holds more than %lld elements",
                        name ? name : "?", (long long)GR_MAX_NUMEL);
    size_t nbytes = (size_t)numel * gr_dtype_size(t);
    void *copy = gr_malloc(nbytes);
    if (!copy) return GR_ERR_NOMEM;
    if (nbytes) memcpy(copy, data, nbytes);
    return gr_ir_add_const_owned(g, name, t, ndim, dims, copy, nbytes, out);
}

gr_status gr_ir_add_node(gr_graph *g, gr_op op, const char *name, int n_in, const int *in, int n_out,
                         const char *const *out_names, int n_attr, const gr_ir_attr *attrs, int *out_node) {
    const gr_op_info *info = gr_op_get(op);
    if (!info) return gr_error(GR_ERR_INVALID, "unknown op id %d", (int)op);
    const char *nm = name && *name ? name : NULL;
    if (nm && gr_ir_find_node(g, nm) >= 0) return gr_error(GR_ERR_INVALID, "node name '%s' is used twice", nm);
    for (int i = 0; i < n_in; i++)
        if (in[i] < -1 || in[i] >= g->values.len)
            return gr_error(GR_ERR_INVALID, "node '%s' (%s): input %d refers to no value", nm ? nm : "?", info->name, i);

    gr_ir_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.name = nm ? gr_strdup(nm) : gr_sprintf("%s_%d", info->name, g->nodes.len);
    n.in = gr_malloc(sizeof(int) * (size_t)n_in);
    n.out = gr_malloc(sizeof(int) * (size_t)n_out);
    n.attrs = gr_calloc((size_t)n_attr, sizeof(gr_ir_attr));
    n.n_in = n_in, n.n_out = n_out, n.n_attr = n_attr; /* the sizes node_free frees (attrs zeroed until copied) */
    if (!n.name || !n.in || !n.out || !n.attrs) goto nomem;
    if (n_in) memcpy(n.in, in, sizeof(int) * (size_t)n_in);
    for (int i = 0; i < n_attr; i++)
        if (gr_ir_attr_copy(&n.attrs[i], &attrs[i]) != GR_OK) goto nomem;
    if (gr_vec_reserve(&g->nodes, g->nodes.len + 1) != GR_OK) goto nomem;
    int node_index = g->nodes.len;
    int first_new = g->values.len;
    for (int i = 0; i < n_out; i++) {
        int v;
        gr_status st = gr_ir_add_value(g, out_names ? out_names[i] : NULL, GR_VAL_NODE, &v);
        if (st != GR_OK) {
            for (int j = first_new; j < g->values.len; j++) gr_strfree(g->values.data[j].name);
            g->values.len = first_new;
            node_free(&n);
            return st;
        }
        g->values.data[v].producer = node_index;
        g->values.data[v].out_slot = i;
        n.out[i] = v;
    }
    g->nodes.data[g->nodes.len++] = n;
    index_appended(g, &g->node_index, true);
    if (out_node) *out_node = node_index;
    return GR_OK;
nomem:
    node_free(&n);
    return gr_nomem();
}

void gr_ir_remove_last_node(gr_graph *g) {
    if (g->nodes.len == 0) return;
    gr_ir_node *n = &g->nodes.data[g->nodes.len - 1];
    for (int i = n->n_out - 1; i >= 0; i--) {
        if (n->out[i] == g->values.len - 1) {
            gr_ir_value *v = &g->values.data[g->values.len - 1];
            gr_ir_value_name_free(v);
            gr_free(v->data, v->nbytes);
            g->values.len--;
        }
    }
    node_free(n);
    g->nodes.len--;
}

static void reverse_nodes(gr_ir_node *a, int n) {
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        gr_ir_node t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void gr_ir_splice_nodes(gr_graph *g, int at, int first_new) {
    int n = g->nodes.len;
    if (at < 0 || at >= first_new || first_new > n) return;
    /* drop node `at`, then rotate [at, n-1) so the new nodes (now at
     * first_new-1 ..) come first: three reversals, O(n - at), no memory */
    node_free(&g->nodes.data[at]);
    memmove(&g->nodes.data[at], &g->nodes.data[at + 1], sizeof(gr_ir_node) * (size_t)(n - at - 1));
    g->nodes.len = --n;
    gr_ir_node *seg = g->nodes.data + at;
    int before = first_new - 1 - at, moved = n - (first_new - 1);
    reverse_nodes(seg, before);
    reverse_nodes(seg + before, moved);
    reverse_nodes(seg, before + moved);
    for (int i = at; i < g->nodes.len; i++)
        for (int o = 0; o < g->nodes.data[i].n_out; o++) {
            gr_ir_value *v = &g->values.data[g->nodes.data[i].out[o]];
            v->producer = i;
            v->out_slot = o;
        }
}

gr_status gr_ir_splice_many(gr_graph *g, const int *at, const int *first, const int *count, int n) {
    if (n <= 0) return GR_OK;
    int len = g->nodes.len, base = len;
    for (int k = 0; k < n; k++) base = first[k] < base ? first[k] : base;
    /* repl[i]: the replacement of original node i; used[j]: appended node j taken */
    size_t rb = sizeof(int) * (size_t)(base ? base : 1), ub = (size_t)(len - base + 1);
    int *repl = gr_malloc(rb);
    unsigned char *used = gr_calloc(ub, 1);
    size_t bytes = sizeof(gr_ir_node) * (size_t)(len - n > 0 ? len - n : 1);
    gr_ir_node *tmp = gr_malloc(bytes);
    gr_status st = repl && used && tmp ? GR_OK : gr_nomem();
    for (int i = 0; st == GR_OK && i < base; i++) repl[i] = -1;
    int taken = 0;
    for (int k = 0; st == GR_OK && k < n; k++) {
        bool ok = at[k] >= 0 && at[k] < base && repl[at[k]] < 0 && count[k] >= 1 && first[k] >= base && first[k] + count[k] <= len;
        for (int j = 0; ok && j < count[k]; j++) ok = !used[first[k] + j - base];
        if (!ok) {
            st = gr_error(GR_ERR_INTERNAL, "gr_ir_splice_many: replacement %d (node %d by %d nodes from %d) is not one of its own", k,
                          at[k], count[k], first[k]);
            break;
        }
        repl[at[k]] = k;
        for (int j = 0; j < count[k]; j++) used[first[k] + j - base] = 1;
        taken += count[k];
    }
    if (st == GR_OK && taken != len - base)
        st = gr_error(GR_ERR_INTERNAL, "gr_ir_splice_many: %d appended nodes, %d in replacements", len - base, taken);
    if (st == GR_OK) {
        int o = 0;
        for (int i = 0; i < base; i++) {
            if (repl[i] >= 0) {
                int k = repl[i];
                node_free(&g->nodes.data[i]);
                for (int j = 0; j < count[k]; j++) tmp[o++] = g->nodes.data[first[k] + j];
            } else {
                tmp[o++] = g->nodes.data[i];
            }
        }
        memcpy(g->nodes.data, tmp, sizeof(gr_ir_node) * (size_t)o);
        g->nodes.len = o;
        for (int i = 0; i < o; i++)
            for (int q = 0; q < g->nodes.data[i].n_out; q++) {
                if (g->nodes.data[i].out[q] < 0) continue;
                gr_ir_value *v = &g->values.data[g->nodes.data[i].out[q]];
                v->producer = i;
                v->out_slot = q;
            }
    }
    gr_free(repl, rb);
    gr_free(used, ub);
    gr_free(tmp, bytes);
    return st;
}

/* Depth-first over each node's inputs, roots in the current order (ir.h). */
gr_status gr_ir_topo_sort(gr_graph *g, const char *who) {
    int n = g->nodes.len;
    int *order = gr_malloc(sizeof(int) * (size_t)(n ? n : 1));
    unsigned char *state = gr_calloc((size_t)(n ? n : 1), 1);
    int *stack = gr_malloc(sizeof(int) * (size_t)(n ? n : 1) * 2);
    gr_status st = GR_OK;
    if (!order || !state || !stack) {
        st = gr_nomem();
        goto out;
    }
    int k = 0;
    for (int root = 0; root < n; root++) {
        if (state[root]) continue;
        int sp = 0;
        stack[sp++] = root, stack[sp++] = 0;
        state[root] = 1;
        while (sp) {
            int nd = stack[sp - 2], i = stack[sp - 1];
            const gr_ir_node *node = &g->nodes.data[nd];
            if (i < node->n_in) {
                stack[sp - 1] = i + 1;
                int v = node->in[i];
                int p = v >= 0 ? g->values.data[v].producer : -1;
                if (p >= 0 && !state[p]) {
                    state[p] = 1;
                    stack[sp++] = p, stack[sp++] = 0;
                } else if (p >= 0 && state[p] == 1) {
                    st = gr_error(GR_ERR_INTERNAL, "%s: a cycle through node '%s'", who, g->nodes.data[p].name);
                    goto out;
                }
                continue;
            }
            state[nd] = 2;
            order[k++] = nd;
            sp -= 2;
        }
    }
    st = gr_ir_reorder_nodes(g, order);
out:
    gr_free(order, sizeof(int) * (size_t)(n ? n : 1));
    gr_free(state, (size_t)(n ? n : 1));
    gr_free(stack, sizeof(int) * (size_t)(n ? n : 1) * 2);
    return st;
}

/* Puts the nodes in the order order[0..len) (a permutation of the node indices) and renumbers
 * every value's producer; the name index is rebuilt on its next lookup. */
gr_status gr_ir_reorder_nodes(gr_graph *g, const int *order) {
    int n = g->nodes.len;
    if (n == 0) return GR_OK;
    size_t bytes = sizeof(gr_ir_node) * (size_t)n;
    gr_ir_node *moved = gr_malloc(bytes);
    if (!moved) return gr_nomem();
    for (int i = 0; i < n; i++) moved[i] = g->nodes.data[order[i]];
    memcpy(g->nodes.data, moved, bytes);
    gr_free(moved, bytes);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < g->nodes.data[i].n_out; o++) {
            if (g->nodes.data[i].out[o] < 0) continue;
            gr_ir_value *v = &g->values.data[g->nodes.data[i].out[o]];
            v->producer = i;
            v->out_slot = o;
        }
    g->node_index.len = -1;
    return GR_OK;
}

gr_status gr_ir_add_output(gr_graph *g, int value) {
    if (value < 0 || value >= g->values.len) return gr_error(GR_ERR_INVALID, "output refers to no value (%d)", value);
    return gr_vec_push(&g->outputs, value);
}

/* ==== clone ================================================================================== */
static gr_status clone_impl(const gr_graph *g, bool borrow, gr_graph **out);
gr_status gr_ir_graph_clone(const gr_graph *g, gr_graph **out) { return clone_impl(g, false, out); }
gr_status gr_ir_graph_clone_borrow(const gr_graph *g, gr_graph **out) { return clone_impl(g, true, out); }

/* Slab pieces start 8-byte aligned (int64_t, double, pointers). */
static size_t slab_round(size_t n) { return (n + 7) & ~(size_t)7; }

/* What attr_copy_slab puts in the slab for a. */
static size_t attr_slab_bytes(const gr_ir_attr *a) {
    size_t n = 0;
    if (a->kind == GR_IR_ATTR_INTS) {
        n += slab_round((size_t)a->n * sizeof(int64_t));
        if (a->exprs) n += slab_round((size_t)a->n * sizeof(int32_t));
    }
    if (a->kind == GR_IR_ATTR_FLOATS) n += slab_round((size_t)a->n * sizeof(double));
    return n;
}

/* gr_ir_attr_copy for a borrowing clone: the name is borrowed and the arrays go into the slab
 * (the string and the subgraph are owned, as gr_ir_attr_copy makes them). dst is zeroed. */
static gr_status attr_copy_slab(gr_ir_attr *dst, const gr_ir_attr *src, char *slab, size_t *at) {
    dst->kind = src->kind;
    dst->i = src->i;
    dst->f = src->f;
    dst->n = src->n;
    dst->sym = src->sym;
    dst->expr = src->expr;
    dst->in_slab = true;
    dst->name = src->name ? src->name : (char *)"";
    if (src->kind == GR_IR_ATTR_INTS) {
        dst->ints = (int64_t *)(void *)(slab + *at);
        *at += slab_round((size_t)src->n * sizeof(int64_t));
        if (src->n) memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
        if (src->exprs) {
            dst->exprs = (int32_t *)(void *)(slab + *at);
            *at += slab_round((size_t)src->n * sizeof(int32_t));
            memcpy(dst->exprs, src->exprs, (size_t)src->n * sizeof(int32_t));
        }
    }
    if (src->kind == GR_IR_ATTR_FLOATS) {
        dst->floats = (double *)(void *)(slab + *at);
        *at += slab_round((size_t)src->n * sizeof(double));
        if (src->n) memcpy(dst->floats, src->floats, (size_t)src->n * sizeof(double));
    }
    if (src->s && !(dst->s = gr_strdup(src->s))) return gr_nomem();
    if (src->graph && gr_ir_graph_clone(src->graph, &dst->graph) != GR_OK) return gr_nomem();
    return GR_OK;
}

static gr_status clone_impl(const gr_graph *g, bool borrow, gr_graph **out) {
    gr_graph *c;
    GR_TRY(gr_ir_graph_create(&c));
    c->next_auto_name = g->next_auto_name;
    if (g->origin && !(c->origin = gr_strdup(g->origin))) goto nomem;
    /* symbols and expressions keep their indices: dims and attributes copy as they are */
    for (int i = 0; i < g->syms.len; i++) {
        gr_ir_symbol sym = g->syms.data[i];
        sym.origin = NULL;
        if (!(sym.name = gr_strdup(sym.name))) goto nomem;
        if (g->syms.data[i].origin && !(sym.origin = gr_strdup(g->syms.data[i].origin))) {
            gr_strfree(sym.name);
            goto nomem;
        }
        if (gr_vec_push(&c->syms, sym) != GR_OK) {
            gr_strfree(sym.name);
            gr_strfree(sym.origin);
            goto nomem;
        }
    }
    if (gr_vec_reserve(&c->dx, g->dx.len) != GR_OK) goto nomem;
    if (g->dx.len) memcpy(c->dx.data, g->dx.data, sizeof(gr_dexpr) * (size_t)g->dx.len);
    c->dx.len = g->dx.len;
    if (gr_vec_reserve(&c->values, g->values.len) != GR_OK) goto nomem;
    for (int i = 0; i < g->values.len; i++) {
        gr_ir_value v = g->values.data[i];
        v.name = NULL;
        v.data = NULL;
        c->values.data[c->values.len++] = v;
        gr_ir_value *d = &c->values.data[i];
        d->nbytes = 0;
        d->borrowed = false;
        d->name_borrowed = borrow;
        if (borrow) d->name = g->values.data[i].name;
        else if (!(d->name = gr_strdup(g->values.data[i].name))) goto nomem;
        if (g->values.data[i].data && borrow) {
            d->data = g->values.data[i].data;
            d->nbytes = g->values.data[i].nbytes;
            d->borrowed = true;
        } else if (g->values.data[i].data) {
            if (!(d->data = gr_malloc(g->values.data[i].nbytes))) goto nomem;
            memcpy(d->data, g->values.data[i].data, g->values.data[i].nbytes);
            d->nbytes = g->values.data[i].nbytes;
        }
    }
    if (gr_vec_reserve(&c->nodes, g->nodes.len) != GR_OK) goto nomem;
    /* borrow (every new binding's plan): one slab holds every node's in, out and attrs arrays and
     * the attributes' arrays, and attribute names are borrowed: they were ~740 allocations per
     * plan of the GPT-2 export, about a tenth of its new-binding host instructions */
    char *slab = NULL;
    size_t slab_at = 0;
    if (borrow) {
        size_t total = 0;
        for (int i = 0; i < g->nodes.len; i++) {
            const gr_ir_node *s = &g->nodes.data[i];
            total += slab_round((size_t)s->n_in * sizeof(int)) + slab_round((size_t)s->n_out * sizeof(int)) +
                     (size_t)s->n_attr * sizeof(gr_ir_attr);
            for (int a = 0; a < s->n_attr; a++) total += attr_slab_bytes(&s->attrs[a]);
        }
        if (total && !(c->slab = gr_malloc(total))) goto nomem;
        c->slab_bytes = total;
        slab = c->slab;
    }
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *s = &g->nodes.data[i];
        gr_ir_node *d = &c->nodes.data[c->nodes.len++];
        memset(d, 0, sizeof *d);
        d->op = s->op;
        d->no_fold = s->no_fold;
        d->attrs_checked = s->attrs_checked;
        d->line = s->line;
        d->col = s->col;
        d->name_borrowed = borrow;
        d->name = borrow ? s->name : gr_strdup(s->name);
        if (slab) {
            d->in = (int *)(void *)(slab + slab_at), slab_at += slab_round((size_t)s->n_in * sizeof(int));
            d->out = (int *)(void *)(slab + slab_at), slab_at += slab_round((size_t)s->n_out * sizeof(int));
            d->attrs = (gr_ir_attr *)(void *)(slab + slab_at), slab_at += (size_t)s->n_attr * sizeof(gr_ir_attr);
            d->slab = GR_NODE_SLAB_IN | GR_NODE_SLAB_OUT | GR_NODE_SLAB_ATTRS;
            memset(d->attrs, 0, (size_t)s->n_attr * sizeof(gr_ir_attr));
        } else {
            d->in = gr_malloc(sizeof(int) * (size_t)s->n_in);
            d->out = gr_malloc(sizeof(int) * (size_t)s->n_out);
            d->attrs = gr_calloc((size_t)s->n_attr, sizeof(gr_ir_attr));
        }
        d->n_in = s->n_in, d->n_out = s->n_out, d->n_attr = s->n_attr; /* the sizes node_free frees */
        if (!d->name || !d->in || !d->out || !d->attrs) goto nomem;
        memcpy(d->in, s->in, sizeof(int) * (size_t)s->n_in);
        memcpy(d->out, s->out, sizeof(int) * (size_t)s->n_out);
        for (int a = 0; a < s->n_attr; a++) {
            if (slab) {
                if (attr_copy_slab(&d->attrs[a], &s->attrs[a], slab, &slab_at) != GR_OK) goto nomem;
            } else if (gr_ir_attr_copy(&d->attrs[a], &s->attrs[a]) != GR_OK) goto nomem;
            if (d->attrs[a].graph) d->attrs[a].graph->parent = c;
        }
    }
    for (int i = 0; i < g->inputs.len; i++)
        if (gr_vec_push(&c->inputs, g->inputs.data[i]) != GR_OK) goto nomem;
    for (int i = 0; i < g->outputs.len; i++)
        if (gr_vec_push(&c->outputs, g->outputs.data[i]) != GR_OK) goto nomem;
    c->parent = g->parent;
    *out = c;
    return GR_OK;
nomem:
    gr_ir_graph_destroy(c);
    *out = NULL;
    return gr_nomem();
}

/* ==== shapes and messages ========================================================================= */
bool gr_ir_value_concrete(const gr_ir_value *v) {
    if (!v->typed) return false;
    for (int i = 0; i < v->ndim; i++)
        if (v->dims[i].expr != GR_SYM_NONE || v->dims[i].size < 0) return false;
    return true;
}

/* One pass (lowering and memory planning ask ~650 times per plan): -1 for a dim that is not
 * concrete, and for a count past GR_MAX_NUMEL or an overflow (gr_shape_numel_checked's rules). */
int64_t gr_ir_value_numel(const gr_ir_value *v) {
    if (!v->typed || v->ndim > GR_MAX_DIMS) return -1;
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < v->ndim; i++) {
        gr_dim d = v->dims[i];
        if (d.expr != GR_SYM_NONE || d.size < 0) return -1;
        if (d.size == 0) empty = true;
        else if (gr_mul_overflow(n, d.size, &n) || n > GR_MAX_NUMEL) return -1;
    }
    return empty ? 0 : n;
}

bool gr_ir_dims_fit(int ndim, const gr_dim *dims) {
    int64_t concrete[GR_MAX_DIMS], n;
    int nc = 0;
    if (ndim < 0 || ndim > GR_MAX_DIMS) return false;
    for (int i = 0; i < ndim; i++)
        if (dims[i].expr == GR_SYM_NONE) concrete[nc++] = dims[i].size;
    return gr_shape_numel_checked(nc, concrete, &n);
}

gr_status gr_ir_value_shape(const gr_graph *g, int vi, int64_t *dims) {
    const gr_ir_value *v = &g->values.data[vi];
    if (!gr_ir_value_concrete(v)) {
        char t[256];
        gr_ir_type_str(g, v, t, sizeof t);
        return gr_error(GR_ERR_SHAPE, "value '%s' has no concrete shape (%s)", v->name, t);
    }
    for (int i = 0; i < v->ndim; i++) dims[i] = v->dims[i].size;
    return GR_OK;
}

void gr_ir_type_str(const gr_graph *g, const gr_ir_value *v, char *buf, size_t n) {
    if (!v->typed) {
        snprintf(buf, n, "?");
        return;
    }
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s[", gr_dtype_name(v->dtype));
    for (int i = 0; i < v->ndim; i++) {
        const char *sep = i ? "," : "";
        if (v->dims[i].expr != GR_SYM_NONE && g) {
            char e[160];
            gr_dx_str(g, v->dims[i], e, sizeof e);
            pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%s", sep, e);
        } else
            pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%lld", sep, (long long)v->dims[i].size);
    }
    pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "]");
    if (v->placement == GR_PLACE_HOST) snprintf(buf + pos, pos < n ? n - pos : 0, "@host");
}

void gr_ir_node_where(const gr_graph *g, const gr_ir_node *n, char *buf, size_t size) {
    const gr_op_info *info = gr_op_get(n->op);
    const char *origin = g && g->origin ? g->origin : "<api>";
    if (n->line > 0)
        snprintf(buf, size, "node '%s' (%s) at %s:%d:%d", n->name, info ? info->name : "?", origin, n->line, n->col);
    else
        snprintf(buf, size, "node '%s' (%s)", n->name, info ? info->name : "?");
}

/* ==== data-dependent symbols, pruning (runtime/probe.c) ====================================== */
gr_status gr_ir_data_symbol(gr_graph *g, const char *base, int32_t data_value, int64_t hi, const char *origin, gr_dim *out) {
    char *name = gr_strdup(base);
    for (int k = 2; name && gr_ir_find_sym(g, name) >= 0; k++) {
        gr_strfree(name);
        name = gr_sprintf("%s.%d", base, k);
    }
    if (!name) return gr_nomem();
    int32_t sym;
    gr_status st = gr_ir_sym(g, name, &sym);
    gr_strfree(name);
    GR_TRY(st);
    gr_ir_symbol *s = &g->syms.data[sym];
    if (!(s->origin = gr_strdup(origin))) return gr_nomem();
    s->lo = 0; /* a count may be 0 */
    s->hi = hi;
    s->declared = true;
    s->data_value = data_value;
    return gr_dx_symbol(g, g->syms.data[sym].name, out);
}

static void mark_dim_syms(const gr_graph *g, gr_dim d, bool *used) {
    if (gr_dx_is_sym(d)) gr_dx_symbols_of(g, d, used);
}

/* symbols of sub (a subgraph) marked in used[] of top by name */
static gr_status syms_used_sub(const gr_graph *top, const gr_graph *sub, bool *used) {
    bool *own = gr_calloc((size_t)sub->syms.len + 1, sizeof(bool));
    if (!own) return gr_nomem();
    gr_ir_syms_used(sub, own);
    for (int k = 0; k < sub->syms.len; k++) {
        int32_t t = own[k] ? gr_ir_find_sym(top, sub->syms.data[k].name) : -1;
        if (t >= 0) used[t] = true;
    }
    gr_free(own, ((size_t)sub->syms.len + 1) * sizeof(bool));
    return GR_OK;
}

void gr_ir_syms_used(const gr_graph *g, bool *used) {
    for (int v = 0; v < g->values.len; v++)
        for (int d = 0; d < g->values.data[v].ndim; d++) mark_dim_syms(g, g->values.data[v].dims[d], used);
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *n = &g->nodes.data[i];
        for (int a = 0; a < n->n_attr; a++) {
            const gr_ir_attr *at = &n->attrs[a];
            if (at->sym) mark_dim_syms(g, (gr_dim){-1, at->expr}, used);
            for (int k = 0; at->exprs && k < at->n; k++)
                if (at->exprs[k] != GR_SYM_NONE) mark_dim_syms(g, (gr_dim){-1, at->exprs[k]}, used);
            /* out of memory here only loses the subgraph's marks: the caller then sees a
             * symbol as unused, and specialization names it if something needs it */
            if (at->kind == GR_IR_ATTR_GRAPH && at->graph && syms_used_sub(g, at->graph, used) != GR_OK) gr_error_clear();
        }
    }
}

/* values of g named like a value of sub (its captures), marked needed */
static void mark_captures(const gr_graph *g, const gr_graph *sub, bool *need) {
    for (int v = 0; v < sub->values.len; v++) {
        int o = gr_ir_find_value(g, sub->values.data[v].name);
        if (o >= 0) need[o] = true;
    }
    for (int i = 0; i < sub->nodes.len; i++)
        for (int a = 0; a < sub->nodes.data[i].n_attr; a++)
            if (sub->nodes.data[i].attrs[a].kind == GR_IR_ATTR_GRAPH && sub->nodes.data[i].attrs[a].graph)
                mark_captures(g, sub->nodes.data[i].attrs[a].graph, need);
}

gr_status gr_ir_prune(gr_graph *g) {
    int nv = g->values.len, nn = g->nodes.len, ns = g->syms.len;
    bool *need = gr_calloc((size_t)nv + 1, sizeof(bool)), *keep = gr_calloc((size_t)nn + 1, sizeof(bool));
    bool *used = gr_calloc((size_t)ns + 1, sizeof(bool));
    int *map = gr_malloc(sizeof(int) * ((size_t)nv + 1));
    gr_status st = need && keep && used && map ? GR_OK : gr_nomem();
    for (int i = 0; st == GR_OK && i < g->inputs.len; i++) need[g->inputs.data[i]] = true;
    for (int i = 0; st == GR_OK && i < g->outputs.len; i++) need[g->outputs.data[i]] = true;
    /* to a fixed point: producers of needed values, their inputs and captures, and the
     * count values of the data-dependent symbols the kept values' dims use */
    for (bool changed = st == GR_OK; changed;) {
        changed = false;
        for (int i = nn - 1; i >= 0; i--) {
            const gr_ir_node *n = &g->nodes.data[i];
            bool want = keep[i];
            for (int o = 0; !want && o < n->n_out; o++) want = n->out[o] >= 0 && need[n->out[o]];
            if (!want || keep[i]) continue;
            keep[i] = changed = true;
            for (int o = 0; o < n->n_out; o++)
                if (n->out[o] >= 0) need[n->out[o]] = true;
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0) need[n->in[k]] = true;
            for (int a = 0; a < n->n_attr; a++)
                if (n->attrs[a].kind == GR_IR_ATTR_GRAPH && n->attrs[a].graph) mark_captures(g, n->attrs[a].graph, need);
        }
        memset(used, 0, (size_t)ns + 1);
        for (int v = 0; v < nv; v++)
            if (need[v])
                for (int d = 0; d < g->values.data[v].ndim; d++) mark_dim_syms(g, g->values.data[v].dims[d], used);
        for (int k = 0; k < ns; k++) {
            int32_t dv = g->syms.data[k].data_value;
            if (used[k] && dv >= 0 && dv < nv && !need[dv]) need[dv] = changed = true;
        }
    }
    if (st == GR_OK) {
        int kept = 0;
        for (int v = 0; v < nv; v++) {
            gr_ir_value *x = &g->values.data[v];
            if (!need[v]) {
                map[v] = -1;
                gr_ir_value_name_free(x);
                if (!x->borrowed) gr_free(x->data, x->nbytes);
                continue;
            }
            map[v] = kept;
            g->values.data[kept++] = *x;
        }
        g->values.len = kept;
        int kn = 0;
        for (int i = 0; i < nn; i++) {
            if (!keep[i]) {
                node_free(&g->nodes.data[i]);
                continue;
            }
            g->nodes.data[kn] = g->nodes.data[i];
            gr_ir_node *n = &g->nodes.data[kn];
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0) n->in[k] = map[n->in[k]];
            for (int o = 0; o < n->n_out; o++)
                if (n->out[o] >= 0) {
                    n->out[o] = map[n->out[o]];
                    if (n->out[o] >= 0) g->values.data[n->out[o]].producer = kn;
                }
            kn++;
        }
        g->nodes.len = kn;
        for (int i = 0; i < g->inputs.len; i++) g->inputs.data[i] = map[g->inputs.data[i]];
        for (int i = 0; i < g->outputs.len; i++) g->outputs.data[i] = map[g->outputs.data[i]];
        for (int k = 0; k < ns; k++) {
            int32_t dv = g->syms.data[k].data_value;
            if (dv >= 0) g->syms.data[k].data_value = dv < nv ? map[dv] : -1;
        }
        g->value_index.len = -1; /* both name indices are stale now */
        g->node_index.len = -1;
    }
    gr_free(need, (size_t)nv + 1);
    gr_free(keep, (size_t)nn + 1);
    gr_free(used, (size_t)ns + 1);
    gr_free(map, sizeof(int) * ((size_t)nv + 1));
    return st;
}
