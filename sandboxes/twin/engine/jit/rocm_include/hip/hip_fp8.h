// dayzero MI355X twin (simulated): declaration stub for <hip/hip_fp8.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_FP8_H_
#define _DAYZERO_TWIN_HIP_FP8_H_
#include <hip/hip_runtime.h>
// Which fp8 encoding the device pass gets: FNUZ on gfx942 (MI300), OCP on gfx950 (MI355X) and gfx12.
#if defined(__gfx942__) && __HIP_DEVICE_COMPILE__
#define HIP_FP8_TYPE_OCP 0
#define HIP_FP8_TYPE_FNUZ 1
#elif (defined(__gfx950__) || defined(__gfx1200__) || defined(__gfx1201__)) && __HIP_DEVICE_COMPILE__
#define HIP_FP8_TYPE_OCP 1
#define HIP_FP8_TYPE_FNUZ 0
#else
#define HIP_FP8_TYPE_OCP 1
#define HIP_FP8_TYPE_FNUZ 1
#endif
typedef unsigned char __hip_fp8_storage_t;
typedef unsigned short __hip_fp8x2_storage_t;
typedef unsigned int __hip_fp8x4_storage_t;
enum __hip_saturation_t { __HIP_NOSAT = 0, __HIP_SATFINITE = 1 };
enum __hip_fp8_interpretation_t { __HIP_E4M3 = 0, __HIP_E5M2 = 1, __HIP_E4M3_FNUZ = 2, __HIP_E5M2_FNUZ = 3 };
struct __hip_fp8_e4m3 { __hip_fp8_storage_t __x; };
struct __hip_fp8_e5m2 { __hip_fp8_storage_t __x; };
struct __hip_fp8x2_e4m3 { __hip_fp8x2_storage_t __x; };
struct __hip_fp8x2_e5m2 { __hip_fp8x2_storage_t __x; };
struct __hip_fp8x4_e4m3 { __hip_fp8x4_storage_t __x; };
struct __hip_fp8x4_e5m2 { __hip_fp8x4_storage_t __x; };
struct __hip_fp8_e4m3_fnuz { __hip_fp8_storage_t __x; };
struct __hip_fp8_e5m2_fnuz { __hip_fp8_storage_t __x; };
struct __hip_fp8x2_e4m3_fnuz { __hip_fp8x2_storage_t __x; };
struct __hip_fp8x4_e4m3_fnuz { __hip_fp8x4_storage_t __x; };
__host__ __device__ __hip_fp8_storage_t __hip_cvt_float_to_fp8(float x, __hip_saturation_t sat,
                                                              __hip_fp8_interpretation_t type);
__host__ __device__ __hip_fp8x2_storage_t __hip_cvt_float2_to_fp8x2(float2 x, __hip_saturation_t sat,
                                                                   __hip_fp8_interpretation_t type);
#endif  // _DAYZERO_TWIN_HIP_FP8_H_
