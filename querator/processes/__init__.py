"""Several processes serving one node: ``querator serve --processes N`` (docs/processes.md).

With N > 1 the ``serve`` process becomes a supervisor (``supervise``): it starts N processes, each told
its role (``ProcessRole``, read back by ``role_from_env``). Every process binds the public address with
``SO_REUSEPORT`` and serves the partitions the ring gives it among the processes' fixed member set
(``querator.cluster.local_members``), forwarding the rest as a cluster node forwards to another node.
The processes of a cluster node (``--cluster``) are instead etcd members of their own, each at its port
of ``process-ports`` (docs/processes.md, "In a cluster").
Each process of a sqlite node writes its partitions to its own database file (``database``); the data
dir records how many processes wrote it, and a node started with another number moves the partitions
first, holding the data dir's lock for as long as it runs (``data_dir_held``). With memory storage,
each holds the directory of the sqlite file they share while it runs, and the last one to let go
removes it (``shared_dir_held``).
"""

from __future__ import annotations

from querator.processes._data_dir import database
from querator.processes._data_dir import held as data_dir_held
from querator.processes._role import ProcessRole, role_from_env
from querator.processes._shared_dir import held as shared_dir_held
from querator.processes._supervisor import supervise

__all__ = ["ProcessRole", "data_dir_held", "database", "role_from_env", "shared_dir_held", "supervise"]
