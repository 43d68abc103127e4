import subprocess
import sys

from abhed import __version__


def test_version_via_module():
    out = subprocess.run([sys.executable, "-m", "abhed", "--version"], capture_output=True, text=True, check=True)
    assert __version__ in out.stdout
