#!/usr/bin/env python3
"""tierd's Python API side by side with libCacheSim's (the `libcachesim` PyPI
package), in one Python process: the same traces, page streams and cache
sizes as compare.py (CloudPhysics cloudPhysicsIO.vscsi expanded into 4 KiB
pages by tierd's reader; CloudPhysics w106's block numbers as they are; 1 %,
5 %, 10 % of the distinct pages), miss ratios and requests per second.

- tierd: ``tierd.cache_replay(pages, policy, size_pages)`` on the NumPy page
  array (the Rust page caches the simulator's block caches evict with);
- libcachesim: ``Cache.process_trace(TraceReader(oracleGeneral file))``, as
  compare.py runs it;
- and, for scale, ``tierd.simulate`` of the CloudPhysics trace itself: a
  whole tiered simulation (device timing, admission, write-back) with a
  4 KiB-block cache of the same size, requests (not pages) per second.

Throughput is the best of ``--repeat`` runs, wall clock and CPU time
(``time.process_time`` of this process for both). Run from the repository
root with the package installed (``pip install ./python libcachesim``):

    python bench/libcachesim/python_api.py --markdown
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402  (the CLI comparison: streams, libCacheSim runs, machine)

import tierd  # noqa: E402


def best_of(repeat, run):
    best = best_cpu = 0.0
    result = None
    for _ in range(repeat):
        cpu = time.process_time()
        start = time.perf_counter()
        result, count = run()
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        best = max(best, count / wall)
        best_cpu = max(best_cpu, count / max(cpu, 1e-9))
    return result, best, best_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=compare.SHARED_TRACES)
    parser.add_argument("--fractions", default="0.01,0.05,0.10")
    parser.add_argument("--policies", default="lru,fifo,arc,s3fifo")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--no-build", action="store_true", help="use the already built page_stream example")
    arguments = parser.parse_args()
    if not arguments.no_build:
        compare.build_examples()
    fractions = [float(value) for value in arguments.fractions.split(",")]
    policies = arguments.policies.split(",")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=compare.REPOSITORY).stdout.strip()
    print(f"machine: {compare.machine()}, tierd {tierd.__version__} at {commit}", file=sys.stderr)
    rows = []
    simulated = []
    with tempfile.TemporaryDirectory(prefix="tierd-python-api-") as work:
        work = Path(work)
        traces = {
            "cloudphysics": (arguments.traces / "cloudphysics" / "cloudPhysicsIO.vscsi", compare.cloudphysics_stream),
            "w106": (arguments.traces / "cloudphysics" / "w106.trace.xz", compare.w106_stream),
        }
        for name, (trace, make_stream) in traces.items():
            stream = work / f"{name}.u64"
            oracle = work / f"{name}.oracleGeneral.bin"
            make_stream(trace, stream)
            words = np.fromfile(stream, dtype="<u8")
            pages = words & ~compare.WRITE_BIT
            compare.write_oracle_general(pages, oracle)
            requests = len(pages)
            distinct = len(np.unique(pages))
            print(f"{name}: {requests} page accesses, {distinct} distinct pages", file=sys.stderr)
            for fraction in fractions:
                size_pages = max(1, int(distinct * fraction))
                hashpower = max(10, math.ceil(math.log2(2 * size_pages)))
                for policy in policies:
                    ours, rate, cpu_rate = best_of(
                        arguments.repeat,
                        lambda: (tierd.cache_replay(pages, policy, size_pages), requests))
                    lcs_miss, lcs_rate, lcs_cpu_rate = compare.run_libcachesim(
                        oracle, requests, policy, size_pages, arguments.repeat, hashpower)
                    rows.append((name, policy, fraction, size_pages, ours["miss_ratio"], lcs_miss,
                                 rate, lcs_rate, cpu_rate, lcs_cpu_rate))
                    print(f"  {policy:7} {size_pages:>7} pages: miss {ours['miss_ratio']:.6f} vs {lcs_miss:.6f}; "
                          f"CPU {cpu_rate / 1e6:.1f} vs {lcs_cpu_rate / 1e6:.1f} M req/CPU-s", file=sys.stderr)
                if name == "cloudphysics":
                    # The whole simulator through the API, at the same size.
                    for policy in ("lru", "none"):
                        report, rate, cpu_rate = best_of(1, lambda: (
                            tierd.simulate_report(trace, tiers="ssd-mem", policies=[policy],
                                                  fast_bytes=[str(size_pages * 4096)], cache_block="4KiB",
                                                  jobs=1),
                            113_872))
                        run = report["runs"][0]
                        hit = run["cache"]["hit_ratio"] if run.get("cache") else run["fast_io_share"]
                        simulated.append((policy, fraction, size_pages, 1 - hit, run["avg_response_us"],
                                          run["requests"], rate, cpu_rate))
    if arguments.markdown:
        print("| trace | policy | size (pages, % of distinct) | tierd miss ratio | libcachesim miss ratio | "
              "difference (pp) | tierd.cache_replay M req/CPU-s | libcachesim M req/CPU-s | ratio (CPU) | "
              "tierd M req/s wall | libcachesim M req/s wall | ratio (wall) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (name, policy, fraction, size, miss, lcs_miss, rate, lcs_rate, cpu, lcs_cpu) in rows:
            print(f"| {name} | {policy} | {size} ({fraction:.0%}) | {miss:.6f} | {lcs_miss:.6f} | "
                  f"{(miss - lcs_miss) * 100:+.4f} | {cpu / 1e6:.1f} | {lcs_cpu / 1e6:.1f} | {cpu / lcs_cpu:.1f}× | "
                  f"{rate / 1e6:.1f} | {lcs_rate / 1e6:.1f} | {rate / lcs_rate:.1f}× |")
        print()
        print("| tierd.simulate, cloudPhysicsIO.vscsi on ssd-mem | fast tier (pages, %) | miss ratio (4 KiB block cache; none: share of IO not on the fast tier) "
              "| mean response (µs) | requests | k requests/CPU-s | k requests/s wall |")
        print("|---|---|---|---|---|---|---|")
        for (policy, fraction, size, miss, response, count, rate, cpu) in simulated:
            print(f"| {policy} | {size} ({fraction:.0%}) | {miss:.6f} | {response:.1f} | {count} | "
                  f"{cpu / 1e3:.0f} | {rate / 1e3:.0f} |")
    else:
        for row in rows:
            print(row)
        for row in simulated:
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
