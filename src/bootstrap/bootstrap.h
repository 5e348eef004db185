/* Baton bootstrap layer: out-of-band exchange between the ranks of a communicator over TCP.
 * Owns the unique id, the root thread, the socket ring, allgather, tagged send/recv, barrier,
 * subset collectives (split, shrink, node-local groups), and the socket/interface helpers that the
 * NET socket transport reuses. Talks to the OS only (and src/base). */
#ifndef BATON_BOOTSTRAP_H
#define BATON_BOOTSTRAP_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "base/base.h"

/* ---- Addresses and interfaces ---------------------------------------------------------------- */
typedef union socket_addr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
} socket_addr_t;

#define SOCKET_IFNAME_MAX 16
typedef struct socket_iface {
  char name[SOCKET_IFNAME_MAX];
  socket_addr_t addr;
} socket_iface_t;

/* Pick interfaces the way NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY say (prefix list, ^ excludes,
 * = exact), else by preference: ib*, then anything but docker* and lo, then lo. `candidates` is the
 * host's list (from getifaddrs in socket_list_interfaces; a fake list in tests). Writes at most
 * `max` choices to out and their number to *nout. */
ncclResult_t socket_select_interfaces(const socket_iface_t* candidates, int ncandidates,
                                      const char* ifname_spec, int family, socket_iface_t* out,
                                      int max, int* nout);
ncclResult_t socket_list_interfaces(socket_iface_t* out, int max, int* nout);
/* The interfaces chosen for this process (computed once, then cached). */
ncclResult_t socket_default_interfaces(const socket_iface_t** out, int* nout);
/* "1.2.3.4:5678" / "[::1]:5678" -> address, and back. */
ncclResult_t socket_addr_parse(const char* text, socket_addr_t* out);
const char* socket_addr_format(const socket_addr_t* addr, char* buf, size_t len);
/* Same family, address and port. */
bool socket_addr_equal(const socket_addr_t* a, const socket_addr_t* b);

/* ---- Sockets ------------------------------------------------------------------------------------
 * Blocking TCP sockets whose waits are bounded and watch an abort flag. */
typedef struct socket_conn {
  int fd;
  socket_addr_t addr;            /* peer address (or own address for a listener) */
  volatile uint32_t* abort_flag; /* may be NULL */
} socket_conn_t;

ncclResult_t socket_listen(const socket_addr_t* bind_addr, volatile uint32_t* abort_flag,
                           socket_conn_t* out); /* port 0: any; out->addr gets the real port */
ncclResult_t socket_accept(socket_conn_t* listener, socket_conn_t* out);
/* Accepts one pending connection without waiting; *accepted = 0 when none was pending. */
ncclResult_t socket_try_accept(socket_conn_t* listener, socket_conn_t* out, int* accepted);
/* Retries refused/unreachable connections (NCCL_SOCKET_RETRY_*) until a timeout, then WARNs
 * with the peer's address. */
ncclResult_t socket_connect(const socket_addr_t* addr, volatile uint32_t* abort_flag,
                            socket_conn_t* out);
ncclResult_t socket_send_all(socket_conn_t* s, const void* data, size_t size);
ncclResult_t socket_recv_all(socket_conn_t* s, void* data, size_t size);
/* Non-blocking progress: moves what it can, adds to *done. A peer's orderly close is
 * ncclRemoteError and is not logged (the caller knows whether it is an error); a failed system
 * call is ncclSystemError, logged with the peer's address. */
ncclResult_t socket_progress(socket_conn_t* s, int is_send, void* data, size_t size, size_t* done);
void socket_close(socket_conn_t* s);

/* ---- Bootstrap ----------------------------------------------------------------------------------
 * A handle is what ncclUniqueId carries: a random magic and the root's address. */
typedef struct bootstrap_handle {
  uint64_t magic;
  socket_addr_t addr;
} bootstrap_handle_t;
_Static_assert(sizeof(bootstrap_handle_t) <= NCCL_UNIQUE_ID_BYTES, "handle must fit ncclUniqueId");

typedef struct bootstrap bootstrap_t; /* opaque: one per communicator */

/* The id a user sees (ncclGetUniqueId): bootstrap_root_create's handle, or, with NCCL_COMM_ID
 * set, a handle for that address that starts nothing (rank 0 will). */
ncclResult_t bootstrap_get_unique_id(bootstrap_handle_t* out);
/* Always starts a fresh root thread (random magic, ephemeral port of the chosen interface) and
 * returns its handle, whatever NCCL_COMM_ID says: the root of a child communicator (split,
 * shrink). The thread exits once its ranks are served, or on NCCL_BOOTSTRAP_TIMEOUT_MS. */
ncclResult_t bootstrap_root_create(bootstrap_handle_t* out);
/* Rank 0 calls this when NCCL_COMM_ID is set: start the root at that address. Does nothing when a
 * root for this handle already runs in this process (bootstrap_init on rank 0 calls it itself when
 * the handle is the one NCCL_COMM_ID describes, so calling it first is optional). */
ncclResult_t bootstrap_root_start(const bootstrap_handle_t* handle);
/* The registration step of bootstrap_init (exposed for tests): registers this rank's listen
 * address with its root (rank r uses root r*nhandles/nranks; the first rank of each root's slice
 * also registers with the previous root, which needs it as the successor of its last rank) and
 * returns the listen address of rank (rank+1)%nranks. */
ncclResult_t bootstrap_root_join(const bootstrap_handle_t* handles, int nhandles, int rank,
                                 int nranks, const socket_addr_t* listen_addr,
                                 volatile uint32_t* abort_flag, socket_addr_t* next_out);
/* Join: register with the root(s), learn the ring neighbours, allgather every rank's listen
 * address. With nhandles > 1 (ncclCommInitRankScalable) the ranks are spread over several roots.
 * Every blocking wait returns ncclInternalError promptly once *abort_flag becomes nonzero. */
ncclResult_t bootstrap_init(const bootstrap_handle_t* handles, int nhandles, int rank, int nranks,
                            volatile uint32_t* abort_flag, bootstrap_t** out);
/* Every rank contributes size bytes at data + rank*size; on return all slots are filled. */
ncclResult_t bootstrap_allgather(bootstrap_t* b, void* data, size_t size);
/* Tagged point-to-point; messages that arrive before their recv is posted are queued (a receiver
 * thread per communicator drains them). Messages with one (peer, tag) match in send order; a
 * size that differs from the sender's is an error. Safe to call from several threads. */
ncclResult_t bootstrap_send(bootstrap_t* b, int peer, int tag, const void* data, size_t size);
ncclResult_t bootstrap_recv(bootstrap_t* b, int peer, int tag, void* data, size_t size);
/* bootstrap_recv from a peer that may have died: while it waits it asks alive(arg, peer) once a
 * poll slice (100 ms); after the first error it looks for the message one slice more (what the
 * peer sent before it went is queued by then) and then returns that error. */
typedef ncclResult_t (*bootstrap_alive_fn)(void* arg, int peer);
ncclResult_t bootstrap_recv_watched(bootstrap_t* b, int peer, int tag, void* data, size_t size,
                                    bootstrap_alive_fn alive, void* arg);
ncclResult_t bootstrap_barrier(bootstrap_t* b, int tag);
/* Over a subset: ranks[0..n) are communicator ranks, me is this rank's index in it, root (bcast) is
 * an index too. Only listed ranks are contacted. Barrier and subset operations use the caller's tag
 * on bootstrap_send/recv, so keep it apart from concurrent point-to-point traffic. */
ncclResult_t bootstrap_subset_allgather(bootstrap_t* b, const int* ranks, int n, int me, int tag,
                                        void* data, size_t size);
ncclResult_t bootstrap_subset_bcast(bootstrap_t* b, const int* ranks, int n, int me, int root,
                                    int tag, void* data, size_t size);
int bootstrap_rank(const bootstrap_t* b);
int bootstrap_nranks(const bootstrap_t* b);
/* A rank's bootstrap listen address (known after init), NULL for a bad rank. */
const socket_addr_t* bootstrap_peer_addr(const bootstrap_t* b, int rank);
/* ---- In process --------------------------------------------------------------------------------
 * A second transport for communicators whose ranks all live in this process (baton-sim's virtual
 * ranks): bootstrap_inproc_id makes a handle that names a new in-process world instead of a
 * root's address, and bootstrap_init given such a handle joins that world. Every call above then
 * works the same, without sockets or threads: messages go straight into the receiver's queue and
 * an allgather is one shared buffer. bootstrap_peer_addr returns NULL for its ranks. */
ncclResult_t bootstrap_inproc_id(bootstrap_handle_t* out);
bool bootstrap_handle_is_inproc(const bootstrap_handle_t* h);
bool bootstrap_is_inproc(const bootstrap_t* b);

/* Closes sockets and stops helper threads; safe after an abort. */
ncclResult_t bootstrap_close(bootstrap_t* b);

#endif /* BATON_BOOTSTRAP_H */
