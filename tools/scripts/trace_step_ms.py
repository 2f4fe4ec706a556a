"""The measured DDP step of a ddpkit trace, in milliseconds, as `simulate` predicts it.

Per synced iteration and rank: from its first forward's start to its finalize's end (the
optimizer left out), divided by the iteration's micro-batches (--grad-accum K: K forwards, the
first K-1 under no_sync). The slowest rank's per iteration, median over the iterations after
DDP's rebuild (its first iteration runs the initial plan).

    python3 tools/scripts/trace_step_ms.py TRACE.json      # prints one number
"""
import json
import statistics
import sys
from collections import defaultdict


def step_ms(path):
    events = json.load(open(path))["traceEvents"]
    start, end, forwards, rebuilt = defaultdict(dict), defaultdict(dict), defaultdict(int), set()
    for e in events:
        it = e.get("args", {}).get("iteration")
        if e.get("cat") == "phase" and e["name"] == "forward":
            rank = e["pid"]
            start[it][rank] = min(start[it].get(rank, e["ts"]), e["ts"])
            forwards[it, rank] += 1
        elif e.get("cat") == "phase" and e["name"] == "finalize":
            end[it][e["pid"]] = e["ts"] + e["dur"]
        elif e.get("name") == "rebuild":
            rebuilt.add(it)
    first = min(rebuilt) if rebuilt else 1
    steps = [max((end[i][r] - start[i][r]) / forwards[i, r] for r in end[i]) / 1e3
             for i in start if i >= first + 1 and end[i] and set(end[i]) <= set(start[i])]
    if not steps:
        sys.exit(f"{path}: no synced iteration after DDP's rebuild")
    return statistics.median(steps)


if __name__ == "__main__":
    print(step_ms(sys.argv[1]))
