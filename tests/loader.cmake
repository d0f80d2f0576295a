# Loader tests: deliberately broken transports built from one source
# (tests/plugins/testplug.c), each a MODULE in the build tree's
# tests/plugins/ -- never in the default plugin directory -- plus the
# install + out-of-tree build test.
set(TERN_TP_DIR ${CMAKE_CURRENT_BINARY_DIR}/plugins)

# tern_test_plugin(<file name> <symbol name> [subdir] DEFS ...)
function(tern_test_plugin file name subdir)
  set(target tp_${file}${subdir})
  set(outdir ${TERN_TP_DIR})
  if(subdir)
    set(outdir ${TERN_TP_DIR}/${subdir})
  endif()
  add_library(${target} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/testplug.c)
  set_target_properties(${target} PROPERTIES OUTPUT_NAME tern-${file} PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${outdir})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${target} PRIVATE TP_NAME="${name}" ${ARGN})
  add_dependencies(test_loader ${target})
endfunction()

tern_test_plugin(good good "")
tern_test_plugin(v10 v10 "" "TP_STRUCT_SIZE=offsetof(tern_transport,ep_reset)")
tern_test_plugin(badmagic badmagic "" TP_BAD_MAGIC)
tern_test_plugin(oldmajor oldmajor "" TP_ABI_MAJOR=0)
tern_test_plugin(newmajor newmajor "" "TP_ABI_MAJOR=(TERN_TRANSPORT_ABI_MAJOR+1)")
tern_test_plugin(truncated truncated "" "TP_STRUCT_SIZE=offsetof(tern_transport,poll)")
tern_test_plugin(liar liar "" "TP_STRUCT_SIZE=(sizeof(tern_transport)+64)")
tern_test_plugin(nullop nullop "" TP_NULL_SUBMIT)
tern_test_plugin(initfail initfail "" TP_INIT_FAIL)
tern_test_plugin(nodevice nodevice "" TP_NO_DEVICE)
tern_test_plugin(zerodev zerodev "" TP_ZERO_DEVICES)
tern_test_plugin(nosym nosym "" TP_NO_SYMBOL)
tern_test_plugin(wrongname other "")
tern_test_plugin(strerror strerror "" TP_CALL_STRERROR)
tern_test_plugin(order order order_a TP_VERSION="A")
tern_test_plugin(order order order_b TP_VERSION="B")

# Unresolvable dependency: the helper library lives in a directory on no
# search path and the plugin carries no RPATH, so dlopen reports
# "libterntestdep.so: cannot open shared object file".
add_library(tp_testdep SHARED ${CMAKE_CURRENT_SOURCE_DIR}/plugins/testdep.c)
set_target_properties(tp_testdep PROPERTIES OUTPUT_NAME terntestdep
  LIBRARY_OUTPUT_DIRECTORY ${TERN_TP_DIR}/deps)
tern_test_plugin(nodep nodep "" TP_USE_DEP)
target_link_libraries(tp_nodep PRIVATE tp_testdep)
set_target_properties(tp_nodep PROPERTIES SKIP_BUILD_RPATH ON)

target_compile_definitions(test_loader PRIVATE TERN_TP_DIR="${TERN_TP_DIR}")
add_dependencies(test_loader tern_memcpy)

# Install to a temporary prefix, build plugins/memcpy out of tree with only
# pkg-config, load it by `path` from YAML with the installed tern-info.
if(TARGET tern-info)
  add_test(NAME test_tern_info
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_tern_info.sh
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(test_tern_info PROPERTIES TIMEOUT 120)
  # docs/configuration.md's key table is tern-info --schema-markdown's output.
  add_test(NAME test_config_doc
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_config_doc.sh
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  add_test(NAME test_install
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(test_install PROPERTIES TIMEOUT 300)
endif()
