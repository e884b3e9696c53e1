/* handover.c — a switched connection carried across exec, taken over by the
 * new image itself (seed 000's duplicate and adopt): inetd-style servers,
 * `socat EXEC:…,nofork`, a server re-exec'ing itself with its connections.
 *
 * Before the exec, for a connection this process alone holds and whose new
 * image will load the switch (interpose/exec_api.c says so), the session
 * writes itself into a memfd beside the provider's descriptors
 * (session_handover.c), all kept open across the exec and named in the new
 * image's environment:
 *
 *     SOCKSWITCH_INHERIT=...;c<fd>[+<fd>...]/<provider>/<memfd>/<fd>,<fd>,...;
 *
 * (the program's descriptors of the connection, then the switch's).  At
 * load, before the program's first call, the new image reads it back and
 * the program's descriptors are switched again: the connection goes on at
 * full speed, with resets, urgent data and linger as on any switched one.
 * Everything else (a connection shared with another process, a transfer in
 * flight, an image without the switch, SCM_RIGHTS) goes through a relay
 * (relay.c). */
#include "switch/share/handover.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/route/providers.h"
#include "switch/setup/setup.h"
#include "switch/sock/addr.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_APP_FDS 8

/* What the socket object knows that the session does not. */
struct note {
	uint32_t magic;
	int32_t family;
	struct sockaddr_storage local, peer;
	uint32_t local_len, peer_len;
	struct ssw_session_opts opts;
	int32_t linger_on, linger_s, rcvtimeo_ms, sndtimeo_ms;
};
#define NOTE_MAGIC 0x4e545353u
_Static_assert(sizeof(struct note) <= sizeof(((struct ssw_handover_note *)0)->b), "the note fits");

int ssw_handover_pack(struct ssw_sock *s, struct ssw_session_image *img)
{
	if (!s->sess || !s->prov) /* (the session says what it can carry) */
		return -EOPNOTSUPP;
	struct note n = {
		.magic = NOTE_MAGIC,
		.family = s->family,
		.local = s->local,
		.peer = s->peer,
		.local_len = s->local_len,
		.peer_len = s->peer_len,
		.opts = s->opts,
		.linger_on = s->linger_on,
		.linger_s = s->linger_s,
		.rcvtimeo_ms = s->rcvtimeo_ms,
		.sndtimeo_ms = s->sndtimeo_ms,
	};
	return ssw_session_export(s->sess, &n, sizeof n, img);
}

int ssw_handover_export(struct ssw_sock *s, const int *fds, int nfds, uint64_t wait_until, char *buf, size_t len,
			struct ssw_exec_keep *k)
{
	if (!s->sess || !s->prov)
		return -EOPNOTSUPP;
	/* a wrapper script's `exec prog` after commands that had the
	 * connection through relays: those end with their commands */
	while (ssw_session_only_relays(s->sess) && ssw_now_ns() < wait_until) {
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
	}
	struct ssw_session_image img;
	int rc = ssw_handover_pack(s, &img);
	if (rc < 0)
		return rc;
	char e[256];
	size_t el = (size_t)snprintf(e, sizeof e, "c");
	int napp = 0;
	for (int i = 0; i < nfds && napp < MAX_APP_FDS; i++)
		if (!(sys_fcntl(fds[i], F_GETFD, 0) & FD_CLOEXEC))
			el += (size_t)snprintf(e + el, sizeof e - el, "%s%d", napp++ ? "+" : "", fds[i]);
	el += (size_t)snprintf(e + el, sizeof e - el, "/%s/%d/", s->prov->name, img.memfd);
	for (int j = 0; j < img.nfds; j++)
		el += (size_t)snprintf(e + el, sizeof e - el, "%s%d", j ? "," : "", img.fds[j]);
	size_t used = strlen(buf);
	int kept = k->n;
	bool ok = napp > 0 && el + 2 < sizeof e && used + el + 2 < len && k->nmade < SSW_EXEC_KEEP_MAX &&
		  ssw_setup_exec_keep(img.memfd, k);
	for (int j = 0; ok && j < img.nfds; j++)
		ok = ssw_setup_exec_keep(img.fds[j], k);
	if (!ok) {
		/* these descriptors close-on-exec again; the caller relays */
		while (k->n > kept)
			(void)sys_fcntl(k->fd[--k->n], F_SETFD, FD_CLOEXEC);
		sys_close(img.memfd);
		return -ENOSPC;
	}
	k->made[k->nmade++] = img.memfd;
	snprintf(buf + used, len - used, "%s;", e);
	SSW_DEBUG("fd %d: switched connection carried across exec (%s)", fds[0], e);
	return 0;
}

/* ---- in the new image ------------------------------------------------------ */

struct entry {
	int app[MAX_APP_FDS], napp;
	char prov[32];
	struct ssw_session_image img;
};

static bool parse_fds(const char **pp, int *out, int max, char sep, int *n)
{
	const char *p = *pp;
	*n = 0;
	for (;;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > 1 << 30 || *n >= max)
			return false;
		out[(*n)++] = (int)v;
		p = end;
		if (*p != sep)
			break;
		p++;
	}
	*pp = p;
	return true;
}

static bool parse(const char *p, struct entry *e)
{
	int one;
	if (*p++ != 'c' || !parse_fds(&p, e->app, MAX_APP_FDS, '+', &e->napp) || *p++ != '/')
		return false;
	size_t pl = strcspn(p, "/;");
	if (!pl || pl >= sizeof e->prov || p[pl] != '/')
		return false;
	memcpy(e->prov, p, pl);
	e->prov[pl] = '\0';
	p += pl + 1;
	if (!parse_fds(&p, &e->img.memfd, 1, ',', &one) || *p++ != '/')
		return false;
	/* (none: a transport that moves instead, session_handover.c) */
	e->img.nfds = 0;
	if (*p && *p != ';' && !parse_fds(&p, e->img.fds, SSW_SESSION_IMAGE_FDS, ',', &e->img.nfds))
		return false;
	return !*p || *p == ';';
}

/* fd is a TCP socket of that family, nobody's in the table yet. */
static bool app_socket(int fd, int family)
{
	struct stat st;
	int dom = 0, proto = 0;
	socklen_t l = sizeof dom;
	if (SYS_(fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode) || ssw_fdtab_any(&fd, 1))
		return false;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) < 0 || dom != family)
		return false;
	l = sizeof proto;
	return sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) == 0 && proto == IPPROTO_TCP;
}

static void close_img(const struct ssw_session_image *img)
{
	for (int j = 0; j < img->nfds; j++)
		sys_close(img->fds[j]);
}

struct ssw_session *ssw_handover_load(const char *prov, struct ssw_session_image *img, struct ssw_handover_note *hn,
				      int *err)
{
	int t = ssw_registry_find(prov, strlen(prov));
	const struct ssw_provider *p = t >= 0 ? ssw_provider_for(t) : NULL;
	struct note *n = (struct note *)hn->b;
	size_t nl = sizeof *n;
	*err = -ENOENT;
	struct ssw_session *sess = p ? ssw_session_import(p, img, n, &nl, err) : NULL;
	sys_close(img->memfd);
	img->memfd = -1;
	if (!sess) {
		close_img(img);
		return NULL;
	}
	if (nl != sizeof *n || n->magic != NOTE_MAGIC || n->local_len > sizeof n->local || n->peer_len > sizeof n->peer ||
	    (n->family != AF_INET && n->family != AF_INET6)) {
		*err = -EINVAL;
		ssw_session_close(sess, false);
		return NULL;
	}
	hn->p = p;
	return sess;
}

void ssw_handover_unload(struct ssw_session *sess)
{
	ssw_session_import_undo(sess);
}

bool ssw_handover_install(struct ssw_session *sess, const struct ssw_handover_note *hn, const int *app, int napp,
			  const char *how)
{
	const struct note *n = (const struct note *)hn->b;
	bool ok = napp > 0;
	for (int i = 0; ok && i < napp; i++)
		ok = app_socket(app[i], n->family);
	struct ssw_sock *s = ok ? ssw_sock_new(SSW_ST_CONNECTED, app[0], n->family) : NULL;
	if (!s) {
		ssw_session_close(sess, false);
		SSW_WARN("fd %d: a switched connection %s could not be taken over (its descriptors are not what they "
			 "were): it is lost", napp > 0 ? app[0] : -1, how);
		return false;
	}
	s->prov = hn->p;
	s->sess = sess;
	s->opts = n->opts;
	s->local = n->local;
	s->peer = n->peer;
	s->local_len = n->local_len;
	s->peer_len = n->peer_len;
	s->linger_on = n->linger_on;
	s->linger_s = n->linger_s;
	s->rcvtimeo_ms = n->rcvtimeo_ms;
	s->sndtimeo_ms = n->sndtimeo_ms;
	int fl = sys_fcntl(app[0], F_GETFL, 0);
	atomic_store(&s->nonblock, fl >= 0 && (fl & O_NONBLOCK));
	for (int i = 0; i < napp; i++)
		ssw_fdtab_set(app[i], s);
	ssw_sock_put(s);
	atomic_fetch_add(&ssw_counters.adopted, 1);
	SSW_INFO("fd %d: switched connection to %s taken over %s (%s)", app[0], ssw_addr_str((struct sockaddr *)&n->peer),
		 how, hn->p->name);
	return true;
}

static void take_over(struct entry *e)
{
	struct ssw_handover_note hn;
	int err;
	struct ssw_session *sess = ssw_handover_load(e->prov, &e->img, &hn, &err);
	if (!sess) {
		SSW_WARN("fd %d: a switched connection inherited across exec could not be taken over (%s): it is lost",
			 e->app[0], strerror(-err));
		return;
	}
	for (int j = 0; j < e->img.nfds; j++)
		(void)sys_fcntl(e->img.fds[j], F_SETFD, FD_CLOEXEC);
	(void)ssw_handover_install(sess, &hn, e->app, e->napp, "across exec");
}

void ssw_handover_import(const char *spec)
{
	for (const char *p = spec; p && *p;) {
		if (*p == 'c') {
			struct entry e;
			if (parse(p, &e))
				take_over(&e);
			else
				SSW_WARN_ONCE("SOCKSWITCH_INHERIT: an entry is malformed (ignored): %.60s", p);
		}
		const char *semi = strchr(p, ';');
		p = semi ? semi + 1 : NULL;
	}
}
