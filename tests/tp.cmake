# Tensor parallelism (issue 16) on the simulator: every sharding rule against the unsplit
# model, the dynamic-axis exports against PyTorch, errors, collectives, allocation failures.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_tp SOURCES tests/test_tp.c tools/npy.c)
  target_include_directories(test_tp PRIVATE ${CMAKE_SOURCE_DIR}/tools)
endif()
