"""Querator: a lease-based FIFO queue with Almost Exactly Once Delivery, wire-compatible with the
Querator v1 HTTP API."""

__version__ = "0.1.0"
__all__ = ["__version__"]
