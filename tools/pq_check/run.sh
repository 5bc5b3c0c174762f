#!/bin/sh
# The whole check (what `make check-pq` runs): set up the tools' code (setup.sh), regenerate tests/data/pq/*.zip
# with their own numbers (make_fixtures.py), then compare the plain-Python reference with them
# (tests/oracles/test_pq_oracle.py). Exits non-zero on any mismatch.
# Usage: OPENPSG=<path> PANOPTICAPI=<path> FAIR_PSGG=<path> tools/pq_check/run.sh
#        (SGEVAL_PYTHON: the Python with sgeval's requirements, default the repository's .venv/bin/python)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
"$HERE/setup.sh"
cd "$ROOT"
"$HERE/build/venv/bin/python" -m tools.pq_check.make_fixtures --out tests/data/pq
"${SGEVAL_PYTHON:-.venv/bin/python}" -m pytest -q tests/oracles/test_pq_oracle.py
