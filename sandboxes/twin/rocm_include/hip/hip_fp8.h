/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hip/hip_fp8.h>; the twin only preprocesses. */
#ifndef HIP_INCLUDE_HIP_HIP_FP8_H
#define HIP_INCLUDE_HIP_HIP_FP8_H
#include <hip/hip_runtime.h>
typedef struct { unsigned char __x; } __hip_fp8_e4m3;
typedef struct { unsigned char __x; } __hip_fp8_e5m2;
#endif
