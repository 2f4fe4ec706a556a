#!/usr/bin/env python3
"""Fails when a command's output shown in the docs has drifted from what the command prints.

A doc marks a shown output like this (the comment names the command, run from a fresh temporary
folder that links the repository's tests/, tools/ and docs/, with `ddpkit` meaning the build's
binary):

    <!-- output-of: ddpkit buckets --params 4096,4096 -->
    ```text
    bucket 0: ...
    ...
    ```

Every line of the block must appear in the command's output, in order; a line of three dots
(indented or not) skips any number of lines, so a doc shows the lines that make its point and
leaves out timings. Trailing spaces are ignored. A block may open with the command as typed
(`$ ddpkit ...`, continued by lines ending in a backslash): those lines are not output.

    check_doc_outputs.py BUILD_DIR [FILE.md ...]   (default: README.md and docs/*.md)
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = re.compile(r"^<!-- output-of: (.+?) -->\s*$")
TIMEOUT_S = 120


def shown_blocks(path):
    """(line number, command, shown lines) for each marked block of one file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        mark = MARK.match(line)
        if not mark:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            yield i + 1, mark.group(1), None
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        yield i + 1, mark.group(1), None if end is None else lines[i + 2:end]


def output_lines(shown):
    """The block without its leading `$ command` lines."""
    at = 0
    if shown and shown[0].startswith("$ "):
        while at < len(shown) and shown[at].rstrip().endswith("\\"):
            at += 1
        at += 1
    return shown[at:]


def missing_line(shown, printed):
    """The first shown line not found in order in `printed`, or None when all are there."""
    printed = [p.rstrip() for p in printed]
    at = 0
    skipping = False
    for line in (s.rstrip() for s in output_lines(shown)):
        if line.strip() == "...":
            skipping = True
            continue
        if skipping:
            while at < len(printed) and printed[at] != line:
                at += 1
        if at >= len(printed) or printed[at] != line:
            return line
        at += 1
        skipping = False
    return None


def run(command, build_dir):
    args = shlex.split(command)
    if args[0] == "ddpkit":
        args[0] = os.path.join(build_dir, "bin", "ddpkit")
    with tempfile.TemporaryDirectory() as folder:
        # The repository's folders, linked, so a doc's relative paths (tests/testdata/...) work,
        # while what the command writes (t.json) stays in the temporary folder.
        for top in ("tests", "tools", "docs"):
            os.symlink(os.path.join(ROOT, top), os.path.join(folder, top))
        done = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=TIMEOUT_S)
    return done.returncode, (done.stdout + done.stderr).split("\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build_dir = os.path.abspath(sys.argv[1])
    files = sys.argv[2:] or [os.path.join(ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md")))
    failures = checked = 0
    for path in files:
        name = os.path.relpath(path, ROOT)
        for line_no, command, shown in shown_blocks(path):
            where = f"{name}:{line_no}"
            if shown is None:
                print(f"{where}: an output-of mark must be followed by a fenced block")
                failures += 1
                continue
            status, printed = run(command, build_dir)
            checked += 1
            if status != 0:
                print(f"{where}: `{command}` exited {status}:\n  " + "\n  ".join(printed[-10:]))
                failures += 1
                continue
            missing = missing_line(shown, printed)
            if missing is not None:
                print(f"{where}: `{command}` no longer prints (in this order) the line\n"
                      f"  {missing!r}\nit prints:\n  " + "\n  ".join(printed[:60]) +
                      f"\nupdate the block in {name} from the command's output")
                failures += 1
    print(f"check_doc_outputs: {checked} shown output(s) checked, {failures} drifted")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
