// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/container/tensor.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_CONTAINER_TENSOR_H_
#define _DAYZERO_TWIN_TVM_FFI_CONTAINER_TENSOR_H_
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/type_traits.h>
#include <optional>
#include <utility>
namespace tvm {
namespace ffi {
class TensorObj;
class Tensor;
class TensorView;
bool IsContiguous(const DLTensor& tensor);
size_t GetDataSize(int64_t numel, DLDataType dtype);
}  // namespace ffi
}  // namespace tvm
#endif  // _DAYZERO_TWIN_TVM_FFI_CONTAINER_TENSOR_H_
