/* memhook.c — the C library's mapping calls patched to report a range before
 * the kernel changes it (why, and what it sees: memhook.h). */
#include "common/memhook.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

static _Atomic(ssw_memhook_fn) hook_fn;
static atomic_bool active;
static _Atomic uint64_t reported;

/* The callback hears of [addr, addr+len) (len clamped to the address space). */
static void report(const void *addr, size_t len)
{
	ssw_memhook_fn fn = atomic_load_explicit(&hook_fn, memory_order_acquire);
	if (!fn || !len)
		return;
	int e = errno;
	atomic_fetch_add_explicit(&reported, 1, memory_order_relaxed);
	fn((void *)addr, len);
	errno = e;
}

/* ---- the replacements: the C library's semantics, then the system call ---- */

static int hook_munmap(void *addr, size_t len)
{
	report(addr, len);
	return (int)syscall(SYS_munmap, addr, len); /* sets errno, -1 on failure */
}

/* new_addr is read only when the flags say it was passed (glibc does the same
 * with its variadic argument: the register holds it either way). */
static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	if (!(flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)))
		new_addr = NULL;
	/* old_len 0 duplicates a shared mapping: the old one stays */
	if (old_len)
		report(old, old_len);
	if (flags & MREMAP_FIXED)
		report(new_addr, new_len);
	return (void *)syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
}

static int hook_madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_DONTNEED || advice == MADV_DONTNEED_LOCKED || advice == MADV_FREE || advice == MADV_REMOVE)
		report(addr, len);
	return (int)syscall(SYS_madvise, addr, len, advice);
}

static void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (off & (off_t)(4096 - 1)) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	if ((flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE))
		report(addr, len);
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static void **curbrk; /* glibc's __curbrk, which its sbrk reads */

static int hook_brk(void *addr)
{
	void *cur = *curbrk ? *curbrk : (void *)syscall(SYS_brk, 0);
	if (addr && (uintptr_t)addr < (uintptr_t)cur)
		report(addr, (uintptr_t)cur - (uintptr_t)addr);
	/* the kernel answers the break it kept: the old one when it refused */
	void *now = (void *)syscall(SYS_brk, addr);
	*curbrk = now;
	if ((uintptr_t)now < (uintptr_t)addr) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

static void *hook_shmat(int id, const void *addr, int flags)
{
	if ((flags & SHM_REMAP) && addr) {
		struct shmid_ds ds;
		uintptr_t a = (uintptr_t)addr;
		if (flags & SHM_RND)
			a &= ~(uintptr_t)(SHMLBA - 1);
		/* the size unknown: everything from there on */
		size_t len = syscall(SYS_shmctl, id, IPC_STAT, &ds) == 0 ? ds.shm_segsz : UINTPTR_MAX - a;
		report((void *)a, len);
	}
	return (void *)syscall(SYS_shmat, id, addr, flags);
}

static int hook_shmdt(const void *addr)
{
	report(addr, UINTPTR_MAX - (uintptr_t)addr);
	return (int)syscall(SYS_shmdt, addr);
}

/* ---- patching ------------------------------------------------------------- */

#if defined(__x86_64__)
#define PATCH_LEN 13

/* movabs $hook, %r11; jmp *%r11 -- r11 is a scratch register at a call, and
 * the syscall instruction clobbers it anyway */
static void patch_code(uint8_t out[PATCH_LEN], void *hook)
{
	uint64_t a = (uint64_t)(uintptr_t)hook;
	out[0] = 0x49;
	out[1] = 0xbb;
	memcpy(out + 2, &a, 8);
	out[10] = 0x41;
	out[11] = 0xff;
	out[12] = 0xe3;
}

static int patch(void *fn, void *hook)
{
	static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
	uint8_t *p = fn;
	if (memcmp(p, endbr64, sizeof endbr64) == 0)
		p += sizeof endbr64; /* an indirect branch must still land on it */
	uint8_t code[PATCH_LEN];
	patch_code(code, hook);
	if (memcmp(p, code, PATCH_LEN) == 0)
		return 0;
	uintptr_t pg = (uintptr_t)p & ~(uintptr_t)4095;
	size_t span = (((uintptr_t)p + PATCH_LEN + 4095) & ~(uintptr_t)4095) - pg;
	if (syscall(SYS_mprotect, pg, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
		return -EACCES;
	memcpy(p, code, PATCH_LEN);
	(void)syscall(SYS_mprotect, pg, span, PROT_READ | PROT_EXEC);
	__builtin___clear_cache((char *)p, (char *)p + PATCH_LEN);
	return 0;
}

struct target {
	const char *name;
	void *hook;
	void *fn;
};

static int install_once(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	if (!libc)
		return -ENOSYS;
	struct target t[] = {
		{ "munmap", (void *)hook_munmap, NULL }, { "mremap", (void *)hook_mremap, NULL },
		{ "madvise", (void *)hook_madvise, NULL }, { "mmap", (void *)hook_mmap, NULL },
		{ "brk", (void *)hook_brk, NULL },       { "shmat", (void *)hook_shmat, NULL },
		{ "shmdt", (void *)hook_shmdt, NULL },
	};
	int n = (int)(sizeof t / sizeof t[0]);
	curbrk = dlsym(libc, "__curbrk");
	int rc = curbrk ? 0 : -ENOENT;
	for (int i = 0; i < n && !rc; i++) {
		t[i].fn = dlsym(libc, t[i].name);
		Dl_info di;
		/* the C library's own code, not an interceptor in front of it */
		if (!t[i].fn || !dladdr(t[i].fn, &di) || !di.dli_fname || !strstr(di.dli_fname, "libc.so"))
			rc = -ENOENT;
	}
	for (int i = 0; i < n && !rc; i++)
		rc = patch(t[i].fn, t[i].hook);
	dlclose(libc);
	return rc;
}
#else
static int install_once(void)
{
	return -ENOSYS;
}
#endif

int ssw_memhook_install(ssw_memhook_fn fn)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static int state = 1; /* 1: not tried; else install_once's answer */
	pthread_mutex_lock(&mu);
	if (state == 1)
		state = install_once();
	int rc = state;
	if (rc == 0) {
		atomic_store_explicit(&hook_fn, fn, memory_order_release);
		atomic_store(&active, fn != NULL);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

bool ssw_memhook_active(void)
{
	return atomic_load_explicit(&active, memory_order_relaxed);
}

uint64_t ssw_memhook_reported(void)
{
	return atomic_load_explicit(&reported, memory_order_relaxed);
}
