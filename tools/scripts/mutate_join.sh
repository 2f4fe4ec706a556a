#!/usr/bin/env bash
# Mutation check of the Join tests (a developer tool, not part of CI; see docs/join.md).
#
# For each mutation below: break the Join machinery in the source (one sed script on a clean
# tree), rebuild join_test and reducer_test, run the Join tests, restore the file, and record
# which tests failed. A mutation no test catches is a hole in the tests.
#
#   tools/scripts/mutate_join.sh [--list] [--build-dir DIR] [NAME...]
#
# Every build and test run takes /tmp/ddpkit-build.lock. Refuses to run on a dirty tree: the
# restore is `git checkout` of the mutated file.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"
BUILD_DIR=build
LOCK=/tmp/ddpkit-build.lock
TESTS_LABEL='^(join|reducer)$'
TESTS_REGEX='Join|Uneven|ThrowMode'

# name ~ file ~ sed script ~ what it models
MUTATIONS=(
  "no-shadow-backward~reducer/distributed_data_parallel.cc~s/if (plan & D::kSync) ddp_/if (false) ddp_/~the joined rank stops shadowing the bucket allreduces"
  "stale-shadow-grads~reducer/reducer.cc~/void Reducer::ShadowBackward/,/^}/{/buckets_\[b\].gradients.Zero();/d}~the joined rank allreduces its last gradients instead of zeros"
  "shadow-drops-results~reducer/reducer.cc~/void Reducer::ShadowBackward/,/^}/{/FinalizeBucket(buckets_\[b\]);/d}~the joined rank drops the shadowed results (PyTorch's hook), leaving its .grad stale"
  "stale-shadow-used-map~reducer/reducer.cc~/void Reducer::ShadowBackward/,/^}/{/local_used_map_.Zero();/d}~the joined rank sends its last used-parameter map instead of an empty one"
  "no-shadow-static-first~reducer/distributed_data_parallel.cc~s/ShadowBackward((plan \& D::kStaticFirst) != 0)/ShadowBackward(false)/~the joined rank ignores static graph's first iteration (its used-map and hook-count allreduces)"
  "shadow-keeps-own-hook-counts~reducer/reducer.cc~/void Reducer::ShadowBackward/,/^}/s|/\*adopt=\*/true)|/*adopt=*/false)|~a joined rank that shadowed static graph's first iteration keeps its own (empty) hook counts instead of adopting the recorded graph"
  "no-shadow-rebuild~reducer/distributed_data_parallel.cc~s/if (plan & D::kRebuild) ddp_/if (false) ddp_/~the joined rank skips a bucket rebuild still pending"
  "divide-ignores-active~reducer/reducer.cc~s/if (!join_count_work_ || divide_by_initial_world_size_) return/if (true) return/~divide_by_initial_world_size=false still divides by the world size"
  "divide-ignores-initial~reducer/reducer.cc~s/if (!join_count_work_ || divide_by_initial_world_size_) return/if (!join_count_work_) return/~divide_by_initial_world_size=true (PyTorch's default) divides by the active ranks"
  "buffers-from-rank0~reducer/distributed_data_parallel.cc~s/static_cast<int>(plan >> \(D::\)\{0,1\}kRankShift)/0/~buffers broadcast from rank 0 (maybe joined, stale) instead of the highest active rank"
  "no-final-sync~reducer/distributed_data_parallel.cc~s/\(const int authoritative = static_cast<int>(rank.data<int64_t>()\[0\]);\)/\1 ddp_.authoritative_rank_ = authoritative; return;/~the post hook skips the final model broadcast"
  "final-sync-no-buffers~reducer/distributed_data_parallel.cc~/for (auto\& b : ddp_.module_->NamedBuffers()) state.push_back(b);/d~the final model broadcast leaves the buffers out"
  "last-joiner-always~join/join.cc~/is_last_joiner = false;/d~every rank reports itself a last joiner (the authoritative rank becomes the highest rank)"
  "count-off-by-one~join/join.cc~s/if (active == 0) break;/if (active <= 1) break;/~joined ranks stop shadowing while one rank is still active"
  "throw-never~join/join.cc~s/if (config.throw_on_early_termination &&/if (false \&\&/;s/if (options.throw_on_early_termination) {/if (false) {/~throw_on_early_termination never throws (plain Join)"
  "throw-check-off-by-one~join/join.cc~/checking whether a rank exhausted its inputs\") >/{n;s/0) {/1) {/}~throw mode: active ranks throw only once two ranks have run out"
  "disabled-join-counts~join/join.cc~s/if (!config.enable || !config.is_first_joinable)/if (!config.is_first_joinable)/~enable=false: active ranks still issue the count allreduce"
  "disabled-join-runs-protocol~join/join.cc~/if (!options.enable) return;/d~enable=false: the join protocol and post hooks still run"
)

die() { echo "mutate_join.sh: $*" >&2; exit 2; }
field() { cut -d'~' -f"$2" <<<"$1"; }

list() {
  for m in "${MUTATIONS[@]}"; do printf '%-28s %s\n' "$(field "$m" 1)" "$(field "$m" 4)"; done
}

# Runs "$@" under the build lock, unless the caller already holds it (DDPKIT_LOCK_HELD=1).
locked() {
  if [[ ${DDPKIT_LOCK_HELD:-0} == 1 ]]; then "$@"; else flock "$LOCK" "$@"; fi
}

# Builds the two test binaries and runs the Join tests (one lock hold); prints
# "FAILED/TOTAL name, name, ...".
build_and_test() {
  locked bash -c "cmake --build '$BUILD_DIR' --parallel 2 --target join_test reducer_test \
      >/tmp/mutate_join.build.log 2>&1 && ctest --test-dir '$BUILD_DIR' -L '$TESTS_LABEL' \
      -R '$TESTS_REGEX' --parallel 2 --timeout 120 >/tmp/mutate_join.ctest.log 2>&1" || true
  if grep -q 'FAILED: \|error:' /tmp/mutate_join.build.log; then
    echo "build-failed"
    return
  fi
  local out total names
  out=$(cat /tmp/mutate_join.ctest.log)
  total=$(grep -oE 'tests failed out of [0-9]+' <<<"$out" | grep -oE '[0-9]+$' || echo '?')
  # The failed list: "  12 - Prefix/Suite.Name/3  # GetParam() = ... (Failed)"; the instances
  # of one parameterized test are counted as one name, "(xN)".
  names=$(grep -E '^[[:space:]]+[0-9]+ - ' <<<"$out" |
          sed -E 's/^[[:space:]]+[0-9]+ - ([^ /]+\/)?([A-Za-z0-9_]+\.[A-Za-z0-9_]+).*/\2/' || true)
  local count
  count=$(grep -c . <<<"$names" || true)
  echo "$count/$total $(sort <<<"$names" | uniq -c |
      awk 'NF { printf "%s%s%s", sep, $2, ($1 > 1 ? " (x" $1 ")" : ""); sep = ", " }')"
}

# Applies mutation $1, checks it changed the file, tests, restores; prints one table row.
run_mutation() {
  local name=$1 file=$2 script=$3 what=$4
  sed -i "$script" "$file"
  # shellcheck disable=SC2064  # expanded now: $file is local, gone when the trap fires
  trap "git checkout -- '$file'" EXIT
  if git diff --quiet -- "$file"; then
    git checkout -- "$file"
    die "mutation $name no longer applies to $file (the source changed; update the sed script)"
  fi
  local result
  result=$(build_and_test)
  git checkout -- "$file"
  trap - EXIT
  echo "| \`$name\` | $what | ${result%% *} | ${result#* } |"
}

main() {
  local names=()
  while (($#)); do
    case $1 in
      --list) list; exit 0 ;;
      --build-dir) BUILD_DIR=$2; shift ;;
      -*) die "unknown option $1" ;;
      *) names+=("$1") ;;
    esac
    shift
  done
  local n
  for n in "${names[@]}"; do
    [[ $(list) == *$'\n'"$n "* || $(list) == "$n "* ]] || die "no mutation named $n (see --list)"
  done
  [[ -z $(git status --porcelain --untracked-files=no) ]] || die "the tree is dirty; commit or stash first"
  [[ -d $BUILD_DIR ]] || die "no build dir $BUILD_DIR (configure one first)"
  local baseline
  baseline=$(build_and_test)
  echo "baseline (no mutation): $baseline"
  [[ $baseline == 0/[0-9]* ]] || die "the Join tests fail without a mutation"

  echo "| mutation | what it models | failed/total | tests that failed |"
  echo "| --- | --- | --- | --- |"
  local m
  for m in "${MUTATIONS[@]}"; do
    local name
    name=$(field "$m" 1)
    if ((${#names[@]})) && [[ ! " ${names[*]} " == *" $name "* ]]; then continue; fi
    run_mutation "$name" "$(field "$m" 2)" "$(field "$m" 3)" "$(field "$m" 4)"
  done
  build_and_test >/dev/null  # leave the build dir matching the clean tree
}

main "$@"
