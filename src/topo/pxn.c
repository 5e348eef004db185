/* PXN: reaching a far NIC through a peer GPU over NVLink (pure, no I/O but parameters).
 *
 * A GPU whose path to a NIC crosses the CPU (PHB: its host bridge, SYS: the other socket) can
 * send through that NIC more directly by handing its data over NVLink to a GPU that sits beside
 * the NIC (under the same PCIe switch, or switches short of the host bridge: PIX or PXB), whose
 * memory the NIC then reads: GPU -> NVLink -> peer GPU -> its PCIe switch -> NIC. Only sends are
 * relayed (a receive lands in the GPU's own memory, as stock's PXN). The relay is a function of
 * the host's topology alone, so the NET transport (the NIC and the buffer of a connection), the
 * simulator (the links a flow crosses) and the logs all name the same GPU. */
#include "topo/topo.h"

/* The relay's paths: to the NIC at most PXB, to the sender NVLink. */
#define PXN_NIC_PATH_MAX TOPO_PATH_PXB

bool topo_pxn_enabled(void) {
  return param_int(PARAM_PXN_DISABLE) == 0;
}

int topo_p2p_pxn_level(void) {
  long long v = (long long)param_int(PARAM_P2P_PXN_LEVEL);
  return v < 0 ? 0 : v > 2 ? 2 : (int)v;
}

int topo_nic_relay(const topo_system_t* sys, int64_t gpu_bus, int nic) {
  if (sys == NULL || nic < 0 || nic >= sys->nnics) return -1;
  int g = topo_system_gpu(sys, gpu_bus);
  if (g < 0) return -1;
  const topo_nic_t* n = &sys->nics[nic];
  topo_path_t mine = topo_gpu_nic_path(&sys->gpus[g], n);
  if (mine <= PXN_NIC_PATH_MAX) return -1; /* near enough: its own PCIe */
  topo_path_t best = TOPO_PATH_COUNT;
  int count = 0;
  for (int pass = 0; pass < 2; pass++) { /* the best path among NVLink peers, then pick one */
    int seen = 0;
    for (int p = 0; p < sys->ngpus; p++) {
      if (p == g || sys->paths[(size_t)g * sys->ngpus + p] != TOPO_PATH_NVL) continue;
      topo_path_t path = topo_gpu_nic_path(&sys->gpus[p], n);
      if (path > PXN_NIC_PATH_MAX) continue;
      if (pass == 0) {
        if (path < best) {
          best = path;
          count = 0;
        }
        if (path == best) count++;
      } else if (path == best && seen++ == g % count) {
        return p; /* GPUs sharing one relay's NIC take turns by their index */
      }
    }
    if (count == 0) return -1;
  }
  return -1;
}
