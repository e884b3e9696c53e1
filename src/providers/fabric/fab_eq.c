/* fab_eq.c — the event queue a fabric's endpoints share: opened with the
 * first endpoint, read by whoever needs news of a connection (a connect's
 * completion, a sleeper's peer state) and by the provider's thread, which
 * sleeps on it; each event goes to the endpoint it names (the context we
 * gave fi_endpoint), as flags its owner folds into its state.
 *
 * One queue instead of one per connection: libfabric 1.17's tcp provider
 * gives each event queue a wait set of three descriptors (an epoll set and
 * a signal socketpair), and reading one runs the connection manager over
 * every connection being set up on it (an epoll_wait): shared, that is one
 * reading for all of them. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"
#include "common/provfds.h"
#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fab_fabric *with_eq[64]; /* fabrics whose queue is open */
static int n_with_eq;

/* The one member of a fresh set: the queue's signal (tcp), or -1. */
static int only_member(int epfd)
{
	struct fab_member m[2];
	return fab_epoll_members(epfd, m, 2) == 1 ? m[0].fd : -1;
}

int fab_eq_open(struct fab_fabric *fab)
{
	pthread_mutex_lock(&fab->eqmu);
	int rc = 0;
	if (!fab->eq) {
		struct fi_eq_attr ea = { .size = 4096, .wait_obj = FI_WAIT_FD };
		rc = fi_eq_open(fab->fabric, &ea, &fab->eq, NULL);
		if (!rc) {
			rc = fi_control(&fab->eq->fid, FI_GETWAIT, &fab->eq_fd);
			if (rc || fab->eq_fd < 0) {
				fi_close(&fab->eq->fid);
				fab->eq = NULL;
				rc = rc ? rc : -FI_EINVAL;
			}
		}
		if (!rc) {
			fab->eq_sig = fab_is_tcp117() ? only_member(fab->eq_fd) : -1;
			pthread_mutex_lock(&list_mu);
			if (n_with_eq < (int)(sizeof with_eq / sizeof with_eq[0]))
				with_eq[n_with_eq++] = fab;
			pthread_mutex_unlock(&list_mu);
			fab_thread_add_fd(fab->eq_fd);
		}
	}
	pthread_mutex_unlock(&fab->eqmu);
	return rc;
}

void fab_eq_each(void (*fn)(struct fab_fabric *fab, void *arg), void *arg)
{
	pthread_mutex_lock(&list_mu);
	int n = n_with_eq;
	struct fab_fabric *all[64];
	memcpy(all, with_eq, (size_t)n * sizeof all[0]);
	pthread_mutex_unlock(&list_mu);
	for (int i = 0; i < n; i++)
		fn(all[i], arg);
}

/* An event for t (eqmu held: t cannot be closed meanwhile, fab_hub.c).
 * Its owner folds it (fab_eq_fold); a connect's waiter sleeps on wake_fd,
 * a connected one's waiters only while armed. */
static void dispatch(struct ssw_ep *t, unsigned bit, int err)
{
	if (bit == FAB_EV_ERR && !(t->ev_seen & FAB_EV_ERR)) {
		t->eqerr = err;
		t->eqerr_conn = (t->ev_seen & FAB_EV_CONNECTED) != 0;
	}
	bool was_up = (t->ev_seen & FAB_EV_CONNECTED) != 0;
	t->ev_seen |= bit;
	atomic_fetch_or(&t->eqev, bit);
	/* (an accepted endpoint not yet accepted: the thread reads it next) */
	if (t->connector && !was_up)
		fab_kick(t);
	else
		fab_ring(t);
}

static struct ssw_ep *ep_of(struct fid *f)
{
	return f && f->fclass == FI_CLASS_EP ? f->context : NULL;
}

bool fab_eq_poll(struct fab_fabric *fab)
{
	if (!fab || !fab->eq || pthread_mutex_trylock(&fab->eqmu) != 0)
		return false; /* another reads it: it hands us what is ours */
	bool any = false;
	for (int i = 0; i < 256; i++) {
		uint32_t ev;
		_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
		struct fi_eq_cm_entry *e = (struct fi_eq_cm_entry *)raw;
		ssize_t n = fi_eq_read(fab->eq, &ev, raw, sizeof raw, 0);
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry ee = { 0 };
			if (fi_eq_readerr(fab->eq, &ee, 0) < 0)
				break;
			any = true;
			struct ssw_ep *t = ep_of(ee.fid);
			if (t)
				dispatch(t, FAB_EV_ERR, ee.err ? ee.err : EIO);
			continue;
		}
		if (n < 0)
			break;
		any = true;
		struct ssw_ep *t = n >= (ssize_t)sizeof *e ? ep_of(e->fid) : NULL;
		if (t && ev == FI_CONNECTED)
			dispatch(t, FAB_EV_CONNECTED, 0);
		else if (t && ev == FI_SHUTDOWN)
			dispatch(t, FAB_EV_SHUTDOWN, 0);
		else if (ev == FI_CONNREQ && n >= (ssize_t)sizeof *e && e->info)
			fab_freeinfo(e->info); /* cannot be: requests go to a listener's own queue */
	}
	/* each event set the queue's signal: take it back while the queue is
	 * empty, or the thread sleeping on eq_fd would never sleep */
	if (any)
		(void)fi_trywait(fab->fabric, (struct fid *[]){ &fab->eq->fid }, 1);
	pthread_mutex_unlock(&fab->eqmu);
	return any;
}

bool fab_eq_fold(struct ssw_ep *ep)
{
	unsigned ev = atomic_exchange(&ep->eqev, 0);
	if (!ev)
		return false;
	if (ev & FAB_EV_CONNECTED) {
		ep->connected = true;
		if (atomic_load(&ep->sock_fd) >= 0)
			ep->live = ssw_pid(); /* libfabric put its socket in this process's hub set */
	}
	if (ev & FAB_EV_ERR) {
		if (!ep->eqerr_conn && !ep->connected) {
			/* refused or unreachable: the caller decides what it means */
			ep->conn_err = ep->eqerr == FI_ECONNREFUSED ? -ECONNREFUSED : -(ep->eqerr ? ep->eqerr : EIO);
		} else if (!atomic_exchange(&ep->broken, 1)) {
			SSW_INFO("fabric: connection reset: connection error event");
		}
	}
	if (ev & FAB_EV_SHUTDOWN) {
		/* the peer's process ended the connection without a word of
		 * ours (it died, or exited without closing): as a kernel FIN */
		ep->shutdown_seen = true;
		if (!ep->connected)
			ep->conn_err = -ECONNREFUSED;
	}
	return true;
}

/* ---- fork ------------------------------------------------------------------ */

static void note_byte(struct fab_fabric *fab, void *arg)
{
	(void)arg;
	struct pollfd p = { .fd = fab->eq_sig, .events = POLLIN };
	fab->eq_sig_byte = fab->eq_sig >= 0 && sys_poll(&p, 1, 0) == 1;
}

/* Before fork (the gate held: the queues are still): whether each signal
 * holds its byte, which libfabric's memory (the child's copy too) says. */
void fab_eq_atfork_prepare(void) { fab_eq_each(note_byte, NULL); }

/* A set of the child's own, holding the signal alone (the connection
 * requests being set up are the parent's), and a signal of its own: the
 * parent's reading of a shared one would take the child's byte, and
 * libfabric then waits 10 s for a byte it believes is there. */
static void eq_unshare(struct fab_fabric *fab, void *arg)
{
	(void)arg;
	pthread_mutex_init(&fab->eqmu, NULL);
	if (!fab->eq)
		return;
	struct epoll_event sev = { .events = EPOLLIN };
	bool have_sig = false;
	struct fab_member m[64];
	int n = fab->eq_sig >= 0 ? fab_epoll_members(fab->eq_fd, m, 64) : 0;
	for (int i = 0; i < n; i++)
		if (m[i].fd == fab->eq_sig) {
			sev.events = m[i].events;
			sev.data.u64 = m[i].data;
			have_sig = true;
		}
	int e = sys_epoll_create1(EPOLL_CLOEXEC);
	if (e < 0)
		return;
	int w = ssw_provfd_partner(fab->eq_sig);
	int sv[2];
	if (have_sig && w >= 0 && SYS_(socketpair, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
		(void)sys_fcntl(sv[0], F_SETFL, O_NONBLOCK);
		if (fab->eq_sig_byte)
			(void)!sys_write(sv[1], "", 1);
		(void)sys_dup3(sv[0], fab->eq_sig, O_CLOEXEC);
		(void)sys_dup3(sv[1], w, O_CLOEXEC);
		sys_close(sv[0]);
		sys_close(sv[1]);
		ssw_provfd_pair(fab->eq_sig, w);
	}
	if (have_sig)
		(void)sys_epoll_ctl(e, EPOLL_CTL_ADD, fab->eq_sig, &sev);
	if (e != fab->eq_fd)
		(void)sys_dup3(e, fab->eq_fd, O_CLOEXEC);
	sys_close(e);
}

void fab_eq_atfork_child(void)
{
	pthread_mutex_init(&list_mu, NULL);
	for (int i = 0; i < n_with_eq; i++)
		eq_unshare(with_eq[i], NULL);
}
