/* statreg_rows.c — the slot table of this process's registry file and what
 * a row says: a switched socket (from the fd table, its session's counters)
 * or a kernel TCP connection (from TCP_INFO).  Rows are written under the
 * registry lock with a per-slot seqlock, so a reader never sees half a row. */
#include "switch/stat/statreg_priv.h"

#include "common/log.h"
#include "common/params.h"
#include "common/sys.h"
#include "switch/switch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- L->slots ---------------------------------------------------------------- */

void ssw_statreg_slot_begin(struct ssw_statreg_slot *sl)
{
	__atomic_store_n(&sl->seq, sl->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

void ssw_statreg_slot_end(struct ssw_statreg_slot *sl)
{
	__atomic_store_n(&sl->seq, sl->seq + 1, __ATOMIC_RELEASE);
}

void ssw_statreg_slot_free(struct ssw_statreg_slot *sl)
{
	if (sl->kind == SSW_SR_FREE)
		return;
	if (sl->kind == SSW_SR_KERNEL)
		atomic_fetch_sub(&L->nkernel, 1);
	ssw_statreg_slot_begin(sl);
	sl->kind = SSW_SR_FREE;
	ssw_statreg_slot_end(sl);
}

/* Doubles the table (file and mapping); with L->reg_lock held.  Readers size
 * their copy from the header's L->nslots, set once the file is grown. */
static bool grow(void)
{
	if (L->nslots >= SSW_STATREG_MAX_SLOTS)
		return false;
	uint32_t n = L->nslots * 2;
	int fd = ssw_statreg_open_file(AT_FDCWD, ssw_statreg_path, O_RDWR, geteuid(), 0, SSW_STATREG_FILE_SIZE(n));
	if (fd < 0)
		return false;
	bool ok = SYS_(ftruncate, fd, (off_t)SSW_STATREG_FILE_SIZE(n)) == 0;
	sys_close(fd);
	void *p = ok ? mremap(L->hdr, SSW_STATREG_FILE_SIZE(L->nslots), SSW_STATREG_FILE_SIZE(n), MREMAP_MAYMOVE) : MAP_FAILED;
	if (p == MAP_FAILED)
		return false;
	L->hdr = p;
	L->slots = (struct ssw_statreg_slot *)((char *)p + SSW_STATREG_HDR_SIZE);
	L->nslots = n;
	__atomic_store_n(&L->hdr->nslots, n, __ATOMIC_RELEASE);
	return true;
}

/* A free slot, or NULL; with L->reg_lock held (it may move the table). */
struct ssw_statreg_slot *ssw_statreg_slot_alloc(void)
{
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used; i++)
		if (L->slots[i].kind == SSW_SR_FREE)
			return &L->slots[i];
	if (used >= L->nslots && !grow())
		return NULL;
	__atomic_store_n(&L->hdr->used, used + 1, __ATOMIC_RELEASE);
	return &L->slots[used];
}

void ssw_statreg_fmt_addr(const struct sockaddr_storage *a, char *out, size_t n)
{
	char h[INET6_ADDRSTRLEN] = "?";
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *i = (const void *)a;
		inet_ntop(AF_INET, &i->sin_addr, h, sizeof h);
		snprintf(out, n, "%s:%u", h, ntohs(i->sin_port));
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *i = (const void *)a;
		if (IN6_IS_ADDR_V4MAPPED(&i->sin6_addr)) {
			inet_ntop(AF_INET, &i->sin6_addr.s6_addr[12], h, sizeof h);
			snprintf(out, n, "%s:%u", h, ntohs(i->sin6_port));
		} else {
			inet_ntop(AF_INET6, &i->sin6_addr, h, sizeof h);
			snprintf(out, n, "[%s]:%u", h, ntohs(i->sin6_port));
		}
	} else {
		snprintf(out, n, "*");
	}
}

uint64_t ssw_statreg_fd_inode(int fd)
{
	struct stat st;
	if (SYS_(fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	return (uint64_t)st.st_ino;
}

/* Re-read a kernel connection; false when fd no longer is that socket. */
bool ssw_statreg_kernel_refresh(struct ssw_statreg_slot *sl)
{
	if (ssw_statreg_fd_inode(sl->fd) != sl->ino)
		return false;
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	char loc[64] = "*", rem[64];
	memcpy(rem, sl->remote, sizeof rem);
	if (sys_getsockname(sl->fd, (struct sockaddr *)&a, &l) == 0)
		ssw_statreg_fmt_addr(&a, loc, sizeof loc);
	l = sizeof a;
	if ((int)SYS_(getpeername, sl->fd, (struct sockaddr *)&a, &l) == 0)
		ssw_statreg_fmt_addr(&a, rem, sizeof rem);
	struct tcp_info ti;
	memset(&ti, 0, sizeof ti);
	l = sizeof ti;
	int st = SSW_SR_UNKNOWN;
	bool have = sys_getsockopt(sl->fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0;
	if (have) {
		switch (ti.tcpi_state) {
		case K_ESTABLISHED: st = SSW_SR_CONNECTED; break;
		case K_SYN_SENT: case K_SYN_RECV: st = SSW_SR_CONNECTING; break;
		case K_LISTEN: st = SSW_SR_LISTENING; break;
		default: st = SSW_SR_CLOSING; break;
		}
	}
	ssw_statreg_slot_begin(sl);
	memcpy(sl->local, loc, sizeof sl->local);
	memcpy(sl->remote, rem, sizeof sl->remote);
	sl->state = (uint8_t)st;
	if (have && l >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) {
		/* the SYN counts as one byte acknowledged */
		sl->bytes_sent = ti.tcpi_bytes_acked ? ti.tcpi_bytes_acked - 1 : 0;
		sl->bytes_received = ti.tcpi_bytes_received;
	}
	if (have && l >= offsetof(struct tcp_info, tcpi_data_segs_out) + sizeof ti.tcpi_data_segs_out) {
		sl->msgs_sent = ti.tcpi_data_segs_out;
		sl->msgs_received = ti.tcpi_data_segs_in;
	}
	ssw_statreg_slot_end(sl);
	return true;
}

void ssw_statreg_publish_sock(int fd, struct ssw_sock *s, struct ssw_statreg_slot *sl)
{
	struct ssw_session_stats st;
	int64_t ring = -1;
	bool have_stats = false;
	int state = SSW_SR_UNKNOWN;
	/* Never wait for a connect in progress: it holds the lock while it
	 * waits, and a pass must stay quick. */
	bool locked = pthread_mutex_trylock(&s->lock) == 0;
	enum ssw_state ss = s->state;
	if (ss == SSW_ST_LISTENING) {
		state = SSW_SR_LISTENING;
	} else if (ss == SSW_ST_CONNECTED && s->sess) {
		/* sess is fixed once connected and lives as long as our reference */
		/* never waits (a signal handler may have interrupted the
		 * session's lock holder); resident: a system call (mincore), off
		 * the data path */
		(void)ssw_session_peek_stats(s->sess, &st, &ring);
		have_stats = true;
		/* half-closed either way, or reset: what TCP calls the closing states */
		state = st.tcp_state == K_ESTABLISHED ? SSW_SR_CONNECTED : SSW_SR_CLOSING;
	} else if (ss == SSW_ST_CONNECTING) {
		state = SSW_SR_CONNECTING;
	}
	char loc[64], rem[64] = "*";
	ssw_statreg_fmt_addr(&s->local, loc, sizeof loc);
	if (ss != SSW_ST_LISTENING)
		ssw_statreg_fmt_addr(ss == SSW_ST_CONNECTING ? &s->dst : &s->peer, rem, sizeof rem);
	char pname[sizeof sl->provider] = "?", pdesc[sizeof sl->describe] = "", note[sizeof sl->reason] = "";
	uint32_t refused = 0;
	if (ss == SSW_ST_LISTENING) {
		refused = atomic_load(&s->refused);
		if (locked) /* written under the lock (listen.c refuse) */
			memcpy(note, s->lnote, sizeof note < sizeof s->lnote ? sizeof note : sizeof s->lnote);
		note[sizeof note - 1] = '\0';
		/* each provider once (a dual-stack wildcard has two listeners each) */
		size_t k = 0;
		for (int i = 0; i < s->npl && i < SSW_MAX_PLISTEN; i++) {
			const char *nm = s->pl[i].prov->name;
			bool dup = false;
			for (int j = 0; j < i && !dup; j++)
				dup = s->pl[j].prov == s->pl[i].prov;
			if (!dup && k < sizeof pname)
				k += (size_t)snprintf(pname + k, sizeof pname - k, "%s%s", k ? "+" : "", nm);
		}
	} else if (s->prov && s->prov->name) {
		snprintf(pname, sizeof pname, "%s", s->prov->name);
		if (s->prov->describe)
			snprintf(pdesc, sizeof pdesc, "%s", s->prov->describe());
	}
	bool shared = s->sess && !ssw_session_last_holder(s->sess); /* held by a forked process too */
	pid_t driver = s->sess ? ssw_session_driver(s->sess) : 0;
	if (locked)
		pthread_mutex_unlock(&s->lock);

	ssw_statreg_slot_begin(sl);
	sl->kind = SSW_SR_SWITCHED;
	sl->state = (uint8_t)state;
	sl->flags = shared ? SSW_SR_F_SHARED : 0;
	sl->fd = fd;
	memcpy(sl->provider, pname, sizeof pname);
	memcpy(sl->describe, pdesc, sizeof pdesc);
	if (have_stats) {
		sl->bytes_sent = st.bytes_sent;
		sl->bytes_received = st.bytes_received;
		sl->msgs_sent = st.msgs_sent;
		sl->msgs_received = st.msgs_received;
		sl->tx_inflight = st.tx_inflight;
		sl->tx_limit = st.tx_limit;
		sl->rx_window = st.rx_window;
	} else {
		sl->bytes_sent = sl->bytes_received = sl->msgs_sent = sl->msgs_received = 0;
		sl->tx_inflight = sl->tx_limit = sl->rx_window = 0;
	}
	sl->ring_resident = ring > 0 ? (uint64_t)ring : 0;
	sl->ino = 0;
	sl->since_ns = 0;
	memcpy(sl->local, loc, sizeof loc);
	memcpy(sl->remote, rem, sizeof rem);
	memcpy(sl->reason, note, sizeof note);
	sl->refused = refused;
	sl->driver = (int32_t)driver;
	ssw_statreg_slot_end(sl);
}

/* false: the registry was busy (nothing changed; answered at a later call) */
