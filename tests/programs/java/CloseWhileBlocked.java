import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * The JDK's ways of ending a blocked socket call, on connections that have
 * carried data first (so under qpsock they are upgraded and the call blocks in
 * qpsock's stream, not in the kernel): Socket.close() from another thread
 * (the JDK dup2s a placeholder over the fd and signals the blocked thread),
 * SocketChannel.close() and Thread.interrupt() on a blocking channel, a timed
 * read (SO_TIMEOUT), and close() while a writer is blocked on a peer that does
 * not read; last, processes started (the JDK's posix_spawn of jspawnhelper)
 * while a connection is upgraded, which must go on carrying every byte after.
 * Prints one line per case with what the blocked thread saw; the
 * output is the same whatever the transport, and a case whose thread is not
 * released within RELEASE_LIMIT_MS prints "late".
 *
 * <p>usage: CloseWhileBlocked server PORT | client PORT
 *
 * <p>The server serves one connection per case: the client's first byte is
 * the case's command; the server then writes PREFIX_BYTES and, for 'W', waits
 * STALL_MS before reading; it reads until EOF or an error and prints what ended
 * the connection.
 */
public final class CloseWhileBlocked {
  private static final int PREFIX_BYTES = 1 << 20;
  private static final long RELEASE_LIMIT_MS = 2000;
  private static final long BLOCK_BEFORE_CLOSE_MS = 300;
  private static final long STALL_MS = 1500;
  private static final String CASES = "ACIRTWP";

  private CloseWhileBlocked() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 2 || !(args[0].equals("server") || args[0].equals("client"))) {
      System.err.println("usage: CloseWhileBlocked server PORT | client PORT");
      System.exit(2);
    }
    int port = Integer.parseInt(args[1]);
    if (args[0].equals("server")) {
      serve(port);
    } else {
      for (char command : CASES.toCharArray()) runCase(command, port);
    }
  }

  private static void serve(int port) throws IOException, InterruptedException {
    try (ServerSocket server = new ServerSocket()) {
      server.setReuseAddress(true);
      server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 16);
      for (int served = 0; served < CASES.length(); served++) {
        try (Socket socket = server.accept()) {
          InputStream in = socket.getInputStream();
          int command = in.read();
          socket.getOutputStream().write(new byte[PREFIX_BYTES]);
          if (command == 'W') Thread.sleep(STALL_MS);
          String end;
          try {
            byte[] buffer = new byte[1 << 16];
            long received = 0;
            for (int got; (got = in.read(buffer)) > 0; ) received += got;
            end = "EOF" + (command == 'P' ? " after " + received + " bytes" : "");
          } catch (IOException e) {
            end = e.getClass().getSimpleName();
          }
          System.out.println("server " + (char) command + ": " + end);
        }
      }
    }
  }

  private static void readPrefix(InputStream in) throws IOException {
    byte[] buffer = new byte[1 << 16];
    long total = 0;
    while (total < PREFIX_BYTES) {
      int got = in.read(buffer);
      if (got < 0) throw new IOException("EOF after " + total + " bytes");
      total += got;
    }
  }

  /** Runs `blocked` on its own thread, then `release` once it is blocked. */
  private static void blockThenRelease(char command, ThrowingRunnable blocked, ThrowingRunnable release)
      throws Exception {
    String[] outcome = {"returned normally"};
    Thread thread = new Thread(() -> {
      try {
        blocked.run();
      } catch (Exception e) {
        outcome[0] = e.getClass().getSimpleName() + (e.getMessage() == null ? "" : ": " + e.getMessage());
      }
    }, "blocked-" + command);
    thread.start();
    Thread.sleep(BLOCK_BEFORE_CLOSE_MS);
    long start = System.nanoTime();
    if (release != null) release.run();
    thread.join(RELEASE_LIMIT_MS * 5);
    long elapsedMs = (System.nanoTime() - start) / 1_000_000;
    String timing = thread.isAlive() ? "still blocked" : elapsedMs <= RELEASE_LIMIT_MS ? "promptly" : "late";
    System.out.println("client " + command + ": " + outcome[0] + ", released " + timing);
    System.err.println("client " + command + ": released after " + elapsedMs + " ms");
  }

  private static void runCase(char command, int port) throws Exception {
    InetSocketAddress server = new InetSocketAddress(InetAddress.getLoopbackAddress(), port);
    switch (command) {
      case 'A': { // Socket.close() while another thread is blocked reading
        Socket socket = new Socket(server.getAddress(), port);
        socket.getOutputStream().write(command);
        readPrefix(socket.getInputStream());
        blockThenRelease(command, () -> socket.getInputStream().read(), socket::close);
        break;
      }
      case 'C': // SocketChannel.close() while another thread is blocked reading
      case 'I': { // Thread.interrupt() of a thread blocked reading a channel
        SocketChannel channel = SocketChannel.open(server);
        channel.write(ByteBuffer.wrap(new byte[] {(byte) command}));
        readPrefix(channel.socket().getInputStream());
        Thread[] reader = new Thread[1];
        blockThenRelease(command, () -> {
          reader[0] = Thread.currentThread();
          channel.read(ByteBuffer.allocate(1024));
        }, command == 'C' ? channel::close : () -> reader[0].interrupt());
        channel.close();
        break;
      }
      case 'R': { // shutdownInput() while another thread is blocked reading
        Socket socket = new Socket(server.getAddress(), port);
        socket.getOutputStream().write(command);
        readPrefix(socket.getInputStream());
        blockThenRelease(command, () -> {
          int got = socket.getInputStream().read();
          if (got != -1) throw new IOException("read " + got + " after shutdownInput");
        }, socket::shutdownInput);
        socket.close();
        break;
      }
      case 'T': { // a read with SO_TIMEOUT on a silent peer
        Socket socket = new Socket(server.getAddress(), port);
        socket.getOutputStream().write(command);
        readPrefix(socket.getInputStream());
        socket.setSoTimeout((int) BLOCK_BEFORE_CLOSE_MS);
        blockThenRelease(command, () -> {
          try {
            socket.getInputStream().read();
          } catch (SocketTimeoutException e) {
            throw new IOException("timed out as asked");
          }
        }, null);
        socket.close();
        break;
      }
      case 'W': { // close() while another thread is blocked writing to a peer that does not read
        Socket socket = new Socket(server.getAddress(), port);
        socket.getOutputStream().write(command);
        readPrefix(socket.getInputStream());
        blockThenRelease(command, () -> socket.getOutputStream().write(new byte[64 << 20]), socket::close);
        break;
      }
      case 'P': { // processes spawned while the connection is upgraded; it goes on after
        Socket socket = new Socket(server.getAddress(), port);
        socket.getOutputStream().write(command);
        readPrefix(socket.getInputStream());
        int exits = 0;
        for (int i = 0; i < 3; i++) exits += new ProcessBuilder("true").start().waitFor();
        socket.getOutputStream().write(new byte[PREFIX_BYTES]);
        socket.close();
        System.out.println("client P: 3 processes spawned (exit statuses summing to " + exits
            + "), then " + PREFIX_BYTES + " bytes written");
        break;
      }
      default:
        throw new IllegalArgumentException("no case " + command);
    }
  }

  @FunctionalInterface
  private interface ThrowingRunnable {
    void run() throws Exception;
  }
}
