#!/usr/bin/env bash
# fig5.sh - paper 004 Fig. 5 in kind, live: response stability of the
# reduced tier's write modes under constant offered load, with fio's nbd
# engine against `tierd serve` (issue 15 §3; the simulated half is
# `tierd sim --experiment reduce-fig5`, whose table, CSV and SVG this
# mirrors, and which this script also runs with SIM=1).
#
# Workload (the paper's, scaled to this machine): 100 % writes, 8 KiB random,
# fio buffer_compress_percentage=50 dedupe_percentage=50 (2:1 compressible,
# 2:1 duplicate), open loop at --rate_iops.
#
#  1. Maximum IOPS: a fresh inline-only tier, 8 KiB randwrite at MAX_QD for
#     MAX_RUNTIME s (after 1 s ramp); the same on post-only for the record.
#     Loads are % of inline's (the paper's "maximum throughput in inline").
#  2. For each VARIANT and LOAD: a fresh server (a new tier file: every load
#     starts alike and space never runs short), fio at LOAD % of that maximum
#     for WARMUP_S + MEASUREMENTS × MEASURE_S s with a per-IO latency log
#     (--write_lat_log, total latency: submission to completion); each
#     measurement is the mean response of the writes completed in its
#     MEASURE_S window after the warm-up, and the load's figure is
#     max |window mean − mean of the window means| / that mean, in %.
#     `tierd status --json` is polled every POLL_S s: mode switches during
#     the measurements (the `switches` counter at the end minus its value
#     when they began), the workers' utilisation, the share of polls in
#     inline mode, staged bytes and stage overflows.
#
# Variants: inline (mode = "inline"), post (mode = "post"), single
# (mode = "auto", switch = "single", T1), double (mode = "auto",
# switch = "double", T1/T2), and none (the same file tier unreduced: the
# response the 1.2 × light-load target is measured against).
# Every reduced tier: reduce = { block = BLOCK, compress = "lz4",
# dedup = true, mode, switch, t1 = T1, t2 = T2, window = SWITCH_WINDOW,
# workers = WORKERS, logical = SIZE } on a DEVICE-byte file (direct = DIRECT).
#
# Usage:   bench/reduce/fig5.sh
# Env:     VARIANTS ("none inline post single double")
#          LOADS ("10 25 45 60 70 80 90")  MEASUREMENTS (15)  MEASURE_S (1)
#          WARMUP_S (3)  SWITCH_WINDOW ("200ms")  T1 (0.65)  T2 (0.35)
#          THRESHOLDS (paper: T1/T2 as given; scaled: T1 = 0.65 and T2 = 0.35
#          of inline's worker utilisation at its maximum IOPS, measured in
#          step 1, for a machine where the workers are not what limits the
#          IOPS and never reach the paper's 65 %)
#          WORKERS (2)  MAX_QD (32)  MAX_RUNTIME (10)  MAX_IOPS (skip step 1
#          and use this)  RATE_QD (64: fio's iodepth under --rate_iops)
#          RATE_PROCESS (linear; or poisson)  POLL_S (0.25)
#          SIZE (4GiB: volume, logical)  DEVICE (2GiB: tier file)  BLOCK (4KiB)
#          DIRECT (false)  SIM (1: also `tierd sim --experiment reduce-fig5`
#          with the same loads and measurements, into OUT/sim)
#          OUT (default /tmp/tierd-reduce-fig5.<date>: reduce-fig5-live.txt,
#          .csv, -measurements.csv, .svg, raw fio JSON and latency logs,
#          status polls)  TIERD (a tierd binary; default: build release)
#          SERVER_CPUS / CLIENT_CPUS (unset; e.g. 1 and 0: `taskset -c` for
#          tierd and for fio, so the load generator does not share a core
#          with the server's background work, as hosts and an array do not)
#          QUIET_LOAD (unset; e.g. 1.5: wait until the 1-minute load average
#          is below it before measuring, at most QUIET_WAIT_S = 1800 s)
#          QUICK=1: a check of the script in about two minutes (LOADS "25 70",
#          MEASUREMENTS 5, WARMUP_S 1, MAX_RUNTIME 3, SIZE 1GiB, DEVICE 1GiB).
# Full run: about 5 × 7 × (WARMUP_S + MEASUREMENTS × MEASURE_S + 1.5) s
# + 2 × (MAX_RUNTIME + 1) s ≈ 12 minutes with the defaults.
# Needs:   fio with the nbd engine, jq, python3.
set -euo pipefail

me=fig5.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

if [ "${QUICK:-0}" = 1 ]; then
  LOADS=${LOADS:-25 70}; MEASUREMENTS=${MEASUREMENTS:-5}; WARMUP_S=${WARMUP_S:-1}
  MAX_RUNTIME=${MAX_RUNTIME:-3}; SIZE=${SIZE:-1GiB}; DEVICE=${DEVICE:-1GiB}
fi
VARIANTS=${VARIANTS:-none inline post single double}
LOADS=${LOADS:-10 25 45 60 70 80 90}
MEASUREMENTS=${MEASUREMENTS:-15}
MEASURE_S=${MEASURE_S:-1}
WARMUP_S=${WARMUP_S:-3}
SWITCH_WINDOW=${SWITCH_WINDOW:-200ms}
T1=${T1:-0.65}
T2=${T2:-0.35}
WORKERS=${WORKERS:-2}
MAX_QD=${MAX_QD:-32}
MAX_RUNTIME=${MAX_RUNTIME:-10}
RATE_QD=${RATE_QD:-64}
RATE_PROCESS=${RATE_PROCESS:-linear}
POLL_S=${POLL_S:-0.25}
SIZE=${SIZE:-4GiB}
DEVICE=${DEVICE:-2GiB}
BLOCK=${BLOCK:-4KiB}
DIRECT=${DIRECT:-false}
SIM=${SIM:-1}
OUT=${OUT:-/tmp/tierd-reduce-fig5.$(date +%Y%m%d-%H%M%S)}
RESULTS=$OUT/raw
read -r -a variants <<< "$VARIANTS"
read -r -a loads <<< "$LOADS"

need_tools
mkdir -p "$RESULTS"
work=$(mktemp -d /tmp/tierd-reduce-fig5-work.XXXXXX)
poller=""
cleanup() {
  [ -z "$poller" ] || kill "$poller" 2>/dev/null || true
  stop_all_servers
  rm -rf "$work"
}
trap cleanup EXIT
build_tierd
wait_quiet

reduce_table() { # VARIANT
  local mode switch=double
  case $1 in
    inline|post) mode=$1 ;;
    single) mode=auto; switch=single ;;
    double) mode=auto ;;
    *) die "VARIANTS: $1: use none, inline, post, single or double" ;;
  esac
  echo "block = \"$BLOCK\", compress = \"lz4\", dedup = true, mode = \"$mode\", switch = \"$switch\", t1 = $T1, t2 = $T2, window = \"$SWITCH_WINDOW\", workers = $WORKERS, logical = \"$SIZE\""
}

# start_variant NAME VARIANT
start_variant() {
  if [ "$2" = none ]; then
    start_server "$1" "$(tier_config "$1" "$SIZE" "$DIRECT" "")"
  else
    start_server "$1" "$(tier_config "$1" "$DEVICE" "$DIRECT" "$(reduce_table "$2")")"
  fi
}

size_bytes=$(bytes_of "$SIZE")
fio_common=(--rw=randwrite --bs=8k --size="$size_bytes" "${DATA_REDUCIBLE[@]}" --time_based)

# ------------------------------------------------------------------ 1. max IOPS

# poll NAME FILE START: status lines "seconds-since-START json" every POLL_S
poll() {
  local name=$1 file=$2 start=$3 now
  while :; do
    now=$(date +%s.%N)
    printf '%s %s\n' "$(awk -v a="$now" -v b="$start" 'BEGIN { printf "%.3f", a - b }')" "$(reduction "$name" 2>/dev/null || echo null)" >> "$file"
    sleep "$POLL_S"
  done
}

max_iops() { # VARIANT: fio's JSON in $RESULTS/max-VARIANT.json, status polls in .polls
  local name="max-$1"
  start_variant "$name" "$1"
  : > "$RESULTS/$name.polls"
  poll "$name" "$RESULTS/$name.polls" "$(date +%s.%N)" &
  poller=$!
  fio_run "$RESULTS/$name.json" "${uri_of[$name]}" "${fio_common[@]}" --iodepth="$MAX_QD" \
    --runtime="$MAX_RUNTIME" --ramp_time=1
  kill "$poller" 2>/dev/null || true
  wait "$poller" 2>/dev/null || true
  poller=""
  reduction "$name" > "$RESULTS/$name.status.json"
  stop_server "$name"
}

# mean_utilisation NAME: the polled worker utilisation after the first
# second (fio's ramp), as a fraction
mean_utilisation() {
  awk '$1 >= 1.2 { sub(/^[^ ]+ /, ""); print }' "$RESULTS/$1.polls" | jq -s 'map(select(. != null) | .utilisation) | add / length'
}

echo "machine: $(machine_line)" | tee "$RESULTS/machine.txt" >&2
inline_util=""; post_util=""; post_max=""
if [ -n "${MAX_IOPS:-}" ]; then
  inline_max=$MAX_IOPS
  echo "max IOPS: given, $inline_max" >&2
else
  echo "$(date -u +%H:%M:%S) max IOPS: inline, QD$MAX_QD" >&2
  max_iops inline
  inline_max=$(jq '.jobs[0].write.iops' "$RESULTS/max-inline.json")
  inline_util=$(mean_utilisation max-inline)
  echo "$(date -u +%H:%M:%S) max IOPS: post, QD$MAX_QD" >&2
  max_iops post
  post_max=$(jq '.jobs[0].write.iops' "$RESULTS/max-post.json")
  post_util=$(mean_utilisation max-post)
  echo "max IOPS: inline $inline_max (worker utilisation $inline_util), post $post_max ($post_util)" >&2
fi
# THRESHOLDS=scaled: the paper's thresholds are fractions of a processor
# that saturates at the maximum load; here the reduction workers may not be
# what limits the IOPS (the NBD path and fio share the cores), so T1 and T2
# become 0.65 and 0.35 of inline's worker utilisation at its maximum IOPS.
case ${THRESHOLDS:-paper} in
  paper) ;;
  scaled)
    [ -n "$inline_util" ] || die "THRESHOLDS=scaled needs the maximum-IOPS runs (unset MAX_IOPS)"
    T1=$(awk -v u="$inline_util" 'BEGIN { printf "%.4f", 0.65 * u }')
    T2=$(awk -v u="$inline_util" 'BEGIN { printf "%.4f", 0.35 * u }')
    echo "thresholds scaled to inline's utilisation at its maximum ($inline_util): T1 $T1, T2 $T2" >&2 ;;
  *) die "THRESHOLDS must be paper or scaled" ;;
esac

# ------------------------------------------------------------------ 2. loads

runtime=$((WARMUP_S + MEASUREMENTS * MEASURE_S))
for variant in "${variants[@]}"; do
  for load in "${loads[@]}"; do
    name="$variant-$load"
    rate=$(awk -v m="$inline_max" -v l="$load" 'BEGIN { printf "%d", m * l / 100 + 0.5 }')
    echo "$(date -u +%H:%M:%S) $variant at $load % ($rate IOPS), ${runtime} s" >&2
    start_variant "$name" "$variant"
    : > "$RESULTS/$name.polls"
    start=$(date +%s.%N)
    poll "$name" "$RESULTS/$name.polls" "$start" &
    poller=$!
    fio_run "$RESULTS/$name.json" "${uri_of[$name]}" "${fio_common[@]}" --iodepth="$RATE_QD" \
      --rate_iops="$rate" --rate_process="$RATE_PROCESS" --runtime="$runtime" \
      --write_lat_log="$RESULTS/$name" --log_avg_msec=0
    kill "$poller" 2>/dev/null || true
    wait "$poller" 2>/dev/null || true
    poller=""
    reduction "$name" > "$RESULTS/$name.status.json"
    stop_server "$name"
    rm -f "$RESULTS/$name"_clat.*.log "$RESULTS/$name"_slat.*.log
    gzip -f "$RESULTS/$name"_lat.*.log
  done
done

# ------------------------------------------------------------------ simulator

if [ "$SIM" = 1 ]; then
  echo "$(date -u +%H:%M:%S) tierd sim --experiment reduce-fig5" >&2
  "$tierd" sim --experiment reduce-fig5 --out "$OUT/sim" --measurements "$MEASUREMENTS" \
    --loads "$(tr ' ' ',' <<< "$LOADS")" > /dev/null 2> "$RESULTS/sim.log"
fi

# ------------------------------------------------------------------ report

VARIANTS=$VARIANTS LOADS=$LOADS MEASUREMENTS=$MEASUREMENTS MEASURE_S=$MEASURE_S WARMUP_S=$WARMUP_S \
SWITCH_WINDOW=$SWITCH_WINDOW T1=$T1 T2=$T2 WORKERS=$WORKERS MAX_QD=$MAX_QD INLINE_MAX=$inline_max \
POST_MAX=${post_max:-} INLINE_UTIL=${inline_util:-} POST_UTIL=${post_util:-} THRESHOLDS=${THRESHOLDS:-paper} RATE_QD=$RATE_QD RATE_PROCESS=$RATE_PROCESS SIZE=$SIZE DEVICE=$DEVICE BLOCK=$BLOCK \
DIRECT=$DIRECT SIM=$SIM /usr/bin/python3 - "$OUT" <<'PY'
import csv, gzip, glob, json, math, os, sys

out = sys.argv[1]
raw = os.path.join(out, "raw")
env = os.environ
variants = env["VARIANTS"].split()
loads = [float(x) for x in env["LOADS"].split()]
n = int(env["MEASUREMENTS"])
window_ms = float(env["MEASURE_S"]) * 1000
warmup_ms = float(env["WARMUP_S"]) * 1000
t1, t2 = float(env["T1"]), float(env["T2"])
labels = {"none": "unreduced", "inline": "inline only", "post": "post only",
          "single": f"single {t1*100:.3g}%", "double": f"double {t1*100:.3g}/{t2*100:.3g}%"}

def fmt_load(load):
    return f"{load:g}"

def polls(name):
    rows = []
    for line in open(os.path.join(raw, f"{name}.polls")):
        at, _, text = line.partition(" ")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        if value:
            rows.append((float(at), value))
    return rows

results, measurements = [], []
for variant in variants:
    for load in loads:
        name = f"{variant}-{fmt_load(load)}"
        logs = glob.glob(os.path.join(raw, f"{name}_lat.*.log.gz"))
        if not logs:
            continue
        sums, counts = [0.0] * n, [0] * n
        for line in gzip.open(logs[0], "rt"):
            fields = line.split(",")
            t_ms, lat_ns = float(fields[0]), float(fields[1])
            k = int((t_ms - warmup_ms) // window_ms)
            if 0 <= k < n:
                sums[k] += lat_ns / 1e3
                counts[k] += 1
        means = [s / c for s, c in zip(sums, counts) if c]
        mean = sum(means) / len(means) if means else float("nan")
        dev = max(abs(m - mean) / mean * 100 for m in means) if means else float("nan")
        job = json.load(open(os.path.join(raw, f"{name}.json")))["jobs"][0]["write"]
        p = polls(name)
        measured = [(t, s) for t, s in p if warmup_ms / 1000 <= t]
        switches = 0
        if variant != "none" and p:
            start = [s for t, s in p if t <= warmup_ms / 1000]
            begin = start[-1]["switches"] if start else 0
            end = json.load(open(os.path.join(raw, f"{name}.status.json")))
            switches = (end or {}).get("switches", 0) - begin
        util = [s["utilisation"] for _, s in measured]
        inline_share = [1.0 if s["mode"] == "inline" else 0.0 for _, s in measured]
        staged = [s["staged_bytes"] for _, s in measured]
        final = json.load(open(os.path.join(raw, f"{name}.status.json"))) or {}
        offered = float(env["INLINE_MAX"]) * load / 100
        writes = sum(counts)
        results.append({
            "variant": variant, "load_percent": load, "offered_iops": offered,
            "achieved_iops": writes / (n * window_ms / 1000) if writes else 0.0,
            "fio_iops": job["iops"],
            "mean_response_us": mean, "max_deviation_percent": dev, "switches": switches,
            "utilisation": sum(util) / len(util) if util else float("nan"),
            "inline_share": sum(inline_share) / len(inline_share) if inline_share else float("nan"),
            "stage_overflows": final.get("stage_overflows", 0),
            "staged_bytes_max": max(staged) if staged else 0,
            "ratio": final.get("ratio", float("nan")),
            "p99_us": job["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1e3,
            "windows": len(means),
        })
        for k, (s, c) in enumerate(zip(sums, counts)):
            measurements.append({"variant": variant, "load_percent": load, "measurement": k,
                                 "mean_response_us": s / c if c else float("nan"), "writes": c})

def num(x):
    return "" if isinstance(x, float) and not math.isfinite(x) else f"{x}"

with open(os.path.join(out, "reduce-fig5-live.csv"), "w", newline="") as f:
    w = csv.writer(f)
    keys = ["variant", "load_percent", "offered_iops", "achieved_iops", "mean_response_us", "max_deviation_percent",
            "switches", "utilisation", "inline_share", "stage_overflows", "staged_bytes_max", "p99_us", "ratio", "windows"]
    w.writerow(keys)
    for r in results:
        w.writerow([num(r[k]) for k in keys])
with open(os.path.join(out, "reduce-fig5-live-measurements.csv"), "w", newline="") as f:
    w = csv.writer(f)
    keys = ["variant", "load_percent", "measurement", "mean_response_us", "writes"]
    w.writerow(keys)
    for m in measurements:
        w.writerow([num(m[k]) for k in keys])

def result(variant, load):
    return next((r for r in results if r["variant"] == variant and r["load_percent"] == load), None)

def columns(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"

text = []
text.append("Paper 004 Fig. 5 in kind (live, fio over NBD): response stability of data reduction's write modes")
text.append(f"workload: fio 8 KiB randwrite, buffer_compress_percentage=50 dedupe_percentage=50, --rate_iops (rate_process={env['RATE_PROCESS']}, iodepth {env['RATE_QD']})")
machine = open(os.path.join(raw, "machine.txt")).read().strip() if os.path.exists(os.path.join(raw, "machine.txt")) else ""
text.append(machine)
text.append(f"tier: file (direct = {env['DIRECT']}), {env['DEVICE']}; reduce = {{ block = \"{env['BLOCK']}\", compress = \"lz4\", dedup = true, window = \"{env['SWITCH_WINDOW']}\", workers = {env['WORKERS']}, t1 = {t1}, t2 = {t2}, logical = \"{env['SIZE']}\" }}; a fresh tier per load")
post_max = env.get("POST_MAX") or "not measured"
text.append(f"max IOPS (QD{env['MAX_QD']}): inline {float(env['INLINE_MAX']):.0f}, post {post_max if post_max == 'not measured' else f'{float(post_max):.0f}'}; loads are % of inline's")
if env.get("INLINE_UTIL"):
    text.append(f"reduction workers' utilisation at those maxima (status JSON, polled): inline {float(env['INLINE_UTIL'])*100:.1f}%, post {float(env['POST_UTIL'])*100:.1f}%")
text.append(f"thresholds: {env['THRESHOLDS']} (T1 {t1*100:.2f}%, T2 {t2*100:.2f}%)" + (" = 0.65 and 0.35 of inline's utilisation at its maximum" if env['THRESHOLDS'] == 'scaled' else ""))
text.append(f"{n} measurements per load, each the mean response (fio total latency) of the writes completed in {window_ms:.0f} ms, after {warmup_ms:.0f} ms of warm-up")
text.append("")
header = ["load"]
for v in variants:
    header += [f"{v} us", f"{v} dev%", f"{v} sw"]
rows = [header]
for load in loads:
    row = [f"{load:g}%"]
    for v in variants:
        r = result(v, load)
        if r:
            row += [f"{r['mean_response_us']:.1f}", f"{r['max_deviation_percent']:.0f}", str(r["switches"]) if v != "none" else "-"]
        else:
            row += ["-", "-", "-"]
    rows.append(row)
text.append(columns(rows))
rows = [["load"] + [f"{v} IOPS" for v in variants] + [f"{v} util" for v in variants if v != "none"] + [f"{v} inline" for v in ("single", "double") if v in variants]]
for load in loads:
    row = [f"{load:g}%"]
    for v in variants:
        r = result(v, load)
        row.append(f"{r['achieved_iops']:.0f}" if r else "-")
    for v in variants:
        if v == "none":
            continue
        r = result(v, load)
        row.append(f"{r['utilisation']*100:.0f}%" if r else "-")
    for v in ("single", "double"):
        if v in variants:
            r = result(v, load)
            row.append(f"{r['inline_share']*100:.0f}%" if r else "-")
    rows.append(row)
text.append(columns(rows))
paper = {"none": "(reference)", "inline": "<= 50% (no switching)", "post": "<= 50% (no switching)", "single": "> 150%", "double": "36%"}
rows = [["configuration", "max dev% (ours)", "at load", "switches (all loads)", "paper"]]
for v in variants:
    rs = [r for r in results if r["variant"] == v and math.isfinite(r["max_deviation_percent"])]
    if not rs:
        continue
    worst = max(rs, key=lambda r: r["max_deviation_percent"])
    rows.append([labels[v], f"{worst['max_deviation_percent']:.0f}", f"{worst['load_percent']:g}%", str(sum(r["switches"] for r in rs)), paper[v]])
text.append(columns(rows))
text.append("us: mean of the measurements' mean responses; dev%: largest |measurement - mean| / mean; sw: mode switches during the measurements;")
text.append("IOPS: writes completed in the measured windows / their length; util: mean of the polled worker utilisation (status JSON) during the measurements; inline: share of polls that found the tier in inline mode")
checks = []
if "double" in variants:
    worst = max((r["max_deviation_percent"] for r in results if r["variant"] == "double"), default=float("nan"))
    checks.append(f"- two thresholds stay <= 50% at every load: {'met' if worst <= 50 else 'MISSED'} (max {worst:.0f}%)")
if "single" in variants and "double" in variants:
    mid = [l for l in loads if 45 <= l <= 80]
    s = max((result("single", l)["max_deviation_percent"] for l in mid if result("single", l)), default=float("nan"))
    d = max((result("double", l)["max_deviation_percent"] for l in mid if result("double", l)), default=float("nan"))
    checks.append(f"- single threshold swings most in 45-80%: single max {s:.0f}% vs double {d:.0f}% there ({'yes' if s > d else 'NO'})")
if "post" in variants and "inline" in variants:
    low = min(loads)
    a, b = result("post", low), result("inline", low)
    if a and b:
        checks.append(f"- post has the lower response at light load ({low:g}%): post {a['mean_response_us']:.1f} us vs inline {b['mean_response_us']:.1f} us ({'yes' if a['mean_response_us'] < b['mean_response_us'] else 'NO'})")
    if post_max != "not measured":
        checks.append(f"- inline has the higher maximum throughput: inline {float(env['INLINE_MAX']):.0f} vs post {float(post_max):.0f} IOPS ({'yes' if float(env['INLINE_MAX']) > float(post_max) else 'NO'})")
if "none" in variants:
    low = min(loads)
    base = result("none", low)
    for v in ("post", "double", "single"):
        r = result(v, low)
        if base and r:
            q = r["mean_response_us"] / base["mean_response_us"]
            checks.append(f"- {labels[v]} at {low:g}% load: mean response {q:.2f} x unreduced ({'<= 1.2: met' if q <= 1.2 else '> 1.2: MISSED'})")
text.append("")
text += checks
report = "\n".join(text) + "\n"
if env.get("SIM") == "1" and os.path.exists(os.path.join(out, "sim", "reduce-fig5.txt")):
    report += "\nThe simulator, same loads and measurements (tierd sim --experiment reduce-fig5):\n\n" + open(os.path.join(out, "sim", "reduce-fig5.txt")).read()
open(os.path.join(out, "reduce-fig5-live.txt"), "w").write(report)
print(report)

# ---- SVG: deviation, mean response and switches against load, a line per variant
colours = {"none": "#7f7f7f", "inline": "#1f77b4", "post": "#ff7f0e", "single": "#d62728", "double": "#2ca02c"}
dashed = {"none", "inline", "post"}
panels = [("largest deviation from the mean response (%)", "max_deviation_percent", 50.0),
          ("mean response (us)", "mean_response_us", None),
          ("mode switches during the measurements", "switches", None)]
W, PH, L, R, T, B = 760, 220, 70, 20, 60, 40
H = T + len(panels) * (PH + B + 30) + 40
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">Response stability under inline/post switching (paper 004 Fig. 5, live)</text>',
       f'<text x="{W/2}" y="38" text-anchor="middle" fill="#555">{n} measurements of {window_ms:.0f} ms per load; max IOPS inline {float(env["INLINE_MAX"]):.0f}; switch window {env["SWITCH_WINDOW"]}</text>']
def nice_max(v):
    if not math.isfinite(v) or v <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * e:
            return m * e
    return 10 * e
for i, (title, key, ref) in enumerate(panels):
    top = T + i * (PH + B + 30) + 20
    vals = [r[key] for r in results if (key != "switches" or r["variant"] != "none") and math.isfinite(r[key])]
    ymax = nice_max(max(vals + ([ref] if ref else []) + [0]))
    x = lambda load: L + (W - L - R) * load / 100
    y = lambda v: top + PH - PH * v / ymax
    svg.append(f'<text x="{L}" y="{top - 6}" font-size="12">{title}</text>')
    svg.append(f'<rect x="{L}" y="{top}" width="{W-L-R}" height="{PH}" fill="none" stroke="#999"/>')
    for k in range(6):
        v = ymax * k / 5
        svg.append(f'<line x1="{L}" x2="{W-R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
        svg.append(f'<text x="{L-6}" y="{y(v)+4:.1f}" text-anchor="end">{v:g}</text>')
    for load in range(0, 101, 10):
        svg.append(f'<text x="{x(load):.1f}" y="{top+PH+14}" text-anchor="middle">{load}</text>')
    svg.append(f'<text x="{(L+W-R)/2}" y="{top+PH+28}" text-anchor="middle" fill="#555">load (% of inline\'s maximum IOPS)</text>')
    if ref:
        svg.append(f'<line x1="{L}" x2="{W-R}" y1="{y(ref):.1f}" y2="{y(ref):.1f}" stroke="#999" stroke-dasharray="2,3"/>')
        svg.append(f'<text x="{W-R-4}" y="{y(ref)-4:.1f}" text-anchor="end" fill="#777">paper\'s target {ref:g} %</text>')
    for v in variants:
        if key == "switches" and v == "none":
            continue
        pts = [(r["load_percent"], r[key]) for r in results if r["variant"] == v and math.isfinite(r[key])]
        if not pts:
            continue
        path = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in pts)
        dash = ' stroke-dasharray="6,4"' if v in dashed else ""
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colours[v]}" stroke-width="2"{dash}/>')
        for a, b in pts:
            svg.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="3" fill="{colours[v]}"/>')
legend_y = H - 20
for j, v in enumerate(variants):
    lx = L + j * 130
    dash = ' stroke-dasharray="6,4"' if v in dashed else ""
    svg.append(f'<line x1="{lx}" x2="{lx+24}" y1="{legend_y}" y2="{legend_y}" stroke="{colours[v]}" stroke-width="2"{dash}/>')
    svg.append(f'<text x="{lx+30}" y="{legend_y+4}">{labels[v]}</text>')
svg.append("</svg>")
open(os.path.join(out, "reduce-fig5-live.svg"), "w").write("\n".join(svg) + "\n")
for name in ("reduce-fig5-live.txt", "reduce-fig5-live.csv", "reduce-fig5-live-measurements.csv", "reduce-fig5-live.svg"):
    print(f"wrote {os.path.join(out, name)}", file=sys.stderr)
PY
