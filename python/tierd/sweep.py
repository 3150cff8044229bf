"""Sweeps: ``tierd.sweep(spec, out)`` and ``python -m tierd.sweep``.

The grid, the per-cell run, the row format and the output file are the
Rust ones (tierd_lab::sweep, what ``tierd sweep`` runs). This module only
chooses where cells run:

- ``executor="local"``: the Rust local executor (threads over the cores),
  exactly ``tierd sweep --executor local``;
- ``executor="ray"``: one Ray task per cell. A task gets the cell (trace
  *path* and settings, a few hundred bytes), never the trace's bytes; it
  calls the same Rust per-cell function through the module and returns the
  row (one CSV line). The driver appends rows as tasks finish and, at the
  end, the Rust output writes the file sorted by cell id: the same bytes as
  the local executor. A failed task is retried ``max_retries`` times (worker
  deaths and exceptions alike), then reported; its row stays missing so a
  rerun retries it, and :class:`SweepFailed` is raised.
"""

import argparse
import json
import os
import sys
import time

from . import _native
from ._native import TierdError


class SweepFailed(TierdError):
    """Some cells failed (after their retries); ``summary["failed"]`` lists
    them as (cell id, cell, message). Rows of the other cells are written."""

    def __init__(self, message, summary):
        super().__init__(message)
        self.summary = summary


def _spec(spec):
    """(text, kind, name) of a spec: a TOML file's path, or a dict."""
    if isinstance(spec, dict):
        return json.dumps(spec), "json", "<spec dict>"
    path = os.fspath(spec)
    try:
        with open(path, encoding="utf-8") as file:
            return file.read(), "toml", path
    except OSError as error:
        raise TierdError(f"{path}: cannot read: {error.strerror}") from None


def _run_cell(cell):
    """A Ray task's body: one cell through the Rust per-cell function."""
    from tierd import _native as native

    return native.sweep_run_cell(cell)


def _trace_bytes(cell_json):
    try:
        return os.path.getsize(json.loads(cell_json)["open_trace"])
    except OSError:
        return 0


def _cell_name(cell_json):
    cell = json.loads(cell_json)
    name = cell["trace"]
    if cell.get("volume"):
        name += f" volume {cell['volume']}"
    name += f" on {cell['tiers']} with {cell['policy']}"
    if cell.get("fast_bytes"):
        name += f" at {cell['fast_bytes']}"
    return name


def _sweep_ray(text, kind, name, out, ray_address, max_retries, progress):
    try:
        import ray
    except ImportError:
        raise TierdError(
            "executor='ray' needs Ray in this Python: pip install ray (or use executor='local')"
        ) from None
    cells = _native.sweep_cells(text, kind, name)
    output = _native.SweepOutput(os.fspath(out))
    done = set(output.done())
    todo = [(cell_id, cell) for cell_id, cell in cells if cell_id not in done]
    # Largest traces first: the longest cells start early instead of
    # trailing at the end (rows are sorted by cell id at the end anyway).
    todo.sort(key=lambda entry: -_trace_bytes(entry[1]))
    started = False
    if not ray.is_initialized():
        ray.init(address=ray_address)
        started = True
    try:
        task = ray.remote(max_retries=max_retries, retry_exceptions=True)(_run_cell)
        cell_of = {task.remote(cell): (cell_id, cell) for cell_id, cell in todo}
        pending = list(cell_of)
        failed = []
        finished = 0
        begin = time.monotonic()
        shown = progress and sys.stderr.isatty()
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                cell_id, cell = cell_of[ref]
                try:
                    output.append(ray.get(ref))
                except Exception as error:  # reported below and in the summary
                    cause = getattr(error, "cause", None) or error
                    message = str(cause).strip().splitlines()[-1] if str(cause).strip() else repr(cause)
                    if shown:
                        sys.stderr.write("\r\x1b[K")
                    print(f"tierd sweep: cell {cell_id} ({_cell_name(cell)}) failed after "
                          f"{max_retries} retries: {message}", file=sys.stderr)
                    failed.append((cell_id, _cell_name(cell), message))
                finished += 1
                if shown:
                    elapsed = time.monotonic() - begin
                    sys.stderr.write(f"\rtierd sweep (ray): {finished} of {len(todo)} cells done, "
                                     f"{elapsed:.1f} s")
                    sys.stderr.flush()
        if shown:
            sys.stderr.write("\r\x1b[K")
        output.finish()
    finally:
        if started:
            ray.shutdown()
    failed.sort()
    return {
        "cells": len(cells),
        "skipped": len(cells) - len(todo),
        "ran": len(todo) - len(failed),
        "failed": failed,
    }


def sweep(spec, out=None, *, executor="local", ray_address=None, jobs=None, max_retries=2, report=None,
          progress=True):
    """Runs the grid of ``spec`` (a TOML file as ``tierd sweep`` takes, or a
    dict of the same keys) and writes one row per cell to ``out`` (``.csv``
    or ``.parquet``); cells already there are skipped. ``executor`` is
    ``"local"`` (``jobs`` threads, default the cores) or ``"ray"`` (the Ray
    instance already initialised, else ``ray.init(address=ray_address)``).
    ``report``: a directory for the sweep report (HTML). ``out`` defaults to
    the spec file's name with ``.csv`` (``grid.toml`` → ``grid.csv``).
    Returns the summary ``{"cells", "skipped", "ran", "failed", "out"}``
    (``pandas.read_csv(summary["out"])`` for the rows); raises
    :class:`SweepFailed` when cells failed."""
    text, kind, name = _spec(spec)
    if out is None:
        if kind != "toml":
            raise TierdError("a spec given as a dict needs out= (FILE.csv or FILE.parquet)")
        out = os.path.splitext(name)[0] + ".csv"
    out = os.fspath(out)
    if executor == "local":
        summary = json.loads(_native.sweep_local(text, kind, name, out, jobs, progress))
        summary["failed"] = [tuple(entry) for entry in summary["failed"]]
    elif executor == "ray":
        summary = _sweep_ray(text, kind, name, out, ray_address, max_retries, progress)
    else:
        raise TierdError(f"executor {executor!r}: local or ray")
    summary["out"] = out
    if report is not None:
        sweep_report(out, report)
    if summary["failed"]:
        raise SweepFailed(
            f"{len(summary['failed'])} cell(s) failed: "
            + "; ".join(f"{cell_id} ({cell}): {message}" for cell_id, cell, message in summary["failed"])
            + "; their rows are missing, so running the sweep again retries them",
            summary,
        )
    return summary


def sweep_report(out, directory):
    """Writes the sweep report (one HTML page: curves per trace, the
    per-policy win table) of the sweep file ``out`` into ``directory``;
    returns the page's path."""
    out = os.fspath(out)
    csv = out + ".rows.csv" if out.endswith(".parquet") else out
    return _native.sweep_report(csv, os.fspath(directory))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tierd.sweep",
        description="tierd sweep from Python (what `tierd sweep --executor ray` runs)")
    parser.add_argument("spec")
    parser.add_argument("--out", required=True)
    parser.add_argument("--executor", choices=["local", "ray"], default="local")
    parser.add_argument("--ray-address")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--max-retries", type=int, default=2)
    parser.add_argument("--report")
    args = parser.parse_args(argv)
    try:
        summary = sweep(args.spec, args.out, executor=args.executor, ray_address=args.ray_address,
                        jobs=args.jobs, max_retries=args.max_retries, report=args.report)
    except TierdError as error:
        print(f"tierd: error: {error}", file=sys.stderr)
        return 1
    print(f"tierd sweep: {summary['cells']} cell(s): {summary['ran']} run, {summary['skipped']} done "
          f"before, 0 failed; rows in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
