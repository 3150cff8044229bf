"""tierd's trace lab from Python.

A thin layer over the Rust module ``tierd._native``, which calls the same
functions as the ``tierd`` command (crates/tierd-lab): the numbers are the
CLI's, and errors carry the CLI's messages.

- :func:`read_trace` streams a trace's requests in chunks of NumPy arrays
  (every format ``tierd trace formats`` lists; .gz/.bz2/.xz/.zst too);
- :func:`trace_stats` and :func:`analyze` return what ``tierd trace stats
  --json`` and ``tierd trace analyze --json`` print;
- :func:`simulate` returns the runs of ``tierd sim --json`` as records (a
  pandas DataFrame when pandas is installed);
- :func:`sweep` runs a grid of simulations locally or on Ray (``tierd sweep``).

See docs/python.md for examples.
"""

import json
import os
import warnings

from . import _native
from ._native import TierdError, TraceError

__version__ = _native.__version__

__all__ = [
    "TierdError",
    "TraceError",
    "SweepFailed",
    "read_trace",
    "trace_stats",
    "analyze",
    "simulate",
    "simulate_report",
    "cache_replay",
    "sweep",
    "sweep_report",
]


def _warn(lines):
    for line in lines:
        warnings.warn(line, stacklevel=3)


def read_trace(path, format=None, volume=None, *, chunk_size=65536, skip_bad_lines=False, as_frame=False):
    """Reads a trace in chunks.

    Returns an iterator of dicts of NumPy arrays, one array per column:
    ``time_ns`` (uint64, the trace's own clock), ``offset`` and ``length``
    (uint64, bytes), ``is_write`` (bool), ``volume`` (uint32, an index into
    the iterator's ``volumes`` list) and ``response_ns`` (int64, -1 where the
    trace records none). ``format`` is detected when omitted; ``volume``
    keeps one volume of a multi-volume trace. With ``as_frame=True`` the
    whole trace comes back as one pandas DataFrame (for small traces), its
    volume names in ``df.attrs["volumes"]``.

    Raises :class:`TraceError` with the CLI's message (file, line, what the
    format expects) on a malformed trace.
    """
    chunks = _native.open_chunks(os.fspath(path), format, volume, skip_bad_lines, chunk_size)
    if not as_frame:
        return chunks
    import numpy as np
    import pandas as pd

    parts = list(chunks)
    names = ["time_ns", "offset", "length", "is_write", "volume", "response_ns"]
    if parts:
        columns = {name: np.concatenate([part[name] for part in parts]) for name in names}
    else:
        empty = {"is_write": bool, "volume": np.uint32, "response_ns": np.int64}
        columns = {name: np.array([], dtype=empty.get(name, np.uint64)) for name in names}
    frame = pd.DataFrame(columns)
    frame.attrs["volumes"] = chunks.volumes
    frame.attrs["format"] = chunks.format
    return frame


def trace_stats(path, format=None, volume=None, *, skip_bad_lines=False, period="60s"):
    """What ``tierd trace stats --json`` prints, as a dict."""
    text, notes = _native.trace_stats(os.fspath(path), format, volume, skip_bad_lines, period)
    _warn(notes)
    return json.loads(text)


def analyze(path=None, format=None, volume=None, *, skip_bad_lines=False, segment_bytes="1GiB",
            period="60s", volume_bytes=None, cache_bytes=None, top_n=30, share_percent=60.0,
            spike_iops=1.0):
    """What ``tierd trace analyze --json`` prints, as a dict (no path: the
    generated default workload, usr_1 seed 1, marked synthetic)."""
    text, notes = _native.analyze(
        None if path is None else os.fspath(path), format, volume, skip_bad_lines, segment_bytes,
        period, volume_bytes, cache_bytes, top_n, share_percent, spike_iops)
    _warn(notes)
    return json.loads(text)


def simulate_report(trace=None, tiers="hdd-ssd", policies=None, fast_bytes=None, **settings):
    """What ``tierd sim --json`` prints, as a dict. ``settings`` are ``tierd
    sim``'s flags with ``_`` for ``-`` (``queue_depth=4``,
    ``cache_block="64KiB"``, ``period="60s"``, ``seed=1``, ...);
    ``policies`` and ``fast_bytes`` are lists or comma-separated strings."""
    if trace is not None:
        trace = os.fspath(trace)
    text, lines = _native.simulate(trace, tiers, policies, fast_bytes, **settings)
    _warn([line for line in lines if line.startswith("tierd: warning")])
    report = json.loads(text)
    report["messages"] = lines
    return report


def simulate(trace=None, tiers="hdd-ssd", policies=None, fast_bytes=None, *, as_frame=None, **settings):
    """Runs ``tierd sim`` and returns its runs as records: one per policy and
    fast-tier size, with the fields of ``tierd sim --json``'s ``runs``
    (``policy``, ``fast_bytes``, ``avg_response_us``, ``response_p99_us``,
    ``cache``, ...). A pandas DataFrame when pandas is installed (or
    ``as_frame=True``), the rest of the report in ``df.attrs["report"]``;
    else a list of dicts. Arguments as :func:`simulate_report`.

    >>> runs = tierd.simulate("hm_0.csv", tiers="ssd-mem", policies=["none", "lru"], fast_bytes=["1%", "10%"])
    >>> runs[["policy", "fast_bytes", "avg_response_us"]]
    """
    report = simulate_report(trace, tiers, policies, fast_bytes, **settings)
    runs = report.pop("runs")
    if as_frame is None:
        try:
            import pandas  # noqa: F401
            as_frame = True
        except ImportError:
            as_frame = False
    if not as_frame:
        return runs
    import pandas as pd

    frame = pd.DataFrame.from_records(runs)
    frame.attrs["report"] = report
    return frame


def cache_replay(pages, policy, size_pages, is_write=None):
    """Replays a page stream (a NumPy array of page numbers, uint64) through
    one of tierd's page caches (``fifo``, ``lru``, ``arc``, ``s3fifo``: the
    eviction orders of the simulator's block caches) of ``size_pages`` pages.
    Returns ``{"accesses", "hits", "miss_ratio", "evictions",
    "dirty_evictions"}``; ``is_write`` (bool array) marks writes, whose
    pages are dirty until evicted.

    >>> tierd.cache_replay(np.array([1, 2, 1, 3], dtype=np.uint64), "lru", 2)["hits"]
    1
    """
    import numpy as np

    pages = np.ascontiguousarray(pages, dtype=np.uint64)
    if is_write is not None:
        is_write = np.ascontiguousarray(is_write, dtype=np.bool_)
    accesses, hits, miss_ratio, evictions, dirty = _native.cache_replay(pages, policy, size_pages, is_write)
    return {"accesses": accesses, "hits": hits, "miss_ratio": miss_ratio, "evictions": evictions,
            "dirty_evictions": dirty}


from .sweep import SweepFailed, sweep, sweep_report  # noqa: E402
