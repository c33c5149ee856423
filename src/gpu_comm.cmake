# GPU communication and measurement (included from src/CMakeLists.txt):
#   tandem_device_comm  device communicators: the emulated ring, and nccl where NCCL is
#                       found (src/comm/device, src/comm/nccl); the factories of
#                       comm/device/device_backends.h.
#   tandem_gpu_timing   kernel spans from CUPTI activity records, CUDA events as fallback
#                       (src/timeline/gpu).
#   tandem_gpu_bench    the GEMM + all-reduce microbenchmark on a GPU (src/experiment/gpu),
#                       on the compute side's cuBLAS GEMM (tandem_cuda); without them a
#                       stub that answers --device cuda with a UsageError.
# NVML power (src/power/nvml.cpp) needs no toolkit: it is part of tandem_app_lib and
# loads libnvidia-ml.so.1 at run time.
target_link_libraries(tandem_app_lib PUBLIC ${CMAKE_DL_LIBS})

if(TANDEM_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR NAMES nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include
                  /usr/local/cuda/include ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                     ${CUDAToolkit_LIBRARY_ROOT}/lib64 /usr/local/cuda/lib /usr/local/cuda/lib64
                     ENV NCCL_HOME PATH_SUFFIXES lib lib64)

  set(device_comm_sources
      ${CMAKE_CURRENT_SOURCE_DIR}/comm/device/device_backends.cpp
      ${CMAKE_CURRENT_SOURCE_DIR}/comm/device/device_progress.cpp
      ${CMAKE_CURRENT_SOURCE_DIR}/comm/device/emulated_ring.cu
      ${CMAKE_CURRENT_SOURCE_DIR}/comm/device/emulated_ring_plan.cpp)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    list(APPEND device_comm_sources ${CMAKE_CURRENT_SOURCE_DIR}/comm/nccl/nccl_comm.cpp)
  else()
    message(STATUS "tandem: NCCL not found (nccl.h, libnccl); the nccl device backend is "
                   "disabled (set NCCL_HOME)")
    list(APPEND device_comm_sources ${CMAKE_CURRENT_SOURCE_DIR}/comm/nccl/nccl_unavailable.cpp)
  endif()
  add_library(tandem_device_comm STATIC ${device_comm_sources})
  target_include_directories(tandem_device_comm PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(tandem_device_comm PUBLIC tandem_comm CUDA::cudart)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    target_include_directories(tandem_device_comm PRIVATE ${NCCL_INCLUDE_DIR})
    target_link_libraries(tandem_device_comm PRIVATE ${NCCL_LIBRARY})
  endif()

  add_library(tandem_gpu_timing STATIC ${CMAKE_CURRENT_SOURCE_DIR}/timeline/gpu/kernel_timer.cpp)
  target_include_directories(tandem_gpu_timing PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(tandem_gpu_timing PUBLIC tandem_base CUDA::cudart PRIVATE CUDA::cupti)

endif()
if(TARGET tandem_cuda)  # the cuBLAS GEMM of the compute side
  add_library(tandem_gpu_bench STATIC ${CMAKE_CURRENT_SOURCE_DIR}/experiment/gpu/gpu_microbench.cpp)
  target_link_libraries(tandem_gpu_bench PUBLIC tandem_app_lib tandem_device_comm
                        tandem_gpu_timing tandem_cuda)
else()
  add_library(tandem_gpu_bench STATIC
              ${CMAKE_CURRENT_SOURCE_DIR}/experiment/gpu/gpu_microbench_unavailable.cpp)
  target_link_libraries(tandem_gpu_bench PUBLIC tandem_app_lib)
endif()
if(TARGET tandem_device_comm)
  # One CUDA runtime per process: the shared one, as CUDA::cudart and tandem_cuda use.
  set_target_properties(tandem_device_comm tandem_gpu_timing tandem_gpu_bench
                        PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
endif()
