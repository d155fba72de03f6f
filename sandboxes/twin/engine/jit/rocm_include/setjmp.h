// dayzero MI355X twin (simulated): declaration stub for <setjmp.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_SETJMP_H_
#define _DAYZERO_TWIN_SETJMP_H_
typedef long jmp_buf[8];
#endif  // _DAYZERO_TWIN_SETJMP_H_
