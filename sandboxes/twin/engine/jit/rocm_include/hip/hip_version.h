// dayzero MI355X twin (simulated): declaration stub for <hip/hip_version.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_VERSION_H_
#define _DAYZERO_TWIN_HIP_VERSION_H_
#define HIP_VERSION_MAJOR 7
#define HIP_VERSION_MINOR 0
#define HIP_VERSION_PATCH 51831
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)
#endif  // _DAYZERO_TWIN_HIP_VERSION_H_
