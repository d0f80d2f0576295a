# The efa transport's tests dlopen libtern-efa.so from the build tree.
if(TARGET test_efa_transport AND TARGET tern_transport_efa)
  add_dependencies(test_efa_transport tern_transport_efa)
endif()
if(TARGET test_efa_integration AND TARGET tern_transport_efa)
  add_dependencies(test_efa_integration tern_transport_efa)
endif()
