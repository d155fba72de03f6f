// dayzero MI355X twin (simulated): declaration stub for <signal.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_SIGNAL_H_
#define _DAYZERO_TWIN_SIGNAL_H_
typedef int sig_atomic_t;
#define SIGINT 2
#endif  // _DAYZERO_TWIN_SIGNAL_H_
