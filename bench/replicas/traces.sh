#!/usr/bin/env bash
# traces.sh - replicas beyond paper 003 (issue 17 §2), simulated: every real
# trace with timestamps in ../shared/traces (as examples/matrix/policies.toml
# lists them) and every synthetic preset, on the paper's disk alone
# (hdd-7200, policy none) and behind an SSD at 10 % of the working set with
# the default policy (hdd-ssd, adaptive), `--replicas off,many`.
# Prints one line per workload and stack:
#   label|trace kind|stack policy|disk access ms off|many|mean read ms off|many|copies made|reads from copies|recurrences
# Usage (repository root): bench/replicas/traces.sh > OUT.txt
# Env: TIERD (a tierd binary; default: build release)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
if [[ -z "${TIERD:-}" ]]; then
    cargo build --release -q -p tierd-cli
    TIERD="$repo/target/release/tierd"
fi
S=../shared/traces
[[ -d $S ]] || { echo "no ../shared/traces beside the repository: the real traces are not here" >&2; exit 1; }
run() { # label args...
    local label=$1; shift
    for cfg in "--tiers hdd-7200 --policy none" "--tiers hdd-ssd --policy adaptive --fast-bytes 10%"; do
        # shellcheck disable=SC2086
        "$TIERD" sim "$@" $cfg --replicas off,many --json 2>/dev/null | LABEL=$label CFG=$cfg python3 -c '
import json, os, sys
text = sys.stdin.read()
d = json.loads(text[text.index("{"):])
runs = {r["replicas"]: r for r in d["runs"]}
off, many = runs["off"], runs["many"]
replica = many.get("replica") or {}
stats = replica.get("stats", replica)
cfg = os.environ["CFG"].split()
print("|".join(str(x) for x in [
    os.environ["LABEL"], "real" if d.get("trace_kind") == "file" else d.get("trace_kind"),
    cfg[1] + " " + cfg[3],
    "%.1f" % (off["disk_access_ms"] or 0), "%.1f" % (many["disk_access_ms"] or 0),
    "%.3f" % (off["read_mean_us"] / 1000), "%.3f" % (many["read_mean_us"] / 1000),
    stats.get("copies_made"), stats.get("reads_from_replicas"), stats.get("recurrences")]))
' || echo "$label|FAILED $cfg"
    done
}
run hm_0-cut-20k --trace $S/msr_cambridge/hm_0-cut-20k.csv
run msr-cambridge1-sample --trace $S/msr_cambridge/msr-cambridge1-sample.csv
run cloudphysics --trace $S/cloudphysics/trace.csv
run umass-web1 --trace $S/umass_spc/web1.trace
run umass-fin1 --trace $S/umass_spc/fin1.trace
run umass-example-asu0 --trace $S/umass_spc/example.ascii --volume 0
run tpcc-disk1 --trace $S/tpcc/tpcc-small.trace --volume 1
run blktrace --trace $S/blktrace_misc/blktrace.txt
for preset in usr_1 web_2 proj_2 proj_4 src1_0 src1_1 proj_1 usr_2 dbt2 hm_0 app-firefox app-calc; do
    run "synth:$preset" --synth "$preset" --hours 1
done
