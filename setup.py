"""The compiled modules (spark_zmq/native/*.pyx); everything else is in pyproject.toml.

``libzmq`` is the binding that ``buffer`` and ``receive`` (capture) and ``send`` (the writer)
cimport (spark_zmq/native/libzmq.pxd); ``receive`` cimports ``buffer`` (buffer.pxd), and both
compile in the row storage of rows.pxd. None links libzmq: the binding takes libzmq's functions,
at run time, from the library that pyzmq itself loaded (see libzmq.pyx), so the build needs
neither zmq.h nor a libzmq, only Cython, a C compiler and Python's headers. libdl is named for
glibc before 2.34, where dlopen lives there. They are optional: where they cannot be compiled
(no compiler), the install goes on without them and capture and writers run their Python paths,
saying so once in the log (``spark-zmq doctor`` notes it too). The tests require them
(tests/capture/conftest.py, tests/protocols/conftest.py), so CI sees a failed build.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = [
    Extension(
        "spark_zmq.native.libzmq", ["spark_zmq/native/libzmq.pyx"], libraries=["dl"], optional=True
    ),
    Extension("spark_zmq.native.buffer", ["spark_zmq/native/buffer.pyx"], optional=True),
    Extension("spark_zmq.native.receive", ["spark_zmq/native/receive.pyx"], optional=True),
    Extension("spark_zmq.native.send", ["spark_zmq/native/send.pyx"], optional=True),
]

setup(ext_modules=cythonize(NATIVE, compiler_directives={"language_level": "3"}, quiet=True))
