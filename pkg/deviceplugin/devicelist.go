package deviceplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DeviceListStrategy is one way Allocate tells the container runtime which cards a container gets
// (NVIDIA's device plugin offers the same four).
type DeviceListStrategy string

// The device-list strategies.
const (
	// DeviceListEnvvar lists the cards' UUIDs in NVIDIA_VISIBLE_DEVICES. A container can set that
	// variable itself; only the NVIDIA container toolkit's setting
	// accept-nvidia-visible-devices-envvar-when-unprivileged = false stops it, and then this strategy
	// gives unprivileged containers no card at all.
	DeviceListEnvvar DeviceListStrategy = "envvar"
	// DeviceListVolumeMounts mounts /dev/null at /var/run/nvidia-container-devices/<UUID> for each
	// card and sets NVIDIA_VISIBLE_DEVICES to that folder; the toolkit reads the list from the mounts
	// when accept-nvidia-visible-devices-as-volume-mounts = true.
	DeviceListVolumeMounts DeviceListStrategy = "volume-mounts"
	// DeviceListCDIAnnotations names the cards as CDI devices in a container annotation
	// <prefix>cardinal-device-plugin_<key> = <kind>=<id>,…, read by a CDI-capable runtime.
	DeviceListCDIAnnotations DeviceListStrategy = "cdi-annotations"
	// DeviceListCDICRI names the cards as CDI devices in the Allocate response's CDIDevices, which the
	// kubelet passes in the CRI's CDIDevices field (Kubernetes 1.29+, or 1.28 with the
	// DevicePluginCDIDevices feature gate).
	DeviceListCDICRI DeviceListStrategy = "cdi-cri"
)

// deviceListStrategies are the known strategies, in the order help and errors list them.
var deviceListStrategies = []DeviceListStrategy{DeviceListEnvvar, DeviceListVolumeMounts, DeviceListCDIAnnotations, DeviceListCDICRI}

// CDIDeviceIDStrategy is how a card is named inside its CDI kind.
type CDIDeviceIDStrategy string

// The CDI device-name strategies (nvidia-ctk cdi generate --device-name-strategy names devices the
// same two ways).
const (
	// CDIDeviceIDUUID names a card by its UUID: nvidia.com/gpu=GPU-….
	CDIDeviceIDUUID CDIDeviceIDStrategy = "uuid"
	// CDIDeviceIDIndex names a card by its NVML index: nvidia.com/gpu=0.
	CDIDeviceIDIndex CDIDeviceIDStrategy = "index"
)

// Fixed names of the volume-mounts and CDI strategies.
const (
	// VolumeMountsRoot is the folder under which the NVIDIA container toolkit looks for device mounts.
	VolumeMountsRoot = "/var/run/nvidia-container-devices"
	// VolumeMountsHostPath is what each device mount binds: the toolkit only counts mounts of /dev/null.
	VolumeMountsHostPath = "/dev/null"
	// VisibleDevicesVoid in NVIDIA_VISIBLE_DEVICES makes the toolkit's environment path inject
	// nothing (it also overrides an image's own NVIDIA_VISIBLE_DEVICES=all).
	VisibleDevicesVoid = "void"
	// CDIAnnotationName starts the name of the CDI annotation Allocate sets (after the prefix).
	CDIAnnotationName = "cardinal-device-plugin_"
)

// DeviceListConfig chooses how Allocate names a container's cards to the container runtime.
type DeviceListConfig struct {
	// Strategies are the device-list strategies, all applied; empty means envvar.
	Strategies DeviceListStrategies
	// CDIKind is the CDI device kind (vendor/class) of a card: nvidia.com/gpu, as nvidia-ctk
	// generates it.
	CDIKind string
	// CDIDeviceIDStrategy names a card inside CDIKind: by UUID or by NVML index.
	CDIDeviceIDStrategy CDIDeviceIDStrategy
	// CDIAnnotationPrefix is the prefix of the cdi-annotations key: cdi.k8s.io/ for containerd and
	// CRI-O; the NVIDIA runtime in CDI mode can be told others.
	CDIAnnotationPrefix string
}

// DefaultDeviceListConfig is today's behaviour: NVIDIA_VISIBLE_DEVICES only; CDI names by UUID.
func DefaultDeviceListConfig() DeviceListConfig {
	return DeviceListConfig{
		Strategies:          DeviceListStrategies{DeviceListEnvvar},
		CDIKind:             "nvidia.com/gpu",
		CDIDeviceIDStrategy: CDIDeviceIDUUID,
		CDIAnnotationPrefix: "cdi.k8s.io/",
	}
}

// AddFlags registers --device-list-strategy, --cdi-kind, --cdi-device-id-strategy and
// --cdi-annotation-prefix.
func (c *DeviceListConfig) AddFlags(fs *pflag.FlagSet) {
	fs.Var(&c.Strategies, "device-list-strategy", "how Allocate names a container's cards to the container runtime, comma-separated, all applied: "+
		"envvar (NVIDIA_VISIBLE_DEVICES=<UUIDs>), volume-mounts (/dev/null mounted at "+VolumeMountsRoot+"/<UUID>), "+
		"cdi-annotations (a cdi.k8s.io/ container annotation), cdi-cri (the CRI's CDI devices); without envvar, NVIDIA_VISIBLE_DEVICES is "+
		VolumeMountsRoot+" (volume-mounts) or void")
	fs.StringVar(&c.CDIKind, "cdi-kind", c.CDIKind, "CDI device kind (vendor/class) of a card, as in the CDI spec nvidia-ctk generates (cdi-annotations, cdi-cri)")
	fs.Var((*cdiDeviceIDValue)(&c.CDIDeviceIDStrategy), "cdi-device-id-strategy", "how a card is named inside --cdi-kind: uuid (<kind>=GPU-…) or index (<kind>=<NVML index>)")
	fs.StringVar(&c.CDIAnnotationPrefix, "cdi-annotation-prefix", c.CDIAnnotationPrefix, "prefix of the cdi-annotations key (containerd and CRI-O read cdi.k8s.io/)")
}

var (
	// cdiVendor and cdiClass are the CDI specification's rules for the two halves of a kind.
	cdiVendor = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
	cdiClass  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$`)
)

// Validate reports the first setting the plugin cannot use, naming its flag.
func (c DeviceListConfig) Validate() error {
	var errs []error
	for _, s := range c.Strategies {
		if err := checkStrategy(string(s)); err != nil {
			errs = append(errs, fmt.Errorf("--device-list-strategy: %w", err))
		}
	}
	vendor, class, ok := strings.Cut(c.CDIKind, "/")
	if !ok || !cdiVendor.MatchString(vendor) || !cdiClass.MatchString(class) {
		errs = append(errs, fmt.Errorf("--cdi-kind: %q is not a CDI kind vendor/class (e.g. nvidia.com/gpu)", c.CDIKind))
	}
	if err := checkCDIDeviceID(string(c.CDIDeviceIDStrategy)); err != nil {
		errs = append(errs, fmt.Errorf("--cdi-device-id-strategy: %w", err))
	}
	if !strings.HasSuffix(c.CDIAnnotationPrefix, "/") || len(validation.IsQualifiedName(c.CDIAnnotationPrefix+"x")) > 0 {
		errs = append(errs, fmt.Errorf("--cdi-annotation-prefix: %q is not an annotation key prefix ending in / (e.g. cdi.k8s.io/)", c.CDIAnnotationPrefix))
	}
	return errors.Join(errs...)
}

func checkStrategy(s string) error {
	if !slices.Contains(deviceListStrategies, DeviceListStrategy(s)) {
		return fmt.Errorf("unknown strategy %q (known: %s)", s, strings.ReplaceAll(joinStrategies(deviceListStrategies), ",", ", "))
	}
	return nil
}

func checkCDIDeviceID(s string) error {
	if s != string(CDIDeviceIDUUID) && s != string(CDIDeviceIDIndex) {
		return fmt.Errorf("unknown strategy %q (known: uuid, index)", s)
	}
	return nil
}

// withDefaults fills what a caller left empty (tests, callers that predate the strategies).
func (c DeviceListConfig) withDefaults() DeviceListConfig {
	d := DefaultDeviceListConfig()
	if len(c.Strategies) == 0 {
		c.Strategies = d.Strategies
	}
	if c.CDIKind == "" {
		c.CDIKind = d.CDIKind
	}
	if c.CDIDeviceIDStrategy == "" {
		c.CDIDeviceIDStrategy = d.CDIDeviceIDStrategy
	}
	if c.CDIAnnotationPrefix == "" {
		c.CDIAnnotationPrefix = d.CDIAnnotationPrefix
	}
	return c
}

// DeviceListStrategies is the --device-list-strategy flag: a comma-separated list, e.g.
// "envvar,cdi-cri", without repeats; an unknown name is an error.
type DeviceListStrategies []DeviceListStrategy

// String implements pflag.Value.
func (s *DeviceListStrategies) String() string { return joinStrategies(*s) }

// Set implements pflag.Value.
func (s *DeviceListStrategies) Set(v string) error {
	var out DeviceListStrategies
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if err := checkStrategy(part); err != nil {
			return err
		}
		if !slices.Contains(out, DeviceListStrategy(part)) {
			out = append(out, DeviceListStrategy(part))
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("no strategy in %q (known: %s)", v, strings.ReplaceAll(joinStrategies(deviceListStrategies), ",", ", "))
	}
	*s = out
	return nil
}

// Type implements pflag.Value.
func (s *DeviceListStrategies) Type() string { return "strategies" }

func (s DeviceListStrategies) has(x DeviceListStrategy) bool { return slices.Contains(s, x) }

func joinStrategies(s []DeviceListStrategy) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = string(x)
	}
	return strings.Join(parts, ",")
}

type cdiDeviceIDValue CDIDeviceIDStrategy

func (v *cdiDeviceIDValue) String() string { return string(*v) }
func (v *cdiDeviceIDValue) Type() string   { return "uuid|index" }
func (v *cdiDeviceIDValue) Set(s string) error {
	if err := checkCDIDeviceID(s); err != nil {
		return err
	}
	*v = cdiDeviceIDValue(s)
	return nil
}

// listedCard is one card (or MIG instance) of a container as the device list names it.
type listedCard struct {
	// UUID is the card's UUID, or the instance's MIG UUID.
	UUID string
	// Index is the card's NVML index (the name of its CDI device under the index strategy).
	Index int
	// MIG is true for a MIG instance: its CDI device is named <kind>=<MIG UUID> under either
	// strategy. The index name <kind>=<gpu>:<mig> takes NVML's MIG device slot, which the plugin
	// does not keep, so MIG nodes need a CDI spec that names devices by UUID (nvidia-ctk cdi
	// generate --device-name-strategy=uuid).
	MIG bool
}

// mount is one bind mount of the volume-mounts strategy.
type mount struct {
	ContainerPath, HostPath string
	ReadOnly                bool
}

// deviceListing is what names a container's cards to the runtime: a part of its Allocate response.
type deviceListing struct {
	// VisibleDevices is NVIDIA_VISIBLE_DEVICES.
	VisibleDevices string
	Mounts         []mount
	Annotations    map[string]string
	CDIDevices     []string
}

// listDevices applies every configured strategy to a container's cards, given in CUDA's order
// (cudaOrder); every list keeps that order. key makes the CDI annotation's name unique to the
// container. NVIDIA_VISIBLE_DEVICES is always set: the UUIDs with envvar; otherwise the mounts'
// folder with volume-mounts; otherwise void, so that neither the image's own value (CUDA images carry
// NVIDIA_VISIBLE_DEVICES=all) nor a legacy NVIDIA runtime hook adds cards to what CDI injects.
func listDevices(c DeviceListConfig, cards []listedCard, key string) deviceListing {
	var l deviceListing
	uuids := make([]string, len(cards))
	for i, card := range cards {
		uuids[i] = card.UUID
	}
	switch {
	case c.Strategies.has(DeviceListEnvvar):
		l.VisibleDevices = strings.Join(uuids, ",")
	case c.Strategies.has(DeviceListVolumeMounts):
		l.VisibleDevices = VolumeMountsRoot
	default:
		l.VisibleDevices = VisibleDevicesVoid
	}
	if c.Strategies.has(DeviceListVolumeMounts) {
		for _, u := range uuids {
			l.Mounts = append(l.Mounts, mount{ContainerPath: path.Join(VolumeMountsRoot, u), HostPath: VolumeMountsHostPath, ReadOnly: true})
		}
	}
	if !c.Strategies.has(DeviceListCDIAnnotations) && !c.Strategies.has(DeviceListCDICRI) {
		return l
	}
	names := make([]string, len(cards))
	for i, card := range cards {
		id := card.UUID
		if c.CDIDeviceIDStrategy == CDIDeviceIDIndex && !card.MIG {
			id = fmt.Sprint(card.Index)
		}
		names[i] = c.CDIKind + "=" + id
	}
	if c.Strategies.has(DeviceListCDIAnnotations) {
		l.Annotations = map[string]string{c.CDIAnnotationPrefix + CDIAnnotationName + key: strings.Join(names, ",")}
	}
	if c.Strategies.has(DeviceListCDICRI) {
		l.CDIDevices = names
	}
	return l
}

// cdiAnnotationKey is the unique part of a container's CDI annotation name: short (an annotation
// name has at most 63 characters), and the same on every Allocate of that container.
func cdiAnnotationKey(pod, container string) string {
	sum := sha256.Sum256([]byte(pod + "/" + container))
	return hex.EncodeToString(sum[:8])
}

// apply writes the listing into a container's Allocate response.
func (l deviceListing) apply(r *pluginapi.ContainerAllocateResponse) {
	if r.Envs == nil {
		r.Envs = map[string]string{}
	}
	r.Envs[EnvVisibleDevices] = l.VisibleDevices
	for _, m := range l.Mounts {
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	if len(l.Annotations) > 0 {
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		for k, v := range l.Annotations {
			r.Annotations[k] = v
		}
	}
	for _, n := range l.CDIDevices {
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: n})
	}
}
