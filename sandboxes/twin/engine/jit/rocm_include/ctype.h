// dayzero MI355X twin (simulated): declaration stub for <ctype.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_CTYPE_H_
#define _DAYZERO_TWIN_CTYPE_H_
extern "C" int isalpha(int c); extern "C" int isdigit(int c); extern "C" int isspace(int c);
extern "C" int tolower(int c); extern "C" int toupper(int c);
#endif  // _DAYZERO_TWIN_CTYPE_H_
