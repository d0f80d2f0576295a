# Real RDMA verbs in a qemu guest with Soft-RoCE (README.md here).
#  - rdma_vm: boots a Debian kernel under qemu (run-in-vm.sh) and runs
#    tern_rdma_vm_suite inside it.  Where qemu or the kernel package cannot
#    be had, the harness prints why and exits 77, which CTest counts as
#    skipped.
#  - rdma_vm_xfabric: one configuration file, five hosts in the guest (two
#    Soft-RoCE hosts, two efa hosts over libfabric's tcp provider in
#    network namespaces, one tcp-only host; a netem-delayed link between the
#    clouds): every ordered pair moves verified data over the transport the
#    pair should negotiate (rdma_vm_xfabric.sh, README.md).
#  - vm_accel: the harness's accelerator choice: forced KVM on a host whose
#    KVM cannot run the guest fails clearly, auto falls back to TCG (a qemu
#    wrapper that dies under KVM stands in for such a host, so every machine
#    runs the case).
add_test(NAME vm_accel COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_vm_accel.sh)
set_tests_properties(vm_accel PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
                     PROCESSORS 2 RUN_SERIAL TRUE)

if(TARGET tern_rdma)
  add_executable(tern_rdma_vm_suite ${CMAKE_CURRENT_LIST_DIR}/rdma_vm_suite.c
                 ${CMAKE_CURRENT_LIST_DIR}/rdma_vm_concurrent.c
                 ${CMAKE_CURRENT_LIST_DIR}/rdma_vm_pair.c)
  target_link_libraries(tern_rdma_vm_suite PRIVATE tern_internal ${CRITERION_LIB})
  add_dependencies(tern_rdma_vm_suite tern_rdma)
  if(TARGET tern-bench)
    add_dependencies(tern_rdma_vm_suite tern-bench)
  endif()

  # Inside the guest: the plugin suite, then two engines (tern-bench) over rxe0.
  add_test(NAME rdma_vm
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/run-in-vm.sh
                   -o ${CMAKE_BINARY_DIR}/vm-out/rdma_vm -t 400
                   ${CMAKE_CURRENT_LIST_DIR}/rdma_vm_all.sh ${CMAKE_BINARY_DIR})
  # The VM takes both cores for a while; 77 = qemu/kernel not available here.
  set_tests_properties(rdma_vm PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 450
                       PROCESSORS 2 RUN_SERIAL TRUE)
else()
  add_test(NAME rdma_vm COMMAND sh -c
           "echo 'rdma_vm: SKIP: the rdma transport was not built (libibverbs-dev missing)'; exit 77")
  set_tests_properties(rdma_vm PROPERTIES SKIP_RETURN_CODE 77)
endif()

# One cluster, several fabrics (rdma_vm_xfabric.sh): needs the rdma and the
# efa transports and tern-info; the peer program uses the public API only.
if(TARGET tern_rdma AND TARGET tern_transport_efa)
  add_executable(tern-test-xfabric-peer ${CMAKE_CURRENT_LIST_DIR}/rdma_vm_xfabric_peer.c)
  target_link_libraries(tern-test-xfabric-peer PRIVATE tern)
  add_dependencies(tern-test-xfabric-peer tern_rdma tern_transport_efa tern_transport_tcp
                   tern-info)
  add_test(NAME rdma_vm_xfabric
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/run-in-vm.sh
                   -o ${CMAKE_BINARY_DIR}/vm-out/rdma_vm_xfabric -t 300
                   ${CMAKE_CURRENT_LIST_DIR}/rdma_vm_xfabric.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(rdma_vm_xfabric PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 360
                       PROCESSORS 2 RUN_SERIAL TRUE)
else()
  add_test(NAME rdma_vm_xfabric COMMAND sh -c
           "echo 'rdma_vm_xfabric: SKIP: the rdma or efa transport was not built (libibverbs-dev, libfabric-dev missing)'; exit 77")
  set_tests_properties(rdma_vm_xfabric PROPERTIES SKIP_RETURN_CODE 77)
endif()
