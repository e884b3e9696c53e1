/* relay_priv.h — what the relay process (relay.c) shares with the code that
 * gives its connection away to a process that received the application's
 * end over SCM_RIGHTS (handover_pass.c). */
#ifndef SSW_RELAY_PRIV_H
#define SSW_RELAY_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "switch/share/relay.h"

#define RELAY_BUF (256u << 10)
#define MAXFDS 64
#define RELAY_KEEP_FDS 32 /* the transport's own descriptors a relay keeps (keep_fds) */

struct held {
	struct ssw_sock *s;
	int fds[MAXFDS];
	int nfds;
};

/* The relay sits below the interposed calls and must not use them: it
 * calls the switch itself for the connection, the kernel for its Unix socket. */
struct dir {
	int from, to;          /* fds */
	struct ssw_sock *sfrom, *sto; /* the switched connection when it is that end, else NULL */
	char *buf;
	size_t len, off;
	bool eof, shut;        /* read end-of-file; shut the other side's writing */
	uint64_t total;        /* bytes read (logs) */
	/* peer to application while another process holds the connection too
	 * (a forked child exec'd a helper with it, which may never read): the
	 * bytes in buf were peeked at `pos`, not taken, and are taken as the
	 * application reads them (what it has not read is what its end's queue
	 * holds, counted exactly through a copy of that end the relay keeps:
	 * closed by the application, the end and its queue stay), so that a
	 * helper takes from the others what it reads and nothing more */
	bool peeked;
	uint64_t pos;
	size_t taken;          /* of buf, taken */
	int app;               /* the copy of the application's end, or -1 */
	int nap_us;            /* how long to wait before looking at the queue again */
#define NAP_FIRST_US 100
#define NAP_MAX_US 64000
};

/* One round of a direction: read what `from` has, write what `to` takes
 * (rev_*: what poll said of each; nonblocking), end-of-file passed on. */
void relay_pump(struct dir *d, short rev_from, short rev_to);

/* A relay's connection, as the give-away sees it. */
struct relay_give {
	int lfd;               /* the listening socket of the relay's name */
	dev_t app_dev;         /* the application's end, as fstat knows it */
	ino_t app_ino;
	struct held *h;        /* the connection (its first fd: the kernel socket) */
	int u;                 /* the relay's end */
	struct dir *in, *out;
	bool lazy;             /* shared with other holders: never given away */
};

/* A request waits on g->lfd: answer it.  True when the connection went to
 * the requester (the relay then exits without closing it); false when the
 * relay goes on carrying it, nothing lost. */
bool relay_give(const struct relay_give *g);

#endif
