/* passes/cse — common subexpressions of the graph: one node for each computation written
 * several times (issue 12).
 *
 * An exporter writes per layer what every layer computes alike: GPT-2's and Llama's
 * `where(mask, 0, -inf)` turning the shared boolean mask into an additive one is a node of
 * each attention block, with constants of its own per layer that hold the same numbers. Each
 * such node became a kernel of every decode step (one [b, 1, 1, max_len] where per layer,
 * ~2-3 us of launch each on the H100). Here two nodes are one computation when they have
 *   - the same op and the same attributes (names and values; a symbolic value by its
 *     expression, which the graph hash-conses; order does not matter),
 *   - the same inputs, position by position: the same value, or two small constants
 *     (at most CSE_CONST_BYTES bytes) of equal dtype, shape and bytes,
 *   - outputs of equal types where inferred already, and the same no_fold mark;
 * the later node's readers then read the earlier node's outputs, and the later node is left
 * unread (its steps go with dead-step elimination, passes/dce.c, as attention.c's do).
 *
 * Never merged, as either node: ops with effects or state (a table, mergeable[] below:
 * random generators, collectives, sampling and beam search, the in-place cache append; an
 * op appended to ops.def is not merged until it is listed), a node with an output written
 * in place into an input (gr_ir_value.inplace_of) or with a graph output or a data-dependent
 * symbol's count (kept: it may still be the earlier node others read). A graph holding control flow (if / loop: subgraphs read
 * outer values by name) is left alone. Nothing depends on a binding: run before
 * specialization, every binding of a symbolic model merges alike (the plan template's
 * premise), and large constants are compared by identity only (no weight is hashed).
 *
 * Results are bit-identical: a merged node computes from the same values what its twin
 * computes. *n_merged counts the merged nodes something read (a second run counts none).
 * O(nodes + inputs + attributes). */
#include "passes/passes.h"
#include <string.h>

#define CSE_CONST_BYTES 256 /* constants compared by content up to this size (masks' scalars) */

/* ops whose two equal applications give one value and nothing else */
static const bool mergeable[GR_OP_COUNT] = {
    [GR_OP_IDENTITY] = true, [GR_OP_ADD] = true, [GR_OP_SUB] = true, [GR_OP_MUL] = true, [GR_OP_DIV] = true,
    [GR_OP_POW] = true, [GR_OP_MIN] = true, [GR_OP_MAX] = true, [GR_OP_EQUAL] = true, [GR_OP_LESS] = true,
    [GR_OP_LESS_EQUAL] = true, [GR_OP_GREATER] = true, [GR_OP_GREATER_EQUAL] = true, [GR_OP_AND] = true,
    [GR_OP_OR] = true, [GR_OP_NOT] = true, [GR_OP_NEG] = true, [GR_OP_ABS] = true, [GR_OP_EXP] = true,
    [GR_OP_LOG] = true, [GR_OP_SQRT] = true, [GR_OP_RSQRT] = true, [GR_OP_RECIPROCAL] = true, [GR_OP_TANH] = true,
    [GR_OP_SIGMOID] = true, [GR_OP_ERF] = true, [GR_OP_RELU] = true, [GR_OP_GELU] = true, [GR_OP_SELU] = true,
    [GR_OP_SILU] = true, [GR_OP_SIN] = true, [GR_OP_COS] = true, [GR_OP_ISNAN] = true, [GR_OP_WHERE] = true,
    [GR_OP_CAST] = true, [GR_OP_REDUCE_SUM] = true, [GR_OP_REDUCE_MEAN] = true, [GR_OP_REDUCE_MAX] = true,
    [GR_OP_REDUCE_MIN] = true, [GR_OP_SOFTMAX] = true, [GR_OP_LAYER_NORM] = true, [GR_OP_MATMUL] = true,
    [GR_OP_RESHAPE] = true, [GR_OP_TRANSPOSE] = true, [GR_OP_EXPAND] = true, [GR_OP_SQUEEZE] = true,
    [GR_OP_UNSQUEEZE] = true, [GR_OP_SLICE] = true, [GR_OP_CONCAT] = true, [GR_OP_SPLIT] = true,
    [GR_OP_GATHER] = true, [GR_OP_GATHER_ELEMENTS] = true, [GR_OP_TRILU] = true, [GR_OP_FILL] = true,
    [GR_OP_RANGE] = true, [GR_OP_SOFTPLUS] = true, [GR_OP_ATTENTION] = true, [GR_OP_CONV] = true,
    [GR_OP_CONV_TRANSPOSE] = true, [GR_OP_MAX_POOL] = true, [GR_OP_AVG_POOL] = true, [GR_OP_PAD] = true,
    [GR_OP_RESIZE] = true, [GR_OP_ARG_MAX] = true, [GR_OP_ARG_MIN] = true, [GR_OP_MOD] = true,
    [GR_OP_REDUCE_PROD] = true, [GR_OP_FLOOR] = true, [GR_OP_CEIL] = true,
    /* not mergeable: RANDOM_UNIFORM, RANDOM_NORMAL (draws), IF, LOOP (subgraphs), ALL_REDUCE,
     * ALL_GATHER (collectives), SAMPLE, BEAM_STEP, BEAM_REORDER (state), CACHE_WRITE (in place) */
};
_Static_assert(sizeof mergeable / sizeof mergeable[0] == GR_OP_COUNT, "one entry per op");

typedef struct {
    const gr_graph *g;
    int *canon;     /* per value: the value it equals (itself unless merged or a twin constant) */
    int *slots;     /* open addressing over node indices + 1 (0 = empty) */
    uint32_t mask;  /* slots - 1, a power of two minus one */
    bool *is_output;
    bool *is_read;  /* per value: some node reads it */
} cse_ctx;

static uint32_t mix(uint32_t h, uint64_t x) {
    h ^= (uint32_t)x + 0x9e3779b9u + (h << 6) + (h >> 2);
    h ^= (uint32_t)(x >> 32) + 0x9e3779b9u + (h << 6) + (h >> 2);
    return h;
}

static uint32_t hash_bytes(uint32_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* ---- constants ------------------------------------------------------------------------------- */
static bool small_const(const gr_ir_value *v) {
    return v->kind == GR_VAL_CONST && v->typed && v->data && v->nbytes <= CSE_CONST_BYTES;
}

static bool same_type(const gr_ir_value *a, const gr_ir_value *b) {
    if (a->typed != b->typed || a->dtype != b->dtype || a->ndim != b->ndim || a->placement != b->placement ||
        a->var_dims != b->var_dims)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d].size != b->dims[d].size || a->dims[d].expr != b->dims[d].expr) return false;
    return true;
}

static bool same_const(const gr_ir_value *a, const gr_ir_value *b) {
    return same_type(a, b) && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static uint32_t const_hash(const gr_ir_value *v) {
    uint32_t h = mix(2166136261u, (uint64_t)v->dtype << 8 | (uint64_t)v->ndim);
    for (int d = 0; d < v->ndim; d++) h = mix(h, (uint64_t)v->dims[d].size);
    return hash_bytes(h, v->data, v->nbytes);
}

/* canon of every small constant: the first constant of equal content (a table over values) */
static gr_status canon_consts(cse_ctx *c, int n_values) {
    size_t cap = 16;
    while (cap < (size_t)n_values * 2) cap *= 2;
    int *tab = gr_calloc(cap, sizeof(int));
    if (!tab) return GR_ERR_NOMEM;
    for (int v = 0; v < n_values; v++) {
        const gr_ir_value *x = &c->g->values.data[v];
        if (!small_const(x)) continue;
        for (size_t s = const_hash(x) & (cap - 1);; s = (s + 1) & (cap - 1)) {
            if (!tab[s]) {
                tab[s] = v + 1;
                break;
            }
            if (same_const(&c->g->values.data[tab[s] - 1], x)) {
                c->canon[v] = tab[s] - 1;
                break;
            }
        }
    }
    gr_free(tab, cap * sizeof(int));
    return GR_OK;
}

/* ---- nodes ------------------------------------------------------------------------------------ */
static bool same_attr(const gr_ir_attr *a, const gr_ir_attr *b) {
    if (a->kind != b->kind || strcmp(a->name, b->name) != 0 || a->sym != b->sym) return false;
    switch (a->kind) {
    case GR_IR_ATTR_INT: return a->sym ? a->expr == b->expr : a->i == b->i;
    case GR_IR_ATTR_FLOAT: return a->sym ? a->expr == b->expr : memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case GR_IR_ATTR_STRING: return (!a->s && !b->s) || (a->s && b->s && strcmp(a->s, b->s) == 0);
    case GR_IR_ATTR_INTS:
        if (a->n != b->n || (a->exprs == NULL) != (b->exprs == NULL)) return false;
        if (a->n > 0 && memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n) != 0) return false;
        return !a->exprs || a->n == 0 || memcmp(a->exprs, b->exprs, sizeof(int32_t) * (size_t)a->n) == 0;
    case GR_IR_ATTR_FLOATS: return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, sizeof(double) * (size_t)a->n) == 0);
    default: return false; /* a subgraph is never the same */
    }
}

static bool same_node(const cse_ctx *c, const gr_ir_node *a, const gr_ir_node *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out || a->n_attr != b->n_attr || a->no_fold != b->no_fold)
        return false;
    for (int k = 0; k < a->n_in; k++) {
        int x = a->in[k], y = b->in[k];
        if ((x < 0) != (y < 0) || (x >= 0 && c->canon[x] != c->canon[y])) return false;
    }
    for (int k = 0; k < a->n_attr; k++) { /* any order: each of a's by name in b */
        const gr_ir_attr *m = NULL;
        for (int j = 0; j < b->n_attr && !m; j++)
            if (strcmp(a->attrs[k].name, b->attrs[j].name) == 0) m = &b->attrs[j];
        if (!m || !same_attr(&a->attrs[k], m)) return false;
    }
    for (int k = 0; k < a->n_out; k++) {
        if (a->out[k] < 0 || b->out[k] < 0) return false;
        if (!same_type(&c->g->values.data[a->out[k]], &c->g->values.data[b->out[k]])) return false;
    }
    return true;
}

static uint32_t node_hash(const cse_ctx *c, const gr_ir_node *n) {
    uint32_t h = mix(2166136261u, (uint64_t)n->op << 16 | (uint64_t)n->n_in << 8 | (uint64_t)n->n_out);
    for (int k = 0; k < n->n_in; k++) h = mix(h, (uint64_t)(int64_t)(n->in[k] < 0 ? -1 : c->canon[n->in[k]]));
    /* attributes by name and scalar value, order-independent (a sum) */
    uint32_t attrs = 0;
    for (int k = 0; k < n->n_attr; k++) {
        const gr_ir_attr *a = &n->attrs[k];
        uint32_t ah = hash_bytes(2166136261u, a->name, strlen(a->name));
        ah = mix(ah, (uint64_t)a->kind);
        if (a->kind == GR_IR_ATTR_INT) ah = mix(ah, (uint64_t)(a->sym ? a->expr : a->i));
        else if (a->kind == GR_IR_ATTR_INTS && a->n > 0) ah = hash_bytes(ah, a->ints, sizeof(int64_t) * (size_t)a->n);
        attrs += ah;
    }
    return mix(h, attrs);
}

/* whether n may take part at all: pure, and no output an input's placeholder or the graph's */
static bool candidate(const cse_ctx *c, const gr_ir_node *n) {
    if (n->op < 0 || n->op >= GR_OP_COUNT || !mergeable[n->op] || n->n_out < 1) return false;
    for (int k = 0; k < n->n_out; k++) {
        int o = n->out[k];
        if (o < 0 || c->g->values.data[o].inplace_of) return false;
    }
    return true;
}

gr_status gr_pass_cse(gr_graph *g, int *n_merged) {
    int merged = 0;
    if (n_merged) *n_merged = 0;
    for (int i = 0; i < g->nodes.len; i++)
        if (gr_op_get(g->nodes.data[i].op)->kind == GR_OPK_CONTROL) return GR_OK;
    int nv = g->values.len, nn = g->nodes.len;
    size_t cap = 16;
    while (cap < (size_t)nn * 2) cap *= 2;
    cse_ctx c = {.g = g, .mask = (uint32_t)(cap - 1)};
    c.canon = gr_malloc(sizeof(int) * (size_t)(nv > 0 ? nv : 1));
    c.slots = gr_calloc(cap, sizeof(int));
    c.is_output = gr_calloc((size_t)(nv > 0 ? nv : 1), sizeof(bool));
    c.is_read = gr_calloc((size_t)(nv > 0 ? nv : 1), sizeof(bool));
    gr_status st = c.canon && c.slots && c.is_output && c.is_read ? GR_OK : GR_ERR_NOMEM;
    if (st == GR_OK) {
        for (int v = 0; v < nv; v++) c.canon[v] = v;
        for (int i = 0; i < g->outputs.len; i++) c.is_output[g->outputs.data[i]] = true;
        /* a data-dependent symbol's count (gr_ir_symbol.data_value) is read by the session: kept
         * where computed, as an output is */
        for (int k = 0; k < g->syms.len; k++)
            if (g->syms.data[k].data_value >= 0 && g->syms.data[k].data_value < nv) c.is_output[g->syms.data[k].data_value] = true;
        for (int i = 0; i < nn; i++)
            for (int k = 0; k < g->nodes.data[i].n_in; k++)
                if (g->nodes.data[i].in[k] >= 0) c.is_read[g->nodes.data[i].in[k]] = true;
        st = canon_consts(&c, nv);
    }
    for (int i = 0; i < nn && st == GR_OK; i++) {
        gr_ir_node *n = &g->nodes.data[i];
        /* read what the merged nodes before it stood for (constants keep their own value:
         * a node that is not merged reads what it read) */
        for (int k = 0; k < n->n_in; k++) {
            int x = n->in[k];
            if (x >= 0 && g->values.data[x].kind == GR_VAL_NODE) n->in[k] = c.canon[x];
        }
        if (!candidate(&c, n)) continue;
        bool keep = false; /* an output of the graph's: its node stays the one computing it */
        for (int k = 0; k < n->n_out; k++) keep |= c.is_output[n->out[k]];
        size_t s = node_hash(&c, n) & c.mask;
        for (;; s = (s + 1) & c.mask) {
            if (!c.slots[s]) {
                c.slots[s] = i + 1;
                break;
            }
            const gr_ir_node *first = &g->nodes.data[c.slots[s] - 1];
            if (keep || !same_node(&c, first, n)) continue;
            bool read = false; /* a twin nothing reads (left by an earlier run) is not counted */
            for (int k = 0; k < n->n_out; k++) c.canon[n->out[k]] = first->out[k], read |= c.is_read[n->out[k]];
            merged += read;
            break;
        }
    }
    gr_free(c.canon, sizeof(int) * (size_t)(nv > 0 ? nv : 1));
    gr_free(c.slots, cap * sizeof(int));
    gr_free(c.is_output, (size_t)(nv > 0 ? nv : 1) * sizeof(bool));
    gr_free(c.is_read, (size_t)(nv > 0 ? nv : 1) * sizeof(bool));
    if (st == GR_OK && n_merged) *n_merged = merged;
    return st;
}
