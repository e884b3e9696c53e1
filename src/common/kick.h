/* kick.h — waking this process's threads that sleep on a switched socket
 * when a local event changes what they wait for (kick.c).
 *
 * A switched socket's sleepers wait on the provider's doorbells, which only
 * the peer rings: a shutdown() by another thread of this process changes
 * the answer of a recv, send or poll asleep on the same socket (the kernel
 * wakes them: sk_state_change) without any doorbell.  Each thread that
 * sleeps on a switched socket gets an eventfd of its own, made at its
 * first such sleep; a sleep adds it to its pollfds after saying what it
 * sleeps on (ssw_kick_arm), and ssw_kick writes the eventfd of every
 * thread asleep on that key. */
#ifndef SSW_KICK_H
#define SSW_KICK_H

#include <stdbool.h>
#include <stdint.h>

/* The key of a sleep over any switched socket (poll, select). */
#define SSW_KICK_ANY ((const void *)1)

/* Local events so far in this process.  Read before looking at the state a
 * sleep will wait on; if it changed by the time the sleep is armed, look
 * again instead of sleeping (a kick before ssw_kick_arm reaches nobody). */
uint64_t ssw_kick_gen(void);
/* The calling thread is about to sleep on key (a session, or SSW_KICK_ANY):
 * its eventfd, to add to the sleep's pollfds with POLLIN, or -1 when it has
 * none (out of descriptors: the sleep then cannot be kicked). */
int ssw_kick_arm(const void *key);
/* After the sleep: revents of the eventfd's pollfd (drained when it fired;
 * a descriptor the program closed under us is made anew next time). */
void ssw_kick_disarm(short revents);
/* Wake every thread of this process asleep on key or on SSW_KICK_ANY. */
void ssw_kick(const void *key);

#endif
