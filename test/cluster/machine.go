package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxNUMANodes is the most NUMA nodes the kubelet's topology manager accepts (its
// max-allowable-numa-nodes option defaults to 8).
const maxNUMANodes = 8

// fallbackMemoryMiB is the machine's memory when the host's MemTotal cannot be read.
const fallbackMemoryMiB = 8192

// Machine is the hardware shape a kubelet sees. The harness writes it as a synthetic sysfs and
// procfs — /sys/devices/system/node, /sys/devices/system/cpu and /proc/cpuinfo, what cadvisor
// reads for the kubelet's machine info — and mounts it over the real ones inside the kubelet's
// private mount namespace. The kubelet's CPU, topology and device managers then work on this
// topology: NUMA nodes, sockets, cores, threads, caches and distances. Nothing runs on these CPUs
// (the fake runtime runs no container), so any shape works on any host.
//
// Numbering: NUMA node n holds the CPUs n*CPUsPerNUMA to (n+1)*CPUsPerNUMA-1; consecutive CPUs
// are the threads of one core; core ids are unique machine-wide (cadvisor counts the distinct
// "core id" lines of /proc/cpuinfo without their socket); socket s holds NUMA nodes
// s*NUMAPerSocket to (s+1)*NUMAPerSocket-1. Each NUMA node has its own L3 cache. Distances: 10 to
// itself, 11 within a socket, 21 across sockets.
type Machine struct {
	// NUMANodes is how many NUMA nodes the machine has, 1 to 8 (the topology manager's limit).
	NUMANodes int
	// CPUsPerNUMA is how many logical CPUs each NUMA node holds, a multiple of ThreadsPerCore.
	CPUsPerNUMA int
	// ThreadsPerCore is how many hardware threads a core has; 0 means 1 (no SMT).
	ThreadsPerCore int
	// NUMAPerSocket is how many NUMA nodes share a socket; 0 means 1 (one socket per NUMA node).
	// It must divide NUMANodes.
	NUMAPerSocket int
	// MemoryMiBPerNUMA is each NUMA node's MemTotal (node*/meminfo), what the memory manager
	// hands out per NUMA node; 0 means the host's MemTotal split evenly, so that the NUMA nodes
	// add up to the node's memory capacity, which stays the host's (/proc/meminfo is not shadowed).
	MemoryMiBPerNUMA int
}

// withDefaults fills the optional fields.
func (m Machine) withDefaults() Machine {
	if m.ThreadsPerCore == 0 {
		m.ThreadsPerCore = 1
	}
	if m.NUMAPerSocket == 0 {
		m.NUMAPerSocket = 1
	}
	if m.MemoryMiBPerNUMA == 0 && m.NUMANodes > 0 {
		m.MemoryMiBPerNUMA = max(hostMemoryMiB()/m.NUMANodes, 1)
	}
	return m
}

// hostMemoryMiB is the host's MemTotal in MiB, as the kubelet reads it from /proc/meminfo.
func hostMemoryMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return fallbackMemoryMiB
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if kib, err := strconv.Atoi(f[1]); err == nil {
				return kib / 1024
			}
		}
	}
	return fallbackMemoryMiB
}

// validate reports what makes m impossible.
func (m Machine) validate() error {
	if m.ThreadsPerCore == 0 {
		m.ThreadsPerCore = 1
	}
	if m.NUMAPerSocket == 0 {
		m.NUMAPerSocket = 1
	}
	switch {
	case m.NUMANodes < 1 || m.NUMANodes > maxNUMANodes:
		return fmt.Errorf("machine: %d NUMA nodes, want 1 to %d", m.NUMANodes, maxNUMANodes)
	case m.ThreadsPerCore < 1:
		return fmt.Errorf("machine: %d threads per core, want at least 1", m.ThreadsPerCore)
	case m.CPUsPerNUMA < 1 || m.CPUsPerNUMA%m.ThreadsPerCore != 0:
		return fmt.Errorf("machine: %d CPUs per NUMA node, want a positive multiple of %d threads per core", m.CPUsPerNUMA, m.ThreadsPerCore)
	case m.NUMAPerSocket < 1 || m.NUMANodes%m.NUMAPerSocket != 0:
		return fmt.Errorf("machine: %d NUMA nodes per socket does not divide %d NUMA nodes", m.NUMAPerSocket, m.NUMANodes)
	case m.MemoryMiBPerNUMA < 0:
		return fmt.Errorf("machine: %d MiB per NUMA node, want 0 (the host's split evenly) or more", m.MemoryMiBPerNUMA)
	}
	return nil
}

// NumCPUs is how many logical CPUs the machine has.
func (m Machine) NumCPUs() int { return m.NUMANodes * m.CPUsPerNUMA }

// NUMANodeOf is the NUMA node that holds cpu.
func (m Machine) NUMANodeOf(cpu int) int { return cpu / m.CPUsPerNUMA }

// CPUsOf lists the CPUs of NUMA node numa, in order.
func (m Machine) CPUsOf(numa int) []int {
	cpus := make([]int, m.CPUsPerNUMA)
	for i := range cpus {
		cpus[i] = numa*m.CPUsPerNUMA + i
	}
	return cpus
}

// SocketOf is the socket (physical package) that holds cpu.
func (m Machine) SocketOf(cpu int) int { return m.NUMANodeOf(cpu) / max(m.NUMAPerSocket, 1) }

// CoreOf is the core (core_id, unique machine-wide) that holds cpu.
func (m Machine) CoreOf(cpu int) int { return cpu / max(m.ThreadsPerCore, 1) }

// machineMount is a bind mount of a synthetic file or folder over the real one.
type machineMount struct{ source, target string }

// The real paths the synthetic machine shadows.
const (
	sysCPUDir  = "/sys/devices/system/cpu"
	sysNodeDir = "/sys/devices/system/node"
	cpuinfo    = "/proc/cpuinfo"
)

// writeMachine writes m's synthetic sysfs and procfs under dir and returns the mounts that put
// them in place.
func writeMachine(m Machine, dir string) ([]machineMount, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	m = m.withDefaults()
	for _, target := range []string{sysCPUDir, sysNodeDir, cpuinfo} {
		if _, err := os.Stat(target); err != nil {
			// Without CONFIG_NUMA the kernel has no node folder, and sysfs cannot grow one.
			return nil, fmt.Errorf("machine: %s is needed as a mount point: %w", target, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil { // a kubelet restart writes it afresh
		return nil, err
	}
	files, links := m.tree()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(content), 0o444); err != nil {
			return nil, err
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return []machineMount{
		{filepath.Join(dir, "cpu"), sysCPUDir},
		{filepath.Join(dir, "node"), sysNodeDir},
		{filepath.Join(dir, "cpuinfo"), cpuinfo},
	}, nil
}

// tree is m's synthetic files (path relative to the machine folder -> content) and symlinks
// (path -> target, relative as in sysfs), for a machine with defaults filled in. "cpu" is what
// /sys/devices/system/cpu shows, "node" /sys/devices/system/node, "cpuinfo" /proc/cpuinfo.
func (m Machine) tree() (files, links map[string]string) {
	files, links = map[string]string{}, map[string]string{}
	n := m.NumCPUs()
	all := seq(0, n)
	allNodes := seq(0, m.NUMANodes)
	coresPerSocket := m.NUMAPerSocket * m.CPUsPerNUMA / m.ThreadsPerCore
	cpusPerSocket := m.NUMAPerSocket * m.CPUsPerNUMA

	for _, name := range []string{"online", "possible", "present"} {
		files["cpu/"+name] = cpuList(all)
		files["node/"+name] = cpuList(allNodes)
	}
	files["cpu/offline"] = "\n"
	files["cpu/isolated"] = "\n"
	files["cpu/kernel_max"] = "8191\n"
	files["cpu/smt/active"] = "0\n"
	if m.ThreadsPerCore > 1 {
		files["cpu/smt/active"] = "1\n"
	}
	for _, name := range []string{"has_cpu", "has_memory", "has_normal_memory"} {
		files["node/"+name] = cpuList(allNodes)
	}

	var info strings.Builder
	for cpu := range n {
		numa, socket, core := m.NUMANodeOf(cpu), m.SocketOf(cpu), m.CoreOf(cpu)
		threads := seq(core*m.ThreadsPerCore, (core+1)*m.ThreadsPerCore)
		pkg := seq(socket*cpusPerSocket, (socket+1)*cpusPerSocket)
		node := m.CPUsOf(numa)
		d := fmt.Sprintf("cpu/cpu%d/", cpu)
		files[d+"online"] = "1\n"
		topo := map[string]string{
			"core_id":              strconv.Itoa(core),
			"physical_package_id":  strconv.Itoa(socket),
			"die_id":               "0",
			"cluster_id":           strconv.Itoa(core),
			"core_cpus_list":       cpuList(threads),
			"core_cpus":            cpuMask(threads, n),
			"thread_siblings":      cpuMask(threads, n),
			"thread_siblings_list": cpuList(threads),
			"cluster_cpus":         cpuMask(threads, n),
			"cluster_cpus_list":    cpuList(threads),
			"die_cpus":             cpuMask(pkg, n),
			"die_cpus_list":        cpuList(pkg),
			"core_siblings":        cpuMask(pkg, n),
			"core_siblings_list":   cpuList(pkg),
			"package_cpus":         cpuMask(pkg, n),
			"package_cpus_list":    cpuList(pkg),
		}
		for name, v := range topo {
			files[d+"topology/"+name] = strings.TrimSuffix(v, "\n") + "\n"
		}
		caches := []struct {
			level      int
			typ        string
			sizeKiB    int
			id         int
			sharedWith []int
		}{
			{1, "Data", 48, core, threads},
			{1, "Instruction", 32, core, threads},
			{2, "Unified", 2048, core, threads},
			{3, "Unified", 32768, numa, node},
		}
		for i, c := range caches {
			ci := fmt.Sprintf("%scache/index%d/", d, i)
			files[ci+"id"] = strconv.Itoa(c.id) + "\n"
			files[ci+"level"] = strconv.Itoa(c.level) + "\n"
			files[ci+"type"] = c.typ + "\n"
			files[ci+"size"] = strconv.Itoa(c.sizeKiB) + "K\n"
			files[ci+"shared_cpu_map"] = cpuMask(c.sharedWith, n)
			files[ci+"shared_cpu_list"] = cpuList(c.sharedWith)
			files[ci+"coherency_line_size"] = "64\n"
		}
		links[fmt.Sprintf("cpu/cpu%d/node%d", cpu, numa)] = fmt.Sprintf("../../node/node%d", numa)
		links[fmt.Sprintf("node/node%d/cpu%d", numa, cpu)] = fmt.Sprintf("../../cpu/cpu%d", cpu)

		fmt.Fprintf(&info, "processor\t: %d\n", cpu)
		fmt.Fprintf(&info, "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n")
		fmt.Fprintf(&info, "model name\t: Cardinal test-bed CPU (synthetic, %d NUMA x %d CPUs)\n", m.NUMANodes, m.CPUsPerNUMA)
		fmt.Fprintf(&info, "stepping\t: 8\ncpu MHz\t\t: 2400.000\ncache size\t: 32768 KB\n")
		fmt.Fprintf(&info, "physical id\t: %d\nsiblings\t: %d\ncore id\t\t: %d\ncpu cores\t: %d\n", socket, cpusPerSocket, core, coresPerSocket)
		fmt.Fprintf(&info, "apicid\t\t: %d\ninitial apicid\t: %d\n", cpu, cpu)
		fmt.Fprintf(&info, "fpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: 32\nwp\t\t: yes\n")
		fmt.Fprintf(&info, "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx lm constant_tsc pni ssse3 sse4_1 sse4_2 popcnt avx avx2\n")
		fmt.Fprintf(&info, "bogomips\t: 4800.00\nclflush size\t: 64\ncache_alignment\t: 64\naddress sizes\t: 46 bits physical, 57 bits virtual\npower management:\n\n")
	}
	files["cpuinfo"] = info.String()

	kib := m.MemoryMiBPerNUMA * 1024
	for numa := range m.NUMANodes {
		d := fmt.Sprintf("node/node%d/", numa)
		files[d+"cpulist"] = cpuList(m.CPUsOf(numa))
		files[d+"cpumap"] = cpuMask(m.CPUsOf(numa), n)
		distances := make([]string, m.NUMANodes)
		for other := range distances {
			switch {
			case other == numa:
				distances[other] = "10"
			case other/m.NUMAPerSocket == numa/m.NUMAPerSocket:
				distances[other] = "11"
			default:
				distances[other] = "21"
			}
		}
		files[d+"distance"] = strings.Join(distances, " ") + "\n"
		files[d+"meminfo"] = fmt.Sprintf("Node %[1]d MemTotal:       %[2]d kB\nNode %[1]d MemFree:        %[2]d kB\nNode %[1]d MemUsed:        0 kB\n"+
			"Node %[1]d HugePages_Total:     0\nNode %[1]d HugePages_Free:      0\nNode %[1]d HugePages_Surp:      0\n", numa, kib)
		for _, size := range []string{"hugepages-2048kB", "hugepages-1048576kB"} {
			for _, f := range []string{"nr_hugepages", "free_hugepages", "surplus_hugepages"} {
				files[d+"hugepages/"+size+"/"+f] = "0\n"
			}
		}
	}
	return files, links
}

// seq is from, from+1, ..., to-1.
func seq(from, to int) []int {
	s := make([]int, 0, max(to-from, 0))
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// cpuList writes ascending ids as the kernel does in *_list files: "0-3,8,10-11\n".
func cpuList(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ids[i]))
		} else {
			parts = append(parts, strconv.Itoa(ids[i])+"-"+strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",") + "\n"
}

// cpuMask writes ids as the kernel's cpumask files do for a machine of n CPUs: 32-bit hex words,
// most significant first, separated by commas ("00000001,ffffffff\n").
func cpuMask(ids []int, n int) string {
	words := make([]uint32, max((n+31)/32, 1))
	for _, id := range ids {
		words[len(words)-1-id/32] |= 1 << (id % 32)
	}
	parts := make([]string, len(words))
	for i, w := range words {
		parts[i] = fmt.Sprintf("%08x", w)
	}
	return strings.Join(parts, ",") + "\n"
}
