"""Real PyTorch flight-recorder dumps of small gloo jobs, for `ddpkit fr analyze` tests.

Run it once per PyTorch release, with that release's Python, then once more with a PyTorch that
has PyTorch's own analyser (torch.distributed.flight_recorder, 2.11+) to record its verdicts:
    /work/venv-torch23/bin/python make_torch_fr_golden.py dump  tests/testdata/torch_fr
    /work/venv-torch24/bin/python make_torch_fr_golden.py dump  tests/testdata/torch_fr
    /work/venv-torch25/bin/python make_torch_fr_golden.py dump  tests/testdata/torch_fr
    /work/venv-torch28/bin/python make_torch_fr_golden.py dump  tests/testdata/torch_fr
    /work/venv-torch2/bin/python  make_torch_fr_golden.py dump  tests/testdata/torch_fr
    /work/venv-torch2/bin/python  make_torch_fr_golden.py verdicts tests/testdata/torch_fr
(each venv: python3 -m venv DIR && DIR/bin/pip install torch==2.3.1 (2.4.1, 2.5.1, 2.8.0,
2.15.0); 2.3 and 2.4 also "numpy<2", and compile an extension: g++ and Python's headers).

Each job: three gloo ranks, five steps of a gradient allreduce (float32[1234]) and a loss
allreduce (float32[1]), a 2 s collective timeout. The cases:
  healthy/:  every rank runs every step.
  missing/:  rank 2 leaves after 3 steps (uneven inputs); ranks 0 and 1 time out in step 4's
             gradient allreduce.
  size/:     in step 3 rank 1 allreduces float32[2, 617] where the others send [1234] (the same
             elements: gloo runs it, silently wrong).
  dtype/:    in step 3 rank 1 allreduces int32[1234] (the same bytes: gloo runs it).
A rank dumps after its loop (the stopped rank after its peers timed out) into
DIR/torch-<release>/<case>/json/fr_rank_<r>.json (the JSON form) and .../pickle/fr_rank_<r>
(the pickle form, with stack frames: what PyTorch's dump files and its analyser use).

How each release records (read from its installed sources):
  2.8 and later (dump versions 2.9, 2.10): ProcessGroupGloo records into the flight recorder
    itself (TORCH_FR_BUFFER_SIZE); the dumps are _dump_fr_trace_json() and _dump_fr_trace().
    Gloo records no start or completion: every entry stays "scheduled".
  2.3 and 2.4 (dump versions 1.4, 2.1): only ProcessGroupNCCL records, and it needs a GPU.
    The recorder and its dump writer, though, are inline in the wheel's own header
    (c10d/TraceUtils.h, NCCLTraceBuffer), so this script compiles them into a small extension
    and feeds them the gloo job's calls as ProcessGroupNCCL would: record(group 0, seq, op,
    "nccl:<op>", tensors) before a call, retire_id() when it returns (no CUDA events, so every
    entry stays "scheduled"; a call that timed out is not retired). The dump is that header's
    dump(): the pickle form only (neither has a JSON form).
  2.5 (dump version 2.4): only ProcessGroupNCCL records, it needs a GPU, and the recorder is
    compiled into libtorch_cuda.so without exported symbols, so nothing can feed it here. Its
    dump functions (_dump_nccl_trace_json, _dump_nccl_trace) still run: the job's dumps are
    2.5's real, empty ones (torch-2.5/healthy/). A 2.5 dump with entries needs one GPU per rank
    (not done here).
`verdicts` runs PyTorch's analyser (build_db, what torchfrtrace runs) on every pickle folder
and writes what it decided per collective to <case>/torchfrtrace.json, or the error it stopped
with: ddpkit's tests compare their verdicts with these. On gloo dumps it stops with a KeyError
(their pg_config names the groups ''); its verdicts on copies whose pg_config names them as the
entries do are recorded beside that error, as "repaired_pg_config".
"""
import datetime
import glob
import json
import os
import pickle
import sys
import tempfile
import time

WORLD, STEPS, TIMEOUT_S, BROKEN_STEP = 3, 5, 2, 2
CASES = ("healthy", "missing", "size", "dtype")


def release(torch):
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


# --- 2.3: the recorder of the wheel's own header, in an extension --------------------------

EXTENSION = r"""
#include <fstream>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TraceUtils.h>
namespace {
c10d::NCCLTraceBuffer* Buffer() { return c10d::NCCLTraceBuffer::get(); }
#if RELEASE_2_4  // the group is named (name, description), as ProcessGroupNCCL names it
const auto kGroup = std::make_tuple(std::string("0"), std::string("default_pg"));
#define GROUP kGroup
#else            // 2.3: by its number
#define GROUP 0
#endif
int64_t Record(int64_t seq, std::string name, std::vector<at::Tensor> in,
               std::vector<at::Tensor> out) {
#if RELEASE_2_4
  auto id = Buffer()->record(0, GROUP, seq, 0, seq, name, in, out, nullptr, nullptr, false);
#else
  auto id = Buffer()->record(0, seq, seq, name, in, out, nullptr, nullptr);
#endif
  return id ? int64_t(*id) : -1;
}
void Retire(int64_t id) { Buffer()->retire_id(size_t(id), false); }
void Ranks(std::vector<int64_t> r) {
  Buffer()->record_pg_ranks(GROUP, std::vector<uint64_t>(r.begin(), r.end()));
}
#if RELEASE_2_4
py::bytes Dump() { return py::bytes(Buffer()->dump(std::nullopt, true, true, false)); }
#else
py::bytes Dump() { return py::bytes(Buffer()->dump(c10::nullopt)); }
#endif
}  // namespace
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("record", &Record);
  m.def("retire", &Retire);
  m.def("ranks", &Ranks);
  m.def("dump", &Dump);
}
"""


def header_recorder(build_dir):
    """The release's NCCLTraceBuffer (TraceUtils.h) compiled against the wheel's CUDA and NCCL
    headers (2.3 and 2.4)."""
    import nvidia
    import torch
    from torch.utils.cpp_extension import load_inline
    nv = os.path.dirname(nvidia.__file__) if nvidia.__file__ else list(nvidia.__path__)[0]
    return load_inline("ddpkit_fr_recorder", cpp_sources=[EXTENSION],
                       extra_include_paths=sorted(glob.glob(nv + "/*/include")),
                       extra_cflags=["-DUSE_C10D_NCCL", "-O0", "-w",
                                     "-DRELEASE_2_4=%d" % (release(torch) == "2.4")],
                       extra_ldflags=["-L" + nv + "/cuda_runtime/lib", "-l:libcudart.so.12",
                                      "-ltorch_cuda"],
                       build_directory=build_dir)


class Recorded:
    """Calls the collectives of torch.distributed, telling `recorder` (2.3's, 2.4's) about each."""

    def __init__(self, dist, recorder):
        self.dist, self.recorder, self.seq = dist, recorder, 0
        if recorder:
            recorder.ranks(list(range(WORLD)))

    def all_reduce(self, tensor):
        if not self.recorder:
            return self.dist.all_reduce(tensor)
        self.seq += 1
        rid = self.recorder.record(self.seq, "nccl:all_reduce", [tensor], [tensor])
        self.dist.all_reduce(tensor)
        self.recorder.retire(rid)  # not reached when the call timed out


# --- the job -------------------------------------------------------------------------------

def step(torch, calls, i, rank, case):
    grad = torch.ones(1234)
    if case in ("size", "dtype") and rank == 1 and i == BROKEN_STEP:
        grad = grad.view(2, 617) if case == "size" else grad.to(torch.int32)
    calls.all_reduce(grad)
    calls.all_reduce(torch.ones(1))


def write_dumps(torch, out_dir, rank, recorder):
    c10d = torch._C._distributed_c10d
    forms = {}
    if recorder:
        forms["pickle"] = recorder.dump()
    elif hasattr(c10d, "_dump_fr_trace"):
        forms["pickle"] = c10d._dump_fr_trace(True, True, False)
        forms["json"] = c10d._dump_fr_trace_json(True, False)
    else:
        forms["pickle"] = c10d._dump_nccl_trace(True, True, False)
        forms["json"] = c10d._dump_nccl_trace_json(True, False)
    for form, data in forms.items():
        os.makedirs(os.path.join(out_dir, form), exist_ok=True)
        name = "fr_rank_%d" % rank + (".json" if form == "json" else "")
        with open(os.path.join(out_dir, form, name), "wb") as f:
            if form == "json":  # indented, keys sorted: readable in a diff
                f.write(json.dumps(json.loads(data), indent=1, sort_keys=True).encode() + b"\n")
            else:
                f.write(data)


def worker(rank, case, out_dir, init, build_dir):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    recorder = header_recorder(build_dir) if build_dir else None
    # The ranks meet first with a generous timeout (spawning and importing take a while on a
    # busy machine); the job's own is short, and its dump records it.
    store = dist.FileStore(init, WORLD)
    store.set("ready_%d" % rank, "1")
    store.wait(["ready_%d" % r for r in range(WORLD)], datetime.timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    calls = Recorded(dist, recorder)
    try:
        for i in range(STEPS):
            if case == "missing" and rank == 2 and i == 3:
                time.sleep(TIMEOUT_S + 2)  # stopped: its peers time out waiting for it
                break
            step(torch, calls, i, rank, case)
    except RuntimeError as e:
        print("rank %d: %s" % (rank, str(e).splitlines()[0]), file=sys.stderr)
    time.sleep(1)  # the last call's retirement is asynchronous: both forms should see it
    write_dumps(torch, out_dir, rank, recorder)
    sys.stdout.flush()
    os._exit(0)  # no destroy: the peers' groups are broken


def dump(out_root):
    import torch
    import torch.multiprocessing as mp
    c10d = torch._C._distributed_c10d
    records_gloo = hasattr(c10d, "_dump_fr_trace")
    # The buffer's size (64 entries: the jobs' 10 calls fit), read when the recorder starts.
    os.environ["TORCH_FR_BUFFER_SIZE" if records_gloo else "TORCH_NCCL_TRACE_BUFFER_SIZE"] = "64"
    header_only = release(torch) in ("2.3", "2.4")
    cases = CASES if records_gloo or header_only else ("healthy",)
    with tempfile.TemporaryDirectory() as tmp:
        build_dir = None
        if header_only:
            build_dir = os.path.join(tmp, "recorder")
            os.makedirs(build_dir)
            header_recorder(build_dir)  # built once, loaded by each rank
        for case in cases:
            out_dir = os.path.join(out_root, "torch-" + release(torch), case)
            mp.start_processes(worker, args=(case, out_dir, os.path.join(tmp, case), build_dir),
                               nprocs=WORLD, start_method="spawn")


# --- PyTorch's analyser's verdicts ---------------------------------------------------------

def analyse(folder):
    """What build_db (torchfrtrace's analysis) decides for the pickle dumps in `folder`: its
    verdicts, or the error it stopped with."""
    import argparse
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.loader import read_dir
    args = argparse.Namespace(trace_dir=folder, prefix="fr_rank_", verbose=False,
                              just_print_entries=False, allow_incomplete_ranks=False,
                              mismatch_cap=10, transform_ft=False, output=None,
                              selected_ranks=None, pg_filters=None, print_stack_trace=False)
    try:
        details, version = read_dir(args)
        # In rank order (read_dir keeps the folder's listing order): its reference rank for each
        # collective is then the lowest that recorded it, as ddpkit's.
        details = dict(sorted(details.items(), key=lambda item: item[1]["rank"]))
        db = build_db(details, args, version)
    except Exception as e:  # recorded: what it stops with is part of what it reports
        return {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
    out = []
    for c in db.collectives:
        mismatches = {}
        for r, m in sorted((c.mismatch_collectives or {}).items()):
            mismatches[str(r)] = m.type_of_mismatch.state.name
        out.append({"seq": c.collective_seq_id, "group": c.group_id, "op": c.collective_name,
                    "pass": c.pass_check, "missing_ranks": sorted(c.missing_ranks or []),
                    "mismatches": mismatches})
    return {"version": version, "collectives": out}


def repaired_copy(folder, tmp):
    """The dumps of `folder` with pg_config naming each process group as the entries do.

    Gloo registers its groups in pg_config under the name '' (ranks "[0, 1, 2]" in 2.15, "[]"
    in 2.8), while its entries name them ("0", "default_pg"): PyTorch's analyser then stops
    with KeyError ('0', 0) on every gloo dump. The copy changes nothing else.
    """
    os.makedirs(tmp)
    for path in glob.glob(os.path.join(folder, "fr_rank_*")):
        with open(path, "rb") as f:
            d = pickle.load(f)
        groups = {tuple(e["process_group"]) for e in d.get("entries", [])}
        d["pg_config"] = {name: {"name": name, "desc": desc, "ranks": str(list(range(WORLD)))}
                          for name, desc in groups}
        with open(os.path.join(tmp, os.path.basename(path)), "wb") as f:
            pickle.dump(d, f)
    return tmp


def verdicts(out_root):
    import torch
    for folder in sorted(glob.glob(os.path.join(out_root, "torch-*", "*", "pickle"))):
        result = analyse(folder)
        if "error" in result and result["error"].startswith("KeyError: ('"):
            with tempfile.TemporaryDirectory() as tmp:
                repaired = analyse(repaired_copy(folder, os.path.join(tmp, "dumps")))
            result = {"error": result["error"], "repaired_pg_config": repaired}
        result["analyser"] = "torch " + torch.__version__.split("+")[0]
        with open(os.path.join(os.path.dirname(folder), "torchfrtrace.json"), "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
            f.write("\n")
        print(folder, json.dumps(result)[:200])


if __name__ == "__main__":
    {"dump": dump, "verdicts": verdicts}[sys.argv[1]](sys.argv[2])
