#!/usr/bin/env python3
"""A burst of connections opened at once between two processes, each then
echoing a checked 128 KiB block every 100 ms for a while (issue 29's "burst
of 64" over Soft-RoCE). Plain sockets and threads, nothing qpsock-specific.

  burst_echo.py server HOST PORT CONNECTIONS   echoes CONNECTIONS connections, then exits
  burst_echo.py client SOURCE HOST PORT CONNECTIONS SECONDS

The client binds each socket to SOURCE, starts every connect before the first
completes, and prints one line: how many connections echoed every block
intact. Exit status 0 only if all did."""
import hashlib
import socket
import sys
import threading
import time


def serve(host, port, connections):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(1024)

    def echo(connection):
        while True:
            data = connection.recv(65536)
            if not data:
                break
            connection.sendall(data)
        connection.close()

    threads = []
    for _ in range(connections):
        connection, _ = listener.accept()
        thread = threading.Thread(target=echo, args=(connection,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return 0


def run_client(source, host, port, connections, seconds):
    sockets = []
    for _ in range(connections):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.setblocking(False)
        try:
            sock.connect((host, port))
        except BlockingIOError:
            pass
        sockets.append(sock)
    intact = [False] * connections

    def exchange(index):
        sock = sockets[index]
        sock.setblocking(True)
        end = time.monotonic() + seconds
        block_number = 0
        try:
            while time.monotonic() < end:
                block = hashlib.sha256(b"%d-%d" % (index, block_number)).digest() * 4096
                sock.sendall(block)
                got = bytearray()
                while len(got) < len(block):
                    data = sock.recv(len(block) - len(got))
                    if not data:
                        return
                    got += data
                if got != block:
                    return
                block_number += 1
                time.sleep(0.1)
            intact[index] = True
        except OSError as error:
            print("client: connection %d: %s" % (index, error), file=sys.stderr)
        finally:
            sock.close()

    threads = [threading.Thread(target=exchange, args=(index,)) for index in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("client: %d of %d connections echoed intact" % (sum(intact), connections))
    return 0 if all(intact) else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "server":
        sys.exit(serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    if len(sys.argv) == 7 and sys.argv[1] == "client":
        sys.exit(run_client(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])))
    sys.exit(__doc__)
