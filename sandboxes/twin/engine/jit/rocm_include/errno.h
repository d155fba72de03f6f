// dayzero MI355X twin (simulated): declaration stub for <errno.h> of the SGLang ROCm image's C++ library.
// Names only (what the header provides), for the twin's JIT compile check; not the library's text.
#ifndef _DAYZERO_TWIN_ERRNO_H_
#define _DAYZERO_TWIN_ERRNO_H_
extern "C" int* __errno_location(void) noexcept;
#define errno (*__errno_location())
#define EINVAL 22
#define ENOMEM 12
#define ERANGE 34
#endif  // _DAYZERO_TWIN_ERRNO_H_
