/* exec_api.c — keeps the switch loaded across exec: a program that replaces
 * its environment (envp without LD_PRELOAD) still gets libsockswitch.so and
 * the SOCKSWITCH_* settings, as `sockswitch run` promised. */
#include "interpose/real.h"
#include "switch/switch.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

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

/* Build envp + our preload + SOCKSWITCH_* of ours that envp lacks.  Returns
 * envp itself when nothing is missing, NULL on allocation failure. */
static char **fix_env(char *const envp[])
{
	const char *self = self_path();
	if (!self[0] || getenv("SOCKSWITCH_NO_EXEC_KEEP"))
		return (char **)envp;
	const char *pre = find(envp, "LD_PRELOAD", 10);
	bool need_pre = !pre || !strstr(pre, self);
	int n = 0, extra = 0;
	while (envp && envp[n])
		n++;
	for (int i = 0; environ && environ[i]; i++) {
		if (strncmp(environ[i], "SOCKSWITCH_", 11))
			continue;
		const char *eq = strchr(environ[i], '=');
		if (eq && !find(envp, environ[i], (size_t)(eq - environ[i])))
			extra++;
	}
	if (!need_pre && !extra)
		return (char **)envp;
	char **out = calloc((size_t)(n + extra + 2), sizeof *out);
	if (!out)
		return NULL;
	int k = 0;
	for (int i = 0; i < n; i++)
		if (!need_pre || strncmp(envp[i], "LD_PRELOAD=", 11))
			out[k++] = envp[i];
	if (need_pre) {
		size_t len = strlen(self) + (pre ? strlen(pre) : 0) + 16;
		char *v = malloc(len);
		if (!v) {
			free(out);
			return NULL;
		}
		snprintf(v, len, "LD_PRELOAD=%s%s%s", self, pre && *pre ? ":" : "", pre ? pre : "");
		out[k++] = v;
	}
	for (int i = 0; environ && environ[i]; i++) {
		if (strncmp(environ[i], "SOCKSWITCH_", 11))
			continue;
		const char *eq = strchr(environ[i], '=');
		if (eq && !find(envp, environ[i], (size_t)(eq - environ[i])))
			out[k++] = environ[i];
	}
	out[k] = NULL;
	return out;
}

/* fork: a switched connection is held by both processes afterwards. */
EXPORT pid_t fork(void)
{
	if (!ssw_real.fork)
		ssw_real_init();
	ssw_fork_begin();
	pid_t p = ssw_real.fork();
	int e = errno;
	ssw_fork_end(p);
	errno = e;
	return p;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	char **e = fix_env(envp);
	int r = REAL(execve)(path, argv, e ? e : envp);
	/* only reached on failure; the copy is lost on success anyway */
	return r;
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	char **e = fix_env(envp);
	return REAL(execvpe)(file, argv, e ? e : envp);
}

EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	char **e = fix_env(envp);
	int r = REAL(posix_spawn)(pid, path, fa, at, argv, e ? e : envp);
	if (e && e != envp)
		free(e);
	return r;
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	char **e = fix_env(envp);
	int r = REAL(posix_spawnp)(pid, file, fa, at, argv, e ? e : envp);
	if (e && e != envp)
		free(e);
	return r;
}
