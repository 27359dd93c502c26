// Package logging builds the structured logger every Cardinal binary uses (zap behind logr) and holds
// the well-known log keys, so the same thing is called the same name in every program's logs.
package logging

import (
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Well-known keys for key/value pairs.
const (
	KeyPod       = "pod"
	KeyNode      = "node"
	KeyContainer = "container"
	KeyDevices   = "devices"
	KeyGPU       = "gpu"
	KeyReason    = "reason"
	KeyPolicy    = "policy"
	KeyDuration  = "duration"
)

// Options are the logging flags.
type Options struct {
	// Verbosity: 0 is info, higher values enable V(n) debug logs.
	Verbosity int
	// Format is "json" (default, for log pipelines) or "console" (for people).
	Format string
	// Output is where logs go; nil means the process's standard error.
	Output io.Writer
}

// AddFlags registers --v and --log-format, defaulting to the current values of o (json when unset).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Verbosity, "v", o.Verbosity, "log verbosity: 0 info, 1-5 more detail")
	if o.Format == "" {
		o.Format = "json"
	}
	fs.StringVar(&o.Format, "log-format", o.Format, `log format: "json" (for log pipelines) or "console" (for people)`)
}

// New builds the logger.
func New(o Options) (logr.Logger, error) {
	if o.Verbosity < 0 || o.Verbosity > 10 {
		return logr.Discard(), fmt.Errorf("--v: %d is not in 0..10", o.Verbosity)
	}
	var enc zapcore.Encoder
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	switch o.Format {
	case "json", "":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return logr.Discard(), fmt.Errorf("--log-format: %q is not json or console", o.Format)
	}
	level := zap.NewAtomicLevelAt(zapcore.Level(-o.Verbosity))
	var out io.Writer = stderr{}
	if o.Output != nil {
		out = o.Output
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(out)), level)
	return zapr.NewLogger(zap.New(core, zap.AddCaller())), nil
}
