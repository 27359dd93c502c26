package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
)

// tb is the demo's cluster.TB: it prints logs only when something fails, and Fatalf ends the
// demo's work (the deferred cleanups still run, in reverse order, as with a test).
type tb struct {
	name string
	dir  string // parent of every TempDir; removed at cleanup

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	logs     []string
	temps    int
}

func newTB(name string) *tb { return &tb{name: name} }

func (t *tb) Helper() {}

func (t *tb) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.logs = append(t.logs, fmt.Sprintf(format, args...))
}

func (t *tb) Errorf(format string, args ...any) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	fmt.Fprintf(os.Stderr, "demo: %s\n", fmt.Sprintf(format, args...))
}

func (t *tb) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

func (t *tb) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *tb) TempDir() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir == "" {
		d, err := os.MkdirTemp("", "cardinal-demo-")
		if err != nil {
			panic(err)
		}
		t.dir = d
	}
	t.temps++
	d := fmt.Sprintf("%s/%03d", t.dir, t.temps)
	if err := os.MkdirAll(d, 0o755); err != nil {
		panic(err)
	}
	return d
}

func (t *tb) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *tb) Name() string { return t.name }

// run runs f on its own goroutine, where Fatalf can end it (runtime.Goexit), and reports whether
// nothing failed.
func (t *tb) run(f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
	return !t.Failed()
}

// cleanup runs the cleanups in reverse order, prints the collected logs when something failed,
// and removes the temp dirs. It reports whether nothing failed.
func (t *tb) cleanup() bool {
	t.mu.Lock()
	cleanups := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	if t.Failed() {
		for _, l := range t.logs {
			fmt.Fprintln(os.Stderr, l)
		}
		fmt.Fprintf(os.Stderr, "demo: failed; component logs kept in %s\n", t.dir)
		return false
	}
	if t.dir != "" {
		_ = os.RemoveAll(t.dir)
	}
	return true
}
