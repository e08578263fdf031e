#ifndef TESSERA_KERNELS_HOST_DEVICE_H_
#define TESSERA_KERNELS_HOST_DEVICE_H_

// Marks a function callable from host code and, when compiled by nvcc, from device code.
#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

#endif  // TESSERA_KERNELS_HOST_DEVICE_H_
