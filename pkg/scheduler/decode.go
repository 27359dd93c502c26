package scheduler

import (
	"encoding/json"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// extenderArgs is extenderv1.ExtenderArgs as it comes over the wire (the same JSON: the upstream
// type has no json tags), with a faster decoder for the node names, which are most of the body.
type extenderArgs struct {
	Pod       *corev1.Pod
	Nodes     *corev1.NodeList
	NodeNames *nameList
}

func (a *extenderArgs) upstream() *extenderv1.ExtenderArgs {
	return &extenderv1.ExtenderArgs{Pod: a.Pod, Nodes: a.Nodes, NodeNames: (*[]string)(a.NodeNames)}
}

// nameList is a JSON array of node names. Decoding 5000 names with encoding/json costs a string
// allocation and a literal scan each; names are plain ASCII, so the fast path converts the array
// once and slices it, and anything else (escapes, non-ASCII, odd shapes) goes to encoding/json.
type nameList []string

func (l *nameList) UnmarshalJSON(b []byte) error {
	if names, ok := parseNames(b); ok {
		*l = names
		return nil
	}
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return err
	}
	*l = names
	return nil
}

// parseNames parses a JSON array of strings without escapes and of ASCII only; ok is false for
// anything else, including null.
func parseNames(b []byte) (names []string, ok bool) {
	all := string(b)
	i := skipSpace(all, 0)
	if i >= len(all) || all[i] != '[' {
		return nil, false
	}
	names = make([]string, 0, strings.Count(all, ",")+1)
	i = skipSpace(all, i+1)
	if i < len(all) && all[i] == ']' {
		return names, skipSpace(all, i+1) == len(all)
	}
	for {
		if i >= len(all) || all[i] != '"' {
			return nil, false
		}
		j := i + 1
		for ; j < len(all) && all[j] != '"'; j++ {
			if c := all[j]; c == '\\' || c < 0x20 || c >= 0x80 {
				return nil, false
			}
		}
		if j >= len(all) {
			return nil, false
		}
		names = append(names, all[i+1:j])
		i = skipSpace(all, j+1)
		if i >= len(all) {
			return nil, false
		}
		switch all[i] {
		case ',':
			i = skipSpace(all, i+1)
		case ']':
			return names, skipSpace(all, i+1) == len(all)
		default:
			return nil, false
		}
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// appendJSONer is an answer that encodes itself (faster than reflection for long node lists).
type appendJSONer interface {
	AppendJSON(b []byte) ([]byte, error)
}

// filterResult is extenderv1.ExtenderFilterResult with a direct encoder.
type filterResult extenderv1.ExtenderFilterResult

// priorityList is extenderv1.HostPriorityList with a direct encoder.
type priorityList extenderv1.HostPriorityList

var (
	_ appendJSONer = (*filterResult)(nil)
	_ appendJSONer = (*priorityList)(nil)
)

// AppendJSON encodes the result as encoding/json does (fields in order, maps with sorted keys).
func (r *filterResult) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"Nodes":`...)
	if r.Nodes == nil {
		b = append(b, "null"...)
	} else {
		nodes, err := json.Marshal(r.Nodes)
		if err != nil {
			return nil, err
		}
		b = append(b, nodes...)
	}
	b = append(b, `,"NodeNames":`...)
	if r.NodeNames == nil {
		b = append(b, "null"...)
	} else {
		b = appendStrings(b, *r.NodeNames)
	}
	for _, m := range []struct {
		key string
		m   extenderv1.FailedNodesMap
	}{{`,"FailedNodes":`, r.FailedNodes}, {`,"FailedAndUnresolvableNodes":`, r.FailedAndUnresolvableNodes}} {
		enc, err := json.Marshal(m.m)
		if err != nil {
			return nil, err
		}
		b = append(append(b, m.key...), enc...)
	}
	b = append(b, `,"Error":`...)
	b = appendString(b, r.Error)
	return append(b, '}'), nil
}

// AppendJSON encodes the list as encoding/json does.
func (l *priorityList) AppendJSON(b []byte) ([]byte, error) {
	if *l == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, h := range *l {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Host":`...)
		b = appendString(b, h.Host)
		b = append(b, `,"Score":`...)
		b = strconv.AppendInt(b, h.Score, 10)
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString quotes s: directly when it is printable ASCII that needs no escape (node names),
// else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
