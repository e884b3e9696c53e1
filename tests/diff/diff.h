/* diff.h — the differential tester's program model, shared by its parts:
 *
 *   gen.c     a random program for two connected endpoints from a seed, and
 *             the model that keeps it deterministic (what each step may do,
 *             what must have arrived before the next one runs)
 *   ep.c      an endpoint process: runs the steps it is sent, prints what the
 *             application observed (tests/lib/transcript.c's format)
 *   drive.c   one run of a program: the endpoint processes, in lockstep
 *   check.c   kernel TCP against the switch, seed after seed; shrinking
 *   main.c    the command line
 *
 * Determinism.  Both endpoints run one step at a time (the driver sends a
 * step, waits for its reply, then has every process "settle"): a process
 * waits, without printing, until what the model says must have happened has
 * happened (bytes queued, a FIN or reset seen, a blocked thread returned, a
 * child gone).  So no step ever races a segment in flight, and the kernel's
 * transcript is the same run after run; what can still vary with timing
 * (how much a full socket takes, how a stream is cut into reads) is kept out
 * of the transcript, as tests/progs/sem.c does: totals and checksums, yes/no
 * instead of amounts. */
#ifndef SSW_DIFF_H
#define SSW_DIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DIFF_MAX_STEPS 96
#define DIFF_MAX_SUB 6        /* sends in one corked burst */
#define DIFF_WINDOW (48 * 1024) /* most unread bytes a direction may hold: both
				 * kernel TCP (lo and veth) and the rings take
				 * it without blocking or splitting it */
#define DIFF_WAKE_ONE 1000    /* a blocked reader is woken by one send of at most
			       * this (one segment on any path): it returns it whole */

enum actor { AC_M, AC_T, AC_C }; /* main thread, its second thread, forked child */

enum op {
	OP_NONE,
	/* data out (X -> Y) */
	OP_SEND, OP_WRITE, OP_WRITEV, OP_SENDMSG, OP_SENDFILE, OP_SPLICE_IN,
	OP_SEND_OOB,
	OP_BURST,        /* TCP_CORK and/or MSG_MORE sends, pushed before the step ends */
	/* data in */
	OP_RECV, OP_READ, OP_READV, OP_RECVMSG, OP_SPLICE_OUT,
	OP_DRAIN_NOW,    /* nonblocking reads until EAGAIN, 0 or an error */
	/* observations */
	OP_POLL, OP_SELECT, OP_EPOLL_WAIT, OP_FIONREAD, OP_ATMARK, OP_SOERROR,
	OP_TCPINFO, OP_NAMES,
	/* options */
	OP_NONBLOCK, OP_OOBINLINE, OP_NODELAY, OP_LINGER, OP_RCVTIMEO, OP_CORK,
	OP_EPOLL_CTL,
	/* life */
	OP_SHUTDOWN, OP_CLOSE, OP_EXIT, OP_FORK,
	/* a second thread: a blocking call other steps complete */
	OP_THREAD,
	/* big amounts */
	OP_FILL,         /* nonblocking sends until EAGAIN stays */
	OP_DRAIN_FILL,   /* the receiver reads all of it */
	OP_XFER,         /* both sides at once: the sender sends, the receiver reads */
	/* the listener (endpoint A) */
	OP_CONNECT2,     /* B: a second connection, closed at once */
	OP_ACCEPT_NOW,   /* A: accept one from the backlog, close it */
	OP_LPOLL,        /* A: poll the listener */
	OP_LSHUTDOWN,    /* A: shutdown(listener) */
	OP_LCLOSE,       /* A: close(listener) */
	OP__COUNT
};

/* Methods and their sub-kinds */
enum { TH_RECV = 1, TH_POLL, TH_SELECT, TH_EPOLL, TH_ACCEPT, TH_SEND };
enum { BURST_END_UNCORK, BURST_END_NODELAY, BURST_END_SHUTWR, BURST_END_CLOSE, BURST_END_PLAIN };

struct sub { /* one send inside a burst */
	uint8_t op;    /* OP_SEND .. OP_SPLICE_IN */
	uint8_t more;  /* MSG_MORE (send, sendmsg) / SPLICE_F_MORE */
	uint16_t niov;
	uint32_t n;
};

struct step {
	uint8_t ep;      /* 0 = A (acceptor), 1 = B (connector) */
	uint8_t actor;   /* enum actor */
	uint8_t op;      /* enum op */
	uint8_t sub;     /* OP_THREAD: TH_*; OP_SHUTDOWN: how; OP_BURST: cork; ... */
	int32_t a, b, c; /* sizes, flags, events, timeouts: per op */
	uint16_t niov;
	uint8_t nsub;    /* OP_BURST */
	uint8_t end;     /* OP_BURST: BURST_END_* */
	struct sub subs[DIFF_MAX_SUB];
	uint32_t seed;   /* the step's own data pattern */
	uint16_t index;  /* in the generated program (stable through shrinking) */
};

/* What must be true of one endpoint before the next step runs. */
struct settle {
	int32_t fionread_min;   /* -1: not checked */
	uint16_t revents;       /* poll bits that must show */
	uint8_t fd_by;          /* who checks the socket: 0 nobody, 1 main, 2 child */
	uint8_t thr_done;       /* the thread's call must have returned (main waits) */
	uint8_t thr_cause;      /* 1: it was woken by its own process's shutdown */
	uint8_t child_exit;     /* main reaps its child */
	uint8_t main_exit;      /* the driver reaps the main process */
	uint8_t thr_pending;    /* a thread call is under way after this step */
	uint8_t at_end;         /* the program is over: say what is still under way */
	uint16_t delay_ms;      /* the kernel itself wakes the thread this late (a
				 * corked or MSG_MORE send: its 200 ms ceiling) */
	uint8_t held;           /* what arrived was held by the sender (cork, MSG_MORE) */
	uint8_t unsent;         /* the socket sent: nothing may wait in its send queue
				 * (Nagle, an urgent byte's segment) */
};

/* What the driver needs of the model for one step. */
struct annot {
	struct settle st[2];    /* each endpoint's settle after the step */
	int32_t extra;          /* OP_XFER: bytes the receiver had unread before;
				 * OP_DRAIN_FILL: unread before the fill, less
				 * what was read since, plus a blocked send's */
};

struct prog {
	uint32_t seed;
	int profile;            /* enum profile */
	/* set-up */
	int v6;
	int lopt;               /* listener option bits (SET_*) */
	int copt;               /* connector option bits */
	int nb_connect, acc4_nb, keep_listener;
	int light;              /* shm: the switched run settles without FIONREAD (which
				 * stages what it counts: half the seeds see the
				 * switch with data left in its transport) */
	int n;
	struct step s[DIFF_MAX_STEPS];
};

enum profile { PROF_SHM, PROF_FABRIC };
enum { SET_NODELAY = 1, SET_OOBINLINE = 2, SET_CORK = 4 };

/* gen.c */
void diff_gen(struct prog *p, uint32_t seed, int profile);
/* Keep only the steps whose index is in keep[] (n of them), then drop every
 * step the model refuses in the new context; out receives the result. */
void diff_select(const struct prog *in, const uint16_t *keep, int nkeep, struct prog *out);
/* Walk the program through the model: what the driver needs of each step
 * (an[i], may be NULL); false when a step is not valid where it stands. */
bool diff_model(const struct prog *p, struct annot *an, int *bad_step);
void diff_describe(const struct step *s, char *buf, size_t len);
void diff_print(const struct prog *p, FILE *f);
const char *diff_profile_name(int profile);
const char *diff_actor_name(int ep, int actor);

/* The driver's commands to an endpoint process (a pipe each way: commands
 * in, transcript lines out, each reply ending with a line ".ok VALUE"). */
enum { CMD_LISTEN = 1, CMD_CONNECT, CMD_ACCEPT, CMD_EXEC, CMD_SETTLE, CMD_QUIT };
struct cmd {
	int type;
	int slow;               /* deadline multiplier */
	int64_t arg;            /* CMD_CONNECT: port; OP_DRAIN_FILL: bytes; OP_XFER: 0 sender, 1 receiver */
	int32_t extra;          /* struct annot's */
	int v6, lopt, copt, nb_connect, acc4_nb, keep_listener;
	int light;              /* settle without FIONREAD (see struct prog) */
	char addr[64];          /* where A listens ("" loopback) */
	struct step step;
	struct settle st;
};
#define DIFF_LATE_MS 250        /* a woken call that returns later than this (past delay_ms) is late */
#define DIFF_HOLD_MS 200        /* the kernel's ceiling on data held by TCP_CORK or MSG_MORE */

/* drive.c */
struct run_env {
	const char *self;        /* this program, for the endpoints' exec */
	char **envp;             /* the endpoints' environment */
	const char *netns[2];    /* network namespace files (fabric), or NULL */
	const char *addr;        /* where A listens (NULL: loopback) */
	int slow;                /* deadline multiplier (sanitizer builds) */
	const char *errfile;     /* endpoints' stderr */
	bool switched;           /* the switch is preloaded (prog.light applies) */
};
/* Run p; the transcript (malloc'd) in *out; 0, or -1 when the run itself
 * broke (the transcript says how). */
int diff_run(const struct prog *p, const struct run_env *env, char **out);

/* ep.c */
int diff_endpoint_main(int argc, char **argv);

#endif
