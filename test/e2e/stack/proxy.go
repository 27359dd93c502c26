package stack

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// bindingPath matches the Binding subresource of a pod: POST …/namespaces/<ns>/pods/<name>/binding.
var bindingPath = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/pods/([^/]+)/binding$`)

// upstreamTimeout bounds a Binding the proxy forwards on its own, whatever its client does.
const upstreamTimeout = 30 * time.Second

// BindingFault is what APIProxy does to the reply of a Binding after the API server has committed it
// (answered 201): the write stands, the client learns otherwise, or late, or never.
type BindingFault struct {
	// Status replaces the API server's answer with a Status of this code (e.g. 504); 0 keeps it.
	Status int
	// Drop closes the client's connection without any reply.
	Drop bool
	// Delay holds the reply back this long first (past the client's deadline, say).
	Delay time.Duration
	// Then runs after the commit and before the reply (e.g. kill the client's process).
	Then func(pod string)
}

func (f BindingFault) String() string {
	var parts []string
	if f.Delay > 0 {
		parts = append(parts, "delay "+f.Delay.String())
	}
	if f.Then != nil {
		parts = append(parts, "hook")
	}
	switch {
	case f.Drop:
		parts = append(parts, "connection closed")
	case f.Status != 0:
		parts = append(parts, fmt.Sprintf("status %d", f.Status))
	default:
		parts = append(parts, "reply kept")
	}
	return strings.Join(parts, ", ")
}

// APIProxy is a loopback reverse proxy in front of the API server for one client (the extender): it
// passes everything through (watches streamed), and applies queued BindingFaults to the replies of
// committed Bindings, one fault per Binding, in order. It serves HTTPS (client-go sends a token
// only over TLS) with HTTP/1.1 only, so that a dropped reply closes a real connection; the client's
// token passes through to the API server, which authenticates it as before.
type APIProxy struct {
	URL string
	// CA is the PEM of the CA that signed the proxy's serving certificate.
	CA []byte

	target    *url.URL
	transport *http.Transport
	proxy     *httputil.ReverseProxy
	srv       *http.Server

	mu       sync.Mutex
	queue    []BindingFault
	faulted  []string // pods whose Binding reply was faulted, in order
	inFlight int      // Bindings received and not yet answered
}

// NewAPIProxy starts a proxy to the API server at target (https), trusting caPEM; its serving
// certificate and key are written into certDir.
func NewAPIProxy(target string, caPEM []byte, certDir string) (*APIProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("API proxy: no certificate in the CA data")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	proxyCA, err := cluster.WriteServingCert(certDir, 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("API proxy certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("API proxy certificate: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &APIProxy{URL: "https://" + l.Addr().String(), CA: proxyCA, target: u, transport: tr}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport:     tr,
		FlushInterval: -1, // watches stream event by event
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
	}
	go func() { _ = p.srv.ServeTLS(l, "", "") }()
	return p, nil
}

// Close stops the proxy and drops its connections.
func (p *APIProxy) Close() {
	_ = p.srv.Close()
	p.transport.CloseIdleConnections()
}

// FaultBindings queues faults for the next committed Bindings, one each, in order.
func (p *APIProxy) FaultBindings(faults ...BindingFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, faults...)
}

// Pending is how many queued faults have not been applied yet.
func (p *APIProxy) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Faulted returns the pods whose Binding reply was faulted, in order.
func (p *APIProxy) Faulted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.faulted...)
}

// InFlight is how many Bindings the proxy has received and not yet answered (or dropped).
func (p *APIProxy) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight
}

// Clear drops the faults still queued.
func (p *APIProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = nil
}

func (p *APIProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := bindingPath.FindStringSubmatch(r.URL.Path)
	if r.Method != http.MethodPost || m == nil {
		p.proxy.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.inFlight++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()
	p.binding(w, r, m[1])
}

// binding forwards a Binding with a context of its own, so the write reaches the API server even
// when the client gives up, then replies as the next queued fault says.
func (p *APIProxy) binding(w http.ResponseWriter, r *http.Request, pod string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), upstreamTimeout)
	defer cancel()
	u := *p.target
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var fault *BindingFault
	if resp.StatusCode == http.StatusCreated {
		p.mu.Lock()
		if len(p.queue) > 0 {
			f := p.queue[0]
			p.queue = p.queue[1:]
			p.faulted = append(p.faulted, pod)
			fault = &f
		}
		p.mu.Unlock()
	}
	if fault == nil {
		copyReply(w, resp, respBody)
		return
	}
	if fault.Then != nil {
		fault.Then(pod)
	}
	if fault.Delay > 0 {
		time.Sleep(fault.Delay) // the fault itself: the reply is late
	}
	switch {
	case fault.Drop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without a reply
	case fault.Status != 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(fault.Status)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test's API proxy after the binding of %s committed","reason":"Timeout","code":%d}`, pod, fault.Status)
	default:
		copyReply(w, resp, respBody)
	}
}

func copyReply(w http.ResponseWriter, resp *http.Response, body []byte) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// ExtenderProxy is a loopback reverse proxy in front of the extender, at the address the scheduler
// configuration names: kube-scheduler's filter, prioritize and bind calls go through it, so a test
// can act between a pod's filter and its bind.
type ExtenderProxy struct {
	proxy *httputil.ReverseProxy
	srv   *http.Server

	mu         sync.Mutex
	beforeBind []func()
	binds      int
	inFlight   int // bind calls forwarded and not yet answered
}

// newExtenderProxy serves on addr (retrying while the port is being freed) and forwards to backend.
func newExtenderProxy(addr, backend string) (*ExtenderProxy, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, err
	}
	var l net.Listener
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("extender proxy: listen %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := &ExtenderProxy{proxy: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// BeforeBinds queues hooks to run when the next bind calls arrive, one hook per call, before the
// call is forwarded.
func (p *ExtenderProxy) BeforeBinds(hooks ...func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeBind = append(p.beforeBind, hooks...)
}

// Clear drops the hooks still queued.
func (p *ExtenderProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeBind = nil
}

// Binds counts the bind calls kube-scheduler made through the proxy.
func (p *ExtenderProxy) Binds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.binds
}

// InFlight is how many bind calls are being forwarded now.
func (p *ExtenderProxy) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight
}

// Close stops the proxy.
func (p *ExtenderProxy) Close() { _ = p.srv.Close() }

func (p *ExtenderProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/bind") {
		p.mu.Lock()
		p.binds++
		p.inFlight++
		var hook func()
		if len(p.beforeBind) > 0 {
			hook = p.beforeBind[0]
			p.beforeBind = p.beforeBind[1:]
		}
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.inFlight--
			p.mu.Unlock()
		}()
		if hook != nil {
			hook()
		}
	}
	p.proxy.ServeHTTP(w, r)
}
