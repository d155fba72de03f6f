// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/container/map.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_CONTAINER_MAP_H_
#define _DAYZERO_TWIN_TVM_FFI_CONTAINER_MAP_H_
#include <tvm/ffi/any.h>
namespace tvm {
namespace ffi {
template <class K, class V, class = void> class Map;
class MapObj;
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_CONTAINER_MAP_H_
