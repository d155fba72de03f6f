// dayzero MI355X twin (simulated): declaration stub for <hipcub/hipcub.hpp> of ROCm 7.0 in the SGLang ROCm image.
// Names only (the types, functions and macros it provides), for the twin's JIT compile check; not ROCm's text.
#ifndef _DAYZERO_TWIN_HIPCUB_HPP_
#define _DAYZERO_TWIN_HIPCUB_HPP_
#include <hip/hip_runtime.h>
#define HIPCUB_VERSION 400000
#define HIPCUB_ROCPRIM_API 1
namespace hipcub {
template <class T, int BlockDimX, int Algorithm = 0, int BlockDimY = 1, int BlockDimZ = 1> class BlockReduce;
template <class T, int BlockDimX, int Algorithm = 0, int BlockDimY = 1, int BlockDimZ = 1> class BlockScan;
template <class T, int BlockDimX, int ItemsPerThread, int Algorithm = 0> class BlockLoad;
template <class T, int BlockDimX, int ItemsPerThread, int Algorithm = 0> class BlockStore;
template <class K, int BlockDimX, int ItemsPerThread, class V = void> class BlockRadixSort;
template <class T, int LogicalWarpThreads = 64> class WarpReduce;
template <class T, int LogicalWarpThreads = 64> class WarpScan;
struct Sum;
struct Max;
struct Min;
template <class K, class V> struct KeyValuePair;
struct DeviceReduce;
struct DeviceScan;
struct DeviceRadixSort;
struct DeviceSegmentedRadixSort;
struct DeviceSelect;
enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING, BLOCK_REDUCE_WARP_REDUCTIONS, BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY };
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_WARP_SCANS };
}  // namespace hipcub
#endif  // _DAYZERO_TWIN_HIPCUB_HPP_
