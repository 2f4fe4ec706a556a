// Grad mode: whether ops record history. Per thread, so each rank thread of an in-process
// world has its own.
#pragma once

namespace ddpkit {

class GradMode {
 public:
  static bool IsEnabled();
  static void SetEnabled(bool enabled);
};

// RAII: sets grad mode for a scope and restores the previous value.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(GradMode::IsEnabled()) {
    GradMode::SetEnabled(enabled);
  }
  ~GradModeGuard() { GradMode::SetEnabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// No graph is built inside this scope (evaluation, optimizer steps, backward formulas).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace ddpkit
