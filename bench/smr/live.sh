#!/usr/bin/env bash
# live.sh - issue 16 §4, the live half: an SMR home tier with and without
# staging, measured on `tierd serve` in real time (docs/engine/smr.md).
#
# Three setups on the same workloads, each run on a fresh server and data
# directory, NBD over a unix socket, driven by `tierd replay`:
#   no-cache      a volume whose only tier is the emulated SMR disk
#                 (`model = "archive8tb"`, file backend, sparse file);
#   staging-off   an emulated SSD (`model = "p3700"`, file backend) caching
#                 that disk: cache = { tier = "ssd", block = "4KiB",
#                 mode = "writeback", policy = "lru", admission = "always",
#                 smr_staging = false } (per-block writeback);
#   staging-on    the same with smr_staging = true (whole-band destage).
# STAGING_SUPPORTED=auto asks the binary whether it takes the key (a tiny
# server started with it): an engine older than the live staging runs both
# cache setups without it, per-block writeback, and marks the staging-on
# rows "pending engine".
#
# Workloads: the simulator's own (`tierd sim --experiment smr-staging
# --scale SCALE --export-traces DIR`, crates/tierd-sim/src/smr.rs), all
# synthetic: paper 001's RW→RR (random writes of 1 KiB/16 KiB/256 KiB/4 MiB
# in turn over the whole 8 TB disk, SCALE × 10 GiB in all, then SCALE ×
# 10,240 random 1 MiB reads; closed loop at QD1 — `tierd replay` with every
# request at time 0 and --max-inflight 1 — so the reads start as the writes
# end), MSR-like write bursts (SCALE × 30 min, at least 1: 64 KiB random
# reads at 20/s, 4–64 KiB writes at 2/s and at 150/s for 10 s every 120 s,
# reads pausing 80–110 s of each period; open loop, real time), and
# optionally hm_0 (the tierd-synth preset, SCALE × 0.5 h, at least 3 min).
# The volume has the Archive 8 TB's own capacity (8,001,563,222,016
# bytes, sparse: only what is written takes space), so the model is the
# simulator's disk, not a short-stroked one.
#
# Then (SIM=1) `tierd sim` replays the same trace files on the same stack
# (stack.toml: the SSD at SSD_SIZE over the full Archive 8 TB, no host queue
# cap, as the live engine hands every request to the model) for each setup,
# as a plausibility check of the live numbers.
#
# Prints a markdown table (per workload × setup × world: reads over 100 ms,
# read p99 and mean, write mean, errors, wall time), the cache's state at the
# end of each cache run (`tierd status --json`), the total runtime; writes
# results.json and every raw file to OUT.
#
# Usage:   bench/smr/live.sh
# Env:     OUT (/tmp/tierd-smr-live.<date>)  SCALE (0.1)  SEED (1)
#          WORKLOADS ("rw-rr write-bursts"; also hm_0)
#          SETUPS ("no-cache staging-off staging-on")
#          SSD_SIZE (4GiB: 1 Mi slots of 4 KiB)  HOME_SIZE (8001563222016)
#          STAGING_KEY (smr_staging)  STAGING_SUPPORTED (auto | yes | no)
#          MAX_INFLIGHT (128: open-loop workloads)  SIM (1; 0 skips tierd sim)
#          TIERD (a tierd binary; default: build release into CARGO_TARGET_DIR)
# Needs:   jq. Nothing is written inside the repository. Takes ~15 min at
#          SCALE=0.1 (886 s measured: RW→RR 1-3 min per setup, write bursts
#          3 min per setup, the simulations 2 s); WORKLOADS=hm_0 ~9 min.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
me=live.sh
SCALE=${SCALE:-0.1}
SEED=${SEED:-1}
WORKLOADS=${WORKLOADS:-rw-rr write-bursts}
SETUPS=${SETUPS:-no-cache staging-off staging-on}
SSD_SIZE=${SSD_SIZE:-4GiB}
HOME_SIZE=${HOME_SIZE:-8001563222016}
STAGING_KEY=${STAGING_KEY:-smr_staging}
STAGING_SUPPORTED=${STAGING_SUPPORTED:-auto}
MAX_INFLIGHT=${MAX_INFLIGHT:-128}
SIM=${SIM:-1}
OUT=${OUT:-/tmp/tierd-smr-live.$(date +%Y%m%d-%H%M%S)}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

die() { echo "$me: $*" >&2; exit 1; }
command -v jq >/dev/null || die "jq is missing (apt-get install jq)"
case $HOME_SIZE in ''|*[!0-9]*) die "HOME_SIZE=$HOME_SIZE: give bytes" ;; esac
# The volume is HOME_SIZE; its home tier must hold whole 1 GiB segments, so
# the tier file (and the model's capacity, live and simulated) is HOME_SIZE
# rounded up to 1 GiB: 7,453 GiB for the Archive 8 TB, 0.013 % more.
SEGMENT=$((1 << 30))
TIER_SIZE=$(( (HOME_SIZE + SEGMENT - 1) / SEGMENT * SEGMENT ))
for setup in $SETUPS; do
  case $setup in no-cache|staging-off|staging-on) ;; *) die "SETUPS: unknown setup $setup (no-cache, staging-off, staging-on)" ;; esac
done

started=$(date +%s)
if [ -z "${TIERD:-}" ]; then
  echo "building tierd (release)..." >&2
  target_dir=${CARGO_TARGET_DIR:-$repo/target}
  (cd "$repo" && CARGO_TARGET_DIR=$target_dir cargo build --release -q -p tierd-cli)
  TIERD=$target_dir/release/tierd
fi
# The commit the binary was built from (read now: the tree may change
# during a run of a quarter of an hour).
commit=$(cd "$repo" && git rev-parse --short HEAD)$(cd "$repo" && git diff --quiet HEAD -- crates || echo '+changes')
[ -x "$TIERD" ] || die "no tierd binary at $TIERD"

mkdir -p "$OUT/runs" "$OUT/sim" "$OUT/traces"
work=$(mktemp -d /tmp/tierd-smr-live-work.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# ------------------------------------------------------------------ configs

# cache_line SETUP: the volume's cache table ("" for no-cache)
cache_line() {
  local staging=""
  case $1 in
    no-cache) return 0 ;;
    staging-off) [ "$supported" = yes ] && staging=", $STAGING_KEY = false" ;;
    staging-on) [ "$supported" = yes ] && staging=", $STAGING_KEY = true" ;;
  esac
  echo "cache = { tier = \"ssd\", block = \"4KiB\", mode = \"writeback\", policy = \"lru\", admission = \"always\"$staging }"
}

# serve_config DIR SETUP [VOLUME_SIZE TIER_SIZE SSD_SIZE]
serve_config() {
  local dir=$1 setup=$2 home=${3:-$HOME_SIZE} tier=${4:-$TIER_SIZE} ssd=${5:-$SSD_SIZE}
  cat <<EOF
data_dir = "$dir"
[server]
listen = ["unix:$dir/tierd.sock"]
EOF
  if [ "$setup" != no-cache ]; then
    cat <<EOF
[[tier]]
name = "ssd"
backend = "file"
path = "ssd.img"
size = "$ssd"
model = "p3700"
EOF
  fi
  cat <<EOF
[[tier]]
name = "smr"
backend = "file"
path = "smr.img"
size = "$tier"
model = "archive8tb"
[[volume]]
name = "vol0"
size = "$home"
segment = "1GiB"
EOF
  if [ "$setup" = no-cache ]; then
    echo 'tiers = ["smr"]'
  else
    echo 'tiers = ["ssd", "smr"]'
    cache_line "$setup"
  fi
}

# start_server CONFIG LOG -> $server_pid, $uri (dies if it does not start)
start_server() {
  local config=$1 log=$2 dir waited=0
  dir=$(dirname "$config")
  : > "$dir/serve.out"
  "$TIERD" serve --config "$config" > "$dir/serve.out" 2> "$log" &
  server_pid=$!
  until uri=$(sed -n 's/^tierd: volume vol0 at //p' "$dir/serve.out" | head -1) && [ -n "$uri" ]; do
    sleep 0.1
    waited=$((waited + 1))
    if [ $waited -gt 600 ] || ! kill -0 "$server_pid" 2>/dev/null; then
      wait "$server_pid" 2>/dev/null || true
      server_pid=""
      return 1
    fi
  done
}

stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=""
}

# Does the engine take the staging key? A tiny server with the key tells.
if [ "$STAGING_SUPPORTED" = auto ]; then
  mkdir -p "$work/probe"
  supported=yes
  serve_config "$work/probe" staging-off $SEGMENT $SEGMENT 64MiB > "$work/probe/serve.toml"
  if start_server "$work/probe/serve.toml" "$work/probe/serve.log"; then
    stop_server
  else
    grep -q "$STAGING_KEY" "$work/probe/serve.log" \
      || { cat "$work/probe/serve.log" >&2; die "tierd serve did not start (above), and not over $STAGING_KEY"; }
    supported=no
    echo "$me: tierd serve: $(grep -m1 "$STAGING_KEY" "$work/probe/serve.log")" >&2
  fi
  rm -rf "$work/probe"
else
  supported=$STAGING_SUPPORTED
fi
if [ "$supported" = yes ]; then
  echo "$me: the engine takes $STAGING_KEY: staging-off and staging-on are set explicitly" >&2
else
  echo "$me: the engine does not take $STAGING_KEY yet: both cache setups run without it (per-block writeback); staging-on rows are marked pending engine" >&2
fi

# ------------------------------------------------------------------ traces

echo "$(date -u +%H:%M:%S) exporting the workloads (scale $SCALE, seed $SEED)" >&2
"$TIERD" sim --experiment smr-staging --scale "$SCALE" --seed "$SEED" \
  --export-traces "$OUT/traces" > "$OUT/traces/export.txt" 2>&1 \
  || { cat "$OUT/traces/export.txt" >&2; die "the export failed"; }
manifest=$OUT/traces/workloads.json
for workload in $WORKLOADS; do
  jq -e --arg w "$workload" 'any(.[]; .name == $w)' "$manifest" >/dev/null \
    || die "WORKLOADS: no workload $workload (the export has $(jq -r 'map(.name) | join(", ")' "$manifest"))"
  end=$(jq --arg w "$workload" '.[] | select(.name == $w) | .max_end_bytes' "$manifest")
  # (checked here when HOME_SIZE is in bytes; tierd replay refuses it anyway)
  case $HOME_SIZE in *[!0-9]*) ;; *) [ "$end" -le "$HOME_SIZE" ] || die "$workload reaches byte $end, past HOME_SIZE=$HOME_SIZE" ;; esac
done

# replay_flags WORKLOAD: closed loop at QD N = every request at time 0 and N
# in flight; open loop = the trace's own times
replay_flags() {
  jq -r --arg w "$1" --arg m "$MAX_INFLIGHT" '.[] | select(.name == $w) | .replay
    | if .mode == "closed-loop" then "--max-inflight \(.queue_depth)"
      else "--speed \(.speed) --max-inflight \($m)" end' "$manifest"
}
sim_flags() {
  jq -r --arg w "$1" --arg m "$MAX_INFLIGHT" '.[] | select(.name == $w) | .replay
    | if .mode == "closed-loop" then "--queue-depth \(.queue_depth)"
      else "--speed \(.speed) --max-outstanding \($m)" end' "$manifest"
}

# ------------------------------------------------------------------ live runs

live() { # WORKLOAD SETUP
  local workload=$1 setup=$2 name="$1.$2" dir t0 t1 trace
  dir="$work/$name"
  mkdir -p "$dir"
  trace=$OUT/traces/$(jq -r --arg w "$workload" '.[] | select(.name == $w) | .file' "$manifest")
  serve_config "$dir" "$setup" > "$OUT/runs/$name.serve.toml"
  cp "$OUT/runs/$name.serve.toml" "$dir/serve.toml"
  start_server "$dir/serve.toml" "$OUT/runs/$name.serve.log" \
    || { cat "$OUT/runs/$name.serve.log" >&2; die "tierd serve ($name) did not start"; }
  echo "$(date -u +%H:%M:%S) $name: tierd replay $(replay_flags "$workload") ($uri)" >&2
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046 # the flags are words
  "$TIERD" replay --trace "$trace" --target "$uri" $(replay_flags "$workload") \
    --json --label "$setup" > "$OUT/runs/$name.replay.json" 2> "$OUT/runs/$name.replay.log" \
    || echo "$me: $name: tierd replay exited non-zero (errors below in the table; log $OUT/runs/$name.replay.log)" >&2
  t1=$(date +%s.%N)
  "$TIERD" status --config "$dir/serve.toml" --json > "$OUT/runs/$name.status.json"
  stop_server
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' > "$OUT/runs/$name.wall_s"
  rm -rf "$dir"
}

for workload in $WORKLOADS; do
  for setup in $SETUPS; do
    live "$workload" "$setup"
  done
done

# ------------------------------------------------------------------ simulated

cat > "$OUT/sim/stack.toml" <<EOF
# The live stack, simulated: the SSD at SSD_SIZE over the Archive 8 TB at
# the live tier's size; no queue_depth (the live engine hands every request to the model).
name = "smr-live"
segment_bytes = "1GiB"
[[tier]]
name = "ssd"
device = "p3700"
capacity = "$SSD_SIZE"
[[tier]]
name = "smr"
device = "archive8tb"
capacity = "$TIER_SIZE"
[cache]
block_bytes = "4KiB"
EOF
if [ "$SIM" = 1 ]; then
  for workload in $WORKLOADS; do
    trace=$OUT/traces/$(jq -r --arg w "$workload" '.[] | select(.name == $w) | .file' "$manifest")
    for setup in $SETUPS; do
      case $setup in
        no-cache) extra=(--policy none) ;;
        staging-off) extra=(--policy lru --smr-staging off) ;;
        staging-on) extra=(--policy lru --smr-staging on) ;;
      esac
      echo "$(date -u +%H:%M:%S) $workload.$setup: tierd sim" >&2
      # shellcheck disable=SC2046 # the flags are words
      "$TIERD" sim --trace "$trace" --tiers "$OUT/sim/stack.toml" "${extra[@]}" \
        --cache-mode writeback --admission always --volume-bytes "$HOME_SIZE" \
        $(sim_flags "$workload") --seed "$SEED" --json \
        > "$OUT/sim/$workload.$setup.json" 2> "$OUT/sim/$workload.$setup.log"
    done
  done
fi

# ------------------------------------------------------------------ results

runtime_s=$(( $(date +%s) - started ))
rows=$OUT/rows.jsonl
: > "$rows"
for workload in $WORKLOADS; do
  for setup in $SETUPS; do
    name="$workload.$setup"
    note=""
    if [ "$supported" != yes ]; then
      case $setup in
        staging-off) note="without $STAGING_KEY (the engine has no staging yet: per-block writeback)" ;;
        staging-on) note="pending engine: ran without $STAGING_KEY (per-block writeback)" ;;
      esac
    fi
    jq -c --arg w "$workload" --arg s "$setup" --arg note "$note" \
      --argjson wall "$(cat "$OUT/runs/$name.wall_s")" \
      --arg cache_line "$(serve_config /x "$setup" | sed -n 's/^cache = //p')" \
      --slurpfile status "$OUT/runs/$name.status.json" '
      .runs[0] as $r | ($status[0].volumes[0]) as $v | {
        workload: $w, setup: $s, world: "live", note: $note, cache_config: $cache_line,
        requests: $r.requests, reads: $r.reads, writes: $r.writes, errors: $r.errors,
        read_slow_fraction_100ms: $r.read_slow_fraction_100ms,
        read_p99_ms: ($r.read_p99_us / 1000), read_mean_ms: ($r.read_mean_us / 1000),
        write_mean_ms: ($r.write_mean_us / 1000), write_p99_ms: ($r.write_p99_us / 1000),
        elapsed_s: ($r.elapsed_ns / 1e9), wall_s: $wall,
        cache: $v.cache,
        tiers: [$v.tiers[] | {name, reads: .stats.reads, writes: .stats.writes,
          read_bytes: .stats.read_bytes, write_bytes: .stats.write_bytes,
          busy_s: (.stats.busy_ns / 1e9)}]
      }' "$OUT/runs/$name.replay.json" >> "$rows"
    if [ "$SIM" = 1 ]; then
      jq -c --arg w "$workload" --arg s "$setup" '.runs[0] as $r | {
        workload: $w, setup: $s, world: "sim", note: "",
        requests: $r.requests, reads: $r.reads, writes: $r.writes, errors: 0,
        read_slow_fraction_100ms: $r.read_slow_fraction_100ms,
        read_p99_ms: ($r.read_p99_us / 1000), read_mean_ms: ($r.read_mean_us / 1000),
        write_mean_ms: ($r.write_mean_us / 1000), write_p99_ms: ($r.write_p99_us / 1000),
        elapsed_s: ($r.elapsed_ns / 1e9), cache: $r.cache }' \
        "$OUT/sim/$name.json" >> "$rows"
    fi
  done
done

machine="nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
jq -s --slurpfile workloads "$manifest" --arg date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  --arg commit "$commit" --arg machine "$machine" --arg scale "$SCALE" --arg seed "$SEED" \
  --arg ssd "$SSD_SIZE" --arg home "$HOME_SIZE" --arg supported "$supported" \
  --argjson runtime "$runtime_s" '{
    date: $date, tierd: $commit, machine: $machine, scale: ($scale | tonumber),
    seed: ($seed | tonumber), ssd_size: $ssd, home_size: $home,
    engine_takes_staging_key: ($supported == "yes"), runtime_s: $runtime,
    workloads: $workloads[0], rows: .}' "$rows" > "$OUT/results.json"

echo "SMR home tier, live (tierd serve on emulated devices, real time) and simulated on the same traces"
echo "tiers: ssd = p3700 model, $SSD_SIZE sparse file; smr = archive8tb model, $TIER_SIZE bytes sparse file (the drive's capacity rounded up to whole 1 GiB segments), volume $HOME_SIZE bytes; cache blocks 4 KiB, lru, writeback, admission always"
echo "engine takes $STAGING_KEY: $supported"
echo "date: $(jq -r .date "$OUT/results.json"); tierd $commit; $machine"
echo "workloads (all synthetic, from tierd sim --experiment smr-staging --scale $SCALE --seed $SEED --export-traces):"
for workload in $WORKLOADS; do
  jq -r --arg w "$workload" '.[] | select(.name == $w) | "- \(.name): \(.description) [\(.requests) requests, \(.replay.mode)\(if .replay.queue_depth then " QD\(.replay.queue_depth)" else " x\(.replay.speed)" end)]"' "$manifest"
done
echo
echo "| workload | setup | world | reads | writes | reads > 100 ms | read p99 ms | read mean ms | write mean ms | errors | wall s | note |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
jq -r '"| \(.workload) | \(.setup) | \(.world) | \(.reads) | \(.writes) | \(.read_slow_fraction_100ms * 10000 | round / 100) % | \(.read_p99_ms * 10 | round / 10) | \(.read_mean_ms * 100 | round / 100) | \(.write_mean_ms * 100 | round / 100) | \(.errors) | \(.wall_s // "-") | \(.note) |"' "$rows"
echo
echo "cache at the end of each live cache run (tierd status --json .volumes[0].cache; home = the smr tier's device counters):"
jq -r 'select(.world == "live" and .cache != null) | "- \(.workload) \(.setup): \(.cache | {mode, dirty_bytes, occupancy_bytes, written_back_bytes, writebacks, allocations, dirty_evictions, no_slot_blocks, read_hit_ratio, write_hit_ratio} | tostring)\(.cache | to_entries | map(select(.key | test("smr|band|destage|stag"))) | if length > 0 then " " + (from_entries | tostring) else "" end); home: \(.tiers[-1] | {reads, writes, write_bytes, busy_s} | tostring)"' "$rows"
echo
echo "runtime: ${runtime_s} s; results: $OUT/results.json (raw: $OUT/runs, $OUT/sim, traces: $OUT/traces)"
