#!/usr/bin/env bash
# The project's virtual environment, installed with uv from requirements.lock (docs/operations.md, "Installing
# the development environment"). The Makefile calls it:
#
#   venv.sh lock      bring requirements.lock in step with requirements.txt (uv pip compile, with hashes)
#   venv.sh install   create .venv if need be and install requirements.lock into it with uv
#
# The lock is resolved for CPython 3.11 on x86_64 Linux. torch is pinned to the CPU build that lies on this
# machine kind's disk (/opt/wheels; TORCH_WHEELS names another folder): uv reads no pip configuration, so it
# is pointed there with --find-links, and PyPI's torch of the same version is a CUDA build of several GB.
# Where uv cannot install the lock (uv not fetched, no such wheel, another platform), `install` says why and
# falls back to pip with requirements.txt, unlocked: what `make install` did before uv. PIP_ONLY=1 forces it.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${VENV:-.venv}
PY=$VENV/bin/python
UV=$VENV/bin/uv
REQUIREMENTS=requirements.txt
LOCK=requirements.lock
WHEELS=${TORCH_WHEELS:-/opt/wheels}
MARK="# requirements.txt sha256:"

requirements_sha() { sha256sum "$REQUIREMENTS" | cut -d' ' -f1; }

ensure_venv() { test -x "$PY" || python3 -m venv "$VENV"; }

# uv itself, at the version requirements.txt pins, with the hashes the lock holds for it (pip checks them).
ensure_uv() {
    local want
    want=$(sed -n 's/^uv==\([^ #]*\).*/\1/p' "$REQUIREMENTS")
    if [ -z "$want" ]; then
        echo "venv.sh: $REQUIREMENTS pins no uv (uv==X.Y.Z)" >&2
        return 1
    fi
    if [ -x "$UV" ] && [ "$("$UV" --version 2>/dev/null | cut -d' ' -f2)" = "$want" ]; then
        return 0
    fi
    local block
    block=$(mktemp)
    # uv's entry of the lock: its line and the --hash lines that continue it.
    awk -v pin="uv==$want" '$1 == pin {p = 1} p {print; if ($0 !~ /\\$/) exit}' "$LOCK" >"$block" 2>/dev/null || true
    if [ -s "$block" ]; then
        "$PY" -m pip install -qq --no-deps --require-hashes -r "$block"
    else # a lock not yet regenerated for this pin: uv from PyPI, unchecked, only to compile the new lock
        "$PY" -m pip install -qq --no-deps "uv==$want"
    fi
    local rc=$?
    rm -f "$block"
    return $rc
}

lock() {
    local sha
    sha=$(requirements_sha)
    if [ -f "$LOCK" ] && grep -qx "$MARK $sha" "$LOCK"; then
        touch "$LOCK" # in step already (a fresh clone's file times say nothing)
        return 0
    fi
    echo "venv.sh: $REQUIREMENTS changed: regenerating $LOCK"
    ensure_venv
    ensure_uv
    local out
    out=$(mktemp --suffix=.txt)
    # The old lock is the starting point, so what requirements.txt does not pin moves only when it must.
    if [ -f "$LOCK" ]; then cp "$LOCK" "$out"; fi
    local links=()
    if [ -d "$WHEELS" ]; then links=(--find-links "$WHEELS"); fi
    "$UV" pip compile "$REQUIREMENTS" --quiet --generate-hashes "${links[@]}" \
        --python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
        --custom-compile-command "make $LOCK" -o "$out"
    if ! grep -q '^torch==[^ ]*+cpu ' "$out"; then
        echo "venv.sh: no CPU build of torch in $WHEELS: the lock would take PyPI's CUDA build; $LOCK is left" \
            "as it was (TORCH_WHEELS=DIR names the folder with torch's CPU wheel)" >&2
        rm -f "$out"
        return 1
    fi
    # The mark after uv's header: what the test and the next `make` compare requirements.txt against.
    {
        sed -n '1,2p' "$out"
        echo "$MARK $sha"
        sed '1,2d' "$out" | grep -v "^$MARK"
    } >"$LOCK"
    rm -f "$out"
}

install_with_pip() {
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet -r "$REQUIREMENTS"
}

install() {
    ensure_venv
    if [ -n "${PIP_ONLY:-}" ]; then
        install_with_pip
        return
    fi
    local links=()
    if [ -d "$WHEELS" ]; then links=(--find-links "$WHEELS"); fi
    if ensure_uv && "$UV" pip install --quiet --python "$PY" --require-hashes --compile-bytecode "${links[@]}" -r "$LOCK"; then
        return 0
    fi
    echo "venv.sh: uv could not install $LOCK (above); falling back to pip with $REQUIREMENTS" \
        "(slower, not hash-checked; where pip's own configuration finds no CPU wheel of torch, it downloads" \
        "PyPI's CUDA build of several GB)" >&2
    install_with_pip
}

case "${1:-}" in
lock) lock ;;
install) install ;;
*)
    echo "usage: $0 lock|install" >&2
    exit 2
    ;;
esac
