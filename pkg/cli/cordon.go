package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Cordon and drain one card (docs/operating.md, "Cordon and drain one card"): the mark is the Node annotation
// cordon.cardinal.io/<UUID> (annotations.Cordon); these are the only writes kubectl cardinal makes.

// CordonOptions are cordon, uncordon and drain's arguments.
type CordonOptions struct {
	Node string
	// Cards name the node's cards by index (as nvidia-smi numbers them) or UUID, MIG instances by
	// their MIG UUID.
	Cards  []string
	Reason string
	// DryRun writes nothing: the API server checks the mark (cordon, uncordon), or the pods that
	// would be evicted are listed (drain).
	DryRun bool
	// Timeout bounds drain: evictions a PodDisruptionBudget refuses are retried until then, and
	// evicted pods are waited for until they are gone.
	Timeout time.Duration
	// Poll is how often drain retries and checks (0: 2 s).
	Poll time.Duration
}

// CordonResult is one card's line of cordon, uncordon and drain.
type CordonResult struct {
	Node   string `json:"node"`
	Card   string `json:"card"`
	UUID   string `json:"uuid"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
	// Holders are the pods on the card (cordon: they keep running; drain: what became of each).
	Holders []DrainedPod `json:"holders"`
}

// DrainedPod is a pod on a card and what drain did with it.
type DrainedPod struct {
	Pod string `json:"pod"`
	// Result is holds (cordon), would-evict (drain --dry-run), evicted (gone), evicting (evicted, not
	// gone by the timeout) or stayed.
	Result string `json:"result"`
	// Why says why a pod stayed (the Eviction API's answer).
	Why string `json:"why,omitempty"`
}

// device is a card or MIG instance of the node the user named.
type device struct {
	name, uuid string
}

// resolve maps the names to the node's devices: a card index, a card UUID or a MIG instance UUID.
func resolve(node *corev1.Node, names []string) ([]device, error) {
	raw, ok := node.Annotations[annotations.GPUInventory]
	if !ok {
		return nil, fmt.Errorf("node %q has no %s annotation: Cardinal's device plugin does not run there", node.Name, annotations.GPUInventory)
	}
	inv, err := annotations.DecodeInventory(raw)
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", node.Name, err)
	}
	if len(names) == 0 {
		return nil, errors.New("name at least one card: its index or UUID, or a MIG instance's UUID")
	}
	var out []device
	for _, n := range names {
		var found *device
		for _, g := range inv.GPUs {
			if strconv.Itoa(g.Index) == n || g.UUID == n {
				found = &device{name: strconv.Itoa(g.Index), uuid: g.UUID}
				break
			}
			if g.MIG == nil {
				continue
			}
			for _, in := range g.MIG.Instances {
				if in.UUID == n {
					found = &device{name: strconv.Itoa(g.Index) + " " + in.Profile, uuid: in.UUID}
				}
			}
		}
		if found == nil {
			return nil, fmt.Errorf("node %q has no card %q (give an index, a card UUID or a MIG instance UUID: kubectl cardinal cards %s)", node.Name, n, node.Name)
		}
		if !slices.ContainsFunc(out, func(d device) bool { return d.uuid == found.uuid }) {
			out = append(out, *found)
		}
	}
	return out, nil
}

// whoAmI is the user the API server knows this client as: what a cordon's "by" must say.
func (o *Options) whoAmI(ctx context.Context) (string, error) {
	r, err := o.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("ask the API server who this user is (SelfSubjectReview): %w", err)
	}
	return r.Status.UserInfo.Username, nil
}

// occupants are the pods (namespace/name) on device uuid of node: those whose assignment or
// allocation record names it, not ended.
func occupants(node string, pods []corev1.Pod, uuid string) []string {
	var out []string
	for _, h := range holdersOn(node, pods)[uuid] {
		if !slices.Contains(out, h.Pod) {
			out = append(out, h.Pod)
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		raw, ok := p.Annotations[annotations.GPUAllocated]
		if !ok {
			continue
		}
		a, err := annotations.DecodeAllocation(raw)
		if err != nil {
			continue
		}
		for _, c := range a.Containers {
			for _, id := range c.IDs {
				if u, _, err := annotations.ParseDeviceID(id); err == nil && u == uuid && !slices.Contains(out, p.Namespace+"/"+p.Name) {
					out = append(out, p.Namespace+"/"+p.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// patchCordons sets (value non-nil) or removes the cordon marks of devs on the node, in one patch.
func (o *Options) patchCordons(ctx context.Context, node string, devs []device, value *string, dryRun bool) error {
	ann := map[string]*string{}
	for _, d := range devs {
		ann[annotations.CordonKey(d.uuid)] = value
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "kubectl-cardinal"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := o.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, opts); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return nil
}

// Cordon marks the cards out of service with a reason, and lists who is on them (they keep running).
func (o *Options) Cordon(ctx context.Context, c CordonOptions) error {
	if strings.TrimSpace(c.Reason) == "" {
		return errors.New("cordon: --reason is required: say why the card goes out of service")
	}
	cl, node, devs, err := o.cordonTargets(ctx, c)
	if err != nil {
		return err
	}
	by, err := o.whoAmI(ctx)
	if err != nil {
		return err
	}
	mark := annotations.Cordon{Reason: c.Reason, By: by}
	value, err := annotations.EncodeCordon(mark)
	if err != nil {
		return fmt.Errorf("cordon: %w", err)
	}
	if err := o.patchCordons(ctx, node.Name, devs, &value, c.DryRun); err != nil {
		return err
	}
	action := "cordoned"
	if c.DryRun {
		action = "would cordon"
	}
	var rows []CordonResult
	for _, d := range devs {
		r := CordonResult{Node: node.Name, Card: d.name, UUID: d.uuid, Action: action, Reason: mark.Reason, By: by, Holders: []DrainedPod{}}
		for _, p := range occupants(node.Name, cl.pods, d.uuid) {
			r.Holders = append(r.Holders, DrainedPod{Pod: p, Result: "holds"})
		}
		rows = append(rows, r)
	}
	return o.printCordons(rows)
}

// Uncordon returns the cards to service.
func (o *Options) Uncordon(ctx context.Context, c CordonOptions) error {
	_, node, devs, err := o.cordonTargets(ctx, c)
	if err != nil {
		return err
	}
	var marked []device
	var rows []CordonResult
	for _, d := range devs {
		r := CordonResult{Node: node.Name, Card: d.name, UUID: d.uuid, Action: "was not cordoned", Holders: []DrainedPod{}}
		if _, ok := node.Annotations[annotations.CordonKey(d.uuid)]; ok {
			marked = append(marked, d)
			r.Action = "uncordoned"
			if c.DryRun {
				r.Action = "would uncordon"
			}
		}
		rows = append(rows, r)
	}
	if len(marked) > 0 {
		if err := o.patchCordons(ctx, node.Name, marked, nil, c.DryRun); err != nil {
			return err
		}
	}
	return o.printCordons(rows)
}

// cordonTargets loads the cluster and resolves the node and the devices named.
func (o *Options) cordonTargets(ctx context.Context, c CordonOptions) (*cluster, *corev1.Node, []device, error) {
	if err := o.checkOutput(); err != nil {
		return nil, nil, nil, err
	}
	cl, err := o.load(ctx, "")
	if err != nil {
		return nil, nil, nil, err
	}
	node, err := cl.node(c.Node)
	if err != nil {
		return nil, nil, nil, err
	}
	devs, err := resolve(node, c.Cards)
	if err != nil {
		return nil, nil, nil, err
	}
	return cl, node, devs, nil
}

// Drain evicts the pods on cordoned cards through the Eviction API: PodDisruptionBudgets are
// respected (a refused eviction is retried until the timeout, then reported as stayed, with the
// API server's reason), and evicted pods are waited for until they are gone or the timeout passes.
// A card that is not cordoned is refused: new pods would land on it as the old ones leave.
func (o *Options) Drain(ctx context.Context, c CordonOptions) error {
	cl, node, devs, err := o.cordonTargets(ctx, c)
	if err != nil {
		return err
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	cs := annotations.CordonsOf(node.Annotations)
	var rows []CordonResult
	pods := map[string]*DrainedPod{}
	var order []string
	for _, d := range devs {
		why := cs.Why(d.uuid)
		if why == "" {
			return fmt.Errorf("drain: card %s (%s) of node %s is not cordoned: new pods would take it as the old ones leave (kubectl cardinal cordon %s %s --reason …)",
				d.name, d.uuid, node.Name, node.Name, d.name)
		}
		r := CordonResult{Node: node.Name, Card: d.name, UUID: d.uuid, Action: "drained", Reason: why}
		if c.DryRun {
			r.Action = "would drain"
		}
		for _, p := range occupants(node.Name, cl.pods, d.uuid) {
			if pods[p] == nil {
				pods[p] = &DrainedPod{Pod: p, Result: "would-evict"}
				order = append(order, p)
			}
		}
		rows = append(rows, r)
	}
	if !c.DryRun && len(order) > 0 {
		o.evictAll(ctx, cl, order, pods, c)
	}
	for i := range rows {
		rows[i].Holders = []DrainedPod{}
		for _, p := range occupants(node.Name, cl.pods, rows[i].UUID) {
			rows[i].Holders = append(rows[i].Holders, *pods[p])
			if r := pods[p].Result; !c.DryRun && r != "evicted" {
				rows[i].Action = "not drained"
			}
		}
	}
	if err := o.printCordons(rows); err != nil {
		return err
	}
	var stayed []string
	for _, p := range order {
		if pods[p].Result == "stayed" || pods[p].Result == "evicting" {
			stayed = append(stayed, p)
		}
	}
	if len(stayed) > 0 {
		return fmt.Errorf("drain: %d pod(s) still on the cards: %s", len(stayed), strings.Join(stayed, ", "))
	}
	return nil
}

// evictFloor is the least time one eviction request is given, so that a drain whose deadline has
// just passed still asks once more rather than report a refusal it did not hear.
const evictFloor = 2 * time.Second

// evict asks the Eviction API, once, to evict the pod (only this UID), within the drain's deadline.
// The API server refuses an eviction a PodDisruptionBudget forbids with 429 and Retry-After: 10 s,
// which client-go's typed client retries by itself up to ten times: one call outlasted the drain's
// --timeout by a minute and a half (TestCordonAndDrain), and a deadline alone would end it with
// "context deadline exceeded" instead of the budget's reason. So the request is made with no
// retries of its own; drain's loop asks again every Poll until its deadline, and reports the reason
// of the last refusal.
func (o *Options) evict(ctx context.Context, deadline time.Time, ns, name string, uid types.UID) error {
	ctx, cancel := context.WithDeadline(ctx, later(deadline, time.Now().Add(evictFloor)))
	defer cancel()
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: name, Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	policy := o.Client.PolicyV1()
	if rc, ok := policy.RESTClient().(*rest.RESTClient); ok && rc != nil {
		// The typed client's request (Evict), without its retries.
		return rc.Post().AbsPath("/api/v1").Namespace(ns).Resource("pods").Name(name).SubResource("eviction").
			Body(ev).MaxRetries(0).Do(ctx).Error()
	}
	return policy.Evictions(ns).Evict(ctx, ev) // a fake clientset has no REST client
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// evictAll evicts every pod of order (retrying those a budget protects) and waits for the evicted
// ones to go, until c.Timeout.
func (o *Options) evictAll(ctx context.Context, cl *cluster, order []string, pods map[string]*DrainedPod, c CordonOptions) {
	uids := map[string]types.UID{}
	for i := range cl.pods {
		uids[cl.pods[i].Namespace+"/"+cl.pods[i].Name] = cl.pods[i].UID
	}
	deadline := time.Now().Add(c.Timeout)
	for {
		pendingWork := false
		for _, key := range order {
			p := pods[key]
			ns, name, _ := strings.Cut(key, "/")
			switch p.Result {
			case "would-evict", "stayed":
				err := o.evict(ctx, deadline, ns, name, uids[key])
				switch {
				case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
					p.Result, p.Why = "evicting", ""
				default:
					p.Result, p.Why = "stayed", err.Error()
				}
			}
			if p.Result == "evicting" {
				cur, err := o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || (err == nil && cur.UID != uids[key]) {
					p.Result = "evicted"
				}
			}
			if p.Result != "evicted" {
				pendingWork = true
			}
		}
		if !pendingWork || !time.Now().Before(deadline) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.Poll):
		}
	}
}

// printCordons prints the results as a table or JSON.
func (o *Options) printCordons(rows []CordonResult) error {
	if o.Output == OutputJSON {
		return o.writeJSON(rows)
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tCARD\tUUID\tACTION\tREASON\tPOD\tPOD RESULT")
	for _, r := range rows {
		reason := r.Reason
		if r.By != "" {
			reason += " (by " + r.By + ")"
		}
		if reason == "" {
			reason = "-"
		}
		head := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", cell(r.Node), cell(r.Card), cell(r.UUID), cell(r.Action), cell(reason))
		if len(r.Holders) == 0 {
			fmt.Fprintf(w, "%s\t-\t-\n", head)
			continue
		}
		for _, h := range r.Holders {
			result := h.Result
			if h.Why != "" {
				result += ": " + h.Why
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", head, cell(h.Pod), cell(result))
		}
	}
	return w.Flush()
}
