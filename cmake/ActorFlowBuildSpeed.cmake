# Build speed without giving up a check (docs/getting-started.md, "Build
# speed"): a compiler cache shared by every tree and clone on the machine,
# and precompiled headers. Neither changes what is compiled: the same
# sources, flags and sanitizers, so the same objects.

# ccache (Debian's package; scripts/setup installs it). Its cache lives
# outside the clone (ccache's default, ~/.cache/ccache, or CCACHE_DIR), so
# a new clone on the same machine reuses it: CCACHE_BASEDIR makes the
# clone's absolute paths relative before hashing, and CCACHE_NOHASHDIR
# leaves the working directory out of the hash of objects built with -g
# (their debug info then names the first clone's directory). The
# sloppiness is what ccache's manual asks for with precompiled headers.
option(AF_CCACHE "Compile through ccache where it is installed" ON)
if(AF_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(AF_CCACHE_PROGRAM ccache)
  if(AF_CCACHE_PROGRAM)
    set(_af_ccache ${CMAKE_COMMAND} -E env
        CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
        CCACHE_NOHASHDIR=1
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${AF_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_af_ccache})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_af_ccache})
    message(STATUS "ccache: ${AF_CCACHE_PROGRAM}")
  else()
    message(STATUS "ccache: not found (scripts/setup installs it)")
  endif()
endif()

# Precompiled headers: the standard library, CAF, spdlog and protobuf
# headers that most of our sources include, parsed once per target
# instead of once per source file. A target that compiles one or two
# files gains nothing from a header of its own: those take one of a
# bigger target's (af_pch_reuse) when their flags are the same.
option(AF_PCH "Precompile the standard library, CAF, spdlog and protobuf headers" ON)
set(AF_PCH_STD
  <algorithm> <atomic> <cerrno> <chrono> <cmath> <cstddef> <cstdint>
  <cstdio> <cstdlib> <cstring> <deque> <filesystem> <functional> <map>
  <memory> <mutex> <optional> <set> <stdexcept> <string> <string_view>
  <thread> <unordered_map> <utility> <vector>)
set(AF_PCH_LIBS
  <caf/actor.hpp> <caf/actor_system.hpp> <caf/actor_system_config.hpp>
  <caf/atom.hpp> <caf/binary_deserializer.hpp> <caf/binary_serializer.hpp>
  <caf/event_based_actor.hpp> <caf/scoped_actor.hpp> <caf/send.hpp>
  <caf/stateful_actor.hpp> <caf/typed_actor.hpp>
  <caf/typed_event_based_actor.hpp>
  <spdlog/spdlog.h>
  <google/protobuf/message.h>)

# af_precompile_headers(TARGET [HEADER...]): TARGET precompiles the
# standard library, CAF, spdlog and protobuf headers, and the HEADERs.
function(af_precompile_headers target)
  if(AF_PCH)
    target_precompile_headers(${target} PRIVATE ${AF_PCH_STD} ${AF_PCH_LIBS}
                              ${ARGN})
  endif()
endfunction()

# af_precompile_headers_std(TARGET): the standard library's only (targets
# that use neither CAF nor protobuf: the compute layer).
function(af_precompile_headers_std target)
  if(AF_PCH)
    target_precompile_headers(${target} PRIVATE ${AF_PCH_STD})
  endif()
endfunction()

# af_pch_reuse(TARGET FROM): TARGET uses FROM's precompiled header (both
# must compile with the same flags; the compiler refuses a header built
# with others, and -Werror makes that an error).
function(af_pch_reuse target from)
  if(AF_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
  endif()
endfunction()

# Unity builds: a target's sources compiled in batches of
# CMAKE_UNITY_BUILD_BATCH_SIZE (CMake's default, 8) as one file each, so
# the CAF templates that every source instantiates are compiled once per
# batch. Only for targets whose sources keep their file-local names apart
# (af_unity below: a stage's file names its config_of() and check() for
# the stage, e.g. zip_config_of(), check_zip()); the protobuf-generated
# code and actors_test, whose files share helper names, are compiled file
# by file.
option(AF_UNITY "Compile the targets that allow it as unity builds" ON)
function(af_unity target)
  if(AF_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON)
  endif()
endfunction()
