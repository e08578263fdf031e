# Decides TESSERA_WITH_CUDA from TESSERA_CUDA (AUTO|ON|OFF) and, when on, enables the CUDA language
# and finds NCCL in the toolkit directories. Defines the imported target tessera::nccl.
set(TESSERA_WITH_CUDA OFF)
if(NOT TESSERA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    get_filename_component(_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(_cuda_root "${_cuda_bin}" DIRECTORY)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_cuda_root}/include /usr/include)
    find_library(NCCL_LIBRARY nccl HINTS ${_cuda_root}/lib64 ${_cuda_root}/lib /usr/lib/x86_64-linux-gnu)
  endif()
  if(CMAKE_CUDA_COMPILER AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    add_library(tessera::nccl UNKNOWN IMPORTED)
    set_target_properties(tessera::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    set(TESSERA_WITH_CUDA ON)
  elseif(TESSERA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_CUDA=ON but nvcc or NCCL was not found "
                        "(nvcc: '${CMAKE_CUDA_COMPILER}', nccl.h: '${NCCL_INCLUDE_DIR}', "
                        "libnccl: '${NCCL_LIBRARY}')")
  endif()
endif()
# Recorded in the cache so scripts can tell which variant a build tree is.
set(TESSERA_WITH_CUDA_BUILT ${TESSERA_WITH_CUDA} CACHE INTERNAL "Whether the CUDA pieces are built")
