#!/usr/bin/env bash
# t_cma_off — SOCKSWITCH_CMA=0 makes a requested rendezvous (SOCKSWITCH_RDMA=read)
# fall back to the ring (no process_vm_readv/writev): frames still arrive
# intact, switched, with no kernel TCP segment. When strace works here, it also
# proves that CMA is used when asked for and not at all with SOCKSWITCH_CMA=0.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

SIZES=102400x4,5242880x3
PAYLOAD=$(ssw_sizes_bytes "$SIZES")

ssw_echo_pair cma0 switched switched 127.0.0.1 "$SIZES" SOCKSWITCH_CMA=0 SOCKSWITCH_RDMA=read
if [ "$ECHO_RC" = 0 ]; then
  ssw_assert_le "cma0: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/cma0-client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_switched "$T/cma0-client.stats" "$PAYLOAD"
  ssw_assert_switched "$T/cma0-server.stats" "$PAYLOAD"
fi

# Which copy path was used: count process_vm_* syscalls of both processes.
# The rendezvous is off by default on shm (the ring is faster there); asked
# for with SOCKSWITCH_RDMA=read it uses CMA, and with SOCKSWITCH_CMA=0 too it
# falls back to the ring.
if ssw_strace_usable; then
  ssw_echo_pair_traced cma-default "$SIZES" SOCKSWITCH_RDMA=read
  ssw_assert_gt "SOCKSWITCH_RDMA=read: process_vm_readv/writev calls (CMA used for large sends)" \
    "$(( $(ssw_syscalls "$T/cma-default" process_vm_readv) + $(ssw_syscalls "$T/cma-default" process_vm_writev) ))" 0
  ssw_echo_pair_traced cma-off "$SIZES" SOCKSWITCH_CMA=0 SOCKSWITCH_RDMA=read
  ssw_assert_eq "SOCKSWITCH_CMA=0: process_vm_readv/writev calls" \
    "$(( $(ssw_syscalls "$T/cma-off" process_vm_readv) + $(ssw_syscalls "$T/cma-off" process_vm_writev) ))" 0
  ssw_assert_switched "$T/cma-off-client.stats" "$PAYLOAD"
else
  echo "# strace cannot trace here: copy-path check skipped"
fi
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
