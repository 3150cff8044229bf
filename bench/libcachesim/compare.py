#!/usr/bin/env python3
"""tierd's page caches side by side with libCacheSim (the `libcachesim` PyPI
package): miss ratios and replay throughput on the same 4 KiB page streams.

For each trace the script builds one page stream and hands the identical
stream to both tools:

* CloudPhysics (`cloudPhysicsIO.vscsi`): every request expanded into each
  4 KiB page it touches, by tierd's own reader and expansion
  (`examples/page_stream.rs`, `tierd_policy::cache::pages_touched`).
* w106 (`w106.trace.xz`): its little-endian u32 block numbers, one 4 KiB
  page per reference, as they are.

tierd reads the stream as little-endian u64 words (bit 63 = write); libCacheSim
reads the same stream converted to its `oracleGeneral` binary format (24-byte
records: u32 time, u64 object id, u32 object size, i64 next access). Every
object has size 1 and cache sizes are given in pages, so both count pages;
with 4096-byte objects libCacheSim's ARC would adapt p by 1 byte per ghost hit
instead of one page (p and its increments are in bytes there).

Cache sizes are fractions of each stream's distinct pages (default 1%, 5%,
10%). Throughput is requests per second of the whole replay including reading
the file: tierd's `cache_replay` example times itself; libCacheSim's
`process_trace` is timed around the call. Both are measured in wall-clock time
and in CPU time (tierd: the replaying thread's schedstat; libCacheSim: the
Python process's CPU time, `time.process_time`, which covers the C call);
CPU time is the fairer figure on a shared machine, where wall-clock includes
time other processes held the core. Each figure is the best of `--repeat`
runs.

Run from the repository root:

    python3 -m venv ../venv-libcachesim
    ../venv-libcachesim/bin/pip install libcachesim numpy
    ../venv-libcachesim/bin/python bench/libcachesim/compare.py

Exit status 1 when an LRU, FIFO or ARC miss ratio differs by more than
`--tolerance-pp` percentage points (default 0.5).
"""

from __future__ import annotations

import argparse
import lzma
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import libcachesim as lcs
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit("libcachesim is not installed: pip install libcachesim numpy (see bench/libcachesim/README.md)")

REPOSITORY = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPOSITORY.parent / "shared" / "traces"
WRITE_BIT = np.uint64(1 << 63)
POLICIES = ["lru", "fifo", "arc", "s3fifo"]
LIBCACHESIM_CLASSES = {"lru": "LRU", "fifo": "FIFO", "arc": "ARC", "s3fifo": "S3FIFO"}
# Policies whose miss ratios must agree within the tolerance (S3-FIFO is
# reported, and its differences explained in BENCHMARKS.md).
CHECKED = {"lru", "fifo", "arc"}
ORACLE_GENERAL = np.dtype(
    [("time", "<u4"), ("object_id", "<u8"), ("object_size", "<u4"), ("next_access", "<i8")]
)
assert ORACLE_GENERAL.itemsize == 24


def cargo_target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPOSITORY / "target"))


def build_examples() -> None:
    subprocess.run(
        ["cargo", "build", "--release", "-p", "tierd-policy", "--example", "cache_replay", "--example", "page_stream"],
        cwd=REPOSITORY,
        check=True,
    )


def example(name: str) -> Path:
    return cargo_target_dir() / "release" / "examples" / name


def cloudphysics_stream(trace: Path, output: Path) -> None:
    """Expands the trace through tierd's reader (same pages tierd's tests use)."""
    result = subprocess.run(
        [str(example("page_stream")), str(trace), str(output)], check=True, capture_output=True, text=True
    )
    print(f"  page_stream: {result.stdout.strip()}", file=sys.stderr)


def w106_stream(trace: Path, output: Path) -> None:
    blocks = np.frombuffer(lzma.decompress(trace.read_bytes()), dtype="<u4")
    blocks.astype("<u8").tofile(output)


def write_oracle_general(pages: np.ndarray, output: Path) -> None:
    records = np.zeros(len(pages), dtype=ORACLE_GENERAL)
    records["object_id"] = pages
    records["object_size"] = 1
    records["next_access"] = -1
    records.tofile(output)


def run_tierd(stream: Path, policy: str, size_pages: int, repeat: int) -> tuple[float, float, float]:
    """(miss ratio, best requests per wall second, best per CPU second) from
    the cache_replay example."""
    best = best_cpu = 0.0
    miss_ratio = math.nan
    for _ in range(repeat):
        line = subprocess.run(
            [str(example("cache_replay")), str(stream), policy, str(size_pages)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        miss_ratio = 1 - int(fields["hits"]) / int(fields["requests"])
        best = max(best, float(fields["throughput_req_per_s"]))
        best_cpu = max(best_cpu, float(fields.get("throughput_req_per_cpu_s", "nan")))
    return miss_ratio, best, best_cpu


def run_libcachesim(
    oracle: Path, requests: int, policy: str, size_pages: int, repeat: int, hashpower: int
) -> tuple[float, float, float]:
    """(miss ratio, best requests per wall second, best per CPU second) from
    libCacheSim's process_trace."""
    reader = lcs.TraceReader(str(oracle), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache_class = getattr(lcs, LIBCACHESIM_CLASSES[policy])
    best = best_cpu = 0.0
    miss_ratio = math.nan
    for _ in range(repeat):
        cache = cache_class(size_pages, hashpower=hashpower)
        cpu_start = time.process_time()
        start = time.perf_counter()
        miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
        elapsed = time.perf_counter() - start
        cpu_elapsed = time.process_time() - cpu_start
        best = max(best, requests / elapsed)
        best_cpu = max(best_cpu, requests / max(cpu_elapsed, 1e-9))
    return miss_ratio, best, best_cpu


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        memory_kib = next(
            int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
        )
        memory = f"{memory_kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "unknown memory"
    return f"{os.cpu_count()} CPUs ({model}), {memory}, {platform.system()} {platform.release()}, Python {platform.python_version()}, libcachesim {lcs.__version__}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=SHARED_TRACES, help="the shared traces folder")
    parser.add_argument("--work-dir", type=Path, help="where the page streams go (default: a temporary folder)")
    parser.add_argument("--fractions", default="0.01,0.05,0.10", help="cache sizes as fractions of distinct pages")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--only", choices=["cloudphysics", "w106"], help="run one trace")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best throughput is kept")
    parser.add_argument(
        "--hashpower",
        default="auto",
        help="libCacheSim's initial hash table size as a power of two; 'auto' (default) = the smallest power of "
        "two holding twice the cache size (resident pages plus ghosts); the package's own default, 24 "
        "(16 Mi buckets), makes it several times slower on these small caches",
    )
    parser.add_argument("--tolerance-pp", type=float, default=0.5)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--no-build", action="store_true", help="use the already built examples")
    arguments = parser.parse_args()

    if not arguments.no_build:
        build_examples()
    fractions = [float(value) for value in arguments.fractions.split(",")]
    policies = arguments.policies.split(",")
    traces = {
        "cloudphysics": (arguments.traces / "cloudphysics" / "cloudPhysicsIO.vscsi", cloudphysics_stream),
        "w106": (arguments.traces / "cloudphysics" / "w106.trace.xz", w106_stream),
    }
    if arguments.only:
        traces = {arguments.only: traces[arguments.only]}

    temporary = None
    work_dir = arguments.work_dir
    if work_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="tierd-libcachesim-")
        work_dir = Path(temporary.name)
    work_dir.mkdir(parents=True, exist_ok=True)

    print(f"machine: {machine()}", file=sys.stderr)
    rows = []
    failures = []
    for name, (trace, make_stream) in traces.items():
        if not trace.is_file():
            print(f"SKIP {name}: {trace} not found", file=sys.stderr)
            continue
        stream = work_dir / f"{name}.u64"
        oracle = work_dir / f"{name}.oracleGeneral.bin"
        print(f"{name}: writing {stream} and {oracle}", file=sys.stderr)
        make_stream(trace, stream)
        pages = np.fromfile(stream, dtype="<u8") & ~WRITE_BIT
        write_oracle_general(pages, oracle)
        requests = len(pages)
        distinct = len(np.unique(pages))
        print(f"  {requests} page accesses, {distinct} distinct pages", file=sys.stderr)
        for fraction in fractions:
            size_pages = max(1, int(distinct * fraction))
            for policy in policies:
                if arguments.hashpower == "auto":
                    entries = 2 * size_pages  # resident pages plus ghosts
                    hashpower = max(10, math.ceil(math.log2(entries)))
                else:
                    hashpower = int(arguments.hashpower)
                tierd_miss, tierd_rate, tierd_cpu_rate = run_tierd(stream, policy, size_pages, arguments.repeat)
                lcs_miss, lcs_rate, lcs_cpu_rate = run_libcachesim(
                    oracle, requests, policy, size_pages, arguments.repeat, hashpower
                )
                # Compare whole miss counts (libCacheSim reports a ratio of them).
                tierd_misses = round(tierd_miss * requests)
                lcs_misses = round(lcs_miss * requests)
                difference_pp = (tierd_misses - lcs_misses) / requests * 100
                rows.append(
                    (name, policy, fraction, size_pages, tierd_miss, lcs_miss, difference_pp,
                     tierd_rate, lcs_rate, tierd_cpu_rate, lcs_cpu_rate)
                )
                print(
                    f"  {policy:7} {size_pages:>7} pages: miss tierd {tierd_miss:.6f} libcachesim {lcs_miss:.6f} "
                    f"({difference_pp:+.4f} pp); wall {tierd_rate / 1e6:.1f} vs {lcs_rate / 1e6:.1f} M req/s, "
                    f"CPU {tierd_cpu_rate / 1e6:.1f} vs {lcs_cpu_rate / 1e6:.1f} M req/CPU-s",
                    file=sys.stderr,
                )
                if policy in CHECKED and abs(difference_pp) > arguments.tolerance_pp:
                    failures.append(f"{name} {policy} {size_pages}: {difference_pp:+.4f} pp")

    if arguments.markdown:
        print(
            "| trace | policy | size (pages, % of distinct) | tierd miss ratio | libcachesim miss ratio | difference (pp) "
            "| tierd M req/CPU-s | libcachesim M req/CPU-s | ratio (CPU) | tierd M req/s wall | libcachesim M req/s wall | ratio (wall) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (name, policy, fraction, size_pages, tierd_miss, lcs_miss, difference_pp,
             tierd_rate, lcs_rate, tierd_cpu_rate, lcs_cpu_rate) in rows:
            print(
                f"| {name} | {policy} | {size_pages} ({fraction:.0%}) | {tierd_miss:.6f} | {lcs_miss:.6f} | "
                f"{difference_pp:+.4f} | {tierd_cpu_rate / 1e6:.1f} | {lcs_cpu_rate / 1e6:.1f} | "
                f"{tierd_cpu_rate / lcs_cpu_rate:.1f}× | {tierd_rate / 1e6:.1f} | {lcs_rate / 1e6:.1f} | "
                f"{tierd_rate / lcs_rate:.1f}× |"
            )
    else:
        print(
            f"{'trace':13} {'policy':7} {'size':>8} {'tierd':>9} {'lcs':>9} {'diff pp':>9} "
            f"{'tierd M/cpu-s':>13} {'lcs M/cpu-s':>11} {'ratio':>6} {'tierd M/s':>10} {'lcs M/s':>8} {'ratio':>6}"
        )
        for (name, policy, fraction, size_pages, tierd_miss, lcs_miss, difference_pp,
             tierd_rate, lcs_rate, tierd_cpu_rate, lcs_cpu_rate) in rows:
            print(
                f"{name:13} {policy:7} {size_pages:>8} {tierd_miss:9.6f} {lcs_miss:9.6f} {difference_pp:+9.4f} "
                f"{tierd_cpu_rate / 1e6:13.1f} {lcs_cpu_rate / 1e6:11.1f} {tierd_cpu_rate / lcs_cpu_rate:6.1f} "
                f"{tierd_rate / 1e6:10.1f} {lcs_rate / 1e6:8.1f} {tierd_rate / lcs_rate:6.1f}"
            )
    if temporary is not None:
        temporary.cleanup()
    if failures:
        print("miss ratios differ by more than the tolerance: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
