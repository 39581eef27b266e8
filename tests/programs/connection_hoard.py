#!/usr/bin/env python3
"""Holds many connections open at once, as a client near its descriptor limit
does. `connection_hoard.py server PORTFILE N` echoes (selectors) until N
connections have closed; `connection_hoard.py client PORT N [HOLD]` opens N
connections one after another, each writing 64 bytes and checking their echo
while all the earlier ones stay open, holds them all HOLD seconds more
(default 0), then closes them all. Each side prints
one line with its count and its open descriptors. Exit status 0 only if every
connect, accept and echo succeeded."""
import hashlib
import os
import selectors
import socket
import sys
import time


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def serve(port_file, connections):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    accepted = closed = most_descriptors = 0
    while closed < connections:
        for key, _ in selector.select():
            if key.fileobj is listener:
                try:
                    connection, _ = listener.accept()
                except OSError as error:
                    print("server: accept %d: %s" % (accepted, error), file=sys.stderr)
                    return 1
                accepted += 1
                most_descriptors = max(most_descriptors, open_descriptors())
                connection.setblocking(False)
                selector.register(connection, selectors.EVENT_READ)
                continue
            data = key.fileobj.recv(65536)
            if data:
                key.fileobj.sendall(data)
            else:
                selector.unregister(key.fileobj)
                key.fileobj.close()
                closed += 1
    print("server: served %d, at most %d descriptors" % (accepted, most_descriptors))
    return 0


def hoard(port, connections, hold):
    held = []
    for index in range(connections):
        try:
            connection = socket.create_connection(("127.0.0.1", port))
        except OSError as error:
            print("client: connect %d: %s" % (index, error), file=sys.stderr)
            return 1
        payload = hashlib.sha256(str(index).encode()).digest() * 2
        connection.sendall(payload)
        echoed = b""
        while len(echoed) < len(payload):
            part = connection.recv(len(payload) - len(echoed))
            if not part:
                break
            echoed += part
        if echoed != payload:
            print("client: connection %d echoed wrongly" % index, file=sys.stderr)
            return 1
        held.append(connection)
    print("client: opened %d, %d descriptors" % (len(held), open_descriptors()))
    time.sleep(hold)
    for connection in held:
        connection.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "server":
        sys.exit(serve(sys.argv[2], int(sys.argv[3])))
    sys.exit(hoard(int(sys.argv[2]), int(sys.argv[3]),
                   float(sys.argv[4]) if len(sys.argv) > 4 else 0))
