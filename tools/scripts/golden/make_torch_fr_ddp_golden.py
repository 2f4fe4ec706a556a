"""A real PyTorch DDP job that hangs on uneven inputs: its flight-recorder dumps and its plan
file, for `ddpkit fr analyze DIR --plan FILE`.

    /work/venv-torch2/bin/python tools/scripts/golden/make_torch_fr_ddp_golden.py \
        tests/testdata/torch_fr_ddp

(PyTorch 2.8 or later: its gloo process groups record into the flight recorder.)

The job: three gloo ranks train model() below under DistributedDataParallel with
bucket_cap_mb=0.004 (two buckets: [4.bias, 4.weight, 2.bias, 2.weight] of 1188 elements, then
[0.bias, 0.weight] of 544 before the rebuild), SGD, no Join. Rank 2 has 3 batches, ranks 0 and 1
have 5: after iteration 2 rank 2 leaves its loop, the others start iteration 3 and wait in its
first bucket's allreduce until gloo's 2 s timeout. Every rank then dumps, in both forms, into
DIR/torch-<release>/uneven/{json,pickle}/fr_rank_<r>[.json]; DIR/torch-<release>/uneven/plan.json
is export_ddp_plan.py's plan file of the same model and cap (the buckets PyTorch's DDP logged).
"""
import datetime
import os
import subprocess
import sys
import tempfile
import time

WORLD, TIMEOUT_S, BATCH = 3, 2, 8
BATCHES = (5, 5, 3)
CAP_MB = 0.004
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_torch_fr_golden import write_dumps  # noqa: E402 (this folder, on the path above)


def model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 4))


def release(torch):
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def worker(rank, out_dir, init):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    store = dist.FileStore(init, WORLD)
    store.set("ready_%d" % rank, "1")
    store.wait(["ready_%d" % r for r in range(WORLD)], datetime.timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    ddp = DistributedDataParallel(model(), bucket_cap_mb=CAP_MB)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    try:
        for _ in range(BATCHES[rank]):
            x = torch.randn(BATCH, 16, generator=gen)
            y = torch.randint(0, 4, (BATCH,), generator=gen)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        if BATCHES[rank] < max(BATCHES):
            time.sleep(TIMEOUT_S + 3)  # out of batches, still alive: the peers time out
    except RuntimeError as e:
        print("rank %d: %s" % (rank, str(e).splitlines()[0]), file=sys.stderr)
    time.sleep(1)
    write_dumps(torch, out_dir, rank, None)  # make_torch_fr_golden.py's: both forms
    sys.stdout.flush()
    os._exit(0)  # no destroy: the peers' groups are broken


def main(out_root):
    import torch
    import torch.multiprocessing as mp
    if not hasattr(torch._C._distributed_c10d, "_dump_fr_trace"):
        sys.exit("make_torch_fr_ddp_golden: PyTorch %s's gloo does not record; use 2.8 or later"
                 % torch.__version__)
    os.environ["TORCH_FR_BUFFER_SIZE"] = "256"  # read when the recorder starts
    out_dir = os.path.join(out_root, "torch-" + release(torch), "uneven")
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(worker, args=(out_dir, os.path.join(tmp, "init")), nprocs=WORLD,
                           start_method="spawn")
    env = dict(os.environ, PYTHONPATH=HERE)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "export_ddp_plan.py"),
                    "make_torch_fr_ddp_golden:model", "--input-shape", "%d,16" % BATCH,
                    "--bucket-cap-mb", str(CAP_MB), "--out", os.path.join(out_dir, "plan.json")],
                   env=env, check=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
