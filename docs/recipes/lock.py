"""A distributed lock with a fencing token (docs/recipes/README.md, docs/locks.md).

Five clients (think: five processes) add to one account balance with a read-modify-write that is only
safe one at a time. The lock makes them take turns; the account refuses a write whose fencing token
is older than the newest it has seen, which is what protects it from a holder that stalled past its
ttl and lost the lock without knowing.

Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/recipes/lock.py``.
"""

from __future__ import annotations

import asyncio
import os

from querator.client import AsyncClient

ENDPOINT = os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319")


class Account:
    """The protected resource: it remembers the largest fencing token it was written with."""

    def __init__(self) -> None:
        self.balance = 0
        self.fence = 0

    async def read(self) -> int:
        await asyncio.sleep(0.01)  # a round trip to the database: other clients run meanwhile
        return self.balance

    async def write(self, balance: int, fence: int) -> None:
        if fence < self.fence:
            raise RuntimeError(f"stale writer: fencing token {fence} < {self.fence}")
        self.balance, self.fence = balance, fence


async def deposit(account: Account, amount: int, times: int) -> None:
    async with AsyncClient(ENDPOINT) as client:
        for _ in range(times):
            async with client.lock("account-7", ttl="10s", timeout="1m") as held:
                balance = await account.read()
                await account.write(balance + amount, held.fencing_token)


async def main() -> None:
    account = Account()
    await asyncio.gather(*(deposit(account, 10, times=4) for _ in range(5)))
    print(f"balance: {account.balance} (5 clients x 4 deposits of 10)")
    print(f"last fencing token: {account.fence}")


if __name__ == "__main__":
    asyncio.run(main())
