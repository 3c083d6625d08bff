"""The reliability tests start real server processes with the integration tests' fixtures."""

from tests.integration.conftest import servers

__all__ = ["servers"]
