"""Abhed as the one-file binary (build.sh): where the executables inside it are, and the host's
environment without the traces its bootloader leaves.

The binary unpacks itself into a folder (Nuitka: the user's cache dir; PyInstaller: a temp dir)
and runs from there. The executables it carries, bwrap (with its libcap) and rg, sit at the top of
that folder, so Abhed runs exactly the ones it was built with, never one that PATH or the
workspace offers. (At the top because Nuitka gives a bundled executable the rpath $ORIGIN and puts
the libraries it needs at the top: bwrap elsewhere would not find its libcap.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

# Set by the bootloaders for their own child; meaningless (or harmful) to anything Abhed starts.
_BOOTLOADER_VARIABLES = ("NUITKA_ONEFILE_PARENT", "NUITKA_ONEFILE_START", "NUITKA_ONEFILE_TIME_US",
                         "NUITKA_ONEFILE_RANDOM", "NUITKA_ONEFILE_BINARY", "NUITKA_ONEFILE_DIRECTORY",
                         "_MEIPASS2", "_PYI_APPLICATION_HOME_DIR", "_PYI_ARCHIVE_FILE", "_PYI_PARENT_PROCESS_LEVEL")


def extraction_dir() -> Path | None:
    """The folder the one-file binary unpacked itself into; None when Abhed runs from source or a wheel."""
    meipass = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and meipass:  # PyInstaller
        return Path(meipass)
    if "__compiled__" in globals() and getattr(globals()["__compiled__"], "standalone", False):  # Nuitka
        return Path(__file__).resolve().parents[2]  # this module is <folder>/abhed/common/frozen.py
    return None


def bundled(name: str) -> Path | None:
    """The executable `name` (bwrap, rg) inside the binary; None when not running as the binary."""
    folder = extraction_dir()
    return None if folder is None else folder / name


def launched_as() -> str:
    """The path the user started Abhed by: the one-file binary itself, not its unpacked copy.

    Nuitka's bootstrap says where the binary lies (NUITKA_ONEFILE_DIRECTORY); PyInstaller's
    sys.executable is the binary; from source, argv[0].
    """
    folder = os.environ.get("NUITKA_ONEFILE_DIRECTORY")
    if folder and extraction_dir() is not None:
        return os.path.join(folder, os.path.basename(sys.argv[0]))
    if getattr(sys, "frozen", False):
        return sys.executable
    return sys.argv[0]


def host_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment Abhed was started with, as the user had it before the bootloader ran.

    PyInstaller points LD_LIBRARY_PATH at its own libraries and keeps the user's value in
    LD_LIBRARY_PATH_ORIG; a child (bash through the operator's passthrough, rg, bwrap) must get the
    user's, or it would load the binary's copies of libc's neighbours.
    """
    env = dict(os.environ if environ is None else environ)
    for name in _BOOTLOADER_VARIABLES:
        env.pop(name, None)
    if "LD_LIBRARY_PATH_ORIG" in env:
        env["LD_LIBRARY_PATH"] = env.pop("LD_LIBRARY_PATH_ORIG")
    elif getattr(sys, "frozen", False) and getattr(sys, "_MEIPASS", None):
        env.pop("LD_LIBRARY_PATH", None)  # the user had none: the bootloader's must not leak
    return env
