// dayzero MI355X twin (simulated): declaration stub for <locale.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_LOCALE_H_
#define _DAYZERO_TWIN_LOCALE_H_
extern "C" char* setlocale(int category, const char* locale);
#define LC_ALL 6
#endif  // _DAYZERO_TWIN_LOCALE_H_
