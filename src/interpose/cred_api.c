/* cred_api.c — setuid and kin: a process that gives up a user id takes its
 * switched connections' memory for itself (switch/share/privdrop.c), so that
 * a child that drops privileges cannot write what its privileged parent
 * follows.  Through the C library's calls only: a raw system call, or a
 * drop of capabilities alone (capset), is not seen (README Security). */
#include "interpose/interpose.h"

#include <stdbool.h>
#include <unistd.h>

static void ids(uid_t v[3])
{
	if (getresuid(&v[0], &v[1], &v[2]) < 0)
		v[0] = v[1] = v[2] = (uid_t)-1;
}

/* Did the process give up a user id it had, one it can no longer switch
 * back to?  A process may take any of its real, effective and saved ids,
 * and one that keeps uid 0 among them may take any id at all: a root
 * daemon's seteuid(user) around a file access, and its seteuid(0) after,
 * give nothing up. */
static bool lost_an_id(const uid_t before[3], const uid_t now[3])
{
	if (now[0] == 0 || now[1] == 0 || now[2] == 0)
		return false;
	for (int i = 0; i < 3; i++)
		if (before[i] != now[0] && before[i] != now[1] && before[i] != now[2])
			return true;
	return false;
}

/* After the C library's call: if it succeeded and an id was given up. */
static int after(int rc, const uid_t before[3])
{
	if (rc != 0)
		return rc;
	int e = errno;
	uid_t now[3];
	ids(now);
	if (lost_an_id(before, now))
		ssw_privdrop_unshare();
	errno = e;
	return rc;
}

EXPORT int setuid(uid_t u)
{
	uid_t b[3];
	ids(b);
	return after(REAL(setuid)(u), b);
}

EXPORT int seteuid(uid_t u)
{
	uid_t b[3];
	ids(b);
	return after(REAL(seteuid)(u), b);
}

EXPORT int setreuid(uid_t r, uid_t e)
{
	uid_t b[3];
	ids(b);
	return after(REAL(setreuid)(r, e), b);
}

EXPORT int setresuid(uid_t r, uid_t e, uid_t s)
{
	uid_t b[3];
	ids(b);
	return after(REAL(setresuid)(r, e, s), b);
}
