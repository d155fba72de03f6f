/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <stddef.h>; the twin only preprocesses. */
#ifndef _DAYZERO_TWIN_STDDEF_H
#define _DAYZERO_TWIN_STDDEF_H
typedef unsigned long size_t;
typedef long ptrdiff_t;
#ifndef NULL
#define NULL ((void*)0)
#endif
#endif
