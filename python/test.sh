#!/usr/bin/env bash
# The Python package's test command (the README's, and .ci/run's): a venv
# with maturin, pytest, numpy, pandas, pyarrow and ray; `pip install
# ./python` (builds crates/tierd-py); pytest python/tests against the
# `tierd` CLI built from this checkout.
#
#   TIERD_VENV     the venv (default: $CARGO_TARGET_DIR or target, /venv-tierd)
#   TIERD_PY_PROFILE  cargo profile of the module (default release; .ci/run
#                  uses dev, whose crates `cargo test` has just built)
#   PYTHON         the interpreter that makes the venv (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
venv=${TIERD_VENV:-$target/venv-tierd}
python=${PYTHON:-python3}
command -v "$python" > /dev/null || { echo "python/test.sh: $python not found (install Python 3.9+)" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# maturin's PEP 517 hooks run the `maturin` the venv installs.
export PATH="$venv/bin:$PATH"
"$venv/bin/pip" install -q --disable-pip-version-check maturin pytest numpy pandas pyarrow ray
MATURIN_PEP517_ARGS="--profile ${TIERD_PY_PROFILE:-release}" \
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./python
# The tests compare the module with the CLI: the debug build `cargo test` makes.
cargo build -q -p tierd-cli
TIERD_BIN="$target/debug/tierd" "$venv/bin/python" -m pytest -q python/tests "$@"
