# The libraries ActorFlow's own libraries link to, found the same way in
# this build and in a project that does find_package(ActorFlow): the
# installed ActorFlowConfig.cmake includes this file before it loads the
# exported targets, which name the targets made here.
#
# Input: AF_DEPS_CUDA (the CUDA device was built: cuBLAS, cuDNN),
#        AF_DEPS_NVJPEG_LIBRARY (the nvJPEG library that build linked, or
#        empty),
#        AF_DEPS_REQUIRED (REQUIRED in this build; in a consumer, a missing
#        dependency makes find_package(ActorFlow) fail with its name).
# Output: CAF::core/io/openssl, protobuf::libprotobuf, spdlog::spdlog,
#         Threads::Threads, ZLIB::ZLIB, OpenSSL::SSL/Crypto, and
#         ActorFlow::dep_isal, _turbojpeg, _jpeg, _spng, _webp, _csv,
#         _xxhash, _farmhash, _openblas (and
#         CUDA::cudart, CUDA::cublas, ActorFlow::dep_cudnn with CUDA;
#         ActorFlow::dep_nvjpeg with nvJPEG).
# Sets ActorFlow_DEPS_MISSING to the names of what was not found.

set(ActorFlow_DEPS_MISSING "")

find_package(Threads QUIET)
find_package(CAF 0.17.6 QUIET)
find_package(Protobuf QUIET)
find_package(spdlog QUIET)
find_package(ZLIB QUIET)
find_package(OpenSSL QUIET)
foreach(_af_pkg Threads CAF Protobuf spdlog ZLIB OpenSSL)
  if(NOT ${_af_pkg}_FOUND)
    list(APPEND ActorFlow_DEPS_MISSING ${_af_pkg})
  endif()
endforeach()
if(CAF_FOUND AND NOT TARGET CAF::openssl)
  list(APPEND ActorFlow_DEPS_MISSING
       "CAF::openssl (Debian: libcaf-openssl0.17, a dependency of libcaf-dev)")
endif()

# Plain libraries without a CMake package of their own (Debian: libisal-dev,
# libturbojpeg0-dev, libjpeg62-turbo-dev, libspng-dev, libwebp-dev,
# libcsv-dev, libxxhash-dev, libfarmhash-dev, libopenblas-dev).
function(_af_dep_library target)
  if(TARGET ActorFlow::dep_${target})
    return()
  endif()
  find_library(AF_DEP_${target}_LIBRARY NAMES ${ARGN})
  mark_as_advanced(AF_DEP_${target}_LIBRARY)
  if(NOT AF_DEP_${target}_LIBRARY)
    set(ActorFlow_DEPS_MISSING ${ActorFlow_DEPS_MISSING} "lib${target}"
        PARENT_SCOPE)
    return()
  endif()
  add_library(ActorFlow::dep_${target} UNKNOWN IMPORTED)
  set_target_properties(ActorFlow::dep_${target} PROPERTIES
    IMPORTED_LOCATION "${AF_DEP_${target}_LIBRARY}")
endfunction()
_af_dep_library(isal isal)
_af_dep_library(turbojpeg turbojpeg)
_af_dep_library(jpeg jpeg)
_af_dep_library(spng spng)
_af_dep_library(webp webp)
_af_dep_library(csv csv)
_af_dep_library(xxhash xxhash)
_af_dep_library(farmhash farmhash)
_af_dep_library(openblas openblas)

if(AF_DEPS_CUDA)
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND ActorFlow_DEPS_MISSING "CUDAToolkit (set CUDAToolkit_ROOT)")
  endif()
  if(NOT TARGET ActorFlow::dep_cudnn)
    find_library(AF_DEP_cudnn_LIBRARY cudnn
                 HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
                       /usr/local/cuda/lib)
    mark_as_advanced(AF_DEP_cudnn_LIBRARY)
    if(AF_DEP_cudnn_LIBRARY)
      add_library(ActorFlow::dep_cudnn UNKNOWN IMPORTED)
      set_target_properties(ActorFlow::dep_cudnn PROPERTIES
        IMPORTED_LOCATION "${AF_DEP_cudnn_LIBRARY}")
    else()
      list(APPEND ActorFlow_DEPS_MISSING "cuDNN (libcudnn)")
    endif()
  endif()
  # nvJPEG, where the build found it (AF_DEPS_NVJPEG_LIBRARY; "" without).
  if(AF_DEPS_NVJPEG_LIBRARY AND NOT TARGET ActorFlow::dep_nvjpeg)
    if(EXISTS "${AF_DEPS_NVJPEG_LIBRARY}")
      add_library(ActorFlow::dep_nvjpeg UNKNOWN IMPORTED)
      set_target_properties(ActorFlow::dep_nvjpeg PROPERTIES
        IMPORTED_LOCATION "${AF_DEPS_NVJPEG_LIBRARY}")
    else()
      list(APPEND ActorFlow_DEPS_MISSING "nvJPEG (${AF_DEPS_NVJPEG_LIBRARY})")
    endif()
  endif()
endif()

if(AF_DEPS_REQUIRED AND ActorFlow_DEPS_MISSING)
  message(FATAL_ERROR "ActorFlow needs: ${ActorFlow_DEPS_MISSING} "
                      "(scripts/setup installs them on Debian 12)")
endif()
