# Mooncake compatibility (docs/protocol.md, "Mooncake compatibility"):
# tern-test-mooncake-peer (support/helpers) is tern's side;
# test_mooncake_wire drives tern's Mooncake-format port byte by byte (no
# Mooncake needed); the two
# mooncake_tcp tests run a real Mooncake Transfer Engine against tern in a
# network namespace and skip (77) without the binaries named by
# TERN_MOONCAKE_BENCH_V0310 / TERN_MOONCAKE_BENCH_V0312
# (tests/system/mooncake/build-mooncake.sh builds them).
find_program(TERN_PYTHON3 python3)
if(TERN_PYTHON3)
  add_test(NAME test_mooncake_wire
           COMMAND ${TERN_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/test_mooncake_wire.py
                   ${CMAKE_BINARY_DIR}/bin/tern-test-mooncake-peer)
  set_tests_properties(test_mooncake_wire PROPERTIES TIMEOUT 120)
endif()
foreach(tag v0.3.10 v0.3.12.post1)
  add_test(NAME test_mooncake_tcp_${tag}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_mooncake_tcp.sh
                   ${CMAKE_BINARY_DIR} ${tag})
  set_tests_properties(test_mooncake_tcp_${tag} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
endforeach()
# tern <-> Mooncake over RDMA inside the Soft-RoCE guest (minutes of CPU:
# named rdma_vm_* so `ctest -E rdma_vm` leaves it out with the VM suite)
foreach(tag v0.3.10 v0.3.12.post1)
  add_test(NAME rdma_vm_mooncake_${tag}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_rdma_vm_mooncake.sh
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR} ${tag})
  set_tests_properties(rdma_vm_mooncake_${tag} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 500)
endforeach()
