/* handover_pass.c — a switched connection sent to another process over
 * SCM_RIGHTS, taken over by that process's switch from the relay that
 * carried it (seed 000's duplicate and adopt between processes): a master
 * that accepts and passes connections to its workers, a connection handed
 * between a process's helpers.
 *
 * The sender cannot know whether the receiver runs the switch, so a sent
 * connection still goes to a relay first (relay.c), and the application's
 * end, an AF_UNIX socket, travels.  The relay keeps listening on its
 * abstract name, which getpeername of that end returns.  A receiver whose
 * switch sees such an end arrive in recvmsg connects there and sends a
 * request with the end itself: holding that end is holding the
 * connection, so nothing else is asked.  The relay
 *   1. moves what the application wrote into the connection,
 *   2. takes back what it handed the application and nobody read (the
 *      end's queue, then its own buffer) and puts it in front of the
 *      connection's queue,
 *   3. writes the session into an image (handover.c) and answers with it,
 *      the kernel TCP socket and the provider's descriptors,
 *   4. exits without closing anything once the receiver says it took them.
 * The receiver puts the kernel socket in place of the end (same fd
 * number) and the connection goes on switched, at full speed.  Any failure
 * before the receiver's word leaves the relay carrying the connection as
 * before; a receiver without the switch never asks.
 *
 * Who answers: anyone may connect to an abstract name, and anyone may bind
 * a relay-looking name once the relay is gone.  The relay gives only to a
 * request that carries its application's end (fstat's device and inode);
 * the receiver takes an answer only from the process that listened on the
 * name its end is connected to (SO_PEERCRED of both: pid, uid and gid, as
 * the kernel recorded them at listen), and checks the image as untrusted
 * input (session_handover.c, the provider's ep_import). */
#include "switch/share/relay_priv.h"
#include "switch/share/handover.h"

#include "common/fdpass.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sys.h"
#include "switch/api.h"
#include "switch/setup/setup.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/un.h>

#define PASS_MAGIC 0x53505353u   /* "SSPS" */
#define PASS_VERSION 1u
#define PASS_REQ_WAIT_MS 100     /* relay: a connected requester's request */
#define PASS_DRAIN_MS 1000       /* relay: the application's bytes into the connection */
#define PASS_ACK_WAIT_MS 2000    /* relay: the receiver's word */
#define PASS_REPLY_WAIT_MS 3000  /* receiver: the relay's answer (after its drain) */
#define PASS_BACK_MAX (8u << 20) /* what the application's end may hold unread */
#define PASS_MAX_FDS (2 + SSW_SESSION_IMAGE_FDS)
_Static_assert(PASS_MAX_FDS <= SSW_FDPASS_MAX, "the answer's descriptors fit one message");

struct pass_req {
	uint32_t magic, version;
};

struct pass_reply {
	uint32_t magic;
	int32_t status;            /* 0: the descriptors follow; else -errno, the relay carries on */
	char prov[32];
};

static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;
	while ((r = sys_poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	return r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) ? 1 : 0;
}

/* ---- the relay's side ------------------------------------------------------- */

/* What the application wrote, into the connection (it may not write more:
 * its end is in the requester's hands, waiting for the answer). */
static int drain_app(const struct relay_give *g)
{
	uint64_t until = ssw_now_ns() + PASS_DRAIN_MS * 1000000ull;
	for (;;) {
		relay_pump(g->out, POLLIN, POLLOUT);
		int inq = 0;
		if (g->out->len == 0 && (g->out->eof || (sys_ioctl(g->u, SIOCINQ, &inq) == 0 && inq == 0)))
			return 0;
		if (ssw_now_ns() > until)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = g->h->fds[0], .events = POLLOUT };
		struct timespec ts = { 0, 1000000 };
		(void)ssw_poll(&p, 1, &ts, NULL);
	}
}

/* What the application was handed and did not read: back in front of the
 * connection's queue.  a: the application's end (the request's).  Its
 * queue is counted first (only this relay writes to that end, and it is
 * not pumping): one that holds more than PASS_BACK_MAX is left as it is,
 * since putting part of it back behind the rest would reorder it. */
static int take_back(const struct relay_give *g, int a)
{
	struct dir *in = g->in;
	int inq = 0;
	if (sys_ioctl(a, SIOCINQ, &inq) < 0 || inq < 0)
		return -EIO;
	if ((size_t)inq > PASS_BACK_MAX)
		return -ENOSPC;
	size_t from_end = 0, pending = in->len - in->off;
	uint8_t *b = malloc((size_t)inq + pending + 1);
	if (!b)
		return -ENOMEM;
	while (from_end < (size_t)inq) {
		ssize_t k = sys_recv(a, b + from_end, (size_t)inq - from_end, MSG_DONTWAIT);
		if (k <= 0)
			break;
		from_end += (size_t)k;
	}
	memcpy(b + from_end, in->buf + in->off, pending);
	int rc = from_end == (size_t)inq ? ssw_session_unread(g->h->s->sess, b, from_end + pending) : -EIO;
	if (rc) {
		/* the end's queue as it was: all of it was read, so what goes
		 * back keeps its order (and fits: it just held these bytes) */
		for (size_t off = 0; off < from_end;) {
			ssize_t k = sys_send(g->u, b + off, from_end - off, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (k <= 0)
				break;
			off += (size_t)k;
		}
	} else {
		in->off = in->len = 0;
	}
	free(b);
	return rc;
}

bool relay_give(const struct relay_give *g)
{
	int q = sys_accept4(g->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (q < 0)
		return false;
	struct pass_req rq;
	int a = -1, na = 0;
	bool given = false;
	if (!wait_in(q, PASS_REQ_WAIT_MS) || ssw_fdpass_recv(q, &rq, sizeof rq, &a, 1, &na, MSG_DONTWAIT) != (ssize_t)sizeof rq ||
	    na != 1 || rq.magic != PASS_MAGIC)
		goto out;
	struct stat st;
	if (SYS_(fstat, a, &st) < 0 || st.st_dev != g->app_dev || st.st_ino != g->app_ino) {
		SSW_DEBUG("relay: a hand-over request without the application's end (refused)");
		goto out;
	}
	struct pass_reply rp = { .magic = PASS_MAGIC };
	struct ssw_session_image img = { .memfd = -1 };
	int fds[PASS_MAX_FDS], nf = 0;
	int rc = 0;
	if (rq.version != PASS_VERSION)
		rc = -EPROTONOSUPPORT;
	else if (g->lazy || g->in->eof || g->out->eof || g->in->shut || g->out->shut ||
		 !ssw_session_last_holder(g->h->s->sess))
		rc = -EBUSY; /* shared with others, or half ended: the relay sees it through */
	if (!rc)
		rc = drain_app(g);
	if (!rc)
		rc = take_back(g, a);
	if (!rc)
		rc = ssw_handover_pack(g->h->s, &img); /* a failure here leaves the bytes taken back queued: pumped again */
	if (!rc && 2 + img.nfds <= PASS_MAX_FDS) {
		fds[nf++] = g->h->fds[0];
		fds[nf++] = img.memfd;
		for (int j = 0; j < img.nfds; j++)
			fds[nf++] = img.fds[j];
		snprintf(rp.prov, sizeof rp.prov, "%s", g->h->s->prov->name);
	} else if (!rc) {
		rc = -ENOSPC;
	}
	rp.status = rc;
	if (ssw_fdpass_send(q, &rp, sizeof rp, fds, nf, MSG_NOSIGNAL) == 0 && !rc) {
		char ack = 0;
		given = wait_in(q, PASS_ACK_WAIT_MS) && sys_recv(q, &ack, 1, 0) == 1 && ack == 'A';
	}
	if (img.memfd >= 0) {
		sys_close(img.memfd);
		/* a transport parked for the receiver (fabric) is ours again */
		if (!given)
			ssw_session_handover_failed();
	}
	SSW_DEBUG("relay: hand-over request: %s", given ? "given" : rc ? strerror(-rc) : "not taken");
out:
	if (a >= 0)
		sys_close(a);
	sys_close(q);
	return given;
}

/* ---- the receiver's side ---------------------------------------------------- */

static bool same_cred(const struct ucred *a, const struct ucred *b)
{
	return a->pid == b->pid && a->uid == b->uid && a->gid == b->gid;
}

/* fd came in over SCM_RIGHTS and is a relay's application end: ask the
 * relay for the connection.  True when fd is now the switched connection. */
static bool claim(int fd)
{
	struct sockaddr_un un;
	socklen_t ul;
	struct sockaddr_storage l, p;
	socklen_t ll, pl;
	if (!ssw_relay_peer(fd, &un, &ul, &l, &ll, &p, &pl))
		return false;
	struct ucred cf, cq;
	socklen_t cl = sizeof cf;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cf, &cl) < 0)
		return false;
	int q = sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (q < 0)
		return false;
	bool mine = false;
	int rfds[PASS_MAX_FDS], nr = 0;
	struct pass_reply rp;
	cl = sizeof cq;
	if (sys_connect(q, (struct sockaddr *)&un, ul) < 0 || sys_getsockopt(q, SOL_SOCKET, SO_PEERCRED, &cq, &cl) < 0)
		goto out; /* no relay there any more (or an older one), or its queue is full: relayed */
	if (!same_cred(&cf, &cq)) {
		SSW_WARN_ONCE("fd %d: the name of its relay is held by another process (pid %d, uid %u): not asked", fd,
			      (int)cq.pid, (unsigned)cq.uid);
		goto out;
	}
	struct pass_req rq = { .magic = PASS_MAGIC, .version = PASS_VERSION };
	if (ssw_fdpass_send(q, &rq, sizeof rq, &fd, 1, MSG_NOSIGNAL) != 0 || !wait_in(q, PASS_REPLY_WAIT_MS) ||
	    ssw_fdpass_recv(q, &rp, sizeof rp, rfds, PASS_MAX_FDS, &nr, MSG_DONTWAIT) != (ssize_t)sizeof rp ||
	    rp.magic != PASS_MAGIC) {
		SSW_DEBUG("fd %d: its relay did not answer: %s", fd, strerror(errno));
		goto out;
	}
	if (rp.status || nr < 2 || !memchr(rp.prov, 0, sizeof rp.prov)) {
		SSW_DEBUG("fd %d: its relay keeps the connection: %s", fd,
			  rp.status ? strerror(-rp.status) : "a malformed answer");
		goto out;
	}
	int tcp = rfds[0];
	struct ssw_session_image img = { .memfd = rfds[1], .nfds = nr - 2 };
	memcpy(img.fds, rfds + 2, sizeof(int) * (size_t)img.nfds);
	nr = 0; /* the image's own now (closed by the load when it fails) */
	struct ssw_handover_note hn;
	int err;
	struct ssw_session *sess = ssw_handover_load(rp.prov, &img, &hn, &err);
	if (!sess) {
		SSW_INFO("fd %d: a switched connection received over SCM_RIGHTS stays relayed: %s", fd, strerror(-err));
		sys_close(tcp);
		goto out;
	}
	/* the word that makes it ours: the relay exits without touching it */
	if (sys_send(q, "A", 1, MSG_NOSIGNAL) != 1) {
		ssw_handover_unload(sess);
		sys_close(tcp);
		goto out;
	}
	int fl = sys_fcntl(fd, F_GETFD, 0), st = sys_fcntl(fd, F_GETFL, 0);
	ssw_relayed_drop(fd);
	/* the kernel socket takes the end's place: same number, same flags */
	if (sys_dup3(tcp, fd, fl >= 0 && (fl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		ssw_handover_unload(sess); /* cannot happen with a valid fd; the connection is lost */
		sys_close(tcp);
		goto out;
	}
	sys_close(tcp);
	if (st >= 0)
		(void)sys_fcntl(fd, F_SETFL, st & O_NONBLOCK);
	ssw_fd_fresh(fd);
	mine = ssw_handover_install(sess, &hn, &fd, 1, "from its relay (SCM_RIGHTS)");
out:
	for (int i = 0; i < nr; i++)
		sys_close(rfds[i]);
	sys_close(q);
	return mine;
}

void ssw_handover_received(const int *fds, int n)
{
	if (!ssw_init())
		return;
	bool relay_only = ssw_param_choice(SSW_P_FAULT) == 4; /* relay (tests, bench) */
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (SYS_(fstat, fds[i], &st) < 0 || !S_ISSOCK(st.st_mode) || ssw_fdtab_any(&fds[i], 1))
			continue;
		/* a listener: switched here (setup/exec.c), or a relay's end */
		if (!ssw_setup_listener_received(fds[i]) && !relay_only)
			(void)claim(fds[i]);
	}
}
