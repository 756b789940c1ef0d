# graft CLI and per-op semantics, through `graft run` (Python: numpy + pytest).
# GRAFT_BIN points the tests at the binary of this build tree.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_py_deps_missing OUTPUT_QUIET ERROR_QUIET)
  if(graft_py_deps_missing)
    message(STATUS "graft: numpy/pytest not found for ${Python3_EXECUTABLE}; py_ops and py_cli are skipped")
  else()
    foreach(t ops cli precision shapes_cli)
      add_test(NAME py_${t}
               COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_${t}.py
               WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
      set_tests_properties(py_${t} PROPERTIES
                           ENVIRONMENT "GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1"
                           TIMEOUT 1800)
    endforeach()
  endif()
else()
  message(STATUS "graft: no Python 3 interpreter; py_ops and py_cli are skipped")
endif()
