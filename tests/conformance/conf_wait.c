/* conf_wait.c — conformance of sleeping and waking (arm, wait_fds, wake_ack, wake_leave, sleep, the wait hints)
 * and of the SPI's thread contract (lock-free hints beside a busy endpoint). */
#include "conf.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdatomic.h>
#include <unistd.h>

static void close_pair(struct ssw_ep *c, struct ssw_ep *a)
{
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* arm: 0 when nothing waits (then wait_fds stay quiet until a send),
 * -EAGAIN when something arrived; wake_ack clears the wake-up. */
void conf_arm_wake(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	const struct ssw_progress_ops *pg = P->progress;
	assert_int_equal(pg->rx_ready(a), 0);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(pg->arm(a), 0);
		assert_int_equal(conf_wait_readable(a, 0), 0); /* no wake-up for nothing */
		conf_send_seq(c, NULL, 900 + (unsigned)round, 64);
		assert_true(conf_wait_readable(a, 2000) > 0);
		pg->wake_ack(a);
		assert_true(pg->rx_ready(a) != 0);
		/* something arrived: do not sleep */
		assert_int_equal(pg->arm(a), -EAGAIN);
		conf_expect_seq(a, c, 900 + (unsigned)round, 64);
		/* a wake-up taken leaves nothing behind */
		assert_int_equal(conf_wait_readable(a, 0), 0);
		assert_int_equal(pg->rx_ready(a), 0);
	}
	close_pair(c, a);
}

struct sleeper {
	struct ssw_ep *ep;
	int use_sleep; /* the provider's sleep op rather than poll on wait_fds */
	int rc;
	int64_t woke;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;
	const struct ssw_progress_ops *pg = P->progress;
	s->rc = pg->arm(s->ep);
	if (s->rc != 0)
		return NULL;
	if (s->use_sleep) {
		s->rc = pg->sleep(s->ep, 5000);
	} else {
		s->rc = conf_wait_readable(s->ep, 5000);
		pg->wake_ack(s->ep);
	}
	s->woke = conf_ms();
	return NULL;
}

/* A thread asleep on an endpoint is woken by the peer's send, promptly. */
void conf_sleeper_woken(void **state)
{
	(void)state;
	bool has_sleep = CONF_HAS(P->progress, sleep);
	if (!has_sleep)
		print_message("(sleep absent: poll on wait_fds only)\n");
	for (int use_sleep = 0; use_sleep <= (int)has_sleep; use_sleep++) {
		struct ssw_ep *c, *a;
		conf_pair_new(NULL, &c, &a);
		struct sleeper s = { .ep = a, .use_sleep = use_sleep };
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, sleeper_main, &s), 0);
		usleep(100000); /* let it fall asleep */
		int64_t sent = conf_ms();
		conf_send_seq(c, NULL, 77, 7);
		assert_int_equal(pthread_join(t, NULL), 0);
		if (use_sleep && s.rc == -ENOSYS) {
			print_message("(sleep: -ENOSYS on this endpoint)\n");
		} else {
			assert_true(s.rc > 0);                 /* woken, not timed out */
			assert_true(s.woke - sent < 2000);
		}
		conf_expect_seq(a, c, 77, 7);
		if (use_sleep && s.rc != -ENOSYS) {
			/* nothing comes: sleep times out after about ms, disarmed */
			assert_int_equal(P->progress->arm(a), 0);
			int64_t t0 = conf_ms();
			assert_int_equal(P->progress->sleep(a, 60), 0);
			int64_t took = conf_ms() - t0;
			assert_true(took >= 50 && took < 1000);
		}
		close_pair(c, a);
	}
}

struct twin {
	struct ssw_ep *ep;
	pthread_barrier_t *bar;
	int woke;
	int leave; /* wake_leave (another still sleeps) rather than wake_ack */
};

static void *twin_main(void *arg)
{
	struct twin *t = arg;
	const struct ssw_progress_ops *pg = P->progress;
	int armed = pg->arm(t->ep);
	pthread_barrier_wait(t->bar);
	if (armed != 0)
		return NULL; /* counted as not woken */
	t->woke = conf_wait_readable(t->ep, 5000) > 0;
	if (t->leave)
		pg->wake_leave(t->ep);
	return NULL;
}

/* Two threads asleep on one endpoint: one send wakes both when the first
 * one up leaves the doorbell to the other (wake_leave). */
void conf_two_sleepers(void **state)
{
	(void)state;
	if (!CONF_HAS(P->progress, wake_leave))
		CONF_SKIP("wake_leave absent (optional: the switch then lets one sleeper at a time wait)");
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 3);
	struct twin t[2] = { { a, &bar, 0, 1 }, { a, &bar, 0, 1 } };
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, twin_main, &t[i]), 0);
	pthread_barrier_wait(&bar);
	usleep(50000);
	conf_send_seq(c, NULL, 88, 8);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	assert_true(t[0].woke && t[1].woke);
	P->progress->wake_ack(a);
	conf_expect_seq(a, c, 88, 8);
	pthread_barrier_destroy(&bar);
	close_pair(c, a);
}

struct hinter {
	struct ssw_ep *ep;
	_Atomic int stop;
	long calls;
};

static void *hinter_main(void *arg)
{
	struct hinter *h = arg;
	bool ps = CONF_HAS(P->progress, peer_state);
	while (!atomic_load(&h->stop)) {
		(void)P->progress->rx_ready(h->ep);
		if (ps)
			(void)P->progress->peer_state(h->ep, 0, NULL);
		h->calls++;
	}
	return NULL;
}

/* Threads: rx_ready (and peer_state without probe) from any thread while
 * another uses the endpoint; sleep runs unlocked while another thread sends
 * on the same endpoint (provider.h, "Threads"). */
void conf_threads_contract(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	struct hinter h = { .ep = a };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, hinter_main, &h), 0);
	for (unsigned i = 0; i < 500; i++) {
		conf_send_seq(c, a, 2000 + i, 1 + (i * 37) % 3000);
		conf_send_seq(a, c, 3000 + i, 1 + (i * 53) % 3000);
		conf_expect_seq(a, c, 2000 + i, 1 + (i * 37) % 3000);
		conf_expect_seq(c, a, 3000 + i, 1 + (i * 53) % 3000);
	}
	atomic_store(&h.stop, 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	print_message("%ld lock-free hints read meanwhile\n", h.calls);
	/* nothing more came: once a look found nothing, the hint says so too
	 * (a hint may be early, e.g. a completion of ours waiting, not stuck) */
	const void *m;
	size_t len;
	assert_int_equal(P->msg->recv_peek(a, &m, &len), -EAGAIN);
	assert_int_equal(P->progress->rx_ready(a), 0);

	if (CONF_HAS(P->progress, sleep)) {
		/* a sleeps unlocked; meanwhile this thread sends on a, then wakes it */
		struct sleeper s = { .ep = a, .use_sleep = 1 };
		pthread_t st;
		assert_int_equal(pthread_create(&st, NULL, sleeper_main, &s), 0);
		usleep(50000);
		conf_send_seq(a, NULL, 4000, 400);
		conf_send_seq(c, NULL, 4001, 41);
		assert_int_equal(pthread_join(st, NULL), 0);
		assert_true(s.rc > 0 || s.rc == -ENOSYS);
		conf_expect_seq(c, a, 4000, 400);
		conf_expect_seq(a, c, 4001, 41);
	}
	close_pair(c, a);
}

/* The wait policy's optional hints, where a provider offers them (a peer
 * on this host): peer_cpu names the CPU the peer sent from (-1 before it
 * sent), wake_sent_ns when it rang a sleeper, on ssw_now_ns()'s clock. */
static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t); /* the SPI's clock for wake_sent_ns */
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void conf_wait_hints(void **state)
{
	(void)state;
	const struct ssw_progress_ops *pg = P->progress;
	if (!pg->peer_cpu && !pg->wake_sent_ns)
		return; /* not offered: the policy does without */
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	cpu_set_t saved, one;
	assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
	if (pg->peer_cpu) {
		int before = pg->peer_cpu(a);
		assert_true(before >= -1 && before < CPU_SETSIZE);
		for (int cpu = 0, rounds = 0; cpu < CPU_SETSIZE && rounds < 4; cpu++) {
			if (!CPU_ISSET(cpu, &saved))
				continue;
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
			conf_send_seq(c, NULL, 950 + (unsigned)rounds, 64);
			assert_int_equal(pg->peer_cpu(a), cpu);
			conf_expect_seq(a, c, 950 + (unsigned)rounds, 64);
			rounds++;
		}
		sched_setaffinity(0, sizeof saved, &saved);
	}
	if (pg->wake_sent_ns) {
		assert_int_equal(pg->arm(a), 0);
		uint64_t t0 = mono_ns();
		conf_send_seq(c, NULL, 960, 64);
		uint64_t t1 = mono_ns();
		assert_true(conf_wait_readable(a, 2000) > 0);
		pg->wake_ack(a);
		uint64_t rang = pg->wake_sent_ns(a);
		assert_true(rang >= t0 && rang <= t1);
		conf_expect_seq(a, c, 960, 64);
	}
	close_pair(c, a);
}
