#!/usr/bin/env bash
# Fuzz smoke test for CI: builds every cargo-fuzz target and runs each for a
# short time from its checked-in seeds, failing on any crash, panic, hang
# (-timeout) or memory blow-up (-rss_limit_mb). Prints executions and
# coverage per target.
#
# Usage: fuzz/smoke.sh [SECONDS_PER_TARGET]     (default 15; 9 targets)
#
# Works on the stable toolchain: `--sanitizer none` needs no nightly-only
# compiler flag, and RUSTC_BOOTSTRAP=1 lets cargo-fuzz's `-Z` arguments
# through. Environment:
#   FUZZ_TARGETS       space-separated subset of targets (default: all)
#   FUZZ_CORPUS_ROOT   where grown corpora go (default: a temporary
#                      directory, so every smoke run starts from the seeds)
# Crash inputs are kept in fuzz/artifacts/<target>/ (not checked in);
# reproduce one with `RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none
# <target> <file>` or under the test harness with
# `TIERD_FUZZ_ARTIFACTS=1 cargo test --manifest-path fuzz/Cargo.toml`.
set -euo pipefail

seconds_per_target=${1:-15}
fuzz_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(dirname "$fuzz_dir")
cd "$repo_root"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The nbd_server and nbd_client targets put their sockets under TMPDIR.
export TMPDIR="$scratch"

targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
corpus_root=${FUZZ_CORPUS_ROOT:-$scratch/corpus}

build_start=$SECONDS
cargo fuzz build --sanitizer none
echo "fuzz smoke: build took $((SECONDS - build_start)) s"

failed=()
summary=()
run_start=$SECONDS
for target in $targets; do
    corpus="$corpus_root/$target"
    mkdir -p "$corpus" "$fuzz_dir/artifacts/$target"
    log="$scratch/$target.log"
    echo "fuzz smoke: $target for ${seconds_per_target} s"
    status=0
    cargo fuzz run --sanitizer none "$target" "$corpus" "$fuzz_dir/seeds/$target" -- \
        -max_total_time="$seconds_per_target" -timeout=30 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    coverage=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 || true)
    if [ "$status" -ne 0 ]; then
        failed+=("$target")
        summary+=("$target: FAILED (exit $status) after ${executions:-?} executions; log follows")
        tail -60 "$log"
    else
        summary+=("$target: ${executions:-?} executions, ${coverage:-no coverage line}")
    fi
done

echo "fuzz smoke: ${seconds_per_target} s per target, run phase $((SECONDS - run_start)) s"
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz smoke: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz smoke: all targets passed"
