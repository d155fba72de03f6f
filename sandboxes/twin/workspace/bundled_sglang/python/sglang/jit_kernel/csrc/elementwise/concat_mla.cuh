// dayzero twin: a hand-written stand-in for SGLang 0.5.12's MLA concat kernel, used only when the real release
// could not be downloaded. Like the release, it includes cuda_bf16.h and cuda_runtime.h with no USE_ROCM
// guard. Not SGLang's code.
#pragma once

#include <sgl_kernel/utils.cuh>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void concat_mla_kernel(const bf16_t* __restrict__ nope, const bf16_t* __restrict__ rope,
                                  bf16_t* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = nope[i];
  (void)rope;
}

inline void launch_concat_mla(const bf16_t* a, const bf16_t* b, bf16_t* o, int n, cudaStream_t stream) {
  concat_mla_kernel<<<(n + 255) / 256, 256, 0, stream>>>(a, b, o, n);
}
