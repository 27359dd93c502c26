package annotations

import (
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
)

// AddFlags registers the four resource-name flags every Cardinal binary shares, defaulting to the
// current values of n.
func (n *ResourceNames) AddFlags(fs *pflag.FlagSet) {
	str := func(p *corev1.ResourceName, name, help string) {
		fs.Var((*resourceNameValue)(p), name, help)
	}
	str(&n.GPU, "resource-gpu", "resource name for the number of cards a container gets")
	str(&n.Mem, "resource-gpumem", "resource name for MiB of memory per card")
	str(&n.MemPercentage, "resource-gpumem-percentage", "resource name for percent of each card's memory")
	str(&n.Cores, "resource-gpucores", "resource name for percent of each card's compute")
}

type resourceNameValue corev1.ResourceName

func (v *resourceNameValue) String() string     { return string(*v) }
func (v *resourceNameValue) Set(s string) error { *v = resourceNameValue(s); return nil }
func (v *resourceNameValue) Type() string       { return "name" }
