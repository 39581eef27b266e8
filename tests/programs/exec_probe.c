/* exec_probe: the exec side of qpsock's integration tests.
 *
 *   exec_probe report
 *       prints "qpsock=loaded" or "qpsock=absent" (libqpsock.so in
 *       /proc/self/maps or not) and exits 0.
 *   exec_probe exit STATUS
 *       exits with STATUS.
 *   exec_probe clean-exec METHOD PROGRAM [ARGS...]
 *       runs PROGRAM (an absolute path) with an EMPTY environment, by METHOD:
 *       execve, execve-null (envp NULL), execle, execvpe, fexecve (replace
 *       this process), or
 *       fork-execve, vfork-execve, posix_spawn, posix_spawnp (run it as a
 *       child and exit with its status).
 *   exec_probe serve-then-exec PORT PREFIX PROGRAM [ARGS...]
 *       listens on 127.0.0.1:PORT, accepts one connection, echoes its first
 *       PREFIX bytes itself, then execs PROGRAM ARGS... FD, where FD is the
 *       number of the connected socket the new program inherits.
 *   exec_probe connect-then-spawn PORT METHOD
 *       connects to an echo server on 127.0.0.1:PORT, makes one round trip,
 *       starts "exec_probe peek-fd FD" beside itself by METHOD (posix_spawn,
 *       posix_spawnp, system or popen) and waits for it, then checks the
 *       echo of 1 MiB.
 *   exec_probe peek-fd FD
 *       peeks at the socket FD without waiting and says what it found on
 *       stderr: "peek-fd FD: data", "...: EAGAIN", "...: ECONNRESET", ...
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include "common.h"

extern char** environ;

static int report(void) {
  int loaded = qpsock_loaded();
  if (loaded < 0) die("/proc/self/maps:");
  printf("qpsock=%s\n", loaded ? "loaded" : "absent");
  return 0;
}

static int child_status(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) die("waitpid:");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

/* Runs ARGV (ARGV[0] an absolute path) as a child by METHOD: posix_spawn or
 * posix_spawnp with ENVP, or system or popen through the shell with the
 * current environ (popen's output copied to OUTPUT). Its exit status, or 128
 * + the signal that ended it; -1 if METHOD is none of these. */
static int run_beside(const char* method, char** argv, char** envp, FILE* output) {
  if (strcmp(method, "posix_spawn") == 0 || strcmp(method, "posix_spawnp") == 0) {
    pid_t pid;
    int error = method[11] == 'p' ? posix_spawnp(&pid, argv[0], NULL, NULL, argv, envp)
                                  : posix_spawn(&pid, argv[0], NULL, NULL, argv, envp);
    if (error != 0) {
      errno = error;
      die("%s %s:", method, argv[0]);
    }
    return child_status(pid);
  }
  if (strcmp(method, "system") != 0 && strcmp(method, "popen") != 0) return -1;
  char command[4096] = "";
  for (char** word = argv; *word != NULL; ++word) {
    if (strlen(command) + strlen(*word) + 2 > sizeof(command)) die("command too long");
    if (word != argv) strcat(command, " ");
    strcat(command, *word);
  }
  int status;
  if (method[0] == 's') {
    status = system(command);
    if (status < 0) die("system:");
  } else {
    FILE* pipe = popen(command, "r");
    if (pipe == NULL) die("popen:");
    char line[256];
    while (fgets(line, sizeof(line), pipe) != NULL) fputs(line, output);
    status = pclose(pipe);
    if (status < 0) die("pclose:");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static int clean_exec(const char* method, char** argv) {
  char* empty[] = {NULL};
  const char* path = argv[0];
  fflush(stdout);
  if (strcmp(method, "execve") == 0) {
    execve(path, argv, empty);
  } else if (strcmp(method, "execve-null") == 0) {
    execve(path, argv, NULL); /* Linux takes a null envp as an empty one */
  } else if (strcmp(method, "execle") == 0) {
    /* argv is at most PROGRAM and one argument here. */
    if (argv[1] == NULL) {
      execle(path, argv[0], (char*)NULL, empty);
    } else {
      execle(path, argv[0], argv[1], (char*)NULL, empty);
    }
  } else if (strcmp(method, "execvpe") == 0) {
    execvpe(path, argv, empty);
  } else if (strcmp(method, "fexecve") == 0) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open %s:", path);
    fexecve(fd, argv, empty);
  } else if (strcmp(method, "fork-execve") == 0 || strcmp(method, "vfork-execve") == 0) {
    pid_t pid = method[0] == 'v' ? vfork() : fork();
    if (pid < 0) die("%s:", method);
    if (pid == 0) {
      execve(path, argv, empty);
      _exit(127);
    }
    return child_status(pid);
  } else {
    if ((strcmp(method, "system") == 0 || strcmp(method, "popen") == 0) && clearenv() != 0)
      die("clearenv failed");
    int status = run_beside(method, argv, empty, stdout);
    if (status < 0) die("unknown method '%s'", method);
    return status;
  }
  die("%s %s:", method, path);
}

static int connect_loopback_port(int port) {
  struct sockaddr_storage address;
  socklen_t length = loopback_address(&address, 0, port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket:");
  while (connect(fd, (struct sockaddr*)&address, length) != 0) {
    if (errno != EINTR) die("connect to port %d:", port);
  }
  return fd;
}

static void read_exactly(int fd, unsigned char* buffer, size_t length) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = read(fd, buffer + done, length - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) die("read:");
    if (got == 0) die("EOF after %zu of %zu bytes", done, length);
    done += (size_t)got;
  }
}

/* Starts "exec_probe peek-fd FD" by METHOD; its exit status. */
static int start_peek(const char* method, int fd) {
  char self[4096];
  ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length < 0) die("readlink /proc/self/exe:");
  self[length] = '\0';
  char fd_text[16];
  snprintf(fd_text, sizeof(fd_text), "%d", fd);
  char* argv[] = {self, (char*)"peek-fd", fd_text, NULL};
  int status = run_beside(method, argv, environ, stderr);
  if (status < 0) die("unknown method '%s'", method);
  return status;
}

/* A round trip with an echo server (after which qpsock has upgraded the
 * connection), a program started beside this one that peeks at the socket,
 * then 1 MiB echoed and compared. */
static int connect_then_spawn(int port, const char* method) {
  int fd = connect_loopback_port(port);
  unsigned char hello[6] = "hello";
  unsigned char reply[sizeof(hello)];
  if (write_all(fd, hello, sizeof(hello)) != 0) die("write:");
  read_exactly(fd, reply, sizeof(reply));
  if (memcmp(hello, reply, sizeof(hello)) != 0) die("the first echo differs");
  int status = start_peek(method, fd);
  if (status != 0) die("the program started by %s exited with %d", method, status);
  size_t total = 1 << 20;
  unsigned char* out = malloc(total);
  unsigned char* in = malloc(total);
  if (out == NULL || in == NULL) die("out of memory");
  struct byte_stream stream;
  byte_stream_init(&stream, 41);
  byte_stream_fill(&stream, out, total);
  /* Less than a socket buffer at a time: the echo server writes back as we write. */
  for (size_t done = 0; done < total; done += 65536) {
    if (write_all(fd, out + done, 65536) != 0) die("write:");
    read_exactly(fd, in + done, 65536);
  }
  if (memcmp(out, in, total) != 0) die("the echo of 1 MiB differs");
  fprintf(stderr, "exec_probe: %s: 1 MiB echoed intact after the program it started peeked\n", method);
  return 0;
}

static int peek_fd(int fd) {
  char byte;
  ssize_t got = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  const char* found = got > 0 ? "data" : got == 0 ? "EOF"
                      : errno == EAGAIN ? "EAGAIN" : errno == ECONNRESET ? "ECONNRESET"
                      : strerror(errno);
  fprintf(stderr, "exec_probe: peek-fd %d: %s\n", fd, found);
  return 0;
}

static int serve_then_exec(int port, long prefix, char** program) {
  int listener = listen_loopback(0, port);
  int connection;
  while ((connection = accept(listener, NULL, NULL)) < 0) {
    if (errno != EINTR) die("accept:");
  }
  close(listener);
  unsigned char buffer[8192];
  long echoed = 0;
  while (echoed < prefix) {
    size_t want = (size_t)(prefix - echoed) < sizeof(buffer) ? (size_t)(prefix - echoed) : sizeof(buffer);
    ssize_t got = read(connection, buffer, want);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) die("read:");
    if (got == 0) die("EOF after %ld of %ld prefix bytes", echoed, prefix);
    if (write_all(connection, buffer, (size_t)got) != 0) die("write:");
    echoed += got;
  }
  fprintf(stderr, "exec_probe: echoed %ld bytes on fd %d, exec %s\n", echoed, connection, program[0]);
  size_t count = 0;
  while (program[count] != NULL) ++count;
  char** argv = calloc(count + 2, sizeof(char*));
  char fd_text[16];
  if (argv == NULL) die("out of memory");
  snprintf(fd_text, sizeof(fd_text), "%d", connection);
  memcpy(argv, program, count * sizeof(char*));
  argv[count] = fd_text;
  execv(program[0], argv);
  die("execv %s:", program[0]);
}

int main(int argc, char** argv) {
  program_name = "exec_probe";
  const char* usage =
      "usage: exec_probe report | exit STATUS | clean-exec METHOD PROGRAM [ARGS...] |"
      " serve-then-exec PORT PREFIX PROGRAM [ARGS...] | connect-then-spawn PORT METHOD |"
      " peek-fd FD";
  if (argc < 2) die("%s", usage);
  const char* mode = argv[1];
  if (strcmp(mode, "report") == 0 && argc == 2) return report();
  if (strcmp(mode, "exit") == 0 && argc == 3) return (int)parse_number(argv[2], "status");
  if (strcmp(mode, "clean-exec") == 0 && argc >= 4) return clean_exec(argv[2], argv + 3);
  if (strcmp(mode, "serve-then-exec") == 0 && argc >= 5)
    return serve_then_exec((int)parse_number(argv[2], "port"), parse_number(argv[3], "prefix"), argv + 4);
  if (strcmp(mode, "connect-then-spawn") == 0 && argc == 4)
    return connect_then_spawn((int)parse_number(argv[2], "port"), argv[3]);
  if (strcmp(mode, "peek-fd") == 0 && argc == 3) return peek_fd((int)parse_number(argv[2], "fd"));
  die("%s", usage);
}
