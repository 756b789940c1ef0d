# --precision bf16|f16: the conversion pass on the exports and small graphs, allocation failures
# (tests/py/test_precision.py, run by cli.cmake, covers tolerances, the CLI and profile classes)
if(GRAFT_ONNX_ENABLED)
  graft_test(test_precision SOURCES tests/test_precision.c)
endif()
