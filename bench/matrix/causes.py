#!/usr/bin/env python3
"""Every policy's standing on an evaluation grid, and every cell where the
candidate (`adaptive`) misses a bar, sorted into causes.

Usage: bench/matrix/causes.py DIR/matrix.json   (from `tierd sim --matrix
FILE.toml --out DIR`); prints markdown (EVIDENCE.md, "Issue 14: `adaptive`
on the grid").

Causes, the first rule that applies (each from the cell's runs and the
candidate's rule history, `cache.adaptive.epochs_by_rule`):
  A  a tiering policy (otf-ast, atsmf) beats every cache and none by 5 %
  B  under 25,000 requests and at most 4 epochs (too short to learn)
  D  only the p99 misses, on ssd-mem
  F  none is the best (caching costs here)
  C  a cache other than ARC beats ARC by 5 % (the eviction order)
  E  ARC is within 5 % of the best and the candidate ran `always` in under
     half its epochs (admission too cautious)
  G  the rest
"""
import json
import math
import sys

TIERING = ("otf-ast", "atsmf")
CACHES = ("fifo", "lru", "arc", "s3fifo")
RULES = ("always", "frequency:2", "frequency:4", "frequency:8", "off")


TITLES = {
    "A": "a tiering policy beats every cache and none by 5 %",
    "B": "too short to learn (first epoch uncached)",
    "C": "eviction order (ARC loses to {rival} here)",
    "D": "p99 only (ssd-mem): a partial-block write miss waits for a 64 KiB merge read "
         "from the SSD where none writes 4 KiB, and fills add SSD reads beside the users' "
         "own; the mean gains, the tail grows",
    "E": "admission too cautious (ARC with always is within 5%)",
    "F": "caches cost here, and adaptive paid for trials",
    "G": "ARC with always is within 5 % of the best, adaptive ran mostly always, and the "
         "uncached first epoch and the switches cost the rest",
}


def workload_name(cell):
    return cell["workload"].removeprefix("../shared/traces/")


def speed_label(cell):
    return f"{cell['speed']} (x{cell['speed_factor']:g})"


def runs_by_policy(cell):
    return {run["policy"]: run for run in cell["runs"]}


def cause(cell, runs, candidate):
    verdict = cell["verdict"]
    means = {p: r["avg_response_us"] for p, r in runs.items() if p != candidate}
    best = min(means.values())
    others = [means[p] for p in means if p not in TIERING]
    tiering = [means[p] for p in TIERING if p in means]
    if tiering and others and min(tiering) * 1.05 < min(others):
        return "A", None
    adaptive = runs[candidate]["cache"]["adaptive"]
    if runs[candidate]["requests"] < 25_000 and adaptive["epochs"] <= 4:
        return "B", None
    misses = verdict["candidate"]["misses"]
    if misses == ["p99"] and cell["stack"] == "ssd-mem":
        return "D", None
    if means.get("none") == best:
        return "F", None
    if "arc" in means:
        rival = min((p for p in CACHES if p != "arc" and p in means), key=means.get)
        if means[rival] * 1.05 < means["arc"]:
            return "C", rival
    epochs = max(adaptive["epochs"], 1)
    if "arc" in means and means["arc"] <= 1.05 * best and adaptive["epochs_by_rule"]["always"] < epochs / 2:
        return "E", None
    return "G", None


def main(path):
    grid = json.load(open(path))
    candidate = grid["candidate"]
    policies = grid["policies"]
    cells = [c for c in grid["cells"] if all(p in runs_by_policy(c) for p in policies)]
    print(f"cells with every policy: {len(cells)} of {len(grid['cells'])}\n")
    # Every policy against the cell's best other policy (the fixed ones).
    fixed = [p for p in policies if p != candidate]
    print("| stack | " + " | ".join(policies) + " |")
    print("|---|" + "---|" * len(policies))
    for stack in sorted({c["stack"] for c in cells}):
        ratios = {p: [] for p in policies}
        for cell in (c for c in cells if c["stack"] == stack):
            runs = runs_by_policy(cell)
            for p in policies:
                best = min(runs[q]["avg_response_us"] for q in fixed if q != p)
                ratios[p].append(runs[p]["avg_response_us"] / best)
        geo = {p: math.exp(sum(map(math.log, r)) / len(r)) for p, r in ratios.items()}
        print(f"| {stack}: geo-mean | " + " | ".join(f"{geo[p]:.3f}" for p in policies) + " |")
        print(f"| {stack}: cells ≤ 1.05 (of {len(ratios[candidate])}) | "
              + " | ".join(str(sum(x <= 1.05 for x in ratios[p])) for p in policies) + " |")
        print(f"| {stack}: worst | " + " | ".join(f"{max(ratios[p]):.2f}" for p in policies) + " |")
    print()
    # Cells missing a bar, by cause.
    by_cause = {}
    for cell in cells:
        if not cell["verdict"]["candidate"]["misses"]:
            continue
        runs = runs_by_policy(cell)
        key = cause(cell, runs, candidate)
        by_cause.setdefault(key, []).append(cell)
    total = sum(len(v) for v in by_cause.values())
    print(f"cells missing a bar: {total}; by cause: "
          + ", ".join(f"{k[0]}{' (' + k[1] + ')' if k[1] else ''} {len(v)}" for k, v in sorted(by_cause.items())) + "\n")
    for (letter, rival), group in sorted(by_cause.items()):
        title = f"**{letter}: {TITLES[letter].format(rival=rival)}** — {len(group)} cells"
        print(title + "\n")
        print("| workload | stack | fast | speed | best | adaptive ÷ best: mean / p99 / iops | rules in force (epochs) |")
        print("|---|---|---|---|---|---|---|")
        for cell in group:
            verdict = cell["verdict"]
            ratios = verdict["candidate"]
            iops = f"{ratios['iops_ratio']:.2f}" if cell["stack"] != "ssd-mem" else "–"
            rules = runs_by_policy(cell)[candidate]["cache"]["adaptive"]["epochs_by_rule"]
            history = ", ".join(f"{r} {rules[r]}" for r in RULES if rules.get(r))
            print(f"| {workload_name(cell)} | {cell['stack']} | {cell['fast_size']} | {speed_label(cell)} | "
                  f"{verdict['best_policy']} | {ratios['mean_ratio']:.2f} / {ratios['p99_ratio']:.2f} / {iops} | {history} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench/matrix/causes.py DIR/matrix.json")
    main(sys.argv[1])
