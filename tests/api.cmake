# The public shared library: it exports exactly include/graft.h's functions,
# and a program using only that header runs models through it.
add_executable(test_shared tests/api/test_shared.c)
target_link_libraries(test_shared graft_shared m)
set_target_properties(test_shared PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME test_shared COMMAND test_shared WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})

find_package(Python3 COMPONENTS Interpreter)
find_program(GRAFT_NM nm)
if(Python3_FOUND AND GRAFT_NM)
  add_test(NAME test_api_exports
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/api/check_exports.py
                   $<TARGET_FILE:graft_shared> ${CMAKE_SOURCE_DIR}/include/graft.h)
endif()

# The Python package (python/graft: ctypes over this build's libgraft.so), on the
# simulator: tests/py/test_package.py. abi_probe prints the public structs' layout for
# its check of the ctypes mirrors. Not in sanitizer builds: an ASan/TSan-built
# library cannot be loaded into an uninstrumented python without preloading the runtime.
add_executable(abi_probe tests/api/abi_probe.c)
target_include_directories(abi_probe PRIVATE ${CMAKE_SOURCE_DIR}/include)
set_target_properties(abi_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
if(Python3_FOUND AND NOT GRAFT_SANITIZE AND NOT GRAFT_TSAN)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_py_package_deps OUTPUT_QUIET ERROR_QUIET)
  if(graft_py_package_deps EQUAL 0)
    add_test(NAME py_package
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_package.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(py_package PROPERTIES ENVIRONMENT
      "PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>;GRAFT_ABI_PROBE=$<TARGET_FILE:abi_probe>")
    # the package's device I/O and per-call paths (CUDA cases skip without a GPU), ONNX control flow
    # against onnx.reference (skips without onnx), the in-process scoreboard's harness (skips without torch)
    foreach(t pycall onnx_control inprocess_bench)
      add_test(NAME py_${t}
               COMMAND ${Python3_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_${t}.py
               WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/py)
      set_tests_properties(py_${t} PROPERTIES TIMEOUT 900 ENVIRONMENT
        "PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>;GRAFT_BIN=$<TARGET_FILE:graft_cli>;PYTHONDONTWRITEBYTECODE=1")
    endforeach()
    set_tests_properties(py_inprocess_bench PROPERTIES SKIP_REGULAR_EXPRESSION "torch is not installed|onnxscript\\) is not installed")
  else()
    message(STATUS "graft: numpy/pytest not found for ${Python3_EXECUTABLE}; py_package is skipped")
  endif()
  # torch.compile(backend="graft") (python/graft/torch_backend.py) against eager PyTorch; skipped
  # (reported as skipped) where the Python has no torch. GRAFT_TORCH_PYTHON names a Python with
  # torch; GRAFT_TORCH_DEVICE=cuda in the environment runs it with CUDA tensors on a GPU.
  set(GRAFT_TORCH_PYTHON "${Python3_EXECUTABLE}" CACHE FILEPATH "Python with torch for py_torch_backend")
  execute_process(COMMAND ${GRAFT_TORCH_PYTHON} -c "import numpy, pytest"
                  RESULT_VARIABLE graft_py_torch_deps OUTPUT_QUIET ERROR_QUIET)
  if(graft_py_torch_deps EQUAL 0)
    add_test(NAME py_torch_backend
             COMMAND ${GRAFT_TORCH_PYTHON} -m pytest -q -rs -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_torch_backend.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(py_torch_backend PROPERTIES
      ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>"
      SKIP_REGULAR_EXPRESSION "torch is not installed" TIMEOUT 600)
  endif()
endif()
# `pip install .` into a fresh venv and the same tests against the wheel (network, ~1 min):
# ctest -L slow.
add_test(NAME py_pip_install COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/py-install-check.sh)
set_tests_properties(py_pip_install PROPERTIES LABELS slow TIMEOUT 900)
