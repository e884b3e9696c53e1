/* fab_hub.c — the libfabric objects a process's fabric endpoints share: one
 * domain, and completion queues ("hubs") of up to FAB_HUB_EPS endpoints.
 *
 * Why: a domain, an event queue and a completion queue of their own cost a
 * connection 9 descriptors with libfabric 1.17's tcp provider (each queue's
 * wait object is an epoll set and a socketpair), and a connect opened all of
 * them.  Sharing leaves a connection the application's socket, the
 * provider's socket and our eventfd (wake_fd).
 *
 * What sharing implies (tcp 1.17, prov/tcp/src/tcpx_cq.c): reading a
 * completion queue progresses every endpoint on it (a walk of its list and
 * an epoll_wait over the set of their sockets), so whoever reads a hub
 * takes the data of all its endpoints and writes their completions.  So:
 *  - a completion goes to the endpoint its context names (fab_ctx.ep), into
 *    that endpoint's inbox, which its owner takes under its own lock
 *    (fab_hub_read); an armed endpoint with news is rung (wake_fd), since
 *    the socket its waiters sleep on no longer shows what another took;
 *  - the walk is why a hub holds few endpoints (each read walks them all);
 *  - an endpoint's waiters sleep on its own socket: which socket is whose,
 *    and when libfabric waits for one to take more output, come from
 *    libfabric's own epoll_ctl on the hub's set, which the interposition
 *    reports (fab_hub_epoll_note).  Without that report (a program linking
 *    the provider without the interposition) a hub is one endpoint's and
 *    its waiters sleep on the hub's wait fd, as before sharing;
 *  - memory keys are random: peers of one process share the domain's key
 *    space (fab_random_key);
 *  - after fork both processes hold the hub's endpoints, and reading the
 *    hub in one would take the data of a connection the other drives: the
 *    child gets sets of its own, and in both processes an endpoint joins
 *    its hub's progress again only when that process uses it (fab_hub_claim;
 *    the session lets one process at a time drive a connection).
 * Providers that choose their own keys (verbs: FI_MR_PROV_KEY), and any
 * other version of the tcp provider, keep a hub (and a domain) per
 * endpoint: a protection domain is what keeps one peer's keys from
 * another's. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"
#include "common/provfds.h"
#include "common/sys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static pthread_mutex_t hubs_mu = PTHREAD_MUTEX_INITIALIZER; /* the lists below */
static struct fab_hub *hubs;
struct fab_dom {
	struct fab_fabric *fab;
	char name[64];
	struct fid_domain *domain;
	struct fab_mrc *mrc; /* its registration cache (fab_mrc.c), as long as it lives */
	struct fab_dom *next;
};
static struct fab_dom *doms;

/* Hub sets by fd, for the epoll_ctl report (untouched pages cost nothing). */
#define HUBFD_MAX 65536
static struct fab_hub *_Atomic hub_of_fd[HUBFD_MAX];
/* the interposition reports libfabric's epoll_ctl (seen once: then hubs are shared) */
static _Atomic bool hook_seen;
static __thread int last_add_epfd = -1;

/* ---- keys --------------------------------------------------------------- */

static pthread_mutex_t key_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t key_pool[32];
static unsigned key_left;

/* A forked child draws keys of its own (the parent goes on with the pool) */
static void keys_atfork_child(void)
{
	pthread_mutex_init(&key_mu, NULL);
	memset(key_pool, 0, sizeof key_pool);
	key_left = 0;
}

uint64_t fab_random_key(void)
{
	pthread_mutex_lock(&key_mu);
	if (!key_left) {
		ssize_t n = getrandom(key_pool, sizeof key_pool, 0);
		key_left = n == (ssize_t)sizeof key_pool ? 32 : 0;
		if (!key_left) { /* no entropy: the clock, at worst (logged once) */
			SSW_WARN_ONCE("fabric: getrandom failed: memory keys of shared domains are guessable");
			key_pool[0] = ssw_now_ns() * 0x9e3779b97f4a7c15ull;
			key_left = 1;
		}
	}
	uint64_t k = key_pool[--key_left];
	key_pool[key_left] = 0; /* drawn keys do not stay in memory */
	pthread_mutex_unlock(&key_mu);
	return k ? k : 1;
}

/* ---- the CQ's own signal ------------------------------------------------- */

/* tcp (libfabric 1.17): the CQ's wait fd is a level-triggered epoll set
 * of its endpoints' sockets (epoll data: each endpoint's fid) and of the
 * CQ's own signal, a socketpair that libfabric writes at a completion
 * (unless its byte is already there) and reads back at the next progress
 * that finds it in the set.  On the data path that was two system calls
 * per completion on each side (a unix socket write and read, about a
 * sixth of a 4 KiB sender's time), to wake nobody: the caller reads the
 * CQ itself.  So the signal is taken out of cq_fd's set (detach_cq_signal)
 * and nobody waits on it: progress never sees it, so it stays set and
 * costs nothing (libfabric writes it only when its byte was taken; nobody
 * calls fi_trywait on the CQ, which would take it).  What it was for,
 * waking a sleeper when a completion is read by someone else, is done by
 * whoever reads it: fab_ring on wake_fd, only while a waiter is armed, so
 * that an epoll set (which registers the wait fds for good) is not woken
 * by the completions of its owner's own sends.  Its epoll data is learnt
 * here, once, from a signal of our own (fi_cq_signal) on the set before
 * any endpoint joins. */
static void learn_cq_signal(struct fab_hub *h)
{
	if (!fab_is_tcp117() || h->cq_fd < 0 || fi_cq_signal(h->cq) != 0)
		return;
	struct epoll_event ev[2];
	int n = sys_epoll_wait(h->cq_fd, ev, 2, 0);
	if (n == 1 && ev[0].data.ptr)
		h->cq_sig = ev[0].data.ptr;
	/* our signal back: fi_trywait reads it */
	(void)fi_trywait(h->fab->fabric, (struct fid *[]){ &h->cq->fid }, 1);
}

/* The fd in cq_fd's set whose epoll data is the signal's, or -1. */
static int find_cq_signal_fd(struct fab_hub *h)
{
	struct fab_member m[2];
	int n = fab_epoll_members(h->cq_fd, m, 2);
	/* before any endpoint joins the set holds the signal alone */
	return n == 1 && (uintptr_t)m[0].data == (uintptr_t)h->cq_sig ? m[0].fd : -1;
}

static void detach_cq_signal(struct fab_hub *h)
{
	if (!h->cq_sig)
		return;
	int fd = find_cq_signal_fd(h);
	if (fd < 0)
		return;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	/* quiet now (learn_cq_signal took its byte back), or not the signal */
	if (sys_poll(&pf, 1, 0) != 0 || sys_epoll_ctl(h->cq_fd, EPOLL_CTL_DEL, fd, NULL) != 0)
		return;
	h->sig_fd = fd;
}

/* ---- hubs ----------------------------------------------------------------- */

bool fab_is_tcp117(void)
{
	uint32_t v = fab_version();
	return strcmp(fab_prov_name, "tcp") == 0 && FI_MAJOR(v) == 1 && FI_MINOR(v) == 17;
}

static const char *dom_name(const struct fi_info *info)
{
	return info->domain_attr && info->domain_attr->name ? info->domain_attr->name : "";
}

/* The process's domain for info's fabric and domain name (hubs_mu held). */
static int shared_domain(struct fab_fabric *fab, struct fi_info *info, struct fid_domain **out,
			 struct fab_mrc **mrc)
{
	struct fab_dom *d;
	for (d = doms; d; d = d->next)
		if (d->fab == fab && strcmp(d->name, dom_name(info)) == 0) {
			*out = d->domain;
			*mrc = d->mrc;
			return 0;
		}
	d = calloc(1, sizeof *d);
	if (!d)
		return -FI_ENOMEM;
	int rc = fi_domain(fab->fabric, info, &d->domain, NULL);
	if (rc) {
		free(d);
		return rc;
	}
	d->mrc = fab_mrc_new(d->domain, (info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0);
	d->fab = fab;
	snprintf(d->name, sizeof d->name, "%s", dom_name(info));
	d->next = doms;
	doms = d;
	*out = d->domain;
	*mrc = d->mrc;
	return 0;
}

static int get_wait_fd(struct fid *f, int *fd)
{
	int rc = fi_control(f, FI_GETWAIT, fd);
	return rc ? rc : *fd >= 0 ? 0 : -FI_EINVAL;
}

/* Open the hub's completion queue (hubs_mu held). */
static int hub_open(struct fab_hub *h, struct fi_info *info)
{
	int rc = 0;
	if (h->own_domain) {
		rc = fi_domain(h->fab->fabric, info, &h->domain, NULL);
		h->mrc = rc ? NULL : fab_mrc_new(h->domain, (info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0);
	} else {
		rc = shared_domain(h->fab, info, &h->domain, &h->mrc);
	}
	if (rc)
		return rc;
	struct fi_cq_attr ca = { .size = h->cap * (4 * (FAB_RX_N + FAB_TX_N)) + 64,
				 .format = FI_CQ_FORMAT_DATA,
				 .wait_obj = FI_WAIT_FD };
	h->cq_fd = h->sig_fd = -1;
	h->cq_sig = NULL;
	last_add_epfd = -1;
	rc = fi_cq_open(h->domain, &ca, &h->cq, NULL);
	if (!rc)
		rc = get_wait_fd(&h->cq->fid, &h->cq_fd);
	if (rc) {
		if (h->cq)
			fi_close(&h->cq->fid);
		h->cq = NULL;
		if (h->own_domain) {
			fab_mrc_domain_closing(h->mrc);
			fi_close(&h->domain->fid);
		}
		h->domain = NULL;
		h->mrc = NULL;
		return rc;
	}
	/* its wait set was made just now, its signal added: reported? */
	if (last_add_epfd == h->cq_fd)
		atomic_store(&hook_seen, true);
	learn_cq_signal(h);
	detach_cq_signal(h);
	if (h->cq_fd < HUBFD_MAX)
		atomic_store_explicit(&hub_of_fd[h->cq_fd], h, memory_order_release);
	return 0;
}

/* The closed members kept: freed (their queue is closed, or they are old). */
static void gone_free(struct ssw_ep *e)
{
	while (e) {
		struct ssw_ep *n = e->hnext;
		free(e);
		e = n;
	}
}

static void hub_close(struct fab_hub *h)
{
	if (h->cq_fd >= 0 && h->cq_fd < HUBFD_MAX)
		atomic_store(&hub_of_fd[h->cq_fd], NULL);
	if (h->cq)
		fi_close(&h->cq->fid);
	if (h->own_domain && h->domain) {
		/* every registration of its cache first (its endpoints' puts
		 * come later, and only free what was flushed) */
		fab_mrc_domain_closing(h->mrc);
		fi_close(&h->domain->fid);
	}
	h->cq = NULL;
	h->domain = NULL;
	h->mrc = NULL;
	h->cq_fd = h->sig_fd = -1;
	gone_free(h->gone); /* nothing reports on them now */
	h->gone = NULL;
	h->ngone = 0;
}

/* ep's contexts name no endpoint from now on (h->mu held): what the
 * provider still reports for them is ignored (deliver). */
static void forget_contexts(struct ssw_ep *ep)
{
	for (unsigned i = 0; i < FAB_RX_N; i++)
		ep->rxc[i].ep = NULL;
	for (unsigned i = 0; i < FAB_TX_N; i++)
		ep->txc[i].ep = NULL;
}

/* ep joins h's kept ones (h->mu held); the oldest kept past FAB_HUB_GONE
 * goes, returned to be freed outside the lock. */
static struct ssw_ep *keep_gone(struct fab_hub *h, struct ssw_ep *ep)
{
	ep->hnext = h->gone;
	h->gone = ep;
	if (++h->ngone <= FAB_HUB_GONE)
		return NULL;
	struct ssw_ep **pp = &h->gone;
	while ((*pp)->hnext)
		pp = &(*pp)->hnext;
	struct ssw_ep *old = *pp;
	*pp = NULL;
	h->ngone--;
	return old;
}

int fab_hub_join(struct ssw_ep *ep, struct fi_info *info, struct fab_fabric *fab)
{
	/* shared only where the tricks above are known to hold, libfabric's
	 * epoll_ctl is reported (or not yet known: the first hub tells), and
	 * we choose the keys */
	bool share = fab_is_tcp117() && !(info->domain_attr->mr_mode & FI_MR_PROV_KEY);
	pthread_mutex_lock(&hubs_mu);
	struct fab_hub *h = NULL, *idle = NULL;
	/* (a hub of one on the process's domain when libfabric's epoll_ctl
	 * is not reported: reused once its endpoint left) */
	bool shared = share && atomic_load(&hook_seen);
	for (struct fab_hub *x = hubs; x; x = x->next) {
		if (!x->cq && !x->nep) {
			if (!idle)
				idle = x;
			continue;
		}
		if (x->cq && !x->own_domain && x->shared == shared && x->fab == fab && x->nep < x->cap &&
		    strcmp(x->dom_name, dom_name(info)) == 0) {
			h = x;
			break;
		}
	}
	int rc = 0;
	if (!h) {
		h = idle;
		if (!h) {
			h = calloc(1, sizeof *h);
			if (!h) {
				pthread_mutex_unlock(&hubs_mu);
				return -FI_ENOMEM;
			}
			pthread_mutex_init(&h->mu, NULL);
			h->cq_fd = h->sig_fd = -1;
			h->next = hubs;
			hubs = h;
		}
		h->fab = fab;
		snprintf(h->dom_name, sizeof h->dom_name, "%s", dom_name(info));
		h->shared = share;
		h->own_domain = !share;
		h->cap = share ? FAB_HUB_EPS : 1;
		rc = hub_open(h, info);
		/* not reported: the sockets cannot be told apart, one endpoint a hub */
		if (!rc && share && !atomic_load(&hook_seen)) {
			h->shared = false;
			h->cap = 1;
		}
	}
	if (!rc) {
		pthread_mutex_lock(&h->mu);
		h->nep++;
		ep->hnext = h->eps;
		h->eps = ep;
		pthread_mutex_unlock(&h->mu);
		ep->hub = h;
		ep->domain = h->domain;
		ep->mrc = h->mrc;
		fab_mrc_hold(ep->mrc);
	}
	pthread_mutex_unlock(&hubs_mu);
	return rc;
}

/* ---- completions ---------------------------------------------------------- */

/* A completion for its endpoint's inbox (h->mu held).  quiet: the reader
 * arming this endpoint, which learns of it by itself (ring only another
 * waiter). */
static void deliver(struct fab_ctx *c, size_t len, int err, const struct ssw_ep *quiet)
{
	if (!c || !c->ep)
		return;
	struct ssw_ep *t = c->ep;
	c->ilen = (uint32_t)len;
	c->ierr = err;
	c->inext = NULL;
	if (t->in_tail)
		t->in_tail->inext = c;
	else
		t->in_head = c;
	t->in_tail = c;
	/* news: anything but the completion of a send while slots are
	 * plenty (no writer waits for those: fab_ep.c, on_completion) */
	bool news = c->kind != FAB_CTX_TX || err || __atomic_load_n(&t->ntx_free, __ATOMIC_RELAXED) <= FAB_TX_N / 2;
	atomic_fetch_add(&t->in_n, 1);
	if (!news)
		return;
	atomic_fetch_add(&t->in_news, 1);
	if (t != quiet || atomic_load(&t->armed) > 1)
		fab_ring(t);
}

/* Read the queue (h->mu held): true when it was left empty. */
static bool hub_drain(struct fab_hub *h, const struct ssw_ep *quiet)
{
	if (!h->cq)
		return true;
	struct fi_cq_data_entry c[16];
	for (int round = 0; round < 8; round++) {
		ssize_t n = fi_cq_read(h->cq, c, 16);
		if (n == -FI_EAVAIL) {
			/* every error at the head (a closed endpoint's receives,
			 * cancelled), without a progress (an epoll_wait) each */
			struct fi_cq_err_entry ee = { 0 };
			for (int k = 0; k < 64 && fi_cq_readerr(h->cq, &ee, 0) > 0; k++) {
				deliver(ee.op_context, 0, ee.err == FI_ECANCELED ? -ECANCELED : -ECONNRESET, quiet);
				ee = (struct fi_cq_err_entry){ 0 };
			}
			continue;
		}
		if (n <= 0)
			return n == -FI_EAGAIN;
		for (ssize_t i = 0; i < n; i++)
			deliver(c[i].op_context, c[i].len, 0, quiet);
		if (n < 16)
			return true;
	}
	return false;
}

static struct fab_ctx *take_inbox(struct ssw_ep *ep)
{
	struct fab_ctx *c = ep->in_head;
	ep->in_head = ep->in_tail = NULL;
	atomic_store(&ep->in_n, 0);
	atomic_store(&ep->in_news, 0);
	return c;
}

struct fab_ctx *fab_hub_read(struct ssw_ep *ep, bool quiet_self, bool *drained)
{
	struct fab_hub *h = ep->hub;
	fab_hub_claim(ep);
	pthread_mutex_lock(&h->mu);
	*drained = hub_drain(h, quiet_self ? ep : NULL);
	struct fab_ctx *c = take_inbox(ep);
	if (*drained) {
		atomic_store_explicit(&h->quiet_ns, ssw_now_ns(), memory_order_relaxed);
		atomic_store_explicit(&h->quiet_by, ep, memory_order_relaxed);
	}
	pthread_mutex_unlock(&h->mu);
	return c;
}

void fab_hub_service(struct fab_hub *h)
{
	pthread_mutex_lock(&h->mu);
	if (h->cq)
		hub_drain(h, NULL);
	pthread_mutex_unlock(&h->mu);
}

/* The room watch's safety net, from the provider's thread when it woke
 * for nothing: a hub whose member made a send libfabric may not have
 * finished (room_wanted: what the watch is for; libfabric itself asks for
 * EPOLLOUT only at its next progress, so nothing here can tell that output
 * waits) is read, which is the progress that sends what is left.  The
 * watch is edge-triggered, and an edge comes only after a write that
 * found the socket full: when a reading of the queue sent part of the
 * output without filling the socket, no edge followed and the rest stayed
 * in the process while its owner was away (seen twice under ASan, a
 * loaded CI: t_fabric_idle_send "after", 10 s without a byte).  Now that
 * costs at most the thread's sleep (1 s idle). */
void fab_hub_sweep(void)
{
	struct fab_hub *v[64];
	int n = 0;
	pid_t me = ssw_pid();
	pthread_mutex_lock(&hubs_mu);
	for (struct fab_hub *h = hubs; h && n < 64; h = h->next) /* hubs are never freed */
		if (h->cq && h->nep)
			v[n++] = h;
	pthread_mutex_unlock(&hubs_mu);
	for (int i = 0; i < n; i++) {
		struct fab_hub *h = v[i];
		pthread_mutex_lock(&h->mu);
		bool want = false;
		for (struct ssw_ep *ep = h->eps; ep && !want; ep = ep->hnext)
			want = atomic_load_explicit(&ep->room_wanted, memory_order_relaxed) &&
			       (atomic_load(&ep->room_watch) == me || (ep->pid == me && !atomic_load(&ep->room_watch)));
		if (want && h->cq)
			(void)hub_drain(h, NULL);
		pthread_mutex_unlock(&h->mu);
	}
}

/* ---- the endpoint's socket ------------------------------------------------- */

/* The provider's thread of this process watches the endpoint's socket for
 * room (in the process that drives the endpoint: after a fork, the one
 * that claims it).  libfabric (tcp 1.17) writes a message inside
 * fi_send and keeps what the socket would not take; it asks for POLLOUT in
 * the queue's set only at its next progress, and wakes a sleeper for that
 * through the queue's signal, which is detached (above).  A sender whose
 * send() returned and who then stays away from the switch (blocked on a
 * pipe) made no progress again: the rest of its message stayed in its
 * process, and the reader waited for ever (the differential tester's
 * xfer, README Limits before).  The watch is edge-triggered: the kernel
 * wakes it when a socket that a write found full has room again (TCP's
 * SOCK_NOSPACE), so the thread serves the hub (its reading of the queue is
 * the progress that sends the rest) after every such write, and not for
 * the sends that fit.  It starts at the endpoint's first send that
 * libfabric may not finish at once (not an injected one: fab_ep.c,
 * post_slot), since adding it reports the socket's room once: a thread's
 * wake-up and a reading of the queue a connection, which the connections
 * that only ever send a few bytes (connect, 1 byte, close) do without. */
static void watch_room(struct ssw_ep *ep, pid_t me)
{
	int fd = atomic_load(&ep->sock_fd);
	if (fd >= 0 && atomic_load_explicit(&ep->room_wanted, memory_order_relaxed) &&
	    atomic_load_explicit(&ep->room_watch, memory_order_relaxed) != me && ep->hub &&
	    fab_thread_watch_out(fd, ep->hub) == 0)
		atomic_store(&ep->room_watch, me);
}

void fab_hub_watch_room(struct ssw_ep *ep)
{
	if (!atomic_load_explicit(&ep->room_wanted, memory_order_relaxed))
		atomic_store(&ep->room_wanted, true);
	watch_room(ep, ssw_pid());
}

/* Called by the interposed epoll_ctl for every call libfabric makes.  On a
 * hub's set, an ADD or MOD names an endpoint's socket (epoll data: the
 * endpoint's fid, whose context is the endpoint) and whether libfabric
 * waits for it to take more output (EPOLLOUT: tcp keeps it only while a
 * send is unfinished). */
void fab_hub_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev)
{
	if (op == EPOLL_CTL_ADD)
		last_add_epfd = epfd;
	if (epfd < 0 || epfd >= HUBFD_MAX || op == EPOLL_CTL_DEL || !ev)
		return;
	struct fab_hub *h = atomic_load_explicit(&hub_of_fd[epfd], memory_order_acquire);
	struct fid *f = ev->data.ptr;
	if (!h || !f || f->fclass != FI_CLASS_EP || !f->context)
		return;
	struct ssw_ep *ep = f->context;
	if (ep->hub != h)
		return;
	atomic_store(&ep->sock_fd, fd);
	atomic_store(&ep->want_out, (ev->events & EPOLLOUT) != 0);
}

int fab_data_fd(const struct ssw_ep *ep)
{
	if (!ep->hub)
		return -1;
	if (!ep->hub->shared)
		return ep->hub->cq_fd;
	return atomic_load(&((struct ssw_ep *)ep)->sock_fd);
}

/* ---- fork ------------------------------------------------------------------ */

bool fab_hub_live(const struct ssw_ep *ep)
{
	return !ep->hub || !ep->hub->shared || atomic_load(&((struct ssw_ep *)ep)->sock_fd) < 0 || ep->live == ssw_pid();
}

void fab_hub_claim(struct ssw_ep *ep)
{
	pid_t me = ssw_pid();
	watch_room(ep, me);
	if (ep->live == me || !ep->hub || !ep->hub->shared)
		return;
	int fd = atomic_load(&ep->sock_fd);
	if (fd < 0)
		return; /* not connected yet: libfabric adds it where it connects */
	struct fab_hub *h = ep->hub;
	/* as libfabric left it: its output interest too, or a send it had
	 * not finished would wait for ever */
	struct epoll_event ev = { .events = EPOLLIN | (atomic_load(&ep->want_out) ? EPOLLOUT : 0),
				  .data.ptr = &ep->ep->fid };
	if (sys_epoll_ctl(h->cq_fd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
		SSW_DEBUG("fabric: cannot take a connection back after fork: %s", strerror(errno));
	ep->live = me;
}

/* Before fork (the gate held for writing: no libfabric call under way):
 * every endpoint leaves its hub's progress, in this process and the
 * child alike, until a process uses it (fab_hub_claim). */
void fab_hub_atfork_prepare(void)
{
	pthread_mutex_lock(&hubs_mu);
	for (struct fab_hub *h = hubs; h; h = h->next) {
		if (!h->cq || !h->shared)
			continue;
		for (struct ssw_ep *ep = h->eps; ep; ep = ep->hnext) {
			/* (connected but not yet taken in: libfabric added it) */
			int fd = atomic_load(&ep->sock_fd);
			if (fd >= 0)
				(void)sys_epoll_ctl(h->cq_fd, EPOLL_CTL_DEL, fd, NULL);
			ep->live = 0;
			/* nor does our thread watch its room: the process that
			 * uses it next does (a forking server's children write
			 * what the parent's thread would be woken for) */
			fab_thread_unwatch_out(fd);
			atomic_store(&ep->room_watch, 0);
		}
	}
	pthread_mutex_unlock(&hubs_mu);
}

/* In the child: a set of its own for every shared hub (the parent's sets
 * are kernel objects it keeps changing, with fids that are not ours),
 * holding what the parent's held but the endpoints' sockets (none: prepare
 * took them out).  A hub of one keeps the set it shares with the parent,
 * as an endpoint's own queue always did: the process that lets go of the
 * endpoint empties its copy first (fab_hub_close_ep). */
void fab_hub_atfork_child(void)
{
	keys_atfork_child();
	pthread_mutex_init(&hubs_mu, NULL);
	for (struct fab_hub *h = hubs; h; h = h->next) {
		pthread_mutex_init(&h->mu, NULL);
		if (h->cq && h->cq_fd >= 0 && h->shared)
			fab_unshare_fds(h->cq_fd);
	}
}

/* ---- closing ----------------------------------------------------------------- */

struct fab_hub *fab_hub_close_ep(struct ssw_ep *ep, bool detach)
{
	struct fab_hub *h = ep->hub;
	if (!h) {
		if (ep->ep)
			fi_close(&ep->ep->fid);
		ep->ep = NULL;
		return NULL;
	}
	/* the event queue's reader hands events to endpoints under eqmu: none
	 * to this one once its libfabric endpoint (and its events) are gone */
	struct fab_fabric *fab = ep->fab;
	pthread_mutex_lock(&fab->eqmu);
	pthread_mutex_lock(&h->mu);
	/* another process may hold the endpoint (fork) and share a hub of
	 * one's set: ours emptied first, or libfabric's close would take the
	 * socket out of theirs (a shared hub's set is ours alone after fork) */
	if (detach && !h->shared && h->cq_fd >= 0)
		fab_unshare_fds(h->cq_fd);
	if (ep->ep)
		fi_close(&ep->ep->fid); /* its receives complete as cancelled, into the queue */
	ep->ep = NULL;
	/* what the queue holds for it must not reach it once freed */
	for (int i = 0; i < 64 && !hub_drain(h, NULL); i++)
		;
	(void)take_inbox(ep);
	for (struct ssw_ep **pp = &h->eps; *pp; pp = &(*pp)->hnext)
		if (*pp == ep) {
			*pp = ep->hnext;
			break;
		}
	h->nep--;
	ep->hub = NULL;
	forget_contexts(ep);
	pthread_mutex_unlock(&h->mu);
	pthread_mutex_unlock(&fab->eqmu);
	if (h->nep)
		return h;
	/* an empty hub keeps its queue while it is the only one that is (a
	 * connect-and-close loop would open and close one each time) */
	pthread_mutex_lock(&hubs_mu);
	bool spare = false;
	for (struct fab_hub *x = hubs; x && !spare; x = x->next)
		spare = x != h && x->cq && !x->nep && x->fab == h->fab && x->shared == h->shared;
	pthread_mutex_lock(&h->mu);
	if (!h->nep && (spare || h->own_domain))
		hub_close(h);
	pthread_mutex_unlock(&h->mu);
	pthread_mutex_unlock(&hubs_mu);
	return h;
}

void fab_hub_let_go(struct fab_hub *h, struct ssw_ep *ep)
{
	struct ssw_ep *old = ep;
	if (h) {
		pthread_mutex_lock(&h->mu);
		/* a queue closed since (or reopened: a new one never named ep's
		 * contexts) reports nothing on it */
		old = h->cq ? keep_gone(h, ep) : ep;
		pthread_mutex_unlock(&h->mu);
	}
	free(old);
}
