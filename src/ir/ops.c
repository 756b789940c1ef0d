/* ir/ops — the op table (rows in ir/ops.def) and the reference semantics of
 * every op.
 *
 * Semantics (the simulator's kernels implement exactly this; numpy/ONNX names
 * in brackets are the independent references the tests compare with):
 *
 * Elementwise binary (add sub mul div pow min max) [np.add ...]: numpy
 *   broadcasting; both inputs must have the same dtype; output has it. Integer
 *   div truncates toward zero; pow on integers is exact repeated multiply.
 *   min/max propagate NaN [np.minimum/np.maximum].
 * Comparisons (equal less less_equal greater greater_equal) → bool, broadcasting.
 * Logic (and or: bool × bool → bool; not: bool → bool).
 * Unary (neg abs exp log sqrt rsqrt reciprocal tanh sigmoid erf relu gelu selu
 *   silu sin cos): float dtypes (neg abs relu also ints). gelu: attr
 *   approximate = "none" (erf form, default) | "tanh". selu: attrs alpha
 *   (1.67326319217681884765625), gamma (1.05070102214813232421875).
 * isnan(x) → bool.
 * where(cond:bool, a, b): broadcasting of all three; a, b same dtype.
 * cast(x; to="f16"): numeric conversion; float→int truncates toward zero;
 *   →bool is x != 0.
 * reduce_sum / reduce_mean / reduce_max / reduce_min / reduce_prod(x; axes=[...], keepdims=1):
 *   axes absent or empty = all axes; negative axes count from the end.
 *   mean = sum / count. A reduction over a zero-size axis: sum 0, mean NaN,
 *   max -inf, min +inf (floats), prod 1.
 * softmax(x; axis=-1): exp(x - max) / sum, over one axis.
 * layer_norm(x, scale, [bias]; axis=-1, epsilon=1e-5): normalizes over the dims
 *   [axis, ndim) with population variance; scale and bias have the shape of
 *   those dims (or broadcast to it) [ONNX LayerNormalization, one output].
 * matmul(a, b, [bias]; trans_a=0, trans_b=0, alpha=1.0): numpy matmul with
 *   batch broadcasting; 1-D a is [1,K] and 1-D b is [K,1] with that dim
 *   dropped from the result; trans_* transpose the last two dims first;
 *   out = alpha * a@b + bias (bias broadcast to the output shape) [np.matmul];
 *   epilogue="none" | "relu" | "gelu_tanh" applies that activation to out (set by
 *   passes/epilogue.c, which fuses an activation into the matmul library call).
 *   matmul(a, b, [bias], residual) adds a tensor of exactly the output's shape and
 *   dtype too: out = epilogue(alpha * a@b + bias + residual), bias absent or a row
 *   bias ([..1.., N]); passes/epilogue.c fuses the residual add after a matmul
 *   into it (cuBLASLt reads it as C with beta = 1).
 * reshape(x; shape=[...]): one dim may be -1 (inferred); 0 is a zero-size dim
 *   (the ONNX importer resolves ONNX's "copy this dim" zeros itself).
 * transpose(x; perm=[...]): default reverses the dims [np.transpose].
 * expand(x; shape=[...]): bidirectional broadcast of x and shape [ONNX Expand].
 * squeeze(x; axes=[...]): removes the listed size-1 dims (all size-1 dims when
 *   absent). unsqueeze(x; axes=[...]): axes index the output.
 * slice(x; starts, ends, axes=[0..], steps=[1..]): ONNX Slice semantics
 *   (negative indices, clamping, negative steps) as numpy and onnx.reference
 *   compute them, for every int64 start, end and step (gr_ir_slice_axis).
 * concat(x0, x1, ...; axis): [np.concatenate].
 * split(x; axis=0, split=[sizes]): sizes absent = equal parts, one per output
 *   [ONNX Split].
 * gather(data, indices; axis=0): [np.take]; negative indices count from the end;
 *   out-of-range indices are an error at run time naming the node (simulator;
 *   the CUDA kernels clamp them and never read out of bounds) [ONNX Gather].
 *   Gathering a non-empty index from a zero-size axis is a compile-time error.
 * gather_elements(data, indices; axis=0): [np.take_along_axis].
 * trilu(x; upper=1, k=0): keeps the upper (or lower) triangle of the last two
 *   dims, relative to diagonal k [np.triu / np.tril].
 * fill(; shape, value=0.0, dtype="f32"): constant tensor.
 * range(; start, limit, delta=1, dtype="f32"): [np.arange]; length
 *   max(ceil((limit-start)/delta), 0).
 * random_uniform(; shape, dtype="f32", seed=0, low=0, high=1) and
 * random_normal(; shape, dtype="f32", seed=0, mean=0, std=1): deterministic
 *   counter-based generator (kir.h, GR_KX_RANDOM); normal via Box-Muller from
 *   the uniforms at counters 2i and 2i+1. Same bits on every device.
 * if(cond; then_branch=graph, else_branch=graph): cond is a bool tensor of one
 *   element (any rank); passes/control.c predicates it. loop(...; body=graph):
 *   held, verified and printed; not executed yet.
 * attention(q, k, v, mask?, key_len?; scale=1/sqrt(head_dim), causal=0): fused scaled
 *   dot-product attention, softmax(scale * q @ k^T + mask) @ v over the last
 *   axis. q [B, H, Sq, D], k [B, Hkv, Sk, D] (not transposed), v [B, Hkv, Sk, Dv],
 *   out [B, H, Sq, Dv]; H a multiple of Hkv (grouped-query heads: head h reads
 *   kv head h / (H/Hkv)). mask: a float tensor of rank <= 4 broadcasting to
 *   [B, H, Sq, Sk], added to the scaled scores. causal: key j is visible to
 *   query i when j <= i + Sk - Sq (bottom-right alignment). A row that sees no
 *   key, or only -inf, is 0 (the unfused softmax would give NaN). key_len (optional
 *   fifth input, i64 of one element; the mask slot may be empty): only keys j < key_len
 *   are visible (clamped to [0, Sk]); it lives in device memory, so one compiled call
 *   serves every length of a KV cache of Sk positions and reads only the valid prefix
 *   (passes/attention.c makes it from the decode rewrite's where(position < valid, x, -inf)).
 *   layout=[lq, lk, lv, lo] (optional, default all 0): how each of q, k, v and out is
 *   laid out: 0 as above, [B, heads, S, D]; 1 as [B, S, heads, D] (the transposes around
 *   an exported attention folded in, so the attention reads a projection's output and
 *   writes what the output projection reads, with no copy; lowering reads a split or
 *   slice of the last axis in place as well: lower-gen.c).
 *   passes/attention.c makes it from the MatMul/Softmax/MatMul pattern.
 * sample(logits, step, ints, floats): one token per row of logits [..., V] (any float
 *   dtype), i64 [...] (the last axis dropped): gr_sample_row (codegen/kir.h) with
 *   temperature = floats[0], top_p = floats[1] (f32 [2]), top_k = ints[2] and the RNG
 *   bits of (seed = ints[0], counter = (step[0] - ints[1]) * rows + row) (ints i64 [3],
 *   step i64 [1]; rows = the product of the leading dims). The decode loop's sampling
 *   (passes/decode.c): step is graft.kv_len, ints[1] the prompt length, so the counter is
 *   the reference engine's new-token index * batch + row.
 * beam_step(logits, step, state, params; beams, room): one step of beam search
 *   (gr_beam_step_row, codegen/kir.h) for every batch row of state (i64 [B, S], S =
 *   gr_beam_state_layout's slots for beams, room and the vocabulary; its layout says where
 *   the next tokens, the source cache rows and the done flags are) over logits [B * beams,
 *   1, V] or [B * beams, V] (any float dtype): the new state, same shape. params i64 [5]:
 *   first kv_len, eos (< 0: none), pad, the bits of the f64 length_penalty, max_new (<=
 *   room); step i64 [1] (graft.kv_len): the step is j = step - first; outside [0, max_new)
 *   the state is returned unchanged (the prompt's steps). The decode loop's beam search
 *   (passes/decode.c) writes the result in place into its state input.
 * beam_reorder(x, rows, kv_len; axis, delta): x (any dtype, rank >= 2) gathered along axis 0
 *   by rows (i64 [x.dims[0]], each in range) over the valid prefix of `axis` (> 0): y[r, .., p,
 *   ..] = x[rows[r], .., p, ..] for p < kv_len[0] + delta, 0 past it (kv_len i64 [1]). The
 *   decode loop moves a KV cache after its beams with it (never in place).
 * cache_write(cache, new, kv_len; axis, delta): cache with new written at position kv_len[0] +
 *   delta of `axis`: y[.., p + j, ..] = new[.., j, ..] for j < new.dims[axis], p = kv_len[0] +
 *   delta, y = cache elsewhere (new: cache's dtype and rank, cache's dims except `axis`, where it
 *   is at most cache's; kv_len i64 [1]). Positions follow a gather index's rules: a negative
 *   one counts from the end of the axis, one out of range is an error on the simulator (naming
 *   the node) and clamped on CUDA. The decode rewrite (passes/decode.c) appends a step's keys
 *   and values with it at kv_len - 1, in place into the cache input: then the lowering writes
 *   only new's elements (a scatter store, codegen/kir.h), not the whole cache.
 * all_reduce(x; ranks) / all_gather(x; ranks): collectives across the `ranks` ranks of
 *   tensor parallelism (passes/shard.c makes them; never folded). all_reduce: the
 *   element-wise sum of every rank's x, same shape and dtype, on every rank. all_gather:
 *   [ranks, ...x's shape], rank r's x at index r, on every rank. On a device that joined
 *   no communicator only ranks=1 runs (a copy).
 * conv(x, w, [bias]; strides, pads=[begins.., ends..], dilations, group=1,
 *   auto_pad="NOTSET"|"SAME_UPPER"|"SAME_LOWER"|"VALID"): x [N, C, S_1..S_s]
 *   (1 <= s <= 5), w [C_out, C/group, k_1..k_s], bias [C_out] [ONNX Conv];
 *   shapes and pads in ir/shape-window.c. conv_transpose(x, w, [bias]; strides,
 *   pads, dilations, group, output_padding): w [C, C_out/group, k..]; out =
 *   stride*(in - 1) + output_padding + dil*(k - 1) + 1 - pb - pe (pads may be
 *   negative: the importer turns auto_pad and output_shape into pads)
 *   [ONNX ConvTranspose]. max_pool / avg_pool(x; kernel_shape, strides, pads,
 *   dilations, ceil_mode, auto_pad, count_include_pad (avg)): padding taps are
 *   ignored by max; avg divides by the taps inside x, or with count_include_pad
 *   inside the explicitly padded x (not the extra ceil_mode ones) [ONNX MaxPool,
 *   AveragePool]. Float x; max_pool also integers.
 * pad(x; pads=[begins.., ends..], mode="constant"|"reflect"|"edge"|"wrap",
 *   value=0): negative pads crop [np.pad + slicing, ONNX Pad].
 * resize(x; sizes, scales, mode="nearest"|"linear", coord=half_pixel|
 *   pytorch_half_pixel|align_corners|asymmetric|tf_half_pixel_for_nn|
 *   half_pixel_symmetric, nearest_mode=round_prefer_floor|round_prefer_ceil|
 *   floor|ceil): output dims are sizes; scales (default out/in) drive the
 *   coordinate transform; linear interpolates up to 3 resized dims with clamped
 *   neighbours [ONNX Resize].
 * arg_max / arg_min(x; axis=0, keepdims=1, select_last_index=0) → i64: index
 *   of the largest (smallest) element along axis; ties give the first index
 *   (the last with select_last_index); NaN counts as the extreme value, so the
 *   first (last) NaN wins [np.argmax / np.argmin, ONNX ArgMax / ArgMin]. An
 *   empty axis is an error.
 * mod(a, b): remainder of truncating division, the sign of a [C fmod / %,
 *   np.fmod]; x mod 0 = 0 for integers (the ONNX importer builds ONNX's
 *   fmod=0 floor remainder, the sign of b, from it).
 * Attributes: each op takes exactly those of its schema (the attrs column of
 *   ir/ops.def); any other name is refused by the verifier.
 * Sizes: no tensor holds more than GR_MAX_NUMEL elements (util.h).
 */
#include "ir/ir.h"
#include <stdio.h>
#include <string.h>

static const gr_op_info op_table[] = {
#define GR_OP_DEF(id, name, kind, min_in, max_in, min_out, max_out, shape, lower, kfn, attrs) \
    [GR_OP_##id] = {name, kind, min_in, max_in, min_out, max_out, attrs},
#include "ir/ops.def"
#undef GR_OP_DEF
};
_Static_assert(sizeof op_table / sizeof op_table[0] == GR_OP_COUNT, "ir/ops.def: one row per op");

const gr_op_info *gr_op_get(gr_op op) { return (unsigned)op < GR_OP_COUNT ? &op_table[op] : NULL; }

gr_op gr_op_from_name(const char *name) {
    for (int i = 0; i < GR_OP_COUNT; i++)
        if (op_table[i].name && !strcmp(op_table[i].name, name)) return (gr_op)i;
    return GR_OP_COUNT;
}

/* numpy's slice index adjustment (PySlice_AdjustIndices), which
 * onnx.reference's Slice uses. (The ONNX spec's text clamps a negative-step
 * start below -dim to 0 instead of -1; the reference, numpy and graft agree.)
 * After clamping, start and end lie in [-1, dim], so end - start cannot
 * overflow; the count is (span - 1) / |step| + 1, which cannot either, and
 * |INT64_MIN| is taken in unsigned arithmetic. */
bool gr_ir_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first, int64_t *count) {
    *first = 0;
    *count = 0;
    if (step == 0 || dim < 0) return step != 0;
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? dim - 1 : dim;
    if (start < 0) {
        start += dim; /* start >= INT64_MIN and dim >= 0: no overflow */
        if (start < 0) start = lo;
    } else if (start >= dim) {
        start = hi;
    }
    if (end < 0) {
        end += dim;
        if (end < 0) end = lo;
    } else if (end >= dim) {
        end = hi;
    }
    uint64_t span, mag;
    if (step > 0) {
        if (end <= start) return true;
        span = (uint64_t)(end - start);
        mag = (uint64_t)step;
    } else {
        if (start <= end) return true;
        span = (uint64_t)(start - end);
        mag = (uint64_t)0 - (uint64_t)step;
    }
    *first = start;
    *count = (int64_t)((span - 1) / mag + 1);
    return true;
}

gr_status gr_ir_attention_layout(const gr_graph *g, const gr_ir_node *n, int layout[4]) {
    for (int i = 0; i < 4; i++) layout[i] = 0;
    const int64_t *l = NULL;
    int nl = -1;
    GR_TRY(gr_ir_attr_ints(g, n, "layout", &l, &nl));
    if (nl < 0) return GR_OK;
    bool ok = nl == 4;
    for (int i = 0; ok && i < 4; i++) ok = l[i] == 0 || l[i] == 1;
    if (!ok) {
        char where[320];
        gr_ir_node_where(g, n, where, sizeof where);
        return gr_error(GR_ERR_INVALID, "%s: layout must be 4 entries of 0 ([B,H,S,D]) or 1 ([B,S,H,D]) for q, k, v, out",
                        where);
    }
    for (int i = 0; i < 4; i++) layout[i] = (int)l[i];
    return GR_OK;
}
