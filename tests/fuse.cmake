# Fusion with recomputation, CSE inside kernels, dead-step elimination, fold limits.
graft_test(test_fuse SOURCES tests/test_fuse.c LAYERS graft_util graft_ir graft_codegen graft_passes)
# Common subexpressions of the graph (passes/cse.c, issue 12): what merges, what must not
# (effects, state, in-place and graph outputs, other attributes or dtypes), bit-identical plans.
graft_test(test_cse SOURCES tests/test_cse.c LAYERS graft_util graft_ir graft_codegen graft_passes graft_frontend)
# Fused transformer plans under --precision bf16 (issue 15): no quadratic residual stream, no
# cast kernels behind a kernel's output, fused and unfused steps bit-identical.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_fuse_plan SOURCES tests/test_fuse_plan.c)
endif()
# Masked attention calls of one segment share the mask's tile table (passes/share.c).
if(GRAFT_ONNX_ENABLED)
  graft_test(test_share SOURCES tests/test_share.c)
endif()
# Activations fused into the matmul's epilogue (passes/epilogue.c, issue 15): recognition,
# near misses, fused vs unfused on the simulator, the GPT-2 export.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_epilogue SOURCES tests/test_epilogue.c)
endif()
# Residual adds fused into the matmul before them (passes/epilogue.c's gr_pass_fuse_residual,
# issue 15): recognition, near misses, the op's rules, fused vs unfused, the Llama export.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_residual SOURCES tests/test_residual.c)
endif()
# Movement kernels (transposes, slices, a concat's parts: RoPE) recomputed in their readers
# through any affine access (passes/fuse-move.c, issue 15).
graft_test(test_fuse_move SOURCES tests/test_fuse_move.c)
