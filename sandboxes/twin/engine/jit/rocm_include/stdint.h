// dayzero MI355X twin (simulated): declaration stub for <stdint.h> of the SGLang ROCm image.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STDINT_H_
#define _DAYZERO_TWIN_STDINT_H_
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef long intmax_t;
typedef unsigned long uintmax_t;
typedef signed char int_least8_t;
typedef int int_fast32_t;
typedef unsigned int uint_fast32_t;
#define INT8_MAX 127
#define INT16_MAX 32767
#define INT32_MAX 2147483647
#define INT32_MIN (-INT32_MAX - 1)
#define INT64_MAX 9223372036854775807L
#define INT64_MIN (-INT64_MAX - 1)
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615UL
#define SIZE_MAX UINT64_MAX
#define INTPTR_MAX INT64_MAX
#define UINTPTR_MAX UINT64_MAX
#define INT32_C(c) c
#define INT64_C(c) c##L
#define UINT32_C(c) c##U
#define UINT64_C(c) c##UL
#endif  // _DAYZERO_TWIN_STDINT_H_
