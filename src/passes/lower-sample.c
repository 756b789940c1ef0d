/* passes/lower-sample — sample(logits, step, ints, floats): one GR_LIB_SAMPLE library call
 * (codegen/kir.h; the simulator runs codegen/sample.c, CUDA device/cuda/cuda-sample.c). */
#include "passes/lower-impl.h"
#include <stdio.h>
#include <string.h>

gr_status lw_lower_sample(gr_lctx *c) {
    int x = lw_in(c, 0), y = lw_out(c, 0);
    const gr_ir_value *xv = lw_val(c, x);
    int64_t d[GR_MAX_DIMS];
    int nd = lw_shape(c, x, d);
    if (nd < 1 || d[nd - 1] <= 0) return gr_error(GR_ERR_SHAPE, "%s: sample needs logits [..., vocab] with a vocabulary", lw_where(c));
    if (lw_numel(c, y) == 0) return GR_OK;
    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.node = c->node;
    s.out_value = -1;
    s.n_args = GR_LIB_SAMPLE_NARGS;
    gr_libcall *call = &s.call;
    call->kind = GR_LIB_SAMPLE;
    call->dtype = xv->dtype;
    call->n = d[nd - 1];
    call->m = lw_numel(c, y);
    call->batch = 1;
    snprintf(call->name, sizeof call->name, "k%d_sample", c->node);
    s.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = x};
    s.args[1] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = lw_in(c, 1)};
    s.args[2] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = y};
    s.args[3] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = lw_in(c, 2)};
    s.args[4] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = lw_in(c, 3)};
    if (gr_vec_push(c->out, s) != GR_OK) return gr_nomem();
    return GR_OK;
}
