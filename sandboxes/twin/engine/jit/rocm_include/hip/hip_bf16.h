// dayzero MI355X twin (simulated): declaration stub for <hip/hip_bf16.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_BF16_H_
#define _DAYZERO_TWIN_HIP_BF16_H_
#include <hip/hip_runtime.h>
struct __hip_bfloat16_raw { unsigned short x; };
struct __hip_bfloat162_raw { unsigned short x, y; };
struct __hip_bfloat16 { unsigned short data; };
struct __hip_bfloat162 { __hip_bfloat16 x, y; };
__host__ __device__ __hip_bfloat16 __float2bfloat16(float f);
__host__ __device__ __hip_bfloat16 __float2bfloat16_rn(float f);
__host__ __device__ float __bfloat162float(__hip_bfloat16 a);
__host__ __device__ __hip_bfloat162 __float2bfloat162_rn(float a);
__host__ __device__ __hip_bfloat162 __floats2bfloat162_rn(float a, float b);
__host__ __device__ __hip_bfloat162 __float22bfloat162_rn(float2 a);
__host__ __device__ float2 __bfloat1622float2(__hip_bfloat162 a);
__host__ __device__ __hip_bfloat16 __low2bfloat16(__hip_bfloat162 a);
__host__ __device__ __hip_bfloat16 __high2bfloat16(__hip_bfloat162 a);
__host__ __device__ float __low2float(__hip_bfloat162 a);
__host__ __device__ float __high2float(__hip_bfloat162 a);
__host__ __device__ __hip_bfloat162 __halves2bfloat162(__hip_bfloat16 a, __hip_bfloat16 b);
__host__ __device__ __hip_bfloat162 __bfloat162bfloat162(__hip_bfloat16 a);
__host__ __device__ __hip_bfloat162 make_bfloat162(__hip_bfloat16 x, __hip_bfloat16 y);
__host__ __device__ unsigned short __bfloat16_as_ushort(__hip_bfloat16 h);
__host__ __device__ short __bfloat16_as_short(__hip_bfloat16 h);
__host__ __device__ __hip_bfloat16 __ushort_as_bfloat16(unsigned short x);
__host__ __device__ __hip_bfloat16 __short_as_bfloat16(short x);
__device__ __hip_bfloat16 __hadd(__hip_bfloat16 a, __hip_bfloat16 b);
__device__ __hip_bfloat16 __hsub(__hip_bfloat16 a, __hip_bfloat16 b);
__device__ __hip_bfloat16 __hmul(__hip_bfloat16 a, __hip_bfloat16 b);
__device__ __hip_bfloat16 __hfma(__hip_bfloat16 a, __hip_bfloat16 b, __hip_bfloat16 c);
__device__ __hip_bfloat16 __hmax(__hip_bfloat16 a, __hip_bfloat16 b);
__device__ __hip_bfloat16 __hmin(__hip_bfloat16 a, __hip_bfloat16 b);
__device__ __hip_bfloat16 __habs(__hip_bfloat16 a);
__device__ __hip_bfloat162 __hadd2(__hip_bfloat162 a, __hip_bfloat162 b);
__device__ __hip_bfloat162 __hmul2(__hip_bfloat162 a, __hip_bfloat162 b);
__device__ __hip_bfloat162 __hfma2(__hip_bfloat162 a, __hip_bfloat162 b, __hip_bfloat162 c);
#endif  // _DAYZERO_TWIN_HIP_BF16_H_
