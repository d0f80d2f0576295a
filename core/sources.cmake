# The core's sources: one file per concern, each listed here.  Included by
# core/CMakeLists.txt (libtern.so and the internal archive for tests) and by
# fuzz/CMakeLists.txt (the same sources with coverage instrumentation).
set(TERN_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/auth.c
  ${CMAKE_CURRENT_LIST_DIR}/batch.c
  ${CMAKE_CURRENT_LIST_DIR}/batch_progress.c
  ${CMAKE_CURRENT_LIST_DIR}/desc.c
  ${CMAKE_CURRENT_LIST_DIR}/engine.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_endpoint.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_handler.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_memory.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_segment.c
  ${CMAKE_CURRENT_LIST_DIR}/epstore.c
  ${CMAKE_CURRENT_LIST_DIR}/errors.c
  ${CMAKE_CURRENT_LIST_DIR}/fileio.c
  ${CMAKE_CURRENT_LIST_DIR}/handshake.c
  ${CMAKE_CURRENT_LIST_DIR}/metadata.c
  ${CMAKE_CURRENT_LIST_DIR}/mooncake_compat.c
  ${CMAKE_CURRENT_LIST_DIR}/negotiate.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_check.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin.c
  ${CMAKE_CURRENT_LIST_DIR}/topology.c
  ${CMAKE_CURRENT_LIST_DIR}/topology_load.c
  ${CMAKE_CURRENT_LIST_DIR}/util.c
  # the configuration: see config/cfg_internal.h
  ${CMAKE_CURRENT_LIST_DIR}/config/yaml_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/config/values.c
  ${CMAKE_CURRENT_LIST_DIR}/config/option.c
  ${CMAKE_CURRENT_LIST_DIR}/config/schema.c
  ${CMAKE_CURRENT_LIST_DIR}/config/transports.c
  ${CMAKE_CURRENT_LIST_DIR}/config/load.c
  ${CMAKE_CURRENT_LIST_DIR}/config/json.c
  ${CMAKE_CURRENT_LIST_DIR}/describe.c)
