/* wire.c — parses and validates session messages received from the peer. */
#include "session/wire.h"

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

static int fixed(struct ssw_msg *m, const uint8_t *p, size_t want, void *dst)
{
	if (m->h.len != want)
		return -1;
	memcpy(dst, p, want);
	return 0;
}

int ssw_wire_parse(const void *buf, size_t len, uint32_t expect_seq, struct ssw_msg *m)
{
	const uint8_t *p = buf;
	if (len < sizeof m->h)
		return -1;
	memcpy(&m->h, p, sizeof m->h); /* one read of shared memory */
	/* an unknown flag, or one where it means nothing: another protocol */
	uint8_t allowed = m->h.type == SSW_MSG_DATA ? SSW_WIRE_F_ACK_NOW : 0;
	if (m->h.len != len - sizeof m->h || m->h.seq != expect_seq || (m->h.flags & ~allowed) || m->h.reserved)
		return -1;
	m->payload = p + sizeof m->h;
	switch (m->h.type) {
	case SSW_MSG_INIT:
		if (fixed(m, m->payload, sizeof m->u.init, &m->u.init) || m->u.init.version != SSW_WIRE_VERSION)
			return -1;
		return 0;
	case SSW_MSG_DATA:
		return m->h.len ? 0 : -1;
	case SSW_MSG_OOB:
		return fixed(m, m->payload, 1, &m->u.oob);
	case SSW_MSG_FIN:
	case SSW_MSG_CREDIT:
	case SSW_MSG_SUSPEND:
	case SSW_MSG_RESUME:
	case SSW_MSG_MOVED:
		return m->h.len ? -1 : 0;
	case SSW_MSG_SUSPENDED: /* with an offer, or none (wire.h) */
		if (!m->h.len)
			return 0;
		if (fixed(m, m->payload, sizeof m->u.offer, &m->u.offer))
			return -1;
		{
			uint16_t fam;
			memcpy(&fam, m->u.offer.addr, sizeof fam);
			if (!((fam == AF_INET && m->u.offer.addrlen == sizeof(struct sockaddr_in)) ||
			      (fam == AF_INET6 && m->u.offer.addrlen == sizeof(struct sockaddr_in6))) ||
			    m->u.offer.nkept > SSW_MOVE_LANES)
				return -1;
		}
		return 0;
	case SSW_MSG_RNDV_READ:
	case SSW_MSG_SINK:
		/* a SINK of 0 bytes and no descriptor refuses the peer's
		 * WRITE_REQ (session_rndv.c rw_refuse) */
		if (fixed(m, m->payload, sizeof m->u.rndv, &m->u.rndv) || m->u.rndv.desc.len > SSW_RDMA_DESC_MAX ||
		    (m->u.rndv.len == 0 && (m->h.type == SSW_MSG_RNDV_READ || m->u.rndv.desc.len)))
			return -1;
		return 0;
	case SSW_MSG_RNDV_DONE:
	case SSW_MSG_WRITE_REQ:
	case SSW_MSG_WRITE_DONE:
		if (fixed(m, m->payload, sizeof m->u.done, &m->u.done) || m->u.done.status > 0)
			return -1;
		/* a write rendezvous for nothing: the receiver would offer an empty sink */
		if (m->h.type == SSW_MSG_WRITE_REQ && m->u.done.len == 0)
			return -1;
		return 0;
	case SSW_MSG_WINDOW:
		return fixed(m, m->payload, sizeof m->u.window, &m->u.window);
	default:
		return -1;
	}
}
