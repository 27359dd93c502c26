package annotations

import (
	"slices"
	"strings"
)

// Policy names a placement strategy, for nodes (which node) or for cards (which cards inside a node).
type Policy string

const (
	// PolicyBinpack prefers the fullest node or card that fits, keeping others empty for large requests.
	PolicyBinpack Policy = "binpack"
	// PolicySpread prefers the emptiest node or card, spreading load and failure domains.
	PolicySpread Policy = "spread"
	// PolicyFragAware scores a placement by how much it fragments the node for the requests the
	// cluster has seen (after Weng et al., "Beware of Fragmentation", USENIX ATC 2023).
	PolicyFragAware Policy = "frag-aware"
)

// Policies lists every policy a pod may name in NodePolicy or GPUPolicy, in the order help text shows.
var Policies = []Policy{PolicyBinpack, PolicySpread, PolicyFragAware}

// ParsePolicy parses a policy name (case-insensitive) and names key in the error.
func ParsePolicy(key, value string) (Policy, error) {
	p := Policy(strings.ToLower(strings.TrimSpace(value)))
	if !slices.Contains(Policies, p) {
		return "", errorf(key, "unknown policy %q (known: %s)", value, policyList())
	}
	return p, nil
}

func policyList() string {
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}
