#!/usr/bin/env bash
# Builds dist/abhed: the whole CLI as one executable, with bwrap and rg inside it.
#
#   ./build.sh                 Nuitka --onefile (the product)
#   ./build.sh --pyinstaller   the same with PyInstaller (fallback when Nuitka cannot build)
#
# Needs a C compiler (gcc) and patchelf; uses ccache when present. scripts/setup-build installs
# what is missing. The binary's only run-time dependency is glibc (docs/binary.md says which).
set -euo pipefail
cd "$(dirname "$0")"
builder=nuitka
case "${1:-}" in
    "") ;;
    --pyinstaller) builder=pyinstaller ;;
    *) echo "usage: $0 [--pyinstaller]" >&2; exit 2 ;;
esac

scripts/setup-build "$builder"
python=.venv/bin/python
version=$("$python" -c 'import abhed; print(abhed.__version__)')
mkdir -p dist

if [ "$builder" = pyinstaller ]; then
    "$python" -m PyInstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/abhed.spec
    echo "built dist/abhed (PyInstaller, abhed $version)"
    exit 0
fi

# Nuitka's one-file bootstrap stops when the cache folder cannot be written (a read-only or
# missing HOME); our patch makes it unpack into a private temp folder instead, removed at exit.
# Nuitka is pinned (pyproject's build extra), so the patch applies to the exact source it was made for.
nuitka_dir=$("$python" -c 'import nuitka, os; print(os.path.dirname(nuitka.__file__))')
if ! grep -q abhed_fallback_temp "$nuitka_dir/build/static_src/OnefileBootstrap.c"; then
    patch --quiet --forward -p0 -d "$nuitka_dir" < packaging/nuitka-onefile-cache-fallback.patch
fi

# ccache: Nuitka uses it when it is on PATH; keep its cache where CI can keep it between runs.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Unpacked once per version into the user's cache dir and reused, so start-up does not unpack
# every time. {VERSION} is the product version: a new release never reuses an old unpack.
spec='{CACHE_DIR}/abhed/{VERSION}'
# Left out: what only optional or development paths import. httpx's own command line (httpx._main,
# which pulls in pygments' 300 lexers; httpx works without it), and the optional accelerators the
# development venv happens to have: google-re2 (pathspec's faster backend), zstandard (httpx's
# zstd decoding) and attrs (rich.pretty). Each is imported inside try/except ImportError, so the
# binary behaves as a plain `pip install abhed` does.
"$python" -m nuitka \
    --onefile \
    --onefile-tempdir-spec="$spec" \
    --reproducible=yes \
    --product-name=abhed \
    --product-version="$version" \
    --file-version="$version" \
    --user-package-configuration-file=packaging/abhed.nuitka-package.config.yml \
    --include-package=abhed \
    --include-package=fallback_grep \
    --include-package=sandbox \
    --include-package=offline_models \
    --include-package-data=offline_models \
    --nofollow-import-to=httpx._main \
    --nofollow-import-to=pygments \
    --nofollow-import-to=re2 \
    --nofollow-import-to=zstandard \
    --nofollow-import-to=attr \
    --noinclude-pytest-mode=nofollow \
    --noinclude-setuptools-mode=nofollow \
    --noinclude-unittest-mode=nofollow \
    --output-dir=build/nuitka \
    --output-filename=abhed \
    --remove-output \
    --quiet \
    --python-flag=-m \
    abhed
mv -f build/nuitka/abhed dist/abhed
echo "built dist/abhed (Nuitka, abhed $version, $(du -m dist/abhed | cut -f1) MB)"
