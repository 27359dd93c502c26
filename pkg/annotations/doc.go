// Package annotations is Cardinal's contract (v1): the resource names a container requests, every
// annotation key the three programs read or write, and the typed records behind them.
//
// It is the only place that parses or formats these values. Every parse error names the annotation
// key or resource and the offending value, so a person can fix the pod without reading the code.
//
// Records written by Cardinal (the node inventory, the pod assignment and the allocation record) are
// versioned JSON: a decoder ignores unknown fields and rejects an unknown major version.
package annotations
