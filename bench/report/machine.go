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
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, %.1f GiB memory, %s, %s", m.CPU, m.Cores, m.MemoryGiB, m.OS, m.Go)
}

// ThisMachine reads /proc/cpuinfo and /proc/meminfo (fields it cannot read stay empty).
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), CPU: "unknown CPU"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		m.CPU = cpuModel(f)
		f.Close()
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
