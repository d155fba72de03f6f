// dayzero MI355X twin (simulated): the names CUDA's <cuda_bf16.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
// cuda_bf16.h also brings in cuda_fp16.h.
struct __nv_bfloat16_raw; struct __nv_bfloat162_raw; struct __nv_bfloat16; struct __nv_bfloat162;
typedef __nv_bfloat16 nv_bfloat16; typedef __nv_bfloat162 nv_bfloat162;
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
__nv_bfloat16 __float2bfloat16(float f); __nv_bfloat16 __float2bfloat16_rn(float f); float __bfloat162float(__nv_bfloat16 a);
__nv_bfloat162 __float2bfloat162_rn(float a); __nv_bfloat162 __floats2bfloat162_rn(float a, float b);
__nv_bfloat162 __float22bfloat162_rn(float2 a); float2 __bfloat1622float2(__nv_bfloat162 a);
__nv_bfloat16 __low2bfloat16(__nv_bfloat162 a); __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a);
__nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b); __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a);
__nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y);
unsigned short __bfloat16_as_ushort(__nv_bfloat16 h); __nv_bfloat16 __ushort_as_bfloat16(unsigned short x);
__nv_bfloat162 __hmax2_nan(__nv_bfloat162 a, __nv_bfloat162 b);
