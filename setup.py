"""The compiled parts: the parser's leaf walk (``src/focuscrawl/_leafwalk.pyx``), the tokenizer
of a page's leaves (``src/focuscrawl/_tokens.pyx``) and the apprentice's table of feature ids
(``src/focuscrawl/_idtable.pyx``). All are optional: without a C compiler the install goes on, and
``focuscrawl.parse``, ``focuscrawl.text`` and ``focuscrawl.apprentice`` do it in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("focuscrawl._leafwalk", ["src/focuscrawl/_leafwalk.pyx"], optional=True),
                   Extension("focuscrawl._tokens", ["src/focuscrawl/_tokens.pyx"], optional=True),
                   Extension("focuscrawl._idtable", ["src/focuscrawl/_idtable.pyx"], optional=True)])
