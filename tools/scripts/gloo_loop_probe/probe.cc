// A plain Gloo program (no ddpkit) that shows why Gloo's loop thread should not preempt:
// one rank of a 2-rank ring allreduce, timed three ways —
//   caller   the allreduce runs on the main thread (Gloo as its own benchmarks drive it);
//   handoff  the main thread hands each call to a worker over a condition variable and sleeps
//            until it is done (the shape of ddpkit's communication thread);
// and its device's loop thread either as Gloo makes it or under SCHED_BATCH (POLICY=batch).
// Run by probe.sh, which builds it and interleaves the variants.
//
// usage: probe RANK STORE_DIR MODE(caller|handoff) POLICY(gloo|batch) BYTES ITERS
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sched.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The device, its loop thread started under SCHED_BATCH when asked (threads inherit it).
std::shared_ptr<gloo::transport::Device> MakeDevice(bool batch) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  sched_param zero{};
  if (batch) sched_setscheduler(0, SCHED_BATCH, &zero);
  auto device = gloo::transport::tcp::CreateDevice(attr);
  if (batch) sched_setscheduler(0, SCHED_OTHER, &zero);
  return device;
}

// Runs `call` once per request from the main thread, on its own thread.
class Worker {
 public:
  explicit Worker(std::function<void()> call)
      : call_(std::move(call)), thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void RunOnce() {
    std::unique_lock<std::mutex> lock(mu_);
    state_ = 1;
    cv_.notify_all();
    cv_.wait(lock, [this] { return state_ == 2; });
    state_ = 0;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return state_ == 1 || stop_; });
      if (stop_) return;
      lock.unlock();
      call_();
      lock.lock();
      state_ = 2;
      cv_.notify_all();
    }
  }
  std::function<void()> call_;
  std::mutex mu_;
  std::condition_variable cv_;
  int state_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: probe RANK STORE_DIR caller|handoff gloo|batch BYTES ITERS\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const bool handoff = std::string(argv[3]) == "handoff";
  const bool batch = std::string(argv[4]) == "batch";
  const size_t count = std::strtoull(argv[5], nullptr, 10) / sizeof(float);
  const int iters = std::atoi(argv[6]);
  gloo::rendezvous::FileStore store(argv[2]);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
  std::shared_ptr<gloo::transport::Device> device = MakeDevice(batch);
  context->connectFullMesh(store, device);
  std::vector<float> data(count, 1.0f);
  uint32_t tag = 0;
  auto allreduce = [&] {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(data.data(), count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag++);
    opts.setTimeout(std::chrono::seconds(60));
    gloo::allreduce(opts);
  };
  for (int i = 0; i < 20; ++i) allreduce();  // warm-up: connections, buffers
  Worker worker(allreduce);
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) handoff ? worker.RunOnce() : allreduce();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (rank == 0) std::printf("%.1f\n", us / iters);
  return 0;
}
