package annotations

import (
	"regexp"
	"strings"
)

// How a node enforces the limits of containers that share a card (Inventory.Sharing). The device
// plugin's --sharing-mode chooses it; the extender reads it to refuse share requests a node cannot
// honour.
const (
	// SharingNone: the node only schedules shares. The limit variables reach the container but
	// nothing on the node acts on them: limits are advisory.
	SharingNone = "none"
	// SharingMPS: an NVIDIA MPS control daemon runs on the node and shared containers are its
	// clients; MPS caps each client's memory and active threads.
	SharingMPS = "mps"
	// SharingHAMiCore: HAMi-core's library (installed on the node by its operator) is preloaded into
	// shared containers and caps their memory and compute by intercepting CUDA driver calls.
	SharingHAMiCore = "hami-core"
)

// SharingModes are the modes this version knows, in the order docs list them.
var SharingModes = []string{SharingNone, SharingMPS, SharingHAMiCore}

// What holds a shared container to its memory or compute reservation on the node (Sharing.Memory,
// Sharing.Compute). They say who enforces the limit, and so what a tenant's own process can undo.
const (
	// EnforcementNone: nothing; the limit variables are advisory.
	EnforcementNone = "none"
	// EnforcementClientEnv: code in the tenant's own process reads its limits from the container's
	// environment (HAMi-core's preload, an MPS client's variables): cooperative, a process that edits
	// its own environment or bypasses the library escapes it.
	EnforcementClientEnv = "client-env"
	// EnforcementMPSDaemon: the node's MPS control daemon gives every client one slot by default
	// (memory ÷ shares, 100 ÷ shares % of the threads), and the cards run in EXCLUSIVE_PROCESS; a
	// client that unsets its variables gets the daemon's default.
	EnforcementMPSDaemon = "mps-daemon"
	// EnforcementKernel: the device plugin sets a per-card limit on the pod's cgroup through the
	// driver (NVML's per-cgroup memory limits, driver r615+) before the container starts, enforced by
	// the kernel's cgroup v2 dmem controller: nothing inside the container can raise it.
	EnforcementKernel = "kernel"
	// EnforcementDriver: as EnforcementKernel, on a kernel without the dmem controller, where the
	// driver enforces the pod cgroup's limit with a backend of its own.
	EnforcementDriver = "driver"
)

// SharingEnforcements are the enforcement values this version knows, in the order docs list them.
var SharingEnforcements = []string{EnforcementNone, EnforcementClientEnv, EnforcementMPSDaemon, EnforcementKernel, EnforcementDriver}

// EnforcementVersion is the version of Sharing's Memory and Compute fields this package writes.
const EnforcementVersion = 1

// Sharing is the optional "sharing" field of the inventory. Absent means mode none (plugins older
// than the field, or a node that only schedules shares).
type Sharing struct {
	// Mode is one of SharingModes; a mode this version does not know is kept as read and counts as
	// not enforcing (a newer plugin may report modes an older extender cannot judge).
	Mode string `json:"mode"`
	// Ready says whether what enforces the mode works now (the MPS control daemon answers, the
	// HAMi-core library is in place). The device plugin refuses shared containers while it is false;
	// whole-card containers are served.
	Ready bool `json:"ready"`
	// EnforcementV is the version of Memory and Compute (EnforcementVersion); 0 (absent): a plugin
	// older than those fields, which said nothing of what enforces the limits.
	EnforcementV int `json:"enforcementV,omitempty"`
	// Memory says what holds a shared container to its memory reservation (one of
	// SharingEnforcements; an unknown word is a newer plugin's and is kept as read).
	Memory string `json:"memory,omitempty"`
	// Compute says what holds a shared container to its compute (gpucores) reservation.
	Compute string `json:"compute,omitempty"`
	// ExclusiveCards (optional, added after EnforcementV 1; absent: false) says that the node's MPS
	// daemon runs its cards in EXCLUSIVE_PROCESS: only the MPS server may hold a context on them,
	// so a whole-card container (not an MPS client) cannot use them. The extender sends whole-card
	// containers elsewhere and the device plugin refuses them.
	ExclusiveCards bool `json:"exclusiveCards,omitempty"`
}

// sharingMode is what a mode may look like on the wire: known or not, a short lower-case word.
var sharingMode = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

func (s *Sharing) validate() error {
	if !sharingMode.MatchString(s.Mode) {
		return errorf(GPUInventory, "sharing.mode: %q is not a mode name (known: none, mps, hami-core)", s.Mode)
	}
	if s.EnforcementV < 0 {
		return errorf(GPUInventory, "sharing.enforcementV: %d is negative", s.EnforcementV)
	}
	for _, f := range []struct{ name, v string }{{"memory", s.Memory}, {"compute", s.Compute}} {
		if f.v != "" && !sharingMode.MatchString(f.v) {
			return errorf(GPUInventory, "sharing.%s: %q is not an enforcement name (known: %s)", f.name, f.v, strings.Join(SharingEnforcements, ", "))
		}
	}
	return nil
}

// KernelMemory reports whether the node holds shared containers' memory with a per-cgroup limit the
// tenant cannot raise (EnforcementKernel or EnforcementDriver), as its plugin says (version 1 or
// later of the enforcement fields).
func (s *Sharing) KernelMemory() bool {
	return s != nil && s.EnforcementV >= 1 && (s.Memory == EnforcementKernel || s.Memory == EnforcementDriver)
}

// WholeCardsRefused reports whether the node's cards cannot be used whole: mode mps with its cards
// in EXCLUSIVE_PROCESS (ExclusiveCards).
func (s *Sharing) WholeCardsRefused() bool {
	return s != nil && s.Mode == SharingMPS && s.ExclusiveCards
}

// Enforced reports whether shared containers on the node get limits something enforces now: the
// mode is mps or hami-core and its enforcement is ready. A nil Sharing (mode none) is not enforced.
func (s *Sharing) Enforced() bool {
	return s != nil && s.Ready && (s.Mode == SharingMPS || s.Mode == SharingHAMiCore)
}

// ModeOrNone is the node's mode, SharingNone when the inventory has no sharing field.
func (s *Sharing) ModeOrNone() string {
	if s == nil {
		return SharingNone
	}
	return s.Mode
}
