#!/bin/sh
# Creates or updates bench/.venv with the pinned packages of bench/search/requirements-ann.txt
# (FAISS, hnswlib, numpy) for bench/search/ann-peers.py and bench/search/ann.ts. Needs python3 with venv,
# gcc/g++ (hnswlib builds from source) and access to PyPI. Every file is checked by SHA-256.
#
#   sh bench/search/ann-setup.sh            (PYTHON=python3.12 sh bench/search/ann-setup.sh for another Python)
set -eu
# bench/.venv is shared by every Python tool under bench/ (git-ignored there).
cd "$(dirname "$0")/.."
req=search/requirements-ann.txt
py=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$py" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check "$@"; }
# Pass 1: what hnswlib's build needs, so that pass 2 can build it without an isolated (unchecked)
# build environment.
build=$(mktemp)
trap 'rm -f "$build"' EXIT
grep -E '^(setuptools|wheel|pybind11|numpy)==' "$req" >"$build"
pip install --require-hashes --no-deps -r "$build"
# Pass 2: everything, hnswlib compiled here.
pip install --require-hashes --no-deps --no-build-isolation -r "$req"
.venv/bin/python -c 'import faiss, hnswlib, numpy; print("bench/.venv: faiss", faiss.__version__, "hnswlib", getattr(hnswlib, "__version__", "0.8.0"), "numpy", numpy.__version__)'
