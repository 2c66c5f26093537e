# The CUDA device (cuBLAS, cuDNN, a few kernels of our own), included from
# gpu/CMakeLists.txt. When the toolkit, a working nvcc and cuDNN are all
# found, the .cu sources join af_gpu, which then links the CUDA libraries and
# defines AF_HAVE_CUDA (PUBLIC). Otherwise af_gpu is built without them and
# device.cpp's stubs report CUDA as unavailable.
#
# Tests read the outcome from the global property AF_HAVE_CUDA (directory
# variables do not reach tests/).

option(AF_CUDA "Build the CUDA device when the toolkit and cuDNN are found" ON)
set_property(GLOBAL PROPERTY AF_HAVE_CUDA OFF)

if(AF_FUZZ AND AF_CUDA)
  # The fuzz build is clang with -fsanitize=fuzzer on everything; the
  # compute layer is not what it fuzzes.
  message(STATUS "CUDA device: off (AF_FUZZ)")
  set(AF_CUDA OFF)
endif()

if(AF_CUDA)
  # /usr/local/cuda need not be on PATH: look there too.
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit)
  find_path(CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(CUDNN_LIBRARY cudnn
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
                     /usr/local/cuda/lib)

  set(_af_cuda_missing "")
  if(NOT CUDAToolkit_FOUND)
    set(_af_cuda_missing "the CUDA toolkit was not found (set CUDAToolkit_ROOT)")
  elseif(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
    set(_af_cuda_missing "cuDNN was not found (cudnn.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY})")
  else()
    # Through CUDACXX, so that check_language still tries it (a defined
    # CMAKE_CUDA_COMPILER would skip the check).
    if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
       AND CUDAToolkit_NVCC_EXECUTABLE)
      set(ENV{CUDACXX} ${CUDAToolkit_NVCC_EXECUTABLE})
    endif()
    # nvcc compiles host code with our C++ compiler, not whatever is first
    # on PATH.
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
    endif()
    # H200/H100 (sm_90) natively; PTX for sm_75 (the oldest CUDA 13 has)
    # so that any other GPU runs it after a JIT. Two targets keep the
    # build short.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90-real 75-virtual)
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      enable_language(CUDA)
    else()
      set(_af_cuda_missing "no working CUDA compiler (nvcc) was found")
    endif()
  endif()

  if(_af_cuda_missing)
    message(STATUS "CUDA device: not built: ${_af_cuda_missing}")
  else()
    message(STATUS "CUDA device: built (CUDA ${CUDAToolkit_VERSION}, "
                   "${CUDNN_LIBRARY}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
    target_sources(af_gpu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cu
                                  ${CMAKE_CURRENT_LIST_DIR}/cudnn_plans.cu
                                  ${CMAKE_CURRENT_LIST_DIR}/kernels.cu)
    # af_gpu exists already, so the CMAKE_CUDA_* defaults did not reach it.
    # C++17 for the .cu files: CMake 3.25 knows no C++20 flag for nvcc (and
    # would otherwise take CXX_STANDARD); the headers they include
    # (gpu/device.hpp, runtime/core/random.hpp) must stay C++17.
    set_target_properties(af_gpu PROPERTIES
      CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
      CUDA_STANDARD 17
      CUDA_STANDARD_REQUIRED ON
      CUDA_RUNTIME_LIBRARY Shared)
    target_include_directories(af_gpu PRIVATE ${CUDNN_INCLUDE_DIR})
    # cuDNN as the installed package finds it again
    # (cmake/ActorFlowDependencies.cmake).
    if(NOT TARGET ActorFlow::dep_cudnn)
      add_library(ActorFlow::dep_cudnn UNKNOWN IMPORTED)
      set_target_properties(ActorFlow::dep_cudnn PROPERTIES
        IMPORTED_LOCATION "${CUDNN_LIBRARY}")
    endif()
    target_link_libraries(af_gpu PRIVATE CUDA::cudart CUDA::cublas
                          ActorFlow::dep_cudnn)
    target_compile_definitions(af_gpu PUBLIC AF_HAVE_CUDA)
    # af_warnings is CXX-only (nvcc rejects -Wpedantic); the same for the
    # host side of our .cu files. --expt-relaxed-constexpr lets kernels
    # call af::mix64 (runtime/core/random.hpp) so the dropout mask has one
    # definition.
    target_compile_options(af_gpu PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr
        -Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
    set_property(GLOBAL PROPERTY AF_HAVE_CUDA ON)

    # nvJPEG (image_decode on a GPU): part of NVIDIA's CUDA toolkit, but
    # not of every installation (the wheels the toolkit may come from ship
    # it apart, as nvidia-nvjpeg). AF_NVJPEG_ROOT names a directory that
    # holds include/nvjpeg.h and lib/libnvjpeg.so*.
    set(AF_NVJPEG_ROOT "" CACHE PATH "Where nvJPEG is, if not in the CUDA toolkit")
    find_path(NVJPEG_INCLUDE_DIR nvjpeg.h
              HINTS ${AF_NVJPEG_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS}
              NO_DEFAULT_PATH)
    find_library(NVJPEG_LIBRARY NAMES nvjpeg libnvjpeg.so.13
                 HINTS ${AF_NVJPEG_ROOT}/lib ${AF_NVJPEG_ROOT}/lib64
                       ${CUDAToolkit_LIBRARY_DIR}
                 NO_DEFAULT_PATH)
    set_property(GLOBAL PROPERTY AF_HAVE_NVJPEG OFF)
    if(NVJPEG_INCLUDE_DIR AND NVJPEG_LIBRARY)
      message(STATUS "nvJPEG: built (${NVJPEG_LIBRARY})")
      target_sources(af_gpu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nvjpeg_decoder.cu)
      target_include_directories(af_gpu PRIVATE ${NVJPEG_INCLUDE_DIR})
      if(NOT TARGET ActorFlow::dep_nvjpeg)
        add_library(ActorFlow::dep_nvjpeg UNKNOWN IMPORTED)
        set_target_properties(ActorFlow::dep_nvjpeg PROPERTIES
          IMPORTED_LOCATION "${NVJPEG_LIBRARY}")
      endif()
      target_link_libraries(af_gpu PRIVATE ActorFlow::dep_nvjpeg)
      target_compile_definitions(af_gpu PUBLIC AF_HAVE_NVJPEG)
      set_property(GLOBAL PROPERTY AF_HAVE_NVJPEG ON)
      # Where programs installed from this build find it (it need not be
      # in a system directory): ActorFlowInstall.cmake adds it to their
      # install RPATH.
      get_filename_component(_af_nvjpeg_dir "${NVJPEG_LIBRARY}" DIRECTORY)
      set_property(GLOBAL PROPERTY AF_NVJPEG_LIBDIR "${_af_nvjpeg_dir}")
    else()
      message(STATUS "nvJPEG: not built: nvjpeg.h or libnvjpeg not found "
                     "in the CUDA toolkit (set AF_NVJPEG_ROOT)")
    endif()
  endif()
else()
  message(STATUS "CUDA device: off (AF_CUDA=OFF)")
endif()
