"""Real PyTorch flight-recorder dumps of two broken gloo jobs, for `ddpkit fr analyze` tests.

Needs a PyTorch whose ProcessGroupGloo records into the flight recorder (2.x; 2.15 made these):
    python3 -m venv /work/venv-torch2 && /work/venv-torch2/bin/pip install torch
    /work/venv-torch2/bin/python tools/scripts/golden/make_torch_fr_golden.py tests/testdata/torch_fr

Three ranks run a small DDP-like loop (a gradient allreduce, float32[1234], and a loss
allreduce, float32[1]) with a 2 s collective timeout.
  missing/:  rank 2 leaves the loop after 3 of 5 steps (uneven inputs); ranks 0 and 1 time out
             in step 4's gradient allreduce.
  mismatch/: in step 3 rank 1 allreduces int32[1234] where the others send float32[1234]
             (the same bytes: gloo runs it and the job goes on, silently wrong).
Each rank writes the JSON form (torch._C._distributed_c10d._dump_fr_trace_json) to
DIR/<case>/fr_rank_<r>.json; a rank that timed out writes it after the error, the stopped rank
after its peers have timed out. Rank 0 of `missing` also writes the pickle form
(_dump_fr_trace, what PyTorch's dump files hold) to DIR/pickle/fr_rank_0, which ddpkit refuses
with the command that converts it. Gloo records no start or completion times: every entry
stays "scheduled" (TORCH_FR_DUMP_ON_TIMEOUT writes nothing for gloo in 2.15).
"""
import datetime
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

WORLD, STEPS, TIMEOUT_S = 3, 5, 2


def step(i, rank, case):
    # Gloo aborts the process on a size mismatch, so the broken rank sends the same bytes as int32.
    odd = case == "mismatch" and rank == 1 and i == 2
    dist.all_reduce(torch.ones(1234, dtype=torch.int32 if odd else torch.float32))
    dist.all_reduce(torch.ones(1))


def dump(out_dir, rank, case):
    if case == "missing" and rank == 0:  # PyTorch's default (pickle) form, for the refusal test
        os.makedirs(os.path.join(out_dir, "..", "pickle"), exist_ok=True)
        with open(os.path.join(out_dir, "..", "pickle", "fr_rank_0"), "wb") as f:
            f.write(_dump_fr_trace(True, False))
    text = _dump_fr_trace_json(True, False)
    with open(os.path.join(out_dir, "fr_rank_%d.json" % rank), "w") as f:
        json.dump(json.loads(text), f, indent=1, sort_keys=True)
        f.write("\n")


def worker(rank, case, out_dir, init):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        for i in range(STEPS):
            if case == "missing" and rank == 2 and i == 3:
                time.sleep(TIMEOUT_S + 2)  # stopped: its peers time out waiting for it
                break
            step(i, rank, case)
    except RuntimeError as e:
        print("rank %d: %s" % (rank, str(e).splitlines()[0]), file=sys.stderr)
    dump(out_dir, rank, case)
    sys.stdout.flush()
    os._exit(0)  # no destroy: the peers' groups are broken


def main(out_root):
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "64")
    for case in ("missing", "mismatch"):
        out_dir = os.path.join(out_root, case)
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(worker, args=(case, out_dir, os.path.join(tmp, "init")),
                               nprocs=WORLD, start_method="spawn")


if __name__ == "__main__":
    main(sys.argv[1])
