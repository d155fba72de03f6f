// dayzero MI355X twin (simulated): the names CUDA's <cuda_runtime.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
// cuda_runtime.h brings in cuda_runtime_api.h (see that file) plus the launch helpers and device built-ins below.
template <class... Args> cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(Args...), Args... args);
struct dim3;
struct char2; struct char4; struct uchar2; struct uchar4; struct short2; struct short4; struct ushort2; struct ushort4;
struct int2; struct int3; struct int4; struct uint2; struct uint3; struct uint4; struct longlong2; struct ulonglong2;
struct float2; struct float3; struct float4; struct double2; struct double4;
int2 make_int2(int x, int y); int4 make_int4(int x, int y, int z, int w); uint2 make_uint2(unsigned x, unsigned y);
uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w); float2 make_float2(float x, float y);
float4 make_float4(float x, float y, float z, float w); double2 make_double2(double x, double y);
extern const uint3 threadIdx; extern const uint3 blockIdx; extern const dim3 blockDim; extern const dim3 gridDim;
extern const int warpSize;
void __syncthreads(void); int __syncthreads_count(int p); int __syncthreads_and(int p); int __syncthreads_or(int p);
void __syncwarp(unsigned mask); void __threadfence(void); void __threadfence_block(void); void __threadfence_system(void);
long long clock64(void); unsigned long long __globaltimer(void); void __nanosleep(unsigned ns); void __trap(void);
template <class T> T __shfl_sync(unsigned mask, T var, int src, int width);
template <class T> T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width);
template <class T> T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width);
template <class T> T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width);
unsigned __ballot_sync(unsigned mask, int predicate); int __any_sync(unsigned mask, int p); int __all_sync(unsigned mask, int p);
unsigned __activemask(void); template <class T> unsigned __match_any_sync(unsigned mask, T value);
template <class T> T __reduce_add_sync(unsigned mask, T value); template <class T> T __reduce_max_sync(unsigned mask, T value);
template <class T> T atomicAdd(T* a, T v); template <class T> T atomicSub(T* a, T v); template <class T> T atomicExch(T* a, T v);
template <class T> T atomicMin(T* a, T v); template <class T> T atomicMax(T* a, T v); template <class T> T atomicCAS(T* a, T c, T v);
template <class T> T atomicAnd(T* a, T v); template <class T> T atomicOr(T* a, T v); template <class T> T atomicXor(T* a, T v);
template <class T> T atomicAdd_system(T* a, T v); template <class T> T atomicAdd_block(T* a, T v);
int __popc(unsigned x); int __popcll(unsigned long long x); int __clz(int x); int __ffs(int x); unsigned __brev(unsigned x);
unsigned __byte_perm(unsigned x, unsigned y, unsigned s); unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s);
int __float_as_int(float x); unsigned __float_as_uint(float x); float __int_as_float(int x); float __uint_as_float(unsigned x);
float __expf(float x); float __logf(float x); float __fdividef(float x, float y); float __frcp_rn(float x); float __saturatef(float x);
float __fmul_rn(float x, float y); float __fadd_rn(float x, float y); float __fsqrt_rn(float x); int __float2int_rn(float x);
template <class T> T __ldg(const T* p); template <class T> T __ldcg(const T* p); template <class T> T __ldcs(const T* p);
template <class T> void __stcg(T* p, T v); template <class T> void __stcs(T* p, T v); template <class T> T __ldca(const T* p);
unsigned __cvta_generic_to_shared(const void* p); unsigned __isShared(const void* p);
void __pipeline_commit(void); void __pipeline_wait_prior(unsigned n);
