"""Shared fixtures: the real traces in ../shared/traces and the `tierd`
binary to compare with. Under CI=true a missing piece fails the test
instead of skipping it."""

import os
import pathlib
import shutil

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "traces"
IN_CI = os.environ.get("CI") == "true"


def missing(what):
    if IN_CI:
        pytest.fail(f"{what} (CI=true: required)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def traces():
    if not TRACES.is_dir():
        missing(f"no real traces at {TRACES}")
    return TRACES


@pytest.fixture(scope="session")
def tierd_bin():
    """The CLI built from this checkout: $TIERD_BIN, else
    $CARGO_TARGET_DIR or target/ (debug, then release), else PATH."""
    candidates = []
    if os.environ.get("TIERD_BIN"):
        candidates.append(pathlib.Path(os.environ["TIERD_BIN"]))
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    candidates += [target / "debug" / "tierd", target / "release" / "tierd"]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("tierd")
    if found:
        return found
    missing("no tierd binary (cargo build -p tierd-cli, or set TIERD_BIN)")
