# Each area registers its tests in tests/<area>.cmake; this file only includes them.
# graft_test(NAME SOURCES... LAYERS layer...) builds one C test executable from the
# listed object libraries (or the whole library when LAYERS is omitted).
function(graft_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LAYERS" ${ARGN})
  set(objs "")
  if(T_LAYERS)
    foreach(l ${T_LAYERS})
      list(APPEND objs $<TARGET_OBJECTS:${l}>)
    endforeach()
    add_executable(${name} ${T_SOURCES} ${objs})
    target_link_libraries(${name} ${GRAFT_LIBS} ${CMAKE_DL_LIBS} pthread)
  else()
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} graft)
  endif()
  # tests are white-box: they see every layer's headers (src/), unlike the layers
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
endfunction()

file(GLOB graft_test_areas CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*.cmake)
list(REMOVE_ITEM graft_test_areas ${CMAKE_SOURCE_DIR}/tests/tests.cmake)
foreach(area ${graft_test_areas})
  include(${area})
endforeach()
