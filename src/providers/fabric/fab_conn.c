/* fab_conn.c — connection ops of the fabric provider: connect to the
 * peer's mapped port carrying the switch's private data, completion,
 * close, and what the connection itself tells of the peer. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"
#include "common/sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

/* A fabric connect that has not completed after this long goes to kernel
 * TCP (a firewall dropping the fabric port; the kernel's own connect then
 * has its usual time). */
#define FAB_CONNECT_NS (3000ull * 1000000ull)

/* fi_getinfo took half of a connect's time (it lists the interfaces and
 * asks every provider): its answer for a destination host (whatever the
 * port) is kept and copied.  A failed connect forgets it (the route may
 * have changed). */
#define INFO_CACHE 16
static pthread_mutex_t info_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct sockaddr_storage host; /* port 0 */
	struct fi_info *info;
} cache[INFO_CACHE];
static unsigned cache_next;

static void host_of(const struct sockaddr_storage *a, size_t al, struct sockaddr_storage *h)
{
	memset(h, 0, sizeof *h);
	memcpy(h, a, al);
	((struct sockaddr_in *)h)->sin_port = 0; /* sin6_port is at the same place */
}

/* fork (fab_init.c): the cache whole in the child, whose lock is a fresh
 * one (a thread of the parent inside it would have left it held there) */
void fab_conn_atfork_prepare(void) { pthread_mutex_lock(&info_mu); }
void fab_conn_atfork_parent(void) { pthread_mutex_unlock(&info_mu); }
void fab_conn_atfork_child(void) { pthread_mutex_init(&info_mu, NULL); }

static struct fi_info *cached_info(const struct sockaddr_storage *dst, size_t al)
{
	struct sockaddr_storage h;
	host_of(dst, al, &h);
	struct fi_info *info = NULL;
	pthread_mutex_lock(&info_mu);
	for (unsigned i = 0; i < INFO_CACHE && !info; i++)
		if (cache[i].info && memcmp(&cache[i].host, &h, sizeof h) == 0)
			info = fab_dupinfo(cache[i].info);
	pthread_mutex_unlock(&info_mu);
	if (info && info->dest_addr && info->dest_addrlen >= al)
		((struct sockaddr_in *)info->dest_addr)->sin_port = ((const struct sockaddr_in *)dst)->sin_port;
	else if (info) {
		fab_freeinfo(info);
		info = NULL;
	}
	return info;
}

static void cache_info(const struct sockaddr_storage *dst, size_t al, const struct fi_info *info)
{
	struct fi_info *copy = fab_dupinfo(info);
	if (!copy)
		return;
	pthread_mutex_lock(&info_mu);
	unsigned i = cache_next++ % INFO_CACHE;
	struct fi_info *old = cache[i].info;
	host_of(dst, al, &cache[i].host);
	cache[i].info = copy;
	pthread_mutex_unlock(&info_mu);
	fab_freeinfo(old);
}

static void forget_info(const struct sockaddr_storage *dst, size_t al)
{
	struct sockaddr_storage h;
	host_of(dst, al, &h);
	pthread_mutex_lock(&info_mu);
	for (unsigned i = 0; i < INFO_CACHE; i++)
		if (cache[i].info && memcmp(&cache[i].host, &h, sizeof h) == 0) {
			fab_freeinfo(cache[i].info);
			cache[i].info = NULL;
		}
	pthread_mutex_unlock(&info_mu);
}

static void conn_set(struct ssw_ep *ep);

static int fab_connect(const struct sockaddr *dst, socklen_t dstlen, uint32_t proto, const void *priv, size_t priv_len,
		       struct ssw_ep **out)
{
	(void)dstlen;
	if (priv_len > SSW_CONNECT_PRIV_MAX)
		return -EINVAL;
	if (dst->sa_family != AF_INET && dst->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (fab_dl_load())
		return -ENODEV;
	size_t al = dst->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	struct sockaddr_storage a;
	memcpy(&a, dst, al);
	int port = fab_map_port(ntohs(((struct sockaddr_in *)&a)->sin_port));
	if (port < 0)
		return -EINVAL;
	((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)port);
	/* the thread reads the shared event queue: the connection's progress */
	int rc = fab_thread_ensure();
	if (rc)
		return rc;

	struct ssw_ep *ep = NULL;
	struct fab_fabric *fab = NULL;
	fab_gate_enter();
	struct fi_info *info = cached_info(&a, al);
	if (!info) {
		struct fi_info *h = fab_hints();
		if (!h) {
			fab_gate_leave();
			return -ENOMEM;
		}
		h->dest_addr = malloc(al);
		h->dest_addrlen = al;
		h->addr_format = dst->sa_family == AF_INET ? FI_SOCKADDR_IN : FI_SOCKADDR_IN6;
		if (h->dest_addr)
			memcpy(h->dest_addr, &a, al);
		rc = h->dest_addr ? fab_getinfo(FAB_API, NULL, NULL, 0, h, &info) : -FI_ENOMEM;
		fab_freeinfo(h);
		if (!rc)
			cache_info(&a, al, info);
	}
	if (!rc)
		rc = fab_fabric_get(info, &fab);
	if (!rc)
		rc = fab_ep_open(info, fab, &ep);
	if (rc) {
		fab_gate_leave();
		SSW_DEBUG("fabric: no endpoint for the connect: %s", fab_strerror(-rc));
		fab_freeinfo(info);
		forget_info(&a, al);
		return rc == -FI_ENODATA ? -ENETUNREACH : fab_errno(rc);
	}
	/* The switch's data rides in the connection request when it fits
	 * (tcp: 256 bytes).  A provider whose request carries less (verbs over
	 * RDMA CM: 56 bytes, less libfabric's own header) gets only our header
	 * there, and the data as the first message once connected: the
	 * acceptor's thread queues the connection after that message. */
	size_t cm = 0, cl = sizeof cm;
	if (fi_getopt(&ep->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm, &cl) != 0)
		cm = 0;
	if (cm < sizeof(struct fab_cm_hdr)) {
		fab_ep_destroy(ep, SSW_CLOSE_DETACH);
		fab_gate_leave();
		SSW_WARN_ONCE("fabric: libfabric provider %s carries no private data with a connection request: kernel TCP",
			      fab_prov_name);
		return -EPROTONOSUPPORT;
	}
	/* cm-data=N limits the switch's part (our header always goes) */
	if (fab_cm_data_max >= 0 && cm > sizeof(struct fab_cm_hdr) + (size_t)fab_cm_data_max)
		cm = sizeof(struct fab_cm_hdr) + (size_t)fab_cm_data_max;
	struct {
		struct fab_cm_hdr h;
		uint8_t d[SSW_CONNECT_PRIV_MAX];
	} data = { .h = { .magic = FAB_CM_MAGIC(proto), .len = (uint32_t)priv_len } };
	memcpy(data.d, priv, priv_len);
	size_t dl = sizeof data.h + priv_len;
	if (cm < dl) {
		data.h.magic = FAB_CM_MAGIC_MSG(proto);
		dl = sizeof data.h;
		memcpy(ep->priv, priv, priv_len);
		ep->priv_len = priv_len;
		ep->hello_out = true;
	}
	ep->connector = true;
	rc = fi_connect(ep->ep, ep->info->dest_addr, &data, dl);
	if (rc) {
		fab_ep_destroy(ep, SSW_CLOSE_DETACH);
		fab_gate_leave();
		forget_info(&a, al);
		return rc == -FI_ECONNREFUSED ? -ENOENT : fab_errno(rc);
	}
	ep->conn_deadline = ssw_now_ns() + FAB_CONNECT_NS;
	fab_gate_leave();
	conn_set(ep);
	*out = ep;
	return -EINPROGRESS;
}

/* What a connect's waiter sleeps on: the shared event queue's fd, which
 * is readable while the connection manager has work (our socket takes the
 * request, the answer came), so that the waiter drives the connection
 * itself (connect_complete reads the queue) instead of waiting for the
 * provider's thread to do it and kick wake_fd; and wake_fd, since the
 * thread (or another connect) may read our event and take the queue's
 * signal back before we look.  One epoll fd while the connect lasts;
 * wake_fd alone if it cannot be made. */
static void conn_set(struct ssw_ep *ep)
{
	int e = ssw_fd_hide(sys_epoll_create1(EPOLL_CLOEXEC));
	struct epoll_event ev = { .events = EPOLLIN };
	if (e >= 0 && (sys_epoll_ctl(e, EPOLL_CTL_ADD, ep->wake_fd, &ev) != 0 ||
		       sys_epoll_ctl(e, EPOLL_CTL_ADD, ep->fab->eq_fd, &ev) != 0)) {
		sys_close(e);
		e = -1;
	}
	ep->conn_fd = e;
}

static int fab_connect_fd(struct ssw_ep *ep) { return ep->conn_fd >= 0 ? ep->conn_fd : ep->wake_fd; }

static int fab_connect_complete(struct ssw_ep *ep, void *reply, size_t *reply_len)
{
	(void)reply;
	*reply_len = 0; /* the acceptor's answer travels in-band (its INIT comes first) */
	if (atomic_exchange(&ep->woken, false)) {
		uint64_t v;
		(void)!sys_read(ep->wake_fd, &v, sizeof v);
	}
	fab_ep_lock(ep);
	fab_progress(ep);
	int rc = ep->connected ? 0 : ep->conn_err ? ep->conn_err : -EINPROGRESS;
	if (rc == 0 && ep->hello_out) {
		struct iovec v = { ep->priv, ep->priv_len };
		rc = fab_send_locked(ep, FAB_T_HELLO, &v, 1);
		if (rc == 0)
			ep->hello_out = false;
		else if (rc == -EAGAIN)
			rc = -EINPROGRESS; /* cannot be: the peer posted its buffers before accepting */
	}
	if (rc == -EINPROGRESS && ssw_now_ns() > ep->conn_deadline)
		rc = -ETIMEDOUT;
	/* done: its waiters were kicked (wake_fd stays readable until the
	 * next arm's look), the set goes */
	if (rc != -EINPROGRESS && ep->conn_fd >= 0) {
		sys_close(ep->conn_fd);
		ep->conn_fd = -1;
	}
	fab_ep_unlock(ep);
	/* Refused on the fabric port says nothing certain of the application's
	 * port: a host without the switch refuses every fabric connect while
	 * its kernel listener may well be open.  So a refusal is "no switched
	 * listener" (kernel TCP, one round trip more), never ECONNREFUSED. */
	if (rc == -ECONNREFUSED)
		rc = -ENOENT;
	return rc;
}

static void fab_close(struct ssw_ep *ep, int how)
{
	if (!ep)
		return;
	fab_gate_enter();
	if (how != SSW_CLOSE_ORDERLY || !fab_ep_linger(ep))
		fab_ep_destroy(ep, how);
	fab_gate_leave();
}

static uint32_t fab_ep_caps(struct ssw_ep *ep)
{
	return ep->info && (ep->info->caps & FI_RMA) ? SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE : 0;
}

/* One end's address as the connection has it (peer: the other end's). */
static int ep_addr(struct ssw_ep *ep, bool peer, struct sockaddr_storage *addr, socklen_t *len)
{
	size_t l = sizeof *addr;
	memset(addr, 0, sizeof *addr);
	fab_ep_lock(ep);
	int rc = !ep->ep ? -FI_ENOTCONN : peer ? fi_getpeer(ep->ep, addr, &l) : fi_getname(&ep->ep->fid, addr, &l);
	fab_ep_unlock(ep);
	if (rc)
		return fab_errno(rc);
	if (addr->ss_family != AF_INET && addr->ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	*len = (socklen_t)l;
	return 0;
}

/* The connector's address as the connection has it: its host's address and
 * the source port of its fabric connection (assigned by that host's
 * kernel; not the application socket's port, which the fabric connection
 * does not use). */
static int fab_peer_addr(struct ssw_ep *ep, struct sockaddr_storage *addr, socklen_t *len)
{
	return ep_addr(ep, true, addr, len);
}

/* Our own end of the connection: where the peer reaches this host. */
static int fab_local_addr(struct ssw_ep *ep, struct sockaddr_storage *addr, socklen_t *len)
{
	return ep_addr(ep, false, addr, len);
}

const struct ssw_conn_ops fab_conn_ops = {
	.size = sizeof(struct ssw_conn_ops),
	.listen = fab_listen,
	.listener_fd = fab_listener_fd,
	.accept = fab_accept,
	.listener_close = fab_listener_close,
	.connect = fab_connect,
	.connect_fd = fab_connect_fd,
	.connect_complete = fab_connect_complete,
	.close = fab_close,
	.ep_caps = fab_ep_caps,
	.listener_ready = fab_listener_ready,
	.peer_addr = fab_peer_addr,
	.listener_name = fab_listener_name,
	.local_addr = fab_local_addr,
};
