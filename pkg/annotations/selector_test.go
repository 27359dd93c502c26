package annotations

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// manyUUIDs returns n distinct comma-separated UUID-like entries.
func manyUUIDs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "GPU-%08d", i)
	}
	return b.String()
}

// errString is the message of err, or "" for nil, so tables can hold the exact expected text.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestParseSelector(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    Selector
		wantErr string
	}{
		{
			name: "no annotations: no constraint, default policies",
			ann:  nil,
			want: Selector{},
		},
		{
			name: "unrelated annotations are ignored",
			ann:  map[string]string{"app": "train", "cardinal.io/gpu-assignment": "x"},
			want: Selector{},
		},
		{
			name: "use-gputype is lower-cased, trimmed, deduplicated, in order",
			ann:  map[string]string{UseGPUType: " A100 , H100,a100"},
			want: Selector{UseTypes: []string{"a100", "h100"}},
		},
		{
			name: "nouse-gputype",
			ann:  map[string]string{NoUseGPUType: "T4,Tesla K80"},
			want: Selector{NoUseTypes: []string{"t4", "tesla k80"}},
		},
		{
			name: "use-gpuuuid keeps case (exact match)",
			ann:  map[string]string{UseGPUUUID: "GPU-AbC,GPU-abc, GPU-AbC"},
			want: Selector{UseUUIDs: []string{"GPU-AbC", "GPU-abc"}},
		},
		{
			name: "nouse-gpuuuid",
			ann:  map[string]string{NoUseGPUUUID: "GPU-1"},
			want: Selector{NoUseUUIDs: []string{"GPU-1"}},
		},
		{
			name: "a narrower nouse-gputype inside a use-gputype is allowed (A100 but not the 40GB one)",
			ann:  map[string]string{UseGPUType: "A100", NoUseGPUType: "A100-SXM4-40GB"},
			want: Selector{UseTypes: []string{"a100"}, NoUseTypes: []string{"a100-sxm4-40gb"}},
		},
		{name: "numa-bind true", ann: map[string]string{NUMABind: "true"}, want: Selector{NUMABind: true}},
		{name: "numa-bind TRUE with spaces", ann: map[string]string{NUMABind: " TRUE "}, want: Selector{NUMABind: true}},
		{name: "numa-bind False", ann: map[string]string{NUMABind: "False"}, want: Selector{}},
		{name: "numa-bind empty means false", ann: map[string]string{NUMABind: ""}, want: Selector{}},
		{
			name:    "numa-bind yes",
			ann:     map[string]string{NUMABind: "yes"},
			wantErr: `nvidia.com/numa-bind: "yes" is not true or false`,
		},
		{
			name:    "numa-bind 1",
			ann:     map[string]string{NUMABind: "1"},
			wantErr: `nvidia.com/numa-bind: "1" is not true or false`,
		},
		{
			name: "policies, case-insensitive and trimmed",
			ann:  map[string]string{NodePolicy: "Spread", GPUPolicy: " BINPACK "},
			want: Selector{NodePolicy: PolicySpread, GPUPolicy: PolicyBinpack},
		},
		{
			name: "frag-aware policy",
			ann:  map[string]string{NodePolicy: "frag-aware", GPUPolicy: "Frag-Aware"},
			want: Selector{NodePolicy: PolicyFragAware, GPUPolicy: PolicyFragAware},
		},
		{
			name:    "unknown node policy",
			ann:     map[string]string{NodePolicy: "best-fit"},
			wantErr: `cardinal.io/node-policy: unknown policy "best-fit" (known: binpack, spread, frag-aware)`,
		},
		{
			name:    "unknown gpu policy",
			ann:     map[string]string{GPUPolicy: "Random"},
			wantErr: `cardinal.io/gpu-policy: unknown policy "Random" (known: binpack, spread, frag-aware)`,
		},
		{
			name:    "empty policy",
			ann:     map[string]string{GPUPolicy: ""},
			wantErr: `cardinal.io/gpu-policy: unknown policy "" (known: binpack, spread, frag-aware)`,
		},
		{
			name:    "use-gputype: empty entry at position 2",
			ann:     map[string]string{UseGPUType: "A100,,H100"},
			wantErr: `nvidia.com/use-gputype: empty entry at position 2 in "A100,,H100"`,
		},
		{
			name:    "use-gputype: empty value is an empty entry at position 1",
			ann:     map[string]string{UseGPUType: ""},
			wantErr: `nvidia.com/use-gputype: empty entry at position 1 in ""`,
		},
		{
			name:    "nouse-gputype: trailing comma is an empty entry at position 3",
			ann:     map[string]string{NoUseGPUType: "T4,K80,"},
			wantErr: `nvidia.com/nouse-gputype: empty entry at position 3 in "T4,K80,"`,
		},
		{
			name:    "use-gpuuuid: blank entry at position 2",
			ann:     map[string]string{UseGPUUUID: "GPU-a, ,GPU-b"},
			wantErr: `nvidia.com/use-gpuuuid: empty entry at position 2 in "GPU-a, ,GPU-b"`,
		},
		{
			name:    "nouse-gpuuuid: leading comma is an empty entry at position 1",
			ann:     map[string]string{NoUseGPUUUID: ",GPU-a"},
			wantErr: `nvidia.com/nouse-gpuuuid: empty entry at position 1 in ",GPU-a"`,
		},
		{
			name:    "UUID in both use and nouse",
			ann:     map[string]string{UseGPUUUID: "GPU-a,GPU-b", NoUseGPUUUID: "GPU-b"},
			wantErr: `nvidia.com/nouse-gpuuuid: GPU-b is also in nvidia.com/use-gpuuuid`,
		},
		{
			name: "UUIDs differing in case are different cards, not a conflict",
			ann:  map[string]string{UseGPUUUID: "GPU-a", NoUseGPUUUID: "GPU-A"},
			want: Selector{UseUUIDs: []string{"GPU-a"}, NoUseUUIDs: []string{"GPU-A"}},
		},
		{
			name:    "type in both use and nouse, compared case-insensitively",
			ann:     map[string]string{UseGPUType: "A100,T4", NoUseGPUType: "t4"},
			wantErr: `nvidia.com/nouse-gputype: t4 is also in nvidia.com/use-gputype`,
		},
		{
			name: "overlaps: the first five are named, the rest counted",
			ann:  map[string]string{UseGPUUUID: "a,b,c,d,e,f,g,h", NoUseGPUUUID: "h,x,g,f,e,d,c"},
			wantErr: `nvidia.com/nouse-gpuuuid: h is also in nvidia.com/use-gpuuuid` + "\n" +
				`nvidia.com/nouse-gpuuuid: g is also in nvidia.com/use-gpuuuid` + "\n" +
				`nvidia.com/nouse-gpuuuid: f is also in nvidia.com/use-gpuuuid` + "\n" +
				`nvidia.com/nouse-gpuuuid: e is also in nvidia.com/use-gpuuuid` + "\n" +
				`nvidia.com/nouse-gpuuuid: d is also in nvidia.com/use-gpuuuid` + "\n" +
				`nvidia.com/nouse-gpuuuid: 1 more entries are also in nvidia.com/use-gpuuuid`,
		},
		{
			name:    "a long value is clipped in the message",
			ann:     map[string]string{UseGPUType: strings.Repeat("a,", 100) + ","},
			wantErr: `nvidia.com/use-gputype: empty entry at position 101 in "` + strings.Repeat("a,", 60) + `"…`,
		},
		{
			name: "MaxListEntries entries",
			ann:  map[string]string{UseGPUUUID: manyUUIDs(MaxListEntries)},
			want: Selector{UseUUIDs: strings.Split(manyUUIDs(MaxListEntries), ",")},
		},
		{
			name:    "more than MaxListEntries entries",
			ann:     map[string]string{NoUseGPUUUID: manyUUIDs(MaxListEntries + 1)},
			wantErr: `nvidia.com/nouse-gpuuuid: 4097 entries, more than 4096`,
		},
		{
			name: "every problem is reported, one per line, in key order",
			ann: map[string]string{
				UseGPUType:   "a,",
				NoUseGPUType: ",b",
				UseGPUUUID:   "GPU-1",
				NoUseGPUUUID: "GPU-1",
				NUMABind:     "maybe",
				NodePolicy:   "x",
				GPUPolicy:    "y",
			},
			wantErr: `nvidia.com/use-gputype: empty entry at position 2 in "a,"` + "\n" +
				`nvidia.com/nouse-gputype: empty entry at position 1 in ",b"` + "\n" +
				`nvidia.com/nouse-gpuuuid: GPU-1 is also in nvidia.com/use-gpuuuid` + "\n" +
				`nvidia.com/numa-bind: "maybe" is not true or false` + "\n" +
				`cardinal.io/node-policy: unknown policy "x" (known: binpack, spread, frag-aware)` + "\n" +
				`cardinal.io/gpu-policy: unknown policy "y" (known: binpack, spread, frag-aware)`,
		},
		{
			// An OSC 8 hyperlink, then a carriage return that would let a table row be rewritten.
			name:    "an escape sequence in use-gputype is refused, quoted",
			ann:     map[string]string{UseGPUType: "A100\x1b]8;;https://evil.example\x07H100\x1b]8;;\x07"},
			wantErr: `nvidia.com/use-gputype: control character U+001B at position 5 in "A100\x1b]8;;https://evil.example\aH100\x1b]8;;\a": a selector holds printable text only`,
		},
		{
			name: "every control character is refused in every selector key, each named",
			ann: map[string]string{
				UseGPUType:   "A100\a",
				NoUseGPUType: "T4\r",
				UseGPUUUID:   "GPU-1\x7f",
				NoUseGPUUUID: "GPU-2\u009b2J",
				NUMABind:     "true\x00",
				NodePolicy:   "spread\n",
				GPUPolicy:    "\tbinpack",
				GPULink:      "nvlink\x1b[2K",
			},
			wantErr: `nvidia.com/use-gputype: control character U+0007 at position 5 in "A100\a": a selector holds printable text only` + "\n" +
				`nvidia.com/nouse-gputype: control character U+000D at position 3 in "T4\r": a selector holds printable text only` + "\n" +
				`nvidia.com/use-gpuuuid: control character U+007F at position 6 in "GPU-1\x7f": a selector holds printable text only` + "\n" +
				`nvidia.com/nouse-gpuuuid: control character U+009B at position 6 in "GPU-2\u009b2J": a selector holds printable text only` + "\n" +
				`nvidia.com/numa-bind: control character U+0000 at position 5 in "true\x00": a selector holds printable text only` + "\n" +
				`cardinal.io/node-policy: control character U+000A at position 7 in "spread\n": a selector holds printable text only` + "\n" +
				`cardinal.io/gpu-policy: control character U+0009 at position 1 in "\tbinpack": a selector holds printable text only` + "\n" +
				`cardinal.io/gpu-link: control character U+001B at position 7 in "nvlink\x1b[2K": a selector holds printable text only`,
		},
		{
			name:    "invalid UTF-8 is refused",
			ann:     map[string]string{UseGPUType: "A100\x9b2J"},
			wantErr: `nvidia.com/use-gputype: "A100\x9b2J" is not valid UTF-8 text`,
		},
		{
			name: "printable text beyond ASCII is kept",
			ann:  map[string]string{UseGPUType: "Ä100,RTX™"},
			want: Selector{UseTypes: []string{"ä100", "rtx™"}},
		},
		{
			name: "everything at once",
			ann: map[string]string{
				UseGPUType:   "A100",
				NoUseGPUType: "40GB",
				UseGPUUUID:   "GPU-1,GPU-2",
				NoUseGPUUUID: "GPU-3",
				NUMABind:     "true",
				NodePolicy:   "spread",
				GPUPolicy:    "binpack",
			},
			want: Selector{
				UseTypes: []string{"a100"}, NoUseTypes: []string{"40gb"},
				UseUUIDs: []string{"GPU-1", "GPU-2"}, NoUseUUIDs: []string{"GPU-3"},
				NUMABind: true, NodePolicy: PolicySpread, GPUPolicy: PolicyBinpack,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSelector(tt.ann)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSelectorErrorsAreTyped(t *testing.T) {
	_, err := ParseSelector(map[string]string{UseGPUUUID: "a,,b"})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *Error", err)
	}
	if diff := cmp.Diff(&Error{Key: UseGPUUUID, Reason: `empty entry at position 2 in "a,,b"`}, e); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSelectorCheck(t *testing.T) {
	const (
		a100   = "NVIDIA A100-SXM4-80GB"
		a100s  = "NVIDIA A100-SXM4-40GB"
		t4     = "Tesla T4"
		uuidA  = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
		uuidB  = "GPU-5e1b9a1c-8f0e-4a4c-9d55-0b0c0ffee001"
		uuidAu = "GPU-03F69C50-207A-2038-9B45-23CAC89CB67D"
	)
	tests := []struct {
		name  string
		ann   map[string]string
		model string
		uuid  string
		want  Mismatch
	}{
		{name: "no selector accepts anything", model: t4, uuid: uuidA, want: MatchOK},
		{name: "type: short name matches full model", ann: map[string]string{UseGPUType: "A100"}, model: a100, uuid: uuidA, want: MatchOK},
		{name: "type: full model matches itself", ann: map[string]string{UseGPUType: a100}, model: a100, uuid: uuidA, want: MatchOK},
		{name: "type: case-insensitive both ways", ann: map[string]string{UseGPUType: "a100-sxm4"}, model: "NVIDIA A100-SXM4-80GB", uuid: uuidA, want: MatchOK},
		{name: "type: substring anywhere", ann: map[string]string{UseGPUType: "80gb"}, model: a100, uuid: uuidA, want: MatchOK},
		{name: "type: one of several entries", ann: map[string]string{UseGPUType: "H100,T4"}, model: t4, uuid: uuidA, want: MatchOK},
		{name: "type: no entry in model", ann: map[string]string{UseGPUType: "H100,V100"}, model: a100, uuid: uuidA, want: MismatchUseType},
		{name: "type: entry longer than model does not match", ann: map[string]string{UseGPUType: "Tesla T4 PCIe"}, model: t4, uuid: uuidA, want: MismatchUseType},
		{name: "nouse type: entry in model", ann: map[string]string{NoUseGPUType: "t4"}, model: t4, uuid: uuidA, want: MismatchNoUseType},
		{name: "nouse type: entry not in model", ann: map[string]string{NoUseGPUType: "T4"}, model: a100, uuid: uuidA, want: MatchOK},
		{name: "use and narrower nouse: the 80GB card passes", ann: map[string]string{UseGPUType: "A100", NoUseGPUType: "40GB"}, model: a100, uuid: uuidA, want: MatchOK},
		{name: "use and narrower nouse: the 40GB card is refused by nouse", ann: map[string]string{UseGPUType: "A100", NoUseGPUType: "40GB"}, model: a100s, uuid: uuidA, want: MismatchNoUseType},
		{name: "uuid: exact match", ann: map[string]string{UseGPUUUID: uuidB + "," + uuidA}, model: t4, uuid: uuidA, want: MatchOK},
		{name: "uuid: case matters", ann: map[string]string{UseGPUUUID: uuidAu}, model: t4, uuid: uuidA, want: MismatchUseUUID},
		{name: "uuid: a prefix is not a match", ann: map[string]string{UseGPUUUID: "GPU-03f69c50"}, model: t4, uuid: uuidA, want: MismatchUseUUID},
		{name: "nouse uuid: exact match refuses", ann: map[string]string{NoUseGPUUUID: uuidA}, model: t4, uuid: uuidA, want: MismatchNoUseUUID},
		{name: "nouse uuid: other card passes", ann: map[string]string{NoUseGPUUUID: uuidA}, model: t4, uuid: uuidB, want: MatchOK},
		{
			name:  "all constraints together: passes every one",
			ann:   map[string]string{UseGPUType: "A100", NoUseGPUType: "40GB", UseGPUUUID: uuidA, NoUseGPUUUID: uuidB},
			model: a100, uuid: uuidA, want: MatchOK,
		},
		{
			name:  "all constraints together: the type fits but the UUID is excluded",
			ann:   map[string]string{UseGPUType: "A100", NoUseGPUType: "40GB", NoUseGPUUUID: uuidB},
			model: a100, uuid: uuidB, want: MismatchNoUseUUID,
		},
		{
			name:  "all constraints together: the UUID is listed but the type is wrong",
			ann:   map[string]string{UseGPUType: "H100", UseGPUUUID: uuidA},
			model: a100, uuid: uuidA, want: MismatchUseType,
		},
		{
			name:  "order: use-gputype is reported before nouse-gputype",
			ann:   map[string]string{UseGPUType: "H100", NoUseGPUType: "A100"},
			model: a100, uuid: uuidA, want: MismatchUseType,
		},
		{
			name:  "order: nouse-gputype is reported before use-gpuuuid",
			ann:   map[string]string{NoUseGPUType: "A100", UseGPUUUID: uuidB},
			model: a100, uuid: uuidA, want: MismatchNoUseType,
		},
		{
			name:  "order: use-gpuuuid is reported before nouse-gpuuuid",
			ann:   map[string]string{UseGPUUUID: uuidB, NoUseGPUUUID: uuidA},
			model: a100, uuid: uuidA, want: MismatchUseUUID,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSelector(tt.ann)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Check(tt.model, tt.uuid); got != tt.want {
				t.Errorf("Check(%q, %q) = %v (%q), want %v (%q)", tt.model, tt.uuid, got, got.Key(), tt.want, tt.want.Key())
			}
			g := &GPU{UUID: tt.uuid, Model: tt.model, Shares: 1}
			if got, want := s.Accepts(g), tt.want == MatchOK; got != want {
				t.Errorf("Accepts = %v, want %v", got, want)
			}
		})
	}
}

func TestMismatchKey(t *testing.T) {
	tests := []struct {
		m    Mismatch
		want string
	}{
		{MatchOK, ""},
		{MismatchUseType, UseGPUType},
		{MismatchNoUseType, NoUseGPUType},
		{MismatchUseUUID, UseGPUUUID},
		{MismatchNoUseUUID, NoUseGPUUUID},
		{Mismatch(99), ""},
	}
	for _, tt := range tests {
		if got := tt.m.Key(); got != tt.want {
			t.Errorf("Mismatch(%d).Key() = %q, want %q", tt.m, got, tt.want)
		}
	}
}

func TestSelectorStringAndHasCardConstraint(t *testing.T) {
	tests := []struct {
		name     string
		ann      map[string]string
		want     string
		wantCard bool
	}{
		{name: "empty", want: "", wantCard: false},
		{name: "policies and numa-bind are not card constraints", ann: map[string]string{NodePolicy: "spread", NUMABind: "true"}, want: "numa-bind=true", wantCard: false},
		{name: "use type", ann: map[string]string{UseGPUType: "A100,H100"}, want: "use-gputype=a100,h100", wantCard: true},
		{name: "nouse type", ann: map[string]string{NoUseGPUType: "T4"}, want: "nouse-gputype=t4", wantCard: true},
		{name: "use uuid", ann: map[string]string{UseGPUUUID: "GPU-1"}, want: "use-gpuuuid=GPU-1", wantCard: true},
		{name: "nouse uuid", ann: map[string]string{NoUseGPUUUID: "GPU-2"}, want: "nouse-gpuuuid=GPU-2", wantCard: true},
		{
			name: "all, in a fixed order",
			ann:  map[string]string{NUMABind: "true", NoUseGPUUUID: "GPU-2", UseGPUUUID: "GPU-1", NoUseGPUType: "T4", UseGPUType: "A100"},
			want: "use-gputype=a100 nouse-gputype=t4 use-gpuuuid=GPU-1 nouse-gpuuuid=GPU-2 numa-bind=true", wantCard: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSelector(tt.ann)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got := s.HasCardConstraint(); got != tt.wantCard {
				t.Errorf("HasCardConstraint() = %v, want %v", got, tt.wantCard)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		value   string
		want    Policy
		wantErr string
	}{
		{value: "binpack", want: PolicyBinpack},
		{value: "SPREAD", want: PolicySpread},
		{value: "\tfrag-aware\n", want: PolicyFragAware},
		{value: "frag_aware", wantErr: `some/key: unknown policy "frag_aware" (known: binpack, spread, frag-aware)`},
		{value: "bin pack", wantErr: `some/key: unknown policy "bin pack" (known: binpack, spread, frag-aware)`},
	}
	for _, tt := range tests {
		got, err := ParsePolicy("some/key", tt.value)
		if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
			t.Errorf("ParsePolicy(%q) error (-want +got):\n%s", tt.value, diff)
		}
		if got != tt.want {
			t.Errorf("ParsePolicy(%q) = %q, want %q", tt.value, got, tt.want)
		}
	}
}
