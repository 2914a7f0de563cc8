"""The compiled capture core (spark_zmq/capture/native.pyx); everything else is in pyproject.toml.

The extension links no libzmq: it takes libzmq's functions, at run time, from the library that
pyzmq itself loaded (see the module's docstring), so it needs neither zmq.h nor a libzmq to build,
only Cython, a C compiler and Python's headers. libdl is named for glibc before 2.34, where dlopen
lives there. It is optional: where it cannot be compiled (no compiler), the install goes on
without it and capture runs its Python loop, saying so once in the log (``spark-zmq doctor``
notes it too). The tests require it (tests/capture/conftest.py), so CI sees a failed build.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = Extension(
    "spark_zmq.capture.native",
    ["spark_zmq/capture/native.pyx"],
    libraries=["dl"],
    optional=True,
)

setup(ext_modules=cythonize([NATIVE], compiler_directives={"language_level": "3"}, quiet=True))
