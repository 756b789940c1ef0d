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
        if (v && !v->konst && !v->unavailable) /* the length, ceil((limit - start) / delta), is not known when planning */
            return ox_node_error(c, GR_ERR_UNSUPPORTED,
                                 "input '%s' (value '%s') must be a constant at import time (or computed from shapes): "
                                 "computed at run time, it makes the output length max(ceil((limit - start) / delta), 0) "
                                 "depend on tensor data, a data-dependent shape that a static memory plan cannot hold; "
                                 "not supported",
                                 names[i], v->name);
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

/* ---- Einsum ------------------------------------------------------------------------------
 * The batched-matmul forms transformer exports use map to one matmul node
 * (cv_einsum); every other valid equation goes through einsum_general, which
 * lowers it at import to diagonals (a gather of the flattened pair of dims),
 * sums of labels nothing else needs, and a left-to-right chain of pairwise
 * contractions (transposes and reshapes around one batched matmul for float
 * dtypes, a broadcast multiply and a sum for integers), then a final transpose. */

/* Labels: 'a'..'z' are 0..25, 'A'..'Z' 26..51; ellipsis dims 52 + (position from the right). */
#define EIN_LABELS (52 + GR_MAX_DIMS)
typedef struct {
    int ir;
    int n;
    int lab[GR_MAX_DIMS];
} ein_op;

static int ein_axis(const ein_op *o, int l) {
    for (int i = 0; i < o->n; i++)
        if (o->lab[i] == l) return i;
    return -1;
}

static gr_status ein_transpose(ox_ctx *c, ein_op *o, const int *order) {
    bool same = true;
    int64_t perm[GR_MAX_DIMS];
    int lab[GR_MAX_DIMS];
    for (int i = 0; i < o->n; i++) {
        perm[i] = order[i];
        lab[i] = o->lab[order[i]];
        same &= order[i] == i;
    }
    if (same) return GR_OK;
    gr_ir_attr p = A_ints("perm", perm, o->n);
    GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &o->ir, 1, &p, 1, NULL, false, &o->ir));
    memcpy(o->lab, lab, sizeof lab);
    return GR_OK;
}

/* Takes the diagonal of the two axes p < q of o (equal sizes, concrete): the pair
 * moved last, flattened to n*n, gathered at i*(n+1); the label ends up last. */
static gr_status ein_diagonal(ox_ctx *c, ein_op *o, int p, int q, const char *eq) {
    gr_dim dp = irv(c, o->ir)->dims[p], dq = irv(c, o->ir)->dims[q];
    if (gr_dx_is_sym(dp) || gr_dx_is_sym(dq))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': a repeated index over a symbolic dim is not supported", eq);
    if (dp.size != dq.size)
        return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': a repeated index spans dims of sizes %lld and %lld", eq, (long long)dp.size, (long long)dq.size);
    int order[GR_MAX_DIMS], k = 0;
    for (int i = 0; i < o->n; i++)
        if (i != p && i != q) order[k++] = i;
    order[k++] = p;
    order[k++] = q;
    GR_TRY(ein_transpose(c, o, order));
    int64_t n = dp.size;
    gr_dim shape[GR_MAX_DIMS];
    for (int i = 0; i < o->n - 2; i++) shape[i] = irv(c, o->ir)->dims[i];
    shape[o->n - 2] = gr_dx_const(n * n);
    GR_TRY(reshape_ir(c, o->ir, shape, o->n - 1, &o->ir));
    ox_tensor *t;
    GR_TRY(ox_tensor_new(GR_I64, 1, &n, &t));
    for (int64_t i = 0; i < n; i++) ((int64_t *)t->data)[i] = i * (n + 1);
    int idx;
    GR_TRY(const_ir(c, t, &idx));
    int in[2] = {o->ir, idx};
    gr_ir_attr ga = A_int("axis", o->n - 2);
    GR_TRY(emit(c, GR_OP_GATHER, 2, in, 1, &ga, 1, NULL, false, &o->ir));
    o->n--; /* the labels were [.., l, l]: one l is left, last */
    return GR_OK;
}

/* Sums the labels of o that `needed` does not mark (keepdims 0). */
static gr_status ein_sum_unneeded(ox_ctx *c, ein_op *o, const bool *needed) {
    int64_t axes[GR_MAX_DIMS];
    int na = 0, k = 0, lab[GR_MAX_DIMS];
    for (int i = 0; i < o->n; i++) {
        if (!needed[o->lab[i]]) axes[na++] = i;
        else lab[k++] = o->lab[i];
    }
    if (!na) return GR_OK;
    gr_ir_attr rs[2] = {A_ints("axes", axes, na), A_int("keepdims", 0)};
    GR_TRY(emit(c, GR_OP_REDUCE_SUM, 1, &o->ir, 2, rs, 1, NULL, false, &o->ir));
    memcpy(o->lab, lab, sizeof lab);
    o->n = k;
    return GR_OK;
}

static gr_status ein_dims_product(ox_ctx *c, const ein_op *o, const int *labs, int n, gr_dim *out) {
    gr_dim d[GR_MAX_DIMS];
    for (int i = 0; i < n; i++) d[i] = irv(c, o->ir)->dims[ein_axis(o, labs[i])];
    return dims_product(c, d, 0, n, out);
}

/* a := contraction of a and b over their shared labels that `kept` does not mark. */
static gr_status ein_pair(ox_ctx *c, ein_op *a, ein_op *b, const bool *kept, const char *eq) {
    int batch[GR_MAX_DIMS], contr[GR_MAX_DIMS], ao[GR_MAX_DIMS], bo[GR_MAX_DIMS];
    int nb = 0, nc = 0, na = 0, nbo = 0;
    for (int i = 0; i < a->n; i++) {
        int l = a->lab[i];
        if (ein_axis(b, l) < 0) ao[na++] = l;
        else if (kept[l]) batch[nb++] = l;
        else contr[nc++] = l;
    }
    for (int i = 0; i < b->n; i++)
        if (ein_axis(a, b->lab[i]) < 0) bo[nbo++] = b->lab[i];
    if (nb + na + nbo > GR_MAX_DIMS || nb + na + nbo + nc > GR_MAX_DIMS + 2)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': an intermediate has more than %d dims", eq, GR_MAX_DIMS);
    gr_dtype dt = irv(c, a->ir)->dtype;
    gr_dim rdims[GR_MAX_DIMS];
    int rl[GR_MAX_DIMS], nr = 0;
    for (int i = 0; i < nb; i++) rl[nr] = batch[i], rdims[nr++] = irv(c, a->ir)->dims[ein_axis(a, batch[i])];
    for (int i = 0; i < na; i++) rl[nr] = ao[i], rdims[nr++] = irv(c, a->ir)->dims[ein_axis(a, ao[i])];
    for (int i = 0; i < nbo; i++) rl[nr] = bo[i], rdims[nr++] = irv(c, b->ir)->dims[ein_axis(b, bo[i])];
    int order[GR_MAX_DIMS], k = 0;
    if (gr_dtype_is_float(dt)) { /* [B, M, K] @ [B, K, N] */
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(a, batch[i]);
        for (int i = 0; i < na; i++) order[k++] = ein_axis(a, ao[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(a, contr[i]);
        GR_TRY(ein_transpose(c, a, order));
        k = 0;
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(b, batch[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(b, contr[i]);
        for (int i = 0; i < nbo; i++) order[k++] = ein_axis(b, bo[i]);
        GR_TRY(ein_transpose(c, b, order));
        gr_dim B, M, K, N, sa[3], sb[3];
        GR_TRY(ein_dims_product(c, a, batch, nb, &B));
        GR_TRY(ein_dims_product(c, a, ao, na, &M));
        GR_TRY(ein_dims_product(c, a, contr, nc, &K));
        GR_TRY(ein_dims_product(c, b, bo, nbo, &N));
        sa[0] = B, sa[1] = M, sa[2] = K, sb[0] = B, sb[1] = K, sb[2] = N;
        int ra, rb, mm;
        GR_TRY(reshape_ir(c, a->ir, sa, 3, &ra));
        GR_TRY(reshape_ir(c, b->ir, sb, 3, &rb));
        GR_TRY(emit2(c, GR_OP_MATMUL, ra, rb, &mm));
        GR_TRY(reshape_ir(c, mm, rdims, nr, &a->ir));
    } else { /* a [batch, ao, 1.., contr] * b [batch, 1.., bo, contr], summed over contr */
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(a, batch[i]);
        for (int i = 0; i < na; i++) order[k++] = ein_axis(a, ao[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(a, contr[i]);
        GR_TRY(ein_transpose(c, a, order));
        k = 0;
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(b, batch[i]);
        for (int i = 0; i < nbo; i++) order[k++] = ein_axis(b, bo[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(b, contr[i]);
        GR_TRY(ein_transpose(c, b, order));
        gr_dim sa[GR_MAX_DIMS], sb[GR_MAX_DIMS];
        int n = 0;
        if (nr + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': an intermediate has more than %d dims", eq, GR_MAX_DIMS);
        gr_dim C;
        GR_TRY(ein_dims_product(c, a, contr, nc, &C));
        for (int i = 0; i < nb; i++) sa[n] = rdims[n], sb[n] = rdims[n], n++;
        for (int i = 0; i < na; i++) sa[n] = rdims[n], sb[n] = gr_dx_const(1), n++;
        for (int i = 0; i < nbo; i++) sa[n] = gr_dx_const(1), sb[n] = rdims[n], n++;
        sa[n] = C, sb[n] = C, n++;
        int ra, rb, prod;
        GR_TRY(reshape_ir(c, a->ir, sa, n, &ra));
        GR_TRY(reshape_ir(c, b->ir, sb, n, &rb));
        GR_TRY(emit2(c, GR_OP_MUL, ra, rb, &prod));
        int64_t lastax = n - 1;
        gr_ir_attr rs[2] = {A_ints("axes", &lastax, 1), A_int("keepdims", 0)};
        GR_TRY(emit(c, GR_OP_REDUCE_SUM, 1, &prod, 2, rs, 1, NULL, false, &a->ir));
    }
    memcpy(a->lab, rl, sizeof rl);
    a->n = nr;
    return GR_OK;
}

/* Parses one term ("ab...c") of an operand of rank `rank` into labels; n_ell: the
 * ellipsis rank (out), -1 without an ellipsis. */
static gr_status ein_term(ox_ctx *c, const char *eq, const char *t, size_t len, int rank, int *lab, int *n, int *n_ell) {
    int letters = 0;
    bool ell = false;
    for (size_t i = 0; i < len; i++) {
        char ch = t[i];
        if (ch == '.') {
            if (ell || i + 2 >= len || t[i + 1] != '.' || t[i + 2] != '.')
                return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': a malformed ellipsis", eq);
            ell = true;
            i += 2;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            letters++;
        } else {
            return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': '%c' is not an index letter", eq, ch);
        }
    }
    int e = ell ? rank - letters : 0;
    if (rank >= 0 && (e < 0 || (!ell && letters != rank)))
        return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': a term with %d indices for an operand of rank %d", eq, letters, rank);
    if (letters + e > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d dims", eq, GR_MAX_DIMS);
    *n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = t[i];
        if (ch == '.') {
            for (int j = 0; j < e; j++) lab[(*n)++] = 52 + (e - 1 - j);
            i += 2;
        } else {
            lab[(*n)++] = ch >= 'a' ? ch - 'a' : 26 + ch - 'A';
        }
    }
    *n_ell = ell ? e : -1;
    return GR_OK;
}

static gr_status einsum_general(ox_ctx *c) {
    char eq[512];
    const Onnx__AttributeProto *at = ox_attr(c, "equation");
    if (!at || !at->has_s) return ox_node_error(c, GR_ERR_INVALID, "attribute 'equation' is required");
    if (at->s.len >= sizeof eq) return ox_node_error(c, GR_ERR_UNSUPPORTED, "equation longer than %zu characters", sizeof eq - 1);
    GR_TRY(ox_attr_string(c, "equation", "", eq, sizeof eq));
    size_t w = 0;
    for (size_t r = 0; eq[r]; r++)
        if (eq[r] != ' ') eq[w++] = eq[r];
    eq[w] = 0;
    int nin = ox_n_in(c);
    if (nin < 1 || nin > 16) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum of %d operands (1 to 16 are supported)", nin);
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    if (arrow && strstr(arrow + 2, "->")) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': more than one '->'", eq);
    ein_op ops[16];
    int count[EIN_LABELS] = {0}, max_ell = 0;
    gr_dim size[EIN_LABELS];
    bool has_size[EIN_LABELS] = {false};
    const char *t = eq;
    for (int i = 0; i < nin; i++) {
        const char *end = memchr(t, ',', lhs_len - (size_t)(t - eq));
        size_t len = end ? (size_t)(end - t) : lhs_len - (size_t)(t - eq);
        if (i == nin - 1 && end) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s' has more terms than the node's %d inputs", eq, nin);
        if (i < nin - 1 && !end) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s' has fewer terms than the node's %d inputs", eq, nin);
        GR_TRY(in_ir(c, i, &ops[i].ir));
        const gr_ir_value *v = irv(c, ops[i].ir);
        if (!v->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of input %d is not known", i);
        if (i && v->dtype != irv(c, ops[0].ir)->dtype) return ox_node_error(c, GR_ERR_SHAPE, "einsum operands differ in dtype");
        int e;
        GR_TRY(ein_term(c, eq, t, len, v->ndim, ops[i].lab, &ops[i].n, &e));
        if (e > max_ell) max_ell = e;
        t = end ? end + 1 : t + len;
    }
    for (int i = 0; i < nin; i++)
        for (int d = 0; d < ops[i].n; d++) count[ops[i].lab[d]]++;
    /* label sizes: equal, or 1 broadcast (a size-1 dim of a label sized otherwise elsewhere is squeezed) */
    for (int i = 0; i < nin; i++)
        for (int d = 0; d < ops[i].n; d++) {
            int l = ops[i].lab[d];
            gr_dim s = irv(c, ops[i].ir)->dims[d];
            if (!has_size[l] || (!gr_dx_is_sym(size[l]) && size[l].size == 1)) size[l] = s, has_size[l] = true;
            else if (!gr_dx_equal(size[l], s) && !(!gr_dx_is_sym(s) && s.size == 1)) {
                if (!gr_dx_is_sym(s) && !gr_dx_is_sym(size[l]))
                    return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': an index spans dims of sizes %lld and %lld", eq, (long long)size[l].size, (long long)s.size);
                return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': an index spans symbolic dims graft cannot prove equal", eq);
            }
        }
    for (int i = 0; i < nin; i++) {
        int64_t axes[GR_MAX_DIMS];
        int na = 0, k = 0, lab[GR_MAX_DIMS];
        for (int d = 0; d < ops[i].n; d++) {
            gr_dim s = irv(c, ops[i].ir)->dims[d];
            int l = ops[i].lab[d];
            if (!gr_dx_is_sym(s) && s.size == 1 && !(!gr_dx_is_sym(size[l]) && size[l].size == 1)) axes[na++] = d;
            else lab[k++] = l;
        }
        if (na) {
            gr_ir_attr a = A_ints("axes", axes, na);
            GR_TRY(emit(c, GR_OP_SQUEEZE, 1, &ops[i].ir, 1, &a, 1, NULL, false, &ops[i].ir));
            memcpy(ops[i].lab, lab, sizeof lab);
            ops[i].n = k;
        }
    }
    /* output labels: explicit, or implicit (the labels seen once, sorted, after the ellipsis dims) */
    int out[GR_MAX_DIMS], no = 0;
    if (arrow) {
        int e;
        const char *ot = arrow + 2;
        GR_TRY(ein_term(c, eq, ot, strlen(ot), -1, out, &no, &e));
        /* an output ellipsis has the largest ellipsis rank: ein_term gave it rank 0 */
        if (strstr(ot, "...")) {
            int tmp[GR_MAX_DIMS], k = 0;
            const char *p = strstr(ot, "...");
            int before = 0;
            for (const char *q = ot; q < p; q++) before++;
            for (int i = 0; i < before; i++) tmp[k++] = out[i];
            for (int j = 0; j < max_ell; j++) {
                if (k == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d output dims", eq, GR_MAX_DIMS);
                tmp[k++] = 52 + (max_ell - 1 - j);
            }
            for (int i = before; i < no; i++) {
                if (k == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d output dims", eq, GR_MAX_DIMS);
                tmp[k++] = out[i];
            }
            memcpy(out, tmp, sizeof tmp);
            no = k;
        } /* without "..." in the output, ellipsis dims are summed (numpy) */
        for (int i = 0; i < no; i++) {
            if (out[i] < 52 && !count[out[i]])
                return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': output index '%c' is in no input", eq, out[i] < 26 ? 'a' + out[i] : 'A' + out[i] - 26);
            for (int j = 0; j < i; j++)
                if (out[j] == out[i]) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': an output index repeats", eq);
        }
    } else {
        for (int j = 0; j < max_ell; j++) out[no++] = 52 + (max_ell - 1 - j);
        for (int a = 0; a < 52; a++) { /* ASCII order: 'A'..'Z' before 'a'..'z' */
            int l = a < 26 ? 26 + a : a - 26;
            if (count[l] == 1) {
                if (no == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d output dims", eq, GR_MAX_DIMS);
                out[no++] = l;
            }
        }
    }
    bool in_out[EIN_LABELS] = {false};
    for (int i = 0; i < no; i++) in_out[out[i]] = true;
    /* diagonals of repeated labels within one operand */
    for (int i = 0; i < nin; i++) {
        for (bool again = true; again;) {
            again = false;
            for (int p = 0; p < ops[i].n && !again; p++)
                for (int q = p + 1; q < ops[i].n && !again; q++)
                    if (ops[i].lab[p] == ops[i].lab[q]) {
                        int l = ops[i].lab[p];
                        GR_TRY(ein_diagonal(c, &ops[i], p, q, eq));
                        ops[i].lab[ops[i].n - 1] = l;
                        again = true;
                    }
        }
    }
    /* contract left to right: ops[0] := ops[0] (x) ops[i]. Before each step each side
     * sums the labels that neither the output nor any operand still to come needs
     * (kept), nor the other side (those are contracted by the step). */
    for (int i = 1; i < nin; i++) {
        bool kept[EIN_LABELS], need0[EIN_LABELS], needi[EIN_LABELS];
        memcpy(kept, in_out, sizeof kept);
        for (int j = i + 1; j < nin; j++)
            for (int d = 0; d < ops[j].n; d++) kept[ops[j].lab[d]] = true;
        memcpy(need0, kept, sizeof kept);
        memcpy(needi, kept, sizeof kept);
        for (int d = 0; d < ops[i].n; d++) need0[ops[i].lab[d]] = true;
        for (int d = 0; d < ops[0].n; d++) needi[ops[0].lab[d]] = true;
        GR_TRY(ein_sum_unneeded(c, &ops[0], need0));
        GR_TRY(ein_sum_unneeded(c, &ops[i], needi));
        GR_TRY(ein_pair(c, &ops[0], &ops[i], kept, eq));
    }
    GR_TRY(ein_sum_unneeded(c, &ops[0], in_out));
    /* output order; labels broadcast away everywhere come back as size-1 dims */
    ein_op *r = &ops[0];
    int order[GR_MAX_DIMS], k = 0;
    for (int i = 0; i < no; i++) {
        int ax = ein_axis(r, out[i]);
        if (ax >= 0) order[k++] = ax;
    }
    GR_TRY(ein_transpose(c, r, order));
    if (r->n != no) {
        gr_dim shape[GR_MAX_DIMS];
        for (int i = 0; i < no; i++) {
            int ax = ein_axis(r, out[i]);
            shape[i] = ax >= 0 ? irv(c, r->ir)->dims[ax] : gr_dx_const(1);
        }
        int64_t v[GR_MAX_DIMS];
        int32_t e[GR_MAX_DIMS];
        gr_ir_attr ra = A_sints("shape", shape, no, v, e);
        return emit1(c, GR_OP_RESHAPE, 1, &r->ir, 1, &ra);
    }
    return emit1(c, GR_OP_IDENTITY, 1, &r->ir, 0, NULL);
}

static gr_status einsum_unsupported(ox_ctx *c, const char *eq, const char *why) {
    (void)eq, (void)why; /* not one matmul: the general lowering */
    return einsum_general(c);
}

static gr_status cv_einsum(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 64, 1));
    char eq[128], sa[32], sb[32], so[32];
    const Onnx__AttributeProto *eqa = ox_attr(c, "equation");
    if (eqa && eqa->has_s && eqa->s.len >= sizeof eq) return einsum_general(c); /* would not fit: not a plain matmul */
    GR_TRY(ox_attr_string(c, "equation", "", eq, sizeof eq));
    if (ox_n_in(c) != 2) return einsum_unsupported(c, eq, "graft maps einsums of two operands only");
    /* strip spaces */
    size_t w = 0;
    for (size_t r = 0; eq[r]; r++)
        if (eq[r] != ' ') eq[w++] = eq[r];
    eq[w] = 0;
    const char *comma = strchr(eq, ','), *arrow = strstr(eq, "->");
    if (!comma || !arrow || comma > arrow || strchr(comma + 1, ',')) return einsum_unsupported(c, eq, "needs two operands and an explicit output");
    size_t la = (size_t)(comma - eq), lb = (size_t)(arrow - comma - 1), lo = strlen(arrow + 2);
    if (la >= sizeof sa || lb >= sizeof sb || lo >= sizeof so) return einsum_unsupported(c, eq, "too many indices");
    memcpy(sa, eq, la), sa[la] = 0;
    memcpy(sb, comma + 1, lb), sb[lb] = 0;
    memcpy(so, arrow + 2, lo), so[lo] = 0;
    const char *ops[3] = {sa, sb, so};
    for (int k = 0; k < 3; k++) {
        for (const char *p = ops[k]; *p; p++) {
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return einsum_unsupported(c, eq, "ellipsis or bad index");
            if (strchr(p + 1, *p)) return einsum_unsupported(c, eq, "repeated index");
        }
    }
    if (la < 2 || lb < 2 || lo < 2) return einsum_unsupported(c, eq, "operands must have at least 2 dims");
    /* trailing two letters of each operand; the rest is batch */
    char a0 = sa[la - 2], a1 = sa[la - 1], b0 = sb[lb - 2], b1 = sb[lb - 1], o0 = so[lo - 2], o1 = so[lo - 1];
    char k;
    if (a0 == b0 || a0 == b1) k = a0;
    else if (a1 == b0 || a1 == b1) k = a1;
    else return einsum_unsupported(c, eq, "no contraction index in the last two dims");
    char m = a0 == k ? a1 : a0, n = b0 == k ? b1 : b0;
    if (m == n || strchr(so, k)) return einsum_unsupported(c, eq, "not a matmul");
    bool ta = a0 == k, tb = b1 == k, swap;
    if (o0 == m && o1 == n) swap = false;
    else if (o0 == n && o1 == m) swap = true;
    else return einsum_unsupported(c, eq, "output's last two dims are not the matmul's");
    size_t ba = la - 2, bb = lb - 2, bo = lo - 2;
    const char *batch = ba ? sa : sb;
    size_t nb = ba ? ba : bb;
    bool ok = bo == nb && (!ba || !bb || (ba == bb && !memcmp(sa, sb, ba))) && !memcmp(so, batch, bo);
    for (size_t i = 0; ok && i < nb; i++) ok = batch[i] != k && batch[i] != m && batch[i] != n;
    if (!ok) return einsum_unsupported(c, eq, "batch dims must lead, in the same order in both operands and the output");
    int in[2];
    GR_TRY(in_ir(c, 0, &in[0]));
    GR_TRY(in_ir(c, 1, &in[1]));
    if ((irv(c, in[0])->typed && irv(c, in[0])->ndim != (int)la) || (irv(c, in[1])->typed && irv(c, in[1])->ndim != (int)lb))
        return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': operand ranks do not match the equation", eq);
    if (!swap) {
        gr_ir_attr attrs[2] = {A_int("trans_a", ta), A_int("trans_b", tb)};
        return emit1(c, op, 2, in, 2, attrs);
    }
    /* (A B)^T = B^T A^T */
    int sw[2] = {in[1], in[0]};
    gr_ir_attr attrs[2] = {A_int("trans_a", !tb), A_int("trans_b", !ta)};
    return emit1(c, op, 2, sw, 2, attrs);
}

/* ---- model-breadth ops (issue 14): ArgMax/ArgMin, TopK, Mod, Tile, OneHot, ... -------- */

static gr_status cv_arg(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    int64_t axis, keepdims, last;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    GR_TRY(ox_attr_int(c, "keepdims", 1, &keepdims));
    GR_TRY(ox_attr_int(c, "select_last_index", 0, &last));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    gr_ir_attr attrs[3] = {A_int("axis", axis), A_int("keepdims", keepdims != 0), A_int("select_last_index", last != 0)};
    return emit1(c, op, 1, &x, 3, attrs);
}

/* Mod(a, b; fmod): fmod=1 is C's remainder (the sign of a); fmod=0 is the floor
 * remainder (the sign of b): r = a mod b, plus b where r != 0 and r, b differ in sign.
 * ONNX asks fmod=1 for floats; fmod=0 on floats gets np.mod's answer, as the reference does. */
static gr_status cv_mod(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 2, 2, 1));
    int64_t fmod;
    GR_TRY(ox_attr_int(c, "fmod", 0, &fmod));
    if (fmod != 0 && fmod != 1) return ox_node_error(c, GR_ERR_INVALID, "attribute 'fmod' must be 0 or 1, got %lld", (long long)fmod);
    int in[2];
    GR_TRY(in_ir(c, 0, &in[0]));
    GR_TRY(in_ir(c, 1, &in[1]));
    const gr_ir_value *av = irv(c, in[0]), *bv = irv(c, in[1]);
    if (av->typed && bv->typed && av->dtype != bv->dtype)
        return ox_node_error(c, GR_ERR_SHAPE, "A and B have different dtypes (%s, %s)", gr_dtype_name(av->dtype), gr_dtype_name(bv->dtype));
    if (av->typed && av->dtype == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "Mod of bool");
    if (fmod || (av->typed && gr_dtype_is_int(av->dtype) && av->dtype == GR_U8)) return emit1(c, op, 2, in, 0, NULL);
    gr_dtype dt = av->typed ? av->dtype : GR_F32;
    int r, zero, rz, rneg, bneg, same, keep, rb;
    GR_TRY(emit2(c, op, in[0], in[1], &r));
    GR_TRY(scalar_const_ir(c, dt, 0.0, &zero));
    GR_TRY(emit2(c, GR_OP_EQUAL, r, zero, &rz));
    GR_TRY(emit2(c, GR_OP_LESS, r, zero, &rneg));
    GR_TRY(emit2(c, GR_OP_LESS, in[1], zero, &bneg));
    GR_TRY(emit2(c, GR_OP_EQUAL, rneg, bneg, &same));
    GR_TRY(emit2(c, GR_OP_OR, rz, same, &keep)); /* keep r unless r != 0 and the signs differ */
    GR_TRY(emit2(c, GR_OP_ADD, r, in[1], &rb));
    int w[3] = {keep, r, rb};
    return emit1(c, GR_OP_WHERE, 3, w, 0, NULL);
}

/* Tile(x, repeats): x viewed as [.., 1, d_i, ..] (a 1 before each repeated dim),
 * expanded to [.., r_i, d_i, ..], reshaped to [.., r_i*d_i, ..]. repeats must be
 * known at import time; dims may be symbolic. */
static gr_status cv_tile(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 2, 2, 1));
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int r = xv->ndim, n;
    int64_t rep[GR_MAX_DIMS];
    GR_TRY(ox_need_ints(c, 1, "repeats", rep, GR_MAX_DIMS, &n));
    if (n != r) return ox_node_error(c, GR_ERR_SHAPE, "repeats has %d entries for an input of rank %d", n, r);
    gr_dim xd[GR_MAX_DIMS], mid[GR_MAX_DIMS], big[GR_MAX_DIMS], fin[GR_MAX_DIMS];
    int nm = 0;
    for (int i = 0; i < r; i++) {
        xd[i] = xv->dims[i];
        if (rep[i] < 0) return ox_node_error(c, GR_ERR_INVALID, "repeats[%d] = %lld is negative", i, (long long)rep[i]);
        if (rep[i] != 1) {
            if (nm == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "tiling needs more than %d dims", GR_MAX_DIMS);
            mid[nm] = gr_dx_const(1);
            big[nm++] = gr_dx_const(rep[i]);
        }
        if (nm == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "tiling needs more than %d dims", GR_MAX_DIMS);
        mid[nm] = xd[i];
        big[nm++] = xd[i];
        gr_status st = gr_dx_binary(c->g, GR_DX_MUL, xd[i], gr_dx_const(rep[i]), &fin[i]);
        if (st != GR_OK) return ox_node_error(c, st == GR_ERR_NOMEM ? st : GR_ERR_SHAPE, "dim %d times %lld is not expressible", i, (long long)rep[i]);
    }
    GR_TRY(check_target_sshape(c, "the tiled shape", fin, r));
    if (nm == r) return emit1(c, GR_OP_IDENTITY, 1, &x, 0, NULL);
    int v, e;
    GR_TRY(reshape_ir(c, x, mid, nm, &v));
    int64_t bv[GR_MAX_DIMS];
    int32_t be[GR_MAX_DIMS];
    gr_ir_attr ea = A_sints("shape", big, nm, bv, be);
    GR_TRY(emit(c, GR_OP_EXPAND, 1, &v, 1, &ea, 1, NULL, false, &e));
    int64_t fv[GR_MAX_DIMS];
    int32_t fe[GR_MAX_DIMS];
    gr_ir_attr ra = A_sints("shape", fin, r, fv, fe);
    return emit1(c, GR_OP_RESHAPE, 1, &e, 1, &ra);
}

/* OneHot(indices, depth, values; axis=-1): where(unsqueeze(idx, axis) == iota(depth),
 * on, off) with negative indices counted from depth; an index outside
 * [-depth, depth) matches nothing (all off), as ONNX says. */
static gr_status cv_one_hot(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 3, 3, 1));
    int64_t axis;
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    const ox_tensor *dt;
    GR_TRY(ox_need_const(c, 1, "depth", &dt));
    if (ox_tensor_numel(dt) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'depth' must hold one value");
    double dd = gr_load_f64(dt->data, dt->dtype, 0);
    if (!(dd >= 1 && dd <= (double)OX_MAX_ELEMS)) return ox_node_error(c, GR_ERR_INVALID, "depth %g is not a positive size", dd);
    int64_t depth = (int64_t)dd;
    int idx, vals;
    GR_TRY(in_ir(c, 0, &idx));
    GR_TRY(in_ir(c, 2, &vals));
    const gr_ir_value *iv = irv(c, idx), *vv = irv(c, vals);
    if (!iv->typed || !vv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shapes of the inputs are not known");
    if (gr_ir_value_numel(vv) != 2 || vv->ndim != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'values' must be [off_value, on_value]");
    int r = iv->ndim + 1;
    if (r > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the result has more than %d dims", GR_MAX_DIMS);
    if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for an output of rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    if (iv->dtype != GR_I64) {
        gr_ir_attr to = A_str("to", "i64");
        GR_TRY(emit(c, GR_OP_CAST, 1, &idx, 1, &to, 1, NULL, false, &idx));
    }
    int zero, dep, neg, wrapped, u, io, ior, eq, on, off;
    GR_TRY(scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(scalar_const_ir(c, GR_I64, (double)depth, &dep));
    GR_TRY(emit2(c, GR_OP_LESS, idx, zero, &neg));
    GR_TRY(emit2(c, GR_OP_ADD, idx, dep, &wrapped));
    GR_TRY(where_ir(c, neg, wrapped, idx, &idx));
    GR_TRY(unsqueeze_ir(c, idx, a, &u));
    GR_TRY(iota_ir(c, gr_dx_const(depth), &io));
    gr_dim sh[GR_MAX_DIMS];
    sh[0] = gr_dx_const(depth);
    for (int i = a + 1; i < r; i++) sh[i - a] = gr_dx_const(1);
    GR_TRY(reshape_ir(c, io, sh, r - a, &ior));
    GR_TRY(emit2(c, GR_OP_EQUAL, u, ior, &eq));
    for (int k = 0; k < 2; k++) {
        int64_t s0 = k, e0 = k + 1, ax = 0;
        gr_ir_attr sl[3] = {A_ints("starts", &s0, 1), A_ints("ends", &e0, 1), A_ints("axes", &ax, 1)};
        GR_TRY(emit(c, GR_OP_SLICE, 1, &vals, 3, sl, 1, NULL, false, k ? &on : &off));
    }
    int w[3] = {eq, on, off};
    return emit1(c, GR_OP_WHERE, 3, w, 0, NULL);
}

/* TopK(x, k; axis=-1, largest=1, sorted=1) with k known at import time, by ranks: with
 * the axis moved last, rank[i] = #{l : l comes before i} where l comes before i when
 * x[l] is larger (smaller) or equal with l < i, NaN counting as larger than
 * everything (numpy's sort order, which the ONNX reference uses); the j-th index
 * is the i whose rank is j, and the values are gathered at the indices. Always
 * sorted (sorted=0 lets any order through). O(n^2) compare work per row, fused
 * into one reduction: meant for the small rows exporters use it on. */
static gr_status cv_top_k(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 2, 2, 1));
    int64_t axis, largest, sorted_;
    GR_TRY(ox_attr_int(c, "axis", -1, &axis));
    GR_TRY(ox_attr_int(c, "largest", 1, &largest));
    GR_TRY(ox_attr_int(c, "sorted", 1, &sorted_));
    int64_t k;
    int nk;
    GR_TRY(ox_need_ints(c, 1, "K", &k, 1, &nk));
    if (nk != 1) return ox_node_error(c, GR_ERR_SHAPE, "input 'K' must hold one value");
    int x;
    GR_TRY(in_ir(c, 0, &x));
    const gr_ir_value *xv = irv(c, x);
    if (!xv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of the input is not known");
    int r = xv->ndim;
    if (r < 1 || r + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "TopK of a rank-%d tensor is not supported", r);
    if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    if (xv->dtype == GR_BOOL) return ox_node_error(c, GR_ERR_SHAPE, "TopK of bool");
    if (gr_dx_is_sym(xv->dims[a]))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "TopK along a symbolic dim is not supported (the axis length must be known to check K)");
    int64_t n = xv->dims[a].size;
    if (k < 0 || k > n) return ox_node_error(c, GR_ERR_SHAPE, "K = %lld is outside [0, %lld] (the axis length)", (long long)k, (long long)n);
    bool fl = gr_dtype_is_float(xv->dtype);
    int64_t perm[GR_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++)
        if (i != a) perm[j++] = i;
    perm[r - 1] = a;
    int xt = x;
    if (a != r - 1) {
        gr_ir_attr p = A_ints("perm", perm, r);
        GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &x, 1, &p, 1, NULL, false, &xt));
    }
    int xi, xl, io, ii, il, gt, eqv, idxlt, tie, before, cnt, rank;
    GR_TRY(unsqueeze_ir(c, xt, r, &xi));     /* [.., n, 1]: element i */
    GR_TRY(unsqueeze_ir(c, xt, r - 1, &xl)); /* [.., 1, n]: element l */
    GR_TRY(emit2(c, largest ? GR_OP_GREATER : GR_OP_LESS, xl, xi, &gt));
    GR_TRY(emit2(c, GR_OP_EQUAL, xl, xi, &eqv));
    if (fl) {
        int nl, ni, nni, nnl, t;
        GR_TRY(emit(c, GR_OP_ISNAN, 1, &xl, 0, NULL, 1, NULL, false, &nl));
        GR_TRY(emit(c, GR_OP_ISNAN, 1, &xi, 0, NULL, 1, NULL, false, &ni));
        GR_TRY(emit(c, GR_OP_NOT, 1, &ni, 0, NULL, 1, NULL, false, &nni));
        GR_TRY(emit(c, GR_OP_NOT, 1, &nl, 0, NULL, 1, NULL, false, &nnl));
        /* largest: a NaN l beats a number i; smallest: a number l beats a NaN i */
        GR_TRY(largest ? emit2(c, GR_OP_AND, nl, nni, &t) : emit2(c, GR_OP_AND, nnl, ni, &t));
        GR_TRY(emit2(c, GR_OP_OR, gt, t, &gt));
        GR_TRY(emit2(c, GR_OP_AND, nl, ni, &t));
        GR_TRY(emit2(c, GR_OP_OR, eqv, t, &eqv));
    }
    GR_TRY(iota_ir(c, gr_dx_const(n), &io));
    GR_TRY(unsqueeze_ir(c, io, 1, &ii)); /* [n, 1] */
    GR_TRY(unsqueeze_ir(c, io, 0, &il)); /* [1, n] */
    GR_TRY(emit2(c, GR_OP_LESS, il, ii, &idxlt));
    GR_TRY(emit2(c, GR_OP_AND, eqv, idxlt, &tie));
    GR_TRY(emit2(c, GR_OP_OR, gt, tie, &before));
    gr_ir_attr to = A_str("to", "i64");
    GR_TRY(emit(c, GR_OP_CAST, 1, &before, 1, &to, 1, NULL, false, &cnt));
    int64_t lastax = -1;
    gr_ir_attr rs[2] = {A_ints("axes", &lastax, 1), A_int("keepdims", 0)};
    GR_TRY(emit(c, GR_OP_REDUCE_SUM, 1, &cnt, 2, rs, 1, NULL, false, &rank)); /* [.., n] */
    int ru, jo, ju, sel, zero, pick, idx, vals;
    GR_TRY(unsqueeze_ir(c, rank, r - 1, &ru)); /* [.., 1, n] */
    GR_TRY(iota_ir(c, gr_dx_const(k), &jo));
    GR_TRY(unsqueeze_ir(c, jo, 1, &ju));       /* [k, 1] */
    GR_TRY(emit2(c, GR_OP_EQUAL, ru, ju, &sel)); /* [.., k, n] */
    GR_TRY(scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(where_ir(c, sel, il, zero, &pick));
    GR_TRY(emit(c, GR_OP_REDUCE_SUM, 1, &pick, 2, rs, 1, NULL, false, &idx)); /* [.., k] */
    int gin[2] = {xt, idx};
    gr_ir_attr ga = A_int("axis", r - 1);
    const char *names[2];
    out_names_of(c, names, 2);
    int outs[2];
    if (a == r - 1) {
        GR_TRY(emit(c, GR_OP_GATHER_ELEMENTS, 2, gin, 1, &ga, 1, &names[0], names[0] != NULL, &outs[0]));
        GR_TRY(emit(c, GR_OP_IDENTITY, 1, &idx, 0, NULL, 1, &names[1], names[1] != NULL, &outs[1]));
        return bind_outputs(c, 2, outs, NULL);
    }
    GR_TRY(emit(c, GR_OP_GATHER_ELEMENTS, 2, gin, 1, &ga, 1, NULL, false, &vals));
    int64_t inv[GR_MAX_DIMS];
    for (int i = 0; i < r; i++) inv[perm[i]] = i;
    gr_ir_attr p = A_ints("perm", inv, r);
    GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &vals, 1, &p, 1, &names[0], names[0] != NULL, &outs[0]));
    GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &idx, 1, &p, 1, &names[1], names[1] != NULL, &outs[1]));
    return bind_outputs(c, 2, outs, NULL);
}

/* ---- ScatterElements / ScatterND on run-time tensors --------------------------------------
 * No scatter kernel: out[p] is computed at every output position p from a match
 * matrix M[p, u] = (target of update u == p), so each output element is written
 * once (no atomics, same bits on every device). reduction none: the last matching
 * update wins (ONNX leaves duplicates undefined; the reference's sequential
 * assignment keeps the last), no match keeps data. add / mul / max / min fold the
 * matching updates into data: data op reduce(where(M, update, identity)) with
 * identity 0, 1, or data itself for max/min. O(positions x updates) compare work, fused into
 * one reduction per output; an index outside its dim matches nothing. */
typedef enum { SC_NONE, SC_ADD, SC_MUL, SC_MAX, SC_MIN } sc_red;

/* The node's final IR node (named, bound to the ONNX output) when `last`, else a helper into *out. */
static gr_status emit_final(ox_ctx *c, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, bool last, int *out) {
    if (last) return emit1(c, op, n_in, in, n_attr, attrs);
    return emit(c, op, n_in, in, n_attr, attrs, 1, NULL, false, out);
}

static gr_status scatter_reduction(ox_ctx *c, sc_red *out) {
    char red[16];
    GR_TRY(ox_attr_string(c, "reduction", "none", red, sizeof red));
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(red, names[i])) return *out = (sc_red)i, GR_OK;
    return ox_node_error(c, GR_ERR_INVALID, "reduction '%s' is not one of none, add, mul, max, min", red);
}

/* m: the match matrix, its update axis `uax` (of length n_upd); upd_b: the updates
 * shaped to broadcast against m (with n_after trailing dims m lacks); data: the
 * output's shape. none gathers update j from upd_src along axis gax (Gather, or
 * GatherElements when `elements`). The last node is the ONNX node's output when
 * `last`, else returned in *out. */
static gr_status scatter_combine(ox_ctx *c, sc_red red, int m, int uax, int n_after, gr_dim n_upd, int upd_b,
                                 int upd_src, int gax, bool elements, int data, bool last, int *out) {
    gr_dtype dt = irv(c, data)->dtype;
    if (red == SC_NONE) {
        int jo, minus1, cand, jsel, zero, any, jc, val, anyr;
        GR_TRY(iota_ir(c, n_upd, &jo));
        GR_TRY(scalar_const_ir(c, GR_I64, -1.0, &minus1));
        GR_TRY(where_ir(c, m, jo, minus1, &cand));
        int64_t ax = uax;
        gr_ir_attr rs[2] = {A_ints("axes", &ax, 1), A_int("keepdims", 0)};
        GR_TRY(emit(c, GR_OP_REDUCE_MAX, 1, &cand, 2, rs, 1, NULL, false, &jsel));
        GR_TRY(scalar_const_ir(c, GR_I64, 0.0, &zero));
        GR_TRY(emit2(c, GR_OP_GREATER_EQUAL, jsel, zero, &any));
        GR_TRY(emit2(c, GR_OP_MAX, jsel, zero, &jc));
        int gin[2] = {upd_src, jc};
        gr_ir_attr ga = A_int("axis", gax);
        GR_TRY(emit(c, elements ? GR_OP_GATHER_ELEMENTS : GR_OP_GATHER, 2, gin, 1, &ga, 1, NULL, false, &val));
        anyr = any;
        for (int i = 0; i < n_after; i++) GR_TRY(unsqueeze_ir(c, anyr, irv(c, anyr)->ndim, &anyr));
        int w[3] = {anyr, val, data};
        return emit_final(c, GR_OP_WHERE, 3, w, 0, NULL, last, out);
    }
    int ident, mb = m, sel, r;
    for (int i = 0; i < n_after; i++) GR_TRY(unsqueeze_ir(c, mb, irv(c, mb)->ndim, &mb));
    if (red == SC_ADD || red == SC_MUL) GR_TRY(scalar_const_ir(c, dt, red == SC_ADD ? 0.0 : 1.0, &ident));
    else GR_TRY(unsqueeze_ir(c, data, uax, &ident));
    GR_TRY(where_ir(c, mb, upd_b, ident, &sel));
    int64_t ax = uax;
    gr_ir_attr rs[2] = {A_ints("axes", &ax, 1), A_int("keepdims", 0)};
    gr_op rop = red == SC_ADD ? GR_OP_REDUCE_SUM : red == SC_MUL ? GR_OP_REDUCE_PROD : red == SC_MAX ? GR_OP_REDUCE_MAX : GR_OP_REDUCE_MIN;
    GR_TRY(emit(c, rop, 1, &sel, 2, rs, 1, NULL, false, &r));
    /* where every update matches, data is not among the reduced values: fold it in */
    int pair[2] = {data, r};
    gr_op fold = red == SC_ADD ? GR_OP_ADD : red == SC_MUL ? GR_OP_MUL : red == SC_MAX ? GR_OP_MAX : GR_OP_MIN;
    return emit_final(c, fold, 2, pair, 0, NULL, last, out);
}

static gr_status scatter_check_types(ox_ctx *c, int data, int idx, int upd) {
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx), *uv = irv(c, upd);
    if (!dv->typed || !iv->typed || !uv->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shapes of the inputs are not known");
    if (!gr_dtype_is_int(iv->dtype)) return ox_node_error(c, GR_ERR_SHAPE, "indices must be integers");
    if (uv->dtype != dv->dtype) return ox_node_error(c, GR_ERR_SHAPE, "updates (%s) and data (%s) differ in dtype", gr_dtype_name(uv->dtype), gr_dtype_name(dv->dtype));
    return GR_OK;
}


static gr_status cv_scatter_elements(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 3, 3, 1));
    int64_t axis;
    sc_red red;
    GR_TRY(ox_attr_int(c, "axis", 0, &axis));
    GR_TRY(scatter_reduction(c, &red));
    int data, idx, upd;
    GR_TRY(in_ir(c, 0, &data));
    GR_TRY(in_ir(c, 1, &idx));
    GR_TRY(in_ir(c, 2, &upd));
    GR_TRY(scatter_check_types(c, data, idx, upd));
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx), *uv = irv(c, upd);
    int r = dv->ndim;
    if (r < 1 || r + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "ScatterElements of a rank-%d tensor is not supported", r);
    if (iv->ndim != r || uv->ndim != r) return ox_node_error(c, GR_ERR_SHAPE, "data, indices and updates must have the same rank");
    if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, r);
    int a = (int)(axis < 0 ? axis + r : axis);
    for (int i = 0; i < r; i++) {
        if (!gr_dx_equal(iv->dims[i], uv->dims[i])) return ox_node_error(c, GR_ERR_SHAPE, "indices and updates differ in shape (dim %d)", i);
        if (i != a && !gr_dx_equal(iv->dims[i], dv->dims[i]))
            return ox_node_error(c, GR_ERR_UNSUPPORTED, "indices smaller than data in dim %d (not the axis) is not supported", i);
    }
    gr_dim n = dv->dims[a], m = iv->dims[a];
    if (!gr_dx_is_sym(m) && m.size == 0) return emit1(c, GR_OP_IDENTITY, 1, &data, 0, NULL);
    int64_t perm[GR_MAX_DIMS], inv[GR_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++)
        if (i != a) perm[j++] = i;
    perm[r - 1] = a;
    for (int i = 0; i < r; i++) inv[perm[i]] = i;
    int d = data, ix = idx, u = upd;
    if (a != r - 1) {
        gr_ir_attr p = A_ints("perm", perm, r);
        GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &data, 1, &p, 1, NULL, false, &d));
        GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &idx, 1, &p, 1, NULL, false, &ix));
        GR_TRY(emit(c, GR_OP_TRANSPOSE, 1, &upd, 1, &p, 1, NULL, false, &u));
    }
    if (irv(c, ix)->dtype != GR_I64) {
        gr_ir_attr to = A_str("to", "i64");
        GR_TRY(emit(c, GR_OP_CAST, 1, &ix, 1, &to, 1, NULL, false, &ix));
    }
    int zero, nn, neg, wr, iu, io, ion, mm, ub;
    GR_TRY(scalar_const_ir(c, GR_I64, 0.0, &zero));
    GR_TRY(dim_scalar_ir(c, n, GR_I64, &nn));
    GR_TRY(emit2(c, GR_OP_LESS, ix, zero, &neg));
    GR_TRY(emit2(c, GR_OP_ADD, ix, nn, &wr));
    GR_TRY(where_ir(c, neg, wr, ix, &ix));
    GR_TRY(unsqueeze_ir(c, ix, r - 1, &iu)); /* [.., 1, m] */
    GR_TRY(iota_ir(c, n, &io));
    GR_TRY(unsqueeze_ir(c, io, 1, &ion));   /* [n, 1] */
    GR_TRY(emit2(c, GR_OP_EQUAL, iu, ion, &mm)); /* [.., n, m] */
    GR_TRY(unsqueeze_ir(c, u, r - 1, &ub));  /* [.., 1, m] */
    if (a == r - 1) return scatter_combine(c, red, mm, r, 0, m, ub, u, r - 1, true, d, true, NULL);
    int res;
    GR_TRY(scatter_combine(c, red, mm, r, 0, m, ub, u, r - 1, true, d, false, &res));
    gr_ir_attr p = A_ints("perm", inv, r);
    return emit1(c, GR_OP_TRANSPOSE, 1, &res, 1, &p);
}

/* ScatterND(data, indices [M.., k], updates [M.., data dims k..]): data viewed as
 * [P, R..] (P = prod of its first k dims), the index tuples as linear indices
 * [U] (U = prod M), updates as [U, R..]; M[p, u] = (lin[u] == p). */
static gr_status cv_scatter_nd(ox_ctx *c, gr_op op) {
    (void)op;
    GR_TRY(check_arity(c, 3, 3, 1));
    sc_red red;
    GR_TRY(scatter_reduction(c, &red));
    int data, idx, upd;
    GR_TRY(in_ir(c, 0, &data));
    GR_TRY(in_ir(c, 1, &idx));
    GR_TRY(in_ir(c, 2, &upd));
    GR_TRY(scatter_check_types(c, data, idx, upd));
    const gr_ir_value *dv = irv(c, data), *iv = irv(c, idx), *uv = irv(c, upd);
    int r = dv->ndim, q = iv->ndim;
    if (q < 1) return ox_node_error(c, GR_ERR_SHAPE, "indices must have rank >= 1");
    gr_dim kd = iv->dims[q - 1];
    if (gr_dx_is_sym(kd)) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the indices' last dim (the index tuple length) must be concrete");
    int k = (int)kd.size;
    if (k < 1 || k > r) return ox_node_error(c, GR_ERR_SHAPE, "index tuples of length %d for data of rank %d", k, r);
    int nr = r - k;
    if (uv->ndim != q - 1 + nr) return ox_node_error(c, GR_ERR_SHAPE, "updates must have rank %d (indices' dims but the last, then data's dims from %d)", q - 1 + nr, k);
    gr_dim ddims[GR_MAX_DIMS], idims[GR_MAX_DIMS];
    for (int i = 0; i < r; i++) ddims[i] = dv->dims[i];
    for (int i = 0; i < q; i++) idims[i] = iv->dims[i];
    for (int i = 0; i < q - 1; i++)
        if (!gr_dx_equal(uv->dims[i], idims[i])) return ox_node_error(c, GR_ERR_SHAPE, "updates dim %d differs from indices dim %d", i, i);
    for (int i = 0; i < nr; i++)
        if (!gr_dx_equal(uv->dims[q - 1 + i], ddims[k + i])) return ox_node_error(c, GR_ERR_SHAPE, "updates dim %d differs from data dim %d", q - 1 + i, k + i);
    if (nr + 2 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "ScatterND with %d trailing dims is not supported", nr);
    gr_dim P, U, shape[GR_MAX_DIMS];
    GR_TRY(dims_product(c, ddims, 0, k, &P));
    GR_TRY(dims_product(c, idims, 0, q - 1, &U));
    if (!gr_dx_is_sym(U) && U.size == 0) return emit1(c, GR_OP_IDENTITY, 1, &data, 0, NULL);
    int d2, u2, lin, io, ion, linu, mm, ub;
    shape[0] = P;
    for (int i = 0; i < nr; i++) shape[1 + i] = ddims[k + i];
    GR_TRY(reshape_ir(c, data, shape, nr + 1, &d2));
    shape[0] = U;
    GR_TRY(reshape_ir(c, upd, shape, nr + 1, &u2));
    GR_TRY(nd_linear_index(c, idx, ddims, k, &lin));
    GR_TRY(reshape_ir(c, lin, &U, 1, &lin));
    if (irv(c, lin)->dtype != GR_I64) {
        gr_ir_attr to = A_str("to", "i64");
        GR_TRY(emit(c, GR_OP_CAST, 1, &lin, 1, &to, 1, NULL, false, &lin));
    }
    GR_TRY(iota_ir(c, P, &io));
    GR_TRY(unsqueeze_ir(c, io, 1, &ion));   /* [P, 1] */
    GR_TRY(unsqueeze_ir(c, lin, 0, &linu)); /* [1, U] */
    GR_TRY(emit2(c, GR_OP_EQUAL, linu, ion, &mm)); /* [P, U] */
    GR_TRY(unsqueeze_ir(c, u2, 0, &ub));    /* [1, U, R..] */
    int res;
    GR_TRY(scatter_combine(c, red, mm, 1, nr, U, ub, u2, 0, false, d2, false, &res));
    int64_t sv[GR_MAX_DIMS];
    int32_t se[GR_MAX_DIMS];
    gr_ir_attr ra = A_sints("shape", ddims, r, sv, se);
    return emit1(c, GR_OP_RESHAPE, 1, &res, 1, &ra);
}

/* ---- control flow: If, Loop, Scan ------------------------------------------------------------
 * If: a condition known at import time inlines the branch it selects; otherwise
 * both branches become IR subgraphs of an `if` node, which passes/control.c
 * predicates (both run, `where` selects; no host read, no graph break).
 * Loop and Scan are unrolled at import (each iteration an inlined copy of the
 * body) when their trip count is known then; a trip count that depends on
 * tensor data is refused, naming the node. */
#define OX_MAX_UNROLL 256          /* iterations of one Loop / Scan */
#define OX_MAX_UNROLLED_NODES 65536 /* body nodes times iterations */

/* IR value of an inlined body's result (a constant is materialized). */
static gr_status value_to_ir(ox_ctx *c, ox_value *v, const char *what, int *ir) {
    if (v->unavailable) return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s %s", what, v->unavailable);
    if (v->seq) return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s is a tensor sequence (not supported here)", what);
    if (v->ir >= 0) return *ir = v->ir, GR_OK;
    if (!v->konst) return ox_node_error(c, GR_ERR_INTERNAL, "%s has no value", what);
    if (ox_tensor_has_sym(v->konst))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "%s is computed from symbolic dims (not supported as a loop value)", what);
    ox_tensor *t;
    GR_TRY(ox_tensor_cast(v->konst, v->konst->dtype, &t));
    GR_TRY(const_ir(c, t, ir));
    v->ir = *ir;
    return GR_OK;
}

/* Binds ONNX output `name` of the current node to v: a constant stays one (so
 * later shape arithmetic still folds), an IR value gets a named identity. */
static gr_status bind_value(ox_ctx *c, const char *name, ox_value *v) {
    if (!name || !*name) return GR_OK;
    int vi;
    if (v->unavailable || v->seq || (v->konst && v->ir < 0)) {
        GR_TRY(ox_define(c, name, &vi));
        return ox_value_copy(&c->vals.data[vi], v);
    }
    int ir, out;
    GR_TRY(value_to_ir(c, v, name, &ir));
    GR_TRY(emit(c, GR_OP_IDENTITY, 1, &ir, 0, NULL, 1, &name, true, &out));
    return ox_define_ir(c, name, out);
}

static void values_init(ox_value *v, int n) {
    memset(v, 0, sizeof *v * (size_t)n);
    for (int i = 0; i < n; i++) v[i].ir = -1;
}
static void values_clear(ox_value *v, int n) {
    for (int i = 0; i < n; i++) ox_value_clear(&v[i]);
}

static const Onnx__GraphProto *graph_attr(ox_ctx *c, const char *name) {
    const Onnx__AttributeProto *a = ox_attr(c, name);
    return a ? a->g : NULL;
}

static gr_status cv_if(ox_ctx *c, gr_op op) {
    GR_TRY(check_arity(c, 1, 1, 1));
    const Onnx__GraphProto *tb = graph_attr(c, "then_branch"), *eb = graph_attr(c, "else_branch");
    if (!tb || !eb) return ox_node_error(c, GR_ERR_INVALID, "graph attributes 'then_branch' and 'else_branch' are required");
    int n_out = (int)c->node->n_output;
    if (n_out > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "more than 64 outputs");
    if ((int)tb->n_output != n_out || (int)eb->n_output != n_out)
        return ox_node_error(c, GR_ERR_INVALID, "the branches have %zu and %zu outputs, the node %d", tb->n_output, eb->n_output, n_out);
    if (tb->n_input || eb->n_input) return ox_node_error(c, GR_ERR_INVALID, "a branch declares inputs (branches take none)");
    int cvi = ox_in(c, 0);
    if (cvi < 0) return ox_node_error(c, GR_ERR_INVALID, "input 0 ('cond') is required");
    const ox_tensor *ck = c->vals.data[cvi].konst;
    if (ck && !ox_tensor_has_sym(ck)) { /* known now: inline the branch it selects */
        if (ox_tensor_numel(ck) != 1) return ox_node_error(c, GR_ERR_SHAPE, "the condition must hold one element");
        bool take = gr_load_f64(ck->data, ck->dtype, 0) != 0;
        char *what = gr_sprintf("%s/%s", c->node_name, take ? "then" : "else");
        if (!what) return GR_ERR_NOMEM;
        ox_value outs[64];
        values_init(outs, n_out);
        gr_status st = ox_inline_graph(c, take ? tb : eb, what, NULL, outs);
        for (int i = 0; st == GR_OK && i < n_out; i++) st = bind_value(c, c->node->output[i], &outs[i]);
        values_clear(outs, n_out);
        gr_strfree(what);
        return st;
    }
    char *wt = gr_sprintf("node '%s' (If) then_branch", c->node_name), *we = gr_sprintf("node '%s' (If) else_branch", c->node_name);
    gr_graph *tg = NULL, *eg = NULL;
    gr_status st = wt && we ? GR_OK : GR_ERR_NOMEM;
    int cond = -1, outs[64];
    if (st == GR_OK) st = in_ir(c, 0, &cond);
    if (st == GR_OK) st = ox_import_subgraph(c, tb, wt, &tg);
    if (st == GR_OK) st = ox_import_subgraph(c, eb, we, &eg);
    if (st == GR_OK) {
        gr_ir_attr attrs[2] = {{.name = "then_branch", .kind = GR_IR_ATTR_GRAPH, .graph = tg},
                               {.name = "else_branch", .kind = GR_IR_ATTR_GRAPH, .graph = eg}};
        const char *names[64];
        out_names_of(c, names, n_out);
        st = emit(c, op, 1, &cond, 2, attrs, n_out, names, true, outs);
    }
    gr_ir_graph_destroy(tg);
    gr_ir_graph_destroy(eg);
    gr_strfree(wt);
    gr_strfree(we);
    if (st != GR_OK) return st;
    return bind_outputs(c, n_out, outs, NULL);
}

/* A count or flag input of a Loop: known at import time (else *known = false). */
static gr_status loop_scalar(ox_ctx *c, int i, const char *what, bool *present, bool *known, int64_t *v) {
    int vi = ox_in(c, i);
    *present = vi >= 0;
    *known = false;
    if (vi < 0) return GR_OK;
    const ox_value *x = &c->vals.data[vi];
    if (!x->konst || ox_tensor_has_sym(x->konst)) return GR_OK;
    if (ox_tensor_numel(x->konst) != 1) return ox_node_error(c, GR_ERR_SHAPE, "input '%s' must hold one element", what);
    *known = true;
    *v = gr_load_i64(x->konst->data, x->konst->dtype, 0);
    return GR_OK;
}

/* Stacks per-iteration values along a new axis (reversed when `reverse`) into the node's output `name`. */
static gr_status stack_outputs(ox_ctx *c, const char *name, ox_value *vals, int n, int64_t axis, bool reverse) {
    if (!name || !*name) return GR_OK;
    if (n == 0) return ox_node_error(c, GR_ERR_UNSUPPORTED, "a scan output of zero iterations has no known shape (not supported)");
    int parts[OX_MAX_UNROLL], ax = 0;
    for (int i = 0; i < n; i++) {
        int ir;
        GR_TRY(value_to_ir(c, &vals[reverse ? n - 1 - i : i], "a scan output", &ir));
        const gr_ir_value *v = irv(c, ir);
        if (!v->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of a scan output is not known");
        int r = v->ndim + 1;
        if (axis < -r || axis >= r) return ox_node_error(c, GR_ERR_SHAPE, "scan output axis %lld out of range for rank %d", (long long)axis, r);
        ax = (int)(axis < 0 ? axis + r : axis);
        GR_TRY(unsqueeze_ir(c, ir, ax, &parts[i]));
    }
    gr_ir_attr a = A_int("axis", ax);
    int out;
    GR_TRY(emit(c, GR_OP_CONCAT, n, parts, 1, &a, 1, &name, true, &out));
    return ox_define_ir(c, name, out);
}

static gr_status cv_loop(ox_ctx *c, gr_op op) {
    (void)op;
    const Onnx__GraphProto *body = graph_attr(c, "body");
    if (!body) return ox_node_error(c, GR_ERR_INVALID, "graph attribute 'body' is required");
    int n_in = ox_n_in(c), n_state = n_in - 2, n_out = (int)c->node->n_output;
    if (n_in < 2) return ox_node_error(c, GR_ERR_INVALID, "expects at least 2 inputs (M, cond), got %d", n_in);
    if (n_state > 64 || n_out > 128) return ox_node_error(c, GR_ERR_UNSUPPORTED, "too many loop-carried values");
    int n_scan = n_out - n_state;
    if (n_scan < 0 || (int)body->n_input != 2 + n_state || (int)body->n_output != 1 + n_state + n_scan)
        return ox_node_error(c, GR_ERR_INVALID, "the body has %zu inputs and %zu outputs; %d loop-carried values and %d outputs need %d and %d",
                             body->n_input, body->n_output, n_state, n_out, 2 + n_state, 1 + n_out);
    bool m_present, m_known, c_present, c_known;
    int64_t trip = 0, cond0 = 1;
    GR_TRY(loop_scalar(c, 0, "M", &m_present, &m_known, &trip));
    GR_TRY(loop_scalar(c, 1, "cond", &c_present, &c_known, &cond0));
    if (m_present && !m_known)
        return ox_node_error(c, GR_ERR_UNSUPPORTED,
                             "the trip count M is computed at run time, so the number of iterations depends on tensor data; graft "
                             "unrolls a Loop whose trip count is known at import time (a LOOP it could run on the device is not "
                             "supported yet)");
    if (c_present && !c_known)
        return ox_node_error(c, GR_ERR_UNSUPPORTED,
                             "the loop condition is computed at run time (a data-dependent trip count); graft unrolls a Loop "
                             "whose condition and trip count are known at import time");
    if (m_present && trip < 0) trip = 0;
    /* without M the condition ends the loop; the iteration bound below stops a runaway one */
    int64_t limit = m_present ? trip : OX_MAX_UNROLL + 1;
    if (m_present && (trip > OX_MAX_UNROLL || (int64_t)body->n_node * trip > OX_MAX_UNROLLED_NODES))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "a trip count of %lld is too many iterations to unroll (at most %d, and %d body nodes in all)",
                             (long long)trip, OX_MAX_UNROLL, OX_MAX_UNROLLED_NODES);
    ox_value state[64], *scans = NULL, in[66], out[129];
    values_init(state, n_state);
    values_init(in, 2 + n_state);
    values_init(out, 1 + n_out);
    size_t scans_bytes = sizeof(ox_value) * (size_t)(n_scan ? n_scan : 1) * OX_MAX_UNROLL;
    gr_status st = (scans = gr_malloc(scans_bytes)) ? GR_OK : GR_ERR_NOMEM;
    if (scans) values_init(scans, (int)(scans_bytes / sizeof(ox_value)));
    for (int i = 0; st == GR_OK && i < n_state; i++) {
        int vi = ox_in(c, 2 + i);
        if (vi < 0) st = ox_node_error(c, GR_ERR_INVALID, "loop-carried input %d is missing", i);
        else st = ox_value_copy(&state[i], &c->vals.data[vi]);
    }
    int iters = 0;
    bool go = cond0 != 0;
    while (st == GR_OK && go && iters < limit) {
        if (iters == OX_MAX_UNROLL || (int64_t)body->n_node * (iters + 1) > OX_MAX_UNROLLED_NODES) {
            st = ox_node_error(c, GR_ERR_UNSUPPORTED, "the loop runs more than %d iterations (or %d body nodes), too many to unroll",
                               OX_MAX_UNROLL, OX_MAX_UNROLLED_NODES);
            break;
        }
        values_clear(in, 2 + n_state);
        st = ox_tensor_new(GR_I64, 0, NULL, &in[0].konst);
        if (st == GR_OK) {
            *(int64_t *)in[0].konst->data = iters;
            st = ox_tensor_new(GR_BOOL, 0, NULL, &in[1].konst);
        }
        if (st == GR_OK) *(uint8_t *)in[1].konst->data = 1;
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&in[2 + i], &state[i]);
        char *what = st == GR_OK ? gr_sprintf("%s/iter%d", c->node_name, iters) : NULL;
        if (st == GR_OK && !what) st = GR_ERR_NOMEM;
        values_clear(out, 1 + n_out);
        if (st == GR_OK) st = ox_inline_graph(c, body, what, in, out);
        gr_strfree(what);
        if (st != GR_OK) break;
        const ox_tensor *ck = out[0].konst;
        if (!ck || ox_tensor_has_sym(ck) || ox_tensor_numel(ck) != 1) {
            st = ox_node_error(c, GR_ERR_UNSUPPORTED,
                               "the body computes the loop condition at run time (a data-dependent trip count); graft unrolls a "
                               "Loop whose condition is known at import time");
            break;
        }
        go = gr_load_f64(ck->data, ck->dtype, 0) != 0;
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&state[i], &out[1 + i]);
        for (int k = 0; st == GR_OK && k < n_scan; k++) st = ox_value_copy(&scans[k * OX_MAX_UNROLL + iters], &out[1 + n_state + k]);
        iters++;
    }
    for (int i = 0; st == GR_OK && i < n_state; i++) st = bind_value(c, c->node->output[i], &state[i]);
    for (int k = 0; st == GR_OK && k < n_scan; k++) st = stack_outputs(c, c->node->output[n_state + k], &scans[k * OX_MAX_UNROLL], iters, 0, false);
    values_clear(state, n_state);
    values_clear(in, 2 + n_state);
    values_clear(out, 1 + n_out);
    if (scans) {
        values_clear(scans, (int)(scans_bytes / sizeof(ox_value)));
        gr_free(scans, scans_bytes);
    }
    return st;
}

/* Scan (opset 9+): unrolled over the scan inputs' sequence length, which must be known. */
static gr_status cv_scan(ox_ctx *c, gr_op op) {
    (void)op;
    const Onnx__GraphProto *body = graph_attr(c, "body");
    if (!body) return ox_node_error(c, GR_ERR_INVALID, "graph attribute 'body' is required");
    int64_t n_scan_in;
    GR_TRY(ox_attr_int(c, "num_scan_inputs", -1, &n_scan_in));
    int n_in = ox_n_in(c), n_out = (int)c->node->n_output;
    if (n_scan_in < 1 || n_scan_in > n_in) return ox_node_error(c, GR_ERR_INVALID, "num_scan_inputs must be in [1, %d]", n_in);
    int m = (int)n_scan_in, n_state = n_in - m, n_scan_out = n_out - n_state;
    if (n_in > 64 || n_out > 64) return ox_node_error(c, GR_ERR_UNSUPPORTED, "too many inputs or outputs");
    if (n_scan_out < 0 || (int)body->n_input != n_in || (int)body->n_output != n_out)
        return ox_node_error(c, GR_ERR_INVALID, "the body has %zu inputs and %zu outputs, the node %d and %d", body->n_input, body->n_output, n_in, n_out);
    const int64_t *in_axes, *in_dirs, *out_axes, *out_dirs;
    int n_ia, n_id, n_oa, n_od;
    GR_TRY(ox_attr_ints(c, "scan_input_axes", &in_axes, &n_ia));
    GR_TRY(ox_attr_ints(c, "scan_input_directions", &in_dirs, &n_id));
    GR_TRY(ox_attr_ints(c, "scan_output_axes", &out_axes, &n_oa));
    GR_TRY(ox_attr_ints(c, "scan_output_directions", &out_dirs, &n_od));
    if ((n_ia >= 0 && n_ia != m) || (n_id >= 0 && n_id != m) || (n_oa >= 0 && n_oa != n_scan_out) || (n_od >= 0 && n_od != n_scan_out))
        return ox_node_error(c, GR_ERR_INVALID, "scan axes / directions lists do not match the number of scan inputs or outputs");
    int xs[64], axes[64];
    int64_t T = -1;
    for (int j = 0; j < m; j++) {
        GR_TRY(in_ir(c, n_state + j, &xs[j]));
        const gr_ir_value *v = irv(c, xs[j]);
        if (!v->typed || v->ndim < 1) return ox_node_error(c, GR_ERR_SHAPE, "scan input %d must have rank >= 1 and a known shape", j);
        int64_t a = n_ia > 0 ? in_axes[j] : 0;
        if (a < -v->ndim || a >= v->ndim) return ox_node_error(c, GR_ERR_SHAPE, "scan input axis %lld out of range", (long long)a);
        axes[j] = (int)(a < 0 ? a + v->ndim : a);
        gr_dim d = v->dims[axes[j]];
        if (gr_dx_is_sym(d))
            return ox_node_error(c, GR_ERR_UNSUPPORTED,
                                 "the sequence length of scan input %d is symbolic; graft unrolls a Scan whose length is known "
                                 "at import time", j);
        if (T >= 0 && d.size != T) return ox_node_error(c, GR_ERR_SHAPE, "scan inputs differ in sequence length (%lld, %lld)", (long long)T, (long long)d.size);
        T = d.size;
    }
    if (T > OX_MAX_UNROLL || (int64_t)body->n_node * T > OX_MAX_UNROLLED_NODES)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "a sequence of %lld steps is too long to unroll (at most %d)", (long long)T, OX_MAX_UNROLL);
    ox_value state[64], in[64], out[64], *scans = NULL;
    values_init(state, n_state);
    values_init(in, n_in);
    values_init(out, n_out);
    size_t scans_bytes = sizeof(ox_value) * (size_t)(n_scan_out ? n_scan_out : 1) * OX_MAX_UNROLL;
    gr_status st = (scans = gr_malloc(scans_bytes)) ? GR_OK : GR_ERR_NOMEM;
    if (scans) values_init(scans, (int)(scans_bytes / sizeof(ox_value)));
    for (int i = 0; st == GR_OK && i < n_state; i++) {
        int vi = ox_in(c, i);
        if (vi < 0) st = ox_node_error(c, GR_ERR_INVALID, "state input %d is missing", i);
        else st = ox_value_copy(&state[i], &c->vals.data[vi]);
    }
    for (int64_t t = 0; st == GR_OK && t < T; t++) {
        values_clear(in, n_in);
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&in[i], &state[i]);
        for (int j = 0; st == GR_OK && j < m; j++) {
            int64_t pos = (n_id > 0 && in_dirs[j]) ? T - 1 - t : t, end = pos + 1, ax = axes[j];
            gr_ir_attr sl[3] = {A_ints("starts", &pos, 1), A_ints("ends", &end, 1), A_ints("axes", &ax, 1)};
            int part;
            st = emit(c, GR_OP_SLICE, 1, &xs[j], 3, sl, 1, NULL, false, &part);
            gr_ir_attr sq = A_ints("axes", &ax, 1);
            if (st == GR_OK) st = emit(c, GR_OP_SQUEEZE, 1, &part, 1, &sq, 1, NULL, false, &in[n_state + j].ir);
        }
        char *what = st == GR_OK ? gr_sprintf("%s/step%lld", c->node_name, (long long)t) : NULL;
        if (st == GR_OK && !what) st = GR_ERR_NOMEM;
        values_clear(out, n_out);
        if (st == GR_OK) st = ox_inline_graph(c, body, what, in, out);
        gr_strfree(what);
        for (int i = 0; st == GR_OK && i < n_state; i++) st = ox_value_copy(&state[i], &out[i]);
        for (int k = 0; st == GR_OK && k < n_scan_out; k++) st = ox_value_copy(&scans[k * OX_MAX_UNROLL + t], &out[n_state + k]);
    }
    for (int i = 0; st == GR_OK && i < n_state; i++) st = bind_value(c, c->node->output[i], &state[i]);
    for (int k = 0; st == GR_OK && k < n_scan_out; k++)
        st = stack_outputs(c, c->node->output[n_state + k], &scans[k * OX_MAX_UNROLL], (int)T, n_oa > 0 ? out_axes[k] : 0,
                           n_od > 0 && out_dirs[k]);
    values_clear(state, n_state);
    values_clear(in, n_in);
    values_clear(out, n_out);
    if (scans) {
        values_clear(scans, (int)(scans_bytes / sizeof(ox_value)));
        gr_free(scans, scans_bytes);
    }
    return st;
}

/* Ops whose output shape depends on tensor data: refused with the reason. */
static gr_status cv_data_dependent(ox_ctx *c, gr_op op) {
    (void)op;
    return ox_node_error(c, GR_ERR_UNSUPPORTED,
                         "%s has a data-dependent output shape (its length depends on the values of its input at run "
                         "time), which a static memory plan cannot hold; not supported",
                         c->node->op_type);
}

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
    {"Einsum", GR_OP_MATMUL, cv_einsum},
    {"ArgMax", GR_OP_ARG_MAX, cv_arg},
    {"ArgMin", GR_OP_ARG_MIN, cv_arg},
    {"Mod", GR_OP_MOD, cv_mod},
    {"Tile", GR_OP_EXPAND, cv_tile},
    {"OneHot", GR_OP_WHERE, cv_one_hot},
    {"TopK", GR_OP_GATHER_ELEMENTS, cv_top_k},
    {"NonZero", GR_OP_IDENTITY, cv_data_dependent},
    {"ReduceProd", GR_OP_REDUCE_PROD, cv_reduce},
    {"ScatterElements", GR_OP_WHERE, cv_scatter_elements},
    {"ScatterND", GR_OP_WHERE, cv_scatter_nd},
    {"If", GR_OP_IF, cv_if},
    {"Loop", GR_OP_IDENTITY, cv_loop},
    {"Scan", GR_OP_IDENTITY, cv_scan},
};

gr_status ox_convert_node(ox_ctx *c) {
    const char *op_type = c->node->op_type;
    for (int i = 0; i < GR_ARRAY_LEN(op_table); i++)
        if (!strcmp(op_table[i].onnx, op_type)) return op_table[i].fn(c, op_table[i].op);
    return gr_error(GR_ERR_UNSUPPORTED, "node '%s' op '%s' (domain '%s') is not supported", c->node_name, op_type, S(c->node->domain));
}
