# Generation (issue 12): state binding, greedy / sampling / beam loops over the decode fixtures
# (tests/data/onnx/decode) against Hugging Face's ids, on the simulator.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_generate SOURCES tests/test_generate.c tools/npy.c)
  target_include_directories(test_generate PRIVATE ${CMAKE_SOURCE_DIR}/tools)
endif()
