/* sock.h — the switch's view of one application socket, and the fd table
 * that finds it.  Only sockets the switch serves are in the table (listeners
 * with a provider half, connections over a provider); everything else is a
 * plain kernel socket and never reaches this code after one table load. */
#ifndef SSW_SOCK_H
#define SSW_SOCK_H

#include <sockswitch/provider.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "session/session.h"
#include "switch/api.h"

enum ssw_state { SSW_ST_LISTENING = 1, SSW_ST_CONNECTING, SSW_ST_CONNECTED };

/* Provider listeners of one socket: per provider, one per address family
 * (a dual-stack wildcard listens on :: and 0.0.0.0). */
#define SSW_MAX_PLISTEN 8

struct ssw_plisten {
	const struct ssw_provider *prov;
	struct ssw_listener *l;
	uint32_t proto;              /* the protocol version its requests speak */
	bool any4;                   /* on 0.0.0.0 beside a dual-stack [::] one */
};

struct ssw_sock {
	/* low 32 bits: references (fd table entries, epoll entries, calls in
	 * progress); high 32: of those, the calls' (ssw_sock_get ..
	 * ssw_sock_put): a forked child has only the forking thread, so the
	 * others' calls are not its own (forkcalls.c).  One word: a
	 * call costs one atomic operation each way, as before the count */
	_Atomic uint64_t refs;
	_Atomic int fdrefs;          /* fd table entries (dup) */
	pthread_mutex_t lock;        /* state transitions */
	enum ssw_state state;
	int fd;                      /* the first fd (for stats and logs) */
	int family;
	_Atomic int nonblock;        /* O_NONBLOCK of the open file description */
	unsigned fork_gen;           /* fork.c: session held for the fork of this generation ... */
	pid_t fork_pid;              /* ... of this process */
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	int rcvtimeo_ms, sndtimeo_ms;/* -1: none */
	struct ssw_session_opts opts;
	bool linger_on;
	int linger_s;
	const struct ssw_provider *prov; /* a connection's provider (NULL for a listener: see pl) */
	struct ssw_session *sess;

	/* connecting */
	struct ssw_ep *cep;
	_Atomic bool connect_unseen; /* completed after EINPROGRESS, no connect() since */
	struct sockaddr_storage dst;
	socklen_t dst_len;
	struct sockaddr_storage pdst;  /* the provider's destination (setup/connect.c) */
	uint64_t connect_t0;         /* when the provider connect began (ns) */
	int proof_fd;                /* proof.c: the kernel socket's hidden duplicate or listening proof, or -1 */
	bool reuseport_ours;         /* proof.c set SO_REUSEPORT on the kernel socket (getsockopt says 0) */

	/* listening */
	struct ssw_plisten pl[SSW_MAX_PLISTEN]; /* each with its own provider */
	int npl;
	struct ssw_session_opts lopts;
	pid_t looked_by;             /* the last process to accept on it or poll it (fork.c) */
	int lbacklog;                /* listen's backlog, and whether an IPv6 wildcard takes IPv4 too: */
	bool ldual;                  /* for provider listeners made again (lreopen) */
	bool lreopen;                /* this process dropped its copies of the private providers'
	                              * listeners at fork: it makes its own when it first accepts
	                              * or polls (setup/listen.c) */
	bool v6only;                 /* an IPv6 listener that serves IPv6 only (IPV6_V6ONLY) */
	_Atomic unsigned refused;    /* requests dropped at accept (handshake or address check failed) */
	char lnote[96];              /* why: the last refusal, or a provider half lost at listen (stat) */

	void *ep_watch;              /* events/epoll_set.c: this socket's epoll entries (under epx_lock) */
};

/* fd table (ssw_fdtab_init, ssw_sock_get, ssw_sock_put, ssw_fdtab_any: api.h) */
/* Install s at fd (takes a table reference). */
int ssw_fdtab_set(int fd, struct ssw_sock *s);
/* Remove fd's entry; returns the sock with the table's reference moved to
 * the caller (who lets go of it with ssw_sock_unref), or NULL. */
struct ssw_sock *ssw_fdtab_take(int fd);
/* Call fn on every sock in the table (under the table lock: keep it short). */
void ssw_fdtab_each(void (*fn)(int fd, struct ssw_sock *s, void *arg), void *arg);
/* The fds whose sock `want` picks, into fds[max] in fd order; returns how
 * many it picked (more than max: the rest were left out).  The socks may
 * be closed by another thread once this returns: look each up again. */
int ssw_fdtab_list(bool (*want)(const struct ssw_sock *s), int *fds, int max);

int ssw_fdtab_count(void);
int ssw_fdtab_size(void);
/* One past the highest fd the table has held (lock-free: _exit, share/exit.c). */
int ssw_fdtab_end(void);
void ssw_fdtab_forget_except(int keep);

struct ssw_sock *ssw_sock_new(enum ssw_state st, int fd, int family);

/* References beside a call's (ssw_sock_get / ssw_sock_put, api.h): one
 * held by a structure (the fd table's, an epoll entry's, a helper's look
 * that fork waits for), taken with ssw_sock_ref and let go with
 * ssw_sock_unref; a call's turned into such (ssw_sock_keep: an epoll
 * entry keeps epoll_ctl's); another for the calling thread on a socket it
 * holds already (ssw_sock_get_again, let go with ssw_sock_put). */
#define SSW_SOCK_CALL (1ull + (1ull << 32)) /* a call's reference (refs) */
void ssw_sock_ref(struct ssw_sock *s);
void ssw_sock_unref(struct ssw_sock *s);
void ssw_sock_keep(struct ssw_sock *s);
void ssw_sock_get_again(struct ssw_sock *s);
/* Calls other threads of the parent had in progress at a fork hold
 * nothing in the child, where those threads do not exist (forkcalls.c). */
void ssw_forkcalls_begin(void);                /* parent, before its table walk */
void ssw_forkcalls_note(struct ssw_sock *s);   /* parent, each socket of the walk */
void ssw_forkcalls_child(void);                /* child, first thing */
void ssw_forkcalls_last_fd(struct ssw_sock *s); /* s's last descriptor here closed */
/* This thread's calls in progress on any socket (now), and +d. */
int ssw_sock_mine_now(void);
void ssw_sock_mine(int d);
void ssw_sock_fork_child(struct ssw_sock *s);

/* What the switch knows of an fd from its creation (0: nothing). */
enum {
	SSW_FI_KNOWN = 1,     /* created through our socket() */
	SSW_FI_TCP4 = 2,
	SSW_FI_TCP6 = 4,
	SSW_FI_OPTS = 8,      /* a SOL_SOCKET option was set: read them back */
	SSW_FI_BOUND = 16,
	SSW_FI_NONBLOCK = 32,
	SSW_FI_EPOLL = 64,    /* an epoll fd (made through our epoll_create) */
	SSW_FI_NOTRELAY = 128,/* looked at: not a relay's socket (relayed.c) */
};
uint8_t ssw_fdinfo_get(int fd);
void ssw_fdinfo_set(int fd, uint8_t v);
/* Change bits of a known fd (no effect when nothing is known of it). */
void ssw_fdinfo_update(int fd, uint8_t set, uint8_t clear);

/* Teardown when the last reference goes: closes the session / listeners. */
void ssw_sock_destroy(struct ssw_sock *s);

#endif
