/* passes/fuse-cse — common-subexpression elimination inside one kernel.
 *
 * Fusion substitutes a producer's DAG for the loads of its output, and
 * recomputation (fuse.c) copies one producer into several readers that are
 * later fused with each other, so a fused kernel soon holds the same
 * subexpression many times over (the same constant, the same load, the same
 * x*0.999 of the same x). Without merging them, a chain of N substitutions
 * could grow a DAG exponentially; with it the DAG stays linear in the graph.
 *
 * Steps, each keeping the node order topological:
 *   1. params bound identically (same kind and dtype, same step binding,
 *      neither written) become one, so loads of one value through two params
 *      turn into identical nodes;
 *   2. nodes no stage reaches (directly, through operands or gather indices)
 *      are dropped;
 *   3. hash-consing: walking the nodes in order, each node's operands are
 *      replaced by their representatives, and the node by an earlier node
 *      with the same op, dtype, fn, operands, which, param, access (loads)
 *      and constant bits / seed, if there is one; a cast to its operand's
 *      dtype of a value already exact in that dtype (exact_in) is replaced
 *      by the operand;
 *   4. params nothing refers to any more are removed (n_points and store
 *      params stay) and names are kept unique.
 * Every kernel IR op is a pure function of its operands and the point, so
 * merging never changes a bit of any result. Loads of a value the kernel
 * also writes (through any param) are never merged: a store stage may lie
 * between them.
 */
#include "passes/passes.h"
#include <string.h>


/* number of value operands (a, b, c) of an op */
static int n_operands(gr_kexpr_op op) {
    switch (op) {
    case GR_KX_UNARY: case GR_KX_CAST: case GR_KX_RANDOM: return 1;
    case GR_KX_BINARY: return 2;
    case GR_KX_SELECT: return 3;
    default: return 0;
    }
}

static uint64_t f_bits(double f) {
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- hash-consing ------------------------------------------------------------------------- */

static bool expr_same(const gr_kexpr *x, const gr_kexpr *y) {
    if (x->op != y->op || x->dtype != y->dtype) return false;
    switch (x->op) {
    case GR_KX_CONST: return f_bits(x->f) == f_bits(y->f) && x->i == y->i && x->which == y->which; /* origin: kir.c */
    case GR_KX_INDEX:
    case GR_KX_ACC: return x->which == y->which;
    case GR_KX_PARAM: return x->param == y->param;
    case GR_KX_LOAD: return x->param == y->param && gr_kaccess_equal(&x->access, &y->access);
    case GR_KX_UNARY: return x->fn == y->fn && x->a == y->a;
    case GR_KX_BINARY: return x->fn == y->fn && x->a == y->a && x->b == y->b;
    case GR_KX_SELECT: return x->a == y->a && x->b == y->b && x->c == y->c;
    case GR_KX_CAST: return x->a == y->a;
    case GR_KX_RANDOM: return x->i == y->i && x->a == y->a;
    }
    return false;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

static uint64_t expr_hash(const gr_kexpr *x) {
    uint64_t h = mix((uint64_t)x->op, (uint64_t)x->dtype);
    switch (x->op) {
    case GR_KX_CONST: return mix(mix(mix(h, f_bits(x->f)), (uint64_t)x->i), (uint64_t)(int64_t)x->which);
    case GR_KX_INDEX:
    case GR_KX_ACC: return mix(h, (uint64_t)(int64_t)x->which);
    case GR_KX_PARAM: return mix(h, (uint64_t)(int64_t)x->param);
    case GR_KX_LOAD:
        h = mix(mix(h, (uint64_t)(int64_t)x->param), (uint64_t)x->access.offset);
        /* one mix per dim that has a stride (most have none): the hash of a load was a fifth
         * of CSE's instructions when every dim took two */
        for (int d = 0; d < GR_MAX_DIMS; d++)
            if (x->access.stride[d] | x->access.inner_stride[d])
                h = mix(h, ((uint64_t)x->access.stride[d] * 0x9E3779B97F4A7C15ull) ^ (uint64_t)x->access.inner_stride[d] ^
                               ((uint64_t)d << 59));
        h = mix(mix(h, (uint64_t)(int64_t)x->access.index), (uint64_t)x->access.index_stride);
        return mix(h, (uint64_t)x->access.index_extent);
    case GR_KX_RANDOM: return mix(mix(h, (uint64_t)x->i), (uint64_t)(int64_t)x->a);
    case GR_KX_CAST: return mix(h, (uint64_t)(int64_t)x->a);
    case GR_KX_SELECT: return mix(mix(mix(h, (uint64_t)(int64_t)x->a), (uint64_t)(int64_t)x->b), (uint64_t)(int64_t)x->c);
    case GR_KX_UNARY: return mix(mix(h, (uint64_t)(int64_t)x->fn), (uint64_t)(int64_t)x->a);
    case GR_KX_BINARY: break;
    }
    /* only what expr_same compares: an unused operand field must not keep
     * equal nodes apart */
    return mix(mix(mix(h, (uint64_t)(int64_t)x->fn), (uint64_t)(int64_t)x->a), (uint64_t)(int64_t)x->b);
}

/* The table takes the low bits of the hash, which mix() leaves poor for
 * inputs that differ only in high bits (f32 constants widened to double
 * have 29 zero low bits): without this, 10^4 distinct constants fell into
 * one probe cluster and CSE went quadratic. (splitmix64's finalizer.) */
static uint64_t spread(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ---- identity casts -------------------------------------------------------------------------
 * Why: bf16 models put a cast to bf16 around every movement op (slice, concat, neg), and fusion
 * chains them: Llama's RoPE kernel held eight bf16->bf16 casts per point of loaded (already
 * bf16) values, each a round trip through a conversion on the GPU, about a third of the
 * kernel's instructions. A cast rounds (or wraps) a value computed in a wider type; when the
 * value is a load of its own dtype, another such cast, or a negation, absolute value,
 * selection, minimum or maximum of such values, it is already representable and the cast
 * returns it unchanged (kir.h: f16/bf16 are rounded only when stored or cast, narrow integers
 * wrapped only then). */
static bool exact_in(const gr_kernel *k, const gr_kexpr *e, const bool *exact_ops) {
    switch (e->op) {
    case GR_KX_LOAD: return e->param >= 0 && e->param < k->n_params && k->params[e->param].dtype == e->dtype;
    case GR_KX_CAST: return true;
    case GR_KX_UNARY:
        if (e->fn == GR_KU_NOT || e->fn == GR_KU_ISNAN) return e->dtype == GR_BOOL;
        /* -INT32_MIN does not fit an i32: only float negation and abs are exact */
        return (e->fn == GR_KU_NEG || e->fn == GR_KU_ABS) && gr_dtype_is_float(e->dtype) && exact_ops[0];
    case GR_KX_SELECT: return exact_ops[1] && exact_ops[2];
    case GR_KX_BINARY:
        if (e->fn >= GR_KB_EQ && e->fn <= GR_KB_OR) return e->dtype == GR_BOOL;
        return (e->fn == GR_KB_MIN || e->fn == GR_KB_MAX) && exact_ops[0] && exact_ops[1];
    default: return false;
    }
}

/* ---- the pass ------------------------------------------------------------------------------- */

gr_status gr_pass_cse_kernel(gr_kernel *k, gr_step_arg *args) {
    if (!k || !args) return gr_error(GR_ERR_INVALID, "gr_pass_cse_kernel: NULL argument");
    int n = k->nodes.len;
    size_t nn = (size_t)(n ? n : 1);
    size_t cap = 16;
    while (cap < 2 * nn) cap *= 2;
    /* on the stack for the usual kernel (fusion runs this after every fusion of every plan) */
    enum { LOCAL_NODES = 256 };
    int rep_local[LOCAL_NODES], table_local[2 * LOCAL_NODES];
    bool live_local[LOCAL_NODES], exact_local[LOCAL_NODES];
    bool local = nn <= LOCAL_NODES;
    int *rep = local ? rep_local : gr_malloc(nn * sizeof(int));
    bool *live = local ? memset(live_local, 0, nn) : gr_calloc(nn, sizeof(bool));
    bool *exact = local ? exact_local : gr_malloc(nn * sizeof(bool)); /* per output node: exact_in */
    int *table = local ? table_local : gr_malloc(cap * sizeof(int));
    gr_status st = GR_OK;
    if (!rep || !live || !exact || !table) {
        st = gr_nomem();
        goto done;
    }
    for (size_t i = 0; i < cap; i++) table[i] = -1;

    /* 1. params bound identically become the first of them */
    int premap[GR_KMAX_PARAMS];
    bool written[GR_KMAX_PARAMS] = {false};
    for (int p = 0; p < k->n_params; p++) {
        premap[p] = p;
        written[p] = k->params[p].written;
        for (int q = 0; q < p && premap[p] == p; q++)
            if (premap[q] == q && k->params[q].kind == k->params[p].kind && k->params[q].dtype == k->params[p].dtype &&
                !k->params[q].written && !k->params[p].written && gr_step_arg_equal(&args[q], &args[p]))
                premap[p] = q;
    }
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].param >= 0 && k->stages[s].param < k->n_params)
            written[k->stages[s].param] = true;
    /* a read-only param bound to a value the kernel also writes (through
     * another param) sees those writes too */
    for (int p = 0; p < k->n_params; p++)
        for (int q = 0; q < k->n_params && !written[p]; q++)
            if (written[q] && q != p && args[p].kind == GR_ARG_VALUE && args[q].kind == GR_ARG_VALUE &&
                args[p].value == args[q].value && k->params[q].written)
                written[p] = true;

    /* 2. what the stages reach */
    for (int s = 0; s < k->n_stages; s++) {
        if (k->stages[s].value >= 0 && k->stages[s].value < n) live[k->stages[s].value] = true;
        int ix = k->stages[s].kind == GR_KS_STORE ? k->stages[s].access.index : -1; /* a scatter's index */
        if (ix >= 0 && ix < n) live[ix] = true;
    }
    for (int j = n - 1; j >= 0; j--) {
        if (!live[j]) continue;
        const gr_kexpr *x = &k->nodes.data[j];
        const int32_t ops[3] = {x->a, x->b, x->c};
        for (int q = 0; q < n_operands(x->op); q++)
            if (ops[q] >= 0 && ops[q] < j) live[ops[q]] = true;
        if (x->op == GR_KX_LOAD && x->access.index >= 0 && x->access.index < j) live[x->access.index] = true;
    }

    /* 3. hash-consing of the live nodes, in order, compacted in place: node j goes to index
     * out_len <= j, and nodes before j are read only through rep from here on */
    gr_kexpr *out = k->nodes.data;
    int out_len = 0;
    for (int j = 0; j < n; j++) {
        rep[j] = -1;
        if (!live[j]) continue;
        gr_kexpr e = k->nodes.data[j];
        int32_t *ops[3] = {&e.a, &e.b, &e.c};
        for (int q = 0; q < n_operands(e.op); q++)
            if (*ops[q] >= 0 && *ops[q] < j) *ops[q] = rep[*ops[q]];
        if ((e.op == GR_KX_LOAD || e.op == GR_KX_PARAM) && e.param >= 0 && e.param < k->n_params)
            e.param = premap[e.param];
        if (e.op == GR_KX_LOAD && e.access.index >= 0 && e.access.index < j) e.access.index = rep[e.access.index];
        if (e.op == GR_KX_CAST && e.a >= 0 && e.a < out_len && out[e.a].dtype == e.dtype && exact[e.a]) {
            rep[j] = e.a; /* an identity cast */
            continue;
        }
        bool exact_ops[3] = {false, false, false};
        for (int q = 0; q < n_operands(e.op); q++) {
            int o = q == 0 ? e.a : q == 1 ? e.b : e.c;
            exact_ops[q] = o >= 0 && o < out_len && out[o].dtype == e.dtype && exact[o];
        }
        bool mergeable = !(e.op == GR_KX_LOAD && e.param >= 0 && e.param < k->n_params && written[e.param]);
        size_t slot = (size_t)spread(expr_hash(&e)) & (cap - 1);
        if (mergeable)
            for (; table[slot] >= 0; slot = (slot + 1) & (cap - 1))
                if (expr_same(&out[table[slot]], &e)) break;
        if (mergeable && table[slot] >= 0) {
            rep[j] = table[slot];
            continue;
        }
        rep[j] = out_len;
        exact[out_len] = exact_in(k, &e, exact_ops);
        out[out_len++] = e;
        if (mergeable) table[slot] = rep[j];
    }
    k->nodes.len = out_len; /* nothing below fails */
    for (int s = 0; s < k->n_stages; s++) {
        if (k->stages[s].value >= 0 && k->stages[s].value < n) k->stages[s].value = rep[k->stages[s].value];
        gr_kaccess *sa = &k->stages[s].access;
        if (k->stages[s].kind == GR_KS_STORE && sa->index >= 0 && sa->index < n) sa->index = rep[sa->index];
    }

    /* 4. params nothing refers to go */
    bool used[GR_KMAX_PARAMS] = {false};
    if (k->n_points_param >= 0 && k->n_points_param < k->n_params) used[k->n_points_param] = true;
    for (int i = 0; i < k->nodes.len; i++)
        if ((k->nodes.data[i].op == GR_KX_LOAD || k->nodes.data[i].op == GR_KX_PARAM) && k->nodes.data[i].param >= 0 &&
            k->nodes.data[i].param < k->n_params)
            used[k->nodes.data[i].param] = true;
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].param >= 0 && k->stages[s].param < k->n_params)
            used[k->stages[s].param] = true;
    int remap[GR_KMAX_PARAMS], np = 0;
    for (int i = 0; i < k->n_params; i++) {
        remap[i] = used[i] ? np : -1;
        if (used[i]) {
            k->params[np] = k->params[i];
            args[np] = args[i];
            np++;
        }
    }
    int old_np = k->n_params;
    k->n_params = np;
    if (k->n_points_param >= 0 && k->n_points_param < old_np) k->n_points_param = remap[k->n_points_param];
    for (int i = 0; i < k->nodes.len; i++)
        if ((k->nodes.data[i].op == GR_KX_LOAD || k->nodes.data[i].op == GR_KX_PARAM) && k->nodes.data[i].param >= 0 &&
            k->nodes.data[i].param < old_np)
            k->nodes.data[i].param = remap[k->nodes.data[i].param];
    for (int s = 0; s < k->n_stages; s++)
        if (k->stages[s].kind == GR_KS_STORE && k->stages[s].param >= 0 && k->stages[s].param < old_np)
            k->stages[s].param = remap[k->stages[s].param];
    int alt = 0;
    for (int i = 0; i < np; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(k->params[i].name, k->params[j].name)) {
                gr_name_copy(k->params[i].name, sizeof k->params[i].name, "p", alt++); /* "p%d", without printf */
                j = -1; /* re-check against all earlier names (alt grows, so this ends) */
            }
done:
    if (!local) {
        gr_free(rep, nn * sizeof(int));
        gr_free(live, nn * sizeof(bool));
        gr_free(exact, nn * sizeof(bool));
        gr_free(table, cap * sizeof(int));
    }
    return st;
}
