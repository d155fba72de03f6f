// dayzero MI355X twin (simulated): declaration stub for <stdbool.h> of the SGLang ROCm image.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_STDBOOL_H_
#define _DAYZERO_TWIN_STDBOOL_H_
#define __bool_true_false_are_defined 1
#endif  // _DAYZERO_TWIN_STDBOOL_H_
