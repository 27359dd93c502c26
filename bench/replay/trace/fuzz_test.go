package trace

import (
	"strings"
	"testing"
)

// FuzzReadPods feeds arbitrary text to the pod-list decoder: it must never panic, and every pod it
// accepts must satisfy the invariants the replay relies on.
func FuzzReadPods(f *testing.F) {
	f.Add(podHeader + "p0,12000,16384,1,1000,,LS,Running,0,1,0\n")
	f.Add(podHeader + "p1,6000,12288,1,460,T4|P100,LS,Running,0,1,0\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,8,1000\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,8,\"1000\"\n")
	f.Add("gpu_milli,num_gpu,memory_mib,cpu_milli,name,extra\n500,1,2,3,x,y\n")
	f.Add("\ufeffname,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
	f.Fuzz(func(t *testing.T, in string) {
		pods, err := ReadPods(strings.NewReader(in), "fuzz.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		for _, p := range pods {
			switch {
			case p.Name == "":
				t.Errorf("accepted a pod without a name: %+v", p)
			case p.NumGPU < 0 || p.NumGPU > MaxGPUsPerRow:
				t.Errorf("accepted num_gpu %d", p.NumGPU)
			case p.NumGPU == 0 && (p.GPUMilli != 0 || len(p.GPUSpec) > 0):
				t.Errorf("accepted a CPU pod with GPU fields: %+v", p)
			case p.NumGPU > 1 && p.GPUMilli != MilliPerGPU:
				t.Errorf("accepted a shared multi-card pod: %+v", p)
			case p.NumGPU > 0 && (p.GPUMilli <= 0 || p.GPUMilli > MilliPerGPU):
				t.Errorf("accepted gpu_milli %d", p.GPUMilli)
			case p.CPUMilli < 0 || p.MemoryMiB < 0:
				t.Errorf("accepted negative CPU or memory: %+v", p)
			}
			for _, m := range p.GPUSpec {
				if m == "" || strings.ContainsAny(m, "|,") {
					t.Errorf("accepted spec entry %q", m)
				}
			}
		}
	})
}

// FuzzReadNodes does the same for the node-list decoder.
func FuzzReadNodes(f *testing.F) {
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,0,\nn1,1,1,8,G2\n")
	f.Add("model,gpu,memory_mib,cpu_milli,sn\nT4,1,1,1,n\n")
	f.Fuzz(func(t *testing.T, in string) {
		nodes, err := ReadNodes(strings.NewReader(in), "fuzz.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		names := map[string]bool{}
		for _, n := range nodes {
			if n.Name == "" || names[n.Name] || n.GPUs < 0 || n.GPUs > MaxGPUsPerRow || (n.GPUs > 0 && n.Model == "") {
				t.Errorf("accepted node %+v", n)
			}
			names[n.Name] = true
		}
	})
}
