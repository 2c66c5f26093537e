# The built-in stage types, found in their sources: every definition
# `stage_type NAME_type() {` at the start of a line of a file in SOURCES
# becomes a line AF_STAGE_TYPE(NAME_type) of OUT, which actors/builtin.cpp
# includes to declare and register them. Adding a stage type is then its
# source file, its test, its config block in proto/topology.proto and the
# CHANGELOG (docs/architecture.md, "Adding a stage type").
# Run at build time by actors/CMakeLists.txt:
#   cmake -DOUT=FILE -DSOURCES="a.cpp;b.cpp" -P af_stage_types.cmake
# OUT is rewritten only when its text changes, so that builtin.cpp is not
# rebuilt for an edit that adds or removes no type.
cmake_minimum_required(VERSION 3.18)
if(NOT OUT OR NOT SOURCES)
  message(FATAL_ERROR "af_stage_types.cmake: OUT and SOURCES are required")
endif()
set(_text "// Generated from the stage_type definitions of actors/ by\n// cmake/af_stage_types.cmake: do not edit.\n")
set(_names)
foreach(_source IN LISTS SOURCES)
  file(STRINGS "${_source}" _lines REGEX "^stage_type [a-z0-9_]+_type\\(\\) {")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE "^stage_type ([a-z0-9_]+_type)\\(\\) {.*" "\\1" _name "${_line}")
    list(APPEND _names ${_name})
  endforeach()
endforeach()
list(SORT _names)
list(REMOVE_DUPLICATES _names)
if(NOT _names)
  message(FATAL_ERROR "af_stage_types.cmake: no stage_type definition found")
endif()
foreach(_name IN LISTS _names)
  string(APPEND _text "AF_STAGE_TYPE(${_name})\n")
endforeach()
set(_old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" _old)
endif()
if(NOT _old STREQUAL _text)
  file(WRITE "${OUT}" "${_text}")
endif()
