#!/usr/bin/env bash
# run.sh - the reduced tier's speed, reduction ratio and memory, live, with
# fio's nbd engine against `tierd serve` (issue 15 §3, the BENCHMARKS bullet
# and the ratio figures; the live Fig. 5 is bench/reduce/fig5.sh).
#
# Every volume is a single-tier volume on one file tier (page cache, or
# O_DIRECT with DIRECT=true). The reduced tiers carry
#   reduce = { block = BLOCK, compress = "lz4", dedup = true, mode = MODE,
#              logical = SIZE, window = WINDOW }
# on a DEVICE-byte file; the baseline ("base") is the same file tier
# unreduced, SIZE bytes. Parts (default: all four, in this order):
#
#   speed   one server per MODE plus base, all up at once, each filled once
#           (128 KiB sequential writes) with the paper's data, fio's
#           buffer_compress_percentage=50 dedupe_percentage=50 (2:1
#           compressible, 2:1 duplicate: 4:1). Then WORKLOADS, each RUNTIME s
#           after RAMP s: randwrite and randread at 4 KiB and 8 KiB, QD1 and
#           QD16, 128 KiB sequential write and read at QD16 (MB/s), and
#           "light": 8 KiB randwrite paced at LIGHT_IOPS (iodepth 4), the
#           response at light load. Writes carry the paper's data. Runs
#           alternate between the servers workload by workload (A B A B),
#           ROUNDS times, the order reversed every other round; ratios to
#           base are per round. After each write run the server is FLUSHed
#           and drained (no staged bytes left), so the next run starts
#           without a backlog and the run's CPU time includes the reduction
#           of what it staged: CPU s per GB = the tierd process's utime +
#           stime (/proc/PID/stat) across run + drain / GB fio wrote.
#   ratio   per MODE, a fresh server written once over all of RATIO_SIZE
#           (8 KiB randwrite QD16, every block once) with the paper's data,
#           FLUSHed and drained: the status JSON's ratio and its split
#           (target: within 10 % of 4:1). Then per round, fresh servers per
#           MODE and base written the same way with incompressible unique
#           data (buffer_compress_percentage=0 dedupe_percentage=0
#           refill_buffers=1, a new randseed per run; dedup_bytes ~ 0 checks
#           it): the IOPS of that pass (QD16) and of RUNTIME s of QD1 after
#           it, against base's; physical / logical bytes and the tier file's
#           allocated bytes (du) against the unreduced tier's.
#   memory  the fingerprint index's memory: two fresh inline servers, dedup
#           on and off, each written once over MEM_SIZE of unique data
#           (128 KiB sequential); the growth of VmRSS (/proc/PID/status)
#           from after start to after the writes, FLUSH and drain. Index
#           bytes per entry measured = (growth with dedup − growth without)
#           / index_entries; per TiB of unique data = that × 2^40 / BLOCK,
#           beside the index's own figure (index_bytes: 32 bytes a slot,
#           allocated at start).
#
# Usage:   bench/reduce/run.sh [speed] [ratio] [memory]
# Env:     MODES ("inline post auto")  ROUNDS (2)  RUNTIME (8)  RAMP (1)
#          SIZE (1GiB: volume, logical size)  DEVICE (4GiB: reduced tier file;
#          random overwrites leave dead fragments in live packs, which hold
#          space until the whole pack dies)  BLOCK (4KiB)  WINDOW (1s)
#          DIRECT (false)  LIGHT_IOPS (1000)  RATIO_SIZE (512MiB)
#          MEM_SIZE (1GiB)  WORKLOADS (space-separated RW:BS:QD, RW one of
#          randwrite randread write read light)  TIERD (a tierd binary;
#          default: build release into CARGO_TARGET_DIR)
#          RESULTS (default /tmp/tierd-reduce-bench.<date>: configs, fio
#          JSON, status JSON, server logs)
#          SERVER_CPUS / CLIENT_CPUS (unset; e.g. 1 and 0: `taskset -c` for
#          tierd and for fio, so the load generator does not share a core
#          with the server's background work, as hosts and an array do not)
#          QUIET_LOAD (unset; e.g. 1.5: wait until the 1-minute load average
#          is below it before measuring, at most QUIET_WAIT_S = 1800 s)
#          QUICK=1: a check of the script in about two minutes (ROUNDS 1,
#          RUNTIME 1, RAMP 0, SIZE 256MiB, DEVICE 1GiB, RATIO_SIZE 64MiB,
#          MEM_SIZE 128MiB, fewer workloads); its numbers mean little.
# Needs:   fio with the nbd engine, nbdsh (for FLUSH), jq, python3.
# Prints markdown tables on stdout; nothing is written inside the repository.
set -euo pipefail

me=run.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(speed ratio memory)
if [ "${QUICK:-0}" = 1 ]; then
  ROUNDS=${ROUNDS:-1}; RUNTIME=${RUNTIME:-1}; RAMP=${RAMP:-0}
  SIZE=${SIZE:-256MiB}; DEVICE=${DEVICE:-1GiB}; RATIO_SIZE=${RATIO_SIZE:-64MiB}; MEM_SIZE=${MEM_SIZE:-128MiB}
  WORKLOADS=${WORKLOADS:-randwrite:4k:1 randwrite:8k:16 write:128k:16 randread:4k:1 randread:8k:16 read:128k:16 light:8k:4}
fi
MODES=${MODES:-inline post auto}
ROUNDS=${ROUNDS:-2}
RUNTIME=${RUNTIME:-8}
RAMP=${RAMP:-1}
SIZE=${SIZE:-1GiB}
DEVICE=${DEVICE:-4GiB}
BLOCK=${BLOCK:-4KiB}
WINDOW=${WINDOW:-1s}
DIRECT=${DIRECT:-false}
LIGHT_IOPS=${LIGHT_IOPS:-1000}
RATIO_SIZE=${RATIO_SIZE:-512MiB}
MEM_SIZE=${MEM_SIZE:-1GiB}
WORKLOADS=${WORKLOADS:-randwrite:4k:1 randwrite:4k:16 randwrite:8k:1 randwrite:8k:16 write:128k:16 light:8k:4 randread:4k:1 randread:4k:16 randread:8k:1 randread:8k:16 read:128k:16}
RESULTS=${RESULTS:-/tmp/tierd-reduce-bench.$(date +%Y%m%d-%H%M%S)}
read -r -a modes <<< "$MODES"
read -r -a workloads <<< "$WORKLOADS"

need_tools
mkdir -p "$RESULTS"
work=$(mktemp -d /tmp/tierd-reduce-work.XXXXXX)
cleanup() { stop_all_servers; rm -rf "$work"; }
trap cleanup EXIT
build_tierd
wait_quiet

reduce_table() { # MODE LOGICAL [EXTRA]
  echo "block = \"$BLOCK\", compress = \"lz4\", dedup = true, mode = \"$1\", logical = \"$2\", window = \"$WINDOW\"${3:+, $3}"
}

echo "machine: $(machine_line)"
echo "tiers: one file tier per volume (direct = $DIRECT); reduced: reduce = { $(reduce_table MODE SIZE) } on a $DEVICE file; base: the same tier unreduced, $SIZE"
echo "results: $RESULTS"
echo

# ------------------------------------------------------------------ speed

# run_one NAME WORKLOAD ROUND: one fio run on server NAME; JSON, CPU and the
# tier's status after it into $RESULTS/speed-NAME-WORKLOAD-rROUND.*
run_one() {
  local name=$1 workload=$2 round=$3 rw bs qd base before after pid
  IFS=: read -r rw bs qd <<< "$workload"
  base="$RESULTS/speed-$name-${workload//:/-}-r$round"
  pid=${pid_of[$name]}
  local -a args=(--bs="$bs" --iodepth="$qd" --size="$(bytes_of "$SIZE")" --runtime="$RUNTIME" --time_based)
  [ "$RAMP" = 0 ] || args+=(--ramp_time="$RAMP")
  case $rw in
    light) args+=(--rw=randwrite --rate_iops="$LIGHT_IOPS" "${DATA_REDUCIBLE[@]}") ;;
    randwrite|write) args+=(--rw="$rw" "${DATA_REDUCIBLE[@]}") ;;
    randread|read) args+=(--rw="$rw") ;;
    *) die "WORKLOADS: $workload: RW must be randwrite, randread, write, read or light" ;;
  esac
  before=$(cpu_ticks "$pid")
  fio_run "$base.json" "${uri_of[$name]}" "${args[@]}"
  case $rw in
    randread|read) ;;
    *) flush_volume "${uri_of[$name]}"; drain "$name" ;;
  esac
  after=$(cpu_ticks "$pid")
  echo "$after $before $(getconf CLK_TCK)" | awk '{ printf "%.3f\n", ($1 - $2) / $3 }' > "$base.cpu"
  reduction "$name" > "$base.status.json"
}

part_speed() {
  local name mode round workload i
  local -a servers=(base)
  start_server base "$(tier_config base "$SIZE" "$DIRECT" "")"
  for mode in "${modes[@]}"; do
    start_server "$mode" "$(tier_config "$mode" "$DEVICE" "$DIRECT" "$(reduce_table "$mode" "$SIZE")")"
    servers+=("$mode")
  done
  for name in "${servers[@]}"; do
    echo "$(date -u +%H:%M:%S) fill $name" >&2
    fio_run "$RESULTS/speed-$name-fill.json" "${uri_of[$name]}" --rw=write --bs=128k --iodepth=8 --size="$(bytes_of "$SIZE")" "${DATA_REDUCIBLE[@]}"
    flush_volume "${uri_of[$name]}"
    drain "$name"
    reduction "$name" > "$RESULTS/speed-$name-fill.status.json"
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    local -a order=("${servers[@]}")
    if ((round % 2 == 0)); then
      order=(); for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[$i]}"); done
    fi
    for workload in "${workloads[@]}"; do
      for name in "${order[@]}"; do
        echo "$(date -u +%H:%M:%S) round $round: $name $workload" >&2
        run_one "$name" "$workload" "$round"
      done
    done
  done
  for name in "${servers[@]}"; do
    reduction "$name" > "$RESULTS/speed-$name-end.status.json"
    stop_server "$name"
  done

  echo "### Speed: reduced tier (each mode) vs the same tier unreduced (base)"
  echo
  echo "fio nbd engine, $RUNTIME s per run after $RAMP s ramp, ROUNDS=$ROUNDS; writes carry buffer_compress_percentage=50 dedupe_percentage=50; light = 8 KiB randwrite at $LIGHT_IOPS IOPS, iodepth 4. Per-round figures are separated by /; ratios are against base in the same round."
  echo
  ROUNDS=$ROUNDS /usr/bin/python3 - "$RESULTS" "${servers[@]}" -- "${workloads[@]}" <<'PY'
import json, os, statistics, sys
results = sys.argv[1]
split = sys.argv.index("--")
servers, workloads = sys.argv[2:split], sys.argv[split + 1:]
rounds = range(1, int(os.environ["ROUNDS"]) + 1)
def load(name, workload, r):
    base = os.path.join(results, f"speed-{name}-{workload.replace(':', '-')}-r{r}")
    if not os.path.exists(base + ".json"):
        return None
    job = json.load(open(base + ".json"))["jobs"][0]
    side = job["read"] if job["read"]["io_bytes"] > 0 else job["write"]
    pct = side["clat_ns"].get("percentile", {})
    cpu = float(open(base + ".cpu").read())
    status = json.load(open(base + ".status.json"))
    return {
        "iops": side["iops"], "mbs": side["bw_bytes"] / 1e6, "gb": side["io_bytes"] / 1e9,
        "lat": side["lat_ns"]["mean"] / 1e3, "p99": pct.get("99.000000", 0) / 1e3,
        "cpu": cpu, "write": job["write"]["io_bytes"] > 0, "status": status,
    }
def fmt(values, f):
    return " / ".join(f(v) for v in values)
print("| workload | tier | IOPS | MB/s | mean µs | p99 µs | IOPS ÷ base | mean ÷ base | CPU s per GB written | mode after (switches) |")
print("|---|---|---|---|---|---|---|---|---|---|")
verdicts = []
for workload in workloads:
    rw, bs, qd = workload.split(":")
    label = f"{rw} {bs} QD{qd}" if rw != "light" else f"light: randwrite {bs} paced, iodepth {qd}"
    base = {r: load("base", workload, r) for r in rounds}
    for name in servers:
        runs = [(r, load(name, workload, r)) for r in rounds]
        runs = [(r, x) for r, x in runs if x]
        if not runs:
            continue
        got = [x for _, x in runs]
        iops = fmt(got, lambda x: f"{x['iops']/1e3:.2f} k")
        mbs = fmt(got, lambda x: f"{x['mbs']:.0f}")
        lat = fmt(got, lambda x: f"{x['lat']:.0f}")
        p99 = fmt(got, lambda x: f"{x['p99']:.0f}")
        pairs = [(x, base[r]) for r, x in runs if base[r]]
        r_iops = fmt(pairs, lambda p: f"{p[0]['iops']/p[1]['iops']:.2f}")
        r_lat = fmt(pairs, lambda p: f"{p[0]['lat']/p[1]['lat']:.2f}")
        cpu = fmt(got, lambda x: f"{x['cpu']/x['gb']:.1f}") if got[0]["write"] else "–"
        status = got[-1]["status"]
        mode = f"{status['mode']} ({status['switches']})" if status else "–"
        print(f"| {label} | {name if name == 'base' else 'reduced ' + name} | {iops} | {mbs} | {lat} | {p99} | {r_iops if name != 'base' else '1'} | {r_lat if name != 'base' else '1'} | {cpu} | {mode} |")
        if rw == "light" and name in ("post", "auto") and pairs:
            ratios = [p[0]["lat"] / p[1]["lat"] for p in pairs]
            ok = all(x <= 1.2 for x in ratios)
            verdicts.append(f"- target (light load, {name}): mean write response ≤ 1.2 × base: {'met' if ok else 'MISSED'} ({' / '.join(f'{x:.2f}' for x in ratios)})")
        if rw == "randwrite" and qd == "1" and name in ("post", "auto") and pairs:
            ratios = [p[0]["lat"] / p[1]["lat"] for p in pairs]
            verdicts.append(f"- QD1 {bs} randwrite ({name}): mean response ÷ base {' / '.join(f'{x:.2f}' for x in ratios)} (closed loop, one write outstanding)")
print()
# The reduction's own CPU: each write workload's CPU s per GB minus base's, per round.
print("CPU of the reduction (CPU s per GB written, reduced − base, per round; the same workload and round):")
print()
for workload in workloads:
    rw, bs, qd = workload.split(":")
    if rw in ("randread", "read"):
        continue
    cells = []
    for name in servers:
        if name == "base":
            continue
        diffs = []
        for r in rounds:
            a, b = load(name, workload, r), load("base", workload, r)
            if a and b:
                diffs.append(a["cpu"] / a["gb"] - b["cpu"] / b["gb"])
        if diffs:
            cells.append(f"{name} {' / '.join(f'{d:.1f}' for d in diffs)}")
    print(f"- {workload}: " + "; ".join(cells))
print()
for name in servers:
    path = os.path.join(results, f"speed-{name}-end.status.json")
    status = json.load(open(path)) if os.path.exists(path) else None
    if status:
        print(f"- reduced {name} at the end: ratio {status['ratio']:.2f}, switches {status['switches']}, stage_overflows {status['stage_overflows']}, free {status['free_bytes']/2**20:.0f} MiB of {status['capacity_bytes']/2**20:.0f} MiB, dedup_mismatches {status['dedup_mismatches']}")
print()
print("\n".join(verdicts))
PY
  echo
}

# ------------------------------------------------------------------ ratio

part_ratio() {
  local mode name round i
  local -a order
  echo "$(date -u +%H:%M:%S) ratio: the paper's data" >&2
  for mode in "${modes[@]}"; do
    name="ratio-$mode"
    start_server "$name" "$(tier_config "$name" "$DEVICE" "$DIRECT" "$(reduce_table "$mode" "$RATIO_SIZE")")"
    fio_run "$RESULTS/$name.json" "${uri_of[$name]}" --rw=randwrite --bs=8k --iodepth=16 --size="$(bytes_of "$RATIO_SIZE")" "${DATA_REDUCIBLE[@]}"
    reduction "$name" > "$RESULTS/$name.noflush.status.json"
    flush_volume "${uri_of[$name]}"; drain "$name"; flush_volume "${uri_of[$name]}"
    reduction "$name" > "$RESULTS/$name.status.json"
    stop_server "$name"
  done
  local -a unique=(base "${modes[@]}")
  for ((round = 1; round <= ROUNDS; round++)); do
    order=("${unique[@]}")
    if ((round % 2 == 0)); then
      order=(); for ((i = ${#unique[@]} - 1; i >= 0; i--)); do order+=("${unique[$i]}"); done
    fi
    for mode in "${order[@]}"; do
      name="unique-$mode"
      echo "$(date -u +%H:%M:%S) round $round: unique data, $mode" >&2
      if [ "$mode" = base ]; then
        start_server "$name" "$(tier_config "$name" "$RATIO_SIZE" "$DIRECT" "")"
      else
        start_server "$name" "$(tier_config "$name" "$DEVICE" "$DIRECT" "$(reduce_table "$mode" "$RATIO_SIZE")")"
      fi
      fio_run "$RESULTS/$name-qd16-r$round.json" "${uri_of[$name]}" --rw=randwrite --bs=8k --iodepth=16 --size="$(bytes_of "$RATIO_SIZE")" "${DATA_UNIQUE[@]}"
      flush_volume "${uri_of[$name]}"; drain "$name"; flush_volume "${uri_of[$name]}"
      reduction "$name" > "$RESULTS/$name-r$round.status.json"
      du -B1 "$work/$name/flash.img" | cut -f1 > "$RESULTS/$name-r$round.du"
      fio_run "$RESULTS/$name-qd1-r$round.json" "${uri_of[$name]}" --rw=randwrite --bs=8k --iodepth=1 --size="$(bytes_of "$RATIO_SIZE")" \
        --runtime="$RUNTIME" --time_based "${DATA_UNIQUE[@]}"
      stop_server "$name"
    done
  done
  echo "### Reduction ratio"
  echo
  MODES=$MODES ROUNDS=$ROUNDS RATIO_SIZE=$RATIO_SIZE /usr/bin/python3 - "$RESULTS" <<'PY'
import json, os, sys
results = sys.argv[1]
modes = os.environ["MODES"].split()
rounds = range(1, int(os.environ["ROUNDS"]) + 1)
mib = lambda b: f"{b / 2**20:.1f}"
print(f"8 KiB randwrite QD16 over all of {os.environ['RATIO_SIZE']} once, fio buffer_compress_percentage=50 dedupe_percentage=50, then FLUSH and drain:")
print()
print("| mode | logical MiB | physical MiB | ratio | ÷ 4 | zero MiB | dedup MiB | compression saved MiB | dedup hits | before the FLUSH: physical MiB, ratio | write IOPS |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
verdicts = []
for mode in modes:
    s = json.load(open(os.path.join(results, f"ratio-{mode}.status.json")))
    n = json.load(open(os.path.join(results, f"ratio-{mode}.noflush.status.json")))
    job = json.load(open(os.path.join(results, f"ratio-{mode}.json")))["jobs"][0]
    print(f"| {mode} | {mib(s['logical_bytes'])} | {mib(s['physical_bytes'])} | {s['ratio']:.2f} | {s['ratio']/4:.2f} | {mib(s['zero_bytes'])} | {mib(s['dedup_bytes'])} | {mib(s['compress_saved_bytes'])} | {s['dedup_hits']} | {mib(n['physical_bytes'])}, {n['ratio']:.2f} | {job['write']['iops']/1e3:.1f} k |")
    verdicts.append(f"- target ({mode}): ratio within 10 % of 4:1: {'met' if abs(s['ratio'] / 4 - 1) <= 0.10 else 'MISSED'} ({s['ratio']:.2f})")
print()
print("\n".join(verdicts))
print()
print(f"Incompressible unique data (buffer_compress_percentage=0 dedupe_percentage=0 refill_buffers=1): 8 KiB randwrite QD16 over all of it once (FLUSH, drain), then QD1 for a fixed time; per round:")
print()
print("| tier | QD16 IOPS | ÷ base | QD1 IOPS | ÷ base | QD1 mean µs | ÷ base | physical ÷ logical | file allocated ÷ base's | dedup MiB | compression saved MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
def load(name, r):
    p = os.path.join(results, f"unique-{name}")
    q16 = json.load(open(f"{p}-qd16-r{r}.json"))["jobs"][0]["write"]
    q1 = json.load(open(f"{p}-qd1-r{r}.json"))["jobs"][0]["write"]
    s = json.load(open(f"{p}-r{r}.status.json"))
    du = int(open(f"{p}-r{r}.du").read())
    return q16, q1, s, du
checks = []
for name in ["base"] + modes:
    rows = []
    for r in rounds:
        q16, q1, s, du = load(name, r)
        b16, b1, _, bdu = load("base", r)
        rows.append((q16["iops"], q16["iops"] / b16["iops"], q1["iops"], q1["iops"] / b1["iops"],
                     q1["lat_ns"]["mean"] / 1e3, q1["lat_ns"]["mean"] / b1["lat_ns"]["mean"], s, du / bdu))
    j = lambda f: " / ".join(f(x) for x in rows)
    status = lambda x: "–" if x[6] is None else f"{x[6]['physical_bytes'] / x[6]['logical_bytes']:.3f}"
    dd = lambda x: "–" if x[6] is None else mib(x[6]["dedup_bytes"])
    cs = lambda x: "–" if x[6] is None else mib(x[6]["compress_saved_bytes"])
    print(f"| {'base' if name == 'base' else 'reduced ' + name} | {j(lambda x: f'{x[0]/1e3:.1f} k')} | {j(lambda x: f'{x[1]:.2f}')} | {j(lambda x: f'{x[2]/1e3:.2f} k')} | {j(lambda x: f'{x[3]:.2f}')} | {j(lambda x: f'{x[4]:.0f}')} | {j(lambda x: f'{x[5]:.2f}')} | {j(status)} | {j(lambda x: f'{x[7]:.3f}')} | {j(dd)} | {j(cs)} |")
    for x in rows:
        if x[6] is not None:
            checks.append(x[6]["dedup_bytes"])
print()
print(f"- unique data really unique: dedup_bytes {'all 0' if not any(checks) else 'NOT 0: ' + str(checks)}")
PY
  echo
}

# ------------------------------------------------------------------ memory

part_memory() {
  local name dedup before after blocks_per_entry entries capacity
  # index_memory: room for every block written, twice over
  local mem_bytes index_memory
  mem_bytes=$(bytes_of "$MEM_SIZE")
  index_memory=$(( mem_bytes / 4096 * 32 * 2 ))
  for dedup in true false; do
    name="memory-dedup-$dedup"
    echo "$(date -u +%H:%M:%S) memory: dedup = $dedup" >&2
    start_server "$name" "$(tier_config "$name" "$(( mem_bytes * 5 / 4 + (64 << 20) ))" "$DIRECT" \
      "block = \"$BLOCK\", compress = \"lz4\", dedup = $dedup, mode = \"inline\", logical = \"$MEM_SIZE\", index_memory = \"$index_memory\"")"
    sleep 1
    before=$(rss_kib "${pid_of[$name]}")
    fio_run "$RESULTS/$name.json" "${uri_of[$name]}" --rw=write --bs=128k --iodepth=8 --size="$(bytes_of "$MEM_SIZE")" "${DATA_UNIQUE[@]}"
    flush_volume "${uri_of[$name]}"; drain "$name"
    sleep 1
    after=$(rss_kib "${pid_of[$name]}")
    echo "$before $after" > "$RESULTS/$name.rss"
    reduction "$name" > "$RESULTS/$name.status.json"
    stop_server "$name"
  done
  echo "### Fingerprint index memory"
  echo
  MEM_SIZE=$MEM_SIZE BLOCK=$BLOCK /usr/bin/python3 - "$RESULTS" <<'PY'
import json, os, sys
results = sys.argv[1]
units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
block = next(int(os.environ["BLOCK"][:-3]) * v for k, v in units.items() if os.environ["BLOCK"].endswith(k))
rows = {}
for dedup in ("true", "false"):
    b, a = map(int, open(os.path.join(results, f"memory-dedup-{dedup}.rss")).read().split())
    rows[dedup] = (b, a, json.load(open(os.path.join(results, f"memory-dedup-{dedup}.status.json"))))
print(f"{os.environ['MEM_SIZE']} of unique incompressible data written once (128 KiB sequential), inline; VmRSS of the tierd process after start and after the writes, FLUSH and drain:")
print()
print("| dedup | RSS before MiB | RSS after MiB | growth MiB | index_entries | index_capacity | physical MiB |")
print("|---|---|---|---|---|---|---|")
for dedup, (b, a, s) in rows.items():
    print(f"| {dedup} | {b/1024:.1f} | {a/1024:.1f} | {(a-b)/1024:.1f} | {s['index_entries']} | {s['index_capacity']} | {s['physical_bytes']/2**20:.1f} |")
entries = rows["true"][2]["index_entries"]
growth = ((rows["true"][1] - rows["true"][0]) - (rows["false"][1] - rows["false"][0])) * 1024
print()
per_tib_entries = 2**40 / block
if entries:
    per_entry = growth / entries
    print(f"- measured: (growth with dedup − growth without) / index_entries = {per_entry:.1f} bytes per entry → {per_entry * per_tib_entries / 2**30:.1f} GiB of index per TiB of unique data at {block // 1024} KiB blocks")
s = rows["true"][2]
if s.get("index_capacity"):
    slot = s.get("index_bytes", 0) / s["index_capacity"]
    print(f"- the index's own figure: index_bytes {s.get('index_bytes', 0) / 2**20:.1f} MiB for {s['index_capacity']} slots = {slot:.0f} bytes a slot (INDEX_BYTES_PER_ENTRY, what index_memory is divided by) → {slot * per_tib_entries / 2**30:.1f} GiB per TiB of unique data; the default index_memory (64 MiB) remembers {64 * 2**20 // 32} blocks, {64 * 2**20 // 32 * block / 2**30:.0f} GiB of unique data")
print(f"- besides the index: the block map, 8 bytes per logical block in memory → {8 * per_tib_entries / 2**30:.1f} GiB per TiB of logical space")
PY
  echo
}

for part in "${parts[@]}"; do
  case $part in
    speed) part_speed ;;
    ratio) part_ratio ;;
    memory) part_memory ;;
    *) die "unknown part $part: use speed, ratio or memory" ;;
  esac
done
echo "machine at the end: load $(cut -d' ' -f1-3 /proc/loadavg)"
