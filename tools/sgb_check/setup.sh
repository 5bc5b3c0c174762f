#!/bin/sh
# Set up build/ (git-ignored) for Scene-Graph-Benchmark.pytorch's own VG evaluation code, idempotently:
#   build/venv/     Python with torch (CPU), sgeval's requirements and sgeval itself (pip install -e),
#                   and build/sgb_src on its path (a .pth file)
#   build/sgb_src/  the files of SGB's maskrcnn_benchmark/ package that the evaluation imports, at the
#                   pinned commit, from SGB (git dir or work tree); nothing of them is edited
# Usage: SGB=<Scene-Graph-Benchmark.pytorch checkout or git mirror> tools/sgb_check/setup.sh
#        (PYTHON=python3.11 by default)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$HERE/build
COMMIT=6f75881ad6076d3a1aee34e9bead2b3595631086
# what the evaluation imports (sgb_env.py says which are stood in for instead)
FILES="maskrcnn_benchmark/__init__.py
maskrcnn_benchmark/structures/__init__.py
maskrcnn_benchmark/structures/bounding_box.py
maskrcnn_benchmark/structures/boxlist_ops.py
maskrcnn_benchmark/utils/__init__.py
maskrcnn_benchmark/utils/comm.py
maskrcnn_benchmark/utils/miscellaneous.py
maskrcnn_benchmark/data/datasets/visual_genome.py
maskrcnn_benchmark/data/datasets/evaluation/vg/sgg_eval.py
maskrcnn_benchmark/data/datasets/evaluation/vg/vg_eval.py"

if [ -z "${SGB:-}" ]; then
    echo "setup.sh: SGB=<path> is required: a Scene-Graph-Benchmark.pytorch checkout or git mirror holding commit $COMMIT" >&2
    exit 2
fi
. "$ROOT/tools/oracle_common.sh"  # TORCH (the CPU build, unless set) and PYTHON
GIT_DIR=$(git_dir_at_commit "$SGB" Scene-Graph-Benchmark.pytorch https://github.com/KaihuaTang/Scene-Graph-Benchmark.pytorch)
mkdir -p "$BUILD"
build_venv sgb_src

# SGB's files, as committed.
# shellcheck disable=SC2086  # FILES: one path a line
extract_files "$GIT_DIR" "$BUILD/sgb_src" $FILES
show_versions Scene-Graph-Benchmark.pytorch
