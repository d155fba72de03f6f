// dayzero MI355X twin (simulated): declaration stub for <time.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_TIME_H_
#define _DAYZERO_TWIN_TIME_H_
typedef long time_t; typedef long clock_t;
extern "C" time_t time(time_t* t); extern "C" clock_t clock(void);
#define CLOCKS_PER_SEC 1000000l
#endif  // _DAYZERO_TWIN_TIME_H_
