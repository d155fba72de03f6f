// dayzero MI355X twin (simulated): the names CUDA's <cuda_fp16.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
struct __half_raw; struct __half2_raw; struct __half; struct __half2;
typedef __half half; typedef __half2 half2;
#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
__half __float2half(float a); __half __float2half_rn(float a); float __half2float(__half a);
__half2 __float2half2_rn(float a); __half2 __floats2half2_rn(float a, float b); __half2 __float22half2_rn(float2 a);
float2 __half22float2(__half2 a); float __low2float(__half2 a); float __high2float(__half2 a);
__half __low2half(__half2 a); __half __high2half(__half2 a); __half2 __halves2half2(__half a, __half b);
__half2 __half2half2(__half a); __half2 make_half2(__half x, __half y);
__half __hadd(__half a, __half b); __half __hmul(__half a, __half b); __half __hfma(__half a, __half b, __half c);
__half __hmax(__half a, __half b); __half __hmin(__half a, __half b); __half2 __hadd2(__half2 a, __half2 b);
__half2 __hmul2(__half2 a, __half2 b); __half2 __hfma2(__half2 a, __half2 b, __half2 c);
unsigned short __half_as_ushort(__half h); __half __ushort_as_half(unsigned short x);
__half2 __hmax2_nan(__half2 a, __half2 b); __half __shfl_xor_sync(unsigned mask, __half var, int lane_mask, int width);
