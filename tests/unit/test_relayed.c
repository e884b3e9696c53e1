/* test_relayed.c — the table of relayed fds (switch/relayed.c): what a program
 * exec'd with a switched connection asks of its AF_UNIX stand-in (addresses,
 * TCP options), dup/close bookkeeping, and the relay's name, by which a
 * process the fd reaches recognises it (hostile names included). */
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
#include <sys/un.h>
#include <unistd.h>

#include "switch/share/relay.h"

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

/* a connected pair whose listening end is bound to name: the application's end */
static int named_pair(const struct sockaddr_un *un, socklen_t ul, int *other)
{
	int l = socket(AF_UNIX, SOCK_STREAM, 0), c = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(l >= 0 && c >= 0);
	assert_int_equal(bind(l, (const struct sockaddr *)un, ul), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(connect(c, (const struct sockaddr *)un, ul), 0);
	*other = accept(l, NULL, NULL);
	assert_true(*other >= 0);
	close(l);
	return c;
}

static void test_name_round_trip(void **state)
{
	(void)state;
	addrs();
	struct sockaddr_un un;
	socklen_t ul;
	assert_int_equal(ssw_relay_name(&L, LL, &P, PL, &un, &ul), 0);
	struct sockaddr_storage l, p;
	socklen_t ll, pl;
	assert_true(ssw_relay_name_parse(&un, ul, &l, &ll, &p, &pl));
	assert_int_equal(ll, LL);
	assert_memory_equal(&l, &L, LL);
	assert_memory_equal(&p, &P, PL);
	/* IPv6 fits too */
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(9), .sin6_addr = IN6ADDR_LOOPBACK_INIT,
				   .sin6_scope_id = 3 };
	struct sockaddr_storage s6;
	memset(&s6, 0, sizeof s6);
	memcpy(&s6, &a6, sizeof a6);
	assert_int_equal(ssw_relay_name(&s6, sizeof a6, &s6, sizeof a6, &un, &ul), 0);
	assert_true(ssw_relay_name_parse(&un, ul, &l, &ll, &p, &pl));
	assert_int_equal(((struct sockaddr_in6 *)&p)->sin6_scope_id, 3);
	/* two names are never the same (a pid and a counter in each) */
	struct sockaddr_un un2;
	socklen_t ul2;
	assert_int_equal(ssw_relay_name(&L, LL, &P, PL, &un2, &ul2), 0);
	assert_true(ul != ul2 || memcmp(&un, &un2, ul) != 0);
}

/* Whatever another program's abstract socket is called, or a made-up name,
 * is not taken for a relay's. */
static void test_name_hostile(void **state)
{
	(void)state;
	addrs();
	struct sockaddr_un un;
	socklen_t ul;
	assert_int_equal(ssw_relay_name(&L, LL, &P, PL, &un, &ul), 0);
	struct sockaddr_storage l, p;
	socklen_t ll, pl;
	size_t off = offsetof(struct sockaddr_un, sun_path);
	for (socklen_t n = 0; n < ul; n++) /* every truncation */
		assert_false(ssw_relay_name_parse(&un, n, &l, &ll, &p, &pl));
	struct sockaddr_un bad = un;
	bad.sun_path[0] = 'x'; /* a path name, not abstract */
	assert_false(ssw_relay_name_parse(&bad, ul, &l, &ll, &p, &pl));
	bad = un;
	bad.sun_path[1] ^= 1; /* another prefix */
	assert_false(ssw_relay_name_parse(&bad, ul, &l, &ll, &p, &pl));
	/* lengths that overrun, families that are not IP or differ */
	size_t k = off + 1 + strlen("sockswitch-relay/") + 8;
	for (int v = 0; v < 256; v++) {
		bad = un;
		((unsigned char *)&bad)[k] = (unsigned char)v;
		if (v == (int)LL)
			continue;
		assert_false(ssw_relay_name_parse(&bad, ul, &l, &ll, &p, &pl));
	}
	bad = un;
	sa_family_t fam = AF_UNIX;
	memcpy((char *)&bad + k + 1, &fam, sizeof fam);
	assert_false(ssw_relay_name_parse(&bad, ul, &l, &ll, &p, &pl));
	/* random bytes after the prefix */
	srand(7);
	for (int i = 0; i < 20000; i++) {
		bad = un;
		for (size_t b = k; b < (size_t)ul; b++)
			if (rand() % 4 == 0)
				((unsigned char *)&bad)[b] = (unsigned char)rand();
		socklen_t n = (socklen_t)(k + (size_t)rand() % (sizeof bad - k));
		if (ssw_relay_name_parse(&bad, n, &l, &ll, &p, &pl)) { /* only well-formed ones */
			assert_true(l.ss_family == AF_INET || l.ss_family == AF_INET6);
			assert_int_equal(l.ss_family, p.ss_family);
		}
	}
}

/* The process an fd reaches (exec, SCM_RIGHTS) recognises it by its peer's name. */
static void test_recognize(void **state)
{
	(void)state;
	addrs();
	struct sockaddr_un un;
	socklen_t ul;
	assert_int_equal(ssw_relay_name(&L, LL, &P, PL, &un, &ul), 0);
	int other, fd = named_pair(&un, ul, &other);
	assert_true(ssw_relayed_recognize(fd));
	struct sockaddr_storage a;
	socklen_t al = sizeof a;
	assert_int_equal(ssw_relayed_query(fd, SSW_RQ_PEERNAME, 0, 0, &a, &al), 0);
	assert_int_equal(port_of(&a), 40001);
	ssw_relayed_drop(fd);
	/* the relay's own end, a plain socketpair, a pipe, a TCP socket: no */
	assert_false(ssw_relayed_recognize(other));
	int plain = unix_fd(), pfd[2], tcp = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(pipe(pfd), 0);
	assert_false(ssw_relayed_recognize(plain));
	assert_false(ssw_relayed_recognize(pfd[0]));
	assert_false(ssw_relayed_recognize(tcp));
	assert_false(ssw_relayed_recognize(-1));
	close(fd);
	close(other);
	close(plain);
	close(pfd[0]);
	close(pfd[1]);
	close(tcp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_relayed_passes),
		cmocka_unit_test(test_names_and_options),
		cmocka_unit_test(test_dup_and_close),
		cmocka_unit_test(test_name_round_trip),
		cmocka_unit_test(test_name_hostile),
		cmocka_unit_test(test_recognize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
