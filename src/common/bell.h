/* bell.h — a doorbell per process that any process forked from the same
 * ancestor can ring: a futex word in one page of fork-shared memory.  The
 * session rings the process that controls a connection shared by fork
 * when another asks for it (session_swap.c); that process's helper thread
 * sleeps on its own word (switch/share/swap_helper.c). */
#ifndef SSW_BELL_H
#define SSW_BELL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Map the page (once per image; before the forks whose processes ring
 * each other: the session does it when it makes a connection that may
 * need it).  false if it cannot be mapped (no ringing: waits time out). */
bool ssw_bell_init(void);
/* A process that gives up a user id rings and is rung by nobody it was
 * forked from any more (its connections are its own: session_unshare.c):
 * a page of its own. */
void ssw_bell_unshare(void);
/* Wake pid's helper (a word is shared by pids equal modulo its size: a
 * spurious wake is a look at nothing). */
void ssw_bell_ring(pid_t pid);
/* Change pid's word without waking its helper: for a process that reads
 * it at its own pace (an epoll wait told that control of a connection
 * may have left it: switch/events/epoll_ready.c). */
void ssw_bell_bump(pid_t pid);
/* This process's word, to read before looking for work. */
uint32_t ssw_bell_seen(void);
/* Sleep until this process's word differs from `seen`, at most ms. */
void ssw_bell_wait(uint32_t seen, int ms);

#endif
