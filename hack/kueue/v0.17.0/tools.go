//go:build tools

// Package kueue pins the Kueue manager hack/testbed/build-kueue.sh builds at v0.17.0.
package kueue

import _ "sigs.k8s.io/kueue/cmd/kueue"
