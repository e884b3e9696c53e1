/* test_shm_seg.c — segment recycling (shm_seg.c): a connector reuses a segment only for the same listening process, only once its acceptor released it, and clean; an acceptor reuses its mapping only for the connector that sent it; a forked child never uses its parent's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session/session.h"
#include "providers/shm/shm_priv.h"
#include "shm_hello.h"

extern const struct ssw_provider ssw_provider_shm;
#define CONN (ssw_provider_shm.conn)

static struct sockaddr_in addr; /* where the test's listener is */

static int shm_seg_cached(void)
{
	int segs, maps;
	shm_seg_kept(&segs, &maps);
	return segs;
}

static int shm_seg_maps_kept(void)
{
	int segs, maps;
	shm_seg_kept(&segs, &maps);
	return maps;
}

/* A listener on a name nobody else uses; the same address each call once found. */
static struct ssw_listener *listener(void)
{
	struct ssw_listener *l = NULL;
	if (addr.sin_port) {
		assert_int_equal(CONN->listen((struct sockaddr *)&addr, sizeof addr, 16, SSW_PROTO_MAX, &l), 0);
		return l;
	}
	addr.sin_family = AF_INET;
	inet_pton(AF_INET, "127.211.9.3", &addr.sin_addr);
	for (int i = 0; i < 20 && !l; i++) {
		addr.sin_port = htons((uint16_t)(20000 + (getpid() * 11 + i) % 40000));
		if (CONN->listen((struct sockaddr *)&addr, sizeof addr, 16, SSW_PROTO_MAX, &l) < 0)
			l = NULL;
	}
	assert_non_null(l);
	return l;
}

static struct ssw_ep *connect_ep(void)
{
	struct ssw_ep *ep = NULL;
	assert_int_equal(CONN->connect((struct sockaddr *)&addr, sizeof addr, SSW_PROTO_MAX, "p", 1, &ep), 0);
	return ep;
}

static struct ssw_ep *accept_ep(struct ssw_listener *l)
{
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
	size_t plen = sizeof priv;
	struct ssw_ep *ep = NULL;
	assert_int_equal(CONN->accept(l, &ep, priv, &plen), 0);
	return ep;
}

/* The segment a connector handed over, named by its memfd's inode (the
 * connector keeps the memfd while it lives). */
static ino_t seg_ino(struct ssw_ep *c)
{
	struct stat st;
	assert_true(c->seg_fd >= 0);
	assert_int_equal(fstat(c->seg_fd, &st), 0);
	return st.st_ino;
}

static void send_str(struct ssw_ep *ep, const char *s)
{
	struct iovec v = { (void *)s, strlen(s) };
	assert_int_equal(ssw_provider_shm.msg->send(ep, &v, 1), 0);
}

/* The next message on ep, as a string. */
static const char *recv_str(struct ssw_ep *ep, char *buf, size_t len)
{
	const void *m;
	size_t n;
	assert_int_equal(ssw_provider_shm.msg->recv_peek(ep, &m, &n), 0);
	assert_true(n < len);
	memcpy(buf, m, n);
	buf[n] = 0;
	ssw_provider_shm.msg->recv_done(ep);
	return buf;
}

/* One whole connection: connect, accept, close (the acceptor first when
 * acceptor_first); returns the segment's inode. */
static ino_t one_conn(struct ssw_listener *l, bool acceptor_first)
{
	struct ssw_ep *c = connect_ep(), *a = accept_ep(l);
	ino_t ino = seg_ino(c);
	CONN->close(acceptor_first ? a : c, SSW_CLOSE_ORDERLY);
	CONN->close(acceptor_first ? c : a, SSW_CLOSE_ORDERLY);
	return ino;
}

static void test_reused_once_released(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	ino_t first = one_conn(l, true);
	assert_true(shm_seg_cached() >= 1);
	/* the listener's process had it and released it: the same segment */
	assert_true(one_conn(l, false) == first);
	/* the connector closed first: the acceptor released it after, at its close */
	assert_true(one_conn(l, true) == first);
	CONN->listener_close(l);
}

static void test_not_reused_while_acceptor_holds_it(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	ino_t first = one_conn(l, true); /* one released segment in the cache */
	struct ssw_ep *c1 = connect_ep(), *a1 = accept_ep(l);
	ino_t s1 = seg_ino(c1);
	assert_true(s1 == first);
	CONN->close(c1, SSW_CLOSE_ORDERLY); /* a1 still holds (and could write) it */
	struct ssw_ep *c2 = connect_ep(), *a2 = accept_ep(l);
	ino_t s2 = seg_ino(c2);
	assert_true(s2 != s1); /* a new one */
	CONN->close(a2, SSW_CLOSE_ORDERLY);
	CONN->close(c2, SSW_CLOSE_ORDERLY);
	/* s2 is released, s1 is not: s2 */
	struct ssw_ep *c3 = connect_ep(), *a3 = accept_ep(l);
	assert_true(seg_ino(c3) == s2);
	CONN->close(a1, SSW_CLOSE_ORDERLY); /* s1 released now */
	struct ssw_ep *c4 = connect_ep(), *a4 = accept_ep(l);
	assert_true(seg_ino(c4) == s1);
	CONN->close(a3, SSW_CLOSE_ABORT);
	CONN->close(c3, SSW_CLOSE_ABORT);
	CONN->close(a4, SSW_CLOSE_ORDERLY);
	CONN->close(c4, SSW_CLOSE_ORDERLY);
	CONN->listener_close(l);
}

/* A recycled segment carries nothing of its last connection: no data, no
 * end, no reset. */
static void test_reused_starts_clean(void **state)
{
	(void)state;
	char buf[64];
	struct ssw_listener *l = listener();
	struct ssw_ep *c = connect_ep(), *a = accept_ep(l);
	ino_t ino = seg_ino(c);
	send_str(c, "old unread"); /* never read */
	send_str(a, "old reply");
	CONN->close(a, SSW_CLOSE_ABORT);
	CONN->close(c, SSW_CLOSE_ABORT);
	c = connect_ep();
	a = accept_ep(l);
	assert_true(seg_ino(c) == ino);
	assert_int_equal(ssw_provider_shm.progress->peer_state(a, 0, NULL), 0);
	assert_int_equal(ssw_provider_shm.progress->peer_state(c, 0, NULL), 0);
	send_str(c, "new");
	send_str(a, "new reply");
	assert_string_equal(recv_str(a, buf, sizeof buf), "new");
	assert_string_equal(recv_str(c, buf, sizeof buf), "new reply");
	CONN->close(a, SSW_CLOSE_ORDERLY);
	CONN->close(c, SSW_CLOSE_ORDERLY);
	CONN->listener_close(l);
}

/* Another process listening on the same address: it never gets a segment
 * the first listener had. */
static void test_not_reused_for_another_listener(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	ino_t first = one_conn(l, true);
	CONN->listener_close(l);
	int go[2], done[2];
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	int before = shm_seg_cached();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* the other listener: accepts one connection, then waits (5 s at most) */
		char b;
		close(go[0]);
		close(done[1]);
		alarm(5);
		struct ssw_listener *l2 = NULL;
		if (CONN->listen((struct sockaddr *)&addr, sizeof addr, 16, SSW_PROTO_MAX, &l2) < 0)
			_exit(2);
		(void)!write(go[1], "g", 1);
		uint8_t priv[SSW_CONNECT_PRIV_MAX];
		size_t plen = sizeof priv;
		struct ssw_ep *a = NULL;
		for (int i = 0; i < 2000 && CONN->accept(l2, &a, priv, &plen) < 0; i++)
			usleep(1000);
		(void)!read(done[0], &b, 1);
		if (a)
			CONN->close(a, SSW_CLOSE_ORDERLY);
		_exit(a ? 0 : 3);
	}
	char b;
	close(go[1]);
	close(done[0]);
	assert_int_equal(read(go[0], &b, 1), 1);
	struct ssw_ep *c = connect_ep();
	ino_t got = seg_ino(c);
	int after = shm_seg_cached();
	assert_int_equal(write(done[1], "d", 1), 1);
	close(go[0]);
	close(done[1]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(got != first);
	assert_int_equal(after, before); /* the first listener's is kept for it */
	CONN->close(c, SSW_CLOSE_ORDERLY);
	l = listener(); /* ours again, in this process: a new pid is not needed for the cached one */
	(void)one_conn(l, true);
	CONN->listener_close(l);
}

/* Descriptors this process has open (/proc/self/fd). */
static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ., .. and the directory's own */
}

/* Memfds are kept (by live connections and cached segments) only while
 * descriptors are plentiful: at most a quarter of those still free (main
 * sets the limit: 4096).  A process that many connections bring near its
 * limit keeps few, and the oldest connections give theirs up first; the
 * acceptor keeps its mapping only of a segment whose connector still keeps
 * the memfd; and what is kept serves the next connections. */
static void test_kept_memfds_within_budget(void **state)
{
	(void)state;
	enum { N = 1000 };
	struct ssw_listener *l = listener();
	struct ssw_ep **c = calloc(N, sizeof *c), **a = calloc(N, sizeof *a);
	assert_true(c && a);
	int kept = 0;
	for (int i = 0; i < N; i++) {
		c[i] = connect_ep();
		a[i] = accept_ep(l);
		if (i == 99) { /* descriptors plentiful: every one kept so far */
			for (int k = 0; k <= i; k++)
				kept += c[k]->seg_fd >= 0;
			assert_int_equal(kept, 100);
		}
	}
	kept = 0;
	int maps = 0; /* acceptors' memfds, kept so that an exec can carry them (same budget) */
	for (int i = 0; i < N; i++) {
		kept += c[i]->seg_fd >= 0;
		maps += a[i]->map_fd >= 0;
	}
	assert_true(maps > 0 && maps <= 32);
	int in_use = open_fds() - maps;
	/* two per connection here (both ends' rendezvous sockets), the kept
	 * memfds, and a few of the test's own */
	assert_true(in_use >= 2 * N + kept && in_use < 2 * N + kept + 64);
	assert_true(kept > 16 && kept <= (4096 - (in_use - kept)) / 4 + 16);
	assert_true(c[N - 1]->seg_fd >= 0);
	assert_true(c[0]->seg_fd < 0); /* the oldest gave theirs up */
	/* the acceptors in order, the connectors the other way round: the
	 * connector then reuses first the segment whose mapping the acceptor
	 * kept first (the oldest in its hash bucket, behind newer ones) */
	for (int i = 0; i < N; i++)
		CONN->close(a[i], SSW_CLOSE_ORDERLY);
	for (int i = N - 1; i >= 0; i--)
		CONN->close(c[i], SSW_CLOSE_ORDERLY);
	int segs1 = shm_seg_cached(), maps1 = shm_seg_maps_kept();
	printf("# %d connections: %d memfds kept, %d descriptors in use; closed: %d segments cached, %d mappings kept\n", N,
	       kept, in_use, segs1, maps1);
	assert_true(segs1 >= kept - 16 && segs1 <= shm_seg_fd_budget());
	assert_true(maps1 >= kept - 16 && maps1 <= kept + 8); /* only of the kept ones */
	assert_int_equal(shm_seg_maps_chained(), maps1);
	/* they serve again, every one: no new segment, no new mapping (the
	 * acceptor finds each kept mapping, some behind others in their hash
	 * bucket) */
	int again = segs1 < maps1 ? segs1 : maps1;
	for (int i = 0; i < again; i++) {
		c[i] = connect_ep();
		a[i] = accept_ep(l);
		assert_true(c[i]->seg_fd >= 0);
		assert_int_equal(shm_seg_cached(), segs1 - i - 1);
		assert_int_equal(shm_seg_maps_kept(), maps1 - i - 1);
		assert_int_equal(shm_seg_maps_chained(), maps1 - i - 1);
	}
	for (int i = 0; i < again; i++) {
		CONN->close(a[i], SSW_CLOSE_ORDERLY);
		CONN->close(c[i], SSW_CLOSE_ORDERLY);
	}
	free(c);
	free(a);
	CONN->listener_close(l);
}

/* Mappings of segments in this process (/proc/self/maps). */
static int seg_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		n += strstr(line, "/memfd:sockswitch") != NULL;
	fclose(f);
	return n;
}

/* A forked child has none of its parent's kept segments or mappings, from
 * the fork on: they serve the parent's next connections. */
static void test_child_forgets_cache(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	(void)one_conn(l, true);
	assert_true(shm_seg_cached() >= 1 && shm_seg_maps_kept() >= 1);
	assert_true(seg_mappings() >= 2);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) /* before any call of ours: gone already */
		_exit(seg_mappings() == 0 && shm_seg_cached() == 0 && shm_seg_maps_kept() == 0 ? 0 : 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(shm_seg_cached() >= 1 && shm_seg_maps_kept() >= 1);
	CONN->listener_close(l);
}

/* The acceptor maps a recycled segment once: the mapping it kept serves
 * the same connector again. */
static void test_acceptor_keeps_mapping(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	(void)one_conn(l, true);
	int kept = shm_seg_maps_kept();
	assert_true(kept >= 1);
	struct ssw_ep *c = connect_ep(), *a = accept_ep(l);
	assert_int_equal(shm_seg_maps_kept(), kept - 1); /* taken by this connection */
	CONN->close(a, SSW_CLOSE_ORDERLY);
	CONN->close(c, SSW_CLOSE_ORDERLY);
	assert_int_equal(shm_seg_maps_kept(), kept);
	CONN->listener_close(l);
}

/* Another process handing over the same memfd (it got a copy) does not get
 * the mapping the acceptor kept for the first one: it is mapped anew, and
 * the kept one waits for its own connector. */
static void test_acceptor_mapping_only_for_its_connector(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	int memfd = shm_seg_create("t", shm_seg_size(SHM_RING_MIN));
	assert_true(memfd >= 0);
	int c = shm_test_hello(l, memfd);
	struct ssw_ep *a = accept_ep(l);
	CONN->close(a, SSW_CLOSE_ORDERLY);
	close(c);
	int kept = shm_seg_maps_kept();
	assert_true(kept >= 1);
	int sync[2];
	assert_int_equal(pipe(sync), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* another process, same memfd */
		alarm(5);
		int c2 = shm_test_hello(l, memfd);
		char b;
		close(sync[1]);
		(void)!read(sync[0], &b, 1); /* until the parent accepted */
		close(c2);
		_exit(0);
	}
	close(sync[0]);
	struct ssw_ep *a2 = NULL;
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
	for (int i = 0; i < 2000; i++) {
		size_t plen = sizeof priv;
		if (CONN->accept(l, &a2, priv, &plen) == 0)
			break;
		usleep(1000);
	}
	assert_non_null(a2);
	assert_int_equal(shm_seg_maps_kept(), kept); /* not taken */
	close(sync[1]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	CONN->close(a2, SSW_CLOSE_ABORT);
	close(memfd);
	CONN->listener_close(l);
}

int main(void)
{
	/* a limit with room above the floor where the switch hides its
	 * descriptors: 3072 numbers, an eighth for kept memfds */
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
	if (rl.rlim_cur < 4096) {
		printf("SKIP RLIMIT_NOFILE hard limit below 4096\n");
		return 77;
	}
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reused_once_released),
		cmocka_unit_test(test_not_reused_while_acceptor_holds_it),
		cmocka_unit_test(test_reused_starts_clean),
		cmocka_unit_test(test_not_reused_for_another_listener),
		cmocka_unit_test(test_kept_memfds_within_budget),
		cmocka_unit_test(test_child_forgets_cache),
		cmocka_unit_test(test_acceptor_keeps_mapping),
		cmocka_unit_test(test_acceptor_mapping_only_for_its_connector),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
