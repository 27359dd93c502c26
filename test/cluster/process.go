package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process group has between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// tailLines is how many lines of each component's log a failed test prints.
const tailLines = 40

// Process is a command the harness started in its own process group, with stdout and stderr
// appended to LogPath. Stop kills the whole group; the harness stops every process at cleanup.
// A process also dies with the harness's own process (PR_SET_PDEATHSIG), so a test binary killed
// by its timeout leaves nothing behind either.
type Process struct {
	Name    string
	LogPath string

	command func() (*exec.Cmd, error) // builds a fresh command for each (re)start

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has been waited for
	waitErr error
}

// startProcess starts command under name with its output in logPath, and stops it (printing the
// log's tail first when t failed) at t's cleanup.
func startProcess(t TB, name, logPath string, command func() (*exec.Cmd, error)) *Process {
	t.Helper()
	p := &Process{Name: name, LogPath: logPath, command: command}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() || panicking() {
			t.Logf("last %d lines of %s (%s):\n%s", tailLines, p.Name, p.LogPath, p.Tail(tailLines))
		}
	})
	if err := p.start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return p
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.Name)
	}
	cmd, err := p.command()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child holds its own descriptor
	fmt.Fprintf(log, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = log, log
	if cmd.Dir == "" {
		// Never the caller's working directory (a repository checkout): the kubelet and its
		// fake runtime resolve relative paths against it, and were seen removing files there.
		cmd.Dir = strings.TrimSuffix(p.LogPath, ".log") + ".cwd"
		if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
			return err
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Pid is the process id of the running command (the leader of its process group), or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited reports whether the command has ended on its own, and how.
func (p *Process) Exited() (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, SIGKILL after 10s, and waits for the command to end.
// Stopping a stopped process does nothing.
func (p *Process) Stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	// Members of the group that outlived its leader (a child the command forked) go too, and
	// Stop returns only once they are gone (or zombies waiting for init to reap them).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = poll(stopGrace, func() (bool, error) { return len(liveGroupMembers(pgid)) == 0, nil })
}

// liveGroupMembers lists the processes of process group pgid that are not zombies.
func liveGroupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// After "(comm)": state, ppid, pgrp, ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Restart stops the process and starts its command again; the log is appended to.
func (p *Process) Restart(t TB) {
	t.Helper()
	p.Stop()
	if err := p.start(); err != nil {
		t.Fatalf("restart %s: %v", p.Name, err)
	}
}

// Args returns the command line the process starts with (the one RestartWith set, if any).
func (p *Process) Args() ([]string, error) {
	p.mu.Lock()
	command := p.command
	p.mu.Unlock()
	cmd, err := command()
	if err != nil {
		return nil, err
	}
	return append([]string(nil), cmd.Args...), nil
}

// RestartWith stops the process and starts args in its place, under the same name and log; later
// restarts run args too. For processes started with StartProcess (a plain command line).
func (p *Process) RestartWith(t TB, args ...string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("restart %s: no command", p.Name)
	}
	p.Stop()
	p.mu.Lock()
	p.command = func() (*exec.Cmd, error) { return exec.Command(args[0], args[1:]...), nil }
	p.mu.Unlock()
	if err := p.start(); err != nil {
		t.Fatalf("restart %s: %v", p.Name, err)
	}
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	return tail(b, n)
}

// failIfExited turns the early end of a component into an error carrying its log's tail.
func (p *Process) failIfExited() error {
	exited, err := p.Exited()
	if !exited {
		return nil
	}
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited (%w); last lines of %s:\n%s", p.Name, err, p.LogPath, p.Tail(tailLines))
}

// panicking reports whether the calling goroutine is unwinding a panic. A test that panics is
// not yet marked failed when its cleanups run, but the panic is on the stack that runs them.
func panicking() bool {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	return bytes.Contains(buf, []byte("\npanic("))
}

func tail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
