"""`abhed bundle verify`: a USB bundle checked as its install.sh would, before installing it. Thin
over bundle/verify.py."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.group()
def bundle() -> None:
    """Check a USB bundle (made by `python -m bundle.make`) before installing it."""


@bundle.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--pubkey", type=click.Path(dir_okay=False, path_type=Path),
              help="The site's public key (minisign format), distributed separately from the bundle.")
@click.option("--key-id", help="Trust the bundle's own abhed.pub only if its key ID is this (got out of band).")
@click.option("--prefix", type=click.Path(file_okay=False, path_type=Path),
              help="Where a previous install pinned its key (default: this abhed's prefix, else install.sh's).")
def bundle_verify(directory: Path, pubkey: Path | None, key_id: str | None, prefix: Path | None) -> None:
    """Verify a bundle as its install.sh would.

    Checks the signature over DIRECTORY/SHA256SUMS, that no file is unlisted or missing, and every
    checksum. Exit 0 when verified, 1 naming the file that failed and what to do.
    """
    from abhed.common.frozen import launched_as
    from bundle.verify import VerificationError, pinned_key, verify as verify_bundle

    try:
        result = verify_bundle(directory, pubkey, key_id, pinned_key(prefix, launched_as()))
    except VerificationError as exc:
        click.echo(f"abhed: {exc}", err=True)
        sys.exit(1)
    click.echo(f"abhed: {result.summary()}")
