/* bench_worker.h — what each benchmark case provides to the worker process. */
#ifndef SSW_BENCH_WORKER_H
#define SSW_BENCH_WORKER_H

#include "bench.h"

#include <stdint.h>

/* Both sides of one case.  Each returns 0, or -1 with r->error filled.  The
 * measuring side sets r->ok and the values; the worker prints them.  Every
 * loop is bounded by p->count and by time so that it stops by itself. */
struct bench_roles {
	int (*server)(int lfd, const struct bench_params *p, struct bench_result *r);
	int (*client)(uint16_t port, const struct bench_params *p, struct bench_result *r);
};

extern const struct bench_roles bench_latency_roles;
extern const struct bench_roles bench_turns_roles;
extern const struct bench_roles bench_stream_roles;
extern const struct bench_roles bench_connect_roles;
extern const struct bench_roles bench_epoll_roles;
extern const struct bench_roles bench_manyconns_roles;
extern const struct bench_roles bench_pingpong_roles;
extern const struct bench_roles bench_forkserver_roles;
extern const struct bench_roles bench_sendfile_roles;
extern const struct bench_roles bench_duplex_roles;
extern const struct bench_roles bench_burst_roles;
extern const struct bench_roles bench_forkconn_roles;
extern const struct bench_roles bench_prefork_roles;
extern const struct bench_roles bench_forkexit_roles;

/* bench_latency.c: echoes p->size messages on fd until EOF, then closes it. */
int bench_echo(int fd, const struct bench_params *p, struct bench_result *r);
/* Accepts one connection on lfd and echoes it (bench_echo). */
int bench_echo_server(int lfd, const struct bench_params *p, struct bench_result *r);

/* bench_epoll.c: the epoll echo server, shared with manyconns; the
 * connection count is p->conns, or BENCH_EPOLL_CONNS when 0. */
int bench_epoll_server(int lfd, const struct bench_params *p, struct bench_result *r);

/* bench_stream.c: measure the stream arriving on fd (closed at the end). */
int bench_stream_receive(int fd, const struct bench_params *p, struct bench_result *r);
/* bench_worker.c: exec this worker again with fd kept open, to go on as
 * bench_stream_receive on it in the new image; -1 (r filled) if it failed. */
int bench_worker_reexec(int fd, struct bench_result *r);

/* Records "what: strerror(errno)" in r and returns -1. */
int bench_fail(struct bench_result *r, const char *what);
/* Records msg as is in r and returns -1. */
int bench_fail_msg(struct bench_result *r, const char *msg);

/* How long the side that does not set the pace may wait for the other one
 * beyond p->duration before giving up (process start-up, draining buffers). */
#define BENCH_SLACK_S 10.0

#endif
