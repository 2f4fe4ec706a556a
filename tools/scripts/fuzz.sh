#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/) with clang into build-fuzz/ and runs each for
# SECONDS (default 30) on a copy of its seed corpus (tests/fuzz/corpus/<name>/), one per core.
# Fails on any finding (crash, sanitizer report, leak, timeout, out-of-memory), leaving the
# input that caused it in build-fuzz/findings/. Prints, per harness: executions, exec/s, corpus
# size (seeds -> after), findings.
#   tools/scripts/fuzz.sh [SECONDS]
# Reproduce a finding: build-fuzz/bin/<name>_fuzz build-fuzz/findings/<name>-crash-...
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
seconds="${1:-30}"
build_dir="$root/build-fuzz"
harnesses=(safetensors store_frame checkpoint_manifest checkpoint_state model_spec flags plan_file torch_profiler torch_fr
           ddpkit_trace)

bash "$root/tools/scripts/setup_deps.sh"
CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -G Ninja -DDDPKIT_FUZZ=ON \
  -DDDPKIT_BUILD_TESTS=OFF -DDDPKIT_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDDPKIT_DEBUG_INFO=LINES >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)" --target "${harnesses[@]/%/_fuzz}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$build_dir/findings"

# Runs one harness on a copy of its seeds; leaves its table row in $work/NAME.row and, on a
# finding, the end of its log in $work/NAME.failed.
fuzz_one() {
  local name="$1" corpus="$work/$1" log="$work/$1.log" status=0
  cp -r "$root/tests/fuzz/corpus/$name" "$corpus"
  local seeds; seeds="$(find "$corpus" -type f | wc -l)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build_dir/bin/${name}_fuzz" "$corpus" -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build_dir/findings/$name-" \
    >"$log" 2>&1 || status=$?
  local execs speed findings
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  findings="$(grep -cE '^==[0-9]+==ERROR|runtime error:|^SUMMARY: libFuzzer' "$log" || true)"
  ((status == 0)) || findings=$((findings > 0 ? findings : 1))
  printf '%-20s %12s %10s %16s %9s\n' "$name" "${execs:-?}" "${speed:-?}" \
    "$seeds -> $(find "$corpus" -type f | wc -l)" "$findings" >"$work/$name.row"
  if ((status != 0)); then
    { echo "---- $name: the fuzzer failed (exit $status); the end of its log:"; tail -40 "$log"; } \
      >"$work/$name.failed"
  fi
}

# One harness per core: each is single-threaded, and their time is most of this step's.
for name in "${harnesses[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  fuzz_one "$name" &
done
wait
failed=()
printf '%-20s %12s %10s %16s %9s\n' harness executions exec/s corpus findings
for name in "${harnesses[@]}"; do
  cat "$work/$name.row"
  if [ -f "$work/$name.failed" ]; then
    failed+=("$name")
    cat "$work/$name.failed" >&2
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in: ${failed[*]} (inputs in $build_dir/findings/)" >&2
  exit 1
fi
echo "fuzz: ${#harnesses[@]} harnesses, ${seconds} s each, $(nproc) at a time, no findings"
