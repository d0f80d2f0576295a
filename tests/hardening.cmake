# Hardening tests: hostile peers, authentication, faults.
# tern-test-fault-peer is a target engine in its own process (killed by
# test_faults, given a secret by test_auth).  Every test here needs the tcp
# transport plugin built.
add_executable(tern-test-fault-peer ${CMAKE_CURRENT_SOURCE_DIR}/hardening/fault_peer.c)
target_link_libraries(tern-test-fault-peer PRIVATE tern)
foreach(t test_hostile test_faults test_auth)
  if(TARGET ${t})
    add_dependencies(${t} tern_transport_tcp tern-test-fault-peer)
    target_compile_definitions(${t} PRIVATE
      TERN_FAULT_PEER="$<TARGET_FILE:tern-test-fault-peer>")
  endif()
endforeach()
