import java.util.Arrays;

/**
 * Starts a program with an EMPTY environment through ProcessBuilder (the
 * JDK's own launcher: posix_spawn of jspawnhelper, then exec), passes its
 * output through and exits with its status.
 *
 * <p>usage: java -cp JAR SpawnProbe PROGRAM [ARGS...]
 */
public final class SpawnProbe {
  private SpawnProbe() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: SpawnProbe PROGRAM [ARGS...]");
      System.exit(2);
    }
    ProcessBuilder builder = new ProcessBuilder(Arrays.asList(args));
    builder.environment().clear();
    builder.inheritIO();
    Process process = builder.start();
    System.exit(process.waitFor());
  }
}
