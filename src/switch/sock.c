/* sock.c — creation and teardown of the switch's socket objects. */
#include "switch/switch.h"

#include "common/log.h"

#include <stdlib.h>

struct ssw_sock *ssw_sock_new(enum ssw_state st, int fd, int family)
{
	struct ssw_sock *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	atomic_init(&s->refs, 1);
	atomic_init(&s->fdrefs, 0);
	pthread_mutex_init(&s->lock, NULL);
	s->state = st;
	s->fd = fd;
	s->family = family;
	s->rcvtimeo_ms = s->sndtimeo_ms = -1;
	return s;
}

void ssw_sock_destroy(struct ssw_sock *s)
{
	if (s->state == SSW_ST_LISTENING)
		ssw_agent_unregister(s);
	if (s->sess) {
		ssw_stats_account_closed(s);
		if (s->shared)
			ssw_session_detach(s->sess); /* another process still has it */
		else
			ssw_session_close(s->sess, s->linger_on && s->linger_s == 0);
	}
	if (s->cep)
		s->prov->conn->close(s->cep, 1);
	for (int i = 0; i < s->npl; i++)
		s->prov->conn->listener_close(s->pl[i]);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
