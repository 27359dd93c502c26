package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// DefaultMaxBodyBytes bounds an extender request body. With nodeCacheCapable the body is a pod and
// node names: 5000 names and a large pod stay well under it.
const DefaultMaxBodyBytes = 8 << 20

// Event reasons the extender records on pods.
const (
	EventBindFailed = "GPUBindFailed"
)

// PodSource finds the pod a bind request names.
type PodSource interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// Server answers kube-scheduler's extender calls from the cache.
type Server struct {
	log      logr.Logger
	client   kubernetes.Interface
	cache    *Cache
	decider  *core.Decider
	names    annotations.ResourceNames
	pods     PodSource
	recorder record.EventRecorder
	metrics  *metrics
	ready    func() bool
	maxBody  int64
	bindWait time.Duration
	registry *prometheus.Registry
	// shortlist and services: see ServerOptions.
	shortlist int
	services  ServiceSelects

	// pdbs lists PodDisruptionBudgets for preemption (nil: none known).
	pdbs PDBLister
	// awaitInformer is ServerOptions.AwaitInformer.
	awaitInformer bool
	// knownPod is ServerOptions.KnownPod.
	knownPod func(namespace, name string) *corev1.Pod

	memoMu sync.Mutex
	memo   memo
	// refused is guarded by memoMu (preempt.go).
	refused refused
	// misses counts each pod's sample misses (sampling.go).
	misses missCounts
}

// memo keeps the verdicts of the last filter call so that prioritize, which kube-scheduler sends
// right after it for the same pod, does not decide every node again.
type memo struct {
	uid      types.UID
	names    []string
	verdicts []Verdict
}

// lookup finds the verdicts of names in the memo; ok[i] is false where none is known. Prioritize
// names are usually filter's passing names in the same order, so one forward walk finds them; at
// the first name out of that order the rest are looked up in a map built once.
func (m *memo) lookup(names []string, out []Verdict, ok []bool) {
	j := 0
	var index map[string]int
	for i, n := range names {
		if index == nil && j < len(m.names) && m.names[j] == n {
			out[i], ok[i] = m.verdicts[j], true
			j++
			continue
		}
		if index == nil {
			index = make(map[string]int, len(m.names))
			for k, mn := range m.names {
				index[mn] = k
			}
		}
		if k, found := index[n]; found {
			out[i], ok[i] = m.verdicts[k], true
		}
	}
}

// ServerOptions are what NewServer needs beyond the cache.
type ServerOptions struct {
	Log      logr.Logger
	Client   kubernetes.Interface
	Decider  *core.Decider
	Names    annotations.ResourceNames
	Pods     PodSource
	Recorder record.EventRecorder
	Registry *prometheus.Registry
	// Ready reports whether the cache has synced; nil means always.
	Ready   func() bool
	MaxBody int64
	// BindWait is how long a bind waits for a container in flight on its node (0: not at all).
	BindWait time.Duration
	// FilterShortlist, when positive, lets filter answer only the best-ranked fitting nodes (at
	// most this many) for pods whose kube-scheduler scores cannot differ between nodes; 0 answers
	// every fitting node (see shortlist.go).
	FilterShortlist int
	// Services reports whether a Service selects a pod (PodTopologySpread's default constraints);
	// nil: none does.
	Services ServiceSelects
	// PDBs lists a namespace's PodDisruptionBudgets, which preemption counts violations of
	// (nil: none known).
	PDBs PDBLister
	// AwaitInformer makes filter wait (briefly, catchup.go) until the cache has seen the pod as
	// kube-scheduler sent it: set when the cache is fed by a pod informer.
	AwaitInformer bool
	// KnownPod returns the informer's copy of a pod (nil when it has none): filter and prioritize
	// take it instead of decoding the pod kube-scheduler sends when both have the same UID and
	// resourceVersion (args.go). Nil: every pod is decoded.
	KnownPod func(namespace, name string) *corev1.Pod
}

// DefaultBindWait is how long a bind waits for a container in flight on its node to be allocated:
// below the chart's extender httpTimeout (3 s), so the answer reaches kube-scheduler in time.
const DefaultBindWait = 2 * time.Second

// NewServer builds the HTTP layer around a cache.
func NewServer(cache *Cache, o ServerOptions) *Server {
	s := &Server{log: o.Log, client: o.Client, cache: cache, decider: o.Decider, names: o.Names, pods: o.Pods,
		recorder: o.Recorder, ready: o.Ready, maxBody: o.MaxBody, bindWait: o.BindWait,
		shortlist: o.FilterShortlist, services: o.Services, pdbs: o.PDBs, knownPod: o.KnownPod, awaitInformer: o.AwaitInformer}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.ready == nil {
		s.ready = func() bool { return true }
	}
	if s.recorder == nil {
		s.recorder = &record.FakeRecorder{}
	}
	s.registry = o.Registry
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	s.metrics = newMetrics(s.registry)
	s.registry.MustRegister(allocation{cache})
	cache.PrepareNominees(s.prepare)
	cache.OnPanic(func(node string, v any, stack []byte) {
		s.metrics.panics.Inc()
		s.log.Error(fmt.Errorf("panic: %v", v), "deciding a node panicked; the node fails for this pod", logging.KeyNode, node, "stack", string(stack))
	})
	return s
}

// Handler returns the extender's routes.
func (s *Server) Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode) // gin keeps its mode in a package variable; debug mode only adds noise
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/filter", route(s, "filter", func(ctx context.Context, a *extenderArgs) *filterResult {
		return (*filterResult)(s.Filter(ctx, a.upstream()))
	}))
	r.POST("/prioritize", s.synced("prioritize"), route(s, "prioritize", func(ctx context.Context, a *extenderArgs) *priorityList {
		return (*priorityList)(s.Prioritize(ctx, a.upstream()))
	}))
	r.POST("/bind", route(s, "bind", s.Bind))
	r.POST("/preempt", s.synced("preempt"), route(s, "preempt", s.Preempt))
	s.probeRoutes(r)
	return r
}

// synced refuses a verb with 503 until the cache has synced: a score from a cache that has not seen
// every pod ranks nodes by cards that look free but are not. (Filter and bind answer in their own
// result's error field, which kube-scheduler reports on the pod.)
func (s *Server) synced(verb string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.ready() {
			s.metrics.requests.WithLabelValues(verb, "not_ready").Inc()
			c.AbortWithStatusJSON(http.StatusServiceUnavailable, errorResult{Error: errNotSynced.Error()})
			return
		}
		c.Next()
	}
}

// ProbeHandler serves only /healthz, /readyz and /metrics: what may be exposed beyond loopback.
func (s *Server) ProbeHandler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	s.probeRoutes(r)
	return r
}

func (s *Server) probeRoutes(r *gin.Engine) {
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.GET("/readyz", func(c *gin.Context) {
		if !s.ready() {
			c.String(http.StatusServiceUnavailable, "caches not synced")
			return
		}
		c.String(http.StatusOK, "ok")
	})
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})))
}

// errorResult is the body of a request the extender could not read.
type errorResult struct {
	Error string
}

// route is the one decode/encode helper every verb shares: it reads the body through a size-limited
// reader, calls fn and writes its answer, timing the call.
func route[In, Out any](s *Server, verb string, fn func(context.Context, *In) *Out) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		in, status, err := decodeBody[In](c.Writer, c.Request, s.maxBody, s.knownPod)
		if err != nil {
			s.metrics.requests.WithLabelValues(verb, "bad_request").Inc()
			c.JSON(status, errorResult{Error: err.Error()})
			return
		}
		out := fn(c.Request.Context(), in)
		if enc, ok := any(out).(appendJSONer); ok {
			if b, err := enc.AppendJSON(make([]byte, 0, 4096)); err == nil {
				c.Data(http.StatusOK, "application/json; charset=utf-8", b)
				s.metrics.latency.WithLabelValues(verb).Observe(time.Since(start).Seconds())
				return
			}
		}
		c.JSON(http.StatusOK, out)
		s.metrics.latency.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	}
}

// bodyPool keeps request bodies' buffers between calls (a filter body is kilobytes: one for each
// call was the extender's largest allocation in S2). Nothing decoded refers to a buffer: encoding/json
// and parseNames copy what they keep. Buffers above maxPooledBody are left to the collector.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 1 << 20

// decodeBody decodes a JSON body of at most limit bytes into a new In; an ExtenderArgs body through
// decodeArgs, with known (args.go).
func decodeBody[In any](w http.ResponseWriter, r *http.Request, limit int64, known func(namespace, name string) *corev1.Pod) (*In, int, error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyPool.Put(buf)
		}
	}()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	body := buf.Bytes()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body is larger than %d bytes", limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err)
	}
	in := new(In)
	if _, isArgs := any(in).(*extenderArgs); isArgs {
		var a *extenderArgs
		if a, _, err = decodeArgs(body, known); err == nil {
			in = any(a).(*In)
		}
	} else {
		err = json.Unmarshal(body, in)
	}
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("request body is not a valid %T: %w", *in, err)
	}
	return in, 0, nil
}

// prepare reads a pod's GPU request and selector, and its effective CPU and memory request (which
// Fit checks against the node's known allocatable CPU and memory, as kube-scheduler does, and which
// frag-aware weighs). A pod without GPU requests that carries the webhook's marker
// annotations.ResourceHostRoute (a CPU-only pod routed through Cardinal) is prepared with an empty
// request: the policy places it by what it leaves of each node's cards. Any other pod without GPU
// requests gives nil, nil.
func (s *Server) prepare(pod *corev1.Pod) (*core.Pod, error) {
	req, err := annotations.ParsePodRequest(pod, s.names)
	if err != nil {
		return nil, err
	}
	if req.Empty() && !annotations.HostRouted(pod) {
		return nil, nil
	}
	// QoS and whole CPUs per container: what the kubelet's CPU manager and TopologyManager see.
	req.ReadCPUs(pod)
	sel, err := annotations.ParseSelector(pod.Annotations)
	if err != nil {
		return nil, err
	}
	p, err := s.decider.PrepareHost(req, sel, podHost(pod))
	if p != nil {
		p.Tenant, p.Created, p.Priority = pod.Namespace, pod.CreationTimestamp.Unix(), corev1helpers.PodPriority(pod)
	}
	return p, err
}

func argNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	if args.Nodes != nil {
		names := make([]string, len(args.Nodes.Items))
		for i := range args.Nodes.Items {
			names[i] = args.Nodes.Items[i].Name
		}
		return names
	}
	return nil
}

// Filter answers which named nodes can host the pod and, for the others, why not.
func (s *Server) Filter(ctx context.Context, args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	names := argNames(args)
	if args.Pod == nil {
		s.metrics.requests.WithLabelValues("filter", "error").Inc()
		return &extenderv1.ExtenderFilterResult{Error: "request has no pod"}
	}
	if !s.ready() {
		s.metrics.requests.WithLabelValues("filter", "error").Inc()
		return &extenderv1.ExtenderFilterResult{Error: errNotSynced.Error()}
	}
	p, err := s.prepare(args.Pod)
	if err != nil {
		s.metrics.requests.WithLabelValues("filter", "error").Inc()
		return &extenderv1.ExtenderFilterResult{Error: fmt.Sprintf("pod %s/%s: %v", args.Pod.Namespace, args.Pod.Name, err)}
	}
	if p == nil {
		s.metrics.requests.WithLabelValues("filter", "passthrough").Inc()
		return &extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames, Nodes: args.Nodes}
	}
	grp, inGroup, err := annotations.DecodePodGroup(args.Pod.Labels, args.Pod.Annotations)
	if err != nil {
		s.metrics.requests.WithLabelValues("filter", "error").Inc()
		return &extenderv1.ExtenderFilterResult{Error: fmt.Sprintf("pod %s/%s: %v", args.Pod.Namespace, args.Pod.Name, err)}
	}
	inGroup = inGroup && !p.Request.Empty()
	if waited, caught := s.catchUp(ctx, args.Pod); waited {
		s.metrics.catchUps.WithLabelValues(strconv.FormatBool(caught)).Inc()
	}
	var verdicts []Verdict
	if inGroup {
		verdicts = s.groupVerdicts(args.Pod, grp, p, names)
	} else {
		verdicts = s.cache.Evaluate(args.Pod.UID, p, names, make([]Verdict, 0, len(names)))
		if !anyFits(verdicts) {
			if cordoned := cordonRefused(names, verdicts); len(cordoned) > 0 {
				changed, err := s.recheckCordons(ctx, cordoned)
				if !changed && err == nil {
					// The informer may have applied the change while the node was read: the cache
					// then agrees with the read, and the verdicts rest on a state it no longer holds.
					changed = s.cache.Stale(names, verdicts)
				}
				if changed {
					verdicts = s.cache.Evaluate(args.Pod.UID, p, names, verdicts[:0])
				} else if err != nil {
					s.metrics.requests.WithLabelValues("filter", "error").Inc()
					return &extenderv1.ExtenderFilterResult{Error: fmt.Sprintf("pod %s/%s: %v; trying again", args.Pod.Namespace, args.Pod.Name, err)}
				}
			}
		}
	}
	var missNote string
	if !inGroup {
		if !anyFits(verdicts) {
			if miss := s.missedSample(args.Pod, p, names); miss != nil {
				if miss.paced {
					s.cache.pending.note(args.Pod.UID, verdicts, s.cache.clock.Now())
					s.metrics.requests.WithLabelValues("filter", "error").Inc()
					return &extenderv1.ExtenderFilterResult{Error: miss.paceError(args.Pod, len(names), names[0], verdicts[0].Reason.String())}
				}
				missNote = miss.note(len(names))
			}
		} else {
			s.misses.forget(args.Pod.UID)
		}
	}
	s.cache.pending.note(args.Pod.UID, verdicts, s.cache.clock.Now())
	res := &extenderv1.ExtenderFilterResult{FailedNodes: extenderv1.FailedNodesMap{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}
	pass := make([]int, 0, len(names))
	var refusedNodes []string
	var notes []string
	if !inGroup {
		notes = s.cache.PreemptionNotes(args.Pod.UID, p, names, verdicts)
	}
	for i, v := range verdicts {
		switch {
		case v.Reason == nil:
			pass = append(pass, i)
		case v.Reason.Unresolvable():
			res.FailedAndUnresolvableNodes[names[i]] = v.Reason.String() + missNote
		default:
			msg := v.Reason.String() + missNote
			if notes != nil {
				msg += notes[i]
			}
			res.FailedNodes[names[i]] = msg
			refusedNodes = append(refusedNodes, names[i])
		}
	}
	s.metrics.nodes.WithLabelValues("fit").Add(float64(len(pass)))
	s.metrics.nodes.WithLabelValues("unfit").Add(float64(len(names) - len(pass)))
	s.metrics.requests.WithLabelValues("filter", "ok").Inc()
	if s.shortlist > 0 && len(pass) > s.shortlist {
		// The nodes left out are neither failed nor reported: kube-scheduler reports failed nodes
		// only when none is feasible, and the shortlist is never empty.
		pass = s.shortlistOf(args.Pod, names, verdicts, pass)
	}
	fit := make([]string, len(pass))
	keep := make([]Verdict, len(pass))
	for k, i := range pass {
		fit[k], keep[k] = names[i], verdicts[i]
	}
	if args.Nodes != nil {
		res.Nodes = &corev1.NodeList{Items: make([]corev1.Node, len(pass))}
		for k, i := range pass {
			res.Nodes.Items[k] = args.Nodes.Items[i]
		}
	} else {
		res.NodeNames = &fit
	}
	s.memoMu.Lock()
	s.memo = memo{uid: args.Pod.UID, names: fit, verdicts: keep}
	s.refused = refused{uid: args.Pod.UID, nodes: refusedNodes}
	s.memoMu.Unlock()
	if log := s.log.V(4); log.Enabled() {
		log.Info("filter", logging.KeyPod, args.Pod.Namespace+"/"+args.Pod.Name, "nodes", len(names), "fit", len(fit))
	}
	return res
}

// shortlistOf narrows the fitting candidates pass (indexes into names and verdicts) to the
// shortlist when nothing kube-scheduler scores itself differs between them for this pod; the
// policy's scores carry the pod's preferred node affinity as Prioritize adds it.
func (s *Server) shortlistOf(pod *corev1.Pod, names []string, verdicts []Verdict, pass []int) []int {
	fit := make([]string, len(pass))
	scores := make([]float64, len(pass))
	ok := make([]bool, len(pass))
	for k, i := range pass {
		fit[k], scores[k], ok[k] = names[i], verdicts[i].Score, true
	}
	why := podFullReason(pod, s.services)
	if why == shortlisted {
		why = s.cache.clusterFullReason(pod, fit)
	}
	s.metrics.shortlists.WithLabelValues(why.String()).Inc()
	if why != shortlisted {
		return pass
	}
	s.addPreferredAffinity(pod, fit, scores, ok)
	return shortlist(names, pass, scores, s.shortlist)
}

// Prioritize scores the named nodes 0..10 by the pod's node policy: the rank of each node's score
// among the named nodes (core.Rank), 10 for the best.
func (s *Server) Prioritize(ctx context.Context, args *extenderv1.ExtenderArgs) *extenderv1.HostPriorityList {
	names := argNames(args)
	out := make(extenderv1.HostPriorityList, len(names))
	for i, n := range names {
		out[i].Host = n
	}
	if args.Pod == nil {
		s.metrics.requests.WithLabelValues("prioritize", "error").Inc()
		return &out
	}
	p, err := s.prepare(args.Pod)
	if err != nil || p == nil {
		s.metrics.requests.WithLabelValues("prioritize", "passthrough").Inc()
		return &out
	}
	s.memoMu.Lock()
	m := s.memo
	s.memoMu.Unlock()
	known := make([]Verdict, len(names))
	ok := make([]bool, len(names))
	if m.uid == args.Pod.UID {
		m.lookup(names, known, ok)
		s.cache.Fresh(names, known, ok)
	}
	var missing []string
	var at []int
	scores := make([]float64, len(names))
	for i, n := range names {
		if ok[i] {
			scores[i] = known[i].Score
			continue
		}
		missing = append(missing, n)
		at = append(at, i)
	}
	if len(missing) > 0 {
		for j, v := range s.cache.Evaluate(args.Pod.UID, p, missing, nil) {
			scores[at[j]], ok[at[j]] = v.Score, v.Reason == nil
		}
	}
	s.addPreferredAffinity(args.Pod, names, scores, ok)
	// The policy's order over these candidates, not its rounded scores: kube-scheduler adds the
	// answer (× weight × 10) to its own scores, and rounding 5.02 and 5.38 both to 5 would leave
	// the policy's choice to them (see core.Rank and the chart's profile).
	ranks := make([]int64, len(names))
	core.Rank(scores, ok, ranks)
	for i := range out {
		out[i].Score = ranks[i]
	}
	s.metrics.requests.WithLabelValues("prioritize", "ok").Inc()
	return &out
}

// AffinityBand is how far apart (in policy score, of core.MaxScore) two nodes may be for a pod's
// preferred node affinity to reorder them: the node the affinity prefers most gains AffinityBand,
// the others in proportion to their affinity score. Between nodes the policy scores closer than
// that the affinity decides; between nodes farther apart the policy does. Pods without preferred
// node affinity are ranked by the policy alone.
const AffinityBand = 0.05 * core.MaxScore

// addPreferredAffinity adds the pod's preferred node affinity, scaled to AffinityBand, to the
// policy's scores of the candidates where ok.
func (s *Server) addPreferredAffinity(pod *corev1.Pod, names []string, scores []float64, ok []bool) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		return
	}
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	if err != nil {
		return // the API server validated them; kube-scheduler's NodeAffinity scores them anyway
	}
	aff := make([]int64, len(names))
	s.cache.PreferredAffinity(terms, names, aff)
	top := int64(0)
	for i := range aff {
		if ok[i] {
			top = max(top, aff[i])
		}
	}
	if top == 0 {
		return
	}
	for i := range scores {
		if ok[i] {
			scores[i] += AffinityBand * float64(aff[i]) / float64(top)
		}
	}
}

// Bind decides the cards on the chosen node with fresh state, reserves them, writes the assignment
// and posts the Binding. On any failure it releases the reservation, records an Event on the pod
// and returns the error, so kube-scheduler retries the pod.
func (s *Server) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult {
	log := s.log.WithValues(logging.KeyPod, args.PodNamespace+"/"+args.PodName, logging.KeyNode, args.Node)
	outcome, err := s.bind(ctx, log, args)
	s.metrics.binds.WithLabelValues(outcome).Inc()
	if err != nil {
		log.Info("bind failed", logging.KeyReason, err.Error())
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}
	}
	return &extenderv1.ExtenderBindingResult{}
}

func (s *Server) bind(ctx context.Context, log logr.Logger, args *extenderv1.ExtenderBindingArgs) (string, error) {
	if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
		return "bad_request", fmt.Errorf("bind request needs podName, podNamespace and node")
	}
	if !s.ready() {
		// Without every bound pod in the cache, a card a running pod holds looks free.
		return "not_ready", errNotSynced
	}
	pod, err := s.pods.Pod(ctx, args.PodNamespace, args.PodName)
	if err != nil {
		return "error", fmt.Errorf("get pod %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return "error", fmt.Errorf("pod %s/%s has UID %s, bind asked for %s", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	if pod.Spec.NodeName != "" {
		// Never touch what a bound pod holds: a second bind must not move its reservation.
		return "already_bound", fmt.Errorf("pod %s/%s is already bound to node %s: %w", pod.Namespace, pod.Name, pod.Spec.NodeName, ErrAlreadyBound)
	}
	p, err := s.prepare(pod)
	if err != nil {
		s.event(pod, err)
		return "error", fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if p == nil || p.Request.Empty() {
		// No card to choose, hold or record: a CPU-only pod is bound as kube-scheduler would bind
		// it (the chart's profile binds it with kube-scheduler's own binder; this serves a
		// configuration that sends it here).
		if err := s.postBinding(ctx, pod, args.Node, nil); err != nil {
			return "error", err
		}
		return "bound", nil
	}
	key := pod.Namespace + "/" + pod.Name
	if err := s.groupBindable(pod); err != nil {
		s.event(pod, err)
		return "no_fit", err
	}
	asg, err := s.reserve(ctx, pod, key, p, args.Node)
	if err != nil {
		s.event(pod, err)
		switch {
		case errors.Is(err, ErrInFlight):
			return "in_flight", err
		case errors.Is(err, ErrAlreadyBound):
			return "already_bound", err
		case errors.Is(err, ErrBindPending):
			return "bind_pending", err
		}
		return "no_fit", err
	}
	// From here the Binding may have been sent: the reservation is unsettled until this attempt
	// is (a concurrent retry's refusal must not free it).
	s.cache.StartBinding(pod.UID)
	if err := s.writeAndBind(ctx, pod, asg); err != nil {
		switch outcome, got := s.settle(ctx, pod, asg, err); outcome {
		case bindCommitted:
			s.cache.BindingAnswered(pod.UID)
			log.Info("binding reported an error but committed", logging.KeyReason, err.Error())
			return "bound", nil
		case bindGone:
			s.cache.ReleaseProven(pod.UID)
		case bindElsewhere:
			// The pod is bound, not with this assignment: its record replaces the reservation.
			s.cache.UpsertPod(got)
		case bindRefused:
			if !s.cache.Release(pod.UID) {
				log.Info("binding refused; an earlier binding of the same reservation may still commit, so its cards stay reserved", logging.KeyReason, err.Error())
			}
		case bindUnknown:
			// The reservation stays: the Binding may still commit. A retry writes the same
			// assignment; the reservation expires if the pod is still unbound after ReservationTTL.
			s.cache.MarkUnsettled(pod.UID)
		}
		s.event(pod, err)
		return "error", err
	}
	s.cache.BindingAnswered(pod.UID)
	if log := log.V(2); log.Enabled() {
		log.Info("bound", logging.KeyDevices, fmt.Sprint(asg.Containers))
	}
	return "bound", nil
}

// errNotSynced refuses verbs that would act on a cache that has not seen every pod yet.
var errNotSynced = errors.New("GPU scheduler cache is not synced yet")

// bindOutcome is what a failed Binding POST turned out to have done (reservations_freed_by_proof.go).
type bindOutcome int

const (
	// bindRefused: the API server refused this write; the pod is unbound. An earlier Binding of
	// the same reservation whose outcome was unknown may still commit.
	bindRefused bindOutcome = iota
	// bindGone: the pod is gone or was created again: no Binding of it can land.
	bindGone
	// bindElsewhere: the pod is bound, elsewhere or with other cards: no Binding of this
	// reservation can land.
	bindElsewhere
	// bindCommitted: the pod is bound to the node with this assignment despite the error.
	bindCommitted
	// bindUnknown: the write may still commit (a timeout, a lost reply, an unreadable pod).
	bindUnknown
)

// settle finds out what a Binding POST that returned err did, by reading the pod back from the API
// server (not the informer, which may lag); got is the pod read back (bindElsewhere).
func (s *Server) settle(ctx context.Context, pod *corev1.Pod, asg annotations.Assignment, err error) (bindOutcome, *corev1.Pod) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	got, gerr := s.client.CoreV1().Pods(pod.Namespace).Get(rctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return bindGone, nil
	case gerr != nil:
		return bindUnknown, nil
	case got.UID != pod.UID:
		return bindGone, nil // deleted and created again: the reservation's pod is gone
	case got.Spec.NodeName == asg.Node && sameAssignment(got, asg):
		return bindCommitted, got
	case got.Spec.NodeName != "":
		return bindElsewhere, got // bound elsewhere or with other cards: its record says what it holds
	case definitive(err):
		return bindRefused, nil
	}
	return bindUnknown, nil
}

// settleTimeout bounds the read-back of a pod after a failed Binding.
const settleTimeout = 5 * time.Second

// sameAssignment reports whether the pod carries exactly the assignment asg.
func sameAssignment(pod *corev1.Pod, asg annotations.Assignment) bool {
	enc, err := annotations.EncodeAssignment(asg)
	return err == nil && pod.Annotations[annotations.GPUAssignment] == enc
}

// definitive reports whether a Binding error proves the API server did not apply the write: it
// refused the request before storing anything. Timeouts, lost replies and server errors do not.
func definitive(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) ||
		apierrors.IsAlreadyExists(err) || apierrors.IsTooManyRequests(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// reserve is Cache.Reserve; when the pod must wait for a container in flight on the node and the
// server may wait (BindWait), it waits for the node to change and tries again, so a burst of
// different pods on one node is not left to kube-scheduler's backoff.
func (s *Server) reserve(ctx context.Context, pod *corev1.Pod, key string, p *core.Pod, node string) (annotations.Assignment, error) {
	var deadline <-chan time.Time
	for {
		// Take the wake-up channel before trying, so an allocation between the try and the wait
		// is not missed.
		wake := s.cache.InFlightDone()
		asg, err := s.cache.Reserve(pod.UID, key, p, node)
		if err == nil || !errors.Is(err, ErrInFlight) || s.bindWait <= 0 {
			return asg, err
		}
		if deadline == nil {
			t := time.NewTimer(s.bindWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-wake:
		case <-deadline:
			return asg, err
		case <-ctx.Done():
			return asg, err
		}
	}
}

// writeAndBind binds the pod with its assignment in one write: the API server copies a Binding's
// annotations onto the pod in the same update that sets spec.nodeName, so a pod never carries an
// assignment without its node (or the reverse), and each pod costs one request instead of two.
func (s *Server) writeAndBind(ctx context.Context, pod *corev1.Pod, asg annotations.Assignment) error {
	enc, err := annotations.EncodeAssignment(asg)
	if err != nil {
		return fmt.Errorf("encode assignment: %w", err)
	}
	return s.postBinding(ctx, pod, asg.Node, map[string]string{annotations.GPUAssignment: enc})
}

func (s *Server) postBinding(ctx context.Context, pod *corev1.Pod, node string, ann map[string]string) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Annotations: ann},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

func (s *Server) event(pod *corev1.Pod, err error) {
	s.recorder.Event(pod, corev1.EventTypeWarning, EventBindFailed, err.Error())
}

// clientPods finds pods through a lookup function (an informer's lister) and falls back to the API
// when the informer has not seen the pod yet.
type clientPods struct {
	client kubernetes.Interface
	lookup func(namespace, name string) (*corev1.Pod, error)
}

var _ PodSource = (*clientPods)(nil)

func (c *clientPods) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if c.lookup != nil {
		if p, err := c.lookup(namespace, name); err == nil {
			return p, nil
		} else if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// metrics are the extender's Prometheus metrics.
type metrics struct {
	latency  *prometheus.HistogramVec
	requests *prometheus.CounterVec
	nodes    *prometheus.CounterVec
	binds    *prometheus.CounterVec
	expired  prometheus.Counter
	// groupsExpired counts pod group plans freed by the reservation timeout (groups.go).
	groupsExpired prometheus.Counter
	// panics counts panics recovered while deciding a node (panics.go).
	panics prometheus.Counter
	// shortlists counts filter answers for pods with more fitting nodes than the shortlist, by
	// whether they were shortlisted or why not (fullReason).
	shortlists *prometheus.CounterVec
	// draMapped counts the DeviceClasses that map a resource Cardinal serves to DRA (dra.go).
	draMapped prometheus.Gauge
	// sampleMisses counts filters whose sample held no fitting node while nodes outside it fit
	// (sampling.go), by outcome.
	sampleMisses *prometheus.CounterVec
	// catchUps counts filters that waited for the pod informer to show the pod as kube-scheduler
	// sent it (catchup.go), by whether it did in time.
	catchUps *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cardinal_extender_request_duration_seconds",
			Help:    "Time to answer an extender call, by verb (filter, prioritize, bind, preempt).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50µs .. 6.5s
		}, []string{"verb"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_extender_requests_total",
			Help: "Extender calls by verb and outcome (ok, passthrough for pods without GPUs, error, bad_request).",
		}, []string{"verb", "outcome"}),
		nodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_extender_filter_nodes_total",
			Help: "Nodes judged by filter, by result (fit, unfit).",
		}, []string{"result"}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_extender_binds_total",
			Help: "Bind calls by outcome (bound, no_fit, in_flight, already_bound, bind_pending, not_ready, error, bad_request).",
		}, []string{"outcome"}),
	}
	m.shortlists = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cardinal_extender_filter_shortlists_total",
		Help: "Filter answers with more fitting nodes than --filter-shortlist, by outcome: shortlist, or why the pod got every fitting node (pod_affinity, existing_affinity, topology_spread, default_spread, taints, images).",
	}, []string{"outcome"})
	m.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cardinal_extender_reservations_expired_total",
		Help: "Reservations freed because their pod was still unbound (or gone) after the reservation timeout.",
	})
	m.groupsExpired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cardinal_extender_group_plans_expired_total",
		Help: "Pod group plans freed because their pods were not all bound within the reservation timeout of the plan's last progress.",
	})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cardinal_extender_decide_panics_total",
		Help: "Panics recovered while deciding a pod on one node; that node failed for the pod (its reason says so) and the panic was logged with its stack.",
	})
	m.draMapped = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cardinal_extender_dra_mapped_resources",
		Help: "DeviceClasses whose extendedResourceName is a resource Cardinal serves (the extender's log names them): kube-scheduler may serve that resource through DRA on nodes without Cardinal's device plugin, which Cardinal never places on.",
	})
	m.sampleMisses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cardinal_extender_sample_misses_total",
		Help: "Filters of a pod of the sampling profile where no node kube-scheduler sampled fits and nodes outside the sample do, by outcome: retried (each refusal notes the miss, so kube-scheduler tries another sample at once, and preemption frees nothing for the pod), paced (the fast misses are spent: the filter answers an error, which kube-scheduler retries after its backoff) or refused (the pod's misses ran out; plain refusals).",
	}, []string{"outcome"})
	for _, outcome := range []string{"retried", "paced", "refused"} {
		m.sampleMisses.WithLabelValues(outcome) // exposed at 0 before the first miss
	}
	m.catchUps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cardinal_extender_informer_waits_total",
		Help: "Filters that waited for the extender's pod informer to show the pod as kube-scheduler sent it (kube-scheduler's informer was ahead), by whether it did within 500 ms (caught: true or false; false: decided on what the cache had).",
	}, []string{"caught"})
	for _, caught := range []string{"true", "false"} {
		m.catchUps.WithLabelValues(caught)
	}
	reg.MustRegister(m.latency, m.requests, m.nodes, m.binds, m.expired, m.groupsExpired, m.shortlists, m.panics, m.draMapped, m.sampleMisses, m.catchUps)
	return m
}
