# The GPU parts (included from src/CMakeLists.txt where CMake found the CUDA toolkit):
#   tandem_cuda_base     the CUDA base layer every GPU part uses: error check, streams,
#                        events, device buffers, the event clock (src/cuda)
#   tandem_compute_cuda  cuBLAS GEMMs and tandem's own kernels (src/compute/cuda)
#   tandem_gpu_timing    compute spans from CUDA events, kernel spans from CUPTI
#                        (src/timeline/gpu)
#   tandem_device_comm   device backends on the communication skeleton: the emulated ring,
#                        and nccl where NCCL is found (src/comm/device, src/comm/nccl)
#   tandem_model_cuda    the CUDA model, the RankModel of --device cuda (src/model/cuda)
#   tandem_gpu_bench     the GEMM + all-reduce microbenchmark on GPUs (src/experiment/gpu)
# The last three register themselves; programs get them through tandem_backends.
# NVML power (src/power/nvml.cpp) needs no toolkit: it loads libnvidia-ml.so.1 at run time.
set(cuda_patterns PATTERNS *.cpp *.cu)
tandem_module(tandem_cuda_base    DIRS cuda DEPS tandem_core CUDA::cudart ${cuda_patterns})
tandem_module(tandem_compute_cuda DIRS compute/cuda
              DEPS tandem_cuda_base tandem_compute CUDA::cublas ${cuda_patterns})
tandem_module(tandem_gpu_timing   DIRS timeline/gpu
              DEPS tandem_cuda_base tandem_timeline ${cuda_patterns})
target_link_libraries(tandem_gpu_timing PRIVATE CUDA::cupti)

find_path(NCCL_INCLUDE_DIR NAMES nccl.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include
                /usr/local/cuda/include ENV NCCL_HOME PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl
             HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                   ${CUDAToolkit_LIBRARY_ROOT}/lib64 /usr/local/cuda/lib /usr/local/cuda/lib64
                   ENV NCCL_HOME PATH_SUFFIXES lib lib64)
set(device_comm_dirs comm/device)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  list(APPEND device_comm_dirs comm/nccl)
else()
  message(STATUS "tandem: NCCL not found (nccl.h, libnccl); the nccl device backend is "
                 "disabled (set NCCL_HOME)")
endif()
tandem_module(tandem_device_comm DIRS ${device_comm_dirs}
              DEPS tandem_comm tandem_cuda_base ${cuda_patterns})
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  target_include_directories(tandem_device_comm PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(tandem_device_comm PRIVATE ${NCCL_LIBRARY})
endif()
tandem_register(tandem_device_comm)

tandem_module(tandem_model_cuda DIRS model/cuda
              DEPS tandem_model tandem_compute_cuda tandem_gpu_timing ${cuda_patterns})
tandem_register(tandem_model_cuda)

tandem_module(tandem_gpu_bench DIRS experiment/gpu
              DEPS tandem_app_lib tandem_compute_cuda tandem_gpu_timing ${cuda_patterns})
tandem_register(tandem_gpu_bench)

# One CUDA runtime per process: the shared one, as CUDA::cudart and cuBLAS use.
set_target_properties(tandem_cuda_base tandem_compute_cuda tandem_gpu_timing tandem_device_comm
                      tandem_model_cuda tandem_gpu_bench PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
