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
export SEM_SCENARIOS=${SEM_SCENARIOS:-"exchange_v4 duplex nb_connect refused_v4 peek waitall dontwait rcvtimeo
  sndtimeo nb_fill fionread shutdown_wr shutdown_rd shutdown_rdwr close_unread close_read close_wakes_poll
  close_wakes_epoll linger0 linger_graceful rst_with_pending epipe kill_clean kill_unread fork_child_exit
  kill_reader_blocked poll select epoll_lt epoll_et accept_nb backlog_order sockopts dup fork_after_connect
  fork_parent_keeps exec_inherit scm_rights exec_eof iovec sendfile cork_close sendfile_nb
  splice epoll_close_dup epoll_threads epoll_hup_closed epoll_hup_reset rcvbuf_connect epoll_dup_twice epoll_nested epoll_fork oob names_v4
  shut_wakes_recv shut_wakes_send shut_wakes_poll shut_wakes_accept shut_wakes_peer"}
exec bash "$(dirname "$0")/t_semantics.sh" "$@"
