# Tensor parallelism (issue 16) on the simulator: every sharding rule against the unsplit
# model, the dynamic-axis exports against PyTorch, errors, collectives, allocation failures.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_tp SOURCES tests/test_tp.c tools/npy.c)
  target_include_directories(test_tp PRIVATE ${CMAKE_SOURCE_DIR}/tools)
endif()

# --tp through the CLI (and graft.load(tp=N) where the library can be loaded into python)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_tp_py_missing OUTPUT_QUIET ERROR_QUIET)
  if(NOT graft_tp_py_missing)
    set(graft_tp_env "GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1")
    if(NOT GRAFT_SANITIZE AND NOT GRAFT_TSAN)
      set(graft_tp_env "${graft_tp_env};PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>")
    endif()
    add_test(NAME py_tp COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_tp.py
             WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(py_tp PROPERTIES ENVIRONMENT "${graft_tp_env}" TIMEOUT 600)
  endif()
endif()
