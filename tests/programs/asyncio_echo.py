#!/usr/bin/env python3
"""asyncio echo pair: `asyncio_echo.py server PORTFILE CONNECTIONS` serves
CONNECTIONS connections (echoing every byte until EOF, then closing) and exits;
`asyncio_echo.py client PORT CONNECTIONS BYTES SEED` opens CONNECTIONS
connections at once, each writing BYTES pseudo-random bytes in random-sized
writes while reading the echo, and prints one line per connection with the
SHA-256 of what came back. Exit status 0 only if every echo matched."""
import asyncio
import hashlib
import random
import sys


async def serve(port_file, connections):
    done = asyncio.Event()
    served = 0

    async def handle(reader, writer):
        nonlocal served
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        served += 1
        if served == connections:
            done.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(server.sockets[0].getsockname()[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    await done.wait()
    server.close()
    await server.wait_closed()


async def one_client(port, index, size, seed):
    generator = random.Random(seed * 1000 + index)
    payload = generator.randbytes(size)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send():
        offset = 0
        while offset < size:
            piece = generator.randint(1, 256 * 1024)
            writer.write(payload[offset:offset + piece])
            offset += piece
            await writer.drain()
        writer.write_eof()

    sender = asyncio.create_task(send())
    received = hashlib.sha256()
    count = 0
    while True:
        data = await reader.read(65536)
        if not data:
            break
        received.update(data)
        count += len(data)
    await sender
    writer.close()
    ok = count == size and received.digest() == hashlib.sha256(payload).digest()
    return ok, f"connection {index}: {count} bytes sha256 {received.hexdigest()[:16]}"


async def run_clients(port, connections, size, seed):
    results = await asyncio.gather(*(one_client(port, i, size, seed) for i in range(connections)))
    for _, line in results:
        print(line)
    return all(ok for ok, _ in results)


def main():
    if sys.argv[1] == "server":
        asyncio.run(serve(sys.argv[2], int(sys.argv[3])))
        return 0
    ok = asyncio.run(run_clients(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
