# GPU memory without a GPU: a fake CUDA driver (tests/fake_cuda/) that
# test_gpu loads through TERN_CUDA_LIBRARY, exactly as the core would load
# libcuda.so.1.  Built into the build tree only, never installed.
add_library(tern_fake_cuda MODULE ${CMAKE_CURRENT_SOURCE_DIR}/fake_cuda/fake_cuda.c)
set_target_properties(tern_fake_cuda PROPERTIES OUTPUT_NAME fake-cuda PREFIX lib
  C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_cuda)
target_link_libraries(tern_fake_cuda PRIVATE Threads::Threads)
if(TARGET test_gpu)
  add_dependencies(test_gpu tern_fake_cuda tern_transport_tcp)
  target_compile_definitions(test_gpu PRIVATE
    TERN_FAKE_CUDA_PATH="$<TARGET_FILE:tern_fake_cuda>")
endif()

# Two processes moving GPU memory over tcp (scripts/gpu-check.sh).
add_executable(tern-test-gpu-peer ${CMAKE_CURRENT_SOURCE_DIR}/helpers/gpu_peer.c)
target_link_libraries(tern-test-gpu-peer PRIVATE tern)

# The GPU-machine script, tried on the fake driver.
add_test(NAME test_gpu_check
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_check.sh ${PROJECT_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(test_gpu_check PROPERTIES TIMEOUT 600)
