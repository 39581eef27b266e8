import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Iterator;

/**
 * Echo server on java.nio: one thread, one Selector, non-blocking
 * SocketChannels with a direct buffer each. Partial writes wait for OP_WRITE;
 * a full buffer stops reading (back-pressure); at EOF, once everything is
 * written back, the output is shut down and the channel closed.
 *
 * <p>usage: NioEchoServer PORT [CONNECTIONS] — with CONNECTIONS, exits after
 * that many connections have finished, with status 0 only if all succeeded.
 */
public final class NioEchoServer {
  private NioEchoServer() {}

  private static final class Connection {
    final int id;
    final ByteBuffer buffer = ByteBuffer.allocateDirect(64 * 1024); // kept in write mode
    boolean inputClosed;
    long total;

    Connection(int id) {
      this.id = id;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args.length > 2) {
      System.err.println("usage: NioEchoServer PORT [CONNECTIONS]");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    int limit = args.length > 1 ? Integer.parseInt(args[1]) : -1;
    int accepted = 0;
    int finished = 0;
    int failures = 0;
    try (Selector selector = Selector.open();
        ServerSocketChannel server = ServerSocketChannel.open()) {
      server.bind(new InetSocketAddress(EchoAddresses.server(), port), 128);
      server.configureBlocking(false);
      SelectionKey serverKey = server.register(selector, SelectionKey.OP_ACCEPT);
      while (limit < 0 || finished < limit) {
        selector.select();
        Iterator<SelectionKey> keys = selector.selectedKeys().iterator();
        while (keys.hasNext()) {
          SelectionKey key = keys.next();
          keys.remove();
          if (key == serverKey) {
            SocketChannel channel;
            while ((channel = server.accept()) != null) {
              channel.configureBlocking(false);
              channel.register(selector, SelectionKey.OP_READ, new Connection(accepted++));
              if (limit >= 0 && accepted >= limit) {
                serverKey.cancel();
                break;
              }
            }
            continue;
          }
          SocketChannel channel = (SocketChannel) key.channel();
          Connection connection = (Connection) key.attachment();
          try {
            if (!step(key, channel, connection)) {
              finished++;
            }
          } catch (IOException e) {
            failures++;
            finished++;
            System.err.println(
                "NioEchoServer: connection " + connection.id + " after " + connection.total + " bytes: " + e);
            key.cancel();
            channel.close();
          }
        }
      }
    }
    if (failures > 0) {
      System.err.println("NioEchoServer: " + failures + " connections failed");
      System.exit(1);
    }
    System.err.println("NioEchoServer: served " + finished + " connections");
  }

  /** Moves what it can; returns false once the connection is finished. */
  private static boolean step(SelectionKey key, SocketChannel channel, Connection connection)
      throws IOException {
    ByteBuffer buffer = connection.buffer;
    if (key.isReadable() && !connection.inputClosed && buffer.hasRemaining()) {
      int got = channel.read(buffer);
      if (got < 0) {
        connection.inputClosed = true;
      } else {
        connection.total += got;
      }
    }
    if (buffer.position() > 0) {
      buffer.flip();
      channel.write(buffer);
      buffer.compact();
    }
    if (connection.inputClosed && buffer.position() == 0) {
      channel.shutdownOutput();
      key.cancel();
      channel.close();
      return false;
    }
    int interest = 0;
    if (!connection.inputClosed && buffer.hasRemaining()) interest |= SelectionKey.OP_READ;
    if (buffer.position() > 0) interest |= SelectionKey.OP_WRITE;
    key.interestOps(interest);
    return true;
  }
}
