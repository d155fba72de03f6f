// dayzero MI355X twin (simulated): declaration stub for <__clang_hip_runtime_wrapper.h> (clang 20, ROCm 7.0): the header clang force-includes into every HIP compile.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_CLANG_HIP_RUNTIME_WRAPPER_H_
#define _DAYZERO_TWIN_CLANG_HIP_RUNTIME_WRAPPER_H_
#define __HIPCC__ 1
#include <hip/hip_runtime.h>
#endif  // _DAYZERO_TWIN_CLANG_HIP_RUNTIME_WRAPPER_H_
