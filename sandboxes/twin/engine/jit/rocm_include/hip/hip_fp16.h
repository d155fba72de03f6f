// dayzero MI355X twin (simulated): declaration stub for <hip/hip_fp16.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_FP16_H_
#define _DAYZERO_TWIN_HIP_FP16_H_
#include <hip/hip_runtime.h>
struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
struct __half { unsigned short __x; };
struct __half2 { __half x, y; };
typedef __half half;
typedef __half2 half2;
__host__ __device__ __half __float2half(float a);
__host__ __device__ __half __float2half_rn(float a);
__host__ __device__ __half __float2half_rz(float a);
__host__ __device__ float __half2float(__half a);
__host__ __device__ __half2 __float2half2_rn(float a);
__host__ __device__ __half2 __floats2half2_rn(float a, float b);
__host__ __device__ __half2 __float22half2_rn(float2 a);
__host__ __device__ float2 __half22float2(__half2 a);
__host__ __device__ float __low2float(__half2 a);
__host__ __device__ float __high2float(__half2 a);
__host__ __device__ __half __low2half(__half2 a);
__host__ __device__ __half __high2half(__half2 a);
__host__ __device__ __half2 __halves2half2(__half a, __half b);
__host__ __device__ __half2 __half2half2(__half a);
__host__ __device__ __half2 make_half2(__half x, __half y);
__device__ __half __hadd(__half a, __half b);
__device__ __half __hsub(__half a, __half b);
__device__ __half __hmul(__half a, __half b);
__device__ __half __hdiv(__half a, __half b);
__device__ __half __hfma(__half a, __half b, __half c);
__device__ __half __hneg(__half a);
__device__ __half __habs(__half a);
__device__ __half __hmax(__half a, __half b);
__device__ __half __hmin(__half a, __half b);
__device__ bool __heq(__half a, __half b);
__device__ bool __hgt(__half a, __half b);
__device__ bool __hlt(__half a, __half b);
__device__ bool __hisnan(__half a);
__device__ __half2 __hadd2(__half2 a, __half2 b);
__device__ __half2 __hsub2(__half2 a, __half2 b);
__device__ __half2 __hmul2(__half2 a, __half2 b);
__device__ __half2 __hfma2(__half2 a, __half2 b, __half2 c);
__device__ __half2 __hmax2(__half2 a, __half2 b);
__device__ __half2 __hmin2(__half2 a, __half2 b);
__device__ __half hexp(__half a);
__device__ __half hlog(__half a);
__device__ __half hsqrt(__half a);
__device__ __half hrsqrt(__half a);
__device__ __half2 h2exp(__half2 a);
__host__ __device__ unsigned short __half_as_ushort(__half h);
__host__ __device__ short __half_as_short(__half h);
__host__ __device__ __half __ushort_as_half(unsigned short x);
__host__ __device__ __half __short_as_half(short x);
__device__ __half __int2half_rn(int i);
__device__ int __half2int_rn(__half h);
#endif  // _DAYZERO_TWIN_HIP_FP16_H_
