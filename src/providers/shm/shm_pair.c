/* shm_pair.c — test support: two connected shm endpoints inside one process.
 *
 * Unit tests and fuzz targets need a real connected pair (real segment, real
 * rings, real eventfds, a control socket whose hang-up means "peer gone") but
 * not the per-netns rendezvous, which would make them depend on abstract
 * socket names other test runs may hold.  This builds exactly what
 * shm_connect + shm_accept would leave behind, minus the handshake.  The
 * switch never calls it. */
#include "providers/shm/shm_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

static struct ssw_ep *pair_ep(int memfd, uint64_t ring_size, int connector, int ctl_fd, int my_efd, int peer_efd)
{
	struct ssw_ep *ep = shm_ep_alloc();
	if (!ep)
		return NULL;
	ep->seg_fd = ep->map_fd = ep->live_slot = -1;
	ep->ctl_fd = ctl_fd;
	ep->my_efd = my_efd;
	ep->peer_efd = peer_efd;
	ep->seg_size = shm_seg_size(ring_size);
	/* Each side maps the segment on its own, as two processes would. */
	ep->seg = mmap(NULL, ep->seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (ep->seg == MAP_FAILED) {
		ep->seg = NULL;
		return ep; /* caller sees seg == NULL and frees */
	}
	shm_ring_attach(ep, ep->seg, ring_size, connector);
	ep->peer_pid = getpid();
	ep->peer_uid = getuid();
	ep->caps = SSW_CAP_SHARED_CONTEXT;
	if (!shm_cma_disabled)
		ep->caps |= SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE;
	atomic_store(&ep->cred_done, 1);
	return ep;
}

/* Returns 0 with *a playing the connector and *b the acceptor (close each
 * with ssw_provider_shm.conn->close), or -errno.  ring_size must be a power
 * of two in [SHM_RING_MIN, SHM_RING_MAX]. */
int ssw_shm_pair(uint64_t ring_size, struct ssw_ep **a, struct ssw_ep **b)
{
	if (ring_size < SHM_RING_MIN || ring_size > SHM_RING_MAX || (ring_size & (ring_size - 1)))
		return -EINVAL;
	int fd[7] = { -1, -1, -1, -1, -1, -1, -1 }; /* memfd, ctl a, ctl b, efd a, efd b, dup a, dup b */
	struct ssw_ep *x = NULL, *y = NULL;
	int rc = -ENOMEM;
	uint64_t size = shm_seg_size(ring_size);
	fd[0] = shm_seg_create("sockswitch-pair", size); /* as shm_connect makes them */
	if (fd[0] < 0) {
		rc = fd[0];
		goto fail;
	}
	if (SYS_(socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, &fd[1]) < 0)
		goto sys_fail;
	shm_vouch_passcred(fd[1]);
	shm_vouch_passcred(fd[2]);
	fd[3] = sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	fd[4] = sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd[3] < 0 || fd[4] < 0)
		goto sys_fail;
	/* each endpoint owns (and closes) its own copy of the peer's doorbell */
	fd[5] = sys_fcntl(fd[3], F_DUPFD_CLOEXEC, 0);
	fd[6] = sys_fcntl(fd[4], F_DUPFD_CLOEXEC, 0);
	if (fd[5] < 0 || fd[6] < 0)
		goto sys_fail;

	void *h0 = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd[0], 0);
	if (h0 == MAP_FAILED)
		goto sys_fail;
	shm_seg_init(h0, ring_size);
	munmap(h0, size);

	x = pair_ep(fd[0], ring_size, 1, fd[1], fd[3], fd[6]);
	if (x)
		fd[1] = fd[3] = fd[6] = -1;
	y = pair_ep(fd[0], ring_size, 0, fd[2], fd[4], fd[5]);
	if (y)
		fd[2] = fd[4] = fd[5] = -1;
	if (!x || !y || !x->seg || !y->seg)
		goto fail;
	sys_close(fd[0]);
	*a = x;
	*b = y;
	return 0;
sys_fail:
	rc = -errno;
fail:
	shm_ep_free(x);
	shm_ep_free(y);
	for (int i = 0; i < 7; i++)
		if (fd[i] >= 0)
			sys_close(fd[i]);
	return rc;
}
