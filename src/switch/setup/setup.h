/* setup.h — connection set-up (seed 001): the one owner of the handshake for
 * every provider.  It alone calls a provider's connection ops (listen,
 * accept, connect, connect_complete, the peer's credentials and address):
 * it routes a destination, binds the connecting socket, carries the
 * private data and the session's INIT, checks the connector's address
 * claim and proofs, builds the session, and decides "kernel TCP, because
 * …".  The fd layer (switch/sock) asks it for a connection and gets back a
 * session, or that decision; the events layer asks it what to sleep on.
 *
 *   connect.c  the connecting side (route, bind, proof, provider connect, session)
 *   listen.c   a listening socket's provider halves (listen, readiness, fork's drop)
 *   accept.c   taking a request: checks, session, or a dropped request (counted)
 *   claim.c    whose address a connector may claim (the kernel's word, not the peer's)
 *   proof.c    keeping a connecting socket's address provable until the acceptor looked
 *   priv.c     the connect request's private data and protocol versions
 *   move.c     a transport moving with control between processes (seed 000) */
#ifndef SSW_SETUP_H
#define SSW_SETUP_H

#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "switch/route/route.h"
#include "switch/sock/sock.h"

/* Why a connection is on kernel TCP: a route said so (rule), or the switch
 * could not serve it (why: a short text for logs and `stat`). */
struct ssw_setup_decision {
	const struct ssw_route_rule *rule; /* an explicit rule said tcp (not a fallback) */
	const char *why;                   /* NULL when rule, or no route at all */
	char buf[96];                      /* why's storage when it is composed */
};
enum { SSW_SETUP_KERNEL = 1 };

/* ---- connecting (connect.c) --------------------------------------------- */

/* connect(fd, addr, len) of a kernel TCP socket of `family` to the
 * normalized dst.  Returns 0 with *out a new socket object in state
 * SSW_ST_CONNECTING whose provider connect has started (the caller puts it
 * in the fd table and drives it with ssw_setup_connect_poll);
 * SSW_SETUP_KERNEL: use kernel TCP, *d says why; or a final error
 * (-ECONNREFUSED, -ECONNRESET, -EHOSTUNREACH: kernel TCP fails too). */
int ssw_setup_connect(int fd, int family, const struct sockaddr *addr, socklen_t len,
		      const struct sockaddr_storage *dst, struct ssw_sock **out, struct ssw_setup_decision *d);
/* Drive a connecting socket (its lock held).  0: connected (state
 * SSW_ST_CONNECTED, the session made); -EINPROGRESS: pending (wait_ms 0,
 * or the wait ran out); SSW_SETUP_KERNEL: the provider could not serve and
 * was let go, *d says why (the caller connects the kernel socket); a final
 * error, the provider let go.  wait_ms < 0: no limit. */
int ssw_setup_connect_poll(struct ssw_sock *s, int wait_ms, struct ssw_setup_decision *d);
/* The socket goes to kernel TCP after all: undo what the set-up did to the
 * kernel socket fd (SO_REUSEPORT of a listening proof). */
void ssw_setup_connect_undo(struct ssw_sock *s, int fd);

/* ---- listening (listen.c) ------------------------------------------------ */

/* Listen on every provider the routes give the listener's address `a`
 * (normalized; a wildcard: every provider serving a local address, both
 * families when dual).  Fills s->pl; names gets " + shm + fabric".
 * Returns the count (0: every provider refused; *note may say why), or -1
 * when no route gives the address a provider. */
int ssw_setup_listen(struct ssw_sock *s, const struct sockaddr_storage *a, bool dual, int backlog, char *names,
		     size_t nlen, const char **note);
/* Would accept take a provider connection now (poll, select, epoll)? */
bool ssw_setup_listener_ready(struct ssw_sock *s);
/* The provider listeners' fds, to sleep on (at most n; s->lock taken). */
int ssw_setup_listener_fds(struct ssw_sock *s, struct pollfd *pf, int n);
/* Listens on a provider whose endpoints cannot be shared by processes. */
bool ssw_setup_listener_has_private(const struct ssw_sock *s);
/* Close those provider listeners (fork: see share/fork.c), under s->lock;
 * their names are appended to names.  Returns how many were closed. */
int ssw_setup_listener_drop_private(struct ssw_sock *s, char *names, size_t len);
/* Close every provider listener (the listener was sent to another process
 * with SCM_RIGHTS: see share/relay.c), under s->lock; how many. */
int ssw_setup_listener_drop_all(struct ssw_sock *s);

/* ---- accepting (accept.c) ------------------------------------------------ */

struct ssw_setup_accepted {
	const struct ssw_provider *prov;
	struct ssw_session *sess;                /* the connection's, made from ls's options */
	struct ssw_session_opts opts;            /* those options (ask_proof set when we checked a claim) */
	struct sockaddr_storage client, server;  /* normalized: the peer, and the address it dialed */
};
/* Take one provider connection request of listener ls: 0 with *a (the
 * caller owns the session), or -EAGAIN when none can be taken now.  A
 * request that fails the set-up is dropped, counted and noted on ls (as
 * kernel TCP drops a bad SYN), never an error of the caller's. */
int ssw_setup_accept(struct ssw_sock *ls, struct ssw_setup_accepted *a);

/* ---- across exec (exec.c) -------------------------------------------------- */

/* Before an exec that keeps fd (a listener) open: append its providers'
 * entries to buf (the new image's SOCKSWITCH_INHERIT) and keep their
 * descriptors open across the exec.  Returns the entries added. */
int ssw_setup_exec_export(struct ssw_sock *s, int fd, char *buf, size_t len, struct ssw_exec_keep *k);
/* fd stays open across the exec (recorded in k if it was close-on-exec). */
bool ssw_setup_exec_keep(int fd, struct ssw_exec_keep *k);
/* The exec failed: those descriptors are close-on-exec again, and those
 * made for the new image closed. */
void ssw_setup_exec_undo(struct ssw_exec_keep *k);
/* In the new image, at load: the listeners SOCKSWITCH_INHERIT names. */
void ssw_setup_exec_import(const char *spec);
/* fd came in over SCM_RIGHTS and is a listening TCP socket: switched here
 * on every provider its routes give it whose listener is free (the sender
 * let go of its own when it sent it: share/relay.c).  False: not one, or
 * kernel TCP only. */
bool ssw_setup_listener_received(int fd);

/* ---- both ----------------------------------------------------------------- */

/* What a connecting or listening socket sleeps on (events/evwait.c):
 * 0..n fds; -1 when it has none (a connection: the session's). */
int ssw_setup_wait_fds(struct ssw_sock *s, struct pollfd *pf, int n);
/* move.c: the set-up a transport moving with control needs (session_move.c
 * reaches it through ssw_session_cfg.move): installed at start-up. */
void ssw_setup_move_init(void);
/* The socket object goes: its provider listeners, a connect in progress,
 * and its proof (kept a while if the acceptor may still look at it). */
void ssw_setup_release(struct ssw_sock *s);

#endif
