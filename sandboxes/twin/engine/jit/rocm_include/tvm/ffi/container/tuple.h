// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/container/tuple.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_CONTAINER_TUPLE_H_
#define _DAYZERO_TWIN_TVM_FFI_CONTAINER_TUPLE_H_
#include <tvm/ffi/container/array.h>
#include <tuple>
namespace tvm {
namespace ffi {
template <class... Types> class Tuple;
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_CONTAINER_TUPLE_H_
