#!/usr/bin/env bash
# prove-mps.sh — shows on a real NVIDIA card, without Kubernetes, that MPS enforces the limits
# Cardinal's device plugin sets for a shared container (sharing mode mps):
#   memory:  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20000M — a 24 GiB allocation must fail, 16 GiB succeed;
#   compute: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 — a kernel that fills every SM must run at about
#            30 % of the throughput it has with 100 % (ratio of run times).
# Then a hostile client: under daemon-side defaults of one slot (20000M, 30 %), a client that unsets its
# variables must stay within them, and whether one that raises its memory variable passes the default is
# recorded (NVIDIA's documentation says a client's thread percentage can only lower the daemon's).
# It starts its own MPS control daemon (pipe and log folders in a temporary directory) and stops it on
# exit; it needs the driver (libcuda.so.1, nvidia-cuda-mps-control) and python3, not nvcc or a CUDA
# toolkit. Run it on an idle card (CUDA_VISIBLE_DEVICES picks one; default 0).
# Usage: hack/sharing/prove-mps.sh            exit 0 when every check passes
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
client="$here/mps_client.py"
for cmd in nvidia-smi nvidia-cuda-mps-control python3; do
	command -v "$cmd" >/dev/null || { echo "prove-mps: $cmd not found (needs an NVIDIA driver and python3)" >&2; exit 2; }
done
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
tmp=$(mktemp -d /tmp/prove-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$tmp/pipe CUDA_MPS_LOG_DIRECTORY=$tmp/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
stop() {
	echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
	sleep 1
	rm -rf "$tmp"
}
trap stop EXIT
nvidia-smi --query-gpu=index,name,memory.total,compute_mode --format=csv,noheader -i "$CUDA_VISIBLE_DEVICES"
nvidia-cuda-mps-control -d
for _ in $(seq 50); do [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ] && break; sleep 0.1; done
echo get_default_active_thread_percentage | nvidia-cuda-mps-control >/dev/null || { echo "prove-mps: the MPS control daemon does not answer" >&2; exit 1; }
fail=0

echo "== memory: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20000M"
set +e
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20000M python3 "$client" alloc 24576; big=$?
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20000M python3 "$client" alloc 16384; small=$?
python3 "$client" alloc 24576; nolimit=$?
set -e
[ "$big" = 3 ] && echo "PASS 24 GiB refused under a 20000 MiB limit" || { echo "FAIL 24 GiB under a 20000 MiB limit: exit $big (want 3, refused)"; fail=1; }
[ "$small" = 0 ] && echo "PASS 16 GiB allowed under a 20000 MiB limit" || { echo "FAIL 16 GiB under a 20000 MiB limit: exit $small (want 0)"; fail=1; }
[ "$nolimit" = 0 ] && echo "PASS 24 GiB allowed without a limit (the card has room)" || { echo "FAIL 24 GiB without a limit: exit $nolimit (want 0; is the card busy?)"; fail=1; }

echo "== compute: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"
blocks=${BLOCKS_PER_SM:-8} iters=${ITERATIONS:-2000000}
full=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 python3 "$client" spin "$blocks" "$iters")
part=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 python3 "$client" spin "$blocks" "$iters")
ratio=$(python3 -c "print(f'{$full/$part:.3f}')")
echo "100 %: ${full}s   30 %: ${part}s   throughput ratio: $ratio (want about 0.30)"
if python3 -c "import sys; sys.exit(0 if 0.2 <= $ratio <= 0.4 else 1)"; then
	echo "PASS the 30 % client ran at $ratio of the full card's throughput"
else
	echo "FAIL throughput ratio $ratio is not within 0.20..0.40"
	fail=1
fi

# A hostile client: the daemon holds one slot's defaults (as the chart's daemon script sets them), and
# the client unsets or raises its own variables. The daemon is restarted first: defaults apply only to
# servers started after them. The card's compute mode is left as it is (a lent card must keep its
# settings); EXCLUSIVE_PROCESS, which refuses a process that leaves MPS, is shown only on the simulator
# (test/chart TestMPSDaemonScriptSetsComputeModeAndSlotLimitsBeforeReady).
echo "== hostile client: daemon defaults 20000M and 30 %, client variables unset or raised"
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
for _ in $(seq 50); do [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ] || break; sleep 0.1; done
nvidia-cuda-mps-control -d
for _ in $(seq 50); do [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ] && break; sleep 0.1; done
echo set_default_device_pinned_mem_limit 0 20000M | nvidia-cuda-mps-control
echo set_default_active_thread_percentage 30 | nvidia-cuda-mps-control
set +e
env -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT python3 "$client" alloc 24576; unset_big=$?
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40000M python3 "$client" alloc 24576; raised_big=$?
set -e
[ "$unset_big" = 3 ] && echo "PASS 24 GiB refused with the variable unset (daemon default 20000M)" ||
	{ echo "FAIL 24 GiB with the variable unset: exit $unset_big (want 3, refused by the daemon's default)"; fail=1; }
case $raised_big in
3) echo "RECORD the client's raised limit (40000M) does not pass the daemon's default: 24 GiB refused" ;;
0) echo "RECORD the client's raised limit (40000M) overrides the daemon's default: 24 GiB allowed (memory is cooperative)" ;;
*) echo "FAIL 24 GiB with a raised limit: exit $raised_big"; fail=1 ;;
esac
unset_t=$(env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE python3 "$client" spin "$blocks" "$iters")
raised_t=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 python3 "$client" spin "$blocks" "$iters")
for pair in "unset:$unset_t" "raised to 100:$raised_t"; do
	label=${pair%%:*} t=${pair#*:}
	r=$(python3 -c "print(f'{$full/$t:.3f}')")
	if python3 -c "import sys; sys.exit(0 if 0.2 <= $r <= 0.4 else 1)"; then
		echo "PASS threads $label: ratio $r (the daemon's 30 % holds)"
	else
		echo "FAIL threads $label: ratio $r is not within 0.20..0.40"
		fail=1
	fi
done
exit $fail
