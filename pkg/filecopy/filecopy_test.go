package filecopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// replaceByRename writes path as the kubelet writes its checkpoints: a temporary file in the same
// folder, renamed over the old one.
func replaceByRename(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".kubelet-tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newCopier(t *testing.T, maxBytes int64) (c *Copier, src, dst string) {
	t.Helper()
	src = filepath.Join(t.TempDir(), "cpu_manager_state")
	dst = filepath.Join(t.TempDir(), "cpu_manager_state")
	c, err := New(Config{Src: src, Dst: dst, MaxBytes: maxBytes, Interval: time.Millisecond, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return c, src, dst
}

func sync1(t *testing.T, c *Copier, wantChanged bool) {
	t.Helper()
	changed, err := c.Sync()
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if changed != wantChanged {
		t.Fatalf("Sync changed = %v, want %v", changed, wantChanged)
	}
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestCopyFollowsRename: each time the source is replaced by a rename (a new inode, which a
// single-file bind mount would never see), the copy takes the new content; an unchanged source is
// not copied again.
func TestCopyFollowsRename(t *testing.T) {
	c, src, dst := newCopier(t, 1<<20)
	replaceByRename(t, src, []byte(`{"policyName":"static","defaultCpuSet":"0-7"}`))
	sync1(t, c, true)
	if got := content(t, dst); got != `{"policyName":"static","defaultCpuSet":"0-7"}` {
		t.Fatalf("copy = %s", got)
	}
	ino := inode(t, dst)
	sync1(t, c, false)
	if inode(t, dst) != ino {
		t.Error("an unchanged source was copied again")
	}
	// Same size, new inode: the rename alone is the change.
	replaceByRename(t, src, []byte(`{"policyName":"static","defaultCpuSet":"0-6"}`))
	sync1(t, c, true)
	if got := content(t, dst); got != `{"policyName":"static","defaultCpuSet":"0-6"}` {
		t.Fatalf("copy after the rename = %s", got)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o644 {
		t.Errorf("copy mode %v, want 0644", fi.Mode().Perm())
	}
	// The copy is removed by someone: it comes back.
	if err := os.Remove(dst); err != nil {
		t.Fatal(err)
	}
	sync1(t, c, true)
	if got := content(t, dst); got != `{"policyName":"static","defaultCpuSet":"0-6"}` {
		t.Fatalf("copy after its removal = %s", got)
	}
}

// TestCopySourceGone: a source that goes away takes the copy with it (its reader then sees no
// checkpoint, as it would have on the host), and one that comes back is copied again.
func TestCopySourceGone(t *testing.T) {
	c, src, dst := newCopier(t, 1<<20)
	sync1(t, c, false) // no source yet: nothing, and no error
	replaceByRename(t, src, []byte("one"))
	sync1(t, c, true)
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	sync1(t, c, true)
	if _, err := os.Stat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("copy of a removed source: %v, want it gone", err)
	}
	replaceByRename(t, src, []byte("two"))
	sync1(t, c, true)
	if got := content(t, dst); got != "two" {
		t.Fatalf("copy = %s", got)
	}
}

// TestCopyTooLarge: a source larger than MaxBytes is not copied, and the old copy goes.
func TestCopyTooLarge(t *testing.T) {
	c, src, dst := newCopier(t, 8)
	replaceByRename(t, src, []byte("12345678"))
	sync1(t, c, true)
	replaceByRename(t, src, []byte("123456789"))
	if _, err := c.Sync(); err == nil || !strings.Contains(err.Error(), "larger than 8 bytes") {
		t.Fatalf("Sync of a too large source: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("copy of a too large source: %v, want it gone", err)
	}
}

// TestCopyAtomicForReader: while the source is replaced again and again and the copier runs, a
// reader of the copy only ever sees whole versions, and the copy never goes missing.
func TestCopyAtomicForReader(t *testing.T) {
	c, src, dst := newCopier(t, 1<<20)
	version := func(i int) []byte {
		// Large enough that a write in place would be seen half done.
		return bytes.Repeat([]byte(fmt.Sprintf("%08d\n", i)), 8192)
	}
	replaceByRename(t, src, version(0))
	sync1(t, c, true)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Run(ctx)
	}()
	var bad []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			b, err := os.ReadFile(dst)
			if err != nil {
				bad = append(bad, err.Error())
				continue
			}
			if len(b) != 9*8192 || !bytes.Equal(b, bytes.Repeat(b[:9], 8192)) {
				bad = append(bad, fmt.Sprintf("a partial copy of %d bytes", len(b)))
			}
		}
	}()
	for i := 1; i <= 200; i++ {
		replaceByRename(t, src, version(i))
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for content(t, dst) != string(version(200)) {
		if time.Now().After(deadline) {
			t.Fatal("the copy never caught up with the last version")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	<-done
	if len(bad) > 0 {
		t.Fatalf("the reader saw %d bad reads, first: %s", len(bad), bad[0])
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestParseSpec(t *testing.T) {
	src, dst, err := ParseSpec("/var/lib/cardinal/kubelet-root/cpu_manager_state:/var/lib/cardinal/cpu-state/cpu_manager_state")
	if err != nil || src != "/var/lib/cardinal/kubelet-root/cpu_manager_state" || dst != "/var/lib/cardinal/cpu-state/cpu_manager_state" {
		t.Errorf("ParseSpec = %q, %q, %v", src, dst, err)
	}
	for _, bad := range []string{"", "/a", "a:/b", "/a:b", ":"} {
		if _, _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, cfg := range map[string]Config{
		"same file":      {Src: dir + "/a", Dst: dir + "/a", MaxBytes: 1, Interval: time.Second},
		"no folder":      {Src: dir + "/a", Dst: dir + "/missing/b", MaxBytes: 1, Interval: time.Second},
		"no interval":    {Src: dir + "/a", Dst: dir + "/b", MaxBytes: 1},
		"no bound":       {Src: dir + "/a", Dst: dir + "/b", Interval: time.Second},
		"no destination": {Src: dir + "/a", MaxBytes: 1, Interval: time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
