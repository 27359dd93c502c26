package scheduler

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// DRA's extended-resource mapping (KEP-5004; the DRAExtendedResource gate is beta and on by default
// in Kubernetes 1.36, GA in 1.37): a DeviceClass
// whose spec.extendedResourceName is, say, nvidia.com/gpu lets kube-scheduler satisfy a pod's
// nvidia.com/gpu through a DRA ResourceClaim on a node whose device plugin does not advertise the
// resource. A node advertising it keeps the device-plugin path. Cardinal places its pods only on
// nodes that publish its inventory, so DRA-served nodes never take a pod the webhook sends to it:
// they keep their cards for pods other schedulers place through DRA, and a Cardinal pod that fits
// only there stays Pending with "no GPU inventory". Nothing breaks, but an operator who created
// the class expects otherwise, so the extender looks for such classes and says so: an error in
// its log naming each class, and their count in the gauge cardinal_extender_dra_mapped_resources.

// draPollEvery is how often the DeviceClasses are listed (classes change rarely; a watch would
// hold a connection for them).
const draPollEvery = time.Minute

// draMapping is one DeviceClass that maps a resource Cardinal serves.
type draMapping struct {
	class, resource string
}

// draMappings lists the DeviceClasses whose extendedResourceName is a resource Cardinal serves
// (its GPU resources and any MIG resource of its domain), by class name.
func draMappings(ctx context.Context, client kubernetes.Interface, names annotations.ResourceNames) ([]draMapping, error) {
	list, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []draMapping
	for i := range list.Items {
		r := list.Items[i].Spec.ExtendedResourceName
		if r == nil {
			continue
		}
		if rn := corev1.ResourceName(*r); slices.Contains(names.All(), rn) || names.IsMIGResource(rn) {
			out = append(out, draMapping{class: list.Items[i].Name, resource: *r})
		}
	}
	slices.SortFunc(out, func(a, b draMapping) int { return strings.Compare(a.class, b.class) })
	return out, nil
}

// watchDRAMappings lists the DeviceClasses every draPollEvery until ctx ends, setting the gauge to
// the number of mappings found and logging them when they change. A cluster that serves no resource.k8s.io/v1
// (before 1.34) or denies the list is said once, and looked at again at the next poll.
func watchDRAMappings(ctx context.Context, log logr.Logger, client kubernetes.Interface, names annotations.ResourceNames, gauge prometheus.Gauge) {
	var last []draMapping
	var lastErr string
	for {
		found, err := draMappings(ctx, client, names)
		switch {
		case err != nil && ctx.Err() == nil:
			if msg := err.Error(); msg != lastErr {
				lastErr = msg
				why := "cannot list DeviceClasses"
				if apierrors.IsNotFound(err) {
					why = "the API server serves no resource.k8s.io/v1 DeviceClasses"
				}
				log.Info("DRA extended-resource mappings not checked: "+why, "err", err)
			}
		case err == nil:
			lastErr = ""
			if !slices.Equal(found, last) {
				gauge.Set(float64(len(found)))
				for _, m := range found {
					log.Error(nil, "a DeviceClass maps a resource Cardinal serves to DRA: Cardinal places its pods only on nodes its device plugin serves, never through DRA",
						"deviceclass", m.class, "resource", m.resource)
				}
				last = found
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(draPollEvery):
		}
	}
}
