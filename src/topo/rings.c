/* Ring orders: pure functions, no I/O.
 *
 * A ring visits every rank once. Ranks of one host sit next to each other so that a ring crosses
 * each host boundary once (one inter-host hop in and one out per host), ordered by host index and
 * then by rank.
 *
 * Direction: where GPUs are joined by links of their own (NVLink bridges, no switch), a ring in one
 * direction uses only one direction of each link, so odd channels go the other way round
 * (both_ways). Everywhere else (an NVSwitch, PCIe, the network) a GPU's links carry its traffic in
 * and out whatever the direction, and one direction for every channel is better: in a chain
 * collective (Reduce, Broadcast) each rank then sits at the same position on every channel, so a
 * rank early in the chain finishes its part of an operation and starts the next while the last
 * rank drains. With the directions mixed every rank is late on half the channels and back-to-back
 * operations cannot overlap (run 38 in docs/gpu-results.md). */
#include <stdlib.h>

#include "topo/topo.h"

static int ring_cmp_host_rank(const void* pa, const void* pb, void* arg) {
  const int* hosts = arg;
  const int a = *(const int*)pa, b = *(const int*)pb;
  if (hosts[a] != hosts[b]) return hosts[a] < hosts[b] ? -1 : 1;
  return (a > b) - (a < b);
}

void topo_ring_order(int nranks, const int* hosts, int channel, bool both_ways, int* order_out) {
  if (nranks <= 0) return;
  for (int i = 0; i < nranks; i++) order_out[i] = i;
  if (hosts != NULL) {
    qsort_r(order_out, (size_t)nranks, sizeof(int), ring_cmp_host_rank, (void*)hosts);
  }
  if (both_ways && channel % 2 != 0) {
    for (int i = 0, j = nranks - 1; i < j; i++, j--) {
      const int t = order_out[i];
      order_out[i] = order_out[j];
      order_out[j] = t;
    }
  }
}
