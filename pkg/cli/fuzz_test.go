package cli

import (
	"strings"
	"testing"
)

// FuzzDecodePod: a pod manifest from -f never panics the decoder; an error names the file, and a
// decoded pod always has a namespace (the flag's, else default).
func FuzzDecodePod(f *testing.F) {
	for _, s := range []string{
		"", "kind: Pod", "kind: Pod\nmetadata: {name: a}\n", "{\"kind\":\"Pod\",\"metadata\":{\"generateName\":\"g-\"}}",
		"kind: Deployment", "kind: [Pod]", "kind: Pod\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]}",
		"kind: Pod\nspec: {containers: 3}", "- a\n- b", "kind: Pod\nbogus: 1",
	} {
		f.Add(s)
	}
	o := &Options{Namespace: "ml"}
	f.Fuzz(func(t *testing.T, s string) {
		pod, err := o.decodePod("pod.yaml", []byte(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "-f pod.yaml: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if pod == nil || pod.Namespace == "" {
			t.Fatalf("decoded %v without a namespace", pod)
		}
	})
}
