#!/usr/bin/python3
"""Does *your* DDP training loop survive uneven inputs? Runs it on gloo processes where the
ranks have different numbers of batches, and says what happens, the way `ddpkit join --check`
judges ddpkit's own.

    python3 tools/scripts/check_join.py MODULE:NAME [--batches 5,3] [--timeout 5] [--json]
    python3 tools/scripts/check_join.py --examples      # the usual mistakes, each with its verdict

MODULE may be a path to a .py file. NAME(rank, world_size) returns a dict describing the job:
    model      an nn.Module, with the same initial weights on every rank (seed it)
    optimizer  params -> optimizer (torch.optim.SGD, ZeroRedundancyOptimizer, ...)
    batch      (rank, i) -> rank's i-th batch: a tuple of tensors, batch-first
    loss       (model, batch) -> loss tensor; it may issue collectives of its own
    joinables  (ddp_model, optimizer) -> what your loop passes to Join, or None if it uses no
               Join (optional; default: [ddp_model])
and optionally `divide_by_initial_world_size` (Join's keyword; default True).

The loop run on every rank is the usual one, inside `with Join(joinables, ...)` when there is a
Join: for each of the rank's batches, zero_grad, loss(ddp_model, batch).backward(), step. The
report:
  - a hang: the run stopped at the collective timeout; which rank ran out, and which collective
    the others were left in (from PyTorch's flight recorder, read by `ddpkit fr analyze` when
    build/bin/ddpkit exists), with the cause when it is a known one: no Join, the DDP model not
    among the joinables, a ZeroRedundancyOptimizer not passed to Join, or a collective of your
    loss that no JoinHook shadows (named by file and line);
  - whether the ranks' final models are identical;
  - how far rank 0's final model is from one process trained on the union of the rows the
    active ranks trained on (a mean loss scaled by active/world under
    divide_by_initial_world_size, as DDP's average scales it), and why, when it is not;
  - which divide_by_initial_world_size it ran with, and what that means.
Exit status: 0 every verdict held, 3 one failed, 2 a usage error, 1 the check itself failed.
torch stays out of ddpkit's build; this runs under PyTorch 1.13 (Debian) or 2.x.
"""
import argparse
import datetime
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_CHECK_FAILED = 0, 1, 2, 3
TORCH_DIR = os.path.dirname(torch.__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "barrier")


def load(spec):
    module, _, name = spec.rpartition(":")
    if not module or not name:
        raise SystemExit("check_join: name the job as MODULE:NAME (got '%s')" % spec)
    if module.endswith(".py") or os.path.sep in module:
        loaded = importlib.util.spec_from_file_location("user_job", module)
        mod = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(mod)
    else:
        mod = importlib.import_module(module)
    return getattr(mod, name)


# --- what the loss issues on its own ------------------------------------------------------

class CallSites:
    """Records the collectives the user's loss issues directly (not PyTorch's own: Join's,
    ZeRO's), by the file and line of the user's call."""

    def __init__(self, log_path):
        # Each site is also written at once: a rank gloo aborts on a mismatch leaves no result.
        self.sites, self.active, self.saved, self.log_path = [], False, {}, log_path

    def __enter__(self):
        for name in COLLECTIVES:
            if hasattr(dist, name):
                self.saved[name] = getattr(dist, name)
                setattr(dist, name, self.wrap(name, self.saved[name]))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(dist, name, fn)

    def wrap(self, name, fn):
        def recorded(*args, **kwargs):
            if self.active:
                frame = traceback.extract_stack(limit=2)[0]
                if not frame.filename.startswith(TORCH_DIR):
                    site = "dist.%s at %s:%d" % (name, os.path.basename(frame.filename),
                                                 frame.lineno)
                    if site not in self.sites:
                        self.sites.append(site)
                        with open(self.log_path, "a") as f:
                            f.write(site + "\n")
            return fn(*args, **kwargs)
        return recorded


# --- one rank -----------------------------------------------------------------------------

def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def stack_batches(batches):
    return tuple(torch.cat(parts) for parts in zip(*batches))


def rank_main(rank, world, spec, counts, divide, timeout, out):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # 2.8+: gloo's calls are recorded
    store = dist.FileStore(os.path.join(out, "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    job = load(spec)(rank, world)
    ddp = DistributedDataParallel(job["model"])
    opt = job["optimizer"](ddp.parameters())
    joinables = job.get("joinables", lambda m, o: [m])(ddp, opt)
    result = {"rank": rank, "batches": counts[rank], "done": 0, "error": "", "counts": counts,
              "timeout": timeout}
    facts = {"zero": type(opt).__name__ == "ZeroRedundancyOptimizer",
             "ddp_joined": joinables is not None and any(j is ddp for j in joinables),
             "zero_joined": joinables is not None and any(j is opt for j in joinables),
             "uses_join": joinables is not None,
             "batchnorm": any("BatchNorm" in type(m).__name__ for m in ddp.module.modules())}
    with open(os.path.join(out, "facts.json"), "w") as f:  # the same on every rank
        json.dump(facts, f)
    with CallSites(os.path.join(out, "sites%d.txt" % rank)) as calls:
        try:
            loop(job, ddp, opt, joinables, counts[rank], rank, divide, calls, result)
        except Exception as e:  # a timeout, a mismatch: the report says which
            result["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
    dump_flight_recorder(rank, out)
    if not result["error"]:
        # The tool's own comparison, after the user's loop: every rank is here.
        flat = flat_parameters(ddp.module)
        digest = hashlib.sha256(repr(flat.tolist()).encode()).hexdigest()  # no numpy needed
        result["model_digest"] = digest
        if rank == 0:
            torch.save(ddp.module.state_dict(), os.path.join(out, "ddp_model.pt"))
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
    os._exit(0)  # a broken group's teardown can hang; the result is written


def loop(job, ddp, opt, joinables, count, rank, divide, calls, result):
    def train():
        for i in range(count):
            batch = job["batch"](rank, i)
            opt.zero_grad()
            calls.active = True
            loss = job["loss"](ddp, batch)
            calls.active = False
            loss.backward()
            opt.step()
            result["done"] = i + 1
    if joinables is None:
        train()
        if count < max(job_counts(result)):
            # Out of batches, it stays up past its peers' timeout, as a real job's rank would
            # while it evaluates or saves: they are left waiting, not told.
            time.sleep(result["timeout"] + 2)
    else:
        with Join(joinables, divide_by_initial_world_size=divide):
            train()


def job_counts(result):
    return result["counts"]


def dump_flight_recorder(rank, out):
    c10d = torch._C._distributed_c10d
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return
    os.makedirs(os.path.join(out, "fr"), exist_ok=True)
    try:
        with open(os.path.join(out, "fr", "fr_rank_%d.json" % rank), "wb") as f:
            data = dump(True, False)
            f.write(data if isinstance(data, bytes) else data.encode())
    except RuntimeError:
        pass


# --- one process on the union of the rows ---------------------------------------------------

def reference_main(spec, world, counts, divide, out):
    """The same iterations as one process: iteration t trains on the rows of every rank still
    active at t, its loss scaled as DDP's average scales a mean loss."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(out, "ref_store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    job = load(spec)(0, world)
    model = job["model"]
    opt = job["optimizer"](model.parameters())
    for t in range(max(counts)):
        active = [r for r in range(world) if t < counts[r]]
        batch = stack_batches([job["batch"](r, t) for r in active])
        opt.zero_grad()
        scale = len(active) / world if divide else 1.0
        (job["loss"](model, batch) * scale).backward()
        opt.step()
    ddp = torch.load(os.path.join(out, "ddp_model.pt"))
    worst, where = 0.0, ""
    for name, p in model.state_dict().items():
        if not p.is_floating_point():
            continue
        d = (ddp[name].double() - p.double()).abs().max().item()
        if d > worst:
            worst, where = d, name
    largest = max(p.abs().max().item() for p in model.parameters())
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"max_abs_diff": worst, "where": where,
                   "tolerance": 1e-4 * max(1.0, largest)}, f)
    os._exit(0)


# --- the check -------------------------------------------------------------------------------

def run(spec, counts, divide, timeout):
    world = len(counts)
    out = tempfile.mkdtemp(prefix="check_join_")
    try:
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=rank_main, args=(r, world, spec, counts, divide, timeout, out))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout + 60)
        results = [rank_result(r, p, counts, timeout, out) for r, p in enumerate(procs)]
        facts = {}
        if os.path.exists(os.path.join(out, "facts.json")):
            with open(os.path.join(out, "facts.json")) as f:
                facts = json.load(f)
        report = judge(results, facts, counts, divide, timeout, out)
        if report["completed"] and report["models_identical"]:
            ref = ctx.Process(target=reference_main, args=(spec, world, counts, divide, out))
            ref.start()
            ref.join(600)
            with open(os.path.join(out, "reference.json")) as f:
                add_reference(report, json.load(f), facts)
        return report
    finally:
        shutil.rmtree(out, ignore_errors=True)


def rank_result(r, proc, counts, timeout, out):
    """Rank r's result file, or why there is none: it hung past the check's own deadline, or
    died (gloo aborts the process on some collective mismatches)."""
    path = os.path.join(out, "rank%d.json" % r)
    sites = os.path.join(out, "sites%d.txt" % r)
    own = open(sites).read().split("\n")[:-1] if os.path.exists(sites) else []
    if proc.is_alive():
        proc.kill()
        error = "did not finish within %d s" % (timeout + 60)
    elif not os.path.exists(path):
        error = "died (exit status %s): gloo aborts a process on a collective whose sizes do " \
                "not match" % proc.exitcode
    else:
        with open(path) as f:
            return dict(json.load(f), own_collectives=own)
    return {"rank": r, "error": error, "done": 0, "batches": counts[r], "own_collectives": own}


def fr_diagnosis(out):
    """`ddpkit fr analyze` of the ranks' flight-recorder dumps, when there are dumps and a
    built ddpkit."""
    binary = os.path.join(ROOT, "build", "bin", "ddpkit")
    folder = os.path.join(out, "fr")
    if not os.path.isdir(folder) or not os.path.exists(binary):
        return ""
    done = subprocess.run([binary, "fr", "analyze", folder, "--json"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        return ""
    return json.loads(done.stdout).get("diagnosis", "")


def judge(results, first, counts, divide, timeout, out):
    report = {"schema_version": 1, "report": "CheckJoinReport", "batches": counts,
              "divide_by_initial_world_size": divide, "timeout_s": timeout,
              "uses_join": first.get("uses_join", False), "completed": False,
              "models_identical": False, "verdicts": [], "ranks": results}
    failed = [r for r in results if r["error"]]
    own = sorted({s for r in results for s in r.get("own_collectives", [])})
    report["own_collectives"] = own
    if failed:
        causes = []
        if not first.get("uses_join"):
            causes.append("the loop has no Join: a rank that runs out of batches leaves DDP's "
                          "allreduces unmatched; wrap the loop in `with Join([ddp_model]):`")
        else:
            if not first.get("ddp_joined"):
                causes.append("the DDP model is not among Join's joinables, so a joined rank "
                              "never shadows its gradient allreduces; pass it: Join([ddp_model, "
                              "...])")
            if first.get("zero") and not first.get("zero_joined"):
                causes.append("the ZeroRedundancyOptimizer is not passed to Join, so a joined "
                              "rank never matches its step's broadcasts; pass it: "
                              "Join([ddp_model, optimizer])")
            if own:
                causes.append("the loss issues collectives no JoinHook shadows (%s): a joined "
                              "rank never issues them; move them after the Join block, or "
                              "give them a Joinable" % ", ".join(own))
        ran_out = [r["rank"] for r in results if r["batches"] == min(counts)]
        where = fr_diagnosis(out)
        died = any(r["error"].startswith("died") for r in failed)
        text = "%s (%s ran out of batches first)" % (
            "the run broke: a rank died" if died
            else "hang: the run stopped at the %d s collective timeout" % timeout,
            "rank " + ", ".join(map(str, ran_out)))
        if where:
            text += "; the flight recorder: " + where
        text += "; " + first_error(failed)
        report["verdicts"].append({"passed": False, "what": text})
        for cause in causes or ["a cause this check does not know: see the flight recorder"]:
            report["verdicts"].append({"passed": False, "what": "cause: " + cause})
        return report
    report["completed"] = True
    digests = {r["model_digest"] for r in results}
    report["models_identical"] = len(digests) == 1
    report["verdicts"].append({
        "passed": report["models_identical"],
        "what": "the final models are identical on every rank" if report["models_identical"]
        else "the ranks' final models differ"})
    if own:
        report["verdicts"].append({"passed": True, "what": "the loss's own collectives (%s) "
                                   "ran on every rank: no rank ran out while they were due"
                                   % ", ".join(own)})
    return report


def first_error(failed):
    r = failed[0]
    if r["error"].startswith("died") or r["error"].startswith("did not finish"):
        return "rank %d %s" % (r["rank"], r["error"])
    return "rank %d after %d of its %d batches: %s" % (r["rank"], r["done"], r["batches"],
                                                      r["error"])


def add_reference(report, ref, rank0):
    agrees = ref["max_abs_diff"] <= ref["tolerance"]
    what = "%s one process on the union of the rows: largest difference %.3g in %s, bound " \
           "%.3g" % ("DDP equals" if agrees else "DDP differs from", ref["max_abs_diff"],
                     ref["where"], ref["tolerance"])
    if not agrees and rank0.get("batchnorm"):
        what += " (the model has BatchNorm: under DDP its statistics are each rank's own " \
                "batch's; SyncBatchNorm would make them the union's)"
    report["reference"] = ref
    report["verdicts"].append({"passed": agrees, "what": what})


def divide_words(divide, counts):
    world, fewest = len(counts), min(counts)
    if divide:
        return ("divide_by_initial_world_size=True (PyTorch's default): once a rank has joined, "
                "the summed gradient is still divided by %d, so an iteration with k active ranks "
                "steps with k/%d of their average" % (world, world))
    return ("divide_by_initial_world_size=False: each iteration divides by its active ranks, so "
            "from iteration %d, once a rank has joined, the step is still the active ranks' full "
            "average" % fewest)


def print_report(spec, report):
    print("check_join %s: %d ranks with %s batches (gloo), %s" % (
        spec, len(report["batches"]), ",".join(map(str, report["batches"])),
        "in Join" if report["uses_join"] else "no Join"))
    print("  " + divide_words(report["divide_by_initial_world_size"], report["batches"]))
    for v in report["verdicts"]:
        print("  %s %s" % ("ok  " if v["passed"] else "FAIL", v["what"]))


# --- the examples ----------------------------------------------------------------------------

EXAMPLES = {  # NAME in check_join_examples.py -> the verdicts' start it must give
    "correct": "pass",
    "no_join": "cause: the loop has no Join",
    "join_without_ddp": "cause: the DDP model is not among Join's joinables",
    "metric_allreduce": "cause: the loss issues collectives no JoinHook shadows",
    "batchnorm": "DDP differs from one process on the union of the rows",
    "zero_not_joined": "cause: the ZeroRedundancyOptimizer is not passed to Join",
}


def run_examples(counts, timeout, as_json):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_join_examples.py")
    wrong, out = 0, {}
    for name, expected in EXAMPLES.items():
        report = run(path + ":" + name, counts, True, timeout)
        failed = [v["what"] for v in report["verdicts"] if not v["passed"]]
        got = "pass" if not failed else next(
            (w for w in failed if w.startswith(expected)), failed[-1])
        ok = got.startswith(expected)
        wrong += not ok
        out[name] = {"expected": expected, "got": got, "as_expected": ok}
        if not as_json:
            print("%-18s %s  %s" % (name, "as expected" if ok else "UNEXPECTED", got))
    if as_json:
        print(json.dumps(out, indent=1))
    return EXIT_OK if wrong == 0 else EXIT_CHECK_FAILED


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job", nargs="?", help="MODULE:NAME")
    parser.add_argument("--batches", default="5,3", help="batches per rank, e.g. 5,3,4")
    parser.add_argument("--timeout", type=int, default=5, help="the collective timeout, s")
    parser.add_argument("--divide-by-initial-world-size", default=None,
                        choices=("true", "false"), help="Join's; default: the job's, else true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--examples", action="store_true")
    args = parser.parse_args()
    try:
        counts = [int(c) for c in args.batches.split(",")]
    except ValueError:
        parser.exit(EXIT_USAGE, "check_join: --batches takes counts, e.g. 5,3\n")
    if not 2 <= len(counts) <= 4 or min(counts) < 1:
        parser.exit(EXIT_USAGE, "check_join: --batches needs 2 to 4 ranks, each with a batch\n")
    if args.examples:
        return run_examples(counts, args.timeout, args.json)
    if not args.job:
        parser.exit(EXIT_USAGE, "check_join: name the job, MODULE:NAME (or --examples)\n")
    try:
        job = load(args.job)(0, len(counts))
    except Exception as e:  # the user's module: say what failed
        print("check_join: %s failed: %s" % (args.job, e), file=sys.stderr)
        return EXIT_FAILURE
    divide = job.get("divide_by_initial_world_size", True)
    if args.divide_by_initial_world_size is not None:
        divide = args.divide_by_initial_world_size == "true"
    report = run(args.job, counts, divide, args.timeout)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(args.job, report)
    return EXIT_OK if all(v["passed"] for v in report["verdicts"]) else EXIT_CHECK_FAILED


if __name__ == "__main__":
    sys.exit(main())
