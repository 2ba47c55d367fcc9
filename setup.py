"""The compiled parts: the parser's leaf walk (``src/focuscrawl/_leafwalk.pyx``) and the
tokenizer of a page's leaves (``src/focuscrawl/_tokens.pyx``). Both are optional: without a C
compiler the install goes on, and ``focuscrawl.parse`` and ``focuscrawl.text`` do it in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("focuscrawl._leafwalk", ["src/focuscrawl/_leafwalk.pyx"], optional=True),
                   Extension("focuscrawl._tokens", ["src/focuscrawl/_tokens.pyx"], optional=True)])
