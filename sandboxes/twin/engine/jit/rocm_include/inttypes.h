// dayzero MI355X twin (simulated): declaration stub for <inttypes.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_INTTYPES_H_
#define _DAYZERO_TWIN_INTTYPES_H_
#include <stdint.h>
#define PRId64 "ld"
#define PRIu64 "lu"
#define PRIx64 "lx"
typedef struct { long quot, rem; } imaxdiv_t;
extern "C" intmax_t imaxabs(intmax_t n);
#endif  // _DAYZERO_TWIN_INTTYPES_H_
