// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/base_details.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_BASE_DETAILS_H_
#define _DAYZERO_TWIN_TVM_FFI_BASE_DETAILS_H_
#include <tvm/ffi/c_api.h>
#define TVM_FFI_INLINE inline __attribute__((always_inline))
#define TVM_FFI_NO_INLINE __attribute__((noinline))
#define TVM_FFI_UNREACHABLE() __builtin_unreachable()
#define TVM_FFI_LIKELY(cond) __builtin_expect(!!(cond), 1)
#define TVM_FFI_UNLIKELY(cond) __builtin_expect(!!(cond), 0)
#define TVM_FFI_STR_CONCAT(a, b) a##b
#endif  // _DAYZERO_TWIN_TVM_FFI_BASE_DETAILS_H_
