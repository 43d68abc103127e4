"""Tool calls written in a reply's text, in every form a model family writes them (see reading.py)."""
