#!/bin/sh
# Set up build/ (git-ignored) for the panoptic quality oracles, idempotently:
#   build/venv/          Python with torch (CPU), terminaltables, pycocotools, tqdm, sgeval's requirements and
#                        sgeval itself (pip install -e), and build/src on its path (a .pth file)
#   build/downloads/     the mmdet 2.20.0 wheel (pip download --no-deps, sha256 checked); nothing is installed from it
#   build/src/panopticapi/       panopticapi's package at its pinned commit (git archive, unmodified)
#   build/src/openpsg/           OpenPSG's openpsg/ package at its pinned commit
#   build/src/mmdet/             the files of mmdet 2.20.0 that OpenPSG's PQ evaluation runs (datasets/coco.py,
#                                coco_panoptic.py, api_wrappers/) and core/evaluation/bbox_overlaps.py
#   build/src/fair_psgg_scripts/convert_openpsg.py   fair-psgg's script at its pinned commit
# Usage: OPENPSG=<path> PANOPTICAPI=<path> FAIR_PSGG=<path> tools/pq_check/setup.sh   (git checkouts or mirrors
#        holding the pinned commits; PYTHON=python3.11 by default)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$HERE/build
SRC=$BUILD/src
OPENPSG_COMMIT=34b2a892f7441966265e3d60ad01ee8eeae89041
PANOPTICAPI_COMMIT=7bb4655548f98f3fedc07bf37e9040a992b054b0
FAIR_PSGG_COMMIT=fba4da3e456f6a2e11d760782a8ce2d94bd2e462
WHEEL=mmdet-2.20.0-py3-none-any.whl
WHEEL_SHA256=4d4876debd0e3dd76bcdd01439cbf1a1997d6f0d57f6d434fe9712878d87c5c1
TORCH=${TORCH:-torch==2.13.0+cpu}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

for name in OPENPSG PANOPTICAPI FAIR_PSGG; do
    if eval "[ -z \"\${$name:-}\" ]"; then
        echo "setup.sh: $name=<path> is required (OPENPSG, PANOPTICAPI and FAIR_PSGG: git checkouts or mirrors)" >&2
        exit 2
    fi
done
. "$ROOT/tools/oracle_common.sh"
COMMIT=$OPENPSG_COMMIT
OPENPSG_GIT=$(git_dir_at_commit "$OPENPSG" OpenPSG https://github.com/Jingkang50/OpenPSG)
COMMIT=$PANOPTICAPI_COMMIT
PANOPTICAPI_GIT=$(git_dir_at_commit "$PANOPTICAPI" panopticapi https://github.com/cocodataset/panopticapi)
COMMIT=$FAIR_PSGG_COMMIT
FAIR_PSGG_GIT=$(git_dir_at_commit "$FAIR_PSGG" fair-psgg https://github.com/lorjul/fair-psgg)
mkdir -p "$BUILD"
build_venv src terminaltables==3.1.10 pycocotools==2.0.11 tqdm==4.70.1

[ -f "$BUILD/downloads/$WHEEL" ] || "$BUILD/venv/bin/pip" download --disable-pip-version-check -q --no-deps \
    mmdet==2.20.0 -d "$BUILD/downloads"
echo "$WHEEL_SHA256  $BUILD/downloads/$WHEEL" | sha256sum -c --quiet -
rm -rf "$SRC"
mkdir -p "$SRC/fair_psgg_scripts"
"$BUILD/venv/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], sys.argv[3:])' \
    "$BUILD/downloads/$WHEEL" "$SRC" mmdet/datasets/coco.py mmdet/datasets/coco_panoptic.py \
    mmdet/datasets/api_wrappers/__init__.py mmdet/datasets/api_wrappers/coco_api.py \
    mmdet/datasets/api_wrappers/panoptic_evaluation.py mmdet/core/evaluation/bbox_overlaps.py

# The three repositories' files as committed (nothing of them is edited).
git --git-dir="$PANOPTICAPI_GIT" archive -o "$BUILD/src.tar" --prefix=panopticapi/ "$PANOPTICAPI_COMMIT:panopticapi"
tar -x -C "$SRC" -f "$BUILD/src.tar"
git --git-dir="$OPENPSG_GIT" archive -o "$BUILD/src.tar" --prefix=openpsg/ "$OPENPSG_COMMIT:openpsg"
tar -x -C "$SRC" -f "$BUILD/src.tar" && rm "$BUILD/src.tar"
git --git-dir="$FAIR_PSGG_GIT" show "$FAIR_PSGG_COMMIT:scripts/convert_openpsg.py" \
    > "$SRC/fair_psgg_scripts/convert_openpsg.py"
for f in panopticapi/evaluation.py panopticapi/utils.py openpsg/datasets/psg.py \
         openpsg/models/relation_heads/approaches/relation_util.py fair_psgg_scripts/convert_openpsg.py; do
    [ -s "$SRC/$f" ] || { echo "setup.sh: $f is missing at its pinned commit" >&2; exit 1; }
done
"$BUILD/venv/bin/python" -c "import numpy, pycocotools; print('pq_check: numpy', numpy.__version__, \
'- panopticapi $PANOPTICAPI_COMMIT, OpenPSG $OPENPSG_COMMIT, fair-psgg $FAIR_PSGG_COMMIT, mmdet 2.20.0')"
