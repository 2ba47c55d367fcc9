"""focuscrawl: a focused web crawler and thematic portal builder."""

__version__ = "0.1.0"
