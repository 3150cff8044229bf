#!/usr/bin/env bash
# compare.sh - tierd serve against nbdkit and qemu-nbd, side by side in one run,
# over Unix sockets, with fio's nbd engine at 4 KiB (issue 4 §6).
#
#   mem    tierd volume whose segments all sit on a memory tier
#          (unsafe_volatile = true, every segment moved there with `tierd move`
#          before measuring), the same with a write-through memory tier, and
#          `nbdkit memory 256M`
#   file   tierd volume on one file tier (tiers = ["disk"]; page cache, and
#          direct = true, both with the server's default settings),
#          `nbdkit file` and `qemu-nbd --cache=none --aio=io_uring` on the
#          same file (each tierd server on its own copy of it: a tier file is
#          locked by the server that uses it); DIRECT_ENGINES adds one
#          direct = true server per IO engine named
#   tls    the memory-tier volume over plain text and over TLS (rustls,
#          mode = "require"), and `nbdkit --tls=require memory 256M` (GnuTLS),
#          all with one throwaway EC P-256 CA + server certificate made with
#          openssl; fio's libnbd finds the CA in $HOME/.pki/libnbd (fio does
#          not let a URI name files), so HOME points into the work directory
#          for this part
#   stall  fio randrw 4k QD4 on a 1 GiB volume while its one 1 GiB segment
#          migrates file -> memory and back; fio's clat max / p99.9 against the
#          same run without a migration
#   cache  a cache volume (a 64 MiB file tier caching a 256 MiB file home in
#          64 KiB blocks, s3fifo) in writeback and in writethrough, the same
#          in writeback with policy = "adaptive" (tierd-ad: adaptive
#          admission's bookkeeping on the data path, issue 14 §3), the same
#          home as a plain file tier, and `nbdkit file` on the home file;
#          first with fio over a 32 MiB hot set that fits the cache (warmed
#          by one random 64 KiB read pass), then over all 256 MiB (does not
#          fit). Each tierd gets its own copy of the home file
#
# Workloads for mem/file: randread and randwrite at QD1 and QD16, RUNTIME s
# each (plus 1 s ramp), size 256M. Every server of a group stays up; the runs
# alternate between them workload by workload, ROUNDS times, and the server
# order is reversed every other round, so drift on this shared machine hits
# all of them alike.
#
# Usage:   bench/nbd/compare.sh [mem] [file] [tls] [stall] [cache]   (default: the first four)
# Env:     ROUNDS (2)  RUNTIME (10)  STALL_RUNTIME (20)
#          DIRECT_ENGINES (""; e.g. "psync uring": extra file rows
#          tierd-direct-psync, tierd-direct-uring with io_engine set)
#          DIRECT_WORKERS ("": server default; N: workers_per_connection = N
#          on every direct = true server)
#          BASELINE_TIERD=PATH  (mem only: also run the tierd-mem volume on this
#          other tierd binary, e.g. one built from an earlier commit into its
#          own target dir, as tierd-mem-base, and print this tierd against it)
#          TIERD_VARIANTS ("": more tierd servers in mem and file, to compare
#          concurrency shapes side by side: space-separated
#          LABEL:BINARY:WORKERS[:DIRECT[:ENV=VALUE]], e.g.
#          "old-inline:/tmp/tierd-old:0 old-workers:/tmp/tierd-old:16";
#          WORKERS is server.workers_per_connection, "-" for the default;
#          DIRECT (file only) true or false; ENV set for that server only.
#          Rows tierd-mem-LABEL and tierd-file-LABEL)
#          PIN=none|split  (split: servers on CPU 0, fio on CPU 1, via taskset)
#          CARGO_TARGET_DIR (where the release tierd is built)
#          RESULTS (default /tmp/tierd-nbd-bench.<date>; raw fio JSON lands there)
# Prints markdown tables on stdout; nothing is written inside the repository.
# Every row also has the server's CPU time per million IOs: utime + stime
# of the server process (/proc/PID/stat) across the fio run (its 1 s ramp
# included) divided by fio's IO count.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(mem file tls stall)
ROUNDS=${ROUNDS:-2}
DIRECT_ENGINES=${DIRECT_ENGINES:-}
DIRECT_WORKERS=${DIRECT_WORKERS:-}
TIERD_VARIANTS=${TIERD_VARIANTS:-}
RUNTIME=${RUNTIME:-10}
STALL_RUNTIME=${STALL_RUNTIME:-20}
PIN=${PIN:-none}
RESULTS=${RESULTS:-/tmp/tierd-nbd-bench.$(date +%Y%m%d-%H%M%S)}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

for tool in fio nbdkit qemu-nbd jq taskset; do
  command -v "$tool" >/dev/null || { echo "compare.sh: $tool is missing (../shared/tools/install-nbd-clients.sh)" >&2; exit 1; }
done
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || { echo "compare.sh: this fio has no nbd engine" >&2; exit 1; }

mkdir -p "$RESULTS"
work=$(mktemp -d /tmp/tierd-nbd-work.XXXXXX)
server_pids=()
declare -A pid_of   # server label -> pid, for CPU time
cleanup() {
  for pid in "${server_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${server_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

case $PIN in
  none)  server_cpu=(); fio_cpu=() ;;
  split) server_cpu=(taskset -c 0); fio_cpu=(taskset -c 1) ;;
  *) echo "compare.sh: PIN must be none or split" >&2; exit 1 ;;
esac

echo "building tierd (release)..." >&2
target_dir=${CARGO_TARGET_DIR:-$repo/target}
(cd "$repo" && CARGO_TARGET_DIR=$target_dir cargo build --release -q -p tierd-cli)
tierd=$target_dir/release/tierd

# ------------------------------------------------------------------ servers

# start_tierd NAME CONFIG_TEXT [BINARY [ENV=VALUE]] -> sets $uri; the config's
# data_dir is $work/NAME
start_tierd() {
  local name=$1 text=$2 binary=${3:-$tierd} environment=${4:-TIERD_COMPARE=1}
  mkdir -p "$work/$name"
  printf '%s\n' "$text" > "$work/$name.toml"
  env "$environment" "${server_cpu[@]}" "$binary" serve --config "$work/$name.toml" > "$work/$name.out" 2> "$work/$name.err" &
  server_pids+=($!)
  pid_of[$name]=$!
  local waited=0
  until uri=$(sed -n 's/^tierd: volume vol0 at //p' "$work/$name.out" | head -1) && [ -n "$uri" ]; do
    sleep 0.1
    waited=$((waited + 1))
    if [ $waited -gt 600 ]; then
      echo "compare.sh: tierd $name did not start:" >&2
      cat "$work/$name.err" >&2
      exit 1
    fi
  done
}

# wait_for_socket PATH
wait_for_socket() {
  local waited=0
  until [ -S "$1" ]; do
    sleep 0.1
    waited=$((waited + 1))
    [ $waited -lt 300 ] || { echo "compare.sh: no socket $1" >&2; exit 1; }
  done
}

start_nbdkit() { # NAME PLUGIN ARGS... -> $uri
  local name=$1; shift
  "${server_cpu[@]}" nbdkit -f -U "$work/$name.sock" "$@" 2> "$work/$name.err" &
  server_pids+=($!)
  pid_of[$name]=$!
  wait_for_socket "$work/$name.sock"
  uri="nbd+unix:///vol0?socket=$work/$name.sock"
}

start_qemu_nbd() { # NAME FILE -> $uri
  local name=$1 file=$2
  "${server_cpu[@]}" qemu-nbd -t -e 16 -x vol0 --cache=none --aio=io_uring -f raw \
    -k "$work/$name.sock" "$file" 2> "$work/$name.err" &
  server_pids+=($!)
  pid_of[$name]=$!
  wait_for_socket "$work/$name.sock"
  uri="nbd+unix:///vol0?socket=$work/$name.sock"
}

# tierd_status NAME -> the volume's JSON
tierd_status() {
  "$tierd" status --config "$work/$1.toml" --json | jq -c '.volumes[0]'
}

# move_all NAME TIER SEGMENTS EXPECTED_PLACEMENT: queue moves, wait for them
move_all() {
  local name=$1 tier=$2 segments=$3 expected=$4 segment waited=0
  for ((segment = 0; segment < segments; segment++)); do
    "$tierd" move --config "$work/$name.toml" --volume vol0 --segment "$segment" --to "$tier" >/dev/null
  done
  until [ "$(tierd_status "$name" | jq -r '.placement')" = "$expected" ]; do
    sleep 0.1
    waited=$((waited + 1))
    [ $waited -lt 1200 ] || { echo "compare.sh: $name never reached placement $expected: $(tierd_status "$name")" >&2; exit 1; }
  done
}

# ------------------------------------------------------------------ fio

# cpu_ticks PID: utime + stime of the process, in clock ticks
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# run_fio LABEL URI RW QD [extra fio args...]: JSON into $RESULTS/LABEL.json;
# with SERVER set (a key of pid_of), that server's CPU seconds across the run
# into $RESULTS/LABEL.cpu
run_fio() {
  local label=$1 target=$2 rw=$3 depth=$4; shift 4
  local pid=${pid_of[${SERVER:-}]:-} before=0
  [ -z "$pid" ] || before=$(cpu_ticks "$pid")
  "${fio_cpu[@]}" fio --name="$label" --ioengine=nbd --uri="$target" \
    --rw="$rw" --bs=4k --iodepth="$depth" --size="${FIO_SIZE:-256M}" \
    --runtime="$RUNTIME" --ramp_time=1 --time_based \
    --output-format=json --output="$RESULTS/$label.json" "$@" >/dev/null
  if [ -n "$pid" ]; then
    echo "$(cpu_ticks "$pid") $before $(getconf CLK_TCK)" |
      awk '{ printf "%.3f\n", ($1 - $2) / $3 }' > "$RESULTS/$label.cpu"
  fi
}

fill() { # URI SIZE: write every byte once, so reads never hit holes
  "${fio_cpu[@]}" fio --name=fill --ioengine=nbd --uri="$1" --rw=write --bs=1M \
    --iodepth=4 --size="$2" --output-format=terse >/dev/null
}

# The markdown summary of a group: SERVERS (label=name ...) and baseline name.
summarize() {
  ROUNDS=$ROUNDS /usr/bin/python3 - "$RESULTS" "$@" <<'PY'
import json, os, statistics, sys
results, baseline, names = sys.argv[1], sys.argv[2], sys.argv[3:]
workloads = [("randread", 1), ("randread", 16), ("randwrite", 1), ("randwrite", 16)]
def load(name, rw, qd, rnd):
    path = os.path.join(results, f"{name}-{rw}-qd{qd}-r{rnd}.json")
    if not os.path.exists(path):
        return None
    job = json.load(open(path))["jobs"][0]
    side = job["read" if rw == "randread" else "write"]
    pct = side["clat_ns"].get("percentile", {})
    cpu_path = path[:-len(".json")] + ".cpu"
    cpu = None
    if os.path.exists(cpu_path) and side["total_ios"]:
        cpu = float(open(cpu_path).read()) / (side["total_ios"] / 1e6)
    return side["iops"], pct.get("50.000000", 0) / 1e3, pct.get("99.000000", 0) / 1e3, cpu
rounds = range(1, int(os.environ["ROUNDS"]) + 1)
print("| workload | server | iops per round | mean iops | p50 µs per round | p99 µs per round | iops / " + baseline + " (per round) | p50 / " + baseline + " | CPU s per M IOs per round |")
print("|---|---|---|---|---|---|---|---|---|")
for rw, qd in workloads:
    base = {r: load(baseline, rw, qd, r) for r in rounds}
    for name in names:
        runs = {r: load(name, rw, qd, r) for r in rounds}
        got = [runs[r] for r in rounds if runs[r]]
        if not got:
            continue
        iops = " / ".join(f"{x[0]/1e3:.1f} k" for x in got)
        p50 = " / ".join(f"{x[1]:.1f}" for x in got)
        p99 = " / ".join(f"{x[2]:.1f}" for x in got)
        mean = statistics.mean(x[0] for x in got)
        cpu = " / ".join("–" if x[3] is None else f"{x[3]:.1f}" for x in got)
        if name == baseline:
            ratio, lat = "1", "1"
        else:
            pairs = [(runs[r], base[r]) for r in rounds if runs[r] and base[r]]
            ratio = " / ".join(f"{a[0]/b[0]:.2f}" for a, b in pairs)
            lat = " / ".join(f"{a[1]/b[1]:.2f}" for a, b in pairs if b[1])
        print(f"| {rw} QD{qd} | {name} | {iops} | {mean/1e3:.1f} k | {p50} | {p99} | {ratio} | {lat} | {cpu} |")
PY
}

# run_group NAME=URI...: the alternating runs
run_group() {
  local -a pairs=("$@") order
  local round rw qd pair name target
  for ((round = 1; round <= ROUNDS; round++)); do
    if ((round % 2)); then order=("${pairs[@]}"); else
      order=(); for ((i = ${#pairs[@]} - 1; i >= 0; i--)); do order+=("${pairs[$i]}"); done
    fi
    for rw in randread randwrite; do
      for qd in 1 16; do
        for pair in "${order[@]}"; do
          name=${pair%%=*}; target=${pair#*=}
          echo "round $round: $name $rw QD$qd" >&2
          SERVER=$name run_fio "$name-$rw-qd$qd-r$round" "$target" "$rw" "$qd"
        done
      done
    done
  done
}

machine() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg); PIN=$PIN"
  echo "tierd $(cd "$repo" && git rev-parse --short HEAD); $(nbdkit --version | head -1); $(qemu-nbd --version | head -1); $(fio --version)"
  echo
}

# ------------------------------------------------------------------ parts

# memory_volume_config NAME EXTRA: a 256 MiB volume of 64 MiB segments on a
# 256 MiB unsafe_volatile memory tier over a file home, data in $work/NAME,
# socket $work/NAME.sock; EXTRA (e.g. a [server.tls] table) follows [server].
memory_volume_config() {
  cat <<EOF
data_dir = "$work/$1"
[server]
listen = ["unix:$work/$1.sock"]
$2
[[tier]]
name = "mem"
backend = "memory"
size = "256MiB"
unsafe_volatile = true
[[tier]]
name = "home"
backend = "file"
path = "home.img"
size = "256MiB"
[[volume]]
name = "vol0"
size = "256MiB"
segment = "64MiB"
tiers = ["mem", "home"]
period = "60s"
[volume.policy]
kind = "none"
EOF
}

# workers_line WORKERS: the [server] line ("-": none, the default)
workers_line() {
  [ "$1" = - ] || echo "workers_per_connection = $1"
}

part_mem() {
  local volatile_config write_through_config
  volatile_config=$(memory_volume_config tmem "")
  write_through_config=${volatile_config//tmem/twt}
  write_through_config=${write_through_config//unsafe_volatile = true/unsafe_volatile = false}
  start_tierd tmem "$volatile_config"; local tmem=$uri
  start_tierd twt "$write_through_config"; local twt=$uri
  # The write-through tier's home alone (the same file home, no memory
  # tier): what a write-through write should cost at most.
  local home_config
  home_config=$(printf '%s\n' "${write_through_config//twt/thome}" | awk '
    /^\[\[tier\]\]/ { block = $0; getline; if ($0 ~ /name = "mem"/) { skip = 1; next } skip = 0; print block }
    /^\[\[volume\]\]/ { skip = 0 }
    !skip { print }' | sed 's/tiers = \["mem", "home"\]/tiers = ["home"]/')
  start_tierd thome "$home_config"; local thome=$uri
  start_nbdkit kmem memory 256M; local kmem=$uri
  pid_of[tierd-mem]=${pid_of[tmem]}; pid_of[tierd-mem-wt]=${pid_of[twt]}; pid_of[nbdkit-memory]=${pid_of[kmem]}
  pid_of[tierd-home]=${pid_of[thome]}
  move_all tmem mem 4 0000
  move_all twt mem 4 0000
  for target in "$tmem" "$twt" "$thome" "$kmem"; do fill "$target" 256M; done
  local group=("tierd-mem=$tmem" "nbdkit-memory=$kmem" "tierd-mem-wt=$twt" "tierd-home=$thome")
  if [ -n "${BASELINE_TIERD:-}" ]; then
    echo "baseline tierd: $BASELINE_TIERD ($("$BASELINE_TIERD" --version 2>/dev/null || echo 'no --version'))" >&2
    start_tierd tbase "${volatile_config//tmem/tbase}" "$BASELINE_TIERD"; local tbase=$uri
    move_all tbase mem 4 0000
    fill "$tbase" 256M
    group+=("tierd-mem-base=$tbase")
  fi
  local variant label binary workers direct environment
  local -a variants=()
  for variant in $TIERD_VARIANTS; do
    IFS=: read -r label binary workers direct environment <<< "$variant"
    start_tierd "tierd-mem-$label" "$(memory_volume_config "tierd-mem-$label" "$(workers_line "$workers")")" "$binary" "${environment:-TIERD_COMPARE=1}"
    move_all "tierd-mem-$label" mem 4 0000
    fill "$uri" 256M
    group+=("tierd-mem-$label=$uri"); variants+=("tierd-mem-$label")
  done
  run_group "${group[@]}"
  echo "### Memory: tierd (all segments on the memory tier) vs nbdkit memory"
  echo
  summarize nbdkit-memory tierd-mem nbdkit-memory "${variants[@]}" tierd-mem-wt
  echo
  echo "### Write-through memory tier vs its file home alone (tierd-home)"
  echo
  summarize tierd-home tierd-mem-wt tierd-home
  echo
  if [ -n "${BASELINE_TIERD:-}" ]; then
    echo "### Memory: this tierd vs the baseline binary (same volume)"
    echo
    summarize tierd-mem-base tierd-mem tierd-mem-base
    echo
  fi
}

# file_config NAME FILE DIRECT [IO_ENGINE [WORKERS]]: one file tier holding
# the whole volume; server defaults, but DIRECT_WORKERS on direct ones and
# WORKERS ("-": the default) when given
file_config() {
  local workers="" engine=""
  [ "$3" = false ] || [ -z "$DIRECT_WORKERS" ] || workers="workers_per_connection = $DIRECT_WORKERS"
  [ -z "${5:-}" ] || workers=$(workers_line "$5")
  [ -z "${4:-}" ] || engine="io_engine = \"$4\""
  cat <<EOF
data_dir = "$work/$1"
[server]
listen = ["unix:$work/$1.sock"]
$workers
[[tier]]
name = "disk"
backend = "file"
path = "$2"
size = "256MiB"
direct = $3
$engine
[[volume]]
name = "vol0"
size = "256MiB"
segment = "64MiB"
tiers = ["disk"]
period = "60s"
[volume.policy]
kind = "none"
EOF
}

part_file() {
  local file=$work/file.img
  dd if=/dev/urandom of="$file" bs=1M count=256 status=none
  # A tier file is locked by its server: each tierd gets its own copy.
  local -a group=() names=() engine
  cp "$file" "$work/tfile.img"
  start_tierd tfile "$(file_config tfile "$work/tfile.img" false)"
  group+=("tierd-file=$uri"); names+=(tierd-file)
  start_nbdkit nbdkit-file file "$file"; group+=("nbdkit-file=$uri"); names+=(nbdkit-file)
  start_qemu_nbd qemu-nbd "$file"; group+=("qemu-nbd=$uri"); names+=(qemu-nbd)
  cp "$file" "$work/tdirect.img"
  start_tierd tierd-direct "$(file_config tierd-direct "$work/tdirect.img" true)"
  group+=("tierd-direct=$uri"); names+=(tierd-direct)
  for engine in $DIRECT_ENGINES; do
    cp "$file" "$work/tdirect-$engine.img"
    start_tierd "tierd-direct-$engine" "$(file_config "tierd-direct-$engine" "$work/tdirect-$engine.img" true "$engine")"
    group+=("tierd-direct-$engine=$uri"); names+=("tierd-direct-$engine")
  done
  local variant label binary workers direct environment
  for variant in $TIERD_VARIANTS; do
    IFS=: read -r label binary workers direct environment <<< "$variant"
    cp "$file" "$work/tierd-file-$label.img"
    start_tierd "tierd-file-$label" "$(file_config "tierd-file-$label" "$work/tierd-file-$label.img" "${direct:-false}" "" "$workers")" "$binary" "${environment:-TIERD_COMPARE=1}"
    group+=("tierd-file-$label=$uri"); names+=("tierd-file-$label")
  done
  pid_of[tierd-file]=${pid_of[tfile]}
  run_group "${group[@]}"
  echo "### File: tierd (one file tier) vs nbdkit file vs qemu-nbd --cache=none --aio=io_uring"
  echo
  summarize nbdkit-file "${names[@]}"
  echo
  echo "### File, O_DIRECT: tierd direct = true vs qemu-nbd --cache=none --aio=io_uring"
  echo
  summarize qemu-nbd "${names[@]:2}"
  echo
}

# One stall run: LABEL, optional move target ("" = none). fio randrw 4k QD4
# over the whole 1 GiB volume; the move starts 3 s in.
stall_run() {
  local label=$1 to=$2 started finished
  "${fio_cpu[@]}" fio --name="$label" --ioengine=nbd --uri="$stall_uri" --rw=randrw --bs=4k \
    --iodepth=4 --size=1G --runtime="$STALL_RUNTIME" --time_based \
    --percentile_list=50:99:99.9:99.99 \
    --output-format=json --output="$RESULTS/stall-$label.json" >/dev/null &
  local fio_pid=$!
  if [ -n "$to" ]; then
    sleep 3
    started=$(date +%s.%N)
    "$tierd" move --config "$work/tstall.toml" --volume vol0 --segment 0 --to "$to" >/dev/null
    local expected=0; [ "$to" = mem ] || expected=1
    until [ "$(tierd_status tstall | jq -r '.placement')" = "$expected" ]; do sleep 0.05; done
    finished=$(date +%s.%N)
    echo "$label: move to $to took $(echo "$finished - $started" | bc) s" >&2
    # The engine's own figures (running maxima since the server started):
    # longest chunk-lock hold and longest switch-over, in ns.
    local engine
    engine=$(tierd_status tstall | jq -r '"\(.max_chunk_hold_ns) \(.max_switch_over_ns)"')
    echo "$label $(echo "$finished - $started" | bc) $engine" >> "$RESULTS/stall-moves.txt"
  fi
  wait "$fio_pid"
}

# make_pki DIR: ca-cert.pem, server-cert.pem, server-key.pem (localhost)
make_pki() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$dir/ca-key.pem" -out "$dir/ca-cert.pem" -days 2 -subj "/CN=bench CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$dir/server-key.pem" -out "$dir/server.csr" -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca-cert.pem" -CAkey "$dir/ca-key.pem" \
    -CAcreateserial -out "$dir/server-cert.pem" -days 2 -extfile "$dir/server.ext" 2>/dev/null
  chmod 600 "$dir"/*-key.pem
}

part_tls() {
  command -v openssl >/dev/null || { echo "compare.sh: tls needs openssl" >&2; exit 1; }
  local pki=$work/home/.pki/libnbd plain_config tls_config saved_home=$HOME
  make_pki "$pki"
  export HOME=$work/home
  plain_config=$(memory_volume_config tplain "")
  tls_config=$(memory_volume_config ttls "[server.tls]
certificate = \"$pki/server-cert.pem\"
key = \"$pki/server-key.pem\"")
  start_tierd tplain "$plain_config"; local tplain=$uri
  start_tierd ttls "$tls_config"; local ttls=$uri
  case $ttls in nbds+unix://*) ;; *) echo "compare.sh: tierd did not print an nbds URI: $ttls" >&2; exit 1 ;; esac
  "${server_cpu[@]}" nbdkit -f -U "$work/ktls.sock" --tls=require --tls-certificates="$pki" memory 256M 2> "$work/ktls.err" &
  server_pids+=($!)
  pid_of[nbdkit-tls]=$!
  pid_of[tierd-tls]=${pid_of[ttls]}; pid_of[tierd-plain]=${pid_of[tplain]}
  wait_for_socket "$work/ktls.sock"
  local ktls="nbds+unix:///vol0?socket=$work/ktls.sock"
  move_all tplain mem 4 0000
  move_all ttls mem 4 0000
  for target in "$tplain" "$ttls" "$ktls"; do fill "$target" 256M; done
  run_group "tierd-tls=$ttls" "nbdkit-tls=$ktls" "tierd-plain=$tplain"
  echo "### TLS: tierd (rustls) vs nbdkit (GnuTLS), memory, and tierd in plain text"
  echo
  summarize nbdkit-tls tierd-tls nbdkit-tls tierd-plain
  echo
  export HOME=$saved_home
}

part_stall() {
  local file=$work/stall.img
  dd if=/dev/urandom of="$file" bs=1M count=1024 status=none
  start_tierd tstall "data_dir = \"$work/tstall\"
[server]
listen = [\"unix:$work/tstall.sock\"]
[[tier]]
name = \"mem\"
backend = \"memory\"
size = \"1GiB\"
[[tier]]
name = \"disk\"
backend = \"file\"
path = \"$file\"
size = \"1GiB\"
[[volume]]
name = \"vol0\"
size = \"1GiB\"
segment = \"1GiB\"
tiers = [\"mem\", \"disk\"]
period = \"60s\"
[volume.policy]
kind = \"none\""
  stall_uri=$uri
  local round
  for ((round = 1; round <= ROUNDS; round++)); do
    stall_run "disk-still-r$round" ""
    stall_run "up-r$round" mem
    stall_run "mem-still-r$round" ""
    stall_run "down-r$round" disk
  done
  echo "### Migration stall: fio randrw 4k QD4 while the 1 GiB segment moves"
  echo
  /usr/bin/python3 - "$RESULTS" "$ROUNDS" <<'PY'
import json, os, sys
results, rounds = sys.argv[1], int(sys.argv[2])
moves, engine = {}, {}
for line in open(os.path.join(results, "stall-moves.txt")):
    fields = line.split()
    moves[fields[0]] = fields[1]
    if len(fields) >= 4:
        engine[fields[0]] = f"{int(fields[2])/1e6:.2f} / {int(fields[3])/1e6:.3f}"
print("| run | move took s | engine: longest chunk hold / switch-over ms (running max) | read iops | read clat p50 / p99.9 / max µs | write clat p50 / p99.9 / max µs |")
print("|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for label in (f"disk-still-r{r}", f"up-r{r}", f"mem-still-r{r}", f"down-r{r}"):
        job = json.load(open(os.path.join(results, f"stall-{label}.json")))["jobs"][0]
        cells = []
        for side in ("read", "write"):
            clat = job[side]["clat_ns"]
            pct = clat["percentile"]
            cells.append(f'{pct["50.000000"]/1e3:.0f} / {pct["99.900000"]/1e3:.0f} / {clat["max"]/1e3:.0f}')
        print(f'| {label} | {moves.get(label, "–")} | {engine.get(label, "–")} | {job["read"]["iops"]/1e3:.1f} k | {cells[0]} | {cells[1]} |')
PY
  echo
}

# cache_config NAME MODE: a 256 MiB volume over the file home
# $work/NAME-home.img; MODE writeback or writethrough caches it in a 64 MiB
# file tier, "none" serves it from the home tier alone
cache_config() {
  local tiers='["home"]' cache="" ssd=""
  if [ "$2" != none ]; then
    tiers='["ssd", "home"]'
    if [ "$2" = adaptive ]; then
      cache="cache = { tier = \"ssd\", block = \"64KiB\", mode = \"writeback\", policy = \"adaptive\" }"
    else
      cache="cache = { tier = \"ssd\", block = \"64KiB\", mode = \"$2\", policy = \"s3fifo\" }"
    fi
    ssd="[[tier]]
name = \"ssd\"
backend = \"file\"
path = \"ssd.img\"
size = \"64MiB\""
  fi
  cat <<EOF
data_dir = "$work/$1"
[server]
listen = ["unix:$work/$1.sock"]
$ssd
[[tier]]
name = "home"
backend = "file"
path = "$work/$1-home.img"
size = "256MiB"
[[volume]]
name = "vol0"
size = "256MiB"
segment = "64MiB"
tiers = $tiers
period = "60s"
$cache
[volume.policy]
kind = "none"
EOF
}

part_cache() {
  local file=$work/cache-home.img name
  dd if=/dev/urandom of="$file" bs=1M count=256 status=none
  local -A uri_of=()
  for name in tierd-wb:writeback tierd-ad:adaptive tierd-wt:writethrough tierd-plain:none; do
    cp "$file" "$work/${name%%:*}-home.img"
    start_tierd "${name%%:*}" "$(cache_config "${name%%:*}" "${name#*:}")"
    uri_of[${name%%:*}]=$uri
  done
  start_nbdkit nbdkit-file file "$file"; uri_of[nbdkit-file]=$uri
  local -a names=(tierd-wb tierd-ad tierd-wt tierd-plain nbdkit-file) fits=() all=()
  for name in "${names[@]}"; do
    pid_of[fits-$name]=${pid_of[$name]}; pid_of[all-$name]=${pid_of[$name]}
    fits+=("fits-$name=${uri_of[$name]}"); all+=("all-$name=${uri_of[$name]}")
    # Warm the hot set: one random 64 KiB read pass over its 32 MiB (random:
    # a sequential pass would be bypassed by the 4 MiB sequential cutoff).
    "${fio_cpu[@]}" fio --name=warm --ioengine=nbd --uri="${uri_of[$name]}" --rw=randread \
      --bs=64k --iodepth=4 --size=32M --output-format=terse >/dev/null
  done
  FIO_SIZE=32M run_group "${fits[@]}"
  FIO_SIZE=256M run_group "${all[@]}"
  echo "### Cache volume: a 32 MiB hot set (fits the 64 MiB cache)"
  echo
  summarize fits-nbdkit-file "${fits[@]%%=*}"
  echo
  echo "### Cache volume: all 256 MiB (does not fit)"
  echo
  summarize all-nbdkit-file "${all[@]%%=*}"
  echo
  echo "### Cache state after the runs"
  echo
  for name in tierd-wb tierd-ad tierd-wt; do
    echo "- $name: $(tierd_status "$name" | jq -c '.cache | {mode, admission, read_hit_ratio, write_hit_ratio, dirty_bytes, occupancy_bytes, no_slot_blocks, writebacks, allocations, adaptive}')"
  done
  echo
}

machine
for part in "${parts[@]}"; do
  case $part in
    mem) part_mem ;;
    file) part_file ;;
    tls) part_tls ;;
    stall) part_stall ;;
    cache) part_cache ;;
    *) echo "compare.sh: unknown part $part (mem, file, tls, stall, cache)" >&2; exit 1 ;;
  esac
done
echo "raw fio JSON: $RESULTS" >&2
