// Package cluster is Cardinal's real-Kubernetes test bed: etcd, kube-apiserver, kube-scheduler and
// real kubelets, built from pinned sources by hack/testbed/build.sh and run as child processes on
// loopback, on ports chosen at run time so several test packages can run at once.
//
// A kubelet runs in its own private mount namespace, where a per-kubelet folder is mounted over
// /var/lib and /var/log and small files over the /proc/sys tunables it checks, against an
// in-process fake CRI: pods reach Running, no container runs, the host's /var/lib/kubelet and
// sysctls are never touched. A kubelet can be given a machine shape (KubeletSpec.Machine: NUMA
// nodes, CPUs, threads, sockets), written as a synthetic sysfs/procfs topology and mounted over
// /sys/devices/system/{cpu,node} and /proc/cpuinfo in its namespace, and its own topology and CPU
// manager policies; its PodResources API is at hand (Kubelet.PodResources). API-only nodes
// (AddNode) are plain Node objects made Ready.
//
// On request a test also gets kube-controller-manager with only the controllers it names
// (StartControllerManager; none runs by default) and a Kueue manager with its CRDs and webhooks
// (StartKueue, the pinned build of hack/testbed/build.sh --kueue).
//
// Everything is torn down at the cleanup of the TB that created it, also when the test fails or
// panics; each component's log is in the test's temp dir and its tail is printed on failure.
// Starting a kubelet needs root; under CI=true a missing prerequisite fails the test instead of
// skipping it.
package cluster
