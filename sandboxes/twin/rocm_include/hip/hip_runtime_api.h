/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hip/hip_runtime_api.h>; the twin only preprocesses. */
#ifndef HIP_INCLUDE_HIP_HIP_RUNTIME_API_H
#define HIP_INCLUDE_HIP_HIP_RUNTIME_API_H
#define HIP_VERSION_MAJOR 7
#define HIP_VERSION_MINOR 0
typedef int hipError_t;
typedef struct ihipStream_t* hipStream_t;
#define hipSuccess 0
#endif
