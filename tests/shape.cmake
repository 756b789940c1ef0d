# Shape inference, verifier, constant folding.
# test_shape links the IR layer alone (shape inference is an IR service).
graft_test(test_shape SOURCES tests/test_shape.c LAYERS graft_util graft_ir)
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_fold.c AND EXISTS ${CMAKE_SOURCE_DIR}/src/passes/lower.c AND EXISTS ${CMAKE_SOURCE_DIR}/src/codegen/interp.c)
  graft_test(test_fold SOURCES tests/test_fold.c LAYERS graft_util graft_ir graft_codegen graft_passes)
endif()
graft_test(test_dimexpr SOURCES tests/test_dimexpr.c LAYERS graft_util graft_ir)
