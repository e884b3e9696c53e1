/* exec_image.c — will the program an exec starts load this very switch?
 * Only then can it take its connections over itself (switch/share/
 * handover.c); any doubt and they go to relays, which serve any program.
 *
 * The dynamic loader preloads us when the new environment names us
 * (exec_api.c puts us back unless SOCKSWITCH_NO_EXEC_KEEP), the program is
 * dynamically linked for our machine (a script's interpreter, followed as
 * the kernel does), and the exec is not a secure one (set-user-ID or
 * set-group-ID bits, file capabilities: the loader then ignores
 * LD_PRELOAD).  And the library file must still be the one this image
 * runs: a package upgraded since writes a new file whose switch may read
 * the state differently. */
#include "interpose/interpose.h"

#include "common/sys.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#if defined(__x86_64__)
#define OUR_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define OUR_MACHINE EM_AARCH64
#endif

#define SCRIPT_DEPTH 4 /* the kernel's own limit on interpreters of interpreters */

/* The file mapped in this image as `self` is the one at that path now. */
static bool same_library(const char *self)
{
	struct stat now;
	if (!self[0] || stat(self, &now) < 0)
		return false;
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return false;
	char line[4608];
	size_t sl = strlen(self);
	bool same = false;
	while (fgets(line, sizeof line, f)) {
		unsigned maj, min;
		unsigned long ino;
		int at = 0;
		if (sscanf(line, "%*s %*s %*s %x:%x %lu %n", &maj, &min, &ino, &at) != 3 || !at)
			continue;
		const char *path = line + at;
		if (strncmp(path, self, sl) || (path[sl] != '\n' && path[sl] != '\0'))
			continue; /* another file, or ours replaced: "... (deleted)" */
		same = ino == now.st_ino && makedev(maj, min) == now.st_dev;
		break;
	}
	fclose(f);
	return same;
}

/* The file exec would run for `file` (execvp's search when it has no '/'). */
static bool resolve(const char *file, bool search, char *out, size_t len)
{
	if (!search || strchr(file, '/'))
		return snprintf(out, len, "%s", file) < (int)len;
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/bin:/usr/bin";
	while (*path) {
		size_t dl = strcspn(path, ":");
		if (snprintf(out, len, "%.*s%s%s", (int)dl, path, dl ? "/" : "", file) < (int)len &&
		    access(out, X_OK) == 0)
			return true;
		path += dl + (path[dl] == ':');
	}
	return false;
}

static bool loads_preload(const char *path, int depth)
{
#ifndef OUR_MACHINE
	(void)path;
	(void)depth;
	return false;
#else
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat st;
	ElfW(Ehdr) eh;
	char head[256];
	bool ok = false;
	ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && !(st.st_mode & (S_ISUID | S_ISGID)) &&
			    fgetxattr(fd, "security.capability", NULL, 0) < 0
		    ? pread(fd, head, sizeof head - 1, 0)
		    : -1;
	if (n >= 2 && head[0] == '#' && head[1] == '!' && depth < SCRIPT_DEPTH) {
		head[n] = '\0';
		char *p = head + 2;
		p += strspn(p, " \t");
		p[strcspn(p, " \t\n")] = '\0';
		ok = *p == '/' && loads_preload(p, depth + 1);
	} else if (n >= (ssize_t)sizeof eh) {
		memcpy(&eh, head, sizeof eh);
		if (!memcmp(eh.e_ident, ELFMAG, SELFMAG) && eh.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) &&
		    eh.e_machine == OUR_MACHINE && eh.e_phentsize == sizeof(ElfW(Phdr)) && eh.e_phnum && eh.e_phnum < 256) {
			ElfW(Phdr) ph[256];
			size_t pl = sizeof ph[0] * eh.e_phnum;
			if (pread(fd, ph, pl, (off_t)eh.e_phoff) == (ssize_t)pl)
				for (int i = 0; i < eh.e_phnum && !ok; i++)
					ok = ph[i].p_type == PT_INTERP; /* dynamically linked: the loader runs */
		}
	}
	sys_close(fd);
	return ok;
#endif
}

bool ssw_exec_image_loads_switch(const char *file, bool search, bool preloaded, const char *self)
{
	char path[4096];
	return preloaded && file && resolve(file, search, path, sizeof path) && loads_preload(path, 0) &&
	       same_library(self);
}
