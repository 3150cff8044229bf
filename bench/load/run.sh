#!/usr/bin/env bash
# run.sh - load and resource bounds of `tierd serve` (issue 5 §4).
#
# Starts a release `tierd serve` (256 MiB volume of 1 MiB segments, a 64 MiB
# write-through memory tier over a file home), runs fio's nbd engine with 64
# jobs = 64 concurrent NBD connections, each on its own 4 MiB range, mixed
# random 4 KiB reads and writes at iodepth 4 with crc32c verify
# (verify_backlog: written blocks are read back and checked while the load
# runs), while a mover loop forces segments between the tiers with
# `tierd move` every 200 ms. Samples the server's VmRSS, thread count and
# open descriptors every 10 s. Prints: fio errors, verify failures, IOs,
# moves completed, RSS after warm-up (the 60 s sample) and at the end,
# growth %, and the peaks of threads and descriptors (queue evidence: the
# server's per-connection buffers and queues are fixed, see
# docs/engine/nbd.md, so nothing but RSS could show a queue growing).
#
# Usage:   bench/load/run.sh
# Env:     DURATION seconds (600)  JOBS (64)  CARGO_TARGET_DIR (release build)
#          RESULTS (default /tmp/tierd-load.<date>; fio JSON, samples, log)
# Nothing is written inside the repository.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
DURATION=${DURATION:-600}
JOBS=${JOBS:-64}
RESULTS=${RESULTS:-/tmp/tierd-load.$(date +%Y%m%d-%H%M%S)}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
for tool in fio jq; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing" >&2; exit 1; }
done
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || { echo "run.sh: this fio has no nbd engine" >&2; exit 1; }

(cd "$repo" && cargo build --release -q -p tierd-cli)
tierd="${CARGO_TARGET_DIR:-$repo/target}/release/tierd"
mkdir -p "$RESULTS"
work=$(mktemp -d /tmp/tierd-load-work.XXXXXX)
server_pid=""
mover_pid=""
cleanup() {
  [ -n "$mover_pid" ] && kill "$mover_pid" 2>/dev/null || true
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null || true
  [ -n "$server_pid" ] && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

segments=256
cat > "$work/config.toml" <<TOML
data_dir = "data"

[server]
listen = ["unix:tierd.sock"]

[metrics]
listen = "127.0.0.1:0"

[[tier]]
name = "mem"
backend = "memory"
size = "64MiB"

[[tier]]
name = "disk"
backend = "file"
path = "disk.img"
size = "256MiB"

[[volume]]
name = "vol0"
size = "256MiB"
segment = "1MiB"
chunk = "256KiB"
tiers = ["mem", "disk"]
period = "1s"

[volume.policy]
kind = "none"
TOML

cd "$work"
"$tierd" serve --config config.toml > serve.out 2> "$RESULTS/tierd.log" &
server_pid=$!
for _ in $(seq 1 600); do
  grep -q '^tierd: admin socket' serve.out 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$RESULTS/tierd.log" >&2; exit 1; }
  sleep 0.1
done
uri=$(sed -n 's/^tierd: volume vol0 at \(nbd+unix:.*\)$/\1/p' serve.out)
metrics=$(sed -n 's/^tierd: metrics at \(http:.*\)$/\1/p' serve.out)
echo "tierd pid $server_pid, $uri, $metrics; ${JOBS} connections for ${DURATION} s; results in $RESULTS" >&2

# Mover: round r moves segment (r*37 mod 256) to mem and the one moved up 32
# rounds ago back to disk (at most 32 of the 64 memory slots asked for).
(
  round=0
  while true; do
    up=$(( (round * 37) % segments ))
    "$tierd" move --config config.toml --volume vol0 --segment "$up" --to mem >/dev/null 2>&1 || true
    if [ "$round" -ge 32 ]; then
      down=$(( ((round - 32) * 37) % segments ))
      "$tierd" move --config config.toml --volume vol0 --segment "$down" --to disk >/dev/null 2>&1 || true
    fi
    round=$((round + 1))
    sleep 0.2
  done
) &
mover_pid=$!

sample() {
  local elapsed=$1
  local rss threads fds
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status")
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$server_pid/status")
  fds=$(ls "/proc/$server_pid/fd" | wc -l)
  echo "$elapsed $rss $threads $fds" >> "$RESULTS/samples.txt"
}
: > "$RESULTS/samples.txt"
(
  elapsed=0
  while kill -0 "$server_pid" 2>/dev/null; do
    sample "$elapsed"
    sleep 10
    elapsed=$((elapsed + 10))
  done
) &
sampler_pid=$!

set +e
fio --name=load --ioengine=nbd --uri="$uri" --thread --numjobs="$JOBS" \
    --size=4M --offset_increment=4M --rw=randrw --rwmixread=50 --bs=4k \
    --iodepth=4 --verify=crc32c --verify_backlog=256 --verify_fatal=1 \
    --verify_state_save=0 --time_based --runtime="$DURATION" \
    --group_reporting --output-format=json --output="$RESULTS/fio.json" \
    2> "$RESULTS/fio.stderr"
fio_status=$?
set -e
sample end
kill "$sampler_pid" 2>/dev/null || true
kill "$mover_pid" 2>/dev/null || true
mover_pid=""
curl -s "$metrics" > "$RESULTS/metrics.txt" 2>/dev/null || true
"$tierd" status --config config.toml --json > "$RESULTS/status.json"

# fio's nbd engine prints "fio: connected to NBD server" into --output.
sed -n '/^{/,$p' "$RESULTS/fio.json" > "$RESULTS/fio.clean.json"
mv "$RESULTS/fio.clean.json" "$RESULTS/fio.json"
errors=$(jq '[.jobs[].error] | add' "$RESULTS/fio.json" 2>/dev/null || echo "?")
verify_failures=$(grep -ci 'verify\|bad magic\|bad header\|mismatch' "$RESULTS/fio.stderr" || true)
ios=$(jq '[.jobs[] | .read.total_ios + .write.total_ios] | add' "$RESULTS/fio.json" 2>/dev/null || echo "?")
read_mib=$(jq '[.jobs[].read.io_bytes] | add / 1048576 | floor' "$RESULTS/fio.json" 2>/dev/null || echo "?")
write_mib=$(jq '[.jobs[].write.io_bytes] | add / 1048576 | floor' "$RESULTS/fio.json" 2>/dev/null || echo "?")
moves=$(jq '.volumes[0].completed_moves' "$RESULTS/status.json")
server_errors=$(awk '/^tierd_nbd_request_errors_total / {print $2}' "$RESULTS/metrics.txt")
warm=$(awk '$1 == 60 {print $2}' "$RESULTS/samples.txt")
# Shorter runs: the last sample before the end stands in for warm-up.
[ -n "$warm" ] || warm=$(awk '$1 != "end" {v = $2} END {print v}' "$RESULTS/samples.txt")
end=$(awk '$1 == "end" {print $2}' "$RESULTS/samples.txt")
peak=$(awk '{ if ($2 > m) m = $2 } END {print m}' "$RESULTS/samples.txt")
threads=$(awk '{ if ($3 > m) m = $3 } END {print m}' "$RESULTS/samples.txt")
fds=$(awk '{ if ($4 > m) m = $4 } END {print m}' "$RESULTS/samples.txt")
growth=$(awk -v a="$warm" -v b="$end" 'BEGIN { printf "%.1f", (b - a) * 100 / a }')
cat <<REPORT
load: ${JOBS} NBD connections, randrw 4k iodepth 4 with crc32c verify, ${DURATION} s, mover every 200 ms
fio exit status: $fio_status
fio errors: $errors
verify failures (lines in fio stderr): $verify_failures
server request errors (metrics): ${server_errors:-?}
IOs: $ios (read $read_mib MiB, written $write_mib MiB)
moves completed: $moves
RSS after warm-up (60 s): $warm KiB; at end: $end KiB; growth: $growth %; peak: $peak KiB
peak threads: $threads; peak open descriptors: $fds
samples (s, VmRSS KiB, threads, fds): $RESULTS/samples.txt
REPORT
[ "$fio_status" -eq 0 ] && [ "$errors" = "0" ] && [ "$verify_failures" = "0" ]
