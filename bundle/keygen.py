"""`python -m bundle.keygen --out DIR`: a site's signing key pair, in minisign's formats.

DIR/abhed.key is minisign's unencrypted secret-key format (mode 0600), so the site can also sign
with `minisign -S -s abhed.key`; DIR/abhed.pub is the public key to hand to every installer.
A secret key must never enter version control, so a DIR inside a git work tree is refused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bundle import minisign


class KeygenError(Exception):
    pass


def git_work_tree(path: Path) -> Path | None:
    """The enclosing git work tree of `path`, found by looking for .git upwards (git itself need not be installed)."""
    for parent in [path, *path.parents]:
        if (parent / ".git").exists():
            return parent
    return None


def generate(out: Path, force: bool = False) -> tuple[Path, Path, minisign.PublicKey]:
    out = out.resolve()
    tree = git_work_tree(out)
    if tree is not None:
        raise KeygenError(f"{out} is inside the git work tree {tree}: a secret key there is one `git add` away "
                          f"from being published. Choose a directory outside any repository, e.g. "
                          f"--out ~/abhed-signing (and keep a copy offline).")
    secret_path, public_path = out / "abhed.key", out / "abhed.pub"
    for path in (secret_path, public_path):
        if path.exists() and not force:
            raise KeygenError(f"{path} already exists; a new key would orphan every bundle signed with the old one. "
                              f"Choose another --out, or pass --force to replace it.")
    out.mkdir(parents=True, exist_ok=True)
    secret = minisign.generate()
    # O_EXCL after unlink: the secret is never readable by others, not even for an instant.
    secret_path.unlink(missing_ok=True)
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret.dumps())
    public = secret.public()
    public_path.write_text(public.dumps())
    return secret_path, public_path, public


@click.command()
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory for abhed.key (secret, mode 0600) and abhed.pub. Not inside a git work tree.")
@click.option("--force", is_flag=True, help="Replace an existing key pair in --out.")
def main(out: Path, force: bool) -> None:
    """Generate an Ed25519 signing key pair for a site, in minisign's formats."""
    try:
        secret_path, public_path, public = generate(out, force)
    except (KeygenError, OSError) as exc:
        click.echo(f"bundle.keygen: {exc}", err=True)
        sys.exit(1)
    click.echo(f"Secret key: {secret_path} (keep it offline; anyone holding it can sign bundles)")
    click.echo(f"Public key: {public_path} (give it to every site that installs Abhed)")
    click.echo(f"Key ID:     {public.id_text} (read it out to installers so they can check it)")


if __name__ == "__main__":
    main()
