/* Baton proxy layer: the per-communicator progress thread that drives NET connections (moves FIFO
 * slots between executors and the network plugin) and sleeps when nothing is in flight. */
#ifndef BATON_PROXY_H
#define BATON_PROXY_H

#include <sched.h>

#include "base/base.h"
#include "net/net.h"
#include "vocab/vocab.h"

typedef struct proxy_state proxy_state_t;

/* A NET connection the proxy progresses. For a send connection the executor fills the staging
 * FIFO and publishes tail; the proxy sends each filled slot (a 16-byte header {proto, size, bytes}
 * message, then a payload message) and advances head when the send completes. For a recv
 * connection the proxy receives into the executor's FIFO slots while head leaves room, writing LL
 * lines with 64-bit stores, then sizes[] (the sender's value) and tail.
 * A slot's protocol is read from the slot: LL (LL128) when its first line carries flag step+1,
 * else Simple with sizes[] bytes (details in src/proxy/proxy.c).
 * The caller keeps the proxy_conn_t, its FIFO, its net comm and the registrations of the FIFO
 * buffers (mh) alive until proxy_destroy; the proxy registers (and deregisters) only its own
 * header and bounce buffers. With flush, a Simple step that arrived is flushed (iflush) before
 * tail says so: data the NIC wrote into GPU memory becomes visible to the GPU. */
typedef struct proxy_conn {
  conn_fifo_t* fifo; /* the executor-side FIFO (same memory the executor polls) */
  int is_send;
  void* net_comm; /* ncclNet send or recv comm */
  const ncclNet_t* net;
  int peer;
  void* mh[PROTO_COUNT]; /* registrations of fifo->buffs[] (send: every protocol; recv: Simple) */
  bool flush;            /* recv: iflush each Simple step before publishing it */
  void* priv;            /* proxy-private progress state */
} proxy_conn_t;

/* Starts the thread (named "NCCL Proxy"); it stops progressing once *abort_flag is set. The
 * thread's WARNs are also copied into err_buf[err_len] (the communicator's last-error text, kept
 * alive until proxy_destroy; NULL: none). cpus (NULL: no binding) are the CPUs it runs on: the
 * GPU's (NCCL_IGNORE_CPU_AFFINITY). */
ncclResult_t proxy_create(volatile uint32_t* abort_flag, char* err_buf, size_t err_len,
                          const cpu_set_t* cpus, proxy_state_t** out);
ncclResult_t proxy_add_conn(proxy_state_t* proxy, proxy_conn_t* conn);
/* An executor is about to use NET connections: wake the thread if it sleeps. */
void proxy_wake(proxy_state_t* proxy);
/* First error the proxy hit (network error, peer lost in the middle of a step), ncclSuccess
 * otherwise. */
ncclResult_t proxy_error(proxy_state_t* proxy);
/* Whether peer closed a connection to this rank between steps, after every step it had sent
 * was delivered. Not an error by itself (a peer that destroyed its communicator first): it is
 * one for an executor that still waits on that peer (transport_peer_check decides and logs). */
bool proxy_peer_closed(proxy_state_t* proxy, int peer);
/* Waits (bounded) until every published send step has gone out, unless aborted or failed, then
 * stops the thread and deregisters the buffers. */
ncclResult_t proxy_destroy(proxy_state_t* proxy);

#endif /* BATON_PROXY_H */
