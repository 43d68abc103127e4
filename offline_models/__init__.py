"""Model profiles, one TOML file per model family (read by abhed.model.profiles).

A package only so the files ship inside the wheel and the one-file binary as package data; the
directory is also copied whole into the USB bundle for operators to read and extend.
"""
