package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/kubeconfig"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Config configures the extender.
type Config struct {
	// Listen is the address of the HTTP server (/filter /prioritize /bind /preempt /healthz /readyz /metrics).
	Listen string
	// Listener, when set, is used instead of Listen (tests pass one bound to a free port).
	Listener net.Listener
	// ProbeListen, when set, is a second address serving only /healthz, /readyz and /metrics, so the
	// kubelet and Prometheus can reach them on the pod IP while the extender API stays on loopback.
	ProbeListen string
	// Kubeconfig is a kubeconfig path; empty means in-cluster. Ignored when RESTConfig or Client is set.
	Kubeconfig string
	// RESTConfig is used to build the client when Client is nil.
	RESTConfig *rest.Config
	// Client talks to the API server; built from RESTConfig or Kubeconfig when nil.
	Client kubernetes.Interface
	// SchedulerName is the kube-scheduler profile whose pods feed the task mix.
	SchedulerName string
	// ExactSchedulerName is Cardinal's second profile, which scores every node; with it,
	// SchedulerName's profile may sample nodes (sampling.go). Empty: one profile.
	ExactSchedulerName string
	// NodePolicy and GPUPolicy are the default policies for pods that name none.
	NodePolicy annotations.Policy
	GPUPolicy  annotations.Policy
	// RequireEnforcedSharing refuses shared containers on nodes whose sharing mode is none
	// (core.Options.RequireEnforcedSharing).
	RequireEnforcedSharing bool
	// Resources are the managed resource names.
	Resources annotations.ResourceNames
	// MaxBodyBytes bounds a request body (DefaultMaxBodyBytes when 0).
	MaxBodyBytes int64
	// ReservationTTL is how long a bind's reservation waits for its pod to show up bound before the
	// pod is read back and, if still unbound, its cards are freed (DefaultReservationTTL when 0).
	ReservationTTL time.Duration
	// BindWait is how long a bind may wait for a container in flight on the node to be allocated
	// before it answers "in flight" (kube-scheduler then backs the pod off). Keep it below the
	// extender's httpTimeout; 0 never waits.
	BindWait time.Duration
	// FilterShortlist, when positive, lets filter answer only the nodes the policy ranks best (the
	// best and those tied with it, at most this many, lowest name first) for pods whose in-tree
	// kube-scheduler scores cannot differ between nodes, so kube-scheduler skips its scoring and
	// prioritize when one node is left. 0 answers every fitting node. See shortlist.go.
	FilterShortlist int
	// Log is the logger.
	Log logr.Logger
}

// DefaultConfig returns the defaults the binary's flags start from.
func DefaultConfig() Config {
	// frag-aware is the default: it places more of every replayed trace than binpack or spread
	// (bench/results, docs/development.md, "Speed and placement quality").
	return Config{Listen: "127.0.0.1:8888", SchedulerName: "cardinal-scheduler", NodePolicy: annotations.PolicyFragAware,
		GPUPolicy: annotations.PolicyFragAware, Resources: annotations.DefaultResourceNames(), Log: logr.Discard(),
		ReservationTTL: DefaultReservationTTL, BindWait: DefaultBindWait, FilterShortlist: DefaultFilterShortlist}
}

// DefaultFilterShortlist is the default Config.FilterShortlist.
const DefaultFilterShortlist = 1

func (c *Config) validate() error {
	var errs []error
	if c.Listen == "" && c.Listener == nil {
		errs = append(errs, errors.New("listen address is empty"))
	}
	if c.SchedulerName == "" {
		errs = append(errs, errors.New("scheduler name is empty"))
	}
	if c.ExactSchedulerName != "" && c.ExactSchedulerName == c.SchedulerName {
		errs = append(errs, fmt.Errorf("--exact-scheduler-name: %q is --scheduler-name too; name another profile, or leave it empty", c.ExactSchedulerName))
	}
	if err := c.Resources.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := core.New(core.Options{NodePolicy: c.NodePolicy, GPUPolicy: c.GPUPolicy}); err != nil {
		errs = append(errs, err)
	}
	if c.ReservationTTL < 0 {
		errs = append(errs, fmt.Errorf("reservation TTL %s is negative", c.ReservationTTL))
	}
	if c.BindWait < 0 {
		errs = append(errs, fmt.Errorf("bind wait %s is negative", c.BindWait))
	}
	if c.FilterShortlist < 0 {
		errs = append(errs, fmt.Errorf("filter shortlist %d is negative", c.FilterShortlist))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("max body bytes %d is negative", c.MaxBodyBytes))
	}
	return errors.Join(errs...)
}

func (c *Config) client() (kubernetes.Interface, error) {
	if c.Client != nil {
		return c.Client, nil
	}
	rc := c.RESTConfig
	if rc == nil {
		var err error
		if rc, err = kubeconfig.Load(c.Kubeconfig); err != nil {
			return nil, err
		}
	}
	rc = kubeconfig.Uncompressed(rest.CopyConfig(rc))
	if rc.ContentType == "" {
		// Protobuf, as kube-scheduler and the controllers use: the API server encodes every pod
		// update once per encoding its watchers ask for, and a JSON watch of all pods cost it more
		// CPU than the bindings themselves in S2 (and costs the extender's decoder too).
		rc.ContentType = runtime.ContentTypeProtobuf
		rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	if rc.QPS == 0 {
		// One write per bound pod; API Priority and Fairness, not a client-side limit, protects the
		// API server. A limit of 200 requests/s (two writes per pod then) capped binding at 100 pods/s in S2.
		rc.QPS, rc.Burst = 2000, 4000
	}
	return kubernetes.NewForConfig(rc)
}

// Run serves the extender until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	log := cfg.Log
	client, err := cfg.client()
	if err != nil {
		return err
	}
	decider, err := core.New(core.Options{NodePolicy: cfg.NodePolicy, GPUPolicy: cfg.GPUPolicy, RequireEnforcedSharing: cfg.RequireEnforcedSharing})
	if err != nil {
		return err
	}
	cache := NewCache(cfg.Resources, cfg.SchedulerName, cfg.ExactSchedulerName)
	factory := informers.NewSharedInformerFactory(client, 0)
	nodeInf := factory.Core().V1().Nodes().Informer()
	podInf := factory.Core().V1().Pods().Informer()
	// PodDisruptionBudgets: preemption counts the budgets its victims would break (preempt.go).
	pdbInf := factory.Policy().V1().PodDisruptionBudgets().Informer()
	for _, inf := range []toolscache.SharedIndexInformer{nodeInf, podInf, pdbInf} {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return fmt.Errorf("informer transform: %w", err)
		}
	}
	if _, err := nodeInf.AddEventHandler(nodeHandler(cache)); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	if _, err := podInf.AddEventHandler(podHandler(cache)); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	podLister := factory.Core().V1().Pods().Lister()
	var services ServiceSelects
	// Not pdbInf: budgets are a preference among victim sets, never a reason to refuse every verb
	// (a cluster whose RBAC denies them still schedules; its preemption counts no violations).
	synced := []toolscache.InformerSynced{nodeInf.HasSynced, podInf.HasSynced}
	if cfg.FilterShortlist > 0 {
		// PodTopologySpread's default constraints spread pods a Service selects: they get the full list.
		svcInf := factory.Core().V1().Services().Informer()
		if err := svcInf.SetTransform(stripManagedFields); err != nil {
			return fmt.Errorf("informer transform: %w", err)
		}
		services = serviceSelects(factory.Core().V1().Services().Lister())
		synced = append(synced, svcInf.HasSynced)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: cfg.SchedulerName + "-extender"})

	var ready atomic.Bool
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := NewServer(cache, ServerOptions{
		Log: log, Client: client, Decider: decider, Names: cfg.Resources, Recorder: recorder, Registry: reg,
		Pods: &clientPods{client: client, lookup: func(ns, name string) (*corev1.Pod, error) {
			return podLister.Pods(ns).Get(name)
		}},
		Ready: ready.Load, MaxBody: cfg.MaxBodyBytes, BindWait: cfg.BindWait,
		FilterShortlist: cfg.FilterShortlist, Services: services,
		PDBs:          listPDBs(factory.Policy().V1().PodDisruptionBudgets().Lister()),
		AwaitInformer: true,
		KnownPod: func(ns, name string) *corev1.Pod {
			p, err := podLister.Pods(ns).Get(name)
			if err != nil {
				return nil
			}
			return p
		},
	})

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 2)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	servers := []*http.Server{httpSrv}
	if cfg.ProbeListen != "" {
		probeLn, err := net.Listen("tcp", cfg.ProbeListen)
		if err != nil {
			_ = httpSrv.Close()
			return fmt.Errorf("probe listen: %w", err)
		}
		probeSrv := &http.Server{Handler: srv.ProbeHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- probeSrv.Serve(probeLn) }()
		servers = append(servers, probeSrv)
		log.Info("serving probes", "address", probeLn.Addr().String())
	}
	log.Info("serving", "address", ln.Addr().String(), logging.KeyPolicy, string(cfg.NodePolicy), "gpuPolicy", string(cfg.GPUPolicy))

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), synced...) {
			ready.Store(true)
			log.Info("caches synced")
			ttl := cfg.ReservationTTL
			if ttl == 0 {
				ttl = DefaultReservationTTL
			}
			go watchDRAMappings(ctx, log.WithName("dra"), client, cfg.Resources, srv.metrics.draMapped)
			srv.runReservationSweeper(ctx, ttl)
		}
	}()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	}
	return shutdown(ctx, log, servers, shutdownGrace)
}

// shutdownGrace is how long Run lets requests in progress finish when it stops.
const shutdownGrace = 5 * time.Second

// shutdown stops the servers gracefully: requests in progress get grace to finish. Connections still
// open after it are closed: kube-scheduler may have just opened one that carries no request yet, and
// net/http waits for such a connection as long as for a request in progress. Closing them is how the
// stop ends, not a failure; errors other than the grace running out are returned.
func shutdown(ctx context.Context, log logr.Logger, servers []*http.Server, grace time.Duration) error {
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	var errs []error
	for _, s := range servers {
		err := s.Shutdown(shutdownCtx)
		if errors.Is(err, context.DeadlineExceeded) {
			log.Info("connections still open after the shutdown grace; closing them", "grace", grace)
			err = s.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// serviceSelects reports whether a Service in the pod's namespace selects it, as kube-scheduler's
// helper.GetPodServices does (a Service without a selector selects nothing).
func serviceSelects(l corelisters.ServiceLister) ServiceSelects {
	return func(pod *corev1.Pod) bool {
		svcs, err := l.Services(pod.Namespace).List(labels.Everything())
		if err != nil {
			return true // cannot tell: the full list is always correct
		}
		set := labels.Set(pod.Labels)
		for _, svc := range svcs {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromValidatedSet(svc.Spec.Selector).Matches(set) {
				return true
			}
		}
		return false
	}
}

func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func nodeHandler(c *Cache) toolscache.ResourceEventHandler {
	return eventHandler(c.UpsertNode, func(n *corev1.Node) { c.DeleteNode(n.Name) })
}

func podHandler(c *Cache) toolscache.ResourceEventHandler {
	return eventHandler(c.UpsertPod, func(p *corev1.Pod) { c.DeletePod(p.UID) })
}

// eventHandler calls upsert for added and updated objects of type T and remove for deleted ones,
// unwrapping the informer's tombstones.
func eventHandler[T any](upsert, remove func(T)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				remove(o)
			}
		},
	}
}
