# TCP transport tests (tcp engineer): the integration test drives a target
# engine in a separate process, tests/helpers/tcp_peer.c.
add_executable(tern-test-tcp-peer ${CMAKE_CURRENT_SOURCE_DIR}/helpers/tcp_peer.c)
target_link_libraries(tern-test-tcp-peer PRIVATE tern)
if(TARGET test_tcp_integration)
  add_dependencies(test_tcp_integration tern-test-tcp-peer tern_transport_tcp)
endif()
if(TARGET test_tcp_transport)
  add_dependencies(test_tcp_transport tern_transport_tcp)
endif()
