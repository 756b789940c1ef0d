/* runtime/api — the public graph-building API of graft.h over the IR. */
#include "runtime/runtime-impl.h"
#include <string.h>

gr_status gr_graph_create(gr_graph_t *out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_graph_create: out is NULL");
    GR_TRY(gr_ir_graph_create(out));
    (*out)->origin = gr_strdup("<api>");
    if (!(*out)->origin) {
        gr_ir_graph_destroy(*out);
        *out = NULL;
        return GR_ERR_NOMEM;
    }
    return GR_OK;
}

void gr_graph_destroy(gr_graph_t g) { gr_ir_graph_destroy(g); }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

gr_status gr_graph_load(const char *path, gr_graph_t *out) {
    if (!path || !out) return gr_error(GR_ERR_INVALID, "gr_graph_load: NULL argument");
    *out = NULL;
    gr_status st = ends_with(path, ".onnx") ? gr_onnx_load(path, out) : gr_gir_load(path, out);
    if (st != GR_OK) return st;
    st = gr_ir_verify(*out);
    if (st == GR_OK) st = gr_ir_infer_shapes(*out);
    if (st != GR_OK) {
        gr_ir_graph_destroy(*out);
        *out = NULL;
    }
    return st;
}

gr_status gr_graph_parse(const char *text, const char *origin, const char *base_dir, gr_graph_t *out) {
    if (!text || !out) return gr_error(GR_ERR_INVALID, "gr_graph_parse: NULL argument");
    GR_TRY(gr_gir_parse(text, origin ? origin : "<string>", base_dir, out));
    gr_status st = gr_ir_verify(*out);
    if (st == GR_OK) st = gr_ir_infer_shapes(*out);
    if (st != GR_OK) {
        gr_ir_graph_destroy(*out);
        *out = NULL;
    }
    return st;
}

gr_status gr_graph_print(gr_graph_t g, char **out_text) {
    if (!g || !out_text) return gr_error(GR_ERR_INVALID, "gr_graph_print: NULL argument");
    return gr_gir_print(g, SIZE_MAX, NULL, out_text);
}

gr_status gr_graph_add_input(gr_graph_t g, const char *name, gr_dtype dtype, int ndim, const int64_t *dims,
                             const char *const *sym_names, gr_value_t *out) {
    if (!g || !name || !out || (ndim > 0 && !dims)) return gr_error(GR_ERR_INVALID, "gr_graph_add_input: NULL argument");
    if (ndim < 0 || ndim > GR_MAX_DIMS) return gr_error(GR_ERR_INVALID, "input '%s': rank %d outside 0..%d", name, ndim, GR_MAX_DIMS);
    gr_dim d[GR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        if (dims[i] >= 0) {
            d[i] = (gr_dim){dims[i], GR_SYM_NONE};
            continue;
        }
        if (!sym_names || !sym_names[i] || !*sym_names[i])
            return gr_error(GR_ERR_INVALID, "input '%s': dim %d is symbolic (negative) but has no name", name, i);
        /* a symbol, or an expression over symbols ("seq + 1") */
        GR_TRY(gr_dx_from_name(g, sym_names[i], &d[i]));
        if (!gr_dx_is_sym(d[i]) && d[i].size < 0)
            return gr_error(GR_ERR_INVALID, "input '%s': dim %d ('%s') is negative", name, i, sym_names[i]);
    }
    int v;
    GR_TRY(gr_ir_add_input(g, name, dtype, ndim, d, &v));
    *out = v;
    return GR_OK;
}

gr_status gr_graph_add_constant(gr_graph_t g, const char *name, gr_dtype dtype, int ndim, const int64_t *dims,
                                const void *data, gr_value_t *out) {
    if (!g || !out || (ndim > 0 && !dims)) return gr_error(GR_ERR_INVALID, "gr_graph_add_constant: NULL argument");
    if (ndim < 0 || ndim > GR_MAX_DIMS) return gr_error(GR_ERR_INVALID, "constant '%s': rank %d outside 0..%d", name ? name : "?", ndim, GR_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (dims[i] < 0) return gr_error(GR_ERR_SHAPE, "constant '%s': dim %d is negative", name ? name : "?", i);
    int64_t numel;
    if (!gr_shape_numel_checked(ndim, dims, &numel))
        return gr_error(GR_ERR_SHAPE, "constant '%s': the shape holds more than %lld elements", name ? name : "?",
                        (long long)GR_MAX_NUMEL);
    if (numel > 0 && !data) return gr_error(GR_ERR_INVALID, "constant '%s': data is NULL", name ? name : "?");
    int v;
    GR_TRY(gr_ir_add_const(g, name, dtype, ndim, dims, data, &v));
    *out = v;
    return GR_OK;
}

static void free_attrs(gr_ir_attr *a, int n) {
    for (int i = 0; i < n; i++) {
        /* strings and arrays below are borrowed from the caller: only clear */
        memset(&a[i], 0, sizeof a[i]);
    }
}

gr_status gr_graph_add_node(gr_graph_t g, const char *op, const char *name, int n_in, const gr_value_t *in, int n_attr,
                            const gr_attr *attrs, int n_out, gr_value_t *out) {
    if (!g || !op || (n_in > 0 && !in) || (n_attr > 0 && !attrs) || (n_out > 0 && !out) || n_in < 0 || n_attr < 0 || n_out < 0)
        return gr_error(GR_ERR_INVALID, "gr_graph_add_node: bad argument");
    gr_op o = gr_op_from_name(op);
    if (o == GR_OP_COUNT) return gr_error(GR_ERR_UNSUPPORTED, "unknown op '%s'%s%s", op, name ? " for node " : "", name ? name : "");
    const gr_op_info *info = gr_op_get(o);
    if (n_in < info->min_in || (info->max_in >= 0 && n_in > info->max_in))
        return gr_error(GR_ERR_INVALID, "node '%s' (%s): %d inputs given, op takes %d..%d", name ? name : "?", op, n_in, info->min_in,
                        info->max_in < 0 ? 99 : info->max_in);
    if (n_out < info->min_out || (info->max_out >= 0 && n_out > info->max_out))
        return gr_error(GR_ERR_INVALID, "node '%s' (%s): %d outputs asked, op gives %d..%d", name ? name : "?", op, n_out,
                        info->min_out, info->max_out < 0 ? 99 : info->max_out);
    gr_ir_attr *ia = gr_calloc((size_t)n_attr, sizeof(gr_ir_attr));
    if (!ia) return GR_ERR_NOMEM;
    for (int i = 0; i < n_attr; i++) {
        const gr_attr *a = &attrs[i];
        ia[i].name = (char *)(a->name ? a->name : "");
        ia[i].n = a->n;
        switch (a->kind) {
        case GR_ATTR_INT: ia[i].kind = GR_IR_ATTR_INT; ia[i].i = a->i; break;
        case GR_ATTR_FLOAT: ia[i].kind = GR_IR_ATTR_FLOAT; ia[i].f = a->f; break;
        case GR_ATTR_STRING: ia[i].kind = GR_IR_ATTR_STRING; ia[i].s = (char *)(a->s ? a->s : ""); break;
        case GR_ATTR_INTS: ia[i].kind = GR_IR_ATTR_INTS; ia[i].ints = (int64_t *)a->ints; break;
        case GR_ATTR_FLOATS: ia[i].kind = GR_IR_ATTR_FLOATS; ia[i].floats = (double *)a->floats; break;
        default:
            free_attrs(ia, n_attr);
            gr_free(ia, (size_t)n_attr * sizeof(gr_ir_attr));
            return gr_error(GR_ERR_INVALID, "node '%s' (%s): attribute '%s' has an unknown kind", name ? name : "?", op,
                            a->name ? a->name : "?");
        }
        if ((a->kind == GR_ATTR_INTS && a->n > 0 && !a->ints) || (a->kind == GR_ATTR_FLOATS && a->n > 0 && !a->floats)) {
            free_attrs(ia, n_attr);
            gr_free(ia, (size_t)n_attr * sizeof(gr_ir_attr));
            return gr_error(GR_ERR_INVALID, "node '%s' (%s): attribute '%s' has n=%d but no array", name ? name : "?", op, a->name, a->n);
        }
    }
    int node;
    gr_status st = gr_ir_add_node(g, o, name, n_in, in, n_out, NULL, n_attr, ia, &node);
    free_attrs(ia, n_attr);
    gr_free(ia, (size_t)n_attr * sizeof(gr_ir_attr));
    if (st != GR_OK) return st;
    st = gr_ir_infer_node(g, node);
    if (st != GR_OK) {
        gr_ir_remove_last_node(g);
        return st;
    }
    for (int i = 0; i < n_out; i++) out[i] = g->nodes.data[node].out[i];
    return GR_OK;
}

gr_status gr_graph_set_output(gr_graph_t g, gr_value_t v, const char *name) {
    if (!g) return gr_error(GR_ERR_INVALID, "gr_graph_set_output: graph is NULL");
    if (v < 0 || v >= g->values.len) return gr_error(GR_ERR_INVALID, "gr_graph_set_output: value %d does not exist", v);
    if (name && *name && strcmp(name, g->values.data[v].name)) {
        if (gr_ir_find_value(g, name) >= 0) return gr_error(GR_ERR_INVALID, "output name '%s' is already used by another value", name);
        GR_TRY(gr_ir_rename_value(g, v, name));
    }
    return gr_ir_add_output(g, v);
}

gr_status gr_graph_verify(gr_graph_t g) {
    if (!g) return gr_error(GR_ERR_INVALID, "gr_graph_verify: graph is NULL");
    return gr_ir_verify(g);
}

int gr_graph_num_inputs(gr_graph_t g) { return g ? g->inputs.len : 0; }
int gr_graph_num_outputs(gr_graph_t g) { return g ? g->outputs.len : 0; }

static void fill_info(gr_graph *g, const gr_ir_value *v, gr_value_info *out) {
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->ndim = v->typed ? v->ndim : -1;
    for (int d = 0; v->typed && d < v->ndim; d++) {
        bool sym = gr_dx_is_sym(v->dims[d]);
        out->dims[d] = sym ? -1 : v->dims[d].size;
        out->sym_names[d] = sym ? gr_dx_text(g, v->dims[d]) : NULL;
    }
}

gr_status gr_graph_input_info(gr_graph_t g, int i, gr_value_info *out) {
    if (!g || !out) return gr_error(GR_ERR_INVALID, "gr_graph_input_info: NULL argument");
    if (i < 0 || i >= g->inputs.len) return gr_error(GR_ERR_INVALID, "input index %d out of range (graph has %d)", i, g->inputs.len);
    fill_info(g, &g->values.data[g->inputs.data[i]], out);
    return GR_OK;
}

gr_status gr_graph_output_info(gr_graph_t g, int i, gr_value_info *out) {
    if (!g || !out) return gr_error(GR_ERR_INVALID, "gr_graph_output_info: NULL argument");
    if (i < 0 || i >= g->outputs.len) return gr_error(GR_ERR_INVALID, "output index %d out of range (graph has %d)", i, g->outputs.len);
    fill_info(g, &g->values.data[g->outputs.data[i]], out);
    return GR_OK;
}

gr_status gr_graph_dump_passes(gr_graph_t g, char **out_text) { return gr_graph_dump_passes_dims(g, 0, NULL, NULL, out_text); }

gr_status gr_graph_dump_passes_dims(gr_graph_t g, int n_dims, const char *const *dim_names, const int64_t *dim_values,
                                    char **out_text) {
    return gr_graph_dump_passes_opts(g, n_dims, dim_names, dim_values, 0, 0, out_text);
}

gr_status gr_graph_dump_passes_opts(gr_graph_t g, int n_dims, const char *const *dim_names, const int64_t *dim_values,
                                    int no_fuse_attention, int fuse_attention_f32, char **out_text) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.no_fuse_attention = no_fuse_attention;
    o.fuse_attention_f32 = fuse_attention_f32;
    return gr_graph_dump_passes_with(g, n_dims, dim_names, dim_values, &o, out_text);
}

gr_status gr_precision_parse(const char *name, int *out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_precision_parse: out is NULL");
    if (name && !strcmp(name, "bf16")) return *out = GR_PRECISION_BF16, GR_OK;
    if (name && !strcmp(name, "f16")) return *out = GR_PRECISION_F16, GR_OK;
    return gr_error(GR_ERR_INVALID, "unknown precision '%s' (expected bf16 or f16)", name ? name : "(null)");
}

gr_status gr_graph_dump_passes_with(gr_graph_t g, int n_dims, const char *const *dim_names, const int64_t *dim_values,
                                    const gr_session_options *opt, char **out_text) {
    if (out_text) *out_text = NULL;
    gr_session_options defaults;
    gr_session_options_init(&defaults);
    if (!opt) opt = &defaults;
    if (opt->precision < 0 || opt->precision >= GR_PRECISION_COUNT)
        return gr_error(GR_ERR_INVALID, "gr_graph_dump_passes_with: precision %d is not a gr_precision", opt->precision);
    if (!g || !out_text || n_dims < 0 || (n_dims && (!dim_names || !dim_values)))
        return gr_error(GR_ERR_INVALID, "gr_graph_dump_passes_dims: NULL argument or negative count");
    int n_syms = g->syms.len;
    size_t values_size = sizeof(int64_t) * (size_t)(n_syms ? n_syms : 1);
    int64_t *sym_values = gr_malloc(values_size);
    if (!sym_values) return GR_ERR_NOMEM;
    for (int k = 0; k < n_syms; k++) sym_values[k] = -1; /* unbound */
    gr_status st = GR_OK;
    for (int i = 0; i < n_dims && st == GR_OK; i++) {
        const char *name = dim_names[i] ? dim_names[i] : "";
        int sym = gr_ir_find_sym(g, name);
        if (sym < 0) {
            gr_strbuf known;
            gr_sb_init(&known);
            for (int k = 0; k < n_syms; k++) gr_sb_printf(&known, "%s'%s'", k ? ", " : "", g->syms.data[k].name);
            st = known.failed ? gr_nomem()
                              : gr_error(GR_ERR_NOT_FOUND, "the graph has no symbolic dim named '%s' (symbolic dims: %s)", name,
                                         n_syms ? known.data : "none");
            gr_sb_free(&known);
        } else if (dim_values[i] < 0) {
            st = gr_error(GR_ERR_INVALID, "symbolic dim '%s': value %lld is negative", name, (long long)dim_values[i]);
        } else if (sym_values[sym] >= 0 && sym_values[sym] != dim_values[i]) {
            st = gr_error(GR_ERR_INVALID, "symbolic dim '%s' given twice with different values (%lld and %lld)", name,
                          (long long)sym_values[sym], (long long)dim_values[i]);
        } else {
            sym_values[sym] = dim_values[i];
        }
    }
    gr_strbuf sb;
    gr_sb_init(&sb);
    /* with nothing bound, the dump itself lists every unresolved symbolic dim */
    gr_pipeline_opts po = {.no_partition = opt->no_partition != 0, .no_fuse_attention = opt->no_fuse_attention != 0,
                           .fuse_attention_f32 = opt->fuse_attention_f32 != 0,
                           .no_fuse_epilogue = opt->no_fuse_epilogue != 0,
                           .convert_precision = opt->precision != GR_PRECISION_MODEL,
                           .precision = gr_rt_precision_dtype(opt->precision)};
    if (st == GR_OK) st = gr_pass_dump_opts(g, n_dims ? sym_values : NULL, &po, &sb);
    gr_free(sym_values, values_size);
    if (st != GR_OK) {
        gr_sb_free(&sb);
        return st;
    }
    *out_text = gr_sb_take(&sb);
    return *out_text ? GR_OK : GR_ERR_NOMEM;
}

/* ==== symbolic dims ========================================================================= */
int gr_graph_num_dims(gr_graph_t g) { return g ? g->syms.len : 0; }

gr_status gr_graph_dim_info(gr_graph_t g, int k, gr_dim_info *out) {
    if (!g || !out) return gr_error(GR_ERR_INVALID, "gr_graph_dim_info: NULL argument");
    if (k < 0 || k >= g->syms.len) return gr_error(GR_ERR_INVALID, "symbolic dim index %d out of range (graph has %d)", k, g->syms.len);
    const gr_ir_symbol *s = &g->syms.data[k];
    out->name = s->name;
    out->lo = s->lo;
    out->hi = s->hi >= GR_DX_INF ? INT64_MAX : s->hi;
    out->declared = s->declared;
    return GR_OK;
}

static gr_status unknown_dim(gr_graph_t g, const char *name) {
    gr_strbuf known;
    gr_sb_init(&known);
    for (int k = 0; k < g->syms.len; k++) gr_sb_printf(&known, "%s'%s'", k ? ", " : "", g->syms.data[k].name);
    gr_status st = known.failed ? gr_nomem()
                                : gr_error(GR_ERR_NOT_FOUND, "the graph has no symbolic dim named '%s' (symbolic dims: %s)", name,
                                           g->syms.len ? known.data : "none");
    gr_sb_free(&known);
    return st;
}

gr_status gr_graph_set_dim_range(gr_graph_t g, const char *name, int64_t lo, int64_t hi) {
    if (!g || !name) return gr_error(GR_ERR_INVALID, "gr_graph_set_dim_range: NULL argument");
    int32_t k = gr_ir_find_sym(g, name);
    if (k < 0) return unknown_dim(g, name);
    if (hi == INT64_MAX) hi = GR_DX_INF;
    return gr_dx_set_range(g, k, lo, hi);
}

gr_status gr_graph_input_dims(gr_graph_t g, int i, int n_dims, const char *const *dim_names, const int64_t *dim_values,
                              int64_t *dims) {
    if (!g || !dims || n_dims < 0 || (n_dims && (!dim_names || !dim_values)))
        return gr_error(GR_ERR_INVALID, "gr_graph_input_dims: NULL argument or negative count");
    if (i < 0 || i >= g->inputs.len) return gr_error(GR_ERR_INVALID, "input index %d out of range (graph has %d)", i, g->inputs.len);
    size_t size = sizeof(int64_t) * (size_t)(g->syms.len ? g->syms.len : 1);
    int64_t *vals = gr_malloc(size);
    if (!vals) return GR_ERR_NOMEM;
    for (int k = 0; k < g->syms.len; k++) vals[k] = -1;
    gr_status st = GR_OK;
    for (int k = 0; k < n_dims && st == GR_OK; k++) {
        int32_t s = dim_names[k] ? gr_ir_find_sym(g, dim_names[k]) : -1;
        if (s < 0) st = unknown_dim(g, dim_names[k] ? dim_names[k] : "");
        else vals[s] = dim_values[k];
    }
    const gr_ir_value *v = &g->values.data[g->inputs.data[i]];
    for (int d = 0; d < v->ndim && st == GR_OK; d++) {
        if (!gr_dx_is_sym(v->dims[d])) {
            dims[d] = v->dims[d].size;
            continue;
        }
        bool used[256] = {false};
        if (g->syms.len <= 256) gr_dx_symbols_of(g, v->dims[d], used);
        for (int k = 0; k < g->syms.len && k < 256 && st == GR_OK; k++)
            if (used[k] && vals[k] < 0)
                st = gr_error(GR_ERR_NOT_FOUND, "input '%s' dim %d (%s) needs symbolic dim '%s', which has no value", v->name, d,
                              gr_dx_text(g, v->dims[d]), g->syms.data[k].name);
        if (st == GR_OK) st = gr_dx_eval(g, v->dims[d], vals, &dims[d]);
        if (st == GR_OK && dims[d] < 0)
            st = gr_error(GR_ERR_SHAPE, "input '%s' dim %d (%s) is %lld for these values: negative", v->name, d,
                          gr_dx_text(g, v->dims[d]), (long long)dims[d]);
    }
    gr_free(vals, size);
    return st;
}

/* ==== kernel counters ========================================================================= */

gr_status gr_session_kernel_stats(gr_session_t s, gr_kernel_stats *out) {
    if (!s || !out) return gr_error(GR_ERR_INVALID, "gr_session_kernel_stats: NULL argument");
    gr_dev_kstats k;
    gr_dev_kernel_stats(s->dev, &k);
    memset(out, 0, sizeof *out);
    out->prepared = k.prepared;
    out->compiled = k.compiles;
    out->disk_cache_hits = k.disk_cache_hits;
    out->modules_loaded = k.module_loads;
    out->generic_new = k.generic_new;
    out->generic_reused = k.generic_reused;
    out->generic_fallbacks = k.generic_fallbacks;
    return GR_OK;
}
