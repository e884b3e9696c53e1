/* shm_seal.c — segments sealed against resizing: made so by their creator, checked by whoever maps a peer's.
 *
 * A shared mapping past the end of its file faults with SIGBUS.  A peer that
 * could shrink the memfd both sides map would kill the other process on its
 * next touch of the ring (the connector's own mapping included: the acceptor
 * receives a writable descriptor of it).  Sealed before it is handed over,
 * the memfd can be resized by nobody, and seals can only be added, never
 * removed: what the receiver reads with F_GET_SEALS and then fstat holds for
 * the whole life of its mapping. */
#include "providers/shm/shm_priv.h"

#include "common/log.h"
#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

/* Exec seals come from the system (vm.memfd_noexec) and do not matter to a
 * data mapping; anything else beyond SHM_SEALS (a write seal) would refuse
 * our writable mapping, or is a seal we do not know. */
#define SEALS_IGNORED F_SEAL_EXEC

int shm_seg_create(const char *name, uint64_t size)
{
	int fd = sys_memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 || sys_fcntl(fd, F_ADD_SEALS, SHM_SEALS) < 0) {
		int rc = -errno;
		sys_close(fd);
		return rc;
	}
	return fd;
}

/* Seals first: once F_SEAL_SHRINK is there the size fstat reports can only
 * stay, so checking in this order leaves no window.  hugetlbfs memfds can be
 * sealed too, but a hole punched in one faults with SIGBUS when the huge page
 * pool is empty: only tmpfs (plain memfd) segments are taken. */
int shm_seg_check_stat(int fd, uint64_t want, const struct stat *st)
{
	const char *why = NULL;
	struct statfs sf;
	int seals = sys_fcntl(fd, F_GET_SEALS, 0);
	if (seals < 0)
		why = "not a sealable memfd";
	else if ((seals & ~SEALS_IGNORED) != SHM_SEALS)
		why = "not sealed against resizing as agreed";
	else if (!S_ISREG(st->st_mode))
		why = "not a regular file";
	else if ((uint64_t)st->st_size < want)
		why = "smaller than its ring size needs";
	else if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC)
		why = "not plain shared memory";
	if (!why)
		return 0;
	SSW_INFO("shm: refused a peer's segment: %s (seals %#x)", why, seals < 0 ? 0 : (unsigned)seals);
	return -EPROTO;
}

int shm_seg_check(int fd, uint64_t want, struct stat *stp)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		SSW_INFO("shm: refused a peer's segment: %s", "not a regular file");
		return -EPROTO;
	}
	int rc = shm_seg_check_stat(fd, want, &st);
	if (rc == 0 && stp)
		*stp = st;
	return rc;
}
