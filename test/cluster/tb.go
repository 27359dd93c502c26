package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// TB is the part of testing.TB the harness uses. *testing.T and *testing.B satisfy it; the demo
// program passes its own implementation. Cleanup functions must run when the caller is done, in
// last-in first-out order, even when it fails.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
	Name() string
}

// skipper is implemented by *testing.T; a TB without it gets Fatalf where a skip would do.
type skipper interface {
	Skipf(format string, args ...any)
}

// pollInterval is how often WaitFor evaluates its condition.
const pollInterval = 100 * time.Millisecond

// WaitFor calls cond every 100ms until it reports true. A non-nil error from cond stops the wait
// at once and fails t; so does the timeout, with what in the message. Return (false, nil) for
// conditions that may still come true (a NotFound while an object is being created, say).
func WaitFor(t TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// poll is WaitFor without the TB: it returns the error instead of failing.
func poll(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(pollInterval)
	}
}

// inCI reports whether the run is CI's, where a missing prerequisite is a failure, not a skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// requireRoot fails t (skips it outside CI, where t can skip) unless the process runs as root and
// the commands the kubelet namespaces need are on PATH.
func requireRoot(t TB, commands ...string) {
	t.Helper()
	var missing string
	if os.Geteuid() != 0 {
		missing = "root (the test bed makes mount namespaces and bind mounts)"
	}
	for _, c := range commands {
		if missing != "" {
			break
		}
		if _, err := exec.LookPath(c); err != nil {
			missing = fmt.Sprintf("the %q command (util-linux)", c)
		}
	}
	if missing == "" {
		return
	}
	if s, ok := t.(skipper); ok && !inCI() {
		s.Skipf("the test bed needs %s; under CI=true this is a failure", missing)
		return
	}
	t.Fatalf("the test bed needs %s", missing)
}
