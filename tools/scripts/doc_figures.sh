#!/usr/bin/env bash
# Redraws the docs' CPU figures from the commands the docs give for them, so none can go stale,
# and prints what the walkthrough in docs/inspect.md ("One iteration, along the picture") reads
# off the run: rank 0's and rank 1's events in iteration 3, in ms from the iteration's start.
#   tools/scripts/doc_figures.sh [BUILD_DIR]     (default: build)
# Timings are this machine's: after a redraw, update the walkthrough's figures from the listing.
# Each picture is then checked by looking at it (rsvg-convert -w 1400 X.svg -o X.png).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
ddpkit="$(cd "${1:-$root/build}" && pwd)/bin/ddpkit"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# docs/timeline.svg: docs/inspect.md, section 1's commands.
"$ddpkit" train --world-size 2 --model mlp:512,1024,1024,1024,10 --batch-size 64 \
  --bucket-cap-mb-list 0.5,2 --steps 6 --trace t.json > train.txt
"$ddpkit" trace svg t.json --out "$root/docs/timeline.svg" --iterations 3:5
grep -A4 "buckets rebuilt" train.txt
"$ddpkit" trace stats t.json | sed -n '3,4p;10,11p'
python3 - t.json <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
events = [e for e in trace["traceEvents"] if e.get("ph") != "M"]
for rank in (0, 1):
    mine = sorted((e for e in events if e.get("pid") == rank), key=lambda e: e["ts"])
    starts = [e["ts"] for e in mine if e["name"] == "forward"]
    begin, end = starts[3], starts[4] if len(starts) > 4 else float("inf")
    print(f"rank {rank}, iteration 3 (ms from its forward's start; duration)")
    for e in mine:
        if begin <= e["ts"] < end:
            print(f"  {(e['ts'] - begin) / 1000:6.2f}  {e['name']:22s} {e.get('dur', 0) / 1000:6.2f}")
PY
