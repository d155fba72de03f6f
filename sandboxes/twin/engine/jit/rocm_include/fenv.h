// dayzero MI355X twin (simulated): declaration stub for <fenv.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_FENV_H_
#define _DAYZERO_TWIN_FENV_H_
typedef struct { unsigned short __control_word; } fenv_t;
#define FE_TONEAREST 0
#endif  // _DAYZERO_TWIN_FENV_H_
