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
  # the backend layer and gpucheck are declared in the top-level CMakeLists.txt
else()
  set(GRAFT_CUDA_ENABLED OFF)
  message(STATUS "graft: CUDA headers not found; the CUDA backend is a stub")
endif()
