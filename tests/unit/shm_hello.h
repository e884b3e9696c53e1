/* shm_hello.h — the shm provider's unit tests' hand-made connector: a HELLO
 * with a memfd of the test's choice, sent on a rendezvous connection to a
 * listener, as shm_connect would (test_shm_seal.c, test_shm_seg.c; after
 * cmocka.h). */
#ifndef SSW_TEST_SHM_HELLO_H
#define SSW_TEST_SHM_HELLO_H

#include "providers/shm/shm_priv.h"
#include "session/wire.h"
#include "switch/setup/setup_priv.h"
#include "switch/sock/addr.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Writes the segment header as the switch does (over whatever was there),
 * connects to l's rendezvous and sends the HELLO; returns the connection. */
static inline int shm_test_hello(struct ssw_listener *l, int memfd)
{
	uint64_t seg = shm_seg_size(SHM_RING_MIN);
	void *p = mmap(NULL, seg, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 0, sizeof(struct shm_seg_hdr));
	shm_seg_init(p, SHM_RING_MIN);
	/* as a connector that keeps its memfd to send it again */
	atomic_fetch_or(&((struct shm_seg_hdr *)p)->feat[0], SHM_FEAT_KEEP);
	munmap(p, seg);
	struct sockaddr_un un;
	socklen_t ul = sizeof un;
	assert_int_equal(getsockname(l->lfd, (struct sockaddr *)&un, &ul), 0);
	int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&un, ul), 0);
	struct sockaddr_storage me = { 0 }, srv = { 0 };
	me.ss_family = srv.ss_family = AF_INET;
	struct ssw_wire_init init = { .version = SSW_WIRE_VERSION, .window = 1u << 20, .pid = getpid() };
	struct ssw_conn_priv priv;
	ssw_conn_priv_make(&priv, &me, &srv, &init);
	struct shm_hs hs = { .magic = SHM_MAGIC, .type = SHM_HS_HELLO, .ring_size = SHM_RING_MIN, .priv_len = sizeof priv };
	memcpy(hs.priv, &priv, sizeof priv);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = { &hs, sizeof hs };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &memfd, sizeof memfd);
	assert_int_equal(sendmsg(c, &mh, MSG_NOSIGNAL), (ssize_t)sizeof hs);
	return c;
}

#endif
