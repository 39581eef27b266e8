#!/usr/bin/env python3
"""An echo server on selectors (epoll) that, like many, takes readiness at
its word: a recv that finds nothing after the selector said readable is a
failure (a plain TCP socket is never readable without a byte or its end).
And its client: CONNECTIONS connections at once, each ROUNDS messages of 64
bytes, each echo checked, with a pause between them so that every message
finds the server asleep.

usage: strict_selectors_echo.py server PORT_FILE CONNECTIONS
       strict_selectors_echo.py client PORT CONNECTIONS ROUNDS PAUSE_MS
The server exits 0 after CONNECTIONS connections ended, 3 on a spurious
readiness; the client prints the bytes echoed and exits 0 if all matched.
"""
import os
import selectors
import socket
import sys
import threading
import time


def serve(port_file, connections):
    selector = selectors.EpollSelector()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    ended = 0
    while ended < connections:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(False)
                selector.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            try:
                data = conn.recv(65536)
            except BlockingIOError:
                print("spurious readiness: recv found nothing after EPOLLIN", file=sys.stderr)
                sys.exit(3)
            if not data:
                selector.unregister(conn)
                conn.close()
                ended += 1
                continue
            conn.setblocking(True)
            conn.sendall(data)
            conn.setblocking(False)


def client(port, connections, rounds, pause_ms):
    echoed = [0] * connections
    failures = []

    def one(index):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            for round_ in range(rounds):
                message = (b"%04d:%04d:" % (index, round_)) * 6 + b"0123"
                conn.sendall(message)
                got = b""
                while len(got) < len(message):
                    piece = conn.recv(len(message) - len(got))
                    if not piece:
                        failures.append("connection %d: early end" % index)
                        return
                    got += piece
                if got != message:
                    failures.append("connection %d: round %d differs" % (index, round_))
                    return
                echoed[index] += len(got)
                time.sleep(pause_ms / 1000)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for failure in failures:
        print(failure, file=sys.stderr)
    print(sum(echoed))
    return 0 if not failures else 1


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
