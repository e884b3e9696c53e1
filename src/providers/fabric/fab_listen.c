/* fab_listen.c — fabric listeners: a passive endpoint on the mapped port,
 * and one thread per process that accepts connection requests itself (a
 * connect must complete without the application calling accept) and
 * queues the connected endpoints for accept(); the same thread reads the
 * shared event queues (fab_eq.c: connections set up and ended), serves a
 * hub whose member's socket has room again for the output libfabric holds
 * for it (fab_hub.c: watch_room), and progresses endpoints whose owner is
 * away. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"
#include "common/sockdiag.h"
#include "common/sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* All listeners of this process and the accept thread's state, under lmu.
 * Lock order: the gate (fab_gate_enter), then lmu, then an endpoint's mu. */
static pthread_mutex_t lmu = PTHREAD_MUTEX_INITIALIZER;
static struct ssw_listener *listeners;
/* wait fds of listeners and event queues (epoll data 0), hubs (a hub) */
static _Atomic int thr_epfd = -1;
static pid_t thr_pid;       /* the process whose thread runs (0: none) */
static struct ssw_ep *watched; /* endpoints with a backlog (fab_watch) */
/* An eventfd in the thread's set (epoll data: its own address): rung when
 * an endpoint joins `watched` while the thread sleeps its long sleep, which
 * it announces in thr_asleep (both under lmu).  Without it a backlog left
 * by a sender that then went idle waited up to that sleep, a second. */
static int thr_wake = -1;
static bool thr_asleep;
/* The ready queues, under their own lock, never held across a libfabric
 * call: accept() and listener_ready() come from application threads that
 * may hold the switch's locks (epoll), which libfabric's own calls, made
 * under lmu, may want too. */
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;

static int thread_start(void);

static void ep_watch(int fd, int op)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int e = atomic_load(&thr_epfd);
	if (e >= 0 && fd >= 0)
		sys_epoll_ctl(e, op, fd, &ev);
}

void fab_thread_add_fd(int fd) { ep_watch(fd, EPOLL_CTL_ADD); }

int fab_thread_watch_out(int fd, struct fab_hub *h)
{
	int e = atomic_load(&thr_epfd);
	if (e < 0 || fd < 0 || thr_pid != ssw_pid())
		return -1;
	/* edge-triggered: an event when a write found the socket full and it
	 * has room again (and one now, if it has) */
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET, .data.ptr = h };
	return sys_epoll_ctl(e, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST ? 0 : -1;
}

void fab_thread_unwatch_out(int fd)
{
	int e = atomic_load(&thr_epfd);
	if (e >= 0 && fd >= 0 && thr_pid == ssw_pid())
		(void)sys_epoll_ctl(e, EPOLL_CTL_DEL, fd, NULL);
}

/* (lmu held) */
void fab_thread_watch_hub(struct fab_hub *h, bool on)
{
	int e = atomic_load(&thr_epfd);
	if (!h || h->cq_fd < 0)
		return;
	if (on && h->hello_wait++ == 0 && e >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = h };
		(void)sys_epoll_ctl(e, EPOLL_CTL_ADD, h->cq_fd, &ev);
	} else if (!on && h->hello_wait > 0 && --h->hello_wait == 0 && e >= 0) {
		(void)sys_epoll_ctl(e, EPOLL_CTL_DEL, h->cq_fd, NULL);
	}
}

static void ready_push(struct ssw_listener *l, struct ssw_ep *ep)
{
	pthread_mutex_lock(&qmu);
	ep->qnext = NULL;
	if (l->ready_tail)
		l->ready_tail->qnext = ep;
	else
		l->ready = ep;
	l->ready_tail = ep;
	uint64_t one = 1;
	(void)!sys_write(l->efd, &one, sizeof one);
	pthread_mutex_unlock(&qmu);
}

/* A connection request: our endpoint for it, accepted at once (the
 * connector's connect completes without the application's accept). */
static void on_connreq(struct ssw_listener *l, struct fi_eq_cm_entry *e, size_t n)
{
	struct fi_info *info = e->info;
	const struct fab_cm_hdr *h = (const void *)e->data;
	size_t dl = n > sizeof *e ? n - sizeof *e : 0;
	struct ssw_ep *ep = NULL;
	bool in_msg = dl >= sizeof *h && h->magic == FAB_CM_MAGIC_MSG(l->proto);
	if (dl < sizeof *h || (h->magic != FAB_CM_MAGIC(l->proto) && !in_msg) || h->len > SSW_CONNECT_PRIV_MAX ||
	    (!in_msg && h->len > dl - sizeof *h)) {
		SSW_DEBUG("fabric: refused a connection request with malformed data or of another protocol version");
		fi_reject(l->pep, info->handle, NULL, 0);
		fab_freeinfo(info);
		return;
	}
	int rc = fab_ep_open(info, l->fab, &ep); /* takes info */
	if (rc) {
		SSW_INFO("fabric: cannot take a connection request: %s", fab_strerror(-rc));
		fi_reject(l->pep, info->handle, NULL, 0);
		fab_freeinfo(info);
		return;
	}
	if (in_msg) {
		ep->hello_wait = true; /* its first message: see read_pending */
	} else {
		memcpy(ep->priv, (const uint8_t *)e->data + sizeof *h, h->len);
		ep->priv_len = h->len;
	}
	ep->owner = l;
	rc = fi_accept(ep->ep, NULL, 0);
	if (rc) {
		fab_ep_destroy(ep, SSW_CLOSE_ABORT);
		return;
	}
	ep->qnext = l->pending;
	l->pending = ep;
	/* its connection comes through the shared event queue, which the
	 * thread sleeps on; a HELLO through the hub's queue */
	if (ep->hello_wait)
		fab_thread_watch_hub(ep->hub, true);
}

static void read_pep(struct ssw_listener *l)
{
	for (;;) {
		uint32_t ev;
		/* the entry's flexible data[] (the connector's private data)
		 * continues into the bytes after it */
		_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + 512];
		struct fi_eq_cm_entry *cm = (struct fi_eq_cm_entry *)raw;
		ssize_t n = fi_eq_read(l->eq, &ev, raw, sizeof raw, 0);
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry ee = { 0 };
			fi_eq_readerr(l->eq, &ee, 0);
			continue;
		}
		if (n < 0)
			return;
		if (ev == FI_CONNREQ)
			on_connreq(l, cm, (size_t)n);
		else if (cm->info)
			fab_freeinfo(cm->info);
	}
}

/* Pending endpoints: connected ones move to the ready queue. */
static void read_pending(struct ssw_listener *l)
{
	struct ssw_ep **pp = &l->pending;
	while (*pp) {
		struct ssw_ep *ep = *pp;
		pthread_mutex_lock(&ep->mu);
		bool waited = ep->hello_wait;
		fab_progress(ep);
		/* connected, and its private data here (in the request, or the
		 * first message): accept() can take it */
		bool up = ep->connected && !ep->hello_wait;
		bool dead = ep->conn_err || ep->shutdown_seen || atomic_load(&ep->broken);
		pthread_mutex_unlock(&ep->mu);
		if (!up && !dead) {
			pp = &ep->qnext;
			continue;
		}
		*pp = ep->qnext;
		if (waited)
			fab_thread_watch_hub(ep->hub, false);
		if (up && !atomic_load(&ep->broken))
			ready_push(l, ep); /* one that ended at once too, as TCP accepts it */
		else
			fab_ep_destroy(ep, SSW_CLOSE_ABORT);
	}
}

/* Endpoints with a backlog, or memory the peer may read or write:
 * progressed here when their owner is not at it (trylock), so that data
 * leaves as credits come back and the peer's transfers are served; a
 * wake-up for the
 * owner when anything moved (it may sleep on a wait fd whose event was
 * taken here). */
static void run_watched(void)
{
	uint64_t now = ssw_now_ns();
	for (struct ssw_ep **pp = &watched; *pp;) {
		struct ssw_ep *ep = *pp;
		/* an owner at work flushes its backlog itself: the thread only
		 * steps in after it has been away a while (one core less taken
		 * from a busy sender) */
		/* nor one another process drives since a fork (its owner here
		 * takes it back first: fab_hub_claim) */
		if ((!ep->lingering && now - atomic_load_explicit(&ep->app_ns, memory_order_relaxed) < FAB_IDLE_NS) ||
		    (!ep->lingering && !fab_hub_live(ep)) || pthread_mutex_trylock(&ep->mu) != 0) {
			pp = &ep->wnext;
			continue;
		}
		if (ep->lingering) {
			fab_hub_claim(ep); /* closed by its owner here */
			bool end = fab_linger_step(ep);
			pthread_mutex_unlock(&ep->mu);
			if (!end) {
				pp = &ep->wnext;
				continue;
			}
			*pp = ep->wnext;
			ep->watched = false;
			fab_ep_destroy(ep, FAB_CLOSE_FINAL);
			continue;
		}
		uint64_t n0 = ep->ncomp;
		fab_hub_claim(ep); /* lingering: closed by its owner here */
		fab_progress(ep);
		if (ep->ncomp != n0) {
			uint64_t one = 1;
			(void)!sys_write(ep->wake_fd, &one, sizeof one);
			atomic_store(&ep->woken, true); /* after: see fab_wake_ack */
		}
		bool done = (!ep->bl_n && !ep->nexposed) || atomic_load(&ep->broken) || ep->shutdown_seen;
		if (done) {
			*pp = ep->wnext;
			ep->watched = false;
		} else {
			pp = &ep->wnext;
		}
		pthread_mutex_unlock(&ep->mu);
	}
}

static void exit_flush(void);

/* exit_flush registered, and not run yet.  Registered when an endpoint
 * first needs it (not when the thread starts, at a process's first
 * connect): atexit handlers run last registered first, and the switch's
 * own, registered at start-up, closes the connections the program left
 * open at exit (switch/exit.c).  Registered at a connect, ours ran before
 * it: nothing lingered yet, and what that close handed over was cut off
 * at the exit (socat's last 176 KiB of 10 MiB).  A linger during exit
 * registers it again: it then runs after the handler that closed. */
static bool exit_hook;

static void exit_hook_arm(void)
{
	if (!exit_hook) {
		exit_hook = true;
		atexit(exit_flush);
	}
}

/* Put the endpoint on the thread's list (lmu held, the thread started),
 * and wake the thread if it sleeps its long sleep. */
static void watch_add(struct ssw_ep *ep)
{
	ep->watched = true;
	ep->watch_pid = ssw_pid();
	ep->wnext = watched;
	watched = ep;
	if (thr_asleep) {
		thr_asleep = false;
		uint64_t one = 1;
		(void)!sys_write(thr_wake, &one, sizeof one);
	}
}

void fab_watch(struct ssw_ep *ep)
{
	if (ep->watched && ep->watch_pid == ssw_pid())
		return; /* (a fork child's copy says watched: the list was the parent's) */
	pthread_mutex_lock(&lmu);
	exit_hook_arm();
	if (thread_start() == 0)
		watch_add(ep);
	pthread_mutex_unlock(&lmu);
}

int fab_linger(struct ssw_ep *ep)
{
	pthread_mutex_lock(&lmu);
	exit_hook_arm();
	int rc = thread_start();
	if (rc == 0 && !(ep->watched && ep->watch_pid == ssw_pid()))
		watch_add(ep);
	pthread_mutex_unlock(&lmu);
	return rc;
}

/* At exit: what was written still leaves (a kernel socket's buffer does
 * after its process is gone): wait, bounded, for the thread to send the
 * backlogs and finish the closes. */
static void exit_flush(void)
{
	pthread_mutex_lock(&lmu);
	exit_hook = false;
	pthread_mutex_unlock(&lmu);
	fab_quiesce();
}

void fab_quiesce(void)
{
	uint64_t end = ssw_now_ns() + FAB_EXIT_NS;
	for (;;) {
		pthread_mutex_lock(&lmu);
		bool busy = false;
		if (thr_pid == ssw_pid())
			for (struct ssw_ep *ep = watched; ep && !busy; ep = ep->wnext)
				/* sent, and taken by the peer's switch (credited back):
				 * our exit closes the socket, and a close over unread
				 * bytes (the peer's credits) resets the transport, which
				 * throws away what the peer's kernel still holds of ours
				 * (the peer's own close is not waited for) */
				busy = ep->bl_n || (ep->lingering && !atomic_load(&ep->broken) && !ep->shutdown_seen &&
						    !atomic_load(&ep->peer_closed) &&
						    (!ep->close_sent || ep->ntx_free < FAB_TX_N || fab_data_uncredited(ep)));
		pthread_mutex_unlock(&lmu);
		if (!busy || ssw_now_ns() > end)
			return;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}

void fab_unwatch(struct ssw_ep *ep)
{
	if (!ep->watched)
		return;
	pthread_mutex_lock(&lmu);
	for (struct ssw_ep **pp = &watched; *pp; pp = &(*pp)->wnext)
		if (*pp == ep) {
			*pp = ep->wnext;
			break;
		}
	ep->watched = false; /* in a fork child: the list was the parent's */
	pthread_mutex_unlock(&lmu);
}

static void poll_eq(struct fab_fabric *fab, void *arg)
{
	if (fab_eq_poll(fab))
		*(bool *)arg = true;
}

static void eq_quiet(struct fab_fabric *fab, void *arg)
{
	if (*(bool *)arg && fi_trywait(fab->fabric, (struct fid *[]){ &fab->eq->fid }, 1) != 0)
		*(bool *)arg = false;
}

/* Can the thread sleep?  fi_trywait on every queue it waits for (the
 * hubs' members awaiting a first message: their hub serves them when it
 * wakes us). */
static bool all_quiet(void)
{
	for (struct ssw_listener *l = listeners; l; l = l->next)
		if (fi_trywait(l->fab->fabric, (struct fid *[]){ &l->eq->fid }, 1) != 0)
			return false;
	bool quiet = true;
	fab_eq_each(eq_quiet, &quiet);
	return quiet;
}

static void *accept_thread(void *arg)
{
	(void)arg;
	int epfd = thr_epfd;
	uint64_t last_sweep = 0;
	for (;;) {
		fab_gate_enter();
		pthread_mutex_lock(&lmu);
		if (thr_pid != ssw_pid() || epfd != thr_epfd) { /* cannot happen in the child: no thread there */
			pthread_mutex_unlock(&lmu);
			fab_gate_leave();
			return NULL;
		}
		bool quiet = false;
		for (int round = 0; round < 4 && !quiet; round++) {
			bool any = false;
			fab_eq_each(poll_eq, &any); /* connections set up and ended first */
			for (struct ssw_listener *l = listeners; l; l = l->next) {
				read_pep(l);
				read_pending(l);
			}
			run_watched();
			quiet = all_quiet();
		}
		bool long_sleep = quiet && !watched;
		thr_asleep = long_sleep; /* from now on fab_watch rings thr_wake */
		pthread_mutex_unlock(&lmu);
		fab_gate_leave();
		struct epoll_event evs[16];
		int n;
		/* bounded: a wake-up lost to a provider's quirk costs a second;
		 * watched endpoints are looked at every FAB_WATCH_NS (their wait
		 * fds would wake us for every message their owner handles) */
		if (long_sleep) {
			n = sys_epoll_wait(epfd, evs, 16, 1000);
		} else {
			struct pollfd pf = { .fd = epfd, .events = POLLIN };
			struct timespec ts = { 0, quiet ? (long)FAB_WATCH_NS : 1000000L };
			n = (int)SYS_(ppoll, &pf, 1, &ts, NULL, 8) > 0 ? sys_epoll_wait(epfd, evs, 16, 0) : 0;
		}
		/* a sleep that nothing ended: output an edge never announced
		 * (at most every 100 ms: the hubs' locks are their owners' too) */
		if (n == 0 && ssw_now_ns() - last_sweep >= 100000000ull) {
			last_sweep = ssw_now_ns();
			fab_gate_enter();
			fab_hub_sweep();
			fab_gate_leave();
		}
		/* a hub named: a member's socket has room again for libfabric's
		 * output, or a member awaits its first message */
		for (int i = 0; i < n; i++)
			if (evs[i].data.ptr == &thr_wake) {
				uint64_t v;
				(void)!sys_read(thr_wake, &v, sizeof v);
			} else if (evs[i].data.ptr) {
				fab_gate_enter();
				fab_hub_service(evs[i].data.ptr);
				fab_gate_leave();
			}
	}
	return NULL;
}

static void add_eq_fd(struct fab_fabric *fab, void *arg)
{
	(void)arg;
	ep_watch(fab->eq_fd, EPOLL_CTL_ADD);
}

int fab_thread_ensure(void)
{
	if (thr_pid == ssw_pid())
		return 0;
	pthread_mutex_lock(&lmu);
	int rc = thread_start();
	pthread_mutex_unlock(&lmu);
	return rc;
}

/* Start the thread of this process (with lmu held). */
static int thread_start(void)
{
	if (thr_pid == ssw_pid())
		return 0;
	int e = ssw_fd_hide(sys_epoll_create1(EPOLL_CLOEXEC));
	if (e < 0)
		return -errno;
	int w = ssw_fd_hide(sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	struct epoll_event wev = { .events = EPOLLIN, .data.ptr = &thr_wake };
	if (w < 0 || sys_epoll_ctl(e, EPOLL_CTL_ADD, w, &wev) != 0) {
		int err = errno;
		if (w >= 0)
			sys_close(w);
		sys_close(e);
		return -err;
	}
	thr_wake = w;
	thr_asleep = false;
	atomic_store(&thr_epfd, e);
	/* (in a fork child: the queues opened before, and the listeners) */
	fab_eq_each(add_eq_fd, NULL);
	for (struct ssw_listener *l = listeners; l; l = l->next)
		ep_watch(l->eq_fd, EPOLL_CTL_ADD);
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 256 << 10);
	/* the thread must not take the application's signals */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	thr_pid = ssw_pid();
	int rc = pthread_create(&t, &a, accept_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (rc) {
		thr_pid = 0;
		sys_close(e);
		sys_close(w);
		thr_wake = -1;
		atomic_store(&thr_epfd, -1);
		return -rc;
	}
	return 0;
}

/* In a fork child: the thread is gone, and the parent's listeners are the
 * parent's (their libfabric objects share kernel objects with it: never
 * touched here; the switch closes them, see fab_listener_close). */
void fab_listen_atfork_child(void)
{
	pthread_mutex_init(&lmu, NULL);
	pthread_mutex_init(&qmu, NULL);
	thr_pid = 0;
	if (atomic_load(&thr_epfd) >= 0)
		sys_close(atomic_load(&thr_epfd)); /* our copy of the parent's set (the parent keeps it) */
	atomic_store(&thr_epfd, -1);
	if (thr_wake >= 0)
		sys_close(thr_wake);
	thr_wake = -1;
	thr_asleep = false;
	listeners = NULL;
	watched = NULL;
}

/* Our fabric port is taken.  By another user, that is worth a warning and
 * a note for `stat`: the port its listener holds (P + offset) answers the
 * remote connectors of ours (README Security), while we serve kernel TCP
 * and the other providers only. */
static void note_port_taken(const struct sockaddr_storage *a, int app_port)
{
	struct sockaddr_storage d;
	uid_t uid;
	memcpy(&d, a, sizeof d);
	if (ssw_diag_listener_uid(&d, &uid) < 0 || uid == geteuid())
		return;
	int port = ntohs(((struct sockaddr_in *)&d)->sin_port);
	ssw_diag_note("fabric port %d (for port %d) is taken by uid %u", port, app_port, (unsigned)uid);
	SSW_WARN("listen on port %d: its fabric port %d is taken by uid %u: no fabric listener (remote peers use kernel "
		 "TCP, or reach that user's listener)", app_port, port, (unsigned)uid);
}

int fab_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog, uint32_t proto, struct ssw_listener **out)
{
	(void)addrlen;
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (fab_dl_load())
		return -ENODEV;
	struct sockaddr_storage a;
	size_t al = addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	memcpy(&a, addr, al);
	/* port 0: the kernel's choice (a moving connection's listener:
	 * provider.h listener_name) */
	int port = ((struct sockaddr_in *)&a)->sin_port ? fab_map_port(ntohs(((struct sockaddr_in *)&a)->sin_port)) : 0;
	if (port < 0)
		return -EINVAL;
	((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)port);
	struct ssw_listener *l = calloc(1, sizeof *l);
	struct fi_info *h = fab_hints();
	if (!l || !h) {
		free(l);
		fab_freeinfo(h);
		return -ENOMEM;
	}
	l->pid = ssw_pid();
	l->proto = proto;
	l->efd = -1;
	h->src_addr = malloc(al);
	h->src_addrlen = al;
	h->addr_format = addr->sa_family == AF_INET ? FI_SOCKADDR_IN : FI_SOCKADDR_IN6;
	if (h->src_addr)
		memcpy(h->src_addr, &a, al);
	fab_gate_enter();
	int rc = h->src_addr ? fab_getinfo(FAB_API, NULL, NULL, 0, h, &l->info) : -FI_ENOMEM;
	struct fi_eq_attr ea = { .size = 64, .wait_obj = FI_WAIT_FD };
	if (!rc && (!l->info->src_addr || l->info->src_addrlen < al)) {
		free(l->info->src_addr);
		l->info->src_addr = malloc(al);
		if (!l->info->src_addr)
			rc = -FI_ENOMEM;
	}
	if (!rc) {
		/* a wildcard hint comes back as one of the host's interfaces with
		 * the port dropped (tcp provider): listen where we were asked, on
		 * the mapped port, or connectors find nobody */
		memcpy(l->info->src_addr, &a, al);
		l->info->src_addrlen = al;
	}
	if (!rc)
		rc = fab_fabric_get(l->info, &l->fab);
	if (!rc)
		rc = fi_eq_open(l->fab->fabric, &ea, &l->eq, NULL);
	if (!rc)
		rc = fi_passive_ep(l->fab->fabric, l->info, &l->pep, NULL);
	if (!rc)
		rc = fi_pep_bind(l->pep, &l->eq->fid, 0);
	if (!rc) {
		size_t bl = backlog > 0 ? (size_t)backlog : 128;
		fi_control(&l->pep->fid, FI_BACKLOG, &bl);
		rc = fi_listen(l->pep);
	}
	if (!rc)
		rc = fi_control(&l->eq->fid, FI_GETWAIT, &l->eq_fd);
	if (!rc) {
		l->efd = ssw_fd_hide(sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
		if (l->efd < 0)
			rc = -FI_ENOMEM;
	}
	if (!rc) {
		pthread_mutex_lock(&lmu);
		rc = thread_start();
		if (!rc) {
			l->next = listeners;
			listeners = l;
			ep_watch(l->eq_fd, EPOLL_CTL_ADD);
		}
		pthread_mutex_unlock(&lmu);
	}
	if (rc) {
		int e = rc == -FI_EADDRINUSE || rc == -EADDRINUSE ? -EADDRINUSE : fab_errno(rc);
		SSW_DEBUG("fabric: listen on port %d: %s", port, fab_strerror(-rc));
		if (e == -EADDRINUSE)
			note_port_taken(&a, ntohs(((const struct sockaddr_in *)addr)->sin_port));
		if (l->pep)
			fi_close(&l->pep->fid);
		if (l->eq)
			fi_close(&l->eq->fid);
		fab_gate_leave();
		if (l->info)
			fab_freeinfo(l->info);
		if (l->efd >= 0)
			sys_close(l->efd);
		fab_freeinfo(h);
		free(l);
		return e;
	}
	fab_gate_leave();
	fab_freeinfo(h);
	*out = l;
	return 0;
}

int fab_listener_fd(struct ssw_listener *l) { return l->efd; }

int fab_listener_name(struct ssw_listener *l, struct sockaddr_storage *addr, socklen_t *len)
{
	size_t n = sizeof *addr;
	memset(addr, 0, sizeof *addr);
	fab_gate_enter();
	int rc = fi_getname(&l->pep->fid, addr, &n);
	fab_gate_leave();
	if (rc)
		return fab_errno(rc);
	if (addr->ss_family != AF_INET && addr->ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	/* the fabric port back to the application's, which connect maps */
	int p = fab_unmap_port(ntohs(((struct sockaddr_in *)addr)->sin_port));
	if (p < 0)
		return -EINVAL;
	((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)p);
	*len = addr->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	return 0;
}

int fab_listener_ready(struct ssw_listener *l)
{
	pthread_mutex_lock(&qmu);
	int r = l->pid == ssw_pid() && l->ready != NULL;
	pthread_mutex_unlock(&qmu);
	return r;
}

int fab_accept(struct ssw_listener *l, struct ssw_ep **out, void *priv, size_t *priv_len)
{
	pthread_mutex_lock(&qmu);
	struct ssw_ep *ep = l->pid == ssw_pid() ? l->ready : NULL;
	if (ep && ep->priv_len > *priv_len) {
		ep = NULL; /* cannot happen: the caller's room is SSW_CONNECT_PRIV_MAX */
	}
	if (ep) {
		l->ready = ep->qnext;
		if (!l->ready) {
			l->ready_tail = NULL;
			uint64_t v;
			(void)!sys_read(l->efd, &v, sizeof v);
		}
		ep->qnext = NULL;
		ep->owner = NULL;
	}
	pthread_mutex_unlock(&qmu);
	if (!ep)
		return -EAGAIN;
	memcpy(priv, ep->priv, ep->priv_len);
	*priv_len = ep->priv_len;
	*out = ep;
	return 0;
}

void fab_listener_close(struct ssw_listener *l)
{
	if (!l)
		return;
	fab_gate_enter();
	if (l->pid != ssw_pid()) {
		/* a fork's copy of the parent's listener: ours to free, without
		 * touching what the parent still uses (fab_fork.c); its queued
		 * connections are the parent's */
		fab_unshare_fds(l->eq_fd);
		struct ssw_ep *lists[2] = { l->pending, l->ready };
		for (int i = 0; i < 2; i++)
			for (struct ssw_ep *ep = lists[i], *nx; ep; ep = nx) {
				nx = ep->qnext;
				fab_ep_destroy(ep, SSW_CLOSE_DETACH);
			}
		fi_close(&l->pep->fid);
		fi_close(&l->eq->fid);
		fab_gate_leave();
		fab_freeinfo(l->info);
		sys_close(l->efd);
		free(l);
		return;
	}
	pthread_mutex_lock(&lmu);
	for (struct ssw_listener **pp = &listeners; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	ep_watch(l->eq_fd, EPOLL_CTL_DEL);
	pthread_mutex_lock(&qmu);
	struct ssw_ep *lists[2] = { l->pending, l->ready };
	l->pending = l->ready = l->ready_tail = NULL;
	pthread_mutex_unlock(&qmu);
	for (int i = 0; i < 2; i++)
		for (struct ssw_ep *ep = lists[i], *nx; ep; ep = nx) {
			nx = ep->qnext;
			if (i == 0 && ep->hello_wait)
				fab_thread_watch_hub(ep->hub, false);
			pthread_mutex_lock(&ep->mu);
			pthread_mutex_unlock(&ep->mu);
			/* never accepted: reset, as the kernel resets a closed listener's queue */
			fab_ep_destroy(ep, SSW_CLOSE_ABORT);
		}
	fi_close(&l->pep->fid);
	fi_close(&l->eq->fid);
	pthread_mutex_unlock(&lmu);
	fab_gate_leave();
	fab_freeinfo(l->info);
	sys_close(l->efd);
	free(l);
}
