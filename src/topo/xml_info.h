/* Private to src/topo's XML files (xml_read.c, xml_write.c) and gpu.c: what a topology file says
 * beyond the GPUs Baton models (topo_gpu_t), kept so a dump writes it back and stock NCCL can
 * load Baton's dumps: the attributes of each <cpu> and <pci> element (arch, vendor, class, link
 * speed...), and the NICs with their <net> elements. The writer fills what is missing from this
 * machine (/proc/cpuinfo, sysfs), then from defaults stock accepts.
 *
 * The format is stock NCCL's (its NCCL_TOPO_DUMP_FILE output, version 1):
 *
 *   <system version="1">
 *     <cpu numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel"
 *          familyid="6" modelid="143">                      a NUMA node; affinity is a cpumask
 *       <pci busid="0000:16:00.0" class="0x060400" ... link_speed="32.0 GT/s PCIe"
 *            link_width="16">                                a PCI bridge (switch port)
 *         <pci busid="0000:18:00.0" class="0x030200" ...>    the GPU's own PCI function
 *           <gpu dev="0" sm="90" rank="0" gdr="1">
 *             <nvlink target="0000:07:00.0" count="5" tclass="0x068000"/>   to an NVSwitch
 *             <nvlink target="0000:2a:00.0" count="4" tclass="0x030200"/>   to another GPU
 *           </gpu>
 *         </pci>
 *         <pci busid="0000:19:00.0" class="0x020000" ...>    a NIC's PCI function
 *           <nic><net name="mlx5_0" dev="0" speed="400000" port="1" guid="0x..." .../></nic>
 *         </pci>
 *       </pci>
 *     </cpu>
 *   </system>
 *
 * Read as well: a <pci> of class 0x03.... without <gpu> (cloud images' files give only where a
 * GPU sits: the rest is detected), a <nic> directly in a <cpu>, and Baton's earlier form (<gpu
 * busid=".." nvswitch="N"> under any <cpu>/<pci>, affinity as a CPU list). Unknown attributes
 * and elements (newer stock versions add some) are skipped with an INFO line; malformed XML and
 * bad values of the attributes Baton uses are errors naming the line. */
#ifndef BATON_TOPO_XML_INFO_H
#define BATON_TOPO_XML_INFO_H

#include "topo/topo_sys.h"

#define TOPO_XML_TYPE_CPU 0
#define TOPO_XML_TYPE_PCI 1

/* One <cpu> or <pci> element's attributes other than its key (numaid, busid), as written:
 * ` name="value"` pairs, escaped. */
typedef struct topo_xml_elem {
  int type;       /* TOPO_XML_TYPE_* */
  int numa;       /* cpu: numaid */
  int64_t bus_id; /* pci: busid */
  char* attrs;    /* owned */
} topo_xml_elem_t;

/* A NIC: where it sits and its <net> elements, as written. */
typedef struct topo_xml_nic {
  int numa;                         /* the <cpu> around it */
  char cpus[TOPO_CPUS_MAX];         /* that cpu's affinity as a CPU list ("" unknown) */
  char pci_path[TOPO_PCI_PATH_MAX]; /* bridges above its own <pci> */
  int64_t bus_id;                   /* its own <pci>, -1 when <nic> sits in the <cpu> */
  char* nets;                       /* owned: the <net .../> elements, one per line */
} topo_xml_nic_t;

struct topo_xml_info {
  topo_xml_elem_t* elems;
  int nelems, elems_cap;
  topo_xml_nic_t* nics;
  int nnics, nics_cap;
};

/* The stored attributes of an element, NULL when the file gave none. */
const char* topo_xml_attrs(const topo_xml_info_t* info, int type, int numa, int64_t bus_id);
void topo_xml_info_free(topo_xml_info_t* info);

/* Writes an attribute value escaped (&amp; &lt; &quot;, and &#N; for control characters). */
void topo_xml_escape(FILE* f, const char* value);

/* CPU lists ("0-31,64-95") and stock's cpumasks ("ffffffff,00000000,ffffffff", 32-bit groups,
 * most significant first). False when text is not one (out untouched). */
bool topo_cpus_mask_to_list(const char* mask, char* out, size_t len);
bool topo_cpus_list_to_mask(const char* list, char* out, size_t len);

#endif /* BATON_TOPO_XML_INFO_H */
