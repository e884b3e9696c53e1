/* test_urg.c — SIGURG is the session's: who raises it (the sender through the
 * provider's tag, or the receiver when its transport has none), that a
 * handler may read the socket at once, and that a peer's tag never aims
 * the signal outside the peer's process group.
 *
 * Sessions over an shm pair inside one process (ssw_shm_pair); "no tag" is
 * the shm provider with its peer_tag (and for POLLPRI its note) hidden, as
 * a provider between hosts (fabric) has them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "providers/shm/shm_priv.h"
#include "session/session.h"
#include "session/wire.h"

extern const struct ssw_provider ssw_provider_shm;

static struct ssw_progress_ops notag_pg, nonote_pg;
static struct ssw_provider notag, nonote;

struct pair {
	struct ssw_ep *ea, *eb;
	struct ssw_session *a, *b;
};

static void open_pair(struct pair *p, const struct ssw_provider *prov)
{
	struct ssw_wire_init ia, ib;
	struct ssw_session_opts o = { 0 };
	assert_int_equal(ssw_shm_pair(256u << 10, &p->ea, &p->eb), 0);
	ssw_session_make_init(&o, &ia);
	ssw_session_make_init(&o, &ib);
	p->a = ssw_session_new(prov, p->ea, &o, &ib);
	p->b = ssw_session_new(prov, p->eb, &o, &ia);
	assert_non_null(p->a);
	assert_non_null(p->b);
}

static void close_pair(struct pair *p)
{
	ssw_session_close(p->a, false);
	ssw_session_close(p->b, false);
}

static ssize_t snd(struct ssw_session *s, const void *b, size_t n, int flags)
{
	struct iovec v = { (void *)b, n };
	return ssw_session_send(s, &v, 1, flags, true, -1);
}

static ssize_t rcv(struct ssw_session *s, void *b, size_t n, int flags)
{
	struct iovec v = { b, n };
	return ssw_session_recv(s, &v, 1, flags, true, -1);
}

/* The handler reads the urgent byte of `reader`, as applications do. */
static struct ssw_session *volatile reader;
static volatile sig_atomic_t n_urg, got_byte;

static void on_urg(int sig)
{
	(void)sig;
	n_urg++;
	char c;
	if (reader && rcv(reader, &c, 1, MSG_OOB) == 1)
		got_byte = c;
}

static void catch_urg(struct ssw_session *r)
{
	struct sigaction sa = { 0 };
	sa.sa_handler = on_urg;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGURG, &sa, NULL), 0);
	reader = r;
	n_urg = got_byte = 0;
}

static void wait_urg(int n)
{
	for (int i = 0; i < 1000 && n_urg < n; i++)
		usleep(1000);
}

/* shm: the sender raises it for the receiver, which does nothing at all. */
static void test_sender_raises(void **state)
{
	(void)state;
	struct pair p;
	open_pair(&p, &ssw_provider_shm);
	catch_urg(p.b);
	ssw_session_set_owner(p.b, getpid());
	assert_int_equal(snd(p.a, "ab", 2, 0), 2);
	assert_int_equal(snd(p.a, "c", 1, MSG_OOB), 1);
	wait_urg(1);
	assert_int_equal(n_urg, 1);
	assert_int_equal(got_byte, 'c'); /* the handler read the socket */
	char buf[8];
	assert_int_equal(rcv(p.b, buf, sizeof buf, 0), 2); /* up to the mark */
	reader = NULL;
	close_pair(&p);
}

/* No tag (another host): the receiver raises it when it takes the byte in,
 * after its lock is released: the handler's recv on the same socket must
 * not deadlock (alarm: a hang fails the test). */
static void test_receiver_raises(void **state)
{
	(void)state;
	struct pair p;
	open_pair(&p, &notag);
	catch_urg(p.b);
	ssw_session_set_owner(p.b, getpid());
	assert_int_equal(snd(p.a, "c", 1, MSG_OOB), 1);
	usleep(20000);
	assert_int_equal(n_urg, 0); /* the sender cannot: nothing yet */
	alarm(10);
	short ev = ssw_session_poll(p.b);
	alarm(0);
	assert_true(ev & POLLPRI);
	assert_int_equal(n_urg, 1);
	assert_int_equal(got_byte, 'c');
	/* once, not at every later look */
	(void)ssw_session_poll(p.b);
	assert_int_equal(n_urg, 1);
	reader = NULL;
	close_pair(&p);
}

/* A child waiting for SIGURG; own_group: in a process group of its own. */
static pid_t spawn_waiter(bool own_group, int *rd)
{
	int pp[2];
	assert_int_equal(pipe(pp), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGURG);
		sigprocmask(SIG_BLOCK, &set, NULL);
		if (own_group)
			setpgid(0, 0);
		(void)!write(pp[1], "r", 1);
		struct timespec ts = { 1, 0 };
		_exit(sigtimedwait(&set, NULL, &ts) == SIGURG ? 1 : 0);
	}
	close(pp[1]);
	char c;
	assert_int_equal(read(pp[0], &c, 1), 1);
	*rd = pp[0];
	return pid;
}

static int waiter_got_urg(pid_t pid, int rd)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	close(rd);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The receiver's tag is its word: the sender signals a process of the
 * peer's group (here, ours: peer_cred names this process), never one
 * outside it. */
static void test_tag_stays_in_peer_group(void **state)
{
	(void)state;
	struct pair p;
	open_pair(&p, &ssw_provider_shm);
	catch_urg(NULL);
	int rd;
	/* outside the group: refused */
	pid_t w = spawn_waiter(true, &rd);
	ssw_session_set_owner(p.b, w);
	assert_int_equal(snd(p.a, "x", 1, MSG_OOB), 1);
	assert_int_equal(waiter_got_urg(w, rd), 0);
	/* a process of the peer's group: signalled (the refusal above is no
	 * failure to signal at all) */
	w = spawn_waiter(false, &rd);
	ssw_session_set_owner(p.b, w);
	assert_int_equal(snd(p.a, "y", 1, MSG_OOB), 1);
	assert_int_equal(waiter_got_urg(w, rd), 1);
	/* -pgid of another group: refused; of the peer's group: signalled */
	ssw_session_set_owner(p.b, -(getpgrp() + 1));
	assert_int_equal(snd(p.a, "z", 1, MSG_OOB), 1);
	usleep(20000);
	assert_int_equal(n_urg, 0);
	ssw_session_set_owner(p.b, -getpgrp());
	assert_int_equal(snd(p.a, "w", 1, MSG_OOB), 1);
	wait_urg(1);
	assert_int_equal(n_urg, 1);
	close_pair(&p);
}

/* POLLPRI on a transport without marks: while the byte is there, not
 * after it was read and the mark passed.  (Without marks the receiver
 * learns of urgent data when it reaches the byte's message: poll takes
 * one at the head in, not one behind unread data.) */
static void test_pollpri_without_marks(void **state)
{
	(void)state;
	struct pair p;
	open_pair(&p, &nonote);
	assert_int_equal(snd(p.a, "c", 1, MSG_OOB), 1);
	assert_int_equal(snd(p.a, "de", 2, 0), 2);
	short ev = 0;
	for (int i = 0; i < 1000 && !(ev & POLLPRI); i++, usleep(1000))
		ev = ssw_session_poll(p.b);
	assert_true(ev & POLLPRI);
	char buf[8], c;
	assert_int_equal(rcv(p.b, &c, 1, MSG_OOB), 1);
	assert_int_equal(c, 'c');
	assert_int_equal(rcv(p.b, buf, sizeof buf, 0), 2);
	ev = ssw_session_poll(p.b);
	assert_false(ev & POLLPRI);
	close_pair(&p);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	setpgid(0, 0); /* SIGURG to "our group" reaches this test only */
	ssw_provider_shm.init();
	notag_pg = *ssw_provider_shm.progress;
	notag_pg.peer_tag = NULL;
	notag = ssw_provider_shm;
	notag.progress = &notag_pg;
	nonote_pg = notag_pg;
	nonote_pg.note = NULL;
	nonote = notag;
	nonote.progress = &nonote_pg;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sender_raises),
		cmocka_unit_test(test_receiver_raises),
		cmocka_unit_test(test_tag_stays_in_peer_group),
		cmocka_unit_test(test_pollpri_without_marks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
