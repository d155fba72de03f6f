// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/object.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_OBJECT_H_
#define _DAYZERO_TWIN_TVM_FFI_OBJECT_H_
#include <tvm/ffi/base_details.h>
#include <type_traits>
#include <utility>
namespace tvm {
namespace ffi {
class Object;
class ObjectRef;
template <class T> class ObjectPtr;
template <class T, class... Args> ObjectPtr<T> make_object(Args&&... args);
template <class Ref, class Obj> Ref GetRef(const Obj* ptr);
}  // namespace ffi
}  // namespace tvm
#define TVM_FFI_DECLARE_OBJECT_INFO(TypeKey, TypeName, ParentType) static constexpr const char* _type_key = TypeKey
#define TVM_FFI_DECLARE_OBJECT_INFO_FINAL(TypeKey, TypeName, ParentType) static constexpr const char* _type_key = TypeKey
#define TVM_FFI_DEFINE_OBJECT_REF_METHODS_NULLABLE(TypeName, ParentType, ObjectName) TypeName() = default
#endif  // _DAYZERO_TWIN_TVM_FFI_OBJECT_H_
