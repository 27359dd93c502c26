// Package kubeconfig loads the client configuration every Cardinal binary uses: a kubeconfig file
// when a path is given, the pod's service account otherwise.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load returns the client configuration from path, or the in-cluster configuration when path is empty.
// Errors name the source, so a person knows whether to fix the file or the flag.
func Load(path string) (*rest.Config, error) {
	if path == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (set --kubeconfig outside a cluster): %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return rc, nil
}
