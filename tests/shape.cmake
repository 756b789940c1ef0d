# Shape inference, verifier, constant folding.
# test_shape builds from its own sources (IR core + verifier + shape pass) so it
# does not depend on the state of the other passes.
graft_test(test_shape
  SOURCES tests/test_shape.c src/ir/ir.c src/ir/ops.c src/ir/verify.c src/passes/shape.c
  LAYERS graft_util)
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_fold.c AND EXISTS ${CMAKE_SOURCE_DIR}/src/passes/lower.c AND EXISTS ${CMAKE_SOURCE_DIR}/src/codegen/interp.c)
  graft_test(test_fold SOURCES tests/test_fold.c LAYERS graft_util graft_ir graft_codegen graft_passes)
endif()
