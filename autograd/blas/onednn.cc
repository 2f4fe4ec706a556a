// oneDNN's matmul primitive for float32 GEMMs. Making a primitive costs 0.1–4 ms (it chooses and
// JIT-compiles kernels for the shape), so each thread keeps the primitives it made, keyed by
// everything the choice depends on; a steady-state call only points the kept memory objects at
// the operands and executes, through the C API so nothing is allocated per call.
#include <omp.h>

#include <dnnl.hpp>
#include <memory>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "autograd/blas/backends.h"
#include "autograd/blas/onednn_cache.h"
#include "autograd/compute_threads.h"

namespace ddpkit::blas {
namespace {

constexpr size_t kMaxPrimitives = 256;  // per thread

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, bool, bool, bool, int>;

struct Primitive {
  dnnl::matmul matmul;  // empty when oneDNN has no kernel for this key
  dnnl::memory src, weights, bias, dst;
  dnnl::memory scratchpad;  // ours, made with the primitive, so executions allocate nothing
};

const dnnl::engine& Engine() { return OneDnnEngine(); }

// op(X) of a row-major matrix stored with `ld` elements per row, as a rows x cols view.
dnnl::memory::desc View(int64_t rows, int64_t cols, bool transposed, int64_t ld) {
  const dnnl::memory::dims strides =
      transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, dnnl::memory::data_type::f32, strides);
}

std::unique_ptr<Primitive> Make(const GemmArgs& g, bool accumulate) {
  auto p = std::make_unique<Primitive>();
  const auto src = View(g.m, g.k, g.transpose_a, g.transpose_a ? g.m : g.k);
  const auto weights = View(g.k, g.n, g.transpose_b, g.transpose_b ? g.k : g.n);
  const auto dst = View(g.m, g.n, false, g.n);
  const auto bias = g.bias != nullptr ? View(1, g.n, false, g.n) : dnnl::memory::desc();
  dnnl::post_ops ops;
  if (accumulate) ops.append_sum(1.0f);
  if (g.relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, bias, dst), attr,
                                          Engine());
    p->matmul = dnnl::matmul(pd);
    p->scratchpad = dnnl::memory(pd.scratchpad_desc(), Engine());
  } catch (const dnnl::error&) {
    return p;  // no kernel for this call: the caller uses OpenBLAS
  }
  p->src = dnnl::memory(src, Engine(), DNNL_MEMORY_NONE);
  p->weights = dnnl::memory(weights, Engine(), DNNL_MEMORY_NONE);
  p->dst = dnnl::memory(dst, Engine(), DNNL_MEMORY_NONE);
  if (g.bias != nullptr) p->bias = dnnl::memory(bias, Engine(), DNNL_MEMORY_NONE);
  return p;
}

using ThreadCache = OneDnnThreadCache<Key, Primitive>;

ThreadCache& Cache() {
  thread_local ThreadCache cache;
  return cache;
}

}  // namespace

bool OneDnnGemm(const GemmArgs& g, bool accumulate) {
  // oneDNN's OpenMP threads are per calling thread: give this one its share of the budget. A
  // primitive plans its work for the thread count it was made with, so the count is in the key.
  const int threads = ComputeThreads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  ThreadCache& cache = Cache();
  const Key key{g.transpose_a,     g.transpose_b, g.m,        g.n,    g.k,
                g.bias != nullptr, g.relu,        accumulate, threads};
  Primitive& p = *cache.FindOrMake(key, kMaxPrimitives, [&] { return Make(g, accumulate); });
  if (!p.matmul) return false;
  p.src.set_data_handle(const_cast<void*>(g.a));
  p.weights.set_data_handle(const_cast<void*>(g.b));
  p.dst.set_data_handle(g.c);
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p.src.get()},
                             {DNNL_ARG_WEIGHTS, p.weights.get()},
                             {DNNL_ARG_DST, p.dst.get()},
                             {DNNL_ARG_SCRATCHPAD, p.scratchpad.get()},
                             {DNNL_ARG_BIAS, nullptr}};
  int nargs = 4;
  if (g.bias != nullptr) {
    p.bias.set_data_handle(const_cast<void*>(g.bias));
    args[nargs++].memory = p.bias.get();
  }
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.matmul.get(), cache.stream.get(), nargs, args),
                          "oneDNN matmul failed");
  return true;
}

}  // namespace ddpkit::blas
