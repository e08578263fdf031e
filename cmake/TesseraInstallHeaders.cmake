# Run by `cmake --install` (install(SCRIPT)): copies each header of TESSERA_HEADERS into
# TESSERA_HEADER_DESTINATION under the install prefix, at its path below TESSERA_HEADER_BASE (so
# core/sharding/placement.h goes to tessera/core/sharding/), with #include "core/ rewritten as
# #include "tessera/core/, since the sharding model's headers are installed under tessera/.
foreach(header IN LISTS TESSERA_HEADERS)
  file(RELATIVE_PATH name "${TESSERA_HEADER_BASE}" "${header}")
  set(installed "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${TESSERA_HEADER_DESTINATION}/${name}")
  file(READ "${header}" text)
  string(REPLACE "#include \"core/" "#include \"tessera/core/" text "${text}")
  message(STATUS "Installing: ${installed}")
  file(WRITE "${installed}" "${text}")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${installed}")
endforeach()
