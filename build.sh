#!/usr/bin/env bash
# Builds dist/abhed: the whole CLI as one executable, with bwrap and rg inside it.
#
#   ./build.sh                 Nuitka --onefile (the product)
#   ./build.sh --pyinstaller   the same with PyInstaller (fallback when Nuitka cannot build)
#   ABHED_DIST=DIR ./build.sh  write DIR/abhed instead of dist/abhed
#
# Needs a C compiler (gcc), Python's headers and patchelf; uses ccache when present.
# scripts/setup-build installs what is missing. The binary's only run-time dependency is glibc
# (docs/binary.md says which). A cold build takes about 15 min on 2 cores, a rebuild with ccache 5.
set -euo pipefail
cd "$(dirname "$0")"
# The tools the project installs into .venv (patchelf, which Nuitka looks up on PATH) come first:
# whatever the caller's PATH holds, or lacks, the build uses the pinned ones.
export PATH="$PWD/.venv/bin:$PATH"
builder=nuitka
case "${1:-}" in
    "") ;;
    --pyinstaller) builder=pyinstaller ;;
    *) echo "usage: $0 [--pyinstaller]" >&2; exit 2 ;;
esac

scripts/setup-build "$builder"
python=$PWD/.venv/bin/python
version=$("$python" -c 'import abhed; print(abhed.__version__)')
dist=${ABHED_DIST:-dist}
mkdir -p "$dist"

if [ "$builder" = pyinstaller ]; then
    # PyInstaller copies bwrap and libcap unchanged (it finds them through LD_LIBRARY_PATH at run
    # time, never rewrites them), so there is no rewrite to verify; tests/dist/test_pyinstaller.py
    # runs its sandbox.
    "$python" -m PyInstaller --noconfirm --clean --distpath "$dist" --workpath build/pyinstaller packaging/abhed.spec
    echo "built $dist/abhed (PyInstaller, abhed $version) in $((SECONDS / 60)) min $((SECONDS % 60)) s"
    exit 0
fi

# Our patch to Nuitka's one-file bootstrap (packaging/nuitka-onefile-cache-fallback.patch; about
# 100 lines of C, applied to the pinned Nuitka in .venv, which it was made for):
# - when the cache folder cannot be written (a read-only or missing HOME), unpack into a private
#   temp folder, removed at exit, instead of stopping;
# - after a complete unpack, a stamp naming this binary lets later starts skip re-reading the
#   payload (Nuitka decompresses and checksums all of it at every start: half a second).
# - the cache folder is used only when no one else can change it (owned by the user, writable by
#   no one else, and so every folder above it): else a file planted there would run as the user.
nuitka_dir=$("$python" -c 'import nuitka, os; print(os.path.dirname(nuitka.__file__))')
patch_file=packaging/nuitka-onefile-cache-fallback.patch
applied() { patch --dry-run --reverse --force --quiet -p0 -d "$nuitka_dir" > /dev/null 2>&1; }
if ! applied < "$patch_file"; then
    # An older version of the patch may be applied (a .venv built before the patch changed): take it
    # off first, found in this repository's history, so Nuitka's own file is patched anew.
    for rev in $(git log --format=%H -- "$patch_file" 2>/dev/null); do
        if git show "$rev:$patch_file" | applied; then
            git show "$rev:$patch_file" | patch --reverse --force --quiet -p0 -d "$nuitka_dir" > /dev/null
            break
        fi
    done
    patch --forward --quiet -p0 -d "$nuitka_dir" < "$patch_file" || {
        echo "build.sh: $patch_file does not apply to $nuitka_dir (another Nuitka, or an older version of the" \
             "patch is applied): .venv/bin/pip install --force-reinstall nuitka==<the pinned version>, then re-run." >&2
        exit 1
    }
fi

# ccache: Nuitka uses it when it is on PATH.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths under the checkout are hashed relative to it, so a fresh clone elsewhere (CI) hits the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# Unpacked once per version into the user's cache dir and reused, so start-up does not unpack
# every time. {VERSION} is the product version: a new release never reuses an old unpack.
spec='{CACHE_DIR}/abhed/{VERSION}'
# Left out: what only optional or development paths import. httpx's own command line (httpx._main,
# which pulls in pygments' 300 lexers; httpx works without it), and the optional accelerators the
# development venv happens to have: google-re2 (pathspec's faster backend), zstandard (httpx's
# zstd decoding) and attrs (rich.pretty). Each is imported inside try/except, so the binary behaves
# as a plain `pip install abhed` does -- provided a left-out module raises ModuleNotFoundError as a
# missing one would (pathspec catches only that), hence --no-deployment-flag=excluded-module-usage.
# Also left out: the XML parsers, which nothing in Abhed imports (only platform.mac_ver's plistlib
# reaches them); they would bring the system's libexpat, whose Debian 12 build needs glibc 2.36
# (arc4random_buf) and so would raise the binary's glibc floor above 2.35.
echo "building with Nuitka $("$python" -m nuitka --version 2>/dev/null | head -n 1) and $(patchelf --version) ($(command -v patchelf))"
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
    --include-package=bundle \
    --include-package=offline_models \
    --include-package-data=offline_models \
    --include-package=prompt_toolkit \
    --nofollow-import-to=httpx._main \
    --nofollow-import-to=pygments \
    --nofollow-import-to=re2 \
    --nofollow-import-to=zstandard \
    --nofollow-import-to=attr \
    --nofollow-import-to=xml \
    --nofollow-import-to=plistlib \
    --nofollow-import-to=xmlrpc \
    --no-deployment-flag=excluded-module-usage \
    --noinclude-pytest-mode=nofollow \
    --noinclude-setuptools-mode=nofollow \
    --noinclude-unittest-mode=nofollow \
    --output-dir=build/nuitka \
    --output-filename=abhed \
    --remove-output \
    --quiet \
    --python-flag=-m \
    abhed

# Its bwrap and rg must run from the folder it unpacks into (patchelf rewrote them): else the
# build fails here and dist/ keeps no broken binary.
scripts/verify-binary build/nuitka/abhed "$version"
mv -f build/nuitka/abhed "$dist/abhed"
echo "built $dist/abhed (Nuitka, abhed $version, $(du -m "$dist/abhed" | cut -f1) MB) in $((SECONDS / 60)) min $((SECONDS % 60)) s"
