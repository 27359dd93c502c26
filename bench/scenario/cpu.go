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

// machineTime is the machine's busy CPU time (every CPU's user, nice, system, irq and softirq
// time) and its steal time (taken by the hypervisor for other guests), from /proc/stat.
func machineTime() (busy, steal time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	return parseMachineTime(string(b))
}

// parseMachineTime reads the aggregate "cpu" line of /proc/stat: user nice system idle iowait irq
// softirq steal ..., in clock ticks.
func parseMachineTime(stat string) (busy, steal time.Duration) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	tick := func(i int) int64 {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return v
	}
	return time.Duration(tick(1)+tick(2)+tick(3)+tick(6)+tick(7)) * clockTick, time.Duration(tick(8)) * clockTick
}

// cpuMeter measures the CPU time processes use from its start, and what the rest of the machine
// used meanwhile ("others": busy time no measured process accounts for) and lost ("steal").
type cpuMeter struct {
	pids  map[string]int
	start map[string]time.Duration
	// busy and steal are machineTime at the start.
	busy, steal time.Duration
}

// cpuMeter starts measuring the control plane and this process.
func (b *bed) cpuMeter() *cpuMeter {
	m := &cpuMeter{pids: map[string]int{}, start: map[string]time.Duration{}}
	m.busy, m.steal = machineTime()
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
	out := make(map[string]time.Duration, len(m.pids)+2)
	var sum time.Duration
	for name, pid := range m.pids {
		out[name] = (cpuTime(pid) - m.start[name]).Round(10 * time.Millisecond)
		sum += out[name]
	}
	if busy, steal := machineTime(); busy > 0 {
		out["others"] = max(busy-m.busy-sum, 0).Round(10 * time.Millisecond)
		out["steal"] = (steal - m.steal).Round(10 * time.Millisecond)
	}
	return out
}
