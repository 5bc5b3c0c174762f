#!/bin/sh
# The whole check (what `make check-oi` runs): set up PySGG's code (setup.sh), regenerate
# tests/data/oi/*.zip with PySGG's own numbers (make_fixtures.py), then compare sgeval with them
# (tests/oracles/test_oi_oracle.py). Exits non-zero on any mismatch.
# Usage: PYSGG=<PySGG checkout or git mirror> tools/oi_check/run.sh
#        (SGEVAL_PYTHON: the Python with sgeval's requirements, default the repository's .venv/bin/python)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/tools/oracle_common.sh"
run_check oi tests/oracles/test_oi_oracle.py -p no:cacheprovider
