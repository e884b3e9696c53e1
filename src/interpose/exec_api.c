/* exec_api.c — keeps the switch loaded across exec: a program that replaces
 * its environment (envp without LD_PRELOAD) still gets libsockswitch.so and
 * the SOCKSWITCH_* settings, as `sockswitch run` promised. */
#include "interpose/interpose.h"

#include "common/forklocal.h"
#include "common/params.h"

#include <spawn.h>
#include <stdarg.h>
#include <alloca.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static const char *self_path(void)
{
	static char path[4096];
	if (!path[0]) {
		Dl_info di;
		if (dladdr((void *)self_path, &di) && di.dli_fname && di.dli_fname[0] == '/')
			snprintf(path, sizeof path, "%s", di.dli_fname);
	}
	return path;
}

static const char *find(char *const env[], const char *key, size_t klen)
{
	for (int i = 0; env && env[i]; i++)
		if (!strncmp(env[i], key, klen) && env[i][klen] == '=')
			return env[i] + klen + 1;
	return NULL;
}

/* The new image gets the switch back, whatever its environment says. */
static bool keep_switch(const char *self)
{
	return self[0] && ssw_param_choice(SSW_P_NO_EXEC_KEEP) != 1;
}

/* Build envp + our preload + SOCKSWITCH_* of ours that envp lacks, and the
 * new image's SOCKSWITCH_INHERIT (inherit: "" none; any other in envp is
 * dropped: it names descriptors of an older exec).  Returns envp itself
 * when nothing changes, NULL on allocation failure. */
static char **fix_env(char *const envp[], const char *inherit)
{
	static const char ik[] = "SOCKSWITCH_INHERIT";
	const char *self = self_path();
	bool keep = keep_switch(self);
	const char *pre = find(envp, "LD_PRELOAD", 10);
	bool need_pre = keep && (!pre || !strstr(pre, self));
	bool stale = find(envp, ik, sizeof ik - 1) != NULL;
	int n = 0, extra = inherit[0] ? 1 : 0;
	while (envp && envp[n])
		n++;
	for (int i = 0; keep && environ && environ[i]; i++) {
		if (strncmp(environ[i], "SOCKSWITCH_", 11) || !strncmp(environ[i], ik, sizeof ik - 1))
			continue;
		const char *eq = strchr(environ[i], '=');
		if (eq && !find(envp, environ[i], (size_t)(eq - environ[i])))
			extra++;
	}
	if (!need_pre && !extra && !stale)
		return (char **)envp;
	char **out = calloc((size_t)(n + extra + 2), sizeof *out);
	if (!out)
		return NULL;
	int k = 0;
	for (int i = 0; i < n; i++)
		if ((!need_pre || strncmp(envp[i], "LD_PRELOAD=", 11)) &&
		    (strncmp(envp[i], ik, sizeof ik - 1) || envp[i][sizeof ik - 1] != '='))
			out[k++] = envp[i];
	if (need_pre) {
		/* our own preload list as it was given to us (a sanitizer's
		 * runtime must stay first), or the library alone */
		const char *mine = find(environ, "LD_PRELOAD", 10);
		if (!mine || !strstr(mine, self))
			mine = self;
		size_t len = strlen(mine) + (pre ? strlen(pre) : 0) + 16;
		char *v = malloc(len);
		if (!v) {
			free(out);
			return NULL;
		}
		snprintf(v, len, "LD_PRELOAD=%s%s%s", mine, pre && *pre ? ":" : "", pre ? pre : "");
		out[k++] = v;
	}
	for (int i = 0; keep && environ && environ[i]; i++) {
		if (strncmp(environ[i], "SOCKSWITCH_", 11) || !strncmp(environ[i], ik, sizeof ik - 1))
			continue;
		const char *eq = strchr(environ[i], '=');
		if (eq && !find(envp, environ[i], (size_t)(eq - environ[i])))
			out[k++] = environ[i];
	}
	if (inherit[0]) {
		size_t len = sizeof ik + strlen(inherit) + 1;
		char *v = malloc(len);
		if (v) {
			snprintf(v, len, "%s=%s", ik, inherit);
			out[k++] = v;
		}
	}
	out[k] = NULL;
	return out;
}

/* fork: a switched connection is held by both processes afterwards. */
EXPORT SSW_FORK_TEXT pid_t fork(void)
{
	if (!ssw_real.fork)
		ssw_real_init();
	ssw_fork_begin();
	pid_t p = ssw_real.fork();
	int e = errno;
	ssw_fork_end(p);
	/* errno sits in a page the fork write-protected: written only when
	 * ssw_fork_end changed it (a fault in each process, issue 18) */
	if (errno != e)
		errno = e;
	return p;
}

/* The new image will have this switch loaded (exec_image.c): it may take
 * its connections over itself. */
static bool new_image_switched(const char *file, bool search, char *const envp[])
{
	const char *self = self_path();
	if (!self[0] || !ssw_has_switched() || ssw_param_choice(SSW_P_FAULT) == 4 /* relay (tests, bench) */)
		return false;
	const char *pre = find(envp, "LD_PRELOAD", 10);
	bool preloaded = keep_switch(self) || (pre && strstr(pre, self));
	return ssw_exec_image_loads_switch(file, search, preloaded, self);
}

/* Every exec goes through here: switched connections the new program
 * inherits are taken over by its switch, or handed to relays (relay.h). */
static int do_exec(int (*fn)(const char *, char *const[], char *const[]), const char *path, bool search,
		   char *const argv[], char *const envp[])
{
	struct ssw_exec_undo u;
	ssw_exec_prepare(true, new_image_switched(path, search, envp), &u);
	char **e = fix_env(envp, u.inherit);
	int r = fn(path, argv, e ? e : envp);
	int err = errno;
	/* only reached on failure; the copies are lost on success anyway */
	ssw_exec_failed(&u);
	if (e && e != envp)
		free(e);
	errno = err;
	return r;
}

/* vfork: a child that shares our memory cannot hand connections to relays
 * before its exec, so while any socket is switched vfork is a fork (which
 * POSIX allows); otherwise the real one.  A C wrapper cannot call the real
 * vfork (the child would return through a frame the parent needs), so an
 * assembly stub asks which one and jumps to it. */
__attribute__((used)) void *ssw_vfork_target(void)
{
	if (!ssw_real.vfork)
		ssw_real_init();
	if (ssw_has_switched() || !ssw_real.vfork)
		return (void *)fork;
	return (void *)ssw_real.vfork;
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork,@function\n"
	"vfork:\n"
	"\tsub $8, %rsp\n"
	"\tcall ssw_vfork_target\n"
	"\tadd $8, %rsp\n"
	"\tjmp *%rax\n"
	".size vfork, .-vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork,%function\n"
	"vfork:\n"
	"\tstp x29, x30, [sp, #-16]!\n"
	"\tbl ssw_vfork_target\n"
	"\tldp x29, x30, [sp], #16\n"
	"\tbr x0\n"
	".size vfork, .-vfork\n");
#endif

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	if (!ssw_real.execve)
		ssw_real_init();
	return do_exec(ssw_real.execve, path, false, argv, envp);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	if (!ssw_real.execvpe)
		ssw_real_init();
	return do_exec(ssw_real.execvpe, file, true, argv, envp);
}

EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

/* The C library's execl family calls its own execve, out of our reach. */
#define ARGV_FROM_VA(arg0, ap, argv)                                   \
	do {                                                                     \
		int n_ = 1;                                                      \
		va_list c_;                                                      \
		va_copy(c_, ap);                                                 \
		while (va_arg(c_, char *))                                       \
			n_++;                                                    \
		va_end(c_);                                                      \
		argv = alloca(sizeof(char *) * (size_t)(n_ + 1));                \
		argv[0] = (char *)(arg0);                                        \
		for (int i_ = 1; i_ <= n_; i_++)                                 \
			argv[i_] = va_arg(ap, char *);                           \
	} while (0)

EXPORT int execl(const char *path, const char *arg, ...)
{
	char **argv;
	va_list ap;
	va_start(ap, arg);
	ARGV_FROM_VA(arg, ap, argv);
	va_end(ap);
	return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
	char **argv;
	va_list ap;
	va_start(ap, arg);
	ARGV_FROM_VA(arg, ap, argv);
	va_end(ap);
	return execvpe(file, argv, environ);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
	char **argv, **envp = NULL;
	va_list ap;
	va_start(ap, arg);
	ARGV_FROM_VA(arg, ap, argv);
	envp = va_arg(ap, char **);
	va_end(ap);
	return execve(path, argv, envp);
}

/* posix_spawn: the child is a new program at once; what it inherits is
 * relayed, and this process keeps using the same fds (through the relay). */
static int do_spawn(int (*fn)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
			      char *const[], char *const[]),
		    pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at,
		    char *const argv[], char *const envp[])
{
	struct ssw_exec_undo u;
	ssw_exec_prepare(false, false, &u);
	char **e = fix_env(envp, u.inherit);
	int r = fn(pid, path, fa, at, argv, e ? e : envp);
	if (e && e != envp)
		free(e);
	return r;
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	if (!ssw_real.posix_spawn)
		ssw_real_init();
	return do_spawn(ssw_real.posix_spawn, pid, path, fa, at, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	if (!ssw_real.posix_spawnp)
		ssw_real_init();
	return do_spawn(ssw_real.posix_spawnp, pid, file, fa, at, argv, envp);
}
