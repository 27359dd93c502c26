package deviceplugin

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// kubeletSettings is what the plugin takes from the kubelet's configuration file: the settings the
// extender needs to predict the kubelet's TopologyManager (annotations.KubeletTopology).
type kubeletSettings struct {
	TopologyManagerPolicy  string
	TopologyManagerScope   string
	PreferClosestNUMANodes bool
	// MaxAllowableNUMANodes is 0 when the option is not set (the kubelet's default).
	MaxAllowableNUMANodes int
	CPUManagerPolicy      string
	// ReservedSystemCPUs is the kubelet's reservedSystemCPUs (empty when not set).
	ReservedSystemCPUs cpuset.CPUSet
}

// kubeletConfigFile is the part of the kubelet's KubeletConfiguration (k8s.io/kubelet/config/v1beta1)
// the plugin reads, with the same JSON names.
// Importing that package here would pull the kubelet's feature-gate, logging and tracing
// dependencies into the plugin for seven fields.
type kubeletConfigFile struct {
	Kind                         string            `json:"kind"`
	APIVersion                   string            `json:"apiVersion"`
	CPUManagerPolicy             string            `json:"cpuManagerPolicy,omitempty"`
	TopologyManagerPolicy        string            `json:"topologyManagerPolicy,omitempty"`
	TopologyManagerScope         string            `json:"topologyManagerScope,omitempty"`
	TopologyManagerPolicyOptions map[string]string `json:"topologyManagerPolicyOptions,omitempty"`
	ReservedSystemCPUs           string            `json:"reservedSystemCPUs,omitempty"`
}

// What a kubelet configuration file must declare itself as.
const (
	kubeletConfigKind       = "KubeletConfiguration"
	kubeletConfigAPIVersion = "kubelet.config.k8s.io/v1beta1"
)

// The TopologyManager policy options the plugin reports (topologyManagerPolicyOptions).
const (
	optionPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	optionMaxAllowableNUMANodes  = "max-allowable-numa-nodes"
)

// maxKubeletConfigBytes bounds what is read of the configuration file.
const maxKubeletConfigBytes = 1 << 20

// readKubeletConfig reads and parses the kubelet's configuration file.
func readKubeletConfig(path string) (kubeletSettings, error) {
	f, err := os.Open(path)
	if err != nil {
		return kubeletSettings{}, fmt.Errorf("kubelet configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKubeletConfigBytes+1))
	if err != nil {
		return kubeletSettings{}, fmt.Errorf("kubelet configuration %s: %w", path, err)
	}
	if len(data) > maxKubeletConfigBytes {
		return kubeletSettings{}, fmt.Errorf("kubelet configuration %s: larger than %d bytes", path, maxKubeletConfigBytes)
	}
	s, err := parseKubeletConfig(data)
	if err != nil {
		return kubeletSettings{}, fmt.Errorf("kubelet configuration %s: %w", path, err)
	}
	return s, nil
}

// parseKubeletConfig decodes a KubeletConfiguration (YAML or JSON) and fills in the kubelet's
// defaults for the fields it leaves out: topology policy none, scope container, CPU manager policy
// none. It refuses what the kubelet itself would refuse to start with, naming the field and value.
// Policy options the plugin does not know are ignored (a newer kubelet's; the extender could not
// model them anyway).
func parseKubeletConfig(data []byte) (kubeletSettings, error) {
	var c kubeletConfigFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		return kubeletSettings{}, fmt.Errorf("decode: %w", err)
	}
	if c.Kind != kubeletConfigKind || c.APIVersion != kubeletConfigAPIVersion {
		return kubeletSettings{}, fmt.Errorf("kind %q and apiVersion %q: want kind %s and apiVersion %s",
			c.Kind, c.APIVersion, kubeletConfigKind, kubeletConfigAPIVersion)
	}
	s := kubeletSettings{
		TopologyManagerPolicy: orDefault(c.TopologyManagerPolicy, annotations.TopologyPolicyNone),
		TopologyManagerScope:  orDefault(c.TopologyManagerScope, annotations.TopologyScopeContainer),
		CPUManagerPolicy:      orDefault(c.CPUManagerPolicy, annotations.CPUManagerPolicyNone),
		ReservedSystemCPUs:    cpuset.New(),
	}
	switch s.TopologyManagerPolicy {
	case annotations.TopologyPolicyNone, annotations.TopologyPolicyBestEffort, annotations.TopologyPolicyRestricted, annotations.TopologyPolicySingleNUMANode:
	default:
		return kubeletSettings{}, fmt.Errorf("topologyManagerPolicy: %q is not one of none, best-effort, restricted, single-numa-node", s.TopologyManagerPolicy)
	}
	switch s.TopologyManagerScope {
	case annotations.TopologyScopeContainer, annotations.TopologyScopePod:
	default:
		return kubeletSettings{}, fmt.Errorf("topologyManagerScope: %q is not one of container, pod", s.TopologyManagerScope)
	}
	switch s.CPUManagerPolicy {
	case annotations.CPUManagerPolicyNone, annotations.CPUManagerPolicyStatic:
	default:
		return kubeletSettings{}, fmt.Errorf("cpuManagerPolicy: %q is not one of none, static", s.CPUManagerPolicy)
	}
	if v, ok := c.TopologyManagerPolicyOptions[optionPreferClosestNUMANodes]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return kubeletSettings{}, fmt.Errorf("topologyManagerPolicyOptions.%s: %q is not a boolean", optionPreferClosestNUMANodes, v)
		}
		s.PreferClosestNUMANodes = b
	}
	if v, ok := c.TopologyManagerPolicyOptions[optionMaxAllowableNUMANodes]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return kubeletSettings{}, fmt.Errorf("topologyManagerPolicyOptions.%s: %q is not an integer", optionMaxAllowableNUMANodes, v)
		}
		if n < annotations.MinMaxAllowableNUMANodes {
			return kubeletSettings{}, fmt.Errorf("topologyManagerPolicyOptions.%s: %d is less than %d, which the kubelet refuses",
				optionMaxAllowableNUMANodes, n, annotations.MinMaxAllowableNUMANodes)
		}
		// The kubelet accepts more, but a NUMA node ID is below 64 (its bitmask), so a larger limit
		// means the same as 64.
		s.MaxAllowableNUMANodes = min(n, maxNUMANodes)
	}
	if v := strings.TrimSpace(c.ReservedSystemCPUs); v != "" {
		set, err := parseCPUList(v)
		if err != nil {
			return kubeletSettings{}, fmt.Errorf("reservedSystemCPUs: %q is not a CPU list: %w", c.ReservedSystemCPUs, err)
		}
		s.ReservedSystemCPUs = set
	}
	return s, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
