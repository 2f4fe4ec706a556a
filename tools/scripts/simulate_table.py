#!/usr/bin/env python3
"""docs/simulate.md's validation tables from the rows of tools/scripts/simulate_validation.sh.

    simulate_table.py LABEL=rows.tsv [LABEL=rows.tsv ...]

Per file: one markdown row per (backend, ranks, bucket cap), the medians over the repeats with
their range, and the error of the predicted median against the measured one; then the file's
mean absolute error; at the end one summary table, a row per file and one over all rows.
Standard library only.
"""
import csv
import statistics
import sys


def rows_of(path):
    groups = {}
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            key = (r["backend"], r["world"], r["cap_mb"])
            g = groups.setdefault(key, {"measured": [], "predicted": []})
            g["measured"].append(float(r["measured_ms"]))
            g["predicted"].append(float(r["predicted_ms"]))
    return groups


def cell(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def figures(errors):
    mape = sum(abs(e) for e in errors) / len(errors)
    within = sum(1 for e in errors if abs(e) <= 15)
    return mape, within, max(errors, key=abs), sum(errors) / len(errors)


def summary_row(label, errors):
    mape, within, worst, signed = figures(errors)
    return (f"| {label} | {len(errors)} | {mape:.1f}% | {within} of {len(errors)} | "
            f"{worst:+.0f}% | {signed:+.1f}% |")


def summary(errors):
    if not errors:
        return "no rows"
    mape = sum(abs(e) for e in errors) / len(errors)
    within = sum(1 for e in errors if abs(e) <= 15)
    worst = max(errors, key=abs)
    return (f"mean absolute error {mape:.1f}% over {len(errors)} rows; {within} within ±15%, "
            f"the worst {worst:+.0f}%; mean signed error {sum(errors) / len(errors):+.1f}%")


def main(args):
    if not args or any("=" not in a for a in args):
        sys.exit(__doc__)
    everything, per_file = [], []
    for arg in args:
        label, path = arg.split("=", 1)
        errors = []
        print(f"\n{label}\n")
        print("| backend | ranks | bucket_cap_mb | measured ms | predicted ms | error |")
        print("|---|---|---|---|---|---|")
        for (backend, world, cap), g in rows_of(path).items():
            m, p = statistics.median(g["measured"]), statistics.median(g["predicted"])
            error = 100 * (p / m - 1)
            errors.append(error)
            print(f"| {backend} | {world} | {cap} | {cell(g['measured'])} | "
                  f"{cell(g['predicted'])} | {error:+.0f}% |")
        print(f"\n{label}: {summary(errors)}")
        everything += errors
        if errors:
            per_file.append(summary_row(label, errors))
    print(f"\nall: {summary(everything)}\n")
    print("| rows | count | mean absolute error | within ±15% | worst | mean signed error |")
    print("|---|---|---|---|---|---|")
    print("\n".join(per_file))
    if everything:
        print(summary_row("**all**", everything))


if __name__ == "__main__":
    main(sys.argv[1:])
