/* fuzz_session_rx.c — libFuzzer target for the session layer's receive side:
 * the input is a script for a hostile peer.  The peer is a raw shm endpoint
 * (no session) of an in-process pair (ssw_shm_pair): it injects arbitrary
 * messages (raw bytes, or well-sequenced headers with arbitrary fields,
 * rendezvous offers with real or forged descriptors), scribbles over the
 * shared segment, closes or resets; in between, the application side calls
 * every session entry point non-blocking.
 *
 * Checked: no crash, no sanitizer report, results are byte counts within the
 * request or expected errnos, every message our session emits parses
 * (ssw_wire_parse, in sequence), and nothing blocks (each input runs in
 * bounded time; CI passes -timeout).
 *
 * Flow control, while the peer behaves (only in-window DATA, FIN, CREDIT:
 * the first other message ends it): our session never returns more credits
 * than the peer has in flight, the application never has more unread than
 * the largest window granted (staging must keep credits until the bytes are
 * read), FIONREAD never claims more than that, and our own bytes in flight
 * stay within the peer's window.  A violation aborts.
 *
 * One exception is steered around, not hidden: a receive that meets the
 * peer's WRITE_REQ registers the application buffer as a sink and waits for
 * the peer's WRITE_DONE without a deadline (session.c recv_by_write, see
 * test_session.c test_write_req_then_peer_dies).  This single-threaded peer
 * cannot answer while the receive waits, so receives run with registration
 * failing (fault_regfail) — the WRITE_REQ/SINK/WRITE_DONE messages are still
 * parsed and handled through the other entry points (FIONREAD, SIOCATMARK,
 * send), which stage into a sink without waiting. */
#include <errno.h>
#include <stdbool.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/waitpol.h"
#include "providers/shm/shm_priv.h"
#include "session/session.h"
#include "session/wire.h"

extern const struct ssw_provider ssw_provider_shm;

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)
#define RING (64u << 10)
#define MAX_INJECT 160 /* per drain: keeps our replies within the ring (no waits) */

struct rd {
	const uint8_t *p;
	size_t n;
};

static uint32_t take(struct rd *r, size_t k)
{
	uint32_t v = 0;
	for (size_t i = 0; i < k && i < 4; i++)
		if (r->n) {
			v |= (uint32_t)*r->p++ << (8 * i);
			r->n--;
		}
	return v;
}

struct peer {
	struct ssw_ep *ep;    /* the hostile side; NULL once it closed */
	uint32_t tx_seq;      /* next sequence number it sends */
	uint32_t rx_seq;      /* next sequence number it expects from us */
	uint64_t unacked;     /* credit bytes it owes us back (what we sent) */
	int injected;
	uint8_t src[8192];    /* memory it exposes by RNDV_READ */
	/* flow-control accounting, valid while `clean` */
	bool clean;
	uint64_t rx_inflight; /* stream bytes of its DATA our session has not credited back */
	uint64_t unread;      /* its DATA payload the application has not read */
	uint64_t wmax;        /* the largest window our session granted */
	uint64_t win;         /* the window it granted our session */
};

#define FLOW(c) do { if (pr.clean && !(c)) abort(); } while (0)

/* Read everything our session sent: every message must be well-formed. */
static void drain(struct peer *pr)
{
	if (!pr->ep)
		return;
	const void *m;
	size_t len;
	int rc;
	while ((rc = ssw_provider_shm.msg->recv_peek(pr->ep, &m, &len)) == 0) {
		struct ssw_msg msg;
		CHECK(ssw_wire_parse(m, len, pr->rx_seq, &msg) == 0);
		CHECK(msg.h.type != SSW_MSG_INIT);
		pr->rx_seq++;
		if (pr->clean) {
			if (msg.h.credits > pr->rx_inflight)
				abort(); /* credits for bytes never sent */
			pr->rx_inflight -= msg.h.credits;
		}
		if (msg.h.type == SSW_MSG_DATA || msg.h.type == SSW_MSG_OOB)
			pr->unacked += msg.h.len; /* credits count stream bytes */
		if (pr->clean && pr->unacked > pr->win)
			abort(); /* we overran the peer's window */
		ssw_provider_shm.msg->recv_done(pr->ep);
	}
	CHECK(rc == -EAGAIN || rc == -EPIPE || rc == -ECONNRESET);
	pr->injected = 0;
}

static bool inject(struct peer *pr, const void *a, size_t alen, const void *b, size_t blen)
{
	if (!pr->ep || pr->injected >= MAX_INJECT)
		return false;
	struct iovec v[2] = { { (void *)a, alen }, { (void *)b, blen } };
	if (ssw_provider_shm.msg->send(pr->ep, v, blen ? 2 : 1) != 0)
		return false;
	pr->injected++;
	return true;
}

/* A well-sequenced message with fuzzed fields. */
static bool inject_msg(struct peer *pr, uint8_t type, uint32_t credits, const void *pl, size_t plen)
{
	struct ssw_wire_hdr h;
	ssw_wire_hdr_set(&h, type, (uint32_t)plen, credits, pr->tx_seq++);
	return inject(pr, &h, sizeof h, pl, plen);
}

/* The largest window our session has granted so far. */
static void note_window(struct peer *pr, struct ssw_session *s)
{
	struct ssw_session_stats st;
	ssw_session_get_stats(s, &st);
	CHECK(st.rx_window >= 4096);
	if (st.rx_window > pr->wmax)
		pr->wmax = st.rx_window;
}

/* A well-behaved peer's DATA: within the window our session grants now. */
static void inject_data(struct peer *pr, struct ssw_session *s, const void *pl, size_t n)
{
	if (!pr->clean) {
		inject_msg(pr, SSW_MSG_DATA, 0, pl, n);
		return;
	}
	struct ssw_session_stats st;
	ssw_session_get_stats(s, &st);
	uint64_t fp = n;
	if (pr->rx_inflight + fp > st.rx_window)
		return;
	if (inject_msg(pr, SSW_MSG_DATA, 0, pl, n)) {
		pr->rx_inflight += fp;
		pr->unread += n;
	} else {
		pr->tx_seq--; /* not sent: the sequence number is still free */
	}
}

static void check_io(ssize_t r, size_t want)
{
	CHECK(r >= 0 ? (size_t)r <= want
		     : (r == -EAGAIN || r == -EPIPE || r == -ECONNRESET || r == -EINVAL || r == -ENOBUFS ||
			r == -ENOTCONN));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int once;
	if (!once) {
		once = 1;
		signal(SIGPIPE, SIG_IGN);
		/* every reset logs a warning: thousands per second here */
		setenv("SOCKSWITCH_LOG", "error", 1);
		char err[128];
		ssw_log_init(err, sizeof err);
		signal(SIGURG, SIG_IGN); /* the peer names whom SIGURG goes to: here, us */
		ssw_provider_shm.init();
		ssw_session_cfg.spin_max_ns = 0; /* nothing ever waits here: no spinning either */
		ssw_wait_set_spin_max(0);
	}
	struct rd r = { data, size };
	struct ssw_ep *ea, *eb;
	if (ssw_shm_pair(RING, &ea, &eb) < 0)
		return 0;
	static struct peer pr;
	memset(&pr, 0, sizeof pr);
	pr.ep = eb;
	for (size_t i = 0; i < sizeof pr.src; i++)
		pr.src[i] = (uint8_t)i;

	struct ssw_session_opts o = { .rcvbuf = take(&r, 2) << 2, .oobinline = take(&r, 1) & 1 };
	struct ssw_wire_init peer_init = { SSW_WIRE_VERSION, 4096 + take(&r, 2) * 16, take(&r, 1) & 3, getpid() };
	struct ssw_session *s = ssw_session_new(&ssw_provider_shm, ea, &o, &peer_init);
	if (!s) {
		ssw_provider_shm.conn->close(ea, SSW_CLOSE_ABORT);
		ssw_provider_shm.conn->close(eb, SSW_CLOSE_ABORT);
		return 0;
	}
	pr.clean = true;
	pr.win = peer_init.window; /* below the session's cap: taken as is */
	note_window(&pr, s);

	uint8_t buf[20000], pl[1024];
	for (int step = 0; step < 64 && r.n; step++) {
		uint32_t op = take(&r, 1);
		switch (op % 12) {
		case 0: { /* raw message: anything at all */
			pr.clean = false;
			size_t n = take(&r, 2) % sizeof pl;
			n = n < r.n ? n : r.n;
			memcpy(pl, r.p, n);
			r.p += n, r.n -= n;
			inject(&pr, pl, n, NULL, 0);
			pr.tx_seq++; /* a good guess keeps later messages in sequence */
			break;
		}
		case 1: { /* well-sequenced, any type, any payload */
			pr.clean = false;
			uint8_t type = (uint8_t)take(&r, 1);
			uint32_t credits = take(&r, 1) & 1 ? (uint32_t)pr.unacked : take(&r, 4);
			size_t n = take(&r, 2) % sizeof pl;
			n = n < r.n ? n : r.n;
			memcpy(pl, r.p, n);
			r.p += n, r.n -= n;
			if (credits <= pr.unacked)
				pr.unacked -= credits;
			inject_msg(&pr, type % 16, credits, pl, n);
			break;
		}
		case 2: { /* DATA, plausible */
			size_t n = 1 + take(&r, 2) % (sizeof pl - 1);
			memset(pl, (int)op, n);
			inject_data(&pr, s, pl, n);
			break;
		}
		case 3: { /* rendezvous offer: a real descriptor or a forged one */
			pr.clean = false;
			struct ssw_wire_rndv rv;
			memset(&rv, 0, sizeof rv);
			rv.id = take(&r, 1);
			rv.len = take(&r, 2);
			uint32_t off = take(&r, 2);
			if (pr.ep && !(op & 0x10)) {
				size_t at = off % sizeof pr.src;
				size_t len = sizeof pr.src - at;
				ssw_provider_shm.rdma->register_rdma_memory(pr.ep, pr.src + at, len, SSW_CAP_RDMA_READ,
									    &rv.desc);
			} else {
				rv.desc.len = take(&r, 1);
				for (size_t i = 0; i < sizeof rv.desc.data && r.n; i++)
					rv.desc.data[i] = (uint8_t)take(&r, 1);
			}
			inject_msg(&pr, op & 0x20 ? SSW_MSG_SINK : SSW_MSG_RNDV_READ, 0, &rv, sizeof rv);
			break;
		}
		case 4: { /* WRITE_REQ / WRITE_DONE / RNDV_DONE with fuzzed fields */
			pr.clean = false;
			struct ssw_wire_done d = { .id = take(&r, 1), .len = take(&r, 4), .status = -(int32_t)(take(&r, 1) & 3) };
			static const uint8_t t[] = { SSW_MSG_WRITE_REQ, SSW_MSG_WRITE_DONE, SSW_MSG_RNDV_DONE, SSW_MSG_WINDOW };
			uint8_t type = t[(op >> 4) & 3];
			if (type == SSW_MSG_WINDOW) {
				struct ssw_wire_window w = { (uint32_t)d.len };
				inject_msg(&pr, type, 0, &w, sizeof w);
			} else {
				inject_msg(&pr, type, 0, &d, sizeof d);
			}
			break;
		}
		case 5: { /* OOB, FIN, CREDIT */
			uint8_t b = (uint8_t)take(&r, 1);
			if (op & 0x10) {
				pr.clean = false; /* an urgent byte's credits follow their own rules */
				inject_msg(&pr, SSW_MSG_OOB, 0, &b, 1);
			}
			else if (op & 0x20)
				inject_msg(&pr, SSW_MSG_FIN, 0, NULL, 0);
			else {
				uint32_t c = (uint32_t)(pr.unacked < 4096 ? pr.unacked : 4096);
				pr.unacked -= c;
				inject_msg(&pr, SSW_MSG_CREDIT, c, NULL, 0);
			}
			break;
		}
		case 6: { /* the application receives */
			static const int fl[] = { 0, MSG_PEEK, MSG_OOB, MSG_OOB | MSG_PEEK, MSG_WAITALL, MSG_PEEK | MSG_WAITALL };
			size_t want = 1 + take(&r, 2) % sizeof buf;
			struct iovec v = { buf, want };
			ssw_session_cfg.fault_regfail = 1; /* see the file comment */
			int f = fl[(op >> 4) % 6];
			ssize_t k = ssw_session_recv(s, &v, 1, f, true, -1);
			ssw_session_cfg.fault_regfail = 0;
			check_io(k, want);
			if (k > 0 && !(f & (MSG_PEEK | MSG_OOB))) {
				FLOW((uint64_t)k <= pr.unread);
				pr.unread -= (uint64_t)k;
			}
			break;
		}
		case 7: { /* the application sends (gives the peer credits to return) */
			size_t n = 1 + take(&r, 2) % 4000;
			memset(buf, 'a', n);
			struct iovec v = { buf, n };
			check_io(ssw_session_send(s, &v, 1, (op & 0x10 ? MSG_OOB : 0) | MSG_NOSIGNAL, true, -1), n);
			break;
		}
		case 8: { /* state queries, which look past unread data */
			int nread = ssw_session_fionread(s);
			CHECK(nread >= 0);
			FLOW((uint64_t)nread <= pr.unread);
			int m = ssw_session_atmark(s);
			CHECK(m == 0 || m == 1);
			(void)ssw_session_poll(s);
			int e = ssw_session_take_error(s);
			CHECK(e <= 0);
			struct ssw_session_stats st;
			ssw_session_get_stats(s, &st);
			CHECK(st.rx_window >= 4096);
			(void)ssw_session_tcp_state(s);
			break;
		}
		case 9: /* shutdown, options */
			if (op & 0x10) {
				int how = (op >> 5) % 3;
				if (how != SHUT_WR)
					pr.clean = false; /* SHUT_RD discards what is unread */
				(void)ssw_session_shutdown(s, how);
			} else {
				struct ssw_session_opts no = { .rcvbuf = take(&r, 2) << 4, .sndbuf = take(&r, 2) << 4,
							       .oobinline = op & 0x20 };
				ssw_session_set_opts(s, &no);
			}
			break;
		case 10: { /* scribble over the ring coming to us, indices or records.
			pr.clean = false;
			    * (Not over the consumer index of the ring going out: a
			    * peer that lies "full" is a slow peer, which send_ctl
			    * waits out for seconds; fuzz_ring covers that index.) */
			if (!pr.ep)
				break;
			volatile uint8_t *base = op & 0x10 ? (volatile uint8_t *)pr.ep->tx.ctl : pr.ep->tx.data;
			size_t lim = op & 0x10 ? sizeof *pr.ep->tx.ctl : RING;
			size_t where = take(&r, 4) % lim;
			uint32_t n = take(&r, 1) % 16;
			for (uint32_t i = 0; i < n && where + i < lim; i++)
				base[where + i] = (uint8_t)take(&r, 1);
			break;
		}
		case 11: /* the peer closes, orderly or not */
			if (pr.ep) {
				ssw_provider_shm.conn->close(pr.ep, op & 0x10 ? SSW_CLOSE_ABORT : SSW_CLOSE_ORDERLY);
				pr.ep = NULL;
			}
			break;
		}
		drain(&pr);
		note_window(&pr, s);
		/* what the application has not read stays within the window,
		 * whatever staging the step did */
		FLOW(pr.unread <= pr.wmax);
	}
	/* at the end, everything readable is readable without blocking */
	for (int i = 0; i < 8; i++) {
		struct iovec v = { buf, sizeof buf };
		ssw_session_cfg.fault_regfail = 1;
		ssize_t k = ssw_session_recv(s, &v, 1, 0, true, -1);
		ssw_session_cfg.fault_regfail = 0;
		check_io(k, sizeof buf);
		if (k > 0) {
			FLOW((uint64_t)k <= pr.unread);
			pr.unread -= (uint64_t)k;
		}
		drain(&pr);
		if (k <= 0)
			break;
	}
	ssw_session_close(s, false);
	if (pr.ep)
		ssw_provider_shm.conn->close(pr.ep, SSW_CLOSE_ORDERLY);
	return 0;
}
