#!/usr/bin/env bash
# live.sh - issue 17 §2 "Live": paper 003's replicas on `tierd serve`, in
# real time, next to `tierd sim` on the same traces (docs/replicas.md,
# EVIDENCE.md "Paper 003: replicas live").
#
# Traces: `tierd trace synth --preset app-firefox` and `app-calc` (SEED):
# SYNTHETIC application start-ups shaped like paper 003's Fig. 4/5, not the
# paper's traces: two "system" sessions (shared libraries near 30 GB, as at
# login), then four application starts 20 s apart with a system session
# between them; only reads, each issued 40 ms + Exp(10 ms) after the one
# before (dependent reads, longer apart than any random read takes).
#
# Live: for each trace and setup, a fresh data directory and
# `tierd serve --config` of examples/configs/hdd-replicas.toml as it is
# (one emulated WD Caviar WD1200JB, `model = "wd1200jb"`, the whole 120 GB
# over a sparse file, one 110 GiB volume) with
#   on    its `replicas = {...}` line (REPLICAS overrides it),
#   off   that line removed (a plain emulated disk);
# then `tierd replay --prefill` of the trace at x1 (its own times): the
# prefill writes every range the trace reads first (a replicated tier reads
# never-written extents as zeroes without touching the disk, so without it
# the replay would measure nothing), untimed; then the reads, open loop.
# While it runs, `tierd status --json` is polled every POLL seconds: the
# tier's read count and read time (the tier's stats sit above the replica
# layer: user reads only, as the volume sees them, never the copier's IO)
# and the replica counters. Sessions are separated by ~10 s of quiet, so
# the read count stands still between them; the read time between two
# such plateaus is the session's disk time, and the last poll before a
# session shows the copies made before it.
#
# Simulated: `tierd sim --trace FILE --tiers hdd-7200 --policy none
# --replicas off,many --volume-bytes 110GiB` (the same disk model; its
# `many` is the live defaults: up to 4 copies, 20 % of free space, far
# 1 GiB, session gap 1 s, 2 recurrences, copies after 100 ms idle) and
# its per-session disk access time (`replica.session_disk_access_ms`).
#
# Prints the machine, the commands, and per trace a table per session
# (sim off / many disk access; live off / on disk time and the client's
# summed response; copies current before the session; reads served from
# replicas), then totals and ratios; writes results.json and every raw
# file to OUT.
#
# Usage:   bench/replicas/live.sh
# Env:     OUT (/tmp/tierd-replicas-live.<date>)  TRACES ("app-firefox app-calc")
#          SETUPS ("off on")  SEED (1)  POLL (0.5: seconds between status polls)
#          REPLICAS (the replicas line of the `on` setup; default: the
#          example's)  SIM (1; 0 skips tierd sim)  TO_MIN (replay only the
#          first TO_MIN trace minutes, live and simulated: for a quick check)
#          TIERD (a tierd binary; default: build release into CARGO_TARGET_DIR)
# Needs:   jq, python3. Nothing is written inside the repository. Takes about
#          13 min (796 s measured: the traces last 172 s and 220 s, each of
#          the 4 live runs adds a prefill of 2-3 s and a server start).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
me=live.sh
TRACES=${TRACES:-app-firefox app-calc}
SETUPS=${SETUPS:-off on}
SEED=${SEED:-1}
POLL=${POLL:-0.5}
SIM=${SIM:-1}
TO_MIN=${TO_MIN:-}
OUT=${OUT:-/tmp/tierd-replicas-live.$(date +%Y%m%d-%H%M%S)}
example=$repo/examples/configs/hdd-replicas.toml
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

die() { echo "$me: $*" >&2; exit 1; }
command -v jq >/dev/null || die "jq is missing (apt-get install jq)"
command -v python3 >/dev/null || die "python3 is missing"
[ -r "$example" ] || die "no $example"
example_replicas=$(grep -E '^replicas = ' "$example") || die "$example has no replicas line"
REPLICAS=${REPLICAS:-$example_replicas}
for setup in $SETUPS; do
  case $setup in on|off) ;; *) die "SETUPS: unknown setup $setup (on, off)" ;; esac
done
window=()
[ -n "$TO_MIN" ] && window=(--to-min "$TO_MIN")

started=$(date +%s)
if [ -z "${TIERD:-}" ]; then
  echo "building tierd (release)..." >&2
  target_dir=${CARGO_TARGET_DIR:-$repo/target}
  (cd "$repo" && CARGO_TARGET_DIR=$target_dir cargo build --release -q -p tierd-cli)
  TIERD=$target_dir/release/tierd
fi
[ -x "$TIERD" ] || die "no tierd binary at $TIERD"
# The commit the binary was built from (read now: the tree may change
# during the run).
commit=$(cd "$repo" && git rev-parse --short HEAD)$(cd "$repo" && git diff --quiet HEAD -- crates || echo '+changes')

mkdir -p "$OUT/runs" "$OUT/sim" "$OUT/traces"
work=$(mktemp -d /tmp/tierd-replicas-live-work.XXXXXX)
server_pid=""
replay_pid=""
cleanup() {
  if [ -n "$replay_pid" ]; then
    kill -TERM "$replay_pid" 2>/dev/null || true
    wait "$replay_pid" 2>/dev/null || true
  fi
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# serve_config DIR SETUP: the example, its data in DIR, replicas per SETUP
serve_config() {
  local dir=$1 setup=$2
  awk -v dir="$dir" -v setup="$setup" -v replicas="$REPLICAS" '
    /^data_dir = / { print "data_dir = \"" dir "\""; next }
    /^replicas = / { if (setup == "on") print replicas; next }
    { print }' "$example"
}

# start_server CONFIG LOG -> $server_pid, $uri (returns 1 if it does not start)
start_server() {
  local config=$1 log=$2 dir waited=0
  dir=$(dirname "$config")
  : > "$dir/serve.out"
  (cd "$dir" && exec "$TIERD" serve --config "$config" > "$dir/serve.out" 2> "$log") &
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

# poll CONFIG: one line of the tier's figures now
poll() {
  "$TIERD" status --config "$1" --json 2>/dev/null | jq -c --arg t "$(date +%s.%N)" '
    .volumes[0].tiers[0] as $tier | {
      t: ($t | tonumber),
      reads: $tier.stats.reads, read_bytes: $tier.stats.read_bytes,
      read_ns: $tier.stats.read_latency.sum_ns, busy_ns: $tier.stats.busy_ns,
      writes: $tier.stats.writes,
      replicas: ($tier.replicas // null)
    }' || true
}

# ------------------------------------------------------------------ traces

for trace in $TRACES; do
  "$TIERD" trace synth --preset "$trace" --seed "$SEED" --out "$OUT/traces/$trace.csv" \
    > "$OUT/traces/$trace.synth.txt" 2>&1 || { cat "$OUT/traces/$trace.synth.txt" >&2; die "tierd trace synth --preset $trace failed"; }
  echo "$me: $(cat "$OUT/traces/$trace.synth.txt")" >&2
done

# ------------------------------------------------------------------ simulated

if [ "$SIM" = 1 ]; then
  for trace in $TRACES; do
    echo "$(date -u +%H:%M:%S) $trace: tierd sim --replicas off,many" >&2
    "$TIERD" sim --trace "$OUT/traces/$trace.csv" --tiers hdd-7200 --policy none \
      --replicas off,many --volume-bytes 110GiB --seed "$SEED" "${window[@]}" --json \
      > "$OUT/sim/$trace.json" 2> "$OUT/sim/$trace.log" \
      || { cat "$OUT/sim/$trace.log" >&2; die "tierd sim ($trace) failed"; }
  done
fi

# ------------------------------------------------------------------ live

live() { # TRACE SETUP
  local trace=$1 setup=$2 name="$1.$2" dir config
  dir="$work/$name"
  mkdir -p "$dir"
  config=$dir/serve.toml
  serve_config "$dir" "$setup" > "$config"
  cp "$config" "$OUT/runs/$name.serve.toml"
  start_server "$config" "$OUT/runs/$name.serve.log" \
    || { cat "$OUT/runs/$name.serve.log" >&2; die "tierd serve ($name) did not start"; }
  echo "$(date -u +%H:%M:%S) $name: tierd replay --prefill ($uri)" >&2
  : > "$OUT/runs/$name.polls.jsonl"
  "$TIERD" replay --trace "$OUT/traces/$trace.csv" --target "$uri" --prefill \
    --period 500ms "${window[@]}" --json --label "$setup" \
    > "$OUT/runs/$name.replay.json" 2> "$OUT/runs/$name.replay.log" &
  replay_pid=$!
  while kill -0 "$replay_pid" 2>/dev/null; do
    poll "$config" >> "$OUT/runs/$name.polls.jsonl"
    sleep "$POLL"
  done
  wait "$replay_pid" || { cat "$OUT/runs/$name.replay.log" >&2; replay_pid=""; die "tierd replay ($name) failed"; }
  replay_pid=""
  poll "$config" >> "$OUT/runs/$name.polls.jsonl"
  "$TIERD" status --config "$config" --json > "$OUT/runs/$name.status.json"
  stop_server
  rm -rf "$dir"
}

for trace in $TRACES; do
  for setup in $SETUPS; do
    live "$trace" "$setup"
  done
done

# ------------------------------------------------------------------ results

runtime_s=$(( $(date +%s) - started ))
machine="nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/analyse.py" --out "$OUT" --traces "$TRACES" --setups "$SETUPS" --sim "$SIM" \
  --commit "$commit" --machine "$machine" --runtime "$runtime_s" --seed "$SEED" \
  --replicas "$REPLICAS" --to-min "${TO_MIN:-}"
echo
echo "runtime: ${runtime_s} s; results: $OUT/results.json (raw: $OUT/runs, $OUT/sim, traces: $OUT/traces)"
