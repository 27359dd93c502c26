package scenario

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time (user + system) process pid has used so far; 0 when it cannot be read.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	return parseCPUTime(string(b))
}

// parseCPUTime reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may hold spaces, so fields are counted after it.
func parseCPUTime(stat string) time.Duration {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * clockTick
}

// cpuMeter measures the CPU time processes use from its start.
type cpuMeter struct {
	pids  map[string]int
	start map[string]time.Duration
}

// cpuMeter starts measuring the control plane and this process.
func (b *bed) cpuMeter() *cpuMeter {
	m := &cpuMeter{pids: map[string]int{}, start: map[string]time.Duration{}}
	m.add("kube-apiserver", b.c.APIServer.Pid())
	m.add("etcd", b.c.Etcd.Pid())
	m.add("cardinal", os.Getpid())
	return m
}

// add measures pid under name from now on.
func (m *cpuMeter) add(name string, pid int) {
	m.pids[name], m.start[name] = pid, cpuTime(pid)
}

// used returns the CPU time each process used since it was added.
func (m *cpuMeter) used() map[string]time.Duration {
	out := make(map[string]time.Duration, len(m.pids))
	for name, pid := range m.pids {
		out[name] = (cpuTime(pid) - m.start[name]).Round(10 * time.Millisecond)
	}
	return out
}
