// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/any.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_ANY_H_
#define _DAYZERO_TWIN_TVM_FFI_ANY_H_
#include <tvm/ffi/string.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/type_traits.h>
namespace tvm {
namespace ffi {
class Any;
class AnyView;
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_ANY_H_
