#!/usr/bin/python3
"""Writes tests/testdata/ddp_options/<torch major.minor>.json: what PyTorch's DDP does under the
options and rules that changed between 1.13 and 2.x, observed on real Gloo worlds of 2 or 3
processes on the CPU. ddpkit's tests (tests/reducer/ddp_options_golden_test.cc) run the same
cases and compare; the build and the tests never run this script.

    /work/venv-torch2/bin/python tools/scripts/golden/make_ddp_options_golden.py   # -> 2.15.json
    /usr/bin/python3 tools/scripts/golden/make_ddp_options_golden.py               # -> 1.13.json

The cases (each skipped where the running PyTorch lacks the option):
- division: which arithmetic puts a gradient into its bucket — g * fl(1/W) ("mul") or g / W
  ("div"), which differ in the last bit for W = 3 — under the default path, gradient_as_bucket_view
  (whose .grad is the bucket view from the second iteration on) and 2.13's batched_grad_copy.
  Gradients are exact (loss = sum of p * c, so .grad = c) and only rank 0's are non-zero, so the
  allreduce's sum is exact whatever the order Gloo adds in; the file holds, per iteration and
  parameter, the path seen and a checksum of the averaged gradient's bits.
- hooks and mixed_precision: the same model under the allreduce and fp16 comm hooks (which divide
  before the allreduce, the fp16 one in float16) and 2.1's mixed_precision with float32
  parameters (whose hook sums in reduce_dtype, then divides): at W = 3 with one rank's gradients,
  and at W = 2 with both ranks' large enough that a float16 sum overflows where a divided one
  does not. Mixed precision needs torch.Stream and torch.Event, CUDA-only in the wheel: on the
  CPU they are replaced by no-ops (cpu_streams), which leaves the arithmetic alone.
- skip: 2.8's skip_all_reduce_unused_params on three Linear(10, 10) layers a, b, c, of which b is
  used as the plan says; each iteration's collectives (op and element count, in issue order: Gloo
  with one thread, read from the profiler), the logged num_buckets_reduced (sampled at the next
  forward) and whether b.weight has a gradient.
- static: static_graph with two forwards before the first backward, and with a first step under
  no_sync: whether each backward ran or raised, and the error's first line.
- buffers: a Linear-BatchNorm1d-Linear model whose rank 1 holds other buffer values; whether the
  buffers (and parameters) equal rank 0's after construction, how many collectives construction
  issued, and whether the buffers agree after Join's final sync (rank 0 one input, rank 1 three).
"""
import datetime
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
                       "testdata", "ddp_options")


def release():
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()))


# ------------------------------------------------------------------------------ the world

def _worker(rank, world, case, initfile, queue):
    warnings.filterwarnings("ignore")
    try:
        extra = {}
        if release() >= (2, 0):  # 1.13 refuses Gloo options (its collectives here are few)
            options = dist.ProcessGroupGloo._Options()
            options._threads = 1  # collectives then run, and are profiled, in issue order
            options._devices = [dist.ProcessGroupGloo.create_default_device()]
            extra["pg_options"] = options
        dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60),
                                **extra)
        out = CASES[case][1](rank, world)
        queue.put((rank, out))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # reported, not swallowed: the script fails on it
        queue.put((rank, {"exception": traceback.format_exc()[-2000:]}))


def run(case, world):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fd, initfile = tempfile.mkstemp()
    os.close(fd)
    os.unlink(initfile)
    procs = [ctx.Process(target=_worker, args=(r, world, case, initfile, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=300) for _ in range(world))
    for p in procs:
        p.join(timeout=60)
    for rank, out in results.items():
        if "exception" in out:
            sys.exit(f"case {case}, rank {rank} failed:\n{out['exception']}")
    return results


class Collectives:
    """The Gloo collectives issued inside the block: [op, element count] in issue order."""

    def __enter__(self):
        self.prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        if release() < (2, 0):
            # 1.13 records Gloo's events from its worker threads, and one can land after the
            # step has returned: give them a moment before the profiler stops.
            time.sleep(0.2)
        self.prof.__exit__(*exc)
        events = sorted((e for e in self.prof.events() if e.name.startswith("gloo:")),
                        key=lambda e: e.time_range.start)
        self.ops = []
        for e in events:
            shape = e.input_shapes[0] if e.input_shapes and e.input_shapes[0] else []
            numel = 1
            for extent in shape:
                numel *= extent
            self.ops.append([e.name[len("gloo:"):], numel])
        return False


# ------------------------------------------------------------------------------ division

def constants(numel, salt):
    """Exact float32 values both ddpkit and this script compute the same way."""
    return torch.tensor([((k * 7919 + salt * 104729) % 1000 + 1) / 997.0 for k in range(numel)],
                        dtype=torch.float32)


class Exact(torch.nn.Module):
    """Four parameters whose gradient is exactly c: loss = sum over i of sum(p_i * c_i)."""
    SHAPES = [(64, 64), (64,), (64, 64), (64,)]

    def __init__(self):
        super().__init__()
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(s)) for s in self.SHAPES])
        self.cs = [constants(self.ps[i].numel(), i).view(self.SHAPES[i]) for i in range(4)]

    def forward(self, scale):
        return sum((p * c).sum() for p, c in zip(self.ps, self.cs)) * scale


def cpu_streams():
    """DDP's mixed precision synchronises through torch.Stream and torch.Event, which this wheel
    builds for CUDA only; on a CPU host they are no-ops (the arithmetic is untouched)."""
    class Stream:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait_stream(self, other):
            pass

    class Event:
        def __init__(self, *args, **kwargs):
            pass

        def record(self, *args, **kwargs):
            pass

        def wait(self, *args, **kwargs):
            pass

    torch.Stream, torch.Event = Stream, Event
    torch.accelerator.current_stream = lambda *args, **kwargs: Stream()


def checksum(t):
    """The float32 bit patterns, as unsigned words, summed modulo 2^32."""
    words = t.detach().contiguous().view(torch.int32).to(torch.int64).remainder(1 << 32)
    return int(words.sum()) % (1 << 32)


def division_case(kw, hook=None, scales=None):
    """`scales`: each rank's loss scale (default: 1 on rank 0, 0 elsewhere, so sums are exact)."""
    def case(rank, world):
        torch.manual_seed(0)
        if "mixed_precision" in kw:
            cpu_streams()
        model = Exact()
        ddp = DDP(model, **kw)
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        view = kw.get("gradient_as_bucket_view", False)
        scale = scales[rank] if scales else (1.0 if rank == 0 else 0.0)
        iterations = []
        for _ in range(3):
            for p in model.parameters():
                if view and p.grad is not None:
                    p.grad.zero_()  # in place: .grad stays the bucket view
                else:
                    p.grad = None
            ddp(torch.tensor(scale)).backward()
            kinds = []
            for p, c in zip(model.ps, model.cs):
                mul, div = c * (1.0 / world), c / world
                is_mul, is_div = torch.equal(p.grad, mul), torch.equal(p.grad, div)
                kinds.append({"path": "both" if is_mul and is_div else "mul" if is_mul
                              else "div" if is_div else "neither",
                              "checksum": checksum(p.grad),
                              "infinite": int(torch.isinf(p.grad).sum())})
            iterations.append(kinds)
        return {"iterations": iterations}
    return case


# ------------------------------------------------------------------------------ skip

class Abc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(10, 10)
        self.b = torch.nn.Linear(10, 10)
        self.c = torch.nn.Linear(10, 10)

    def forward(self, x, use_b):
        out = self.a(x)
        if use_b:
            out = out + self.b(x)
        return self.c(out)


PLANS = {"never": lambda rank, i: False, "first": lambda rank, i: i == 0}


def skip_case(kw, plan, iterations=4):
    def case(rank, world):
        torch.manual_seed(0)
        model = Abc()
        ddp = DDP(model, bucket_cap_mb=0.0004, **kw)  # 419 bytes: a bucket per layer
        out = []
        for i in range(iterations):
            torch.manual_seed(10 + i + 100 * rank)
            x = torch.randn(2, 10)
            with Collectives() as seen:
                ddp(x, PLANS[plan](rank, i)).sum().backward()
            log = ddp._get_ddp_logging_data()
            out.append({"collectives": seen.ops,
                        "num_buckets_reduced_logged": log.get("num_buckets_reduced"),
                        "b_has_grad": model.b.weight.grad is not None})
        return {"iterations": out}
    return case


# ------------------------------------------------------------------------------ static graph

def static_case(kind):
    def case(rank, world):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
        ddp = DDP(model, static_graph=True)
        steps = []

        def step(name, fn):
            try:
                with Collectives() as seen:
                    fn()
                steps.append({"step": name, "ok": True, "collectives": seen.ops})
            except RuntimeError as e:
                steps.append({"step": name, "ok": False, "error": str(e).split("\n")[0]})

        x = torch.randn(2, 10)
        if kind == "two_forwards":
            step("two forwards, one backward",
                 lambda: (ddp(x).sum() + ddp(x).sum()).backward())
        else:
            def no_sync_step():
                with ddp.no_sync():
                    ddp(x).sum().backward()
            step("first backward under no_sync", no_sync_step)
        for i in range(2):
            step(f"iteration {i + 2}", lambda: ddp(x).sum().backward())
        return {"steps": steps}
    return case


# ------------------------------------------------------------------------------ buffers

def buffers_case(kw):
    def case(rank, world):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                    torch.nn.Linear(3, 2))
        with torch.no_grad():  # rank-local values, so what construction sends shows
            model[1].running_mean.fill_(float(rank + 1))
            model[0].bias.fill_(float(rank + 1))
        with Collectives() as seen:
            ddp = DDP(model, **kw)
        out = {"construction_collectives": len(seen.ops),
               # on rank 1: whether construction sent rank 0's values
               "buffers_from_rank0_at_construction": model[1].running_mean[0].item() == 1.0,
               "params_from_rank0_at_construction": model[0].bias[0].item() == 1.0,
               "logged_broadcast_buffers": bool(ddp._get_ddp_logging_data()["broadcast_buffers"])}
        with torch.no_grad():  # rank-local again, so Join's final sync shows
            model[1].running_mean.fill_(float(rank + 1))
        with ddp.join():
            for i in range(1 if rank == 0 else 3):
                torch.manual_seed(rank * 10 + i)
                ddp(torch.randn(4, 4)).sum().backward()
        gathered = [torch.zeros(3) for _ in range(world)]
        dist.all_gather(gathered, model[1].running_mean.detach().clone())
        out["buffers_agree_after_join"] = all(torch.equal(g, gathered[0]) for g in gathered)
        return out
    return case


# ------------------------------------------------------------------------------ the cases

def default_hooks():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as hooks
    return hooks


def mixed_precision(reduce_dtype):
    """2.1's option with float32 parameters; None where the running PyTorch has none."""
    if release() < (2, 1):
        return None
    from torch.nn.parallel.distributed import _MixedPrecision
    return _MixedPrecision(param_dtype=torch.float32, reduce_dtype=reduce_dtype)


# Two ranks whose float16 sum passes 65504 where a divided one does not.
OVERFLOW = {0: 40000.0, 1: 30000.0}

CASES = {
    "division/default": ((1, 13), division_case({})),
    "division/gradient_as_bucket_view": ((1, 13),
                                         division_case({"gradient_as_bucket_view": True})),
    "division/batched_grad_copy": ((2, 13), division_case({"batched_grad_copy": True})),
    "division/batched_grad_copy+gradient_as_bucket_view": (
        (2, 13), division_case({"batched_grad_copy": True, "gradient_as_bucket_view": True})),
    "hooks/allreduce": ((1, 13), division_case({}, default_hooks().allreduce_hook)),
    "hooks/fp16": ((1, 13), division_case({}, default_hooks().fp16_compress_hook)),
    "hooks/fp16_overflow": ((1, 13), division_case({}, default_hooks().fp16_compress_hook,
                                                   OVERFLOW)),
    "mixed_precision/fp16_overflow": ((2, 1), division_case(
        {"mixed_precision": mixed_precision(torch.float16)}, None, OVERFLOW)),
    "mixed_precision/bf16": ((2, 1), division_case(
        {"mixed_precision": mixed_precision(torch.bfloat16)}, None, OVERFLOW)),
    "mixed_precision/fp32": ((2, 1), division_case(
        {"mixed_precision": mixed_precision(torch.float32)})),
    "skip/find_unused_b_never": ((2, 8), skip_case(
        {"find_unused_parameters": True, "skip_all_reduce_unused_params": True}, "never")),
    "skip/find_unused_b_never_without_skip": ((1, 13), skip_case(
        {"find_unused_parameters": True}, "never")),
    "skip/find_unused_b_first_only": ((2, 8), skip_case(
        {"find_unused_parameters": True, "skip_all_reduce_unused_params": True}, "first")),
    "skip/static_graph_b_never": ((2, 8), skip_case(
        {"static_graph": True, "skip_all_reduce_unused_params": True}, "never")),
    "static/two_forwards": ((1, 13), static_case("two_forwards")),
    "static/no_sync_first": ((1, 13), static_case("no_sync_first")),
    "buffers/default": ((1, 13), buffers_case({})),
    "buffers/broadcast_buffers_false": ((1, 13), buffers_case({"broadcast_buffers": False})),
    "buffers/forward_sync_buffers_false": ((2, 13),
                                           buffers_case({"forward_sync_buffers": False})),
    "buffers/init_sync_false": ((2, 8), buffers_case({"init_sync": False})),
}
WORLDS = {"division": 3, "hooks/allreduce": 3, "hooks/fp16": 3, "mixed_precision/fp32": 3}


def main():
    """Every case the running PyTorch has; with arguments, only the cases starting with one of
    them, replaced in the existing file."""
    out = os.path.join(OUT_DIR, "%d.%d.json" % release())
    results = {}
    if len(sys.argv) > 1 and os.path.exists(out):
        with open(out) as f:
            results = json.load(f)["cases"]
    for name, (first, _) in CASES.items():
        if release() < first or (len(sys.argv) > 1 and not name.startswith(tuple(sys.argv[1:]))):
            continue
        world = WORLDS.get(name, WORLDS.get(name.split("/")[0], 2))
        by_rank = run(name, world)
        # Rank 1 shows what construction and Join's end brought from rank 0.
        results[name] = {"world_size": world, "rank0": by_rank[0], "rank1": by_rank[1]}
        print(f"{name}: done", flush=True)
    golden = {"torch_version": torch.__version__,
              "generated_by": "tools/scripts/golden/make_ddp_options_golden.py",
              "cases": results}
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(results)} cases (torch {torch.__version__})")


if __name__ == "__main__":
    main()
