# lib.sh - helpers shared by bench/reduce/run.sh and bench/reduce/fig5.sh
# (sourced, not run): building tierd, writing configs, starting and stopping
# servers, the reduced tier's status, a process's CPU time and RSS, fio.
#
# The caller sets: repo, work (a scratch directory), RESULTS (where raw
# output is kept) and `me` (the script's name, for messages).

export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

die() { echo "$me: $*" >&2; exit 1; }

need_tools() {
  local tool
  for tool in fio jq python3 nbdsh; do
    command -v "$tool" >/dev/null || die "$tool is missing (fio: ../shared/tools/install-nbd-clients.sh; jq: apt-get install jq)"
  done
  fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || die "this fio ($(command -v fio)) has no nbd engine (../shared/tools/install-nbd-clients.sh)"
}

# build_tierd -> $tierd (TIERD overrides: a tierd binary to use as is)
build_tierd() {
  if [ -n "${TIERD:-}" ]; then
    tierd=$TIERD
  else
    echo "building tierd (release)..." >&2
    local target_dir=${CARGO_TARGET_DIR:-$repo/target}
    (cd "$repo" && CARGO_TARGET_DIR=$target_dir cargo build --release -q -p tierd-cli)
    tierd=$target_dir/release/tierd
  fi
  [ -x "$tierd" ] || die "no tierd binary at $tierd"
}

# wait_quiet: with QUIET_LOAD set (e.g. 1.5), wait until the 1-minute load
# average is below it, checking every 30 s for at most QUIET_WAIT_S s
# (default 1800), before measuring; the machine is shared
wait_quiet() {
  [ -n "${QUIET_LOAD:-}" ] || return 0
  local waited=0 load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    awk -v l="$load" -v q="$QUIET_LOAD" 'BEGIN { exit !(l < q) }' && return 0
    [ $waited -lt "${QUIET_WAIT_S:-1800}" ] || die "load average still $load (QUIET_LOAD=$QUIET_LOAD) after ${QUIET_WAIT_S:-1800} s"
    echo "$me: load average $load, waiting for < $QUIET_LOAD" >&2
    sleep 30
    waited=$((waited + 30))
  done
}

machine_line() {
  echo "cpus: server ${SERVER_CPUS:-any}, fio ${CLIENT_CPUS:-any}; date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg); tierd $(cd "$repo" && git rev-parse --short HEAD)$(cd "$repo" && git diff --quiet HEAD -- crates || echo '+changes'); $(fio --version)"
}

# tier_config NAME SIZE DIRECT REDUCE: a single-tier volume on one file tier.
# REDUCE is the inline table's contents ("" for an unreduced tier); with it,
# the file is SIZE bytes and the volume the tier's `logical` size (which
# REDUCE must give); without, both are SIZE.
# VOLUME_SIZE overrides the volume's size.
tier_config() {
  local name=$1 size=$2 direct=$3 reduce=$4 volume_size logical
  volume_size=$size
  if [ -n "$reduce" ]; then
    logical=$(sed -n 's/.*logical = "\([^"]*\)".*/\1/p' <<< "$reduce")
    [ -n "$logical" ] || die "tier_config $name: the reduce table must give logical"
    volume_size=$logical
  fi
  volume_size=${VOLUME_SIZE:-$volume_size}
  local reduce_line=""
  [ -z "$reduce" ] || reduce_line="reduce = { $reduce }"
  cat <<EOF
data_dir = "$work/$name"
[server]
listen = ["unix:$work/$name/tierd.sock"]
[[tier]]
name = "flash"
backend = "file"
path = "flash.img"
size = "$size"
direct = $direct
$reduce_line
[[volume]]
name = "vol0"
size = "$volume_size"
segment = "64MiB"
tiers = ["flash"]
period = "60s"
[volume.policy]
kind = "none"
EOF
}

# bytes_of SIZE: "1GiB", "512MiB", "4k", 123 -> bytes (fio reads "GiB" as
# 10^9 in its default kb_base, so fio is always given bytes)
bytes_of() { numfmt --from=iec "$(sed 's/iB$//; s/B$//' <<< "$1" | tr kmgt KMGT)"; }

declare -A pid_of uri_of
server_names=()

# start_server NAME CONFIG_TEXT: starts `tierd serve` with its data in
# $work/NAME; sets pid_of[NAME], uri_of[NAME]
start_server() {
  local name=$1 text=$2 waited=0 uri
  rm -rf "${work:?}/$name"
  mkdir -p "$work/$name"
  printf '%s\n' "$text" > "$work/$name.toml"
  ${SERVER_CPUS:+taskset -c "$SERVER_CPUS"} "$tierd" serve --config "$work/$name.toml" > "$work/$name.out" 2> "$RESULTS/$name.serve.log" &
  pid_of[$name]=$!
  server_names+=("$name")
  until uri=$(sed -n 's/^tierd: volume vol0 at //p' "$work/$name.out" | head -1) && [ -n "$uri" ] && [ -S "$work/$name/tierd-admin.sock" ]; do
    sleep 0.1
    waited=$((waited + 1))
    if [ $waited -gt 600 ] || ! kill -0 "${pid_of[$name]}" 2>/dev/null; then
      echo "$me: tierd serve ($name) did not start:" >&2
      cat "$RESULTS/$name.serve.log" >&2
      exit 1
    fi
  done
  uri_of[$name]=$uri
}

# stop_server NAME [KEEP]: SIGTERM, wait; its data directory is removed
# unless KEEP
stop_server() {
  local name=$1 pid=${pid_of[$1]:-}
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  unset "pid_of[$name]"
  [ -n "${2:-}" ] || rm -rf "${work:?}/$name"
}

stop_all_servers() {
  local name
  for name in "${!pid_of[@]}"; do
    kill -TERM "${pid_of[$name]}" 2>/dev/null || true
  done
  for name in "${!pid_of[@]}"; do
    wait "${pid_of[$name]}" 2>/dev/null || true
  done
}

# reduction NAME: the tier's "reduction" object ("null" for an unreduced tier)
reduction() {
  "$tierd" status --config "$work/$1.toml" --json | jq -c '.volumes[0].tiers[0].reduction // null'
}

# drain NAME: wait (at most DRAIN_MAX s) until no staged bytes wait for
# post-process reduction, so the next run starts without a backlog and the
# CPU time of a run includes the reduction of what it staged
drain() {
  local waited=0 staged
  while :; do
    staged=$(reduction "$1" | jq -r 'if . == null then 0 else .staged_bytes end')
    [ "$staged" = 0 ] && return 0
    waited=$((waited + 1))
    if [ $waited -gt $((${DRAIN_MAX:-60} * 10)) ]; then
      echo "$me: $1 still has $staged staged bytes after ${DRAIN_MAX:-60} s" >&2
      return 0
    fi
    sleep 0.1
  done
}

# cpu_ticks PID: utime + stime (clock ticks) of the process, all its threads
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# rss_kib PID
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# Data patterns (fio options): the paper's 2:1 compressible, 2:1 duplicate
# data, and incompressible unique data (refill_buffers: a new random buffer
# for every write, which fio does by itself only when one of the percentages
# is set; each run's own randseed, so two runs never write the same bytes).
DATA_REDUCIBLE=(--buffer_compress_percentage=50 --dedupe_percentage=50)
DATA_UNIQUE=(--buffer_compress_percentage=0 --dedupe_percentage=0 --refill_buffers=1)
seed_counter=$((RANDOM * 1000))
next_seed() { seed_counter=$((seed_counter + 1)); }

# fio_run OUT_JSON URI [fio args...]: fio's nbd engine, JSON to OUT_JSON;
# every run gets a fresh randseed
fio_run() {
  local out=$1 target=$2; shift 2
  next_seed
  ${CLIENT_CPUS:+taskset -c "$CLIENT_CPUS"} fio --name=job --ioengine=nbd --uri="$target" --randseed="$seed_counter" \
    --output-format=json --output="$out" "$@" > /dev/null 2> "$out.err" ||
    { echo "$me: fio failed ($out): $(cat "$out.err")" >&2; return 1; }
  jq -e '.jobs[0].error == 0' "$out" > /dev/null ||
    { echo "$me: fio reported an error in $out: $(jq -c '.jobs[0].error' "$out") $(cat "$out.err")" >&2; return 1; }
}

# flush_volume URI: an NBD FLUSH (nbdsh), so the tier journals and frees the
# packs whose fragments all died (physical_bytes counts them as in use until
# the next FLUSH: after a post-mode run without one, a tier can show more
# physical than logical bytes). fio cannot send one without writing.
flush_volume() {
  nbdsh -u "$1" -c 'h.flush()' || die "nbdsh could not flush $1"
}
