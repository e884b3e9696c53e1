/* portfile.h — a test server's listener whose port the test script reads
 * from a file (idlesend.c, fillexit.c). */
#ifndef SSW_TEST_PORTFILE_H
#define SSW_TEST_PORTFILE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

/* Listens on an ephemeral port of every address (backlog 4) and writes
 * the port to path: the listener, or -1 with *what naming the step that
 * failed ("listen", "port file"). */
static inline int listen_port_file(const char *path, const char **what)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0) {
		*what = "listen";
		return -1;
	}
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f)) {
		*what = "port file";
		return -1;
	}
	return l;
}

#endif
