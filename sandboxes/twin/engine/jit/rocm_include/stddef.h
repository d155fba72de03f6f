// dayzero MI355X twin (simulated): declaration stub for <stddef.h> of the SGLang ROCm image.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STDDEF_H_
#define _DAYZERO_TWIN_STDDEF_H_
typedef unsigned long size_t;
typedef long ptrdiff_t;
typedef struct { long long __ll; long double __ld; } max_align_t;
#ifndef NULL
#define NULL __null
#endif
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif  // _DAYZERO_TWIN_STDDEF_H_
