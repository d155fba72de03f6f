/* dayzero MI355X twin (simulated): minimal stand-in for ROCm's <hipcub/hipcub.hpp>; the twin only preprocesses. */
#ifndef HIPCUB_HIPCUB_HPP_
#define HIPCUB_HIPCUB_HPP_
#include <hip/hip_runtime.h>
#define HIPCUB_VERSION 300400
#endif
