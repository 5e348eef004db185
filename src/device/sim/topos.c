/* Built-in node topologies, written as stock NCCL's topology XML (the format of
 * NCCL_TOPO_DUMP_FILE, xml_info.h) so that baton-sim reads them with the same reader a real run
 * uses for NCCL_TOPO_FILE. Bus ids, switch layouts and NIC placement follow the machines they are
 * named after (an HGX board: each GPU shares a PCIe switch with a NIC; the device machines of
 * docs/gpu-results.md: a VM whose GPUs sit on the root bus); link speeds are the parts' nominal
 * ones (PCIe Gen5 32 GT/s x16, ConnectX-7 400 Gb/s).
 *
 *   h200x8                  8x H200 SXM, 18 NVLinks each to 4 NVSwitches, 8 NICs, 2 sockets
 *   h100x8-nvswitch-8nic    8x H100 SXM, likewise
 *   h200x4, h200x2          4 and 2 H200 of an HGX board in a VM (the device machines): NV18
 *                           through NVSwitches, GPUs on the root bus, no NIC
 *   h100x4, h100x2          the same with H100 SXM 80GB (nvidia-h100-x4 / -x2: NV18 between every
 *                           pair in nvidia-smi topo, GPUs on the root bus, one NUMA node, no NIC)
 *   pcie4x4                 4 PCIe GPUs (sm 80), two under each of two Gen4 switches on one
 *                           socket, no NVLink, one 200 Gb/s NIC under the first switch
 * A NIC count other than the board's puts the NICs under the switches of GPUs 0, 8/n, 2*8/n...
 * (spread evenly), or none. */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "device/sim/sim.h"

const char* const sim_topo_names[] = {
    "h200x8", "h100x8-nvswitch-8nic", "h200x4", "h200x2", "h100x4", "h100x2", "pcie4x4", NULL};

typedef struct topo_spec {
  const char* name;
  const char* about;
  int ngpus;
  int sockets;
  int sm;
  const char* gpu_device; /* PCI device id */
  int nvswitch_links;     /* 0: none */
  bool root_bus;          /* GPUs directly on the root bus (a VM), no switches */
  int gpus_per_switch;    /* PCIe switch fan-out (with NICs under it) */
  const char* link_speed; /* of GPUs, NICs and switches */
  int nics;               /* the board's own NIC count */
  int nic_mbps;
} topo_spec_t;

static const topo_spec_t specs[] = {
    {.name = "h200x8",
     .about = "8x H200 SXM (NV18 through 4 NVSwitches), 8x 400 Gb/s NICs, 2 sockets",
     .ngpus = 8,
     .sockets = 2,
     .sm = 90,
     .gpu_device = "0x2335",
     .nvswitch_links = 18,
     .gpus_per_switch = 1,
     .link_speed = "32.0 GT/s PCIe",
     .nics = 8,
     .nic_mbps = 400000},
    {.name = "h100x8-nvswitch-8nic",
     .about = "8x H100 SXM (NV18 through 4 NVSwitches), 8x 400 Gb/s NICs, 2 sockets",
     .ngpus = 8,
     .sockets = 2,
     .sm = 90,
     .gpu_device = "0x2330",
     .nvswitch_links = 18,
     .gpus_per_switch = 1,
     .link_speed = "32.0 GT/s PCIe",
     .nics = 8,
     .nic_mbps = 400000},
    {.name = "h200x4",
     .about = "4x H200 of an HGX board in a VM (NV18, GPUs on the root bus), no NIC",
     .ngpus = 4,
     .sockets = 1,
     .sm = 90,
     .gpu_device = "0x2335",
     .nvswitch_links = 18,
     .root_bus = true,
     .link_speed = "32.0 GT/s PCIe",
     .nics = 0},
    {.name = "h200x2",
     .about = "2x H200 of an HGX board in a VM (NV18, GPUs on the root bus), no NIC",
     .ngpus = 2,
     .sockets = 1,
     .sm = 90,
     .gpu_device = "0x2335",
     .nvswitch_links = 18,
     .root_bus = true,
     .link_speed = "32.0 GT/s PCIe",
     .nics = 0},
    {.name = "h100x4",
     .about = "4x H100 SXM of an HGX board in a VM (NV18, GPUs on the root bus), no NIC",
     .ngpus = 4,
     .sockets = 1,
     .sm = 90,
     .gpu_device = "0x2330",
     .nvswitch_links = 18,
     .root_bus = true,
     .link_speed = "32.0 GT/s PCIe",
     .nics = 0},
    {.name = "h100x2",
     .about = "2x H100 SXM of an HGX board in a VM (NV18, GPUs on the root bus), no NIC",
     .ngpus = 2,
     .sockets = 1,
     .sm = 90,
     .gpu_device = "0x2330",
     .nvswitch_links = 18,
     .root_bus = true,
     .link_speed = "32.0 GT/s PCIe",
     .nics = 0},
    {.name = "pcie4x4",
     .about = "4 PCIe Gen4 GPUs (sm 80), 2 per switch, no NVLink, 1x 200 Gb/s NIC",
     .ngpus = 4,
     .sockets = 1,
     .sm = 80,
     .gpu_device = "0x20f1",
     .gpus_per_switch = 2,
     .link_speed = "16.0 GT/s PCIe",
     .nics = 1,
     .nic_mbps = 200000},
};
#define NSPECS ((int)(sizeof(specs) / sizeof(specs[0])))

static const topo_spec_t* spec_find(const char* name) {
  for (int i = 0; i < NSPECS && name != NULL; i++)
    if (strcasecmp(specs[i].name, name) == 0) return &specs[i];
  return NULL;
}

const char* sim_topo_about(const char* name) {
  const topo_spec_t* s = spec_find(name);
  return s != NULL ? s->about : NULL;
}

/* Bus ids: GPU g at 0x18 + 0x12 * (g % 4) + 0x80 * (g / 4) on an HGX board (two sockets of four
 * switches), 0000:00:06.0 + g in a VM. Its switch one bus below, its NIC one above. */
static int gpu_bus(const topo_spec_t* s, int g) {
  return s->root_bus ? 0 : 0x18 + 0x12 * (g % 4) + 0x80 * (g / 4);
}

static void write_gpu(FILE* f, const topo_spec_t* s, int g, const char* indent) {
  if (s->root_bus)
    fprintf(f, "%s<pci busid=\"0000:00:%02x.0\"", indent, 6 + g);
  else
    fprintf(f, "%s<pci busid=\"0000:%02x:00.0\"", indent, gpu_bus(s, g));
  fprintf(f,
          " class=\"0x030200\" vendor=\"0x10de\" device=\"%s\" subsystem_vendor=\"0x10de\" "
          "subsystem_device=\"0x16c1\" link_speed=\"%s\" link_width=\"16\">\n",
          s->gpu_device, s->link_speed);
  fprintf(f, "%s  <gpu dev=\"%d\" sm=\"%d\" rank=\"%d\" gdr=\"1\">\n", indent, g, s->sm, g);
  /* 18 links spread over 4 NVSwitches as on the boards: 5, 5, 4, 4. */
  static const int per_switch[4] = {5, 5, 4, 4};
  for (int k = 0; k < 4 && s->nvswitch_links > 0; k++)
    fprintf(f, "%s    <nvlink target=\"0000:%02x:00.0\" count=\"%d\" tclass=\"0x068000\"/>\n",
            indent, 0xf3 + k, per_switch[k] * s->nvswitch_links / 18);
  fprintf(f, "%s  </gpu>\n%s</pci>\n", indent, indent);
}

static void write_nic(FILE* f, const topo_spec_t* s, int bus, int index, const char* indent) {
  fprintf(f,
          "%s<pci busid=\"0000:%02x:00.0\" class=\"0x020000\" vendor=\"0x15b3\" "
          "device=\"0x1021\" subsystem_vendor=\"0x15b3\" subsystem_device=\"0x0041\" "
          "link_speed=\"%s\" link_width=\"16\">\n",
          indent, bus, s->link_speed);
  fprintf(f,
          "%s  <nic>\n%s    <net name=\"mlx5_%d\" dev=\"%d\" speed=\"%d\" port=\"1\" "
          "latency=\"0.000000\" guid=\"0x%x\" maxconn=\"131072\" gdr=\"1\"/>\n%s  </nic>\n"
          "%s</pci>\n",
          indent, indent, index, index, s->nic_mbps, 0x1000 + index, indent, indent);
}

ncclResult_t sim_topo_builtin(const char* name, int nics, char** xml_out) {
  const topo_spec_t* s = spec_find(name);
  if (s == NULL) {
    WARN(
        "sim: no built-in topology named %s (built in: h200x8, h100x8-nvswitch-8nic, h200x4, "
        "h200x2, h100x4, h100x2, pcie4x4; or give a topology file)",
        name ? name : "(null)");
    return ncclInvalidArgument;
  }
  if (nics <= 0) nics = s->nics;
  if (nics > s->ngpus) {
    WARN("sim: %s has %d GPUs; at most one NIC per GPU is modelled (asked for %d)", s->name,
         s->ngpus, nics);
    return ncclInvalidArgument;
  }
  if (s->root_bus && nics > 0) {
    WARN("sim: %s is one VM without a network; it takes no NIC", s->name);
    return ncclInvalidArgument;
  }
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == NULL) {
    WARN("sim: open_memstream failed: %s", strerror(errno));
    return ncclSystemError;
  }
  fprintf(f, "<system version=\"1\">\n");
  int per_socket = s->ngpus / s->sockets;
  int nic_every = nics > 0 ? s->ngpus / nics : 0, nic_index = 0;
  for (int sock = 0; sock < s->sockets; sock++) {
    fprintf(f,
            "  <cpu numaid=\"%d\" affinity=\"%s\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
            "familyid=\"6\" modelid=\"143\">\n",
            sock,
            s->sockets == 1 ? "ffffffff"
            : sock == 0     ? "0000ffff"
                            : "ffff0000");
    if (s->root_bus) {
      for (int g = sock * per_socket; g < (sock + 1) * per_socket; g++) write_gpu(f, s, g, "    ");
    } else {
      int per = s->gpus_per_switch;
      for (int g0 = sock * per_socket; g0 < (sock + 1) * per_socket; g0 += per) {
        int sw = gpu_bus(s, g0) - 2;
        fprintf(f,
                "    <pci busid=\"0000:%02x:00.0\" class=\"0x060400\" vendor=\"0x1000\" "
                "device=\"0xc030\" subsystem_vendor=\"0x1000\" subsystem_device=\"0x100b\" "
                "link_speed=\"%s\" link_width=\"16\">\n",
                sw, s->link_speed);
        for (int g = g0; g < g0 + per; g++) {
          if (nic_every > 0 && g % nic_every == 0 && nic_index < nics)
            write_nic(f, s, gpu_bus(s, g) - 1, nic_index++, "      ");
          write_gpu(f, s, g, "      ");
        }
        fprintf(f, "    </pci>\n");
      }
    }
    fprintf(f, "  </cpu>\n");
  }
  fprintf(f, "</system>\n");
  if (fclose(f) != 0 || text == NULL) {
    free(text);
    WARN("sim: could not write the %s topology", s->name);
    return ncclSystemError;
  }
  *xml_out = text;
  return ncclSuccess;
}
