import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.util.concurrent.atomic.AtomicReference;
import java.util.zip.CRC32;

/**
 * Echo client: opens CONNECTIONS concurrent connections (a reader and a writer
 * thread each), sends each a deterministic pseudo-random stream of BYTES bytes
 * in random-sized writes, shuts its output down and checks every echoed byte
 * against the stream it sent. The streams are the same as echo_client.c's for
 * the same seed, and so is the output: one line per connection with the bytes
 * and CRC-32 that came back. Exits 0 only if every connection matched.
 *
 * <p>usage: BlockingEchoClient PORT [CONNECTIONS [BYTES [SEED [MAX_WRITE]]]]
 * (defaults 16 connections, 4 MiB, seed 1, 256 KiB). The server's address is
 * loopback, or -Decho.address=ADDRESS; -Decho.source=ADDRESS binds each
 * connection to that source address first; -Decho.startDelayMillis=N waits N
 * ms after connecting before the first byte.
 */
public final class BlockingEchoClient {
  private BlockingEchoClient() {}

  /** splitmix64 as a byte stream, little-endian: echo_client.c's byte_stream. */
  static final class ByteStream {
    private long state;
    private long word;
    private int available;

    ByteStream(long seed) {
      state = seed;
    }

    static long splitmix64(long[] state) {
      long z = (state[0] += 0x9E3779B97F4A7C15L);
      z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
      z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
      return z ^ (z >>> 31);
    }

    private long next() {
      long[] holder = {state};
      long value = splitmix64(holder);
      state = holder[0];
      return value;
    }

    void fill(byte[] out, int offset, int length) {
      int end = offset + length;
      while (offset < end) {
        if (available == 0) {
          word = next();
          available = 8;
        }
        out[offset++] = (byte) word;
        word >>>= 8;
        available--;
      }
    }
  }

  static final class SizeSource {
    private final long[] state;

    SizeSource(long seed) {
      state = new long[] {seed};
    }

    int next(int maximum) {
      return 1 + (int) Long.remainderUnsigned(ByteStream.splitmix64(state), maximum);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args.length > 5) {
      System.err.println("usage: BlockingEchoClient PORT [CONNECTIONS [BYTES [SEED [MAX_WRITE]]]]");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    int connections = args.length > 1 ? Integer.parseInt(args[1]) : 16;
    long bytes = args.length > 2 ? Long.parseLong(args[2]) : 4L << 20;
    long seed = args.length > 3 ? Long.parseLong(args[3]) : 1;
    int maxWrite = args.length > 4 ? Integer.parseInt(args[4]) : 256 * 1024;

    reportQpsockState();
    long[] crcs = new long[connections];
    AtomicReference<String> firstError = new AtomicReference<>();
    Thread[] threads = new Thread[connections];
    for (int index = 0; index < connections; index++) {
      int id = index;
      threads[index] =
          new Thread(
              () -> {
                try {
                  crcs[id] = runConnection(port, id, bytes, seed, maxWrite);
                } catch (Exception e) {
                  firstError.compareAndSet(null, "connection " + id + ": " + e);
                  System.err.println("BlockingEchoClient: connection " + id + ": " + e);
                }
              },
              "connection-" + id);
      threads[index].start();
    }
    for (Thread thread : threads) thread.join();
    if (firstError.get() != null) {
      System.err.println("BlockingEchoClient: FAILED: " + firstError.get());
      System.exit(1);
    }
    StringBuilder report = new StringBuilder();
    for (int index = 0; index < connections; index++) {
      report.append(String.format("connection %d: %d bytes crc32 %08x%n", index, bytes, crcs[index]));
    }
    report.append(String.format("echo_client: OK, %d connections, %d bytes each%n", connections, bytes));
    System.out.print(report);
    System.out.flush();
  }

  /** Prints "BlockingEchoClient: qpsock=loaded" (or absent) on stderr, for the test logs. */
  private static void reportQpsockState() {
    String state;
    try {
      boolean loaded =
          java.nio.file.Files.readAllLines(java.nio.file.Paths.get("/proc/self/maps")).stream()
              .anyMatch(line -> line.contains("libqpsock.so"));
      state = loaded ? "loaded" : "absent";
    } catch (IOException e) {
      state = "unknown";
    }
    System.err.println("BlockingEchoClient: qpsock=" + state);
  }

  private static long runConnection(int port, int id, long bytes, long seed, int maxWrite)
      throws Exception {
    long streamSeed = seed * 1000003L + id;
    try (Socket socket = new Socket()) {
      InetAddress source = EchoAddresses.source();
      if (source != null) socket.bind(new InetSocketAddress(source, 0));
      socket.connect(new InetSocketAddress(EchoAddresses.server(), port), 10_000);
      // -Decho.startDelayMillis: a pause between connecting and the first
      // byte (time for an upgrade that a test wants done before the data).
      long startDelay = Long.getLong("echo.startDelayMillis", 0);
      if (startDelay > 0) Thread.sleep(startDelay);
      socket.setSoTimeout(30_000);
      OutputStream out = socket.getOutputStream();
      InputStream in = socket.getInputStream();
      AtomicReference<Exception> writeError = new AtomicReference<>();
      long[] sentHolder = {0};
      Thread writer =
          new Thread(
              () -> {
                ByteStream stream = new ByteStream(streamSeed);
                SizeSource sizes = new SizeSource(~streamSeed);
                byte[] chunk = new byte[maxWrite];
                long sent = 0;
                try {
                  while (sent < bytes) {
                    int size = (int) Math.min(sizes.next(maxWrite), bytes - sent);
                    stream.fill(chunk, 0, size);
                    out.write(chunk, 0, size);
                    sent += size;
                  }
                  socket.shutdownOutput();
                } catch (IOException e) {
                  writeError.set(e);
                }
                sentHolder[0] = sent;
              },
              "writer-" + id);
      writer.start();

      ByteStream expected = new ByteStream(streamSeed);
      SizeSource sizes = new SizeSource(streamSeed ^ 0x5DEECE66DL);
      byte[] buffer = new byte[64 * 1024];
      byte[] want = new byte[64 * 1024];
      CRC32 crc = new CRC32();
      long received = 0;
      try {
        while (true) {
          int got = in.read(buffer, 0, sizes.next(buffer.length));
          if (got < 0) break;
          if (received + got > bytes) {
            throw new IOException("received " + (received + got) + " bytes, more than the " + bytes + " sent");
          }
          expected.fill(want, 0, got);
          for (int at = 0; at < got; at++) {
            if (buffer[at] != want[at]) {
              throw new IOException(
                  String.format(
                      "wrong byte at offset %d: got 0x%02x, sent 0x%02x",
                      received + at, buffer[at] & 0xFF, want[at] & 0xFF));
            }
          }
          crc.update(buffer, 0, got);
          received += got;
        }
      } finally {
        writer.join(60_000);
      }
      if (writeError.get() != null) throw writeError.get();
      if (received != bytes) {
        throw new IOException("early EOF after " + received + " of " + bytes + " bytes (sent " + sentHolder[0] + ")");
      }
      return crc.getValue();
    }
  }
}
