# test_hostile_control dlopens the efa and tcp transports from the build tree.
foreach(p tern_transport_efa tern_transport_tcp)
  if(TARGET test_hostile_control AND TARGET ${p})
    add_dependencies(test_hostile_control ${p})
  endif()
endforeach()
