# Same-host transport tests: the integration tests drive a target engine in
# a separate process, tests/helpers/shm_peer.c.
add_executable(tern-test-shm-peer ${CMAKE_CURRENT_SOURCE_DIR}/helpers/shm_peer.c)
target_link_libraries(tern-test-shm-peer PRIVATE tern)
foreach(t test_shm_integration test_shm_fallback test_shm_transport)
  if(TARGET ${t})
    add_dependencies(${t} tern-test-shm-peer tern_transport_shm tern_transport_tcp)
  endif()
endforeach()
