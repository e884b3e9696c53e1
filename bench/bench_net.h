/* bench_net.h — the plain blocking socket calls the bench workers are allowed to make. */
#ifndef SSW_BENCH_NET_H
#define SSW_BENCH_NET_H

#include <stddef.h>
#include <netinet/in.h>
#include <stdint.h>

/* The server's IPv4 address for both calls below (default 127.0.0.1); -1 if not one. */
int net_set_addr(const char *ip);
/* Listening socket on the server's address with a kernel-chosen port (so parallel runs
 * and leftover TIME_WAIT sockets never collide); returns fd, -1 on error. */
int net_listen(uint16_t *port);
/* accept() then TCP_NODELAY; returns fd or -1. */
int net_accept(int lfd);
/* socket() + TCP_NODELAY + connect() to the server's address:port; returns fd or -1. */
int net_connect(uint16_t port);
/* The server's address at port, for a connect the caller makes itself. */
struct sockaddr_in net_server_addr(uint16_t port);
/* Reads exactly n bytes: 1 done, 0 EOF before the first byte, -1 error or EOF midway. */
int net_read_full(int fd, void *buf, size_t n);
/* Writes exactly n bytes: 0 done, -1 error. */
int net_write_full(int fd, const void *buf, size_t n);
/* Writes n bytes and reads n back into buf: 0 done, -1 error or EOF. */
int net_round_trip(int fd, void *buf, size_t n);

#endif
