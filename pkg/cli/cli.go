// Package cli is kubectl cardinal, the kubectl plugin that shows what Cardinal sees: each node's
// cards and what is free on them (nodes), who holds each card (cards), and where a pod would go
// and why not elsewhere (explain). It reads Nodes' inventories and pods' records through the
// API server and decides with the extender's own cache and decision core (pkg/scheduler), so its
// answers are the extender's, computed locally: it never calls the extender. It writes only to
// cordon, uncordon and drain cards (cordon.go).
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
)

// Output formats.
const (
	OutputTable = "table"
	OutputJSON  = "json"
)

// Options are what every command reads: the client, the resource names and scheduler name the
// cluster's Cardinal runs with, and how to print.
type Options struct {
	Client kubernetes.Interface
	// Namespace is where explain looks for a pod by name (and the namespace of a pod file that
	// names none).
	Namespace string
	Names     annotations.ResourceNames
	// SchedulerName is the kube-scheduler profile whose pods feed the task mix (frag-aware).
	SchedulerName string
	// ExactSchedulerName is Cardinal's second profile, whose pods feed it too ("": none).
	ExactSchedulerName string
	// Output is OutputTable ("" too) or OutputJSON.
	Output string
	Out    io.Writer
}

// checkOutput refuses an unknown -o value.
func (o *Options) checkOutput() error {
	switch o.Output {
	case "", OutputTable, OutputJSON:
		return nil
	}
	return fmt.Errorf("-o %q: want table or json", o.Output)
}

// cluster is one read of the cluster: its nodes and pods, and the extender's cache fed with them.
type cluster struct {
	nodes []corev1.Node
	pods  []corev1.Pod
	cache *scheduler.Cache
}

// load lists nodes and pods and feeds them to a fresh cache, as the extender's informers do;
// the pod skip (the one explain asks about) is left out, so that it does not hold cards already.
func (o *Options) load(ctx context.Context, skip types.UID) (*cluster, error) {
	nodes, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	pods, err := o.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	c := &cluster{nodes: nodes.Items, pods: pods.Items, cache: scheduler.NewCache(o.Names, o.SchedulerName, o.ExactSchedulerName)}
	slices.SortFunc(c.nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for i := range c.nodes {
		c.cache.UpsertNode(&c.nodes[i])
	}
	for i := range c.pods {
		if skip != "" && c.pods[i].UID == skip {
			continue
		}
		c.cache.UpsertPod(&c.pods[i])
	}
	return c, nil
}

// node returns the named node, or an error naming it.
func (c *cluster) node(name string) (*corev1.Node, error) {
	for i := range c.nodes {
		if c.nodes[i].Name == name {
			return &c.nodes[i], nil
		}
	}
	return nil, fmt.Errorf("node %q not found", name)
}

// writeJSON prints v indented.
func (o *Options) writeJSON(v any) error {
	enc := json.NewEncoder(o.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
