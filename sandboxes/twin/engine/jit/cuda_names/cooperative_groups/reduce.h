// dayzero MI355X twin (simulated): the names CUDA's <cooperative_groups/reduce.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
namespace cooperative_groups {
template <class T> struct plus; template <class T> struct greater; template <class T> struct less;
}
