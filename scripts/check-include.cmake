# cmake -P scripts/check-include.cmake -DCC=<compiler> -DVIEW=<include view> -DAPI=<include/> -DHEADER=<h> -DEXPECT=pass|fail
# Compiles a one-line file `#include "<HEADER>"` against a layer's include view.
# EXPECT=fail passes only when the compiler fails because HEADER is not found
# (not for any other reason); EXPECT=pass when it compiles.
set(src ${CMAKE_CURRENT_BINARY_DIR}/probe_${EXPECT}_${HEADER_ID}.c)
file(WRITE ${src} "#include \"${HEADER}\"\nint graft_layering_probe;\n")
execute_process(COMMAND ${CC} -fsyntax-only -D_GNU_SOURCE -std=c11 -I${API} -I${VIEW} ${src}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE ${src})
if(EXPECT STREQUAL "pass")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "'${HEADER}' should be visible from ${VIEW} but did not compile:\n${err}")
  endif()
  message(STATUS "ok: ${HEADER} visible from ${VIEW}")
else()
  if(rc EQUAL 0)
    message(FATAL_ERROR "layering hole: '${HEADER}' compiles from ${VIEW}")
  endif()
  string(REGEX MATCH "${HEADER}[^\n]*(No such file|file not found)" hit "${err}")
  if(NOT hit)
    message(FATAL_ERROR "'${HEADER}' failed from ${VIEW}, but not for being out of view:\n${err}")
  endif()
  message(STATUS "ok: ${HEADER} out of view from ${VIEW}")
endif()
