#!/bin/sh
# The whole check (what `make check-sgb` runs): set up Scene-Graph-Benchmark's code (setup.sh), regenerate
# tests/data/sgb/*.zip with SGB's own numbers (make_fixtures.py), then compare sgeval's sgb protocol
# with them (tests/oracles/test_sgb_oracle.py). Exits non-zero on any mismatch.
# Usage: SGB=<Scene-Graph-Benchmark.pytorch checkout or git mirror> tools/sgb_check/run.sh
#        (SGEVAL_PYTHON: the Python with sgeval's requirements, default the repository's .venv/bin/python)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/tools/oracle_common.sh"
run_check sgb tests/oracles/test_sgb_oracle.py -p no:cacheprovider
