"""Abhed: an offline coding agent for air-gapped networks."""

__version__ = "0.1.0"
