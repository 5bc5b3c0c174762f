# Shared by tools/openpsg_check/setup.sh, tools/sgb_check/setup.sh and tools/oi_check/setup.sh (sourced, POSIX
# sh): the checks of the tool's git repository and the build venv. Expects ROOT, HERE, BUILD, PYTHON, TORCH and COMMIT.

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
            || [ "$HERE/setup.sh" -nt "$stamp" ] || [ "$ROOT/tools/oracle_venv.sh" -nt "$stamp" ]; then
        "$BUILD/venv/bin/pip" install --disable-pip-version-check -q "$TORCH" "$@" -r "$ROOT/requirements.txt"
        "$BUILD/venv/bin/pip" install --disable-pip-version-check -q --no-deps -e "$ROOT"
        site=$("$BUILD/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$BUILD/$source_dir" > "$site/$(basename "$HERE").pth"  # the extracted sources import by name
        touch "$stamp"
    fi
}
