/* conf_shm.c — the conformance suite instantiated for the shm provider; the
 * only file of the suite that knows shm's internals (its corruption hook). */
#include "conf.h"

#include "providers/shm/shm_priv.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

extern const struct ssw_provider ssw_provider_shm;

/* conformance.shm-async runs the same binary with CONF_SHM_ASYNC=1: RDMA
 * copies then complete at a later poll_cq, out of order (SOCKSWITCH_FAULT=async). */
static bool async_run(void)
{
	const char *v = getenv("CONF_SHM_ASYNC");
	return v && *v == '1';
}

static int shm_env_setup(void)
{
	/* the defaults, whatever the caller's environment says */
	unsetenv("SOCKSWITCH_CMA");
	unsetenv("SOCKSWITCH_SHM_RING");
	if (async_run())
		setenv("SOCKSWITCH_FAULT", "async", 1);
	else
		unsetenv("SOCKSWITCH_FAULT");
	return 0;
}

/* Rendezvous names are per address and port: a port the kernel reserved
 * for us keeps parallel test runs apart. */
static int shm_env_addr(int wildcard, struct sockaddr_storage *at, struct sockaddr_storage *to, socklen_t *len)
{
	int port = conf_reserve_port(wildcard);
	conf_inet(at, len, wildcard ? "0.0.0.0" : "127.0.0.1", port);
	conf_inet(to, len, "127.0.0.1", port);
	return 0;
}

static int shm_env_unused(struct sockaddr_storage *a, socklen_t *len)
{
	conf_inet(a, len, "127.0.0.1", conf_reserve_port(0));
	return 0;
}

/* What a hostile connector can write into the ring its peer reads: indices,
 * record headers, the state words beside them. */
static int shm_env_corrupt(struct ssw_ep *hostile, int variant)
{
	struct shm_ring *r = &hostile->tx;
	struct shm_ring_ctl *ctl = r->ctl;
	uint64_t pos = r->pos, off = pos & (r->size - 1);
	struct shm_rec rec = { 0, 0 };
	switch (variant) {
	case 0: /* tail not on a record boundary */
		atomic_store(&ctl->tail, pos + 3);
		break;
	case 1: /* tail more than a ring ahead of the reader */
		atomic_store(&ctl->tail, pos + r->size + 8);
		break;
	case 2: /* tail behind what the reader consumed */
		atomic_store(&ctl->tail, pos - 8);
		break;
	case 3: /* a record of an unknown kind */
		rec = (struct shm_rec){ 8, 99 };
		break;
	case 4: /* a record longer than what was published */
		rec = (struct shm_rec){ 4096, SHM_REC_MSG };
		break;
	case 5: /* a record longer than the ring */
		rec = (struct shm_rec){ UINT32_MAX, SHM_REC_MSG };
		break;
	case 6: /* padding that does not reach the ring's end */
		rec = (struct shm_rec){ 5, SHM_REC_PAD };
		break;
	case 7: /* a state word with no meaning */
		atomic_store(&ctl->closed, 77);
		break;
	case 8: /* held records beyond the ring */
		atomic_store(&ctl->held, pos + 3 * r->size);
		break;
	case 9: /* held records off a record boundary */
		atomic_store(&ctl->held, pos + 12);
		break;
	default:
		return 0;
	}
	if (rec.kind) {
		memcpy(r->data + off, &rec, sizeof rec);
		atomic_store(&ctl->tail, pos + 16);
	}
	shm_wake_peer(hostile);
	return 1;
}

/* (Fixed since: a deregistered descriptor still read and wrote the peer's
 * memory; each exposure is now a slot its owner closes, shm_vouch.c.) */
static const char *const shm_deviations[] = {
	NULL,
};

static struct conf_env shm_env = {
	.prov = &ssw_provider_shm,
	.setup = shm_env_setup,
	.addr = shm_env_addr,
	.unused_addr = shm_env_unused,
	/* a missing rendezvous says nothing of the kernel port: "cannot serve" */
	.refused_ok = CONF_FALLBACK,
	.corrupt = shm_env_corrupt,
	.deviations = shm_deviations,
};

int main(int argc, char **argv)
{
	shm_env.expect_async = async_run();
	return conf_run(&shm_env, argc, argv);
}
