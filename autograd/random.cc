#include "autograd/random.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace ddpkit {

uint64_t Generator::NextU64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Generator::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double Generator::Normal() {
  const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void Generator::FillUniform(const Tensor& t, double low, double high) {
  std::vector<double> values(t.numel());
  for (double& v : values) v = low + (high - low) * Uniform();
  t.CopyFrom(Tensor::FromVector<double>(values, t.shape()));
}

void Generator::FillNormal(const Tensor& t, double mean, double stddev) {
  std::vector<double> values(t.numel());
  for (double& v : values) v = mean + stddev * Normal();
  t.CopyFrom(Tensor::FromVector<double>(values, t.shape()));
}

}  // namespace ddpkit
