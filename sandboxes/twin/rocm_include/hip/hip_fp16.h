/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hip/hip_fp16.h>; the twin only preprocesses. */
#ifndef HIP_INCLUDE_HIP_HIP_FP16_H
#define HIP_INCLUDE_HIP_HIP_FP16_H
#include <hip/hip_runtime.h>
typedef struct { unsigned short x; } __half;
typedef struct { __half x, y; } __half2;
#endif
