"""The compiled parts: the parser's leaf walk (``src/focuscrawl/_leafwalk.pyx``), the tokenizer
of a page's leaves (``src/focuscrawl/_tokens.pyx``), the apprentice's link windows and table of
feature ids (``src/focuscrawl/_idtable.pyx``), and the nesting estimate (``src/focuscrawl/nesting.py``,
plain Python compiled as it is, with the types of its ``.pxd``). All are optional: without a C
compiler the install goes on, and ``focuscrawl.parse``, ``focuscrawl.text``,
``focuscrawl.apprentice`` and ``focuscrawl.nesting`` do it in Python."""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = cythonize([Extension(name, [source]) for name, source in (
    ("focuscrawl._leafwalk", "src/focuscrawl/_leafwalk.pyx"),
    ("focuscrawl._tokens", "src/focuscrawl/_tokens.pyx"),
    ("focuscrawl._idtable", "src/focuscrawl/_idtable.pyx"),
    ("focuscrawl.nesting", "src/focuscrawl/nesting.py"))])
for extension in extensions:
    extension.optional = True  # (cythonize does not carry it over)
setup(ext_modules=extensions)
