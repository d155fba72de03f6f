// dayzero MI355X twin (simulated): declaration stub for <hip/hip_runtime.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_RUNTIME_H_
#define _DAYZERO_TWIN_HIP_RUNTIME_H_
#if !defined(__HIP_PLATFORM_AMD__) && defined(__HIP__)
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <stddef.h>
#include <stdint.h>
#include <hip/hip_version.h>
#include <hip/hip_runtime_api.h>
#include <hip/hip_vector_types.h>

// function and variable qualifiers
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, __VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define HIP_SYMBOL(symbol) (&symbol)
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define hipLaunchKernelGGL(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)

// thread coordinates
struct __hip_builtin_coordinates_t { unsigned int x, y, z; };
extern const __hip_builtin_coordinates_t threadIdx;
extern const __hip_builtin_coordinates_t blockIdx;
extern const __hip_builtin_coordinates_t blockDim;
extern const __hip_builtin_coordinates_t gridDim;
extern const int warpSize;

// synchronization, fences, clocks
extern "C" __device__ void __syncthreads(void);
__device__ int __syncthreads_count(int predicate);
__device__ int __syncthreads_and(int predicate);
__device__ int __syncthreads_or(int predicate);
template <class MaskT> __device__ void __syncwarp(MaskT mask);
__device__ void __threadfence(void);
__device__ void __threadfence_block(void);
__device__ void __threadfence_system(void);
__device__ long long clock64(void);
__device__ long long wall_clock64(void);
__device__ unsigned int __lane_id(void);
__device__ void __trap(void);

// warp cross-lane functions (the *_sync forms take a 64-bit mask)
template <class T> __device__ T __shfl(T var, int src_lane, int width = 64);
template <class T> __device__ T __shfl_up(T var, unsigned int delta, int width = 64);
template <class T> __device__ T __shfl_down(T var, unsigned int delta, int width = 64);
template <class T> __device__ T __shfl_xor(T var, int lane_mask, int width = 64);
template <class MaskT, class T> __device__ T __shfl_sync(MaskT mask, T var, int src_lane, int width = 64);
template <class MaskT, class T> __device__ T __shfl_up_sync(MaskT mask, T var, unsigned int delta, int width = 64);
template <class MaskT, class T> __device__ T __shfl_down_sync(MaskT mask, T var, unsigned int delta, int width = 64);
template <class MaskT, class T> __device__ T __shfl_xor_sync(MaskT mask, T var, int lane_mask, int width = 64);
__device__ unsigned long long __ballot(int predicate);
template <class MaskT> __device__ unsigned long long __ballot_sync(MaskT mask, int predicate);
__device__ int __any(int predicate);
__device__ int __all(int predicate);
template <class MaskT> __device__ int __any_sync(MaskT mask, int predicate);
template <class MaskT> __device__ int __all_sync(MaskT mask, int predicate);
__device__ unsigned long long __activemask(void);
template <class MaskT, class T> __device__ unsigned long long __match_any_sync(MaskT mask, T value);

// atomics
template <class T> __device__ T atomicAdd(T* address, T val);
template <class T> __device__ T atomicSub(T* address, T val);
template <class T> __device__ T atomicExch(T* address, T val);
template <class T> __device__ T atomicMin(T* address, T val);
template <class T> __device__ T atomicMax(T* address, T val);
template <class T> __device__ T atomicAnd(T* address, T val);
template <class T> __device__ T atomicOr(T* address, T val);
template <class T> __device__ T atomicXor(T* address, T val);
template <class T> __device__ T atomicCAS(T* address, T compare, T val);
__device__ unsigned int atomicInc(unsigned int* address, unsigned int val);
__device__ unsigned int atomicDec(unsigned int* address, unsigned int val);
template <class T> __device__ T atomicAdd_system(T* address, T val);
template <class T> __device__ T unsafeAtomicAdd(T* address, T val);

// integer and float intrinsics
__device__ int __popc(unsigned int x);
__device__ int __popcll(unsigned long long x);
__device__ int __clz(int x);
__device__ int __clzll(long long x);
__device__ int __ffs(int x);
__device__ int __ffsll(long long x);
__device__ unsigned int __brev(unsigned int x);
__device__ unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s);
__device__ int __mul24(int x, int y);
__device__ unsigned int __umulhi(unsigned int x, unsigned int y);
__device__ int __float_as_int(float x);
__device__ unsigned int __float_as_uint(float x);
__device__ float __int_as_float(int x);
__device__ float __uint_as_float(unsigned int x);
__device__ long long __double_as_longlong(double x);
__device__ double __longlong_as_double(long long x);
__device__ float __expf(float x);
__device__ float __exp10f(float x);
__device__ float __logf(float x);
__device__ float __log2f(float x);
__device__ float __powf(float x, float y);
__device__ float __sinf(float x);
__device__ float __cosf(float x);
__device__ float __tanf(float x);
__device__ float __fdividef(float x, float y);
__device__ float __frcp_rn(float x);
__device__ float __fsqrt_rn(float x);
__device__ float __frsqrt_rn(float x);
__device__ float __fadd_rn(float x, float y);
__device__ float __fmul_rn(float x, float y);
__device__ float __fmaf_rn(float x, float y, float z);
__device__ float __saturatef(float x);
__device__ int __float2int_rn(float x);
__device__ int __float2int_rz(float x);
__device__ unsigned int __float2uint_rn(float x);
__device__ float __int2float_rn(int x);
__device__ float rsqrtf(float x);
__device__ float exp10f(float x);
__device__ float normcdff(float x);
template <class T> __device__ T __ldg(const T* ptr);
template <class T> __host__ __device__ T min(T a, T b);
template <class T> __host__ __device__ T max(T a, T b);
extern "C" __device__ int printf(const char* fmt, ...);
#endif  // _DAYZERO_TWIN_HIP_RUNTIME_H_
