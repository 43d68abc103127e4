"""Makes and verifies Abhed's USB bundle: binary, wheelhouse, SHA256SUMS, minisign signature, SBOM, install.sh.

Imports nothing from `abhed`: the bundle is checked by the same code whether it runs inside the
installed binary (`abhed bundle verify`) or from a source checkout (`python -m bundle.make`).
"""
