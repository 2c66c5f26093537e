# The CUDA device against the CPU device (label `gpu`), built only when
# af_gpu has the CUDA device (gpu/cuda/cuda.cmake). Every case prints
# "SKIP: no GPU: <why>" and returns where no GPU is present, which CTest
# counts as skipped.
get_property(_af_have_cuda GLOBAL PROPERTY AF_HAVE_CUDA)
if(_af_have_cuda)
  add_executable(cuda_device_test
    cuda_device_test.cpp
    cuda_precision_test.cpp
  )
  target_link_libraries(cuda_device_test PRIVATE af_gpu af_catch_main
                        af_warnings)
  # ASan's shadow-gap guard takes address space the CUDA driver maps;
  # without protect_shadow_gap=0 a sanitized binary sees no GPU. The driver
  # keeps allocations to process exit, which LeakSanitizer would report.
  # One variable only: Catch2's discovery splits a ';' in a property value
  # into further properties (and would drop those after it).
  catch_discover_tests(cuda_device_test EXTRA_ARGS -w NoTests
    PROPERTIES
      LABELS gpu
      SKIP_REGULAR_EXPRESSION "SKIP:"
      ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0:quarantine_size_mb=8:detect_leaks=0"
      TIMEOUT 300)
endif()
