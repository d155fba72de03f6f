// dayzero MI355X twin (simulated): declaration stub for <hip/hip_cooperative_groups.h> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIP_COOPERATIVE_GROUPS_H_
#define _DAYZERO_TWIN_HIP_COOPERATIVE_GROUPS_H_
#include <hip/hip_runtime.h>
namespace cooperative_groups {
class thread_group;
class thread_block;
class grid_group;
class multi_grid_group;
class coalesced_group;
template <unsigned int Size, class Parent = void> class thread_block_tile;
__device__ thread_block this_thread_block();
__device__ grid_group this_grid();
__device__ coalesced_group coalesced_threads();
template <unsigned int Size, class Parent> __device__ thread_block_tile<Size, Parent> tiled_partition(const Parent& parent);
template <class Group> __device__ void sync(Group& group);
template <class T> struct plus;
template <class T> struct greater;
template <class T> struct less;
template <class Group, class T, class Op> __device__ T reduce(const Group& group, T value, Op op);
}  // namespace cooperative_groups
#endif  // _DAYZERO_TWIN_HIP_COOPERATIVE_GROUPS_H_
