// Command device-plugin is Cardinal's node agent: it discovers the node's NVIDIA cards (NVML, or a
// simulated NVML file) and their MIG instances, publishes them on the Node, registers them with the
// kubelet and hands each container exactly the cards or instances the scheduler extender assigned it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin"
	"github.com/cardinal-gpu/cardinal/pkg/filecopy"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

func main() {
	cfg := deviceplugin.DefaultConfig()
	logOpts := logging.Options{}
	fs := pflag.NewFlagSet("device-plugin", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: device-plugin [flags]\n\n"+
			"Cardinal's device plugin. Discovers the node's NVIDIA cards through NVML (or --simulate), writes\n"+
			"them to the Node annotation cardinal.io/gpu-inventory, registers the GPU resource with the kubelet\n"+
			"(and one MIG resource per profile of the MIG instances found at start, e.g. nvidia.com/mig-1g.10gb)\n"+
			"and answers Allocate with the cards or instances cardinal.io/gpu-assignment names, setting\n"+
			"NVIDIA_VISIBLE_DEVICES and, for shared cards, the limits the node's --sharing-mode enforces (MPS or\n"+
			"HAMi-core). Instances created or destroyed later are served after a restart.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "name of this node (default $NODE_NAME)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&cfg.DevicePluginDir, "device-plugin-dir", cfg.DevicePluginDir, "the kubelet's device-plugin folder (holds kubelet.sock; the plugin's socket goes there too)")
	fs.StringVar(&cfg.PodResourcesSocket, "pod-resources-socket", cfg.PodResourcesSocket, "the kubelet's PodResources API socket, the truth about which container holds which device")
	fs.StringVar(&cfg.Simulate, "simulate", cfg.Simulate, "path of a simulated-NVML YAML file (see README); empty uses the real NVML (libnvidia-ml, loaded at run time)")
	fs.StringVar(&cfg.SchedulerName, "scheduler-name", cfg.SchedulerName, "Cardinal's kube-scheduler profile: a pod naming it that carries no cardinal.io/gpu-assignment was bound by someone else and is never served")
	fs.StringVar(&cfg.ExactSchedulerName, "exact-scheduler-name", cfg.ExactSchedulerName, "Cardinal's second kube-scheduler profile, which scores every node: the same rule holds for its pods; empty: none")
	fs.IntVar(&cfg.Shares, "shares", cfg.Shares, "pods that may share one card: 1 advertises one device per card (its UUID); N>1 advertises N slot devices <UUID>::<k> per card")
	fs.StringSliceVar(&cfg.MIGDynamicProfiles, "mig-dynamic-profiles", cfg.MIGDynamicProfiles, "dynamic MIG allow-list, comma-separated GPU instance profiles (1g.10gb,3g.40gb,1g.10gb+me): every card in MIG mode serves, per profile it has, one device per legal placement (ID <card UUID>/<profile>@<start>), creates the instance the scheduler assigned at Allocate and destroys it once its pod is gone; the inventory lists them as mig.dynamic; empty: static MIG")
	fs.BoolVar(&cfg.Topology, "topology", cfg.Topology, "report each device's NUMA node to the kubelet (TopologyInfo), so its TopologyManager can align CPUs with the cards")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of /healthz, /readyz and /metrics; empty disables them")
	fs.StringVar(&cfg.SysfsRoot, "sysfs-root", cfg.SysfsRoot, "sysfs mount the NUMA node of each card is read from (<root>/bus/pci/devices/<busid>/numa_node), and with --kubelet-config each NUMA node's CPUs (<root>/devices/system/node/node<N>/cpulist, distance)")
	fs.StringVar(&cfg.KubeletConfig, "kubelet-config", cfg.KubeletConfig, "the kubelet's configuration file (KubeletConfiguration); when set, the inventory also carries its topology manager policy, scope and options, CPU manager policy and each NUMA node's reserved and exclusively held CPUs (PodResources), so the extender predicts the kubelet. Only the file is read: settings given to the kubelet as command-line flags are not seen. Empty: not published")
	fs.StringVar(&cfg.CPUManagerState, "cpu-manager-state", cfg.CPUManagerState, "with --kubelet-config: the kubelet's CPU manager checkpoint (<root-dir>/cpu_manager_state); the inventory then lists each pod's exclusive CPUs per NUMA node (init containers' retained CPUs included, by pod UID), checked for changes every 250ms, so the extender counts the kubelet's free CPUs exactly. Empty, or unreadable: no list (the extender takes the CPU counts as they are)")
	fs.DurationVar(&cfg.KubeletPollInterval, "kubelet-poll-interval", cfg.KubeletPollInterval, "with --kubelet-config: how often the file (when it changed), the NUMA nodes' CPUs and PodResources' CPUs are read again (also shortly after each Allocate); the inventory is rewritten only when they changed")
	fs.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", cfg.ReconcileInterval, "how often the allocation records are compared with the kubelet's PodResources (also once at start)")
	fs.DurationVar(&cfg.HealthRecoveryInterval, "health-recovery-interval", cfg.HealthRecoveryInterval, "an unhealthy card that sees no critical XID for this long and passes an NVML probe is healthy again (reset XIDs excepted)")
	fs.Var(&cfg.IgnoredXids, "health-ignored-xids", "comma-separated application XIDs that never mark a card unhealthy; empty: none")
	fs.Var(&cfg.ResetXids, "health-reset-xids", "comma-separated critical XIDs after which a card stays unhealthy until it is reset or the plugin restarts; empty: none")
	var copySpec string
	copyInterval := 100 * time.Millisecond
	fs.StringVar(&copySpec, "copy-cpu-manager-state", "", "SRC:DST: run as the CPU checkpoint copier only (no NVML, no API client, no listener): keep DST a copy of the kubelet's CPU manager checkpoint SRC, replaced atomically (temporary file and rename) whenever the kubelet replaces SRC, removed while SRC is missing. The chart runs it in a container of its own that alone mounts the kubelet's root, so the plugin reads DST (--cpu-manager-state) without that mount")
	fs.DurationVar(&copyInterval, "copy-interval", copyInterval, "with --copy-cpu-manager-state: how often SRC is checked for a change (a stat; read only when it changed)")
	cfg.Names.AddFlags(fs)
	cfg.DeviceList.AddFlags(fs)
	cfg.Sharing.AddFlags(fs)
	logOpts.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "device-plugin:", err)
		os.Exit(2)
	}
	log, err := logging.New(logOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "device-plugin:", err)
		os.Exit(2)
	}
	cfg.Log = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if copySpec != "" {
		if err := copyCPUManagerState(ctx, copySpec, copyInterval, log); err != nil {
			log.Error(err, "CPU checkpoint copier stopped")
			os.Exit(1)
		}
		return
	}
	if err := deviceplugin.Run(ctx, cfg); err != nil {
		log.Error(err, "device plugin stopped")
		os.Exit(1)
	}
}

// copyCPUManagerState runs the copier of --copy-cpu-manager-state=SRC:DST until ctx ends.
func copyCPUManagerState(ctx context.Context, spec string, every time.Duration, log logr.Logger) error {
	src, dst, err := filecopy.ParseSpec(spec)
	if err != nil {
		return fmt.Errorf("--copy-cpu-manager-state: %w", err)
	}
	c, err := filecopy.New(filecopy.Config{Src: src, Dst: dst, MaxBytes: deviceplugin.MaxCPUCheckpointBytes, Interval: every, Log: log})
	if err != nil {
		return fmt.Errorf("--copy-cpu-manager-state: %w", err)
	}
	return c.Run(ctx)
}
