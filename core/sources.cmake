# The core's sources: one file per object, the control plane in control/, the data path in datapath/ (see
# docs/architecture.md), each listed here.  Included by core/CMakeLists.txt
# (libtern.so and the internal archive for tests) and by fuzz/CMakeLists.txt
# (the same sources with coverage instrumentation).
set(TERN_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/addrbook.c
  ${CMAKE_CURRENT_LIST_DIR}/alloc.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda.c
  ${CMAKE_CURRENT_LIST_DIR}/buffers.c
  ${CMAKE_CURRENT_LIST_DIR}/desc.c
  ${CMAKE_CURRENT_LIST_DIR}/desc_json.c
  ${CMAKE_CURRENT_LIST_DIR}/desc_sign.c
  ${CMAKE_CURRENT_LIST_DIR}/segment_desc.c
  ${CMAKE_CURRENT_LIST_DIR}/hs_desc.c
  ${CMAKE_CURRENT_LIST_DIR}/gpu_api.c
  ${CMAKE_CURRENT_LIST_DIR}/gpu_topo.c
  ${CMAKE_CURRENT_LIST_DIR}/engine.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_endpoint.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_error.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_handler.c
  ${CMAKE_CURRENT_LIST_DIR}/epstore.c
  ${CMAKE_CURRENT_LIST_DIR}/errors.c
  ${CMAKE_CURRENT_LIST_DIR}/fileio.c
  ${CMAKE_CURRENT_LIST_DIR}/gate.c
  ${CMAKE_CURRENT_LIST_DIR}/log.c
  ${CMAKE_CURRENT_LIST_DIR}/memory.c
  ${CMAKE_CURRENT_LIST_DIR}/metadata.c
  ${CMAKE_CURRENT_LIST_DIR}/mooncake_compat.c
  ${CMAKE_CURRENT_LIST_DIR}/mooncake_desc.c
  ${CMAKE_CURRENT_LIST_DIR}/negotiate.c
  ${CMAKE_CURRENT_LIST_DIR}/notify.c
  ${CMAKE_CURRENT_LIST_DIR}/pages.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_check.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin_host.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin_kinds.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin_load.c
  ${CMAKE_CURRENT_LIST_DIR}/segments.c
  ${CMAKE_CURRENT_LIST_DIR}/spread.c
  ${CMAKE_CURRENT_LIST_DIR}/stats.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics_text.c
  ${CMAKE_CURRENT_LIST_DIR}/topology.c
  ${CMAKE_CURRENT_LIST_DIR}/topology_load.c
  ${CMAKE_CURRENT_LIST_DIR}/util.c
  ${CMAKE_CURRENT_LIST_DIR}/xport.c
  # the control plane, bottom up: frames <- auth <- server, client
  ${CMAKE_CURRENT_LIST_DIR}/control/frames.c
  ${CMAKE_CURRENT_LIST_DIR}/control/auth.c
  ${CMAKE_CURRENT_LIST_DIR}/control/server.c
  ${CMAKE_CURRENT_LIST_DIR}/control/client.c
  # the data path, one way: batch_ctl (conveniences) -> batch -> cut -> route -> dispatch
  # -> stage, complete -> heal -> queue -> request -> batch_state (scripts/object-deps.py checks it)
  ${CMAKE_CURRENT_LIST_DIR}/datapath/batch.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/batch_ctl.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/cut.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/route.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/dispatch.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/stage.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/complete.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/heal.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/queue.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/stall.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/request.c
  ${CMAKE_CURRENT_LIST_DIR}/datapath/batch_state.c
  # the configuration: see config/cfg_internal.h
  ${CMAKE_CURRENT_LIST_DIR}/config/yaml_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/config/values.c
  ${CMAKE_CURRENT_LIST_DIR}/config/option.c
  ${CMAKE_CURRENT_LIST_DIR}/config/schema.c
  ${CMAKE_CURRENT_LIST_DIR}/config/transports.c
  ${CMAKE_CURRENT_LIST_DIR}/config/load.c
  ${CMAKE_CURRENT_LIST_DIR}/config/json.c
  ${CMAKE_CURRENT_LIST_DIR}/describe.c)
