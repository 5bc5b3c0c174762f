#!/bin/sh
# The whole check (what `make check-ag` runs): set up the three tools' code (setup.sh), regenerate
# tests/data/ag/*.zip with their own numbers (make_fixtures.py), then check sgeval's converters and the
# plain-Python reference against them (tests/oracles/test_ag_oracle.py). Exits non-zero on any mismatch.
# Usage: STTRAN=<path> TEMPURA=<path> DSGDETR=<path> tools/ag_check/run.sh
#        (SGEVAL_PYTHON: the Python with sgeval's requirements, default the repository's .venv/bin/python)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
"$HERE/setup.sh"
cd "$ROOT"
"$HERE/build/venv/bin/python" -m tools.ag_check.make_fixtures --out tests/data/ag
"${SGEVAL_PYTHON:-.venv/bin/python}" -m pytest -q -p no:cacheprovider tests/oracles/test_ag_oracle.py
