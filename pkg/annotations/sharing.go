package annotations

import "regexp"

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
}

// sharingMode is what a mode may look like on the wire: known or not, a short lower-case word.
var sharingMode = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

func (s *Sharing) validate() error {
	if !sharingMode.MatchString(s.Mode) {
		return errorf(GPUInventory, "sharing.mode: %q is not a mode name (known: none, mps, hami-core)", s.Mode)
	}
	return nil
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
