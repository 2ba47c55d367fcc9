"""The one compiled part: the parser's leaf walk (``src/focuscrawl/_leafwalk.pyx``). It is
optional: without a C compiler the install goes on and ``focuscrawl.parse`` walks in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("focuscrawl._leafwalk", ["src/focuscrawl/_leafwalk.pyx"], optional=True)])
