/* Ring orders: pure functions, no I/O.
 *
 * A ring visits every rank once. Ranks of one host sit next to each other so that a ring crosses
 * each host boundary once (one inter-host hop in and one out per host), ordered by host index and
 * then by rank. Even channels go one way round, odd channels the other way, so that with two or
 * more channels both directions of every link carry traffic. */
#include <stdlib.h>

#include "topo/topo.h"

static int ring_cmp_host_rank(const void* pa, const void* pb, void* arg) {
  const int* hosts = arg;
  const int a = *(const int*)pa, b = *(const int*)pb;
  if (hosts[a] != hosts[b]) return hosts[a] < hosts[b] ? -1 : 1;
  return (a > b) - (a < b);
}

void topo_ring_order(int nranks, const int* hosts, int channel, int* order_out) {
  if (nranks <= 0) return;
  for (int i = 0; i < nranks; i++) order_out[i] = i;
  if (hosts != NULL) {
    qsort_r(order_out, (size_t)nranks, sizeof(int), ring_cmp_host_rank, (void*)hosts);
  }
  if (channel % 2 != 0) {
    for (int i = 0, j = nranks - 1; i < j; i++, j--) {
      const int t = order_out[i];
      order_out[i] = order_out[j];
      order_out[j] = t;
    }
  }
}
