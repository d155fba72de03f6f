// dayzero MI355X twin (simulated): declaration stub for <tvm/ffi/error.h> of apache-tvm-ffi 0.1.9 (tvm_ffi/include in the image).
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not tvm-ffi's text.
#ifndef _DAYZERO_TWIN_TVM_FFI_ERROR_H_
#define _DAYZERO_TWIN_TVM_FFI_ERROR_H_
#include <tvm/ffi/object.h>
#include <string>
#include <sstream>
namespace tvm {
namespace ffi {
class Error;
class ErrorBuilder;
}  // namespace ffi
}  // namespace tvm
#define TVM_FFI_THROW(ErrorKind) ::tvm::ffi::ErrorBuilder(#ErrorKind, __FILE__, __LINE__).stream()
#define TVM_FFI_ICHECK(cond) if (!(cond)) TVM_FFI_THROW(InternalError)
#define TVM_FFI_CHECK(cond, ErrorKind) if (!(cond)) TVM_FFI_THROW(ErrorKind)
#define TVM_FFI_ICHECK_EQ(a, b) TVM_FFI_ICHECK((a) == (b))
#define TVM_FFI_ICHECK_NE(a, b) TVM_FFI_ICHECK((a) != (b))
#define TVM_FFI_ICHECK_LT(a, b) TVM_FFI_ICHECK((a) < (b))
#define TVM_FFI_ICHECK_LE(a, b) TVM_FFI_ICHECK((a) <= (b))
#define TVM_FFI_ICHECK_GT(a, b) TVM_FFI_ICHECK((a) > (b))
#define TVM_FFI_ICHECK_GE(a, b) TVM_FFI_ICHECK((a) >= (b))
#define TVM_FFI_ICHECK_NOTNULL(x) (x)
#define TVM_FFI_SAFE_CALL_BEGIN() try {
#define TVM_FFI_SAFE_CALL_END() } catch (...) { return -1; } return 0
#endif  // _DAYZERO_TWIN_TVM_FFI_ERROR_H_
