import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Echo server on java.net blocking sockets, one thread per connection: every
 * byte read is written back; at EOF the output is shut down.
 *
 * <p>usage: BlockingEchoServer PORT [CONNECTIONS] — with CONNECTIONS, exits
 * after serving that many connections, with status 0 only if all succeeded.
 */
public final class BlockingEchoServer {
  private BlockingEchoServer() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args.length > 2) {
      System.err.println("usage: BlockingEchoServer PORT [CONNECTIONS]");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    int limit = args.length > 1 ? Integer.parseInt(args[1]) : -1;
    AtomicInteger failures = new AtomicInteger();
    Thread[] workers = new Thread[Math.max(limit, 0)];
    try (ServerSocket server = new ServerSocket()) {
      server.setReuseAddress(true);
      server.bind(new java.net.InetSocketAddress(EchoAddresses.server(), port), 128);
      for (int accepted = 0; limit < 0 || accepted < limit; accepted++) {
        Socket socket = server.accept();
        int id = accepted;
        Thread worker = new Thread(() -> serve(socket, id, failures), "echo-" + id);
        worker.start();
        if (limit > 0) workers[accepted] = worker;
      }
    }
    for (Thread worker : workers) worker.join();
    if (failures.get() > 0) {
      System.err.println("BlockingEchoServer: " + failures.get() + " connections failed");
      System.exit(1);
    }
    System.err.println("BlockingEchoServer: served " + limit + " connections");
  }

  private static void serve(Socket socket, int id, AtomicInteger failures) {
    long total = 0;
    try (socket) {
      InputStream in = socket.getInputStream();
      OutputStream out = socket.getOutputStream();
      byte[] buffer = new byte[64 * 1024];
      int got;
      while ((got = in.read(buffer)) >= 0) {
        out.write(buffer, 0, got);
        total += got;
      }
      socket.shutdownOutput();
      // Wait for the peer's close so our FIN is never followed by an RST.
      while (in.read(buffer) >= 0) {}
    } catch (IOException e) {
      failures.incrementAndGet();
      System.err.println("BlockingEchoServer: connection " + id + " after " + total + " bytes: " + e);
    }
  }
}
