/* passes/memplan — static memory plan: every activation gets a fixed offset
 * in one arena, computed from liveness over the step list, so addresses are
 * identical from one run to the next (what makes captured graphs reusable). */
#include "passes/passes.h"
#include <stdlib.h>
#include <string.h>

#define GR_ARENA_ALIGN 256

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static size_t value_bytes(const gr_ir_value *v) {
    int64_t n = gr_ir_value_numel(v);
    return n < 0 ? 0 : (size_t)n * gr_dtype_size(v->dtype);
}

/* The value whose storage v uses (follows alias chains). */
static int root_of(const gr_mem_plan *p, int v) {
    for (int guard = 0; guard < p->n_values && p->values[v].kind == GR_STORE_ALIAS; guard++) v = p->values[v].alias_of;
    return v;
}

static bool param_written(const gr_step *s, int i) {
    if (s->kind == GR_STEP_KERNEL) return s->kernel->params[i].written;
    if (s->kind == GR_STEP_LIBCALL) return i == 2;
    if (s->kind == GR_STEP_HOST) return s->args[i].kind == GR_ARG_VALUE && s->args[i].value == s->out_value;
    return false;
}

static void touch(gr_value_store *st, int step) {
    if (st->first_step < 0 || step < st->first_step) st->first_step = step;
    if (step > st->last_step) st->last_step = step;
}

typedef struct {
    int value;
    size_t bytes;
} sized_value;

static int by_size_desc(const void *a, const void *b) {
    const sized_value *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->value - y->value; /* stable: deterministic plans */
}

gr_status gr_pass_plan_memory(const gr_graph *g, const gr_step_list *steps, gr_mem_plan *out) {
    memset(out, 0, sizeof *out);
    int nv = g->values.len;
    out->values = gr_calloc((size_t)(nv ? nv : 1), sizeof(gr_value_store));
    if (!out->values) return GR_ERR_NOMEM;
    out->n_values = nv;
    for (int v = 0; v < nv; v++) {
        out->values[v].first_step = out->values[v].last_step = -1;
        out->values[v].alias_of = -1;
        out->values[v].bytes = value_bytes(&g->values.data[v]);
    }
    /* storage classes */
    for (int i = 0; i < g->inputs.len; i++) {
        int v = g->inputs.data[i];
        gr_value_store *st = &out->values[v];
        st->kind = g->values.data[v].placement == GR_PLACE_HOST ? GR_STORE_HOST : GR_STORE_INPUT;
        st->offset = (size_t)i;
    }
    /* A host input read as a buffer by some kernel gets a device placeholder
     * too, filled before the run like every other input: the copy never sits
     * inside a segment, so it never breaks a graph. Host scalars keep being
     * read from the host copy (by value, at launch). */
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        for (int a = 0; a < s->n_args; a++) {
            const gr_step_arg *arg = &s->args[a];
            if (arg->kind != GR_ARG_VALUE || arg->value < 0 || arg->value >= nv) continue;
            if (s->kind == GR_STEP_ALIAS) continue;
            int r = arg->value;
            /* follow views back to their source (aliases are only known below, so walk the steps) */
            for (int guard = 0; guard < steps->len; guard++) {
                int src = -1;
                for (int sj = 0; sj < steps->len; sj++)
                    if (steps->data[sj].kind == GR_STEP_ALIAS && steps->data[sj].out_value == r) src = steps->data[sj].args[0].value;
                if (src < 0) break;
                r = src;
            }
            if (out->values[r].kind == GR_STORE_HOST) out->values[r].kind = GR_STORE_INPUT;
        }
    }
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        if (s->kind == GR_STEP_ALIAS) {
            int src = s->args[0].value, dst = s->out_value;
            if (src < 0 || src >= nv || dst < 0 || dst >= nv) goto bad_step;
            out->values[dst].kind = GR_STORE_ALIAS;
            out->values[dst].alias_of = src;
            out->values[dst].alias_elem_offset = s->args[0].elem_offset;
            continue;
        }
        for (int a = 0; a < s->n_args; a++) {
            const gr_step_arg *arg = &s->args[a];
            if (arg->kind != GR_ARG_VALUE && arg->kind != GR_ARG_HOST_SCALAR) continue;
            if (arg->value < 0 || arg->value >= nv) goto bad_step;
            const gr_ir_value *val = &g->values.data[arg->value];
            gr_value_store *st = &out->values[arg->value];
            if (st->kind != GR_STORE_NONE) continue;
            if (val->kind == GR_VAL_CONST) st->kind = GR_STORE_CONST;
            /* A zero-size value gets no kernel (lowering skips it) but can still
             * be read, e.g. by a reduction over the empty axis: it gets an
             * (empty) arena slot so its address exists. */
            else if (val->kind == GR_VAL_NODE && (param_written(s, a) || st->bytes == 0)) st->kind = GR_STORE_ARENA;
        }
    }
    /* graph outputs that are constants (fully folded) must be materialized;
     * zero-size ones nothing wrote still need an address */
    for (int i = 0; i < g->outputs.len; i++) {
        int v = g->outputs.data[i];
        if (out->values[v].kind == GR_STORE_NONE && g->values.data[v].kind == GR_VAL_CONST) out->values[v].kind = GR_STORE_CONST;
        if (out->values[v].kind == GR_STORE_NONE && g->values.data[v].kind == GR_VAL_NODE && out->values[v].bytes == 0)
            out->values[v].kind = GR_STORE_ARENA;
    }
    /* flatten alias chains to their roots; offsets add up */
    for (int v = 0; v < nv; v++) {
        if (out->values[v].kind != GR_STORE_ALIAS) continue;
        int64_t off = 0;
        int r = v, guard = 0;
        while (out->values[r].kind == GR_STORE_ALIAS && guard++ <= nv) {
            off += out->values[r].alias_elem_offset;
            r = out->values[r].alias_of;
        }
        if (out->values[r].kind == GR_STORE_ALIAS) {
            gr_mem_plan_free(out);
            return gr_error(GR_ERR_INTERNAL, "memory plan: alias cycle at value '%s'", g->values.data[v].name);
        }
        if (out->values[r].kind == GR_STORE_NONE && g->values.data[r].kind == GR_VAL_CONST) out->values[r].kind = GR_STORE_CONST;
        if (out->values[r].kind == GR_STORE_NONE && g->values.data[r].kind == GR_VAL_NODE && out->values[r].bytes == 0)
            out->values[r].kind = GR_STORE_ARENA;
        out->values[v].alias_of = r;
        out->values[v].alias_elem_offset = off;
    }
    /* Nothing may write into a graph input or a weight: an input placeholder
     * changed in place would feed the next replay a different value than the
     * caller set (and inputs are not re-copied when unchanged). */
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        if (s->kind == GR_STEP_ALIAS) continue;
        for (int a = 0; a < s->n_args; a++) {
            if (s->args[a].kind != GR_ARG_VALUE || !param_written(s, a)) continue;
            int r = root_of(out, s->args[a].value);
            gr_storage_kind k = out->values[r].kind;
            if (k != GR_STORE_INPUT && k != GR_STORE_CONST && k != GR_STORE_HOST) continue;
            char where[512] = "plan";
            if (s->node >= 0 && s->node < g->nodes.len) gr_ir_node_where(g, &g->nodes.data[s->node], where, sizeof where);
            const char *what = k == GR_STORE_CONST ? "weight" : "graph input";
            gr_status st = gr_error(GR_ERR_HAZARD,
                                    "%s: writes into %s '%s' in place; graft refuses (the placeholder would hold a different "
                                    "value at the next replay than the one the caller set)",
                                    where, what, g->values.data[r].name);
            gr_mem_plan_free(out);
            return st;
        }
    }
    /* liveness of roots */
    for (int si = 0; si < steps->len; si++) {
        const gr_step *s = &steps->data[si];
        if (s->kind == GR_STEP_ALIAS) {
            touch(&out->values[root_of(out, s->args[0].value)], si);
            continue;
        }
        for (int a = 0; a < s->n_args; a++) {
            const gr_step_arg *arg = &s->args[a];
            if (arg->kind != GR_ARG_VALUE && arg->kind != GR_ARG_HOST_SCALAR) continue;
            touch(&out->values[root_of(out, arg->value)], si);
        }
    }
    for (int i = 0; i < g->outputs.len; i++) {
        gr_value_store *st = &out->values[root_of(out, g->outputs.data[i])];
        if (st->first_step < 0) st->first_step = 0;
        st->last_step = steps->len; /* outputs outlive the plan: read after the run */
    }
    /* constants: packed in first-use order */
    size_t const_off = 0;
    for (int v = 0; v < nv; v++) {
        if (out->values[v].kind != GR_STORE_CONST) continue;
        out->values[v].offset = const_off;
        const_off = align_up(const_off + out->values[v].bytes, GR_ARENA_ALIGN);
    }
    out->const_bytes = const_off;

    /* arena: greedy best fit, largest first, among values whose live ranges overlap */
    int n_arena = 0;
    for (int v = 0; v < nv; v++)
        if (out->values[v].kind == GR_STORE_ARENA) n_arena++;
    sized_value *order = gr_malloc(sizeof(sized_value) * (size_t)n_arena);
    int *placed = gr_malloc(sizeof(int) * (size_t)n_arena);
    if (!order || !placed) {
        gr_free(order, sizeof(sized_value) * (size_t)n_arena);
        gr_free(placed, sizeof(int) * (size_t)n_arena);
        gr_mem_plan_free(out);
        return GR_ERR_NOMEM;
    }
    int k = 0;
    for (int v = 0; v < nv; v++)
        if (out->values[v].kind == GR_STORE_ARENA) order[k++] = (sized_value){v, out->values[v].bytes};
    qsort(order, (size_t)n_arena, sizeof *order, by_size_desc);
    size_t arena = 0;
    int n_placed = 0;
    for (int i = 0; i < n_arena; i++) {
        gr_value_store *st = &out->values[order[i].value];
        if (st->first_step < 0) st->first_step = st->last_step = 0; /* written but never read */
        size_t need = align_up(st->bytes ? st->bytes : 1, GR_ARENA_ALIGN);
        /* candidate offsets: 0 and the end of every placed value that overlaps in time */
        size_t best = SIZE_MAX;
        for (int c = -1; c < n_placed; c++) {
            size_t cand = 0;
            if (c >= 0) {
                const gr_value_store *o = &out->values[placed[c]];
                if (o->last_step < st->first_step || o->first_step > st->last_step) continue;
                cand = o->offset + align_up(o->bytes ? o->bytes : 1, GR_ARENA_ALIGN);
            }
            bool clash = false;
            for (int j = 0; j < n_placed && !clash; j++) {
                const gr_value_store *o = &out->values[placed[j]];
                if (o->last_step < st->first_step || o->first_step > st->last_step) continue;
                size_t oend = o->offset + align_up(o->bytes ? o->bytes : 1, GR_ARENA_ALIGN);
                if (cand < oend && o->offset < cand + need) clash = true;
            }
            if (!clash && cand < best) best = cand;
        }
        st->offset = best;
        if (best + need > arena) arena = best + need;
        placed[n_placed++] = order[i].value;
    }
    out->arena_bytes = arena;
    gr_free(order, sizeof(sized_value) * (size_t)n_arena);
    gr_free(placed, sizeof(int) * (size_t)n_arena);
    return GR_OK;
bad_step:
    gr_mem_plan_free(out);
    return gr_error(GR_ERR_INTERNAL, "memory plan: a step refers to no value");
}

void gr_mem_plan_free(gr_mem_plan *p) {
    if (!p) return;
    gr_free(p->values, sizeof(gr_value_store) * (size_t)p->n_values);
    memset(p, 0, sizeof *p);
}
