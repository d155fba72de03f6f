// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/extra/c_env_api.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_EXTRA_C_ENV_API_H_
#define _DAYZERO_TWIN_TVM_FFI_EXTRA_C_ENV_API_H_
#include <tvm/ffi/c_api.h>
extern "C" {
typedef void* TVMFFIStreamHandle;
TVM_FFI_DLL int TVMFFIEnvSetStream(int32_t device_type, int32_t device_id, TVMFFIStreamHandle stream,
                                   TVMFFIStreamHandle* opt_out_original_stream);
TVM_FFI_DLL TVMFFIStreamHandle TVMFFIEnvGetStream(int32_t device_type, int32_t device_id);
TVM_FFI_DLL int TVMFFIEnvSetDLPackManagedTensorAllocator(void* allocator, int write_to_global_context,
                                                         void** opt_out_original_allocator);
TVM_FFI_DLL void* TVMFFIEnvGetDLPackManagedTensorAllocator(void);
TVM_FFI_DLL int TVMFFIEnvCheckSignals(void);
}
#endif  // _DAYZERO_TWIN_TVM_FFI_EXTRA_C_ENV_API_H_
