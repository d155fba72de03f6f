// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/string.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_STRING_H_
#define _DAYZERO_TWIN_TVM_FFI_STRING_H_
#include <tvm/ffi/object.h>
#include <string>
#include <string_view>
namespace tvm {
namespace ffi {
class String;
class Bytes;
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_STRING_H_
