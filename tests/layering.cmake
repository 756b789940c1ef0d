# The layering the build enforces (CMakeLists.txt, "layers"): for each layer,
# headers it must NOT see (a wrong-way include fails to compile) and, as
# controls that keep the check honest, headers it must see.
set(graft_layer_rules
  "graft_ir|pass|util/util.h"
  "graft_ir|fail|passes/passes.h"
  "graft_ir|fail|frontend/frontend.h"
  "graft_ir|fail|codegen/kir.h"
  "graft_frontend|pass|ir/ir.h"
  "graft_frontend|fail|passes/passes.h"
  "graft_frontend|fail|codegen/kir.h"
  "graft_frontend|fail|runtime/runtime-impl.h"
  "graft_codegen|pass|util/util.h"
  "graft_codegen|fail|ir/ir.h"
  "graft_codegen|fail|device/device.h"
  "graft_passes|pass|ir/ir.h"
  "graft_passes|pass|codegen/kir.h"
  "graft_passes|fail|frontend/frontend.h"
  "graft_passes|fail|device/device.h"
  "graft_passes|fail|runtime/runtime-impl.h"
  "graft_device|pass|codegen/kir.h"
  "graft_device|fail|ir/ir.h"
  "graft_device|fail|passes/passes.h"
  "graft_device|fail|device/sim/sim-impl.h"
  "graft_sim|pass|device/device.h"
  "graft_sim|fail|runtime/runtime-impl.h"
  "graft_sim|fail|device/cuda/cuda-impl.h"
  "graft_sim|fail|ir/ir.h"
  "graft_runtime|pass|passes/passes.h"
  "graft_runtime|pass|frontend/frontend.h"
  "graft_runtime|pass|device/device.h"
  "graft_runtime|fail|device/sim/sim-impl.h"
  "graft_runtime|fail|device/cuda/cuda-impl.h"
  "graft_runtime|fail|passes/lower-impl.h"
  "graft_runtime|fail|frontend/onnx/onnx-impl.h"
  "graft_util|fail|ir/ir.h")
set(i 0)
foreach(rule ${graft_layer_rules})
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 layer)
  list(GET parts 1 expect)
  list(GET parts 2 header)
  math(EXPR i "${i} + 1")
  string(REGEX REPLACE "[^A-Za-z0-9]" "_" hid "${header}")
  add_test(NAME layering_${layer}_${expect}_${hid}
           COMMAND ${CMAKE_COMMAND} -DCC=${CMAKE_C_COMPILER} -DVIEW=${GRAFT_VIEWS}/${layer}
                   -DAPI=${CMAKE_SOURCE_DIR}/include -DHEADER=${header} -DHEADER_ID=${i} -DEXPECT=${expect}
                   -P ${CMAKE_SOURCE_DIR}/scripts/check-include.cmake
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(layering_${layer}_${expect}_${hid} PROPERTIES LABELS layering)
endforeach()

# The CLI sees the public API and util, nothing else.
add_test(NAME layering_cli_fail_runtime
         COMMAND ${CMAKE_COMMAND} -DCC=${CMAKE_C_COMPILER} -DVIEW=${GRAFT_VIEWS}/graft_util
                 -DAPI=${CMAKE_SOURCE_DIR}/include -DHEADER=ir/ir.h -DHEADER_ID=cli -DEXPECT=fail
                 -P ${CMAKE_SOURCE_DIR}/scripts/check-include.cmake
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
