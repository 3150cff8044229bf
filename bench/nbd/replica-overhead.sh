#!/usr/bin/env bash
# replica-overhead.sh - what the replica layer (docs/replicas.md) costs on the
# live data path: QD16 4 KiB random reads and writes with fio's nbd engine
# against `tierd serve` on one file tier (no emulated model, so the layer's
# own work and its state lock are what differ), without and with
# `replicas = {}` on the tier, alternating ROUNDS times on fresh tier files.
# The region is written sequentially first (a replicated tier reads free
# extents as zeroes without IO, which would flatter it).
#
# Usage: bench/nbd/replica-overhead.sh
# Env:   ROUNDS (3)  RUNTIME (10 s per fio job)  REGION (1GiB)  SIZE (4GiB)
#        TIERD (a tierd binary; default: build release)  OUT (a directory)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-10}
REGION=${REGION:-1GiB}
SIZE=${SIZE:-4GiB}
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -z "${TIERD:-}" ]]; then
    cargo build --release -q -p tierd-cli --manifest-path "$repo/Cargo.toml"
    TIERD="$repo/target/release/tierd"
fi
OUT=${OUT:-$(mktemp -d /tmp/tierd-replica-overhead.XXXXXX)}
mkdir -p "$OUT"
command -v fio >/dev/null || { echo "fio is missing: ../shared/tools/install-nbd-clients.sh" >&2; exit 1; }

run_variant() { # variant round
    local variant=$1 round=$2 dir="$OUT/$1-$2"
    rm -rf "$dir"; mkdir -p "$dir"
    local extra=""
    [[ $variant == replicas ]] && extra='replicas = { max_share = "20%", max_copies = 4 }'
    cat > "$dir/tierd.toml" <<TOML
data_dir = "data"
[server]
listen = ["unix:tierd.sock"]
[[tier]]
name = "hdd"
backend = "file"
path = "hdd.img"
size = "$SIZE"
$extra
[[volume]]
name = "vol0"
size = "3GiB"
segment = "1GiB"
tiers = ["hdd"]
TOML
    "$TIERD" serve --config "$dir/tierd.toml" >"$dir/serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [[ -S "$dir/data/tierd.sock" ]] && break; sleep 0.1; done
    local uri="nbd+unix:///vol0?socket=$dir/data/tierd.sock"
    fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size="$REGION" \
        --output-format=json >"$dir/fill.json"
    for rw in randread randwrite; do
        fio --name="$rw" --ioengine=nbd --uri="$uri" --rw=$rw --bs=4k --iodepth=16 --size="$REGION" \
            --time_based --runtime="$RUNTIME" --output-format=json >"$dir/$rw.json"
        python3 - "$dir/$rw.json" "$variant" "$round" "$rw" >>"$OUT/results.csv" <<'PY'
import json, sys
text = open(sys.argv[1]).read()  # fio prints "connected" before the JSON
job = json.loads(text[text.index("{"):])["jobs"][0]
side = job["read"] if sys.argv[4] == "randread" else job["write"]
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{side['iops']:.0f},{side['clat_ns']['mean']/1000:.1f}")
PY
    done
    kill "$pid"; wait "$pid" || true
    rm -f "$dir/data/hdd.img"
}

echo "variant,round,rw,iops,mean_clat_us" >"$OUT/results.csv"
for round in $(seq "$ROUNDS"); do
    for variant in none replicas; do run_variant "$variant" "$round"; done
done
python3 - "$OUT/results.csv" <<'PY'
import csv, sys, statistics
rows = list(csv.DictReader(open(sys.argv[1])))
for rw in ("randread", "randwrite"):
    none = [float(r["iops"]) for r in rows if r["rw"] == rw and r["variant"] == "none"]
    rep = [float(r["iops"]) for r in rows if r["rw"] == rw and r["variant"] == "replicas"]
    ratios = [b / a for a, b in zip(none, rep)]
    print(f"{rw}: none {statistics.median(none):.0f} IOPS, replicas {statistics.median(rep):.0f} IOPS, "
          f"per-round ratios {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")
PY
echo "raw: $OUT/results.csv"
