// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/dtype.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_DTYPE_H_
#define _DAYZERO_TWIN_TVM_FFI_DTYPE_H_
#include <dlpack/dlpack.h>
#include <tvm/ffi/string.h>
namespace tvm {
namespace ffi {
DLDataType StringToDLDataType(const String& str);
String DLDataTypeToString(DLDataType dtype);
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_DTYPE_H_
