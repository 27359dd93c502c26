package scheduler

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// informerPod is the pod an informer holds: same identity as what kube-scheduler sends, but not the
// same object (managed fields stripped, say), so a test can tell which one decodeArgs returned.
func informerPod() *corev1.Pod {
	p := gpuPod("p", map[string]string{annotations.UseGPUType: "a100"}, ctr{name: "m", gpu: 1})
	p.ResourceVersion = "41"
	return p
}

func knownOnly(p *corev1.Pod) func(ns, name string) *corev1.Pod {
	return func(ns, name string) *corev1.Pod {
		if ns == p.Namespace && name == p.Name {
			return p
		}
		return nil
	}
}

// TestDecodeArgsTakesTheInformersPodOnlyWhenItIsTheSame: the informer's copy stands in for the
// pod's JSON only when UID and resourceVersion both match and the body has kube-scheduler's exact
// shape; every other body decodes as encoding/json decodes it.
func TestDecodeArgsTakesTheInformersPodOnlyWhenItIsTheSame(t *testing.T) {
	known := informerPod()
	sent := known.DeepCopy()
	sent.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate}}
	names := []string{"n1", "n2"}
	body := func(p *corev1.Pod) []byte {
		b, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &names})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	with := func(f func(p *corev1.Pod)) []byte {
		p := sent.DeepCopy()
		f(p)
		return body(p)
	}
	same := string(body(sent))
	cases := []struct {
		name     string
		body     string
		informer bool
	}{
		{"same UID and resourceVersion", same, true},
		{"spaces around the punctuation", " { \"Pod\" : " + string(mustJSON(t, sent)) + " , \"NodeNames\" : [ \"n1\" , \"n2\" ] } \n", true},
		{"a newer resourceVersion", string(with(func(p *corev1.Pod) { p.ResourceVersion = "42" })), false},
		{"another UID (deleted and created again)", string(with(func(p *corev1.Pod) { p.UID = "uid-other" })), false},
		{"no resourceVersion", string(with(func(p *corev1.Pod) { p.ResourceVersion = "" })), false},
		{"a pod the informer has not seen", string(with(func(p *corev1.Pod) { p.Name = "q" })), false},
		{"a key in another case", strings.Replace(same, `"Pod"`, `"pod"`, 1), false},
		{"metadata in another case", strings.Replace(same, `"metadata"`, `"Metadata"`, 1), false},
		{"the pod twice", strings.Replace(same, `{"Pod":`, `{"Pod":{},"Pod":`, 1), false},
		{"a key kube-scheduler does not write", strings.Replace(same, `{"Pod":`, `{"Extra":1,"Pod":`, 1), false},
		{"an escaped uid", strings.Replace(same, `"uid":"uid-p"`, `"uid":"uid-\u0070"`, 1), false},
		{"an escaped name", strings.Replace(same, `"name":"p"`, `"name":"\u0070"`, 1), false},
		{"names with an escape", strings.Replace(same, `"n2"]`, `"n\u0032"]`, 1), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want extenderArgs
			if err := json.Unmarshal([]byte(c.body), &want); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			got, fromInformer, err := decodeArgs([]byte(c.body), knownOnly(known))
			if err != nil {
				t.Fatalf("decodeArgs: %v", err)
			}
			if fromInformer != c.informer || (got.Pod == known) != c.informer {
				t.Fatalf("informer's pod taken: %v (same object %v), want %v", fromInformer, got.Pod == known, c.informer)
			}
			if !reflect.DeepEqual(got.NodeNames, want.NodeNames) || !reflect.DeepEqual(got.Nodes, want.Nodes) {
				t.Errorf("names %v nodes %v, encoding/json gives %v %v", got.NodeNames, got.Nodes, want.NodeNames, want.Nodes)
			}
			if !c.informer && !reflect.DeepEqual(got.Pod, want.Pod) {
				t.Errorf("pod decoded as %+v, encoding/json gives %+v", got.Pod, want.Pod)
			}
		})
	}
}

// TestDecodeArgsErrors: a body that encoding/json refuses is refused, whatever the informer holds.
func TestDecodeArgsErrors(t *testing.T) {
	known := informerPod()
	good := string(mustJSON(t, known))
	for _, body := range []string{
		`{"Pod":` + good + `,"NodeNames":["n1"]} trailing`,
		`{"Pod":` + good + `,"NodeNames":["n1",]}`,
		`{"Pod":` + good + `,"NodeNames":[1]}`,
		`{"Pod":` + good + `,"Nodes":{"items":5}}`,
		`{"Pod":` + strings.Replace(good, `"spec":{`, `"spec":{"x":tru,`, 1) + `}`,
		`{"Pod":` + good,
		``,
	} {
		if _, _, err := decodeArgs([]byte(body), knownOnly(known)); err == nil {
			t.Errorf("%.80q...: decoded, want an error", body)
		}
	}
}

// FuzzDecodeArgs: decodeArgs never accepts what encoding/json refuses except a pod it did not need
// to decode (the informer's copy of the same UID and resourceVersion), and otherwise decodes
// exactly what encoding/json decodes.
func FuzzDecodeArgs(f *testing.F) {
	known := informerPod()
	names := []string{"n1", "n2"}
	f.Add(mustJSON(f, extenderv1.ExtenderArgs{Pod: known, NodeNames: &names}))
	f.Add(mustJSON(f, extenderv1.ExtenderArgs{Pod: known, Nodes: &corev1.NodeList{Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}}}))
	f.Add([]byte(`{"Pod":{"metadata":{"name":"p","namespace":"default","uid":"uid-p","resourceVersion":"41"},"spec":{"x":"]}"}},"NodeNames":["a"]}`))
	f.Add([]byte(`{"Pod":{"metadata":{"name":"p","namespace":"default","uid":"uid-p","resourceVersion":"41"},"spec":5},"NodeNames":null}`))
	f.Add([]byte(`{"Pod":null,"Nodes":null,"NodeNames":["a\"b"]}`))
	f.Add([]byte(`{"pod":{},"POD":{}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, fromInformer, err := decodeArgs(body, knownOnly(known))
		var want extenderArgs
		wantErr := json.Unmarshal(body, &want)
		if err != nil {
			if wantErr == nil {
				t.Fatalf("decodeArgs refused what encoding/json decodes: %v", err)
			}
			return
		}
		if fromInformer {
			if got.Pod != known {
				t.Fatal("fromInformer but not the informer's pod")
			}
		} else if wantErr != nil {
			t.Fatalf("decodeArgs accepted what encoding/json refuses (%v)", wantErr)
		} else if !reflect.DeepEqual(got.Pod, want.Pod) {
			t.Fatalf("pod %+v, encoding/json gives %+v", got.Pod, want.Pod)
		}
		if wantErr == nil && (!reflect.DeepEqual(got.NodeNames, want.NodeNames) || !reflect.DeepEqual(got.Nodes, want.Nodes)) {
			t.Fatalf("names %v nodes %v, encoding/json gives %v %v", got.NodeNames, got.Nodes, want.NodeNames, want.Nodes)
		}
	})
}
