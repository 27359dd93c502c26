package deviceplugin

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Holdings: which container holds which device of this node, with what it reserved, as gauges a
// PromQL join can put beside NVIDIA's dcgm-exporter (which measures use, not reservations). The
// labels are dcgm-exporter's where they mean the same thing — UUID (the card's; for a MIG instance
// its parent's, as dcgm-exporter labels instances), gpu (the card's NVML index), modelName,
// Hostname, namespace, pod, container — plus device, the device ID the kubelet handed over (the
// UUID, a share slot <UUID>::<k>, or a MIG UUID). One series per held device: a node has at most
// its devices' worth.
var (
	holdingMemoryDesc = prometheus.NewDesc("cardinal_device_plugin_container_reserved_memory_mib",
		"Memory (MiB) a container reserved on a device it holds: a whole card's or MIG instance's, or what its assignment reserved on a share slot.",
		holdingLabels, nil)
	holdingCoresDesc = prometheus.NewDesc("cardinal_device_plugin_container_reserved_cores",
		"Percentage of a device's compute a container reserved on a device it holds (100 for whole cards and MIG instances).",
		holdingLabels, nil)
	holdingLabels = []string{"namespace", "pod", "container", "device", "UUID", "gpu", "modelName", "Hostname"}
)

// holdings is the Prometheus collector of the plugin's holdings, read at scrape time.
type holdings struct{ p *Plugin }

func (h holdings) Describe(ch chan<- *prometheus.Desc) {
	ch <- holdingMemoryDesc
	ch <- holdingCoresDesc
}

// holding is one device a container holds, with its reservation.
type holding struct {
	namespace, pod, container, device, uuid, gpu, model string
	memMiB                                              int64
	cores                                               int
}

func (h holdings) Collect(ch chan<- prometheus.Metric) {
	for _, x := range h.p.holdings() {
		labels := []string{x.namespace, x.pod, x.container, x.device, x.uuid, x.gpu, x.model, h.p.node}
		ch <- prometheus.MustNewConstMetric(holdingMemoryDesc, prometheus.GaugeValue, float64(x.memMiB), labels...)
		ch <- prometheus.MustNewConstMetric(holdingCoresDesc, prometheus.GaugeValue, float64(x.cores), labels...)
	}
}

// holdings lists the devices each container of a pod that has not ended holds, as the kubelet gave
// them (the IDs the plugin saw: its Allocate answers and PodResources), sorted. A whole card or MIG
// instance reserves all of it; a share slot what the assignment reserved on it, and 0 without one (a
// pod Cardinal did not schedule: nothing the plugin knows).
func (p *Plugin) holdings() []holding {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []holding
	for uid, containers := range p.seen {
		pod := p.pods[uid]
		if pod == nil || pod.Gone {
			continue
		}
		for name, ids := range containers {
			for _, id := range ids {
				d, ok := p.table.devices[id]
				if !ok {
					continue
				}
				card := &p.table.cards[d.Card]
				x := holding{namespace: pod.Namespace, pod: pod.Name, container: name, device: id,
					uuid: card.UUID, gpu: strconv.Itoa(card.Index), model: card.Model}
				switch {
				case d.MIG != nil:
					x.memMiB, x.cores = d.MIG.Instance.MemoryMiB, 100
				case d.Slot < 0:
					x.memMiB, x.cores = card.MemoryMiB, 100
				default:
					if r, ok := assigned(pod, name, id); ok {
						x.memMiB, x.cores = r.memMiB, r.cores
					}
				}
				out = append(out, x)
			}
		}
	}
	slices.SortFunc(out, func(a, b holding) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.pod, b.pod),
			strings.Compare(a.container, b.container), strings.Compare(a.device, b.device))
	})
	return out
}

// assigned is the reservation the pod's assignment gives container name on device id.
func assigned(pod *podEntry, name, id string) (holding, bool) {
	if pod.Assignment == nil {
		return holding{}, false
	}
	c := pod.Assignment.Container(name)
	if c == nil {
		return holding{}, false
	}
	for _, d := range c.Devices {
		if d.ID == id {
			return holding{memMiB: d.MemoryMiB, cores: d.Cores}, true
		}
	}
	return holding{}, false
}
