"""`abhed config path | show | init`: where the operator's config file is, what is in effect and
why, and an example file. Thin over session/config.py (loading, sources) and session/configfile.py
(the example's text, the settings flattened)."""

from __future__ import annotations

import json
import os

import click

from abhed.cli import base
from abhed.common.terminal import printable


@click.group("config")
def config_group() -> None:
    """The operator's settings: where the file is, what is in effect and why, an example file."""


@config_group.command("path")
def config_path() -> None:
    """Print the config file's path (ABHED_CONFIG, else ~/.config/abhed/config.toml)."""
    from abhed.session import config
    path = config.config_path(dict(os.environ))
    if path is None:
        click.echo("[no config file: ABHED_CONFIG is set empty; the defaults and ABHED_* variables apply]", err=True)
        return
    click.echo(printable(str(path)))
    if not path.exists():
        click.echo(printable(f"[no file at {path}: the defaults and ABHED_* variables apply; `abhed config init` "
                             "writes a commented example there]"), err=True)


@config_group.command("show")
def config_show() -> None:
    """Print every setting in effect and where it came from: default, the file, a variable, or the site
    policy (/etc/abhed/policy.toml), whose locked keys are marked."""
    from abhed.session import config
    from abhed.session.configfile import flat
    settings, where = base.settings(), config.sources()
    site = settings.site_policy
    if site is not None:
        click.echo(printable(f"# site policy {site.path} (root's, in force): {len(site.locked)} key(s) locked, "
                             f"{len(site.allowed)} with permitted values; users cannot change these"))
    for key, value in flat(settings.model_dump(mode="json")):
        note = where.get(key, "default")
        if site is not None:
            note = site.annotate(key, note)
        click.echo(printable(f"{key} = {json.dumps(value)}  # {note}"))


@config_group.command("init")
def config_init() -> None:
    """Write a commented example config file (every setting at its default) where Abhed reads it."""
    from abhed.session import config
    from abhed.session.configfile import write_example
    path = config.config_path(dict(os.environ))
    if path is None:
        base.fail("ABHED_CONFIG is set empty (no config file): set it to the path to write, or unset it for "
                  "~/.config/abhed/config.toml.")
    if path.exists():
        base.fail(f"{path} already exists; edit it (`abhed config show` prints what is in effect), or move it away "
                  "and run this again.")
    try:
        write_example(path)
    except OSError as exc:
        base.fail(f"Cannot write {path}: {exc.strerror or exc}. Set ABHED_CONFIG to a path you can write.")
    click.echo(printable(f"Wrote {path}"))
