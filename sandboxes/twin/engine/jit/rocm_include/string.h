// dayzero MI355X twin (simulated): declaration stub for <string.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STRING_H_
#define _DAYZERO_TWIN_STRING_H_
#include <stddef.h>
extern "C" {
void* memcpy(void* d, const void* s, size_t n); void* memset(void* d, int c, size_t n);
int memcmp(const void* a, const void* b, size_t n); void* memmove(void* d, const void* s, size_t n); size_t strlen(const char* s);
int strcmp(const char* a, const char* b); int strncmp(const char* a, const char* b, size_t n); char* strcpy(char* d, const char* s);
char* strchr(const char* s, int c); char* strstr(const char* h, const char* n); }
#endif  // _DAYZERO_TWIN_STRING_H_
