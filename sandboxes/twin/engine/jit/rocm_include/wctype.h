// dayzero MI355X twin (simulated): declaration stub for <wctype.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_WCTYPE_H_
#define _DAYZERO_TWIN_WCTYPE_H_
typedef unsigned long wctype_t;
#endif  // _DAYZERO_TWIN_WCTYPE_H_
