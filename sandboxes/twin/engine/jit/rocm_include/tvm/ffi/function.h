// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/function.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_FUNCTION_H_
#define _DAYZERO_TWIN_TVM_FFI_FUNCTION_H_
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/error.h>
#include <functional>
#include <utility>
namespace tvm {
namespace ffi {
class FunctionObj;
class Function;
template <class FType> class TypedFunction;
}  // namespace ffi
}  // namespace tvm
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC(ExportName, Function)                                                  \
  extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_##ExportName(void* self, const TVMFFIAny* args, int32_t num_args, \
                                                           TVMFFIAny* result)
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(ExportName, DocString) \
  extern "C" TVM_FFI_DLL_EXPORT const char* __tvm_ffi__doc_##ExportName(void)
#endif  // _DAYZERO_TWIN_TVM_FFI_FUNCTION_H_
