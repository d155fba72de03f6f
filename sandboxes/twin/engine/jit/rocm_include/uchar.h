// dayzero MI355X twin (simulated): declaration stub for <uchar.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_UCHAR_H_
#define _DAYZERO_TWIN_UCHAR_H_
typedef unsigned int char32_t_compat;
#endif  // _DAYZERO_TWIN_UCHAR_H_
