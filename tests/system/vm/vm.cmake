# Real RDMA verbs in a qemu guest with Soft-RoCE (README.md here).
#  - rdma_vm: boots a Debian kernel under qemu (run-in-vm.sh) and runs
#    tern_rdma_vm_suite inside it.  Where qemu or the kernel package cannot
#    be had, the harness prints why and exits 77, which CTest counts as
#    skipped.
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
