# Install rules beyond the targets' own (included at the end of the top-level
# CMakeLists.txt).  `make install PREFIX=...` runs `cmake --install build
# --prefix PREFIX`: the prefix is only known at install time, so tern.pc is
# written then, not at configure time.

# Example configurations: <prefix>/share/tern/*.yaml
install(DIRECTORY ${PROJECT_SOURCE_DIR}/config/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tern
        FILES_MATCHING PATTERN "*.yaml")

# Documentation and example sources: <prefix>/share/doc/tern (docs/*.md, the
# charts they show, docs/*.svg, and README.md), <prefix>/share/tern/examples (examples/, installed from
# examples/CMakeLists.txt) and <prefix>/share/tern/plugins/memcpy (the
# example transport, built out of tree by tests/system/test_install.sh).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        FILES_MATCHING PATTERN "*.md" PATTERN "*.svg")
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/plugins/memcpy/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tern/plugins/memcpy
        FILES_MATCHING PATTERN "*.c" PATTERN "*.h" PATTERN "*.md")

# pkg-config: <prefix>/<libdir>/pkgconfig/tern.pc
set(_tern_pc_in ${PROJECT_SOURCE_DIR}/tern.pc.in)
set(_tern_pc_tmp ${CMAKE_BINARY_DIR}/pkgconfig/tern.pc)
install(CODE "
  set(TERN_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(TERN_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(TERN_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(TERN_PC_DATADIR \"${CMAKE_INSTALL_DATADIR}\")
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${_tern_pc_in}\" \"${_tern_pc_tmp}\" @ONLY)
  file(INSTALL \"${_tern_pc_tmp}\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
")
