# CUDA backend: built wherever the CUDA headers are found, linked against nothing
# from CUDA. libcuda.so.1, libnvrtc and libcublasLt are dlopen'ed at run time, so
# the same binary runs (and reports "no CUDA driver") on machines without a GPU.
# Included from CMakeLists.txt (same scope: plain set() reaches the top level).

set(GRAFT_CUDA_INCLUDE_DIR "")
set(GRAFT_CUDA_LIB_DIR "")
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  foreach(dir ${CUDAToolkit_INCLUDE_DIRS})
    if(NOT GRAFT_CUDA_INCLUDE_DIR AND EXISTS "${dir}/cuda.h")
      set(GRAFT_CUDA_INCLUDE_DIR "${dir}")
    endif()
  endforeach()
  set(GRAFT_CUDA_LIB_DIR "${CUDAToolkit_LIBRARY_DIR}")
endif()
if(NOT GRAFT_CUDA_INCLUDE_DIR)
  foreach(root $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
    if(NOT GRAFT_CUDA_INCLUDE_DIR AND EXISTS "${root}/include/cuda.h")
      set(GRAFT_CUDA_INCLUDE_DIR "${root}/include")
      set(GRAFT_CUDA_LIB_DIR "${root}/lib64")
    endif()
  endforeach()
endif()

if(GRAFT_CUDA_INCLUDE_DIR AND EXISTS "${GRAFT_CUDA_INCLUDE_DIR}/nvrtc.h" AND EXISTS "${GRAFT_CUDA_INCLUDE_DIR}/cublasLt.h")
  set(GRAFT_CUDA_ENABLED ON)
  message(STATUS "graft: CUDA backend ON (headers ${GRAFT_CUDA_INCLUDE_DIR}; libraries dlopen'ed at run time)")
  file(GLOB graft_cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/device/cuda/*.c)
  add_library(graft_cuda OBJECT ${graft_cuda_srcs})
  set_target_properties(graft_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # SYSTEM: the toolkit headers are not ours to keep -Wextra clean.
  target_include_directories(graft_cuda SYSTEM PRIVATE ${GRAFT_CUDA_INCLUDE_DIR})
  target_compile_definitions(graft_cuda PRIVATE GR_CUDA_TOOLKIT_LIBDIR="${GRAFT_CUDA_LIB_DIR}")
  list(APPEND GRAFT_LAYERS graft_cuda)

  # GPU-side check program (run by hand on a GPU machine; builds everywhere).
  file(GLOB graft_gpucheck_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tools/gpucheck/*.c)
  if(graft_gpucheck_srcs)
    add_executable(gpucheck ${graft_gpucheck_srcs})
    set_target_properties(gpucheck PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    target_link_libraries(gpucheck graft)
  endif()
else()
  set(GRAFT_CUDA_ENABLED OFF)
  message(STATUS "graft: CUDA headers not found; the CUDA backend is a stub")
endif()
