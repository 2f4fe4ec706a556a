#!/usr/bin/env python3
"""Runs the README's short tour line by line, as a new user would, and checks each line.

Each line of the tour's code block runs in order, in one fresh folder that links the
repository's tests/, tools/ and docs/ (so the lines' relative paths work and what they write
stays there), with build/ pointing at the build folder given. A line passes when it exits 0 and
prints what its comment promises (EXPECT below: a phrase the output must contain). Lines that
need what this machine may lack say why they are skipped: a GPU, PyTorch, or
python3-sklearn for the digits (tools/test.sh installs it); a line that rebuilds the build
folder is left out too.

    check_tour.py BUILD_DIR [--only N,M] [--list]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 600

# What each line must print, by a fragment of the line: the comment's promise, checked; and the
# exit status when it is not 0 (the line shows a failure).
EXPECT = [
    ("ddpkit --help", "subcommands:"),
    ("ddpkit train  ", "buckets rebuilt at this step's forward"),
    ("--find-unused-parameters --comm-hook fp16", "comm_hook=fp16"),
    ("--comm-hook powersgd --powersgd-rank 2", "(78.4x less)"),
    ("jq '.ddp.rebuilt_buckets'", "param_names"),
    ("--save-weights w.safetensors --save-grads g.safetensors", "saved weights to w.safetensors"),
    ("train --backend gloo  ", "done: loss"),
    ("--backend mpi", "done: loss"),
    ("--optimizer zero-sgd", "ZeRO-1 SGD"),
    ("tied=1,unused=1", "unused"),
    ("--text README.md", "the model writes"),
    ("join --inputs 5,6,3,8  ", "shadow"),
    ("--no-join", "This is what uneven inputs do without Join", 1),
    ("--reference one-process --check", "equal"),
    ("cmake --install", "Installing"),
    ("contrastive --out curves/", "curves.svg"),
    ("recompute --trace r.json", "recompute"),
    ("varlen --out varlen/", "varlen"),
    ("buckets --model mlp:784,2048,2048,10  ", "bucket"),
    ("--limits 200,400 --json", "buckets"),
    ("simulate --params tests/testdata/plans/resnet50.json", "best bucket_cap_mb"),
    ("resnet50.json", "layer4"),
    ("make_digits.py --out d", "d.train.safetensors"),
    ("--eval-data d.test.safetensors", "held-out accuracy"),
    ("resnet50_cap25.json", "bucket"),
    ("--pytorch-version 1.13", "1.13"),
    ("bench ddp", "cap"),
    ("bench allreduce", "busbw"),
    ("bench paper", "paper.svg"),
    ("gpt2_124m.json", "best"),
    ("--trace t.json  ", "trace written to t.json"),
    ("trace stats t.json", "overlap%"),
    ("trace svg t.json", "wrote timeline.svg"),
    ("torch_traces/world2", "pytorch profiler"),
    ("fr analyze ddpkit_fr", "ddpkit_fr"),
    ("autograd_benchmark  ", "BM_"),
]


def tour_lines():
    """The tour's commands (continuation lines joined), in order."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = text.split("## A short tour", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines, current = [], ""
    for raw in block.strip("\n").split("\n"):
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        lines.append(current)
        current = ""
    return lines


def skip_reason(line, build_dir):
    if "--device cuda" in line or "--backend nccl" in line:
        return "needs a GPU"
    if "bench_vs_torch.py" in line:
        return "needs PyTorch (a venv with torch; never a test dependency)"
    if "d.train.safetensors" in line or "make_digits.py" in line:
        # make_digits.py runs on Debian's python3 (its shebang), where python3-sklearn installs.
        has = subprocess.run(["/usr/bin/python3", "-c", "import sklearn"], capture_output=True)
        if has.returncode != 0:
            return "needs python3-sklearn for make_digits.py's digits"
    if "build.sh build" in line:
        return "rebuilds the build folder (the test runs against it)"
    if line.startswith("build/bin/autograd_benchmark") and not os.path.exists(
        os.path.join(build_dir, "bin", "autograd_benchmark")
    ):
        # The line before builds it; tools/test.sh's build has it, tools/demo.sh's does not.
        return "needs the benchmark the line before builds (left out here)"
    return None


def prepare(line, folder):
    """What a line needs that the tour leaves to what the reader did before."""
    if "fr analyze ddpkit_fr" in line and not os.path.isdir(os.path.join(folder, "ddpkit_fr")):
        # The line reads what a failed run leaves (the --no-join line's, when it ran).
        subprocess.run("build/bin/ddpkit join --inputs 5,6,3,8 --no-join", shell=True, cwd=folder,
                       capture_output=True)


def expectation(line):
    """(phrase the output must contain or None, exit status)."""
    padded = line.split(" #", 1)[0] + "  "
    for fragment, phrase, *status in EXPECT:
        if fragment in padded:
            return phrase, status[0] if status else 0
    return None, 0


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    build_dir = os.path.abspath(args[0])
    lines = tour_lines()
    only = None
    if "--only" in args:
        only = {int(n) for n in args[args.index("--only") + 1].split(",")}
    if "--list" in args:
        for i, line in enumerate(lines, 1):
            print(f"{i:3d} {line}")
        return
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        for top in ("tests", "tools", "docs", "README.md"):
            os.symlink(os.path.join(ROOT, top), os.path.join(folder, top))
        os.symlink(build_dir, os.path.join(folder, "build"))
        for i, line in enumerate(lines, 1):
            if only and i not in only:
                continue
            reason = skip_reason(line, build_dir)
            if reason:
                print(f"tour {i:2d}: skipped, {reason}: {line}")
                continue
            command = line.split(" #", 1)[0]
            command = command.replace("--prefix /tmp/ddpkit", f"--prefix {folder}/prefix")
            prepare(line, folder)
            start = time.time()
            done = subprocess.run(command, shell=True, cwd=folder, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
            seconds = time.time() - start
            output = done.stdout + done.stderr
            phrase, status = expectation(line)
            ok = done.returncode == status and (phrase is None or phrase in output)
            print(f"tour {i:2d}: {'ok' if ok else 'FAILED'} in {seconds:.1f} s: {line}")
            if not ok:
                failures += 1
                why = (f"exit {done.returncode}, not {status}" if done.returncode != status else
                       f"no '{phrase}' in its output")
                print(f"  {why}; the last lines:\n    " +
                      "\n    ".join(output.strip().split("\n")[-12:]))
    print(f"check_tour: {len(lines)} lines, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
