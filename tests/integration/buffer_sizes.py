# For shm_upgrade.sh. Both ends under qpsock: the server sets SO_RCVBUF on its listener and never
# reads; the client sets SO_SNDBUF and writes without blocking until EAGAIN.
# Prints how many bytes the connection took. Run with the payload on an
# upgraded stream (a first exchange lets both directions switch).
import os, socket, sys, time
role, port_file, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "server":
    listener = socket.socket()
    if size: listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    listener.bind(("127.0.0.1", 0)); listener.listen(1)
    with open(port_file + ".tmp", "w") as f: f.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    connection, _ = listener.accept()
    connection.sendall(b"x" * 100)            # lets the server's direction switch
    assert connection.recv(100, socket.MSG_WAITALL) == b"y" * 100
    time.sleep(3)                             # reads nothing more
    connection.close()
else:
    while not os.path.exists(port_file): time.sleep(0.02)
    connection = socket.socket()
    if size: connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    connection.connect(("127.0.0.1", int(open(port_file).read())))
    assert connection.recv(100, socket.MSG_WAITALL) == b"x" * 100
    connection.sendall(b"y" * 100)
    time.sleep(0.3)
    connection.setblocking(False)
    taken = 0
    try:
        while True:
            taken += connection.send(b"z" * 65536)
    except BlockingIOError:
        pass
    print(taken)
