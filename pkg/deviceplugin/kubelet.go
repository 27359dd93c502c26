package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// kubeletLink serves one resource of the plugin (Plugin.Server) on a socket of its own in the
// kubelet's device-plugin folder and registers it, again whenever the kubelet restarts (it
// recreates kubelet.sock and wipes the folder). The plugin runs one link per resource it serves;
// each follows this lifecycle on its own.
type kubeletLink struct {
	plugin   *Plugin
	dir      string
	socket   string // our socket's file name
	resource string
	log      logr.Logger
	// registered is true while the current server is registered with the current kubelet.
	registered atomic.Bool
	// registrations counts successful registrations (tests wait on it).
	registrations atomic.Int64
	// kubeletSocketID identifies the kubelet.sock file the current registration went through.
	kubeletSocketID fileID
}

// fileID tells two files apart even when one replaced the other under the same name.
type fileID struct{ dev, ino uint64 }

func idOf(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true //nolint:unconvert // Dev's type differs by platform
}

// socketName derives the plugin's socket file name from the resource name.
func socketName(resource string) string {
	r := strings.NewReplacer("/", "-", ".", "-")
	return "cardinal-" + r.Replace(resource) + ".sock"
}

// kubeletLinks are the plugin's registrations: one per resource it serves, each on a socket of its
// own in dir (the kubelet takes one resource per registration). The set is the node's at start: MIG
// instances an operator creates or destroys later are served once the plugin restarts (mig.go).
func kubeletLinks(p *Plugin, dir string, names annotations.ResourceNames, log logr.Logger) []*kubeletLink {
	var links []*kubeletLink
	for _, res := range p.Resources() {
		links = append(links, &kubeletLink{plugin: p, dir: dir, socket: socketFor(names, res), resource: string(res), log: log})
	}
	return links
}

// socketFor is the socket file name of resource res: socketName's for the GPU resource, and
// cardinal-mig-<profile key>.sock for a MIG resource (the key as it is: replacing its '.' would
// give 1g.10gb.me and 1g.10gb-me one name).
func socketFor(names annotations.ResourceNames, res corev1.ResourceName) string {
	if key, ok := names.MIGProfileKeyOf(res); ok {
		return "cardinal-mig-" + key + ".sock"
	}
	return socketName(string(res))
}

// run serves and registers until ctx ends.
func (k *kubeletLink) run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", k.dir, err)
	}
	defer w.Close()
	if err := w.Add(k.dir); err != nil {
		return fmt.Errorf("watch %s: %w", k.dir, err)
	}
	kubeletSock := filepath.Join(k.dir, filepath.Base(pluginapi.KubeletSocket))
	for ctx.Err() == nil {
		srv, served, err := k.serve()
		if err != nil {
			return err
		}
		restart := k.registerAndWait(ctx, w, kubeletSock, served)
		k.registered.Store(false)
		srv.Stop()
		if !restart {
			break
		}
	}
	os.Remove(filepath.Join(k.dir, k.socket))
	return nil
}

func (k *kubeletLink) serve() (*grpc.Server, <-chan error, error) {
	path := filepath.Join(k.dir, k.socket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	srv := grpc.NewServer(recoveryOptions(k.log)...)
	pluginapi.RegisterDevicePluginServer(srv, k.plugin.Server(corev1.ResourceName(k.resource)))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	return srv, served, nil
}

// registerAndWait registers (retrying with backoff while the kubelet is not there) and then waits
// for a reason to start over. It returns false when ctx ended.
func (k *kubeletLink) registerAndWait(ctx context.Context, w *fsnotify.Watcher, kubeletSock string, served <-chan error) bool {
	delay := 100 * time.Millisecond
	var retry <-chan time.Time
	try := func() {
		err := k.register(ctx, kubeletSock)
		k.plugin.metrics.registered(corev1.ResourceName(k.resource), err)
		if err != nil {
			k.log.Info("registration with the kubelet failed; will retry", keyResource, k.resource, "error", err.Error(), "in", delay.String())
			retry = time.After(delay)
			delay = min(delay*2, 10*time.Second)
			return
		}
		k.registered.Store(true)
		k.registrations.Add(1)
		k.log.Info("registered with the kubelet", keyResource, k.resource, "socket", k.socket)
		retry = nil
	}
	try()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-retry:
			try()
		case err := <-served:
			k.log.Error(err, "device plugin gRPC server stopped; starting again", keyResource, k.resource)
			return true
		case ev, ok := <-w.Events:
			if !ok {
				return false
			}
			switch {
			case ev.Name == kubeletSock && ev.Has(fsnotify.Create):
				// A kubelet restart shows up as two events: our socket removed, then kubelet.sock
				// created. When the first already led to a registration through this very kubelet.sock,
				// registering again would make the kubelet drop the stream it just opened (seen: both
				// streams closed, the resource at 0), so only a kubelet.sock we did not register through
				// starts over.
				if id, ok := idOf(kubeletSock); ok && k.registered.Load() && id == k.kubeletSocketID {
					continue
				}
				// A new kubelet: it has wiped the folder, so serve a fresh socket and register.
				k.log.Info("kubelet socket created; registering again", keyResource, k.resource)
				return true
			case ev.Name == filepath.Join(k.dir, k.socket) && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				// Our own removal of a stale socket before serving shows up here too, after the new
				// socket exists: only a socket that is gone means the kubelet wiped the folder.
				if _, err := os.Stat(ev.Name); err == nil {
					continue
				}
				k.log.Info("plugin socket removed; serving and registering again", keyResource, k.resource)
				return true
			}
		case err, ok := <-w.Errors:
			if !ok {
				return false
			}
			k.log.Error(err, "device-plugin folder watch error")
		}
	}
}

func (k *kubeletLink) register(ctx context.Context, kubeletSock string) error {
	id, ok := idOf(kubeletSock)
	if !ok {
		return fmt.Errorf("kubelet socket %s is not there (yet)", kubeletSock)
	}
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     k.socket,
		ResourceName: k.resource,
		Options:      k.plugin.options(),
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", k.resource, err)
	}
	k.kubeletSocketID = id
	return nil
}
