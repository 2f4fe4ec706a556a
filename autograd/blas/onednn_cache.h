// What each oneDNN user (blas/onednn.cc's matmuls, blas/onednn_conv.cc's convolutions) keeps per
// thread: a stream and the primitives made so far, keyed by everything their choice depends on.
// The threads of one process (a threads world's ranks) each keep their own: a primitive is not
// shared while it runs.
#pragma once

#include <dnnl.hpp>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"

namespace ddpkit::blas {

inline const dnnl::engine& OneDnnEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Primitives are made one thread at a time: oneDNN's own primitive cache, shared by the
// process, synchronises in code ThreadSanitizer cannot see (an uninstrumented library), so two
// ranks making their first convolution at once read to it as a race. Making happens once per
// shape per thread, so a warm step never takes this lock.
inline std::mutex& OneDnnMakeMutex() {
  static std::mutex mutex;
  return mutex;
}

template <typename Key, typename Value>
struct OneDnnThreadCache {
  dnnl::stream stream{OneDnnEngine()};
  absl::flat_hash_map<Key, std::unique_ptr<Value>> primitives;

  // The entry for `key`, made by make() on first use. A job with many shapes (variable-length
  // batches) would grow the cache without bound: at `limit` entries it starts over.
  template <typename Make>
  Value* FindOrMake(const Key& key, size_t limit, Make make) {
    if (primitives.size() >= limit && !primitives.contains(key)) primitives.clear();
    auto [it, inserted] = primitives.try_emplace(key);
    if (inserted) {
      std::lock_guard<std::mutex> lock(OneDnnMakeMutex());
      it->second = make();
    }
    return it->second.get();
  }
};

}  // namespace ddpkit::blas
