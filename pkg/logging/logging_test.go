package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestAddFlags(t *testing.T) {
	tests := []struct {
		name  string
		start Options
		args  []string
		want  Options
	}{
		{name: "defaults", args: nil, want: Options{Verbosity: 0, Format: "json"}},
		{name: "flags", args: []string{"--v=3", "--log-format=console"}, want: Options{Verbosity: 3, Format: "console"}},
		{name: "current values are the defaults", start: Options{Verbosity: 2, Format: "console"}, want: Options{Verbosity: 2, Format: "console"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.start
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, o); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		o       Options
		wantErr string
	}{
		{Options{Verbosity: -1}, "--v: -1 is not in 0..10"},
		{Options{Verbosity: 11}, "--v: 11 is not in 0..10"},
		{Options{Format: "text"}, `--log-format: "text" is not json or console`},
	}
	for _, tt := range tests {
		_, err := New(tt.o)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("New(%+v) error = %q, want %q", tt.o, got, tt.wantErr)
		}
	}
}

func TestNewJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(Options{Verbosity: 1, Output: &buf})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("pod bound", KeyPod, "default/train-0", KeyNode, "node-a")
	log.V(1).Info("shown at --v=1")
	log.V(2).Info("hidden at --v=1")
	log.Error(errors.New("boom"), "bind failed", KeyReason, "conflict")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3 (V(2) must be dropped at --v=1):\n%s", len(lines), buf.String())
	}
	var entries []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line is not JSON: %s: %v", l, err)
		}
		for _, k := range []string{"ts", "caller"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line lacks %q: %s", k, l)
			}
			delete(m, k)
		}
		entries = append(entries, m)
	}
	want := []map[string]any{
		{"level": "info", "msg": "pod bound", "pod": "default/train-0", "node": "node-a"},
		{"level": "debug", "msg": "shown at --v=1"},
		{"level": "error", "msg": "bind failed", "reason": "conflict", "error": "boom"},
	}
	delete(entries[2], "stacktrace") // error lines carry one; its content is zap's business
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if !strings.Contains(lines[0], `"caller":"logging/logging_test.go:`) {
		t.Errorf("caller is not this test file: %s", lines[0])
	}
}

func TestNewConsole(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(Options{Format: "console", Output: &buf})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("card chosen", KeyGPU, "GPU-1")
	log.V(1).Info("hidden at --v=0")
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "card chosen") || !strings.Contains(out, `{"gpu": "GPU-1"}`) || strings.HasPrefix(out, "{") {
		t.Errorf("console line = %q", out)
	}
}
