#!/usr/bin/env bash
# Fails, naming the files, when a tracked C++ file is not as clang-format (.clang-format at the
# repository root) would write it. Fix with:
#   git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format is not installed (tools/scripts/setup_deps.sh installs it)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
else  # a source tree without git: every C++ file outside the build folders
  mapfile -t files < <(find . -path './build*' -prune -o -path './.git' -prune -o -type f \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's#^\./##')
fi
unformatted=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then unformatted+=("$f"); fi
done
if ((${#unformatted[@]})); then
  echo "check_format: ${#unformatted[@]} file(s) not formatted (run clang-format -i on them):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} C++ files formatted"
