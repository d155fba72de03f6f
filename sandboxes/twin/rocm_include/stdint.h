/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <stdint.h>; the twin only preprocesses. */
#ifndef _DAYZERO_TWIN_STDINT_H
#define _DAYZERO_TWIN_STDINT_H
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
#define INT32_MAX 2147483647
#define UINT32_MAX 4294967295U
#endif
