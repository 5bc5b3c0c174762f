# What the oracle harnesses' scripts share (tools/openpsg_check, tools/sgb_check, tools/oi_check; sourced, POSIX
# sh; their Python side: tools/oracle_common.py). setup.sh: the checks of the tool's git repository, the build venv
# and the tool's files; run.sh: the whole check. Expects ROOT and HERE (the harness's folder); setup.sh's functions
# also BUILD and COMMIT.

# torch: the CPU-only build (PyPI's default torch pulls in the CUDA libraries); override with TORCH=...
TORCH=${TORCH:-torch==2.13.0+cpu}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

# git_dir_at_commit <path> <tool name> <clone URL>: prints the git dir of <path>, which must hold $COMMIT.
git_dir_at_commit() {
    dir=$(git -C "$1" rev-parse --absolute-git-dir 2>/dev/null) || dir=
    if [ -z "$dir" ] || ! git --git-dir="$dir" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
        echo "setup.sh: $1 is not a git repository holding $2's commit $COMMIT (clone $3, or git fetch it there)" >&2
        exit 2
    fi
    echo "$dir"
}

# build_venv <source folder name> [extra pip requirements...]: build/venv with torch, sgeval's requirements
# and sgeval itself (pip install -e), and build/<source folder> on its path (a .pth file); (re)installed
# when setup.sh or sgeval's requirements are newer than its stamp.
build_venv() {
    source_dir=$1
    shift
    stamp=$BUILD/venv/.installed
    [ -x "$BUILD/venv/bin/python" ] || "$PYTHON" -m venv "$BUILD/venv"
    if [ ! -f "$stamp" ] || [ "$ROOT/requirements.txt" -nt "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ] \
            || [ "$HERE/setup.sh" -nt "$stamp" ] || [ "$ROOT/tools/oracle_common.sh" -nt "$stamp" ]; then
        "$BUILD/venv/bin/pip" install --disable-pip-version-check -q "$TORCH" "$@" -r "$ROOT/requirements.txt"
        "$BUILD/venv/bin/pip" install --disable-pip-version-check -q --no-deps -e "$ROOT"
        site=$("$BUILD/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$BUILD/$source_dir" > "$site/$(basename "$HERE").pth"  # the extracted sources import by name
        touch "$stamp"
    fi
}

# extract_files <git dir> <folder> <path>...: each path's file at $COMMIT into <folder>/<path>, as committed (git
# cat-file: a mirror may lack the large data blobs git archive would walk); <folder> is emptied first.
extract_files() {
    git_dir=$1
    folder=$2
    shift 2
    rm -rf "$folder"
    for f in "$@"; do
        mkdir -p "$folder/$(dirname "$f")"
        git --git-dir="$git_dir" cat-file blob "$COMMIT:$f" > "$folder/$f" \
            || { echo "setup.sh: $f is missing at $COMMIT" >&2; exit 1; }
    done
}

# show_versions <tool name>: build/venv's torch and numpy, and the tool's commit.
show_versions() {
    "$BUILD/venv/bin/python" -c "import torch, numpy; print('$(basename "$HERE"): torch', torch.__version__, \
'numpy', numpy.__version__, '- $1 $COMMIT')"
}

# run_check <fixture folder> <test file> [pytest options]: setup.sh, make_fixtures.py with build/venv's Python
# rewriting tests/data/<fixture folder>/, then the test with sgeval's Python (SGEVAL_PYTHON, default .venv).
run_check() {
    "$HERE/setup.sh"
    cd "$ROOT"
    "$HERE/build/venv/bin/python" -m "tools.$(basename "$HERE").make_fixtures" --out "tests/data/$1"
    test_file=$2
    shift 2
    "${SGEVAL_PYTHON:-.venv/bin/python}" -m pytest -q "$@" "$test_file"
}
