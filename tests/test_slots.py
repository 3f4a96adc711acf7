"""Slots shared fairly across peers (``node/swarm/dht/slots.py``): a total, a share per peer, and a freed slot
going to the waiting peer that holds the fewest.

Run: python -m pytest tests/test_slots.py -q
"""

import asyncio

import pytest

from ftis.node.swarm.dht.slots import FairSlots


def test_try_acquire_honours_the_total_and_the_share_of_one_peer():
    slots = FairSlots(total=3, per_peer=2)
    assert slots.try_acquire("a") and slots.try_acquire("a")
    assert not slots.try_acquire("a")  # its share
    assert slots.try_acquire("b")
    assert not slots.try_acquire("c")  # the total
    slots.release("a")
    assert slots.try_acquire("c") and slots.in_use == 3
    with pytest.raises(ValueError):
        FairSlots(0, 1)


def test_a_freed_slot_goes_to_the_waiting_peer_holding_the_fewest():
    async def scenario() -> list[str]:
        slots = FairSlots(total=2, per_peer=2)
        order: list[str] = []
        release = {peer: asyncio.Event() for peer in ("s1", "s2", "s3", "honest")}

        async def fetch(peer: str, name: str) -> None:
            async with slots.hold(peer):
                order.append(name)
                await release[name if name in release else peer].wait()

        # a Sybil takes both slots, queues more, and then the honest peer asks: it is served next
        tasks = [asyncio.create_task(fetch("sybil", name)) for name in ("s1", "s2", "s3")]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(fetch("honest", "honest")))
        await asyncio.sleep(0)
        assert order == ["s1", "s2"] and slots.held_by("sybil") == 2
        release["s1"].set()
        await asyncio.sleep(0.01)
        assert order == ["s1", "s2", "honest"]  # not s3, which waited longer but whose peer holds one already
        for event in release.values():
            event.set()
        await asyncio.gather(*tasks)
        assert slots.in_use == 0
        return order

    assert asyncio.run(scenario()) == ["s1", "s2", "honest", "s3"]


def test_a_cancelled_waiter_leaves_no_slot_behind():
    async def scenario() -> None:
        slots = FairSlots(total=1, per_peer=1)
        assert slots.try_acquire("a")
        waiting = asyncio.create_task(slots.hold("b").__aenter__())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        slots.release("a")
        assert slots.in_use == 0 and slots.try_acquire("c")

    asyncio.run(scenario())
