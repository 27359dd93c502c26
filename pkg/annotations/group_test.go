package annotations

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodePodGroup(t *testing.T) {
	name := map[string]string{PodGroupName: "train-7"}
	count := func(v string) map[string]string { return map[string]string{PodGroupTotalCount: v} }
	cases := []struct {
		name    string
		labels  map[string]string
		ann     map[string]string
		want    PodGroup
		ok      bool
		wantErr string
	}{
		{name: "no label: no group", labels: map[string]string{"app": "x"}, ann: count("4")},
		{name: "nil maps: no group"},
		{name: "label and count", labels: name, ann: count("4"), want: PodGroup{Name: "train-7", Total: 4}, ok: true},
		{name: "a group of one", labels: name, ann: count("1"), want: PodGroup{Name: "train-7", Total: 1}, ok: true},
		{name: "the largest count", labels: name, ann: count("10000"), want: PodGroup{Name: "train-7", Total: MaxGroupPods}, ok: true},
		{name: "count missing", labels: name, ok: true,
			wantErr: `kueue.x-k8s.io/pod-group-total-count: missing: a pod of group "train-7" must give the group's total count`},
		{name: "count not a number", labels: name, ann: count("four"), ok: true,
			wantErr: `kueue.x-k8s.io/pod-group-total-count: "four" is not a whole number`},
		{name: "count with spaces", labels: name, ann: count(" 4"), ok: true,
			wantErr: `kueue.x-k8s.io/pod-group-total-count: " 4" is not a whole number`},
		{name: "count zero", labels: name, ann: count("0"), ok: true, wantErr: `kueue.x-k8s.io/pod-group-total-count: 0 is below 1`},
		{name: "count negative", labels: name, ann: count("-3"), ok: true, wantErr: `kueue.x-k8s.io/pod-group-total-count: -3 is below 1`},
		// 10001 > MaxGroupPods (10000)
		{name: "count too large", labels: name, ann: count("10001"), ok: true, wantErr: `kueue.x-k8s.io/pod-group-total-count: 10001 is above 10000`},
		{name: "empty name", labels: map[string]string{PodGroupName: ""}, ann: count("2"), ok: true,
			wantErr: `kueue.x-k8s.io/pod-group-name: the group name is empty`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, ok, err := DecodePodGroup(c.labels, c.ann)
			if ok != c.ok {
				t.Errorf("ok = %v, want %v", ok, c.ok)
			}
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				var ae *Error
				if !errors.As(err, &ae) {
					t.Errorf("err %T is not an *annotations.Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, g); diff != "" {
				t.Errorf("group (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodePodGroupInvalidLabelValueNamesTheKey(t *testing.T) {
	_, _, err := DecodePodGroup(map[string]string{PodGroupName: "-bad-"}, map[string]string{PodGroupTotalCount: "2"})
	if err == nil || !strings.HasPrefix(err.Error(), PodGroupName+`: "-bad-" is not a valid label value`) {
		t.Fatalf("err = %v", err)
	}
}

func FuzzDecodePodGroup(f *testing.F) {
	f.Add("train-7", "4", true)
	f.Add("train-7", "", true)
	f.Add("", "4", true)
	f.Add("x", "10001", true)
	f.Add("x", "-1", true)
	f.Add("x", "0x10", true)
	f.Add("x", "4", false)
	f.Add("a.b_c-d", "9999999999999999999999", true)
	f.Fuzz(func(t *testing.T, name, count string, counted bool) {
		labels := map[string]string{PodGroupName: name}
		ann := map[string]string{}
		if counted {
			ann[PodGroupTotalCount] = count
		}
		g, ok, err := DecodePodGroup(labels, ann)
		if !ok {
			t.Fatalf("a pod with the label %q is not in a group", name)
		}
		if err != nil {
			checkKey(t, err, PodGroupName+": ", PodGroupTotalCount+": ")
			return
		}
		// What decodes is a valid group and survives encode and decode unchanged.
		if g.Name != name || g.Total < 1 || g.Total > MaxGroupPods {
			t.Fatalf("decoded %+v from %q %q", g, name, count)
		}
		l2, a2 := EncodePodGroup(g)
		g2, ok2, err := DecodePodGroup(l2, a2)
		if err != nil || !ok2 || g2 != g {
			t.Fatalf("round trip of %+v: %+v %v %v", g, g2, ok2, err)
		}
	})
}
