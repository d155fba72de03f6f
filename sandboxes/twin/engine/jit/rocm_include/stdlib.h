// dayzero MI355X twin (simulated): declaration stub for <stdlib.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STDLIB_H_
#define _DAYZERO_TWIN_STDLIB_H_
#include <stddef.h>
extern "C" {
[[noreturn]] void abort(void) noexcept; [[noreturn]] void exit(int status);
char* getenv(const char* name); void* malloc(size_t n); void free(void* p); int atoi(const char* s);
long strtol(const char* s, char** end, int base); int abs(int n);
void qsort(void* base, size_t n, size_t size, int (*cmp)(const void*, const void*)); }
#define EXIT_SUCCESS 0
#define EXIT_FAILURE 1
#endif  // _DAYZERO_TWIN_STDLIB_H_
