// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/optional.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_OPTIONAL_H_
#define _DAYZERO_TWIN_TVM_FFI_OPTIONAL_H_
#include <tvm/ffi/object.h>
#include <optional>
namespace tvm {
namespace ffi {
template <class T, class = void> class Optional;
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_OPTIONAL_H_
