// dayzero MI355X twin (simulated): declaration stub for <wchar.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_WCHAR_H_
#define _DAYZERO_TWIN_WCHAR_H_
typedef unsigned int wint_t;
typedef struct { int __count; } mbstate_t;
#endif  // _DAYZERO_TWIN_WCHAR_H_
