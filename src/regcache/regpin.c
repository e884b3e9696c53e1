/* regpin.c — page references held by vmsplice, read back with tee (regpin.h). */
#include "regcache/regpin.h"
#include "regcache/regcache.h"

#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* Pages one pipe holds: 1 MiB, the unprivileged pipe-max-size default. */
#define PIN_CHUNK ((size_t)1 << 20)

struct ssw_pin {
	size_t len;
	int n;
	int fd[][2]; /* one pipe per PIN_CHUNK */
};

void ssw_pin_free(struct ssw_pin *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++) {
		sys_close(p->fd[i][0]);
		sys_close(p->fd[i][1]);
	}
	free(p);
}

int ssw_pin_new(void *addr, size_t len, struct ssw_pin **out)
{
	int chunks = (int)((len + PIN_CHUNK - 1) / PIN_CHUNK);
	struct ssw_pin *p = calloc(1, sizeof *p + (size_t)chunks * sizeof p->fd[0]);
	if (!p)
		return -ENOMEM;
	p->len = len;
	for (int i = 0; i < chunks; i++) {
		size_t off = (size_t)i * PIN_CHUNK, n = len - off < PIN_CHUNK ? len - off : PIN_CHUNK;
		if (sys_pipe2(p->fd[i], O_CLOEXEC) < 0) {
			ssw_pin_free(p);
			return -errno;
		}
		p->n++;
		if (sys_fcntl(p->fd[i][1], F_SETPIPE_SZ, (long)PIN_CHUNK) < 0) {
			ssw_pin_free(p);
			return -errno;
		}
		for (size_t done = 0; done < n;) {
			struct iovec v = { (char *)addr + off + done, n - done };
			long k = SYS_(vmsplice, p->fd[i][1], &v, 1, 0);
			if (k <= 0) {
				ssw_pin_free(p);
				return k < 0 ? -errno : -EIO;
			}
			done += (size_t)k;
		}
	}
	*out = p;
	return 0;
}

int ssw_pin_read(struct ssw_pin *p, size_t off, void *dst, size_t len)
{
	if (off > p->len || len > p->len - off)
		return -EINVAL;
	int t[2];
	if (sys_pipe2(t, O_CLOEXEC) < 0)
		return -errno;
	int rc = sys_fcntl(t[1], F_SETPIPE_SZ, (long)PIN_CHUNK) < 0 ? -errno : 0;
	char scratch[4096];
	while (!rc && len) {
		int i = (int)(off / PIN_CHUNK);
		size_t in = off % PIN_CHUNK, n = PIN_CHUNK - in < len ? PIN_CHUNK - in : len;
		/* the pin's pages from its start up to what we want: tee takes
		 * a prefix (it duplicates, the pin keeps them) */
		size_t want = in + n, got = 0;
		while (!rc && got < want) {
			long k = SYS_(tee, p->fd[i][0], t[1], want - got, 0);
			if (k <= 0)
				rc = k < 0 ? -errno : -EIO;
			else
				got += (size_t)k;
		}
		for (size_t skip = in; !rc && skip;) {
			ssize_t k = sys_read(t[0], scratch, skip < sizeof scratch ? skip : sizeof scratch);
			if (k <= 0)
				rc = k < 0 ? -errno : -EIO;
			else
				skip -= (size_t)k;
		}
		for (size_t done = 0; !rc && done < n;) {
			ssize_t k = sys_read(t[0], (char *)dst + done, n - done);
			if (k <= 0)
				rc = k < 0 ? -errno : -EIO;
			else
				done += (size_t)k;
		}
		/* tee may have duplicated more than asked (whole pipe buffers) */
		while (!rc) {
			struct pollfd pf = { t[0], POLLIN, 0 };
			if (sys_poll(&pf, 1, 0) <= 0 || sys_read(t[0], scratch, sizeof scratch) <= 0)
				break;
		}
		dst = (char *)dst + n;
		off += n;
		len -= n;
	}
	sys_close(t[0]);
	sys_close(t[1]);
	return rc;
}

int ssw_pin_cache_reg(void *ctx, void *addr, size_t len, uint32_t access, struct ssw_reg *reg)
{
	(void)ctx, (void)access;
	struct ssw_pin *p;
	if (ssw_pin_new(addr, len, &p) < 0)
		return -ENOBUFS;
	memcpy(reg->handle, &p, sizeof p);
	return 0;
}

void ssw_pin_cache_dereg(void *ctx, struct ssw_reg *reg)
{
	(void)ctx;
	struct ssw_pin *p;
	memcpy(&p, reg->handle, sizeof p);
	ssw_pin_free(p);
}
