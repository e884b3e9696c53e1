/* cma_forge.c — a server whose worker dropped its privileges and forges
 * rendezvous descriptors naming its root master, for t_hostile_cma.sh.
 *
 * As nginx, apache prefork and postgres do, the master (root) listens (the
 * kernel socket and the shm rendezvous listener: the rendezvous peer a
 * client's SO_PEERCRED shows is the master), then forks a worker that
 * accepts.  The worker speaks the session itself with the provider's own
 * code (no LD_PRELOAD), as a modified library would:
 *
 *   cma_forge PORT forge-read DIR   the worker becomes nobody and offers an
 *       RNDV_READ whose descriptor names the master's pid and a secret in
 *       the master's heap (the same address in the worker: fork), with a
 *       vouch of its own; it also tries to send credentials that name the
 *       master (the kernel must refuse: EPERM).
 *   cma_forge PORT forge-sink DIR   the worker becomes nobody and answers the
 *       client's WRITE_REQ with a SINK naming the master's buffer.
 *   cma_forge PORT honest-read DIR  control: the worker stays root and offers
 *       a buffer of its own, registered (and vouched) by the provider: a
 *       client whose rendezvous is on reads it by CMA.
 *   cma_forge PORT stale-read DIR   the worker stays root, offers its buffer
 *       (read once by the client), deregisters it, writes AFTER-DEREG into
 *       it and offers it again with the old descriptor: revoked, the client
 *       must refuse it (seed 002).
 *
 * After a read offer the worker waits for RNDV_DONE, then sends "TAIL"
 * inline and a FIN; after a sink it reads until the client's FIN.  The
 * master writes DIR/port once listening, waits for the worker, and prints
 * one line: RESULT mode=... done_status=N cred_spoof=... victim=intact|
 * overwritten inline=N.  Exit 1 when the attack could not be run. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "session/session.h"
#include "common/params.h"
#include "providers/shm/shm_priv.h"
#include "session/wire.h"

extern const struct ssw_provider ssw_provider_shm;

#define SECRET "MASTER-SECRET-do-not-leak-"
#define LEN 4096

static char *secret, *victim;
static uint32_t tx_seq, rx_seq;

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int send_msg(struct ssw_ep *ep, uint8_t type, const void *p, size_t len)
{
	struct ssw_wire_hdr h;
	ssw_wire_hdr_set(&h, type, (uint32_t)len, 0, tx_seq++);
	struct iovec iov[2] = { { &h, sizeof h }, { (void *)p, len } };
	return ssw_provider_shm.msg->send(ep, iov, len ? 2 : 1);
}

/* The next message from the client, parsed; -1 after 5 s or at its end. */
static int next_msg(struct ssw_ep *ep, struct ssw_msg *m, size_t *payload)
{
	long end = now_ms() + 5000;
	while (now_ms() < end) {
		const void *b;
		size_t len;
		if (ssw_provider_shm.msg->recv_peek(ep, &b, &len) == 0) {
			int rc = ssw_wire_parse(b, len, rx_seq++, m);
			*payload = m->h.len;
			ssw_provider_shm.msg->recv_done(ep);
			return rc;
		}
		if (ssw_provider_shm.progress->peer_state(ep, 1, NULL) & (SSW_PEER_CLOSED | SSW_PEER_RESET))
			return -1;
		usleep(500);
	}
	return -1;
}

/* Credentials naming another process: refused by the kernel unless root. */
static const char *spoof_cred(struct ssw_ep *ep, pid_t master)
{
	struct ucred cr = { .pid = master, .uid = getuid(), .gid = getgid() };
	int rc = shm_vouch_send_as(ep, &cr);
	return rc == -EPERM ? "EPERM" : rc == 0 ? "sent" : strerror(-rc);
}

static int worker(struct ssw_listener *l, const char *mode, pid_t master)
{
	if (strcmp(mode, "honest-read") && strcmp(mode, "stale-read") && (setgid(65534) < 0 || setuid(65534) < 0))
		return perror("setuid"), 1;
	struct ssw_ep *ep = NULL;
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
	size_t plen;
	long end = now_ms() + 10000;
	for (;;) {
		plen = sizeof priv;
		if (ssw_provider_shm.conn->accept(l, &ep, priv, &plen) == 0)
			break;
		if (now_ms() > end)
			return printf("WORKER mode=%s no-connection\n", mode), 1;
		struct pollfd pf = { ssw_provider_shm.conn->listener_fd(l), POLLIN, 0 };
		poll(&pf, 1, 100);
	}
	struct ssw_wire_init in = { SSW_WIRE_VERSION, 1u << 20, SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE, getpid() };
	send_msg(ep, SSW_MSG_INIT, &in, sizeof in);
	const char *cred = "-";
	int status = 1, inl = 0;
	struct ssw_msg m;
	size_t pl;
	if (strstr(mode, "read")) {
		struct ssw_wire_rndv r = { .id = 1, .len = LEN };
		char *offer = NULL;
		if (strcmp(mode, "forge-read")) {
			offer = malloc(LEN);
			for (int i = 0; i < LEN; i++)
				offer[i] = "WORKER-OFFER-"[i % 13];
			ssw_provider_shm.rdma->register_rdma_memory(ep, offer, LEN, SSW_CAP_RDMA_READ, &r.desc);
		} else {
			struct shm_desc d = { SHM_DESC_MAGIC, master, (uint64_t)(uintptr_t)secret, LEN, 1, 0,
					      SSW_CAP_RDMA_READ };
			memcpy(r.desc.data, &d, sizeof d);
			r.desc.len = sizeof d;
			cred = spoof_cred(ep, master);
			shm_vouch_send(ep); /* the kernel puts our own pid beside it */
		}
		send_msg(ep, SSW_MSG_RNDV_READ, &r, sizeof r);
		while (next_msg(ep, &m, &pl) == 0)
			if (m.h.type == SSW_MSG_RNDV_DONE) {
				status = m.u.done.status;
				break;
			}
		if (!strcmp(mode, "stale-read")) {
			/* revoked, then offered again: the old descriptor must not work */
			ssw_provider_shm.rdma->deregister_rdma_memory(ep, &r.desc);
			for (int i = 0; i < LEN; i++)
				offer[i] = "AFTER-DEREG-"[i % 12];
			r.id = 2;
			printf("WORKER first_status=%d\n", status);
			status = 1;
			send_msg(ep, SSW_MSG_RNDV_READ, &r, sizeof r);
			while (next_msg(ep, &m, &pl) == 0)
				if (m.h.type == SSW_MSG_RNDV_DONE) {
					status = m.u.done.status;
					break;
				}
		}
		send_msg(ep, SSW_MSG_DATA, "TAIL", 4);
		send_msg(ep, SSW_MSG_FIN, NULL, 0);
		while (next_msg(ep, &m, &pl) == 0)
			;
	} else {
		while (next_msg(ep, &m, &pl) == 0) {
			if (m.h.type == SSW_MSG_WRITE_REQ) {
				struct shm_desc d = { SHM_DESC_MAGIC, master, (uint64_t)(uintptr_t)victim, LEN, 2, 0,
						      SSW_CAP_RDMA_WRITE };
				struct ssw_wire_rndv sk = { .id = m.u.done.id, .len = LEN };
				memcpy(sk.desc.data, &d, sizeof d);
				sk.desc.len = sizeof d;
				shm_vouch_send(ep);
				send_msg(ep, SSW_MSG_SINK, &sk, sizeof sk);
			} else if (m.h.type == SSW_MSG_WRITE_DONE) {
				status = m.u.done.status;
			} else if (m.h.type == SSW_MSG_DATA) {
				inl += (int)pl;
			} else if (m.h.type == SSW_MSG_FIN) {
				break;
			}
		}
		send_msg(ep, SSW_MSG_FIN, NULL, 0);
	}
	printf("WORKER mode=%s done_status=%d cred_spoof=%s inline=%d\n", mode, status, cred, inl);
	fflush(stdout);
	usleep(200000);
	ssw_provider_shm.conn->close(ep, SSW_CLOSE_ORDERLY);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return fprintf(stderr, "usage: cma_forge PORT forge-read|forge-sink|honest-read|stale-read DIR\n"), 2;
	ssw_params_load();
	ssw_provider_shm.init();
	secret = malloc(LEN);
	victim = malloc(LEN);
	for (int i = 0; i < LEN; i++)
		secret[i] = SECRET[i % (sizeof SECRET - 1)];
	memset(victim, 'V', LEN);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int k = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(k, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct ssw_listener *l;
	if (bind(k, (struct sockaddr *)&a, sizeof a) < 0 || listen(k, 16) < 0 ||
	    ssw_provider_shm.conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l) < 0)
		return perror("listen"), 1;
	char path[512];
	snprintf(path, sizeof path, "%s/port", argv[3]);
	FILE *f = fopen(path, "w");
	fprintf(f, "%s\n", argv[1]);
	fclose(f);
	pid_t master = getpid(), w = fork();
	if (w == 0)
		_exit(worker(l, argv[2], master));
	int st = 0;
	waitpid(w, &st, 0);
	bool intact = true;
	for (int i = 0; i < LEN; i++)
		intact &= victim[i] == 'V';
	printf("RESULT mode=%s worker_exit=%d victim=%s\n", argv[2], WIFEXITED(st) ? WEXITSTATUS(st) : -1,
	       intact ? "intact" : "overwritten");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
