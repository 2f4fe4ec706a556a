#!/usr/bin/env python3
"""docs/simulate.md's validation tables from the rows of tools/scripts/simulate_validation.sh.

    simulate_table.py LABEL=rows.tsv [LABEL=rows.tsv ...]

Per file: one markdown row per (backend, ranks, bucket cap), the medians over the repeats with
their range, and the error of the predicted median against the measured one; then the file's
mean absolute error; at the end one summary table, a row per file and one over all rows. A
prediction that failed (predicted_ms "failed") is left out of its row's median and counted: a
row whose every prediction failed has no error and counts as outside ±15%. Standard library only.
"""
import csv
import statistics
import sys


def rows_of(path):
    groups = {}
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            key = (r["backend"], r["world"], r["cap_mb"])
            g = groups.setdefault(key, {"measured": [], "predicted": [], "failed": 0})
            g["measured"].append(float(r["measured_ms"]))
            if r["predicted_ms"] == "failed":
                g["failed"] += 1
            else:
                g["predicted"].append(float(r["predicted_ms"]))
    return groups


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


def main(args):
    if not args or any("=" not in a for a in args):
        sys.exit(__doc__)
    everything, per_file, failed_all = [], [], 0
    for arg in args:
        label, path = arg.split("=", 1)
        errors, failed = [], 0
        print(f"\n{label}\n")
        print("| backend | ranks | bucket_cap_mb | measured ms | predicted ms | error |")
        print("|---|---|---|---|---|---|")
        for (backend, world, cap), g in rows_of(path).items():
            failed += g["failed"]
            note = f" ({g['failed']} failed)" if g["failed"] else ""
            if not g["predicted"]:
                errors.append(None)
                print(f"| {backend} | {world} | {cap} | {cell(g['measured'])} | failed | — |")
                continue
            m, p = statistics.median(g["measured"]), statistics.median(g["predicted"])
            error = 100 * (p / m - 1)
            errors.append(error)
            print(f"| {backend} | {world} | {cap} | {cell(g['measured'])} | "
                  f"{cell(g['predicted'])}{note} | {error:+.0f}% |")
        print(f"\n{label}: {summary(errors, failed)}")
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


if __name__ == "__main__":
    main(sys.argv[1:])
