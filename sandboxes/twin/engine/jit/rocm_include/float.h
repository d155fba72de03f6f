// dayzero MI355X twin (simulated): declaration stub for <float.h> of the SGLang ROCm image.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_FLOAT_H_
#define _DAYZERO_TWIN_FLOAT_H_
#define FLT_MAX 3.40282347e+38F
#define FLT_MIN 1.17549435e-38F
#define FLT_EPSILON 1.19209290e-07F
#define FLT_MANT_DIG 24
#define DBL_MAX 1.7976931348623157e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-16
#endif  // _DAYZERO_TWIN_FLOAT_H_
