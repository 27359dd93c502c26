package deviceplugin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Which pod the kubelet is admitting, from the kubelet itself.
//
// GetPreferredAllocation and Allocate name no pod, but the kubelet knows it, and its PodResources
// List says so at that very moment: the kubelet adds each pod to its pod manager just before it
// admits it (HandlePodAdditions, one pod at a time), List shows the active pods (a pod it rejected is
// terminal at once, and left out), and it shows each container's devices as soon as its Allocate
// returned. So among the pods List shows, the one being admitted is the one with a container that
// takes managed devices but holds none yet: pods admitted before hold theirs, pods not yet added are
// not listed. (List leaves plain init containers out; app containers and sidecars are enough to
// tell, since they are allocated after the init containers.)
//
// When List answers with exactly one such pod, that pod is certainly the one being admitted: its
// containers are the only candidates (owner.go), whatever the creation and bind order, and a pod the
// kubelet rejected before any device call hands nothing on. When List cannot be asked, or shows
// none or several, the order rules decide, and the start is verified as always (verify.go).

// admittingTimeout bounds the List call on the admission path.
const admittingTimeout = time.Second

// podResourcesLister is the part of the PodResources API the plugin uses.
type podResourcesLister interface {
	List(ctx context.Context, in *podresourcesapi.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error)
}

var _ podResourcesLister = podresourcesapi.PodResourcesListerClient(nil)

// listPodResources asks the kubelet's PodResources List (nil when it cannot be asked or fails).
func (p *Plugin) listPodResources(ctx context.Context) *podresourcesapi.ListPodResourcesResponse {
	if p.podResources == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, admittingTimeout)
	defer cancel()
	resp, err := p.podResources.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		p.log.V(1).Info("PodResources did not say which pod is being admitted; the order rules decide", "error", err.Error())
		return nil
	}
	return resp
}

// admittingLocked returns the UID of the pod the kubelet is admitting as list shows it ("" when it
// does not say: no list, no such pod, or several), and settled false while a listed pod that holds
// no managed device is not in the plugin's cache yet (it may be the one: wait for the cache).
// p.mu held.
func (p *Plugin) admittingLocked(list *podresourcesapi.ListPodResourcesResponse) (uid types.UID, settled bool) {
	if list == nil {
		return "", true
	}
	found, settled := 0, true
	for _, pr := range list.GetPodResources() {
		key := pr.GetNamespace() + "/" + pr.GetName()
		e := p.pods[p.byKey[key]]
		holds := p.holdsManaged(pr)
		if e == nil {
			if len(holds) == 0 && !p.strangers[key] {
				settled = false // maybe the pod being admitted, bound a moment ago: wait for the cache
			}
			continue
		}
		if e.Gone || e.Deleting || !waitsForDevices(pr, e, holds) {
			continue
		}
		found++
		uid = e.UID
	}
	if found != 1 {
		return "", settled
	}
	return uid, settled
}

// strangersLocked remembers the pods list shows that the cache still does not know once a call has
// waited for them: a static pod without a mirror pod, say. Later calls do not wait for them again (a
// pod bound a moment ago is unknown only at its own admission). p.mu held.
func (p *Plugin) strangersLocked(list *podresourcesapi.ListPodResourcesResponse) {
	if list == nil {
		return
	}
	if len(p.strangers) > maxStrangers {
		clear(p.strangers)
	}
	for _, pr := range list.GetPodResources() {
		key := pr.GetNamespace() + "/" + pr.GetName()
		if _, known := p.byKey[key]; !known {
			p.strangers[key] = true
		}
	}
}

// maxStrangers bounds the strangers remembered.
const maxStrangers = 1024

// holdsManaged lists the containers of a PodResources entry that hold managed devices.
func (p *Plugin) holdsManaged(pr *podresourcesapi.PodResources) map[string]bool {
	holds := map[string]bool{}
	for _, c := range pr.GetContainers() {
		for _, d := range c.GetDevices() {
			if r := corev1.ResourceName(d.GetResourceName()); (r == p.names.GPU || p.names.IsMIGResource(r)) && len(d.GetDeviceIds()) > 0 {
				holds[c.GetName()] = true
			}
		}
	}
	return holds
}

// waitsForDevices reports whether a listed container of pod e takes managed devices but holds none.
func waitsForDevices(pr *podresourcesapi.PodResources, e *podEntry, holds map[string]bool) bool {
	for _, c := range pr.GetContainers() {
		if holds[c.GetName()] {
			continue
		}
		for _, o := range e.Order {
			if o.Name == c.GetName() && o.Count > 0 {
				return true
			}
		}
	}
	return false
}

// onlyAdmitting marks the holders of every pod but uid as not being admitted: the kubelet's record
// says so (see above). Nothing changes when uid is "".
func onlyAdmitting(hs []holder, uid types.UID) {
	if uid == "" {
		return
	}
	for i := range hs {
		if hs[i].Pod.UID != uid {
			hs[i].NotAdmitting = true
		}
	}
}
