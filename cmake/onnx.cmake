# cmake/onnx.cmake — the ONNX frontend (src/frontend/onnx), built on protobuf-c.
#
# include()d from the top-level CMakeLists.txt, so plain set() reaches its scope.
# Needs protoc-c (Debian: protobuf-c-compiler) and libprotobuf-c (libprotobuf-c-dev).
# The .pb-c.c/.h are generated at build time from graft's own onnx_subset.proto.
# When either is missing it says so and leaves GRAFT_ONNX_ENABLED off; the
# top level then builds src/frontend/onnx-stub instead. This file only finds
# the tools and generates the protobuf-c sources.

set(GRAFT_ONNX_ENABLED OFF)

find_program(GRAFT_PROTOC_C NAMES protoc-c protoc-gen-c)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(GRAFT_PROTOBUFC QUIET libprotobuf-c)
endif()
if(GRAFT_PROTOBUFC_FOUND)
  find_library(GRAFT_PROTOBUFC_LIB NAMES protobuf-c HINTS ${GRAFT_PROTOBUFC_LIBRARY_DIRS})
  find_path(GRAFT_PROTOBUFC_INCLUDE protobuf-c/protobuf-c.h HINTS ${GRAFT_PROTOBUFC_INCLUDE_DIRS})
else()
  find_library(GRAFT_PROTOBUFC_LIB NAMES protobuf-c)
  find_path(GRAFT_PROTOBUFC_INCLUDE protobuf-c/protobuf-c.h)
endif()

if(NOT GRAFT_PROTOC_C OR NOT GRAFT_PROTOBUFC_LIB OR NOT GRAFT_PROTOBUFC_INCLUDE)
  message(STATUS "graft: ONNX frontend disabled (protoc-c or libprotobuf-c not found; "
                 "install protobuf-c-compiler and libprotobuf-c-dev)")
  return()
endif()

set(GRAFT_ONNX_PROTO ${CMAKE_SOURCE_DIR}/src/frontend/onnx/onnx_subset.proto)
set(GRAFT_ONNX_GEN_DIR ${CMAKE_BINARY_DIR}/gen/onnx)
file(MAKE_DIRECTORY ${GRAFT_ONNX_GEN_DIR})
add_custom_command(
  OUTPUT ${GRAFT_ONNX_GEN_DIR}/onnx_subset.pb-c.c ${GRAFT_ONNX_GEN_DIR}/onnx_subset.pb-c.h
  COMMAND ${GRAFT_PROTOC_C} --c_out=${GRAFT_ONNX_GEN_DIR} -I${CMAKE_SOURCE_DIR}/src/frontend/onnx ${GRAFT_ONNX_PROTO}
  DEPENDS ${GRAFT_ONNX_PROTO}
  COMMENT "protoc-c onnx_subset.proto"
  VERBATIM)

# The frontend layer (top-level CMakeLists.txt) compiles src/frontend/onnx/*.c
# and the generated .pb-c.c with GRAFT_ONNX_GEN_DIR on its include path.
set(GRAFT_ONNX_ENABLED ON)
message(STATUS "graft: ONNX frontend enabled (${GRAFT_PROTOC_C}, ${GRAFT_PROTOBUFC_LIB})")
