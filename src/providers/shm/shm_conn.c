/* shm_conn.c — connection set-up of the shm provider: per-netns rendezvous on
 * abstract unix sockets, memfd segments and eventfds passed with SCM_RIGHTS,
 * and the handback pair that lets any process sharing a listener accept each
 * request exactly once. */
#include "providers/shm/shm_priv.h"

#include "common/fdpass.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sockdiag.h"
#include "common/sys.h"
#include "common/waitpol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <pthread.h>

/* Abstract socket names are private to the network namespace, like ports.
 * The name carries the protocol version (provider.h listen): "sockswitch.v2"
 * was the library before versions, which a connector of today never dials
 * (nor one of then ours). */
static socklen_t rv_name(struct sockaddr_un *un, const struct sockaddr *sa, int wildcard, uint32_t proto)
{
	char host[INET6_ADDRSTRLEN] = "";
	int port;
	char fam;
	memset(un, 0, sizeof *un);
	un->sun_family = AF_UNIX;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		port = ntohs(in->sin_port);
		fam = '4';
	} else {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		port = ntohs(in6->sin6_port);
		fam = '6';
	}
	int n = wildcard ? snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "sockswitch.v%u:%c*:%d", proto, fam, port)
			 : snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "sockswitch.v%u:%c:%s:%d", proto, fam, host,
				    port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The address for a log line or a stat reason. */
static const char *addr_txt(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	const struct sockaddr_in *in = (const void *)sa;
	const struct sockaddr_in6 *in6 = (const void *)sa;
	bool v4 = sa->sa_family == AF_INET;
	inet_ntop(sa->sa_family, v4 ? (const void *)&in->sin_addr : (const void *)&in6->sin6_addr, host, sizeof host);
	snprintf(buf, len, v4 ? "%s:%d" : "[%s]:%d", host, ntohs(v4 ? in->sin_port : in6->sin6_port));
	return buf;
}

static int is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			sys_close(fds[i]);
}

/* Send one handshake record with up to 4 fds. */
static int hs_send(int fd, const void *msg, size_t len, const int *fds, int nfds)
{
	return ssw_fdpass_send(fd, msg, len, fds, nfds, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Receive one handshake record; exactly `want` fds must come with it (any
 * others are closed: the sender is untrusted).  Returns bytes, 0 on EOF, -errno. */
static ssize_t hs_recv(int fd, void *msg, size_t len, int *fds, int want)
{
	int got = 0;
	for (int i = 0; i < want; i++)
		fds[i] = -1;
	ssize_t n = ssw_fdpass_recv(fd, msg, len, fds, want, &got, MSG_DONTWAIT);
	if (n > 0 && got != want) {
		close_fds(fds, want);
		return -EPROTO;
	}
	if (n == 0)
		close_fds(fds, want);
	return n;
}

void shm_peer_cred(struct ssw_ep *ep)
{
	if (atomic_load_explicit(&ep->cred_done, memory_order_acquire))
		return;
	struct ucred uc;
	socklen_t l = sizeof uc;
	if (sys_getsockopt(ep->ctl_fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0 && l >= sizeof uc) {
		ep->peer_pid = uc.pid;
		ep->peer_uid = uc.uid;
		atomic_store(&ep->cred_ok, 1);
	}
	/* One-sided access needs the same user (ptrace rules); the rest is
	 * discovered on first use (shm_rdma.c falls back on -EPERM). */
	ep->caps = SSW_CAP_SHARED_CONTEXT;
	static uid_t me = (uid_t)-1;
	if (me == (uid_t)-1)
		me = getuid();
	if (!shm_cma_disabled && ep->peer_uid == me)
		ep->caps |= SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE;
	atomic_store_explicit(&ep->cred_done, 1, memory_order_release);
}

/* Endpoints live in fork-shared memory (common/shmem.c): after fork both
 * processes drive the same ring indices. */
struct ssw_ep *shm_ep_alloc(void)
{
	return ssw_shared_alloc(sizeof(struct ssw_ep), sizeof(struct ssw_ep));
}

static struct ssw_ep *ep_new(void)
{
	struct ssw_ep *ep = shm_ep_alloc();
	if (ep)
		ep->ctl_fd = ep->my_efd = ep->peer_efd = ep->seg_fd = ep->map_fd = ep->live_slot = -1;
	return ep;
}

/* This process's view of an endpoint goes: fds, segment mapping (unless
 * lent: shm_lend.c), and the endpoint itself (kept for reuse unless
 * another process still maps it). */
static void ep_release(struct ssw_ep *ep, bool detach)
{
	if (!ep)
		return;
	shm_seg_release(ep, false); /* the memfd a connector kept, this process's copy */
	shm_seg_map_fd_close(ep);  /* the one an acceptor kept */
	bool lent = detach ? shm_lend_detach(ep) : (shm_lend_forget(ep), false);
	if (ep->seg && !lent)
		munmap(ep->seg, ep->seg_size);
	int fds[3] = { ep->ctl_fd, ep->my_efd, ep->peer_efd };
	close_fds(fds, 3);
	ssw_shared_free(ep, sizeof *ep, !detach);
}

void shm_ep_free(struct ssw_ep *ep)
{
	ep_release(ep, false);
}

/* Map a segment the peer sent and check it before trusting any of it: its
 * seals first (shm_seal.c), so that the peer cannot shrink it under us. */
static int map_segment(struct ssw_ep *ep, int memfd, uint64_t ring_size, int connector)
{
	uint64_t want = shm_seg_size(ring_size);
	if (ring_size < SHM_RING_MIN || ring_size > SHM_RING_MAX || (ring_size & (ring_size - 1)))
		return -EPROTO;
	struct stat st;
	if (fstat(memfd, &st) < 0)
		return -EPROTO;
	/* the same connector sending the same segment again: our mapping of it,
	 * checked when it was first mapped (its seals forbid any change since) */
	shm_peer_cred(ep);
	void *p = atomic_load(&ep->cred_ok) ? shm_seg_map_take(st.st_dev, st.st_ino, want, ep->peer_pid, ep->peer_uid) : NULL;
	if (!p && shm_seg_check_stat(memfd, want, &st) < 0)
		return -EPROTO;
	if (!p) {
		p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		if (p == MAP_FAILED)
			return -errno;
	}
	ep->seg = p;
	ep->seg_size = want;
	ep->seg_dev = st.st_dev;
	ep->seg_ino = st.st_ino;
	struct shm_seg_hdr *h = p;
	if (__atomic_load_n(&h->magic, __ATOMIC_RELAXED) != SHM_MAGIC ||
	    __atomic_load_n(&h->version, __ATOMIC_RELAXED) != SHM_VERSION)
		return -EPROTO; /* the caller frees ep, and the mapping with it */
	shm_ring_attach(ep, h, ring_size, connector);
	return 0;
}

/* ---- listening side ---------------------------------------------------- */

/* A connector sends its HELLO right after connecting, so an acceptor may take
 * a request off the shared backlog before its HELLO is there.  Such a request
 * waits ("pending") in the epoll set of the process that took it, and only
 * that process can finish it: kept past the accept call that returns another
 * connection, it would be stranded when that process never accepts again (a
 * pre-fork worker that accepts once) while a sibling sleeps in accept.  So
 * that call hands its pending requests back through the listener's handback
 * pair, which every process sharing the listener watches like the backlog:
 * each request is accepted exactly once, by any process waiting in accept. */

static int own_epfd(struct ssw_listener *l);

/* Our rendezvous name is taken: by another user, that is a squatter (the
 * kernel lets only one user listen on a port; connectors pass it over, see
 * rdv_peer_ok), worth a warning: the listener serves kernel TCP only.  Its
 * credentials are asked by connecting (no byte is sent). */
static bool name_squatted(const struct sockaddr_un *un, socklen_t ul, const struct sockaddr *addr)
{
	int fd = sys_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct ucred uc = { .uid = getuid() };
	socklen_t l = sizeof uc;
	bool other = fd >= 0 && sys_connect(fd, (const struct sockaddr *)un, ul) == 0 &&
		     sys_getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0 && uc.uid != geteuid();
	if (fd >= 0)
		sys_close(fd);
	if (other) {
		char a[80];
		ssw_diag_note("rendezvous name of %s taken by uid %u (pid %d)", addr_txt(addr, a, sizeof a),
			      (unsigned)uc.uid, (int)uc.pid);
		SSW_WARN("listen %s: the rendezvous name is taken by uid %u (pid %d): serving kernel TCP only",
			 addr_txt(addr, a, sizeof a), (unsigned)uc.uid, (int)uc.pid);
	}
	return other;
}


static int shm_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog, uint32_t proto,
		      struct ssw_listener **out)
{
	struct sockaddr_un un;
	(void)addrlen;
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	socklen_t ul = rv_name(&un, addr, is_wildcard(addr), proto);
	struct ssw_listener *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->owner = ssw_pid();
	l->lfd = l->epfd = l->hb[0] = l->hb[1] = -1;
	pthread_mutex_init(&l->mu, NULL);
	int rc;
	l->lfd = ssw_fd_hide(sys_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	/* the connections it accepts inherit SO_PASSCRED: the peer's vouches
	 * come with its credentials (shm_vouch.c) */
	shm_vouch_passcred(l->lfd);
	if (l->lfd >= 0 && sys_bind(l->lfd, (struct sockaddr *)&un, ul) < 0) {
		if (errno == EADDRINUSE && name_squatted(&un, ul, addr))
			errno = EACCES;
		goto fail;
	}
	if (l->lfd < 0 || sys_listen(l->lfd, backlog < 16 ? 16 : backlog) < 0)
		goto fail;
	l->handed = ssw_shared_alloc(4096, 4096); /* the processes sharing the listener count together */
	if (!l->handed)
		goto fail;
	if (SYS_(socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, l->hb) < 0)
		goto fail;
	l->hb[0] = ssw_fd_hide(l->hb[0]);
	l->hb[1] = ssw_fd_hide(l->hb[1]);
	if (own_epfd(l) < 0) {
		errno = ENFILE;
		goto fail;
	}
	*out = l;
	return 0;
fail:
	rc = -errno;
	int fds[4] = { l->lfd, l->hb[0], l->hb[1], l->epfd };
	close_fds(fds, 4);
	ssw_shared_free((void *)l->handed, 4096, false); /* this process's view: a sibling may still count */
	pthread_mutex_destroy(&l->mu);
	free(l);
	return rc;
}

/* The epoll set of pending requests belongs to one process: a forked child
 * that serves the listener too makes its own (fd numbers differ), and lets go
 * of its copies of the parent's pending requests (the parent finishes them). */
static int own_epfd(struct ssw_listener *l)
{
	pid_t me = ssw_pid();
	if (l->epfd_pid == me)
		return l->epfd;
	int ep = sys_epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		return -1;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = l->lfd };
	struct epoll_event hv = { .events = EPOLLIN, .data.fd = l->hb[0] };
	if (sys_epoll_ctl(ep, EPOLL_CTL_ADD, l->lfd, &ev) < 0 || sys_epoll_ctl(ep, EPOLL_CTL_ADD, l->hb[0], &hv) < 0) {
		sys_close(ep);
		return -1;
	}
	if (l->epfd >= 0)
		sys_close(l->epfd); /* our reference to the parent's set */
	if (l->epfd_pid) {
		close_fds(l->pending, l->npending);
		pthread_mutex_init(&l->mu, NULL); /* fork may have copied it locked */
	}
	l->npending = 0;
	l->epfd = ssw_fd_hide(ep);
	l->epfd_pid = me;
	return l->epfd;
}

/* Readable when a request waits: in the backlog, handed back, or its HELLO arrived. */
static int shm_listener_fd(struct ssw_listener *l) { return own_epfd(l); }

/* Keep a request until its HELLO arrives; without room for it, refuse it
 * (the connector sees a reset, as for a full backlog). */
static void park(struct ssw_listener *l, int cfd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = cfd };
	pthread_mutex_lock(&l->mu);
	bool ok = l->npending < SHM_MAX_PENDING && sys_epoll_ctl(l->epfd, EPOLL_CTL_ADD, cfd, &ev) == 0;
	if (ok)
		l->pending[l->npending++] = cfd;
	pthread_mutex_unlock(&l->mu);
	if (!ok)
		sys_close(cfd);
}

/* Take a pending request out of the set: the caller owns it then.  False
 * when it is not (or no longer) pending: another thread took it first. */
static bool unpark(struct ssw_listener *l, int cfd)
{
	bool found = false;
	pthread_mutex_lock(&l->mu);
	for (int i = 0; i < l->npending; i++) {
		if (l->pending[i] != cfd)
			continue;
		/* keep the order they came in: accept hands out the oldest first */
		memmove(&l->pending[i], &l->pending[i + 1], (size_t)(l->npending - i - 1) * sizeof l->pending[0]);
		l->npending--;
		sys_epoll_ctl(l->epfd, EPOLL_CTL_DEL, cfd, NULL);
		found = true;
		break;
	}
	pthread_mutex_unlock(&l->mu);
	return found;
}

/* Give every pending request to whichever process accepts next (this one
 * included); one the pair has no room for stays pending here. */
static void hand_back(struct ssw_listener *l)
{
	int fds[SHM_MAX_PENDING], n;
	pthread_mutex_lock(&l->mu);
	n = l->npending;
	memcpy(fds, l->pending, (size_t)n * sizeof(int));
	for (int i = 0; i < n; i++)
		sys_epoll_ctl(l->epfd, EPOLL_CTL_DEL, fds[i], NULL);
	l->npending = 0;
	pthread_mutex_unlock(&l->mu);
	for (int i = 0; i < n; i++) {
		if (hs_send(l->hb[1], "r", 1, &fds[i], 1) == 0) {
			atomic_fetch_add(l->handed, 1);
			sys_close(fds[i]);
		}
		else
			park(l, fds[i]);
	}
}

/* One connection request whose HELLO arrived.  The listening side only
 * checks what it keeps (the segment's size); adopt_request maps and
 * validates the segment. */
static int take_hello(int cfd, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	struct shm_hs hs;
	int fds[1];
	ssize_t n = hs_recv(cfd, &hs, sizeof hs, fds, 1);
	if (n == -EAGAIN)
		return -EAGAIN;
	struct ssw_ep *ep = n == (ssize_t)sizeof hs ? ep_new() : NULL;
	uint64_t rs = hs.ring_size;
	if (!ep || hs.magic != SHM_MAGIC || hs.type != SHM_HS_HELLO || hs.priv_len > SSW_CONNECT_PRIV_MAX ||
	    hs.priv_len > *priv_len || rs < SHM_RING_MIN || rs > SHM_RING_MAX || (rs & (rs - 1))) {
		if (n > 0)
			close_fds(fds, 1);
		sys_close(cfd);
		ssw_shared_free(ep, sizeof *ep, true);
		return -EPROTO;
	}
	ep->ctl_fd = cfd; /* also the doorbell, both ways */
	ep->seg_fd = fds[0];
	ep->tx.size = rs;
	memcpy(priv, hs.priv, hs.priv_len);
	*priv_len = hs.priv_len;
	*out = ep;
	return 0;
}

/* A pending connection hung up: ready only if its HELLO came first. */
static bool hello_waits(int fd)
{
	char b;
	return SYS_(recvfrom, fd, &b, 1, MSG_DONTWAIT | MSG_PEEK, NULL, NULL) > 0;
}

/* The connector sends its HELLO right after its connect, which woke us: a
 * short wait for it costs less than parking the request and waking up for
 * it again (a server spinning in accept catches most connections before
 * their HELLO).  The wait policy's steps (waitpol.h): a brief pause, then
 * yields, since the connector may be the very thread our wake-up preempted
 * on this CPU, and it sends nothing until we let it run (measured, an epoll
 * server and its client on one CPU: every connection was parked, then
 * woken again by the HELLO). */
static const struct ssw_waitcfg hello_wait_cfg = { .start_ns = 20000 }; /* a spin only, not learnt */

struct hello_waiter {
	struct ssw_waiter w;
	int fd;
};

static int hello_look(struct ssw_waiter *w)
{
	return hello_waits(((struct hello_waiter *)w)->fd);
}

static bool hello_wait(int fd)
{
	/* the caller has just looked (take_hello): a step first */
	struct hello_waiter hw = { .w = { .ready = hello_look, .peer_cpu = -1, .looked = true }, .fd = fd };
	return ssw_wait(NULL, &hello_wait_cfg, 0, &hw.w) > 0;
}

/* A request this process now owns: its HELLO, or it waits in the set. */
static int take_conn(struct ssw_listener *l, int cfd, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	int rc = take_hello(cfd, out, priv, priv_len);
	if (rc == -EAGAIN && hello_wait(cfd))
		rc = take_hello(cfd, out, priv, priv_len);
	if (rc == -EAGAIN)
		park(l, ssw_fd_hide(cfd));
	else if (rc < 0)
		SSW_DEBUG("shm: refused a connection request: %s", strerror(-rc));
	return rc;
}

/* Accept waiting rendezvous connections until one has its HELLO (the
 * connector sends it right after connecting, so it is usually there). */
static int accept_all(struct ssw_listener *l, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	int c;
	/* never more than the pending set holds: the rest wait in the backlog */
	while (l->npending < SHM_MAX_PENDING && (c = sys_accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
		if (take_conn(l, c, out, priv, priv_len) == 0)
			return 0; /* more waiting connections: lfd stays readable */
	return -EAGAIN;
}

/* A handed-back request was taken: one fewer in the pair (a count that
 * only saves a look at an empty pair, so it never goes below zero). */
static void taken_back(struct ssw_listener *l)
{
	int n = atomic_load(l->handed);
	while (n > 0 && !atomic_compare_exchange_weak(l->handed, &n, n - 1))
		;
}

/* Requests another process handed back, until one has its HELLO. */
static int take_handed_back(struct ssw_listener *l, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	char b;
	int c;
	while (l->npending < SHM_MAX_PENDING && hs_recv(l->hb[0], &b, 1, &c, 1) == 1) {
		taken_back(l);
		if (take_conn(l, c, out, priv, priv_len) == 0)
			return 0;
	}
	return -EAGAIN;
}

/* Take requests waiting in the backlog (from == lfd) or handed back
 * (from == hb[0]) into the pending set, each after the short wait for its
 * HELLO, until one has its HELLO (true: accept will succeed) or none is
 * left.  Never more than the set holds: the rest stay where they are. */
static bool park_incoming(struct ssw_listener *l, int from)
{
	char b;
	int c;
	while (l->npending < SHM_MAX_PENDING &&
	       (from == l->lfd ? (c = sys_accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0
			       : hs_recv(l->hb[0], &b, 1, &c, 1) == 1)) {
		if (from != l->lfd)
			taken_back(l);
		bool hello = hello_waits(c) || hello_wait(c);
		park(l, ssw_fd_hide(c));
		if (hello)
			return true;
	}
	return false;
}

/* A connector's connect() makes the rendezvous socket readable before its
 * HELLO (sent right after) arrives: accept could not take it yet.  Ready
 * means a request with its HELLO; those still without one are parked (and
 * handed back by this process's next accept, like any parked request). */
static int shm_listener_ready(struct ssw_listener *l)
{
	struct epoll_event evs[16];
	if (own_epfd(l) < 0)
		return 0;
	for (int round = 0; round < 8; round++) {
		int n = sys_epoll_wait(l->epfd, evs, 16, 0);
		bool moved = false;
		/* what a sibling handed back was taken off the backlog earlier:
		 * parked first, so that accept keeps the order (take_request) */
		for (int i = 1; i < n; i++)
			if (evs[i].data.fd == l->hb[0]) {
				struct epoll_event t = evs[0];
				evs[0] = evs[i];
				evs[i] = t;
			}
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == l->lfd || fd == l->hb[0]) {
				if (park_incoming(l, fd))
					return 1;
				moved = true;
			} else if ((evs[i].events & EPOLLIN) && (!(evs[i].events & (EPOLLHUP | EPOLLERR)) || hello_waits(fd))) {
				return 1;
			} else if (unpark(l, fd)) {
				sys_close(fd); /* the connector went away before its HELLO */
			}
		}
		if (!moved)
			return 0;
	}
	return 0;
}

/* One request whose HELLO arrived, with the connector's private data. */
/* take_request with requests held whose HELLO had not come: apart, so that
 * the common path's stack frame stays small (the copy of the held list is
 * 4 KiB: a forking server's accept then wrote one stack page more, and each
 * costs a fault after every fork, issue 18). */
static __attribute__((noinline)) int take_pending(struct ssw_listener *l, struct ssw_ep **out, void *priv,
						  size_t *priv_len)
{
	struct epoll_event evs[16];
	int n = sys_epoll_wait(l->epfd, evs, 16, 0);
	int held[SHM_MAX_PENDING], nheld;
	pthread_mutex_lock(&l->mu);
	nheld = l->npending;
	memcpy(held, l->pending, (size_t)nheld * sizeof held[0]);
	pthread_mutex_unlock(&l->mu);
	bool backlog = false, handed = false;
	for (int i = 0; i < n; i++) {
		backlog |= evs[i].data.fd == l->lfd;
		handed |= evs[i].data.fd == l->hb[0];
	}
	for (int k = 0; k < nheld; k++) {
		int i = 0;
		while (i < n && evs[i].data.fd != held[k])
			i++;
		if (i == n || !unpark(l, held[k]))
			continue; /* no HELLO yet, or another thread took it */
		if (evs[i].events & EPOLLIN) {
			if (take_conn(l, held[k], out, priv, priv_len) == 0)
				return 0;
			continue;
		}
		sys_close(held[k]); /* the connector went away before its HELLO */
	}
	if (handed && take_handed_back(l, out, priv, priv_len) == 0)
		return 0;
	if (backlog && accept_all(l, out, priv, priv_len) == 0)
		return 0;
	return -EAGAIN;
}

static int take_request(struct ssw_listener *l, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	if (own_epfd(l) < 0)
		return -EAGAIN;
	/* The oldest first, as from the kernel's accept queue: what this
	 * process holds (in the order it took them), then what a sibling
	 * handed back (taken off the backlog earlier), then the backlog. */
	if (l->npending)
		return take_pending(l, out, priv, priv_len);
	/* nothing half-arrived: no need to ask the set (a HELLO follows its
	 * connect at once).  What a sibling handed back came off the backlog
	 * earlier: first, when the count says there is some; and looked for
	 * after an empty backlog anyway (a count a dead sibling left short) */
	if (atomic_load(l->handed) && take_handed_back(l, out, priv, priv_len) == 0)
		return 0;
	if (accept_all(l, out, priv, priv_len) == 0)
		return 0;
	return take_handed_back(l, out, priv, priv_len);
}

/* Make a request ours: map the connector's segment, check it, and resume
 * where the rings stand (the connector may have written already). */
static int adopt_request(struct ssw_ep *ep, int memfd, uint64_t ring_size)
{
	ep->ctl_fd = ssw_fd_hide(ep->ctl_fd);
	int rc = map_segment(ep, memfd, ring_size, 0);
	if (rc == 0) {
		uint64_t tail = atomic_load(&ep->tx.ctl->tail), head = atomic_load(&ep->tx.ctl->head);
		uint64_t rhead = atomic_load(&ep->rx.ctl->head);
		if (tail < head || tail - head > ep->tx.size || (tail & 7) || (rhead & 7))
			rc = -EPROTO;
		ep->tx.pos = ep->tx.pub = tail;
		ep->tx.other = head;
		ep->rx.pos = ep->rx.other = rhead;
	}
	return rc;
}

static int shm_accept(struct ssw_listener *l, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	shm_lend_reap(); /* copies lent to children that have exited since */
	/* straight from the backlog: connect is one trip, nobody answers first */
	for (;;) {
		struct ssw_ep *ep;
		size_t plen = *priv_len;
		int rc = take_request(l, &ep, priv, &plen);
		if (rc < 0)
			return -EAGAIN;
		int memfd = ep->seg_fd;
		ep->seg_fd = -1;
		rc = adopt_request(ep, memfd, ep->tx.size);
		if (rc == 0)
			shm_seg_map_fd_keep(ep, memfd); /* an exec may carry it (shm_handover.c) */
		else
			sys_close(memfd);
		if (rc < 0) {
			SSW_DEBUG("shm: refused a connection request: %s", strerror(-rc));
			struct shm_hs nak = { .magic = SHM_MAGIC, .type = SHM_HS_ACK, .status = rc };
			hs_send(ep->ctl_fd, &nak, sizeof nak, NULL, 0); /* a reset, there */
			shm_ep_free(ep);
			continue;
		}
		shm_lend_accepted(ep);
		if (l->npending)
			hand_back(l); /* this call may be this process's last */
		*priv_len = plen;
		*out = ep;
		return 0;
	}
}

static void shm_listener_close(struct ssw_listener *l)
{
	if (!l)
		return;
	if (l->epfd_pid == ssw_pid())
		hand_back(l); /* a sibling may still accept them */
	else
		close_fds(l->pending, l->npending); /* copies of the parent's */
	int fds[4] = { l->lfd, l->hb[0], l->hb[1], l->epfd };
	close_fds(fds, 4);
	ssw_shared_free((void *)l->handed, 4096, false); /* this process's view: a sibling may still count */
	/* A forked child closing the copy it inherited (a fork-per-connection
	 * server's child, a database backend, closes the listeners first):
	 * that memory is still the parent's pages, copy-on-write, and freeing
	 * it would copy two or more of them (the object, the allocator's
	 * bins: a fault of about 65 us each on these machines) for nothing.
	 * Left as it is, once per inherited listener (freed under the leak
	 * checker, which would count it). */
#ifndef __SANITIZE_ADDRESS__
	if (l->owner != ssw_pid())
		return;
#endif
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* ---- across exec -------------------------------------------------------- */

/* The new image needs the rendezvous listener and the handback pair; the
 * requests this image parked (HELLO not read yet) go into the pair first,
 * where the new image finds them (they would die with this image's epoll
 * set).  Its own epoll set it makes anew. */
static int shm_listener_export(struct ssw_listener *l, int *fds, int max)
{
	if (max < 3)
		return -ENOSPC;
	if (l->epfd_pid == ssw_pid())
		hand_back(l);
	fds[0] = l->lfd;
	fds[1] = l->hb[0];
	fds[2] = l->hb[1];
	return 3;
}

/* fd is an AF_UNIX SOCK_SEQPACKET socket, listening or not as asked. */
static bool unix_seqpacket(int fd, int listening)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_UNIX)
		return false;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_SEQPACKET)
		return false;
	l = sizeof v;
	return sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v == listening;
}

/* The descriptors come through the environment: each must be what
 * export gave, the rendezvous listener bound to exactly the name of this
 * address and version, and the pair two connected ends of our user. */
static int shm_listener_import(const struct sockaddr *addr, socklen_t addrlen, uint32_t proto, const int *fds, int n,
			       struct ssw_listener **out)
{
	(void)addrlen;
	if (n != 3 || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return -EINVAL;
	struct sockaddr_un want, got, a, b;
	socklen_t wl = rv_name(&want, addr, is_wildcard(addr), proto), gl = sizeof got, al = sizeof a, bl = sizeof b;
	struct ucred ca, cb;
	socklen_t cl = sizeof ca, dl = sizeof cb;
	if (!unix_seqpacket(fds[0], 1) || !unix_seqpacket(fds[1], 0) || !unix_seqpacket(fds[2], 0) ||
	    sys_getsockname(fds[0], (struct sockaddr *)&got, &gl) < 0 || gl != wl || memcmp(&got, &want, wl) != 0 ||
	    sys_getsockopt(fds[1], SOL_SOCKET, SO_PEERCRED, &ca, &cl) < 0 ||
	    sys_getsockopt(fds[2], SOL_SOCKET, SO_PEERCRED, &cb, &dl) < 0 || ca.uid != cb.uid || ca.uid != geteuid() ||
	    SYS_(getpeername, fds[1], (struct sockaddr *)&a, &al) < 0 || SYS_(getpeername, fds[2], (struct sockaddr *)&b, &bl) < 0)
		return -EINVAL;
	struct ssw_listener *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->owner = ssw_pid();
	l->lfd = fds[0];
	l->hb[0] = fds[1];
	l->hb[1] = fds[2];
	l->epfd = -1;
	pthread_mutex_init(&l->mu, NULL);
	/* the count of handed-back requests starts at zero here: an empty
	 * backlog makes accept look at the pair anyway (take_request) */
	l->handed = ssw_shared_alloc(4096, 4096);
	if (!l->handed || own_epfd(l) < 0) {
		ssw_shared_free((void *)l->handed, 4096, false);
		pthread_mutex_destroy(&l->mu);
		free(l);
		return -ENOMEM;
	}
	*out = l;
	return 0;
}

/* ---- connecting side --------------------------------------------------- */

/* Who owns the kernel listening socket a SYN to dst would reach: the only
 * process a switched connection may reach (the trust model, README
 * "Security").  -ENOENT: nobody listens; -EACCES: doubt (noted). */
static int listener_owner(const struct sockaddr *dst, uid_t *owner)
{
	struct sockaddr_storage d;
	char a[80];
	memset(&d, 0, sizeof d);
	memcpy(&d, dst, dst->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	int rc = ssw_diag_listener_uid(&d, owner);
	if (rc == -EAGAIN) {
		ssw_diag_note("listeners of several users on %s", addr_txt(dst, a, sizeof a));
		return -EACCES;
	}
	if (rc < 0 && rc != -ENOENT) {
		ssw_diag_note("cannot ask the kernel who listens on %s: %s", addr_txt(dst, a, sizeof a), strerror(-rc));
		return -EACCES;
	}
	return rc;
}

/* The rendezvous peer is who it should be: the owner of the port's kernel
 * listener (same uid: a process of that user could ptrace the listener
 * anyway, so the pid is not checked).  A peer of our own user needs no
 * asking: it could read our memory anyway (README "Security").  Nothing has
 * been sent yet: a squatter sees a connection and its end, never a byte. */
static bool rdv_peer_ok(int ctl, const struct sockaddr *dst, struct ucred *peer)
{
	struct ucred uc;
	socklen_t l = sizeof uc;
	char a[80];
	uid_t owner;
	if (sys_getsockopt(ctl, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0 || l < sizeof uc) {
		ssw_diag_note("rendezvous for %s: no peer credentials", addr_txt(dst, a, sizeof a));
		return false;
	}
	*peer = uc;
	if (uc.uid == geteuid())
		return true;
	int rc = listener_owner(dst, &owner);
	if (rc == -ENOENT)
		ssw_diag_note("rendezvous for %s answered by uid %u, no kernel listener there", addr_txt(dst, a, sizeof a),
			      (unsigned)uc.uid);
	if (rc < 0)
		return false;
	if (uc.uid == owner)
		return true;
	ssw_diag_note("rendezvous for %s answered by uid %u, the port's listener is uid %u", addr_txt(dst, a, sizeof a),
		      (unsigned)uc.uid, (unsigned)owner);
	SSW_WARN_ONCE("rendezvous for %s answered by uid %u (pid %d), the port's listener is uid %u: using kernel TCP",
		      addr_txt(dst, a, sizeof a), (unsigned)uc.uid, (int)uc.pid, (unsigned)owner);
	return false;
}

/* Nobody of our protocol version listens at dst: is it one of the next
 * older or newer (a server started before or after a package upgrade)?
 * Said for `stat`; only looked for on this miss, four failed connects of
 * an abstract name (about 1 us each). */
static void note_other_version(const struct sockaddr *dst, uint32_t proto)
{
	uint32_t other[2] = { proto - 1, proto + 1 };
	struct sockaddr_un un;
	for (int i = 0; i < 2; i++)
		for (int wild = 0; wild < 2; wild++) {
			int fd = sys_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (fd < 0)
				return;
			socklen_t ul = rv_name(&un, dst, wild, other[i]);
			bool there = sys_connect(fd, (struct sockaddr *)&un, ul) == 0 || errno == EAGAIN;
			sys_close(fd);
			if (there) {
				char a[80];
				ssw_diag_note("the switched listener of %s speaks protocol version %u, we %u",
					      addr_txt(dst, a, sizeof a), other[i], proto);
				return;
			}
		}
}

/* Connect ep->ctl_fd to the rendezvous of dst: its own name, else the
 * wildcard's; a name answered by someone else than the listener's owner is
 * passed over (a squatter on the specific name does not hide the real
 * wildcard listener).  0, -ENOENT (nobody switched there), -EAGAIN (backlog
 * full), -EACCES (only impostors answered), or -errno. */
static int rdv_connect(struct ssw_ep *ep, const struct sockaddr *dst, uint32_t proto, struct ucred *peer)
{
	struct sockaddr_un un;
	int rc = -ENOENT;
	for (int wild = 0; wild < 2; wild++) {
		if (ep->ctl_fd < 0) {
			ep->ctl_fd = ssw_fd_hide(sys_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
			shm_vouch_passcred(ep->ctl_fd); /* the acceptor's vouches (shm_vouch.c) */
		}
		if (ep->ctl_fd < 0)
			return -errno;
		socklen_t ul = rv_name(&un, dst, wild, proto);
		if (sys_connect(ep->ctl_fd, (struct sockaddr *)&un, ul) == 0) {
			if (rdv_peer_ok(ep->ctl_fd, dst, peer))
				return 0;
			sys_close(ep->ctl_fd);
			ep->ctl_fd = -1;
			rc = -EACCES;
			continue;
		}
		if (errno == EAGAIN) /* listener's backlog is full */
			return -EAGAIN;
	}
	if (rc == -ENOENT)
		note_other_version(dst, proto);
	return rc;
}

static int shm_connect(const struct sockaddr *dst, socklen_t dstlen, uint32_t proto, const void *priv,
		       size_t priv_len, struct ssw_ep **out)
{
	(void)dstlen;
	if (priv_len > SSW_CONNECT_PRIV_MAX)
		return -EINVAL;
	if (dst->sa_family != AF_INET && dst->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	struct ssw_ep *ep = ep_new();
	if (!ep)
		return -ENOMEM;
	struct shm_seg g;
	struct ucred peer = { .pid = 0 };
	int rc = shm_seg_get(&g, dst);
	if (rc < 0) {
		shm_ep_free(ep);
		return rc;
	}
	rc = rdv_connect(ep, dst, proto, &peer);
	if (rc == 0)
		rc = shm_seg_settle(&g, peer.pid, peer.uid);
	if (rc < 0)
		goto unused;

	shm_seg_prepare(&g);
	ep->seg = g.p;
	ep->seg_size = shm_seg_size(g.ring);
	ep->seg_key = g.key;
	shm_ring_attach(ep, g.p, g.ring, 1);
	struct shm_hs hs = { .magic = SHM_MAGIC, .type = SHM_HS_HELLO, .ring_size = g.ring, .priv_len = (uint32_t)priv_len };
	memcpy(hs.priv, priv, priv_len);
	rc = hs_send(ep->ctl_fd, &hs, sizeof hs, &g.memfd, 1);
	if (rc == 0)
		shm_seg_retain(&g, ep); /* keeps the memfd, or closes it */
	else
		sys_close(g.memfd);
	if (rc < 0)
		goto fail;
	/* One trip: the segment and our INIT are in the
	 * listener's backlog now, as a SYN would be; nothing to wait for (the
	 * acceptor's INIT comes first on its ring). */
	*out = ep;
	return 0;
unused:
	shm_seg_unused(&g);
fail:
	shm_ep_free(ep);
	return rc;
}

static int shm_connect_fd(struct ssw_ep *ep) { return ep->ctl_fd; }

static int shm_connect_complete(struct ssw_ep *ep, void *reply, size_t *reply_len)
{
	(void)reply;
	*reply_len = 0; /* one-trip connect: the acceptor's answer travels in-band */
	return ep->err;
}

static void shm_close(struct ssw_ep *ep, int how)
{
	if (!ep)
		return;
	shm_rdma_cancel(ep); /* queued transfers (async mode) never touch their buffers after close */
	if (ep->tx.ctl && how == SSW_CLOSE_ORDERLY)
		shm_ring_flush(ep); /* held messages go before the end, as a kernel close sends corked data */
	if (ep->tx.ctl && how == SSW_CLOSE_ABORT)
		shm_ring_drop_held(ep); /* a reset sends nothing it held (its hold not over) */
	if (ep->tx.ctl && how != SSW_CLOSE_DETACH) {
		/* Said at once, beside the ring, so the peer's poll sees it behind
		 * unread data; a peer that sleeps (or watches: epoll) is armed
		 * and is rung, unless the FIN before this rang already (an arm
		 * checks `closed` after it is set) */
		atomic_store_explicit(&ep->tx.ctl->closed, how == SSW_CLOSE_ABORT ? SHM_CLOSED_RESET : SHM_CLOSED_ORDERLY,
				      memory_order_seq_cst);
		shm_wake_peer(ep);
	}
	if (ep->tx.ctl && how != SSW_CLOSE_DETACH)
		shm_ring_trim(ep, 1); /* before the segment is released (recycled): what was read goes */
	if (ep->seg && how != SSW_CLOSE_DETACH) {
		struct shm_seg_hdr *h = ep->seg;
		if (ep->tx.ctl == &h->ring[1]) { /* the acceptor's last touch: its connector may recycle it */
			atomic_store_explicit(&h->released, 1, memory_order_release);
			shm_seg_map_keep(ep);
		}
		else
			shm_seg_release(ep, true); /* the cache takes the mapping and the memfd, if it kept them */
	}
	/* Detached (another process still holds it): the peer sees the
	 * rendezvous connection hang up once every holder has closed it. */
	ep_release(ep, how == SSW_CLOSE_DETACH);
}

static uint32_t shm_ep_caps(struct ssw_ep *ep)
{
	shm_peer_cred(ep);
	return ep->caps;
}

/* From the kernel (SO_PEERCRED), asked once: shm_peer_cred's copy only
 * when it answered (its fields read as uid 0 when it did not). */
static int shm_ep_peer_cred(struct ssw_ep *ep, uint32_t *uid, int32_t *pid)
{
	if (ep->seg_key.pid > 0) { /* a connector: its rendezvous check asked already (the answer stays) */
		*uid = ep->seg_key.uid;
		*pid = ep->seg_key.pid;
		return 0;
	}
	shm_peer_cred(ep);
	if (atomic_load(&ep->cred_ok)) { /* a connected socket's peer credentials never change */
		*uid = ep->peer_uid;
		*pid = ep->peer_pid;
		return 0;
	}
	struct ucred uc;
	socklen_t l = sizeof uc;
	if (sys_getsockopt(ep->ctl_fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0)
		return -errno;
	if (l < sizeof uc)
		return -EPROTO;
	*uid = uc.uid;
	*pid = uc.pid;
	return 0;
}

/* The endpoint's page, copied in place for this process alone; the
 * segment stays mapped as it is (its rings are the peer's too, read as
 * untrusted input by every holder). */
static int shm_unshare(struct ssw_ep *ep)
{
	struct ssw_ep *c = ssw_shared_dup(ep, sizeof *ep, sizeof *ep);
	if (!c)
		return -ENOMEM;
	atomic_store(&c->vouch_lock, 0); /* held by another holder maybe: not by us */
	return ssw_shared_move(c, sizeof *ep, ep) ? 0 : -ENOMEM;
}

const struct ssw_conn_ops shm_conn_ops = {
	.size = sizeof(struct ssw_conn_ops),
	.listen = shm_listen,
	.listener_fd = shm_listener_fd,
	.accept = shm_accept,
	.listener_close = shm_listener_close,
	.listener_export = shm_listener_export,
	.listener_import = shm_listener_import,
	.connect = shm_connect,
	.connect_fd = shm_connect_fd,
	.connect_complete = shm_connect_complete,
	.close = shm_close,
	.ep_caps = shm_ep_caps,
	.listener_ready = shm_listener_ready,
	.peer_cred = shm_ep_peer_cred,
	.unshare = shm_unshare,
	.ep_export = shm_ep_export,
	.ep_import = shm_ep_import,
};
