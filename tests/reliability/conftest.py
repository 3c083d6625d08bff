"""The reliability tests start real server processes with the integration tests' fixtures."""

from tests.integration.conftest import keyspace, servers
from tests.integration.etcd_server import etcd

from .island import island

__all__ = ["etcd", "island", "keyspace", "servers"]
