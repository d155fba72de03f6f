// dayzero MI355X twin (simulated): the names CUDA's <cuda.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
#define CUDA_VERSION 12090
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct CUtensorMap_st { unsigned long long opaque[16]; } CUtensorMap;
enum cudaError_enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };
CUresult cuInit(unsigned flags);
CUresult cuGetErrorString(CUresult error, const char** str);
CUresult cuModuleLoadData(CUmodule* module, const void* image);
CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream stream, void** params, void** extra);
CUresult cuTensorMapEncodeTiled(CUtensorMap* map, int dtype, unsigned rank, void* addr, const unsigned long long* dims,
                                const unsigned long long* strides, const unsigned* box, const unsigned* elem_strides,
                                int interleave, int swizzle, int l2, int oob);
