"""``querator.tenancy._directory``: the rules over records that HTTP tests cannot reach -- what a crash
between two writes leaves behind (docs/tenancy.md "Rules and storage"), on the memory store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import pytest

from querator.auth import generate_key
from querator.clock import FakeClock
from querator.errors import InvalidOption
from querator.storage.memory import MemoryStore
from querator.tenancy import STANDARD_ROLES, Tenancy
from querator.tenancy._access import Access, hash_key
from querator.tenancy._directory import APIKEY_USE, BINDING_USER, USER, USERNAME, Directory
from querator.tenancy._model import ApiKey, Binding, Namespace, Role, User


@pytest.fixture
def directory() -> Directory:
    return Directory(MemoryStore())


async def test_a_username_index_left_by_a_crash_is_taken_over(directory: Directory) -> None:
    """A create that claimed the name and died before writing the user: the name is free again."""
    await directory.store.add_record(USERNAME, "ann", b"lost-id")
    await directory.add_user(User(id="u2", username="ann"))
    assert (await directory.user_named("ann")) == User(id="u2", username="ann")


async def test_a_live_username_stays_taken(directory: Directory) -> None:
    await directory.add_user(User(id="u1", username="ann"))
    with pytest.raises(InvalidOption, match="username is already taken; 'ann' is already taken"):
        await directory.add_user(User(id="u2", username="ann"))


async def test_an_index_whose_entity_is_gone_reads_as_missing(directory: Directory) -> None:
    await directory.add_user(User(id="u1", username="ann"))
    await directory.store.delete_record(USER, "u1")  # the delete died after the entity
    assert await directory.user_named("ann") is None


async def test_a_binding_index_left_by_a_crash_does_not_block_the_binding(directory: Directory) -> None:
    binding = Binding(id="b2", namespace="ns", user_id="u1", role_id="r1")
    await directory.store.add_record("binding.unique", "ns:u1:r1", b"b1")  # b1 was never written
    await directory.add_binding(binding)
    assert await directory.list_bindings("ns", "", 10) == [binding]
    assert await directory.bindings_of("u1", "ns") == [binding]
    with pytest.raises(InvalidOption, match="role binding already exists"):
        await directory.add_binding(Binding(id="b3", namespace="ns", user_id="u1", role_id="r1"))


async def test_a_binding_cut_short_is_listed_without_granting_and_can_be_deleted(
    directory: Directory,
) -> None:
    """A delete that died after its first write: the grant is gone, the listing still shows the binding,
    and deleting it again finishes the job."""
    await directory.add_binding(Binding(id="b1", namespace="ns", user_id="u1", role_id="r1"))
    await directory.store.delete_record(BINDING_USER, "u1:ns:b1")
    assert await directory.bindings_of("u1", "ns") == []
    assert [b.id for b in await directory.list_bindings("ns", "", 10)] == ["b1"]
    await directory.delete_binding("ns", "u1", "r1")
    assert await directory.list_bindings("ns", "", 10) == []
    await directory.add_binding(Binding(id="b2", namespace="ns", user_id="u1", role_id="r1"))
    assert [b.id for b in await directory.bindings_of("u1", "ns")] == ["b2"]


class _SharedStore(MemoryStore):
    """A store shared by several nodes: every read and write lets the others run (memory alone never
    yields, so concurrent bootstraps would not interleave)."""

    async def get_record(self, kind: str, key: str) -> bytes | None:
        await asyncio.sleep(0)
        return await super().get_record(kind, key)

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        await asyncio.sleep(0)
        return await super().add_record(kind, key, value)

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        await asyncio.sleep(0)
        await super().put_record(kind, key, value)


async def test_nodes_bootstrapping_one_store_at_once_make_one_of_each() -> None:
    """The anonymous user and the standard roles get the same ids on every node (docs/tenancy.md)."""
    store = _SharedStore()
    nodes = [Tenancy(store, FakeClock()) for _ in range(3)]
    for node in nodes:
        node.enable()
    await asyncio.gather(*(node.start() for node in nodes))
    try:
        directory = Directory(store)
        assert [u.username for u in await directory.list_users("", 10)] == ["anonymous"]
        roles = await directory.list_roles("_system", "", 10)
        assert sorted(r.name for r in roles) == sorted(STANDARD_ROLES)
        assert len(await directory.list_bindings("_system", "", 10)) == 1  # Open Door, once
    finally:
        for node in nodes:
            await node.stop()


async def _bindings_after_start(store: MemoryStore, keys: list[bytes]) -> int:
    """How many role bindings a store has after a start of tenancy with bootstrap ``keys``."""
    tenancy = Tenancy(store, FakeClock())
    tenancy.enable(keys)
    await tenancy.start()
    await tenancy.stop()
    return len(await Directory(store).list_bindings("_system", "", 10))


async def test_open_door_is_made_on_a_new_store_once() -> None:
    """docs/tenancy.md: a new store started without keys gets Open Door; a store first started with a
    bootstrap key gets none from a later start without keys, even holding nothing else."""
    fresh = MemoryStore()
    assert await _bindings_after_start(fresh, []) == 1
    keyed = MemoryStore()
    assert await _bindings_after_start(keyed, [b"k" * 32]) == 0
    assert await _bindings_after_start(keyed, []) == 0


async def _system_role(directory: Directory) -> None:
    await directory.add_namespace(Namespace(name="_system"))
    await directory.add_role(Role(id="r1", namespace="_system", name="custom"))


@pytest.mark.parametrize(
    "tenant",
    [
        lambda d: d.add_user(User(id="u1", username="someone")),
        lambda d: d.add_namespace(Namespace(name="team")),
        _system_role,
    ],
    ids=["user", "namespace", "role"],
)
async def test_a_store_with_tenants_gets_no_open_door(tenant: Callable[[Directory], Awaitable[None]]) -> None:
    """A store holding anything but what the bootstrap makes (a store made before Open Door was
    decided once per store) gets no Open Door from a start without keys."""
    store = MemoryStore()
    await tenant(Directory(store))
    assert await _bindings_after_start(store, []) == 0


class CountingStore(MemoryStore):
    """Counts the writes and reads of records, and the stamps raised."""

    def __init__(self) -> None:
        super().__init__()
        self.record_calls = 0
        self.stamp_writes = 0

    async def get_record(self, kind: str, key: str) -> bytes | None:
        self.record_calls += 1
        return await super().get_record(kind, key)

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        self.record_calls += 1
        await super().put_record(kind, key, value)

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        self.record_calls += 1
        return await super().add_record(kind, key, value)

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        self.stamp_writes += 1
        await super().raise_stamps(kind, stamps)


async def test_a_flush_of_key_uses_is_one_blind_write() -> None:
    """docs/adr/0041: each flush read each used key's record and wrote it back (in Cassandra two
    lightweight transactions into the one partition of keys, from every member each 10 s). Now a flush
    is one write of the uses as stamps, whatever the number of keys, and reads no record; a key listed
    shows the latest use."""
    store = CountingStore()
    clock = FakeClock(1_700_000_000_000_000)
    directory = Directory(store)
    access = Access(directory, clock)
    keys = [generate_key() for _ in range(50)]
    await directory.add_user(User(id="u1", username="ann"))
    for n, key in enumerate(keys):
        await directory.add_key(ApiKey(id=f"k{n:02}", user_id="u1", key_hash=hash_key(key), prefix=key[:8]))
    for key in keys:
        await access.authenticate(f"Bearer {key}")
    used_at = clock.now()
    clock.advance(1)
    await access.authenticate(f"Bearer {keys[0]}")
    store.record_calls = 0
    await access.flush()
    assert (store.record_calls, store.stamp_writes) == (0, 1)
    await access.flush()  # nothing used since: nothing written
    assert (store.record_calls, store.stamp_writes) == (0, 1)
    listed = {k.id: k.last_used_at for k in await directory.list_keys("u1", "", 100)}
    assert listed == {f"k{n:02}": used_at for n in range(1, 50)} | {"k00": clock.now()}
    await directory.delete_key("k00")
    assert await store.get_stamps(APIKEY_USE, ["k00", "k01"]) == {"k01": used_at}
