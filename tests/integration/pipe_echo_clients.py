#!/usr/bin/env python3
"""Clients for an echo server: each connects, and for each message (1 B to
2 MiB, log-uniform) writes it whole (awaiting drain: nothing of the echo is
read meanwhile), then reads the echo back and compares it.

  pipe_echo_clients.py PORT CLIENTS MESSAGES SEED

Prints "ok BYTES" (bytes echoed intact) or a line saying what differed, and
exits 0 only if every echo was intact."""
import asyncio
import hashlib
import random
import sys


async def client(port, messages, rng):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    echoed = 0
    for index in range(messages):
        size = int(2 ** rng.uniform(0, 21))
        message = rng.randbytes(size)
        writer.write(message)
        await writer.drain()
        back = await reader.readexactly(size)
        if hashlib.sha256(back).digest() != hashlib.sha256(message).digest():
            raise RuntimeError(f"message {index} of {size} bytes came back different")
        echoed += size
    writer.close()
    await writer.wait_closed()
    return echoed


async def main():
    port, clients, messages, seed = (int(argument) for argument in sys.argv[1:5])
    results = await asyncio.gather(
        *(client(port, messages, random.Random(seed * 1000 + number)) for number in range(clients)),
        return_exceptions=True)
    failures = [result for result in results if isinstance(result, BaseException)]
    if failures:
        print(f"{len(failures)} of {clients} clients failed: {failures[0]!r}")
        return 1
    print(f"ok {sum(results)}")
    return 0


sys.exit(asyncio.run(main()))
