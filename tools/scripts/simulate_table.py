#!/usr/bin/env python3
"""docs/simulate.md's validation tables from the rows of tools/scripts/simulate_validation.sh.

    simulate_table.py [--svg FILE] LABEL=rows.tsv [LABEL=rows.tsv ...]
    simulate_table.py --questions questions.tsv     (simulate_questions.sh's rows)
    simulate_table.py --round-robin rows.tsv        (netns_round_robin.sh's rows)
    simulate_table.py --batches A B [C ...] LABEL=name.tsv [LABEL=name.tsv ...]   (batches' rows)
    simulate_table.py --pool A B [C ...] [--svg FILE] LABEL=name.tsv [...]   (batches pooled)

Per file: one markdown row per (backend, ranks, bucket cap), the medians over the repeats with
their range, and the error of the predicted median against the measured one; then the file's
mean absolute error; at the end one summary table, a row per file and one over all rows, and,
where the rows have a calibration_spread column (simulate's "steps spread" of the calibration
run), the rows again by that spread: how close a prediction came, by how noisy its run was.
Where the rows have a calibration_ms column (the calibration run's own step), what bounds the
error: the cap rows beside a guess that the step does not change with the cap (the calibration
run's step), every row paired by repeat, and the "again" rows — the calibration's options run
once more after the caps' runs: how far two runs of one job move apart here. A
prediction that failed (predicted_ms "failed") is left out of its row's median and counted: a
row whose every prediction failed has no error and counts as outside ±15%. --svg FILE also
draws every row's error, a column of dots per file, with the ±15% band (docs/simulate.md's
picture), the "again" rows hollow in a column of their own, in the palette and type of ddpkit's
own pictures (tools/plot/svg.cc). --batches A B [C ...] compares batches of the same rows (each
name.tsv in every folder): the rows any batch has outside ±15%, those outside in more than one,
how much of a row's error comes back in another batch (a model's error does; the machine's
moves), and the rows beyond ±5% the same way in every batch. --pool A B [C ...] makes the
tables (and --svg's picture) of one batch from several batches' rows taken together (each
name.tsv in every folder): each row's medians over every batch's repeats, as one batch run
with that many repeats would give. Standard library only.
"""
import csv
import html
import statistics
import sys

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"]  # tools/plot/svg.cc's first four
SHOWN = 40  # the picture's error axis runs from -SHOWN% to +SHOWN%; beyond, a clipped marker


def rows_in(paths):
    """The rows of one or more TSVs (several: batches pooled), in order."""
    for path in paths:
        with open(path) as f:
            yield from csv.DictReader(f, delimiter="\t")


def rows_of(*paths):
    """(backend, world, cap) -> the row's repeats; "pairs" keeps each repeat's (predicted,
    measured) for the paired error, "calibration" each repeat's calibration run's own step.
    Several paths: the same rows from several batches, their repeats pooled."""
    groups = {}
    for r in rows_in(paths):
        key = (r["backend"], r["world"], r["cap_mb"])
        g = groups.setdefault(key, {"measured": [], "predicted": [], "failed": 0,
                                    "spread": [], "pairs": [], "calibration": []})
        measured = float(r["measured_ms"])
        g["measured"].append(measured)
        if r.get("calibration_spread"):  # rows written before the column had none
            g["spread"].append(float(r["calibration_spread"]))
        if r.get("calibration_ms"):  # nor this one
            g["calibration"].append(float(r["calibration_ms"]))
        if r["predicted_ms"] == "failed":
            g["failed"] += 1
        else:
            g["predicted"].append(float(r["predicted_ms"]))
            g["pairs"].append((float(r["predicted_ms"]), measured))
    return groups


def error_of(predicted, measured):
    """Percent: the median prediction against the median measured step."""
    return 100 * (statistics.median(predicted) / statistics.median(measured) - 1)


def paired_error(pairs):
    """Percent: the median of each repeat's own error (a calibration against the runs measured
    right after it), which leaves out the machine's drift between repeats."""
    return statistics.median(100 * (p / m - 1) for p, m in pairs)


def cell(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def figures(errors):
    """errors: a row's percentage, or None where its every prediction failed (a miss)."""
    known = [e for e in errors if e is not None] or [0.0]
    mape = sum(abs(e) for e in known) / len(known)
    within = sum(1 for e in errors if e is not None and abs(e) <= 15)
    return mape, within, max(known, key=abs), sum(known) / len(known)


def summary_row(label, errors):
    mape, within, worst, signed = figures(errors)
    return (f"| {label} | {len(errors)} | {mape:.1f}% | {within} of {len(errors)} | "
            f"{worst:+.0f}% | {signed:+.1f}% |")


def summary(errors, failed):
    if not errors:
        return "no rows"
    mape, within, worst, signed = figures(errors)
    none = sum(1 for e in errors if e is None)
    return (f"mean absolute error {mape:.1f}% over {len(errors) - none} rows; {within} of "
            f"{len(errors)} within ±15%, the worst {worst:+.0f}%; mean signed error "
            f"{signed:+.1f}%; {failed} prediction(s) failed")


SPREAD_BANDS = [(0, 10), (10, 20), (20, None)]  # percent: the calibration runs' spread


def spread_table(spread_rows):
    """spread_rows: [(median spread %, error % or None)] -> markdown lines, a row per band."""
    lines = ["| calibration runs' spread | rows | mean absolute error | within ±15% | worst |",
             "|---|---|---|---|---|"]
    for lo, hi in SPREAD_BANDS:
        errors = [e for s, e in spread_rows if s >= lo and (hi is None or s < hi)]
        if not errors:
            continue
        mape, within, worst, _ = figures(errors)
        band = f"{lo}–{hi}%" if hi is not None else f"{lo}% and more"
        lines.append(f"| {band} | {len(errors)} | {mape:.1f}% | {within} of {len(errors)} | "
                     f"{worst:+.0f}% |")
    return lines


def kind(backend):
    """The dot's colour group: the backend, or "across hosts" for a shaped link's row."""
    return "across hosts" if " " in backend else backend


def strip_svg(columns, total, within, again=None):
    """columns: [(label, [(backend, world, cap, error or None), ...])] -> an SVG document.
    again: the "measured again" rows, drawn hollow in a last column of their own, apart: two
    runs of one job, the machine's own spread beside the simulator's."""
    if again:
        columns = columns + [("measured again", again)]
    kinds = ["threads", "gloo", "mpi", "across hosts"]
    step, left, top, height = 126, 64, 74, 330
    width = left + step * len(columns) + 24
    y = lambda e: top + height / 2 - max(-SHOWN, min(SHOWN, e)) / SHOWN * height / 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 70}" '
           f'viewBox="0 0 {width} {top + height + 70}" '
           'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>']
    text = lambda x, yy, t, size=10, anchor="start", fill="#444444", extra="": out.append(
        f'<text x="{x:.1f}" y="{yy:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{fill}"{extra}>{html.escape(t)}</text>')
    text(left, 22, "ddpkit simulate --calibrate against measurement: every validation row's "
         "error", 13, fill="#222222", extra=' font-weight="bold"')
    text(left, 40, f"{within} of {total} rows within ±15% (the band); each dot a row, the median "
         "prediction of its repeats against their median measured step", 11, fill="#222222")
    band_top, band_bottom = y(15), y(-15)
    out.append(f'<rect x="{left}" y="{band_top:.1f}" width="{step * len(columns)}" '
               f'height="{band_bottom - band_top:.1f}" fill="#eef3f8"/>')
    for e in range(-SHOWN, SHOWN + 1, 10):
        out.append(f'<line x1="{left}" y1="{y(e):.1f}" x2="{left + step * len(columns)}" '
                   f'y2="{y(e):.1f}" stroke="{"#888888" if e == 0 else "#e3e3e3"}" '
                   'stroke-width="1"/>')
        text(left - 7, y(e) + 3.5, f"{e:+d}%" if e else "0", anchor="end")
    out.append(f'<text x="{left - 46}" y="{top + height / 2:.1f}" font-size="11" '
               f'text-anchor="middle" fill="#222222" transform="rotate(-90 {left - 46} '
               f'{top + height / 2:.1f})">predicted / measured − 1</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{step * len(columns)}" height="{height}" '
               'fill="none" stroke="#888888" stroke-width="1"/>')
    for c, (label, rows) in enumerate(columns):
        centre = left + step * (c + 0.5)
        hollow = bool(again) and c == len(columns) - 1
        text(centre, top + height + 16, label, anchor="middle",
             extra=' font-style="italic"' if hollow else "")
        if hollow:  # a dashed rule sets the machine's column apart from the simulator's
            out.append(f'<line x1="{centre - step / 2:.1f}" y1="{top}" x2="{centre - step / 2:.1f}" '
                       f'y2="{top + height}" stroke="#888888" stroke-dasharray="4 3"/>')
            text(centre, top + height + 29, "(no model: run vs run)", 9, anchor="middle")
        for i, (backend, world, cap, error) in enumerate(rows):
            if error is None:
                continue
            x = centre + ((i * 37) % 71 - 35) * step / 90
            colour = PALETTE[kinds.index(kind(backend))]
            miss = abs(error) > 15
            if abs(error) > SHOWN:  # clipped: a triangle at the edge, its value beside it
                tip = y(error)
                d = 7 if error > 0 else -7
                out.append(f'<path d="M{x - 4:.1f},{tip + d:.1f} L{x + 4:.1f},{tip + d:.1f} '
                           f'L{x:.1f},{tip:.1f} Z" fill="{colour}" stroke="#222222"/>')
                text(x + 6, tip + d, f"{error:+.0f}%", 9, fill="#222222")
                continue
            fill = "white" if hollow else colour
            out.append(f'<circle cx="{x:.1f}" cy="{y(error):.1f}" r="3.2" fill="{fill}" '
                       f'stroke="{"#222222" if miss else colour}" stroke-width="1">'
                       f'<title>{html.escape(f"{label}: {backend}, {world} ranks, cap {cap}: {error:+.1f}%")}'
                       '</title></circle>')
    legend_x = left
    for k, name in enumerate(kinds):
        out.append(f'<circle cx="{legend_x + 5}" cy="{top + height + 40}" r="4" '
                   f'fill="{PALETTE[k]}"/>')
        text(legend_x + 13, top + height + 44, name, 11, fill="#222222")
        legend_x += 30 + 8 * len(name)
    text(legend_x + 10, top + height + 44, "outlined: outside ±15%", 11, fill="#222222")
    if again:
        text(left, top + height + 62, "hollow: the calibration run's step against the same "
             "options run again after the caps' runs, as if it were the prediction", 11,
             fill="#222222")
    out.append("</svg>")
    return "\n".join(out) + "\n"


AGAIN = "again"  # the cap column of the calibration's options run once more (simulate_validation.sh)
KINDS = ["caps", "unchanged", "paired", "again", "again_sim"]  # the comparisons, in the table's order


def no_tallies():
    """Errors (percent; None for a row whose every prediction failed) of each comparison."""
    return {kind: [] for kind in KINDS}


def print_rows(label, groups, columns, tallies, spread_rows):
    """The file's table, a row per (backend, ranks, cap) but its "again" rows; tallies every
    comparison, and each row's spread in spread_rows. Returns the errors and the failed
    predictions' count."""
    errors, failed = [], 0
    print(f"\n{label}\n")
    print("| backend | ranks | bucket_cap_mb | measured ms | predicted ms | error |")
    print("|---|---|---|---|---|---|")
    for (backend, world, cap), g in groups.items():
        if cap == AGAIN:
            continue
        failed += g["failed"]
        note = f" ({g['failed']} failed)" if g["failed"] else ""
        if not g["predicted"]:
            errors.append(None)
            tallies["paired"].append(None)
            if cap != "default":
                tallies["caps"].append(None)
            columns[-1][1].append((backend, world, cap, None))
            print(f"| {backend} | {world} | {cap} | {cell(g['measured'])} | failed | — |")
            continue
        error = error_of(g["predicted"], g["measured"])
        errors.append(error)
        tallies["paired"].append(paired_error(g["pairs"]))
        if cap != "default":
            tallies["caps"].append(error)
            if g["calibration"]:
                tallies["unchanged"].append(error_of(g["calibration"], g["measured"]))
        if g["spread"]:
            spread_rows.append((100 * statistics.median(g["spread"]), error))
        columns[-1][1].append((backend, world, cap, error))
        print(f"| {backend} | {world} | {cap} | {cell(g['measured'])} | "
              f"{cell(g['predicted'])}{note} | {error:+.0f}% |")
    return errors, failed


def print_again(label, groups, again_column, tallies):
    """The file's "again" rows: the calibration's options run once more after the caps' runs,
    against the calibration's own measured step and against the simulator's prediction."""
    rows = [(k, g) for k, g in groups.items() if k[2] == AGAIN and g["calibration"]]
    if not rows:
        return
    print(f"\n{label}, the calibration's options measured again after the caps' runs\n")
    print("| backend | ranks | calibration run ms | measured again ms | difference | "
          "simulator's error |")
    print("|---|---|---|---|---|---|")
    for (backend, world, _), g in rows:
        drift = error_of(g["calibration"], g["measured"])
        tallies["again"].append(drift)
        again_column.append((backend, world, AGAIN, drift))
        predicted = "failed"
        if g["predicted"]:
            sim = error_of(g["predicted"], g["measured"])
            tallies["again_sim"].append(sim)
            predicted = f"{sim:+.0f}%"
        print(f"| {backend} | {world} | {cell(g['calibration'])} | {cell(g['measured'])} | "
              f"{drift:+.0f}% | {predicted} |")


def comparison_cell(errors):
    if not errors:
        return "—"
    mape, within, _, _ = figures(errors)
    return f"{mape:.1f}% ({within} of {len(errors)})"


def print_comparisons(per_file):
    """What the simulator's error means, per file and over all: its cap rows beside the guess
    that the step does not change with the cap (the calibration run's step: its error is how
    far the caps move the step), every row paired by repeat, and two runs of one job (the
    calibration against its options run again, and the simulator against that run)."""
    if not any(t["unchanged"] or t["again"] for _, t in per_file):
        return
    print("\nWhat bounds the error (mean absolute error, and rows within ±15%):\n")
    print("| rows | the simulator, cap rows | the step guessed unchanged from the calibration "
          "run, same rows | the simulator, every row paired by repeat | the calibration run "
          "against its options run again | the simulator against that run |")
    print("|---|---|---|---|---|---|")
    everything = no_tallies()
    for label, t in per_file:
        print(f"| {label} | " + " | ".join(comparison_cell(t[k]) for k in KINDS) + " |")
        for k in KINDS:
            everything[k] += t[k]
    print("| **all** | " + " | ".join(comparison_cell(everything[k]) for k in KINDS) + " |")


def questions_table(path):
    """simulate_questions.sh's rows as docs/simulate.md's table: per question, the medians of
    its repeats (their range), the prediction's error and, where the rows have it, the error of
    guessing the calibration run's own step (the variant changes nothing)."""
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            q = rows.setdefault(r["question"], {"predicted": [], "measured": [], "calibration": []})
            q["predicted"].append(float(r["predicted_ms"]))
            q["measured"].append(float(r["measured_ms"]))
            if r.get("calibration_ms"):
                q["calibration"].append(float(r["calibration_ms"]))
    lines = ["| variant | predicted | measured | error | the calibration run's step | its error |",
             "|---|---|---|---|---|---|"]
    for question, q in rows.items():
        unchanged = ("— | —" if not q["calibration"] else
                     f"{cell(q['calibration'])} | "
                     f"{error_of(q['calibration'], q['measured']):+.0f}%")
        lines.append(f"| {question} | {cell(q['predicted'])} | {cell(q['measured'])} | "
                     f"{error_of(q['predicted'], q['measured']):+.0f}% | {unchanged} |")
    return "\n".join(lines)


def round_robin_table(path):
    """netns_round_robin.sh's rows as docs/simulate.md's table: per link and cap, one group and
    K groups, measured and predicted (medians of the repeats, their range), and what K groups
    saved, measured against predicted."""
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            g = rows.setdefault((r["link"], r["cap_mb"]), {}).setdefault(
                int(r["groups"]), {"measured": [], "predicted": [], "share": []})
            g["measured"].append(float(r["measured_ms"]))
            if r["predicted_ms"] != "failed":
                g["predicted"].append(float(r["predicted_ms"]))
            g["share"].append(float(r["share"]))
    lines = ["| link | bucket_cap_mb | one collective's share (bench) | groups | measured ms | "
             "predicted ms | error | K groups save: measured | predicted |",
             "|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for (link, cap), by_k in rows.items():
        one = by_k.get(1)
        for k, g in sorted(by_k.items()):
            if not g["predicted"]:
                lines.append(f"| {link} | {cap} | | {k} | {cell(g['measured'])} | failed | — | | |")
                errors.append(None)
                continue
            error = error_of(g["predicted"], g["measured"])
            errors.append(error)
            saved = "| |"
            if k > 1 and one and one["predicted"]:
                saved_m = 100 * (1 - statistics.median(g["measured"]) /
                                 statistics.median(one["measured"]))
                saved_p = 100 * (1 - statistics.median(g["predicted"]) /
                                 statistics.median(one["predicted"]))
                saved = f"| {saved_m:+.0f}% | {saved_p:+.0f}% |"
            lines.append(f"| {link} | {cap} | {statistics.median(g['share']):.2f} | {k} | "
                         f"{cell(g['measured'])} | {cell(g['predicted'])} | {error:+.0f}% {saved}")
    lines.append(f"\n{summary(errors, sum(1 for e in errors if e is None))}")
    return "\n".join(lines)


def row_errors(path):
    """(backend, world, cap) -> the row's error, % (None where every prediction failed); the
    cap rows and the default row, not the "again" rows."""
    return {key: error_of(g["predicted"], g["measured"]) if g["predicted"] else None
            for key, g in rows_of(path).items() if key[2] != "again"}


def shared_and_not(series):
    """A row's error split over several batches (one list per batch, the same rows in each), as
    RMS percentages: the part the batches share, sqrt(mean(x·y)) over every pair of batches (a
    model's error comes back), and the part they do not, sqrt(mean of each row's variance
    across the batches) (the machine's moves: noise independent between batches). Of two
    batches: sqrt(mean(x·y)) and sqrt(mean((x - y)²) / 2)."""
    pairs = [(x, y) for i, a in enumerate(series) for b in series[i + 1:] for x, y in zip(a, b)]
    both = statistics.mean(x * y for x, y in pairs)
    apart = statistics.mean(statistics.variance(row) for row in zip(*series))
    return max(0.0, both) ** 0.5, apart ** 0.5


def outside(error):
    """A row outside ±15% (or one whose every prediction failed)."""
    return error is None or abs(error) > 15


def shown(error):
    return "failed" if error is None else f"{error:+.0f}%"


LEAN = 5  # %: a row beyond it, the same way, in every batch leans (the model's, not the machine's)


def leaning(errors):
    """Every batch's error beyond ±LEAN%, all the same way."""
    return None not in errors and (all(e > LEAN for e in errors)
                                   or all(e < -LEAN for e in errors))


ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth"]


def batches_table(folders, labelled):
    """Batches of the same rows (two or more folders): per file the rows each missed, the rows
    missed in more than one (of two: in both), and how much of a row's error the batches share
    (shared_and_not)."""
    n = len(folders)
    names = " | ".join(ORDINALS[:n])
    more, sharers = ("both", "both") if n == 2 else ("in two or more", "the batches")
    lines = [f"| rows | count | mean absolute error, {names} | outside ±15%, {names} | {more} | "
             f"a row's error: the part {sharers} share (RMS) | the part they do not |",
             "|---" * (5 + 2 * n) + "|"]
    misses, leans, all_series = [], [], [[] for _ in folders]
    for arg in labelled:
        label, name = arg.split("=", 1)
        errors = [row_errors(f"{folder}/{name}") for folder in folders]
        keys = [k for k in errors[0] if all(k in e for e in errors[1:])]
        known = [k for k in keys if all(e[k] is not None for e in errors)]
        series = [[e[k] for k in known] for e in errors]
        for whole, part in zip(all_series, series):
            whole += part
        rows = [[e[k] for e in errors] for k in keys]
        lines.append(f"| {label} | {len(keys)} | "
                     + " | ".join(f"{statistics.mean(map(abs, x)):.1f}%" for x in series) + " | "
                     + " | ".join(str(sum(outside(r[i]) for r in rows)) for i in range(n))
                     + f" | {sum(sum(map(outside, r)) > 1 for r in rows)} | "
                     + "{:.1f}% | {:.1f}% |".format(*shared_and_not(series)))
        misses += [(label, k, r) for k, r in zip(keys, rows) if any(map(outside, r))]
        leans += [(label, k, r) for k, r in zip(keys, rows) if leaning(r)]
    lines.append(f"| **all** | {len(all_series[0])} | "
                 + " | ".join(f"{statistics.mean(map(abs, x)):.1f}%" for x in all_series) + " | "
                 + " | ".join(str(sum(outside(m[2][i]) for m in misses)) for i in range(n))
                 + f" | {sum(sum(map(outside, m[2])) > 1 for m in misses)} | "
                 + "{:.1f}% | {:.1f}% |".format(*shared_and_not(all_series)))
    lines += ["", f"| rows | backend | ranks | bucket_cap_mb | error, {names} |",
              "|---" * (4 + n) + "|"]
    for label, (backend, world, cap), r in misses:
        lines.append(f"| {label} | {backend} | {world} | {cap} | "
                     + " | ".join(map(shown, r)) + " |")
    lines += ["", f"Leaning one way by more than {LEAN:.0f}% in every batch (the model's error, "
              "where it is largest):", "",
              f"| rows | backend | ranks | bucket_cap_mb | error, {names} |",
              "|---" * (4 + n) + "|"]
    for label, (backend, world, cap), r in leans:
        lines.append(f"| {label} | {backend} | {world} | {cap} | "
                     + " | ".join(map(shown, r)) + " |")
    return "\n".join(lines)


def main(args):
    if args[:1] == ["--batches"]:
        folders = [a for a in args[1:] if "=" not in a]
        labelled = args[1 + len(folders):]
        if 2 <= len(folders) <= len(ORDINALS) and labelled and all("=" in a for a in labelled):
            print(batches_table(folders, labelled))
            return
        sys.exit(__doc__)
    if args[:1] == ["--questions"] and len(args) == 2:
        print(questions_table(args[1]))
        return
    if args[:1] == ["--round-robin"] and len(args) == 2:
        print(round_robin_table(args[1]))
        return
    folders = None  # --pool: each LABEL=name.tsv is that file in every folder, pooled
    if args[:1] == ["--pool"]:
        folders = []
        for a in args[1:]:
            if "=" in a or a.startswith("--"):
                break
            folders.append(a)
        args = args[1 + len(folders):]
        if len(folders) < 2:
            sys.exit(__doc__)
    svg_path = None
    if args[:1] == ["--svg"] and len(args) > 1:
        svg_path, args = args[1], args[2:]
    if not args or any("=" not in a for a in args):
        sys.exit(__doc__)
    everything, per_file, failed_all, columns, again_column = [], [], 0, [], []
    compared = []  # (label, that file's tallies)
    spread_rows = []  # (the median of a row's calibration spreads, %; its error)
    for arg in args:
        label, path = arg.split("=", 1)
        columns.append((label, []))
        groups = rows_of(*[f"{d}/{path}" for d in folders] if folders else [path])
        tallies = no_tallies()
        errors, failed = print_rows(label, groups, columns, tallies, spread_rows)
        print(f"\n{label}: {summary(errors, failed)}")
        print_again(label, groups, again_column, tallies)
        compared.append((label, tallies))
        everything += errors
        failed_all += failed
        if errors:
            per_file.append(summary_row(label, errors))
    print(f"\nall: {summary(everything, failed_all)}\n")
    print("| rows | count | mean absolute error | within ±15% | worst | mean signed error |")
    print("|---|---|---|---|---|---|")
    print("\n".join(per_file))
    if everything:
        print(summary_row("**all**", everything))
    print_comparisons(compared)
    if spread_rows:
        print("\nBy the spread of the calibration runs' steps (each row's median over its repeats; "
              "simulate's \"steps spread\"):\n")
        print("\n".join(spread_table(spread_rows)))
    if svg_path:
        within = figures(everything)[1] if everything else 0
        with open(svg_path, "w") as f:
            f.write(strip_svg(columns, len(everything), within, again_column))


if __name__ == "__main__":
    main(sys.argv[1:])
