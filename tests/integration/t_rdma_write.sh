#!/usr/bin/env bash
# t_rdma_write — SOCKSWITCH_RDMA=write forces the RDMA-write rendezvous for large
# sends (receiver exposes a sink, sender writes into it): 5 MiB frames arrive
# intact, switched, with no kernel TCP segment. When strace works here it also
# checks the copy primitive: process_vm_writev moves the data, process_vm_readv
# only reads the receiver's exposure slots (revocation).
# With SOCKSWITCH_FAULT=async both rendezvous complete through poll_cq.
source "$(dirname "$0")/lib.sh"
ssw_enter_netns "$@"
ssw_setup_preload
ssw_tmpdir

SIZES=102400x4,5242880x3
PAYLOAD=$(ssw_sizes_bytes "$SIZES")

ssw_echo_pair rdmaw switched switched 127.0.0.1 "$SIZES" SOCKSWITCH_RDMA=write
if [ "$ECHO_RC" = 0 ]; then
  ssw_assert_le "rdmaw: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/rdmaw-client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_switched "$T/rdmaw-client.stats" "$PAYLOAD"
  ssw_assert_switched "$T/rdmaw-server.stats" "$PAYLOAD"
fi

# a smaller rendezvous threshold must work too (more messages take the RDMA path)
ssw_echo_pair rdmaw-thr switched switched 127.0.0.1 "4096x50,65536x20" \
  SOCKSWITCH_RDMA=write SOCKSWITCH_RNDV_THRESHOLD=4096
if [ "$ECHO_RC" = 0 ]; then
  ssw_assert_le "rdmaw-thr: kernel TCP segments during the payload phase" \
    "$(ssw_kv "$T/rdmaw-thr-client.out" outsegs_delta)" "$SSW_OUTSEGS_SLACK"
  ssw_assert_switched "$T/rdmaw-thr-client.stats" "$(ssw_sizes_bytes 4096x50,65536x20)"
fi

# SOCKSWITCH_FAULT=async: the shm provider completes every RDMA transfer
# later, through poll_cq (newest first when two are queued), as an RDMA
# provider does; frames of MiBs by either rendezvous still arrive intact.
ASIZES=102400x4,2097152x2
for m in read write; do
  ssw_echo_pair "async-$m" switched switched 127.0.0.1 "$ASIZES" \
    SOCKSWITCH_RDMA=$m SOCKSWITCH_RNDV_MAX=0 SOCKSWITCH_FAULT=async
  [ "$ECHO_RC" = 0 ] && ssw_assert_switched "$T/async-$m-client.stats" "$(ssw_sizes_bytes "$ASIZES")"
done

if ssw_strace_usable; then
  ssw_echo_pair_traced rdmaw-traced "$SIZES" SOCKSWITCH_RDMA=write
  ssw_assert_gt "SOCKSWITCH_RDMA=write: process_vm_writev calls" \
    "$(ssw_syscalls "$T/rdmaw-traced" process_vm_writev)" 0
  # the writer reads the receiver's exposure slot (48 bytes) before each
  # copy (revocation, shm_vouch.c); no data moves that way
  ssw_assert_gt "SOCKSWITCH_RDMA=write: exposure checks (48-byte process_vm_readv)" \
    "$(cat "$T"/rdmaw-traced-*.strace | grep "process_vm_readv(" | grep -c "iov_len=48}], 1, \[{iov_base=0x[0-9a-f]*, iov_len=48}" || true)" 0
  ssw_assert_eq "SOCKSWITCH_RDMA=write: process_vm_readv calls moving data" \
    "$(cat "$T"/rdmaw-traced-*.strace | grep "process_vm_readv(" | grep -vc "iov_len=48}], 1, \[{iov_base=0x[0-9a-f]*, iov_len=48}" || true)" 0
else
  echo "# strace cannot trace here: copy-primitive check skipped"
fi
ssw_assert_no_sanitizer_report "$T"/*.err
ssw_finish
