# `cmake --install`: the daemons and the CLI in bin/; the client library (and the static libraries
# it links) in lib/; its public headers in include/tessera/ with the sharding model's headers in
# include/tessera/core/; and the CMake package in lib/cmake/Tessera/, so that another project
# writes find_package(Tessera CONFIG) and links tessera::client.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tessera-coordinator tessera-worker tessera
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)

# tessera::client and what it links: tessera::core (the sharding model, whose types the public
# headers use), and, link-only, the wire vocabulary, the tensor streams and the torch.export
# archive reader (libzip).
set_target_properties(tessera_core PROPERTIES EXPORT_NAME core)
set_target_properties(tessera_proto PROPERTIES EXPORT_NAME proto)
set_target_properties(tessera_transfer PROPERTIES EXPORT_NAME transfer)
set_target_properties(tessera_import PROPERTIES EXPORT_NAME import)
install(TARGETS tessera_client tessera_core tessera_proto tessera_transfer tessera_import
  EXPORT TesseraTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)

# Headers: the source tree includes core as "core/x.h"; installed, core lives under tessera/, so
# the copies include "tessera/core/x.h" and a consumer needs only include/ on its path.
file(GLOB TESSERA_PUBLIC_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/tessera/*.h)
file(GLOB TESSERA_CORE_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/*.h
  ${PROJECT_SOURCE_DIR}/core/*/*.h)
foreach(set PUBLIC CORE)
  if(set STREQUAL "PUBLIC")
    set(destination ${CMAKE_INSTALL_INCLUDEDIR}/tessera)
    set(base ${PROJECT_SOURCE_DIR}/include/tessera)
  else()
    set(destination ${CMAKE_INSTALL_INCLUDEDIR}/tessera/core)
    set(base ${PROJECT_SOURCE_DIR}/core)
  endif()
  install(CODE "set(TESSERA_HEADERS \"${TESSERA_${set}_HEADERS}\")
set(TESSERA_HEADER_BASE \"${base}\")
set(TESSERA_HEADER_DESTINATION \"${destination}\")" COMPONENT Development)
  install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/TesseraInstallHeaders.cmake COMPONENT Development)
endforeach()

set(TESSERA_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
install(EXPORT TesseraTargets NAMESPACE tessera:: DESTINATION ${TESSERA_PACKAGE_DIR}
  COMPONENT Development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TesseraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TesseraConfig.cmake INSTALL_DESTINATION ${TESSERA_PACKAGE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TesseraConfig.cmake ${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake
  DESTINATION ${TESSERA_PACKAGE_DIR} COMPONENT Development)
