"""The HTTP client edge for aiohttp users: a client middleware that admits every request first.

Importing ``boundedgate`` never imports aiohttp, nor does this subpackage: the middleware only
uses what aiohttp hands it.
"""

from ._middleware import gate_middleware

__all__ = ("gate_middleware",)

gate_middleware.__module__ = "boundedgate.aiohttp"
