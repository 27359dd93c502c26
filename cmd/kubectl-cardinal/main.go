// Command kubectl-cardinal is the kubectl plugin `kubectl cardinal`: Cardinal's view of the
// cluster's GPUs (nodes, cards NODE) and where a pod would go (explain). See pkg/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cardinal-gpu/cardinal/pkg/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, cli.Kubeconfig)
	stop()
	os.Exit(code)
}
