"""The one native part of Abhed, beside pyproject.toml (which says everything else).

sandbox/_listdir.c lists a directory and lstat's its files for the git guard's start walk (issue 34:
the first checkpoint of a large tree). It is optional: when no C compiler or Python headers are at
hand the build goes on without it, and sandbox.gitguard lists in Python, with the same result,
slower. scripts/setup installs both so that a checkout has it; the binary's build (build.sh) needs
them anyway.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("sandbox._listdir", ["sandbox/_listdir.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"])])
