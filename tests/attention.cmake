# fused attention: recognition on the exports, broken patterns, fused vs unfused on the simulator
if(GRAFT_ONNX_ENABLED)
  graft_test(test_attention SOURCES tests/test_attention.c)
endif()
