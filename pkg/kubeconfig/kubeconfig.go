// Package kubeconfig loads the client configuration every Cardinal binary uses: a kubeconfig file
// when a path is given, the pod's service account otherwise.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load returns the client configuration from path, or the in-cluster configuration when path is empty,
// with Uncompressed applied. Errors name the source, so a person knows whether to fix the file or the flag.
func Load(path string) (*rest.Config, error) {
	if path == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (set --kubeconfig outside a cluster): %w", err)
		}
		return Uncompressed(rc), nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return Uncompressed(rc), nil
}

// Uncompressed turns off gzip on rc's responses, as kube-scheduler does for its own client, and
// returns rc. With gzip accepted the API server compresses every watch event it sends, once per
// flush: the extender's pod watch alone cost it about 0.2 CPU-seconds per 5000 bindings in S2, and
// the extender as much again to inflate them, to save bytes on a link inside the cluster.
func Uncompressed(rc *rest.Config) *rest.Config {
	rc.DisableCompression = true
	return rc
}
