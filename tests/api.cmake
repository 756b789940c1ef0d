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
