package report

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	CPU       string
	Cores     int
	MemoryGiB float64
	OS        string
	Go        string
	// Load is /proc/loadavg's 1-, 5- and 15-minute load averages when the run started (others'
	// work on a shared machine shows there).
	Load string
}

func (m Machine) String() string {
	s := fmt.Sprintf("%s, %d cores, %.1f GiB memory, %s, %s", m.CPU, m.Cores, m.MemoryGiB, m.OS, m.Go)
	if m.Load != "" {
		s += ", load average " + m.Load + " at the start"
	}
	return s
}

// ThisMachine reads /proc/cpuinfo and /proc/meminfo (fields it cannot read stay empty).
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), CPU: "unknown CPU"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		m.CPU = cpuModel(f)
		f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load = loadAverages(string(b))
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		m.MemoryGiB = memTotalGiB(f)
		f.Close()
	}
	return m
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel(r io.Reader) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// memTotalGiB is MemTotal of /proc/meminfo (in kB there) in GiB.
func memTotalGiB(r io.Reader) float64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return kb / (1 << 20)
			}
		}
	}
	return 0
}

// loadAverages is the first three fields of /proc/loadavg; "" when there are fewer.
func loadAverages(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
