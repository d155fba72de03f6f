// dayzero twin: a hand-written stand-in for SGLang 0.5.12's rotary position encoding kernel, used only when
// the real release could not be downloaded. Like the release, it includes cuda_fp16.h and cuda_runtime.h with
// no USE_ROCM guard. Not SGLang's code.
#pragma once

#include <sgl_kernel/utils.cuh>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

template <typename T>
SGL_DEVICE void rotate(T* x, T* y, T c, T s) {
  const T a = *x, b = *y;
  *x = a * c - b * s;
  *y = b * c + a * s;
}

inline void launch_rotary(fp16_t* q, int n, cudaStream_t stream) { (void)q; (void)n; (void)stream; }
