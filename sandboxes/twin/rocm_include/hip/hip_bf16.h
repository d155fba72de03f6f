/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hip/hip_bf16.h>; the twin only preprocesses. */
#ifndef HIP_INCLUDE_HIP_HIP_BF16_H
#define HIP_INCLUDE_HIP_HIP_BF16_H
#include <hip/hip_runtime.h>
typedef struct { unsigned short data; } __hip_bfloat16;
typedef struct { __hip_bfloat16 x, y; } __hip_bfloat162;
#endif
