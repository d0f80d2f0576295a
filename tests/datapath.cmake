# Data path tests: tests/plugins/hsloop.c built without the handshake as
# two small same-process transports: "loopx" against the current header
# (ABI 1.1: completions through complete(), no poll) and "loop10" against
# the copy of the 1.0 header in tests/plugins/abi10 (completions through
# poll()).  Plus the two-process healing tests' target program.
set(TERN_DP_DIR ${CMAKE_CURRENT_BINARY_DIR}/plugins/datapath)

add_library(tp_loopx MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/hsloop.c)
set_target_properties(tp_loopx PROPERTIES OUTPUT_NAME tern-loopx PREFIX lib
  LIBRARY_OUTPUT_DIRECTORY ${TERN_DP_DIR})
target_include_directories(tp_loopx PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_definitions(tp_loopx PRIVATE HS_NAME="loopx" HS_NO_HANDSHAKE)
target_link_libraries(tp_loopx PRIVATE Threads::Threads)

add_library(tp_loop10 MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/hsloop.c)
set_target_properties(tp_loop10 PROPERTIES OUTPUT_NAME tern-loop10 PREFIX lib
  LIBRARY_OUTPUT_DIRECTORY ${TERN_DP_DIR})
# the 1.0 header first: tern/transport.h resolves to the old layout
target_include_directories(tp_loop10 BEFORE PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/abi10)
target_include_directories(tp_loop10 PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_definitions(tp_loop10 PRIVATE HS_NAME="loop10" HS_NO_HANDSHAKE)
target_link_libraries(tp_loop10 PRIVATE Threads::Threads)

add_executable(tern-test-heal-peer ${CMAKE_CURRENT_SOURCE_DIR}/helpers/heal_peer.c)
target_link_libraries(tern-test-heal-peer PRIVATE tern)

foreach(t test_datapath test_heal)
  if(TARGET ${t})
    add_dependencies(${t} tp_loopx tp_loop10 tp_hsloop tern_memcpy tern_transport_tcp
                     tern-test-heal-peer)
    target_compile_definitions(${t} PRIVATE
      TERN_LOOPX_PATH="$<TARGET_FILE:tp_loopx>"
      TERN_LOOP10_PATH="$<TARGET_FILE:tp_loop10>"
      TERN_HSLOOP_PATH="$<TARGET_FILE:tp_hsloop>"
      TERN_HEAL_PEER_PATH="$<TARGET_FILE:tern-test-heal-peer>")
  endif()
endforeach()

# No include or call circle among core/ modules (scripts/core-deps.sh).
add_test(NAME test_core_deps
         COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/core-deps.sh ${PROJECT_SOURCE_DIR}/core)
set_tests_properties(test_core_deps PROPERTIES TIMEOUT 60)
