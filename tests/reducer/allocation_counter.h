// Counts the allocations each thread makes, by replacing the global operator new. Include it in
// exactly one file of a test binary (it defines operator new and delete).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <new>

namespace ddpkit::testing_util {
inline thread_local int64_t allocations_on_this_thread = 0;
}  // namespace ddpkit::testing_util

void* operator new(std::size_t size) {
  ++ddpkit::testing_util::allocations_on_this_thread;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
