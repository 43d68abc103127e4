# Sourced by the scripts/setup* scripts: the tools that come from the machine's packages, not from
# .venv. Each is installed when it is missing and we may (root with apt-get), else named with the
# package to install; nothing is assumed present because a developer's machine happened to have it.

# install_package PACKAGE WHY: installs a Debian package as root; else says what to run, and returns 1.
install_package() {
    local package=$1 why=$2
    if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null 2>&1; then
        echo "${0##*/}: installing $package: $why" >&2
        export DEBIAN_FRONTEND=noninteractive
        # A fresh image has no package lists: update only when the first try finds nothing.
        apt-get install -y -qq "$package" > /dev/null 2>&1 \
            || { apt-get update -qq > /dev/null && apt-get install -y -qq "$package" > /dev/null; } \
            && return 0
        echo "${0##*/}: apt-get could not install $package. $why" >&2
        return 1
    fi
    echo "${0##*/}: $package is not installed. $why Install it as root (Debian/Ubuntu: apt-get install -y" \
         "$package; Fedora and others: the package of that name or its equivalent), then re-run ${0##*/}." >&2
    return 1
}

# need COMMAND PACKAGE WHY: COMMAND is on PATH afterwards, or the reason was said and this returns 1.
need() {
    local command=$1 package=$2 why=$3
    command -v "$command" > /dev/null 2>&1 && return 0
    install_package "$package" "$command is missing: $why" || return 1
    command -v "$command" > /dev/null 2>&1 && return 0
    echo "${0##*/}: $package is installed but $command is still not on PATH ($PATH). $why" >&2
    return 1
}

# need_python_headers WHY: the headers (Python.h) of .venv's Python are installed, or the reason was
# said and this returns 1. Debian packages them apart from the interpreter (python3.X-dev).
need_python_headers() {
    local why=$1 include package
    include=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    [ -f "$include/Python.h" ] && return 0
    package=$(.venv/bin/python -c 'import sys; print("python%d.%d-dev" % sys.version_info[:2])')
    install_package "$package" "$why ($include/Python.h is missing)." || return 1
    [ -f "$include/Python.h" ] && return 0
    echo "${0##*/}: $package is installed, yet $include/Python.h is still missing. $why" >&2
    return 1
}
