"""Abhed: an offline coding agent for air-gapped networks."""

import sys
import types

__version__ = "0.1.0"


def _without_pydantic_plugins() -> None:
    """pydantic looks for plugins when it builds its first model: it imports importlib.metadata (with
    email, zipfile, csv...) and reads the entry points of every installed distribution, a tenth of
    `abhed tool read`'s start-up (issue 18). Abhed uses no pydantic plugin, and code that a package
    installed beside it registers should not run inside the agent, so pydantic is given a plugin
    loader that finds none. Set before any model is built; if pydantic already loaded its own, that
    one stays (then nothing changes but the time)."""
    loader = types.ModuleType("pydantic.plugin._loader", "Abhed: no pydantic plugins (abhed/__init__.py).")
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]  # a module built here: set, not declared
    sys.modules.setdefault(loader.__name__, loader)


_without_pydantic_plugins()
