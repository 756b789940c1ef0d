/* passes/lower-beam — beam_step(logits, step, state, params) and beam_reorder(x, rows, kv_len):
 * one GR_LIB_BEAM_STEP / GR_LIB_BEAM_REORDER library call each (codegen/kir.h; the simulator
 * runs codegen/beam.c, CUDA device/cuda/cuda-beam.c). Library calls are never fused, which the
 * reorder needs: it reads other rows than it writes. */
#include "passes/lower-impl.h"
#include <stdio.h>
#include <string.h>

static gr_status lib_step(gr_lctx *c, gr_lib_kind kind, int n_args, const int *values, gr_libcall **call) {
    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.node = c->node;
    s.out_value = -1;
    s.n_args = n_args;
    s.call.kind = kind;
    s.call.batch = 1;
    snprintf(s.call.name, sizeof s.call.name, "k%d_%s", c->node, kind == GR_LIB_BEAM_STEP ? "beam_step" : "beam_reorder");
    for (int a = 0; a < n_args; a++) s.args[a] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = values[a]};
    if (gr_vec_push(c->out, s) != GR_OK) return gr_nomem();
    *call = &c->out->data[c->out->len - 1].call;
    return GR_OK;
}

gr_status lw_lower_beam_step(gr_lctx *c) {
    int x = lw_in(c, 0), state = lw_in(c, 2), y = lw_out(c, 0);
    const gr_ir_value *xv = lw_val(c, x);
    int64_t xd[GR_MAX_DIMS], sd[GR_MAX_DIMS], beams, room;
    int nx = lw_shape(c, x, xd), ns = lw_shape(c, state, sd);
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "beams", 0, &beams));
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "room", 0, &room));
    int64_t vocab = xd[nx - 1];
    gr_beam_params p = {.beams = beams, .vocab = vocab, .max_new = room, .stride = room};
    gr_beam_layout l;
    gr_status st = gr_beam_state_layout(&p, &l);
    if (st != GR_OK) return gr_error_prefix(st, "%s", lw_where(c));
    if (ns != 2 || sd[1] != l.slots)
        return gr_error(GR_ERR_SHAPE, "%s: the beam state has %lld slots a row; %lld beams of room %lld over %lld tokens take %lld", lw_where(c),
                        (long long)(ns == 2 ? sd[1] : -1), (long long)beams, (long long)room, (long long)vocab, (long long)l.slots);
    if (lw_numel(c, y) == 0) return GR_OK;
    int v[GR_LIB_BEAM_STEP_NARGS] = {x, lw_in(c, 1), y, state, lw_in(c, 3)};
    gr_libcall *call = NULL;
    GR_TRY(lib_step(c, GR_LIB_BEAM_STEP, GR_LIB_BEAM_STEP_NARGS, v, &call));
    call->dtype = xv->dtype;
    call->m = sd[0];
    call->n = vocab;
    call->k = beams;
    call->lda = room;
    return GR_OK;
}

gr_status lw_lower_beam_reorder(gr_lctx *c) {
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int64_t d[GR_MAX_DIMS], axis, delta;
    int nd = lw_shape(c, x, d);
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "axis", 1, &axis));
    GR_TRY(gr_ir_attr_int(c->g, lw_node(c), "delta", 0, &delta));
    if (axis < 0) axis += nd;
    if (lw_numel(c, y) == 0) return GR_OK;
    int64_t mid = 1, inner = 1;
    for (int i = 1; i < axis; i++) mid *= d[i];
    for (int i = (int)axis + 1; i < nd; i++) inner *= d[i];
    int v[GR_LIB_BEAM_REORDER_NARGS] = {x, lw_in(c, 1), y, lw_in(c, 2)};
    gr_libcall *call = NULL;
    GR_TRY(lib_step(c, GR_LIB_BEAM_REORDER, GR_LIB_BEAM_REORDER_NARGS, v, &call));
    call->dtype = lw_val(c, x)->dtype;
    call->m = d[0];
    call->n = mid;
    call->k = d[axis];
    call->lda = inner;
    call->ldb = delta;
    return GR_OK;
}
