// dayzero MI355X twin (simulated): the names CUDA's <cuda_runtime_api.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                         cudaErrorInitializationError = 3, cudaErrorNotReady = 600, cudaErrorUnknown = 999 } cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct cudaIpcMemHandle_st { char reserved[64]; } cudaIpcMemHandle_t;
typedef struct cudaIpcEventHandle_st { char reserved[64]; } cudaIpcEventHandle_t;
struct cudaDeviceProp;
struct cudaPointerAttributes;
struct cudaFuncAttributes;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock, cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                      cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor, cudaDevAttrL2CacheSize };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributePreferredSharedMemoryCarveout };
typedef enum cudaLaunchAttributeID { cudaLaunchAttributeIgnore, cudaLaunchAttributeAccessPolicyWindow,
                                     cudaLaunchAttributeCooperative, cudaLaunchAttributeClusterDimension,
                                     cudaLaunchAttributeProgrammaticStreamSerialization,
                                     cudaLaunchAttributeProgrammaticEvent, cudaLaunchAttributePriority } cudaLaunchAttributeID;
typedef union cudaLaunchAttributeValue { int cooperative; int priority; } cudaLaunchAttributeValue;
typedef struct cudaLaunchAttribute_st { cudaLaunchAttributeID id; cudaLaunchAttributeValue val; } cudaLaunchAttribute;
typedef struct cudaLaunchConfig_st cudaLaunchConfig_t;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaIpcMemLazyEnablePeerAccess 0x01
#define CUDART_VERSION 12090
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void** ptr, unsigned long size);
cudaError_t cudaMallocAsync(void** ptr, unsigned long size, cudaStream_t stream);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, unsigned long size);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, unsigned long bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, unsigned long bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void* dst, int value, unsigned long bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, unsigned long bytes, cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr);
cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags);
cudaError_t cudaIpcCloseMemHandle(void* ptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func);
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, unsigned long smem, cudaStream_t stream);
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, unsigned long smem,
                                        cudaStream_t stream);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size, unsigned long smem);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
