package stack

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Names of Cardinal's binaries, as `go build ./cmd/<name>` writes them.
const (
	ExtenderBinary = "scheduler-extender"
	WebhookBinary  = "webhook"
	PluginBinary   = "device-plugin"
)

// ExactSchedulerName is the chart's default exactSchedulerName, which every component is told of as
// the chart tells it.
const ExactSchedulerName = "cardinal-scheduler-exact"

// modulePath is the main module; Root looks for its go.mod.
const modulePath = "github.com/cardinal-gpu/cardinal"

// Root returns the repository root: the first folder at or above the working directory whose
// go.mod declares Cardinal's module.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + modulePath + " at or above the working directory")
		}
		dir = parent
	}
}

// Build builds the scheduler extender, the webhook and the device plugin from the module at root
// into out, as `make build` does: the device plugin with cgo (go-nvml loads libnvidia-ml at run
// time), the other two without. It returns go build's output with the error.
func Build(root, out string) error {
	builds := []struct {
		cgo  string
		pkgs []string
	}{
		{"0", []string{"./cmd/" + ExtenderBinary, "./cmd/" + WebhookBinary}},
		{"1", []string{"./cmd/" + PluginBinary}},
	}
	for _, b := range builds {
		args := append([]string{"build", "-o", out + string(filepath.Separator)}, b.pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("CGO_ENABLED=%s go %s: %w\n%s", b.cgo, strings.Join(args, " "), err, output.String())
		}
	}
	for _, name := range []string{ExtenderBinary, WebhookBinary, PluginBinary} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			return fmt.Errorf("go build left no %s: %w", name, err)
		}
	}
	return nil
}
