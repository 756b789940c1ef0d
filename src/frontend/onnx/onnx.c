/* frontend/onnx — loads an ONNX model (protobuf) into a graft IR graph.
 *
 * The model is parsed with protobuf-c (graft's own onnx_subset.proto) through
 * an allocator hooked to gr_malloc, so allocation-failure tests reach the
 * parser too. Then: opset check, initializers (inline or external data),
 * graph inputs, nodes in order (each folded at import time when its inputs
 * are known, else converted by onnx-ops.c), graph outputs.
 */
#include "frontend/onnx/onnx-impl.h"
#include "frontend/frontend.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *S(const char *s) { return s ? s : ""; }

/* ==== protobuf-c allocator ======================================================= */
typedef struct {
    bool failed;
} pb_alloc_state;

/* protobuf-c frees without a size: each block carries its size in a header */
#define PB_HEADER sizeof(max_align_t)
static void *pb_alloc(void *user, size_t n) {
    char *block = n <= SIZE_MAX - PB_HEADER ? gr_malloc(n + PB_HEADER) : NULL;
    if (!block) {
        ((pb_alloc_state *)user)->failed = true;
        return NULL;
    }
    memcpy(block, &n, sizeof n);
    return block + PB_HEADER;
}

static void pb_free(void *user, void *p) {
    (void)user;
    if (!p) return;
    char *block = (char *)p - PB_HEADER;
    size_t n;
    memcpy(&n, block, sizeof n);
    gr_free(block, n + PB_HEADER);
}

/* ==== messages ======================================================================= */
gr_status ox_node_error(ox_ctx *c, gr_status st, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gr_error(st, "node '%s' (%s): %s", c->node_name ? c->node_name : "?", c->node ? S(c->node->op_type) : "?", msg);
}

/* ==== tensors ========================================================================== */
void ox_tensor_free(ox_tensor *t) {
    if (!t) return;
    if (t->owned) gr_free(t->data, t->nbytes);
    if (t->sym) gr_free(t->sym, sizeof(int32_t) * (size_t)(ox_tensor_numel(t) ? ox_tensor_numel(t) : 1));
    gr_free(t, sizeof *t);
}

int64_t ox_tensor_numel(const ox_tensor *t) { return gr_shape_numel(t->ndim, t->dims); }

/* Element count of dims, or -1 when negative or past OX_MAX_ELEMS. */
static int64_t checked_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] == 0) n = 0;
        else if (n > OX_MAX_ELEMS / dims[i]) return -1;
        else n *= dims[i];
    }
    return n;
}

gr_status ox_tensor_new(gr_dtype dt, int ndim, const int64_t *dims, ox_tensor **out) {
    *out = NULL;
    if (ndim < 0 || ndim > GR_MAX_DIMS) return gr_error(GR_ERR_UNSUPPORTED, "tensor of rank %d (graft supports up to %d)", ndim, GR_MAX_DIMS);
    int64_t numel = checked_numel(ndim, dims);
    if (numel < 0) return gr_error(GR_ERR_INVALID, "tensor shape is negative or too large");
    ox_tensor *t = gr_calloc(1, sizeof *t);
    if (!t) return GR_ERR_NOMEM;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->nbytes = (size_t)numel * gr_dtype_size(dt);
    t->owned = true;
    t->data = gr_calloc(1, t->nbytes ? t->nbytes : 1);
    if (!t->data) {
        gr_free(t, sizeof *t);
        return GR_ERR_NOMEM;
    }
    *out = t;
    return GR_OK;
}

static const struct {
    int32_t onnx;
    gr_dtype dt;
} dtype_map[] = {
    {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, GR_F32},   {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, GR_F16},
    {ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, GR_BF16}, {ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, GR_F64},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT64, GR_I64},   {ONNX__TENSOR_PROTO__DATA_TYPE__INT32, GR_I32},
    {ONNX__TENSOR_PROTO__DATA_TYPE__INT8, GR_I8},     {ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, GR_U8},
    {ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, GR_BOOL},
};

static const char *onnx_dtype_name(int32_t t) {
    static const char *names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64",
                                  "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64",
                                  "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                  "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1"};
    return t >= 0 && t < GR_ARRAY_LEN(names) ? names[t] : "unknown";
}

gr_status ox_dtype_from_onnx(ox_ctx *c, int32_t onnx_type, const char *what, gr_dtype *out) {
    (void)c;
    for (int i = 0; i < GR_ARRAY_LEN(dtype_map); i++)
        if (dtype_map[i].onnx == onnx_type) return *out = dtype_map[i].dt, GR_OK;
    return gr_error(GR_ERR_UNSUPPORTED, "%s: ONNX element type %s (%d) is not supported", what, onnx_dtype_name(onnx_type),
                    (int)onnx_type);
}

int32_t ox_dtype_to_onnx(gr_dtype t) {
    for (int i = 0; i < GR_ARRAY_LEN(dtype_map); i++)
        if (dtype_map[i].dt == t) return dtype_map[i].onnx;
    return 0;
}

/* location must stay inside the model's directory */
static bool safe_relative_path(const char *p) {
    if (!*p || p[0] == '/' || strchr(p, '\\')) return false;
    const char *s = p;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 2 && s[0] == '.' && s[1] == '.') return false;
        if (!e) break;
        s = e + 1;
    }
    return true;
}

static gr_status parse_u64(const char *text, int64_t *out) {
    if (!text || !*text) return GR_ERR_INVALID;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < 0) return GR_ERR_INVALID;
    *out = v;
    return GR_OK;
}

/* An external_data entry is `key` exactly (bytes: the length is known, a NUL cannot hide a tail). */
static bool entry_key_is(const Onnx__StringStringEntryProto *e, const char *key) {
    size_t n = strlen(key);
    return e->has_key && e->key.len == n && (n == 0 || !memcmp(e->key.data, key, n));
}

/* The entry's value as a C string (free with gr_strfree); an embedded NUL byte is refused, not cut at. */
static gr_status entry_value(const Onnx__StringStringEntryProto *e, const char *what, const char *key, char **out) {
    *out = NULL;
    size_t n = e->has_value ? e->value.len : 0;
    const char *data = n ? (const char *)e->value.data : "";
    const char *nul = n ? memchr(data, 0, n) : NULL;
    if (nul)
        return gr_error(GR_ERR_INVALID, "%s: external data %s has a NUL byte at byte %zu of %zu (\"%.*s\" would be cut there)",
                        what, key, (size_t)(nul - data), n, (int)GR_MIN(n - (size_t)(nul - data) - 1, 200), nul + 1);
    *out = gr_strndup(data, n);
    return *out ? GR_OK : GR_ERR_NOMEM;
}

/* Opens base_dir/location for reading only when its real path (every symbolic link resolved)
 * lies inside the real path of the model's directory: the lexical check on `location` cannot
 * see a link that points out. The file must be a regular one (a FIFO cannot block the load). */
static gr_status open_inside(const char *base_dir, const char *location, const char *what, int *fd, uint64_t *size) {
    const char *dir = base_dir && *base_dir ? base_dir : ".";
    char real_dir[PATH_MAX], real_file[PATH_MAX];
    if (!realpath(dir, real_dir))
        return gr_error(GR_ERR_IO, "%s: cannot resolve the model's directory '%s': %s", what, dir, strerror(errno));
    char *path = gr_sprintf("%s/%s", dir, location);
    if (!path) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    size_t dlen = strlen(real_dir);
    if (!realpath(path, real_file)) {
        st = gr_error(GR_ERR_IO, "%s: cannot open external data file '%s': %s", what, path, strerror(errno));
    } else if (strncmp(real_file, real_dir, dlen) != 0 || (real_dir[dlen - 1] != '/' && real_file[dlen] != '/')) {
        st = gr_error(GR_ERR_INVALID, "%s: external data file '%s' resolves to '%s', outside the model's directory '%s'", what,
                      path, real_file, real_dir);
    } else if ((st = gr_open_regular(real_file, fd, size)) != GR_OK) {
        st = gr_error_prefix(st, "%s: external data file '%s'", what, path);
    }
    gr_strfree(path);
    return st;
}

static gr_status read_external(ox_ctx *c, const Onnx__TensorProto *tp, const char *what, void *dst, size_t nbytes) {
    const Onnx__StringStringEntryProto *loc_e = NULL, *off_e = NULL, *len_e = NULL;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (entry_key_is(e, "location")) loc_e = e;
        else if (entry_key_is(e, "offset")) off_e = e;
        else if (entry_key_is(e, "length")) len_e = e;
    }
    char *location = NULL, *offset_s = NULL, *length_s = NULL;
    gr_status st = GR_OK;
    if (loc_e) st = entry_value(loc_e, what, "location", &location);
    if (st == GR_OK && off_e) st = entry_value(off_e, what, "offset", &offset_s);
    if (st == GR_OK && len_e) st = entry_value(len_e, what, "length", &length_s);
    int64_t offset = 0, length = (int64_t)nbytes;
    int fd = -1;
    uint64_t file_size = 0;
    if (st != GR_OK) goto done;
    if (!location || !*location) {
        st = gr_error(GR_ERR_INVALID, "%s: external data without a location", what);
        goto done;
    }
    if (!safe_relative_path(location)) {
        st = gr_error(GR_ERR_INVALID, "%s: external data location '%s' must be a relative path inside the model's directory",
                      what, location);
        goto done;
    }
    if (offset_s && parse_u64(offset_s, &offset) != GR_OK) {
        st = gr_error(GR_ERR_INVALID, "%s: external data offset '%s' is not a number", what, offset_s);
        goto done;
    }
    if (length_s && parse_u64(length_s, &length) != GR_OK) {
        st = gr_error(GR_ERR_INVALID, "%s: external data length '%s' is not a number", what, length_s);
        goto done;
    }
    if ((uint64_t)length != nbytes) {
        st = gr_error(GR_ERR_INVALID, "%s: external data length %lld does not match its shape and type (%zu bytes)", what,
                      (long long)length, nbytes);
        goto done;
    }
    if ((st = open_inside(c->base_dir, location, what, &fd, &file_size)) != GR_OK) goto done;
    if ((uint64_t)offset > file_size || file_size - (uint64_t)offset < nbytes) {
        st = gr_error(GR_ERR_IO, "%s: external data file '%s' is too short: needs %zu bytes at offset %lld, file has %llu bytes",
                      what, location, nbytes, (long long)offset, (unsigned long long)file_size);
        goto done;
    }
    if ((st = gr_read_at(fd, location, dst, nbytes, (uint64_t)offset)) != GR_OK) st = gr_error_prefix(st, "%s: external data", what);
done:
    if (fd >= 0) close(fd);
    gr_strfree(location);
    gr_strfree(offset_s);
    gr_strfree(length_s);
    return st;
}

gr_status ox_tensor_from_proto(ox_ctx *c, const Onnx__TensorProto *tp, const char *what, ox_tensor **out) {
    *out = NULL;
    int32_t onnx_type = tp->has_data_type ? tp->data_type : 0;
    gr_dtype dt = GR_F32;
    GR_TRY(ox_dtype_from_onnx(c, onnx_type, what, &dt));
    if (tp->n_dims > GR_MAX_DIMS)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: rank %zu (graft supports up to %d)", what, tp->n_dims, GR_MAX_DIMS);
    int64_t dims[GR_MAX_DIMS];
    for (size_t i = 0; i < tp->n_dims; i++) dims[i] = tp->dims[i];
    int ndim = (int)tp->n_dims;
    int64_t numel = checked_numel(ndim, dims);
    if (numel < 0) return gr_error(GR_ERR_INVALID, "%s: dims are negative or too large", what);
    if (tp->segment) return gr_error(GR_ERR_UNSUPPORTED, "%s: segmented tensors are not supported", what);
    size_t esize = gr_dtype_size(dt), nbytes = (size_t)numel * esize;
    bool external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;

    /* check the inline data's size before allocating for it */
    size_t have = 0;
    const char *field = "raw_data";
    if (!external) {
        if (tp->has_raw_data && tp->raw_data.len != nbytes)
            return gr_error(GR_ERR_INVALID, "%s: raw_data holds %zu bytes, its shape and type need %zu", what, tp->raw_data.len,
                            nbytes);
        if (!tp->has_raw_data) {
            switch (dt) {
            case GR_F32: have = tp->n_float_data, field = "float_data"; break;
            case GR_F64: have = tp->n_double_data, field = "double_data"; break;
            case GR_I64: have = tp->n_int64_data, field = "int64_data"; break;
            default: have = tp->n_int32_data, field = "int32_data"; break;
            }
            if (have != (size_t)numel) {
                if (have == 0 && numel > 0) return gr_error(GR_ERR_INVALID, "%s: tensor has no data", what);
                return gr_error(GR_ERR_INVALID, "%s: %s holds %zu elements, its shape needs %lld", what, field, have,
                                (long long)numel);
            }
        }
    }
    ox_tensor *t;
    gr_status st = ox_tensor_new(dt, ndim, dims, &t);
    if (st != GR_OK) return st == GR_ERR_NOMEM ? st : gr_error_prefix(st, "%s", what);
    if (external) {
        st = read_external(c, tp, what, t->data, nbytes);
    } else if (tp->has_raw_data) {
        if (nbytes) memcpy(t->data, tp->raw_data.data, nbytes); /* ONNX raw data is little-endian, as is every target */
    } else {
        for (int64_t i = 0; i < numel; i++) {
            switch (dt) {
            case GR_F32: ((float *)t->data)[i] = tp->float_data[i]; break;
            case GR_F64: ((double *)t->data)[i] = tp->double_data[i]; break;
            case GR_I64: ((int64_t *)t->data)[i] = tp->int64_data[i]; break;
            case GR_F16:
            case GR_BF16: ((uint16_t *)t->data)[i] = (uint16_t)tp->int32_data[i]; break; /* raw bits in int32_data */
            default: gr_store_i64(t->data, dt, i, tp->int32_data[i]); break;
            }
        }
    }
    if (st != GR_OK) {
        ox_tensor_free(t);
        return st;
    }
    *out = t;
    return GR_OK;
}

/* ==== the value table ============================================================================ */
static uint32_t name_hash(const char *s) { return (uint32_t)gr_hash_bytes(s, strlen(s), 0x9e3779b97f4a7c15ull); }

int ox_find(const ox_ctx *c, const char *name) {
    if (!name || !*name || !c->n_slots) return -1;
    uint32_t mask = (uint32_t)c->n_slots - 1;
    for (uint32_t h = name_hash(name) & mask;; h = (h + 1) & mask) {
        int s = c->slots[h];
        if (!s) return -1;
        if (!strcmp(c->vals.data[s - 1].name, name)) return s - 1;
    }
}

static gr_status grow_slots(ox_ctx *c) {
    int n = c->n_slots ? c->n_slots * 2 : 256;
    int *slots = gr_calloc((size_t)n, sizeof(int));
    if (!slots) return GR_ERR_NOMEM;
    uint32_t mask = (uint32_t)n - 1;
    for (int i = 0; i < c->vals.len; i++) {
        uint32_t h = name_hash(c->vals.data[i].name) & mask;
        while (slots[h]) h = (h + 1) & mask;
        slots[h] = i + 1;
    }
    gr_free(c->slots, (size_t)c->n_slots * sizeof(int));
    c->slots = slots;
    c->n_slots = n;
    return GR_OK;
}

gr_status ox_define(ox_ctx *c, const char *name, int *out) {
    if (!name || !*name) return gr_error(GR_ERR_INVALID, "a value has an empty name");
    if (ox_find(c, name) >= 0) return gr_error(GR_ERR_INVALID, "value '%s' is defined twice", name);
    if ((c->vals.len + 1) * 2 > c->n_slots) GR_TRY(grow_slots(c));
    ox_value v = {.name = name, .ir = -1};
    GR_TRY(gr_vec_push(&c->vals, v));
    uint32_t mask = (uint32_t)c->n_slots - 1, h = name_hash(name) & mask;
    while (c->slots[h]) h = (h + 1) & mask;
    c->slots[h] = c->vals.len;
    *out = c->vals.len - 1;
    return GR_OK;
}

gr_status ox_define_const(ox_ctx *c, const char *name, ox_tensor *t) {
    int vi;
    gr_status st = ox_define(c, name, &vi);
    if (st != GR_OK) {
        ox_tensor_free(t);
        return st;
    }
    c->vals.data[vi].konst = t;
    return GR_OK;
}

gr_status ox_define_ir(ox_ctx *c, const char *name, int ir) {
    int vi;
    GR_TRY(ox_define(c, name, &vi));
    c->vals.data[vi].ir = ir;
    return GR_OK;
}

gr_status ox_define_seq(ox_ctx *c, const char *name, const int *irs, int n) {
    int *copy = gr_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!copy) return GR_ERR_NOMEM;
    if (n) memcpy(copy, irs, sizeof(int) * (size_t)n);
    int vi;
    gr_status st = ox_define(c, name, &vi);
    if (st != GR_OK) {
        gr_free(copy, sizeof(int) * (size_t)(n ? n : 1));
        return st;
    }
    c->vals.data[vi].seq = copy;
    c->vals.data[vi].n_seq = n;
    return GR_OK;
}

/* Adds node op(in) with attributes, typed; *out = its output. */
static gr_status add_helper(ox_ctx *c, gr_op op, const char *base, int k, int n_in, const int *in, int n_attr,
                            const gr_ir_attr *attrs, int *out) {
    char *name = gr_sprintf("%s/sym%d", base, k);
    if (!name) return GR_ERR_NOMEM;
    for (int j = 1; gr_ir_find_node(c->g, name) >= 0 && j < 1000; j++) {
        gr_strfree(name);
        if (!(name = gr_sprintf("%s/sym%d_%d", base, k, j))) return GR_ERR_NOMEM;
    }
    int node;
    gr_status st = gr_ir_add_node(c->g, op, name, n_in, in, 1, NULL, n_attr, attrs, &node);
    gr_strfree(name);
    GR_TRY(st);
    *out = c->g->nodes.data[node].out[0];
    return gr_ir_infer_node(c->g, node);
}

/* A tensor computed from symbolic dims used as data (position offsets, a
 * shape fed to an op as a tensor): each element becomes fill(value=dim(e))
 * of shape [1] (a constant element a plain fill), concatenated and reshaped.
 * The fills' values are evaluated for each binding (specialization), so
 * nothing is left to the host at run time. Such tensors are a handful of
 * elements; more than 64 is refused. */
#define OX_SYM_DATA_MAX 64
static gr_status materialize_symbolic(ox_ctx *c, ox_value *v, int *out_ir) {
    ox_tensor *t = v->konst;
    int64_t n = ox_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (t->sym[i] == OX_UNKNOWN)
            return gr_error(GR_ERR_UNSUPPORTED,
                            "value '%s' depends on the symbolic dims in a way graft cannot express (a comparison or "
                            "division their ranges do not decide) and is used as data; declare the dims' ranges "
                            "(--dim-range) or export with static shapes",
                            v->name);
    if (n > OX_SYM_DATA_MAX)
        return gr_error(GR_ERR_UNSUPPORTED, "value '%s' holds %lld elements computed from symbolic dims (at most %d are supported as data)",
                        v->name, (long long)n, OX_SYM_DATA_MAX);
    if (t->dtype == GR_BOOL)
        return gr_error(GR_ERR_UNSUPPORTED, "value '%s': a bool tensor computed from symbolic dims is not supported as data", v->name);
    int parts[OX_SYM_DATA_MAX];
    for (int64_t i = 0; i < n; i++) {
        gr_dim d;
        ox_elem_dim(t, i, &d);
        int64_t one = 1;
        gr_ir_attr attrs[3] = {
            {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = &one, .n = t->ndim ? 1 : 0},
            {.name = "value", .kind = GR_IR_ATTR_FLOAT, .f = gr_dx_is_sym(d) ? 0.0 : gr_load_f64(t->data, t->dtype, i),
             .sym = gr_dx_is_sym(d), .expr = d.expr},
            {.name = "dtype", .kind = GR_IR_ATTR_STRING, .s = (char *)gr_dtype_name(t->dtype)},
        };
        GR_TRY(add_helper(c, GR_OP_FILL, v->name, (int)i, 0, NULL, 3, attrs, &parts[i]));
    }
    int ir = parts[0];
    if (t->ndim > 0) {
        gr_ir_attr axis = {.name = "axis", .kind = GR_IR_ATTR_INT, .i = 0};
        if (n != 1) GR_TRY(add_helper(c, GR_OP_CONCAT, v->name, (int)n, (int)n, parts, 1, &axis, &ir));
        if (t->ndim != 1) {
            gr_ir_attr shape = {.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = t->dims, .n = t->ndim};
            int in = ir;
            GR_TRY(add_helper(c, GR_OP_RESHAPE, v->name, (int)n + 1, 1, &in, 1, &shape, &ir));
        }
    }
    if (n == 0) { /* an empty tensor: a plain constant */
        GR_TRY(gr_ir_add_const(c->g, NULL, t->dtype, t->ndim, t->dims, t->data, &ir));
    }
    /* the value keeps its ONNX name (a graph output is read by it) */
    if (gr_ir_find_value(c->g, v->name) < 0) GR_TRY(gr_ir_rename_value(c->g, ir, v->name));
    v->ir = ir;
    *out_ir = ir;
    return GR_OK;
}

/* name, or NULL (an automatic name) when the IR graph has it already: an inlined
 * body (an unrolled loop's iterations) defines its ONNX names once per copy */
static const char *ir_name_free(const ox_ctx *c, const char *name) { return gr_ir_find_value(c->g, name) >= 0 ? NULL : name; }

gr_status ox_ir(ox_ctx *c, int vi, int *out_ir) {
    ox_value *v = &c->vals.data[vi];
    if (v->unavailable) return gr_error(GR_ERR_UNSUPPORTED, "value '%s' %s", v->name, v->unavailable);
    if (v->seq)
        return gr_error(GR_ERR_UNSUPPORTED,
                        "value '%s' is a tensor sequence; graft reads sequences only through SequenceAt with a constant "
                        "position (other uses of sequences are not supported)",
                        v->name);
    if (v->ir >= 0) return *out_ir = v->ir, GR_OK;
    ox_tensor *t = v->konst;
    if (!t) return gr_error(GR_ERR_INTERNAL, "value '%s' has neither IR value nor data", v->name);
    if (ox_tensor_has_sym(t)) return materialize_symbolic(c, v, out_ir);
    if (t->sym) {
        gr_free(t->sym, sizeof(int32_t) * (size_t)(ox_tensor_numel(t) ? ox_tensor_numel(t) : 1));
        t->sym = NULL;
    }
    /* The IR takes the data; the known tensor keeps pointing at it. */
    int ir;
    if (t->owned) {
        void *data = t->data; /* the IR frees it on failure */
        t->data = NULL;
        t->owned = false;
        GR_TRY(gr_ir_add_const_owned(c->g, ir_name_free(c, v->name), t->dtype, t->ndim, t->dims, data, t->nbytes, &ir));
        t->data = data;
    } else {
        GR_TRY(gr_ir_add_const(c->g, ir_name_free(c, v->name), t->dtype, t->ndim, t->dims, t->data, &ir));
        t->data = c->g->values.data[ir].data;
    }
    v->ir = ir;
    *out_ir = ir;
    return GR_OK;
}

static void ctx_free(ox_ctx *c) {
    for (int i = 0; i < c->vals.len; i++) {
        ox_tensor_free(c->vals.data[i].konst);
        if (c->vals.data[i].seq) gr_free(c->vals.data[i].seq, sizeof(int) * (size_t)(c->vals.data[i].n_seq ? c->vals.data[i].n_seq : 1));
    }
    gr_vec_free(&c->vals);
    gr_free(c->slots, (size_t)c->n_slots * sizeof(int));
    gr_strfree(c->node_name_owned);
    gr_strfree(c->scope_prefix);
}

/* ==== graph inputs ======================================================================================= */
static bool dim_param_used(const Onnx__GraphProto *gp, const char *name) {
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__TypeProto *tp = gp->input[i]->type;
        if (!tp || !tp->tensor_type || !tp->tensor_type->shape) continue;
        const Onnx__TensorShapeProto *sh = tp->tensor_type->shape;
        for (size_t d = 0; d < sh->n_dim; d++)
            if (sh->dim[d]->dim_param && !strcmp(sh->dim[d]->dim_param, name)) return true;
    }
    return false;
}

static gr_status fresh_sym(ox_ctx *c, const Onnx__GraphProto *gp, int32_t *out) {
    for (int k = c->g->syms.len;; k++) {
        char name[32];
        snprintf(name, sizeof name, "unk__%d", k);
        bool taken = dim_param_used(gp, name);
        taken |= gr_ir_find_sym(c->g, name) >= 0;
        if (!taken) return gr_ir_sym(c->g, name, out);
    }
}

static gr_status add_graph_input(ox_ctx *c, const Onnx__GraphProto *gp, const Onnx__ValueInfoProto *vi) {
    const char *name = S(vi->name);
    if (!*name) return gr_error(GR_ERR_INVALID, "a graph input has no name");
    if (ox_find(c, name) >= 0) return GR_OK; /* also an initializer: a constant */
    char what[300];
    snprintf(what, sizeof what, "graph input '%.256s'", name);
    if (!vi->type || !vi->type->tensor_type)
        return gr_error(GR_ERR_UNSUPPORTED, "%s is not a tensor (sequences, maps and optionals are not supported)", what);
    const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
    gr_dtype dt = GR_F32;
    GR_TRY(ox_dtype_from_onnx(c, tt->has_elem_type ? tt->elem_type : 0, what, &dt));
    if (!tt->shape) return gr_error(GR_ERR_UNSUPPORTED, "%s has no shape (unknown rank)", what);
    if (tt->shape->n_dim > GR_MAX_DIMS)
        return gr_error(GR_ERR_UNSUPPORTED, "%s has rank %zu (graft supports up to %d)", what, tt->shape->n_dim, GR_MAX_DIMS);
    gr_dim dims[GR_MAX_DIMS];
    for (size_t d = 0; d < tt->shape->n_dim; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        if (dim->has_dim_value) {
            if (dim->dim_value < 0) return gr_error(GR_ERR_INVALID, "%s: dim %zu is negative (%lld)", what, d, (long long)dim->dim_value);
            dims[d] = gr_dx_const(dim->dim_value);
        } else if (dim->dim_param && *dim->dim_param) {
            /* a name ("seq") or an expression the dynamo exporter wrote ("s0 + 1") */
            gr_status st = gr_dx_from_name(c->g, dim->dim_param, &dims[d]);
            if (st == GR_ERR_SHAPE) return gr_error_prefix(st, "%s: dim %zu ('%s')", what, d, dim->dim_param);
            GR_TRY(st);
            if (!gr_dx_is_sym(dims[d]) && dims[d].size < 0)
                return gr_error(GR_ERR_INVALID, "%s: dim %zu ('%s') is negative", what, d, dim->dim_param);
        } else {
            int32_t sym;
            GR_TRY(fresh_sym(c, gp, &sym));
            GR_TRY(gr_dx_symbol(c->g, c->g->syms.data[sym].name, &dims[d]));
        }
    }
    int64_t prod = 1;
    for (size_t d = 0; d < tt->shape->n_dim; d++) {
        int64_t sz = !gr_dx_is_sym(dims[d]) ? dims[d].size : 1;
        if (sz > 0 && sz > OX_MAX_ELEMS / prod) return gr_error(GR_ERR_SHAPE, "%s is too large", what);
        if (sz > 0) prod *= sz;
    }
    int ir;
    GR_TRY(gr_ir_add_input(c->g, name, dt, (int)tt->shape->n_dim, dims, &ir));
    return ox_define_ir(c, name, ir);
}

/* ==== the node loop ======================================================================================== */
static gr_status import_node(ox_ctx *c, const Onnx__NodeProto *np, int index) {
    c->node = np;
    c->node_index = index;
    c->sub_count = 0;
    gr_strfree(c->node_name_owned);
    c->node_name_owned = NULL;
    if (np->name && *np->name && !c->scope_prefix) {
        c->node_name = np->name;
    } else {
        const char *op = np->op_type && *np->op_type ? np->op_type : "node";
        if (np->name && *np->name) c->node_name_owned = gr_sprintf("%s/%s", c->scope_prefix, np->name);
        else if (c->scope_prefix) c->node_name_owned = gr_sprintf("%s/%s_%d", c->scope_prefix, op, index);
        else c->node_name_owned = gr_sprintf("%s_%d", op, index);
        if (!c->node_name_owned) return GR_ERR_NOMEM;
        c->node_name = c->node_name_owned;
    }
    if (!np->op_type || !*np->op_type) return ox_node_error(c, GR_ERR_INVALID, "node %d has no op_type", index);
    const char *domain = S(np->domain);
    if (*domain && strcmp(domain, "ai.onnx"))
        return gr_error(GR_ERR_UNSUPPORTED, "node '%s' op '%s' (domain '%s') is not supported", c->node_name, np->op_type, domain);
    for (size_t i = 0; i < np->n_input; i++) {
        const char *in = S(np->input[i]);
        if (!*in) continue;
        int vi;
        GR_TRY(ox_resolve(c, in, &vi));
        if (vi < 0)
            return ox_node_error(c, GR_ERR_INVALID,
                                 "input %zu '%s' names no value (not a graph input, an initializer, an earlier node's output "
                                 "or a value of an enclosing graph)",
                                 i, in);
    }
    bool folded = false;
    GR_TRY(ox_try_fold(c, &folded));
    if (folded) return GR_OK;
    return ox_convert_node(c);
}

/* ==== scopes: subgraphs and inlined bodies ===================================================== */
void ox_value_clear(ox_value *v) {
    ox_tensor_free(v->konst);
    if (v->seq) gr_free(v->seq, sizeof(int) * (size_t)(v->n_seq ? v->n_seq : 1));
    const char *name = v->name;
    memset(v, 0, sizeof *v);
    v->name = name;
    v->ir = -1;
}

gr_status ox_value_copy(ox_value *dst, const ox_value *src) {
    ox_value_clear(dst);
    dst->ir = src->ir;
    dst->unavailable = src->unavailable;
    if (src->konst) GR_TRY(ox_tensor_cast(src->konst, src->konst->dtype, &dst->konst));
    if (src->seq) {
        size_t nb = sizeof(int) * (size_t)(src->n_seq ? src->n_seq : 1);
        if (!(dst->seq = gr_malloc(nb))) return GR_ERR_NOMEM;
        memcpy(dst->seq, src->seq, nb);
        dst->n_seq = src->n_seq;
    }
    return GR_OK;
}

/* Both graphs name automatic values "%N" from counters of their own; a capture takes
 * the outer value's name into the subgraph, so the counters are kept apart. */
static void sync_auto_names(gr_graph *a, gr_graph *b) {
    int m = a->next_auto_name > b->next_auto_name ? a->next_auto_name : b->next_auto_name;
    a->next_auto_name = b->next_auto_name = m;
}

gr_status ox_resolve(ox_ctx *c, const char *name, int *out) {
    *out = ox_find(c, name);
    if (*out >= 0 || !c->outer || !name || !*name) return GR_OK;
    ox_ctx *o = c->outer;
    int ovi;
    GR_TRY(ox_resolve(o, name, &ovi));
    if (ovi < 0) return GR_OK;
    int vi;
    GR_TRY(ox_define(c, o->vals.data[ovi].name, &vi));
    ox_value *v = &c->vals.data[vi];
    const ox_value *src = &o->vals.data[ovi];
    *out = vi;
    if (c->same_graph) return ox_value_copy(v, src);
    if (src->unavailable) {
        v->unavailable = src->unavailable;
        return GR_OK;
    }
    if (src->seq) {
        v->unavailable = "is a tensor sequence of an enclosing graph (not supported inside a subgraph)";
        return GR_OK;
    }
    if (src->konst && !ox_tensor_has_sym(src->konst)) return ox_tensor_cast(src->konst, src->konst->dtype, &v->konst);
    /* a capture: an input of the subgraph, not listed, named like the outer IR value */
    int oir;
    sync_auto_names(o->g, c->g);
    GR_TRY(ox_ir(o, ovi, &oir));
    sync_auto_names(o->g, c->g);
    const gr_ir_value *ov = &o->g->values.data[oir];
    if (gr_ir_find_value(c->g, ov->name) >= 0)
        return gr_error(GR_ERR_UNSUPPORTED, "value '%s' of an enclosing graph is read in a subgraph that has a value of the same IR name '%s'",
                        name, ov->name);
    int cv;
    GR_TRY(gr_ir_add_value(c->g, ov->name, GR_VAL_INPUT, &cv));
    gr_ir_value *d = &c->g->values.data[cv];
    ov = &o->g->values.data[oir];
    d->typed = ov->typed;
    d->dtype = ov->dtype;
    d->ndim = ov->ndim;
    d->placement = ov->placement;
    for (int i = 0; i < ov->ndim && i < GR_MAX_DIMS; i++) GR_TRY(gr_dx_import(c->g, o->g, ov->dims[i], &d->dims[i]));
    c->vals.data[vi].ir = cv;
    return GR_OK;
}

static gr_status scope_begin(ox_ctx *c, ox_ctx *s, const char *what) {
    memset(s, 0, sizeof *s);
    if (c->depth + 1 > OX_MAX_GRAPH_DEPTH)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: subgraphs nest more than %d levels deep", what, OX_MAX_GRAPH_DEPTH);
    s->origin = c->origin;
    s->base_dir = c->base_dir;
    s->opset = c->opset;
    s->outer = c;
    s->depth = c->depth + 1;
    return GR_OK;
}

/* Initializers of a body as constants of scope s. */
static gr_status scope_initializers(ox_ctx *s, const Onnx__GraphProto *gp, const char *what) {
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = S(tp->name);
        if (!*name) return gr_error(GR_ERR_INVALID, "%s: initializer %zu has no name", what, i);
        char w[600];
        snprintf(w, sizeof w, "%s: initializer '%.256s'", what, name);
        ox_tensor *t;
        GR_TRY(ox_tensor_from_proto(s, tp, w, &t));
        GR_TRY(ox_define_const(s, name, t));
    }
    return GR_OK;
}

static gr_status scope_nodes(ox_ctx *s, const Onnx__GraphProto *gp) {
    for (size_t i = 0; i < gp->n_node; i++) GR_TRY(import_node(s, gp->node[i], (int)i));
    s->node = NULL;
    s->node_name = NULL;
    return GR_OK;
}

static gr_status scope_output(ox_ctx *s, const Onnx__GraphProto *gp, size_t i, const char *what, int *vi) {
    const char *name = S(gp->output[i]->name);
    GR_TRY(ox_resolve(s, name, vi));
    if (*vi < 0) return gr_error(GR_ERR_INVALID, "%s: output '%s' is not produced by any node, input or initializer", what, name);
    return GR_OK;
}

gr_status ox_import_subgraph(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, gr_graph **out) {
    *out = NULL;
    ox_ctx s;
    GR_TRY(scope_begin(c, &s, what));
    if (gp->n_input) return gr_error(GR_ERR_INVALID, "%s: a branch takes no inputs, this one declares %zu", what, gp->n_input);
    if (gp->n_output == 0) return gr_error(GR_ERR_INVALID, "%s has no outputs", what);
    gr_status st = gr_ir_graph_create(&s.g);
    if (st == GR_OK) {
        s.g->parent = c->g;
        sync_auto_names(c->g, s.g);
        st = scope_initializers(&s, gp, what);
    }
    if (st == GR_OK) st = scope_nodes(&s, gp);
    for (size_t i = 0; st == GR_OK && i < gp->n_output; i++) {
        int vi, ir;
        st = scope_output(&s, gp, i, what, &vi);
        if (st == GR_OK) st = ox_ir(&s, vi, &ir);
        if (st == GR_OK) st = gr_ir_add_output(s.g, ir);
    }
    if (s.g) sync_auto_names(c->g, s.g);
    if (st != GR_OK) {
        gr_ir_graph_destroy(s.g);
        s.g = NULL;
    }
    ctx_free(&s);
    *out = s.g;
    return st;
}

/* A Loop body as the IR subgraph of a `loop` node run a data-dependent number of
 * times (unrolled per binding, passes/unroll.c): inputs (iteration i64[], condition
 * bool[], carried values typed like state_ir's values of c->g); the ONNX condition input
 * is the constant true, so a body that passes it on (or writes true) has a condition
 * known here: *cond_true. */
gr_status ox_import_loop_body(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, int n_state, const int *state_ir,
                              gr_graph **out, bool *cond_true) {
    *out = NULL;
    *cond_true = false;
    ox_ctx s;
    GR_TRY(scope_begin(c, &s, what));
    if ((int)gp->n_input != 2 + n_state || gp->n_output < (size_t)(1 + n_state))
        return gr_error(GR_ERR_INVALID, "%s: %zu inputs and %zu outputs for %d loop-carried values", what, gp->n_input, gp->n_output, n_state);
    gr_status st = gr_ir_graph_create(&s.g);
    if (st == GR_OK) {
        s.g->parent = c->g;
        sync_auto_names(c->g, s.g);
        st = scope_initializers(&s, gp, what);
    }
    for (size_t i = 0; st == GR_OK && i < gp->n_input; i++) {
        const char *name = S(gp->input[i]->name);
        if (!*name) {
            st = gr_error(GR_ERR_INVALID, "%s: input %zu has no name", what, i);
            break;
        }
        int ir = -1;
        if (i == 0) {
            st = gr_ir_add_input(s.g, name, GR_I64, 0, NULL, &ir);
        } else if (i == 1) { /* the IR input exists for the loop op's convention; ONNX reads the constant */
            char *in_name = gr_sprintf("%s/cond_in", what);
            ox_tensor *t = NULL;
            st = in_name ? gr_ir_add_input(s.g, in_name, GR_BOOL, 0, NULL, &ir) : gr_nomem();
            gr_strfree(in_name);
            if (st == GR_OK) st = ox_tensor_new(GR_BOOL, 0, NULL, &t);
            if (st == GR_OK) {
                *(uint8_t *)t->data = 1;
                st = ox_define_const(&s, name, t);
            }
            continue;
        } else {
            const gr_ir_value *o = &c->g->values.data[state_ir[i - 2]];
            if (!o->typed) {
                st = gr_error(GR_ERR_UNSUPPORTED, "%s: the type of loop-carried value %zu is not known", what, i - 2);
                break;
            }
            gr_dim dims[GR_MAX_DIMS];
            gr_dtype dt = o->dtype;
            int nd = o->ndim;
            for (int d = 0; d < nd && st == GR_OK; d++) st = gr_dx_import(s.g, c->g, c->g->values.data[state_ir[i - 2]].dims[d], &dims[d]);
            if (st == GR_OK) st = gr_ir_add_input(s.g, name, dt, nd, dims, &ir);
        }
        if (st == GR_OK) st = ox_define_ir(&s, name, ir);
    }
    if (st == GR_OK) st = scope_nodes(&s, gp);
    for (size_t i = 0; st == GR_OK && i < gp->n_output; i++) {
        int vi, ir;
        st = scope_output(&s, gp, i, what, &vi);
        if (st == GR_OK && i == 0) {
            const ox_tensor *k = s.vals.data[vi].konst;
            *cond_true = k && !ox_tensor_has_sym(k) && ox_tensor_numel(k) == 1 && gr_load_f64(k->data, k->dtype, 0) != 0;
        }
        if (st == GR_OK) st = ox_ir(&s, vi, &ir);
        if (st == GR_OK) st = gr_ir_add_output(s.g, ir);
    }
    if (s.g) sync_auto_names(c->g, s.g);
    if (st != GR_OK) {
        gr_ir_graph_destroy(s.g);
        s.g = NULL;
    }
    ctx_free(&s);
    *out = s.g;
    return st;
}

/* A Scan body as the IR subgraph of a `loop` node over a symbolic sequence length:
 * inputs (iteration i64[], condition bool[], states typed like state_ir's values); scan
 * input j is gather(xs_ir[j], iteration, axis axes[j]) of the outer value xs_ir[j] (a
 * capture, by name); outputs (true, states..., scan outputs...). */
gr_status ox_import_scan_body(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, int n_state, const int *state_ir, int n_scan_in,
                              const int *xs_ir, const int *axes, gr_graph **out) {
    *out = NULL;
    ox_ctx s;
    GR_TRY(scope_begin(c, &s, what));
    if ((int)gp->n_input != n_state + n_scan_in) return gr_error(GR_ERR_INVALID, "%s: %zu inputs", what, gp->n_input);
    gr_status st = gr_ir_graph_create(&s.g);
    int iter = -1, cond = -1;
    char *name_i = gr_sprintf("%s/iter", what), *name_c = gr_sprintf("%s/cond", what);
    if (st == GR_OK && (!name_i || !name_c)) st = gr_nomem();
    if (st == GR_OK) {
        s.g->parent = c->g;
        sync_auto_names(c->g, s.g);
        st = gr_ir_add_input(s.g, name_i, GR_I64, 0, NULL, &iter);
    }
    if (st == GR_OK) st = gr_ir_add_input(s.g, name_c, GR_BOOL, 0, NULL, &cond);
    if (st == GR_OK) st = scope_initializers(&s, gp, what);
    for (int i = 0; st == GR_OK && i < (int)gp->n_input; i++) {
        const char *name = S(gp->input[i]->name);
        if (!*name) {
            st = gr_error(GR_ERR_INVALID, "%s: input %d has no name", what, i);
            break;
        }
        int outer = i < n_state ? state_ir[i] : xs_ir[i - n_state], ir = -1;
        gr_ir_value ov = c->g->values.data[outer]; /* a copy: adding values moves the array */
        if (!ov.typed) {
            st = gr_error(GR_ERR_UNSUPPORTED, "%s: the type of input %d is not known", what, i);
            break;
        }
        gr_dim dims[GR_MAX_DIMS];
        for (int d = 0; d < ov.ndim && st == GR_OK; d++) st = gr_dx_import(s.g, c->g, ov.dims[d], &dims[d]);
        if (st == GR_OK && i < n_state) st = gr_ir_add_input(s.g, name, ov.dtype, ov.ndim, dims, &ir);
        if (st == GR_OK && i >= n_state) { /* the capture, then this iteration's slice */
            int cap, node;
            st = gr_ir_add_value(s.g, ov.name, GR_VAL_INPUT, &cap);
            if (st == GR_OK) {
                gr_ir_value *cv = &s.g->values.data[cap];
                cv->typed = true;
                cv->dtype = ov.dtype;
                cv->ndim = ov.ndim;
                for (int d = 0; d < ov.ndim; d++) cv->dims[d] = dims[d];
                gr_ir_attr ax = {.name = (char *)"axis", .kind = GR_IR_ATTR_INT, .i = axes[i - n_state]};
                int in2[2] = {cap, iter};
                char *nn = gr_sprintf("%s/slice%d", what, i - n_state);
                st = nn ? gr_ir_add_node(s.g, GR_OP_GATHER, nn, 2, in2, 1, NULL, 1, &ax, &node) : gr_nomem();
                gr_strfree(nn);
                if (st == GR_OK) st = gr_ir_infer_node(s.g, node);
                if (st == GR_OK) ir = s.g->nodes.data[node].out[0];
            }
        }
        if (st == GR_OK) st = ox_define_ir(&s, name, ir);
    }
    if (st == GR_OK) st = scope_nodes(&s, gp);
    if (st == GR_OK) { /* the condition: true */
        uint8_t one = 1;
        int k;
        char *nm = gr_sprintf("%s/true", what);
        st = nm ? gr_ir_add_const(s.g, nm, GR_BOOL, 0, NULL, &one, &k) : gr_nomem();
        gr_strfree(nm);
        if (st == GR_OK) st = gr_ir_add_output(s.g, k);
    }
    for (size_t i = 0; st == GR_OK && i < gp->n_output; i++) {
        int vi, ir;
        st = scope_output(&s, gp, i, what, &vi);
        if (st == GR_OK) st = ox_ir(&s, vi, &ir);
        if (st == GR_OK) st = gr_ir_add_output(s.g, ir);
    }
    if (s.g) sync_auto_names(c->g, s.g);
    gr_strfree(name_i);
    gr_strfree(name_c);
    if (st != GR_OK) {
        gr_ir_graph_destroy(s.g);
        s.g = NULL;
    }
    ctx_free(&s);
    *out = s.g;
    return st;
}

gr_status ox_inline_graph(ox_ctx *c, const Onnx__GraphProto *gp, const char *what, const ox_value *in, ox_value *out) {
    ox_ctx *root = c;
    while (root->outer) root = root->outer;
    root->inlined_nodes += (int64_t)gp->n_node;
    if (root->inlined_nodes > OX_MAX_INLINED_NODES)
        return gr_error(GR_ERR_UNSUPPORTED, "%s: unrolling loops and inlining bodies would add more than %lld nodes to the model",
                        what, (long long)OX_MAX_INLINED_NODES);
    ox_ctx s;
    GR_TRY(scope_begin(c, &s, what));
    s.g = c->g;
    s.same_graph = true;
    if (!(s.scope_prefix = gr_strdup(what))) return GR_ERR_NOMEM;
    gr_status st = scope_initializers(&s, gp, what);
    for (size_t i = 0; st == GR_OK && i < gp->n_input; i++) {
        int vi;
        const char *name = S(gp->input[i]->name);
        if (!*name) st = gr_error(GR_ERR_INVALID, "%s: input %zu has no name", what, i);
        if (st == GR_OK) st = ox_define(&s, name, &vi);
        if (st == GR_OK) st = ox_value_copy(&s.vals.data[vi], &in[i]);
    }
    if (st == GR_OK) st = scope_nodes(&s, gp);
    for (size_t i = 0; st == GR_OK && i < gp->n_output; i++) {
        int vi;
        st = scope_output(&s, gp, i, what, &vi);
        if (st == GR_OK) st = ox_value_copy(&out[i], &s.vals.data[vi]);
    }
    ctx_free(&s);
    return st;
}

static gr_status check_opset(const Onnx__ModelProto *m, int64_t *opset) {
    *opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        const char *d = S(o->domain);
        if (!*d || !strcmp(d, "ai.onnx")) *opset = o->has_version ? o->version : 0;
    }
    if (*opset < 0) return gr_error(GR_ERR_UNSUPPORTED, "model imports no opset of the default ONNX domain");
    if (*opset < OX_OPSET_MIN || *opset > OX_OPSET_MAX)
        return gr_error(GR_ERR_UNSUPPORTED, "opset %lld of the default ONNX domain is not supported (graft imports opsets %d..%d)",
                        (long long)*opset, OX_OPSET_MIN, OX_OPSET_MAX);
    return GR_OK;
}

static gr_status import_graph(ox_ctx *c, const Onnx__ModelProto *m) {
    const Onnx__GraphProto *gp = m->graph;
    GR_TRY(check_opset(m, &c->opset));
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = S(tp->name);
        if (!*name) return gr_error(GR_ERR_INVALID, "initializer %zu has no name", i);
        char what[300];
        snprintf(what, sizeof what, "initializer '%.256s'", name);
        ox_tensor *t;
        GR_TRY(ox_tensor_from_proto(c, tp, what, &t));
        GR_TRY(ox_define_const(c, name, t));
    }
    for (size_t i = 0; i < gp->n_input; i++) GR_TRY(add_graph_input(c, gp, gp->input[i]));
    for (size_t i = 0; i < gp->n_node; i++) GR_TRY(import_node(c, gp->node[i], (int)i));
    c->node = NULL;
    c->node_name = NULL;
    if (gp->n_output == 0) return gr_error(GR_ERR_INVALID, "graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = S(gp->output[i]->name);
        int vi = ox_find(c, name);
        if (vi < 0) return gr_error(GR_ERR_INVALID, "graph output '%s' is not produced by any node, input or initializer", name);
        int ir;
        gr_status st = ox_ir(c, vi, &ir);
        if (st != GR_OK) return gr_error_prefix(st, "graph output '%s'", name);
        GR_TRY(gr_ir_add_output(c->g, ir));
    }
    return GR_OK;
}

/* ==== subgraph nesting, checked before parsing ===============================================
 * AttributeProto.g makes the message grammar recursive, and protobuf-c's parser
 * recurses once per nested message. This walk of the wire format uses an explicit
 * stack bounded by OX_MAX_GRAPH_DEPTH and descends only along the path that nests
 * graphs (Model.graph -> Graph.node -> Node.attribute -> Attribute.g -> Graph ...),
 * so a file nesting graphs deeper is refused without recursing. A malformed file
 * is left to protobuf-c, which reports it. */
enum { PB_MODEL, PB_GRAPH, PB_NODE, PB_ATTR };

static bool pb_varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= end) return false;
        uint8_t b = p[(*pos)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

static gr_status check_graph_depth(const uint8_t *p, size_t n, const char *origin) {
    struct {
        int kind;
        size_t end;
    } stack[(OX_MAX_GRAPH_DEPTH + 1) * 3 + 1];
    int sp = 0, depth = -1; /* the main graph is depth 0 */
    stack[0].kind = PB_MODEL;
    stack[0].end = n;
    size_t pos = 0;
    while (sp >= 0) {
        if (pos >= stack[sp].end) {
            if (stack[sp].kind == PB_GRAPH) depth--;
            pos = stack[sp--].end;
            continue;
        }
        uint64_t tag, len;
        if (!pb_varint(p, stack[sp].end, &pos, &tag)) return GR_OK;
        uint64_t field = tag >> 3;
        switch (tag & 7) {
        case 0:
            if (!pb_varint(p, stack[sp].end, &pos, &len)) return GR_OK;
            continue;
        case 1:
            if (stack[sp].end - pos < 8) return GR_OK;
            pos += 8;
            continue;
        case 5:
            if (stack[sp].end - pos < 4) return GR_OK;
            pos += 4;
            continue;
        case 2: break;
        default: return GR_OK;
        }
        if (!pb_varint(p, stack[sp].end, &pos, &len) || len > stack[sp].end - pos) return GR_OK;
        int kind = stack[sp].kind, child = -1;
        if (kind == PB_MODEL && field == 7) child = PB_GRAPH;
        else if (kind == PB_GRAPH && field == 1) child = PB_NODE;
        else if (kind == PB_NODE && field == 5) child = PB_ATTR;
        else if (kind == PB_ATTR && field == 6) child = PB_GRAPH;
        if (child < 0) {
            pos += len;
            continue;
        }
        if (child == PB_GRAPH && ++depth > OX_MAX_GRAPH_DEPTH)
            return gr_error(GR_ERR_UNSUPPORTED, "%s: subgraphs (If / Loop / Scan bodies) nest more than %d levels deep",
                            origin, OX_MAX_GRAPH_DEPTH);
        sp++;
        stack[sp].kind = child;
        stack[sp].end = pos + len;
    }
    return GR_OK;
}

gr_status gr_onnx_load_buffer(const void *data, size_t n, const char *origin, const char *base_dir, gr_graph **out) {
    *out = NULL;
    if (!origin) origin = "<onnx>";
    if (!data && n) return gr_error(GR_ERR_INVALID, "%s: no data", origin);
    GR_TRY(check_graph_depth((const uint8_t *)data, n, origin));
    pb_alloc_state alloc_state = {false};
    ProtobufCAllocator allocator = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &alloc_state};
    Onnx__ModelProto *m = onnx__model_proto__unpack(&allocator, n, (const uint8_t *)data);
    if (!m) {
        if (alloc_state.failed) return gr_nomem();
        return gr_error(GR_ERR_PARSE, "%s: not a valid ONNX model (protobuf parse failed: truncated or garbled file)", origin);
    }
    if (!m->graph) {
        onnx__model_proto__free_unpacked(m, &allocator);
        return gr_error(GR_ERR_INVALID, "%s: the model has no graph", origin);
    }
    ox_ctx c;
    memset(&c, 0, sizeof c);
    c.origin = origin;
    c.base_dir = base_dir;
    gr_status st = gr_ir_graph_create(&c.g);
    if (st == GR_OK && !(c.g->origin = gr_strdup(origin))) st = GR_ERR_NOMEM;
    if (st == GR_OK) st = import_graph(&c, m);
    if (st == GR_OK) st = gr_ir_verify(c.g);
    if (st != GR_OK) {
        if (st == GR_ERR_NOMEM) gr_nomem();
        else gr_error_prefix(st, "%s", origin);
        gr_ir_graph_destroy(c.g);
        c.g = NULL;
    }
    ctx_free(&c);
    onnx__model_proto__free_unpacked(m, &allocator);
    *out = c.g;
    return st;
}

gr_status gr_onnx_load(const char *path, gr_graph **out) {
    *out = NULL;
    char *buf;
    size_t n;
    GR_TRY(gr_read_file(path, &buf, &n));
    const char *slash = strrchr(path, '/');
    char *dir = slash ? gr_strndup(path, (size_t)(slash - path) + (slash == path)) : gr_strdup(".");
    if (!dir) {
        gr_free(buf, n + 1);
        return GR_ERR_NOMEM;
    }
    gr_status st = gr_onnx_load_buffer(buf, n, path, dir, out);
    gr_strfree(dir);
    gr_free(buf, n + 1);
    return st;
}
