#!/usr/bin/env python3
"""Checks docs/architecture.md's "Where each DDP concept lives" table against the code: every
file a row names exists, and every function or type it names is defined or declared in one of
that row's files (or the .h/.cc beside each). Fails naming the row and what is missing, so the
table cannot go stale when code moves. tools/test.sh runs it with the format check."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / 'docs/architecture.md'
SECTION = '## Where each DDP concept lives'


def rows(text):
    start = text.index(SECTION)
    end = text.find('\n## ', start + len(SECTION))
    for line in text[start:end if end >= 0 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 3 and not set(cells[1]) <= set('- ') and cells[0] != 'concept':
            yield cells


def sources_of(path):
    """The file a row names and its counterparts: x.h <-> x.cc/.cu; a folder's files."""
    p = ROOT / path
    if p.is_dir():
        return [f for f in p.rglob('*') if f.suffix in ('.h', '.cc', '.cu', '.proto', '.py', '.sh')]
    out = [p]
    for suffix in ('.h', '.cc', '.cu', '.proto'):
        sibling = p.with_suffix(suffix)
        if sibling != p and sibling.exists():
            out.append(sibling)
    return out


def main():
    problems, checked = [], 0
    for concept, files_cell, names_cell in rows(DOC.read_text()):
        files, folder = [], ''
        for f in re.findall(r'`([^`]+)`', files_cell):
            if '/' not in f.rstrip('/'):  # `b.cc` after `x/a.cc`: x/b.cc
                f = folder + f
            folder = f if f.endswith('/') else f.rsplit('/', 1)[0] + '/'
            files.append(f)
        texts = []
        for f in files:
            if not (ROOT / f).exists():
                problems.append(f'"{concept[:60]}": {f} does not exist')
                continue
            texts += [s.read_text(errors='replace') for s in sources_of(f)]
        corpus = '\n'.join(texts)
        for name in re.findall(r'`([^`]+)`', names_cell):
            word = re.sub(r'\(.*\)$', '', name).split('::')[-1].split('.')[-1].strip()
            if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', word):
                continue  # not an identifier (a flag, a value): nothing to look up
            checked += 1
            if not re.search(r'\b' + re.escape(word) + r'\b', corpus):
                problems.append(f'"{concept[:60]}": {name} is in none of {", ".join(files)}')
    if problems:
        print(f'check_architecture_table: {len(problems)} stale entr(ies) in docs/architecture.md:',
              file=sys.stderr)
        for p in problems:
            print('  ' + p, file=sys.stderr)
        return 1
    print(f'check_architecture_table: {checked} names found in their files')
    return 0


if __name__ == '__main__':
    sys.exit(main())
