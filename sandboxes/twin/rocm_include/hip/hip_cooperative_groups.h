/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hip/hip_cooperative_groups.h>; the twin only preprocesses. */
#ifndef HIP_INCLUDE_HIP_HIP_COOPERATIVE_GROUPS_H
#define HIP_INCLUDE_HIP_HIP_COOPERATIVE_GROUPS_H
#include <hip/hip_runtime.h>
#define HIP_COOPERATIVE_GROUPS 1
#endif
