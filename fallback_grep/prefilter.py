"""Literal prefilters (placeholder; filled in below)."""


def build(tree):
    return None
