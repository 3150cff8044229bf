#!/usr/bin/env bash
# run.sh - the same trace and tier stack through `tierd sim` and through
# `tierd replay` -> `tierd serve` on emulated devices, side by side (issue 12
# §1, §3; docs/engine/replay.md "Live versus simulated").
#
# Tiers: a 1 GiB Intel X25-E model (`model = "x25e"`) over a memory backend as
# the fast tier, a 16 GiB Seagate Savvio 10K.4 model (`model = "savvio10k4"`,
# its command queue of 32 reordered shortest-positioning-first) over a sparse
# file as home; 256 MiB segments, 10 s periods, migration as fast as the
# devices allow. The simulator gets the same stack (stack.toml below). The
# live engine hands every request straight to its device model, so the
# simulator's stack sets no host-side `queue_depth` (its default, 128, never
# binds below MAX_INFLIGHT = 128); SIM_QUEUE_DEPTH=32 sets one, as the
# record before issue 12 did (the model then holds 31 requests besides the
# one in service where the live model holds 32). Moves copy as the live
# engine's copiers do (both run the same move machine, docs/moves.md):
# 256 KiB chunks (its default `chunk`), 4 in flight (its default
# `migration_chunks_in_flight`), no pause (`migration_share = 1.0`);
# SIM_MIGRATION="1MiB 4" gives the simulator the copies of that record. The server runs with its
# default [server] settings (SERVER_EXTRA adds lines, e.g.
# 'workers_per_connection = 16', the default with emulated tiers before).
#
# For each policy (none, otf-ast), ROUNDS live runs, each on a fresh data
# directory (cold, as the simulator starts), the policy order reversed every
# other round; the simulator is deterministic and runs once. Prints the trace
# (name, dataset and kind from ../shared/traces/SOURCES.md), the machine, and
# one markdown table: mean / p50 / p99 response from issue, late issues and
# moves per run, and live ÷ sim per round, with the issue 12 target (mean
# within 10 %, p99 within 20 % of the simulator).
#
# Usage:   bench/live-vs-sim/run.sh
# Env:     TRACE (../shared/traces/msr_cambridge/hm_0-cut-20k.csv)  SPEED (8)
#          MAX_INFLIGHT (128)  POLICIES ("none otf-ast")  ROUNDS (2)
#          SERVER_EXTRA (extra lines under [server])  SIM_QUEUE_DEPTH (unset:
#          the simulator's default)  SIM_MIGRATION ("256KiB 4": chunk size and
#          chunks in flight of the simulator's moves)  TIERD (a tierd binary;
#          default: build release into CARGO_TARGET_DIR)  RESULTS (default
#          /tmp/tierd-live-vs-sim.<date>: configs, replay and sim JSON, logs)
#          Block caches: a policy fifo, lru, arc, s3fifo or adaptive in POLICIES runs the
#          simulator's block cache and, live, a cache volume (`cache = {...}`
#          on the volume, its policy kind "none") over the same two tiers, with
#          CACHE_BLOCK (64KiB) and CACHE_MODE (writeback) on both sides; the
#          table then also gives the hit ratios. CACHE_OPTIONS adds keys to the
#          live cache table only (e.g. 'commit_interval = "60s"')
#          HOME_SIZE (16GiB): the home tier and the volume, both worlds (a
#          trace whose offsets reach past it needs more: UMass web1, 17GiB)
# Needs:   jq. Nothing is written inside the repository.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
traces=$(cd "$repo/../shared/traces" 2>/dev/null && pwd || true)
TRACE=${TRACE:-$traces/msr_cambridge/hm_0-cut-20k.csv}
SPEED=${SPEED:-8}
MAX_INFLIGHT=${MAX_INFLIGHT:-128}
POLICIES=${POLICIES:-none otf-ast}
ROUNDS=${ROUNDS:-2}
SERVER_EXTRA=${SERVER_EXTRA:-}
SIM_QUEUE_DEPTH=${SIM_QUEUE_DEPTH:-}
SIM_MIGRATION=${SIM_MIGRATION:-256KiB 4}
CACHE_BLOCK=${CACHE_BLOCK:-64KiB}
HOME_SIZE=${HOME_SIZE:-16GiB}
CACHE_MODE=${CACHE_MODE:-writeback}
read -r sim_chunk_bytes sim_chunks_in_flight <<< "$SIM_MIGRATION"
RESULTS=${RESULTS:-/tmp/tierd-live-vs-sim.$(date +%Y%m%d-%H%M%S)}
PERIOD=10s
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

command -v jq >/dev/null || { echo "run.sh: jq is missing (apt-get install jq)" >&2; exit 1; }
[ -r "$TRACE" ] || { echo "run.sh: TRACE=$TRACE: no such readable file (the default is in ../shared/traces, see its SOURCES.md)" >&2; exit 1; }
TRACE=$(cd "$(dirname "$TRACE")" && pwd)/$(basename "$TRACE")

if [ -z "${TIERD:-}" ]; then
  echo "building tierd (release)..." >&2
  target_dir=${CARGO_TARGET_DIR:-$repo/target}
  (cd "$repo" && CARGO_TARGET_DIR=$target_dir cargo build --release -q -p tierd-cli)
  TIERD=$target_dir/release/tierd
fi

mkdir -p "$RESULTS"
work=$(mktemp -d /tmp/tierd-live-vs-sim-work.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# ------------------------------------------------------------------ the trace

# What SOURCES.md says of the trace: "dataset; format; requests; span; cut/whole".
trace_kind() {
  local sources="$traces/SOURCES.md" relative row
  relative=${TRACE#"$traces"/}
  if [ -n "$traces" ] && [ -r "$sources" ] && [ "$relative" != "$TRACE" ]; then
    row=$(grep -F "| \`$relative\` |" "$sources" | head -1 || true)
    if [ -n "$row" ]; then
      # | file | dataset | format | bytes | requests | span | cut/whole |
      echo "${row% |}" | awk -F' [|] ' '{ printf "real trace, %s: %s, %s, %s requests over %s", $7, $2, $3, $5, $6 }'
      return
    fi
  fi
  echo "kind unknown: not listed in ../shared/traces/SOURCES.md"
}

# ------------------------------------------------------------------ configs

serve_config() { # DIR POLICY
  local kind=$2 cache=""
  case $2 in
    fifo|lru|arc|s3fifo|adaptive)
      # The simulator's block cache of that policy (its defaults: 64 KiB
      # blocks, writeback, admission always, 4 MiB sequential cutoff) is the
      # live engine's cache volume with the same settings.
      kind=none
      cache="cache = { tier = \"ssd\", block = \"$CACHE_BLOCK\", mode = \"$CACHE_MODE\", policy = \"$2\"${CACHE_OPTIONS:+, $CACHE_OPTIONS} }" ;;
  esac
  cat <<EOF
data_dir = "$1"
[server]
listen = ["unix:$1/tierd.sock"]
$SERVER_EXTRA
[[tier]]
name = "ssd"
backend = "memory"
size = "1GiB"
model = "x25e"
unsafe_volatile = true
[[tier]]
name = "hdd"
backend = "file"
path = "hdd.img"
size = "$HOME_SIZE"
model = "savvio10k4"
[[volume]]
name = "vol0"
size = "$HOME_SIZE"
segment = "256MiB"
tiers = ["ssd", "hdd"]
period = "$PERIOD"
migration_share = 1.0
$cache
[volume.policy]
kind = "$kind"
EOF
}

cat > "$RESULTS/stack.toml" <<EOF
name = "live-cmp"
segment_bytes = "256MiB"
[[tier]]
name = "ssd"
device = "x25e"
capacity = "1GiB"
[[tier]]
name = "hdd"
device = "savvio10k4"
capacity = "$HOME_SIZE"
${SIM_QUEUE_DEPTH:+queue_depth = $SIM_QUEUE_DEPTH}
[migration]
chunk_bytes = "$sim_chunk_bytes"
max_concurrent_moves = 1
chunks_in_flight = $sim_chunks_in_flight
chunk_gap = "0s"
EOF

# ------------------------------------------------------------------ runs

# live POLICY ROUND: one replay against a fresh server; JSON in $RESULTS
live() {
  local policy=$1 round=$2 name="live-$1-r$2" dir uri waited=0
  dir="$work/$name"
  mkdir -p "$dir"
  serve_config "$dir" "$policy" > "$RESULTS/$name.serve.toml"
  : > "$dir/serve.out"
  "$TIERD" serve --config "$RESULTS/$name.serve.toml" > "$dir/serve.out" 2> "$RESULTS/$name.serve.log" &
  server_pid=$!
  until uri=$(sed -n 's/^tierd: volume vol0 at //p' "$dir/serve.out" | head -1) && [ -n "$uri" ]; do
    sleep 0.1
    waited=$((waited + 1))
    if [ $waited -gt 600 ] || ! kill -0 "$server_pid" 2>/dev/null; then
      echo "run.sh: tierd serve ($name) did not start:" >&2
      cat "$RESULTS/$name.serve.log" >&2
      exit 1
    fi
  done
  echo "$(date -u +%H:%M:%S) round $round: tierd replay, $policy ($uri)" >&2
  "$TIERD" replay --trace "$TRACE" --target "$uri" --speed "$SPEED" \
    --max-inflight "$MAX_INFLIGHT" --period "$PERIOD" --json --label "$policy" \
    > "$RESULTS/$name.json" 2> "$RESULTS/$name.replay.log"
  "$TIERD" status --config "$RESULTS/$name.serve.toml" --json > "$RESULTS/$name.status.json"
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=""
}

sim() {
  local policies
  policies=$(echo "$POLICIES" | tr ' ' ',')
  echo "$(date -u +%H:%M:%S) tierd sim, $policies" >&2
  "$TIERD" sim --trace "$TRACE" --tiers "$RESULTS/stack.toml" --policy "$policies" \
    --cache-block "$CACHE_BLOCK" --cache-mode "$CACHE_MODE" \
    --speed "$SPEED" --period "$PERIOD" --max-outstanding "$MAX_INFLIGHT" \
    --volume-bytes "$HOME_SIZE" --json > "$RESULTS/sim.json" 2> "$RESULTS/sim.log"
}

sim
read -r -a policies <<< "$POLICIES"
for ((round = 1; round <= ROUNDS; round++)); do
  order=("${policies[@]}")
  if ((round % 2 == 0)); then
    order=(); for ((i = ${#policies[@]} - 1; i >= 0; i--)); do order+=("${policies[$i]}"); done
  fi
  for policy in "${order[@]}"; do
    live "$policy" "$round"
  done
done

# ------------------------------------------------------------------ table

ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else printf "-" }'; }

requests=$(jq '.runs[0].requests' "$RESULTS/sim.json")
echo "trace: $TRACE"
echo "kind: $(trace_kind)"
echo "replay: open loop x$SPEED, at most $MAX_INFLIGHT requests outstanding (both sides), period $PERIOD, $requests requests; server [server] extra: ${SERVER_EXTRA:-none (defaults)}; simulator host queue_depth: ${SIM_QUEUE_DEPTH:-default}, moves in $sim_chunk_bytes chunks, $sim_chunks_in_flight in flight"
echo "tiers: ssd = x25e model, 1 GiB (memory backend, live) > hdd = savvio10k4 model, 16 GiB (sparse file, live), 256 MiB segments"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); tierd $(cd "$repo" && git rev-parse --short HEAD)$(cd "$repo" && git diff --quiet HEAD -- crates || echo '+changes'); nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "results: $RESULTS"
echo
echo "| policy | run | mean ms | p50 ms | p99 ms | late issues | moves | mean ÷ sim | p50 ÷ sim | p99 ÷ sim |"
echo "|---|---|---|---|---|---|---|---|---|---|"
verdict=()
for policy in "${policies[@]}"; do
  sim_run=$(jq -c --arg p "$policy" '.runs[] | select(.policy == $p)' "$RESULTS/sim.json")
  s_mean=$(jq '.avg_response_us' <<< "$sim_run")
  s_p50=$(jq '.response_p50_us' <<< "$sim_run")
  s_p99=$(jq '.response_p99_us' <<< "$sim_run")
  echo "| $policy | sim | $(ms "$s_mean") | $(ms "$s_p50") | $(ms "$s_p99") | $(jq '.deferred_requests' <<< "$sim_run") | $(jq '.moves' <<< "$sim_run") | 1 | 1 | 1 |"
  for ((round = 1; round <= ROUNDS; round++)); do
    name="live-$policy-r$round"
    run=$(jq -c '.runs[0]' "$RESULTS/$name.json")
    moves=$(jq '[.volumes[0].completed_moves, .volumes[0].dropped_moves] | "\(.[0]) (+\(.[1]) dropped)"' -r "$RESULTS/$name.status.json")
    l_mean=$(jq '.avg_response_us' <<< "$run")
    l_p50=$(jq '.response_p50_us' <<< "$run")
    l_p99=$(jq '.response_p99_us' <<< "$run")
    r_mean=$(ratio "$l_mean" "$s_mean")
    r_p99=$(ratio "$l_p99" "$s_p99")
    echo "| $policy | live r$round | $(ms "$l_mean") | $(ms "$l_p50") | $(ms "$l_p99") | $(jq '.late_issues' <<< "$run") | $moves | $r_mean | $(ratio "$l_p50" "$s_p50") | $r_p99 |"
    mean_ok=$(awk -v r="$r_mean" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? "met" : "MISSED" }')
    p99_ok=$(awk -v r="$r_p99" 'BEGIN { print (r >= 0.8 && r <= 1.2) ? "met" : "MISSED" }')
    errors=$(jq '.errors' <<< "$run")
    verdict+=("$policy r$round: mean within 10 % $mean_ok, p99 within 20 % $p99_ok, $errors errors")
  done
done
echo
for policy in "${policies[@]}"; do
  case $policy in fifo|lru|arc|s3fifo|adaptive) ;; *) continue ;; esac
  sim_run=$(jq -c --arg p "$policy" '.runs[] | select(.policy == $p)' "$RESULTS/sim.json")
  echo "- $policy hit ratio (blocks): sim $(jq '.cache.hit_ratio' <<< "$sim_run" | xargs printf '%.3f'), cache counters $(jq -c '.cache | del(.hit_ratio)' <<< "$sim_run")"
  for ((round = 1; round <= ROUNDS; round++)); do
    echo "  - live r$round: $(jq -c '.volumes[0].cache | {read_hit_ratio, write_hit_ratio, read_blocks, read_hit_blocks, write_blocks, write_hit_blocks, no_slot_blocks, allocations, writebacks, dirty_bytes}' "$RESULTS/live-$policy-r$round.status.json")"
  done
done
echo
printf 'target: %s\n' "${verdict[@]}"
