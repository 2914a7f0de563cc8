"""The compiled capture core (spark_zmq/capture/native.pyx); everything else is in pyproject.toml.

The extension links no libzmq: it takes libzmq's functions, at run time, from the library that
pyzmq itself loaded (see the module's docstring), so it needs neither zmq.h nor a libzmq to build,
only Cython, a C compiler and Python's headers. libdl is named for glibc before 2.34, where dlopen
lives there.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = Extension(
    "spark_zmq.capture.native",
    ["spark_zmq/capture/native.pyx"],
    libraries=["dl"],
)

setup(ext_modules=cythonize([NATIVE], compiler_directives={"language_level": "3"}, quiet=True))
