/* conf.h — the provider conformance suite: one set of cases written against the SPI only
 * (sockswitch/provider.h), run once per provider through an environment descriptor. */
#ifndef SSW_CONF_H
#define SSW_CONF_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sockswitch/provider.h>

#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

/* What a connect to an address nobody serves may answer (SPI connect). */
enum {
	CONF_REFUSED = 1u,  /* -ECONNREFUSED: the provider knows kernel TCP fails too */
	CONF_FALLBACK = 2u, /* any other error: "cannot serve", the switch uses kernel TCP */
};

/* A provider and what its test run needs around it.  Everything but the
 * provider's own ops goes through here, so that the cases stay neutral. */
struct conf_env {
	const struct ssw_provider *prov;
	/* Once per process (the parent and every peer child) before init():
	 * settings, runtime directories.  0 or -errno.  May be NULL. */
	int (*setup)(void);
	/* Addresses for one listener: the one to listen on, the one a connector
	 * uses to reach it (the same, or its specific address when wildcard).
	 * Each call gives a fresh address no other listener uses. */
	int (*addr)(int wildcard, struct sockaddr_storage *listen_at, struct sockaddr_storage *connect_to,
		    socklen_t *len);
	/* An address nobody listens on, kernel or provider. */
	int (*unused_addr)(struct sockaddr_storage *a, socklen_t *len);
	unsigned refused_ok; /* CONF_REFUSED | CONF_FALLBACK: what connect to unused_addr may give */
	/* Make the input of hostile's peer corrupt, as a hostile peer process
	 * writing its side of the transport would.  Variant 0, 1, ...: 1 when
	 * done, 0 when there is no such variant.  NULL: the provider offers no
	 * way to corrupt its input from a test (the case says so). */
	int (*corrupt)(struct ssw_ep *hostile, int variant);
	/* Addresses released after each case (ports held while it ran).  May be NULL. */
	void (*release)(void);
	/* Known deviations from the SPI: "case: why", NULL-terminated.  Such a
	 * case still runs, in a child, and must FAIL: the run says so each time,
	 * and fails once the provider conforms (then drop the entry). */
	const char *const *deviations;
	/* Connectors live elsewhere (another network namespace): called
	 * around every connect of the suite.  May be NULL. */
	void (*connect_enter)(void);
	void (*connect_leave)(void);
	/* The address the acceptor must see for the connector (peer_addr);
	 * NULL: a loopback address. */
	const char *peer_ip;
	/* RDMA transfers must complete later (-EINPROGRESS, poll_cq): a run
	 * meant for the asynchronous path fails if it silently is not. */
	bool expect_async;
};

extern const struct conf_env *conf_env;
#define P (conf_env->prov)

/* Run every case (main of a conf_<provider>.c).  argv may name a peer
 * child's role (the suite re-executes itself for cases with a peer process). */
int conf_run(const struct conf_env *env, int argc, char **argv);

/* ---- helpers (conf_util.c) ---------------------------------------------- */

/* Milliseconds on a monotonic clock. */
int64_t conf_ms(void);
/* Port p (host order) reserved on 127.0.0.1 (or the wildcard): a bound,
 * non-listening kernel TCP socket held until conf_release_ports. */
int conf_reserve_port(int wildcard);
void conf_release_ports(void);
void conf_inet(struct sockaddr_storage *ss, socklen_t *len, const char *ip, int port);

/* A listener on a fresh address (its connect address in *dst). */
struct ssw_listener *conf_listen(int wildcard, struct sockaddr_storage *dst, socklen_t *dlen);
/* Connect to dst and accept it, driving both ends to completion. */
void conf_pair(struct ssw_listener *l, const struct sockaddr_storage *dst, socklen_t dlen, struct ssw_ep **c,
	       struct ssw_ep **a);
/* The provider's connect, made where the environment's connectors live. */
int conf_connect(const struct sockaddr *dst, socklen_t dlen, const void *priv, size_t plen, struct ssw_ep **out);
/* A connected pair on a listener of its own (closed: *l NULL when l is NULL). */
void conf_pair_new(struct ssw_listener **l, struct ssw_ep **c, struct ssw_ep **a);
/* Take one connection off l; 0 or -EAGAIN after ms. */
int conf_accept(struct ssw_listener *l, struct ssw_ep **a, void *priv, size_t *priv_len, int ms);
/* Finish a connect that returned -EINPROGRESS (l: the listener, to sleep on
 * too, or NULL).  0 or the error, -ETIMEDOUT after ms. */
int conf_connect_wait(struct ssw_ep *c, struct ssw_listener *l, void *reply, size_t *reply_len, int ms);

/* Let the provider progress on an endpoint no case is waiting on (a real
 * peer would run in its own process and progress itself). */
void conf_kick(struct ssw_ep *ep);
/* Send one message, retrying -EAGAIN for up to ms: 0 or the error. */
int conf_send(struct ssw_ep *ep, struct ssw_ep *peer, const void *buf, size_t len, int ms);
/* Next message on ep within ms, by the SPI's sleep protocol (arm, wait_fds,
 * wake_ack): 0 with it peeked (call recv_done), or the error (-EAGAIN: none). */
int conf_wait(struct ssw_ep *ep, struct ssw_ep *peer, const void **msg, size_t *len, int ms);
/* Poll the endpoint's wait fds for ms: poll's answer. */
int conf_wait_readable(struct ssw_ep *ep, int ms);
/* Receive one message and check it is exactly buf[0..len). */
void conf_expect(struct ssw_ep *ep, struct ssw_ep *peer, const void *buf, size_t len);
/* Deterministic content of message `seq`. */
void conf_fill(uint8_t *b, size_t n, unsigned seq);
/* Send message seq of length n made by conf_fill / check it arrived. */
void conf_send_seq(struct ssw_ep *ep, struct ssw_ep *peer, unsigned seq, size_t n);
void conf_expect_seq(struct ssw_ep *ep, struct ssw_ep *peer, unsigned seq, size_t n);
/* Is the op implemented?  NULL or an -ENOSYS stub are both "no"; the probe
 * result is given by the caller where calling it has effects. */
#define CONF_HAS(tbl, op) ((tbl) && offsetof(__typeof__(*(tbl)), op) < (tbl)->size && (tbl)->op)
/* Report a case as not applicable to this provider (only for what the SPI
 * marks optional), naming what is missing. */
#define CONF_SKIP(...)                                                                                                 \
	do {                                                                                                           \
		print_message("[ N/A      ] %s: " , P->name);                                                          \
		print_message(__VA_ARGS__);                                                                           \
		print_message("\n");                                                                                   \
		skip();                                                                                                \
	} while (0)

/* A peer in a child process (a re-execution of the suite): it connects to
 * the listener l at dst and plays `role` ("hold": connects and never reads;
 * "send": sends n messages conf_send_seq(i, 100 + i), then idles).  Returns
 * its pid once it is connected and its messages are sent, with the
 * accepted end in *a. */
pid_t conf_spawn_peer(const char *role, int n, struct ssw_listener *l, const struct sockaddr_storage *dst,
		      socklen_t dlen, struct ssw_ep **a);
/* SIGKILL it and reap it. */
void conf_kill_peer(pid_t pid);

/* conf_run probes configure with an unknown key before init (as the
 * configuration loader would): its answer, for conf_configure_describe. */
#define CONF_BAD_KEY "conformance-no-such-key"
extern int conf_configure_rc;
extern char conf_configure_err[256];

/* ---- cases ---------------------------------------------------------------- */
void conf_spi_tables(void **state);
void conf_configure_describe(void **state);
void conf_connect_accept(void **state);
void conf_shared_accept_once(void **state);
void conf_connect_without_accept(void **state);
void conf_wildcard_and_inuse(void **state);
void conf_connect_nobody(void **state);
void conf_listener_readiness(void **state);
void conf_listener_close_keeps_eps(void **state);
void conf_sizes_and_order(void **state);
void conf_flow_control(void **state);
void conf_room_agrees(void **state);
void conf_arm_wake(void **state);
void conf_sleeper_woken(void **state);
void conf_two_sleepers(void **state);
void conf_wait_hints(void **state);
void conf_threads_contract(void **state);
void conf_reserve_commit(void **state);
void conf_hold_flush(void **state);
void conf_rdma_read_write(void **state);
void conf_rdma_bad_desc(void **state);
void conf_orderly_close(void **state);
void conf_abort(void **state);
void conf_peer_killed_unread(void **state);
void conf_peer_killed_quiet(void **state);
void conf_peer_killed_ctl_unread(void **state);
void conf_rdma_deregistered(void **state);
void conf_rdma_close_pending(void **state);
void conf_rdma_bad_local(void **state);
void conf_rdma_peer_gone(void **state);
void conf_note_fin_mark(void **state);
void conf_note_tag(void **state);
void conf_corrupt_input(void **state);
void conf_detach(void **state);
void conf_fork_handover(void **state);
void conf_send_after_end(void **state);

#endif
