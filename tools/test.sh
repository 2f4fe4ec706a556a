#!/usr/bin/env bash
# Builds ddpkit and runs the whole test suite; exits non-zero on any failure.
#   0. the format check: every C++ file as clang-format writes it (tools/scripts/check_format.sh),
#      every #include in the stated layer order (check_layers.py, layers.txt), every file and
#      function docs/architecture.md's concept table names still there
#      (check_architecture_table.py), and the README's reading path within its line budget
#      (tools/scripts/reading_path.sh);
#   1. the normal build (with CUDA, cuDNN and NCCL when /usr/local/cuda or CUDA_HOME has them),
#      all tests; the GPU tests (label gpu) skip with one line each on a machine without a GPU,
#      and the network-namespace tests (label netns: test hosts, faults on the wire) without root;
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build, all tests but the wire-fault trials
#      (host code only: ASan's shadow memory and the CUDA driver's address reservations do not
#      mix, and the GPU code is compiled by the normal build; NetnsChaosTest's trials run jobs for
#      tens of seconds that ASan makes three times longer, through code the other tests cover);
#   3. a ThreadSanitizer build of only the threaded tests (labels comm, join, reducer: the
#      tests_<label> targets of tests/CMakeLists.txt) and those tests; not gloo, because Debian's
#      libgloo is not TSan-instrumented and its own threads would be misreported (what the
#      tests reach of two other uninstrumented libraries, oneDNN's primitive cache and
#      absl::Status's reference count, is suppressed: tools/scripts/tsan_suppressions.txt);
#   4. the fuzzers: the parsers of untrusted bytes under libFuzzer, 15 s each, one per core
#      (tools/scripts/fuzz.sh; a clang build of only what they need, in build-fuzz/).
# The test builds keep line tables only (a backtrace's file:line, at a fraction of full debug
# information's build time), precompile GoogleTest's headers and compile the larger test
# binaries in batches of 16 files (DDPKIT_TEST_UNITY). The plain and ASan builds also precompile
# the libraries' common headers (DDPKIT_LIB_PCH): with the batches, the ASan build went from
# 888 s to 660 s on 2 cores. The TSan build compiles each library file on its own, so that one
# missing an #include still fails to compile there (and in build-fuzz/).
# Skip 2 and 3 with DDPKIT_SKIP_SANITIZERS=1, and 4 with DDPKIT_SKIP_FUZZ=1, for a quick local run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="$(nproc)"

started=$SECONDS
phase() { echo "== ddpkit: $1 (at $((SECONDS - started)) s)"; }

phase "format check"
bash "$root/tools/scripts/setup_deps.sh"
bash "$root/tools/scripts/check_format.sh"
python3 "$root/tools/scripts/check_layers.py"
python3 "$root/tools/scripts/check_architecture_table.py"
bash "$root/tools/scripts/reading_path.sh"

phase "build and test (build/)"
bash "$root/tools/scripts/build.sh" "$root/build" -DDDPKIT_CUDA="${DDPKIT_CUDA:-AUTO}" \
  -DDDPKIT_BUILD_TESTS=ON -DDDPKIT_BUILD_BENCHMARKS=ON -DDDPKIT_DEBUG_INFO=LINES -DDDPKIT_TEST_PCH=ON \
  -DDDPKIT_LIB_PCH=ON -DDDPKIT_TEST_UNITY=ON
ctest --test-dir "$root/build" --output-on-failure --parallel "$jobs"

if [ "${DDPKIT_SKIP_SANITIZERS:-0}" != 1 ]; then
  phase "build and test under ASan+UBSan (build-asan/)"
  bash "$root/tools/scripts/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug \
    "-DDDPKIT_SANITIZE=address;undefined" -DDDPKIT_BUILD_BENCHMARKS=OFF -DDDPKIT_CUDA=OFF \
    -DDDPKIT_DEBUG_INFO=LINES -DDDPKIT_TEST_PCH=ON -DDDPKIT_LIB_PCH=ON -DDDPKIT_TEST_UNITY=ON
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" -E '^NetnsChaosTest[.]' --output-on-failure --parallel "$jobs"
fi

if [ "${DDPKIT_SKIP_SANITIZERS:-0}" != 1 ]; then
  phase "build and test under TSan (build-tsan/, threaded tests)"
  DDPKIT_TARGETS="tests_comm tests_join tests_reducer" \
    bash "$root/tools/scripts/build.sh" "$root/build-tsan" -DCMAKE_BUILD_TYPE=Debug \
    -DDDPKIT_SANITIZE=thread -DDDPKIT_BUILD_BENCHMARKS=OFF -DDDPKIT_CUDA=OFF \
    -DDDPKIT_DEBUG_INFO=LINES -DDDPKIT_TEST_PCH=ON -DDDPKIT_TEST_UNITY=ON
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tools/scripts/tsan_suppressions.txt" \
    ctest --test-dir "$root/build-tsan" -L 'comm|join|reducer' --output-on-failure --parallel "$jobs"
fi

if [ "${DDPKIT_SKIP_FUZZ:-0}" != 1 ]; then
  phase "fuzz the parsers (build-fuzz/, 15 s per harness)"
  bash "$root/tools/scripts/fuzz.sh" 15
fi
phase "done"
