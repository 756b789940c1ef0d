# The device façade: nothing outside src/device calls through the vtable (iface->).
add_test(NAME check_device_facade
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR} -P ${CMAKE_SOURCE_DIR}/cmake/check-facade.cmake)
# ...and the check reports a file that does (the fixture's line, by name).
add_test(NAME check_device_facade_catches
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR}/tests/data -DDIRS=facade -P ${CMAKE_SOURCE_DIR}/cmake/check-facade.cmake)
set_tests_properties(check_device_facade_catches PROPERTIES
                     PASS_REGULAR_EXPRESSION "facade/bad.c: const char \\*device_label")
