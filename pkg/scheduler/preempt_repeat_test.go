package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// Issue 33 item 6: two nodes of 2 A100s, each full of priority-0 1-card pods (n1: a, b; n2: c, d);
// hi (priority 100) needs 2 cards. kube-scheduler calls the preempt verb once per scheduling cycle
// that finds no node, so again while hi's first victims terminate. Before the fix the second call
// dropped n1 (the pods leaving there make room) and offered c and d as a fresh preemption:
// kube-scheduler evicted all four pods for a pod that needed two.
func TestPreemptOncePerPreemptor(t *testing.T) {
	type change func(h *harness, clk *testingclock.FakePassiveClock)
	var (
		terminate = func(names ...string) change {
			return func(h *harness, _ *testingclock.FakePassiveClock) {
				for _, name := range names {
					p := h.pods[name].DeepCopy()
					p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_000_000, 0)}
					h.cache.UpsertPod(p)
				}
			}
		}
		gone = func(names ...string) change {
			return func(h *harness, _ *testingclock.FakePassiveClock) {
				for _, name := range names {
					h.cache.DeletePod(h.pods[name].UID)
				}
			}
		}
		wait = func(d time.Duration) change {
			return func(_ *harness, clk *testingclock.FakePassiveClock) { clk.SetTime(clk.Now().Add(d)) }
		}
		nominate = func(node string) change {
			return func(h *harness, _ *testingclock.FakePassiveClock) {
				h.cache.UpsertPod(nominated(h.pods["hi"].DeepCopy(), node))
			}
		}
		// top (priority 1000) takes both cards of n1 the moment a and b are gone.
		topTakesN1 = func(h *harness, _ *testingclock.FakePassiveClock) {
			h.cache.UpsertPod(holder(h.t.(*testing.T), "top", 1000, "n1", 9, 0, uuidOf("n1", 0), uuidOf("n1", 1)))
		}
	)
	both := map[string][]string{"n1": {"a", "b"}, "n2": {"c", "d"}}
	type call struct {
		before []change
		want   map[string][]string
	}
	cases := []struct {
		name string
		// remembered: the first call is made by this extender (false: by one restarted since, so
		// only the nomination tells).
		remembered bool
		calls      []call
	}{
		{
			name: "victims terminating: no fresh preemption elsewhere", remembered: true,
			calls: []call{
				{want: both},
				// kube-scheduler chose n1: a and b are being deleted, hi is nominated there. 2 s
				// later the next cycle preempts again: n2's pods must stay.
				{before: []change{terminate("a", "b"), nominate("n1"), wait(2 * time.Second)}, want: map[string][]string{}},
				// a is gone, b still terminating 30 s on (a grace period): still nothing.
				{before: []change{gone("a"), wait(30 * time.Second)}, want: map[string][]string{}},
			},
		},
		{
			// End to end (TestPreemptionRepeated): the victims went within a second, before
			// kube-scheduler's informer said so; its next cycle found no room and preempted again.
			name: "victims gone, the room free: kube-scheduler's view is behind, wait", remembered: true,
			calls: []call{
				{want: both},
				{before: []change{gone("a", "b"), wait(time.Second)}, want: map[string][]string{}},
			},
		},
		{
			name: "victims gone and the room taken: preempt again", remembered: true,
			calls: []call{
				{want: both},
				{before: []change{terminate("a", "b"), nominate("n1"), wait(time.Second)}, want: map[string][]string{}},
				// a and b are gone, but top (higher priority) took n1's cards: hi may preempt
				// again, and only n2 has victims.
				{before: []change{gone("a", "b"), topTakesN1, wait(time.Second)}, want: map[string][]string{"n2": {"c", "d"}}},
			},
		},
		{
			name: "nothing visible yet: wait preemptSettle, then preempt again", remembered: true,
			calls: []call{
				{want: both},
				// 1 s on, the informer shows no deletion yet (async preemption): wait.
				{before: []change{wait(time.Second)}, want: map[string][]string{}},
				// preemptSettle (5 s) after the answer, still nothing: that preemption failed.
				{before: []change{wait(5 * time.Second)}, want: both},
			},
		},
		{
			name: "restarted extender: the nomination tells", remembered: false,
			calls: []call{
				// 0 + 1 = 1 s: nominated to n1, where a and b are being deleted.
				{before: []change{terminate("a", "b"), nominate("n1"), wait(time.Second)}, want: map[string][]string{}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakePassiveClock(time.Unix(1_000_000, 0))
			pods := map[string]*corev1.Pod{
				"a": holder(t, "a", 0, "n1", 0, 0, uuidOf("n1", 0)), "b": holder(t, "b", 0, "n1", 1, 0, uuidOf("n1", 1)),
				"c": holder(t, "c", 0, "n2", 0, 0, uuidOf("n2", 0)), "d": holder(t, "d", 0, "n2", 1, 0, uuidOf("n2", 1)),
				"hi": preemptor("hi", 100, nil, 2, 0),
			}
			h := newHarness(t, harnessOptions{clock: clk}, mixedNode("n1", 81920, 1, a100, a100), mixedNode("n2", 81920, 1, a100, a100),
				pods["a"], pods["b"], pods["c"], pods["d"])
			h.pods = pods
			for i, c := range tc.calls {
				for _, ch := range c.before {
					ch(h, clk)
				}
				got := victimNames(h.preempt(pods["hi"], map[string][]string{"n1": {"a", "b"}, "n2": {"c", "d"}}))
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Errorf("call %d: victims (-want +got):\n%s", i+1, diff)
				}
			}
		})
	}
}
