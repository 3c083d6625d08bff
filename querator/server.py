"""Running a node: build the store and the service from a ServerConfig, serve HTTP, stop gracefully.

Shutdown order follows the reference's ADR 0015 (docs/semantics.md §8.5): the service stops first, so
every waiting request is answered 453 "shutting down", then the HTTP server closes its connections, then
storage closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from querator import tls
from querator.auth import ApiKeyError, ApiKeys, ClusterAuth, read_hashes, read_secret
from querator.clock import SystemClock
from querator.cluster.etcd import EtcdError
from querator.cluster.local_members import LocalMembers, process_id
from querator.cluster.membership import MembershipError
from querator.cluster.node import LOCAL_NODE, ClusterNode
from querator.cluster.proxy import CONNECTIONS, POLL_CONNECTIONS
from querator.config import SHARED_STORAGE, ConfigError, ListenerConfig, ServerConfig, split_address
from querator.connections import Listener
from querator.duration import MICROSECOND, parse_duration
from querator.errors import StorageError
from querator.http import (
    AllowedHosts,
    check_hosts,
    create_admin_app,
    create_app,
    dispatch_directly,
    protocol_factory,
    unauthenticated,
)
from querator.processes import (
    ProcessRole,
    data_dir_held,
    database,
    role_from_env,
    shared_dir_held,
    supervise,
)
from querator.service import Service
from querator.storage.base import Store
from querator.storage.memory import MemoryStore
from querator.storage.split import SplitStore

if TYPE_CHECKING:
    from querator.storage.sqlite import SqliteStore

log = logging.getLogger("querator.server")  # its name also when run as __main__ (a process of a node)

BACKLOG = 1024
"""Connections the kernel queues before we accept them."""
FD_RESERVE = 64
"""Descriptors a node needs besides its client connections: storage files, cluster and etcd clients, logs."""
GC_THRESHOLD = 10_000
"""Net allocations of tracked objects between two runs of the cyclic collector on its youngest
generation. A request allocates hundreds at once (a produce of 100 items) that reference counting frees
when it ends: at Python's default of 700 the collector ran ~80 times a second under load only to scan
them, and promoted them to older generations whose collections scan everything (docs/benchmarks-log.md,
"Garbage collection")."""


def make_store(config: ServerConfig, role: ProcessRole | None = None) -> Store:
    """The storage backend the config names; for one of several processes (``role``), its partitions
    in a store of its own and the rest in the store they share (``SplitStore``, docs/processes.md)."""
    if config.storage == "memory":
        if role is not None:
            return SplitStore(_sqlite(role.shared_db, "OFF"), MemoryStore())
        return MemoryStore()
    if config.storage == "cassandra":
        from querator.storage.cassandra import CassandraStore

        # A single node owns every partition: its start time is an epoch that grows across restarts,
        # so a restarted node fences out any write still in flight from its previous life. Several
        # processes each own their partitions the same way.
        clock = SystemClock()
        return CassandraStore(config.cassandra_settings(), epoch=clock.now(), now=clock.now)
    if config.storage == "postgres":
        from querator.storage.postgres import PostgresStore

        # As Cassandra's: the start time is an epoch that grows across restarts (docs/adr/0045).
        return PostgresStore(config.postgres_settings(), epoch=SystemClock().now())
    try:
        Path(config.data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # its files hold payloads
    except OSError as e:
        raise ConfigError(
            f"data-dir is invalid; cannot create '{config.data_dir}': {e.strerror or e}"
        ) from None
    shared = _sqlite(database(config.data_dir, 0), config.sqlite_synchronous)
    if role is None:
        return shared
    local = (
        shared
        if role.index == 0
        else _sqlite(database(config.data_dir, role.index), config.sqlite_synchronous)
    )
    return SplitStore(shared, local)


def _sqlite(path: str | Path, synchronous: str) -> SqliteStore:
    from querator.storage.sqlite import SqliteStore

    return SqliteStore(path, synchronous=synchronous)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


def setup_logging(level: str, fmt: str) -> None:
    """Logs to stderr at ``level`` as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel({"warn": "WARNING"}.get(level, level.upper()))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


# Long on purpose: the start and stop sequence of a node, in order: each step undoes on failure.
async def serve(  # noqa: C901, PLR0912, PLR0915
    config: ServerConfig, stop: asyncio.Event | None = None, role: ProcessRole | None = None
) -> None:
    """Serves until SIGINT/SIGTERM (or ``stop`` is set), then shuts down gracefully. ``role``: this is
    one of the node's processes (docs/processes.md)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if role is not None:
        _stop_with_supervisor(role, stop)
    cluster_auth = _cluster_auth(config, role)
    keys = _api_keys(config, cluster_auth, role)
    # The processes of a node alone forward over their private loopback sockets, in plain HTTP; those of
    # a cluster node are members of the cluster, forwarding as its nodes do.
    alone = role is not None and not config.cluster
    api_tls, cluster_tls = tls.server_context(config), None if alone else tls.cluster_context(config)
    cluster_config = config.cluster_config()  # reads etcd's TLS files and password: fail before binding
    if cluster_config is not None and role is not None:
        cluster_config = replace(
            cluster_config,
            node_id=process_id(cluster_config.node_id, role.index),
            advertise_address=role.addresses[role.index],
        )
    _raise_open_files_limit(config.max_connections * (2 if config.admin_address else 1) + FD_RESERVE)
    # Bind before anything else, so that an address we cannot use fails before storage is touched.
    reuse_port = role is not None  # the node's processes share its addresses, the kernel spreads them
    sockets = [_listen("address", config.address, reuse_port)]
    if config.admin_address:
        try:
            sockets.append(_listen("admin-address", config.admin_address, reuse_port))
        except BaseException:
            sockets[0].close()
            raise
    clock = SystemClock()
    local = LocalMembers(LOCAL_NODE, role.index, role.addresses) if role and alone else None
    cluster = ClusterNode(cluster_config, clock, config.address, local)
    # A node of one process locks its sqlite data dir while it runs, and moves its partitions into it
    # first when several processes wrote it (those of a node of several inherit the supervisor's
    # lock); after binding, so that a refused setting leaves no data dir behind.
    data_dir_lock = contextlib.ExitStack()
    try:
        if role is None and config.storage == "sqlite":
            data_dir_lock.enter_context(data_dir_held(config.data_dir, 1))
        service = Service(
            make_store(config, role),
            clock,
            max_requests_per_queue=config.max_requests_per_queue,
            workflow_retention_us=parse_duration(config.workflow_retention) // MICROSECOND,
            cluster=cluster,
            cluster_auth=cluster_auth,
            cluster_tls=cluster_tls,
            tenancy=config.tenancy,
            bootstrap_keys=keys.take_hashes() if config.tenancy else (),
        )
        await service.start()
    except BaseException as e:
        data_dir_lock.close()
        for sock in sockets:
            sock.close()
        if isinstance(e, MembershipError | EtcdError):
            raise ConfigError(f"cluster is unavailable; {e}") from None
        if isinstance(e, StorageError):
            # A store that cannot open (an unusable or damaged data dir) is a setting to fix, not a bug.
            raise ConfigError(f"{_storage_setting(config)}; {e.message}") from None
        raise
    if config.cluster and config.storage not in SHARED_STORAGE:
        log.warning(
            "cluster mode on %s storage: each node keeps the items of the partitions it owns in its own "
            "store, and they stay there when a partition moves; use --storage cassandra or postgres to "
            "share them",
            config.storage,
        )
    # The console goes where the operations routes are: the admin address when there is one.
    console = not config.no_ui
    apps = [
        create_app(
            service,
            config.max_produce_body,
            keys,
            operations=not config.admin_address,
            console=console and not config.admin_address,
        )
    ]
    if config.admin_address:
        apps.append(create_admin_app(service, console, keys, config.max_produce_body))
    limits = config.listener_config()
    hosts = _allowed_hosts(config, role)
    listeners = [Listener(limits, unauthenticated) for _ in apps]
    private = _private_listener(role, limits, bool(config.cluster))
    runners = [
        # A client that disconnects cancels its handler (as under aiohttp's test server): a lease parked
        # for it must not live on and take items for nobody (querator.http).
        web.AppRunner(app, handle_signals=False, shutdown_timeout=5, handler_cancellation=True)
        for app in apps
    ]
    # Our own asyncio servers rather than aiohttp's sites, to put each connection under its listener's
    # limits (see querator.connections); runner.cleanup() still closes the connections aiohttp tracks.
    listening: list[asyncio.AbstractServer] = []
    try:
        # TLS on the API address only: the admin address serves probes and scrapers inside the cluster.
        contexts = [api_tls, None][: len(apps)]
        for runner, listener, sock, context in zip(runners, listeners, sockets, contexts, strict=True):
            await runner.setup()
            assert runner.server is not None
            dispatch_directly(runner)
            if hosts is not None:
                check_hosts(runner, hosts)
            runner.server.request_handler = listener.tracked(runner.server.request_handler)
            if private is not None and runner is runners[0]:
                # Each wrapper finds only its own listener's connections and passes the others on.
                runner.server.request_handler = private[0].tracked(runner.server.request_handler)
            protocol = protocol_factory(runner.server, keepalive_timeout=limits.idle_timeout)
            listening.append(
                await loop.create_server(
                    listener.protocol_factory(protocol),
                    sock=sock,
                    backlog=BACKLOG,
                    ssl=context,
                    # A handshake is the first thing a connection sends: it has the headers' time.
                    ssl_handshake_timeout=limits.header_timeout if context else None,
                )
            )
            if private is not None and runner is runners[0]:
                private_listener, private_sock = private
                # A cluster node's process is forwarded to by the other nodes as a node is: over HTTPS
                # when the API serves it.
                listening.append(
                    await loop.create_server(
                        private_listener.protocol_factory(protocol),
                        sock=private_sock,
                        backlog=BACKLOG,
                        ssl=None if alone else api_tls,
                        ssl_handshake_timeout=None if alone or not api_tls else limits.header_timeout,
                    )
                )
        log.info(
            "querator listening on %s%s%s (storage %s%s; api keys %s)%s%s",
            config.address,
            f" as process {role.index} of {role.count}, forwarded to at {cluster.address}" if role else "",
            " (https)" if api_tls else "",
            config.storage,
            _where(config),
            "tenancy" if config.tenancy else "required" if keys else "off",
            f"; admin on {config.admin_address}" if config.admin_address else "",
            "" if config.no_ui else f"; console at {config.admin_address or config.address}/ui/",
        )
        await stop.wait()
        log.info("shutting down")
    finally:
        await service.shutdown()
        for server in listening:
            server.close()  # what runner.cleanup() does for aiohttp's own sites, in the same order
        for runner in runners:
            await runner.cleanup()
        data_dir_lock.close()
    log.info("stopped")


def _raise_open_files_limit(needed: int) -> None:
    """Raises the soft limit on open files to the hard one, as Go's runtime does at start-up.

    The usual soft limit (1024) is about what max-connections allows, and a process out of descriptors
    fails accepts and storage opens alike, where the connection limit refuses connections cleanly.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if resource.RLIM_INFINITY not in (soft, hard) and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as e:
            log.debug("cannot raise the open files limit from %d to %d: %s", soft, hard, e)
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open files limit (%d) is below what max-connections needs (%d): raise 'ulimit -n' or lower "
            "max-connections",
            soft,
            needed,
        )


def _listen(name: str, address: str, reuse_port: bool = False) -> socket.socket:
    host, port = split_address(address)
    try:
        return socket.create_server((host, port), backlog=BACKLOG, reuse_port=reuse_port)
    except OSError as e:
        raise ConfigError(f"{name} is invalid; cannot listen on '{address}': {e.strerror or e}") from None


def _warn_if_exposed(setting: str, file: str) -> None:
    """Warns when users other than the server's can read or change a file of keys or secrets.

    A file the server's own user owns should be 0600 (or 0400). One owned by another user must let the
    server in through its group (Kubernetes mounts secrets owned by root, group ``fsGroup``): there only
    group write and the bits for everyone count.
    """
    if not file:
        return
    try:
        st = os.stat(file)
    except OSError:
        return  # reading it reports why
    exposed = st.st_mode & (0o077 if st.st_uid == os.geteuid() else 0o027)
    if exposed:
        log.warning(
            "%s '%s' can be read or changed by other users (mode %04o): make it private (chmod 600)",
            setting,
            file,
            stat.S_IMODE(st.st_mode),
        )


def _allowed_hosts(config: ServerConfig, role: ProcessRole | None) -> AllowedHosts | None:
    """The Host names a node without API keys answers (DNS rebinding, querator.http._hosts): its own
    addresses' hosts, those the other nodes and processes forward to included, and ``allowed-hosts``;
    None with keys, whose requests a rebinding page cannot authenticate."""
    if config.api_keys.strip() or config.api_keys_file:
        return None
    own = (config.address, config.admin_address, config.advertise_address, *(role.addresses if role else ()))
    return AllowedHosts([*(split_address(a)[0] for a in own if a), *config.allowed_hosts.split(",")])


def _private_listener(
    role: ProcessRole | None, limits: ListenerConfig, clustered: bool
) -> tuple[Listener, socket.socket] | None:
    """The limits and the socket of a process's own address, where the node's other processes (and,
    ``clustered``, the other nodes) forward to it (the supervisor opened it); None for a node of one
    process.

    Its own limits: every other process may hold its pooled connections to it, long-polled leases
    included, and none of them should count against the clients' ``max-connections``. A cluster node's
    process is forwarded to by nodes it cannot count: the API's limits then, as a node of one process
    takes forwards on its API address."""
    if role is None:
        return None
    forwarders = (CONNECTIONS + POLL_CONNECTIONS) * (role.count - 1) or 1
    listener = Listener(limits if clustered else replace(limits, max_connections=forwarders), unauthenticated)
    return listener, socket.socket(fileno=role.private_fd)


def _stop_with_supervisor(role: ProcessRole, stop: asyncio.Event) -> None:
    """Stops this process when its supervisor is gone (killed, say): the pipe it holds the write end of
    reads end of file then."""
    loop = asyncio.get_running_loop()

    def gone() -> None:
        loop.remove_reader(role.parent_fd)
        if not stop.is_set():
            log.warning("the supervisor is gone: stopping")
            stop.set()

    loop.add_reader(role.parent_fd, gone)


def _cluster_auth(config: ServerConfig, role: ProcessRole | None = None) -> ClusterAuth | None:
    """What signs and checks forwarded requests; None without a cluster secret (for one of a node's
    processes, the supervisor's secret when none is configured)."""
    _warn_if_exposed("cluster-secret-file", config.cluster_secret_file)
    try:
        secret = read_secret(config.cluster_secret_file)
    except OSError as e:
        raise ConfigError(
            f"cluster-secret-file is invalid; cannot read '{config.cluster_secret_file}': {e.strerror}"
        ) from None
    except ApiKeyError as e:
        raise ConfigError(str(e)) from None
    node_id = config.node_id or LOCAL_NODE
    if role is not None:  # one of a node's processes: a member of its own
        secret, node_id = secret or role.secret, process_id(node_id, role.index)
    return ClusterAuth(secret, node_id) if secret else None


def _api_keys(
    config: ServerConfig, cluster_auth: ClusterAuth | None, role: ProcessRole | None = None
) -> ApiKeys:
    _warn_if_exposed("api-keys-file", config.api_keys_file)
    try:
        hashes = read_hashes(config.api_keys_file, config.api_keys)
        if (config.api_keys_file or config.api_keys.strip()) and not hashes:
            # Keys were asked for: an empty source must not silently turn authentication off.
            raise ApiKeyError("api keys are invalid; the configured keys hold no key hash")
    except OSError as e:
        raise ConfigError(
            f"api-keys-file is invalid; cannot read '{config.api_keys_file}': {e.strerror}"
        ) from None
    except ApiKeyError as e:
        raise ConfigError(str(e)) from None
    # A node's processes forward to each other over loopback in plain HTTP, without certificates; those
    # of a cluster node forward as its nodes do.
    return ApiKeys(
        hashes,
        cluster_auth,
        forwards_need_certificate=bool(config.tls_client_ca_file) and (role is None or bool(config.cluster)),
    )


def _storage_setting(config: ServerConfig) -> str:
    """The start of the one-line message of a store that cannot open."""
    return "data-dir is invalid" if config.storage == "sqlite" else f"storage {config.storage} is unavailable"


def _where(config: ServerConfig) -> str:
    """Where the store keeps its data, for the start-up log line."""
    if config.storage == "sqlite":
        return f" in {config.data_dir}"
    if config.storage == "cassandra":
        return f" in keyspace {config.cassandra_keyspace} at {config.cassandra_hosts}"
    if config.storage == "postgres":
        return f" at {config.postgres_settings().describe()}"
    return ""


def run(config: ServerConfig, role: ProcessRole | None = None) -> int:
    """Runs ``serve`` on uvloop when it is installed, or, for more than one process, the supervisor
    (docs/processes.md); the exit status."""
    if config.processes > 1 and role is None:
        # What every process would read and refuse alike is refused once, here, with one line.
        _api_keys(config, _cluster_auth(config))
        tls.server_context(config)
        tls.cluster_context(config)
        config.cluster_config()
        return supervise(config)
    gc.freeze()  # what is loaded by now lives as long as the process: no collection need scan it again
    gc.set_threshold(GC_THRESHOLD)
    # A process of a memory node holds the directory of the sqlite file the processes share: the last
    # one to stop removes it when the supervisor could not (killed).
    shared_dir = os.path.dirname(role.shared_db) if role is not None and role.shared_db else ""
    with shared_dir_held(shared_dir) if shared_dir else contextlib.nullcontext():
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
            asyncio.run(serve(config, role=role))
        else:
            uvloop.run(serve(config, role=role))
    return 0


def _main() -> int:
    """One process of a node the supervisor runs (``python -m querator.server``): its settings and
    role come from the environment."""
    given = role_from_env()
    if given is None:
        print("querator: querator.server is started by 'querator serve --processes N'", file=sys.stderr)
        return 2
    config, role = given
    setup_logging(config.log_level, config.log_format)
    try:
        return run(config, role)
    except ConfigError as e:
        print(f"querator: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
