/* test_shm_seal.c — sealed segments of the shm provider: what shm_seg_create makes, which peer memfds shm_seg_check takes, and accept's refusal of an unsealed HELLO (issue 9: a peer must not be able to shrink a segment under the other side). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "session/session.h"
#include "providers/shm/shm_priv.h"
#include "shm_hello.h"
#include "session/wire.h"
#include "switch/sock/addr.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

extern const struct ssw_provider ssw_provider_shm;

#define SEG (shm_seg_size(SHM_RING_MIN))

/* A memfd of `size` bytes with exactly `seals` added (-1: not sealable). */
static int memfd_with(uint64_t size, int seals)
{
	int fd = memfd_create("t", MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	if (seals > 0)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

static void test_create_is_sealed(void **state)
{
	(void)state;
	int fd = shm_seg_create("t", SEG);
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_GET_SEALS) & ~F_SEAL_EXEC, SHM_SEALS);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, SEG);
	/* nobody holding it (creator or receiver) can resize or reseal it */
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(fd, (off_t)SEG * 2), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	assert_int_equal(errno, EPERM);
	/* and it is still a writable shared segment */
	void *p = mmap(NULL, SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 1, SEG);
	munmap(p, SEG);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), 0);
	close(fd);
}

static void test_check_takes_sealed(void **state)
{
	(void)state;
	int fd = memfd_with(SEG + 4096, SHM_SEALS);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), 0); /* bigger is harmless */
	close(fd);
}

/* Every seal set but the agreed one is refused: without SHRINK the peer can
 * shrink it; without GROW or SEAL it is not what the switch makes; a write
 * seal would refuse our writes. */
static void test_check_refuses_other_seals(void **state)
{
	(void)state;
	static const int sets[] = {
		-1, /* created without MFD_ALLOW_SEALING: only F_SEAL_SEAL */
		0,
		F_SEAL_GROW | F_SEAL_SEAL,
		F_SEAL_SHRINK,
		F_SEAL_SHRINK | F_SEAL_GROW,
		F_SEAL_SHRINK | F_SEAL_SEAL,
		SHM_SEALS | F_SEAL_WRITE,
		SHM_SEALS | F_SEAL_FUTURE_WRITE,
	};
	for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
		int fd = memfd_with(SEG, sets[i]);
		assert_int_equal(shm_seg_check(fd, SEG, NULL), -EPROTO);
		close(fd);
	}
}

static void test_check_refuses_small(void **state)
{
	(void)state;
	int fd = memfd_with(SEG - 4096, SHM_SEALS);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), -EPROTO);
	close(fd);
	fd = memfd_with(0, SHM_SEALS);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), -EPROTO);
	close(fd);
}

/* Descriptors that are no memfd at all: a pipe, a device, a directory. */
static void test_check_refuses_other_files(void **state)
{
	(void)state;
	int pfd[2];
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	assert_int_equal(shm_seg_check(pfd[0], SEG, NULL), -EPROTO);
	close(pfd[0]);
	close(pfd[1]);
	int fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), -EPROTO);
	close(fd);
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), -EPROTO);
	close(fd);
}

/* A hugetlbfs memfd can carry the agreed seals, but a punched hole in it
 * faults with SIGBUS when the huge page pool is empty: refused. */
static void test_check_refuses_hugetlb(void **state)
{
	(void)state;
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
	if (fd < 0) {
		print_message("no hugetlb memfd here (%s): case not run\n", strerror(errno));
		return;
	}
	if (ftruncate(fd, 2 << 20) < 0 || fcntl(fd, F_ADD_SEALS, SHM_SEALS) < 0) {
		print_message("hugetlb memfd cannot be sized or sealed here (%s): case not run\n", strerror(errno));
		close(fd);
		return;
	}
	assert_int_equal(shm_seg_check(fd, SEG, NULL), -EPROTO);
	close(fd);
}

/* Systems that make every memfd non-executable (vm.memfd_noexec) add
 * F_SEAL_EXEC: it does not matter to a data segment. */
static void test_check_ignores_exec_seal(void **state)
{
	(void)state;
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0) {
		print_message("kernel without MFD_NOEXEC_SEAL: case not run\n");
		return;
	}
	assert_int_equal(ftruncate(fd, (off_t)SEG), 0);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, SHM_SEALS), 0);
	assert_true(fcntl(fd, F_GET_SEALS) & F_SEAL_EXEC);
	assert_int_equal(shm_seg_check(fd, SEG, NULL), 0);
	close(fd);
}

/* ---- through the provider's accept ---------------------------------------- */

static struct ssw_listener *listener(void)
{
	struct ssw_listener *l = NULL;
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.211.7.14", &a.sin_addr); /* nobody else's name */
	for (int i = 0; i < 20 && !l; i++) {
		a.sin_port = htons((uint16_t)(20000 + (getpid() * 7 + i) % 40000));
		if (ssw_provider_shm.conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l) < 0)
			l = NULL;
	}
	assert_non_null(l);
	return l;
}

static int try_accept(struct ssw_listener *l, struct ssw_ep **ep)
{
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
	size_t plen = sizeof priv;
	return ssw_provider_shm.conn->accept(l, ep, priv, &plen);
}

/* The refusal a connector reads on its rendezvous socket. */
static int refused(int c)
{
	struct pollfd pf = { .fd = c, .events = POLLIN };
	struct shm_hs hs;
	return poll(&pf, 1, 1000) == 1 && recv(c, &hs, sizeof hs, 0) == (ssize_t)sizeof hs && hs.type == SHM_HS_ACK &&
	       hs.status < 0;
}

static void test_accept_refuses_unsealed(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	int memfd = memfd_with(SEG, -1);
	int c = shm_test_hello(l, memfd);
	struct ssw_ep *ep = NULL;
	assert_int_equal(try_accept(l, &ep), -EAGAIN);
	assert_true(refused(c));
	close(c);
	close(memfd);
	ssw_provider_shm.conn->listener_close(l);
}

/* Accepted: the sender cannot take the memory away from under the ring. */
static void test_accept_takes_sealed(void **state)
{
	(void)state;
	struct ssw_listener *l = listener();
	int memfd = shm_seg_create("t", SEG);
	assert_true(memfd >= 0);
	int c = shm_test_hello(l, memfd);
	struct ssw_ep *ep = NULL;
	assert_int_equal(try_accept(l, &ep), 0);
	assert_int_equal(ftruncate(memfd, 0), -1);
	struct iovec v = { "hello", 5 };
	assert_int_equal(ssw_provider_shm.msg->send(ep, &v, 1), 0); /* writes the ring */
	ssw_provider_shm.conn->close(ep, SSW_CLOSE_ABORT);
	close(c);
	close(memfd);
	ssw_provider_shm.conn->listener_close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_is_sealed),
		cmocka_unit_test(test_check_takes_sealed),
		cmocka_unit_test(test_check_refuses_other_seals),
		cmocka_unit_test(test_check_refuses_small),
		cmocka_unit_test(test_check_refuses_other_files),
		cmocka_unit_test(test_check_refuses_hugetlb),
		cmocka_unit_test(test_check_ignores_exec_seal),
		cmocka_unit_test(test_accept_refuses_unsealed),
		cmocka_unit_test(test_accept_takes_sealed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
