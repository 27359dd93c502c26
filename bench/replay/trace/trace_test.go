package trace

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

func TestReadPods(t *testing.T) {
	in := podHeader +
		"p0,12000,16384,1,1000,,LS,Running,0,1,0\n" +
		"p1,6000,12288,1,460,,LS,Running,0,1,0\n" +
		"p2,32000,65536,0,0,,BE,Failed,0,1,0\n" +
		"p3,8000,30000,8,1000,V100M16|V100M32,LS,Running,0,1,0\n"
	got, err := ReadPods(strings.NewReader(in), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Pod{
		{Name: "p0", CPUMilli: 12000, MemoryMiB: 16384, NumGPU: 1, GPUMilli: 1000},
		{Name: "p1", CPUMilli: 6000, MemoryMiB: 12288, NumGPU: 1, GPUMilli: 460},
		{Name: "p2", CPUMilli: 32000, MemoryMiB: 65536},
		{Name: "p3", CPUMilli: 8000, MemoryMiB: 30000, NumGPU: 8, GPUMilli: 1000, GPUSpec: []string{"V100M16", "V100M32"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pods (-want +got):\n%s", d)
	}
	// p3 asks for 8 whole cards = 8 * 1000 milli; p1 for 460 milli of one card.
	if got[3].GPUMilliTotal() != 8000 || got[1].GPUMilliTotal() != 460 || !got[1].Fractional() || got[0].Fractional() {
		t.Errorf("GPUMilliTotal/Fractional wrong: %+v", got)
	}
}

func TestReadPodsWithoutSpecColumn(t *testing.T) {
	// The multigpu50 variant has only the first five columns.
	in := "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,12000,16384,2,1000\n"
	got, err := ReadPods(strings.NewReader(in), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Pod{{Name: "p0", CPUMilli: 12000, MemoryMiB: 16384, NumGPU: 2, GPUMilli: 1000}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pods (-want +got):\n%s", d)
	}
}

func TestReadPodsErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty file", "", "pods.csv:1: empty file, expected a header line"},
		{"missing column", "name,cpu_milli,memory_mib,num_gpu\n", `pods.csv:1: header lacks column "gpu_milli"`},
		{"no rows", podHeader, "pods.csv:1: no pods"},
		{"not a number", podHeader + "p0,12k,1,1,1000,,,,,,\n", `pods.csv:2: column cpu_milli: value "12k": is not a whole number`},
		{"negative", podHeader + "p0,1,-5,1,1000,,,,,,\n", `pods.csv:2: column memory_mib: value "-5": is below 0`},
		{"milli above a card", podHeader + "p0,1,1,1,1001,,,,,,\n", `pods.csv:2: column gpu_milli: value "1001": is above 1000`},
		{"too many cards", podHeader + "p0,1,1,65,1000,,,,,,\n", `pods.csv:2: column num_gpu: value "65": is above 64`},
		{"shared multi-card", podHeader + "p0,1,1,1,1000,,,,,,\np1,1,1,2,500,,,,,,\n", `pods.csv:3: column gpu_milli: value "500": is not 1000 on a pod with num_gpu 2`},
		{"milli on cpu pod", podHeader + "p0,1,1,0,300,,,,,,\n", `pods.csv:2: column gpu_milli: value "300": is not 0 on a pod with num_gpu 0`},
		{"zero milli", podHeader + "p0,1,1,1,0,,,,,,\n", `pods.csv:2: column gpu_milli: value "0": is 0 on a pod with num_gpu 1`},
		{"empty spec entry", podHeader + "p0,1,1,1,1000,T4||P100,,,,,\n", `pods.csv:2: column gpu_spec: value "T4||P100": has an empty model between separators`},
		{"spec on cpu pod", podHeader + "p0,1,1,0,0,T4,,,,,\n", `pods.csv:2: column gpu_spec: value "T4": names card models on a pod with num_gpu 0`},
		{"empty name", podHeader + ",1,1,0,0,,,,,,\n", `pods.csv:2: column name: value "": is empty`},
		{"short row", podHeader + "p0,1,1,0\n", "pods.csv:2: wrong number of fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadPods(strings.NewReader(tt.in), "pods.csv")
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %q, want prefix %q", err, tt.want)
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Errorf("error %T is not a *trace.Error", err)
			}
		})
	}
}

func TestReadNodes(t *testing.T) {
	in := "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,32000,262144,0,\n"
	got, err := ReadNodes(strings.NewReader(in), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "n0", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 2, Model: "P100"},
		{Name: "n1", CPUMilli: 32000, MemoryMiB: 262144},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("nodes (-want +got):\n%s", d)
	}
}

func TestReadNodesErrors(t *testing.T) {
	const h = "sn,cpu_milli,memory_mib,gpu,model\n"
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"duplicate", h + "n0,1,1,1,T4\nn0,1,1,1,T4\n", `nodes.csv:3: column sn: value "n0": node already listed on line 2`},
		{"gpus without model", h + "n0,1,1,4,\n", `nodes.csv:2: column model: value "": is empty on a node with 4 GPUs`},
		{"model with separator", h + "n0,1,1,4,T4|P100\n", `nodes.csv:2: column model: value "T4|P100": contains a list separator`},
		{"bad gpu count", h + "n0,1,1,x,T4\n", `nodes.csv:2: column gpu: value "x": is not a whole number`},
		{"duplicate header", "sn,sn,cpu_milli,memory_mib,gpu,model\n", `nodes.csv:1: column sn: value "sn": column appears twice in the header`},
		{"no nodes", h, "nodes.csv:1: no nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadNodes(strings.NewReader(tt.in), "nodes.csv")
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v, want prefix %q", err, tt.want)
			}
		})
	}
}

// TestSharedTraces reads every file of the copied trace and checks the totals its README states.
func TestSharedTraces(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "testdata", "traces", "alibaba-gpu-v2023")
	nodes, err := LoadNodes(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	gpus := map[string]int{}
	total := 0
	for _, n := range nodes {
		gpus[n.Model] += n.GPUs
		total += n.GPUs
	}
	// README: 1213 nodes, 6212 GPUs: G2 4392, T4 842, G3 312, P100 265, V100M32 204, V100M16 195, A10 2.
	wantGPUs := map[string]int{"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "V100M32": 204, "V100M16": 195, "A10": 2}
	if len(nodes) != 1213 || total != 6212 {
		t.Errorf("got %d nodes, %d GPUs; want 1213, 6212", len(nodes), total)
	}
	if d := cmp.Diff(wantGPUs, gpus); d != "" {
		t.Errorf("GPUs per model (-want +got):\n%s", d)
	}
	all, err := LoadNodes(filepath.Join(dir, "openb_node_list_all_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1523 {
		t.Errorf("all-node list: %d nodes, want 1523", len(all))
	}
	for file, rows := range map[string]int{
		"openb_pod_list_default.csv":     8152,
		"openb_pod_list_gpushare100.csv": 8152,
		"openb_pod_list_multigpu50.csv":  9061,
		"openb_pod_list_gpuspec20.csv":   8152,
	} {
		pods, err := LoadPods(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != rows {
			t.Errorf("%s: %d pods, want %d", file, len(pods), rows)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := LoadPods(filepath.Join(t.TempDir(), "nope.csv"))
	if err == nil || !strings.Contains(err.Error(), "nope.csv") {
		t.Errorf("error %v, want one naming the file", err)
	}
}

// WritePods writes a pod list that ReadPods reads back to the same pods (a model list included).
func TestWritePodsRoundTrip(t *testing.T) {
	pods := []Pod{
		{Name: "p0", CPUMilli: 12000, MemoryMiB: 16384, NumGPU: 1, GPUMilli: 1000},
		{Name: "p1", CPUMilli: 6000, MemoryMiB: 12288, NumGPU: 1, GPUMilli: 460},
		{Name: "p2", CPUMilli: 32000, MemoryMiB: 65536},
		{Name: "p3", CPUMilli: 8000, MemoryMiB: 30000, NumGPU: 8, GPUMilli: 1000, GPUSpec: []string{"V100M16", "V100M32"}},
	}
	var b strings.Builder
	if err := WritePods(&b, pods); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPods(strings.NewReader(b.String()), "dump.csv")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(pods, got); d != "" {
		t.Errorf("pods read back (-written +read):\n%s", d)
	}
}
