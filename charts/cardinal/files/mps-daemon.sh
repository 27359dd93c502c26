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
#     file, newer than the control socket, naming the node's share count and the tenant epoch, and
#     rewritten every CARDINAL_MPS_HEARTBEAT seconds after get_server_list answered (a daemon that
#     stops answering ends the script).
#  5. Tenants: the device plugin writes "epoch=<n>" (and "namespace=<ns>") in
#     CARDINAL_MPS_TENANT_FILE whenever the node's tenant (the namespace whose containers share the
#     cards) changes. At each heartbeat the script compares: for a new epoch it quits the control
#     daemon and its servers, empties the shm folder (CARDINAL_MPS_SHM_DIR, the daemon's and the
#     clients' /dev/shm) and the pipe folder, and starts again (steps 3 and 4) with epoch=<n> in the
#     ready file: nothing one tenant left there reaches the next. It does the same at start when the
#     epoch asked for is not the one it last served ($CUDA_MPS_PIPE_DIRECTORY/cardinal-epoch).
#  6. On SIGTERM: quit the daemon, put the compute mode back to DEFAULT, remove the file. A step that
#     fails quits the daemon too: it must not serve clients without its limits.
#
# Environment: CUDA_MPS_PIPE_DIRECTORY (required), CARDINAL_MPS_SHARES (required, >= 1),
# CARDINAL_MPS_COMPUTE_MODE (EXCLUSIVE_PROCESS or DEFAULT), CARDINAL_MPS_READY_TIMEOUT (seconds the
# daemon's socket may take to appear; default 30), CARDINAL_MPS_TENANT_FILE (the plugin's request;
# unset: no tenant epochs), CARDINAL_MPS_SHM_DIR (default /dev/shm), CARDINAL_MPS_HEARTBEAT
# (seconds between checks; default 5).
set -eu

pipe=${CUDA_MPS_PIPE_DIRECTORY:?CUDA_MPS_PIPE_DIRECTORY is not set}
shares=${CARDINAL_MPS_SHARES:?CARDINAL_MPS_SHARES is not set}
mode=${CARDINAL_MPS_COMPUTE_MODE:-EXCLUSIVE_PROCESS}
timeout=${CARDINAL_MPS_READY_TIMEOUT:-30}
tenant_file=${CARDINAL_MPS_TENANT_FILE:-}
shm=${CARDINAL_MPS_SHM_DIR:-/dev/shm}
beat=${CARDINAL_MPS_HEARTBEAT:-5}
ready=$pipe/cardinal-ready
served=$pipe/cardinal-epoch

log() { echo "cardinal-mps: $*" >&2; }
die() {
	log "$*"
	exit 1
}

case $shares in
'' | *[!0-9]*) die "CARDINAL_MPS_SHARES=$shares is not a positive integer" ;;
esac
[ "$shares" -ge 1 ] || die "CARDINAL_MPS_SHARES=$shares is not a positive integer"
case $beat in
'' | *[!0-9.]*) die "CARDINAL_MPS_HEARTBEAT=$beat is not a number of seconds" ;;
esac
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
epoch=
# stop_daemon quits the control daemon (and with it its servers) and removes the ready file.
stop_daemon() {
	rm -f "$ready" "$ready.tmp"
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		ctl quit >/dev/null 2>&1 || kill "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	daemon=
}
# However the script ends, the ready file goes and the control daemon with it: a daemon that failed a
# step must not serve clients without its limits.
trap stop_daemon EXIT
sleeper=
stop() {
	[ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null || true
	stop_daemon
	[ "$mode" = DEFAULT ] || restore
	exit 0
}
trap stop TERM INT

# wanted_epoch prints the tenant epoch the device plugin asks for (0 without a request).
wanted_epoch() {
	e=
	if [ -n "$tenant_file" ] && [ -f "$tenant_file" ]; then
		e=$(sed -n 's/^epoch=\([0-9][0-9]*\)$/\1/p' "$tenant_file" | head -n 1)
	fi
	echo "${e:-0}"
}

# empty DIR removes everything in DIR, hidden entries included, and DIR itself stays.
empty() {
	find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf {} + || die "cannot empty $1"
}

# start_daemon EPOCH starts the control daemon, sets its limits, checks that a server starts and
# writes the ready file for EPOCH. For an epoch it has not served, the shm and pipe folders are
# emptied first: what the last tenant's containers left there goes.
start_daemon() {
	if [ "$1" != "$(cat "$served" 2>/dev/null || true)" ]; then
		empty "$shm"
		empty "$pipe"
		log "tenant epoch $1: shm and pipe folders emptied"
	fi
	rm -f "$pipe/control"
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
		echo "shares=$shares computeMode=$mode activeThreadPercentage=$threads epoch=$1"
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
	echo "$1" >"$served"
	epoch=$1
	mv "$ready.tmp" "$ready"
	log "ready: $(head -n 1 "$ready")"
}

start_daemon "$(wanted_epoch)"
while :; do
	# In the background, so that SIGTERM is handled at once (and with no output of its own to hold).
	sleep "$beat" </dev/null >/dev/null 2>&1 &
	sleeper=$!
	wait "$sleeper" || true
	sleeper=
	kill -0 "$daemon" 2>/dev/null || die "nvidia-cuda-mps-control exited"
	want=$(wanted_epoch)
	if [ "$want" != "$epoch" ]; then
		log "the device plugin asks for tenant epoch $want (serving $epoch): starting afresh"
		stop_daemon
		start_daemon "$want"
		continue
	fi
	# The heartbeat the device plugin's readiness requires: the daemon answered just now.
	ctl get_server_list >/dev/null || die "the control daemon does not answer get_server_list"
	cp "$ready" "$ready.tmp" && mv "$ready.tmp" "$ready"
done
