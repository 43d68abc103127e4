"""Verifies a bundle exactly as install.sh does: which key to trust, the signature over SHA256SUMS,
then a closed file list and every checksum. Messages match install.sh's, so the operator's
instructions read the same whichever of the two they ran.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from bundle import minisign, sums

PUBKEY = "abhed.pub"
PINNED = Path("share/abhed") / PUBKEY
DAMAGED = ("The bundle is damaged or was changed after it was signed. Do not install it: copy the bundle again "
           "from the original medium, or ask whoever made it for a new one (README-OFFLINE.md, "
           "'When verification fails').")


class VerificationError(Exception):
    """The bundle is not verified; str() says which file failed, why, and what to do."""


@dataclass(frozen=True)
class Verified:
    files: int
    key: minisign.PublicKey
    trusted_because: str
    trusted_comment: str

    def summary(self) -> str:
        return (f"verified {self.files} files, signed by key ID {self.key.id_text} ({self.trusted_because}); "
                f"trusted comment: {self.trusted_comment}")


def default_prefix() -> Path:
    """Where install.sh installs by default: /usr/local as root, else ~/.local."""
    return Path("/usr/local") if os.geteuid() == 0 else Path.home() / ".local"


def _read_key(path: Path, label: str) -> minisign.PublicKey:
    try:
        return minisign.loads_public(path.read_bytes(), str(path))
    except OSError as exc:
        raise VerificationError(f"{path}: cannot read the {label}: {exc.strerror or exc}.") from None
    except minisign.FormatError as exc:
        raise VerificationError(f"{exc} Give the site's public key file as written by bundle.keygen or "
                                f"minisign -G.") from None


def _bundle_key(bundle: Path) -> minisign.PublicKey:
    path = bundle / PUBKEY
    if not path.is_file():
        raise VerificationError(f"{PUBKEY}: missing from the bundle {bundle}. {DAMAGED}")
    try:
        return minisign.loads_public(path.read_bytes(), PUBKEY)
    except minisign.FormatError as exc:
        raise VerificationError(f"{exc} {DAMAGED}") from None


def trusted_key(bundle: Path, pubkey: Path | None, key_id: str | None,
                pinned: Path | None) -> tuple[minisign.PublicKey, str]:
    """The key to verify with and why it is trusted: --pubkey, else a pinned key, else the bundle's
    own key when the operator confirmed its ID out of band. A bundle never vouches for itself."""
    want = None
    if key_id is not None:
        try:
            want = minisign.parse_key_id(key_id)
        except minisign.FormatError as exc:
            raise VerificationError(f"--key-id: {exc}") from None
    if pubkey is not None:
        key, why = _read_key(pubkey, "public key given with --pubkey"), f"--pubkey {pubkey}"
    elif pinned is not None and pinned.is_file():
        key, why = _read_key(pinned, "key pinned by a previous install"), f"pinned by a previous install at {pinned}"
    elif want is not None:
        key = _bundle_key(bundle)
        if key.key_id != want:
            raise VerificationError(
                f"{PUBKEY}: the bundle's key has ID {key.id_text}, not the ID {minisign.key_id_text(want)} you were "
                f"given. Someone may have replaced the bundle's key. Do not install: check the ID with whoever "
                f"made the bundle, or get the site's public key and pass it with --pubkey FILE.")
        return key, f"the bundle's {PUBKEY}, confirmed with --key-id"
    else:
        key = _bundle_key(bundle)
        raise VerificationError(
            f"no trusted key: the bundle is signed by key ID {key.id_text}, but a bundle cannot vouch for itself. "
            f"Either pass the site's public key (distributed separately) with --pubkey FILE, or confirm the ID "
            f"{key.id_text} with whoever made the bundle (by phone, on paper) and pass --key-id {key.id_text}.")
    if want is not None and key.key_id != want:
        raise VerificationError(f"--key-id {minisign.key_id_text(want)} does not match the trusted key "
                                f"{key.id_text} ({why}). Check the ID you were given.")
    return key, why


def _signature(bundle: Path, key: minisign.PublicKey, why: str) -> str:
    for name in (sums.SUMS, sums.SIGNATURE):
        if not (bundle / name).is_file():
            raise VerificationError(f"{name}: missing from the bundle {bundle}. {DAMAGED}")
    try:
        sig = minisign.loads_signature((bundle / sums.SIGNATURE).read_bytes(), sums.SIGNATURE)
    except minisign.FormatError as exc:
        raise VerificationError(f"{exc} {DAMAGED}") from None
    if sig.key_id != key.key_id:
        raise VerificationError(
            f"{sums.SUMS}: signed by key ID {minisign.key_id_text(sig.key_id)}, but the trusted key is "
            f"{key.id_text} ({why}). If the site changed its signing key, pass the new public key with --pubkey "
            f"FILE; otherwise do not install: the bundle was not made by your site.")
    try:
        minisign.verify_file(key, bundle / sums.SUMS, sig, sums.SIGNATURE)
    except minisign.VerifyError as exc:
        raise VerificationError(f"{exc} {DAMAGED}") from None
    return sig.trusted_comment


def _files(bundle: Path) -> int:
    try:
        listed = sums.loads((bundle / sums.SUMS).read_text(encoding="utf-8", errors="replace"))
        present = sums.bundle_files(bundle)
    except sums.SumsError as exc:
        raise VerificationError(f"{exc} {DAMAGED}") from None
    for rel in present:
        if rel not in listed:
            raise VerificationError(f"{rel}: in the bundle but not listed in {sums.SUMS}. {DAMAGED}")
    for rel, digest in listed.items():
        if not (bundle / rel).is_file():
            raise VerificationError(f"{rel}: listed in {sums.SUMS} but missing from the bundle. {DAMAGED}")
        if sums.sha256_file(bundle / rel) != digest:
            raise VerificationError(f"{rel}: checksum mismatch. {DAMAGED}")
    return len(listed)


def verify(bundle: Path, pubkey: Path | None = None, key_id: str | None = None,
           pinned: Path | None = None) -> Verified:
    """Verify the bundle directory or raise VerificationError. `pinned`: a key file left by a previous install."""
    if not bundle.is_dir():
        raise VerificationError(f"{bundle}: not a directory. Give the bundle directory (abhed-bundle-VERSION).")
    key, why = trusted_key(bundle, pubkey, key_id, pinned)
    comment = _signature(bundle, key, why)
    return Verified(_files(bundle), key, why, comment)


def pinned_key(prefix: Path | None, program: str) -> Path | None:
    """The key a previous install pinned: under --prefix if given, else under the prefix this program
    was installed into (PREFIX/bin/abhed), else under install.sh's default prefix."""
    if prefix is not None:
        return prefix / PINNED
    candidates = []
    located = program if "/" in program else shutil.which(program)
    if located and Path(located).name == "abhed":
        candidates.append(Path(located).resolve().parent.parent / PINNED)
    candidates.append(default_prefix() / PINNED)
    return next((path for path in candidates if path.is_file()), None)
