// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/c_api.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_C_API_H_
#define _DAYZERO_TWIN_TVM_FFI_C_API_H_
#include <dlpack/dlpack.h>
#include <stdint.h>
#define TVM_FFI_DLL __attribute__((visibility("default")))
#define TVM_FFI_DLL_EXPORT __attribute__((visibility("default")))
#define TVM_FFI_VERSION_MAJOR 0
#define TVM_FFI_VERSION_MINOR 1
extern "C" {
typedef void* TVMFFIObjectHandle;
typedef struct TVMFFIObject TVMFFIObject;
typedef struct TVMFFIAny TVMFFIAny;
typedef struct TVMFFIByteArray { const char* data; size_t size; } TVMFFIByteArray;
typedef int (*TVMFFISafeCallType)(void* handle, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result);
typedef enum { kTVMFFINone = 0, kTVMFFIInt = 1, kTVMFFIBool = 2, kTVMFFIFloat = 3, kTVMFFIOpaquePtr = 4 } TVMFFITypeIndex;
TVM_FFI_DLL void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message);
TVM_FFI_DLL int TVMFFIFunctionCall(TVMFFIObjectHandle func, TVMFFIAny* args, int32_t num_args, TVMFFIAny* result);
}
#endif  // _DAYZERO_TWIN_TVM_FFI_C_API_H_
