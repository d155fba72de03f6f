// dayzero MI355X twin (simulated): declaration stub for <stdarg.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STDARG_H_
#define _DAYZERO_TWIN_STDARG_H_
typedef __builtin_va_list va_list;
#define va_start(ap, param) __builtin_va_start(ap, param)
#define va_end(ap) __builtin_va_end(ap)
#define va_arg(ap, type) __builtin_va_arg(ap, type)
#endif  // _DAYZERO_TWIN_STDARG_H_
