/* codegen/kir — building, verifying, printing and hashing kernel IR.
 * Semantics are documented in kir.h; the interpreter lives in interp.c. */
#include "codegen/kir.h"
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ==== building ========================================================================= */

/* Everything but params[n_params..] and stages[n_stages..], which nothing reads (add_param and
 * add_stage fill an entry whole): a kernel is ~2.9 KB, mostly those two arrays, and the
 * lowering and fusion of one plan create ~130 (a new binding of a symbolic model pays it). */
static void kernel_zero(gr_kernel *k) {
    memset(k, 0, offsetof(gr_kernel, params));
    memset(&k->n_outer, 0, offsetof(gr_kernel, stages) - offsetof(gr_kernel, n_outer));
    memset(&k->nodes, 0, sizeof *k - offsetof(gr_kernel, nodes));
}

/* The same parts of src into dst (nodes shared: the caller copies them). */
static void kernel_copy(gr_kernel *dst, const gr_kernel *src) {
    memcpy(dst, src, offsetof(gr_kernel, params));
    memcpy(dst->params, src->params, sizeof(gr_kparam) * (size_t)GR_MIN(GR_MAX(src->n_params, 0), GR_KMAX_PARAMS));
    memcpy(&dst->n_outer, &src->n_outer, offsetof(gr_kernel, stages) - offsetof(gr_kernel, n_outer));
    memcpy(dst->stages, src->stages, sizeof(gr_kstage) * (size_t)GR_MIN(GR_MAX(src->n_stages, 0), GR_KMAX_STAGES));
    memcpy(&dst->nodes, &src->nodes, sizeof *dst - offsetof(gr_kernel, nodes));
}

gr_status gr_kernel_create(const char *name, gr_kernel **out) {
    *out = NULL;
    gr_kernel *k = gr_malloc(sizeof(*k));
    if (!k) return GR_ERR_NOMEM;
    kernel_zero(k);
    gr_name_copy(k->name, sizeof(k->name), name ? name : "kernel", -1);
    k->n_points_param = -1;
    k->source_node = -1;
    *out = k;
    return GR_OK;
}

void gr_kernel_destroy(gr_kernel *k) {
    if (!k) return;
    gr_vec_free(&k->nodes);
    gr_free(k, sizeof(*k));
}

gr_status gr_kernel_clone(const gr_kernel *k, gr_kernel **out) {
    *out = NULL;
    gr_kernel *c = gr_malloc(sizeof(*c));
    if (!c) return GR_ERR_NOMEM;
    kernel_copy(c, k);
    c->nodes.data = NULL;
    c->nodes.len = c->nodes.cap = 0;
    if (k->nodes.len > 0) {
        if (gr_vec_reserve(&c->nodes, k->nodes.len) != GR_OK) {
            gr_free(c, sizeof(*c));
            return GR_ERR_NOMEM;
        }
        memcpy(c->nodes.data, k->nodes.data, (size_t)k->nodes.len * sizeof(gr_kexpr));
        c->nodes.len = k->nodes.len;
    }
    *out = c;
    return GR_OK;
}

gr_status gr_kernel_add_param(gr_kernel *k, gr_kparam_kind kind, gr_dtype t, const char *name, int *out) {
    if (k->n_params >= GR_KMAX_PARAMS)
        return gr_error(GR_ERR_UNSUPPORTED, "kernel %s: more than %d parameters", k->name, GR_KMAX_PARAMS);
    if ((int)kind < 0 || kind > GR_KP_SHAPE || (int)t < 0 || t >= GR_DTYPE_COUNT)
        return gr_error(GR_ERR_INVALID, "kernel %s: bad parameter kind %d / dtype %d", k->name, (int)kind, (int)t);
    gr_kparam *p = &k->params[k->n_params];
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->dtype = t;
    gr_name_copy(p->name, sizeof(p->name), name ? name : "p", -1);
    if (out) *out = k->n_params;
    k->n_params++;
    return GR_OK;
}

gr_status gr_kernel_add_expr(gr_kernel *k, const gr_kexpr *e, int *out) {
    GR_TRY(gr_vec_push(&k->nodes, *e));
    if (out) *out = k->nodes.len - 1;
    return GR_OK;
}

void gr_kaccess_init(gr_kaccess *a) {
    memset(a, 0, sizeof(*a));
    a->index = -1;
    a->origin = -1;
}

static void kx_init(gr_kexpr *e, gr_kexpr_op op, gr_dtype t) {
    memset(e, 0, sizeof(*e));
    e->op = op;
    e->dtype = t;
    e->a = e->b = e->c = -1;
    e->which = -1;
    e->param = -1;
    gr_kaccess_init(&e->access);
}

/* ---- constant origins (gr_kexpr.which of a CONST) ----
 * While on (the lowering and fusion of a symbolic model's binding), every constant made here
 * gets its origin: a number from the kernel's name and the node's index at creation, the same in
 * every build of the plan. Fusion's copies keep it, and CSE (passes/fuse-cse.c) merges two
 * constants only when value and origin agree. Why: merged by value alone, two constants that are
 * equal at one binding only (a dim that is 7 at batch 7 and a literal 7, or the +1 of an index
 * wrap and a seq of 1) became one node there and two elsewhere, so that binding's kernel had
 * another structure and needed a module of its own (a new NVRTC compile for a new length).
 * Copies of one producer's constants still merge, so repeated substitution stays linear. Off
 * (static models), constants carry no origin (-1) and merge by value as before. */
static _Thread_local bool origins_on;

void gr_kx_const_origins(bool on) { origins_on = on; }

static int32_t const_origin(const gr_kernel *k) {
    if (!origins_on) return -1;
    uint32_t h = 2166136261u;
    for (const char *p = k->name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    h ^= (uint32_t)k->nodes.len * 0x9E3779B1u;
    return (int32_t)(h & 0x7fffffffu);
}

gr_status gr_kx_const_f(gr_kernel *k, gr_dtype t, double v, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_CONST, t);
    e.which = const_origin(k);
    e.f = v;
    if (!gr_dtype_is_float(t)) {
        e.i = v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
        if (t == GR_BOOL) e.i = v != 0;
    }
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_const_i(gr_kernel *k, gr_dtype t, int64_t v, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_CONST, t);
    e.which = const_origin(k);
    e.i = t == GR_BOOL ? (v != 0) : v;
    e.f = (double)v;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_index(gr_kernel *k, int which, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_INDEX, GR_I64);
    e.which = which;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_param(gr_kernel *k, int param, int *out) {
    if (param < 0 || param >= k->n_params)
        return gr_error(GR_ERR_INVALID, "kernel %s: parameter %d out of range", k->name, param);
    gr_kexpr e;
    gr_dtype t = k->params[param].dtype;
    if (k->params[param].kind == GR_KP_SHAPE) t = GR_I64;
    kx_init(&e, GR_KX_PARAM, t);
    e.param = param;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_load(gr_kernel *k, int param, const gr_kaccess *acc, int *out) {
    if (param < 0 || param >= k->n_params)
        return gr_error(GR_ERR_INVALID, "kernel %s: parameter %d out of range", k->name, param);
    gr_kexpr e;
    kx_init(&e, GR_KX_LOAD, k->params[param].dtype);
    e.param = param;
    if (acc) e.access = *acc;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_acc(gr_kernel *k, int stage, gr_dtype t, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_ACC, t);
    e.which = stage;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_unary(gr_kernel *k, gr_kunary fn, gr_dtype t, int a, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_UNARY, t);
    e.fn = (int32_t)fn;
    e.a = a;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_binary(gr_kernel *k, gr_kbinary fn, gr_dtype t, int a, int b, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_BINARY, t);
    e.fn = (int32_t)fn;
    e.a = a;
    e.b = b;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_select(gr_kernel *k, gr_dtype t, int cond, int a, int b, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_SELECT, t);
    e.a = cond;
    e.b = a;
    e.c = b;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kx_cast(gr_kernel *k, gr_dtype t, int a, int *out) {
    gr_kexpr e;
    kx_init(&e, GR_KX_CAST, t);
    e.a = a;
    return gr_kernel_add_expr(k, &e, out);
}

gr_status gr_kernel_add_stage(gr_kernel *k, const gr_kstage *s) {
    if (k->n_stages >= GR_KMAX_STAGES)
        return gr_error(GR_ERR_UNSUPPORTED, "kernel %s: more than %d stages", k->name, GR_KMAX_STAGES);
    k->stages[k->n_stages++] = *s;
    return GR_OK;
}

int64_t gr_kernel_points(const gr_kernel *k) { return gr_shape_numel(k->n_outer, k->outer); }

int64_t gr_kernel_inner_points(const gr_kernel *k) { return gr_shape_numel(k->n_inner, k->inner); }

/* ==== verification ===================================================================== */

static const char *const op_names[] = {"const", "index", "param", "load", "acc",
                                       "unary", "binary", "select", "cast", "random"};
_Static_assert(sizeof op_names / sizeof op_names[0] == GR_KX_RANDOM + 1, "a name per kernel expression op");
const char *const gr_kunary_names[] = {
#define GR_KU_HAND(id, name) [GR_KU_##id] = #name,
#define GR_KU_EXPR(id, name, expr) [GR_KU_##id] = #name,
#include "codegen/kunary.def"
#undef GR_KU_HAND
#undef GR_KU_EXPR
};
_Static_assert(sizeof gr_kunary_names / sizeof gr_kunary_names[0] == GR_KU_COUNT, "kunary.def: a name per function");
#define unary_names gr_kunary_names
static const char *const binary_names[] = {"add", "sub", "mul", "div", "pow", "min", "max", "eq",
                                           "lt", "le", "gt", "ge", "and", "or", "mod"};
_Static_assert(sizeof binary_names / sizeof binary_names[0] == GR_KB_COUNT, "a name per binary function");
static const char *const reduce_names[] = {"sum", "max", "min", "prod"};
_Static_assert(sizeof reduce_names / sizeof reduce_names[0] == GR_KR_COUNT, "a name per reduction");
static const char *const param_kind_names[] = {"buffer", "buffer_indirect", "scalar_f", "scalar_i", "shape"};
_Static_assert(sizeof param_kind_names / sizeof param_kind_names[0] == GR_KP_SHAPE + 1, "a name per param kind");

static bool is_buffer_param(const gr_kernel *k, int p) {
    return p >= 0 && p < k->n_params &&
           (k->params[p].kind == GR_KP_BUFFER || k->params[p].kind == GR_KP_BUFFER_INDIRECT);
}

static bool index_id_valid(const gr_kernel *k, int which) {
    if (which == GR_KIDX_LINEAR) return true;
    if (which >= 0 && which < k->n_outer) return true;
    return which >= GR_KIDX_INNER && which < GR_KIDX_INNER + k->n_inner;
}

static gr_status verify_access(const gr_kernel *k, const gr_kaccess *a, int before, const char *what, int at) {
    if (a->index >= 0) {
        if (a->index >= before)
            return gr_error(GR_ERR_INVALID, "kernel %s: %s %d: gather index node %d is not earlier", k->name,
                            what, at, a->index);
        if (gr_dtype_is_float(k->nodes.data[a->index].dtype))
            return gr_error(GR_ERR_INVALID, "kernel %s: %s %d: gather index node %d is not an integer", k->name,
                            what, at, a->index);
        if (a->index_extent <= 0)
            return gr_error(GR_ERR_INVALID, "kernel %s: %s %d: gather index_extent %lld must be positive",
                            k->name, what, at, (long long)a->index_extent);
    } else if (a->index < -1) {
        return gr_error(GR_ERR_INVALID, "kernel %s: %s %d: bad index node %d", k->name, what, at, a->index);
    }
    return GR_OK;
}

gr_status gr_kernel_verify(const gr_kernel *k) {
    if (k->n_outer < 0 || k->n_outer > GR_MAX_DIMS || k->n_inner < 0 || k->n_inner > GR_MAX_DIMS)
        return gr_error(GR_ERR_INVALID, "kernel %s: bad loop nest (%d outer, %d inner dims)", k->name, k->n_outer,
                        k->n_inner);
    for (int d = 0; d < k->n_outer; d++)
        if (k->outer[d] < 0) return gr_error(GR_ERR_INVALID, "kernel %s: negative outer extent", k->name);
    for (int d = 0; d < k->n_inner; d++)
        if (k->inner[d] < 0) return gr_error(GR_ERR_INVALID, "kernel %s: negative inner extent", k->name);
    if (k->n_params < 0 || k->n_params > GR_KMAX_PARAMS || k->n_stages < 0 || k->n_stages > GR_KMAX_STAGES)
        return gr_error(GR_ERR_INVALID, "kernel %s: bad parameter or stage count", k->name);
    for (int p = 0; p < k->n_params; p++) {
        if ((int)k->params[p].kind < 0 || k->params[p].kind > GR_KP_SHAPE || (int)k->params[p].dtype < 0 ||
            k->params[p].dtype >= GR_DTYPE_COUNT)
            return gr_error(GR_ERR_INVALID, "kernel %s: parameter %d has a bad kind or dtype", k->name, p);
    }
    if (k->n_points_param >= 0 &&
        (k->n_points_param >= k->n_params || k->params[k->n_points_param].kind != GR_KP_SHAPE))
        return gr_error(GR_ERR_INVALID, "kernel %s: n_points_param %d is not a shape parameter", k->name,
                        k->n_points_param);
    int n = k->nodes.len;
    /* inner_dep[i]: node i reads an inner loop index (directly, through operands or a gather). */
    /* inner_dep[n+1] then cone[n+1]; on the stack for the usual kernel (every kernel of a
     * new binding's plan is verified two or three times) */
    bool local[2 * 256];
    bool *inner_dep = n + 1 <= 256 ? memset(local, 0, 2 * ((size_t)n + 1)) : gr_calloc((size_t)n + 1, 2 * sizeof(bool));
    if (!inner_dep) return GR_ERR_NOMEM;
    bool *cone = inner_dep + n + 1;
    gr_status st = GR_OK;
#define VFAIL(...)                                      \
    do {                                                \
        st = gr_error(GR_ERR_INVALID, __VA_ARGS__);     \
        goto done;                                      \
    } while (0)
    for (int i = 0; i < n; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        if ((int)e->dtype < 0 || e->dtype >= GR_DTYPE_COUNT) VFAIL("kernel %s: node %d: bad dtype", k->name, i);
        int nops = 0;
        switch (e->op) {
        case GR_KX_CONST: break;
        case GR_KX_INDEX:
            if (!index_id_valid(k, e->which))
                VFAIL("kernel %s: node %d: loop index %d does not exist (%d outer, %d inner dims)", k->name, i,
                      e->which, k->n_outer, k->n_inner);
            if (gr_dtype_is_float(e->dtype)) VFAIL("kernel %s: node %d: index must be an integer", k->name, i);
            if (e->which >= GR_KIDX_INNER && e->which < GR_KIDX_LINEAR) inner_dep[i] = true;
            break;
        case GR_KX_PARAM:
            if (e->param < 0 || e->param >= k->n_params || is_buffer_param(k, e->param))
                VFAIL("kernel %s: node %d: param %d is not a scalar or shape parameter", k->name, i, e->param);
            break;
        case GR_KX_LOAD:
            if (!is_buffer_param(k, e->param))
                VFAIL("kernel %s: node %d: load from param %d, which is not a buffer", k->name, i, e->param);
            st = verify_access(k, &e->access, i, "node", i);
            if (st != GR_OK) goto done;
            for (int d = 0; d < k->n_inner; d++)
                if (e->access.inner_stride[d] != 0) inner_dep[i] = true;
            if (e->access.index >= 0 && inner_dep[e->access.index]) inner_dep[i] = true;
            break;
        case GR_KX_ACC:
            if (e->which < 0 || e->which >= k->n_stages || k->stages[e->which].kind != GR_KS_REDUCE)
                VFAIL("kernel %s: node %d: accumulator of stage %d, which is not a reduce stage", k->name, i,
                      e->which);
            break;
        case GR_KX_UNARY:
            if (e->fn < 0 || e->fn >= GR_KU_COUNT) VFAIL("kernel %s: node %d: bad unary fn %d", k->name, i, e->fn);
            nops = 1;
            break;
        case GR_KX_BINARY:
            if (e->fn < 0 || e->fn >= GR_KB_COUNT) VFAIL("kernel %s: node %d: bad binary fn %d", k->name, i, e->fn);
            nops = 2;
            break;
        case GR_KX_SELECT: nops = 3; break;
        case GR_KX_CAST: nops = 1; break;
        case GR_KX_RANDOM:
            if (e->dtype != GR_F32 && e->dtype != GR_F64)
                VFAIL("kernel %s: node %d: random must be f32 or f64", k->name, i);
            if (e->a < 0 || e->a >= i || gr_dtype_is_float(k->nodes.data[e->a].dtype))
                VFAIL("kernel %s: node %d: random counter must be an earlier integer node", k->name, i);
            nops = 1;
            break;
        default: VFAIL("kernel %s: node %d: bad op %d", k->name, i, (int)e->op);
        }
        const int32_t ops[3] = {e->a, e->b, e->c};
        for (int j = 0; j < nops; j++) {
            if (ops[j] < 0 || ops[j] >= i)
                VFAIL("kernel %s: node %d (%s): operand %d refers to node %d (must be in [0, %d))", k->name, i,
                      op_names[e->op], j, ops[j], i);
            if (inner_dep[ops[j]]) inner_dep[i] = true;
        }
    }
    for (int s = 0; s < k->n_stages; s++) {
        const gr_kstage *sg = &k->stages[s];
        if (sg->value < 0 || sg->value >= n)
            VFAIL("kernel %s: stage %d: value node %d does not exist", k->name, s, sg->value);
        /* ACC nodes in this stage's value cone must refer to earlier stages. */
        memset(cone, 0, (size_t)n * sizeof(bool));
        cone[sg->value] = true;
        int top = sg->value;
        if (sg->kind == GR_KS_STORE && sg->access.index >= 0 && sg->access.index < n) {
            cone[sg->access.index] = true; /* a scatter's index is read by the stage too */
            if (sg->access.index > top) top = sg->access.index;
        }
        for (int j = top; j >= 0; j--) {
            if (!cone[j]) continue;
            const gr_kexpr *x = &k->nodes.data[j];
            if (x->op == GR_KX_ACC && x->which >= s)
                VFAIL("kernel %s: stage %d reads the accumulator of stage %d (node %d), which is not earlier",
                      k->name, s, x->which, j);
            const int32_t xs[4] = {x->a, x->b, x->c, x->op == GR_KX_LOAD ? x->access.index : -1};
            for (int q = 0; q < 4; q++)
                if (xs[q] >= 0 && xs[q] < j) cone[xs[q]] = true;
        }
        if (sg->kind == GR_KS_REDUCE) {
            if ((int)sg->reduce < 0 || sg->reduce >= GR_KR_COUNT)
                VFAIL("kernel %s: stage %d: bad reduce fn %d", k->name, s, (int)sg->reduce);
        } else if (sg->kind == GR_KS_STORE) {
            if (!is_buffer_param(k, sg->param))
                VFAIL("kernel %s: stage %d: store to param %d, which is not a buffer", k->name, s, sg->param);
            /* a scatter store: the index node must exist (every node precedes the stages) */
            st = verify_access(k, &sg->access, n, "stage", s);
            if (st != GR_OK) goto done;
            if (!sg->over_inner) {
                if (sg->access.index >= 0 && inner_dep[sg->access.index])
                    VFAIL("kernel %s: stage %d: store without over_inner has a scatter index that depends on an inner loop index",
                          k->name, s);
                if (inner_dep[sg->value])
                    VFAIL("kernel %s: stage %d: store without over_inner depends on an inner loop index", k->name,
                          s);
                for (int d = 0; d < k->n_inner; d++)
                    if (sg->access.inner_stride[d] != 0)
                        VFAIL("kernel %s: stage %d: store without over_inner has an inner stride", k->name, s);
            }
        } else {
            VFAIL("kernel %s: stage %d: bad kind %d", k->name, s, (int)sg->kind);
        }
    }
done:
#undef VFAIL
    if (inner_dep != local) gr_free(inner_dep, ((size_t)n + 1) * 2 * sizeof(bool));
    return st;
}

bool gr_kernel_scatters(const gr_kernel *k) {
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].access.index >= 0) return true;
    return false;
}

/* ==== printing ========================================================================= */

static void print_access(gr_strbuf *sb, const gr_kernel *k, const gr_kaccess *a) {
    gr_sb_printf(sb, "[%lld", (long long)a->offset);
    for (int d = 0; d < k->n_outer; d++)
        if (a->stride[d]) gr_sb_printf(sb, " + %lld*o%d", (long long)a->stride[d], d);
    for (int d = 0; d < k->n_inner; d++)
        if (a->inner_stride[d]) gr_sb_printf(sb, " + %lld*r%d", (long long)a->inner_stride[d], d);
    if (a->index >= 0)
        gr_sb_printf(sb, " + wrap(%%%d, %lld)*%lld", a->index, (long long)a->index_extent,
                     (long long)a->index_stride);
    gr_sb_puts(sb, "]");
}

static void print_index_name(gr_strbuf *sb, int which) {
    if (which == GR_KIDX_LINEAR) gr_sb_puts(sb, "linear");
    else if (which >= GR_KIDX_INNER) gr_sb_printf(sb, "r%d", which - GR_KIDX_INNER);
    else gr_sb_printf(sb, "o%d", which);
}

gr_status gr_kernel_print(const gr_kernel *k, gr_strbuf *sb) {
    gr_sb_printf(sb, "kernel %s  outer(", k->name);
    for (int d = 0; d < k->n_outer; d++) gr_sb_printf(sb, "%s%lld", d ? ", " : "", (long long)k->outer[d]);
    gr_sb_puts(sb, ") inner(");
    for (int d = 0; d < k->n_inner; d++) gr_sb_printf(sb, "%s%lld", d ? ", " : "", (long long)k->inner[d]);
    gr_sb_puts(sb, ")");
    if (k->n_points_param >= 0) gr_sb_printf(sb, "  points=$%d", k->n_points_param);
    if (k->source_node >= 0) gr_sb_printf(sb, "  source=node%d", k->source_node);
    gr_sb_puts(sb, "\n");
    for (int p = 0; p < k->n_params; p++) {
        const gr_kparam *pp = &k->params[p];
        int kind = (int)pp->kind >= 0 && pp->kind <= GR_KP_SHAPE ? (int)pp->kind : 0;
        gr_sb_printf(sb, "  $%d %s %s %s%s\n", p, pp->name, param_kind_names[kind],
                     (int)pp->dtype >= 0 && pp->dtype < GR_DTYPE_COUNT ? gr_dtype_name(pp->dtype) : "?",
                     pp->written ? " written" : "");
    }
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        const char *tn = (int)e->dtype >= 0 && e->dtype < GR_DTYPE_COUNT ? gr_dtype_name(e->dtype) : "?";
        gr_sb_printf(sb, "  %%%d: %s = ", i, tn);
        switch (e->op) {
        case GR_KX_CONST:
            if (gr_dtype_is_float(e->dtype)) gr_sb_printf(sb, "const %.9g", e->f);
            else gr_sb_printf(sb, "const %lld", (long long)e->i);
            break;
        case GR_KX_INDEX:
            gr_sb_puts(sb, "index ");
            print_index_name(sb, e->which);
            break;
        case GR_KX_PARAM: gr_sb_printf(sb, "param $%d", e->param); break;
        case GR_KX_LOAD:
            gr_sb_printf(sb, "load $%d", e->param);
            print_access(sb, k, &e->access);
            break;
        case GR_KX_ACC: gr_sb_printf(sb, "acc stage%d", e->which); break;
        case GR_KX_UNARY:
            gr_sb_printf(sb, "%s %%%d", e->fn >= 0 && e->fn < GR_KU_COUNT ? unary_names[e->fn] : "?unary", e->a);
            break;
        case GR_KX_BINARY:
            gr_sb_printf(sb, "%s %%%d, %%%d", e->fn >= 0 && e->fn < GR_KB_COUNT ? binary_names[e->fn] : "?binary",
                         e->a, e->b);
            break;
        case GR_KX_SELECT: gr_sb_printf(sb, "select %%%d ? %%%d : %%%d", e->a, e->b, e->c); break;
        case GR_KX_CAST: gr_sb_printf(sb, "cast %%%d", e->a); break;
        case GR_KX_RANDOM: gr_sb_printf(sb, "random seed=%lld counter=%%%d", (long long)e->i, e->a); break;
        default: gr_sb_printf(sb, "?op%d", (int)e->op); break;
        }
        gr_sb_puts(sb, "\n");
    }
    for (int s = 0; s < k->n_stages; s++) {
        const gr_kstage *sg = &k->stages[s];
        if (sg->kind == GR_KS_REDUCE) {
            gr_sb_printf(sb, "  stage%d: reduce %s %%%d\n", s,
                         (int)sg->reduce >= 0 && sg->reduce < GR_KR_COUNT ? reduce_names[sg->reduce] : "?",
                         sg->value);
        } else {
            gr_sb_printf(sb, "  stage%d: store%s $%d", s, sg->over_inner ? " over_inner" : "", sg->param);
            print_access(sb, k, &sg->access);
            gr_sb_printf(sb, " = %%%d\n", sg->value);
        }
    }
    return sb->failed ? gr_nomem() : GR_OK;
}

/* ==== hashing ========================================================================== */

static uint64_t mix(uint64_t h, uint64_t v) { return gr_hash_bytes(&v, sizeof(v), h); }

static uint64_t mixd(uint64_t h, double d) {
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return mix(h, v);
}

static uint64_t hash_access(uint64_t h, const gr_kernel *k, const gr_kaccess *a) {
    h = mix(h, (uint64_t)a->offset);
    for (int d = 0; d < k->n_outer; d++) h = mix(h, (uint64_t)a->stride[d]);
    for (int d = 0; d < k->n_inner; d++) h = mix(h, (uint64_t)a->inner_stride[d]);
    h = mix(h, (uint64_t)(int64_t)a->index);
    if (a->index >= 0) {
        h = mix(h, (uint64_t)a->index_stride);
        h = mix(h, (uint64_t)a->index_extent);
    }
    return h;
}

/* Field by field (never the raw struct: padding and unused fields must not leak in).
 * The kernel name, parameter names and source_node are excluded: they do not change
 * what the code computes. */
uint64_t gr_kernel_hash(const gr_kernel *k) {
    uint64_t h = 0x6772616674ull; /* "graft" */
    h = mix(h, (uint64_t)k->n_params);
    for (int p = 0; p < k->n_params; p++) {
        h = mix(h, (uint64_t)k->params[p].kind);
        h = mix(h, (uint64_t)k->params[p].dtype);
        h = mix(h, (uint64_t)k->params[p].written);
    }
    h = mix(h, (uint64_t)k->n_outer);
    for (int d = 0; d < k->n_outer; d++) h = mix(h, (uint64_t)k->outer[d]);
    h = mix(h, (uint64_t)k->n_inner);
    for (int d = 0; d < k->n_inner; d++) h = mix(h, (uint64_t)k->inner[d]);
    h = mix(h, (uint64_t)(int64_t)k->n_points_param);
    h = mix(h, (uint64_t)k->nodes.len);
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        h = mix(h, (uint64_t)e->op);
        h = mix(h, (uint64_t)e->dtype);
        switch (e->op) {
        case GR_KX_CONST:
            if (gr_dtype_is_float(e->dtype)) h = mixd(h, e->f);
            else h = mix(h, (uint64_t)e->i);
            break;
        case GR_KX_INDEX:
        case GR_KX_ACC: h = mix(h, (uint64_t)(int64_t)e->which); break;
        case GR_KX_PARAM: h = mix(h, (uint64_t)(int64_t)e->param); break;
        case GR_KX_LOAD:
            h = mix(h, (uint64_t)(int64_t)e->param);
            h = hash_access(h, k, &e->access);
            break;
        case GR_KX_RANDOM:
            h = mix(h, (uint64_t)e->i);
            h = mix(h, (uint64_t)(int64_t)e->a);
            break;
        default:
            h = mix(h, (uint64_t)(int64_t)e->fn);
            h = mix(h, (uint64_t)(int64_t)e->a);
            h = mix(h, (uint64_t)(int64_t)e->b);
            h = mix(h, (uint64_t)(int64_t)e->c);
            break;
        }
    }
    h = mix(h, (uint64_t)k->n_stages);
    for (int s = 0; s < k->n_stages; s++) {
        const gr_kstage *sg = &k->stages[s];
        h = mix(h, (uint64_t)sg->kind);
        h = mix(h, (uint64_t)(int64_t)sg->value);
        if (sg->kind == GR_KS_REDUCE) {
            h = mix(h, (uint64_t)sg->reduce);
        } else {
            h = mix(h, (uint64_t)sg->over_inner);
            h = mix(h, (uint64_t)(int64_t)sg->param);
            h = hash_access(h, k, &sg->access);
        }
    }
    return h;
}

bool gr_kaccess_equal(const gr_kaccess *a, const gr_kaccess *b) {
    if (a->offset != b->offset || a->index != b->index || a->index_stride != b->index_stride ||
        a->index_extent != b->index_extent)
        return false;
    for (int d = 0; d < GR_MAX_DIMS; d++)
        if (a->stride[d] != b->stride[d] || a->inner_stride[d] != b->inner_stride[d]) return false;
    return true;
}
