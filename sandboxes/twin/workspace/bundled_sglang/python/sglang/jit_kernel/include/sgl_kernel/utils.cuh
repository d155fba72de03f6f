// dayzero twin: a hand-written excerpt of SGLang 0.5.12's JIT kernel utilities, used only when the real
// release could not be downloaded. It keeps the project's guard style: CUDA headers behind #ifndef USE_ROCM,
// their HIP counterparts and the CUDA type names as aliases in the #else branch. Not SGLang's code.
#pragma once

#include <cstddef>
#include <cstdint>
#ifndef USE_ROCM
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
#endif

#ifndef USE_ROCM
using bf16_t = __nv_bfloat16;
#else
using bf16_t = __hip_bfloat16;
#endif
using fp16_t = __half;

#define SGL_DEVICE __forceinline__ __device__
