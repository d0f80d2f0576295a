#!/usr/bin/env bash
# tests/lab/lab.sh: a small network lab made of network namespaces, for
# tests and benchmarks that need several hosts with several NICs on one
# machine.  Sourced as a library by tests and bench scripts, or run as a
# command (see lab_usage below).
#
# A host is a namespace named ternlab-<run>-<host>.  lab_link joins two hosts
# with N veth pairs: pair i gets its own subnet, so which NIC carries a
# connection follows from the peer address alone (no policy routing):
#   IPv4 198.18.<s>.<h>/24, IPv6 2001:db8:<s>::<h>/64 (nodad: usable at once)
# where s counts subnets from 0 over the whole lab and h is 1 for the first
# host of the link, 2 for the second (both inside 198.18.0.0/15 and
# 2001:db8::/32, the ranges reserved for benchmarks and documentation).  NICs
# are named nic0, nic1, ... in each host, in the order they were made, so the
# two ends of a 2-host lab carry the same names (tern pairs NICs by name).
#
# Rate limits are tc tbf on the egress of both ends (tc netem is not in
# every kernel, tbf is).  Link down (lab_down) is what a pulled cable does:
# packets vanish, nobody gets a reset.
#
# Everything made is removed by lab_cleanup, run on EXIT, INT and TERM once
# lab_init set the trap.  A machine where the lab cannot run (not root, no
# ip or tc, no namespaces) makes lab_require print "SKIP: <why>" and exit 77,
# CTest's SKIP_RETURN_CODE for these tests.

LAB_RUN=${LAB_RUN:-}
LAB_HOSTS=()          # host names made in this run
LAB_SUBNET=0          # next subnet number
declare -A LAB_NICS   # host -> NICs made so far

lab_skip() {
    echo "SKIP: $*"
    exit 77
}

# Exit 77 (with the reason) unless this machine can build a lab.
lab_require() {
    [ "$(id -u)" = 0 ] || lab_skip "the network lab needs root (network namespaces, veth, tc)"
    command -v ip >/dev/null 2>&1 || lab_skip "no 'ip' command (install iproute2)"
    command -v tc >/dev/null 2>&1 || lab_skip "no 'tc' command (install iproute2)"
    command -v python3 >/dev/null 2>&1 || lab_skip "no python3 (the lab's reachability check)"
    local probe="ternlab-probe-$$"
    ip netns add "$probe" 2>/dev/null || lab_skip "cannot create a network namespace here (container without CAP_SYS_ADMIN?)"
    local ok=1
    ip link add lp0 netns "$probe" type veth peer name lp1 netns "$probe" 2>/dev/null || ok=0
    if [ $ok = 1 ]; then
        ip netns exec "$probe" tc qdisc add dev lp0 root tbf rate 1gbit burst 256k latency 50ms \
            2>/dev/null || ok=2
    fi
    ip netns del "$probe" 2>/dev/null
    [ $ok = 1 ] || {
        [ $ok = 0 ] && lab_skip "cannot create veth pairs in a namespace (no veth module?)"
        lab_skip "tc tbf is not available (no sch_tbf module?)"
    }
}

lab_ns() { echo "ternlab-$LAB_RUN-$1"; }

# Remove what runs killed without a chance to clean up (SIGKILL, a CTest
# timeout) left: runs whose name ends in the pid of a process that is gone.
lab_reap_stale() {
    local run pid
    for run in $(ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^ternlab-\(.*\)-[^-]*$/\1/p' | sort -u); do
        pid=$(echo "$run" | sed -n 's/.*[^0-9]\([0-9][0-9]*\)$/\1/p')
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null || continue
        echo "lab: removing the namespaces of run $run, whose process is gone"
        LAB_RUN=$run lab_cleanup
    done
}

# Start a lab; RUN names it (default: the shell's pid), unique per machine.
# A name ending in the pid of its shell lets a later run remove what a
# killed one left (lab_reap_stale).
lab_init() {
    lab_reap_stale
    LAB_RUN=${1:-$$}
    LAB_HOSTS=()
    LAB_SUBNET=0
    trap lab_cleanup EXIT
    trap 'lab_cleanup; exit 130' INT
    trap 'lab_cleanup; exit 143' TERM
}

# Remove every namespace of this run, ending the processes left in them
# (a namespace outlives its name while a process holds it).
lab_cleanup() {
    local ns p
    [ -n "$LAB_RUN" ] || return 0
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^ternlab-$LAB_RUN-"); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
        sleep 0.2
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    return 0
}

lab_host() {
    local ns
    ns=$(lab_ns "$1")
    ip netns add "$ns" || { echo "lab: cannot create namespace $ns" >&2; return 1; }
    ip -n "$ns" link set lo up
    LAB_HOSTS+=("$1")
    LAB_NICS[$1]=0
}

lab_exec() {
    local h=$1
    shift
    ip netns exec "$(lab_ns "$h")" "$@"
}

# lab_link A B N [RATE]: N veth pairs between hosts A and B, each on its own
# subnet; RATE (e.g. 2gbit) limits both directions of every pair.
lab_link() {
    local a=$1 b=$2 n=${3:-1} rate=${4:-} i
    for ((i = 0; i < n; i++)); do
        local s=$LAB_SUBNET na="nic${LAB_NICS[$a]}" nb="nic${LAB_NICS[$b]}"
        LAB_SUBNET=$((s + 1))
        LAB_NICS[$a]=$((LAB_NICS[$a] + 1))
        LAB_NICS[$b]=$((LAB_NICS[$b] + 1))
        ip link add "$na" netns "$(lab_ns "$a")" type veth peer name "$nb" netns "$(lab_ns "$b")" ||
            { echo "lab: cannot create veth $a:$na <-> $b:$nb" >&2; return 1; }
        lab_nic_up "$a" "$na" "$s" 1 "$rate" || return 1
        lab_nic_up "$b" "$nb" "$s" 2 "$rate" || return 1
    done
}

# lab_link_one_subnet A B N [RATE]: N veth pairs between A and B, all of
# them on one subnet (A's NIC i .(2i+1), B's .(2i+2)): hosts whose NICs
# share a route, as many multi-NIC hosts without policy routing are.
lab_link_one_subnet() {
    local a=$1 b=$2 n=${3:-1} rate=${4:-} i s=$LAB_SUBNET
    LAB_SUBNET=$((s + 1))
    for ((i = 0; i < n; i++)); do
        local na="nic${LAB_NICS[$a]}" nb="nic${LAB_NICS[$b]}"
        LAB_NICS[$a]=$((LAB_NICS[$a] + 1))
        LAB_NICS[$b]=$((LAB_NICS[$b] + 1))
        ip link add "$na" netns "$(lab_ns "$a")" type veth peer name "$nb" netns "$(lab_ns "$b")" ||
            { echo "lab: cannot create veth $a:$na <-> $b:$nb" >&2; return 1; }
        lab_nic_up "$a" "$na" "$s" $((2 * i + 1)) "$rate" || return 1
        lab_nic_up "$b" "$nb" "$s" $((2 * i + 2)) "$rate" || return 1
    done
}

# lab_switch SW: a switch, i.e. a namespace holding one bridge (br0) with
# a subnet of its own; lab_plug joins hosts to it.  Every host plugged into
# one switch reaches every other on that subnet, as hosts on one rack
# switch do (a metadata cluster, several engines).
declare -A LAB_SW_SUBNET LAB_SW_PORTS
lab_switch() {
    local sw=$1 ns
    lab_host "$sw" || return 1
    ns=$(lab_ns "$sw")
    ip -n "$ns" link add br0 type bridge || { echo "lab: cannot create a bridge in $ns" >&2; return 1; }
    ip -n "$ns" link set br0 up
    LAB_SW_SUBNET[$sw]=$LAB_SUBNET
    LAB_SW_PORTS[$sw]=0
    LAB_SUBNET=$((LAB_SUBNET + 1))
}

# lab_plug HOST SW [RATE]: a NIC of HOST on switch SW (veth, the switch end
# in br0): HOST's address there is 198.18.<s>.<n> / 2001:db8:<s>::<n>, n
# counting from 1 in the order hosts were plugged.
lab_plug() {
    local h=$1 sw=$2 rate=${3:-} nic port n
    nic="nic${LAB_NICS[$h]}"
    n=$((LAB_SW_PORTS[$sw] + 1))
    port="p$n"
    LAB_NICS[$h]=$((LAB_NICS[$h] + 1))
    LAB_SW_PORTS[$sw]=$n
    ip link add "$nic" netns "$(lab_ns "$h")" type veth peer name "$port" netns "$(lab_ns "$sw")" ||
        { echo "lab: cannot create veth $h:$nic <-> $sw:$port" >&2; return 1; }
    ip -n "$(lab_ns "$sw")" link set "$port" master br0 || return 1
    ip -n "$(lab_ns "$sw")" link set "$port" up || return 1
    lab_nic_up "$h" "$nic" "${LAB_SW_SUBNET[$sw]}" "$n" "$rate"
}

# Addresses, rate limit, up: host nic subnet hostnum rate.
lab_nic_up() {
    local h=$1 nic=$2 s=$3 hn=$4 rate=$5 ns
    ns=$(lab_ns "$h")
    ip -n "$ns" addr add "198.18.$s.$hn/24" dev "$nic" || return 1
    ip -n "$ns" -6 addr add "2001:db8:$s::$hn/64" dev "$nic" nodad || return 1
    [ -z "$rate" ] || lab_rate "$h" "$nic" "$rate" || return 1
    ip -n "$ns" link set "$nic" up
}

# lab_rate HOST NIC RATE: token bucket on the NIC's egress.  The bucket holds
# a few milliseconds at that rate (at least 256 KiB), enough for TCP to fill
# the link without a queue that hides the limit.
lab_rate() {
    local h=$1 nic=$2 rate=$3
    lab_exec "$h" tc qdisc replace dev "$nic" root tbf rate "$rate" burst 512k latency 20ms
}

lab_down() { ip -n "$(lab_ns "$1")" link set "$2" down; }
lab_up() { ip -n "$(lab_ns "$1")" link set "$2" up; }

# lab_addr HOST NIC [4|6]: the NIC's address (no prefix length).
lab_addr() {
    local fam=${3:-4}
    ip -n "$(lab_ns "$1")" -"$fam" -o addr show dev "$2" scope global |
        awk '{sub("/.*", "", $4); print $4; exit}'
}

lab_tx_bytes() { lab_exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }
lab_rx_bytes() { lab_exec "$1" cat "/sys/class/net/$2/statistics/rx_bytes"; }

# lab_reach HOST ADDR: 0 when HOST reaches ADDR within a second.  A TCP
# connect to port 9 (discard, closed): a refusal is an answer from the
# peer's kernel, a timeout is not (ping is not installed everywhere).
lab_reach() {
    lab_exec "$1" python3 - "$2" <<'PY' 2>/dev/null
import socket, sys
a = sys.argv[1]
s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET)
s.settimeout(1.0)
try:
    s.connect((a, 9))
except ConnectionRefusedError:
    sys.exit(0)
except OSError:
    sys.exit(1)
sys.exit(0)
PY
}

# Wait until HOST reaches ADDR (IPv4 or IPv6), up to 5 s.
lab_wait_reach() {
    local h=$1 addr=$2 i
    for i in $(seq 10); do
        lab_reach "$h" "$addr" && return 0
        sleep 0.1
    done
    echo "lab: $h cannot reach $addr" >&2
    return 1
}

# Self test: 2 hosts x 2 NICs, every path both families, a link down and up.
lab_selftest() {
    lab_require
    lab_init "selftest$$"
    lab_host a && lab_host b && lab_link a b 2 1gbit || return 1
    local i
    for i in 0 1; do
        lab_wait_reach a "$(lab_addr b nic$i 4)" || return 1
        lab_wait_reach a "$(lab_addr b nic$i 6)" || return 1
    done
    lab_down a nic1
    if lab_reach a "$(lab_addr b nic1 4)"; then
        echo "lab: nic1 still carries traffic while down" >&2
        return 1
    fi
    lab_up a nic1
    lab_wait_reach a "$(lab_addr b nic1 4)" || return 1
    echo "lab selftest: ok (2 hosts x 2 NICs, IPv4 and IPv6, link down and up)"
}

lab_usage() {
    cat <<'EOF'
usage: tests/lab/lab.sh selftest        build a 2x2 lab, check every path, remove it
       tests/lab/lab.sh check           exit 77 with "SKIP: why" if no lab can run here
       tests/lab/lab.sh clean RUN       remove what a killed run RUN left behind
       tests/lab/lab.sh run N RATE CMD  hosts a and b with N NICs (RATE each, "" for none),
                                        CMD run with LAB_RUN set (lab_exec a ... reaches host a
                                        when CMD sources this file), everything removed after
or source it: lab_require; lab_init RUN; lab_host a; lab_host b; lab_link a b 2 2gbit
              (or lab_link_one_subnet a b 2: every NIC on one subnet;
              lab_switch sw; lab_plug a sw; lab_plug b sw: hosts on one bridge);
              lab_exec a CMD...; lab_addr b nic0 [4|6]; lab_down a nic1; lab_up a nic1
EOF
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u
    case ${1:-} in
    selftest) lab_selftest ;;
    check) lab_require; echo "lab: ok" ;;
    clean)
        [ -n "${2:-}" ] || { lab_usage >&2; exit 2; }
        LAB_RUN=$2 lab_cleanup
        ;;
    run)
        [ $# -ge 4 ] || { lab_usage >&2; exit 2; }
        lab_require
        lab_init "run$$"
        lab_host a && lab_host b && lab_link a b "$2" "$3" || exit 1
        shift 3
        LAB_RUN=$LAB_RUN "$@"
        ;;
    *) lab_usage >&2; exit 2 ;;
    esac
fi
