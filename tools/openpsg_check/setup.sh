#!/bin/sh
# Set up build/ (git-ignored) for OpenPSG's own evaluation code, idempotently:
#   build/venv/        Python with torch (CPU), terminaltables, sgeval's requirements and sgeval itself
#                      (pip install -e), and build/openpsg_src on its path (a .pth file)
#   build/downloads/   the mmdet 2.20.0 wheel (pip download --no-deps, sha256 checked); nothing is installed from it
#   build/mmdet_src/   the two files of it that OpenPSG's evaluation imports
#   build/openpsg_src/ OpenPSG's openpsg/ package at the pinned commit, from OPENPSG (git dir or work tree)
# Usage: OPENPSG=<OpenPSG checkout or git mirror> tools/openpsg_check/setup.sh   (PYTHON=python3.11 by default)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$HERE/build
COMMIT=34b2a892f7441966265e3d60ad01ee8eeae89041
WHEEL=mmdet-2.20.0-py3-none-any.whl
WHEEL_SHA256=4d4876debd0e3dd76bcdd01439cbf1a1997d6f0d57f6d434fe9712878d87c5c1

if [ -z "${OPENPSG:-}" ]; then
    echo "setup.sh: OPENPSG=<path> is required: an OpenPSG checkout or git mirror holding commit $COMMIT" >&2
    exit 2
fi
. "$ROOT/tools/oracle_common.sh"  # TORCH (the CPU build, unless set) and PYTHON
GIT_DIR=$(git_dir_at_commit "$OPENPSG" OpenPSG https://github.com/Jingkang50/OpenPSG)
mkdir -p "$BUILD"
build_venv openpsg_src terminaltables==3.1.10

# mmdet 2.20.0: iou2d_calculator.py (bbox_overlaps, as OpenPSG calls it) and core/evaluation/bbox_overlaps.py.
[ -f "$BUILD/downloads/$WHEEL" ] || "$BUILD/venv/bin/pip" download --disable-pip-version-check -q --no-deps \
    mmdet==2.20.0 -d "$BUILD/downloads"
echo "$WHEEL_SHA256  $BUILD/downloads/$WHEEL" | sha256sum -c --quiet -
rm -rf "$BUILD/mmdet_src" "$BUILD/openpsg_src"
mkdir -p "$BUILD/mmdet_src" "$BUILD/openpsg_src"
"$BUILD/venv/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], sys.argv[3:])' \
    "$BUILD/downloads/$WHEEL" "$BUILD/mmdet_src" mmdet/core/bbox/iou_calculators/iou2d_calculator.py \
    mmdet/core/evaluation/bbox_overlaps.py

# OpenPSG's openpsg/ package, as committed (nothing of it is edited).
git --git-dir="$GIT_DIR" archive -o "$BUILD/openpsg.tar" --prefix=openpsg/ "$COMMIT:openpsg"
tar -x -C "$BUILD/openpsg_src" -f "$BUILD/openpsg.tar" && rm "$BUILD/openpsg.tar"
for f in evaluation/__init__.py evaluation/sgg_eval.py evaluation/sgg_metrics.py evaluation/sgg_eval_util.py \
         datasets/psg.py models/relation_heads/approaches/relation_util.py; do
    [ -s "$BUILD/openpsg_src/openpsg/$f" ] || { echo "setup.sh: openpsg/$f is missing at $COMMIT" >&2; exit 1; }
done
show_versions OpenPSG
