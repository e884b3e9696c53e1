#!/usr/bin/env bash
# t_fabric_semantics — the semantics oracle (t_semantics: tests/progs/sem.c,
# each scenario's transcript byte for byte against kernel TCP's) with the
# switched runs over the fabric provider: 127.0.0.0/8 routed over libfabric's
# tcp provider in the test's own network namespace.  The scenarios that
# exercise the transport (close, shutdown, resets, poll/select/epoll, fork,
# exec and SCM_RIGHTS through the relay, sendfile, cork, buffers; not a
# listener across fork, which stops listening on fabric by design); the
# documented differences of fabric connections are listed in t_semantics.sh
# (SEM_OVER=fabric) and reported as XFAIL; epoll_fork's must be a reset (one
# process drives a fabric connection at a time), never a stray byte.
export SEM_OVER=fabric
# Half of them here, half in t_fabric_semantics_b.sh: two CTest entries that
# run side by side (one took two minutes, the longest pole of CI).
export SEM_SCENARIOS=${SEM_SCENARIOS:-"exchange_v4 duplex nb_connect refused_v4 peek waitall dontwait rcvtimeo
  sndtimeo nb_fill fionread shutdown_wr shutdown_rd shutdown_rdwr close_unread close_read close_wakes_poll
  close_wakes_epoll linger0 linger_graceful rst_with_pending epipe kill_clean kill_unread kill_unread_looked kill_read_all fork_child_exit fork_poll_thread fork_epoll_thread
  fork_takeover fork_child_writes shutdown_peer_exited tcpinfo_peer_exited reset_wakes
  kill_reader_blocked poll select"}
exec bash "$(dirname "$0")/t_semantics.sh" "$@"
