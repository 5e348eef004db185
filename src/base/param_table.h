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
PARAM_ROW(ALGO, "NCCL_ALGO", PARAM_STR, NULL,
          "Algorithms allowed: list of Ring, Tree and Baton's OneShot, TwoShot (direct: every rank "
          "to every rank, GPUs on one host); ^ excludes; per-collective form allreduce:tree")
PARAM_ROW(PROTO, "NCCL_PROTO", PARAM_STR, NULL,
          "Protocols allowed: list of Simple, LL, LL128; ^ excludes; per-collective form allowed")
PARAM_ROW(NTHREADS, "NCCL_NTHREADS", PARAM_INT, "0",
          "CUDA threads per block: 256 or 512 for every launch; 0: 512 for launches that only run "
          "Simple, 256 for the others")

/* Transports */
PARAM_ROW(P2P_DISABLE, "NCCL_P2P_DISABLE", PARAM_INT, "0", "Disable the P2P (CUDA IPC) transport")
PARAM_ROW(P2P_LEVEL, "NCCL_P2P_LEVEL", PARAM_STR, NULL,
          "Furthest path P2P may use: LOC, NVL, PIX, PXB, PHB, SYS")
PARAM_ROW(SHM_DISABLE, "NCCL_SHM_DISABLE", PARAM_INT, "0", "Disable the shared-memory transport")
PARAM_ROW(CUMEM_ENABLE, "NCCL_CUMEM_ENABLE", PARAM_INT, "1",
          "Use cuMem allocations (shared by file descriptor) instead of cudaMalloc + cudaIpc handles")
PARAM_ROW(NVLS_ENABLE, "NCCL_NVLS_ENABLE", PARAM_INT, "0",
          "NVLink SHARP / multicast. Baton never uses multicast; any value is accepted and ignored")
PARAM_ROW(NET, "NCCL_NET", PARAM_STR, NULL, "Force a network by name: Socket or IB")
PARAM_ROW(NET_PLUGIN, "NCCL_NET_PLUGIN", PARAM_STR, NULL,
          "External ncclNet plugin: a library name or suffix (libnccl-net-<name>.so); none disables")
PARAM_ROW(NSOCKS_PERTHREAD, "NCCL_NSOCKS_PERTHREAD", PARAM_INT, "1",
          "Sockets per helper thread in the socket network")
PARAM_ROW(SOCKET_NTHREADS, "NCCL_SOCKET_NTHREADS", PARAM_INT, "1",
          "Helper threads per connection in the socket network")
PARAM_ROW(IB_DISABLE, "NCCL_IB_DISABLE", PARAM_INT, "0", "Disable the IB verbs network")
PARAM_ROW(IB_HCA, "NCCL_IB_HCA", PARAM_STR, NULL, "IB devices (and ports) to use: prefixes, ^ excludes")

/* Topology */
PARAM_ROW(TOPO_FILE, "NCCL_TOPO_FILE", PARAM_STR, NULL, "Load the system topology from this XML file")
PARAM_ROW(TOPO_DUMP_FILE, "NCCL_TOPO_DUMP_FILE", PARAM_STR, NULL, "Write the detected topology as XML")

#ifdef PARAM_ROW_LOCAL_DEFINE
#undef PARAM_ROW
#undef PARAM_ROW_LOCAL_DEFINE
#endif
