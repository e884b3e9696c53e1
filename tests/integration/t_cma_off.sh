#!/usr/bin/env bash
# t_cma_off — SOCKSWITCH_CMA=0 forces large sends through the ring (no
# process_vm_readv/writev): 5 MiB frames still arrive intact, switched, with no
# kernel TCP segment. When strace works here, it also proves that CMA is used by
# default and not at all with SOCKSWITCH_CMA=0.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

SIZES=102400x4,5242880x3
PAYLOAD=$(ssw_sizes_bytes "$SIZES")

ssw_echo_pair cma0 switched switched 127.0.0.1 "$SIZES" SOCKSWITCH_CMA=0
if [ "$ECHO_RC" = 0 ]; then
  ssw_assert_le "cma0: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/cma0-client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_switched "$T/cma0-client.stats" "$PAYLOAD"
  ssw_assert_switched "$T/cma0-server.stats" "$PAYLOAD"
fi

# Which copy path was used: count process_vm_* syscalls of both processes.
if ssw_strace_usable; then
  ssw_echo_pair_traced cma-default "$SIZES"
  ssw_assert_gt "default: process_vm_readv/writev calls (CMA used for large sends)" \
    "$(( $(ssw_syscalls "$T/cma-default" process_vm_readv) + $(ssw_syscalls "$T/cma-default" process_vm_writev) ))" 0
  ssw_echo_pair_traced cma-off "$SIZES" SOCKSWITCH_CMA=0
  ssw_assert_eq "SOCKSWITCH_CMA=0: process_vm_readv/writev calls" \
    "$(( $(ssw_syscalls "$T/cma-off" process_vm_readv) + $(ssw_syscalls "$T/cma-off" process_vm_writev) ))" 0
  ssw_assert_switched "$T/cma-off-client.stats" "$PAYLOAD"
else
  echo "# strace cannot trace here: copy-path check skipped"
fi
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
