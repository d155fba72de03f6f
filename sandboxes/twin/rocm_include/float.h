/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <float.h>; the twin only preprocesses. */
#ifndef _DAYZERO_TWIN_FLOAT_H
#define _DAYZERO_TWIN_FLOAT_H
#define FLT_MAX 3.402823466e+38F
#define FLT_EPSILON 1.192092896e-07F
#endif
