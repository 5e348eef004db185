/* The INFO lines that describe a communicator's channels, in the shape stock prints at init:
 *   Channel 00/24 : 0 1 2 3                          one line per channel: its ring order
 *   Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1     this rank's tree per channel:
 *                                                    children -> rank -> parent
 * Pure formatting plus one logging function. */
#include <stdarg.h>
#include <stdlib.h>

#include "topo/topo.h"

/* Appends to buf (len bytes) at *off, never past the end; *off counts what would be written. */
static void put(char* buf, size_t len, size_t* off, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char* buf, size_t len, size_t* off, const char* fmt, ...) {
  size_t room = *off < len ? len - *off : 0;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(room ? buf + *off : NULL, room, fmt, ap);
  va_end(ap);
  if (w > 0) *off += (size_t)w;
}

static int finish(char* buf, size_t len, size_t off) {
  if (len == 0) return 0;
  if (off >= len) off = len - 1;
  buf[off] = '\0';
  return (int)off;
}

int topo_format_ring(char* buf, size_t len, int channel, int nchannels, const int* ring,
                     int nranks) {
  size_t off = 0;
  if (len > 0) buf[0] = '\0';
  put(buf, len, &off, "Channel %02d/%02d :", channel, nchannels);
  for (int i = 0; i < nranks; i++) put(buf, len, &off, " %d", ring[i]);
  return finish(buf, len, off);
}

int topo_format_trees(char* buf, size_t len, int rank, int nchannels, const int* up,
                      const int* down) {
  size_t off = 0;
  if (len > 0) buf[0] = '\0';
  put(buf, len, &off, "Trees");
  for (int c = 0; c < nchannels; c++) {
    const int* d = down + (size_t)c * TOPO_TREE_MAX_CHILDREN;
    put(buf, len, &off, " [%d] %d", c, d[0]);
    for (int k = 1; k < TOPO_TREE_MAX_CHILDREN; k++) put(buf, len, &off, "/%d", d[k]);
    put(buf, len, &off, "->%d->%d", rank, up[c]);
  }
  return finish(buf, len, off);
}

void topo_log_graph(int rank, int nranks, int nchannels, const int* rings, const int* up,
                    const int* down) {
  if (!LOG_ENABLED(NCCL_LOG_INFO) || nchannels <= 0) return;
  /* A rank is at most 11 characters and a tree entry at most 4 + 11 * (3 + TREE_MAX + 1). */
  size_t len = 32 + (size_t)nranks * 12;
  size_t tlen = 16 + (size_t)nchannels * (8 + 12 * (TOPO_TREE_MAX_CHILDREN + 3));
  char* buf = malloc(len > tlen ? len : tlen);
  if (buf == NULL) return; /* only a log line is lost */
  for (int c = 0; c < nchannels; c++) {
    topo_format_ring(buf, len, c, nchannels, rings + (size_t)c * nranks, nranks);
    INFO(NCCL_INIT | NCCL_GRAPH, "%s", buf);
  }
  topo_format_trees(buf, tlen, rank, nchannels, up, down);
  INFO(NCCL_INIT | NCCL_GRAPH, "%s", buf);
  free(buf);
}
