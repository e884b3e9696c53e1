/* cred_api.c — setuid and kin: a process whose user ids change takes its
 * switched connections' memory for itself (switch/share/privdrop.c), so that
 * a child that drops privileges cannot write what its privileged parent
 * follows.  Through the C library's calls only: a raw system call, or a
 * drop of capabilities alone (capset), is not seen (README Security). */
#include "interpose/interpose.h"

#include <unistd.h>

static void ids(uid_t v[3])
{
	if (getresuid(&v[0], &v[1], &v[2]) < 0)
		v[0] = v[1] = v[2] = (uid_t)-1;
}

/* After the C library's call: if it succeeded and changed any of the ids. */
static int after(int rc, const uid_t before[3])
{
	if (rc != 0)
		return rc;
	int e = errno;
	uid_t now[3];
	ids(now);
	if (now[0] != before[0] || now[1] != before[1] || now[2] != before[2])
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
