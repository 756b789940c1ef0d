/* tests/host_exec.h — a test-only executor for lowered step lists: every value
 * gets its own host buffer (filled with garbage, so a missed store shows),
 * kernels run through the reference interpreter with a range check against
 * the value each parameter is bound to, matmuls through the reference call.
 * Shared by the lowering and fusion tests, with the graph-building helpers
 * they use. Include once, from the test's main file. */
#ifndef GR_TEST_HOST_EXEC_H
#define GR_TEST_HOST_EXEC_H
#include "check.h"
#include "passes/passes.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    const gr_graph *g;
    char **buf;  /* per value */
    size_t *cap; /* bytes available from buf[v] */
    bool *owned;
    const gr_step *step;
    int bad_ranges;
} exec_t;

static gr_status exec_range_check(void *user, int param, const void *base, int64_t lo, int64_t hi, bool write) {
    (void)base, (void)write;
    exec_t *e = user;
    const gr_step_arg *a = &e->step->args[param];
    if (lo == hi) return GR_OK;
    size_t off = a->kind == GR_ARG_VALUE ? (size_t)a->elem_offset * gr_dtype_size(e->g->values.data[a->value].dtype) : 0;
    if (a->kind != GR_ARG_VALUE || lo < 0 || off > e->cap[a->value] || (size_t)hi > e->cap[a->value] - off) {
        e->bad_ranges++;
        return gr_error(GR_ERR_INVALID, "kernel %s param %d: range [%lld,%lld) outside value '%s' (%zu bytes)", e->step->kernel->name,
                        param, (long long)lo, (long long)hi, a->kind == GR_ARG_VALUE ? e->g->values.data[a->value].name : "?",
                        a->kind == GR_ARG_VALUE ? e->cap[a->value] : (size_t)0);
    }
    return GR_OK;
}

static void exec_free(exec_t *e) {
    if (!e->buf) return;
    for (int v = 0; v < e->g->values.len; v++)
        if (e->owned[v]) free(e->buf[v]);
    free(e->buf);
    free(e->cap);
    free(e->owned);
    e->buf = NULL;
}

/* inputs[v] (v < n_inputs) holds the data of input value v, or NULL */
static gr_status exec_run_with(exec_t *e, const gr_graph *g, const gr_step_list *steps, const void *const *inputs, int n_inputs) {
    memset(e, 0, sizeof *e);
    e->g = g;
    int nv = g->values.len;
    e->buf = calloc((size_t)nv + 1, sizeof(char *));
    e->cap = calloc((size_t)nv + 1, sizeof(size_t));
    e->owned = calloc((size_t)nv + 1, sizeof(bool));
    for (int v = 0; v < nv; v++) {
        const gr_ir_value *x = &g->values.data[v];
        if (!x->typed) continue;
        size_t bytes = (size_t)gr_ir_value_numel(x) * gr_dtype_size(x->dtype);
        e->buf[v] = malloc(bytes + 16);
        memset(e->buf[v], 0xA5, bytes + 16);
        e->cap[v] = bytes;
        e->owned[v] = true;
        if (x->kind == GR_VAL_CONST && bytes) memcpy(e->buf[v], x->data, bytes);
        if (x->kind == GR_VAL_INPUT && v < n_inputs && inputs[v] && bytes) memcpy(e->buf[v], inputs[v], bytes);
    }
    for (int s = 0; s < steps->len; s++) {
        const gr_step *st = &steps->data[s];
        e->step = st;
        if (st->kind == GR_STEP_ALIAS) {
            int src = st->args[0].value, dst = st->out_value;
            if (e->owned[dst]) free(e->buf[dst]);
            e->owned[dst] = false;
            size_t off = (size_t)st->args[0].elem_offset * gr_dtype_size(g->values.data[src].dtype);
            e->buf[dst] = e->buf[src] + off;
            e->cap[dst] = e->cap[src] - off;
            continue;
        }
        gr_karg args[GR_KMAX_PARAMS];
        memset(args, 0, sizeof args);
        for (int i = 0; i < st->n_args; i++) {
            const gr_step_arg *a = &st->args[i];
            if (a->kind == GR_ARG_LITERAL) args[i] = a->literal;
            else if (a->kind == GR_ARG_VALUE)
                args[i].ptr = e->buf[a->value] + (size_t)a->elem_offset * gr_dtype_size(g->values.data[a->value].dtype);
            else {
                gr_dtype t = g->values.data[a->value].dtype;
                if (gr_dtype_is_float(t)) args[i].f = gr_load_f64(e->buf[a->value], t, 0);
                else args[i].i = gr_load_i64(e->buf[a->value], t, 0);
            }
        }
        gr_status r = st->kind == GR_STEP_KERNEL ? gr_kernel_interpret(st->kernel, args, st->n_args, exec_range_check, e)
                                                 : gr_libcall_reference(&st->call, args);
        if (r != GR_OK) return r;
    }
    return GR_OK;
}

/* ---- building small graphs by hand (types set directly, no shape pass) ---- */
#define MAXV 4096
static const void *input_data[MAXV]; /* data of input value v, copied in by exec_run */

#define A_INT(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INT, .i = (v)})
#define A_FLOAT(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_FLOAT, .f = (v)})
#define A_STR(nm, v) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_STRING, .s = (char *)(v)})
#define A_INTS(nm, arr, cnt) ((gr_ir_attr){.name = (char *)(nm), .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)(arr), .n = (cnt)})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static void set_type(gr_graph *g, int v, gr_dtype t, int nd, const int64_t *dims) {
    gr_ir_value *x = &g->values.data[v];
    x->dtype = t;
    x->ndim = nd;
    for (int i = 0; i < nd; i++) x->dims[i] = (gr_dim){dims[i], GR_SYM_NONE};
    x->typed = true;
}

static int t_input(gr_graph *g, const char *name, gr_dtype t, int nd, const int64_t *dims, const void *data) {
    gr_dim d[GR_MAX_DIMS];
    for (int i = 0; i < nd; i++) d[i] = (gr_dim){dims[i], GR_SYM_NONE};
    int v = -1;
    CHECK_OK(gr_ir_add_input(g, name, t, nd, d, &v));
    if (v >= 0 && v < MAXV) input_data[v] = data;
    return v;
}

static int t_const(gr_graph *g, gr_dtype t, int nd, const int64_t *dims, const void *data) {
    int v = -1;
    CHECK_OK(gr_ir_add_const(g, NULL, t, nd, dims, data, &v));
    return v;
}

#define exec_run(e, g, steps) exec_run_with((e), (g), (steps), input_data, MAXV)
#endif
