# `cmake --install`: the libraries, the public headers and the CMake package
# (docs/embedding.md). Layout under the prefix:
#   lib/libaf_{proto,runtime,gpu,actors}.a
#   lib/actorflow/libactorflow_torchscript.so (with libtorch: the TorchScript
#     backend, loaded on first use; actors/training/torchscript_plugin.hpp)
#   include/actorflow/{runtime,actors,gpu,proto}/..., include/actorflow/version.hpp
#     (included as "actorflow/runtime/job/job.hpp"; the include path is
#     <prefix>/include)
#   lib/cmake/ActorFlow/ActorFlowConfig.cmake, ...ConfigVersion.cmake,
#     ActorFlowTargets.cmake, ActorFlowDependencies.cmake, FindCAF.cmake
#   bin/actorflow
#   share/doc/actorflow/{CHANGELOG.md,embedding.md}
# Exported targets: ActorFlow::runtime (engine, stream protocol, topology,
# jobs), ActorFlow::actors (the built-in stages; links ActorFlow::runtime
# and ActorFlow::gpu), ActorFlow::gpu (the compute layer), ActorFlow::proto.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(AF_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ActorFlow)

set_target_properties(af_proto PROPERTIES EXPORT_NAME proto)
set_target_properties(af_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(af_gpu PROPERTIES EXPORT_NAME gpu)
set_target_properties(af_actors PROPERTIES EXPORT_NAME actors)
# The same names inside this build, so that code written against the
# package also builds here.
add_library(ActorFlow::proto ALIAS af_proto)
add_library(ActorFlow::runtime ALIAS af_runtime)
add_library(ActorFlow::gpu ALIAS af_gpu)
add_library(ActorFlow::actors ALIAS af_actors)

set(AF_INSTALLED_LIBRARIES af_proto af_runtime af_gpu af_actors)
# The TorchScript backend: a plugin, not a library to link.
if(AF_HAVE_TORCH)
  install(TARGETS af_torchscript
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/actorflow)
endif()
install(TARGETS ${AF_INSTALLED_LIBRARIES}
  EXPORT ActorFlowTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS actorflow RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The public headers, by rule: every header of runtime/, actors/ and gpu/
# outside a detail/ folder (and outside gpu/cuda/, the CUDA device's own
# code). What lives under detail/ is internal; the headers outside it
# include none of it (tests/layers/check_layers.py).
foreach(_af_dir runtime actors gpu)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_af_dir}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow/${_af_dir}
          FILES_MATCHING PATTERN "*.hpp"
          PATTERN "detail" EXCLUDE PATTERN "cuda" EXCLUDE)
endforeach()
install(FILES ${AF_INCLUDE_DIR}/actorflow/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow)
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow/proto
        FILES_MATCHING PATTERN "*.pb.h" PATTERN "CMakeFiles" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/proto/topology.proto
              ${PROJECT_SOURCE_DIR}/proto/example.proto
              ${PROJECT_SOURCE_DIR}/proto/event.proto
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow/proto)

install(EXPORT ActorFlowTargets
  NAMESPACE ActorFlow::
  DESTINATION ${AF_CMAKE_DIR})

get_property(AF_HAVE_CUDA GLOBAL PROPERTY AF_HAVE_CUDA)
get_property(AF_HAVE_NVJPEG GLOBAL PROPERTY AF_HAVE_NVJPEG)
if(AF_HAVE_NVJPEG)
  set(AF_NVJPEG_FOR_CONFIG "${NVJPEG_LIBRARY}")
  # The installed actorflow loads libnvjpeg from where this build found it.
  get_property(_af_nvjpeg_dir GLOBAL PROPERTY AF_NVJPEG_LIBDIR)
  set_property(TARGET actorflow APPEND PROPERTY INSTALL_RPATH "${_af_nvjpeg_dir}")
else()
  set(AF_NVJPEG_FOR_CONFIG "")
endif()
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/ActorFlowConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ActorFlowConfig.cmake
  INSTALL_DESTINATION ${AF_CMAKE_DIR})
# 0.x: a new minor version may break the API, so 0.1 accepts 0.1.y only.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/ActorFlowConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ActorFlowConfig.cmake
              ${PROJECT_BINARY_DIR}/ActorFlowConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/ActorFlowDependencies.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${AF_CMAKE_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/CHANGELOG.md
              ${PROJECT_SOURCE_DIR}/docs/embedding.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
