#!/usr/bin/env bash
# Redraws every CPU figure in docs/ from the command its doc gives for it, so none can go stale
# (about two minutes on 2 cores), and prints what the walkthrough in docs/inspect.md ("One
# iteration, along the picture") reads off its run: rank 0's and rank 1's events in iteration
# 3, in ms from the iteration's start.
#   tools/scripts/doc_figures.sh [BUILD_DIR]     (default: build)
# Timings are this machine's: after a redraw, update the walkthrough's figures from the listing
# and the numbers the docs quote beside each picture. Each picture is then checked by looking
# at it (rsvg-convert -w 1400 X.svg -o X.png). Not redrawn here: docs/gpu_timeline.svg needs a
# GPU (tools/scripts/gpu_check.sh draws it into its output folder),
# docs/gpu_bucket_journey.svg is a diagram drawn by hand, not a measurement, and
# docs/simulate_validation.svg is the validation batch's (simulate_validation_all.sh OUT draws
# it as OUT/validation.svg: an hour of measurement, not two minutes).
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

# docs/contrastive.md: the default run, and the ResNet + GPT towers with Adam.
"$ddpkit" contrastive --out contrastive > /dev/null
cp contrastive/curves.svg "$root/docs/contrastive_curves.svg"
"$ddpkit" contrastive --world-size 2 --batch-size 16 --steps 200 --optimizer adam \
  --image-tower resnet:1,1,1,1,width=8,in=1,stem=small \
  --text-tower gpt:layers=1,heads=2,dim=32,ctx=8,vocab=32 --out towers > /dev/null
cp towers/curves.svg "$root/docs/contrastive_towers.svg"

# docs/recompute.md: both fixes' timelines, with 1 MB buckets.
"$ddpkit" recompute --bucket-cap-mb 1 --trace r.json > /dev/null
cp r.svg "$root/docs/recompute_timeline.svg"

# docs/varlen.md: the default run.
"$ddpkit" varlen --out varlen > /dev/null
cp varlen/imbalance.svg "$root/docs/varlen_imbalance.svg"

# docs/models.md: a GPT step on two thread ranks, caps 0.25 then 0.5 MiB.
"$ddpkit" train --world-size 2 --model gpt:layers=4,heads=4,dim=128,ctx=64,vocab=128 \
  --bucket-cap-mb-list 0.25,0.5 --steps 4 --trace g.json > /dev/null
"$ddpkit" trace svg g.json --out "$root/docs/gpt_timeline.svg" --iterations 1:3

# docs/inspect.md: two PyTorch ranks from the committed profiler traces.
"$ddpkit" trace svg "$root/tests/testdata/torch_traces/world2" \
  --torch-plan "$root/tests/testdata/torch_traces/world2/ddp_logging.rank0.json" \
  --iterations 3:6 --out "$root/docs/torch_timeline.svg"

# docs/simulate.md: GPT-2 at 64 ranks.
"$ddpkit" simulate --params "$root/tests/testdata/plans/gpt2_124m.json" --batch-size 8 \
  --compute a100 --network dgx-a100-ib200,gbps=100 --world-size 64 --sweep-caps \
  --svg "$root/docs/simulate_gpt2.svg" > /dev/null

# docs/simulate.md: ResNet-50 on 32 ranks over two round-robin Gloo groups (the paper's setting).
"$ddpkit" simulate --params "$root/tests/testdata/plans/resnet50.json" --batch-size 32 \
  --compute gflops=9000 --network v100-nvlink-ib100,algo=ring,GBps=0.977 --world-size 32 \
  --round-robin-groups 2 --collective-share 0.625 --svg "$root/docs/simulate_round_robin.svg" \
  > /dev/null

# docs/performance.md: the DDP paper's experiments at this machine's scale.
"$ddpkit" bench paper --world-size 2 --out paper > /dev/null 2>&1
cp paper/paper.svg "$root/docs/paper.svg"
echo "redrawn: $(cd "$root" && git status --short docs/*.svg | wc -l) changed docs/*.svg"
