// dayzero MI355X twin (simulated): declaration stub for <math.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_MATH_H_
#define _DAYZERO_TWIN_MATH_H_
extern "C" {
double fabs(double x); double sqrt(double x); double exp(double x); double exp2(double x); double log(double x);
double log2(double x); double pow(double x, double y); double sin(double x); double cos(double x); double tanh(double x);
double floor(double x); double ceil(double x); double round(double x); double fmin(double x, double y); double fmax(double x, double y);
double fma(double x, double y, double z); double erf(double x); double trunc(double x); double ldexp(double x, int e);
double frexp(double x, int* e); double copysign(double x, double y); double nextafter(double x, double y);
float fabsf(float x); float sqrtf(float x); float expf(float x); float exp2f(float x); float logf(float x); float log2f(float x);
float powf(float x, float y); float sinf(float x); float cosf(float x); float tanhf(float x); float floorf(float x); float ceilf(float x);
float roundf(float x); float fminf(float x, float y); float fmaxf(float x, float y); float fmaf(float x, float y, float z);
float erff(float x); float truncf(float x); float rsqrtf(float x); float copysignf(float x, float y); }
#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define HUGE_VALF (__builtin_huge_valf())
#define M_PI 3.14159265358979323846
#define M_LN2 0.69314718055994530942
#define M_SQRT2 1.41421356237309504880
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
#define isfinite(x) __builtin_isfinite(x)
#define signbit(x) __builtin_signbit(x)
#endif  // _DAYZERO_TWIN_MATH_H_
