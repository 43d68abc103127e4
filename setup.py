"""The native parts of Abhed, beside pyproject.toml (which says everything else).

Two small C modules that spare the first checkpoint of a large tree its per-file Python (issue 34):
sandbox/_listdir.c lists a directory and lstat's its files for the git guard's start walk, and
abhed/session/_seed.c reads the repository's index and takes the entries that walk vouches for. Both are
optional: when no C compiler or Python headers are at hand the build goes on without them, and the
same work is done in Python, with the same result, slower. scripts/setup installs both so that a
checkout has them; the binary's build (build.sh) needs them anyway.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Werror=implicit-function-declaration"]

setup(ext_modules=[Extension("sandbox._listdir", ["sandbox/_listdir.c"], optional=True, extra_compile_args=FLAGS),
                   Extension("abhed.session._seed", ["abhed/session/_seed.c"], optional=True,
                             extra_compile_args=FLAGS)])
