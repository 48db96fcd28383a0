"""Memory on the mesh: a late joiner's history, and a gap repaired from the cache.

Run it: ``python examples/memory.py`` (two nodes in this process, static mode, no
naming daemon needed).
"""

from __future__ import annotations

import asyncio

import aoz


async def main() -> None:
    # the publisher keeps the last 100 messages of each subject
    async with aoz.connect(bind=["tcp://127.0.0.1:*"], publish_cache=100) as feed:
        for price in (99.5, 99.6, 99.7):
            await feed.publish("MD.NYSE.IBM", {"bid": price})
        await feed.publish("MD.LSE.VOD", {"bid": 1.25})

        # a node that joins later; both directions linked (static mode)
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], connect=[feed.endpoint]) as app:
            feed.connect_endpoint(app.endpoint)
            async with app.subscribe("MD.>", history=1, recover=True) as sub:
                for _ in range(2):  # the last value of each subject, from the cache
                    msg = await sub.next(timeout=5)
                    print("history:", msg.subject, msg.decode(), "replayed:", msg.replayed)
                await feed.wait_for_interest("MD.NYSE.IBM")
                await feed.publish("MD.NYSE.IBM", {"bid": 99.8})
                msg = await sub.next(timeout=5)
                print("live:", msg.subject, msg.decode(), "replayed:", msg.replayed)
                st = sub.statistics()
                print(f"received {st.received}, replayed {st.replayed}, "
                      f"recovered {st.recovered}, lost {st.lost}")


if __name__ == "__main__":
    asyncio.run(main())
