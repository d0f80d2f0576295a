# Engine tests: a same-process transport with the handshake capability
# (tests/plugins/hsloop.c) so Connection frames, refusals and simultaneous
# open run for real.  Built into the build tree's tests/plugins/engine/,
# never into the default plugin directory.
add_library(tp_hsloop MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/hsloop.c)
set_target_properties(tp_hsloop PROPERTIES OUTPUT_NAME tern-hsloop PREFIX lib
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/plugins/engine)
target_include_directories(tp_hsloop PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(tp_hsloop PRIVATE Threads::Threads)
if(TARGET test_endpoint)
  add_dependencies(test_endpoint tp_hsloop)
  target_compile_definitions(test_endpoint PRIVATE
    TERN_HSLOOP_PATH="$<TARGET_FILE:tp_hsloop>")
endif()
