package stack

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// fakeAPIServer answers every Binding with 201 and counts them, and every other request with 200
// and its path.
func fakeAPIServer(t *testing.T) (*httptest.Server, *atomic.Int32, []byte) {
	t.Helper()
	var commits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/binding") {
			commits.Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Success","code":201}`)
			return
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, &commits, ca
}

func post(c *http.Client, url string) (int, error) {
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"kind":"Binding"}`))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestAPIProxyFaultsCommittedBindingsInOrder(t *testing.T) {
	srv, commits, ca := fakeAPIServer(t)
	p, err := NewAPIProxy(srv.URL, ca, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CA)
	var hooked []string
	p.FaultBindings(
		BindingFault{Status: http.StatusGatewayTimeout, Then: func(pod string) { hooked = append(hooked, pod) }},
		BindingFault{Drop: true},
		BindingFault{Delay: 300 * time.Millisecond},
	)
	client := &http.Client{Timeout: 100 * time.Millisecond, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	binding := func(pod string) string { return p.URL + "/api/v1/namespaces/ns/pods/" + pod + "/binding" }

	// 504 although the write committed.
	if code, err := post(client, binding("p0")); err != nil || code != http.StatusGatewayTimeout {
		t.Errorf("first binding: got %d, %v; want 504", code, err)
	}
	// No reply at all.
	if code, err := post(client, binding("p1")); err == nil {
		t.Errorf("second binding: got %d, want the connection closed", code)
	}
	// A reply later than the client waits.
	if code, err := post(client, binding("p2")); err == nil {
		t.Errorf("third binding: got %d, want the client's timeout", code)
	}
	// Faults used up: the API server's own answer.
	if code, err := post(client, binding("p3")); err != nil || code != http.StatusCreated {
		t.Errorf("fourth binding: got %d, %v; want 201", code, err)
	}
	// Everything else passes through untouched.
	resp, err := client.Get(p.URL + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "/api/v1/pods" {
		t.Errorf("GET through the proxy: got %q", body)
	}
	if got := commits.Load(); got != 4 {
		t.Errorf("the API server committed %d Bindings, want all 4", got)
	}
	if got := strings.Join(p.Faulted(), ","); got != "p0,p1,p2" {
		t.Errorf("faulted %s, want p0,p1,p2", got)
	}
	if strings.Join(hooked, ",") != "p0" || p.Pending() != 0 {
		t.Errorf("hook ran for %v, %d faults pending; want p0 and none", hooked, p.Pending())
	}
}

func TestExtenderProxyRunsHooksBeforeBindOnly(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(backend.Close)
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	front, err := newExtenderProxy("127.0.0.1:"+strconv.Itoa(ports[0]), backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	ran := 0
	front.BeforeBinds(func() { ran++ })
	for _, verb := range []string{"filter", "prioritize", "bind", "bind"} {
		if code, err := post(http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/"+verb); err != nil || code != http.StatusOK {
			t.Fatalf("%s: %d, %v", verb, code, err)
		}
	}
	if ran != 1 || front.Binds() != 2 {
		t.Errorf("hook ran %d times over %d binds, want once over 2", ran, front.Binds())
	}
}
