import java.net.InetAddress;
import java.net.UnknownHostException;

/**
 * Where the echo programs meet: the server's address is loopback unless
 * -Decho.address=ADDRESS names another (the servers listen there, the client
 * connects there); -Decho.source=ADDRESS is the client's source address.
 */
final class EchoAddresses {
  private EchoAddresses() {}

  static InetAddress server() throws UnknownHostException {
    String address = System.getProperty("echo.address");
    return address == null ? InetAddress.getLoopbackAddress() : InetAddress.getByName(address);
  }

  /** The client's source address, or null: the route's. */
  static InetAddress source() throws UnknownHostException {
    String address = System.getProperty("echo.source");
    return address == null ? null : InetAddress.getByName(address);
  }
}
