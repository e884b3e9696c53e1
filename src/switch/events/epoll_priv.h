/* epoll_priv.h — what the epoll files share: an epoll fd's side entries
 * and the lists a wait looks at (epoll_set.c), the kernel fds that wake its
 * sleepers (epoll_inner.c), readiness (epoll_ready.c); epoll_ctl.c and
 * epoll_wait.c are the entry points.
 *
 * epoll over switched sockets.  A switched connection is not
 * registered with the kernel (its kernel socket is idle); the switch keeps it
 * as a side entry of the epoll fd and merges its readiness with the kernel's
 * events.  Listeners stay registered with the kernel and are also watched for
 * provider connections (one merged event).  Level- and edge-triggered,
 * EPOLLONESHOT and EPOLLRDHUP follow the kernel; an edge is a new arrival
 * (bytes, FIN, reset) or returned send credits, as the kernel's wake-ups.
 *
 * A wait looks only at members that may have changed, as the kernel's ready
 * list: arrivals are written by another process into shared memory, so no
 * callback can tell us; instead each connected member keeps a standing arm
 * on its session (the peer rings its doorbell on the next arrival) and its
 * wait fds sit in a private "inner" epoll fd under the member's tag.  The
 * kernel's readiness of those fds is the ready list; the inner fd is itself
 * registered in the application's epoll fd, so a sleep on the epoll fd (by
 * us, by poll, or by an outer epoll fd) wakes on any member's doorbell.
 * Members reported level-triggered are looked at again on the next wait
 * (the kernel's LT re-queue); so are members whose doorbell this process
 * may have taken itself (ssw_epoll_touch).  Listeners and connecting
 * sockets (few) are looked at on every wait.
 *
 * Each epoll fd with side entries also holds a "kick" eventfd registered
 * with the kernel under a private tag: epoll_ctl on a side entry rings it so
 * that threads already sleeping on the epoll fd (ours, or a plain kernel
 * epoll_wait that began before the first switched fd was added) look again.
 * Kernel events carrying either tag are never shown to the application. */
#ifndef SSW_EPOLL_PRIV_H
#define SSW_EPOLL_PRIV_H

#include "common/forklocal.h"
#include "switch/switch.h"

#include <pthread.h>
#include <stdint.h>

#define EPX_KICK_TAG 0x5353574b49434b21ull  /* "SSWKICK!" */
#define EPX_INNER_TAG 0x535357494e4e5221ull /* "SSWINNR!" */
#define WFD_MAX 4 /* fabric: CQ, EQ, the CQ's signal and the provider's wake-up (wait_fds) */
#define HOT_MAX 128     /* recently active members watched by looking while a wait spins */

struct epx;

struct epx_entry {
	int fd;
	struct ssw_sock *s;   /* holds a reference */
	struct epx *x;
	uint32_t events;
	epoll_data_t data;
	uint32_t gen;         /* tag in the inner set: gen << 32 | fd */
	bool disabled;        /* EPOLLONESHOT fired */
	bool armed;           /* holds a standing arm on the session (doorbell) */
	bool queued;          /* on x's check list */
	bool polled;          /* on x's polled list: looked at on every wait */
	bool finished;        /* nothing more comes from the peer: out of the inner set */
	bool staged;          /* polled: ring staged during the current wait */
	bool nowatch;         /* its wait fds cannot join the inner set (a dup there already) */
	bool hot;             /* in x->hot: not armed, looked at while waits spin */
	bool swapw;           /* armed on a connection whose processes take turns: looked at again
				 * when control may have left us (epx_swap_scan) */
	int nwfd;
	uint32_t wfd_gen;     /* ssw_session_fds_gen when registered */
	int wfd[WFD_MAX];     /* registered in x->inner */
	uint64_t call;        /* the wait call (x->call) that reported it last */
	uint32_t last;        /* edge-triggered: bits reported last time */
	uint64_t rx_seen;     /* edge-triggered: bytes arrived at last report */
	uint64_t tx_seen;     /* edge-triggered: credits returned at last look */
	bool fin_seen;        /* edge-triggered: the peer's FIN was there at the last look */
	uint64_t wakes_seen;  /* edge-triggered: the session's state_wakes at the last look */
	struct epx_entry *qnext;  /* check list */
	struct epx_entry *pnext;  /* polled list */
	struct epx_entry *snext;  /* entries of the same socket (s->ep_watch) */
};

/* An epoll fd of ours (with switched members) registered in this one: the
 * kernel sees only its kernel members, so its switched readiness is added
 * here (nested epoll). */
struct epx_nested {
	int fd;
	uint32_t events;
	epoll_data_t data;
	struct epx_nested *next;
};

struct epx {
	int epfd;
	int kick;             /* eventfd, registered in epfd with EPX_KICK_TAG; -1: none */
	int inner;            /* members' wait fds; registered in epfd with EPX_INNER_TAG */
	pid_t pid;            /* process whose standing arms the entries hold */
	int n;                /* side entries */
	int nbyfd;
	struct epx_entry **byfd;  /* side entries by fd number */
	struct epx_entry *qhead, **qtail;
	struct epx_entry *polled;
	struct epx_entry *hot[HOT_MAX];
	int nhot;
	uint64_t call;        /* wait calls so far: one report per entry and call */
	bool again;           /* an entry was re-queued to be looked at before sleeping */
	bool nap;             /* an entry could not be armed: sleep in naps */
	int nswapw;           /* entries with swapw: sleep in naps, look when the bell word moves */
	uint32_t swapw_bell;  /* this process's bell word at the last epx_swap_scan */
	int waiters;          /* threads of ours asleep on epfd */
	struct epx_nested *nested;
	struct epx *next;
};

/* Every set of this process; both under epx_lock (epx_all is also read
 * without it, as a hint that there is any). */
#define epx_lock (ssw_fl->epx_lock) /* fork-local: a child's is a fresh one (epoll_set.c) */
extern struct epx *epx_all;

/* epoll_set.c: the sets, their entries and lists */
void epx_q_push(struct epx *x, struct epx_entry *e);
struct epx_entry *epx_q_pop(struct epx *x);
void epx_p_remove(struct epx *x, struct epx_entry *e);
void epx_make_polled(struct epx *x, struct epx_entry *e);
void epx_unwatch(struct epx_entry *e);
struct epx *epx_find(int epfd, bool create);
struct epx_entry **epx_find_entry(struct epx *x, int fd);
struct epx_entry *epx_by_tag(struct epx *x, uint64_t tag);
struct epx_entry *epx_new_entry(struct epx *x, int fd, struct ssw_sock *s, const struct epoll_event *ev);
void epx_free_entry(struct epx *x, struct epx_entry *e);

/* epoll_inner.c: the kick eventfd and the inner set in the kernel */
int epx_kick_setup(struct epx *x);
void epx_kick(struct epx *x);
void epx_kick_drain(int fd);
int epx_wfd_register(struct epx *x, struct epx_entry *e);
void epx_wfd_unregister(struct epx *x, struct epx_entry *e);

/* epoll_ready.c: looking at members, arming them, collecting reports */
void epx_harvest(struct epx *x);
void epx_hot_scan(struct epx *x);
void epx_swap_scan(struct epx *x);
int epx_hot_peers_cpu(struct epx *x);
void epx_arm_hot(struct epx *x);
int epx_collect(struct epx *x, struct epoll_event *out, int max);
int epx_collect_queue(struct epx *x, struct epoll_event *out, int max);

#endif
