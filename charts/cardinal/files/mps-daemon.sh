#!/bin/sh
# Cardinal's MPS control daemon (sharing mode mps): the entrypoint of the chart's MPS DaemonSet.
#
#  1. Lists the cards the container runtime gave it (nvidia-smi); none is an error, so the pod
#     crash-loops rather than looking ready with nothing to serve.
#  2. Sets each card's compute mode to CARDINAL_MPS_COMPUTE_MODE (EXCLUSIVE_PROCESS by default): only
#     the MPS server may then hold a context on it, so a process that leaves MPS (unsets
#     CUDA_MPS_PIPE_DIRECTORY) is refused instead of running beside the server with no limit.
#  3. Starts nvidia-cuda-mps-control in the foreground and sets daemon-side default limits of one
#     slot: every card's pinned device memory to its memory / CARDINAL_MPS_SHARES, and the active
#     thread percentage to 100 / CARDINAL_MPS_SHARES. A client's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
#     can only lower the daemon's setting (NVIDIA MPS documentation, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
#  4. Checks that a server starts (start_server, then get_server_list; the check's server is shut down
#     again, so that it holds no card), and only then writes
#     $CUDA_MPS_PIPE_DIRECTORY/cardinal-ready: the device plugin's readiness check requires that
#     file, newer than the control socket and naming the node's share count.
#  5. On SIGTERM: quit the daemon, put the compute mode back to DEFAULT, remove the file. A step that
#     fails quits the daemon too: it must not serve clients without its limits.
#
# Environment: CUDA_MPS_PIPE_DIRECTORY (required), CARDINAL_MPS_SHARES (required, >= 1),
# CARDINAL_MPS_COMPUTE_MODE (EXCLUSIVE_PROCESS or DEFAULT), CARDINAL_MPS_READY_TIMEOUT (seconds the
# daemon's socket may take to appear; default 30).
set -eu

pipe=${CUDA_MPS_PIPE_DIRECTORY:?CUDA_MPS_PIPE_DIRECTORY is not set}
shares=${CARDINAL_MPS_SHARES:?CARDINAL_MPS_SHARES is not set}
mode=${CARDINAL_MPS_COMPUTE_MODE:-EXCLUSIVE_PROCESS}
timeout=${CARDINAL_MPS_READY_TIMEOUT:-30}
ready=$pipe/cardinal-ready

log() { echo "cardinal-mps: $*" >&2; }
die() {
	log "$*"
	exit 1
}

case $shares in
'' | *[!0-9]*) die "CARDINAL_MPS_SHARES=$shares is not a positive integer" ;;
esac
[ "$shares" -ge 1 ] || die "CARDINAL_MPS_SHARES=$shares is not a positive integer"
case $mode in
EXCLUSIVE_PROCESS | DEFAULT) ;;
*) die "CARDINAL_MPS_COMPUTE_MODE=$mode is not EXCLUSIVE_PROCESS or DEFAULT" ;;
esac

# A file left by an earlier daemon must not vouch for this one.
rm -f "$ready"

cards=$(nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits) ||
	die "nvidia-smi cannot list the cards"
[ -n "$cards" ] || die "no card is visible to the MPS daemon: check devicePlugin.deviceListStrategy and the container toolkit"

# ctl sends one command to the control daemon and prints its answer.
ctl() { echo "$*" | nvidia-cuda-mps-control; }

restore() {
	echo "$cards" | while IFS=', ' read -r _ uuid _; do
		nvidia-smi -i "$uuid" -c DEFAULT >/dev/null 2>&1 || log "cannot put $uuid back to compute mode DEFAULT"
	done
}

echo "$cards" | while IFS=', ' read -r index uuid mem; do
	nvidia-smi -i "$uuid" -c "$mode" >/dev/null || die "cannot set compute mode $mode on card $index ($uuid)"
	log "card $index ($uuid): compute mode $mode"
done

daemon=
# However the script ends, the ready file goes and the control daemon with it: a daemon that failed a
# step must not serve clients without its limits.
finish() {
	rm -f "$ready" "$ready.tmp"
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		ctl quit >/dev/null 2>&1 || kill "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
}
trap finish EXIT
stop() {
	finish
	[ "$mode" = DEFAULT ] || restore
	exit 0
}
trap stop TERM INT

nvidia-cuda-mps-control -f &
daemon=$!

waited=0
until [ -e "$pipe/control" ]; do
	kill -0 "$daemon" 2>/dev/null || die "nvidia-cuda-mps-control exited before it opened $pipe/control"
	[ "$waited" -lt "$((timeout * 10))" ] || die "no control socket at $pipe/control after ${timeout}s"
	sleep 0.1
	waited=$((waited + 1))
done

threads=$((100 / shares))
{
	echo "shares=$shares computeMode=$mode activeThreadPercentage=$threads"
} >"$ready.tmp"
if [ "$shares" -gt 1 ]; then
	ctl set_default_active_thread_percentage "$threads" >/dev/null ||
		die "set_default_active_thread_percentage $threads failed"
fi
echo "$cards" | while IFS=', ' read -r index uuid mem; do
	limit=$((mem / shares))
	if [ "$shares" -gt 1 ]; then
		ctl set_default_device_pinned_mem_limit "$index" "${limit}M" >/dev/null ||
			die "set_default_device_pinned_mem_limit $index ${limit}M failed"
	fi
	echo "$uuid pinnedMemLimitMiB=$limit" >>"$ready.tmp"
done

# A server must start (for this container's user) before anything is called ready.
ctl start_server -uid "$(id -u)" >/dev/null || die "the control daemon refused to start a server"
servers=$(ctl get_server_list) || die "get_server_list failed"
[ -n "$servers" ] || die "the control daemon started no server"
# The check's server must not stay: under EXCLUSIVE_PROCESS it would hold every card and refuse the
# whole-card containers of the node. The clients' own servers start on demand.
for pid in $servers; do
	ctl shutdown_server "$pid" >/dev/null || die "shutdown_server $pid failed"
done
mv "$ready.tmp" "$ready"
log "ready: $(head -n 1 "$ready")"

wait "$daemon" || true
daemon=
die "nvidia-cuda-mps-control exited"
