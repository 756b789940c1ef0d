# Hostile-input correctness (issue 17): if predication (long and nested branches,
# gathers in untaken branches), size limits, extreme slices, attribute schemas.
graft_test(test_correct SOURCES tests/test_correct.c)

# The same classes against numpy and onnx.reference through `graft run`.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_correct_py_missing OUTPUT_QUIET ERROR_QUIET)
  if(NOT graft_correct_py_missing)
    add_test(NAME py_correct
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_correct.py
             WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(py_correct PROPERTIES
                         ENVIRONMENT "GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1"
                         TIMEOUT 900)
  endif()
endif()
