package deviceplugin

import (
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// gatherHoldings reads the holdings gauges as "name{labels} value" lines, sorted.
func gatherHoldings(t *testing.T, p *Plugin) []string {
	t.Helper()
	families, err := p.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "cardinal_device_plugin_container_reserved_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, strings.TrimPrefix(f.GetName(), "cardinal_device_plugin_container_reserved_")+"{"+strings.Join(labels, ",")+"} "+
				strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	sort.Strings(out)
	return out
}

// The plugin exports what each container holds with its reservation, with dcgm-exporter's labels:
// a shared slot with the assignment's memory and cores, a whole card with the card's, a MIG instance
// under its parent's UUID and index; a pod that ended exports nothing.
func TestHoldingsJoinableWithDCGM(t *testing.T) {
	p := testPlugin(t, testCards(2, nil), 4)
	slot := annotations.SlotID(uuidOf(1), 2)
	p.UpsertPod(newPod("shared", ctr{name: "main", ids: []string{slot}, memMiB: 20000, cores: 30}).obj(t))
	if _, err := allocateOne(p, []string{slot}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cores{Hostname=" + testNode + ",UUID=" + uuidOf(1) + ",container=main,device=" + slot + ",gpu=1,modelName=NVIDIA A100-SXM4-80GB,namespace=default,pod=shared} 30",
		"memory_mib{Hostname=" + testNode + ",UUID=" + uuidOf(1) + ",container=main,device=" + slot + ",gpu=1,modelName=NVIDIA A100-SXM4-80GB,namespace=default,pod=shared} 20000",
	}
	if diff := cmp.Diff(want, gatherHoldings(t, p)); diff != "" {
		t.Errorf("holdings (-want +got):\n%s", diff)
	}
	p.DeletePod(newPod("shared", ctr{name: "main", ids: []string{slot}, memMiB: 20000, cores: 30}).obj(t))
	if got := gatherHoldings(t, p); len(got) != 0 {
		t.Errorf("after the pod is gone: %v, want no series", got)
	}

	m := testPlugin(t, migCards(), 1)
	m.UpsertPod(newPod("small", ctr{name: "main", ids: []string{migUUID(1, 1)}, mig: "2g.20gb"}).obj(t))
	if _, err := allocateOn(m, mig2g, migUUID(1, 1)); err != nil {
		t.Fatal(err)
	}
	got := gatherHoldings(t, m)
	if len(got) != 2 || !strings.Contains(got[0], "UUID="+uuidOf(1)+",") || !strings.Contains(got[0], "device="+migUUID(1, 1)+",gpu=1,") || !strings.HasSuffix(got[0], " 100") {
		t.Errorf("MIG holding: %v; want the instance under its parent %s (index 1), cores 100", got, uuidOf(1))
	}
}
