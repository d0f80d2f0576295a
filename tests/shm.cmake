# Same-host transport tests: the integration tests drive a target engine in
# a separate process, tests/helpers/shm_peer.c.
add_executable(tern-test-shm-peer ${CMAKE_CURRENT_SOURCE_DIR}/helpers/shm_peer.c)
target_link_libraries(tern-test-shm-peer PRIVATE tern)
foreach(t test_shm_integration test_shm_fallback test_shm_transport)
  if(TARGET ${t})
    add_dependencies(${t} tern-test-shm-peer tern_transport_shm tern_transport_tcp)
  endif()
endforeach()
# test_shm_fallback: the core moves a peer to the next common transport on
# TERN_ERR_UNREACHABLE and refetches a restarted peer's descriptor.

add_test(NAME test_shm_tern_info
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_shm_tern_info.sh ${PROJECT_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(test_shm_tern_info PROPERTIES TIMEOUT 120)
