# Generation (issue 12): state binding, greedy / sampling / beam loops over the decode fixtures
# (tests/data/onnx/decode) against Hugging Face's ids, on the simulator.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_generate SOURCES tests/test_generate.c tools/npy.c)
  target_include_directories(test_generate PRIVATE ${CMAKE_SOURCE_DIR}/tools)
endif()
# graft generate and graft.generate (tests/py/test_generate.py): the CLI and the Python API against
# the fixtures; against onnxruntime (eos, sampling) and Hugging Face (beam search with eos) where
# those are installed, skipped otherwise. Not under sanitizers: it loads libgraft.so into Python.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND AND GRAFT_ONNX_ENABLED AND NOT GRAFT_SANITIZE AND NOT GRAFT_TSAN)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_py_generate_deps OUTPUT_QUIET ERROR_QUIET)
  if(graft_py_generate_deps EQUAL 0)
    add_test(NAME py_generate
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_generate.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(py_generate PROPERTIES ENVIRONMENT
      "PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>;GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1"
      TIMEOUT 900)
  endif()
endif()
# Beam search's shared per-step decision (codegen/beam.c) against its definition written slowly.
graft_test(test_beam SOURCES tests/test_beam.c)
