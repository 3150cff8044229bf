#!/usr/bin/env python3
"""The tables of bench/replicas/live.sh from its raw files (see its header).

Per trace: the sessions of the trace (reads closer than 1 s apart, the
replica manager's session gap), each named `system N` (it reads only
below 40 GB: the shared libraries) or `start N`; per session the
simulator's disk access (`replica.session_disk_access_ms`, runs off and
many), the live tier's read time between the status polls that bracket
it (the quiet between sessions holds the tier's read count still: a
plateau), the client's summed response (`tierd replay --period 500ms`
periods completed in the session's window), the copies current in the
last poll before it, and its reads served from replicas.

Usage: analyse.py --out DIR --traces "a b" --setups "off on" --sim 1 ...
(bench/replicas/live.sh passes everything).
"""

import argparse
import json
import os
import sys

SESSION_GAP_S = 1.0
START_ABOVE_BYTES = 40e9
TICKS_PER_S = 1e7


def sessions_of(path, to_min):
    """[(start_s, end_s, reads, bytes, max_offset)] of an MSR CSV trace."""
    rows = []
    with open(path) as handle:
        for line in handle:
            fields = line.strip().split(",")
            if len(fields) < 6:
                continue
            rows.append((int(fields[0]), fields[3], int(fields[4]), int(fields[5])))
    t0 = rows[0][0]
    out = []
    previous = None
    for ticks, op, offset, length in rows:
        at = (ticks - t0) / TICKS_PER_S
        if to_min and at >= to_min * 60:
            break
        if op != "Read":
            continue
        if previous is None or at - previous > SESSION_GAP_S:
            out.append([at, at, 0, 0, 0])
        session = out[-1]
        session[1] = at
        session[2] += 1
        session[3] += length
        session[4] = max(session[4], offset + length)
        previous = at
    names = []
    starts = systems = 0
    for session in out:
        if session[4] > START_ABOVE_BYTES:
            starts += 1
            names.append(f"start {starts}")
        else:
            systems += 1
            names.append(f"system {systems}")
    return [dict(name=name, start_s=s[0], end_s=s[1], reads=s[2], bytes=s[3]) for name, s in zip(names, out)]


def plateaus(polls, sessions):
    """The polls bracketing each session: a list of n+1 (first, last) poll
    pairs, one per stretch where the tier's read count stood still (before
    the first session, between sessions, after the last)."""
    polls = [poll for poll in polls if poll.get("reads") is not None]
    groups = []
    for poll in polls:
        if groups and groups[-1][-1]["reads"] == poll["reads"]:
            groups[-1].append(poll)
        else:
            groups.append([poll])
    # Quiet stretches: at least 3 polls with the same count (a session reads
    # every 40-100 ms, the polls are 0.5 s apart), the first one (before any
    # read) and the last (after the replay ended) whatever their length.
    keep = [g for index, g in enumerate(groups) if len(g) >= 3 or index in (0, len(groups) - 1)]
    merged = []
    for group in keep:
        if merged and merged[-1][0]["reads"] == group[0]["reads"]:
            merged[-1] = merged[-1] + group
        else:
            merged.append(group)
    if len(merged) != len(sessions) + 1:
        raise SystemExit(
            f"analyse.py: found {len(merged)} quiet stretches in the polls for {len(sessions)} sessions "
            f"(read counts {[g[0]['reads'] for g in merged]}); the polls missed a gap (POLL too long?)"
        )
    return [(group[0], group[-1]) for group in merged]


def replica(poll, key):
    value = (poll.get("replicas") or {}).get(key)
    return 0 if value is None else value


def live_sessions(out, trace, setup, sessions):
    base = os.path.join(out, "runs", f"{trace}.{setup}")
    with open(base + ".polls.jsonl") as handle:
        polls = [json.loads(line) for line in handle if line.strip()]
    with open(base + ".replay.json") as handle:
        replay = json.load(handle)
    run = replay["runs"][0]
    bounds = plateaus(polls, sessions)
    rows = []
    for index, session in enumerate(sessions):
        before = bounds[index][1]  # last poll before the session
        after = bounds[index + 1][0]  # first poll after it
        since = bounds[index][0]
        # Periods (of completion, replay time = trace time at x1) that
        # overlap the session, with 2 s to spare: sessions are 9 s or more
        # apart.
        window_from = session["start_s"] * 1e9 - 2e9
        window_to = session["end_s"] * 1e9 + 2e9
        periods = [p for p in run["periods"] if p["end_ns"] > window_from and p["start_ns"] < window_to]
        completed = sum(p["requests"] for p in periods)
        response_ms = sum(p["requests"] * p["avg_response_us"] for p in periods) / 1e3
        rows.append(
            dict(
                tier_reads=after["reads"] - since["reads"],
                disk_ms=(after["read_ns"] - since["read_ns"]) / 1e6,
                client_reads=completed,
                response_ms=response_ms,
                copies_made_before=replica(before, "copies_made"),
                current_copies_before=replica(before, "current_copies"),
                pending_copies_before=replica(before, "pending_copies"),
                reads_from_replicas=replica(after, "reads_from_replicas") - replica(since, "reads_from_replicas"),
                bytes_from_replicas=replica(after, "bytes_from_replicas") - replica(since, "bytes_from_replicas"),
                seek_saved_gib=(replica(after, "seek_distance_saved_bytes") - replica(since, "seek_distance_saved_bytes")) / 2**30,
            )
        )
    with open(base + ".status.json") as handle:
        status = json.load(handle)["volumes"][0]["tiers"][0]
    summary = dict(
        requests=run["requests"],
        errors=run.get("errors", 0),
        avg_response_us=run["avg_response_us"],
        prefill=replay.get("prefill"),
        replicas=status.get("replicas"),
        tier_reads=status["stats"]["reads"],
        tier_read_ms=status["stats"]["read_latency"]["sum_ns"] / 1e6,
        tier_writes=status["stats"]["writes"],
    )
    return rows, summary


def sim_runs(out, trace):
    with open(os.path.join(out, "sim", f"{trace}.json")) as handle:
        report = json.load(handle)
    return {run["replicas"]: run for run in report["runs"]}


def ratio(a, b):
    return a / b if b else float("nan")


def fmt(value, digits=1):
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def main():
    parser = argparse.ArgumentParser()
    for flag in ("out", "traces", "setups", "sim", "commit", "machine", "runtime", "seed", "replicas", "to-min"):
        parser.add_argument("--" + flag, default="")
    args = parser.parse_args()
    to_min = float(args.to_min) if args.to_min else None
    setups = args.setups.split()
    results = dict(
        commit=args.commit,
        machine=args.machine,
        runtime_s=int(args.runtime or 0),
        seed=int(args.seed or 1),
        replicas_line=args.replicas,
        to_min=to_min,
        traces={},
    )
    print("Replicas live (tierd serve, emulated WD1200JB, real time) and simulated (tierd sim, hdd-7200), same traces")
    print(f"tierd {args.commit}; {args.machine}; seed {results['seed']}")
    print(f"live: examples/configs/hdd-replicas.toml; on = `{args.replicas}`, off = that line removed; "
          "tierd replay --prefill --period 500ms at x1")
    print("sim: tierd sim --trace FILE --tiers hdd-7200 --policy none --replicas off,many --volume-bytes 110GiB")
    for trace in args.traces.split():
        sessions = sessions_of(os.path.join(args.out, "traces", f"{trace}.csv"), to_min)
        entry = dict(sessions=sessions, live={}, live_summary={}, sim={})
        for setup in setups:
            rows, summary = live_sessions(args.out, trace, setup, sessions)
            entry["live"][setup] = rows
            entry["live_summary"][setup] = summary
        if args.sim == "1":
            runs = sim_runs(args.out, trace)
            for name, run in runs.items():
                per = run["replica"]["session_disk_access_ms"]
                if len(per) != len(sessions):
                    raise SystemExit(f"analyse.py: {trace} sim {name}: {len(per)} sessions, the trace has {len(sessions)}")
                entry["sim"][name] = dict(
                    sessions_ms=per,
                    disk_access_ms=run["disk_access_ms"],
                    copies_made=run["replica"]["copies_made"],
                    copy_busy_ms=run["replica"]["copy_busy_ms"],
                    reads_from_replicas=run["replica"]["reads_from_replicas"],
                )
        results["traces"][trace] = entry
        synth = open(os.path.join(args.out, "traces", f"{trace}.synth.txt")).read().strip()
        print()
        print(f"### {trace} (SYNTHETIC: {synth})")
        print()
        header = ["session", "reads"]
        if entry["sim"]:
            header += ["sim off ms", "sim many ms"]
        for setup in setups:
            header += [f"live {setup} disk ms", f"live {setup} response ms"]
        if "on" in setups:
            header += ["copies current before (on)", "reads from replicas (on)"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        totals = {}
        for index, session in enumerate(sessions):
            cells = [session["name"], str(session["reads"])]
            if entry["sim"]:
                for name in ("off", "many"):
                    value = entry["sim"][name]["sessions_ms"][index]
                    cells.append(fmt(value))
                    totals[f"sim {name}"] = totals.get(f"sim {name}", 0) + value
            for setup in setups:
                row = entry["live"][setup][index]
                if row["tier_reads"] < session["reads"] or row["client_reads"] != session["reads"]:
                    print(f"analyse.py: {trace} {setup} {session['name']}: the trace has {session['reads']} reads, "
                          f"the tier counted {row['tier_reads']}, the client {row['client_reads']}", file=sys.stderr)
                cells += [fmt(row["disk_ms"]), fmt(row["response_ms"])]
                totals[f"live {setup}"] = totals.get(f"live {setup}", 0) + row["disk_ms"]
            if "on" in setups:
                row = entry["live"]["on"][index]
                cells += [str(row["current_copies_before"]), str(row["reads_from_replicas"])]
            print("| " + " | ".join(cells) + " |")
        print()
        starts = [i for i, s in enumerate(sessions) if s["name"].startswith("start")]
        lines = []

        def pair(label, indices):
            out = []
            if entry["sim"]:
                off = sum(entry["sim"]["off"]["sessions_ms"][i] for i in indices)
                many = sum(entry["sim"]["many"]["sessions_ms"][i] for i in indices)
                out.append(f"sim many/off {fmt(many)}/{fmt(off)} ms = {ratio(many, off):.2f}")
            if "on" in setups and "off" in setups:
                off = sum(entry["live"]["off"][i]["disk_ms"] for i in indices)
                on = sum(entry["live"]["on"][i]["disk_ms"] for i in indices)
                off_r = sum(entry["live"]["off"][i]["response_ms"] for i in indices)
                on_r = sum(entry["live"]["on"][i]["response_ms"] for i in indices)
                out.append(f"live on/off disk {fmt(on)}/{fmt(off)} ms = {ratio(on, off):.2f}")
                out.append(f"response {fmt(on_r)}/{fmt(off_r)} ms = {ratio(on_r, off_r):.2f}")
            return label + ": " + ", ".join(out)

        if starts:
            lines.append(pair("last start", starts[-1:]))
            if len(starts) > 2:
                lines.append(pair(f"starts 3-{len(starts)}", starts[2:]))
        lines.append(pair("whole trace", list(range(len(sessions)))))
        for line in lines:
            print("- " + line)
        for setup in setups:
            summary = entry["live_summary"][setup]
            prefill = summary["prefill"] or {}
            reps = summary["replicas"] or {}
            text = (f"- live {setup}: {summary['requests']} requests, {summary['errors']} errors; prefill "
                    f"{prefill.get('bytes', 0) / 2**20:.1f} MiB in {prefill.get('ranges', 0)} ranges, "
                    f"{prefill.get('wall_ns', 0) / 1e9:.1f} s")
            if reps:
                text += (f"; replicas at the end: copies made {reps.get('copies_made')}, current {reps.get('current_copies')}, "
                         f"replicated extents {reps.get('replicated_extents')}, groups {reps.get('groups')}, "
                         f"recurrences {reps.get('recurrences')}, placements {reps.get('placements')}, "
                         f"reads from replicas {reps.get('reads_from_replicas')}, "
                         f"seek distance saved {reps.get('seek_distance_saved_bytes', 0) / 2**30:.0f} GiB, "
                         f"cancelled {reps.get('copies_cancelled')}, refused for space {reps.get('refused_for_space')}")
            print(text)
        if entry["sim"]:
            many = entry["sim"]["many"]
            print(f"- sim many: copies made {many['copies_made']}, disk time copying {fmt(many['copy_busy_ms'])} ms, "
                  f"reads from replicas {many['reads_from_replicas']}")
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
