/* bench_net.c — blocking TCP to the server's address (127.0.0.1 unless --netns) with only the calls an ordinary program makes. */
#include "bench_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct in_addr server_addr = { .s_addr = 0 };

int net_set_addr(const char *ip)
{
	return inet_pton(AF_INET, ip, &server_addr) == 1 ? 0 : -1;
}

static void loopback(struct sockaddr_in *sa, uint16_t port)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	sa->sin_addr.s_addr = server_addr.s_addr ? server_addr.s_addr : htonl(INADDR_LOOPBACK);
}

/* Small messages must leave at once, or Nagle turns latency into 40 ms ticks. */
static int nodelay(int fd)
{
	int one = 1;
	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int net_listen(uint16_t *port)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	loopback(&sa, 0);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4096) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

int net_accept(int lfd)
{
	int fd;
	do
		fd = accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd >= 0 && nodelay(fd) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

struct sockaddr_in net_server_addr(uint16_t port)
{
	struct sockaddr_in sa;
	loopback(&sa, port);
	return sa;
}

int net_connect(uint16_t port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	loopback(&sa, port);
	if (nodelay(fd) < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int net_read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			if (got == 0)
				return 0;
			errno = EPROTO;
			return -1;
		}
		got += (size_t)r;
	}
	return 1;
}

int net_write_full(int fd, const void *buf, size_t n)
{
	size_t put = 0;
	while (put < n) {
		ssize_t r = write(fd, (const char *)buf + put, n - put);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		put += (size_t)r;
	}
	return 0;
}

int net_round_trip(int fd, void *buf, size_t n)
{
	if (net_write_full(fd, buf, n) < 0)
		return -1;
	int got = net_read_full(fd, buf, n);
	if (got == 0)
		errno = ECONNRESET; /* EOF where an answer was due */
	return got == 1 ? 0 : -1;
}
