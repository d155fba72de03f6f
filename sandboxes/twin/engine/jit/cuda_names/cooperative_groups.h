// dayzero MI355X twin (simulated): the names CUDA's <cooperative_groups.h> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
namespace cooperative_groups {
class thread_block; class grid_group; template <unsigned Size, class Parent> class thread_block_tile;
thread_block this_thread_block(); grid_group this_grid();
}
