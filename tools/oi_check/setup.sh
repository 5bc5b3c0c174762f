#!/bin/sh
# Set up build/ (git-ignored) for PySGG's own Open Images evaluation code, idempotently:
#   build/venv/        Python with torch (CPU), scikit-learn, scipy, tqdm and six (what the evaluation's files
#                      import), sgeval's requirements and sgeval itself (pip install -e), and build/pysgg_src
#                      on its path (a .pth file)
#   build/pysgg_src/   the files of PySGG's pysgg/ package that the OI evaluation imports, at the pinned
#                      commit, from PYSGG (git dir or work tree); nothing of them is edited
# Usage: PYSGG=<PySGG checkout or git mirror> tools/oi_check/setup.sh   (PYTHON=python3.11 by default)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$HERE/build
COMMIT=a63942a076932b3756a477cf8919c3b74cd36207
# what the evaluation imports (pysgg_env.py says which are stood in for instead)
FILES="pysgg/__init__.py
pysgg/structures/__init__.py
pysgg/structures/bounding_box.py
pysgg/structures/boxlist_ops.py
pysgg/utils/__init__.py
pysgg/utils/comm.py
pysgg/utils/miscellaneous.py
pysgg/data/datasets/open_image.py
pysgg/data/datasets/evaluation/oi/__init__.py
pysgg/data/datasets/evaluation/oi/oi_evaluation.py
pysgg/data/datasets/evaluation/oi/ap_eval_rel.py
pysgg/data/datasets/evaluation/vg/sgg_eval.py
pysgg/data/datasets/evaluation/vg/vg_eval.py
pysgg/data/datasets/evaluation/vg/vg_stage_eval_utils.py"

if [ -z "${PYSGG:-}" ]; then
    echo "setup.sh: PYSGG=<path> is required: a PySGG checkout or git mirror holding commit $COMMIT" >&2
    exit 2
fi
. "$ROOT/tools/oracle_common.sh"  # TORCH (the CPU build, unless set) and PYTHON
GIT_DIR=$(git_dir_at_commit "$PYSGG" PySGG https://github.com/SHTUPLUS/PySGG)
mkdir -p "$BUILD"
# sgg_eval.py imports sklearn.metrics (SGStagewiseRecall's AUC), boxlist_ops.py scipy.linalg, ap_eval_rel.py
# six, and three files tqdm: the real packages, so that none of them needs a stand-in
build_venv pysgg_src scikit-learn==1.9.1 scipy==1.17.1 tqdm==4.70.1 six==1.17.0

# PySGG's files, as committed.
# shellcheck disable=SC2086  # FILES: one path a line
extract_files "$GIT_DIR" "$BUILD/pysgg_src" $FILES
show_versions PySGG
