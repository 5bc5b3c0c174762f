#!/bin/sh
# Set up build/ (git-ignored) for the Action Genome evaluation code of STTran, TEMPURA and DSG-DETR,
# idempotently:
#   build/venv/             Python with torch (CPU), numpy 1.23.5 (bbox.pyx reads np.float, removed in numpy
#                           1.24), Cython 0.29 (builds bbox.pyx as its own setup.py does), h5py and dill (imported
#                           by lib/ults/pytorch_misc.py) and pillow (imported by dataloader/action_genome.py)
#   build/src/<tool>/       each tool's files that the evaluation imports, at its pinned commit, from its git dir
#                           or work tree (nothing of them is edited), with lib/fpn/box_intersections_cpu/bbox.pyx
#                           compiled in place by that folder's own setup.py
# Usage: STTRAN=<path> TEMPURA=<path> DSGDETR=<path> tools/ag_check/setup.sh   (PYTHON=python3.11 by default)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$HERE/build
TORCH=${TORCH:-torch==2.13.0+cpu}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
STTRAN_COMMIT=6b559e13ae891db4da913378a4153ddb444d4875     # github.com/yrcong/STTran
TEMPURA_COMMIT=976babd45f1d14f6d7386188e9265507cf0f07dc    # github.com/sayaknag/unbiasedSGG
DSGDETR_COMMIT=1d28dda0182e50e8938fdaf860f6ef4abcf9aaf0    # github.com/Shengyu-Feng/DSG-DETR
FILES="dataloader/action_genome.py
lib/evaluation_recall.py
lib/ults/pytorch_misc.py
lib/fpn/box_intersections_cpu/bbox.pyx
lib/fpn/box_intersections_cpu/setup.py"

for name in STTRAN TEMPURA DSGDETR; do
    eval "given=\${$name:-}"
    if [ -z "$given" ]; then
        echo "setup.sh: $name=<path> is required (STTRAN, TEMPURA and DSGDETR: git checkouts or mirrors)" >&2
        exit 2
    fi
done

stamp=$BUILD/venv/.installed
mkdir -p "$BUILD"
[ -x "$BUILD/venv/bin/python" ] || "$PYTHON" -m venv "$BUILD/venv"
if [ ! -f "$stamp" ] || [ "$HERE/setup.sh" -nt "$stamp" ]; then
    "$BUILD/venv/bin/pip" install --disable-pip-version-check -q "$TORCH" numpy==1.23.5 'cython==0.29.37' \
        h5py==3.16.0 dill==0.4.1 pillow==11.3.0 setuptools
    touch "$stamp"
fi

# extract <tool folder> <git path> <commit>: the tool's FILES as committed (git cat-file), bbox.pyx compiled.
extract() {
    dir=$(git -C "$2" rev-parse --absolute-git-dir 2>/dev/null) || dir=
    if [ -z "$dir" ] || ! git --git-dir="$dir" cat-file -e "$3^{commit}" 2>/dev/null; then
        echo "setup.sh: $2 is not a git repository holding commit $3 ($1)" >&2
        exit 2
    fi
    target=$BUILD/src/$1
    if [ -f "$target/.commit" ] && [ "$(cat "$target/.commit")" = "$3" ] && ls "$target"/lib/fpn/box_intersections_cpu/bbox*.so >/dev/null 2>&1; then
        return
    fi
    rm -rf "$target"
    for f in $FILES; do
        mkdir -p "$target/$(dirname "$f")"
        git --git-dir="$dir" cat-file blob "$3:$f" > "$target/$f" || { echo "setup.sh: $f is missing at $3" >&2; exit 1; }
    done
    (cd "$target/lib/fpn/box_intersections_cpu" && "$BUILD/venv/bin/python" setup.py build_ext --inplace >build.log 2>&1) \
        || { echo "setup.sh: building $1's bbox.pyx failed: $target/lib/fpn/box_intersections_cpu/build.log" >&2; exit 1; }
    echo "$3" > "$target/.commit"
}
extract sttran "$STTRAN" "$STTRAN_COMMIT"
extract tempura "$TEMPURA" "$TEMPURA_COMMIT"
extract dsgdetr "$DSGDETR" "$DSGDETR_COMMIT"
"$BUILD/venv/bin/python" -c "import torch, numpy; print('ag_check: torch', torch.__version__, 'numpy', numpy.__version__)"
