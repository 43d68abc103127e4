"""The `abhed` command line."""

import click

from abhed import __version__


@click.group()
@click.version_option(__version__, prog_name="abhed")
def main() -> None:
    """Abhed: an offline coding agent for air-gapped networks."""
