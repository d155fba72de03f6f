// dayzero MI355X twin (simulated): the names CUDA's <device_launch_parameters.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
extern const uint3 threadIdx; extern const uint3 blockIdx; extern const dim3 blockDim; extern const dim3 gridDim;
extern const int warpSize;
