/* thread.c — the switch's own threads (the housekeeper, the swap helper):
 * detached, small stack, made one way. */
#include "common/sys.h"

#include <pthread.h>

bool ssw_thread_start(void *(*fn)(void *))
{
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 << 10);
	bool ok = pthread_create(&t, &a, fn, NULL) == 0;
	pthread_attr_destroy(&a);
	return ok;
}
