// dayzero MI355X twin (simulated): declaration stub for <assert.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_ASSERT_H_
#define _DAYZERO_TWIN_ASSERT_H_
#define assert(expr) ((void)0)
#endif  // _DAYZERO_TWIN_ASSERT_H_
