/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hip/hip_runtime.h>; the twin only preprocesses. */
#ifndef HIP_INCLUDE_HIP_HIP_RUNTIME_H
#define HIP_INCLUDE_HIP_HIP_RUNTIME_H
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <stddef.h>
#include <stdint.h>
#include <hip/hip_runtime_api.h>
#define __global__ __attribute__((amdgpu_kernel))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, __VA_ARGS__)))
#define warpSize 64
#endif
