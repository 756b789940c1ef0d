/* passes/fold — constant folding.
 *
 * A node whose inputs are all constants (and a generator, which has no
 * inputs) is evaluated on the host at compile time with exactly the code the
 * simulator runs: the node is lowered (gr_pass_lower_node), its kernels are
 * interpreted (gr_kernel_interpret) and its library calls run by their
 * reference implementation. Its outputs then become constants owned by the
 * graph and the node is removed. Doing it with the lowering rather than a
 * second implementation of every op keeps folded and run-time results
 * bit-identical (random_normal, for one, must give the same bits either way).
 *
 * Left alone: control flow, nodes with a non-concrete or untyped output or a
 * symbolic attribute (on a graph with symbolic dims, the session folds what
 * no binding changes once, before any plan: those are shared weights),
 * outputs above FOLD_MAX_ELEMS elements (they would bloat the weights; run
 * time computes them), fill and range nodes above FOLD_MAX_CHEAP_GEN_ELEMS
 * elements (their kernels read nothing and fuse into their readers at no
 * cost, while a folded copy is weight memory read back at run time: EOS's
 * 1M-element zeros were a 4 MiB constant), and nodes whose lowering is
 * unsupported or needs a host step. Random generators still fold at any size
 * up to FOLD_MAX_ELEMS: they are weights, and their values must not change
 * between runs or plans.
 */
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

#define FOLD_MAX_ELEMS ((int64_t)64 * 1024 * 1024)
#define FOLD_MAX_CHEAP_GEN_ELEMS ((int64_t)4096) /* fill / range above this stay kernels */

typedef struct {
    char *base;     /* element 0 of the value */
    size_t bytes;   /* bytes reachable from base */
    bool owned;     /* allocated here (else a constant's data or a view) */
    bool readonly;  /* a constant's data: kernels must not write it */
} fold_buf;

/* Host buffers by value index, kept for the whole pass and cleared after
 * each node (only the entries it touched), so that folding a node costs what
 * the node touches, not the size of the graph. */
typedef struct {
    fold_buf *bufs; /* n_bufs entries, all zero outside a node's folding */
    int n_bufs;
    GR_VEC(int) touched;
} fold_state;

typedef struct {
    gr_graph *g;
    int node;
    char where[512];
    fold_state *fs;
    fold_buf *bufs; /* fs->bufs: one per value index (values added by lowering included) */
    int n_bufs;
    gr_step_list steps;
    int values_before; /* g->values.len before lowering: later values are temporaries */
} fold_ctx;

/* The node being folded, for a message: formatted on first use (every new binding of a
 * symbolic model folds nodes, and messages are for failures). */
static const char *fold_where(fold_ctx *c) {
    if (!c->where[0]) gr_ir_node_where(c->g, &c->g->nodes.data[c->node], c->where, sizeof c->where);
    return c->where;
}

/* per-launch bounds check handed to the interpreter */
typedef struct {
    const char *kernel;
    int64_t avail[GR_KMAX_PARAMS]; /* bytes from the bound address; -1: unchecked */
    bool readonly[GR_KMAX_PARAMS];
    const void *slot[GR_KMAX_PARAMS]; /* indirect params: the slot address */
} fold_check;

static gr_status check_range(void *user, int param, const void *base, int64_t lo, int64_t hi, bool write) {
    const fold_check *fc = user;
    if (param < 0 || param >= GR_KMAX_PARAMS) return GR_OK;
    if (fc->slot[param] && base == fc->slot[param]) return GR_OK;
    if (fc->avail[param] < 0) return GR_OK;
    if (lo < 0 || hi > fc->avail[param])
        return gr_error(GR_ERR_INTERNAL, "constant folding: kernel %s param %d touches bytes [%lld, %lld) of a %lld-byte buffer",
                        fc->kernel, param, (long long)lo, (long long)hi, (long long)fc->avail[param]);
    if (write && fc->readonly[param])
        return gr_error(GR_ERR_INTERNAL, "constant folding: kernel %s writes constant data (param %d)", fc->kernel, param);
    return GR_OK;
}

/* ==== candidates ===================================================================== */
static bool foldable(const gr_graph *g, const gr_ir_node *n) {
    const gr_op_info *info = gr_op_get(n->op);
    if (!info || info->kind == GR_OPK_CONTROL || info->kind == GR_OPK_COLLECTIVE) return false;
    /* a symbolic attribute (a fill of a symbolic value) has a value only per binding */
    if (gr_ir_node_has_sym_attr(n) || n->no_fold) return false;
    int n_present = 0;
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0) continue;
        if (v >= g->values.len || g->values.data[v].kind != GR_VAL_CONST) return false;
        n_present++;
    }
    if (n_present == 0 && info->kind != GR_OPK_GEN) return false;
    if (n->n_out < 1) return false;
    for (int i = 0; i < n->n_out; i++) {
        int v = n->out[i];
        if (v < 0 || v >= g->values.len) return false;
        int64_t numel = gr_ir_value_numel(&g->values.data[v]);
        if (numel < 0 || numel > FOLD_MAX_ELEMS) return false;
        if ((n->op == GR_OP_FILL || n->op == GR_OP_RANGE) && numel > FOLD_MAX_CHEAP_GEN_ELEMS) return false;
    }
    return true;
}

/* ==== buffers ========================================================================== */
static size_t value_bytes(const gr_ir_value *v) {
    int64_t numel = gr_ir_value_numel(v);
    return numel > 0 ? (size_t)numel * gr_dtype_size(v->dtype) : 0;
}

/* Makes sure value v has a host buffer: a constant's data, or a fresh zeroed one. */
static gr_status ensure_buf(fold_ctx *c, int v) {
    if (v < 0 || v >= c->n_bufs) return gr_error(GR_ERR_INTERNAL, "%s: folding: step refers to value %d", fold_where(c), v);
    fold_buf *b = &c->bufs[v];
    if (b->base) return GR_OK;
    GR_TRY(gr_vec_push(&c->fs->touched, v));
    gr_ir_value *val = &c->g->values.data[v];
    if (val->kind == GR_VAL_CONST) {
        b->base = val->data;
        b->bytes = val->nbytes;
        b->readonly = true;
        if (!b->base) b->base = (char *)val; /* empty constant: any non-NULL address, never dereferenced */
        return GR_OK;
    }
    if (!gr_ir_value_concrete(val))
        return gr_error(GR_ERR_INTERNAL, "%s: folding: value '%s' has no concrete type", fold_where(c), val->name);
    size_t bytes = value_bytes(val);
    b->base = gr_calloc(1, bytes ? bytes : 1);
    if (!b->base) return GR_ERR_NOMEM;
    b->bytes = bytes;
    b->owned = true;
    return GR_OK;
}

/* Room for a buffer entry per value of g (temporaries included). */
static gr_status state_fit(fold_state *fs, const gr_graph *g) {
    if (g->values.len <= fs->n_bufs) return GR_OK;
    int n = fs->n_bufs ? fs->n_bufs : 64;
    while (n < g->values.len) n *= 2;
    fold_buf *b = gr_realloc(fs->bufs, (size_t)fs->n_bufs * sizeof(fold_buf), (size_t)n * sizeof(fold_buf));
    if (!b) return GR_ERR_NOMEM;
    memset(b + fs->n_bufs, 0, (size_t)(n - fs->n_bufs) * sizeof(fold_buf));
    fs->bufs = b;
    fs->n_bufs = n;
    return GR_OK;
}

static void state_free(fold_state *fs) {
    gr_free(fs->bufs, (size_t)fs->n_bufs * sizeof(fold_buf));
    gr_vec_free(&fs->touched);
}

static void free_bufs(fold_ctx *c) {
    fold_state *fs = c->fs;
    for (int i = 0; i < fs->touched.len; i++) {
        fold_buf *b = &fs->bufs[fs->touched.data[i]];
        if (b->owned) gr_free(b->base, b->bytes ? b->bytes : 1);
        memset(b, 0, sizeof *b);
    }
    fs->touched.len = 0;
    c->bufs = NULL;
    c->n_bufs = 0;
}

/* Drops the temporaries lowering added (nothing else refers to them). */
static void drop_temporaries(fold_ctx *c) {
    gr_graph *g = c->g;
    for (int i = c->values_before; i < g->values.len; i++) {
        gr_ir_value_name_free(&g->values.data[i]);
        gr_free(g->values.data[i].data, g->values.data[i].nbytes);
    }
    if (g->values.len > c->values_before) g->values.len = c->values_before;
}

/* ==== running the steps ==================================================================== */
/* Resolves a step argument bound to kernel param kind `kind` into a launch argument. */
static gr_status resolve_arg(fold_ctx *c, const gr_step_arg *a, gr_kparam_kind kind, gr_karg *out, void **slot,
                             fold_check *fc, int p) {
    memset(out, 0, sizeof *out);
    fc->avail[p] = -1;
    switch (a->kind) {
    case GR_ARG_LITERAL: *out = a->literal; return GR_OK;
    case GR_ARG_VALUE: {
        GR_TRY(ensure_buf(c, a->value));
        const fold_buf *b = &c->bufs[a->value];
        size_t off = (size_t)a->elem_offset * gr_dtype_size(c->g->values.data[a->value].dtype);
        if (a->elem_offset < 0 || off > b->bytes)
            return gr_error(GR_ERR_INTERNAL, "%s: folding: offset %lld outside value '%s'", fold_where(c), (long long)a->elem_offset,
                            c->g->values.data[a->value].name);
        char *ptr = b->base + off;
        fc->avail[p] = (int64_t)(b->bytes - off);
        fc->readonly[p] = b->readonly;
        if (kind == GR_KP_BUFFER_INDIRECT) {
            *slot = ptr;
            out->ptr = slot;
            fc->slot[p] = slot;
        } else {
            out->ptr = ptr;
        }
        return GR_OK;
    }
    case GR_ARG_HOST_SCALAR: {
        GR_TRY(ensure_buf(c, a->value));
        const gr_ir_value *v = &c->g->values.data[a->value];
        const fold_buf *b = &c->bufs[a->value];
        if (b->bytes < gr_dtype_size(v->dtype))
            return gr_error(GR_ERR_INTERNAL, "%s: folding: host scalar '%s' is empty", fold_where(c), v->name);
        if (kind == GR_KP_SCALAR_F) out->f = gr_load_f64(b->base, v->dtype, 0);
        else out->i = gr_load_i64(b->base, v->dtype, 0);
        return GR_OK;
    }
    }
    return gr_error(GR_ERR_INTERNAL, "%s: folding: bad argument kind %d", fold_where(c), (int)a->kind);
}

static gr_status run_step(fold_ctx *c, const gr_step *s, bool *host_step) {
    gr_karg args[GR_KMAX_PARAMS];
    void *slots[GR_KMAX_PARAMS];
    fold_check fc;
    memset(&fc, 0, sizeof fc);
    switch (s->kind) {
    case GR_STEP_HOST: *host_step = true; return GR_OK;
    case GR_STEP_ALIAS: {
        const gr_step_arg *a = &s->args[0];
        if (s->n_args < 1 || a->kind != GR_ARG_VALUE || s->out_value < 0 || s->out_value >= c->n_bufs)
            return gr_error(GR_ERR_INTERNAL, "%s: folding: malformed alias step", fold_where(c));
        GR_TRY(ensure_buf(c, a->value));
        const fold_buf *src = &c->bufs[a->value];
        size_t off = (size_t)a->elem_offset * gr_dtype_size(c->g->values.data[a->value].dtype);
        if (a->elem_offset < 0 || off > src->bytes)
            return gr_error(GR_ERR_INTERNAL, "%s: folding: alias offset %lld outside value '%s'", fold_where(c),
                            (long long)a->elem_offset, c->g->values.data[a->value].name);
        fold_buf *dst = &c->bufs[s->out_value];
        if (!dst->base) GR_TRY(gr_vec_push(&c->fs->touched, s->out_value));
        if (dst->owned) gr_free(dst->base, dst->bytes ? dst->bytes : 1);
        *dst = (fold_buf){src->base + off, src->bytes - off, false, src->readonly};
        return GR_OK;
    }
    case GR_STEP_KERNEL: {
        const gr_kernel *k = s->kernel;
        if (!k || s->n_args != k->n_params || s->n_args > GR_KMAX_PARAMS)
            return gr_error(GR_ERR_INTERNAL, "%s: folding: kernel step binds %d args for %d params", fold_where(c), s->n_args,
                            k ? k->n_params : -1);
        fc.kernel = k->name;
        for (int i = 0; i < s->n_args; i++) GR_TRY(resolve_arg(c, &s->args[i], k->params[i].kind, &args[i], &slots[i], &fc, i));
        return gr_kernel_interpret(k, args, s->n_args, check_range, &fc);
    }
    case GR_STEP_LIBCALL: {
        if (s->n_args < gr_libcall_nargs(&s->call))
            return gr_error(GR_ERR_INTERNAL, "%s: folding: library call binds %d args", fold_where(c), s->n_args);
        for (int i = 0; i < gr_libcall_nargs(&s->call); i++)
            GR_TRY(resolve_arg(c, &s->args[i], GR_KP_BUFFER, &args[i], &slots[i], &fc, i));
        return gr_libcall_reference(&s->call, args);
    }
    }
    return gr_error(GR_ERR_INTERNAL, "%s: folding: bad step kind %d", fold_where(c), (int)s->kind);
}

/* ==== node removal =========================================================================== */
static void node_release(gr_ir_node *n) { gr_ir_node_release(n); }

/* Removes the folded nodes (their outputs are constants already) in one
 * pass, renumbering the producers of the values the others make. */
static void remove_folded(gr_graph *g, const bool *folded) {
    int kept = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        if (folded[i]) {
            node_release(&g->nodes.data[i]);
            continue;
        }
        if (kept != i) {
            g->nodes.data[kept] = g->nodes.data[i];
            for (int o = 0; o < g->nodes.data[kept].n_out; o++) {
                int v = g->nodes.data[kept].out[o];
                if (v >= 0 && v < g->values.len && g->values.data[v].kind == GR_VAL_NODE && g->values.data[v].producer == i)
                    g->values.data[v].producer = kept;
            }
        }
        kept++;
    }
    g->nodes.len = kept;
}

/* ==== one node ================================================================================== */
static gr_status fold_node(gr_graph *g, fold_state *fs, int ni, bool *folded) {
    *folded = false;
    if (!foldable(g, &g->nodes.data[ni])) return GR_OK;
    fold_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.fs = fs;
    c.node = ni;
    c.values_before = g->values.len;
    int n_out = g->nodes.data[ni].n_out;
    void **data = NULL;
    size_t *nbytes = NULL;

    gr_status st = gr_pass_lower_node(g, ni, &c.steps);
    if (st == GR_ERR_UNSUPPORTED) { /* run time will say so, or a later pass handles it */
        gr_error_clear();
        st = GR_OK;
        goto done;
    }
    if (st != GR_OK) goto done;
    if (state_fit(fs, g) == GR_OK) {
        c.bufs = fs->bufs;
        c.n_bufs = g->values.len;
    }
    data = gr_calloc((size_t)n_out, sizeof(void *));
    nbytes = gr_calloc((size_t)n_out, sizeof(size_t));
    if (!c.bufs || !data || !nbytes) {
        st = GR_ERR_NOMEM;
        goto done;
    }
    bool host_step = false;
    for (int i = 0; i < c.steps.len && st == GR_OK && !host_step; i++) st = run_step(&c, &c.steps.data[i], &host_step);
    if (st != GR_OK) {
        if (st != GR_ERR_NOMEM) gr_error_prefix(st, "while folding %s", fold_where(&c));
        goto done;
    }
    if (host_step) goto done;

    /* take the results: steal a buffer of exactly the output's size, else copy */
    for (int i = 0; i < n_out; i++) {
        int v = g->nodes.data[ni].out[i];
        const gr_ir_value *val = &g->values.data[v];
        size_t bytes = value_bytes(val);
        fold_buf *b = &c.bufs[v];
        if (bytes > 0 && (!b->base || b->bytes < bytes)) {
            st = gr_error(GR_ERR_INTERNAL, "%s: folding: the lowered steps do not produce output %d", fold_where(&c), i);
            goto done;
        }
        if (b->owned && b->bytes == bytes && bytes > 0) {
            data[i] = b->base;
            b->owned = false;
        } else {
            data[i] = gr_malloc(bytes ? bytes : 1);
            if (!data[i]) {
                st = GR_ERR_NOMEM;
                goto done;
            }
            if (bytes) memcpy(data[i], b->base, bytes);
        }
        nbytes[i] = bytes;
    }
    /* commit: nothing below fails */
    for (int i = 0; i < n_out; i++) {
        gr_ir_value *val = &g->values.data[g->nodes.data[ni].out[i]];
        val->kind = GR_VAL_CONST;
        val->producer = -1;
        val->out_slot = 0;
        val->data = data[i];
        val->nbytes = nbytes[i];
        data[i] = NULL;
    }
    *folded = true;

done:
    if (data)
        for (int i = 0; i < n_out; i++) gr_free(data[i], nbytes && nbytes[i] ? nbytes[i] : 1);
    gr_free(data, (size_t)n_out * sizeof(void *));
    gr_free(nbytes, (size_t)n_out * sizeof(size_t));
    free_bufs(&c);
    gr_step_list_free(&c.steps);
    drop_temporaries(&c);
    return st;
}

gr_status gr_pass_fold_constants(gr_graph *g) {
    size_t n = (size_t)(g->nodes.len ? g->nodes.len : 1);
    bool *folded = gr_calloc(n, sizeof(bool));
    if (!folded) return gr_nomem();
    fold_state fs;
    memset(&fs, 0, sizeof fs);
    gr_status st = GR_OK;
    bool any = false;
    /* Folded nodes stay in place until the end: removing each at once moved
     * every later node and renumbered every value, quadratic in big graphs. */
    for (int i = 0; i < g->nodes.len && st == GR_OK; i++) {
        st = fold_node(g, &fs, i, &folded[i]);
        any |= folded[i];
    }
    if (any) remove_folded(g, folded);
    state_free(&fs);
    gr_free(folded, n * sizeof(bool));
    return st;
}
