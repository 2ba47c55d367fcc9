"""The portal in the browser and its REST API (``focuscrawl serve``)."""

from focuscrawl.web.app import PortalError, create_app

__all__ = ["PortalError", "create_app"]
