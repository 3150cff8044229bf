"""The Python API against the CLI on real traces (../shared/traces,
SOURCES.md): the same numbers and the same error messages."""

import json
import subprocess

import numpy as np
import pytest

import tierd

# MSR Cambridge hm_0 (hardware monitoring server), a contiguous cut of
# 20,560 requests of the real trace, MSR CSV.
HM_0 = "msr_cambridge/hm_0-cut-20k.csv"


def cli(tierd_bin, *args):
    done = subprocess.run([tierd_bin, *map(str, args)], capture_output=True, text=True)
    return done


def cli_json(tierd_bin, *args):
    done = cli(tierd_bin, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_simulate_equals_tierd_sim_json(traces, tierd_bin):
    trace = traces / HM_0
    expected = cli_json(tierd_bin, "sim", "--trace", trace, "--tiers", "ssd-mem",
                        "--policy", "none,fifo", "--json")
    runs = tierd.simulate(trace, tiers="ssd-mem", policies=["none", "fifo"])
    assert list(runs["policy"]) == [run["policy"] for run in expected["runs"]] == ["none", "fifo"]
    assert list(runs["avg_response_us"]) == [run["avg_response_us"] for run in expected["runs"]]
    # Not only those two fields: the whole report is the CLI's.
    report = tierd.simulate_report(trace, tiers="ssd-mem", policies="none,fifo")
    report.pop("messages")
    assert report == expected


def test_simulate_sizes_and_settings_equal_the_cli(traces, tierd_bin):
    trace = traces / HM_0
    expected = cli_json(tierd_bin, "sim", "--trace", trace, "--tiers", "ssd-mem", "--policy", "lru,arc",
                        "--fast-bytes", "1%,10%", "--cache-block", "4KiB", "--queue-depth", "8", "--json")
    report = tierd.simulate_report(trace, tiers="ssd-mem", policies=["lru", "arc"], fast_bytes=["1%", "10%"],
                                   cache_block="4KiB", queue_depth=8)
    report.pop("messages")
    assert report == expected
    # Records without pandas: the same runs as a list of dicts.
    records = tierd.simulate(trace, tiers="ssd-mem", policies=["lru", "arc"], fast_bytes=["1%", "10%"],
                             cache_block=4096, queue_depth=8, as_frame=False)
    assert records == expected["runs"]


def test_trace_stats_and_analyze_equal_the_cli(traces, tierd_bin):
    trace = traces / HM_0
    assert tierd.trace_stats(trace) == cli_json(tierd_bin, "trace", "stats", trace, "--json")
    assert tierd.analyze(trace, segment_bytes="256MiB") == cli_json(
        tierd_bin, "trace", "analyze", trace, "--segment-bytes", "256MiB", "--json")


# One real trace per reader family: (path, kind).
FORMATS = [
    (HM_0, "MSR Cambridge hm_0 cut, MSR CSV"),
    ("cloudphysics/cloudPhysicsIO.vscsi", "CloudPhysics VM trace, binary vscsi v1"),
    ("cloudphysics/trace.csv", "CloudPhysics VM trace, CSV with header"),
    ("umass_spc/web1.trace", "UMass/SPC WebSearch cut, flashsim text"),
    ("umass_spc/example.ascii", "UMass/SPC Financial1 cut, DiskSim ASCII, 22 ASUs"),
    ("tpcc/tpcc-small.trace", "TPC-C cut, DiskSim ASCII"),
    ("arc_ibm/P3.lis.zst", "ARC P3, zstd-compressed .lis"),
    ("blktrace_misc/blktrace.txt", "blkparse text of one disk"),
]


@pytest.mark.parametrize("path,kind", FORMATS, ids=[path for path, _ in FORMATS])
def test_read_trace_reads_every_format_as_the_cli_counts_it(traces, path, kind):
    stats = tierd.trace_stats(traces / path)
    chunks = tierd.read_trace(traces / path, chunk_size=10_000)
    requests = reads = writes = read_bytes = written = 0
    for chunk in chunks:
        assert set(chunk) == {"time_ns", "offset", "length", "is_write", "volume", "response_ns"}
        assert chunk["time_ns"].dtype == np.uint64 and chunk["is_write"].dtype == np.bool_
        assert len(chunk["time_ns"]) <= 10_000
        requests += len(chunk["time_ns"])
        writes += int(chunk["is_write"].sum())
        reads += int((~chunk["is_write"]).sum())
        read_bytes += int(chunk["length"][~chunk["is_write"]].sum())
        written += int(chunk["length"][chunk["is_write"]].sum())
    assert chunks.format == stats["format"]
    assert (requests, reads, writes) == (stats["requests"], stats["reads"], stats["writes"]), kind
    assert (read_bytes, written) == (stats["bytes_read"], stats["bytes_written"]), kind


def test_read_trace_round_trips_through_a_conversion(traces, tierd_bin, tmp_path):
    # hm_0 written by `tierd trace convert` as tierd's native format reads
    # back as the same requests (times rebased by the writer aside).
    source = traces / HM_0
    native = tmp_path / "hm_0.tierd"
    done = cli(tierd_bin, "trace", "convert", source, native, "--to", "tierd")
    assert done.returncode == 0, done.stderr
    original = tierd.read_trace(source, as_frame=True)
    converted = tierd.read_trace(native, as_frame=True)
    assert len(original) == len(converted) == 20_560
    for column in ["offset", "length", "is_write"]:
        assert (original[column].to_numpy() == converted[column].to_numpy()).all(), column
    gaps = np.diff(original["time_ns"].to_numpy().astype(np.int64))
    assert (gaps == np.diff(converted["time_ns"].to_numpy().astype(np.int64))).all()
    assert original.attrs["volumes"] == ["hm_0"]


def test_volume_filter(traces):
    # The SPC Financial1 cut has several ASUs; keeping one keeps fewer requests.
    trace = traces / "umass_spc/example.ascii"
    every = tierd.read_trace(trace, as_frame=True)
    first = every.attrs["volumes"][0]
    one = tierd.read_trace(trace, volume=first, as_frame=True)
    assert 0 < len(one) < len(every)
    assert len(one) == int((every["volume"] == 0).sum())


def test_errors_carry_the_cli_message_with_file_and_line(traces, tierd_bin, tmp_path):
    lines = (traces / HM_0).read_text().splitlines(keepends=True)
    broken = tmp_path / "hm_0-broken.csv"
    broken.write_text("".join(lines[:2]) + "128166385295514878,hm,0,Write,eleven,512,2617\n" + "".join(lines[3:10]))
    done = cli(tierd_bin, "trace", "stats", broken, "--format", "msr")
    assert done.returncode != 0
    message = done.stderr.strip().removeprefix("tierd: error: ")
    assert message.startswith(f"{broken}:3: bad msr line")
    assert "The msr format expects" in message
    with pytest.raises(tierd.TraceError) as raised:
        for _ in tierd.read_trace(broken, format="msr"):
            pass
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)
    with pytest.raises(tierd.TraceError) as raised:
        tierd.trace_stats(broken, format="msr")
    assert str(raised.value) == message
    with pytest.raises(tierd.TraceError) as raised:
        tierd.analyze(broken, format="msr")
    assert str(raised.value) == message
    # Settings errors too: the CLI's text, named by the option.
    done = cli(tierd_bin, "sim", "--trace", traces / HM_0, "--tiers", "ssd-mem", "--policy", "nosuch")
    with pytest.raises(tierd.TierdError) as raised:
        tierd.simulate(traces / HM_0, tiers="ssd-mem", policies=["nosuch"])
    assert str(raised.value) == done.stderr.strip().removeprefix("tierd: error: ")
    with pytest.raises(tierd.TierdError, match="not a setting of tierd.simulate"):
        tierd.simulate(traces / HM_0, tiers="ssd-mem", policies=["none"], no_such_setting=1)
