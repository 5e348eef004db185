/* baton-ras: asks a running job for its status through its RAS service (NCCL_RAS_ADDR of one of
 * its processes, localhost:28028 by default) and prints the answer: communicators, ranks per host,
 * each rank's operation counts, and the ranks that are missing, dead or behind.
 *
 * It speaks the line protocol of stock NCCL's ncclras client (CLIENT PROTOCOL, TIMEOUT, SET
 * FORMAT, STATUS), so it can also ask a job running stock NCCL, and ncclras can ask Baton. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "nccl.h"

#define RAS_PROTOCOL 2
#define DEFAULT_TIMEOUT_S 5

typedef struct opts {
  char host[256];
  char port[32];
  bool json, verbose;
  int timeout_s; /* -1: the service's default */
} opts_t;

static void usage(FILE* f, const char* argv0) {
  fprintf(
      f,
      "Usage: %s [-f text|json] [-h host] [-p port] [-t seconds] [-v]\n"
      "Prints the status of a running NCCL job (Baton or stock) from its RAS service.\n"
      "  -f, --format   text (default) or json\n"
      "  -h, --host     host of the job's RAS service (default: NCCL_RAS_ADDR, else localhost)\n"
      "  -p, --port     its port (default: NCCL_RAS_ADDR's, else 28028)\n"
      "  -t, --timeout  seconds the service waits for the job's other processes (default %d)\n"
      "  -v, --verbose  one line per rank as well\n"
      "      --help, --version\n",
      argv0, DEFAULT_TIMEOUT_S);
}

/* NCCL_RAS_ADDR=<host>:<port> ("[v6]:port" too) gives the defaults. */
static void defaults_from_env(opts_t* o) {
  snprintf(o->host, sizeof(o->host), "localhost");
  snprintf(o->port, sizeof(o->port), "28028");
  const char* env = getenv("NCCL_RAS_ADDR");
  if (env == NULL || env[0] == '\0') return;
  char buf[sizeof(o->host)];
  snprintf(buf, sizeof(buf), "%s", env);
  char* colon = strrchr(buf, ':');
  if (colon != NULL) {
    *colon = '\0';
    snprintf(o->port, sizeof(o->port), "%s", colon + 1);
  }
  char* h = buf;
  if (h[0] == '[') {
    h++;
    char* end = strchr(h, ']');
    if (end != NULL) *end = '\0';
  }
  if (h[0] != '\0') snprintf(o->host, sizeof(o->host), "%s", h);
}

static int parse_args(int argc, char** argv, opts_t* o) {
  static const struct option longs[] = {
      {"format", required_argument, NULL, 'f'}, {"host", required_argument, NULL, 'h'},
      {"port", required_argument, NULL, 'p'},   {"timeout", required_argument, NULL, 't'},
      {"verbose", no_argument, NULL, 'v'},      {"help", no_argument, NULL, 'H'},
      {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "f:h:p:t:v", longs, NULL)) != -1) {
    switch (c) {
      case 'f':
        if (strcasecmp(optarg, "json") != 0 && strcasecmp(optarg, "text") != 0) {
          fprintf(stderr, "baton-ras: unknown format %s (text or json)\n", optarg);
          return 2;
        }
        o->json = strcasecmp(optarg, "json") == 0;
        break;
      case 'h':
        snprintf(o->host, sizeof(o->host), "%s", optarg);
        break;
      case 'p':
        snprintf(o->port, sizeof(o->port), "%s", optarg);
        break;
      case 't': {
        char* end = NULL;
        long t = strtol(optarg, &end, 10);
        if (end == optarg || *end != '\0' || t < 0 || t > 3600) {
          fprintf(stderr, "baton-ras: bad timeout %s (0..3600 seconds)\n", optarg);
          return 2;
        }
        o->timeout_s = (int)t;
        break;
      }
      case 'v':
        o->verbose = true;
        break;
      case 'H':
        usage(stdout, argv[0]);
        exit(0);
      case 'V':
        printf("baton-ras (NCCL %d.%d.%d, RAS client protocol %d)\n", NCCL_MAJOR, NCCL_MINOR,
               NCCL_PATCH, RAS_PROTOCOL);
        exit(0);
      default:
        usage(stderr, argv[0]);
        return 2;
    }
  }
  return 0;
}

static int connect_service(const opts_t* o) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo* ai = NULL;
  int rc = getaddrinfo(o->host, o->port, &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "baton-ras: cannot resolve %s:%s: %s\n", o->host, o->port, gai_strerror(rc));
    return -1;
  }
  int fd = -1, err = 0;
  for (struct addrinfo* p = ai; p != NULL && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0)
    fprintf(stderr,
            "baton-ras: cannot connect to the RAS service at %s:%s: %s\n"
            "Is the job running here with NCCL_RAS_ENABLE=1 (the default)? Pass -h/-p or set "
            "NCCL_RAS_ADDR as the job did.\n",
            o->host, o->port, strerror(err));
  return fd;
}

static void set_timeout(int fd, int seconds) {
  struct timeval tv = {.tv_sec = seconds};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int send_line(int fd, const char* line) {
  size_t len = strlen(line), done = 0;
  while (done < len) {
    ssize_t n = send(fd, line + done, len - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += (size_t)n;
  }
  return 0;
}

/* One reply line (without the newline) into buf. */
static int recv_line(int fd, char* buf, size_t len) {
  size_t got = 0;
  while (got + 1 < len) {
    ssize_t n = recv(fd, buf + got, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    if (buf[got] == '\n') break;
    got++;
  }
  buf[got] = '\0';
  return 0;
}

/* Sends a command and expects a reply starting with want; prints the reply otherwise. */
static int command(int fd, const char* cmd, const char* want, char* reply, size_t len) {
  if (send_line(fd, cmd) != 0 || recv_line(fd, reply, len) != 0) {
    fprintf(stderr, "baton-ras: the RAS service did not answer \"%.*s\": %s\n",
            (int)strcspn(cmd, "\n"), cmd, errno ? strerror(errno) : "connection closed");
    return -1;
  }
  if (strncasecmp(reply, want, strlen(want)) != 0) {
    fprintf(stderr, "baton-ras: unexpected answer to \"%.*s\": %s\n", (int)strcspn(cmd, "\n"), cmd,
            reply);
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  opts_t o = {.timeout_s = -1};
  defaults_from_env(&o);
  int rc = parse_args(argc, argv, &o);
  if (rc != 0) return rc;
  int fd = connect_service(&o);
  if (fd < 0) return 1;
  int wait_s = o.timeout_s >= 0 ? o.timeout_s : DEFAULT_TIMEOUT_S;
  set_timeout(fd, 5);
  char line[512];
  snprintf(line, sizeof(line), "CLIENT PROTOCOL %d\n", RAS_PROTOCOL);
  if (command(fd, line, "SERVER PROTOCOL ", line, sizeof(line)) != 0) goto fail;
  if (atoi(line + strlen("SERVER PROTOCOL ")) != RAS_PROTOCOL)
    fprintf(stderr, "baton-ras: the service speaks protocol %s, this client %d; trying anyway\n",
            line + strlen("SERVER PROTOCOL "), RAS_PROTOCOL);
  if (o.timeout_s >= 0) {
    snprintf(line, sizeof(line), "TIMEOUT %d\n", o.timeout_s);
    if (command(fd, line, "OK", line, sizeof(line)) != 0) goto fail;
  }
  if (o.json && command(fd, "SET FORMAT json\n", "OK", line, sizeof(line)) != 0) goto fail;
  if (send_line(fd, o.verbose ? "VERBOSE STATUS\n" : "STATUS\n") != 0) goto fail;
  set_timeout(fd, wait_s + 10); /* the service asks every process before it answers */
  char buf[4096];
  bool any = false;
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fprintf(stderr, "baton-ras: reading the status: %s\n", strerror(errno));
      goto fail;
    }
    if (n == 0) break;
    any = true;
    if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n) goto fail;
  }
  close(fd);
  if (!any) {
    fprintf(stderr, "baton-ras: the RAS service closed the connection without a status\n");
    return 1;
  }
  return fflush(stdout) == 0 ? 0 : 1;
fail:
  close(fd);
  return 1;
}
