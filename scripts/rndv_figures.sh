#!/usr/bin/env bash
# rndv_figures.sh — the figures behind the rendezvous defaults (README,
# "Large sends: the rendezvous and its registration cache"): one-way streams
# of 1 MiB and 4 MiB messages on shm (loopback) and over fabric (two network
# namespaces joined by a veth, libfabric's tcp provider), each in these
# columns, taking turns round after round:
#   kernel     kernel TCP (no switch)
#   ring       switched, the rendezvous off (SOCKSWITCH_RDMA=none: messages
#              through the ring, or fabric messages)
#   rndv       switched, the rendezvous on (the receiver reads the sender's
#              buffer), registration cache on
#   rndv-nc    the same with SOCKSWITCH_REGCACHE=0
# Per column: MB/s at the receiver, CPU (user+system of both processes) per
# MB, and for the rendezvous columns, per send: registrations the caches made
# (pins: regcache_registrations / rndv) and buffers exposed (rdma_regs / rndv:
# over fabric each is a registration of its own, with a key revoked at the
# end), from the sender's SOCKSWITCH_STATS_FILE.
# Each worker is `sockswitch bench-worker` (the bench's own), the receiver
# pinned to the first allowed CPU and the sender to the second.
#
#   sudo bash scripts/rndv_figures.sh [ROUNDS] [SECONDS]   (default 3 rounds of 2 s)
#   RNDV_FIG_CASES="shm:1048576 fab:4194304" to run only some cases,
#   RNDV_FIG_COLS="ring rndv" only some columns
# Root: ip netns.  Prints one line per run and a table of means (min-max).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${SSW_BUILD:-$PWD/build}
CLI=$B/sockswitch
LIB=$B/libsockswitch.so
ROUNDS=${1:-3}
DUR=${2:-2}
CASES=${RNDV_FIG_CASES:-shm:1048576 shm:4194304 fab:1048576 fab:4194304}
read -ra COLS <<<"${RNDV_FIG_COLS:-kernel ring rndv rndv-nc}"
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)"; exit 1; }
T=$(mktemp -d /tmp/rndvfig.XXXXXX)
NSA=rndvfig$$a NSB=rndvfig$$b
cleanup() {
  for ns in $NSA $NSB; do
    for p in $(ip netns pids $ns 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del $ns 2>/dev/null
  done
  rm -rf "$T"
}
trap cleanup EXIT
ip netns add $NSA && ip netns add $NSB && ip link add v$$a type veth peer name v$$b &&
  ip link set v$$a netns $NSA && ip link set v$$b netns $NSB &&
  ip -n $NSA addr add 10.77.201.1/24 dev v$$a && ip -n $NSB addr add 10.77.201.2/24 dev v$$b &&
  ip -n $NSA link set lo up && ip -n $NSB link set lo up &&
  ip -n $NSA link set v$$a up && ip -n $NSB link set v$$b up || { echo "cannot make the namespaces"; exit 1; }
sleep 1
read -r C0 C1 < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }' | head -2 | tr '\n' ' ')
ROUTES='route 10.77.0.0/16 fabric provider=tcp'

col_env() { # COLUMN: the environment of both workers
  case $1 in
    kernel) echo "" ;;
    ring) echo "LD_PRELOAD=$LIB SOCKSWITCH_RDMA=none" ;;
    rndv) echo "LD_PRELOAD=$LIB SOCKSWITCH_RDMA=read SOCKSWITCH_RNDV_THRESHOLD=64K SOCKSWITCH_RNDV_MAX=0" ;;
    rndv-nc) echo "LD_PRELOAD=$LIB SOCKSWITCH_RDMA=read SOCKSWITCH_RNDV_THRESHOLD=64K SOCKSWITCH_RNDV_MAX=0 SOCKSWITCH_REGCACHE=0" ;;
  esac
}

cpu_of() { # PID: utime+stime in seconds (children included)
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15 + $16 + $17) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# one PROVIDER SIZE COLUMN: prints "MBps cpu_ms_per_MB regs_per_send"
one() {
  local prov=$1 size=$2 col=$3 env addr sns cns
  env=$(col_env "$col")
  if [ "$prov" = shm ]; then addr=127.0.0.1 sns=$NSA cns=$NSA; else addr=10.77.201.1 sns=$NSA cns=$NSB; fi
  rm -f "$T/c.stats" "$T/s.out"
  local count=$(( (64 << 30) / size ))
  # shellcheck disable=SC2086
  ip netns exec $sns env -u LD_PRELOAD $env SOCKSWITCH_ROUTES="$ROUTES" taskset -c "$C0" \
    "$CLI" bench-worker --role server --case stream --size "$size" --count $count --warmup 0 --duration "$DUR" \
    --conns 0 --addr "$addr" >"$T/s.out" 2>"$T/s.err" &
  local spid=$! port= i
  for ((i = 0; i < 100; i++)); do port=$(awk '/^port/{print $2}' "$T/s.out" 2>/dev/null); [ -n "$port" ] && break; sleep 0.05; done
  [ "$prov" = fab ] && [ "$col" != kernel ] && sleep 0.5 # the fabric listener follows the kernel one
  # shellcheck disable=SC2086
  ip netns exec $cns env -u LD_PRELOAD $env SOCKSWITCH_ROUTES="$ROUTES" SOCKSWITCH_STATS_FILE="$T/c.stats" \
    taskset -c "$C1" "$CLI" bench-worker --role client --case stream --size "$size" --count $count --warmup 0 \
    --duration "$DUR" --conns 0 --addr "$addr" --port "$port" >"$T/c.out" 2>"$T/c.err" &
  local cpid=$! cs=0 ss=0 c
  # CPU: sampled until each exits (its /proc entry goes with it)
  while kill -0 $cpid 2>/dev/null || kill -0 $spid 2>/dev/null; do
    c=$(cpu_of $cpid); [ -n "$c" ] && [ "$c" != 0 ] && cs=$c
    c=$(cpu_of $spid); [ -n "$c" ] && [ "$c" != 0 ] && ss=$c
    sleep 0.02
  done
  wait $cpid $spid 2>/dev/null
  local res
  res=$(awk '/^result/{print $2, $5}' "$T/s.out")
  [ -n "$res" ] || { echo "FAILED $(tail -1 "$T/s.out" "$T/s.err" "$T/c.err" | tr '\n' ' ')"; return; }
  local mbps samples
  read -r mbps samples <<<"$res"
  local regs rndv keys
  regs=$(awk '/^sockswitch-stats/{for(i=2;i<=NF;i++){split($i,kv,"="); if(kv[1]=="regcache_registrations") s+=kv[2]}} END{print s+0}' "$T/c.stats" 2>/dev/null)
  keys=$(awk '/^sockswitch-stats/{for(i=2;i<=NF;i++){split($i,kv,"="); if(kv[1]=="rdma_regs") s+=kv[2]}} END{print s+0}' "$T/c.stats" 2>/dev/null)
  rndv=$(awk '/^sockswitch-stats/{for(i=2;i<=NF;i++){split($i,kv,"="); if(kv[1]=="rndv") s+=kv[2]}} END{print s+0}' "$T/c.stats" 2>/dev/null)
  awk -v m="$mbps" -v s="$samples" -v z="$size" -v c="$cs" -v d="$ss" -v r="${regs:-0}" -v n="${rndv:-0}" -v k="${keys:-0}" \
    'BEGIN { mb = s * z / 1e6; printf "%.0f %.2f %s %s %s\n", m, (c + d) * 1000 / mb, (n > 0 ? sprintf("%.3f", r / n) : "-"), (n > 0 ? sprintf("%.3f", k / n) : "-"), n }'
}

declare -A SUM MIN MAX CNT CPU REG KEY
for ((r = 1; r <= ROUNDS; r++)); do
  for cs in $CASES; do
    prov=${cs%%:*} size=${cs#*:}
    order=("${COLS[@]}")
    # the side that goes first alternates
    if (( r % 2 == 0 )); then order=(); for ((k = ${#COLS[@]} - 1; k >= 0; k--)); do order+=("${COLS[k]}"); done; fi
    for col in "${order[@]}"; do
      out=$(one "$prov" "$size" "$col")
      echo "round $r $prov $((size >> 20))MiB $col: $out"
      read -r mbps cpu regs keys nr <<<"$out"
      [ "$mbps" = FAILED ] && continue
      k="$prov $size $col"
      SUM[$k]=$(( ${SUM[$k]:-0} + mbps )); CNT[$k]=$(( ${CNT[$k]:-0} + 1 ))
      [ -z "${MIN[$k]:-}" ] || (( mbps < MIN[$k] )) && MIN[$k]=$mbps
      [ -z "${MAX[$k]:-}" ] || (( mbps > MAX[$k] )) && MAX[$k]=$mbps
      CPU[$k]="${CPU[$k]:-} $cpu"
      REG[$k]="${REG[$k]:-} $regs"
      KEY[$k]="${KEY[$k]:-} $keys"
    done
  done
done
echo
printf "%-5s %-6s %-8s %22s %10s %11s %11s\n" prov size column "MB/s mean (min-max)" "CPU ms/MB" "pins/send" "exposed/send"
for cs in $CASES; do
  prov=${cs%%:*} size=${cs#*:}
  for col in "${COLS[@]}"; do
    k="$prov $size $col"
    [ -n "${CNT[$k]:-}" ] || continue
    cpu=$(echo ${CPU[$k]} | tr ' ' '\n' | awk '{s += $1} END {printf "%.2f", s / NR}')
    reg=$(echo ${REG[$k]} | tr ' ' '\n' | awk '$1 != "-" {s += $1; n++} END {if (n) printf "%.3f", s / n; else print "-"}')
    key=$(echo ${KEY[$k]} | tr ' ' '\n' | awk '$1 != "-" {s += $1; n++} END {if (n) printf "%.3f", s / n; else print "-"}')
    printf "%-5s %-6s %-8s %8d (%5d-%5d) %10s %11s %11s\n" "$prov" "$((size >> 20))MiB" "$col" \
      $(( SUM[$k] / CNT[$k] )) "${MIN[$k]}" "${MAX[$k]}" "$cpu" "$reg" "$key"
  done
done
