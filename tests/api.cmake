# Application API tests in two processes: tests/test_api_twoproc.c drives
# tests/helpers/api_peer.c (public API only).
add_executable(tern-test-api-peer ${CMAKE_CURRENT_SOURCE_DIR}/helpers/api_peer.c)
target_link_libraries(tern-test-api-peer PRIVATE tern)
if(TARGET test_api_twoproc)
  add_dependencies(test_api_twoproc tern-test-api-peer tern_transport_tcp)
endif()
add_test(NAME test_examples COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_examples.sh ${CMAKE_BINARY_DIR})
set_tests_properties(test_examples PROPERTIES TIMEOUT 300)
add_test(NAME test_readme_example
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_readme_example.sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
