// dayzero twin: a hand-written stand-in for SGLang 0.5.12's fused metadata copy kernel (speculative decoding
// metadata for the NSA backend), used only when the real release could not be downloaded. Like the release,
// it includes cuda_runtime.h with no USE_ROCM guard. Not SGLang's code.
#pragma once

#include <sgl_kernel/utils.cuh>

#include <cuda_runtime.h>

template <int kMaxSteps>
__global__ void fused_metadata_copy_kernel(const int32_t* __restrict__ seq_lens, int32_t* __restrict__ out,
                                           int num_steps, int bs) {
  const int bid = blockIdx.x * blockDim.x + threadIdx.x;
  if (bid >= bs) return;
  for (int s = 0; s < kMaxSteps && s < num_steps; ++s) out[s * bs + bid] = seq_lens[bid] + s + 1;
}

inline void launch_fused_metadata_copy(const int32_t* seq_lens, int32_t* out, int num_steps, int bs,
                                       cudaStream_t stream) {
  fused_metadata_copy_kernel<8><<<(bs + 127) / 128, 128, 0, stream>>>(seq_lens, out, num_steps, bs);
}
