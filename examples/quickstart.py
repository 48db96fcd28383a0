"""aoz in one file: a naming daemon, two nodes, pub/sub with wildcards, request/reply.

Run:  .venv/bin/python examples/quickstart.py
"""

from __future__ import annotations

import asyncio

import msgspec

import aoz


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float


async def main() -> None:
    # An embedded nsd on a free port; in production run `aoz nsd` on 127.0.0.1:5756.
    async with (
        aoz.NamingDaemon(port=0) as nsd,
        aoz.connect(naming=[nsd.endpoint], program="feed") as feed,
        aoz.connect(naming=[nsd.endpoint], program="app") as app,
    ):
        # request/reply: the feed answers "last quote" requests
        async def snapshot(req: aoz.Message) -> Quote:
            return Quote(req.decode(), 99.5, 99.7)

        async with aoz.serve(feed, "SNAP.quote", snapshot), app.subscribe("MD.*.IBM") as sub:
            await feed.wait_for_interest("MD.NYSE.IBM")  # no slow-joiner race
            await feed.publish("MD.NYSE.IBM", Quote("IBM", 100.0, 100.1))
            msg = await sub.next(timeout=5)
            print(msg.subject, msg.decode(Quote))

            await aoz.wait_for_service(app, "SNAP.quote")
            reply = await app.request("SNAP.quote", "IBM", timeout=1.0)
            print("snapshot:", reply.decode(Quote))
            print("peers:", sorted(p.program for p in app.peers))


if __name__ == "__main__":
    asyncio.run(main())
