# CUDA backend tests: the renderer compiled with NVRTC (no GPU needed).
include_guard(GLOBAL)
if(GRAFT_CUDA_ENABLED)
  graft_test(test_render SOURCES tests/test_render.c LAYERS graft_util graft_codegen graft_cuda)
  # the convolution family's lowered kernels (conv, pools, pad, resize) through NVRTC
  graft_test(test_render_window SOURCES tests/test_render_window.c
    LAYERS graft_util graft_ir graft_codegen graft_passes graft_cuda)
endif()
foreach(t test_render test_render_window)
  if(TARGET ${t})
    target_include_directories(${t} SYSTEM PRIVATE ${GRAFT_CUDA_INCLUDE_DIR})
  endif()
endforeach()
# The row-group loop of vectorized elementwise kernels (render-cuda.c, issue 15: RoPE): rendered
# sources run on the host (C++ compiler) against the interpreter, bit for bit, and NVRTC-compiled.
if(GRAFT_CUDA_ENABLED AND GRAFT_ONNX_ENABLED)
  graft_test(test_render_group SOURCES tests/test_render_group.c)
  target_include_directories(test_render_group SYSTEM PRIVATE ${GRAFT_CUDA_INCLUDE_DIR})
endif()
