// dayzero MI355X twin (simulated): declaration stub for <stdio.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STDIO_H_
#define _DAYZERO_TWIN_STDIO_H_
#include <stddef.h>
#include <stdarg.h>
typedef struct _IO_FILE FILE;
extern "C" {
extern FILE* stdin; extern FILE* stdout; extern FILE* stderr;
int printf(const char* fmt, ...); int fprintf(FILE* f, const char* fmt, ...); int snprintf(char* s, size_t n, const char* fmt, ...);
int puts(const char* s); int fflush(FILE* f); }
#define EOF (-1)
#endif  // _DAYZERO_TWIN_STDIO_H_
