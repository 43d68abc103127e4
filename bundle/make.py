"""`python -m bundle.make --binary PATH --secret-key PATH --out DIR [--wheelhouse-from DIR]`

Builds OUT/abhed-bundle-<version>/ and prints its path. The bundle is assembled in a temporary
directory beside it, signed, verified with the public key, and only then renamed into place, so a
half-made bundle never carries the final name.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click

from bundle import minisign, sbom, sums, verify

ROOT = Path(__file__).resolve().parent.parent  # the project checkout (pyproject.toml, offline_models/)
HERE = Path(__file__).resolve().parent
SBOM_PATH = "sbom/abhed.cdx.json"


class MakeError(Exception):
    pass


def project_version(root: Path = ROOT) -> str:
    """abhed.__version__, read from the source rather than imported: `bundle` imports nothing from `abhed`."""
    try:
        text = (root / "abhed" / "__init__.py").read_text()
    except OSError:
        raise MakeError(f"{root}/abhed/__init__.py not found: run bundle.make from an Abhed source checkout.") from None
    match = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.M)
    if not match:
        raise MakeError(f"{root}/abhed/__init__.py has no __version__ = \"...\" line.")
    return match.group(1)


def _wheelhouse(target: Path, source: Path | None, version: str) -> None:
    target.mkdir()
    if source is None:
        # The project and every runtime dependency, as wheels for this interpreter and platform.
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(target), str(ROOT)],
                              stdout=sys.stderr)
        if proc.returncode:
            raise MakeError(f"pip wheel failed (exit {proc.returncode}; its output is above). It needs the package "
                            f"index; offline, pass a ready wheelhouse with --wheelhouse-from DIR.")
    else:
        for wheel in sorted(source.glob("*.whl")):
            shutil.copy2(wheel, target / wheel.name)
    if not list(target.glob(f"abhed-{version}-*.whl")):
        raise MakeError(f"the wheelhouse has no abhed-{version}-*.whl; build it with `pip wheel --wheel-dir DIR .` "
                        f"from this checkout (version {version}).")


def _template(name: str, version: str) -> str:
    return (HERE / name).read_text().replace("@VERSION@", version)


# What scripts/build-microvm makes: the microvm sandbox backend's VM image, shipped when present
# (listed in SHA256SUMS and so signed like the rest; installed to PREFIX/share/abhed/microvm/).
MICROVM_FILES = ("vmlinux", "initramfs.img", "manifest.json")


# The site policy (abhed/session/sitepolicy.py) a bundle may carry: install.sh, run as root, places it
# at /etc/abhed/policy.toml (root:root 0644); signed with the rest, like every file of the bundle.
POLICY = "policy/policy.toml"


def check_policy(path: Path) -> bytes:
    """The policy file's bytes, when it is TOML with only the tables a site policy has; MakeError
    otherwise. Abhed checks its keys on the target (`abhed doctor` says what it locks)."""
    import tomllib
    try:
        data = path.read_bytes()
        tree = tomllib.loads(data.decode("utf-8"))
    except OSError as exc:
        raise MakeError(f"--policy {path}: {exc.strerror or exc}.") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MakeError(f"--policy {path}: not TOML: {exc}. Fix it before it goes on the bundle.") from None
    unknown = sorted(set(tree) - {"settings", "allowed"})
    if unknown:
        raise MakeError(f"--policy {path}: unknown table(s) {', '.join(unknown)}; a site policy has [settings] "
                        "and [allowed] (README.md, 'Site policy').")
    return data


def assemble(work: Path, binary: Path, secret: minisign.SecretKey, wheelhouse: Path | None, version: str,
             microvm: Path | None = None, policy: bytes | None = None) -> None:
    shutil.copyfile(binary, work / "abhed")
    (work / "abhed").chmod(0o755)
    if policy is not None:
        (work / POLICY).parent.mkdir()
        (work / POLICY).write_bytes(policy)
    if microvm is not None:
        (work / "microvm").mkdir()
        for name in MICROVM_FILES:
            shutil.copyfile(microvm / name, work / "microvm" / name)
    shutil.copytree(ROOT / "offline_models", work / "offline_models",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _wheelhouse(work / "wheelhouse", wheelhouse, version)
    (work / verify.PUBKEY).write_text(secret.public().dumps())
    (work / "install.sh").write_text(_template("install.sh", version))
    (work / "install.sh").chmod(0o755)
    (work / "README-OFFLINE.md").write_text(_template("README-OFFLINE.md", version))
    (work / "sbom").mkdir()
    bom = sbom.build(version, sums.sha256_file(work / "abhed"), work / "wheelhouse")
    (work / SBOM_PATH).write_text(json.dumps(bom, indent=2) + "\n")
    (work / sums.SUMS).write_text(sums.dumps(work, sums.bundle_files(work)))
    (work / sums.SIGNATURE).write_text(minisign.sign_file(secret, work / sums.SUMS).dumps())


def make(binary: Path, secret_key: Path, out: Path, wheelhouse: Path | None = None, microvm: Path | None = None,
         policy: Path | None = None) -> Path:
    version = project_version()
    policy_data = check_policy(policy) if policy is not None else None
    if not binary.is_file():
        raise MakeError(f"--binary {binary}: no such file. Build it first (./build.sh makes dist/abhed).")
    if microvm is not None and not all((microvm / name).is_file() for name in MICROVM_FILES):
        raise MakeError(f"--microvm {microvm}: needs {', '.join(MICROVM_FILES)}; build them with scripts/build-microvm.")
    try:
        secret = minisign.loads_secret(secret_key.read_bytes(), str(secret_key))
    except OSError as exc:
        raise MakeError(f"--secret-key {secret_key}: {exc.strerror or exc}. Make a key with "
                        f"`python -m bundle.keygen --out DIR`.") from None
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise MakeError(f"--wheelhouse-from {wheelhouse}: not a directory of wheels.")
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"abhed-bundle-{version}"
    work = out / f".{final.name}.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        assemble(work, binary, secret, wheelhouse, version, microvm, policy_data)
        # A self-check with the key we signed with: what the installer will do, before the name is final.
        verify.verify(work, key_id=secret.public().id_text)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    return final


@click.command()
@click.option("--binary", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The abhed executable (dist/abhed from build.sh).")
@click.option("--secret-key", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The site's unencrypted minisign secret key (python -m bundle.keygen).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory in which abhed-bundle-VERSION/ is made (an existing one is replaced).")
@click.option("--wheelhouse-from", "wheelhouse", type=click.Path(file_okay=False, path_type=Path),
              help="Copy the wheels from this directory instead of running `pip wheel` (which needs the index).")
@click.option("--microvm", type=click.Path(file_okay=False, path_type=Path),
              help="Ship this microvm sandbox image (scripts/build-microvm's build/microvm).")
@click.option("--policy", type=click.Path(dir_okay=False, path_type=Path),
              help="A site policy for /etc/abhed/policy.toml, placed by install.sh (which then needs root).")
def main(binary: Path, secret_key: Path, out: Path, wheelhouse: Path | None, microvm: Path | None,
         policy: Path | None) -> None:
    """Build the signed USB bundle and print its path."""
    try:
        final = make(binary, secret_key, out, wheelhouse, microvm, policy)
    except (MakeError, minisign.FormatError, verify.VerificationError, OSError, ValueError) as exc:
        click.echo(f"bundle.make: {exc}", err=True)
        sys.exit(1)
    click.echo(str(final.resolve()))


if __name__ == "__main__":
    main()
