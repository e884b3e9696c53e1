#!/usr/bin/env bash
# t_fabric_semantics_b — the second half of t_fabric_semantics's scenarios
# (the semantics oracle with the switched runs over the fabric provider;
# see t_fabric_semantics.sh for what is run and why).
export SEM_OVER=fabric
export SEM_SCENARIOS=${SEM_SCENARIOS:-"epoll_lt epoll_et accept_nb backlog_order sockopts dup fork_after_connect
  fork_parent_keeps exec_inherit scm_rights exec_eof iovec sendfile cork cork_inherit cork_close sendfile_nb
  splice epoll_close_dup epoll_threads epoll_hup_closed epoll_hup_reset rcvbuf_connect epoll_dup_twice epoll_nested epoll_fork oob oob_new_mark_then_inline oob_peek_waitall names_v4
  shut_wakes_recv shut_wakes_send shut_wakes_poll shut_wakes_hup shut_wakes_accept shut_wakes_peer"}
exec bash "$(dirname "$0")/t_semantics.sh" "$@"
