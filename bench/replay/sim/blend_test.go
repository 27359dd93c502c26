package sim

import (
	"testing"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
)

func TestBlendWeightsKinds(t *testing.T) {
	pool := []trace.Pod{
		{Name: "c", CPUMilli: 1000},
		{Name: "f", NumGPU: 1, GPUMilli: 500},
		{Name: "8", NumGPU: 8, GPUMilli: 1000},
		{Name: "s", NumGPU: 8, GPUMilli: 1000, GPUSpec: []string{"G2"}},
	}
	b, err := ParseBlend("cpu=0,frac=0,8=3,spec=1")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := b.Make(pool, 200, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		// cpu and frac weigh 0; every 8-card pod without a gpu_spec gets the pool's one (spec=1).
		if p.NumGPU != 8 || len(p.GPUSpec) != 1 {
			t.Fatalf("drew %+v", p)
		}
	}
	again, _ := b.Make(pool, 200, 1)
	for i := range pods {
		if pods[i].Name != again[i].Name || pods[i].NumGPU != again[i].NumGPU {
			t.Fatalf("draw %d differs with the same seed", i)
		}
	}
	for _, bad := range []string{"8", "x=1", "8=-1", "spec=2"} {
		if _, err := ParseBlend(bad); err == nil {
			t.Errorf("ParseBlend(%q) accepted", bad)
		}
	}
}
