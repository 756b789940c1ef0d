/* passes/lower-collective — all_reduce and all_gather (tensor parallelism, passes/shard.c)
 * as library calls: the device runs them through its communicator (the simulator's
 * reference collectives, NCCL on CUDA), eagerly or captured into the segment's graph. */
#include "passes/lower-impl.h"
#include <stdio.h>
#include <string.h>

gr_status lw_lower_collective(gr_lctx *c) {
    const gr_ir_node *n = lw_node(c);
    int x = lw_in(c, 0), y = lw_out(c, 0);
    int64_t ranks;
    GR_TRY(gr_ir_attr_int(c->g, n, "ranks", 0, &ranks));
    if (ranks < 1) return gr_error(GR_ERR_INVALID, "%s: attribute 'ranks' must be at least 1", lw_where(c));
    if (lw_numel(c, x) == 0) return GR_OK;
    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.node = c->node;
    s.out_value = -1;
    s.n_args = GR_LIB_COLLECTIVE_NARGS;
    gr_libcall *call = &s.call;
    call->kind = n->op == GR_OP_ALL_REDUCE ? GR_LIB_ALL_REDUCE : GR_LIB_ALL_GATHER;
    call->dtype = lw_val(c, x)->dtype;
    call->m = lw_numel(c, x);
    call->n = ranks;
    call->batch = 1;
    snprintf(call->name, sizeof call->name, "k%d_%s", c->node, n->op == GR_OP_ALL_REDUCE ? "all_reduce" : "all_gather");
    s.args[0] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = x};
    s.args[1] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    s.args[2] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = y};
    s.args[3] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1};
    if (gr_vec_push(c->out, s) != GR_OK) return gr_nomem();
    return GR_OK;
}
