// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/reflection/registry.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_REFLECTION_REGISTRY_H_
#define _DAYZERO_TWIN_TVM_FFI_REFLECTION_REGISTRY_H_
#include <tvm/ffi/function.h>
namespace tvm {
namespace ffi {
namespace reflection {
class GlobalDef;
template <class T> class ObjectDef;
}  // namespace reflection
}  // namespace ffi
}  // namespace tvm
#define TVM_FFI_STATIC_INIT_BLOCK() static void __dayzero_twin_tvm_ffi_static_init_block()
#endif  // _DAYZERO_TWIN_TVM_FFI_REFLECTION_REGISTRY_H_
