/* The one table of NCCL_* parameters Baton reads: PARAM_ROW(id, name, type, default, doc).
 * Defaults are text (parsed for PARAM_INT). Adding a knob is one row here, nothing else.
 * Included with PARAM_ROW defined by the includer; no include guard on purpose. */
#ifndef PARAM_ROW
#define PARAM_ROW(id, name, type, def, doc) PARAM_ENUM_ROW(id, name, type, def, doc)
#define PARAM_ROW_LOCAL_DEFINE
#endif

/* Logging */
PARAM_ROW(DEBUG, "NCCL_DEBUG", PARAM_STR, NULL, "Log level: VERSION, WARN, INFO, ABORT or TRACE")
PARAM_ROW(DEBUG_SUBSYS, "NCCL_DEBUG_SUBSYS", PARAM_STR, "INIT,BOOTSTRAP,ENV",
          "Comma-separated subsystems logged at INFO (INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, "
          "ALLOC, CALL, PROXY, NVLS, BOOTSTRAP, REG, PROFILE, RAS, ALL); a leading ^ excludes")
PARAM_ROW(DEBUG_FILE, "NCCL_DEBUG_FILE", PARAM_STR, NULL,
          "Write log lines to this file instead of stdout; %h expands to the host name, %p to the pid")
PARAM_ROW(CONF_FILE, "NCCL_CONF_FILE", PARAM_STR, NULL,
          "A configuration file of NAME=VALUE lines, read instead of ~/.nccl.conf; /etc/nccl.conf "
          "is read after it (the environment wins, then the earlier file)")
PARAM_ROW(DEBUG_TIMESTAMP_LEVELS, "NCCL_DEBUG_TIMESTAMP_LEVELS", PARAM_STR, "WARN",
          "Log levels whose lines start with a wall-clock timestamp: a list of VERSION, WARN, "
          "INFO, ABORT, TRACE or ALL; a leading ^ selects every level but those")
PARAM_ROW(DEBUG_TIMESTAMP_FORMAT, "NCCL_DEBUG_TIMESTAMP_FORMAT", PARAM_STR, "[%F %T] ",
          "strftime format of that timestamp; %1f .. %9f print that many digits of the second's "
          "fraction, _ prints a space")
PARAM_ROW(WARN_ENABLE_DEBUG_INFO, "NCCL_WARN_ENABLE_DEBUG_INFO", PARAM_INT, "0",
          "1: the first WARN raises the log level to INFO, so what follows an error is logged")
PARAM_ROW(NVTX_DISABLE, "NCCL_NVTX_DISABLE", PARAM_INT, "0",
          "1: no NVTX ranges (each API call is otherwise a range in the \"NCCL\" domain with its "
          "arguments as payload, seen by Nsight Systems or any NVTX tool)")
PARAM_ROW(SET_THREAD_NAME, "NCCL_SET_THREAD_NAME", PARAM_INT, "1",
          "1: name Baton's threads (\"NCCL Proxy\", \"NCCL HostCh 3\", ...) for debuggers and top; "
          "0: leave the names alone (stock's default is 0)")

/* Bootstrap and sockets */
PARAM_ROW(COMM_ID, "NCCL_COMM_ID", PARAM_STR, NULL,
          "<host>:<port> of the bootstrap root; rank 0 starts the root there, no id exchange needed")
PARAM_ROW(SOCKET_IFNAME, "NCCL_SOCKET_IFNAME", PARAM_STR, NULL,
          "Interfaces to use: comma-separated prefixes, ^ to exclude, = for exact names")
PARAM_ROW(SOCKET_FAMILY, "NCCL_SOCKET_FAMILY", PARAM_STR, NULL, "Force AF_INET or AF_INET6")
PARAM_ROW(SOCKET_RETRY_CNT, "NCCL_SOCKET_RETRY_CNT", PARAM_INT, "34",
          "Connection attempts to a refused or unreachable peer before giving up")
PARAM_ROW(SOCKET_RETRY_SLEEP_MSEC, "NCCL_SOCKET_RETRY_SLEEP_MSEC", PARAM_INT, "100",
          "Milliseconds between connection attempts (grows linearly with the attempt)")
PARAM_ROW(BOOTSTRAP_TIMEOUT_MS, "NCCL_BOOTSTRAP_TIMEOUT_MS", PARAM_INT, "300000",
          "How long bootstrap waits for a peer before failing with an error naming it")
PARAM_ROW(HOSTID, "NCCL_HOSTID", PARAM_STR, NULL,
          "Override this process's host identity (lets one machine play several hosts)")

/* Communicators */
PARAM_ROW(COMM_BLOCKING, "NCCL_COMM_BLOCKING", PARAM_INT, "1",
          "Default for ncclConfig_t.blocking when the config leaves it undefined")
PARAM_ROW(RUNTIME_CONNECT, "NCCL_RUNTIME_CONNECT", PARAM_INT, "1",
          "Connect transports lazily on first use (1) or all at init (0)")
PARAM_ROW(LAUNCH_MODE, "NCCL_LAUNCH_MODE", PARAM_STR, "PARALLEL",
          "PARALLEL or GROUP. Baton launches a group's GPU communicators from the calling thread "
          "in posting order either way; GROUP's barrier between ranks driven by separate threads "
          "of one process is not built (an INFO line says so)")
PARAM_ROW(CHECKS_DISABLE, "NCCL_CHECKS_DISABLE", PARAM_INT, "0",
          "1: skip the argument checks that cost time per call (NCCL_CHECK_POINTERS' pointer "
          "queries); checks that keep memory safe (counts, types, ops, ranks) always run")
PARAM_ROW(CHECK_POINTERS, "NCCL_CHECK_POINTERS", PARAM_INT, "0",
          "1: check on every call that a GPU communicator's buffers are memory its device can "
          "access (a cudaPointerGetAttributes per buffer)")
PARAM_ROW(MIN_CTAS, "NCCL_MIN_CTAS", PARAM_INT, NULL,
          "Overrides ncclConfig_t.minCTAs: every operation uses at least this many channels (CUDA "
          "blocks); unset (the default) keeps the config's value")
PARAM_ROW(MAX_CTAS, "NCCL_MAX_CTAS", PARAM_INT, NULL,
          "Overrides ncclConfig_t.maxCTAs: a communicator has at most this many channels; unset "
          "(the default) keeps the config's value")
PARAM_ROW(MULTI_RANK_GPU_ENABLE, "NCCL_MULTI_RANK_GPU_ENABLE", PARAM_INT, "0",
          "1: several ranks of a communicator may share one GPU (threads or processes; stock "
          "2.30's experimental variable), for testing and sharing a GPU, not for speed; 0: refused")

/* Channels, buffers, algorithms */
PARAM_ROW(MIN_NCHANNELS, "NCCL_MIN_NCHANNELS", PARAM_INT, "1", "Minimum number of channels")
PARAM_ROW(MAX_NCHANNELS, "NCCL_MAX_NCHANNELS", PARAM_INT, "64", "Maximum number of channels")
PARAM_ROW(BUFFSIZE, "NCCL_BUFFSIZE", PARAM_INT, "4194304",
          "Bytes of the Simple protocol FIFO per connection (NCCL_STEPS slots)")
PARAM_ROW(LL_BUFFSIZE, "NCCL_LL_BUFFSIZE", PARAM_INT, "524288", "Bytes of the LL FIFO per connection")
PARAM_ROW(LL128_BUFFSIZE, "NCCL_LL128_BUFFSIZE", PARAM_INT, "4915200",
          "Bytes of the LL128 FIFO per connection")
PARAM_ROW(PIPE_STEP_COST_BYTES, "NCCL_BATON_PIPE_STEP_COST_BYTES", PARAM_INT, "49152",
          "Baton's own (stock has none): a pipeline step's fixed cost, in bytes a block could move "
          "meanwhile; a chain's or tree's chunk is sqrt(slice * cost / (hops - 1)) (collectives.h)")
PARAM_ROW(STAGE_BYTES, "NCCL_BATON_STAGE_BYTES", PARAM_INT, "8388608",
          "Baton's own (stock has none): bytes of each of the two halves of the staging buffer "
          "that the staged OneShot/TwoShot read from (device.h); 0: no staging, no staged "
          "algorithms")
PARAM_ROW(ALGO, "NCCL_ALGO", PARAM_STR, NULL,
          "Algorithms allowed: list of Ring, Tree and Baton's OneShot, TwoShot (direct: every rank "
          "to every rank, GPUs on one host); ^ excludes; per-collective form allreduce:tree")
PARAM_ROW(PROTO, "NCCL_PROTO", PARAM_STR, NULL,
          "Protocols allowed: list of Simple, LL, LL128; ^ excludes; per-collective form allowed")
PARAM_ROW(NTHREADS, "NCCL_NTHREADS", PARAM_INT, "0",
          "CUDA threads per block: 256 or 512 for every launch; 0: 512 for launches of "
          "collectives that only run Simple, 256 for the others (LL, LL128, point-to-point alone)")

/* Transports */
PARAM_ROW(P2P_DISABLE, "NCCL_P2P_DISABLE", PARAM_INT, "0", "Disable the P2P (CUDA IPC) transport")
PARAM_ROW(P2P_DIRECT_DISABLE, "NCCL_P2P_DIRECT_DISABLE", PARAM_INT, "0",
          "1: GPUs of one process never store into each other's user buffers (ring steps then "
          "deliver through the FIFOs): for buffers the other GPUs cannot reach")
PARAM_ROW(P2P_LEVEL, "NCCL_P2P_LEVEL", PARAM_STR, NULL,
          "Furthest path P2P may use: LOC, NVL, PIX, PXB, PHB, SYS")
PARAM_ROW(SHM_DISABLE, "NCCL_SHM_DISABLE", PARAM_INT, "0", "Disable the shared-memory transport")
PARAM_ROW(CUMEM_ENABLE, "NCCL_CUMEM_ENABLE", PARAM_INT, "1",
          "Use cuMem allocations (shared by file descriptor) instead of cudaMalloc + cudaIpc handles")
PARAM_ROW(NET, "NCCL_NET", PARAM_STR, NULL, "Force a network by name: Socket or IB")
PARAM_ROW(NET_PLUGIN, "NCCL_NET_PLUGIN", PARAM_STR, NULL,
          "External ncclNet plugin: a library name or suffix (libnccl-net-<name>.so); none disables")
PARAM_ROW(NSOCKS_PERTHREAD, "NCCL_NSOCKS_PERTHREAD", PARAM_INT, "1",
          "Sockets per helper thread in the socket network")
PARAM_ROW(SOCKET_NTHREADS, "NCCL_SOCKET_NTHREADS", PARAM_INT, "1",
          "Helper threads per connection in the socket network")

/* The IB verbs network (src/net/ib_*.c) and GPUDirect RDMA */
PARAM_ROW(IB_DISABLE, "NCCL_IB_DISABLE", PARAM_INT, "0", "Disable the IB verbs network")
PARAM_ROW(IB_HCA, "NCCL_IB_HCA", PARAM_STR, NULL,
          "RDMA devices and ports to use: comma-separated names, each with an optional :<port>; "
          "prefixes unless the list starts with =; a leading ^ excludes the listed ones")
PARAM_ROW(IB_GID_INDEX, "NCCL_IB_GID_INDEX", PARAM_INT, "-1",
          "GID table index for RoCE ports; -1 picks the RoCE v2 GID of the port's IP address "
          "(NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE, NCCL_IB_ROCE_VERSION_NUM)")
PARAM_ROW(IB_ADDR_FAMILY, "NCCL_IB_ADDR_FAMILY", PARAM_STR, "AF_INET",
          "Address family the automatic GID choice prefers: AF_INET or AF_INET6")
PARAM_ROW(IB_ADDR_RANGE, "NCCL_IB_ADDR_RANGE", PARAM_STR, NULL,
          "Only GIDs within this prefix (<address>/<bits>) are preferred by the automatic choice")
PARAM_ROW(IB_ROCE_VERSION_NUM, "NCCL_IB_ROCE_VERSION_NUM", PARAM_INT, "2",
          "RoCE version the automatic GID choice prefers (1 or 2)")
PARAM_ROW(IB_TIMEOUT, "NCCL_IB_TIMEOUT", PARAM_INT, "20",
          "QP ACK timeout exponent: 4.096 us x 2^value before a retry")
PARAM_ROW(IB_RETRY_CNT, "NCCL_IB_RETRY_CNT", PARAM_INT, "7",
          "QP retries before a send fails (with the timeout: how long a dead link takes to report)")
PARAM_ROW(IB_PKEY, "NCCL_IB_PKEY", PARAM_INT, "0", "Partition key index of the QPs")
PARAM_ROW(IB_SL, "NCCL_IB_SL", PARAM_INT, "0", "InfiniBand service level of the QPs")
PARAM_ROW(IB_TC, "NCCL_IB_TC", PARAM_INT, "-1",
          "Traffic class of the QPs (RoCE: DSCP and ECN bits); -1: the communicator's "
          "ncclConfig_t.trafficClass, else 0")
PARAM_ROW(IB_QPS_PER_CONNECTION, "NCCL_IB_QPS_PER_CONNECTION", PARAM_INT, "1",
          "Queue pairs per connection (1 to 32); messages take turns, or are striped with "
          "NCCL_IB_SPLIT_DATA_ON_QPS")
PARAM_ROW(IB_SPLIT_DATA_ON_QPS, "NCCL_IB_SPLIT_DATA_ON_QPS", PARAM_INT, "0",
          "1: cut every message over all the connection's QPs; 0: each message on the next QP")
PARAM_ROW(IB_ADAPTIVE_ROUTING, "NCCL_IB_ADAPTIVE_ROUTING", PARAM_INT, "-2",
          "1: messages above NCCL_IB_AR_THRESHOLD go as a write then a 0-byte write with the "
          "completion (safe under adaptive routing); 0: one write; -2: 1 on InfiniBand, 0 on RoCE")
PARAM_ROW(IB_AR_THRESHOLD, "NCCL_IB_AR_THRESHOLD", PARAM_INT, "8192",
          "Bytes above which adaptive routing splits the completion from the data")
PARAM_ROW(IB_PCI_RELAXED_ORDERING, "NCCL_IB_PCI_RELAXED_ORDERING", PARAM_INT, "2",
          "Register memory with PCIe relaxed ordering: 0 off, 1 or 2 when rdma-core supports it")
PARAM_ROW(IB_MERGE_NICS, "NCCL_IB_MERGE_NICS", PARAM_INT, "1",
          "Offer the ports of one dual-port NIC (same PCI device) as one network device")
PARAM_ROW(NET_GDR_LEVEL, "NCCL_NET_GDR_LEVEL", PARAM_STR, NULL,
          "Furthest GPU-NIC path for GPUDirect RDMA: LOC, PIX, PXB (default), PHB, SYS, or 0-4")
PARAM_ROW(NET_GDR_READ, "NCCL_NET_GDR_READ", PARAM_INT, "-1",
          "GPUDirect RDMA for sends (the NIC reads GPU memory): 1 on, 0 off, -1 on from Ampere, "
          "else only when the GPU has an NVLink peer")
PARAM_ROW(DMABUF_ENABLE, "NCCL_DMABUF_ENABLE", PARAM_INT, "1",
          "Register GPU memory with the NIC through dma-buf when the kernel and driver support it "
          "(else the peer-memory module)")
PARAM_ROW(GDR_FLUSH_DISABLE, "NCCL_GDR_FLUSH_DISABLE", PARAM_INT, "0",
          "Skip the RDMA READ that makes GPUDirect receives visible to the GPU")
PARAM_ROW(NET_FORCE_FLUSH, "NCCL_NET_FORCE_FLUSH", PARAM_INT, "0",
          "Flush every network receive (also host memory with the IB network: tests the flush)")
PARAM_ROW(CROSS_NIC, "NCCL_CROSS_NIC", PARAM_INT, "2",
          "Between hosts, 0: both ends of a connection use the same NIC index (rail), even a far "
          "NIC; 1: each side its own (the ring layout's, else its closest); 2: the same rail when "
          "that NIC is among the sender's closest, else its own. Rings and trees are laid out so "
          "that their hops stay on one rail where they can (src/topo/rails.c)")
PARAM_ROW(PXN_DISABLE, "NCCL_PXN_DISABLE", PARAM_INT, "0",
          "1: never send through a peer GPU's NIC (PXN); a GPU reaches a NIC beyond its PCIe "
          "switches over the CPU. 0: a send through a NIC the GPU reaches only through the CPU "
          "goes over NVLink to a GPU beside that NIC, whose memory the NIC reads (src/topo/pxn.c)")
PARAM_ROW(P2P_PXN_LEVEL, "NCCL_P2P_PXN_LEVEL", PARAM_INT, "2",
          "Point-to-point sends from a GPU that is not its channel's ring end between hosts: 0 "
          "leave through the GPU's own closest NIC; 1 take the receiver's NIC (rail) through a "
          "peer GPU only when the GPU's own NICs are beyond its PCIe switches; 2 take the "
          "receiver's rail through a peer GPU whenever that NIC needs one (rail-aligned traffic)")

/* Topology */

/* Plugins: a library name, a path, or a suffix (libnccl-<kind>-<suffix>.so); none disables */
PARAM_ROW(ENV_PLUGIN, "NCCL_ENV_PLUGIN", PARAM_STR, NULL,
          "Environment plugin (ncclEnvPlugin_v2, _v1): Baton reads every NCCL_* variable through its "
          "getEnv; itself read from the process environment. Default: libnccl-env.so if present")

PARAM_ROW(TUNER_PLUGIN, "NCCL_TUNER_PLUGIN", PARAM_STR, NULL,
          "Tuner plugin (ncclTunerPlugin_v6 .. _v2): sees the cost table of every collective and "
          "may pick algorithm, protocol and channels. Default: libnccl-tuner.so, else the net "
          "plugin's library")
PARAM_ROW(PROFILER_PLUGIN, "NCCL_PROFILER_PLUGIN", PARAM_STR, NULL,
          "Profiler plugin (ncclProfiler_v7 .. _v1): group, collective, point-to-point and API "
          "events, kernel launches, and channel events on the host executor. Default: "
          "libnccl-profiler.so, else the net plugin's library")

/* Topology */
PARAM_ROW(TOPO_FILE, "NCCL_TOPO_FILE", PARAM_STR, NULL,
          "Load the system topology from this XML file (stock NCCL's format; GPUs it lists, or "
          "places, are taken from it, the others detected)")
PARAM_ROW(TOPO_DUMP_FILE, "NCCL_TOPO_DUMP_FILE", PARAM_STR, NULL,
          "Write the detected topology as XML in stock NCCL's format (stock can load it)")
PARAM_ROW(TOPO_DUMP_FILE_RANK, "NCCL_TOPO_DUMP_FILE_RANK", PARAM_INT, "0",
          "The rank that writes NCCL_TOPO_DUMP_FILE")
PARAM_ROW(GRAPH_DUMP_FILE, "NCCL_GRAPH_DUMP_FILE", PARAM_STR, NULL,
          "Write the channels' rings and trees of rank NCCL_GRAPH_DUMP_FILE_RANK's host, with the "
          "NIC each enters and leaves the host through, as stock's graph XML")
PARAM_ROW(GRAPH_DUMP_FILE_RANK, "NCCL_GRAPH_DUMP_FILE_RANK", PARAM_INT, "0",
          "The rank that writes NCCL_GRAPH_DUMP_FILE")
PARAM_ROW(IGNORE_CPU_AFFINITY, "NCCL_IGNORE_CPU_AFFINITY", PARAM_INT, "0",
          "1: bind host threads to the GPU's local CPUs even outside the process's CPU mask; 0: "
          "only to the part of the GPU's CPUs the mask allows")

/* Hang reports, RAS, timeline (src/observe/ras.c, hang.c, trace.c) */
PARAM_ROW(RAS_ENABLE, "NCCL_RAS_ENABLE", PARAM_INT, "1",
          "The RAS side channel: a service thread per process that answers baton-ras / ncclras "
          "clients, carries hang-report queries and tells survivors when a rank's process died")
PARAM_ROW(RAS_ADDR, "NCCL_RAS_ADDR", PARAM_STR, "localhost:28028",
          "<host>:<port> where one process of the job serves RAS clients (baton-ras); if another "
          "process holds it, this one does not serve")
PARAM_ROW(RAS_TIMEOUT_FACTOR, "NCCL_RAS_TIMEOUT_FACTOR", PARAM_INT, "1",
          "Multiplies the RAS side channel's timeouts: how long a report or baton-ras waits for "
          "the other processes (3 s), and the grace before a call that waits on a dead rank fails "
          "(2 s)")
PARAM_ROW(HANG_REPORT_SEC, "NCCL_BATON_HANG_REPORT_SEC", PARAM_INT, "60",
          "Baton's own: a call in flight this long makes the waiting rank WARN who and where the "
          "job is stuck (repeated at most every 5 minutes), on stderr when NCCL_DEBUG does not "
          "log WARN lines; 0 turns reports off. Nothing aborts")
PARAM_ROW(TRACE_FILE, "NCCL_BATON_TRACE_FILE", PARAM_STR, NULL,
          "Baton's own: write a Chrome/Perfetto trace-event timeline per process to this file "
          "(%h host, %p pid) at destroy, abort and SIGUSR1")
PARAM_ROW(TRACE_EVENTS, "NCCL_BATON_TRACE_EVENTS", PARAM_INT, "65536",
          "Baton's own: the timeline keeps the last this many events (about 80 bytes each)")

#ifdef PARAM_ROW_LOCAL_DEFINE
#undef PARAM_ROW
#undef PARAM_ROW_LOCAL_DEFINE
#endif
