/* GPU test of the P2P transport (src/transport/p2p.c) and the topology detection it relies on.
 * Two ranks on GPUs 0 and 1 (or both on GPU 0 when only one is visible) connect through
 * transport_connect on two channels, both directions, in three ways:
 *   processes, NCCL_CUMEM_ENABLE=1  -> "P2P/CUMEM"  (cuMem + descriptor passing)
 *   processes, NCCL_CUMEM_ENABLE=0  -> "P2P/IPC"    (cudaMalloc + cudaIpc handles)
 *   threads of one process          -> "P2P/direct pointer" (cuMem access grant, then
 *                                      cudaMalloc + peer access with NCCL_CUMEM_ENABLE=0)
 * Each sender writes a pattern into the receiver's Simple, LL and LL128 buffers and sizes[] and
 * publishes tail through its own mapping (cudaMemcpy from its device context); the receiver reads
 * them from its own memory and publishes head, which the sender reads back through the mapping.
 * Then everything is freed (twice over: a second connect/free round) and the device memory in use
 * must be back where it started. Every wait is bounded (alarm).
 *
 * Build: cmake -DBATON_GPU_TESTS=ON (tests/gpu/CMakeLists.txt), or by hand:
 *   gcc -std=gnu11 -D_GNU_SOURCE -Iinclude -Isrc -I/usr/local/cuda/include \
 *       tests/gpu/test_p2p_transport.c build/libnccl_static.a \
 *       -L/usr/local/cuda/lib64 -lcudart_static -lstdc++ -lpthread -ldl -lrt -lm -o
 * test_p2p_transport Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,GRAPH to see the
 * connection lines. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "transport/transport.h"

#define NCH 2
#define SIMPLE_BYTES (1 << 20)
#define LL_BYTES (64 << 10)

static int g_checks, g_failures;
#define EXPECT(cond)                                                               \
  do {                                                                             \
    __atomic_add_fetch(&g_checks, 1, __ATOMIC_RELAXED);                            \
    if (!(cond)) {                                                                 \
      __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);                        \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              log_last_error());                                                   \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

typedef struct rank_arg {
  bootstrap_handle_t handle;
  int idx;
  int dev;
  const char* want_desc;
} rank_arg_t;

static uint32_t pattern(int ch, int from, size_t i, int proto) {
  return (uint32_t)(0x9e3779b9u * (uint32_t)(i + 1) ^ (uint32_t)(ch * 131 + from * 7 + proto * 3));
}

static int64_t bus_of(int dev) {
  char text[32];
  if (cudaDeviceGetPCIBusId(text, sizeof(text), dev) != cudaSuccess) return -1;
  for (char* p = text; *p; p++) *p = (char)((*p >= 'A' && *p <= 'F') ? *p - 'A' + 'a' : *p);
  return topo_busid_parse(text);
}

static size_t used_bytes(void) {
  size_t free_b = 0, total = 0;
  cudaMemGetInfo(&free_b, &total);
  return total - free_b;
}

/* Sender side of one connection: fill every protocol's first slot, sizes[0], tail = 1. */
static int send_side(conn_t* c, int me) {
  conn_fifo_t* f = &c->fifo;
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (f->buffs[p] == NULL) continue;
    size_t n = (size_t)f->buff_bytes[p] / NCCL_STEPS / sizeof(uint32_t);
    uint32_t* host = malloc(n * sizeof(uint32_t));
    EXPECT(host != NULL);
    for (size_t i = 0; i < n; i++) host[i] = pattern(c->channel, me, i, p);
    EXPECT(cudaMemcpy(f->buffs[p], host, n * sizeof(uint32_t), cudaMemcpyHostToDevice) ==
           cudaSuccess);
    free(host);
  }
  int size = 4242 + c->channel;
  uint64_t tail = 1;
  EXPECT(cudaMemcpy((void*)f->sizes, &size, sizeof(size), cudaMemcpyHostToDevice) == cudaSuccess);
  EXPECT(cudaMemcpy((void*)f->tail, &tail, sizeof(tail), cudaMemcpyHostToDevice) == cudaSuccess);
  EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  return 0;
}

static int recv_side(conn_t* c, int from) {
  conn_fifo_t* f = &c->fifo;
  uint64_t tail = 0, head = 1;
  int size = 0;
  EXPECT(cudaMemcpy(&tail, (const void*)f->tail, sizeof(tail), cudaMemcpyDeviceToHost) ==
         cudaSuccess);
  EXPECT(tail == 1);
  EXPECT(cudaMemcpy(&size, (const void*)f->sizes, sizeof(size), cudaMemcpyDeviceToHost) ==
         cudaSuccess);
  EXPECT(size == 4242 + c->channel);
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (f->buffs[p] == NULL) continue;
    size_t slot = (size_t)f->buff_bytes[p] / NCCL_STEPS / sizeof(uint32_t);
    uint32_t* host = malloc(2 * slot * sizeof(uint32_t));
    EXPECT(host != NULL);
    EXPECT(cudaMemcpy(host, f->buffs[p], 2 * slot * sizeof(uint32_t), cudaMemcpyDeviceToHost) ==
           cudaSuccess);
    for (size_t i = 0; i < slot; i++) EXPECT(host[i] == pattern(c->channel, from, i, p));
    for (size_t i = slot; i < 2 * slot; i++) EXPECT(host[i] == 0); /* zeroed by the receiver */
    free(host);
  }
  EXPECT(cudaMemcpy((void*)f->head, &head, sizeof(head), cudaMemcpyHostToDevice) == cudaSuccess);
  EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  return 0;
}

static int one_round(bootstrap_t* b, transport_ctx_t* ctx, int me, int peer, const char* want) {
  conn_request_t reqs[2 * NCH];
  for (int c = 0; c < NCH; c++) {
    reqs[2 * c] = (conn_request_t){.channel = c, .peer = peer, .is_send = 1};
    reqs[2 * c + 1] = (conn_request_t){.channel = c, .peer = peer, .is_send = 0};
  }
  EXPECT(transport_connect(ctx, reqs, 2 * NCH) == ncclSuccess);
  for (int c = 0; c < NCH; c++) {
    for (int s = 0; s < 2; s++) {
      conn_t* conn = transport_conn(ctx, c, peer, s);
      EXPECT(conn != NULL);
      EXPECT(conn->transport == &transport_p2p_ops);
      EXPECT(strcmp(conn->desc, want) == 0);
      EXPECT(conn->fifo.buffs[PROTO_LL128] != NULL);
    }
  }
  for (int c = 0; c < NCH; c++) EXPECT(send_side(transport_conn(ctx, c, peer, 1), me) == 0);
  EXPECT(bootstrap_barrier(b, 0x7e570001) == ncclSuccess);
  for (int c = 0; c < NCH; c++) EXPECT(recv_side(transport_conn(ctx, c, peer, 0), peer) == 0);
  EXPECT(bootstrap_barrier(b, 0x7e570002) == ncclSuccess);
  for (int c = 0; c < NCH; c++) {
    uint64_t head = 0;
    conn_t* conn = transport_conn(ctx, c, peer, 1);
    EXPECT(cudaMemcpy(&head, (const void*)conn->fifo.head, sizeof(head), cudaMemcpyDeviceToHost) ==
           cudaSuccess);
    EXPECT(head == 1);
  }
  EXPECT(bootstrap_barrier(b, 0x7e570003) == ncclSuccess);
  return 0;
}

static int rank_main(rank_arg_t* a) {
  bootstrap_t* b = NULL;
  volatile uint32_t abort_flag = 0;
  peer_info_t peers[2];
  struct stat st;
  EXPECT(cudaSetDevice(a->dev) == cudaSuccess);
  EXPECT(cudaFree(NULL) == cudaSuccess);
  EXPECT(bootstrap_init(&a->handle, 1, a->idx, 2, &abort_flag, &b) == ncclSuccess);
  EXPECT(stat("/dev/shm", &st) == 0);
  peers[a->idx] = (peer_info_t){.rank = a->idx,
                                .cuda_dev = a->dev,
                                .bus_id = bus_of(a->dev),
                                .host_hash = host_hash(),
                                .pid_hash = pid_hash(),
                                .shm_dev = (uint64_t)st.st_dev,
                                .pid = getpid()};
  EXPECT(peers[a->idx].bus_id >= 0);
  EXPECT(bootstrap_allgather(b, peers, sizeof(peer_info_t)) == ncclSuccess);
  size_t before = used_bytes(); /* every rank's context exists now */
  topo_system_t* sys = NULL;
  EXPECT(topo_system_detect(peers, 2, a->idx, &sys) == ncclSuccess);
  EXPECT(topo_system_nchannels(sys) >= (peers[0].bus_id == peers[1].bus_id ? 0 : 2));
  for (int round = 0; round < 2; round++) {
    transport_ctx_t ctx = {.rank = a->idx,
                           .nranks = 2,
                           .nchannels = NCH,
                           .peers = peers,
                           .bootstrap = b,
                           .abort_flag = &abort_flag,
                           .comm_hash = 0x1234,
                           .gpu_fifos = true,
                           .topo = sys};
    ctx.buff_bytes[PROTO_SIMPLE] = SIMPLE_BYTES;
    ctx.buff_bytes[PROTO_LL] = LL_BYTES;
    EXPECT(transport_ctx_init(&ctx) == ncclSuccess);
    int rc = one_round(b, &ctx, a->idx, 1 - a->idx, a->want_desc);
    EXPECT(transport_ctx_free(&ctx) == ncclSuccess);
    EXPECT(rc == 0);
    EXPECT(bootstrap_barrier(b, 0x7e570010 + round) == ncclSuccess);
  }
  topo_system_free(sys);
  EXPECT(bootstrap_close(b) == ncclSuccess);
  EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  size_t after = used_bytes();
  /* Everything freed (other processes' allocations on a shared GPU may move this a little). */
  EXPECT(after <= before + (8u << 20));
  return 0;
}

static void* rank_thread(void* p) {
  return (void*)(intptr_t)rank_main(p);
}

static int run_processes(int ndev, const char* cumem, const char* want) {
  rank_arg_t args[2];
  pid_t pids[2];
  setenv("NCCL_CUMEM_ENABLE", cumem, 1);
  param_reload();
  if (bootstrap_get_unique_id(&args[0].handle) != ncclSuccess) return 1;
  for (int i = 0; i < 2; i++) {
    args[i] = (rank_arg_t){.handle = args[0].handle, .idx = i, .dev = i % ndev, .want_desc = want};
    pids[i] = fork();
    if (pids[i] == 0) {
      alarm(120);
      _exit(rank_main(&args[i]) == 0 ? 0 : 1);
    }
  }
  int failed = 0;
  for (int i = 0; i < 2; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d (%s) failed: status 0x%x\n", i, want, status);
      failed++;
    }
  }
  g_checks++;
  g_failures += failed != 0;
  printf("%s: %s\n", want, failed ? "FAILED" : "passed");
  return failed;
}

static int run_threads(int ndev) {
  rank_arg_t args[2];
  pthread_t th[2];
  if (bootstrap_get_unique_id(&args[0].handle) != ncclSuccess) return 1;
  for (int i = 0; i < 2; i++) {
    args[i] = (rank_arg_t){
        .handle = args[0].handle, .idx = i, .dev = i % ndev, .want_desc = "P2P/direct pointer"};
    pthread_create(&th[i], NULL, rank_thread, &args[i]);
  }
  int failed = 0;
  for (int i = 0; i < 2; i++) {
    void* rc = NULL;
    pthread_join(th[i], &rc);
    failed += rc != NULL;
  }
  g_checks++;
  g_failures += failed != 0;
  printf("P2P/direct pointer (NCCL_CUMEM_ENABLE=%s): %s\n", getenv("NCCL_CUMEM_ENABLE"),
         failed ? "FAILED" : "passed");
  return failed;
}

int main(void) {
  int ndev = 0;
  /* ranks are forked: the parent must not create a CUDA context first */
  pid_t probe = fork();
  if (probe == 0) _exit(cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 ? ndev : 0);
  int status = 0;
  waitpid(probe, &status, 0);
  ndev = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  if (ndev == 0) {
    printf("no GPU visible\n0%%: Checks: 1, Failures: 1, Errors: 0\n");
    return 1;
  }
  if (ndev > 2) ndev = 2;
  printf("P2P transport test on %d GPU(s)\n", ndev);
  run_processes(ndev, "1", "P2P/CUMEM");
  run_processes(ndev, "0", "P2P/IPC");
  alarm(240);
  for (int cumem = 1; cumem >= 0; cumem--) {
    setenv("NCCL_CUMEM_ENABLE", cumem ? "1" : "0", 1);
    param_reload();
    run_threads(ndev); /* cuMem access grant, then cudaMalloc + peer access */
  }
  printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n",
         g_checks ? 100 * (g_checks - g_failures) / g_checks : 0, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
