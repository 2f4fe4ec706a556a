#!/usr/bin/env bash
# Keeps the README's reading path honest: the core files a learner reads to understand DDP are
# listed in README.md between the markers <!-- reading-path --> and <!-- /reading-path -->, each
# as a `path` in backticks. This prints their line count, and fails when a listed file is missing,
# when the total is over the budget below (the core must stay small), or when the total the README
# states ("N lines in all") is more than 10% off the real one.
#   tools/scripts/reading_path.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
budget=4000  # lines; raise it only with a reason in the commit that does

section="$(sed -n '/<!-- reading-path -->/,/<!-- \/reading-path -->/p' "$root/README.md")"
if [ -z "$section" ]; then
  echo "reading path: README.md has no <!-- reading-path --> section" >&2
  exit 1
fi
mapfile -t files < <(grep -o '`[a-z_/]*\.\(h\|cc\)`' <<<"$section" | tr -d '`' | sort -u)
total=0
for file in "${files[@]}"; do
  if [ ! -f "$root/$file" ]; then
    echo "reading path: README.md lists $file, which does not exist; fix the list" >&2
    exit 1
  fi
  total=$((total + $(wc -l <"$root/$file")))
done
stated="$(grep -o '[0-9,]* lines in all' <<<"$section" | head -1 | tr -d ', ' | sed 's/linesinall//')"
echo "reading path: ${#files[@]} files, $total lines (budget $budget; the README says ${stated:-nothing})"
if [ "$total" -gt "$budget" ]; then
  echo "reading path: $total lines is over the budget of $budget: move what is not core out of it" >&2
  exit 1
fi
if [ -z "$stated" ] || [ $((10 * (total > stated ? total - stated : stated - total))) -gt "$stated" ]; then
  echo "reading path: the README's figure (${stated:-none}) is more than 10% off $total; update it" >&2
  exit 1
fi
