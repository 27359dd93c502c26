package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestCardsFits(t *testing.T) {
	cards := testCards() // node-a: 8× A100 81920 MiB (GPU-a-0..7); node-c: 3× T4 15360 MiB (GPU-c-0..2)
	tests := []struct {
		name   string
		ann    map[string]string
		memMiB int64
		want   bool
	}{
		{"no selector", nil, 0, true},
		{"no selector, as large as the largest card", nil, 81920, true},
		{"no selector, larger than every card", nil, 81921, false},
		{"a type by substring, any case", map[string]string{annotations.UseGPUType: "a100-sxm4"}, 0, true},
		{"a type no card has", map[string]string{annotations.UseGPUType: "H100"}, 0, false},
		{"T4 has 15360 MiB: 15360 fits", map[string]string{annotations.UseGPUType: "T4"}, 15360, true},
		{"T4 has 15360 MiB: 15361 does not", map[string]string{annotations.UseGPUType: "T4"}, 15361, false},
		{"excluding A100 leaves T4", map[string]string{annotations.NoUseGPUType: "a100"}, 0, true},
		{"excluding both models leaves nothing", map[string]string{annotations.NoUseGPUType: "a100,t4"}, 0, false},
		{"a known UUID", map[string]string{annotations.UseGPUUUID: "GPU-c-1"}, 0, true},
		{"a known UUID of the wrong type", map[string]string{annotations.UseGPUUUID: "GPU-c-1", annotations.UseGPUType: "A100"}, 0, false},
		{"a known UUID too small", map[string]string{annotations.UseGPUUUID: "GPU-c-1"}, 20000, false},
		{"an unknown UUID", map[string]string{annotations.UseGPUUUID: "GPU-z"}, 0, false},
		{"every T4 excluded by UUID", map[string]string{annotations.UseGPUType: "T4", annotations.NoUseGPUUUID: "GPU-c-0,GPU-c-1,GPU-c-2"}, 0, false},
		{"two of three T4 excluded: one left", map[string]string{annotations.UseGPUType: "T4", annotations.NoUseGPUUUID: "GPU-c-0,GPU-c-2"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := annotations.ParseSelector(tt.ann)
			if err != nil {
				t.Fatal(err)
			}
			if got := cards.Fits(&sel, tt.memMiB); got != tt.want {
				t.Errorf("Fits(%s, %d MiB) = %v, want %v", sel.String(), tt.memMiB, got, tt.want)
			}
		})
	}
}

func TestCardsSummary(t *testing.T) {
	tests := []struct {
		name  string
		cards *Cards
		want  string
		// nodes, total, largest per node
		wantCounts [3]int
	}{
		{"nothing known", nil, "no cards", [3]int{0, 0, 0}},
		{"a node without cards is not counted", NewCards(map[string]annotations.Inventory{"n": {V: 1}}), "no cards", [3]int{0, 0, 0}},
		{"two models, sorted by name", testCards(), "8× NVIDIA A100-SXM4-80GB, 3× Tesla T4", [3]int{2, 11, 8}},
		{"at most five models named", NewCards(map[string]annotations.Inventory{
			"n": {V: 1, GPUs: []annotations.GPU{
				{UUID: "1", Model: "A"}, {UUID: "2", Model: "B"}, {UUID: "3", Model: "C"}, {UUID: "4", Model: "D"},
				{UUID: "5", Model: "E"}, {UUID: "6", Model: "F"}, {UUID: "7", Model: "G"},
			}},
		}), "1× A, 1× B, 1× C, 1× D, 1× E, 2 more models", [3]int{1, 7, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.cards.Summary()); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
			got := [3]int{tt.cards.Nodes(), tt.cards.Total(), 0}
			if tt.cards.Known() {
				got[2] = tt.cards.MaxPerNode()
			}
			if got != tt.wantCounts {
				t.Errorf("nodes, cards, most per node = %v, want %v", got, tt.wantCounts)
			}
		})
	}
}
