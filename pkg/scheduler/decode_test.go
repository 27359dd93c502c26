package scheduler

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The fast name decoder must agree with encoding/json on every input encoding/json accepts.
func FuzzNameList(f *testing.F) {
	for _, s := range []string{`["a","b"]`, ` [ "node-1" , "node-2" ] `, `[]`, `null`, `["a\"b"]`, `["é"]`, `["\u00e9"]`, `["a",]`, `["a"`, `[1]`, `["a"] x`, "[\"a\x01\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want []string
		stdErr := json.Unmarshal(b, &want)
		var got nameList
		err := json.Unmarshal(b, &got)
		if (err != nil) != (stdErr != nil) {
			t.Fatalf("%q: error %v, encoding/json %v", b, err, stdErr)
		}
		if err == nil && !cmp.Equal(want, []string(got)) {
			t.Fatalf("%q: got %q, encoding/json %q", b, got, want)
		}
	})
}

// The direct encoders must write what encoding/json writes.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	names := []string{"node-1", "nöde", `a"b`, "<x>"}
	results := []filterResult{
		{},
		{NodeNames: &names, FailedNodes: map[string]string{"b": "why", "a": "because <of> 50%"}, Error: "oops \"x\""},
		{Nodes: &corev1.NodeList{Items: []corev1.Node{{}}}, FailedAndUnresolvableNodes: map[string]string{}},
	}
	for _, r := range results {
		want, err := json.Marshal(extenderv1.ExtenderFilterResult(r))
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.AppendJSON(nil)
		if err != nil || string(got) != string(want) {
			t.Errorf("filter result:\n got %s (%v)\nwant %s", got, err, want)
		}
	}
	for _, l := range []priorityList{nil, {}, {{Host: "n1", Score: 3}, {Host: `q"`, Score: 10}}} {
		want, _ := json.Marshal(extenderv1.HostPriorityList(l))
		got, err := l.AppendJSON(nil)
		if err != nil || string(got) != string(want) {
			t.Errorf("priorities:\n got %s (%v)\nwant %s", got, err, want)
		}
	}
}
