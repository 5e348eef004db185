/* NCCL_GRAPH_DUMP_FILE: a host's part of the channels' rings and trees, in the XML stock writes to
 * that file (facts from stock's format: a <graphs version="1"> document, one <graph> per algorithm
 * with id 0 the rings and 1 the trees, pattern 4 a ring and 3 a tree whose traffic between hosts
 * goes through one GPU, then one <channel> per channel: the NIC it enters the host through as
 * <net dev="..."/>, the host's GPUs in the channel's order as <gpu dev="..." rank="..."/>, the NIC
 * it leaves through; dev values in hexadecimal as "%#x"). A NIC is its index in the host's
 * topology (the rails of src/topo/rails.c), a GPU its topology dev. Pure formatting. */
#include <errno.h>
#include <stdlib.h>

#include "topo/topo.h"

static void gx_net(FILE* b, int nic) {
  if (nic >= 0) fprintf(b, "      <net dev=\"%#x\"/>\n", (unsigned)nic);
}

static void gx_gpu(FILE* b, const topo_graph_dump_t* d, int r) {
  fprintf(b, "      <gpu dev=\"%#x\" rank=\"%d\"/>\n",
          (unsigned)(d->gpu_dev[r] >= 0 ? d->gpu_dev[r] : 0), r);
}

static void gx_graph_open(FILE* b, const topo_graph_dump_t* d, int id, int pattern) {
  fprintf(b,
          "  <graph id=\"%d\" pattern=\"%d\" crossnic=\"%d\" nchannels=\"%d\" speedintra=\"%g\" "
          "speedinter=\"%g\" latencyinter=\"0\" typeintra=\"%s\" typeinter=\"%s\" "
          "samechannels=\"0\">\n",
          id, pattern, d->cross_nic, d->nchannels, d->speed_intra, d->speed_inter,
          topo_path_names[d->type_intra], topo_path_names[d->type_inter]);
}

/* The host's part of channel c's ring, in ring order from the rank it enters at. */
static void gx_ring_channel(FILE* b, const topo_graph_dump_t* d, int c) {
  const int* ring = d->rings + (size_t)c * d->nranks;
  const int8_t* nics = d->ring_nics != NULL ? d->ring_nics + (size_t)c * d->nranks : NULL;
  int start = -1;
  for (int i = 0; i < d->nranks && start < 0; i++)
    if (d->host_of[ring[i]] == d->host &&
        d->host_of[ring[(i + d->nranks - 1) % d->nranks]] != d->host)
      start = i;
  if (start < 0) start = 0; /* one host: the whole ring from its first rank */
  int last = start;
  fprintf(b, "    <channel>\n");
  if (d->nhosts > 1 && nics != NULL) gx_net(b, nics[ring[start]]); /* indexed by rank */
  for (int i = 0; i < d->nranks; i++) {
    int at = (start + i) % d->nranks;
    if (d->host_of[ring[at]] != d->host) break;
    gx_gpu(b, d, ring[at]);
    last = at;
  }
  if (d->nhosts > 1 && nics != NULL) gx_net(b, nics[ring[last]]);
  fprintf(b, "    </channel>\n");
}

/* The host's part of channel c's tree: its head (the rank whose parent is on another host, or the
 * root), then the others breadth first; the head's NIC first, and last the NIC of the other rank
 * with a child on another host (topo_tree_rails: the host's second child host hangs from its
 * other ring end), or the head's again. */
static void gx_tree_channel(FILE* b, const topo_graph_dump_t* d, int c, int* queue) {
  const int* up = d->tree_up + (size_t)c * d->nranks;
  const int* down = d->tree_down + (size_t)c * d->nranks * TOPO_TREE_MAX_CHILDREN;
  int head = -1, out = -1;
  for (int r = 0; r < d->nranks && head < 0; r++)
    if (d->host_of[r] == d->host && (up[r] < 0 || d->host_of[up[r]] != d->host)) head = r;
  fprintf(b, "    <channel>\n");
  int nic = head >= 0 && d->tree_nics != NULL ? d->tree_nics[(size_t)c * d->nranks + head] : -1;
  gx_net(b, nic);
  int n = 0;
  if (head >= 0) queue[n++] = head;
  for (int i = 0; i < n; i++) {
    gx_gpu(b, d, queue[i]);
    for (int k = 0; k < TOPO_TREE_MAX_CHILDREN; k++) {
      int ch = down[(size_t)queue[i] * TOPO_TREE_MAX_CHILDREN + k];
      if (ch >= 0 && d->host_of[ch] == d->host) queue[n++] = ch;
      if (ch >= 0 && d->host_of[ch] != d->host && queue[i] != head) out = queue[i];
    }
  }
  gx_net(b, out >= 0 && d->tree_nics != NULL ? d->tree_nics[(size_t)c * d->nranks + out] : nic);
  fprintf(b, "    </channel>\n");
}

ncclResult_t topo_graphs_format(const topo_graph_dump_t* d, char** text_out) {
  char* text = NULL;
  size_t len = 0;
  int* queue = malloc((size_t)(d->nranks > 0 ? d->nranks : 1) * sizeof(int));
  FILE* b = queue != NULL ? open_memstream(&text, &len) : NULL;
  if (b == NULL) {
    WARN("NCCL_GRAPH_DUMP_FILE: no memory for %d channels of %d ranks: %s", d->nchannels, d->nranks,
         strerror(errno));
    free(queue);
    return ncclSystemError;
  }
  fprintf(b, "<graphs version=\"1\">\n");
  gx_graph_open(b, d, 0, 4);
  for (int c = 0; c < d->nchannels; c++) gx_ring_channel(b, d, c);
  fprintf(b, "  </graph>\n");
  if (d->tree_up != NULL && d->tree_down != NULL) {
    gx_graph_open(b, d, 1, 3);
    for (int c = 0; c < d->nchannels; c++) gx_tree_channel(b, d, c, queue);
    fprintf(b, "  </graph>\n");
  }
  fprintf(b, "</graphs>\n");
  bool ok = !ferror(b);
  ok = fclose(b) == 0 && ok;
  free(queue);
  if (!ok) {
    WARN("NCCL_GRAPH_DUMP_FILE: no memory for %d channels of %d ranks", d->nchannels, d->nranks);
    free(text);
    return ncclSystemError;
  }
  *text_out = text;
  return ncclSuccess;
}
