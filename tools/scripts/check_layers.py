#!/usr/bin/env python3
"""Checks ddpkit's include order (tools/scripts/layers.txt): every C++ file outside tests/ sits in
one layer (where several globs match, the one with the most literal characters: a file named
outright beats its folder's `*`), and includes only files of its own layer or of layers listed
before it; a .proto's imports are checked the same way, and `x.pb.h` counts as `x.proto`.
Fails naming each offending include. The linker cannot catch an upward include of a header
alone (an inline function, a type), so this reads the #include lines themselves.

A line `independent <folder>/*/` says the subfolders of <folder> are siblings: a file in one may
not include a file of another (each job's folder: what jobs share lives in the jobs' root).

  tools/scripts/check_layers.py            check the tree
  tools/scripts/check_layers.py --layers   print each file's layer
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ('.h', '.cc', '.cu', '.cuh', '.proto')
MODULES = ('autograd/', 'comm/', 'join/', 'reducer/', 'tools/')


def glob_regex(pattern):
    parts = re.split(r'(\*\*|\*)', pattern)
    body = ''.join('.*' if p == '**' else '[^/]*' if p == '*' else re.escape(p) for p in parts)
    return re.compile(body + '$')


def read_layers(path):
    layers, siblings = [], []  # (name, [(literal length, regex)]); parent folders
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split('#', 1)[0].split()
        if not words:
            continue
        if len(words) < 2:
            sys.exit(f'{path}:{number}: a layer needs a name and at least one glob')
        if words[0] == 'independent':
            siblings += [w.rstrip('*/') + '/' for w in words[1:]]
            continue
        layers.append((words[0], [(len(g.replace('*', '')), glob_regex(g)) for g in words[1:]]))
    return layers, siblings


def sibling_of(path, parents):
    """The sibling folder `path` sits in ("tools/jobs/fr/"), or None."""
    for parent in parents:
        rest = path[len(parent):] if path.startswith(parent) else ''
        if '/' in rest:
            return parent + rest.split('/', 1)[0] + '/'
    return None


def tracked_sources():
    try:
        out = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # a source tree without git
        out = [str(p.relative_to(ROOT)) for p in ROOT.rglob('*') if p.is_file()]
    return sorted(f for f in out if f.endswith(SOURCES) and f.startswith(MODULES))


def main():
    layers, siblings = read_layers(ROOT / 'tools/scripts/layers.txt')
    files = tracked_sources()
    layer_of, problems = {}, []
    for f in files:
        best = {}  # layer -> its most specific matching glob's literal length
        for i, (_, globs) in enumerate(layers):
            lengths = [n for n, r in globs if r.match(f)]
            if lengths:
                best[i] = max(lengths)
        top = max(best.values(), default=None)
        matches = [i for i, n in best.items() if n == top]
        if len(matches) != 1:
            names = ', '.join(layers[i][0] for i in matches) or 'none'
            problems.append(f'{f}: in {len(matches)} layers ({names}); it must be in exactly one')
        else:
            layer_of[f] = matches[0]
    if '--layers' in sys.argv:
        for f, i in layer_of.items():
            print(f'{layers[i][0]:12} {f}')
        return 0
    include = re.compile(r'^\s*(?:#\s*include|import)\s+"([^"]+)"', re.M)
    checked = 0
    for f, mine in layer_of.items():
        for target in include.findall((ROOT / f).read_text(errors='replace')):
            if target.endswith('.pb.h'):  # protoc's output: the layer of its .proto's folder
                target = target[:-len('.pb.h')] + '.proto'
            theirs = layer_of.get(target)
            mine_sib, theirs_sib = sibling_of(f, siblings), sibling_of(target, siblings)
            if theirs is None and not target.startswith(MODULES):
                continue  # a library's header (absl/, gtest/, ...)
            checked += 1
            if theirs is None:
                problems.append(f'{f} includes {target}, which is in no layer (or does not exist)')
            elif theirs > mine:
                problems.append(f'{f} ({layers[mine][0]}) includes {target} '
                                f'({layers[theirs][0]}), a layer above it')
            elif mine_sib and theirs_sib and mine_sib != theirs_sib:
                problems.append(f'{f} includes {target}, of a sibling folder ({theirs_sib}); '
                                'share it from the parent')
    if problems:
        print(f'check_layers: {len(problems)} problem(s) with the include order '
              '(tools/scripts/layers.txt):', file=sys.stderr)
        for p in problems:
            print('  ' + p, file=sys.stderr)
        return 1
    print(f'check_layers: {len(files)} files in {len(layers)} layers, {checked} includes in order')
    return 0


if __name__ == '__main__':
    sys.exit(main())
