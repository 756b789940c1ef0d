# graft CLI and per-op semantics, through `graft run` (Python: numpy + pytest).
# GRAFT_BIN points the tests at the binary of this build tree.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_py_deps_missing OUTPUT_QUIET ERROR_QUIET)
  if(graft_py_deps_missing)
    message(STATUS "graft: numpy/pytest not found for ${Python3_EXECUTABLE}; py_ops and py_cli are skipped")
  else()
    foreach(t ops cli precision shapes_cli attention_layout)
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
# shape policies beyond exact (issue 11): the CLI, and the Python package outside sanitizer builds
if(Python3_FOUND AND NOT graft_py_deps_missing)
  set(graft_shp_env "GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1")
  if(NOT GRAFT_SANITIZE AND NOT GRAFT_TSAN)
    set(graft_shp_env "${graft_shp_env};PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>")
  endif()
  add_test(NAME py_shape_policies_cli
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_shape_policies_cli.py
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(py_shape_policies_cli PROPERTIES ENVIRONMENT "${graft_shp_env}" TIMEOUT 1800)
endif()
# plans of the dynamic exports at several bindings equal the committed dumps (the new-binding
# cuts of 2026-11-24 must not change a plan): graft dump only
if(Python3_FOUND AND NOT graft_py_deps_missing)
  add_test(NAME py_plan_golden
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_plan_golden.py
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(py_plan_golden PROPERTIES ENVIRONMENT "GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1"
                       TIMEOUT 600)
endif()
