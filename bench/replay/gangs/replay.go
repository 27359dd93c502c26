package gangs

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/bench/replay/sim"
	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Mode is how the pods of a gang are placed.
type Mode string

const (
	// AllOrNothing gives a gang's pods Kueue's pod-group keys (kueue.x-k8s.io/pod-group-name and
	// pod-group-total-count): the extender plans and binds the whole group or none of it.
	AllOrNothing Mode = "all-or-nothing"
	// PerPod gives them no group: each pod is placed as soon as it fits, alone; a job whose pods
	// are partly placed holds their cards and does not run until all of them are.
	PerPod Mode = "per-pod"
)

// Config is one replay of a job list on a cluster.
type Config struct {
	Nodes []trace.Node
	Jobs  []Job
	Mode  Mode
	// NodePolicy and GPUPolicy are the extender's default policies (the chart's: frag-aware).
	NodePolicy, GPUPolicy annotations.Policy
	// Synthesis fills in what the node list lacks (sim.Inventory); Shares 0 means 20.
	Synthesis sim.Synthesis
}

// Result is what one replay measured.
type Result struct {
	Mode Mode
	// Jobs and Gangs count the jobs, and those of several pods.
	Jobs, Gangs int
	// Completed and GangsCompleted count the jobs (and gangs) that ran to their end before the
	// cluster went still: no arrival left, nothing running.
	Completed, GangsCompleted int
	// CompletedByLastArrival counts the jobs completed when the last job arrived.
	CompletedByLastArrival int
	// PendingPodsAtLastArrival and PendingPods count the pods not bound when the last job arrived
	// and at the end.
	PendingPodsAtLastArrival, PendingPods int
	// Deadlocked counts the jobs that hold cards (some of their pods bound) but never ran:
	// nothing runs any more, so nothing they wait for can free; DeadlockedGPUs is the cards they
	// hold. Waiting counts the jobs that never ran and hold nothing.
	Deadlocked     int
	DeadlockedGPUs float64
	Waiting        int
	// WastedGPUHours is the cards held by pods of jobs that were not yet running (some pods
	// bound, not all), integrated over time until the last job ended; UsedGPUHours the cards held
	// by running jobs.
	WastedGPUHours, UsedGPUHours float64
	// End is when the last job ended (the cluster went still); MeanWait the mean time from a
	// completed job's arrival to its start.
	End, MeanWait time.Duration
	// Filters counts the extender filter calls; Elapsed the replay's wall time.
	Filters int
	Elapsed time.Duration
}

const (
	schedulerName = "cardinal-scheduler"
	namespace     = "default"
)

// jobState is a job during the replay.
type jobState struct {
	job *Job
	// pods are the names of the job's pods.
	pods  []string
	bound int
	// started is when all the job's pods ran (ran is false before).
	ran     bool
	started time.Duration
	done    bool
}

// replay is one run of Run.
type replay struct {
	ctx   context.Context
	cfg   *Config
	srv   *scheduler.Server
	cache *scheduler.Cache
	names []string
	// pods are the pods that exist, by name, as the API server holds them.
	pods  map[string]*corev1.Pod
	jobOf map[string]int
	jobs  []jobState
	now   time.Duration
	// partial and running are the cards held by jobs not yet running and by running ones.
	partial, running float64
	ends             endHeap
	res              Result
}

// Run replays cfg.Jobs on cfg.Nodes through the extender's Server, in process: each job's pods are
// created at its arrival (and shown to the extender's cache, as its informer would); whenever a
// job arrives its pods are scheduled, and whenever a job ends and frees its cards every pending
// pod is tried again, oldest job first, as kube-scheduler's queue retries them. Scheduling a pod
// is kube-scheduler's part of the exchange: Filter with every node, Prioritize the nodes that
// pass, bind to the best (ties to the smaller name) with the extender's Bind, whose Binding the
// replay commits as the API server does (node name and the assignment annotation), marking the
// pod Running. A job runs from the moment all its pods are bound, for its Duration, then its pods
// are deleted. The run ends when no job is left to arrive and none runs.
//
// Shortcuts that change no outcome (see pass): within one pass the cluster only fills up, so a
// pod or group is not asked about when one of the same row with no more pods found no place in
// that pass, and after a gang's first member found no place its other members are not filtered
// (each would get the same answer).
func Run(ctx context.Context, cfg Config) (Result, error) {
	start := time.Now()
	r := &replay{ctx: ctx, cfg: &cfg, pods: map[string]*corev1.Pod{}, jobOf: map[string]int{}}
	r.res = Result{Mode: cfg.Mode, Jobs: len(cfg.Jobs)}
	if err := r.setup(); err != nil {
		return Result{}, err
	}
	var pending []int
	next, lastArrival := 0, false
	for {
		if err := ctx.Err(); err != nil {
			return r.res, err
		}
		arrival := next < len(cfg.Jobs)
		if len(r.ends) > 0 && (!arrival || r.ends[0].at <= cfg.Jobs[next].Arrive) {
			at := r.ends[0].at
			r.advance(at)
			for len(r.ends) > 0 && r.ends[0].at == at {
				r.finish(heap.Pop(&r.ends).(end).job)
			}
			var err error
			if pending, err = r.pass(pending); err != nil {
				return r.res, err
			}
		} else if arrival {
			j := &cfg.Jobs[next]
			next++
			r.advance(j.Arrive)
			ji := r.create(j)
			rest, err := r.pass([]int{ji})
			if err != nil {
				return r.res, err
			}
			pending = append(pending, rest...)
		} else {
			break
		}
		if next == len(cfg.Jobs) && !lastArrival {
			lastArrival = true
			r.res.CompletedByLastArrival = r.res.Completed
			r.res.PendingPodsAtLastArrival = r.pendingPods(pending)
		}
	}
	r.res.End = r.now
	r.res.PendingPods = r.pendingPods(pending)
	for _, ji := range pending {
		js := &r.jobs[ji]
		if js.bound > 0 {
			r.res.Deadlocked++
			r.res.DeadlockedGPUs += float64(js.bound) * js.job.GPUs()
		} else {
			r.res.Waiting++
		}
	}
	var wait time.Duration
	for i := range r.jobs {
		if r.jobs[i].done {
			wait += r.jobs[i].started - r.jobs[i].job.Arrive
		}
	}
	if r.res.Completed > 0 {
		r.res.MeanWait = wait / time.Duration(r.res.Completed)
	}
	r.res.Elapsed = time.Since(start)
	return r.res, nil
}

// setup builds the extender (cache and server) with the cluster's nodes.
func (r *replay) setup() error {
	switch r.cfg.Mode {
	case AllOrNothing, PerPod:
	default:
		return fmt.Errorf("mode %q: want %q or %q", r.cfg.Mode, AllOrNothing, PerPod)
	}
	if len(r.cfg.Nodes) == 0 {
		return errors.New("no nodes")
	}
	syn := r.cfg.Synthesis
	if syn.Shares == 0 {
		syn.Shares = 20
	}
	d, err := core.New(core.Options{NodePolicy: r.cfg.NodePolicy, GPUPolicy: r.cfg.GPUPolicy})
	if err != nil {
		return err
	}
	names := annotations.DefaultResourceNames()
	r.cache = scheduler.NewCache(names, schedulerName)
	nodes := sim.SortedNodes(r.cfg.Nodes)
	for i := range nodes {
		n := &nodes[i]
		inv, err := sim.Inventory(n, syn)
		if err != nil {
			return err
		}
		enc, err := annotations.EncodeInventory(inv)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		r.cache.UpsertNode(&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Annotations: map[string]string{annotations.GPUInventory: enc}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(n.CPUMilli, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(n.MemoryMiB<<20, resource.BinarySI),
			}},
		})
		r.names = append(r.names, n.Name)
	}
	client := fake.NewClientset()
	// The fake API server cannot apply a pods/binding create: do what the API server does.
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*corev1.Binding)
		return true, b, r.commit(b)
	})
	r.srv = scheduler.NewServer(r.cache, scheduler.ServerOptions{Log: logr.Discard(), Client: client, Decider: d,
		Names: names, Pods: podSource{r}})
	return nil
}

// podSource is the pods the replay's API server holds, for the extender's Bind.
type podSource struct{ r *replay }

func (s podSource) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	p, ok := s.r.pods[name]
	if !ok || ns != namespace {
		return nil, fmt.Errorf("pod %s/%s not found", ns, name)
	}
	return p, nil
}

// commit applies a Binding as the API server does (node name and the Binding's annotations in one
// update) and, as the kubelet would, marks the pod Running; the extender's cache sees the pod.
func (r *replay) commit(b *corev1.Binding) error {
	old, ok := r.pods[b.Name]
	if !ok {
		return fmt.Errorf("binding of pod %s, which does not exist", b.Name)
	}
	if old.Spec.NodeName != "" {
		return fmt.Errorf("pod %s is already bound to %s", b.Name, old.Spec.NodeName)
	}
	pod := old.DeepCopy()
	pod.Spec.NodeName = b.Target.Name
	for k, v := range b.Annotations {
		pod.Annotations[k] = v
	}
	pod.Status.Phase = corev1.PodRunning
	r.pods[b.Name] = pod
	r.cache.UpsertPod(pod)
	js := &r.jobs[r.jobOf[b.Name]]
	js.bound++
	r.partial += js.job.GPUs()
	return nil
}

// podObject is pod m of job j as its controller would create it.
func (r *replay) podObject(j *Job, m int) *corev1.Pod {
	pod := sim.PodObject(j.Row, annotations.DefaultResourceNames())
	pod.Name = fmt.Sprintf("job-%d-%d", j.ID, m)
	pod.Namespace = namespace
	pod.UID = types.UID(fmt.Sprintf("uid-%d-%d", j.ID, m))
	pod.CreationTimestamp = metav1.NewTime(time.Unix(1_700_000_000, 0).Add(j.Arrive))
	pod.Spec.SchedulerName = schedulerName
	c := &pod.Spec.Containers[0]
	c.Resources.Requests = corev1.ResourceList{}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		c.Resources.Requests[name] = c.Resources.Limits[name]
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if r.cfg.Mode == AllOrNothing && j.Gang() {
		labels, ann := annotations.EncodePodGroup(annotations.PodGroup{Name: fmt.Sprintf("job-%d", j.ID), Total: j.Size})
		pod.Labels = labels
		for k, v := range ann {
			pod.Annotations[k] = v
		}
	}
	pod.Status.Phase = corev1.PodPending
	return pod
}

// create makes job j's pods and returns the job's index.
func (r *replay) create(j *Job) int {
	ji := len(r.jobs)
	js := jobState{job: j}
	if j.Gang() {
		r.res.Gangs++
	}
	for m := range j.Size {
		pod := r.podObject(j, m)
		r.pods[pod.Name] = pod
		r.jobOf[pod.Name] = ji
		js.pods = append(js.pods, pod.Name)
		r.cache.UpsertPod(pod) // the pod informer shows the new pod
	}
	r.jobs = append(r.jobs, js)
	return ji
}

// pass schedules the pods of the jobs list (job indexes, oldest first) and returns the jobs still
// not running.
//
// Within a pass the cluster only fills up, so what found no place finds none later in the same
// pass: after a pod of a row (alone, or as a group's first member) found no place, no pod of that
// row is asked about again; after a group of n pods of a row found no place, no group of that row
// with n pods or more is (the extender plans identical members one after the other, each by the
// same rule, so a larger group's first n members meet the same end).
func (r *replay) pass(list []int) ([]int, error) {
	failed := map[*trace.Pod]int{} // row → the fewest pods that found no place
	out := list[:0]
	for _, ji := range list {
		js := &r.jobs[ji]
		row := js.job.Row
		_, group := r.pods[js.pods[0]].Labels[annotations.PodGroupName]
		size := 1
		if group {
			size = js.job.Size
		}
		for i, name := range js.pods {
			if least, ok := failed[row]; ok && size >= least {
				break
			}
			if r.pods[name].Spec.NodeName != "" {
				continue
			}
			ok, err := r.schedule(name)
			if err != nil {
				return nil, err
			}
			if !ok {
				if group && i > 0 && js.bound > 0 {
					return nil, fmt.Errorf("member %s of a planned group found no place", name)
				}
				failed[row] = size // smaller than any before: larger ones were skipped
			}
		}
		if js.bound == js.job.Size {
			r.start(ji)
			continue
		}
		out = append(out, ji)
	}
	return out, nil
}

// schedule is kube-scheduler's cycle for one pod: filter on every node, prioritize the nodes that
// pass, bind to the best. It reports whether the pod was bound.
func (r *replay) schedule(name string) (bool, error) {
	pod := r.pods[name]
	names := r.names
	r.res.Filters++
	f := r.srv.Filter(r.ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if f.Error != "" {
		return false, fmt.Errorf("filter %s: %s", name, f.Error)
	}
	if f.NodeNames == nil || len(*f.NodeNames) == 0 {
		return false, nil
	}
	fit := slices.Clone(*f.NodeNames)
	node := fit[0]
	if len(fit) > 1 {
		prio := r.srv.Prioritize(r.ctx, &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &fit})
		best := int64(-1)
		for _, hp := range *prio {
			if hp.Score > best || (hp.Score == best && hp.Host < node) {
				node, best = hp.Host, hp.Score
			}
		}
	}
	b := r.srv.Bind(r.ctx, &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node})
	if b.Error != "" {
		return false, fmt.Errorf("bind %s to %s: %s", name, node, b.Error)
	}
	return true, nil
}

// start runs job ji, all of whose pods are bound.
func (r *replay) start(ji int) {
	js := &r.jobs[ji]
	js.ran, js.started = true, r.now
	cards := float64(js.job.Size) * js.job.GPUs()
	r.partial -= cards
	r.running += cards
	heap.Push(&r.ends, end{at: r.now + js.job.Duration, job: ji})
}

// finish ends job ji: its pods are deleted and the extender's cache forgets them.
func (r *replay) finish(ji int) {
	js := &r.jobs[ji]
	js.done = true
	r.res.Completed++
	if js.job.Gang() {
		r.res.GangsCompleted++
	}
	r.running -= float64(js.job.Size) * js.job.GPUs()
	for _, name := range js.pods {
		r.cache.DeletePod(r.pods[name].UID)
		delete(r.pods, name)
		delete(r.jobOf, name)
	}
}

// advance moves the clock to t, counting the cards held meanwhile.
func (r *replay) advance(t time.Duration) {
	if t > r.now {
		h := (t - r.now).Hours()
		r.res.WastedGPUHours += r.partial * h
		r.res.UsedGPUHours += r.running * h
		r.now = t
	}
}

// pendingPods counts the pods of the jobs list that are not bound.
func (r *replay) pendingPods(list []int) int {
	n := 0
	for _, ji := range list {
		n += r.jobs[ji].job.Size - r.jobs[ji].bound
	}
	return n
}

// end is when a running job ends.
type end struct {
	at  time.Duration
	job int
}

// endHeap orders ends by time, then job.
type endHeap []end

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].job < h[j].job)
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
