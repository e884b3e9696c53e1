/* test_relayed.c — the table of relayed fds (switch/relayed.c): what a program
 * exec'd with a switched connection asks of its AF_UNIX stand-in (addresses,
 * TCP options), dup/close bookkeeping, and the SOCKSWITCH_RELAYED variable
 * that carries the table across exec, including hostile or stale values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "switch/relay.h"

static struct sockaddr_storage L, P;
static socklen_t LL, PL;

static void addrs(void)
{
	struct sockaddr_in *l = (struct sockaddr_in *)&L, *p = (struct sockaddr_in *)&P;
	memset(&L, 0, sizeof L);
	memset(&P, 0, sizeof P);
	l->sin_family = p->sin_family = AF_INET;
	l->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	p->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l->sin_port = htons(8080);
	p->sin_port = htons(40001);
	LL = PL = sizeof(struct sockaddr_in);
}

/* a unix stream socket (the stand-in) at a fresh fd; its peer is leaked */
static int unix_fd(void)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	return sv[0];
}

static uint16_t port_of(const struct sockaddr_storage *a)
{
	return ntohs(((const struct sockaddr_in *)a)->sin_port);
}

static void test_not_relayed_passes(void **state)
{
	(void)state;
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	assert_int_equal(ssw_relayed_query(5, SSW_RQ_PEERNAME, 0, 0, &a, &l), SSW_PASS);
}

static void test_names_and_options(void **state)
{
	(void)state;
	addrs();
	int fd = unix_fd();
	assert_int_equal(ssw_relayed_add(fd, &L, LL, &P, PL), 0);
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_PEERNAME, 0, 0, &a, &l), 0);
	assert_int_equal(l, PL);
	assert_int_equal(port_of(&a), 40001);
	l = sizeof a;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_SOCKNAME, 0, 0, &a, &l), 0);
	assert_int_equal(port_of(&a), 8080);
	/* a short buffer is filled as far as it goes, the length says the whole */
	l = 4;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_SOCKNAME, 0, 0, &a, &l), 0);
	assert_int_equal(l, LL);

	int v = -1;
	socklen_t vl = sizeof v;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_GETOPT, SOL_SOCKET, SO_DOMAIN, &v, &vl), 0);
	assert_int_equal(v, AF_INET);
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_GETOPT, SOL_SOCKET, SO_PROTOCOL, &v, &vl), 0);
	assert_int_equal(v, IPPROTO_TCP);
	/* SO_TYPE, SO_RCVBUF...: the kernel's answer (a stream socket) */
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_GETOPT, SOL_SOCKET, SO_TYPE, &v, &vl), SSW_PASS);
	int zero = 0;
	socklen_t zl = sizeof zero;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_SETOPT, IPPROTO_TCP, TCP_NODELAY, &zero, &zl), 0);
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_GETOPT, IPPROTO_TCP, TCP_NODELAY, &v, &vl), 0);
	assert_int_equal(v, 0);
	struct tcp_info ti;
	socklen_t tl = sizeof ti;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_GETOPT, IPPROTO_TCP, TCP_INFO, &ti, &tl), 0);
	assert_int_equal(ti.tcpi_state, TCP_ESTABLISHED);
	/* an int option with no room is EINVAL, as the kernel says */
	vl = 1;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_GETOPT, SOL_SOCKET, SO_DOMAIN, &v, &vl), -EINVAL);
	ssw_relayed_drop(fd);
	close(fd);
}

static void test_dup_and_close(void **state)
{
	(void)state;
	addrs();
	int fd = unix_fd(), d = dup(fd), e = dup(fd);
	ssw_relayed_add(fd, &L, LL, &P, PL);
	ssw_relayed_dup(fd, d);
	ssw_relayed_dup(fd, e);
	ssw_relayed_drop(fd);
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_PEERNAME, 0, 0, &a, &l), SSW_PASS);
	assert_int_equal(ssw_relayed_query(d, SSW_RQ_PEERNAME, 0, 0, &a, &l), 0);
	assert_int_equal(port_of(&a), 40001);
	ssw_relayed_close_range((unsigned)(d < e ? d : e), (unsigned)(d < e ? e : d));
	assert_int_equal(ssw_relayed_query(d, SSW_RQ_PEERNAME, 0, 0, &a, &l), SSW_PASS);
	assert_int_equal(ssw_relayed_query(e, SSW_RQ_PEERNAME, 0, 0, &a, &l), SSW_PASS);
	close(fd);
	close(d);
	close(e);
}

static void test_env_round_trip(void **state)
{
	(void)state;
	addrs();
	int keep = unix_fd(), cloexec = unix_fd();
	fcntl(cloexec, F_SETFD, FD_CLOEXEC);
	ssw_relayed_add(keep, &L, LL, &P, PL);
	ssw_relayed_add(cloexec, &L, LL, &P, PL);
	char *env = ssw_relayed_env();
	assert_non_null(env);
	char want[32];
	snprintf(want, sizeof want, "=%d:", keep);
	assert_non_null(strstr(env, want)); /* inherited: listed */
	snprintf(want, sizeof want, ";%d:", cloexec);
	assert_null(strstr(env, want)); /* closed by the exec: not listed */
	/* what the exec'd program does at start */
	ssw_relayed_drop(keep);
	ssw_relayed_drop(cloexec);
	assert_int_equal(putenv(env), 0);
	ssw_relayed_import();
	assert_null(getenv("SOCKSWITCH_RELAYED")); /* consumed */
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	assert_int_equal(ssw_relayed_query(keep, SSW_RQ_PEERNAME, 0, 0, &a, &l), 0);
	assert_int_equal(l, PL);
	assert_memory_equal(&a, &P, PL);
	assert_int_equal(ssw_relayed_query(cloexec, SSW_RQ_PEERNAME, 0, 0, &a, &l), SSW_PASS);
	ssw_relayed_drop(keep);
	close(keep);
	close(cloexec);
}

/* The variable comes from the environment: anything in it may be stale or
 * made up.  Only entries naming a live AF_UNIX stream socket are taken. */
static void test_env_hostile(void **state)
{
	(void)state;
	addrs();
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	int tcp = socket(AF_INET, SOCK_STREAM, 0), ok = unix_fd();
	char l[2 * sizeof L + 1], p[2 * sizeof P + 1];
	for (socklen_t i = 0; i < LL; i++)
		sprintf(l + 2 * i, "%02x", ((unsigned char *)&L)[i]);
	for (socklen_t i = 0; i < PL; i++)
		sprintf(p + 2 * i, "%02x", ((unsigned char *)&P)[i]);
	const char *bad[] = {
		"", ";;;", "x:y:z", "-1:00:00", "99999999999:00:00", "3", "3:", "3::", "3:zz:zz", "3:0:0",
		"3:0000:0000", "3:0a00:0a0", "1048576:0200:0200",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("SOCKSWITCH_RELAYED", bad[i], 1);
		ssw_relayed_import();
	}
	char buf[2048];
	/* a pipe and a TCP socket are not stand-ins; AF_UNIX with an AF_UNIX address neither */
	snprintf(buf, sizeof buf, "%d:%s:%s;%d:%s:%s;%d:0100:0100;%d:%s:%s", pfd[0], l, p, tcp, l, p, ok, ok, l, p);
	setenv("SOCKSWITCH_RELAYED", buf, 1);
	ssw_relayed_import();
	struct sockaddr_storage a;
	socklen_t al = sizeof a;
	assert_int_equal(ssw_relayed_query(pfd[0], SSW_RQ_PEERNAME, 0, 0, &a, &al), SSW_PASS);
	assert_int_equal(ssw_relayed_query(tcp, SSW_RQ_PEERNAME, 0, 0, &a, &al), SSW_PASS);
	for (int fd = 0; fd < 64; fd++)
		if (fd != ok)
			assert_int_equal(ssw_relayed_query(fd, SSW_RQ_PEERNAME, 0, 0, &a, &al), SSW_PASS);
	assert_int_equal(ssw_relayed_query(ok, SSW_RQ_PEERNAME, 0, 0, &a, &al), 0);
	assert_int_equal(port_of(&a), 40001);
	ssw_relayed_drop(ok);
	close(ok);
	close(tcp);
	close(pfd[0]);
	close(pfd[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_relayed_passes),
		cmocka_unit_test(test_names_and_options),
		cmocka_unit_test(test_dup_and_close),
		cmocka_unit_test(test_env_round_trip),
		cmocka_unit_test(test_env_hostile),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
