// Package kubeletrecord reads the kubelet's own record of which container holds which devices, and
// with which Allocate response: the device manager's checkpoint (kubelet_internal_checkpoint in the
// device-plugin folder). The kubelet writes it after every container's Allocate, before the container
// starts, and replays it after a restart, so it is what the container will start with, whoever the
// plugin meant the response for. PodResources List shows the holders too, but not the responses.
//
// The format is the kubelet's (pkg/kubelet/cm/devicemanager/checkpoint, unchanged since 1.20):
//
//	{"Data":{"PodDeviceEntries":[{"PodUID":…,"ContainerName":…,"ResourceName":…,
//	  "DeviceIDs":{"<numa>":["id",…]},"AllocResp":"<base64 ContainerAllocateResponse>"}],
//	  "RegisteredDevices":{…}},"Checksum":…}
//
// The checksum is not checked: the kubelet checks it when it reads the file, and a torn read here
// fails to decode (the caller then fails closed).
package kubeletrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// CheckpointFile is the checkpoint's name in the kubelet's device-plugin folder.
const CheckpointFile = "kubelet_internal_checkpoint"

// MaxSize bounds the file read: a node's entries are a few hundred bytes each.
const MaxSize = 64 << 20

// Entry is one container's devices of one resource, as the kubelet holds them.
type Entry struct {
	PodUID    types.UID
	Container string
	Resource  string
	// IDs are the device IDs, sorted.
	IDs []string
	// Response is the Allocate response the kubelet applies to the container; nil when it stored none.
	Response *pluginapi.ContainerAllocateResponse
}

// Record is the kubelet's record of held devices.
type Record struct {
	Entries []Entry
}

type fileEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     map[string][]string
	AllocResp     []byte
}

type file struct {
	Data *struct {
		PodDeviceEntries []fileEntry
	}
}

// ErrNoData: the file decodes but has no Data object (not a device manager checkpoint).
var ErrNoData = errors.New("no Data object")

// Decode reads a checkpoint's content. Every entry must name a pod, a container and a resource, hold
// at least one device, and carry a response that decodes; the error names the entry and the field.
func Decode(data []byte) (Record, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return Record{}, fmt.Errorf("kubelet device checkpoint: %w", err)
	}
	if f.Data == nil {
		return Record{}, fmt.Errorf("kubelet device checkpoint: %w", ErrNoData)
	}
	r := Record{Entries: make([]Entry, 0, len(f.Data.PodDeviceEntries))}
	for i, e := range f.Data.PodDeviceEntries {
		where := fmt.Sprintf("kubelet device checkpoint: PodDeviceEntries[%d]", i)
		switch {
		case e.PodUID == "":
			return Record{}, fmt.Errorf("%s: PodUID is empty", where)
		case e.ContainerName == "":
			return Record{}, fmt.Errorf("%s (pod %s): ContainerName is empty", where, e.PodUID)
		case e.ResourceName == "":
			return Record{}, fmt.Errorf("%s (pod %s container %q): ResourceName is empty", where, e.PodUID, e.ContainerName)
		}
		out := Entry{PodUID: types.UID(e.PodUID), Container: e.ContainerName, Resource: e.ResourceName}
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				if !slices.Contains(out.IDs, id) {
					out.IDs = append(out.IDs, id)
				}
			}
		}
		slices.Sort(out.IDs)
		if len(e.AllocResp) > 0 {
			out.Response = &pluginapi.ContainerAllocateResponse{}
			if err := proto.Unmarshal(e.AllocResp, out.Response); err != nil {
				return Record{}, fmt.Errorf("%s (pod %s container %q): AllocResp: %w", where, e.PodUID, e.ContainerName, err)
			}
		}
		r.Entries = append(r.Entries, out)
	}
	return r, nil
}

// Read reads and decodes the checkpoint at path.
func Read(path string) (Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return Record{}, fmt.Errorf("kubelet device checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Record{}, fmt.Errorf("kubelet device checkpoint: %w", err)
	}
	if st.Size() > MaxSize {
		return Record{}, fmt.Errorf("kubelet device checkpoint %s: %d bytes, more than %d", path, st.Size(), MaxSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Record{}, fmt.Errorf("kubelet device checkpoint: %w", err)
	}
	return Decode(data)
}

// Holding returns the entries of resource that hold exactly ids (any order): the containers the
// kubelet starts with those devices. Several entries are containers of one pod (an app container
// reuses its init container's devices); the kubelet never gives one device to two pods at once.
func (r Record) Holding(resource string, ids []string) []Entry {
	want := slices.Clone(ids)
	slices.Sort(want)
	var out []Entry
	for _, e := range r.Entries {
		if e.Resource == resource && slices.Equal(e.IDs, want) {
			out = append(out, e)
		}
	}
	return out
}

// Encode writes a record in the kubelet's format (tests, and the test bed's fake kubelet state).
func Encode(r Record) ([]byte, error) {
	type outEntry struct {
		PodUID        string
		ContainerName string
		ResourceName  string
		DeviceIDs     map[string][]string
		AllocResp     []byte
	}
	var entries []outEntry
	for _, e := range r.Entries {
		var resp []byte
		if e.Response != nil {
			b, err := proto.Marshal(e.Response)
			if err != nil {
				return nil, fmt.Errorf("pod %s container %q: %w", e.PodUID, e.Container, err)
			}
			resp = b
		}
		entries = append(entries, outEntry{PodUID: string(e.PodUID), ContainerName: e.Container, ResourceName: e.Resource,
			DeviceIDs: map[string][]string{"-1": e.IDs}, AllocResp: resp})
	}
	return json.Marshal(map[string]any{"Data": map[string]any{"PodDeviceEntries": entries, "RegisteredDevices": map[string][]string{}}, "Checksum": 0})
}
