/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <limits.h>; the twin only preprocesses. */
#ifndef _DAYZERO_TWIN_LIMITS_H
#define _DAYZERO_TWIN_LIMITS_H
#define CHAR_BIT 8
#define INT_MAX 2147483647
#define INT_MIN (-INT_MAX - 1)
#endif
