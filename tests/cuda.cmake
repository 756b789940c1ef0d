# CUDA backend tests: the renderer compiled with NVRTC (no GPU needed).
include_guard(GLOBAL)
if(GRAFT_CUDA_ENABLED)
  graft_test(test_render SOURCES tests/test_render.c LAYERS graft_util graft_codegen graft_cuda)
endif()
if(TARGET test_render)
  target_include_directories(test_render SYSTEM PRIVATE ${GRAFT_CUDA_INCLUDE_DIR})
endif()
