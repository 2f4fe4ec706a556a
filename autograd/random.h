// A small seeded generator (splitmix64) with portable uniform and normal draws, so the same
// seed gives the same model and data on every machine and standard library.
#pragma once

#include <cstdint>

#include "autograd/tensor.h"

namespace ddpkit {

class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}
  uint64_t NextU64();
  double Uniform();  // [0, 1)
  double Normal();   // standard normal (Box-Muller)

  // Fills `t` (any floating dtype) with values converted from double draws.
  void FillUniform(const Tensor& t, double low, double high);
  void FillNormal(const Tensor& t, double mean = 0.0, double stddev = 1.0);

 private:
  uint64_t state_;
};

}  // namespace ddpkit
