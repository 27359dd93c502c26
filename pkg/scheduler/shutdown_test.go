package scheduler

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// A client that has just opened a connection and sent nothing yet (kube-scheduler opening one as
// the extender stops) must not turn a clean stop into an error: net/http waits for such a
// connection as for a request in progress, so after the grace the connection is closed and the stop
// ends without error.
func TestShutdownClosesConnectionsWithoutARequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	time.Sleep(50 * time.Millisecond) // the server has accepted it
	if err := shutdown(context.Background(), logr.Discard(), []*http.Server{srv}, 200*time.Millisecond); err != nil {
		t.Fatalf("shutdown with a connection that carries no request: %v, want a clean stop", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection is still open after shutdown")
	}
}
