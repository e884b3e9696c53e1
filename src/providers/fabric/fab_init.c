/* fab_init.c — the fabric provider object: settings (route options), the
 * fork gate, the shared libfabric fabrics, and the SPI table. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"
#include "common/provfds.h"
#include "common/sys.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* provider=NAME: the libfabric provider ("tcp" here, "verbs" on RDMA
 * hardware).  port-offset=N: the fabric listener for application port P is
 * on P + N, counted round 1..65535 (past 65535 it goes on from 1: P + N -
 * 65535), so that every port has its own (the kernel's ephemeral ports,
 * which servers binding port 0 get, pass 65535 - N).  The tcp provider
 * shares the kernel's port space, so it needs an offset (default 10000);
 * verbs has its own port space (default 0).  A fabric port another program
 * holds (or a privileged one, for a user) only makes that application port
 * kernel TCP: the listener cannot open it, connectors find no switch. */
char fab_prov_name[32] = "tcp";
int fab_port_offset = -1; /* -1: the default of the provider */
long fab_cm_data_max = -1;
static char describe_buf[96];

static int fab_configure(const char *key, const char *value, char *err, size_t errlen)
{
	if (strcmp(key, "provider") == 0) {
		size_t n = strlen(value);
		bool ok = n > 0 && n < sizeof fab_prov_name;
		for (size_t i = 0; ok && i < n; i++)
			ok = isalnum((unsigned char)value[i]) || value[i] == '_' || value[i] == '-' || value[i] == ';';
		if (!ok) {
			snprintf(err, errlen, "fabric option provider=%s: expected a libfabric provider name such as tcp or verbs",
				 value);
			return -EINVAL;
		}
		memcpy(fab_prov_name, value, n + 1);
		return 0;
	}
	if (strcmp(key, "port-offset") == 0) {
		char *end;
		errno = 0;
		long v = strtol(value, &end, 10);
		if (errno || end == value || *end || v < 0 || v > 65535) {
			snprintf(err, errlen, "fabric option port-offset=%s: expected a number from 0 to 65535", value);
			return -EINVAL;
		}
		fab_port_offset = (int)v;
		return 0;
	}
	if (strcmp(key, "cm-data") == 0) {
		/* cm-data=N: put at most N bytes of private data in a connection
		 * request, the rest goes as the first message (for providers that
		 * say more than they carry; 0 tests the verbs path on tcp) */
		char *end;
		errno = 0;
		long v = strtol(value, &end, 10);
		if (errno || end == value || *end || v < 0 || v > 65536) {
			snprintf(err, errlen, "fabric option cm-data=%s: expected a number of bytes from 0 to 65536", value);
			return -EINVAL;
		}
		fab_cm_data_max = v;
		return 0;
	}
	snprintf(err, errlen, "unknown fabric option '%s' (expected provider=, port-offset= or cm-data=)", key);
	return -EINVAL;
}

int fab_map_port(int port)
{
	int off = fab_port_offset >= 0 ? fab_port_offset : strcmp(fab_prov_name, "tcp") == 0 ? 10000 : 0;
	if (port <= 0 || port > 65535)
		return -1;
	return (port - 1 + off) % 65535 + 1;
}

int fab_unmap_port(int port)
{
	long off = fab_port_offset >= 0 ? fab_port_offset : strcmp(fab_prov_name, "tcp") == 0 ? 10000 : 0;
	if (port <= 0 || port > 65535)
		return -1;
	return (int)((((long)port - 1 - off) % 65535 + 65535) % 65535 + 1);
}

/* ---- the fork gate ------------------------------------------------------ */

static pthread_rwlock_t gate;

void fab_gate_enter(void)
{
	pthread_rwlock_rdlock(&gate);
	ssw_provider_calls++;
}

void fab_gate_leave(void)
{
	ssw_provider_calls--;
	pthread_rwlock_unlock(&gate);
}

static void gate_init(void)
{
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	/* a fork waiting for the gate must not starve behind a stream of ops */
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&gate, &a);
	pthread_rwlockattr_destroy(&a);
}

/* The gate held, no libfabric call is under way: the shared queues'
 * state is what both processes' memory says (fab_hub.c, fab_eq.c). */
static void fork_prepare(void)
{
	pthread_rwlock_wrlock(&gate);
	fab_hub_atfork_prepare();
	fab_eq_atfork_prepare();
	/* last: short sections that wait for nothing (buffers, the info cache) */
	fab_ep_atfork_prepare();
	fab_conn_atfork_prepare();
}
static void fork_parent(void)
{
	fab_conn_atfork_parent();
	fab_ep_atfork_parent();
	pthread_rwlock_unlock(&gate);
}
static void fork_child(void)
{
	fab_conn_atfork_child();
	fab_ep_atfork_child();
	gate_init(); /* held by the forking thread, which is us: start afresh */
	fab_listen_atfork_child();
	fab_hub_atfork_child();
	fab_eq_atfork_child();
}

/* ---- fabrics ------------------------------------------------------------ */

/* Taken only inside the gate (both callers of fab_fabric_get enter it
 * first), so never held at a fork, whose prepare handler waits for the
 * gate: nothing to do for it there, and nothing may be (its section calls
 * into libfabric, whose epoll_ctl comes back through the hub's locks). */
static pthread_mutex_t fab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fab_fabric *fabrics;

/* The tcp provider names a fabric per subnet: endpoints of one fabric share
 * its object, the others get their own. */
int fab_fabric_get(struct fi_info *info, struct fab_fabric **out)
{
	/* (called with the gate entered: see fab_mu) */
	const char *name = info->fabric_attr->name ? info->fabric_attr->name : "";
	pthread_mutex_lock(&fab_mu);
	struct fab_fabric *f;
	for (f = fabrics; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			break;
	int rc = 0;
	if (!f) {
		f = calloc(1, sizeof *f);
		if (!f) {
			rc = -ENOMEM;
		} else if ((rc = fab_open_fabric(info->fabric_attr, &f->fabric)) != 0) {
			free(f);
			f = NULL;
		} else {
			pthread_mutex_init(&f->eqmu, NULL);
			f->eq_fd = f->eq_sig = -1;
			snprintf(f->name, sizeof f->name, "%s", name);
			f->next = fabrics;
			fabrics = f;
		}
	}
	pthread_mutex_unlock(&fab_mu);
	*out = f;
	return rc < 0 ? rc : 0;
}

struct fi_info *fab_hints(void)
{
	struct fi_info *h = fab_allocinfo();
	if (!h)
		return NULL;
	h->caps = FI_MSG | FI_RMA;
	h->ep_attr->type = FI_EP_MSG;
	/* what verbs asks of us; the tcp provider clears the bits it does not need */
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->fabric_attr->prov_name = strdup(fab_prov_name);
	return h;
}

int fab_errno(int e)
{
	e = e < 0 ? -e : e;
	switch (e) {
	case FI_EAGAIN:
		return -EAGAIN;
	case FI_ECONNREFUSED:
		return -ECONNREFUSED;
	case FI_ENOMEM:
		return -ENOMEM;
	case FI_ENODATA:
		return -ENOENT;
	default:
		return e < FI_ERRNO_OFFSET ? -e : -EIO;
	}
}

/* ---- the provider ------------------------------------------------------- */

static int fab_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, gate_init);
	/* libfabric is loaded, and the provider asked for, at the first
	 * listen or connect (fab_dl.c): a process that makes none pays nothing */
	snprintf(describe_buf, sizeof describe_buf, "fabric (libfabric %s, port-offset %d)", fab_prov_name,
		 fab_map_port(1) - 1);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	return 0;
}

static const char *fab_describe(void) { return describe_buf[0] ? describe_buf : "fabric (libfabric)"; }

const struct ssw_provider ssw_provider_fabric = {
	/* which of libfabric's sockets is whose (fab_hub.c) */
	.own_epoll_ctl = fab_hub_epoll_note,
	.spi_version = SSW_SPI_VERSION,
	.name = "fabric",
	.caps = SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE,
	.init = fab_init,
	.conn = &fab_conn_ops,
	.msg = &fab_msg_ops,
	.rdma = &fab_rdma_ops,
	.progress = &fab_progress_ops,
	.configure = fab_configure,
	.describe = fab_describe,
	.quiesce = fab_quiesce,
};
