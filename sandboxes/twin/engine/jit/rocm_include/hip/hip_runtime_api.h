// dayzero MI355X twin (simulated): declaration stub for <hip/hip_runtime_api.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_RUNTIME_API_H_
#define _DAYZERO_TWIN_HIP_RUNTIME_API_H_
#include <stddef.h>
#include <stdint.h>
#include <hip/hip_version.h>
#include <hip/hip_vector_types.h>

typedef enum hipError_t {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorNotInitialized = 3,
  hipErrorInvalidDevice = 101,
  hipErrorInvalidDeviceFunction = 98,
  hipErrorNotReady = 600,
  hipErrorPeerAccessAlreadyEnabled = 704,
  hipErrorUnknown = 999
} hipError_t;
typedef struct ihipStream_t* hipStream_t;
typedef struct ihipEvent_t* hipEvent_t;
typedef struct ihipModule_t* hipModule_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;
typedef struct ihipGraph* hipGraph_t;
typedef struct hipGraphExec* hipGraphExec_t;
typedef int hipDevice_t;
typedef struct hipDeviceProp_tR0600 hipDeviceProp_t;
typedef struct hipIpcMemHandle_st { char reserved[64]; } hipIpcMemHandle_t;
typedef struct hipIpcEventHandle_st { char reserved[64]; } hipIpcEventHandle_t;
typedef struct hipPointerAttribute_t hipPointerAttribute_t;
typedef enum hipMemcpyKind {
  hipMemcpyHostToHost = 0, hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2, hipMemcpyDeviceToDevice = 3,
  hipMemcpyDefault = 4
} hipMemcpyKind;
typedef enum hipDeviceAttribute_t {
  hipDeviceAttributeMaxThreadsPerBlock, hipDeviceAttributeMultiprocessorCount, hipDeviceAttributeWarpSize,
  hipDeviceAttributeMaxSharedMemoryPerBlock, hipDeviceAttributeSharedMemPerBlockOptin, hipDeviceAttributeL2CacheSize,
  hipDeviceAttributeClockRate, hipDeviceAttributeComputeCapabilityMajor, hipDeviceAttributeComputeCapabilityMinor
} hipDeviceAttribute_t;
typedef enum hipFuncAttribute {
  hipFuncAttributeMaxDynamicSharedMemorySize = 8, hipFuncAttributePreferredSharedMemoryCarveout = 9
} hipFuncAttribute;
typedef enum hipLaunchAttributeID {
  hipLaunchAttributeAccessPolicyWindow = 1, hipLaunchAttributeCooperative = 2, hipLaunchAttributePriority = 8
} hipLaunchAttributeID;
typedef union hipLaunchAttributeValue { int cooperative; int priority; char pad[64]; } hipLaunchAttributeValue;
typedef struct hipLaunchAttribute_st { hipLaunchAttributeID id; hipLaunchAttributeValue val; } hipLaunchAttribute;
typedef struct hipLaunchConfig_st {
  dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes; hipStream_t stream; hipLaunchAttribute* attrs; unsigned int numAttrs;
} hipLaunchConfig_t;

#define hipStreamPerThread ((hipStream_t)2)
#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01
#define hipEventDefault 0x0
#define hipEventDisableTiming 0x2
#define hipHostMallocDefault 0x0
#define hipIpcMemLazyEnablePeerAccess 0x01

extern "C" {
hipError_t hipGetLastError(void);
hipError_t hipPeekAtLastError(void);
const char* hipGetErrorString(hipError_t error);
const char* hipGetErrorName(hipError_t error);
hipError_t hipGetDevice(int* device);
hipError_t hipSetDevice(int device);
hipError_t hipGetDeviceCount(int* count);
hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int device);
hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device);
hipError_t hipDeviceSynchronize(void);
hipError_t hipDeviceCanAccessPeer(int* can, int device, int peer);
hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags);
hipError_t hipMalloc(void** ptr, size_t size);
hipError_t hipMallocAsync(void** ptr, size_t size, hipStream_t stream);
hipError_t hipFree(void* ptr);
hipError_t hipFreeAsync(void* ptr, hipStream_t stream);
hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags);
hipError_t hipHostFree(void* ptr);
hipError_t hipMemcpy(void* dst, const void* src, size_t bytes, hipMemcpyKind kind);
hipError_t hipMemcpyAsync(void* dst, const void* src, size_t bytes, hipMemcpyKind kind, hipStream_t stream);
hipError_t hipMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                            hipMemcpyKind kind, hipStream_t stream);
hipError_t hipMemset(void* dst, int value, size_t bytes);
hipError_t hipMemsetAsync(void* dst, int value, size_t bytes, hipStream_t stream);
hipError_t hipStreamCreate(hipStream_t* stream);
hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags);
hipError_t hipStreamDestroy(hipStream_t stream);
hipError_t hipStreamSynchronize(hipStream_t stream);
hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);
hipError_t hipEventCreate(hipEvent_t* event);
hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned int flags);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop);
hipError_t hipEventDestroy(hipEvent_t event);
hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t* handle, void* ptr);
hipError_t hipIpcOpenMemHandle(void** ptr, hipIpcMemHandle_t handle, unsigned int flags);
hipError_t hipIpcCloseMemHandle(void* ptr);
hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* ptr);
hipError_t hipFuncSetAttribute(const void* func, hipFuncAttribute attr, int value);
hipError_t hipLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem, hipStream_t stream);
hipError_t hipLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, unsigned int smem,
                                      hipStream_t stream);
hipError_t hipLaunchKernelExC(const hipLaunchConfig_t* config, const void* func, void** args);
hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size, size_t smem);
hipError_t hipModuleLoadData(hipModule_t* module, const void* image);
hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* name);
hipError_t hipStreamBeginCapture(hipStream_t stream, int mode);
hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* graph);
}
#endif  // _DAYZERO_TWIN_HIP_RUNTIME_API_H_
