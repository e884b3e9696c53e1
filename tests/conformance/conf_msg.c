/* conf_msg.c — conformance of messages: sizes, content and order, the transport's room
 * (send_room, msg_space, -EAGAIN), zero-copy sends with held messages, notes beside the stream. */
#include "conf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void close_pair(struct ssw_ep *c, struct ssw_ep *a)
{
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* Every size from 1 byte to max_msg arrives whole, in order, both ways,
 * whatever the iovec split on the sending side, send and send_ctl mixed. */
void conf_sizes_and_order(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	for (int dir = 0; dir < 2; dir++) {
		struct ssw_ep *tx = dir ? a : c, *rx = dir ? c : a;
		size_t max = P->msg->max_msg(tx);
		size_t sizes[] = { 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 256, 1000, 4095, 4096, 4097,
				   max / 2, max - 1, max };
		enum { NS = sizeof sizes / sizeof sizes[0] };
		uint8_t *buf = malloc(max);
		assert_non_null(buf);
		unsigned sent = 0, got = 0;
		while (got < NS) {
			/* send ahead as far as the transport takes, then drain */
			while (sent < NS && sizes[sent] <= max) {
				size_t n = sizes[sent];
				conf_fill(buf, n, 300 + sent);
				/* three parts: the gather is the provider's */
				struct iovec v[3] = { { buf, n / 3 }, { buf + n / 3, n / 3 }, { buf + 2 * (n / 3), n - 2 * (n / 3) } };
				/* control messages keep their place in the same stream */
				bool ctl = CONF_HAS(P->msg, send_ctl) && sent % 3 == 2;
				int rc = ctl ? P->msg->send_ctl(tx, v, 3) : P->msg->send(tx, v, 3);
				if (rc == -EAGAIN)
					break;
				assert_int_equal(rc, 0);
				sent++;
			}
			if (got == sent && sent < NS && sizes[sent] > max)
				break;
			assert_true(got < sent); /* -EAGAIN with nothing in flight: stuck */
			conf_expect_seq(rx, tx, 300 + got, sizes[got]);
			got++;
		}
		assert_int_equal(got, NS);
		const void *m;
		size_t len;
		assert_int_equal(P->msg->recv_peek(rx, &m, &len), -EAGAIN); /* delivered once */
		free(buf);
	}
	close_pair(c, a);
}

/* The transport fills up (-EAGAIN), send_room agrees with what send does,
 * and the receiver's recv_done gives the room back. */
void conf_flow_control(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	const struct ssw_msg_ops *mo = P->msg;
	bool room = CONF_HAS(mo, send_room);
	size_t max = mo->max_msg(c), L = 1000 < max ? 1000 : max;
	if (!room)
		print_message("(send_room absent: only send's own answers are checked)\n");
	/* a fresh endpoint takes a whole message */
	if (room)
		assert_true(mo->send_room(c) >= max);
	uint8_t *buf = malloc(L);
	assert_non_null(buf);
	unsigned sent = 0;
	for (;;) {
		conf_fill(buf, L, sent);
		struct iovec v = { buf, L };
		int rc = mo->send(c, &v, 1);
		if (rc == -EAGAIN)
			break;
		assert_int_equal(rc, 0);
		/* a receiver that takes nothing fills the transport, in bounded time */
		assert_true(++sent < 100000);
	}
	print_message("%u messages of %zu bytes before -EAGAIN\n", sent, L);
	assert_true(sent >= 1);
	/* full means full: a retry gets the same answer */
	struct iovec v = { buf, L };
	assert_int_equal(mo->send(c, &v, 1), -EAGAIN);
	if (room)
		assert_true(mo->send_room(c) < max); /* not a whole message of room */

	/* half of them read: room comes back (within a bounded wait) */
	unsigned got = 0;
	for (; got < (sent + 1) / 2; got++)
		conf_expect_seq(a, c, got, L);
	conf_fill(buf, L, sent);
	assert_int_equal(conf_send(c, a, buf, L, 5000), 0);
	sent++;
	for (; got < sent; got++)
		conf_expect_seq(a, c, got, L);
	/* all read: the whole room is back */
	int64_t end = conf_ms() + 5000;
	while (room && mo->send_room(c) < max && conf_ms() < end) {
		conf_kick(a);
		conf_kick(c);
		usleep(1000);
	}
	if (room)
		assert_true(mo->send_room(c) >= max);
	free(buf);
	close_pair(c, a);
}

static bool has_zero_copy(void)
{
	const struct ssw_msg_ops *mo = P->msg;
	int n = CONF_HAS(mo, send_reserve) + CONF_HAS(mo, send_commit) + CONF_HAS(mo, flush);
	assert_true(n == 0 || n == 3); /* "all three or none" */
	return n == 3;
}

static void reserve_fill(struct ssw_ep *ep, unsigned seq, size_t resv, size_t len)
{
	void *buf = NULL;
	assert_int_equal(P->msg->send_reserve(ep, resv, &buf), 0);
	assert_non_null(buf);
	conf_fill(buf, len, seq);
}

/* send_reserve / send_commit without hold: as send, written in place. */
void conf_reserve_commit(void **state)
{
	(void)state;
	if (!has_zero_copy())
		CONF_SKIP("send_reserve/send_commit/flush absent (optional)");
	const struct ssw_msg_ops *mo = P->msg;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	size_t max = mo->max_msg(c);
	/* no reservation: nothing to commit */
	assert_int_equal(mo->send_commit(c, 1, 0), -EINVAL);
	reserve_fill(c, 1, max, max);
	assert_int_equal(mo->send_commit(c, max, 0), 0);
	/* a commit shorter than the reservation sends only that */
	reserve_fill(c, 2, 4096, 100);
	assert_int_equal(mo->send_commit(c, 100, 0), 0);
	/* a reservation abandoned by a send: nothing of it is sent */
	reserve_fill(c, 3, 200, 200);
	conf_send_seq(c, a, 4, 40);
	assert_int_equal(mo->send_commit(c, 200, 0), -EINVAL);
	/* ... or by the next reservation: only that one is sent */
	reserve_fill(c, 5, 300, 300);
	reserve_fill(c, 6, 30, 30);
	assert_int_equal(mo->send_commit(c, 30, 0), 0);
	/* a commit longer than the reservation is refused */
	reserve_fill(c, 7, 16, 16);
	assert_int_equal(mo->send_commit(c, 17, 0), -EINVAL);
	conf_expect_seq(a, c, 1, max);
	conf_expect_seq(a, c, 2, 100);
	conf_expect_seq(a, c, 4, 40);
	conf_expect_seq(a, c, 6, 30);
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, c, &m, &len, 100), -EAGAIN);
	close_pair(c, a);
}

/* Held messages: invisible and silent until a flush, a send, a commit
 * without hold, the orderly close, or SSW_HOLD_MS. */
void conf_hold_flush(void **state)
{
	(void)state;
	if (!has_zero_copy())
		CONF_SKIP("send_reserve/send_commit/flush absent (optional)");
	const struct ssw_msg_ops *mo = P->msg;
	const struct ssw_progress_ops *pg = P->progress;
	struct ssw_ep *c, *a;
	const void *m;
	size_t len;
	conf_pair_new(NULL, &c, &a);

	/* 1. held, then flushed: the sleeper is woken by the flush */
	reserve_fill(c, 10, 64, 64);
	assert_int_equal(mo->send_commit(c, 64, 1), 0);
	reserve_fill(c, 11, 64, 32);
	assert_int_equal(mo->send_commit(c, 32, 1), 0);
	assert_int_equal(mo->recv_peek(a, &m, &len), -EAGAIN);
	int armed = pg->arm(a);
	/* armed, with the hold bounding the sleep where the receiver sees the
	 * sender's hold (shm: one ring); a provider whose held data stays with
	 * the sender (fabric) sends it itself when the hold ends: 0 */
	assert_true(armed >= 0 && armed <= SSW_HOLD_MS + 1);
	assert_int_equal(conf_wait_readable(a, 0), 0); /* held: no wake-up */
	mo->flush(c);
	assert_true(conf_wait_readable(a, 2000) > 0);
	pg->wake_ack(a);
	conf_expect_seq(a, c, 10, 64);
	conf_expect_seq(a, c, 11, 32);

	/* 2. held, then a send: both visible, in order */
	reserve_fill(c, 12, 500, 500);
	assert_int_equal(mo->send_commit(c, 500, 1), 0);
	conf_send_seq(c, a, 13, 13);
	conf_expect_seq(a, c, 12, 500);
	conf_expect_seq(a, c, 13, 13);

	/* 3. held, then a commit without hold */
	reserve_fill(c, 14, 8, 8);
	assert_int_equal(mo->send_commit(c, 8, 1), 0);
	reserve_fill(c, 15, 9, 9);
	assert_int_equal(mo->send_commit(c, 9, 0), 0);
	conf_expect_seq(a, c, 14, 8);
	conf_expect_seq(a, c, 15, 9);

	/* 4. held and left alone: the peer has it after SSW_HOLD_MS, not before */
	int64_t t0 = conf_ms();
	reserve_fill(c, 16, 16, 16);
	assert_int_equal(mo->send_commit(c, 16, 1), 0);
	assert_int_equal(mo->recv_peek(a, &m, &len), -EAGAIN);
	assert_int_equal(conf_wait(a, NULL, &m, &len, SSW_HOLD_MS + 1000), 0);
	int64_t took = conf_ms() - t0;
	print_message("held message visible after %lld ms (SSW_HOLD_MS %d)\n", (long long)took, SSW_HOLD_MS);
	assert_true(took >= SSW_HOLD_MS - 5 && took < SSW_HOLD_MS + 1000);
	mo->recv_done(a);

	/* 5. held, then the orderly close: delivered before the end */
	reserve_fill(c, 17, 70, 70);
	assert_int_equal(mo->send_commit(c, 70, 1), 0);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	conf_expect_seq(a, NULL, 17, 70);
	assert_int_equal(conf_wait(a, NULL, &m, &len, 2000), -EPIPE);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* note: FIN and marks travel beside the messages and show in peer_state
 * without consuming any; a mark wakes a sleeping peer. */
void conf_note_fin_mark(void **state)
{
	(void)state;
	const struct ssw_progress_ops *pg = P->progress;
	if (!CONF_HAS(pg, note) || !CONF_HAS(pg, peer_state))
		CONF_SKIP("note or peer_state absent (optional)");
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	uint32_t marks = 99;
	assert_int_equal(pg->peer_state(a, 0, &marks), 0);
	assert_int_equal(marks, 0);
	/* a sleeper is woken by a mark alone: armed and quiet first */
	struct pollfd pfd[8];
	int n;
	for (int64_t t0 = conf_ms();; usleep(1000)) {
		assert_true(conf_ms() - t0 < 2000);
		conf_kick(a);
		int armed = pg->arm(a);
		assert_true(armed == 0 || armed == -EAGAIN);
		n = pg->wait_fds(a, pfd, 8);
		assert_true(n > 0 && n <= 8);
		if (armed == 0 && poll(pfd, (nfds_t)n, 0) == 0)
			break;
		pg->wake_ack(a);
	}
	pg->note(c, SSW_NOTE_MARK, 0);
	assert_true(poll(pfd, (nfds_t)n, 2000) > 0);
	pg->wake_ack(a);
	conf_send_seq(c, a, 120, 12);
	pg->note(c, SSW_NOTE_MARK, 0);
	pg->note(c, SSW_NOTE_FIN, 0);
	for (int64_t t0 = conf_ms(); !(pg->peer_state(a, 0, &marks) & SSW_PEER_FIN); usleep(1000)) {
		assert_true(conf_ms() - t0 < 2000);
		conf_kick(a);
	}
	uint32_t st = pg->peer_state(a, 0, &marks);
	assert_int_equal(st & (SSW_PEER_CLOSED | SSW_PEER_RESET), 0); /* a FIN is no close */
	assert_int_equal(marks, 2);
	assert_int_equal(pg->peer_state(c, 0, &marks) & SSW_PEER_FIN, 0); /* one direction only */
	assert_int_equal(marks, 0);
	conf_expect_seq(a, c, 120, 12); /* the message before it is still there */
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, c, &m, &len, 100), -EAGAIN); /* not the end either */
	conf_send_seq(a, c, 121, 13); /* the other way is open */
	conf_expect_seq(c, a, 121, 13);
	close_pair(c, a);
}

/* note(SSW_NOTE_TAG) and peer_tag: the peer reads our latest tag at once,
 * without running anything on our side, and no message appears. */
void conf_note_tag(void **state)
{
	(void)state;
	const struct ssw_progress_ops *pg = P->progress;
	if (!CONF_HAS(pg, note) || !CONF_HAS(pg, peer_tag))
		CONF_SKIP("note or peer_tag absent (optional)");
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	assert_int_equal(pg->peer_tag(a), 0);
	assert_int_equal(pg->peer_tag(c), 0);
	pg->note(c, SSW_NOTE_TAG, 4242);
	assert_int_equal(pg->peer_tag(a), 4242);
	assert_int_equal(pg->peer_tag(c), 0); /* each direction its own */
	pg->note(c, SSW_NOTE_TAG, -77);
	assert_int_equal(pg->peer_tag(a), -77); /* the latest wins */
	pg->note(a, SSW_NOTE_TAG, 9);
	assert_int_equal(pg->peer_tag(c), 9);
	assert_int_equal(pg->peer_tag(a), -77);
	if (CONF_HAS(pg, peer_state)) {
		uint32_t marks = 5;
		assert_int_equal(pg->peer_state(a, 0, &marks), 0); /* no FIN, no mark */
		assert_int_equal(marks, 0);
	}
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, c, &m, &len, 50), -EAGAIN);
	assert_int_equal(conf_wait(c, a, &m, &len, 50), -EAGAIN);
	conf_send_seq(c, a, 122, 14); /* the stream is untouched */
	conf_expect_seq(a, c, 122, 14);
	close_pair(c, a);
}

/* send_room and msg_space agree with send: a message of len fits exactly
 * when send_room() >= msg_space(len) (poll's POLLOUT rests on it: a yes
 * that send refuses spins, a no that send would take sleeps for nothing).
 * Random sizes, the receiver consuming at random, wraparounds included. */
void conf_room_agrees(void **state)
{
	(void)state;
	const struct ssw_msg_ops *mo = P->msg;
	if (!CONF_HAS(mo, send_room))
		CONF_SKIP("send_room absent (optional)");
	bool space = CONF_HAS(mo, msg_space); /* NULL: a message takes its length */
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	size_t max = mo->max_msg(c);
	uint8_t *buf = malloc(max);
	assert_non_null(buf);
	unsigned seed = 12345, sent = 0, got = 0, yes_refused = 0, no_taken = 0;
	for (int step = 0; step < 4000; step++) {
		seed = seed * 1103515245u + 12345u;
		size_t len = 1 + (seed >> 8) % (max / 8);
		if ((seed >> 4) % 7 == 0)
			len = 1 + (seed >> 8) % max;
		size_t need = space ? mo->msg_space(c, len) : len;
		assert_true(need >= len);
		bool fits = mo->send_room(c) >= need;
		conf_fill(buf, len, sent);
		struct iovec v = { buf, len };
		int rc = mo->send(c, &v, 1);
		assert_true(rc == 0 || rc == -EAGAIN);
		if (rc == 0) {
			no_taken += !fits;
			sent++;
		} else {
			yes_refused += fits;
		}
		/* the receiver takes a few, now and then all */
		int take = (seed >> 12) % 64 == 0 ? (int)(sent - got) : (int)((seed >> 16) % 5 == 0);
		for (int k = 0; k < take && got < sent; k++) {
			const void *m;
			size_t l;
			assert_int_equal(conf_wait(a, c, &m, &l, 2000), 0);
			P->msg->recv_done(a);
			got++;
		}
	}
	print_message("%u sent; send_room said yes and send refused: %u; said no and send took it: %u\n", sent,
		      yes_refused, no_taken);
	while (got < sent) {
		const void *m;
		size_t l;
		assert_int_equal(conf_wait(a, c, &m, &l, 2000), 0);
		P->msg->recv_done(a);
		got++;
	}
	/* a "yes" that send refuses makes a poller spin; a "no" that send
	 * would take is allowed (an asynchronous transport frees room by
	 * itself between the two calls; its wake-up then tells the poller) */
	assert_int_equal(yes_refused, 0);
	free(buf);
	close_pair(c, a);
}
