"""Talking to OZ / OpenMAMA programs: omnm payloads in, omnm payloads out.

Runs on its own: the "OZ program" here is a stand-in written with raw pyzmq that frames
messages exactly as OZ does (SPEC §1/§2) and sends the bytes OpenMAMA's omnm bridge
writes. Against a real OZ mesh, only the ``aoz.connect(...)`` arguments change.

    python examples/oz_interop.py
"""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

import aoz
from aoz import omnm
from aoz.omnm import FieldType, Price

# What OpenMAMA's mamapublisherc sends (the bytes of tests/omnm/data, "mamapublisherc_like").
OZ_TICK = bytes.fromhex(
    "4f01001201004d644d73675479706500010000001202004d644d73675374617475730000000000120a00"
    "4d645365714e756d0001000000080c004d6446656564486f7374000c0000004d442e4e5953452e49424d00"
)


async def main() -> None:
    ctx = zmq.asyncio.Context.instance()
    oz_pub, oz_sub = ctx.socket(zmq.XPUB), ctx.socket(zmq.SUB)  # the OZ program's sockets
    oz_pub.bind("tcp://127.0.0.1:*")
    try:
        # default_codec="omnm": dicts go out as omnm, like every OZ program's payloads
        async with aoz.connect(bind=["tcp://127.0.0.1:*"], default_codec="omnm") as node:
            node.connect_endpoint(oz_pub.getsockopt_string(zmq.LAST_ENDPOINT))
            oz_sub.connect(node.endpoint)
            oz_sub.subscribe(b"MD.NYSE.IBM\0")  # the OZ program listens to IBM quotes
            await node.wait_for_interest("MD.NYSE.IBM")  # ...and its filter reached us

            # 1. An OZ program publishes; aoz reads the fields.
            async with node.subscribe("MD.>") as sub:
                async with asyncio.timeout(5):  # until our subscription reaches OZ
                    while (await oz_pub.recv()) != b"\x01MD.":
                        pass
                await oz_pub.send(b"MD.NYSE.IBM\x00\x01\x00" + OZ_TICK)
                msg = await sub.next(timeout=5)
            tick = msg.decode()  # an omnm.Message
            print(f"from OZ on {msg.subject} ({msg.codec.name}):")
            print(omnm.format_fields(tick))
            print("MdSeqNum =", tick["MdSeqNum"], "| fid 12 =", tick[12])

            # 2. aoz publishes; the OZ program gets plain omnm bytes.
            quote = omnm.Message().add("wIssueSymbol", "IBM", fid=305)
            quote.add("wBidPrice", Price(141.5, 2), fid=237)  # PRICE, hundredths
            quote.add("wBidSize", 300, fid=238, type=FieldType.U32)  # a fixed width
            await node.publish("MD.NYSE.IBM", quote)
            frame = await asyncio.wait_for(oz_sub.recv(), 5)
            payload = frame[len(b"MD.NYSE.IBM\0\x01\0") :]
            print("to OZ:", payload[:3], f"{len(payload)} bytes, exactly omnm.encode(quote):",
                  payload == omnm.encode(quote))
    finally:
        oz_pub.close(linger=0)
        oz_sub.close(linger=0)


if __name__ == "__main__":
    asyncio.run(main())
