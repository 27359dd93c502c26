package scheduler

import (
	"bytes"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Filter and prioritize bodies carry the whole pod as JSON, and decoding it with encoding/json was
// a tenth of the extender's CPU in S2 (5000 nodes, one filter per pod): reflection over a PodSpec,
// and a hundred allocations a pod for the collector. The extender's own informer already holds the
// same pod, decoded once from the API server's protobuf watch. A pod is the same object wherever it
// is read when its UID and resourceVersion are the same (the API server gives every write a new
// resourceVersion), so decodeArgs takes the informer's copy when both match and decodes the JSON
// only when they do not (a pod the informer has not caught up with, or has never seen).
//
// Only well-formed bodies of the exact shape kube-scheduler writes take that path: an object with at
// most the keys "Pod", "Nodes" and "NodeNames" once each, a pod that is valid JSON and whose
// "metadata" holds its name, namespace, uid and resourceVersion as plain strings, names that
// parseNames reads (or encoding/json does), nodes that encoding/json does. Anything else (other keys,
// keys that differ only in case, which encoding/json would also match, duplicates, escapes) is
// decoded by encoding/json as before, with its errors.

// decodeArgs decodes an ExtenderArgs body; known returns the informer's pod (nil when it has none).
// fromInformer reports whether the pod is the informer's copy, which must not be modified.
func decodeArgs(body []byte, known func(namespace, name string) *corev1.Pod) (a *extenderArgs, fromInformer bool, err error) {
	a = new(extenderArgs)
	if known != nil {
		if fields, end, ok := objectFields(body, "Pod", "Nodes", "NodeNames"); ok && skipSpaceBytes(body, end) == len(body) {
			if raw, found := fields["Pod"]; found {
				if p := knownPod(raw, known); p != nil {
					a.Pod, fromInformer = p, true
				} else if err := json.Unmarshal(raw, &a.Pod); err != nil {
					return nil, false, err
				}
			}
			if raw, found := fields["Nodes"]; found {
				if err := json.Unmarshal(raw, &a.Nodes); err != nil {
					return nil, false, err
				}
			}
			if raw, found := fields["NodeNames"]; found && !bytes.Equal(raw, []byte("null")) {
				a.NodeNames = new(nameList)
				if err := a.NodeNames.UnmarshalJSON(raw); err != nil {
					return nil, false, err
				}
			}
			return a, fromInformer, nil
		}
	}
	if err := json.Unmarshal(body, a); err != nil {
		return nil, false, err
	}
	return a, false, nil
}

// knownPod returns the informer's pod when raw (a pod's JSON) is valid and names it with the same UID
// and resourceVersion, else nil.
func knownPod(raw []byte, known func(namespace, name string) *corev1.Pod) *corev1.Pod {
	if !json.Valid(raw) {
		return nil
	}
	pod, _, ok := objectFields(raw, "apiVersion", "kind", "metadata", "spec", "status")
	if !ok {
		return nil
	}
	meta, _, ok := objectFields(pod["metadata"], "name", "namespace", "uid", "resourceVersion",
		"generateName", "selfLink", "generation", "creationTimestamp", "deletionTimestamp",
		"deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers", "managedFields")
	if !ok {
		return nil
	}
	str := func(k string) string {
		s, _ := plainString(meta[k])
		return s
	}
	name, ns, uid, rv := str("name"), str("namespace"), str("uid"), str("resourceVersion")
	if name == "" || uid == "" || rv == "" {
		return nil
	}
	p := known(ns, name)
	if p == nil || string(p.UID) != uid || p.ResourceVersion != rv {
		return nil
	}
	return p
}

// objectFields splits the JSON object at the start of b into its values by key, when every key is
// one of allowed, appears once, and is written without escapes; end is past its closing brace; ok
// is false otherwise (and for anything but an object). Keys outside allowed that encoding/json would
// match to one of them (another case) make it false too. It checks the object's own punctuation,
// not its values: each value must be validated by whoever reads it.
func objectFields(b []byte, allowed ...string) (fields map[string][]byte, end int, ok bool) {
	i := skipSpaceBytes(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, 0, false
	}
	fields = make(map[string][]byte, len(allowed))
	i = skipSpaceBytes(b, i+1)
	if i < len(b) && b[i] == '}' {
		return fields, i + 1, true
	}
	for {
		key, end, ok := stringAt(b, i)
		if !ok {
			return nil, 0, false
		}
		known := false
		for _, a := range allowed {
			if key == a {
				known = true
				break
			}
			if strings.EqualFold(key, a) {
				return nil, 0, false
			}
		}
		if !known {
			return nil, 0, false
		}
		if _, dup := fields[key]; dup {
			return nil, 0, false
		}
		i = skipSpaceBytes(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, 0, false
		}
		start := skipSpaceBytes(b, i+1)
		stop, ok := skipValue(b, start)
		if !ok {
			return nil, 0, false
		}
		fields[key] = b[start:stop]
		i = skipSpaceBytes(b, stop)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpaceBytes(b, i+1)
		case '}':
			return fields, i + 1, true
		default:
			return nil, 0, false
		}
	}
}

// stringAt reads the JSON string starting at b[i] when it has no escapes; end is past its closing quote.
func stringAt(b []byte, i int) (s string, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := bytes.IndexByte(b[i+1:], '"')
	if j < 0 {
		return "", 0, false
	}
	raw := b[i+1 : i+1+j]
	if bytes.IndexByte(raw, '\\') >= 0 {
		return "", 0, false
	}
	return string(raw), i + 2 + j, true
}

// plainString is the value of a JSON string without escapes.
func plainString(raw []byte) (string, bool) {
	s, end, ok := stringAt(raw, 0)
	return s, ok && end == len(raw)
}

// skipValue returns the index just past the JSON value starting at b[i]; b must be valid JSON, so
// only strings (for brackets inside them) and nesting need care.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default: // a number, true, false or null
		j := i
		for j < len(b) && !strings.ContainsRune(" \t\r\n,]}", rune(b[j])) {
			j++
		}
		return j, j > i
	}
}

// skipString returns the index past the JSON string starting at b[i] (escapes included).
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

func skipSpaceBytes(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
