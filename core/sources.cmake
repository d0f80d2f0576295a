# The core's sources, floor by floor from the top (docs/architecture.md, "Floors";
# scripts/core-deps.sh checks that no file includes one of a higher floor).
# Included by core/CMakeLists.txt (libtern.so and the internal archive for
# tests) and by fuzz/CMakeLists.txt (the same sources with coverage).
set(TERN_CORE_SOURCES
  # top: the engine: its lifecycle (engine.c) and the API doors over the objects below
  ${CMAKE_CURRENT_LIST_DIR}/engine.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_handler.c
  ${CMAKE_CURRENT_LIST_DIR}/memory_api.c
  ${CMAKE_CURRENT_LIST_DIR}/gpu_api.c
  ${CMAKE_CURRENT_LIST_DIR}/describe.c
  # datapath: the data path, one way: batch_ctl (conveniences) -> batch -> cut -> route -> dispatch
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
  # engine: what an engine is made of (engine_state.h) and the objects that act across it
  ${CMAKE_CURRENT_LIST_DIR}/engine/endpoint.c
  ${CMAKE_CURRENT_LIST_DIR}/engine/engine_error.c
  ${CMAKE_CURRENT_LIST_DIR}/engine/notify.c
  ${CMAKE_CURRENT_LIST_DIR}/engine/peer_check.c
  # memory: this engine's registrations, tern-allocated memory, page advice
  ${CMAKE_CURRENT_LIST_DIR}/memory/allocs.c
  ${CMAKE_CURRENT_LIST_DIR}/memory/memory.c
  ${CMAKE_CURRENT_LIST_DIR}/memory/pages.c
  # peer: a remote segment: its cached descriptor, NIC pair load, address book, the metadata store client
  ${CMAKE_CURRENT_LIST_DIR}/peer/addrbook.c
  ${CMAKE_CURRENT_LIST_DIR}/peer/metadata.c
  ${CMAKE_CURRENT_LIST_DIR}/peer/mooncake_compat.c
  ${CMAKE_CURRENT_LIST_DIR}/peer/negotiate.c
  ${CMAKE_CURRENT_LIST_DIR}/peer/segments.c
  ${CMAKE_CURRENT_LIST_DIR}/peer/spread.c
  # plugin: loaded tables, host services, the endpoint store
  ${CMAKE_CURRENT_LIST_DIR}/plugin/epstore.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin/plugin.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin/plugin_host.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin/plugin_kinds.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin/plugin_load.c
  ${CMAKE_CURRENT_LIST_DIR}/plugin/xport.c
  # obs: statistics and the metrics endpoint
  ${CMAKE_CURRENT_LIST_DIR}/obs/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/obs/metrics_text.c
  ${CMAKE_CURRENT_LIST_DIR}/obs/stats.c
  # desc: bytes <-> structs: descriptors, pure
  ${CMAKE_CURRENT_LIST_DIR}/desc/desc.c
  ${CMAKE_CURRENT_LIST_DIR}/desc/desc_json.c
  ${CMAKE_CURRENT_LIST_DIR}/desc/desc_sign.c
  ${CMAKE_CURRENT_LIST_DIR}/desc/handshake_desc.c
  ${CMAKE_CURRENT_LIST_DIR}/desc/mooncake_desc.c
  ${CMAKE_CURRENT_LIST_DIR}/desc/segment_desc.c
  # control: the control plane, bottom up: frames <- auth <- server, client
  ${CMAKE_CURRENT_LIST_DIR}/control/frames.c
  ${CMAKE_CURRENT_LIST_DIR}/control/auth.c
  ${CMAKE_CURRENT_LIST_DIR}/control/server.c
  ${CMAKE_CURRENT_LIST_DIR}/control/client.c
  # host: this host: topology, GPUs, the CUDA driver
  ${CMAKE_CURRENT_LIST_DIR}/host/cuda.c
  ${CMAKE_CURRENT_LIST_DIR}/host/gpu_topo.c
  ${CMAKE_CURRENT_LIST_DIR}/host/topology.c
  ${CMAKE_CURRENT_LIST_DIR}/host/topology_load.c
  # config: the configuration: see config/cfg_internal.h
  ${CMAKE_CURRENT_LIST_DIR}/config/yaml_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/config/values.c
  ${CMAKE_CURRENT_LIST_DIR}/config/option.c
  ${CMAKE_CURRENT_LIST_DIR}/config/schema.c
  ${CMAKE_CURRENT_LIST_DIR}/config/transports.c
  ${CMAKE_CURRENT_LIST_DIR}/config/load.c
  ${CMAKE_CURRENT_LIST_DIR}/config/json.c
  # base: util, log, errors, files, the gate
  ${CMAKE_CURRENT_LIST_DIR}/base/errors.c
  ${CMAKE_CURRENT_LIST_DIR}/base/fileio.c
  ${CMAKE_CURRENT_LIST_DIR}/base/gate.c
  ${CMAKE_CURRENT_LIST_DIR}/base/log.c
  ${CMAKE_CURRENT_LIST_DIR}/base/util.c)
