/* passes/share — attention calls of one segment that read the same mask share the work a
 * device derives from it.
 *
 * GPT-2, BERT and Llama exports build one attention mask per call and every layer's
 * attention reads it: the CUDA device classified it into its tile table once per layer (12
 * launches of attn_mask_cls per GPT-2 call, 90 us of 2.6 ms at batch 8, seq 512 bf16 on the
 * H100). Within one segment the steps run in order on one stream, either all eagerly or all
 * from one captured graph, so a table the group's first call fills is there for its later
 * calls. Two calls are one group when they read the same IR value at the same offset (SSA:
 * the same contents) through the same mask geometry. Groups stop at segment boundaries: a
 * graph captured earlier bakes its table's address, while an eager segment after it may see
 * a table grown since. A group of one call is no group. The device checks again when the
 * calls are issued (mask address and geometry), so a device that cannot reuse (a group's
 * first call fell back to a kernel without the table) just classifies again. */
#include "passes/passes.h"
#include <string.h>

static bool same_mask(const gr_step *a, const gr_step *b) {
    const gr_libcall *x = &a->call, *y = &b->call;
    return a->args[4].kind == GR_ARG_VALUE && b->args[4].kind == GR_ARG_VALUE && a->args[4].value == b->args[4].value &&
           a->args[4].elem_offset == b->args[4].elem_offset && x->dtype == y->dtype && x->mask_dtype == y->mask_dtype &&
           x->batch == y->batch && x->heads == y->heads && x->seq_q == y->seq_q && x->seq_k == y->seq_k &&
           !memcmp(x->mask_stride, y->mask_stride, sizeof x->mask_stride);
}

gr_status gr_pass_share_attention_masks(gr_step_list *steps, int *n_reusing) {
    *n_reusing = 0;
    gr_step *first[GR_ATTN_MASK_GROUPS];
    int members[GR_ATTN_MASK_GROUPS], n_groups = 0, segment = -1;
    for (int i = 0; i <= steps->len; i++) {
        gr_step *s = i < steps->len ? &steps->data[i] : NULL;
        if (!s || s->segment != segment) { /* a segment ends: groups of one call are none */
            for (int g = 0; g < n_groups; g++)
                if (members[g] == 1) first[g]->call.mask_group = 0, first[g]->call.mask_group_first = false;
            n_groups = 0;
            if (!s) break;
            segment = s->segment;
        }
        if (s->kind != GR_STEP_LIBCALL || s->call.kind != GR_LIB_ATTENTION) continue;
        s->call.mask_group = 0;
        s->call.mask_group_first = false;
        if (!s->call.has_mask || s->n_args < GR_LIB_ATTENTION_NARGS) continue;
        int g = 0;
        while (g < n_groups && !same_mask(first[g], s)) g++;
        if (g < n_groups) {
            s->call.mask_group = (int8_t)(g + 1);
            members[g]++;
            (*n_reusing)++;
        } else if (n_groups < GR_ATTN_MASK_GROUPS) {
            first[n_groups] = s;
            members[n_groups] = 1;
            s->call.mask_group = (int8_t)(++n_groups);
            s->call.mask_group_first = true;
        }
    }
    return GR_OK;
}
