#!/bin/sh
# The whole check (what `make check-openpsg` runs): set up OpenPSG's code (setup.sh), regenerate
# tests/data/openpsg/*.zip with OpenPSG's own numbers (make_fixtures.py), then compare sgeval's
# openpsg protocol with them (tests/oracles/test_openpsg_oracle.py). Exits non-zero on any mismatch.
# Usage: OPENPSG=<OpenPSG checkout or git mirror> tools/openpsg_check/run.sh
#        (SGEVAL_PYTHON: the Python with sgeval's requirements, default the repository's .venv/bin/python)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/tools/oracle_common.sh"
run_check openpsg tests/oracles/test_openpsg_oracle.py
