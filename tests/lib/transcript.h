/* transcript.h — the transcript and helpers shared by tests/progs/sem.c and
 * tests/diff (see transcript.c). */
#ifndef SSW_TEST_TRANSCRIPT_H
#define SSW_TEST_TRANSCRIPT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ------------------------------------------------------------ transcript */

extern const char *role;   /* prefix of every line: "server", "client", ... */
extern int rep_fd;         /* a child's report pipe; -1: stdout */
extern pid_t kids[16];     /* children die() and the watchdog kill */
extern int nkids;
extern volatile sig_atomic_t n_sigpipe, n_sigurg;

void write_all_fd(int fd, const void *p, size_t n);
void emit(const char *s, size_t n);
/* One line "ROLE: text" of the transcript. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void kill_kids(void);
/* SIGALRM: a WATCHDOG line, children killed, exit 3. */
void on_alarm(int sig);
/* A step the program cannot go on without failed: FATAL line, exit 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void on_sigpipe(int s);
void on_sigurg(int s);
void handle(int sig, void (*fn)(int));

/* ------------------------------------------------------------ formatting */

const char *ename(int e);
const char *signame(int s);
/* "r" or "-1 ENAME" */
const char *rcs(long r, int e);
/* Run expr, print "label = result", keep errno; value of the expression. */
#define RC(label, expr)                                                       \
	({                                                                    \
		errno = 0;                                                    \
		long r__ = (long)(expr);                                      \
		int e__ = errno;                                              \
		say("%s = %s", (label), rcs(r__, e__));                       \
		errno = e__;                                                  \
		r__;                                                          \
	})

/* bytes as a C string, the first 40 of a long buffer */
const char *esc(const void *p, size_t n);
const char *flagstr(int f);
const char *bits(unsigned ev, bool ep);
#define evstr(e) bits((unsigned)(unsigned short)(e), false)
#define epstr(e) bits((unsigned)(e), true)
uint64_t now_ms(void);

/* ------------------------------------------------------------ observations */

void set_nonblock(int fd, bool on);
short POLL1(int fd, short ev, int ms);
void IOCTL_INT(int fd, unsigned long req, const char *name);
#define ATMARK(fd) IOCTL_INT(fd, SIOCATMARK, "SIOCATMARK")
#define FIONREAD_(fd) IOCTL_INT(fd, FIONREAD, "FIONREAD")
int GETINT(int fd, int lvl, int opt, const char *name);
void SETINT(int fd, int lvl, int opt, const char *name, int v);
void EPW(int ep, int ms);
void EPCTL(int ep, int op, int fd, uint32_t events, uint64_t data, const char *label);

/* ------------------------------------------------------------ addresses */

struct addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

int port_of(const struct addr *a);
void loopback_of(int fam, int port, struct addr *o);
/* "AF_INET 127.0.0.1 len=16 port=set" (never the port itself) */
const char *adesc(const struct addr *a);
/* The same endpoint?  An IPv4 address equals its v4-mapped IPv6 form. */
bool same_ep(const struct addr *x, const struct addr *y);
/* getpeername / getsockname; a failure is printed */
void get_name(int fd, bool peer, struct addr *a);

/* ------------------------------------------------------------ more observations */

void SELECT(int fd, bool r, bool w, bool x, int ms);
const char *tcpstate(int s);
void TCPINFO(int fd);

/* ------------------------------------------------------------ streams */

static inline uint8_t pat(uint64_t i, uint32_t seed)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull + seed;
	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return (uint8_t)(x >> 40);
}

void fill(uint8_t *b, size_t n, uint64_t pos, uint32_t seed);

/* Nonblocking sends until EAGAIN persists past a few settles of settle_us
 * each ("nonblocking sender stopped by EAGAIN: yes"); the total sent. */
size_t fill_nonblocking(int fd, unsigned settle_us);

/* The receive side of a pattern stream: byte count, FNV-1a, first mismatch. */
struct rx {
	size_t got;
	uint32_t fnv;
	bool mismatch;
	uint64_t bad_at;
};
void rx_init(struct rx *r);
void rx_feed(struct rx *r, const uint8_t *b, size_t n, uint64_t start, uint32_t seed);
/* "WHAT N bytes, checksum C, pattern ok"; what == NULL: until EOF, no count */
void rx_say(const struct rx *r, const char *what);

#endif
