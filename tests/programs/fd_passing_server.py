#!/usr/bin/env python3
"""fd_passing_server: an echo server whose dispatcher accepts connections and
hands each to a worker process over an AF_UNIX socket (SCM_RIGHTS,
socket.send_fds), as dispatchers and pre-fork servers do. The worker, forked
before the first accept, echoes every byte of each connection (a thread per
connection) until the client's end of stream, then closes it. Exits 0 once
CONNECTIONS connections were served without error.

usage: fd_passing_server.py PORT CONNECTIONS [--peek]

--peek: the dispatcher peeks at the first bytes of each connection (MSG_PEEK,
as a protocol sniffer that routes by them does) before passing it; the bytes
stay in the connection for the worker.

One stderr line per connection: "fd_passing_server[PID]: connection N passed"
from the dispatcher, "fd_passing_server[PID]: connection N echoed BYTES
bytes" or "... connection N failed: ERROR" from the worker.
"""
import os
import socket
import sys
import threading


def say(text):
    print(f"fd_passing_server[{os.getpid()}]: {text}", file=sys.stderr, flush=True)


def echo(index, connection):
    moved = 0
    try:
        with connection:
            while True:
                data = connection.recv(65536)
                if not data:
                    break
                connection.sendall(data)
                moved += len(data)
        say(f"connection {index} echoed {moved} bytes")
        return True
    except OSError as error:
        say(f"connection {index} failed: {error.strerror or error}")
        return False


def worker(carrier, connections):
    results = []
    threads = []
    for index in range(connections):
        _, fds, _, _ = socket.recv_fds(carrier, 1, 1)
        connection = socket.socket(fileno=fds[0])
        thread = threading.Thread(target=lambda i=index, c=connection: results.append(echo(i, c)))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return 0 if len(results) == connections and all(results) else 1


def main():
    port, connections = int(sys.argv[1]), int(sys.argv[2])
    peek = "--peek" in sys.argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(connections)
    dispatcher_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = os.fork()
    if child == 0:
        listener.close()
        dispatcher_end.close()
        os._exit(worker(worker_end, connections))
    worker_end.close()
    for index in range(connections):
        connection, _ = listener.accept()
        if peek:
            connection.recv(1, socket.MSG_PEEK)
        socket.send_fds(dispatcher_end, [b"c"], [connection.fileno()])
        connection.close()
        say(f"connection {index} passed")
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
