package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The MPS daemon's entrypoint (charts/cardinal/files/mps-daemon.sh), run by sh against fake
// nvidia-smi and nvidia-cuda-mps-control (no GPU here): what it asks of the driver and the daemon,
// and when it writes the file the device plugin's readiness check requires.

const mpsScript = chartDir + "/files/mps-daemon.sh"

// fakeNvidiaSMI lists two cards (80 GiB and 40 GiB) unless FAKE_NO_CARDS is set, and logs every
// compute-mode change.
const fakeNvidiaSMI = `#!/bin/sh
case "$1" in
--query-gpu=index,uuid,memory.total) [ -n "${FAKE_NO_CARDS:-}" ] || printf '0, GPU-aaa, 81920\n1, GPU-bbb, 40960\n' ;;
-i) echo "smi $*" >>"$FAKE_LOG" ;;
*) echo "fake nvidia-smi: unexpected $*" >&2; exit 2 ;;
esac
`

// fakeMPSControl stands for the control daemon (-f: creates the control "socket", runs until quit)
// and its client (one command on stdin, logged; once the file FAKE_DEAD exists every command fails,
// as when the daemon no longer answers). With FAKE_REFUSE set the daemon starts no server:
// start_server answers an error and get_server_list nothing, as a daemon whose cards are missing does.
const fakeMPSControl = `#!/bin/sh
if [ "${1:-}" = -f ]; then
	: >"$CUDA_MPS_PIPE_DIRECTORY/control"
	while [ ! -e "$CUDA_MPS_PIPE_DIRECTORY/quit" ]; do sleep 0.05; done
	exit 0
fi
read -r cmd
echo "ctl $cmd" >>"$FAKE_LOG"
[ ! -e "${FAKE_DEAD:-/nonexistent}" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
case "$cmd" in
start_server*) [ -z "${FAKE_REFUSE:-}" ] || echo "Server start failed" ;;
get_server_list) [ -n "${FAKE_REFUSE:-}" ] || echo 4242 ;;
quit) : >"$CUDA_MPS_PIPE_DIRECTORY/quit" ;;
esac
`

type mpsRun struct {
	pipe, log, shm, tenant string
	cmd                    *exec.Cmd
	stderr                 *bytes.Buffer
	done                   chan error
}

func startMPSScript(t *testing.T, env ...string) *mpsRun {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	r := &mpsRun{pipe: filepath.Join(dir, "pipe"), log: filepath.Join(dir, "log"), shm: filepath.Join(dir, "shm"), tenant: filepath.Join(dir, "tenant"),
		stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	for _, d := range []string{bin, r.pipe, r.shm, r.tenant} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"nvidia-smi": fakeNvidiaSMI, "nvidia-cuda-mps-control": fakeMPSControl} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.cmd = exec.Command("sh", mpsScript)
	r.cmd.Env = append([]string{"PATH=" + bin + ":/usr/bin:/bin", "CUDA_MPS_PIPE_DIRECTORY=" + r.pipe, "FAKE_LOG=" + r.log,
		"CARDINAL_MPS_SHARES=4", "CARDINAL_MPS_READY_TIMEOUT=5", "CARDINAL_MPS_SHM_DIR=" + r.shm,
		"CARDINAL_MPS_TENANT_FILE=" + filepath.Join(r.tenant, "request"), "FAKE_DEAD=" + filepath.Join(dir, "dead")}, env...)
	r.cmd.Stderr = r.stderr
	// The fake control daemon outlives a killed script and holds stderr: Wait must not wait for it.
	r.cmd.WaitDelay = 2 * time.Second
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		if err := <-r.done; err != nil {
			t.Logf("mps-daemon.sh ended: %v", err) // killed above
		}
		r.done <- nil
	})
	return r
}

func (r *mpsRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("the script did not end; stderr:\n%s", r.stderr)
		return nil
	}
}

func (r *mpsRun) logLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestMPSDaemonScriptSetsComputeModeAndSlotLimitsBeforeReady(t *testing.T) {
	r := startMPSScript(t)
	ready := filepath.Join(r.pipe, "cardinal-ready")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-r.done:
			t.Fatalf("the script ended before it was ready: %v\n%s", err, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready file; stderr:\n%s", r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	// shares 4: 100/4 = 25 % of the threads; 81920/4 = 20480 and 40960/4 = 10240 MiB per client.
	wantReady := "shares=4 computeMode=EXCLUSIVE_PROCESS activeThreadPercentage=25 epoch=0\nGPU-aaa pinnedMemLimitMiB=20480\nGPU-bbb pinnedMemLimitMiB=10240\n"
	if diff := cmp.Diff(wantReady, string(b)); diff != "" {
		t.Errorf("ready file (-want +got):\n%s", diff)
	}
	uid := strconv.Itoa(os.Getuid())
	want := []string{
		"smi -i GPU-aaa -c EXCLUSIVE_PROCESS",
		"smi -i GPU-bbb -c EXCLUSIVE_PROCESS",
		"ctl set_default_active_thread_percentage 25",
		"ctl set_default_device_pinned_mem_limit 0 20480M",
		"ctl set_default_device_pinned_mem_limit 1 10240M",
		"ctl start_server -uid " + uid,
		"ctl get_server_list",
		"ctl shutdown_server 4242", // the check's server holds no card afterwards
	}
	if diff := cmp.Diff(want, r.logLines(t)); diff != "" {
		t.Errorf("driver and daemon calls before ready (-want +got):\n%s", diff)
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, r.stderr)
	}
	if _, err := os.Stat(ready); !os.IsNotExist(err) {
		t.Errorf("ready file still there after stop: %v", err)
	}
	if diff := cmp.Diff(append(want, "ctl quit", "smi -i GPU-aaa -c DEFAULT", "smi -i GPU-bbb -c DEFAULT"), r.logLines(t)); diff != "" {
		t.Errorf("calls after SIGTERM (-want +got):\n%s", diff)
	}
}

// A daemon that refuses to start servers is never called ready, and a ready file an earlier daemon
// left behind is removed.
func TestMPSDaemonScriptNotReadyWhenNoServerStarts(t *testing.T) {
	for _, tc := range []struct {
		name, env, want string
	}{
		{"refuses servers", "FAKE_REFUSE=1", "the control daemon started no server"},
		{"no cards", "FAKE_NO_CARDS=1", "no card is visible to the MPS daemon"},
		{"bad compute mode", "CARDINAL_MPS_COMPUTE_MODE=PROHIBITED", "CARDINAL_MPS_COMPUTE_MODE=PROHIBITED is not EXCLUSIVE_PROCESS or DEFAULT"},
		{"bad shares", "CARDINAL_MPS_SHARES=0", "CARDINAL_MPS_SHARES=0 is not a positive integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startMPSScript(t, tc.env)
			if err := r.wait(t); err == nil {
				t.Fatalf("the script succeeded; stderr:\n%s", r.stderr)
			}
			if !strings.Contains(r.stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.want)
			}
			if _, err := os.Stat(filepath.Join(r.pipe, "cardinal-ready")); !os.IsNotExist(err) {
				t.Errorf("ready file written: %v", err)
			}
		})
	}
}

// waitReadyLine waits for the ready file's first line to be want.
func (r *mpsRun) waitReadyLine(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(r.pipe, "cardinal-ready"))
		if first, _, _ := strings.Cut(string(b), "\n"); first == want {
			return
		}
		select {
		case err := <-r.done:
			t.Fatalf("the script ended: %v\n%s", err, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ready file %q, want first line %q; stderr:\n%s", b, want, r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// TestMPSDaemonScriptStartsAfreshForANewTenant: when the device plugin asks for a new tenant epoch,
// the script quits the control daemon, empties the shm folder (hidden files too) and the pipe
// folder, starts again with its limits and a server check, and vouches for the new epoch; files the
// same tenant writes later stay. Meanwhile it refreshes its ready file each time get_server_list
// answers (issue 34 item 5).
func TestMPSDaemonScriptStartsAfreshForANewTenant(t *testing.T) {
	r := startMPSScript(t, "CARDINAL_MPS_HEARTBEAT=0.2")
	const first = "shares=4 computeMode=EXCLUSIVE_PROCESS activeThreadPercentage=25"
	r.waitReadyLine(t, first+" epoch=0")
	ready := filepath.Join(r.pipe, "cardinal-ready")
	st1, err := os.Stat(ready)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	st2, err := os.Stat(ready)
	if err != nil {
		t.Fatal(err)
	}
	if !st2.ModTime().After(st1.ModTime()) {
		t.Errorf("ready file not refreshed: %s, then %s", st1.ModTime(), st2.ModTime())
	}

	// Tenant A leaves files and a shared-memory segment behind.
	for _, f := range []string{"leftover", ".hidden", "sem.cuda-a"} {
		writeFile(t, filepath.Join(r.shm, f), "tenant A")
	}
	if err := os.Mkdir(filepath.Join(r.shm, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := len(r.logLines(t))
	writeFile(t, filepath.Join(r.tenant, "request"), "epoch=1\nnamespace=team-b\n")
	r.waitReadyLine(t, first+" epoch=1")
	if got := entries(t, r.shm); len(got) > 0 {
		t.Errorf("shm after the switch: %v, want empty", got)
	}
	got := r.logLines(t)[before:]
	uid := strconv.Itoa(os.Getuid())
	restart := []string{"ctl quit", "ctl set_default_active_thread_percentage 25", "ctl set_default_device_pinned_mem_limit 0 20480M",
		"ctl set_default_device_pinned_mem_limit 1 10240M", "ctl start_server -uid " + uid, "ctl get_server_list", "ctl shutdown_server 4242"}
	calls := got[max(0, slices.Index(got, "ctl quit")):] // heartbeats before the switch left out
	if len(calls) < len(restart) || !slices.Equal(calls[:len(restart)], restart) {
		t.Errorf("calls of the switch: %q, want them to begin %q", calls, restart)
	}
	if files := entries(t, r.pipe); !slices.Contains(files, "cardinal-ready") || !slices.Contains(files, "control") || slices.Contains(files, "quit") {
		t.Errorf("pipe folder after the switch: %v", files)
	}

	// The same tenant's files stay.
	writeFile(t, filepath.Join(r.shm, "mine"), "tenant B")
	time.Sleep(600 * time.Millisecond)
	if got := entries(t, r.shm); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("shm of the same tenant: %v", got)
	}

	// The daemon stops answering: the script ends and its ready file goes.
	writeFile(t, filepath.Join(filepath.Dir(r.shm), "dead"), "")
	if err := r.wait(t); err == nil || !strings.Contains(r.stderr.String(), "does not answer get_server_list") {
		t.Errorf("a daemon that stopped answering: %v\n%s", err, r.stderr)
	}
	if _, err := os.Stat(ready); !os.IsNotExist(err) {
		t.Errorf("ready file of a daemon that stopped answering: %v", err)
	}
}
