/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <stdbool.h>; the twin only preprocesses. */
#ifndef _DAYZERO_TWIN_STDBOOL_H
#define _DAYZERO_TWIN_STDBOOL_H
#ifndef __cplusplus
#define bool _Bool
#define true 1
#define false 0
#endif
#endif
