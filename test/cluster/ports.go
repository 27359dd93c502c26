package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePorts returns n distinct free TCP ports on 127.0.0.1 for components the test bed starts.
//
// The ports are drawn at random below the kernel's ephemeral range (net.ipv4.ip_local_port_range),
// never from it: a port the kernel hands out for ":0" is also one it hands to outgoing connections,
// and one of the many connections the test bed opens (to the API server, between components) could
// take it between this call and the component's bind — seen in CI as a device plugin exiting with
// "bind: address already in use" 90 s into TestCPUOnlyPods. The listeners are all held until every
// port is known, so one call never returns a port twice; another test process drawing the same port
// at the same moment is left, and shows as that component exiting.
func FreePorts(n int) ([]int, error) {
	lo, hi := 20000, ephemeralStart()
	if hi-lo < 1000 {
		lo = 1024
	}
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("find %d free ports in %d–%d: %d found after %d tries", n, lo, hi-1, len(ports), tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lo+rand.IntN(hi-lo)))
		if err != nil {
			continue // taken
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// freePorts is FreePorts for the package's own components.
func freePorts(n int) ([]int, error) { return FreePorts(n) }

// ephemeralStart is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil || v <= 1024 {
		return 32768
	}
	return v
}
