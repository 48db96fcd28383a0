"""aoz benchmarks: aoz side by side with raw pyzmq, raw zmq.asyncio, nats.py and zenoh.

Run ``python -m benchmarks --quick`` (under 2 minutes) or ``--full``; see
``benchmarks/__main__.py`` for the method and ``benchmarks/RESULTS.md`` for the latest
full run. Each system's roles live in their own module and run as separate processes.
"""
