/* ir/ir — graph construction, attributes, cloning, type strings. */
#include "ir/ir.h"
#include <stdio.h>
#include <string.h>

/* ==== graph lifetime ============================================================== */
gr_status gr_ir_graph_create(gr_graph **out) {
    *out = NULL;
    gr_graph *g = gr_calloc(1, sizeof *g);
    if (!g) return GR_ERR_NOMEM;
    *out = g;
    return GR_OK;
}

void gr_ir_attr_free(gr_ir_attr *a) {
    gr_strfree(a->name);
    gr_strfree(a->s);
    gr_free(a->ints, (size_t)a->n * sizeof(int64_t));
    gr_free(a->floats, (size_t)a->n * sizeof(double));
    if (a->graph) gr_ir_graph_destroy(a->graph);
    memset(a, 0, sizeof *a);
}

static void node_free(gr_ir_node *n) {
    gr_strfree(n->name);
    gr_free(n->in, (size_t)n->n_in * sizeof(int));
    gr_free(n->out, (size_t)n->n_out * sizeof(int));
    for (int i = 0; i < n->n_attr; i++) gr_ir_attr_free(&n->attrs[i]);
    gr_free(n->attrs, (size_t)n->n_attr * sizeof(gr_ir_attr));
}

void gr_ir_graph_destroy(gr_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->values.len; i++) {
        gr_strfree(g->values.data[i].name);
        gr_free(g->values.data[i].data, g->values.data[i].nbytes);
    }
    for (int i = 0; i < g->nodes.len; i++) node_free(&g->nodes.data[i]);
    for (int i = 0; i < g->syms.len; i++) gr_strfree(g->syms.data[i]);
    gr_vec_free(&g->values);
    gr_vec_free(&g->nodes);
    gr_vec_free(&g->inputs);
    gr_vec_free(&g->outputs);
    gr_vec_free(&g->syms);
    gr_strfree(g->origin);
    gr_free(g, sizeof *g);
}

/* ==== attributes ==================================================================== */
gr_status gr_ir_attr_copy(gr_ir_attr *dst, const gr_ir_attr *src) {
    memset(dst, 0, sizeof *dst);
    dst->kind = src->kind;
    dst->i = src->i;
    dst->f = src->f;
    dst->n = src->n;
    if (!(dst->name = gr_strdup(src->name ? src->name : ""))) goto nomem;
    if (src->s && !(dst->s = gr_strdup(src->s))) goto nomem;
    if (src->kind == GR_IR_ATTR_INTS) {
        if (!(dst->ints = gr_malloc((size_t)src->n * sizeof(int64_t) + 1))) goto nomem;
        if (src->n) memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
    }
    if (src->kind == GR_IR_ATTR_FLOATS) {
        if (!(dst->floats = gr_malloc((size_t)src->n * sizeof(double) + 1))) goto nomem;
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

/* ==== values ============================================================================ */
gr_status gr_ir_sym(gr_graph *g, const char *name, int32_t *out) {
    for (int i = 0; i < g->syms.len; i++)
        if (!strcmp(g->syms.data[i], name)) return *out = i, GR_OK;
    char *s = gr_strdup(name);
    if (!s) return GR_ERR_NOMEM;
    if (gr_vec_push(&g->syms, s) != GR_OK) {
        gr_strfree(s);
        return GR_ERR_NOMEM;
    }
    *out = g->syms.len - 1;
    return GR_OK;
}

int gr_ir_find_value(const gr_graph *g, const char *name) {
    for (int i = g->values.len - 1; i >= 0; i--)
        if (g->values.data[i].name && !strcmp(g->values.data[i].name, name)) return i;
    return -1;
}

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
    *out = g->values.len - 1;
    return GR_OK;
}

gr_status gr_ir_add_input(gr_graph *g, const char *name, gr_dtype t, int ndim, const gr_dim *dims, int *out) {
    if ((unsigned)t >= GR_DTYPE_COUNT) return gr_error(GR_ERR_INVALID, "input '%s': bad dtype %d", name ? name : "?", (int)t);
    if (ndim < 0 || ndim > GR_MAX_DIMS)
        return gr_error(GR_ERR_INVALID, "input '%s': rank %d outside 0..%d", name ? name : "?", ndim, GR_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (dims[i].sym == GR_SYM_NONE && dims[i].size < 0)
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
    if (nm)
        for (int i = 0; i < g->nodes.len; i++)
            if (!strcmp(g->nodes.data[i].name, nm)) return gr_error(GR_ERR_INVALID, "node name '%s' is used twice", nm);
    for (int i = 0; i < n_in; i++)
        if (in[i] < -1 || in[i] >= g->values.len)
            return gr_error(GR_ERR_INVALID, "node '%s' (%s): input %d refers to no value", nm ? nm : "?", info->name, i);

    gr_ir_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.name = nm ? gr_strdup(nm) : gr_sprintf("%s_%d", info->name, g->nodes.len);
    n.in = gr_malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
    n.out = gr_malloc(sizeof(int) * (size_t)(n_out ? n_out : 1));
    n.attrs = gr_calloc((size_t)(n_attr ? n_attr : 1), sizeof(gr_ir_attr));
    if (!n.name || !n.in || !n.out || !n.attrs) goto nomem;
    n.n_in = n_in;
    if (n_in) memcpy(n.in, in, sizeof(int) * (size_t)n_in);
    for (int i = 0; i < n_attr; i++) {
        if (gr_ir_attr_copy(&n.attrs[i], &attrs[i]) != GR_OK) goto nomem;
        n.n_attr++;
    }
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
        n.n_out++;
    }
    g->nodes.data[g->nodes.len++] = n;
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
            gr_strfree(v->name);
            gr_free(v->data, v->nbytes);
            g->values.len--;
        }
    }
    node_free(n);
    g->nodes.len--;
}

void gr_ir_splice_nodes(gr_graph *g, int at, int first_new) {
    int n = g->nodes.len, moved = n - first_new;
    if (at < 0 || at >= first_new || first_new > n) return;
    gr_ir_node removed = g->nodes.data[at];
    gr_ir_node *tail = g->nodes.data + first_new;
    /* rotate: [at+1, first_new) shifts right by moved-1 after the new nodes land at `at` */
    gr_ir_node tmp;
    for (int m = 0; m < moved; m++) {
        /* bubble tail[m] (at index first_new + m) down to at + m */
        for (int i = first_new + m; i > at + m; i--) {
            tmp = g->nodes.data[i];
            g->nodes.data[i] = g->nodes.data[i - 1];
            g->nodes.data[i - 1] = tmp;
        }
    }
    (void)tail;
    /* the old node now sits right after the moved ones */
    int old_pos = at + moved;
    node_free(&g->nodes.data[old_pos]);
    (void)removed;
    memmove(&g->nodes.data[old_pos], &g->nodes.data[old_pos + 1], sizeof(gr_ir_node) * (size_t)(n - old_pos - 1));
    g->nodes.len--;
    for (int i = 0; i < g->nodes.len; i++)
        for (int o = 0; o < g->nodes.data[i].n_out; o++) {
            gr_ir_value *v = &g->values.data[g->nodes.data[i].out[o]];
            v->producer = i;
            v->out_slot = o;
        }
}

gr_status gr_ir_add_output(gr_graph *g, int value) {
    if (value < 0 || value >= g->values.len) return gr_error(GR_ERR_INVALID, "output refers to no value (%d)", value);
    return gr_vec_push(&g->outputs, value);
}

/* ==== clone ================================================================================== */
gr_status gr_ir_graph_clone(const gr_graph *g, gr_graph **out) {
    gr_graph *c;
    GR_TRY(gr_ir_graph_create(&c));
    c->next_auto_name = g->next_auto_name;
    if (g->origin && !(c->origin = gr_strdup(g->origin))) goto nomem;
    for (int i = 0; i < g->syms.len; i++) {
        int32_t s;
        if (gr_ir_sym(c, g->syms.data[i], &s) != GR_OK) goto nomem;
    }
    if (gr_vec_reserve(&c->values, g->values.len) != GR_OK) goto nomem;
    for (int i = 0; i < g->values.len; i++) {
        gr_ir_value v = g->values.data[i];
        v.name = NULL;
        v.data = NULL;
        c->values.data[c->values.len++] = v;
        gr_ir_value *d = &c->values.data[i];
        d->nbytes = 0;
        if (!(d->name = gr_strdup(g->values.data[i].name))) goto nomem;
        if (g->values.data[i].data) {
            if (!(d->data = gr_malloc(g->values.data[i].nbytes))) goto nomem;
            memcpy(d->data, g->values.data[i].data, g->values.data[i].nbytes);
            d->nbytes = g->values.data[i].nbytes;
        }
    }
    if (gr_vec_reserve(&c->nodes, g->nodes.len) != GR_OK) goto nomem;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *s = &g->nodes.data[i];
        gr_ir_node *d = &c->nodes.data[c->nodes.len++];
        memset(d, 0, sizeof *d);
        d->op = s->op;
        d->line = s->line;
        d->col = s->col;
        d->name = gr_strdup(s->name);
        d->in = gr_malloc(sizeof(int) * (size_t)(s->n_in ? s->n_in : 1));
        d->out = gr_malloc(sizeof(int) * (size_t)(s->n_out ? s->n_out : 1));
        d->attrs = gr_calloc((size_t)(s->n_attr ? s->n_attr : 1), sizeof(gr_ir_attr));
        if (!d->name || !d->in || !d->out || !d->attrs) goto nomem;
        d->n_in = s->n_in;
        d->n_out = s->n_out;
        memcpy(d->in, s->in, sizeof(int) * (size_t)s->n_in);
        memcpy(d->out, s->out, sizeof(int) * (size_t)s->n_out);
        for (int a = 0; a < s->n_attr; a++) {
            if (gr_ir_attr_copy(&d->attrs[a], &s->attrs[a]) != GR_OK) goto nomem;
            d->n_attr++;
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
        if (v->dims[i].sym != GR_SYM_NONE || v->dims[i].size < 0) return false;
    return true;
}

int64_t gr_ir_value_numel(const gr_ir_value *v) {
    if (!gr_ir_value_concrete(v) || v->ndim > GR_MAX_DIMS) return -1;
    int64_t dims[GR_MAX_DIMS], n;
    for (int i = 0; i < v->ndim; i++) dims[i] = v->dims[i].size;
    return gr_shape_numel_checked(v->ndim, dims, &n) ? n : -1;
}

bool gr_ir_dims_fit(int ndim, const gr_dim *dims) {
    int64_t concrete[GR_MAX_DIMS], n;
    int nc = 0;
    if (ndim < 0 || ndim > GR_MAX_DIMS) return false;
    for (int i = 0; i < ndim; i++)
        if (dims[i].sym == GR_SYM_NONE) concrete[nc++] = dims[i].size;
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
        if (v->dims[i].sym != GR_SYM_NONE && g && v->dims[i].sym < g->syms.len)
            pos += (size_t)snprintf(buf + pos, pos < n ? n - pos : 0, "%s%s", sep, g->syms.data[v->dims[i].sym]);
        else
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
