/* frontend/onnx/onnx-ops — ONNX ops (opsets 13..21) onto graft IR.
 *
 * One converter per ONNX op, found through the table at the end. Inputs that
 * graft IR takes as attributes (shapes, axes, slice bounds, split sizes, ...)
 * must be known at import time: onnx-fold.c has folded whatever computed
 * them; ox_need_const says why when it could not. Each IR node is typed by
 * shape inference as soon as it is added, so later mapping decisions (the
 * zeros of Reshape, Shape of a computed value) can read its type.
 */
#include "frontend/onnx/onnx-impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *S(const char *s) { return s ? s : ""; }

/* ==== attributes ======================================================================== */
const Onnx__AttributeProto *ox_attr(const ox_ctx *c, const char *name) {
    for (size_t i = 0; i < c->node->n_attribute; i++)
        if (!strcmp(S(c->node->attribute[i]->name), name)) return c->node->attribute[i];
    return NULL;
}

static bool attr_has_int(const Onnx__AttributeProto *a) {
    return a->has_i || (a->has_type && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
}
static bool attr_has_float(const Onnx__AttributeProto *a) {
    return a->has_f || (a->has_type && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
}

gr_status ox_attr_int(ox_ctx *c, const char *name, int64_t def, int64_t *out) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    if (!a) return *out = def, GR_OK;
    if (attr_has_int(a)) return *out = a->i, GR_OK;
    return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' must be an int", name);
}

gr_status ox_attr_float(ox_ctx *c, const char *name, double def, double *out) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    if (!a) return *out = def, GR_OK;
    if (attr_has_float(a)) return *out = a->f, GR_OK;
    if (attr_has_int(a)) return *out = (double)a->i, GR_OK;
    return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' must be a float", name);
}

gr_status ox_attr_string(ox_ctx *c, const char *name, const char *def, char *buf, size_t bufsize) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    if (!a) {
        snprintf(buf, bufsize, "%s", def);
        return GR_OK;
    }
    if (!a->has_s) return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' must be a string", name);
    size_t n = a->s.len < bufsize - 1 ? a->s.len : bufsize - 1;
    if (n) memcpy(buf, a->s.data, n);
    buf[n] = 0;
    if (memchr(buf, 0, n)) return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' holds a NUL byte", name);
    return GR_OK;
}

gr_status ox_attr_ints(ox_ctx *c, const char *name, const int64_t **out, int *n) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return GR_OK;
    if (a->n_ints > GR_MAX_DIMS * 64) return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' is too long", name);
    if (a->n_ints || (a->has_type && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)) {
        *out = a->ints;
        *n = (int)a->n_ints;
        return GR_OK;
    }
    return ox_node_error(c, GR_ERR_INVALID, "attribute '%s' must be a list of ints", name);
}

/* ==== inputs ================================================================================= */
int ox_n_in(const ox_ctx *c) { return (int)c->node->n_input; }

int ox_in(const ox_ctx *c, int i) {
    if (i < 0 || (size_t)i >= c->node->n_input) return -1;
    return ox_find(c, c->node->input[i]);
}

gr_status ox_need_const(ox_ctx *c, int i, const char *what, const ox_tensor **out) {
    *out = NULL;
    int vi = ox_in(c, i);
    if (vi < 0) return ox_node_error(c, GR_ERR_INVALID, "input %d ('%s') is required", i, what);
    const ox_value *v = &c->vals.data[vi];
    if (v->unavailable) return ox_node_error(c, GR_ERR_UNSUPPORTED, "input '%s' (value '%s') %s", what, v->name, v->unavailable);
    if (!v->konst)
        return ox_node_error(c, GR_ERR_UNSUPPORTED,
                             "input '%s' (value '%s') must be a constant at import time; a value computed at run time is not supported", what,
                             v->name);
    if (ox_tensor_has_sym(v->konst)) {
        char desc[256];
        ox_sym_desc(c, v->konst, desc, sizeof desc);
        return ox_node_error(c, GR_ERR_UNSUPPORTED,
                             "input '%s' (value '%s') depends on a symbolic dim (%s), and this op needs it as plain numbers at "
                             "import time; graft takes symbolic values only as shapes, slice bounds, range bounds and the "
                             "like, or as data",
                             what, v->name, desc);
    }
    *out = v->konst;
    return GR_OK;
}

gr_status ox_need_sints(ox_ctx *c, int i, const char *what, gr_dim *vals, int max, int *n) {
    *n = 0;
    int vi = ox_in(c, i);
    if (vi < 0) return ox_node_error(c, GR_ERR_INVALID, "input %d ('%s') is required", i, what);
    const ox_value *v = &c->vals.data[vi];
    if (v->unavailable) return ox_node_error(c, GR_ERR_UNSUPPORTED, "input '%s' (value '%s') %s", what, v->name, v->unavailable);
    if (!v->konst)
        return ox_node_error(c, GR_ERR_UNSUPPORTED,
                             "input '%s' (value '%s') must be known at import time (a constant, or computed from shapes); a "
                             "value computed from tensor data at run time is not supported",
                             what, v->name);
    const ox_tensor *t = v->konst;
    if (!gr_dtype_is_int(t->dtype)) return ox_node_error(c, GR_ERR_INVALID, "input '%s' must hold integers", what);
    int64_t numel = ox_tensor_numel(t);
    if (t->ndim > 1 || numel > max)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "input '%s' must be a list of at most %d integers", what, max);
    for (int64_t k = 0; k < numel; k++) {
        if (!ox_elem_dim(t, k, &vals[k]))
            return ox_node_error(c, GR_ERR_UNSUPPORTED,
                                 "input '%s' (value '%s') element %lld depends on the symbolic dims in a way graft cannot "
                                 "express (a comparison or division the dims' ranges do not decide; declare ranges with "
                                 "--dim-range, or export with static shapes)",
                                 what, v->name, (long long)k);
    }
    *n = (int)numel;
    return GR_OK;
}

gr_status ox_need_ints(ox_ctx *c, int i, const char *what, int64_t *vals, int max, int *n) {
    const ox_tensor *t;
    GR_TRY(ox_need_const(c, i, what, &t));
    if (!gr_dtype_is_int(t->dtype)) return ox_node_error(c, GR_ERR_INVALID, "input '%s' must hold integers", what);
    int64_t numel = ox_tensor_numel(t);
    if (t->ndim > 1 || numel > max)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "input '%s' must be a list of at most %d integers", what, max);
    for (int64_t k = 0; k < numel; k++) vals[k] = gr_load_i64(t->data, t->dtype, k);
    *n = (int)numel;
    return GR_OK;
}

/* IR value of input i (materializes constants); required. */
static gr_status in_ir(ox_ctx *c, int i, int *ir) {
    int vi = ox_in(c, i);
    if (vi < 0) return ox_node_error(c, GR_ERR_INVALID, "input %d is required", i);
    gr_status st = ox_ir(c, vi, ir);
    if (st != GR_OK && st != GR_ERR_NOMEM) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", gr_last_error());
        return ox_node_error(c, st, "%s", msg);
    }
    return st;
}

static const gr_ir_value *irv(const ox_ctx *c, int ir) { return &c->g->values.data[ir]; }

/* IR constant from a tensor we own (consumed); unnamed. */
static gr_status const_ir(ox_ctx *c, ox_tensor *t, int *ir) {
    void *data = t->data;
    t->owned = false;
    gr_status st = gr_ir_add_const_owned(c->g, NULL, t->dtype, t->ndim, t->dims, data, t->nbytes, ir);
    ox_tensor_free(t);
    return st;
}

static gr_status scalar_const_ir(ox_ctx *c, gr_dtype dt, double v, int *ir) {
    ox_tensor *t;
    GR_TRY(ox_tensor_new(dt, 0, NULL, &t));
    gr_store_f64(t->data, dt, 0, v);
    return const_ir(c, t, ir);
}

/* ==== emitting IR nodes ========================================================================== */
static bool node_name_taken(const gr_graph *g, const char *name) { return gr_ir_find_node(g, name) >= 0; }

/* Adds an IR node for the current ONNX node. `last` nodes carry the ONNX
 * node's name and its output names; helper nodes before them are named
 * "<name>/<k>" with anonymous outputs. The node is typed right away. */
static gr_status emit(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, int n_out,
                      const char *const *out_names, bool last, int *outs) {
    char *name = last ? gr_strdup(c->node_name) : gr_sprintf("%s/%d", c->node_name, ++c->sub_count);
    if (!name) return GR_ERR_NOMEM;
    for (int k = 1; node_name_taken(c->g, name); k++) {
        char *alt = gr_sprintf("%s_%d", last ? c->node_name : name, k);
        if (!alt) {
            gr_strfree(name);
            return GR_ERR_NOMEM;
        }
        if (!node_name_taken(c->g, alt) || k > 1000) {
            gr_strfree(name);
            name = alt;
            break;
        }
        gr_strfree(alt);
    }
    /* an output name the IR graph has already (an unrolled loop body defines its
     * names once per iteration) leaves that value an automatic name */
    const char *names[64];
    bool named = last && out_names && n_out <= 64;
    for (int i = 0; named && i < n_out; i++)
        names[i] = out_names[i] && gr_ir_find_value(c->g, out_names[i]) < 0 ? out_names[i] : NULL;
    int node;
    gr_status st = gr_ir_add_node(c->g, op, name, n_in, in, n_out, named ? names : NULL, n_attr, attrs, &node);
    gr_strfree(name);
    if (st != GR_OK) return st;
    for (int i = 0; i < n_out; i++) outs[i] = c->g->nodes.data[node].out[i];
    return gr_ir_infer_node(c->g, node);
}

/* Binds the ONNX outputs [0, n) to IR values; further non-empty outputs are
 * marked unavailable with `why`. */
static gr_status bind_outputs(ox_ctx *c, int n, const int *irs, const char *why) {
    for (size_t i = 0; i < c->node->n_output; i++) {
        const char *name = S(c->node->output[i]);
        if (!*name) continue;
        if ((int)i < n) {
            if (ox_find(c, name) < 0) GR_TRY(ox_define_ir(c, name, irs[i]));
        } else {
            int vi;
            GR_TRY(ox_define(c, name, &vi));
            c->vals.data[vi].unavailable = why ? why : "is an output graft does not compute (not supported)";
        }
    }
    return GR_OK;
}

/* out names of the ONNX node, NULL for empty ones */
static void out_names_of(const ox_ctx *c, const char **names, int n) {
    for (int i = 0; i < n; i++)
        names[i] = (size_t)i < c->node->n_output && c->node->output[i] && *c->node->output[i] ? c->node->output[i] : NULL;
}

/* One IR node, all ONNX inputs in order, one output. */
static gr_status emit1(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs) {
    const char *names[1];
    out_names_of(c, names, 1);
    int out;
    GR_TRY(emit(c, op, n_in, in, n_attr, attrs, 1, names, true, &out));
    return bind_outputs(c, 1, &out, NULL);
}

static gr_status check_arity(ox_ctx *c, int min_in, int max_in, int min_out) {
    int n = ox_n_in(c);
    if (n < min_in || n > max_in) {
        if (min_in == max_in) return ox_node_error(c, GR_ERR_INVALID, "expects %d inputs, got %d", min_in, n);
        return ox_node_error(c, GR_ERR_INVALID, "expects %d to %d inputs, got %d", min_in, max_in, n);
    }
    if ((int)c->node->n_output < min_out) return ox_node_error(c, GR_ERR_INVALID, "expects an output");
    return GR_OK;
}

/* An ints attribute from dims that may be symbolic: the values go to v, the
 * expression ids to e (both the caller's arrays of n entries). */
static gr_ir_attr A_sints(const char *name, const gr_dim *d, int n, int64_t *v, int32_t *e) {
    bool any = false;
    for (int i = 0; i < n; i++) {
        v[i] = gr_dx_is_sym(d[i]) ? -1 : d[i].size;
        e[i] = d[i].expr;
        any |= gr_dx_is_sym(d[i]);
    }
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INTS, .ints = v, .n = n, .exprs = any ? e : NULL};
}

/* A scalar int/float attribute from a dim that may be symbolic. */
static gr_ir_attr A_sint(const char *name, gr_ir_attr_kind kind, gr_dim d) {
    gr_ir_attr a = {.name = (char *)name, .kind = kind, .i = gr_dx_is_sym(d) ? 0 : d.size, .f = gr_dx_is_sym(d) ? 0.0 : (double)d.size};
    if (gr_dx_is_sym(d)) a.sym = true, a.expr = d.expr;
    return a;
}

/* Symbolic shapes handed to the IR: concrete dims >= -1, concrete part of the
 * count within the limit (symbolic dims are checked once they have values). */
static gr_status check_target_sshape(ox_ctx *c, const char *what, const gr_dim *dims, int n) {
    int64_t prod = 1;
    for (int i = 0; i < n; i++) {
        if (gr_dx_is_sym(dims[i])) continue;
        if (dims[i].size < -1) return ox_node_error(c, GR_ERR_SHAPE, "%s has a negative dim (%lld)", what, (long long)dims[i].size);
        if (dims[i].size <= 0) continue;
        if (dims[i].size > OX_MAX_ELEMS / prod) return ox_node_error(c, GR_ERR_SHAPE, "%s is too large", what);
        prod *= dims[i].size;
    }
    return GR_OK;
}


static gr_ir_attr A_int(const char *name, int64_t v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INT, .i = v}; }
static gr_ir_attr A_float(const char *name, double v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_FLOAT, .f = v}; }
static gr_ir_attr A_str(const char *name, const char *s) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_STRING, .s = (char *)s};
}
static gr_ir_attr A_ints(const char *name, const int64_t *v, int n) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)v, .n = n};
}

/* ==== converters ==================================================================================== */
typedef gr_status (*cv_fn)(ox_ctx *c, gr_op op);

/* inputs in order (absent optional ones as -1), no attributes */
static gr_status cv_simple(ox_ctx *c, gr_op op) {
    const gr_op_info *info = gr_op_get(op);
    GR_TRY(check_arity(c, info->min_in, info->max_in < 0 ? 64 : info->max_in, 1));
    int in[64];
    for (int i = 0; i < ox_n_in(c); i++) {
        if (ox_in(c, i) < 0) {
            if (i < info->min_in) return ox_node_error(c, GR_ERR_INVALID, "input %d is required", i);
            in[i] = -1;
        } else {
            GR_TRY(in_ir(c, i, &in[i]));
        }
    }
    return emit1(c, op, ox_n_in(c), in, 0, NULL);
}

static gr_status cv_pow(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 2, 1));
    int in[2];
    GR_TRY(in_ir(c, 0, &in[0]));
    GR_TRY(in_ir(c, 1, &in[1]));
    const gr_ir_value *base = irv(c, in[0]), *expo = irv(c, in[1]);
    if (base->typed && expo->typed && base->dtype != expo->dtype) {
        /* ONNX lets the exponent's type differ; graft IR wants one dtype */
        gr_ir_attr to = A_str("to", gr_dtype_name(base->dtype));
        GR_TRY(emit(c, GR_OP_CAST, 1, &in[1], 1, &to, 1, NULL, false, &in[1]));
    }
    return emit1(c, op, 2, in, 0, NULL);
}

static gr_status cv_variadic(ox_ctx *c, gr_op op) {
    int n = ox_n_in(c);
    if (n < 1) return ox_node_error(c, GR_ERR_INVALID, "expects at least one input");
    int acc;
    GR_TRY(in_ir(c, 0, &acc));
    if (n == 1) return emit1(c, GR_OP_IDENTITY, 1, &acc, 0, NULL);
    for (int i = 1; i < n; i++) {
        int pair[2] = {acc, -1};
        GR_TRY(in_ir(c, i, &pair[1]));
        if (i == n - 1) return emit1(c, op, 2, pair, 0, NULL);
        GR_TRY(emit(c, op, 2, pair, 0, NULL, 1, NULL, false, &acc));
    }
    return GR_OK;
}

static gr_status cv_selu(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    double alpha, gamma;
    GR_TRY(ox_attr_float(c, "alpha", 1.67326319217681884765625, &alpha));
    GR_TRY(ox_attr_float(c, "gamma", 1.05070102214813232421875, &gamma));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr attrs[2] = {A_float("alpha", alpha), A_float("gamma", gamma)};
    return emit1(c, op, 1, &x, 2, attrs);
}

static gr_status cv_gelu(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    char approx[32];
    GR_TRY(ox_attr_string(c, "approximate", "none", approx, sizeof approx));
    if (strcmp(approx, "none") && strcmp(approx, "tanh"))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "approximate='%s' is not supported", approx);
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr a = A_str("approximate", approx);
    return emit1(c, op, 1, &x, 1, &a);
}

static gr_status cv_cast(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    int64_t to;
    GR_TRY(ox_attr_int(c, "to", 0, &to));
    gr_dtype dt;
    gr_status st = ox_dtype_from_onnx(c, (int32_t)to, "attribute 'to'", &dt);
    if (st != GR_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", gr_last_error());
        return ox_node_error(c, st, "%s", msg);
    }
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr a = A_str("to", gr_dtype_name(dt));
    return emit1(c, op, 1, &x, 1, &a);
}

static gr_status cv_gemm(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 3, 1));
    double alpha, beta;
    int64_t ta, tb;
    GR_TRY(ox_attr_float(c, "alpha", 1.0, &alpha));
    GR_TRY(ox_attr_float(c, "beta", 1.0, &beta));
    GR_TRY(ox_attr_int(c, "transA", 0, &ta));
    GR_TRY(ox_attr_int(c, "transB", 0, &tb));
    int in[3], n = 2;
    GR_TRY(in_ir(c, 0, &in[0]));
    GR_TRY(in_ir(c, 1, &in[1]));
    if (ox_in(c, 2) >= 0 && beta != 0.0) {
        GR_TRY(in_ir(c, 2, &in[2]));
        if (beta != 1.0) {
            const gr_ir_value *cv = irv(c, in[2]);
            int b, pair[2];
            GR_TRY(scalar_const_ir(c, cv->typed ? cv->dtype : GR_F32, beta, &b));
            pair[0] = in[2];
            pair[1] = b;
            GR_TRY(emit(c, GR_OP_MUL, 2, pair, 0, NULL, 1, NULL, false, &in[2]));
        }
        n = 3;
    }
    gr_ir_attr attrs[3] = {A_int("trans_a", ta != 0), A_int("trans_b", tb != 0), A_float("alpha", alpha)};
    return emit1(c, op, n, in, alpha == 1.0 ? 2 : 3, attrs);
}

static gr_status cv_softmax(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr a = A_int("axis", axis);
    return emit1(c, op, 1, &x, 1, &a);
}

static gr_status cv_layer_norm(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 3, 1));
    int64_t axis;
    double eps;
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    GR_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    int in[3], n = 2;
    GR_TRY(in_ir(c, 0, &in[0]));
    GR_TRY(in_ir(c, 1, &in[1]));
    if (ox_in(c, 2) >= 0) {
        GR_TRY(in_ir(c, 2, &in[2]));
        n = 3;
    }
    gr_ir_attr attrs[2] = {A_int("axis", axis), A_float("epsilon", eps)};
    const char *names[1];
    out_names_of(c, names, 1);
    int out;
    GR_TRY(emit(c, op, n, in, 2, attrs, 1, names, true, &out));
    return bind_outputs(c, 1, &out, "is LayerNormalization's Mean or InvStdDev output, which is not supported (graft computes Y only)");
}

static gr_status cv_reduce(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 2, 1));
    int64_t keepdims, noop;
    GR_TRY(ox_attr_int(c, "keepdims", 1, &keepdims));
    GR_TRY(ox_attr_int(c, "noop_with_empty_axes", 0, &noop));
    int64_t axes[GR_MAX_DIMS];
    int na = -1;
    if (ox_in(c, 1) >= 0) {
        GR_TRY(ox_need_ints(c, 1, "axes", axes, GR_MAX_DIMS, &na));
    } else {
        const int64_t *a;
        GR_TRY(ox_attr_ints(c, "axes", &a, &na));
        if (na > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_INVALID, "too many axes");
        for (int i = 0; i < na; i++) axes[i] = a[i];
    }
    int x;
    GR_TRY(in_ir(c, 0, &x));
    if (na <= 0 && noop) return emit1(c, GR_OP_IDENTITY, 1, &x, 0, NULL);
    gr_ir_attr attrs[2] = {A_int("keepdims", keepdims != 0), A_ints("axes", axes, na > 0 ? na : 0)};
    return emit1(c, op, 1, &x, na > 0 ? 2 : 1, attrs);
}

static gr_status cv_reshape(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 2, 1));
    int64_t allowzero;
    gr_dim shape[GR_MAX_DIMS];
    int n;
    GR_TRY(ox_attr_int(c, "allowzero", 0, &allowzero));
    GR_TRY(ox_need_sints(c, 1, "shape", shape, GR_MAX_DIMS, &n));
    GR_TRY(check_target_sshape(c, "shape", shape, n));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    for (int i = 0; i < n && !allowzero; i++) {
        if (gr_dx_is_sym(shape[i]) || shape[i].size != 0) continue;
        /* ONNX's 0 copies the input's dim (symbolic or not); graft IR's 0 is a zero-size dim */
        if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "shape copies dim %d of an input whose shape is unknown", i);
        if (i >= xv->ndim) return ox_node_error(c, GR_ERR_SHAPE, "shape copies dim %d of a rank-%d input", i, xv->ndim);
        shape[i] = xv->dims[i];
    }
    int64_t v[GR_MAX_DIMS];
    int32_t e[GR_MAX_DIMS];
    gr_ir_attr a = A_sints("shape", shape, n, v, e);
    return emit1(c, op, 1, &x, 1, &a);
}

static gr_status cv_transpose(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    const int64_t *perm;
    int n;
    GR_TRY(ox_attr_ints(c, "perm", &perm, &n));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr a = A_ints("perm", perm, n);
    return emit1(c, op, 1, &x, n >= 0 ? 1 : 0, &a);
}

/* Unsqueeze / Squeeze: axes from input 1 (opset 13+) */
static gr_status cv_squeeze(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 2, 1));
    int64_t axes[GR_MAX_DIMS];
    int na = -1;
    if (ox_in(c, 1) >= 0) GR_TRY(ox_need_ints(c, 1, "axes", axes, GR_MAX_DIMS, &na));
    if (op == GR_OP_UNSQUEEZE && na < 0) return ox_node_error(c, GR_ERR_INVALID, "input 'axes' is required");
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (xv->typed) { /* normalize negative axes where the rank is known */
        int r = op == GR_OP_UNSQUEEZE ? xv->ndim + na : xv->ndim;
        for (int i = 0; i < na; i++)
            if (axes[i] < 0) axes[i] += r;
    }
    gr_ir_attr a = A_ints("axes", axes, na);
    return emit1(c, op, 1, &x, na >= 0 ? 1 : 0, &a);
}

static gr_status cv_axis_op(ox_ctx *c, gr_op op) {
    /* Concat, Gather, GatherElements: an `axis` attribute */
    const gr_op_info *info = gr_op_get(op);
    GR_TRY(check_arity(c, info->min_in, info->max_in < 0 ? 64 : info->max_in, 1));
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    if (op == GR_OP_CONCAT && !ox_attr(c, "axis")) return ox_node_error(c, GR_ERR_INVALID, "attribute 'axis' is required");
    int in[64];
    for (int i = 0; i < ox_n_in(c); i++) GR_TRY(in_ir(c, i, &in[i]));
    gr_ir_attr a = A_int("axis", axis);
    return emit1(c, op, ox_n_in(c), in, 1, &a);
}

static gr_status cv_slice(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 3, 5, 1));
    gr_dim starts[GR_MAX_DIMS], ends[GR_MAX_DIMS];
    int64_t axes[GR_MAX_DIMS], steps[GR_MAX_DIMS];
    int ns = 0, ne = 0, na = -1, nst = -1;
    GR_TRY(ox_need_sints(c, 1, "starts", starts, GR_MAX_DIMS, &ns));
    GR_TRY(ox_need_sints(c, 2, "ends", ends, GR_MAX_DIMS, &ne));
    if (ox_in(c, 3) >= 0) GR_TRY(ox_need_ints(c, 3, "axes", axes, GR_MAX_DIMS, &na));
    if (ox_in(c, 4) >= 0) GR_TRY(ox_need_ints(c, 4, "steps", steps, GR_MAX_DIMS, &nst));
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ox_node_error(c, GR_ERR_INVALID, "starts, ends, axes and steps differ in length");
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr attrs[4];
    int n = 0;
    int64_t sv[GR_MAX_DIMS], ev[GR_MAX_DIMS];
    int32_t se[GR_MAX_DIMS], ee[GR_MAX_DIMS];
    attrs[n++] = A_sints("starts", starts, ns, sv, se);
    attrs[n++] = A_sints("ends", ends, ne, ev, ee);
    if (na >= 0) attrs[n++] = A_ints("axes", axes, na);
    if (nst >= 0) attrs[n++] = A_ints("steps", steps, nst);
    return emit1(c, op, 1, &x, n, attrs);
}

static gr_status cv_split(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 2, 1));
    int64_t axis, num_outputs;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    GR_TRY(ox_attr_int(c, "num_outputs", 0, &num_outputs));
    int n_out = (int)c->node->n_output;
    if (n_out > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 outputs");
    if (num_outputs && num_outputs != n_out)
        return ox_node_error(c, GR_ERR_INVALID, "num_outputs=%lld but the node has %d outputs", (long long)num_outputs, n_out);
    int64_t sizes[64];
    int ns = -1;
    if (ox_in(c, 1) >= 0) {
        GR_TRY(ox_need_ints(c, 1, "split", sizes, 64, &ns));
        if (ns != n_out) return ox_node_error(c, GR_ERR_INVALID, "split has %d sizes for %d outputs", ns, n_out);
    } else {
        const int64_t *a;
        int na;
        GR_TRY(ox_attr_ints(c, "split", &a, &na)); /* opset < 13 form, accepted */
        if (na > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 outputs");
        for (int i = 0; i < na; i++) sizes[i] = a[i];
        ns = na;
    }
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (ns < 0 && xv->typed) {
        int64_t ax = axis < 0 ? axis + xv->ndim : axis;
        if (ax >= 0 && ax < xv->ndim && !gr_dx_is_sym(xv->dims[ax]) && xv->dims[ax].size >= 0 && n_out > 0) {
            /* opset 18: chunks of ceil(d / n), the last one smaller */
            int64_t d = xv->dims[ax].size, chunk = (d + n_out - 1) / n_out;
            if (d % n_out) {
                for (int i = 0; i < n_out; i++) {
                    int64_t left = d - chunk * i;
                    sizes[i] = left < 0 ? 0 : left < chunk ? left : chunk;
                }
                ns = n_out;
            }
        }
    }
    gr_ir_attr attrs[2] = {A_int("axis", axis), A_ints("split", sizes, ns)};
    const char *names[64];
    int outs[64];
    out_names_of(c, names, n_out);
    GR_TRY(emit(c, op, 1, &x, ns >= 0 ? 2 : 1, attrs, n_out, names, true, outs));
    return bind_outputs(c, n_out, outs, NULL);
}

static gr_status cv_expand(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 2, 1));
    gr_dim shape[GR_MAX_DIMS];
    int n;
    GR_TRY(ox_need_sints(c, 1, "shape", shape, GR_MAX_DIMS, &n));
    GR_TRY(check_target_sshape(c, "shape", shape, n));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    int64_t v[GR_MAX_DIMS];
    int32_t e[GR_MAX_DIMS];
    gr_ir_attr a = A_sints("shape", shape, n, v, e);
    return emit1(c, op, 1, &x, 1, &a);
}

static gr_status cv_shape(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 1, 1, 1));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of '%s' is not known at import time", irv(c, x)->name);
}

gr_status ox_constant_tensor(ox_ctx *c, ox_tensor **out) {
    *out = NULL;
    if (c->node->n_attribute != 1) return ox_node_error(c, GR_ERR_INVALID, "Constant needs exactly one attribute");
    const Onnx__AttributeProto *a = c->node->attribute[0];
    const char *an = S(a->name);
    if (!strcmp(an, "value")) {
        if (!a->t) return ox_node_error(c, GR_ERR_INVALID, "attribute 'value' must be a tensor");
        gr_status st = ox_tensor_from_proto(c, a->t, "attribute 'value'", out);
        if (st != GR_OK && st != GR_ERR_NOMEM) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", gr_last_error());
            return ox_node_error(c, st, "%s", msg);
        }
        return st;
    }
    if (!strcmp(an, "value_float") || !strcmp(an, "value_int")) {
        bool fl = an[6] == 'f';
        GR_TRY(ox_tensor_new(fl ? GR_F32 : GR_I64, 0, NULL, out));
        if (fl) *(float *)(*out)->data = a->f;
        else *(int64_t *)(*out)->data = a->i;
        return GR_OK;
    }
    if (!strcmp(an, "value_floats") || !strcmp(an, "value_ints")) {
        bool fl = an[6] == 'f';
        int64_t n = fl ? (int64_t)a->n_floats : (int64_t)a->n_ints;
        GR_TRY(ox_tensor_new(fl ? GR_F32 : GR_I64, 1, &n, out));
        for (int64_t i = 0; i < n; i++) {
            if (fl) ((float *)(*out)->data)[i] = a->floats[i];
            else ((int64_t *)(*out)->data)[i] = a->ints[i];
        }
        return GR_OK;
    }
    return ox_node_error(c, GR_ERR_UNSUPPORTED, "Constant with attribute '%s' is not supported", an);
}

static gr_status cv_constant(ox_ctx *c, gr_op op) {
    (void)op;
    ox_tensor *t;
    GR_TRY(ox_constant_tensor(c, &t));
    if (c->node->n_output != 1 || !c->node->output[0] || !*c->node->output[0]) {
        ox_tensor_free(t);
        return ox_node_error(c, GR_ERR_INVALID, "expects one named output");
    }
    return ox_define_const(c, c->node->output[0], t);
}

static gr_status cv_constant_of_shape(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    gr_dim shape[GR_MAX_DIMS];
    int n;
    GR_TRY(ox_need_sints(c, 0, "shape", shape, GR_MAX_DIMS, &n));
    GR_TRY(check_target_sshape(c, "shape", shape, n));
    for (int i = 0; i < n; i++)
        if (!gr_dx_is_sym(shape[i]) && shape[i].size < 0) return ox_node_error(c, GR_ERR_SHAPE, "shape has a negative dim");
    gr_dtype dt = GR_F32;
    double value = 0;
    const Onnx__AttributeProto *a = ox_attr(c, "value");
    if (a) {
        if (!a->t) return ox_node_error(c, GR_ERR_INVALID, "attribute 'value' must be a tensor");
        ox_tensor *v;
        GR_TRY(ox_tensor_from_proto(c, a->t, "attribute 'value'", &v));
        bool one = ox_tensor_numel(v) == 1;
        dt = v->dtype;
        if (one) value = gr_load_f64(v->data, dt, 0);
        ox_tensor_free(v);
        if (!one) return ox_node_error(c, GR_ERR_INVALID, "attribute 'value' must hold one element");
    }
    int64_t v[GR_MAX_DIMS];
    int32_t e[GR_MAX_DIMS];
    gr_ir_attr attrs[3] = {A_sints("shape", shape, n, v, e), A_float("value", value), A_str("dtype", gr_dtype_name(dt))};
    return emit1(c, op, 0, NULL, 3, attrs);
}

static gr_status cv_range(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 3, 3, 1));
    const ox_tensor *t[3];
    static const char *names[3] = {"start", "limit", "delta"};
    bool symbolic = false;
    for (int i = 0; i < 3; i++) {
        int vi = ox_in(c, i);
        const ox_value *v = vi >= 0 ? &c->vals.data[vi] : NULL;
        symbolic |= v && v->konst && ox_tensor_has_sym(v->konst);
    }
    if (symbolic) {
        /* a range over symbolic bounds (position ids: Range(0, seq, 1)): integer bounds as dims */
        gr_dim b[3];
        gr_dtype dt = GR_I64;
        for (int i = 0; i < 3; i++) {
            int vi = ox_in(c, i);
            const ox_tensor *k = vi >= 0 ? c->vals.data[vi].konst : NULL;
            if (!k) return ox_node_error(c, GR_ERR_UNSUPPORTED, "input '%s' must be known at import time", names[i]);
            if (ox_tensor_numel(k) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must be a scalar", names[i]);
            if (i == 0) dt = k->dtype;
            if (!ox_elem_dim(k, 0, &b[i]) || (gr_dtype_is_float(k->dtype) && !ox_elem_sym(k, 0) &&
                                              gr_load_f64(k->data, k->dtype, 0) != (double)b[i].size))
                return ox_node_error(c, GR_ERR_UNSUPPORTED,
                                     "input '%s' depends on the symbolic dims in a way graft cannot express (a range with "
                                     "symbolic bounds needs integer start, limit and delta)",
                                     names[i]);
        }
        if (gr_dx_is_sym(b[2]) || b[2].size == 0)
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "a range with symbolic bounds needs a constant non-zero delta");
        gr_ir_attr attrs[4] = {A_sint("start", GR_IR_ATTR_FLOAT, b[0]), A_sint("limit", GR_IR_ATTR_FLOAT, b[1]),
                               A_sint("delta", GR_IR_ATTR_FLOAT, b[2]), A_str("dtype", gr_dtype_name(dt))};
        return emit1(c, op, 0, NULL, 4, attrs);
    }
    for (int i = 0; i < 3; i++) {
        int vi = ox_in(c, i);
        const ox_value *v = vi >= 0 ? &c->vals.data[vi] : NULL;
        if (v && !v->konst && !v->unavailable) /* the length depends on tensor data: a data-dependent dim */
            return ox_range_runtime(c);
    }
    for (int i = 0; i < 3; i++) {
        GR_TRY(ox_need_const(c, i, names[i], &t[i]));
        if (ox_tensor_numel(t[i]) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must be a scalar", names[i]);
    }
    gr_ir_attr attrs[4] = {A_float("start", gr_load_f64(t[0]->data, t[0]->dtype, 0)),
                           A_float("limit", gr_load_f64(t[1]->data, t[1]->dtype, 0)),
                           A_float("delta", gr_load_f64(t[2]->data, t[2]->dtype, 0)), A_str("dtype", gr_dtype_name(t[0]->dtype))};
    return emit1(c, op, 0, NULL, 4, attrs);
}

static gr_status cv_trilu(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 2, 1));
    int64_t upper;
    gr_dim k = gr_dx_const(0);
    GR_TRY(ox_attr_int(c, "upper", 1, &upper));
    if (ox_in(c, 1) >= 0) {
        int n;
        GR_TRY(ox_need_sints(c, 1, "k", &k, 1, &n));
        if (n != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'k' must be a scalar");
    }
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr attrs[2] = {A_int("upper", upper != 0), A_sint("k", GR_IR_ATTR_INT, k)};
    return emit1(c, op, 1, &x, 2, attrs);
}

static gr_status cv_dropout(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 1, 3, 1));
    if (ox_in(c, 2) >= 0) {
        const ox_tensor *t;
        GR_TRY(ox_need_const(c, 2, "training_mode", &t));
        if (ox_tensor_numel(t) == 1 && gr_load_i64(t->data, t->dtype, 0))
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "training_mode=true is not supported (inference only)");
    }
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const char *names[1];
    out_names_of(c, names, 1);
    int out;
    GR_TRY(emit(c, GR_OP_IDENTITY, 1, &x, 0, NULL, 1, names, true, &out));
    return bind_outputs(c, 1, &out, "is Dropout's mask output, which is not supported");
}

static gr_status cv_cast_like(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 2, 1));
    int vt = ox_in(c, 1);
    if (vt < 0) return ox_node_error(c, GR_ERR_INVALID, "input 1 ('target_type') is required");
    const ox_value *t = &c->vals.data[vt];
    gr_dtype dt;
    if (t->konst) {
        dt = t->konst->dtype;
    } else if (t->ir >= 0 && irv(c, t->ir)->typed) {
        dt = irv(c, t->ir)->dtype;
    } else {
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "the dtype of input 'target_type' (value '%s') is not known", t->name);
    }
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr a = A_str("to", gr_dtype_name(dt));
    return emit1(c, op, 1, &x, 1, &a);
}

/* ---- GatherND, CumSum, Flatten on run-time values: decomposed into IR ops ----------
 * Exporters build attention masks with them on tensors computed at run time
 * (the dynamo exporter's advanced indexing, transformers' packed-sequence
 * detection); on values known at import time onnx-fold.c evaluates them. */

/* A scalar IR value holding d (a symbolic one is a fill evaluated per binding). */
static gr_status dim_scalar_ir(ox_ctx *c, gr_dim d, gr_dtype dt, int *ir) {
    if (!gr_dx_is_sym(d)) return scalar_const_ir(c, dt, (double)d.size, ir);
    gr_ir_attr attrs[3] = {{.name = "shape", .kind = GR_IR_ATTR_INTS, .ints = NULL, .n = 0}, A_sint("value", GR_IR_ATTR_FLOAT, d),
                           A_str("dtype", gr_dtype_name(dt))};
    return emit(c, GR_OP_FILL, 0, NULL, 3, attrs, 1, NULL, false, ir);
}

static gr_status emit2(ox_ctx *c, gr_op op, int a, int b, int *out) {
    int in[2] = {a, b};
    return emit(c, op, 2, in, 0, NULL, 1, NULL, false, out);
}

/* product of dims[lo, hi) (a copy: emitting nodes moves the IR's value array) */
static gr_status dims_product(ox_ctx *c, const gr_dim *dims, int lo, int hi, gr_dim *out) {
    *out = gr_dx_const(1);
    for (int i = lo; i < hi; i++) {
        gr_status st = gr_dx_binary(c->g, GR_DX_MUL, *out, dims[i], out);
        if (st != GR_OK) return ox_node_error(c, st == GR_ERR_NOMEM ? st : GR_ERR_SHAPE, "the product of the input's dims %d..%d is not expressible", lo, hi - 1);
    }
    return GR_OK;
}

/* range(0, n) as i64 (n may be symbolic) */
static gr_status iota_ir(ox_ctx *c, gr_dim n, int *ir) {
    gr_ir_attr ra[4] = {A_sint("start", GR_IR_ATTR_FLOAT, gr_dx_const(0)), A_sint("limit", GR_IR_ATTR_FLOAT, n),
                        A_sint("delta", GR_IR_ATTR_FLOAT, gr_dx_const(1)), A_str("dtype", "i64")};
    return emit(c, GR_OP_RANGE, 0, NULL, 4, ra, 1, NULL, false, ir);
}

/* reshape of x to dims (concrete or symbolic) */
static gr_status reshape_ir(ox_ctx *c, int x, const gr_dim *dims, int n, int *out) {
    int64_t v[GR_MAX_DIMS];
    int32_t e[GR_MAX_DIMS];
    gr_ir_attr a = A_sints("shape", dims, n, v, e);
    return emit(c, GR_OP_RESHAPE, 1, &x, 1, &a, 1, NULL, false, out);
}

static gr_status unsqueeze_ir(ox_ctx *c, int x, int64_t axis, int *out) {
    gr_ir_attr a = A_ints("axes", &axis, 1);
    return emit(c, GR_OP_UNSQUEEZE, 1, &x, 1, &a, 1, NULL, false, out);
}

static gr_status where_ir(ox_ctx *c, int cond, int a, int b, int *out) {
    int in[3] = {cond, a, b};
    return emit(c, GR_OP_WHERE, 3, in, 0, NULL, 1, NULL, false, out);
}

/* Linear indices of ND index tuples: idx [.., k] over dims[0..k) (copies), negative
 * components counted from the end of their dim; *lin is [..] (last axis squeezed). */
static gr_status nd_linear_index(ox_ctx *c, int idx, const gr_dim *dims, int k, int *lin_out) {
    const gr_ir_value *iv = irv(c, idx);
    int q = iv->ndim;
    gr_dtype it = iv->dtype;
    int lin = -1, zero;
    GR_TRY(scalar_const_ir(c, it, 0.0, &zero));
    for (int j = 0; j < k; j++) {
        int64_t st_ = j, en = j + 1, ax = q - 1;
        gr_ir_attr sl[3] = {A_ints("starts", &st_, 1), A_ints("ends", &en, 1), A_ints("axes", &ax, 1)};
        int comp, neg, dj, wrapped, in3[3];
        GR_TRY(emit(c, GR_OP_SLICE, 1, &idx, 3, sl, 1, NULL, false, &comp));
        GR_TRY(emit2(c, GR_OP_LESS, comp, zero, &neg));
        GR_TRY(dim_scalar_ir(c, dims[j], it, &dj));
        GR_TRY(emit2(c, GR_OP_ADD, comp, dj, &wrapped));
        in3[0] = neg, in3[1] = wrapped, in3[2] = comp;
        GR_TRY(emit(c, GR_OP_WHERE, 3, in3, 0, NULL, 1, NULL, false, &comp));
        gr_dim stride;
        GR_TRY(dims_product(c, dims, j + 1, k, &stride));
        if (gr_dx_is_sym(stride) || stride.size != 1) {
            int s;
            GR_TRY(dim_scalar_ir(c, stride, it, &s));
            GR_TRY(emit2(c, GR_OP_MUL, comp, s, &comp));
        }
        if (lin < 0) lin = comp;
        else GR_TRY(emit2(c, GR_OP_ADD, lin, comp, &lin));
    }
    int64_t last = q - 1;
    gr_ir_attr sq = A_ints("axes", &last, 1);
    return emit(c, GR_OP_SQUEEZE, 1, &lin, 1, &sq, 1, NULL, false, lin_out);
}

/* GatherND(data, indices; batch_dims b): data's dims [b, b+k) flattened with its b
 * batch dims into one, the index tuples turned into linear indices (plus the
 * batch's offset, batch_id * prod(dims[b, b+k))), then one Gather along axis 0. */
static gr_status cv_gather_nd(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 2, 2, 1));
    int64_t batch_dims;
    GR_TRY(ox_attr_int(c, "batch_dims", 0, &batch_dims));
    int data, idx;
    GR_TRY(in_ir(c, 0, &data));
    GR_TRY(in_ir(c, 1, &idx));
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx);
    if (!dv->typed || !iv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shapes of the inputs are not known");
    if (!gr_dtype_is_int(iv->dtype) || iv->ndim < 1) return ox_node_error(c, GR_ERR_SHAPE, "indices must be integers of rank >= 1");
    int r = dv->ndim, q = iv->ndim;
    if (batch_dims < 0 || batch_dims >= q || batch_dims >= r)
        return ox_node_error(c, GR_ERR_SHAPE, "batch_dims=%lld must be below the ranks of data (%d) and indices (%d)", (long long)batch_dims, r, q);
    int b = (int)batch_dims;
    gr_dim kd = iv->dims[q - 1];
    if (gr_dx_is_sym(kd)) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the indices' last dim (the index tuple length) must be concrete");
    int k = (int)kd.size;
    if (k < 1 || k > r - b) return ox_node_error(c, GR_ERR_SHAPE, "index tuples of length %d for data of rank %d with %d batch dims", k, r, b);
    if (q - 1 + r - k - b > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the result has more than %d dims", GR_MAX_DIMS);
    gr_dim ddims[GR_MAX_DIMS], idims[GR_MAX_DIMS];
    for (int i = 0; i < r; i++) ddims[i] = dv->dims[i];
    for (int i = 0; i < q; i++) idims[i] = iv->dims[i];
    for (int i = 0; i < b; i++)
        if (!gr_dx_equal(ddims[i], idims[i]) && !gr_dx_is_sym(ddims[i]) && !gr_dx_is_sym(idims[i]))
            return ox_node_error(c, GR_ERR_SHAPE, "batch dim %d differs: data %lld, indices %lld", i, (long long)ddims[i].size, (long long)idims[i].size);
    gr_dtype it = iv->dtype;
    int flat = data;
    if (k + b > 1) { /* [d0*...*d(b+k-1), d(b+k), ...] */
        gr_dim shape[GR_MAX_DIMS];
        GR_TRY(dims_product(c, ddims, 0, b + k, &shape[0]));
        for (int i = b + k; i < r; i++) shape[i - b - k + 1] = ddims[i];
        GR_TRY(reshape_ir(c, data, shape, r - b - k + 1, &flat));
    }
    int lin;
    GR_TRY(nd_linear_index(c, idx, ddims + b, k, &lin));
    if (b > 0) { /* + batch_id * prod(dims[b, b+k)), batch_id shaped [B0..B(b-1), 1, ...] */
        gr_dim nb, per, bshape[GR_MAX_DIMS];
        GR_TRY(dims_product(c, ddims, 0, b, &nb));
        GR_TRY(dims_product(c, ddims, b, b + k, &per));
        int bid, ps;
        GR_TRY(iota_ir(c, nb, &bid));
        if (it != GR_I64) {
            gr_ir_attr to = A_str("to", gr_dtype_name(it));
            GR_TRY(emit(c, GR_OP_CAST, 1, &bid, 1, &to, 1, NULL, false, &bid));
        }
        GR_TRY(dim_scalar_ir(c, per, it, &ps));
        GR_TRY(emit2(c, GR_OP_MUL, bid, ps, &bid));
        for (int i = 0; i < b; i++) bshape[i] = ddims[i];
        for (int i = b; i < q - 1; i++) bshape[i] = gr_dx_const(1);
        GR_TRY(reshape_ir(c, bid, bshape, q - 1, &bid));
        GR_TRY(emit2(c, GR_OP_ADD, lin, bid, &lin));
    }
    int in[2] = {flat, lin};
    gr_ir_attr ga = A_int("axis", 0);
    return emit1(c, GR_OP_GATHER, 2, in, 1, &ga);
}

/* CumSum(x, axis; exclusive, reverse) as a masked sum: out[.., i] = sum_j M[i, j] x[.., j]
 * with M[i, j] = j <= i (j < i exclusive; j >= i, j > i reversed), M built
 * from a range over the (possibly symbolic) length n. O(n^2) work: the scans
 * exporters emit run over sequence positions of a mask. */
static gr_status cv_cumsum(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 2, 2, 1));
    int64_t exclusive, reverse, axis;
    int na;
    GR_TRY(ox_attr_int(c, "exclusive", 0, &exclusive));
    GR_TRY(ox_attr_int(c, "reverse", 0, &reverse));
    GR_TRY(ox_need_ints(c, 1, "axis", &axis, 1, &na));
    if (na != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'axis' must be a scalar");
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int rank = xv->ndim;
    if (rank < 1 || rank + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "CumSum of a rank-%d tensor is not supported", rank);
    if (axis < -rank || axis >= rank) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, rank);
    int a = (int)(axis < 0 ? axis + rank : axis);
    if (xv->dtype == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "CumSum of bool");
    gr_dtype dt = xv->dtype;
    gr_dim n = xv->dims[a];
    int range, ri, rj, mask, xt = x, xe, zero, prod, sum;
    gr_ir_attr ra[4] = {A_sint("start", GR_IR_ATTR_FLOAT, gr_dx_const(0)), A_sint("limit", GR_IR_ATTR_FLOAT, n),
                        A_sint("delta", GR_IR_ATTR_FLOAT, gr_dx_const(1)), A_str("dtype", "i64")};
    GR_TRY(emit(c, GR_OP_RANGE, 0, NULL, 4, ra, 1, NULL, false, &range));
    int64_t one = 1, zero_ax = 0;
    gr_ir_attr u1 = A_ints("axes", &one, 1), u0 = A_ints("axes", &zero_ax, 1);
    GR_TRY(emit(c, GR_OP_UNSQUEEZE, 1, &range, 1, &u1, 1, NULL, false, &ri)); /* [n, 1]: i */
    GR_TRY(emit(c, GR_OP_UNSQUEEZE, 1, &range, 1, &u0, 1, NULL, false, &rj)); /* [1, n]: j */
    gr_op cmp = reverse ? (exclusive ? GR_OP_GREATER : GR_OP_GREATER_EQUAL) : (exclusive ? GR_OP_LESS : GR_OP_LESS_EQUAL);
    GR_TRY(emit2(c, cmp, rj, ri, &mask));
    int64_t perm[GR_MAX_DIMS], inv[GR_MAX_DIMS];
    for (int i = 0, k = 0; i < rank; i++)
        if (i != a) perm[k++] = i;
    perm[rank - 1] = a;
    for (int i = 0; i < rank; i++) inv[perm[i]] = i;
    if (a != rank - 1) {
        gr_ir_attr p = A_ints("perm", perm, rank);
        GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &x, 1, &p, 1, NULL, false, &xt));
    }
    int64_t before_last = rank - 1;
    gr_ir_attr ue = A_ints("axes", &before_last, 1);
    GR_TRY(emit(c, GR_OP_UNSQUEEZE, 1, &xt, 1, &ue, 1, NULL, false, &xe)); /* [.., 1, n] */
    GR_TRY(scalar_const_ir(c, dt, 0.0, &zero));
    int w[3] = {mask, xe, zero};
    GR_TRY(emit(c, GR_OP_WHERE, 3, w, 0, NULL, 1, NULL, false, &prod)); /* [.., n, n] */
    int64_t lastax = -1;
    gr_ir_attr rs[2] = {A_ints("axes", &lastax, 1), A_int("keepdims", 0)};
    if (a == rank - 1 && gr_dtype_is_float(dt)) return emit1(c, GR_OP_REDUCE_SUM, 1, &prod, 2, rs);
    GR_TRY(emit(c, GR_OP_REDUCE_SUM, 1, &prod, 2, rs, 1, NULL, false, &sum));
    if (!gr_dtype_is_float(dt) && dt != GR_I64) { /* integer sums accumulate in i64 */
        gr_ir_attr to = A_str("to", gr_dtype_name(dt));
        if (a == rank - 1) return emit1(c, GR_OP_CAST, 1, &sum, 1, &to);
        GR_TRY(emit(c, GR_OP_CAST, 1, &sum, 1, &to, 1, NULL, false, &sum));
    }
    if (a == rank - 1) return emit1(c, GR_OP_IDENTITY, 1, &sum, 0, NULL);
    gr_ir_attr p = A_ints("perm", inv, rank);
    return emit1(c, GR_OP_TRANSPOSE, 1, &sum, 1, &p);
}

/* Flatten(x; axis): reshape to [d0*..*d(axis-1), d(axis)*..] (symbolic products allowed) */
static gr_status cv_flatten(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", 1, &axis));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int r = xv->ndim;
    if (axis < -r || axis > r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    gr_dim shape[2], xdims[GR_MAX_DIMS];
    for (int i = 0; i < r; i++) xdims[i] = xv->dims[i];
    GR_TRY(dims_product(c, xdims, 0, a, &shape[0]));
    GR_TRY(dims_product(c, xdims, a, r, &shape[1]));
    int64_t sv[2];
    int32_t se[2];
    gr_ir_attr at = A_sints("shape", shape, 2, sv, se);
    return emit1(c, op, 1, &x, 1, &at);
}


/* ---- sequences: SplitToSequence read by SequenceAt (how exporters write torch.split) -------- */
static gr_status cv_split_to_sequence(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 2, 1));
    int64_t axis, keepdims;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    GR_TRY(ox_attr_int(c, "keepdims", 1, &keepdims));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int64_t ax = axis < 0 ? axis + xv->ndim : axis;
    if (ax < 0 || ax >= xv->ndim) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, xv->ndim);
    if (gr_dx_is_sym(xv->dims[ax]) || xv->dims[ax].size < 0)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "splitting along a symbolic dim is not supported");
    int64_t d = xv->dims[ax].size, sizes[64];
    int n = 0;
    bool squeeze = false;
    if (ox_in(c, 1) >= 0) {
        const ox_tensor *t;
        GR_TRY(ox_need_const(c, 1, "split", &t));
        if (!gr_dtype_is_int(t->dtype) || t->ndim > 1) return ox_node_error(c, GR_ERR_INVALID, "input 'split' must be an integer scalar or list");
        int64_t ne = ox_tensor_numel(t);
        if (t->ndim == 0) {
            int64_t chunk = gr_load_i64(t->data, t->dtype, 0);
            if (chunk <= 0) return ox_node_error(c, GR_ERR_INVALID, "split size must be positive");
            for (int64_t left = d; left > 0; left -= chunk) {
                if (n == 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 parts");
                sizes[n++] = left < chunk ? left : chunk;
            }
        } else {
            if (ne > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 parts");
            int64_t sum = 0;
            for (int64_t i = 0; i < ne; i++) {
                sizes[n++] = gr_load_i64(t->data, t->dtype, i);
                if (sizes[n - 1] < 0) return ox_node_error(c, GR_ERR_INVALID, "negative split size");
                sum += sizes[n - 1];
            }
            if (sum != d) return ox_node_error(c, GR_ERR_SHAPE, "split sizes add up to %lld, the dim is %lld", (long long)sum, (long long)d);
        }
    } else {
        if (d > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 parts");
        for (int64_t i = 0; i < d; i++) sizes[n++] = 1;
        squeeze = !keepdims;
    }
    if (n == 0) return ox_node_error(c, GR_ERR_UNSUPPORTED, "an empty sequence is not supported");
    gr_ir_attr attrs[2] = {A_int("axis", ax), A_ints("split", sizes, n)};
    int outs[64];
    GR_TRY(emit(c, op, 1, &x, 2, attrs, n, NULL, false, outs));
    for (int i = 0; squeeze && i < n; i++) {
        gr_ir_attr a = A_ints("axes", &ax, 1);
        GR_TRY(emit(c, GR_OP_SQUEEZE, 1, &outs[i], 1, &a, 1, NULL, false, &outs[i]));
    }
    const char *name = c->node->n_output ? S(c->node->output[0]) : "";
    if (!*name) return GR_OK;
    return ox_define_seq(c, name, outs, n);
}

static gr_status cv_sequence_at(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 2, 1));
    int vs = ox_in(c, 0);
    if (vs < 0) return ox_node_error(c, GR_ERR_INVALID, "input 0 ('input_sequence') is required");
    const ox_value *sv = &c->vals.data[vs];
    if (!sv->seq)
        return ox_node_error(c, GR_ERR_UNSUPPORTED,
                             "input 'input_sequence' (value '%s') is not a sequence graft knows: only SplitToSequence "
                             "outputs are supported",
                             sv->name);
    int64_t pos;
    int n;
    GR_TRY(ox_need_ints(c, 1, "position", &pos, 1, &n));
    if (n != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'position' must be a scalar");
    if (pos < 0) pos += sv->n_seq;
    if (pos < 0 || pos >= sv->n_seq)
        return ox_node_error(c, GR_ERR_SHAPE, "position %lld out of range for a sequence of %d tensors", (long long)pos, sv->n_seq);
    int x = sv->seq[pos];
    return emit1(c, op, 1, &x, 0, NULL);
}

/* ==== shared with the other converter files (thin exports of the helpers above) ======================================== */
gr_status ox_in_ir(ox_ctx *c, int i, int *ir) { return in_ir(c, i, ir); }
gr_status ox_emit(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, int n_out,
                  const char *const *out_names, bool last, int *outs) {
    return emit(c, op, n_in, in, n_attr, attrs, n_out, out_names, last, outs);
}
gr_status ox_emit1(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs) {
    return emit1(c, op, n_in, in, n_attr, attrs);
}
gr_status ox_bind_outputs(ox_ctx *c, int n, const int *irs, const char *why) { return bind_outputs(c, n, irs, why); }
void ox_out_names(const ox_ctx *c, const char **names, int n) { out_names_of(c, names, n); }
gr_status ox_check_arity(ox_ctx *c, int min_in, int max_in, int min_out) { return check_arity(c, min_in, max_in, min_out); }
gr_status ox_scalar_const_ir(ox_ctx *c, gr_dtype dt, double v, int *ir) { return scalar_const_ir(c, dt, v, ir); }
/* ...and with onnx-einsum.c, onnx-breadth.c, onnx-control.c */
gr_status ox_const_ir(ox_ctx *c, ox_tensor *t, int *ir) { return const_ir(c, t, ir); }
gr_status ox_emit2(ox_ctx *c, gr_op op, int a, int b, int *out) { return emit2(c, op, a, b, out); }
gr_status ox_iota_ir(ox_ctx *c, gr_dim n, int *ir) { return iota_ir(c, n, ir); }
gr_status ox_reshape_ir(ox_ctx *c, int x, const gr_dim *dims, int n, int *out) { return reshape_ir(c, x, dims, n, out); }
gr_status ox_unsqueeze_ir(ox_ctx *c, int x, int64_t axis, int *out) { return unsqueeze_ir(c, x, axis, out); }
gr_status ox_where_ir(ox_ctx *c, int cond, int a, int b, int *out) { return where_ir(c, cond, a, b, out); }
gr_status ox_dims_product(ox_ctx *c, const gr_dim *dims, int lo, int hi, gr_dim *out) { return dims_product(c, dims, lo, hi, out); }
gr_status ox_dim_scalar_ir(ox_ctx *c, gr_dim d, gr_dtype dt, int *ir) { return dim_scalar_ir(c, d, dt, ir); }
gr_status ox_nd_linear_index(ox_ctx *c, int idx, const gr_dim *dims, int k, int *lin) { return nd_linear_index(c, idx, dims, k, lin); }
gr_status ox_check_target_sshape(ox_ctx *c, const char *what, const gr_dim *dims, int n) { return check_target_sshape(c, what, dims, n); }
gr_ir_attr ox_attr_sints(const char *name, const gr_dim *d, int n, int64_t *v, int32_t *e) { return A_sints(name, d, n, v, e); }

/* ==== the table ========================================================================================== */
static const struct {
    const char *onnx;
    gr_op op;
    cv_fn fn;
} op_table[] = {
    {"Add", GR_OP_ADD, cv_simple},
    {"Sub", GR_OP_SUB, cv_simple},
    {"Mul", GR_OP_MUL, cv_simple},
    {"Div", GR_OP_DIV, cv_simple},
    {"Pow", GR_OP_POW, cv_pow},
    {"Neg", GR_OP_NEG, cv_simple},
    {"Abs", GR_OP_ABS, cv_simple},
    {"Sqrt", GR_OP_SQRT, cv_simple},
    {"Reciprocal", GR_OP_RECIPROCAL, cv_simple},
    {"Exp", GR_OP_EXP, cv_simple},
    {"Log", GR_OP_LOG, cv_simple},
    {"Tanh", GR_OP_TANH, cv_simple},
    {"Erf", GR_OP_ERF, cv_simple},
    {"Sigmoid", GR_OP_SIGMOID, cv_simple},
    {"Relu", GR_OP_RELU, cv_simple},
    {"Sin", GR_OP_SIN, cv_simple},
    {"Cos", GR_OP_COS, cv_simple},
    {"Softplus", GR_OP_SOFTPLUS, cv_simple},
    {"Selu", GR_OP_SELU, cv_selu},
    {"Gelu", GR_OP_GELU, cv_gelu},
    {"Min", GR_OP_MIN, cv_variadic},
    {"Max", GR_OP_MAX, cv_variadic},
    {"Where", GR_OP_WHERE, cv_simple},
    {"Equal", GR_OP_EQUAL, cv_simple},
    {"Less", GR_OP_LESS, cv_simple},
    {"LessOrEqual", GR_OP_LESS_EQUAL, cv_simple},
    {"Greater", GR_OP_GREATER, cv_simple},
    {"GreaterOrEqual", GR_OP_GREATER_EQUAL, cv_simple},
    {"Not", GR_OP_NOT, cv_simple},
    {"And", GR_OP_AND, cv_simple},
    {"Or", GR_OP_OR, cv_simple},
    {"IsNaN", GR_OP_ISNAN, cv_simple},
    {"Cast", GR_OP_CAST, cv_cast},
    {"CastLike", GR_OP_CAST, cv_cast_like},
    {"CumSum", GR_OP_IDENTITY, cv_cumsum},
    {"GatherND", GR_OP_GATHER, cv_gather_nd},
    {"Flatten", GR_OP_RESHAPE, cv_flatten},
    {"SplitToSequence", GR_OP_SPLIT, cv_split_to_sequence},
    {"SequenceAt", GR_OP_IDENTITY, cv_sequence_at},
    {"MatMul", GR_OP_MATMUL, cv_simple},
    {"Gemm", GR_OP_MATMUL, cv_gemm},
    {"Softmax", GR_OP_SOFTMAX, cv_softmax},
    {"LayerNormalization", GR_OP_LAYER_NORM, cv_layer_norm},
    {"ReduceMean", GR_OP_REDUCE_MEAN, cv_reduce},
    {"ReduceSum", GR_OP_REDUCE_SUM, cv_reduce},
    {"ReduceMax", GR_OP_REDUCE_MAX, cv_reduce},
    {"ReduceMin", GR_OP_REDUCE_MIN, cv_reduce},
    {"Reshape", GR_OP_RESHAPE, cv_reshape},
    {"Transpose", GR_OP_TRANSPOSE, cv_transpose},
    {"Unsqueeze", GR_OP_UNSQUEEZE, cv_squeeze},
    {"Squeeze", GR_OP_SQUEEZE, cv_squeeze},
    {"Concat", GR_OP_CONCAT, cv_axis_op},
    {"Slice", GR_OP_SLICE, cv_slice},
    {"Split", GR_OP_SPLIT, cv_split},
    {"Gather", GR_OP_GATHER, cv_axis_op},
    {"GatherElements", GR_OP_GATHER_ELEMENTS, cv_axis_op},
    {"Expand", GR_OP_EXPAND, cv_expand},
    {"Shape", GR_OP_IDENTITY, cv_shape},
    {"Size", GR_OP_IDENTITY, cv_shape},
    {"ConstantOfShape", GR_OP_FILL, cv_constant_of_shape},
    {"Range", GR_OP_RANGE, cv_range},
    {"Constant", GR_OP_IDENTITY, cv_constant},
    {"Identity", GR_OP_IDENTITY, cv_simple},
    {"Dropout", GR_OP_IDENTITY, cv_dropout},
    {"Trilu", GR_OP_TRILU, cv_trilu},
    {"Einsum", GR_OP_MATMUL, ox_cv_einsum},
    {"ArgMax", GR_OP_ARG_MAX, ox_cv_arg},
    {"ArgMin", GR_OP_ARG_MIN, ox_cv_arg},
    {"Mod", GR_OP_MOD, ox_cv_mod},
    {"Floor", GR_OP_FLOOR, cv_simple},
    {"Ceil", GR_OP_CEIL, cv_simple},
    {"Clip", GR_OP_MIN, ox_cv_clip},
    {"HardSigmoid", GR_OP_MIN, ox_cv_hard_sigmoid},
    {"HardSwish", GR_OP_MUL, ox_cv_hard_swish},
    {"LeakyRelu", GR_OP_WHERE, ox_cv_leaky_relu},
    {"PRelu", GR_OP_WHERE, ox_cv_prelu},
    {"Elu", GR_OP_WHERE, ox_cv_elu},
    {"Celu", GR_OP_ADD, ox_cv_celu},
    {"Softsign", GR_OP_DIV, ox_cv_softsign},
    {"Mish", GR_OP_MUL, ox_cv_mish},
    {"ThresholdedRelu", GR_OP_WHERE, ox_cv_thresholded_relu},
    {"Sign", GR_OP_WHERE, ox_cv_sign},
    {"Round", GR_OP_WHERE, ox_cv_round},
    {"Sum", GR_OP_ADD, ox_cv_sum},
    {"Mean", GR_OP_ADD, ox_cv_mean},
    {"LogSoftmax", GR_OP_SUB, ox_cv_log_softmax},
    {"Tile", GR_OP_EXPAND, ox_cv_tile},
    {"OneHot", GR_OP_WHERE, ox_cv_one_hot},
    {"TopK", GR_OP_GATHER_ELEMENTS, ox_cv_top_k},
    {"NonZero", GR_OP_IDENTITY, ox_cv_nonzero},
    {"ReduceProd", GR_OP_REDUCE_PROD, cv_reduce},
    {"ScatterElements", GR_OP_WHERE, ox_cv_scatter_elements},
    {"ScatterND", GR_OP_WHERE, ox_cv_scatter_nd},
    {"If", GR_OP_IF, ox_cv_if},
    {"Loop", GR_OP_IDENTITY, ox_cv_loop},
    {"Scan", GR_OP_IDENTITY, ox_cv_scan},
    {"Conv", GR_OP_CONV, ox_cv_conv},
    {"ConvTranspose", GR_OP_CONV_TRANSPOSE, ox_cv_conv_transpose},
    {"MaxPool", GR_OP_MAX_POOL, ox_cv_pool},
    {"AveragePool", GR_OP_AVG_POOL, ox_cv_pool},
    {"GlobalAveragePool", GR_OP_REDUCE_MEAN, ox_cv_global_pool},
    {"GlobalMaxPool", GR_OP_REDUCE_MAX, ox_cv_global_pool},
    {"BatchNormalization", GR_OP_MUL, ox_cv_batch_norm},
    {"InstanceNormalization", GR_OP_LAYER_NORM, ox_cv_instance_norm},
    {"GroupNormalization", GR_OP_LAYER_NORM, ox_cv_group_norm},
    {"Pad", GR_OP_PAD, ox_cv_pad},
    {"Resize", GR_OP_RESIZE, ox_cv_resize},
};

gr_status ox_convert_node(ox_ctx *c) {
    const char *op_type = c->node->op_type;
    for (int i = 0; i < GR_ARRAY_LEN(op_table); i++)
        if (!strcmp(op_table[i].onnx, op_type)) return op_table[i].fn(c, op_table[i].op);
    return gr_error(GR_ERR_UNSUPPORTED, "node '%s' op '%s' (domain '%s') is not supported", c->node_name, op_type, S(c->node->domain));
}
