// Package filecopy keeps a copy of one file that its writer replaces by a rename (the kubelet's
// CPU manager checkpoint): the copy follows every replacement and is itself replaced atomically, so
// its reader never sees a half-written file.
//
// The device plugin's DaemonSet runs it in a container of its own (device-plugin
// --copy-cpu-manager-state=SRC:DST): that container alone mounts the kubelet's root, read-only, with
// no ServiceAccount token and no capabilities, and writes the checkpoint into a folder it shares with
// the plugin. A single-file bind mount would not do: it keeps the inode of the file the kubelet has
// since renamed over, and goes stale at the first change.
package filecopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// Config says what to copy where.
type Config struct {
	// Src is the file to copy; a missing Src removes Dst (its reader then sees no file, as it would
	// have read the source).
	Src string
	// Dst is the copy; its folder must exist. Temporary files sit beside it (".<name>.tmp-*").
	Dst string
	// MaxBytes bounds what is copied: a larger Src removes Dst and is logged.
	MaxBytes int64
	// Interval is how often Src is checked (a stat; it is read only when it changed).
	Interval time.Duration
	Log      logr.Logger
}

func (c Config) validate() error {
	switch {
	case c.Src == "" || c.Dst == "":
		return errors.New("source and destination must both be set")
	case filepath.Clean(c.Src) == filepath.Clean(c.Dst):
		return fmt.Errorf("source and destination are the same file %s", c.Src)
	case c.MaxBytes <= 0:
		return fmt.Errorf("MaxBytes %d is not positive", c.MaxBytes)
	case c.Interval <= 0:
		return fmt.Errorf("interval %s is not positive", c.Interval)
	}
	if fi, err := os.Stat(filepath.Dir(c.Dst)); err != nil {
		return fmt.Errorf("destination folder: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("destination folder %s is not a folder", filepath.Dir(c.Dst))
	}
	return nil
}

// ParseSpec splits a SRC:DST flag value (both absolute paths).
func ParseSpec(spec string) (src, dst string, err error) {
	src, dst, ok := strings.Cut(spec, ":")
	if !ok || !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
		return "", "", fmt.Errorf("%q is not SRC:DST with two absolute paths", spec)
	}
	return filepath.Clean(src), filepath.Clean(dst), nil
}

// stamp tells whether a file changed: the writer's rename gives it a new inode; a rewrite in place a
// new size or modification time.
type stamp struct {
	dev, ino uint64
	size     int64
	modTime  time.Time
}

func stampOf(fi fs.FileInfo) stamp {
	st := stamp{size: fi.Size(), modTime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(sys.Dev), sys.Ino //nolint:unconvert // Dev's type differs by platform
	}
	return st
}

// Copier keeps Dst a copy of Src.
type Copier struct {
	cfg Config
	// last is the stamp of the source the copy was made from; ok says there is one.
	last   stamp
	copied bool
	// lastErr is the last failure logged, so that one failure is logged once.
	lastErr string
}

// New checks the configuration and removes temporary files an earlier copier left.
func New(cfg Config) (*Copier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(cfg.Dst), tmpPrefix(cfg.Dst)+"*"))
	for _, f := range left {
		_ = os.Remove(f)
	}
	return &Copier{cfg: cfg}, nil
}

func tmpPrefix(dst string) string { return "." + filepath.Base(dst) + ".tmp-" }

// Run copies at once, then whenever Src changes, until ctx ends.
func (c *Copier) Run(ctx context.Context) error {
	c.cfg.Log.Info("copying", "source", c.cfg.Src, "destination", c.cfg.Dst, "interval", c.cfg.Interval.String())
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.syncAndLog()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Copier) syncAndLog() {
	changed, err := c.Sync()
	switch {
	case err != nil:
		if msg := err.Error(); msg != c.lastErr {
			c.lastErr = msg
			c.cfg.Log.Error(err, "cannot copy", "source", c.cfg.Src, "destination", c.cfg.Dst)
		}
	case changed:
		c.lastErr = ""
		c.cfg.Log.V(1).Info("copied", "source", c.cfg.Src, "destination", c.cfg.Dst)
	}
}

// Sync brings Dst up to date with Src once: it copies when Src changed since the last copy or Dst
// is gone, and removes Dst when Src is gone, too large or unreadable. changed says Dst was written
// or removed.
func (c *Copier) Sync() (changed bool, err error) {
	fi, err := os.Stat(c.cfg.Src)
	if err != nil {
		return c.drop(fmt.Errorf("source: %w", err))
	}
	if c.copied && stampOf(fi) == c.last {
		if _, err := os.Lstat(c.cfg.Dst); err == nil {
			return false, nil
		}
	}
	f, err := os.Open(c.cfg.Src)
	if err != nil {
		return c.drop(fmt.Errorf("source: %w", err))
	}
	defer f.Close()
	// The stamp of the file opened, not of the path: a rename between stat and open is seen at the
	// next check.
	if fi, err = f.Stat(); err != nil {
		return c.drop(fmt.Errorf("source: %w", err))
	}
	if !fi.Mode().IsRegular() {
		return c.drop(fmt.Errorf("source %s is not a regular file", c.cfg.Src))
	}
	data, err := io.ReadAll(io.LimitReader(f, c.cfg.MaxBytes+1))
	if err != nil {
		return c.drop(fmt.Errorf("source %s: %w", c.cfg.Src, err))
	}
	if int64(len(data)) > c.cfg.MaxBytes {
		return c.drop(fmt.Errorf("source %s is larger than %d bytes", c.cfg.Src, c.cfg.MaxBytes))
	}
	if err := WriteAtomic(c.cfg.Dst, data); err != nil {
		return false, fmt.Errorf("copy to %s: %w", c.cfg.Dst, err)
	}
	c.last, c.copied = stampOf(fi), true
	return true, nil
}

// drop removes Dst after the source could not be copied, so its reader sees no file rather than a
// stale one; err is returned, except that a missing source is no error.
func (c *Copier) drop(cause error) (bool, error) {
	c.copied = false
	removed := false
	if err := os.Remove(c.cfg.Dst); err == nil {
		removed = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, errors.Join(cause, fmt.Errorf("remove the copy: %w", err))
	}
	if errors.Is(cause, fs.ErrNotExist) {
		return removed, nil
	}
	return removed, cause
}

// WriteAtomic writes data (mode 0644) to a temporary file beside dst and renames it over dst, so
// a reader sees the old content or the new, never a part; the temporary file is removed on failure.
func WriteAtomic(dst string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), tmpPrefix(dst)+"*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, dst)
	}
	if err != nil {
		_ = os.Remove(name)
	}
	return err
}
