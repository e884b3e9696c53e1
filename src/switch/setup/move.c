/* move.c — connection set-up for a transport that moves with control
 * between the processes sharing a connection (seed 000's duplicate and
 * re-connect; the protocol is session/session_move.c's, which reaches this
 * through ssw_session_cfg.move): the suspended side's listener and the
 * transports it takes, the new controller's connect.
 *
 * One listener per process and local address, on a port of the provider's
 * choice, keyed by SSW_MOVE_PROTO so that no ordinary connect (keyed by the
 * protocol version) reaches it.  A connect carries a token the suspended
 * side chose and sent over the old transport only; what arrives is kept
 * here until the session whose token it presents takes it (or 30 s). */
#include "switch/setup/setup_priv.h"
#include "common/forklocal.h"

#include "common/log.h"
#include "session/session.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>

#define MOVE_CONNECT_NS (5ull * 1000000000ull)
#define KEEP_NS (30ull * 1000000000ull)
#define LST_MAX 4
#define STASH_MAX 16

#define mu (ssw_fl->move_lock) /* fork-local: a child's is a fresh one */
static struct {
	pid_t pid;
	const struct ssw_provider *p;
	struct sockaddr_storage a; /* the local address, port 0 */
	struct ssw_listener *l;
	struct sockaddr_storage name;
	socklen_t name_len;
} lst[LST_MAX];
static struct {
	pid_t pid;
	const struct ssw_provider *p;
	struct ssw_ep *ep;
	uint8_t token[SSW_SESSION_MOVE_TOKEN];
	uint64_t ns;
} stash[STASH_MAX];
/* The tokens this process's sessions await: a connect presenting another
 * is closed at once (nobody fills the stash with guesses). */
#define AWAIT_MAX 64
static struct {
	pid_t pid;
	uint8_t token[SSW_SESSION_MOVE_TOKEN];
	uint64_t ns;
} await[AWAIT_MAX];

/* (locked mu) */
static int awaited(const uint8_t *token)
{
	pid_t me = ssw_pid();
	for (int i = 0; i < AWAIT_MAX; i++)
		if (await[i].pid == me && !memcmp(await[i].token, token, SSW_SESSION_MOVE_TOKEN))
			return i;
	return -1;
}

static void await_add(const uint8_t *token)
{
	pid_t me = ssw_pid();
	uint64_t now = ssw_now_ns();
	int k = -1;
	for (int i = 0; i < AWAIT_MAX && k < 0; i++)
		if (await[i].pid != me || now - await[i].ns > KEEP_NS)
			k = i;
	if (k < 0)
		k = (int)(now % AWAIT_MAX); /* all taken and fresh: one gives way (its connection resets at worst) */
	await[k].pid = me;
	memcpy(await[k].token, token, SSW_SESSION_MOVE_TOKEN);
	await[k].ns = now;
}

static void forget(const uint8_t *token)
{
	pthread_mutex_lock(&mu);
	int i = awaited(token);
	if (i >= 0)
		await[i].pid = 0;
	pthread_mutex_unlock(&mu);
}

static bool movable(const struct ssw_provider *p)
{
	const struct ssw_conn_ops *c = p->conn;
	return c->size > offsetof(struct ssw_conn_ops, local_addr) && c->listener_name && c->local_addr && c->peer_addr;
}

static int peer_host(const struct ssw_provider *p, struct ssw_ep *ep, struct sockaddr_storage *host)
{
	socklen_t l = sizeof *host;
	memset(host, 0, sizeof *host);
	return p->conn->peer_addr(ep, host, &l);
}

static int listen_for(const struct ssw_provider *p, struct ssw_ep *ep, const uint8_t *token, void *where,
		      uint32_t *len)
{
	struct sockaddr_storage a;
	socklen_t al = sizeof a;
	int rc = p->conn->local_addr(ep, &a, &al);
	if (rc)
		return rc;
	((struct sockaddr_in *)&a)->sin_port = 0; /* (sin6_port is at the same place) */
	pid_t me = ssw_pid();
	int slot = -1, free_slot = -1;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < LST_MAX && slot < 0; i++) {
		if (lst[i].l && lst[i].pid != me) {
			/* a fork's copy of the parent's: ours to free (provider.h) */
			lst[i].p->conn->listener_close(lst[i].l);
			lst[i].l = NULL;
		}
		if (lst[i].l && lst[i].p == p && ssw_session_same_host(&lst[i].a, &a))
			slot = i;
		else if (!lst[i].l && free_slot < 0)
			free_slot = i;
	}
	if (slot < 0 && free_slot < 0)
		rc = -ENOSPC;
	if (slot < 0 && !rc) {
		struct ssw_listener *l = NULL;
		rc = p->conn->listen((struct sockaddr *)&a, al, 16, SSW_MOVE_PROTO, &l);
		lst[free_slot].name_len = sizeof lst[free_slot].name;
		if (!rc && (rc = p->conn->listener_name(l, &lst[free_slot].name, &lst[free_slot].name_len)) != 0)
			p->conn->listener_close(l);
		if (!rc) {
			lst[free_slot].pid = me;
			lst[free_slot].p = p;
			lst[free_slot].a = a;
			lst[free_slot].l = l;
			slot = free_slot;
			SSW_DEBUG("move: listening for moved transports on port %d",
				  ntohs(((struct sockaddr_in *)&lst[slot].name)->sin_port));
		}
	}
	if (!rc && lst[slot].name_len > *len)
		rc = -ENOSPC;
	if (!rc) {
		memcpy(where, &lst[slot].name, lst[slot].name_len);
		*len = lst[slot].name_len;
		await_add(token);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

/* What our listeners took, into the stash; old entries go (locked mu). */
static void fill(const struct ssw_provider *p)
{
	pid_t me = ssw_pid();
	uint64_t now = ssw_now_ns();
	for (int k = 0; k < STASH_MAX; k++)
		if (stash[k].ep && (stash[k].pid != me || now - stash[k].ns > KEEP_NS)) {
			if (stash[k].pid == me)
				stash[k].p->conn->close(stash[k].ep, SSW_CLOSE_ABORT);
			stash[k].ep = NULL;
		}
	for (int i = 0; i < LST_MAX; i++) {
		if (!lst[i].l || lst[i].pid != me || lst[i].p != p)
			continue;
		for (;;) {
			struct ssw_ep *ep = NULL;
			uint8_t buf[SSW_CONNECT_PRIV_MAX];
			size_t bl = sizeof buf;
			if (p->conn->accept(lst[i].l, &ep, buf, &bl) != 0)
				break;
			struct ssw_move_priv mp;
			memcpy(&mp, buf, bl < sizeof mp ? bl : sizeof mp);
			int k = 0;
			while (k < STASH_MAX && stash[k].ep)
				k++;
			if (bl != sizeof mp || mp.magic != SSW_MOVE_MAGIC || k == STASH_MAX || awaited(mp.token) < 0) {
				/* not a move of ours (a token nobody awaits), or too many at once */
				p->conn->close(ep, SSW_CLOSE_ABORT);
				SSW_WARN_ONCE("refused a connection to this process's transport-move listener: %s",
					      k == STASH_MAX ? "too many waiting" : "not a token any connection awaits");
				continue;
			}
			stash[k].pid = me;
			stash[k].p = p;
			stash[k].ep = ep;
			memcpy(stash[k].token, mp.token, sizeof mp.token);
			stash[k].ns = now;
		}
	}
}

static int find(const struct ssw_provider *p, const uint8_t *token)
{
	for (int k = 0; k < STASH_MAX; k++)
		if (stash[k].ep && stash[k].p == p && !memcmp(stash[k].token, token, SSW_SESSION_MOVE_TOKEN))
			return k;
	return -1;
}

static int take(const struct ssw_provider *p, const uint8_t *token, struct ssw_ep **ep, struct sockaddr_storage *from)
{
	pthread_mutex_lock(&mu);
	fill(p);
	int k = find(p, token);
	if (k >= 0) {
		*ep = stash[k].ep;
		stash[k].ep = NULL;
		int a = awaited(token);
		if (a >= 0)
			await[a].pid = 0;
	}
	pthread_mutex_unlock(&mu);
	if (k < 0)
		return 0;
	if (peer_host(p, *ep, from) < 0)
		memset(from, 0, sizeof *from); /* matches no host */
	return 1;
}

static bool ready(const struct ssw_provider *p, const uint8_t *token)
{
	pthread_mutex_lock(&mu);
	fill(p);
	bool r = find(p, token) >= 0;
	pthread_mutex_unlock(&mu);
	return r;
}

static int wait_fd(const struct ssw_provider *p)
{
	int fd = -1;
	pid_t me = ssw_pid();
	pthread_mutex_lock(&mu);
	for (int i = 0; i < LST_MAX && fd < 0; i++)
		if (lst[i].l && lst[i].pid == me && lst[i].p == p)
			fd = p->conn->listener_fd(lst[i].l);
	pthread_mutex_unlock(&mu);
	return fd;
}

static int connect_to(const struct ssw_provider *p, const void *where, uint32_t len, const uint8_t *token,
		      struct ssw_ep **out)
{
	struct sockaddr_storage a;
	if (len > sizeof a)
		return -EINVAL;
	memset(&a, 0, sizeof a);
	memcpy(&a, where, len);
	struct ssw_move_priv mp = { .magic = SSW_MOVE_MAGIC };
	memcpy(mp.token, token, sizeof mp.token);
	struct ssw_ep *ep = NULL;
	uint64_t dl = ssw_now_ns() + MOVE_CONNECT_NS;
	int rc = p->conn->connect((struct sockaddr *)&a, (socklen_t)len, SSW_MOVE_PROTO, &mp, sizeof mp, &ep);
	while (rc == -EINPROGRESS) {
		if (ssw_now_ns() >= dl) {
			rc = -ETIMEDOUT;
			break;
		}
		struct pollfd pf = { .fd = p->conn->connect_fd(ep), .events = POLLIN };
		(void)sys_poll(&pf, 1, 10);
		uint8_t reply[SSW_CONNECT_PRIV_MAX];
		size_t rl = sizeof reply;
		rc = p->conn->connect_complete(ep, reply, &rl);
	}
	if (rc) {
		if (ep)
			p->conn->close(ep, SSW_CLOSE_ABORT);
		return rc;
	}
	*out = ep;
	return 0;
}

static const struct ssw_move_ops move_ops = {
	.movable = movable,
	.peer_host = peer_host,
	.listen = listen_for,
	.forget = forget,
	.take = take,
	.ready = ready,
	.fd = wait_fd,
	.connect = connect_to,
};

void ssw_setup_move_init(void)
{
	ssw_session_cfg.move = &move_ops;
}
