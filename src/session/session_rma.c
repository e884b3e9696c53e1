/* session_rma.c — one-sided transfers of the rendezvous: issue with a completion context, reap poll_cq (any order), wait. */
#include "session/session_priv.h"

#include <errno.h>
#include <stdatomic.h>

/* A context names a slot and the use of it (gen), so that a completion that
 * comes for an earlier use cannot end a later one. */
static void *slot_ctx(const struct ssw_session *s, int i)
{
	return (void *)(uintptr_t)(((uintptr_t)s->rma[i].gen << 8) | (uintptr_t)(i + 1));
}

/* Take what the provider completed: each completion ends the transfer its
 * context names, whichever thread issued it.  Contexts that name nothing
 * of ours (a slot reused since, garbage) are dropped. */
static void reap(struct ssw_session *s)
{
	const struct ssw_progress_ops *pg = s->p->progress;
	struct ssw_completion c[8];
	for (;;) {
		int n = pg->poll_cq(s->loc->ep, c, 8);
		for (int k = 0; k < n; k++) {
			uintptr_t v = (uintptr_t)c[k].ctx;
			int i = (int)(v & 0xff) - 1;
			if (i < 0 || i >= SESS_RMA_SLOTS || !s->rma[i].busy || c[k].ctx != slot_ctx(s, i))
				continue;
			s->rma[i].done = true;
			s->rma[i].status = c[k].status > 0 ? -EIO : c[k].status;
		}
		if (n < 8)
			return;
	}
}

/* The provider's answer as the rendezvous uses it: 0, -EPERM (the transport
 * refuses one-sided access: copy through messages), -EINVAL (a descriptor
 * or range the peer sent does not validate), else -ECONNRESET. */
static int status_of(int rc)
{
	if (rc == 0 || rc == -EPERM || rc == -EINVAL)
		return rc;
	return -ECONNRESET;
}

int sess_rma(struct ssw_session *s, bool write, const struct iovec *v, int k, const struct ssw_rdma_desc *d,
	     uint64_t off, size_t len)
{
	int i;
	/* one transfer a direction is in flight at most (the protocol has one
	 * rendezvous each way): a slot is free */
	for (i = 0; i < SESS_RMA_SLOTS && s->rma[i].busy; i++)
		;
	if (i == SESS_RMA_SLOTS)
		return -ECONNRESET;
	s->rma[i].gen++;
	s->rma[i].busy = true;
	s->rma[i].done = false;
	void *ctx = slot_ctx(s, i);
	const struct ssw_rdma_ops *ro = s->p->rdma;
	int rc = write ? ro->rdma_write(s->loc->ep, v, k, d, off, len, ctx) : ro->rdma_read(s->loc->ep, v, k, d, off, len, ctx);
	if (rc == -EINPROGRESS) {
		s->st.rma_async++;
		/* The provider owns the local buffer until it completes (the
		 * application's, or our queue): no giving up on a signal or a
		 * reset.  An endpoint that fails completes what is pending with
		 * an error (provider.h). */
		for (;;) {
			reap(s);
			if (s->rma[i].done)
				break;
			(void)sess_wait_peer(s, ssw_now_ns() + 1000000ull);
		}
		rc = s->rma[i].status;
	}
	s->rma[i].busy = false;
	return status_of(rc);
}
