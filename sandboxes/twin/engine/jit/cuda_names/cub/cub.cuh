// dayzero MI355X twin (simulated): the names CUDA's <cub/cub.cuh> provides, as declarations (names only, not
// NVIDIA's text). Read only by the twin's JIT declaration check: never on an include path, because a ROCm
// image has no CUDA headers. A name used by a translation unit that declares it nowhere fails the build.
#define CUB_VERSION 200800
#define CUB_NAMESPACE_BEGIN namespace cub {
#define CUB_NAMESPACE_END }
namespace cub {
template <class T, int BlockDimX, int Algorithm, int BlockDimY, int BlockDimZ> class BlockReduce;
template <class T, int BlockDimX, int Algorithm, int BlockDimY, int BlockDimZ> class BlockScan;
template <class T, int LogicalWarpThreads> class WarpReduce;
template <class T, int LogicalWarpThreads> class WarpScan;
struct Sum; struct Max; struct Min; struct DeviceReduce; struct DeviceScan; struct DeviceRadixSort;
}
