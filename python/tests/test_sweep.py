"""Sweeps: local (resumable, the CLI's bytes) and on a local Ray instance
(the local executor's bytes). Real traces: the MSR Cambridge hm_0 sample
(1,000 requests, MSR CSV) and the TPC-C cut (6,999 requests on 16 disks,
DiskSim ASCII), split per volume (`volume = "each"`)."""

import os
import subprocess

import pytest

import tierd

POLICIES = ["none", "lru"]
# hm_0 sample: 1 volume; TPC-C: 16; × 2 policies × 2 sizes.
CELLS = (1 + 16) * 2 * 2


def spec(traces):
    return {
        "traces": [str(traces / "msr_cambridge/msr-cambridge1-sample.csv"),
                   {"path": str(traces / "tpcc/tpcc-small.trace"), "volume": "each"}],
        "tiers": ["ssd-mem"],
        "policies": POLICIES,
        "fast_bytes": ["10%", "50%"],
    }


def toml(spec_dict):
    def value(item):
        if isinstance(item, dict):
            return "{ " + ", ".join(f'{key} = "{entry}"' for key, entry in item.items()) + " }"
        if isinstance(item, list):
            return "[" + ", ".join(value(entry) for entry in item) + "]"
        return f'"{item}"'
    return "".join(f"{key} = {value(item)}\n" for key, item in spec_dict.items())


def test_local_sweep_is_resumable_and_equals_the_cli(traces, tierd_bin, tmp_path):
    grid = spec(traces)
    out = tmp_path / "sweep.csv"
    summary = tierd.sweep(grid, out, jobs=2)
    assert summary == {"cells": CELLS, "skipped": 0, "ran": CELLS, "failed": [], "out": str(out)}
    full = out.read_bytes()
    lines = full.decode().splitlines()
    assert len(lines) == 1 + CELLS and lines[0].startswith("cell_id,trace,")
    ids = [line.split(",")[0] for line in lines[1:]]
    assert ids == sorted(ids)
    # Kill-like truncation: 5 rows and half a line left; a rerun runs the
    # other 7 cells only and writes the same bytes.
    out.write_text("\n".join(lines[:6]) + "\n" + lines[6][:20])
    summary = tierd.sweep(grid, out, jobs=2)
    assert (summary["skipped"], summary["ran"]) == (5, CELLS - 5)
    assert out.read_bytes() == full
    # Nothing left to do.
    assert tierd.sweep(grid, out)["ran"] == 0
    # The CLI, from a TOML spec, writes the same bytes.
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(toml(grid))
    # tierd.sweep(spec) alone writes beside the spec: spec.csv.
    assert tierd.sweep(spec_file, jobs=2)["out"] == str(tmp_path / "spec.csv")
    assert (tmp_path / "spec.csv").read_bytes() == full
    cli_out = tmp_path / "cli.csv"
    done = subprocess.run([tierd_bin, "sweep", spec_file, "--out", cli_out, "--report", tmp_path / "report"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert cli_out.read_bytes() == full
    page = (tmp_path / "report" / "index.html").read_text()
    assert "Wins per policy" in page and "tpcc-small.trace" in page
    # A row's numbers are `tierd simulate`'s for that cell.
    import pandas as pd
    rows = pd.read_csv(out)
    run = tierd.simulate(traces / "tpcc/tpcc-small.trace", tiers="ssd-mem", policies=["lru"],
                         fast_bytes=["10%"], volume="3", as_frame=False)[0]
    row = rows[(rows.policy == "lru") & (rows.fast_bytes_spec == "10%") & (rows.volume == 3)]
    assert row.avg_response_us.item() == run["avg_response_us"]
    assert row.fast_bytes.item() == run["fast_bytes"]


def test_parquet_output_holds_the_csv_rows(traces, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet") if os.environ.get("CI") != "true" else __import__("pyarrow.parquet").parquet
    import pandas as pd
    out = tmp_path / "sweep.parquet"
    tierd.sweep(spec(traces), out)
    table = pq.read_table(out).to_pandas()
    rows = pd.read_csv(str(out) + ".rows.csv")
    assert len(table) == len(rows) == CELLS
    assert list(table.columns) == list(rows.columns)
    assert (table["avg_response_us"].to_numpy() == rows["avg_response_us"].to_numpy()).all()
    assert list(table["cell_id"]) == list(rows["cell_id"])


def test_ray_sweep_equals_local_byte_for_byte(traces, tmp_path):
    ray = pytest.importorskip("ray") if os.environ.get("CI") != "true" else __import__("ray")
    grid = spec(traces)
    local = tmp_path / "local.csv"
    tierd.sweep(grid, local)
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    try:
        remote = tmp_path / "ray.csv"
        summary = tierd.sweep(grid, remote, executor="ray")
        assert summary == {"cells": CELLS, "skipped": 0, "ran": CELLS, "failed": [], "out": str(remote)}
        assert remote.read_bytes() == local.read_bytes()
        # A cell whose trace breaks at line 3 fails in its task, is retried,
        # then reported with the trace reader's message; the other rows are
        # written, and the failed cell is missing (a rerun retries it).
        broken = tmp_path / "broken.csv"
        lines = (traces / "msr_cambridge/msr-cambridge1-sample.csv").read_text().splitlines(keepends=True)
        broken.write_text("".join(lines[:2]) + "128166385295514663,hm,0,Write,x,2048,2833\n" + "".join(lines[3:]))
        grid["traces"] = [grid["traces"][0], str(broken)]
        grid["policies"] = ["none"]
        with pytest.raises(tierd.SweepFailed) as raised:
            tierd.sweep(grid, tmp_path / "with-failure.csv", executor="ray", max_retries=1)
        summary = raised.value.summary
        assert summary["ran"] == 2 and len(summary["failed"]) == 2
        assert all(":3: bad msr line" in message for _, _, message in summary["failed"])
        assert len((tmp_path / "with-failure.csv").read_text().splitlines()) == 1 + 2
    finally:
        ray.shutdown()
