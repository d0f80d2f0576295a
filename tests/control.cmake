# Control-plane tests: deliberately broken metadata-store plugins for
# test_metadata (each libtern-meta-<scheme>.so fails one ABI check).
set(TERN_META_TEST_DIR ${CMAKE_BINARY_DIR}/tests/meta-plugins)

function(tern_meta_test_plugin scheme)
  set(t meta_test_${scheme})
  add_library(${t} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/meta_plugins/meta_broken.c)
  set_target_properties(${t} PROPERTIES OUTPUT_NAME tern-meta-${scheme} PREFIX lib
                        LIBRARY_OUTPUT_DIRECTORY ${TERN_META_TEST_DIR})
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${t} PRIVATE SCHEME="${scheme}" ${ARGN})
  add_dependencies(test_metadata ${t})
endfunction()

tern_meta_test_plugin(badmagic MAGIC=0x1234)
tern_meta_test_plugin(badabi ABI_MAJOR=2)
tern_meta_test_plugin(small "STRUCT_SIZE=offsetof(tern_metastore,list)")
tern_meta_test_plugin(noop NULL_LIST)
tern_meta_test_plugin(wrongscheme SCHEME_FIELD="redis")
tern_meta_test_plugin(nosym NO_SYMBOL)
tern_meta_test_plugin(openfail)
tern_meta_test_plugin(v10 "STRUCT_SIZE=offsetof(tern_metastore,put_ttl)" WITH_PUT_TTL OPEN_OK)
# Every metadata plugin the tree builds must exist before test_metadata runs.
foreach(p tern_meta_redis tern_meta_etcd)
  if(TARGET ${p})
    add_dependencies(test_metadata ${p})
  endif()
endforeach()
target_compile_definitions(test_metadata PRIVATE TERN_META_TEST_DIR="${TERN_META_TEST_DIR}")
# The http:// store's tests load the plugin from the build tree.
if(TARGET test_metadata_http AND TARGET tern_meta_http)
  add_dependencies(test_metadata_http tern_meta_http)
endif()
# The keep-alive test loads the same store plugins.
foreach(p tern_meta_redis tern_meta_etcd tern_transport_tcp)
  if(TARGET test_metadata_keepalive AND TARGET ${p})
    add_dependencies(test_metadata_keepalive ${p})
  endif()
endforeach()
