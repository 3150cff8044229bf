#!/usr/bin/env bash
# write-through.sh LABEL BINARY - the write-through memory tier against its
# home file alone, side by side (issue 12's "write-through >= 0.9x home"):
# starts a volume whose 256 MiB memory tier writes through to a file home
# (twt) and the same volume on its home alone (thome) with tierd BINARY,
# moves twt's four 64 MiB segments to memory, fills both through NBD with
# 1 MiB writes, then runs fio randwrite 4k QD$QD for $RUNTIME s on each,
# alternating, $ROUNDS rounds. Prints "LABEL server round iops".
#
# Env: ROUNDS (1) RUNTIME (10) QD (16) FILL (1; 0 = no fill pass)
#      SERVERS ("twt thome"; also tvol = unsafe_volatile memory tier,
#      kmem = nbdkit memory 256M)
#      DROP (0; 1 = `echo 3 > /proc/sys/vm/drop_caches` after the moves,
#      before the fill: needs root; shows what the page cache left by the
#      moves costs)
# Needs fio with its nbd engine, jq, nbdkit for kmem. Writes nothing in the
# repository; its work directory is removed at exit.
set -euo pipefail
label=$1 bin=$2
ROUNDS=${ROUNDS:-1}; RUNTIME=${RUNTIME:-10}; QD=${QD:-16}; FILL=${FILL:-1}
SERVERS=${SERVERS:-"twt thome"}
work=$(mktemp -d "${TMPDIR:-/tmp}/tierd-wt.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
cfg() { # name tiers volatile
  local name=$1 tiers=$2
  cat <<E
data_dir = "$work/$name"
[server]
listen = ["unix:$work/$name.sock"]
E
  if [ "$tiers" != home ]; then cat <<E
[[tier]]
name = "mem"
backend = "memory"
size = "256MiB"
unsafe_volatile = $([ "$tiers" = vol ] && echo true || echo false)
E
  fi
  cat <<E
[[tier]]
name = "home"
backend = "file"
path = "home.img"
size = "256MiB"
[[volume]]
name = "vol0"
size = "256MiB"
segment = "64MiB"
E
  if [ "$tiers" != home ]; then echo 'tiers = ["mem", "home"]'; else echo 'tiers = ["home"]'; fi
  cat <<E
period = "60s"
[volume.policy]
kind = "none"
E
}
declare -A uri
for s in $SERVERS; do
  mkdir -p "$work/$s"
  if [ $s = kmem ]; then nbdkit -f -U "$work/kmem.sock" memory 256M 2>/dev/null & pids+=($!); sleep 0.5; uri[$s]="nbd+unix:///vol0?socket=$work/kmem.sock"; continue; fi
  case $s in twt) cfg $s wt ;; tvol) cfg $s vol ;; *) cfg $s home ;; esac > "$work/$s.toml"
  "$bin" serve --config "$work/$s.toml" > "$work/$s.out" 2> "$work/$s.err" &
  pids+=($!)
  n=0
  until u=$(sed -n 's/^tierd: volume vol0 at //p' "$work/$s.out" | head -1) && [ -n "$u" ]; do
    sleep 0.1; n=$((n+1)); [ $n -lt 600 ] || { cat "$work/$s.err"; exit 1; }
  done
  uri[$s]=$u
done
for t in twt tvol; do
 if [[ " $SERVERS " == *" $t "* ]]; then
  for seg in 0 1 2 3; do "$bin" move --config "$work/$t.toml" --volume vol0 --segment $seg --to mem >/dev/null; done
  n=0
  until [ "$("$bin" status --config "$work/$t.toml" --json | jq -r '.volumes[0].placement')" = 0000 ]; do sleep 0.1; n=$((n+1)); [ $n -lt 1200 ] || exit 1; done
 fi
done
if [ "${DROP:-0}" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; echo dropped >&2; fi
for s in $SERVERS; do
  [ "$FILL" = 0 ] || fio --name=fill --ioengine=nbd --uri="${uri[$s]}" --rw=write --bs=1M --iodepth=4 --size=256M --output-format=terse >/dev/null
done
for s in $SERVERS; do ls -ls "$work/$s/home.img" 2>/dev/null || find "$work/$s" -name 'home*' -exec ls -ls {} \; ; done >&2
for ((r=1; r<=ROUNDS; r++)); do
  for s in $SERVERS; do
    iops=$(fio --name=w --ioengine=nbd --uri="${uri[$s]}" --rw=randwrite --bs=4k --iodepth=$QD --size=256M \
      --runtime=$RUNTIME --ramp_time=1 --time_based --output-format=json --output="$work/f.json" >/dev/null; jq ".jobs[0].write.iops | floor" "$work/f.json")
    echo "$label $s r$r $iops"
  done
done
