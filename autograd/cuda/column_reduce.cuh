// Column sums of a [rows, cols] matrix (a Linear's bias gradient, LayerNorm's weight and bias
// gradients): out[c] = the sum over r of f(r, c). One thread per column adding every row in
// order leaves the GPU nearly idle (384 columns are 2 blocks, each thread walking 4096 rows:
// about 1 ms on an H100-class GPU for what should take microseconds). Here the rows are cut
// into fixed chunks of kRowsPerChunk; a thread sums one column of one chunk (a warp reads 32
// neighbouring columns: coalesced), and a second pass adds each column's chunk sums in chunk
// order. The order depends only on the shape, so the same input gives the same bits every run.
#pragma once

#include <string_view>

#include "autograd/cuda/launch.cuh"

namespace ddpkit::cuda {

inline constexpr int64_t kRowsPerChunk = 64;

// Acc: the type the sums are kept in (the host's: T for a bias, double for LayerNorm's).
template <typename Acc, typename Out, typename F>
void ColumnReduce(Device device, int64_t rows, int64_t cols, Out* out, std::string_view name, F f) {
  if (cols == 0) return;
  const int64_t chunks = rows == 0 ? 1 : (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  const Stream stream = CurrentStream(device);
  const Scratch scratch(sizeof(Acc) * chunks * cols, device, stream);  // freed after both passes
  auto* partial = static_cast<Acc*>(scratch.get());
  ForEach(device, chunks * cols, name, [=] __device__(int64_t i) {
    const int64_t chunk = i / cols, c = i % cols;
    const int64_t end = min(rows, (chunk + 1) * kRowsPerChunk);
    Acc sum = 0;
    for (int64_t r = chunk * kRowsPerChunk; r < end; ++r) sum += f(r, c);
    partial[i] = sum;
  });
  ForEach(device, cols, name, [=] __device__(int64_t c) {
    Acc sum = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partial[chunk * cols + c];
    out[c] = static_cast<Out>(sum);
  });
}

}  // namespace ddpkit::cuda
