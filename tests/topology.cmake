# Topology and endpoint-store tests: test_epstore needs libm (Zipf workload).
if(TARGET test_epstore)
  target_link_libraries(test_epstore PRIVATE m)
endif()
